// Backward launcher template: the dx + dw-partials kernel, then the chunk-order finalize.
#pragma once

#include <cuda_runtime.h>

#include "../kernels/backward.cuh"
#include "launch.h"

namespace cake {

template <typename T, typename WT, bool RES>
int launch_backward_vpt(const BwdParams& p, const Program& prog, int grid, cudaStream_t s) {
  const int rpc = prog.cta / prog.tpr;
  const size_t smem = sizeof(float) * (32 + (rpc > 1 ? size_t(prog.cta) * prog.vpt * 8 : 0));
  switch (prog.vpt) {
    case 1: rmsnorm_bwd_kernel<T, WT, RES, 1><<<grid, prog.cta, smem, s>>>(p); break;
    case 2: rmsnorm_bwd_kernel<T, WT, RES, 2><<<grid, prog.cta, smem, s>>>(p); break;
    case 4: rmsnorm_bwd_kernel<T, WT, RES, 4><<<grid, prog.cta, smem, s>>>(p); break;
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  dw_finalize_kernel<32 * kFinalizeLanes><<<(p.hidden + 31) / 32, 32 * kFinalizeLanes, 0, s>>>(p.partials, p.chunks, p.hidden, p.dw,
                                                                              p.accumulate);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_backward(const BwdParams& p, bool w_fp32, const Program& prog, int grid, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.gr != nullptr;
  if (w_fp32) {
    return res ? launch_backward_vpt<T, float, true>(p, prog, grid, s)
               : launch_backward_vpt<T, float, false>(p, prog, grid, s);
  }
  return res ? launch_backward_vpt<T, T, true>(p, prog, grid, s)
             : launch_backward_vpt<T, T, false>(p, prog, grid, s);
}

}  // namespace cake
