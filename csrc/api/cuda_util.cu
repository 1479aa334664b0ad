// Small CUDA helpers of the C API: error text, zero-filling dw for an empty backward, and the
// resident-CTA query behind persistent grids.
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

#include "execute.h"
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

// The current device's architecture and SM count, queried once per device: a call reads them
// instead of asking the driver.
struct DeviceFacts {
  int sm;
  int64_t sms;
};
constexpr int kMaxDevices = 64;
std::atomic<int> g_facts_ready[kMaxDevices];
DeviceFacts g_facts[kMaxDevices];

DeviceFacts device_facts() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return DeviceFacts{0, 0};
  }
  if (device >= 0 && device < kMaxDevices && g_facts_ready[device].load(std::memory_order_acquire))
    return g_facts[device];
  int major = 0, minor = 0, sms = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return DeviceFacts{0, 0};
  }
  const DeviceFacts f{10 * major + minor, sms};
  if (device >= 0 && device < kMaxDevices) {
    g_facts[device] = f;  // every thread writes the same values
    g_facts_ready[device].store(1, std::memory_order_release);
  }
  return f;
}
}  // namespace

int device_sm() { return device_facts().sm; }

int64_t resident_sms() { return device_facts().sms; }

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
      (sms = static_cast<int>(resident_sms())) == 0 ||
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
