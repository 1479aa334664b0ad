// The dw finalize's registry (kernels/backward.cuh, dw_finalize_kernel): one unit holds its
// instances for every backward (16-bit and FP32 activations, and a caller's partials).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../kernels/backward.cuh"
#include "registry.h"

namespace cake {

namespace {

template <typename OutT>
const void* finalize_as(const FinalizeKey& f) {
  if (f.lanes == kFinalizeLanesMany) return reinterpret_cast<const void*>(dw_finalize_kernel<8, kFinalizeLanesMany, OutT>);
  return f.cols == 8 ? reinterpret_cast<const void*>(dw_finalize_kernel<8, kFinalizeLanes, OutT>)
                     : reinterpret_cast<const void*>(dw_finalize_kernel<32, kFinalizeLanes, OutT>);
}

}  // namespace

const void* finalize_kernel_of(const FinalizeKey& f) {
  if (!compiled(f)) return nullptr;
  if (f.out == kBf16) return finalize_as<__nv_bfloat16>(f);
  if (f.out == kFp16) return finalize_as<__half>(f);
  return finalize_as<float>(f);
}

}  // namespace cake
