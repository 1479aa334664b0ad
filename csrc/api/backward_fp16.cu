// The backward instantiations for fp16 activations (every weight dtype, residual, VPT).
#include "launch_backward.cuh"

namespace cake {

int launch_backward_fp16(const BwdParams& p, bool w_fp32, const Program& prog, int grid, void* stream) {
  return launch_backward<__half>(p, w_fp32, prog, grid, stream);
}

}  // namespace cake
