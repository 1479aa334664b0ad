// The forward entry point for bf16 activations: the call's plan mapped to its VPT's instances, which
// live in csrc/api/gen/ (scripts/gen_instances.py), one unit a VPT.
#include "launch_forward.cuh"

namespace cake {

int launch_forward_bf16(const FwdParams& p, bool w_fp32, const Program& prog, int sm, void* stream) {
  return launch_forward<__nv_bfloat16>(p, w_fp32, prog, sm, stream);
}

}  // namespace cake
