// The CUDA implementations: the tensor's device is made current and the kernels run on its
// current stream (so calls follow torch streams and can be captured in CUDA graphs).
#include "gen/schemas.h"
#include "ops_impl.h"
#include "streams.h"

namespace {
using CudaOps = cake_torch::Ops<cake_torch::CudaStream>;
}  // namespace

STABLE_TORCH_LIBRARY_IMPL(cake_rmsnorm, CUDA, m) { CAKE_REGISTER_IMPLS(m, CudaOps); }
