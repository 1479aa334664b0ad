// Forward launcher template: picks the instantiation for (weight dtype, residual, VPT).
#pragma once

#include <cuda_runtime.h>

#include "../kernels/forward.cuh"
#include "launch.h"

namespace cake {

template <typename T, typename WT, bool RES>
int launch_forward_vpt(const FwdParams& p, const Program& prog, cudaStream_t s) {
  const int64_t rpc = prog.cta / prog.tpr;
  int64_t blocks = (p.rows + rpc - 1) / rpc;
  if (blocks > (int64_t(1) << 30)) blocks = int64_t(1) << 30;  // the kernel strides over rows
  const dim3 grid(static_cast<unsigned>(blocks)), block(prog.cta);
  switch (prog.vpt) {
    case 1: rmsnorm_fwd_kernel<T, WT, RES, 1><<<grid, block, 0, s>>>(p); break;
    case 2: rmsnorm_fwd_kernel<T, WT, RES, 2><<<grid, block, 0, s>>>(p); break;
    case 4: rmsnorm_fwd_kernel<T, WT, RES, 4><<<grid, block, 0, s>>>(p); break;
    case 8: rmsnorm_fwd_kernel<T, WT, RES, 8><<<grid, block, 0, s>>>(p); break;
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_forward(const FwdParams& p, bool w_fp32, const Program& prog, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.r != nullptr;
  if (w_fp32) {
    return res ? launch_forward_vpt<T, float, true>(p, prog, s)
               : launch_forward_vpt<T, float, false>(p, prog, s);
  }
  return res ? launch_forward_vpt<T, T, true>(p, prog, s) : launch_forward_vpt<T, T, false>(p, prog, s);
}

}  // namespace cake
