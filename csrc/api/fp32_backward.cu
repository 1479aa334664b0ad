// The FP32-activation backward's registry (kernels/fp32_rows.cuh): a key to its (g dtype,
// w dtype, residual, float4 vectors a thread) instance.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "../kernels/fp32_rows.cuh"
#include "registry.h"

namespace cake {

namespace {

template <typename T>
constexpr int code() {
  return std::is_same<T, __nv_bfloat16>::value ? kBf16 : std::is_same<T, __half>::value ? kFp16 : kFp32;
}

template <typename TG, typename WT, bool RES, int NV, bool kFromY>
const void* bwd_instance() {
  constexpr KernelKey key{Family::kFp32Bwd, kFp32, code<TG>(), code<WT>(), RES, NV, 0, 1, WLoad::kFirst,
                          GroupSync::kNamed, false, kAsX, kFromY};
  if constexpr (compiled(key)) return reinterpret_cast<const void*>(fp32_bwd_kernel<TG, WT, RES, NV, kFromY>);
  return nullptr;
}

template <typename TG, typename WT, bool RES, bool kFromY>
const void* bwd_res(const KernelKey& k) {
  switch (k.vectors) {
    case 2: return bwd_instance<TG, WT, RES, 2, kFromY>();
    case 4: return bwd_instance<TG, WT, RES, 4, kFromY>();
    case 8: return bwd_instance<TG, WT, RES, 8, kFromY>();
    default: return nullptr;
  }
}

template <typename TG, typename WT, bool kFromY>
const void* bwd_route(const KernelKey& k) {
  return k.residual ? bwd_res<TG, WT, true, kFromY>(k) : bwd_res<TG, WT, false, kFromY>(k);
}

// The backward from y (kFromY: the memory-efficient mode) or from x.
template <typename TG, typename WT>
const void* bwd_w(const KernelKey& k) {
  return k.from_y ? bwd_route<TG, WT, true>(k) : bwd_route<TG, WT, false>(k);
}

template <typename TG>
const void* bwd_g(const KernelKey& k) {
  if (k.w == kBf16) return bwd_w<TG, __nv_bfloat16>(k);
  if (k.w == kFp16) return bwd_w<TG, __half>(k);
  return bwd_w<TG, float>(k);
}

}  // namespace

const void* fp32_backward_kernel_of(const KernelKey& k) {
  if (!compiled(k) || k.family != Family::kFp32Bwd) return nullptr;
  if (k.y == kBf16) return bwd_g<__nv_bfloat16>(k);
  if (k.y == kFp16) return bwd_g<__half>(k);
  return bwd_g<float>(k);
}

}  // namespace cake
