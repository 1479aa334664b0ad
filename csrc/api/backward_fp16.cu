// The backward entry point for fp16 activations: the call's plan mapped to its VPT's instances, which
// live in csrc/api/gen/ (scripts/gen_instances.py), one unit a VPT.
#include "launch_backward.cuh"

namespace cake {

int launch_backward_fp16(const BwdParams& p, bool w_fp32, const Program& prog, int max_ctas, const BwdLimits& lim,
                         void* stream) {
  return launch_backward<__half>(p, w_fp32, prog, max_ctas, lim, stream);
}

}  // namespace cake
