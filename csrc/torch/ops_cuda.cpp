// The CUDA implementations: the tensor's device is made current and the kernels run on its
// current stream (so calls follow torch streams and can be captured in CUDA graphs).
#ifndef USE_CUDA
#define USE_CUDA  // exposes aoti_torch_get_current_cuda_stream in the shim header
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>

#include "ops_impl.h"

namespace {

struct CudaStream {
  struct Ctx {
    torch::stable::accelerator::DeviceGuard guard;
    void* stream;
  };
  static Ctx enter(const cake_torch::Tensor& x) {
    STD_TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor for the CUDA kernel");
    const int32_t index = x.get_device_index();
    void* stream = nullptr;
    STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(index, &stream) == AOTI_TORCH_SUCCESS,
                    "cannot get the current CUDA stream");
    return Ctx{torch::stable::accelerator::DeviceGuard(index), stream};
  }
};

using CudaOps = cake_torch::Ops<CudaStream>;

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(cake_rmsnorm, CUDA, m) { CAKE_REGISTER_IMPLS(m, CudaOps); }
