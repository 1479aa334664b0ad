// Small CUDA helpers of the C API: error text, zero-filling dw for an empty backward, and the
// resident-CTA query behind persistent grids.
#include <cuda_runtime.h>

#include <mutex>

#include "launch.h"
#include "occupancy.h"

namespace cake {

const char* cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int zero_bytes(void* p, size_t n, void* stream) {
  return static_cast<int>(cudaMemsetAsync(p, 0, n, static_cast<cudaStream_t>(stream)));
}

namespace {
struct OccEntry {
  const void* kernel;
  int device, threads;
  size_t smem;
  int64_t value;
};
constexpr int kOccCache = 1024;  // more than the library has (kernel, block size, ring) triples
OccEntry g_occ[kOccCache];
int g_occ_n = 0;
std::mutex g_occ_mu;
}  // namespace

int device_sm() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
}

int64_t resident_sms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

int64_t resident_ctas(const void* kernel, int threads, size_t smem) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  {
    std::lock_guard<std::mutex> lock(g_occ_mu);
    for (int i = 0; i < g_occ_n; ++i) {
      const OccEntry& e = g_occ[i];
      if (e.kernel == kernel && e.device == device && e.threads == threads && e.smem == smem)
        return e.value;
    }
  }
  // Rings above 48 KB need the opt-in limit; raising it to the device's maximum once serves
  // every ring size of the kernel (occupancy follows the size launched, not the limit).
  // The limit counts the kernel's static shared memory too.
  int sms = 0, per_sm = 0, optin = 0;
  cudaFuncAttributes fa = {};
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, kernel) != cudaSuccess ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           optin - static_cast<int>(fa.sharedSizeBytes)) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error for the launch check
    return 0;
  }
  const int64_t value = static_cast<int64_t>(sms) * per_sm;
  std::lock_guard<std::mutex> lock(g_occ_mu);
  if (g_occ_n < kOccCache) g_occ[g_occ_n++] = OccEntry{kernel, device, threads, smem, value};
  return value;
}

}  // namespace cake
