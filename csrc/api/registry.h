// The instance registry: a key (dispatch/kernel_key.h) to its kernel, null where the key is
// not compiled. Host-only declarations: no CUDA headers needed.
#pragma once

#include "../dispatch/kernel_key.h"

namespace cake {

using KernelLookup = const void* (*)(const KernelKey&);

const void* kernel_of(const KernelKey& key);           // execute.cu
const void* finalize_kernel_of(const FinalizeKey& key);  // finalize.cu
const void* fp32_forward_kernel_of(const KernelKey& key);   // fp32_forward.cu
const void* fp32_backward_kernel_of(const KernelKey& key);  // fp32_backward.cu

}  // namespace cake
