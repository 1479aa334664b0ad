// Launcher of the FP32-activation forward (kernels/fp32_rows.cuh): the call's plan
// (dispatch/plan.h, plan_fp32_forward) mapped to its (y dtype, w dtype, residual, vectors a
// thread, w load) instance. A file of its own, so it compiles beside the backward's.
#include <cuda_runtime.h>

#include "../dispatch/plan.h"
#include "../kernels/fp32_rows.cuh"
#include "launch.h"

namespace cake {

namespace {

template <typename TY, typename WT, bool RES, int NV>
int fp32_forward_nv(const FwdParams& q, const Fp32Plan& plan, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(ceil_div(q.rows, plan.cta / plan.tpr));
  if constexpr (NV > 2) {  // a 512-thread group holds the row in more than two vectors
    if (plan.late_w) {
      fp32_fwd_kernel<TY, WT, RES, NV, true><<<grid, plan.cta, 0, s>>>(q);
      return static_cast<int>(cudaGetLastError());
    }
  }
  fp32_fwd_kernel<TY, WT, RES, NV, false><<<grid, plan.cta, 0, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

template <typename TY, typename WT, bool RES>
int fp32_forward_res(const FwdParams& q, const Fp32Plan& plan, cudaStream_t s) {
  switch (plan.nv) {
    case 2: return fp32_forward_nv<TY, WT, RES, 2>(q, plan, s);
    case 4: return fp32_forward_nv<TY, WT, RES, 4>(q, plan, s);
    default: return fp32_forward_nv<TY, WT, RES, 8>(q, plan, s);
  }
}

template <typename TY, typename WT>
int fp32_forward_as(const FwdParams& p, const ArchTable& t, cudaStream_t s) {
  const Fp32Plan plan = plan_fp32_forward(p.hidden, t);
  FwdParams q = p;
  q.tpr = plan.tpr;
  return p.r != nullptr ? fp32_forward_res<TY, WT, true>(q, plan, s) : fp32_forward_res<TY, WT, false>(q, plan, s);
}

// dtype codes as cake_dtype_t: 0 BF16, 1 FP16, 2 FP32.
template <typename A>
int fwd_w(int w, const FwdParams& p, const ArchTable& t, cudaStream_t s) {
  if (w == 0) return fp32_forward_as<A, __nv_bfloat16>(p, t, s);
  if (w == 1) return fp32_forward_as<A, __half>(p, t, s);
  return fp32_forward_as<A, float>(p, t, s);
}

}  // namespace

int launch_fp32_forward(const FwdParams& p, int y_dtype, int w_dtype, int sm, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const ArchTable& t = arch_table(sm);
  if (y_dtype == 0) return fwd_w<__nv_bfloat16>(w_dtype, p, t, s);
  if (y_dtype == 1) return fwd_w<__half>(w_dtype, p, t, s);
  return fwd_w<float>(w_dtype, p, t, s);
}

}  // namespace cake
