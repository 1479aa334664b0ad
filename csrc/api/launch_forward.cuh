// Forward launcher template: the call's plan (dispatch/plan.h) mapped to its instantiation for
// (weight dtype, residual, VPT, sync, w load, exact group) and its grid: a persistent grid of
// at most the resident CTAs (one wave; row groups stride over rows), or, for a streaming program
// (stages 0), a grid of every row's group.
#pragma once

#include <cuda_runtime.h>

#include "../dispatch/plan.h"
#include "../kernels/forward.cuh"
#include "launch.h"
#include "occupancy.h"

namespace cake {

// The plan's constant-width instance (plan.exact: a warp-synchronous exact group, plan.h): one
// row a group, or kStreamRows where the plan kept several (it keeps them only where
// multirow_instance compiles them).
template <typename T, typename WT, bool RES, int VPT, int kTpr>
int launch_exact(const FwdParams& q, const Program& prog, cudaStream_t s) {
  if constexpr (exact_group(kTpr, VPT)) {
    const int64_t groups = prog.cta / kTpr;  // a CTA's groups
    if constexpr (multirow_instance(sizeof(WT) == 4, RES, VPT)) {
      if (prog.group_rows == kStreamRows) {
        const unsigned grid = static_cast<unsigned>(ceil_div(q.rows, groups * kStreamRows));
        rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kFirst, GroupSync::kWarp, kTpr, kStreamRows>
            <<<grid, prog.cta, 0, s>>>(q);
        return static_cast<int>(cudaGetLastError());
      }
    }
    const unsigned grid = static_cast<unsigned>(ceil_div(q.rows, groups));
    rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kFirst, GroupSync::kWarp, kTpr, 1><<<grid, prog.cta, 0, s>>>(q);
    return static_cast<int>(cudaGetLastError());
  } else {
    return static_cast<int>(cudaErrorInvalidConfiguration);  // no plan gives it
  }
}
template <typename T, typename WT, bool RES, int VPT>
int launch_exact_tpr(const FwdParams& q, const Program& prog, cudaStream_t s) {
  switch (prog.tpr) {
    case 4: return launch_exact<T, WT, RES, VPT, 4>(q, prog, s);
    case 8: return launch_exact<T, WT, RES, VPT, 8>(q, prog, s);
    case 16: return launch_exact<T, WT, RES, VPT, 16>(q, prog, s);
    case 32: return launch_exact<T, WT, RES, VPT, 32>(q, prog, s);
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
}

// A streaming instance, compiled only where a plan can choose it (plan.h, forward_stream_instance).
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kSync>
int launch_stream(const FwdParams& q, unsigned grid, int cta, cudaStream_t s) {
  if constexpr (forward_stream_instance(kW, kSync, sizeof(WT) == 4, RES, VPT)) {
    rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, kW, kSync><<<grid, cta, 0, s>>>(q);
    return static_cast<int>(cudaGetLastError());
  } else {
    return static_cast<int>(cudaErrorInvalidConfiguration);  // no plan gives it
  }
}

// The plan's instance (dispatch/plan.h): the ring kernel on a persistent grid of at most the
// resident CTAs, or the streaming kernel with the plan's w load, its constant-width instance
// where the plan says exact.
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
int launch_forward_sync(const FwdParams& p, const FwdPlan& plan, cudaStream_t s) {
  const Program& prog = plan.program;
  const int64_t rpc = prog.cta / prog.tpr;
  FwdParams q = p;
  q.tpr = prog.tpr;
  q.stages = prog.stages;
  if (prog.stages == 0) {  // streaming: a group a row (or prog.group_rows), every row's group in the grid
    const int64_t blocks = ceil_div(p.rows, rpc);
    if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
    const unsigned grid = static_cast<unsigned>(blocks);
    if (plan.wload == WLoad::kAtUse) return launch_stream<T, WT, RES, VPT, WLoad::kAtUse, kSync>(q, grid, prog.cta, s);
    if (plan.wload == WLoad::kBeforeSum)
      return launch_stream<T, WT, RES, VPT, WLoad::kBeforeSum, kSync>(q, grid, prog.cta, s);
    if constexpr (kSync == GroupSync::kWarp)
      if (plan.exact) return launch_exact_tpr<T, WT, RES, VPT>(q, prog, s);
    return launch_stream<T, WT, RES, VPT, WLoad::kFirst, kSync>(q, grid, prog.cta, s);
  }
  auto kernel = rmsnorm_fwd_kernel<T, WT, RES, VPT, kSync>;
  const size_t smem = forward_smem_bytes(prog.cta, VPT, prog.stages, RES);
  const int64_t blocks = persistent_grid(reinterpret_cast<const void*>(kernel), prog.cta, smem, prog.ctas_per_sm,
                                         ceil_div(p.rows, rpc));
  kernel<<<static_cast<unsigned>(blocks), prog.cta, smem, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

// The instance without barrier or scratch where the plan says kWarp (VPT <= 4 only); other
// programs keep the named-barrier instance, SASS for SASS. The same bits either way.
template <typename T, typename WT, bool RES, int VPT>
int launch_forward_kernel(const FwdParams& p, const FwdPlan& plan, cudaStream_t s) {
  if constexpr (VPT <= 4) {
    if (plan.sync == GroupSync::kWarp) return launch_forward_sync<T, WT, RES, VPT, GroupSync::kWarp>(p, plan, s);
  }
  return launch_forward_sync<T, WT, RES, VPT, GroupSync::kNamed>(p, plan, s);
}

// The instances live in generated sources (csrc/api/gen/, scripts/gen_instances.py), one
// translation unit a (dtype, VPT), so the builds run them in parallel; a unit that includes this
// header without CAKE_INSTANCE_UNIT only declares them.
#define CAKE_FWD_INSTANCES(KW, T, VPT)                                                                 \
  KW template int launch_forward_kernel<T, T, false, VPT>(const FwdParams&, const FwdPlan&, cudaStream_t);     \
  KW template int launch_forward_kernel<T, T, true, VPT>(const FwdParams&, const FwdPlan&, cudaStream_t);      \
  KW template int launch_forward_kernel<T, float, false, VPT>(const FwdParams&, const FwdPlan&, cudaStream_t); \
  KW template int launch_forward_kernel<T, float, true, VPT>(const FwdParams&, const FwdPlan&, cudaStream_t);
#define CAKE_FWD_INSTANCES_ALL_VPT(KW, T) \
  CAKE_FWD_INSTANCES(KW, T, 1)            \
  CAKE_FWD_INSTANCES(KW, T, 2)            \
  CAKE_FWD_INSTANCES(KW, T, 3)            \
  CAKE_FWD_INSTANCES(KW, T, 4)            \
  CAKE_FWD_INSTANCES(KW, T, 6)            \
  CAKE_FWD_INSTANCES(KW, T, 8)
#ifndef CAKE_INSTANCE_UNIT
CAKE_FWD_INSTANCES_ALL_VPT(extern, __nv_bfloat16)
CAKE_FWD_INSTANCES_ALL_VPT(extern, __half)
#endif

template <typename T, typename WT, bool RES>
int launch_forward_vpt(const FwdParams& p, const FwdPlan& plan, cudaStream_t s) {
  switch (plan.program.vpt) {
    case 1: return launch_forward_kernel<T, WT, RES, 1>(p, plan, s);
    case 2: return launch_forward_kernel<T, WT, RES, 2>(p, plan, s);
    case 3: return launch_forward_kernel<T, WT, RES, 3>(p, plan, s);
    case 4: return launch_forward_kernel<T, WT, RES, 4>(p, plan, s);
    case 6: return launch_forward_kernel<T, WT, RES, 6>(p, plan, s);
    case 8: return launch_forward_kernel<T, WT, RES, 8>(p, plan, s);
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
}

// One plan a call (dispatch/plan.h) from the call's program, then its instance.
template <typename T>
int launch_forward(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.r != nullptr;
  const FwdPlan plan = plan_forward(prog, p.hidden, p.rows, w_fp32, res, arch_table(sm));
  if (w_fp32) {
    return res ? launch_forward_vpt<T, float, true>(p, plan, s) : launch_forward_vpt<T, float, false>(p, plan, s);
  }
  return res ? launch_forward_vpt<T, T, true>(p, plan, s) : launch_forward_vpt<T, T, false>(p, plan, s);
}

}  // namespace cake
