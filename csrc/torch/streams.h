// Where an op body runs: CpuStream (no stream) and CudaStream (the tensor's device made current,
// torch's current stream on it). Shared by the registered ops and the direct binding.
#pragma once

#include <dlfcn.h>
#include <torch/csrc/stable/accelerator.h>

#include "op_common.h"

namespace cake_torch {

struct CpuStream {
  struct Ctx {
    void* stream = nullptr;
  };
  static Ctx enter(const Tensor& x) {
    STD_TORCH_CHECK(x.is_cpu(), "x must be a CPU tensor for the CPU kernel");
    return Ctx{};
  }
};

// torch's current CUDA stream. The accessor lives in libtorch_cuda, which a CPU-only torch
// lacks, so it is looked up at run time (a CUDA tensor means libtorch_cuda is loaded) instead
// of being linked: one library then loads under CPU and CUDA builds of torch alike. The
// stable ABI's own accessor (torch_stream_native_handle) only exists from torch 2.13.
using GetStreamFn = int32_t (*)(int32_t device_index, void** stream);

inline GetStreamFn current_stream_fn() {
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
  static Ctx enter(const Tensor& x) {
    STD_TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor for the CUDA kernel");
    const int32_t index = x.get_device_index();
    void* stream = nullptr;
    const GetStreamFn get_stream = current_stream_fn();
    STD_TORCH_CHECK(get_stream != nullptr, "cake_rmsnorm: torch's CUDA library is not loaded");
    STD_TORCH_CHECK(get_stream(index, &stream) == 0, "cannot get the current CUDA stream");
    return Ctx{torch::stable::accelerator::DeviceGuard(index), stream};
  }
};

}  // namespace cake_torch
