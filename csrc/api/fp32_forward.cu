// The FP32-activation forward's registry (kernels/fp32_rows.cuh): a key to its (y dtype,
// w dtype, residual, float4 vectors a thread, w load) instance. A file of its own, so it
// compiles beside the backward's.
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

template <typename TY, typename WT, bool RES, int NV, bool LATE_W, typename TR>
const void* fwd_instance() {
  constexpr KernelKey key{Family::kFp32Fwd, kFp32, code<TY>(), code<WT>(), RES, NV, 0, 1,
                          LATE_W ? WLoad::kAtUse : WLoad::kFirst, GroupSync::kNamed, false,
                          std::is_same<TR, float>::value ? kAsX : code<TR>()};
  if constexpr (compiled(key)) return reinterpret_cast<const void*>(fp32_fwd_kernel<TY, WT, RES, NV, LATE_W, TR>);
  return nullptr;
}

template <typename TY, typename WT, bool RES, int NV, typename TR>
const void* fwd_late(const KernelKey& k) {
  return k.wload == WLoad::kAtUse ? fwd_instance<TY, WT, RES, NV, true, TR>()
                                  : fwd_instance<TY, WT, RES, NV, false, TR>();
}

template <typename TY, typename WT, bool RES, int NV>
const void* fwd_nv(const KernelKey& k) {
  if (k.r == kBf16) return fwd_late<TY, WT, RES, NV, __nv_bfloat16>(k);
  if (k.r == kFp16) return fwd_late<TY, WT, RES, NV, __half>(k);
  return fwd_late<TY, WT, RES, NV, float>(k);
}

template <typename TY, typename WT, bool RES>
const void* fwd_res(const KernelKey& k) {
  switch (k.vectors) {
    case 2: return fwd_nv<TY, WT, RES, 2>(k);
    case 4: return fwd_nv<TY, WT, RES, 4>(k);
    case 8: return fwd_nv<TY, WT, RES, 8>(k);
    default: return nullptr;
  }
}

template <typename TY, typename WT>
const void* fwd_w(const KernelKey& k) {
  return k.residual ? fwd_res<TY, WT, true>(k) : fwd_res<TY, WT, false>(k);
}

template <typename TY>
const void* fwd_y(const KernelKey& k) {
  if (k.w == kBf16) return fwd_w<TY, __nv_bfloat16>(k);
  if (k.w == kFp16) return fwd_w<TY, __half>(k);
  return fwd_w<TY, float>(k);
}

}  // namespace

const void* fp32_forward_kernel_of(const KernelKey& k) {
  if (!compiled(k) || k.family != Family::kFp32Fwd) return nullptr;
  if (k.y == kBf16) return fwd_y<__nv_bfloat16>(k);
  if (k.y == kFp16) return fwd_y<__half>(k);
  return fwd_y<float>(k);
}

}  // namespace cake
