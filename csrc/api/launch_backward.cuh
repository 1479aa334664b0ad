// Backward launcher template: the dx + dw-partials kernel on a grid of at most the resident
// CTAs, then the chunk-order finalize, launched as a programmatic dependent (it is resident
// and waiting when the main kernel's last CTA ends, instead of paying a launch gap).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../kernels/backward.cuh"
#include "launch.h"
#include "occupancy.h"

namespace cake {

// Columns a finalize CTA takes: 8 (256 threads) while that grid still fits one CTA a SM, so
// narrow rows' partials are pulled by four times the SMs; 32 (1024 threads) otherwise. Same
// bits either way. Measured against 32 everywhere (docs/perf/README.md): H 512 bwd 6.25 ->
// 5.75 us at T 1024, but 8 columns at H 2048 and 4096 (256 and 512 CTAs) lost 0.4-0.75 us
// at T <= 1024, hence the one-CTA-a-SM bound.
inline int finalize_cols(int hidden) {
  const int64_t sms = resident_sms();
  return sms > 0 && (hidden + 7) / 8 <= sms ? 8 : 32;
}

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

// 128 lanes (from kFinalizeWideChunks chunks) take 8 columns a CTA (1024 threads), whose
// warps read whole 32-byte sectors of each chunk's row.
template <typename OutT>
int launch_finalize_as(const BwdParams& p, cudaStream_t s) {
  if (finalize_lanes(p.chunks) == kFinalizeLanesWide) return launch_finalize_cols<8, kFinalizeLanesWide, OutT>(p, s);
  return finalize_cols(p.hidden) == 8 ? launch_finalize_cols<8, kFinalizeLanes, OutT>(p, s)
                                      : launch_finalize_cols<32, kFinalizeLanes, OutT>(p, s);
}

// dw in FP32, or in a 16-bit weight's own type (dw_w_dtype): the finalize rounds it once.
template <typename WT>
int launch_finalize(const BwdParams& p, cudaStream_t s) {
  if constexpr (!std::is_same<WT, float>::value)
    if (p.dw_w_dtype) return launch_finalize_as<WT>(p, s);
  return launch_finalize_as<float>(p, s);
}

using BwdKernel = void (*)(BwdParams);

// The instance for a program: the exact group where programs.h lists one (exact_group;
// the same bits, no masks or rest loops), else the runtime-width kernel. Pairs need groups of
// a warp or more, so only 32-thread exact groups pair.
template <typename T, typename WT, bool RES, int VPT, bool PAIR>
BwdKernel backward_kernel(const Program& prog, int hidden) {
  const bool exact = prog.exact && exact_cover(prog.tpr, VPT, hidden, true);
  if constexpr (exact_group(32, VPT, true))
    if (exact && prog.tpr == 32) return rmsnorm_bwd_kernel<T, WT, RES, VPT, PAIR, 32>;
  if constexpr (!PAIR && exact_group(16, VPT, true))
    if (exact && prog.tpr == 16) return rmsnorm_bwd_kernel<T, WT, RES, VPT, false, 16>;
  return rmsnorm_bwd_kernel<T, WT, RES, VPT, PAIR>;
}

// Row pairs (the kernel's PAIR), for chunks of at most two rows (small T) and groups of a warp
// or more (named barriers count whole warps): two groups share each chunk, the CTA doubled when
// it holds one group, up to 256 threads (a 512-thread CTA of 128-register threads fills an SM);
// the ring holds one row (a group has no next row to prefetch). Only while the pair grid fills
// at most half the resident CTAs: a fuller grid leaves the finalize no room to wait beside it
// (PDL) and loses the second row's prefetch, and measured slower (H 1536 T 1024: 10.25 vs
// 9.0 us; H 4096 T 256 with 512-thread CTAs: 9.0 vs 8.0 us). dx and dw have the same bits
// either way.
template <typename T, typename WT, bool RES, int VPT>
bool pair_program(const BwdParams& p, const Program& prog, Program* out) {
  if (prog.tpr < 32 || p.chunk_rows + (p.chunk_rem > 0 ? 1 : 0) != 2) return false;
  Program q = prog;
  if ((q.cta / q.tpr) % 2 != 0) q.cta *= 2;
  q.stages = 1;
  if (q.cta > kMaxBwdThreads) return false;
  const BwdKernel kernel = backward_kernel<T, WT, RES, VPT, true>(q, p.hidden);
  const int64_t resident = resident_ctas(reinterpret_cast<const void*>(kernel), q.cta,
                                         backward_smem_bytes(q.cta, VPT, q.stages, RES));
  const int units = q.cta / q.tpr / 2;
  if (resident <= 0 || 2 * ceil_div(p.chunks, units) > resident) return false;
  *out = q;
  return true;
}

template <typename T, typename WT, bool RES, int VPT>
int launch_backward_kernel(const BwdParams& p, const Program& table_prog, int max_ctas, cudaStream_t s) {
  Program prog = table_prog;
  const bool pair = pair_program<T, WT, RES, VPT>(p, table_prog, &prog);
  const size_t smem = backward_smem_bytes(prog.cta, VPT, prog.stages, RES);
  const int units = prog.cta / prog.tpr / (pair ? 2 : 1);  // chunks a CTA takes at a time
  const int64_t wanted = ceil_div(p.chunks, units);
  BwdParams q = p;
  q.tpr = prog.tpr;
  q.stages = prog.stages;
  const BwdKernel kernel = pair ? backward_kernel<T, WT, RES, VPT, true>(prog, p.hidden)
                                : backward_kernel<T, WT, RES, VPT, false>(prog, p.hidden);
  const int64_t grid =
      persistent_grid(reinterpret_cast<const void*>(kernel), prog.cta, smem, prog.ctas_per_sm, wanted, max_ctas);
  kernel<<<static_cast<unsigned>(grid), prog.cta, smem, s>>>(q);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  return launch_finalize<WT>(q, s);
}

template <typename T, typename WT, bool RES>
int launch_backward_vpt(const BwdParams& p, const Program& prog, int max_ctas, cudaStream_t s) {
  switch (prog.vpt) {
    case 1: return launch_backward_kernel<T, WT, RES, 1>(p, prog, max_ctas, s);
    case 2: return launch_backward_kernel<T, WT, RES, 2>(p, prog, max_ctas, s);
    case 3: return launch_backward_kernel<T, WT, RES, 3>(p, prog, max_ctas, s);
    case 4: return launch_backward_kernel<T, WT, RES, 4>(p, prog, max_ctas, s);
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
}

template <typename T>
int launch_backward(const BwdParams& p, bool w_fp32, const Program& prog, int max_ctas, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.gr != nullptr;
  if (w_fp32) {
    return res ? launch_backward_vpt<T, float, true>(p, prog, max_ctas, s)
               : launch_backward_vpt<T, float, false>(p, prog, max_ctas, s);
  }
  return res ? launch_backward_vpt<T, T, true>(p, prog, max_ctas, s)
             : launch_backward_vpt<T, T, false>(p, prog, max_ctas, s);
}

}  // namespace cake
