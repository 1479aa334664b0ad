// Backward launcher template: the dx + dw-partials kernel on a grid of at most the resident
// CTAs, then the chunk-order finalize, launched as a programmatic dependent (it is resident
// and waiting when the main kernel's last CTA ends, instead of paying a launch gap).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../dispatch/plan.h"
#include "../kernels/backward.cuh"
#include "../kernels/backward_small.cuh"
#include "../kernels/backward_warp_chunks.cuh"
#include "launch.h"
#include "occupancy.h"

namespace cake {

template <int COLS, int LANES, typename OutT>
int launch_finalize_cols(const BwdParams& p, cudaStream_t s) {
  auto kernel = dw_finalize_kernel<COLS, LANES, OutT>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ceil_div(p.hidden, COLS)));
  cfg.blockDim = dim3(COLS * LANES);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const float* partials = p.partials;
  OutT* dw = static_cast<OutT*>(p.dw);
  if (cudaLaunchKernelEx(&cfg, kernel, partials, p.chunks, p.hidden, dw, p.accumulate) == cudaSuccess)
    return 0;
  cudaGetLastError();  // no programmatic launch here (driver or capture): a plain one
  kernel<<<cfg.gridDim, cfg.blockDim, 0, s>>>(partials, p.chunks, p.hidden, dw, p.accumulate);
  return static_cast<int>(cudaGetLastError());
}

// The finalize instance of a plan's shape (dispatch/plan.h, finalize_shape).
template <typename OutT>
int launch_finalize_as(const BwdParams& p, const FinalizeShape& shape, cudaStream_t s) {
  if (shape.lanes == kFinalizeLanesWide) return launch_finalize_cols<8, kFinalizeLanesWide, OutT>(p, s);
  return shape.cols == 8 ? launch_finalize_cols<8, kFinalizeLanes, OutT>(p, s)
                         : launch_finalize_cols<32, kFinalizeLanes, OutT>(p, s);
}

// dw in FP32, or in a 16-bit weight's own type (dw_w_dtype): the finalize rounds it once.
template <typename WT>
int launch_finalize(const BwdParams& p, const FinalizeShape& shape, cudaStream_t s) {
  if constexpr (!std::is_same<WT, float>::value)
    if (p.dw_w_dtype) return launch_finalize_as<WT>(p, shape, s);
  return launch_finalize_as<float>(p, shape, s);
}

using BwdKernel = void (*)(BwdParams);

// The instance for a program: the exact group's where the plan says so (dispatch/plan.h,
// backward_exact; the same bits, no masks or rest loops), else the runtime-width kernel. Pairs
// need groups of a warp or more, so only 32-thread exact groups pair.
template <typename T, typename WT, bool RES, int VPT, bool PAIR>
BwdKernel backward_kernel(const Program& prog, bool exact) {
  if constexpr (VPT == 4 && !PAIR)
    if (prog.cta > kMaxBwdThreads) return rmsnorm_bwd_wide_kernel<T, WT, RES>;  // the wide rows' CTAs
  if constexpr (exact_group(32, VPT, true))
    if (exact && prog.tpr == 32) return rmsnorm_bwd_kernel<T, WT, RES, VPT, PAIR, 32>;
  if constexpr (!PAIR && exact_group(16, VPT, true))
    if (exact && prog.tpr == 16) return rmsnorm_bwd_kernel<T, WT, RES, VPT, false, 16>;
  return rmsnorm_bwd_kernel<T, WT, RES, VPT, PAIR>;
}

// The one launch's instance (dispatch/plan.h, one_launch_fits): the exact group's where the
// plan says so, as backward_kernel's unpaired choice.
template <typename T, typename WT, bool RES, int VPT>
BwdKernel one_launch_kernel(const Program& prog, bool exact) {
  if constexpr (VPT == 4)
    if (prog.cta > kMaxBwdThreads) return rmsnorm_bwd_one_wide_kernel<T, WT, RES>;
  if constexpr (exact_group(32, VPT, true))
    if (exact && prog.tpr == 32) return rmsnorm_bwd_one_kernel<T, WT, RES, VPT, 32>;
  if constexpr (exact_group(16, VPT, true))
    if (exact && prog.tpr == 16) return rmsnorm_bwd_one_kernel<T, WT, RES, VPT, 16>;
  return rmsnorm_bwd_one_kernel<T, WT, RES, VPT>;
}

