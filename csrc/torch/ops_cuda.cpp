// The CUDA implementations: the tensor's device is made current and the kernels run on its
// current stream (so calls follow torch streams and can be captured in CUDA graphs).
#include <dlfcn.h>
#include <torch/csrc/stable/accelerator.h>

#include "ops_impl.h"

namespace {

// torch's current CUDA stream. The accessor lives in libtorch_cuda, which a CPU-only torch
// lacks, so it is looked up at run time (a CUDA tensor means libtorch_cuda is loaded) instead
// of being linked: one library then loads under CPU and CUDA builds of torch alike. The
// stable ABI's own accessor (torch_stream_native_handle) only exists from torch 2.13.
using GetStreamFn = int32_t (*)(int32_t device_index, void** stream);

GetStreamFn current_stream_fn() {
  static const GetStreamFn fn = [] {
    const char* name = "aoti_torch_get_current_cuda_stream";
    void* sym = nullptr;
    if (void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD)) sym = dlsym(lib, name);
    if (sym == nullptr) sym = dlsym(RTLD_DEFAULT, name);
    return reinterpret_cast<GetStreamFn>(sym);
  }();
  return fn;
}

struct CudaStream {
  struct Ctx {
    torch::stable::accelerator::DeviceGuard guard;
    void* stream;
  };
  static Ctx enter(const cake_torch::Tensor& x) {
    STD_TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor for the CUDA kernel");
    const int32_t index = x.get_device_index();
    void* stream = nullptr;
    const GetStreamFn get_stream = current_stream_fn();
    STD_TORCH_CHECK(get_stream != nullptr, "cake_rmsnorm: torch's CUDA library is not loaded");
    STD_TORCH_CHECK(get_stream(index, &stream) == 0, "cannot get the current CUDA stream");
    return Ctx{torch::stable::accelerator::DeviceGuard(index), stream};
  }
};

using CudaOps = cake_torch::Ops<CudaStream>;

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(cake_rmsnorm, CUDA, m) { CAKE_REGISTER_IMPLS(m, CudaOps); }
