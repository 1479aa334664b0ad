#!/usr/bin/env bash
# The derived backward plan on the local GPU, in one command that fits one device call (600 s):
# build for the local GPU, the bit and plan tests that a plan change could break, then
# benchmarks/plan_ab.py (derived plan against the table's, paired, op path) over the rows whose
# plan moved: the BENCH matrix, the held-out set and a slice of the fine sweep. Logs and JSON go
# to $LOG_DIR (default $OUT where the device tool sets it).
#   scripts/gpu_plan.sh                        # everything
#   STEPS="build ab_heldout" scripts/gpu_plan.sh
set -uo pipefail
LOG_DIR=${LOG_DIR:-${OUT:-/tmp/cake-gpu-plan}}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
STEPS=${STEPS:-"build tests ab_matrix ab_heldout ab_sweep"}
status=0
step() { local name=$1; shift; [[ " $STEPS " == *" $name "* ]] || return 0; local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-200}" "$@" >"$LOG_DIR/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s"; tail -4 "$LOG_DIR/$name.log"; [ $rc -eq 0 ] || status=1; }
step build python -m pip install --no-build-isolation --no-deps -e .
step tests python -m pytest -q -x -p no:cacheprovider tests/test_plan.py tests/test_fill.py tests/test_determinism.py \
  tests/test_wide_backward.py tests/test_tuning.py
step ab_matrix python benchmarks/plan_ab.py --hidden 512,1536,2048,4096,5120,6144 --tokens 256,1024,4096,16384,65536 \
  --only-moved --ops bwd,step --out "$LOG_DIR/ab-matrix"
step ab_heldout python benchmarks/plan_ab.py --shapes docs/perf/heldout/shapes.json --only-moved --ops bwd,step \
  --out "$LOG_DIR/ab-heldout"
step ab_sweep python benchmarks/plan_ab.py --hidden 896,2048,3584,4096 --tokens 8000:24000:514 --only-moved \
  --replays 20 --out "$LOG_DIR/ab-sweep"
exit $status
