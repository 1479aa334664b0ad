// Launcher of the FP32-activation backward (kernels/fp32_rows.cuh): the call's plan
// (dispatch/plan.h, plan_fp32_backward) mapped to its (g dtype, w dtype, residual, vectors a
// thread) instance, and the shared dw finalize in the weight's dtype (also the C API's finalize
// over a caller's partials).
#include <cuda_runtime.h>

#include "../dispatch/plan.h"
#include "../kernels/fp32_rows.cuh"
#include "launch.h"
#include "launch_backward.cuh"
#include "occupancy.h"

namespace cake {

namespace {

// The plan's ring: two rows where they fit in shared memory (every width but the widest), else
// one row; the same bits either way.
template <typename TG, typename WT, bool RES, int NV>
int fp32_backward_nv(const BwdParams& p, const Fp32Plan& plan, cudaStream_t s) {
  auto kernel = fp32_bwd_kernel<TG, WT, RES, NV>;
  BwdParams q = p;
  const int cta = plan.cta;
  q.stages = plan.stages;
  const size_t smem = fp32_bwd_smem_bytes(cta, NV, q.stages, sizeof(TG), RES);
  // Raises the kernel's dynamic shared-memory limit to the device's opt-in once (cached).
  if (smem > 48 * 1024) resident_ctas(reinterpret_cast<const void*>(kernel), cta, smem);
  const unsigned grid = static_cast<unsigned>(ceil_div(p.chunks, cta / q.tpr));
  kernel<<<grid, cta, smem, s>>>(q);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.dw == nullptr) return static_cast<int>(err);
  return launch_finalize<WT>(q, finalize_shape(q.chunks, q.hidden, resident_sms()), s);
}

template <typename TG, typename WT, bool RES>
int fp32_backward_res(const BwdParams& q, const Fp32Plan& plan, cudaStream_t s) {
  switch (plan.nv) {
    case 2: return fp32_backward_nv<TG, WT, RES, 2>(q, plan, s);
    case 4: return fp32_backward_nv<TG, WT, RES, 4>(q, plan, s);
    default: return fp32_backward_nv<TG, WT, RES, 8>(q, plan, s);
  }
}

template <typename TG, typename WT>
int fp32_backward_as(const BwdParams& p, const ArchTable& t, cudaStream_t s) {
  const bool res = p.gr != nullptr;
  const Fp32Plan plan = plan_fp32_backward(p.hidden, sizeof(TG), res, t);
  BwdParams q = p;
  q.tpr = plan.tpr;
  return res ? fp32_backward_res<TG, WT, true>(q, plan, s) : fp32_backward_res<TG, WT, false>(q, plan, s);
}

template <typename A>
int bwd_w(int w, const BwdParams& p, const ArchTable& t, cudaStream_t s) {
  if (w == 0) return fp32_backward_as<A, __nv_bfloat16>(p, t, s);
  if (w == 1) return fp32_backward_as<A, __half>(p, t, s);
  return fp32_backward_as<A, float>(p, t, s);
}

}  // namespace

int launch_fp32_backward(const BwdParams& p, int g_dtype, int w_dtype, int sm, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const ArchTable& t = arch_table(sm);
  if (g_dtype == 0) return bwd_w<__nv_bfloat16>(w_dtype, p, t, s);
  if (g_dtype == 1) return bwd_w<__half>(w_dtype, p, t, s);
  return bwd_w<float>(w_dtype, p, t, s);
}

int launch_dw_finalize(const BwdParams& p, int dw_dtype, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const FinalizeShape shape = finalize_shape(p.chunks, p.hidden, resident_sms());
  if (dw_dtype == 0) return launch_finalize_as<__nv_bfloat16>(p, shape, s);
  if (dw_dtype == 1) return launch_finalize_as<__half>(p, shape, s);
  return launch_finalize_as<float>(p, shape, s);
}

}  // namespace cake
