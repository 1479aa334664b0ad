// Launcher of the FP32-activation forward (kernels/fp32_rows.cuh): every (y dtype, w dtype,
// residual, vectors a thread) instance. A file of its own, so it compiles beside the backward's.
#include <cuda_runtime.h>

#include "../kernels/fp32_rows.cuh"
#include "launch.h"

namespace cake {

namespace {

template <typename TY, typename WT, bool RES, int NV>
int fp32_forward_nv(const FwdParams& q, cudaStream_t s) {
  const int cta = fp32_cta(q.tpr);
  const unsigned grid = static_cast<unsigned>(ceil_div(q.rows, cta / q.tpr));
  if constexpr (NV > 2) {  // a 512-thread group holds the row in more than two vectors
    if (fp32_fwd_late_w(q.tpr)) {
      fp32_fwd_kernel<TY, WT, RES, NV, true><<<grid, cta, 0, s>>>(q);
      return static_cast<int>(cudaGetLastError());
    }
  }
  fp32_fwd_kernel<TY, WT, RES, NV, false><<<grid, cta, 0, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

template <typename TY, typename WT, bool RES>
int fp32_forward_res(const FwdParams& q, cudaStream_t s) {
  switch (fp32_nv(q.hidden, q.tpr)) {
    case 2: return fp32_forward_nv<TY, WT, RES, 2>(q, s);
    case 4: return fp32_forward_nv<TY, WT, RES, 4>(q, s);
    default: return fp32_forward_nv<TY, WT, RES, 8>(q, s);
  }
}

template <typename TY, typename WT>
int fp32_forward_as(const FwdParams& p, cudaStream_t s) {
  FwdParams q = p;
  q.tpr = fp32_tpr(p.hidden, kFp32FwdVectors);
  return p.r != nullptr ? fp32_forward_res<TY, WT, true>(q, s) : fp32_forward_res<TY, WT, false>(q, s);
}

// dtype codes as cake_dtype_t: 0 BF16, 1 FP16, 2 FP32.
template <typename A>
int fwd_w(int w, const FwdParams& p, cudaStream_t s) {
  if (w == 0) return fp32_forward_as<A, __nv_bfloat16>(p, s);
  if (w == 1) return fp32_forward_as<A, __half>(p, s);
  return fp32_forward_as<A, float>(p, s);
}

}  // namespace

int launch_fp32_forward(const FwdParams& p, int y_dtype, int w_dtype, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (y_dtype == 0) return fwd_w<__nv_bfloat16>(w_dtype, p, s);
  if (y_dtype == 1) return fwd_w<__half>(w_dtype, p, s);
  return fwd_w<float>(w_dtype, p, s);
}

}  // namespace cake
