#!/usr/bin/env bash
# Kernel time of two builds on one GPU machine: the working tree and a base tree (BASE_DIR, a
# source snapshot: git archive <commit> | tar x -C <dir>), each built for the local GPU, then
# `bench` run for each in turn (BENCH_ARGS_1 .. _6; the same peers in every run give each its
# own yardstick). VAR_DIR and VAR2_DIR, more snapshots, add arms "var" and "var2", run between
# the two. Logs and results go to $LOG_DIR as <arm>-*.json/md (base, var, var2, new).
# BENCH_STAT=mean times each row by the trimmed mean of its replays (lab/bench_mean.py),
# fine enough for the 1 % question at a few us, where a median moves by the timer's 0.125 us step.
set -uo pipefail
LOG_DIR=${LOG_DIR:-/tmp/cake-gpu-ab}
declare -A DIR=([base]=$(cd "${BASE_DIR:?a base source tree}" && pwd) [new]="")  # absolute: the benches run from /tmp
ARMS="base"
for pair in "var:${VAR_DIR:-}" "var2:${VAR2_DIR:-}"; do
  arm=${pair%%:*} v=${pair#*:}
  [ -n "$v" ] && DIR[$arm]=$(cd "$v" && pwd) && ARMS="$ARMS $arm"
done
ARMS="$ARMS new"
mkdir -p "$LOG_DIR"
BENCH=(-m cake_rmsnorm bench)
[ "${BENCH_STAT:-median}" = mean ] && BENCH=("$(pwd)/lab/bench_mean.py")
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
t0=$SECONDS
python -m pip install --no-build-isolation --no-deps -e . >"$LOG_DIR/build.log" 2>&1 || { tail -30 "$LOG_DIR/build.log"; exit 1; }
for arm in $ARMS; do
  [ $arm = new ] && continue
  (cd "${DIR[$arm]}" && python setup.py build_ext --inplace >"$LOG_DIR/build-$arm.log" 2>&1) || { tail -30 "$LOG_DIR/build-$arm.log"; exit 1; }
done
echo "builds: $((SECONDS - t0)) s"
for i in 1 2 3 4 5 6; do
  var=BENCH_ARGS_$i
  args=${!var:-}
  [ -z "$args" ] && continue
  for arm in $ARMS; do
    pp=${DIR[$arm]:+${DIR[$arm]}/python}  # empty for new: the installed working tree
    (cd /tmp && PYTHONPATH=$pp timeout "${BENCH_TIMEOUT:-200}" python -c "import cake_rmsnorm, sys; print(cake_rmsnorm.__file__, file=sys.stderr)" &&
      PYTHONPATH=$pp timeout "${BENCH_TIMEOUT:-200}" python "${BENCH[@]}" $args --out "$LOG_DIR/$arm-$i") \
      >"$LOG_DIR/$arm-$i.log" 2>&1
    echo "$arm-$i ($args): rc=$? ($((SECONDS - t0)) s) $(head -1 "$LOG_DIR/$arm-$i.log")"
  done
done
echo "total: $((SECONDS - t0)) s"
