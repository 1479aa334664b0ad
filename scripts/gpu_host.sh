#!/usr/bin/env bash
# The host path on a GPU machine: build for the local GPU, the GPU tests of the call path, the
# host cost of every arm (bench --host), the budget of one call (benchmarks/host_budget.py) and
# the host time of a compiled Llama step (lab/compile_host.py). Logs go to $LOG_DIR.
set -uo pipefail
LOG_DIR=${LOG_DIR:-/tmp/cake-gpu-host}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
t0=$SECONDS
python -m pip install --no-build-isolation --no-deps -e . >"$LOG_DIR/build.log" 2>&1 || { tail -40 "$LOG_DIR/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"; python -m cake_rmsnorm info 2>/dev/null | head -5
python -m pytest -q -p no:cacheprovider -m gpu tests/test_direct.py tests/test_api.py tests/test_autograd.py \
  tests/test_nn.py tests/test_compile.py >"$LOG_DIR/tests.log" 2>&1; echo "tests rc=$?: $(tail -1 "$LOG_DIR/tests.log")"
grep -E "^(FAILED|ERROR)" "$LOG_DIR/tests.log" | head -20
python -m cake_rmsnorm bench --host --out "$LOG_DIR/host" >/dev/null 2>&1; cat "$LOG_DIR/host.md"
python benchmarks/host_budget.py --out "$LOG_DIR/budget" 2>&1 | tail -40
[ "${COMPILE_HOST:-1}" = 1 ] && timeout 400 python lab/compile_host.py llama 1024 2>&1 | tee "$LOG_DIR/compile_host.log" | head -30
echo "total: $((SECONDS - t0)) s"
