// The forward instantiations for bf16 activations (every weight dtype, residual, VPT).
#include "launch_forward.cuh"

namespace cake {

int launch_forward_bf16(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream) {
  return launch_forward<__nv_bfloat16>(p, w_fp32, prog, sm, stream);
}

}  // namespace cake
