#!/usr/bin/env bash
# Build for the local GPU only, run the whole test suite (GPU tests included), the sanitizers
# over tests/sanitize_workload.py, the C/LibTorch consumers (GPU path included), and optionally
# the training example and a benchmark. Logs go to $LOG_DIR.
#   LOG_DIR=/tmp/logs EXAMPLE_ARGS="--steps 300" BENCH_ARGS="--quick" scripts/gpu_check.sh
set -uo pipefail
LOG_DIR=${LOG_DIR:-/tmp/cake-gpu-check}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
status=0
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$LOG_DIR/$name.log" 2>&1; local rc=$?;
  echo "$name: rc=$rc in $((SECONDS - t0)) s"; tail -3 "$LOG_DIR/$name.log"; [ $rc -eq 0 ] || status=1; return $rc; }
step build python -m pip install --no-build-isolation --no-deps -e . || exit 1
python -m cake_rmsnorm info
step tests python -m pytest -q -p no:cacheprovider tests
# The property-based suite once more, through the GPU kernels.
step fuzz-cuda env CAKE_FUZZ_DEVICE=cuda CAKE_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-400} python -m pytest -q -p no:cacheprovider tests/test_fuzz.py
if [ "${SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    step "sanitize-$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 python tests/sanitize_workload.py
  done
fi
if [ "${CONSUMER:-1}" = 1 ]; then
  step consumers env CUDA=1 tests/cpp/build_and_run.sh
  cat "$LOG_DIR/consumers.log"
fi
if [ -n "${EXAMPLE_ARGS+x}" ]; then
  step example timeout "${EXAMPLE_TIMEOUT:-300}" python examples/train_tiny_llama.py $EXAMPLE_ARGS --json "$LOG_DIR/example.json"
  cat "$LOG_DIR/example.log"
fi
if [ -n "${BENCH_ARGS:-}" ]; then
  step bench python -m cake_rmsnorm bench $BENCH_ARGS --out "$LOG_DIR/bench"
  cat "$LOG_DIR/bench.md"
fi
exit $status
