#!/usr/bin/env bash
# The bits contract on a GPU machine: build for the local GPU, the GPU-marked tests (TESTS,
# default the whole suite), racecheck over the sanitizer workload, and the bits fingerprint (BITS_COMPARE: an earlier
# fingerprint to diff against). Logs go to $LOG_DIR.
set -uo pipefail
LOG_DIR=${LOG_DIR:-/tmp/cake-gpu-bits}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
t0=$SECONDS
python -m pip install --no-build-isolation --no-deps -e . >"$LOG_DIR/build.log" 2>&1 || { tail -40 "$LOG_DIR/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
timeout "${TEST_TIMEOUT:-300}" python -m pytest -q -p no:cacheprovider -m gpu ${TESTS:-tests} >"$LOG_DIR/tests.log" 2>&1
echo "tests rc=$?: $(tail -1 "$LOG_DIR/tests.log") ($((SECONDS - t0)) s)"
grep -E "^(FAILED|ERROR)" "$LOG_DIR/tests.log" | head -30
for tool in ${SANITIZERS:-racecheck}; do
  timeout "${SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 python tests/sanitize_workload.py \
    >"$LOG_DIR/sanitize-$tool.log" 2>&1
  echo "sanitize-$tool rc=$?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG_DIR/sanitize-$tool.log" | tail -1)"
done
if [ "${BITS:-1}" = 1 ]; then
  timeout "${BITS_TIMEOUT:-150}" python lab/bits_fingerprint.py --out "$LOG_DIR/bits.json" \
    ${BITS_COMPARE:+--compare "$BITS_COMPARE"} 2>"$LOG_DIR/bits.err" | tail -5
fi
echo "total: $((SECONDS - t0)) s"
