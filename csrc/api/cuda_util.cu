// Small CUDA helpers of the C API: error text and zero-filling dw for an empty backward.
#include <cuda_runtime.h>

#include "launch.h"

namespace cake {

const char* cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int zero_floats(float* p, int64_t n, void* stream) {
  return static_cast<int>(
      cudaMemsetAsync(p, 0, sizeof(float) * n, static_cast<cudaStream_t>(stream)));
}

}  // namespace cake
