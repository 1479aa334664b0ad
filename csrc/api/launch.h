// Internal launchers, one per (direction, activation dtype), each defined in its own .cu file
// so the instantiations compile in parallel. Host-only declarations: no CUDA headers needed.
#pragma once

#include "../dispatch/plan.h"
#include "../kernels/params.h"

namespace cake {

// Each returns 0 on success or the CUDA error code of the launch; `stream` is a cudaStream_t.
// The forward's plan (dispatch/plan.h) takes architecture `sm`'s table.
int launch_forward_bf16(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream);
int launch_forward_fp16(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream);
// The backward's plan (dispatch/plan.h, plan_backward) takes the limits of the architecture
// table or of the tuning hooks (BwdLimits).
int launch_backward_bf16(const BwdParams& p, bool w_fp32, const Program& prog, int max_ctas, const BwdLimits& lim,
                         void* stream);
int launch_backward_fp16(const BwdParams& p, bool w_fp32, const Program& prog, int max_ctas, const BwdLimits& lim,
                         void* stream);
// FP32 activations (kernels/fp32_rows.cuh; fp32_forward.cu, fp32_backward.cu): y (forward) or g (backward) and w of the given
// cake_dtype_t codes; dx, h_new and g_residual FP32. Rows up to fp32_width_ok() wide.
// Their plans take architecture `sm`'s table (dispatch/plan.h, plan_fp32_forward, _backward).
int launch_fp32_forward(const FwdParams& p, int y_dtype, int w_dtype, int sm, void* stream);
int launch_fp32_backward(const BwdParams& p, int g_dtype, int w_dtype, int sm, void* stream);
// dw from p.chunks FP32 partials (p.partials) into p.dw of dw_dtype (a cake_dtype_t code),
// in the finalize's chunk order (sequence-parallel callers gather the partials first).
int launch_dw_finalize(const BwdParams& p, int dw_dtype, void* stream);
const char* cuda_error_string(int code);
int zero_bytes(void* p, size_t n, void* stream);
// The current device's architecture as 10 * major + minor (90 for sm_90a; 0 if unknown).
int device_sm();

}  // namespace cake