template <typename T, typename WT, bool RES, int VPT>
int launch_one(const BwdParams& p, const BwdPlan& plan, cudaStream_t s) {
  const Program& prog = plan.program;
  const BwdKernel kernel = one_launch_kernel<T, WT, RES, VPT>(prog, plan.exact);
  const size_t smem = backward_smem_bytes(prog.cta, VPT, prog.stages, RES);
  resident_ctas(reinterpret_cast<const void*>(kernel), prog.cta, smem);  // raises the kernel's shared-memory limit once
  BwdParams q = p;
  q.tpr = prog.tpr;
  q.stages = prog.stages;
  q.dx_ctas = static_cast<int>(plan.dx_ctas);
  kernel<<<static_cast<unsigned>(plan.dx_ctas + plan.dw_ctas), prog.cta, smem, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

// The warp-chunk instance of a (tpr, VPT) (dispatch/plan.h, warp_chunks_fit), or null.
template <typename T, typename WT, bool RES, int VPT>
BwdKernel warp_chunks_kernel(int tpr) {
  if constexpr (VPT == 2 || VPT == 3) {
    if (tpr == 4) return rmsnorm_bwd_warp_chunks_kernel<T, WT, RES, 4, VPT>;
    if (tpr == 8) return rmsnorm_bwd_warp_chunks_kernel<T, WT, RES, 8, VPT>;
  }
  return nullptr;
}

template <typename T, typename WT, bool RES, int VPT>
int launch_warp_chunks(const BwdParams& p, const BwdPlan& plan, int max_ctas, cudaStream_t s) {
  const Program& prog = plan.program;
  const BwdKernel kernel = warp_chunks_kernel<T, WT, RES, VPT>(prog.tpr);
  if (kernel == nullptr) return static_cast<int>(cudaErrorInvalidConfiguration);
  const size_t smem = size_t(prog.cta / 32) * 32 * VPT * 8 * sizeof(float);  // a batch's products a warp
  const int64_t wanted = ceil_div(p.chunks, prog.cta / 32);
  const int64_t grid = persistent_grid(reinterpret_cast<const void*>(kernel), prog.cta, smem, 0, wanted, max_ctas);
  BwdParams q = p;
  q.tpr = prog.tpr;
  kernel<<<static_cast<unsigned>(grid), prog.cta, smem, s>>>(q);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  return launch_finalize<WT>(q, plan.finalize, s);
}

// The rows kernel (or its pair twin) on a persistent grid, then the finalize.
template <typename T, typename WT, bool RES, int VPT>
int launch_rows(const BwdParams& p, const BwdPlan& plan, int max_ctas, cudaStream_t s) {
  const Program& prog = plan.program;
  const size_t smem = backward_smem_bytes(prog.cta, VPT, prog.stages, RES);
  const int units = prog.cta / prog.tpr / (plan.pair ? 2 : 1);  // chunks a CTA takes at a time
  const int64_t wanted = ceil_div(p.chunks, units);
  BwdParams q = p;
  q.tpr = prog.tpr;
  q.stages = prog.stages;
  const BwdKernel kernel = plan.pair ? backward_kernel<T, WT, RES, VPT, true>(prog, plan.exact)
                                     : backward_kernel<T, WT, RES, VPT, false>(prog, plan.exact);
  const int64_t grid =
      persistent_grid(reinterpret_cast<const void*>(kernel), prog.cta, smem, prog.ctas_per_sm, wanted, max_ctas);
  kernel<<<static_cast<unsigned>(grid), prog.cta, smem, s>>>(q);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  return launch_finalize<WT>(q, plan.finalize, s);
}

// One plan a call (dispatch/plan.h, plan_backward), then its launch. The device facts it asks
// for: the SM count (the finalize's shape) and, for a pair twin, its kernel's resident CTAs.
template <typename T, typename WT, bool RES, int VPT>
int launch_backward_kernel(const BwdParams& p, const Program& table_prog, int max_ctas, const BwdLimits& lim,
                           cudaStream_t s) {
  const BwdCall call{p.hidden, p.rows, p.chunks, p.chunk_rows, p.chunk_rem, p.dw != nullptr, max_ctas};
  const BwdPlan plan = plan_backward(table_prog, call, lim, call.want_dw ? resident_sms() : 0, [&](const Program& twin) {
    const BwdKernel k = backward_kernel<T, WT, RES, VPT, true>(twin, backward_exact(twin, p.hidden, true));
    return resident_ctas(reinterpret_cast<const void*>(k), twin.cta, backward_smem_bytes(twin.cta, VPT, twin.stages, RES));
  });
  if (plan.one_launch) return launch_one<T, WT, RES, VPT>(p, plan, s);
  if (plan.warp_chunks) return launch_warp_chunks<T, WT, RES, VPT>(p, plan, max_ctas, s);
  return launch_rows<T, WT, RES, VPT>(p, plan, max_ctas, s);
}

// The instances live in generated sources (csrc/api/gen/, scripts/gen_instances.py), one
// translation unit a (dtype, VPT); a unit that includes this header without CAKE_INSTANCE_UNIT
// only declares them.
#define CAKE_BWD_INSTANCES(KW, T, VPT)                                                                      \
  KW template int launch_backward_kernel<T, T, false, VPT>(const BwdParams&, const Program&, int, const BwdLimits&, cudaStream_t); \
  KW template int launch_backward_kernel<T, T, true, VPT>(const BwdParams&, const Program&, int, const BwdLimits&, cudaStream_t);  \
  KW template int launch_backward_kernel<T, float, false, VPT>(const BwdParams&, const Program&, int,            \
                                                               const BwdLimits&, cudaStream_t);                 \
  KW template int launch_backward_kernel<T, float, true, VPT>(const BwdParams&, const Program&, int, const BwdLimits&, cudaStream_t);
#define CAKE_BWD_INSTANCES_ALL_VPT(KW, T) \
  CAKE_BWD_INSTANCES(KW, T, 1)            \
  CAKE_BWD_INSTANCES(KW, T, 2)            \
  CAKE_BWD_INSTANCES(KW, T, 3)            \
  CAKE_BWD_INSTANCES(KW, T, 4)
#ifndef CAKE_INSTANCE_UNIT
CAKE_BWD_INSTANCES_ALL_VPT(extern, __nv_bfloat16)
CAKE_BWD_INSTANCES_ALL_VPT(extern, __half)
#endif

template <typename T, typename WT, bool RES>
int launch_backward_vpt(const BwdParams& p, const Program& prog, int max_ctas, const BwdLimits& lim, cudaStream_t s) {
  switch (prog.vpt) {
    case 1: return launch_backward_kernel<T, WT, RES, 1>(p, prog, max_ctas, lim, s);
    case 2: return launch_backward_kernel<T, WT, RES, 2>(p, prog, max_ctas, lim, s);
    case 3: return launch_backward_kernel<T, WT, RES, 3>(p, prog, max_ctas, lim, s);
    case 4: return launch_backward_kernel<T, WT, RES, 4>(p, prog, max_ctas, lim, s);
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
}

template <typename T>
int launch_backward(const BwdParams& p, bool w_fp32, const Program& prog, int max_ctas, const BwdLimits& lim,
                    void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.gr != nullptr;
  if (w_fp32) {
    return res ? launch_backward_vpt<T, float, true>(p, prog, max_ctas, lim, s)
               : launch_backward_vpt<T, float, false>(p, prog, max_ctas, lim, s);
  }
  return res ? launch_backward_vpt<T, T, true>(p, prog, max_ctas, lim, s)
             : launch_backward_vpt<T, T, false>(p, prog, max_ctas, lim, s);
}

}  // namespace cake
