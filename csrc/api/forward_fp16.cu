// The forward instantiations for fp16 activations (every weight dtype, residual, VPT).
#include "launch_forward.cuh"

namespace cake {

int launch_forward_fp16(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream) {
  return launch_forward<__half>(p, w_fp32, prog, sm, stream);
}

}  // namespace cake
