// The executor: a Launch's kernel (registry.h) with its grid, block and shared memory, and the
// dw finalize as a programmatic dependent (resident and waiting when the main kernel's last CTA
// ends, instead of paying a launch gap).
#include "execute.h"

#include <cuda_runtime.h>

#include "gen/units.h"
#include "occupancy.h"
#include "registry.h"

namespace cake {

const void* kernel_of(const KernelKey& k) {
  switch (k.family) {
    case Family::kFp32Fwd: return fp32_forward_kernel_of(k);
    case Family::kFp32Bwd: return fp32_backward_kernel_of(k);
    default: {
      const KernelLookup unit = unit_of(k.family == Family::kFwdRing || k.family == Family::kFwdStream, k.x, k.vectors);
      return unit != nullptr ? unit(k) : nullptr;
    }
  }
}

namespace {

int64_t resident_of(const KernelKey& k, int block, size_t smem) {
  const void* kernel = kernel_of(k);
  return kernel != nullptr ? resident_ctas(kernel, block, smem) : 0;
}

// A launch's status, or an error left pending before it, as a launch check after <<<>>> reads
// it: none stays behind for the caller's next check.
int checked(cudaError_t e) {
  const cudaError_t pending = cudaGetLastError();
  return static_cast<int>(e != cudaSuccess ? e : pending);
}

constexpr size_t kDefaultSmem = 48 * 1024;  // above it a kernel needs the opt-in limit raised

int launch(const void* kernel, const Launch& l, void* params, cudaStream_t s) {
  if (kernel == nullptr) return static_cast<int>(cudaErrorInvalidConfiguration);
  if (!l.smem_ready && l.smem > kDefaultSmem) resident_ctas(kernel, l.block, l.smem);  // raises the limit once
  void* args[] = {params};
  return checked(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(l.grid)), dim3(l.block), args, l.smem, s));
}

int finalize(const Launch& l, const BwdParams& p, cudaStream_t s) {
  const void* kernel = finalize_kernel_of(l.fin);
  if (kernel == nullptr) return static_cast<int>(cudaErrorInvalidConfiguration);
  const float* partials = p.partials;
  int chunks = p.chunks, hidden = p.hidden, accumulate = p.accumulate;
  void* dw = p.dw;
  void* args[] = {&partials, &chunks, &hidden, &dw, &accumulate};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(l.fin_grid));
  cfg.blockDim = dim3(l.fin.cols * l.fin.lanes);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelExC(&cfg, kernel, args) == cudaSuccess) return 0;
  cudaGetLastError();  // no programmatic launch here (driver or capture): a plain one
  return checked(cudaLaunchKernel(kernel, cfg.gridDim, cfg.blockDim, args, 0, s));
}

}  // namespace

int no_instance_error() { return static_cast<int>(cudaErrorInvalidConfiguration); }

DeviceFacts current_device_facts() { return DeviceFacts{device_sm(), resident_sms(), resident_of}; }

int execute_forward(const Launch& l, const FwdParams& p, void* stream) {
  FwdParams q = p;
  q.tpr = l.tpr;
  q.stages = l.stages;
  return launch(kernel_of(l.key), l, &q, static_cast<cudaStream_t>(stream));
}

int execute_backward(const Launch& l, const BwdParams& p, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  BwdParams q = p;
  q.tpr = l.tpr;
  q.stages = l.stages;
  q.dx_ctas = static_cast<int>(l.dx_ctas);
  const int err = launch(kernel_of(l.key), l, &q, s);
  if (err != 0 || !l.finalize) return err;
  return finalize(l, q, s);
}

int execute_finalize(const Launch& l, const BwdParams& p, void* stream) {
  return finalize(l, p, static_cast<cudaStream_t>(stream));
}

}  // namespace cake
