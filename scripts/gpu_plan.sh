#!/usr/bin/env bash
# The plan's numbers on the local GPU, in steps that each fit a device call (600 s): build for
# the local GPU, the bit and plan tests a plan change could break, the held-out shapes and the
# BENCH matrix against every installed peer (scripts/gpu_peers.sh installs Liger and Quack), and
# the fine T sweep against F.rms_norm. Logs and bench JSON go to $LOG_DIR (default $OUT where the
# device tool sets it); `benchmarks/heldout.py summary|cliffs` reads them.
#   STEPS="build tests" scripts/gpu_plan.sh
#   STEPS="build chunk_bits chunks_ab sweep" scripts/gpu_plan.sh
#   STEPS="heldout" scripts/gpu_plan.sh         (or heldout_a, heldout_b: one half a call)
#   STEPS="peer_check" scripts/gpu_plan.sh      (after scripts/gpu_peers.sh install)
#   STEPS="build res_sweep" scripts/gpu_plan.sh
#   STEPS="build amp_tests amp_e2e" scripts/gpu_plan.sh
#   STEPS="build cpu16" scripts/gpu_plan.sh
#   STEPS="build me_tests me_kernels me_e2e" scripts/gpu_plan.sh
#   STEPS="peer_bytes" scripts/gpu_plan.sh      (after scripts/gpu_peers.sh install)
set -uo pipefail
LOG_DIR=${LOG_DIR:-${OUT:-/tmp/cake-gpu-plan}}
mkdir -p "$LOG_DIR"
export CAKE_CUDA_ARCHS=${CAKE_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
STEPS=${STEPS:-"build tests"}
status=0
# The runs against every peer stop at once where Quack or Liger is not importable (a PYTHONPATH
# lost to a subshell, say), unless PEERS=optional: a run without them is a different run.
PEER_STEPS=" heldout heldout_wide peer_check heldout_a heldout_b matrix matrix_views peer_bytes "
step() { local name=$1; shift; [[ " $STEPS " == *" $name "* ]] || return 0; local t0=$SECONDS
  if [[ "$PEER_STEPS" == *" $name "* && "${PEERS:-}" != optional ]] && \
     ! python -c "import quack.rmsnorm, liger_kernel" >/dev/null 2>&1; then
    echo "$name: Quack or Liger not importable (source scripts/gpu_peers.sh install, or PEERS=optional)"
    status=1; return 0; fi
  timeout "${STEP_TIMEOUT:-500}" "$@" >"$LOG_DIR/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s"; tail -4 "$LOG_DIR/$name.log"; [ $rc -eq 0 ] || status=1; }
step build python -m pip install --no-build-isolation --no-deps -e .
step tests python -m pytest -q -x -p no:cacheprovider tests/test_plan.py tests/test_fill.py tests/test_golden_plans.py \
  tests/test_cpu_gpu_bits.py tests/test_wide_backward.py tests/test_tuning.py
step heldout python -m cake_rmsnorm bench --shapes docs/perf/heldout/shapes.json --out "$LOG_DIR/heldout"
# The held-out set in two halves (every other shape), each within one device call; then
# `benchmarks/heldout.py summary` on the rows of both. peer_check: the residual shapes' backward
# only, every arm held to FP64 first (bench.check), to see which peer moves every stream.
half() { python3 -c "import json,sys; d=json.load(open('docs/perf/heldout/shapes.json')); \
  json.dump([s for i, s in enumerate(d) if $1], open(sys.argv[1], 'w'))" "$2"; }
half "s.get('residual')" /tmp/heldout-res.json; half "i % 2 == 0" /tmp/heldout-a.json; half "i % 2 == 1" /tmp/heldout-b.json
half "s['H'] > 10240" /tmp/heldout-wide.json
# The held-out shapes a wide-row change touches (H 12288; H 16384 as the control), every peer.
step heldout_wide python -m cake_rmsnorm bench --shapes /tmp/heldout-wide.json --out "$LOG_DIR/heldout-wide"
step peer_check python -m cake_rmsnorm bench --shapes /tmp/heldout-res.json --ops bwd --replays 10 --out "$LOG_DIR/peer-check"
step heldout_a python -m cake_rmsnorm bench --shapes /tmp/heldout-a.json --out "$LOG_DIR/heldout-a"
step heldout_b python -m cake_rmsnorm bench --shapes /tmp/heldout-b.json --out "$LOG_DIR/heldout-b"
step matrix python -m cake_rmsnorm bench --out "$LOG_DIR/matrix"
step matrix_views python -m cake_rmsnorm bench --hidden 6144 --residual --per-head --out "$LOG_DIR/matrix-views"
# dw's chunk count (contract.h backward_chunks: half the cap, then the cap in one step): its GPU =
# CPU bits where it holds and doubles, and its time against the count that grew by one chunk per
# 32 rows (paired, lab/chunks_ab.py), then the fine sweep below for its cliffs.
step chunk_bits python -m pytest -q -x -p no:cacheprovider tests/test_cpu_gpu_bits.py -k chunk_doubling
step chunks_ab python lab/chunks_ab.py --residual 0,1 --out "$LOG_DIR/chunks-ab.json"
step sweep python -m cake_rmsnorm bench --shapes docs/perf/heldout/sweep.json --peers F --ops bwd --replays 12 \
  --out "$LOG_DIR/sweep"
# AMP's mixed add: its GPU tests, then the AMP rows of the end-to-end step (eager and compiled).
step amp_tests python -m pytest -q -x -p no:cacheprovider tests/test_mixed_residual.py tests/test_compile.py
step amp_e2e python benchmarks/e2e.py --amp 1 --hidden 1024,4096 --modes eager,compile,reduce-overhead \
  --out "$LOG_DIR/e2e-amp"
# Where the AMP compiled rows' time goes (h100-e2e-amp-3d73404.md: Qwen3 H 1024 1.050, Llama 1.014):
# each kernel's GPU time a step, patched against unpatched.
step amp_profile bash -c "python lab/e2e_profile.py --model qwen3 --hidden 1024 --out $LOG_DIR/amp-profile-qwen3 && \
  python lab/e2e_profile.py --model llama --hidden 1024 --out $LOG_DIR/amp-profile-llama"
# The CPU path on the host's cores (16 on the lent machine): the bench's default shapes and the
# larger op-path rows at 16 threads, and the thread-count bit test there (no GPU visible).
step cpu16 env CUDA_VISIBLE_DEVICES= bash -c "python -m pytest -q -p no:cacheprovider tests/test_cpu_threads.py && \
  python -m cake_rmsnorm bench --threads 16 --out $LOG_DIR/cpu-default-t16 && \
  python -m cake_rmsnorm bench --ops fwd,bwd --path op --hidden 2048,4096 --tokens 64,256,2048 --threads 16 \
  --out $LOG_DIR/cpu-rows-t16"
# The memory-efficient mode on CUDA: its GPU tests (the CPU's bits, FP64, the NaN net), the
# backward from y against from x (kernel time, BENCH widths and the held-out shapes), and the
# patched Llama/Qwen3 steps' peak memory and time (BF16 and AMP, eager and compiled).
step me_tests python -m pytest -q -x -p no:cacheprovider tests/test_memory_efficient_gpu.py tests/test_memory_efficient.py
step me_kernels bash -c "python benchmarks/memory_efficient_kernels.py --out $LOG_DIR/me-kernels && \
  python benchmarks/memory_efficient_kernels.py --shapes docs/perf/heldout/shapes.json --ops bwd \
  --out $LOG_DIR/me-kernels-heldout"
step me_e2e python benchmarks/memory_efficient.py --out "$LOG_DIR/me-e2e"
# DRAM bytes and time of our backward and Quack's under ncu, where Quack's time implied more than
# the HBM peak (docs/perf/runs/h200-heldout-d3aeefd.md's residual rows); peers staged first.
NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
step peer_bytes bash -c "for s in '4096 55552' '8192 200' '8192 921'; do set -- \$s; \
  ncu --clock-control none --nvtx --nvtx-include 'qk/' --nvtx-include 'cake/' --metrics $NCU_METRICS \
  python lab/peer_bytes.py --hidden \$1 --tokens \$2 --residual --weight fp32 || exit 1; done"
# The residual backward's programs at the widths where it trails Quack (h100-heldout-b9eedce: H 8192
# and 12288 at T 200..1385): every CTA, ring depth and CTAs an SM against the table's, paired.
step res_sweep python lab/sweep_programs.py --direction bwd --residual --hidden 8192,12288,16384 \
  --tokens 200,921,1385,8343 --ctas-per-sm 0,1,2 --stages 1,2,3 --rows 1,2 --replays 12 --out "$LOG_DIR/res-sweep"
# A/B variants are built through the tuning hooks (cake_rmsnorm.tuning) or a compile definition
# (CAKE_DEFINES, setup.py), never by editing sources: scripts/gpu_ab.sh pairs two builds.
exit $status
