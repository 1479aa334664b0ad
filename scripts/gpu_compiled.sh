#!/usr/bin/env bash
# The compiled call path on a GPU machine: build for the local GPU, the GPU tests of the direct
# binding and the compiled call, the host cost of one call inside a compiled graph
# (lab/compiled_call.py), a compiled Llama step's host time (lab/compile_host.py)
# and end-to-end rows (benchmarks/e2e.py, E2E_ARGS). Logs go to $LOG_DIR.
set -uo pipefail
LOG_DIR=${LOG_DIR:-/tmp/cake-gpu-compiled}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
t0=$SECONDS
python -m pip install --no-build-isolation --no-deps -e . >"$LOG_DIR/build.log" 2>&1 || { tail -40 "$LOG_DIR/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s; binding: $(python -c 'from cake_rmsnorm import _lib; print(_lib.binding)')"
timeout "${TEST_TIMEOUT:-300}" python -m pytest -q -p no:cacheprovider -p no:logging tests/test_compiled_call.py ${TESTS:-tests/test_direct.py} \
  >"$LOG_DIR/tests.log" 2>&1; echo "tests rc=$?: $(tail -1 "$LOG_DIR/tests.log")"
grep -E "^(FAILED|ERROR)" "$LOG_DIR/tests.log" | head -20
timeout "${CALL_TIMEOUT:-300}" python lab/compiled_call.py 2>&1 | grep -v Warn | tee "$LOG_DIR/compiled_call.md"
[ "${COMPILE_HOST:-1}" = 1 ] && timeout 200 python lab/compile_host.py llama 1024 2>&1 | tee "$LOG_DIR/compile_host.log" | head -12
[ -n "${E2E_ARGS:-}" ] && timeout "${E2E_TIMEOUT:-200}" python benchmarks/e2e.py $E2E_ARGS --out "$LOG_DIR/e2e" 2>&1 | tail -14
echo "total: $((SECONDS - t0)) s"
