// Launchers of the FP32-activation kernels (kernels/fp32_rows.cuh): every (y or g dtype,
// w dtype, residual) instance, and the shared dw finalize in the weight's dtype.
#include <cuda_runtime.h>

#include "../kernels/fp32_rows.cuh"
#include "launch.h"
#include "launch_backward.cuh"

namespace cake {

namespace {

template <typename TY, typename WT>
int fp32_forward_as(const FwdParams& p, cudaStream_t s) {
  FwdParams q = p;
  q.tpr = fp32_tpr(p.hidden);
  const int cta = fp32_cta(q.tpr);
  const unsigned grid = static_cast<unsigned>(ceil_div(p.rows, cta / q.tpr));
  if (p.r != nullptr)
    fp32_fwd_kernel<TY, WT, true><<<grid, cta, 0, s>>>(q);
  else
    fp32_fwd_kernel<TY, WT, false><<<grid, cta, 0, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

template <typename TG, typename WT>
int fp32_backward_as(const BwdParams& p, cudaStream_t s) {
  BwdParams q = p;
  q.tpr = fp32_tpr(p.hidden);
  const int cta = fp32_cta(q.tpr);
  const unsigned grid = static_cast<unsigned>(ceil_div(p.chunks, cta / q.tpr));
  if (p.gr != nullptr)
    fp32_bwd_kernel<TG, WT, true><<<grid, cta, 0, s>>>(q);
  else
    fp32_bwd_kernel<TG, WT, false><<<grid, cta, 0, s>>>(q);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  return launch_finalize<WT>(q, s);
}

// dtype codes as cake_dtype_t: 0 BF16, 1 FP16, 2 FP32.
template <typename A>
int fwd_w(int w, const FwdParams& p, cudaStream_t s) {
  if (w == 0) return fp32_forward_as<A, __nv_bfloat16>(p, s);
  if (w == 1) return fp32_forward_as<A, __half>(p, s);
  return fp32_forward_as<A, float>(p, s);
}

template <typename A>
int bwd_w(int w, const BwdParams& p, cudaStream_t s) {
  if (w == 0) return fp32_backward_as<A, __nv_bfloat16>(p, s);
  if (w == 1) return fp32_backward_as<A, __half>(p, s);
  return fp32_backward_as<A, float>(p, s);
}

}  // namespace

int launch_fp32_forward(const FwdParams& p, int y_dtype, int w_dtype, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (y_dtype == 0) return fwd_w<__nv_bfloat16>(w_dtype, p, s);
  if (y_dtype == 1) return fwd_w<__half>(w_dtype, p, s);
  return fwd_w<float>(w_dtype, p, s);
}

int launch_fp32_backward(const BwdParams& p, int g_dtype, int w_dtype, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (g_dtype == 0) return bwd_w<__nv_bfloat16>(w_dtype, p, s);
  if (g_dtype == 1) return bwd_w<__half>(w_dtype, p, s);
  return bwd_w<float>(w_dtype, p, s);
}

}  // namespace cake
