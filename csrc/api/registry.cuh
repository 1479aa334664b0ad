// The 16-bit kernels' registry: a key (dispatch/kernel_key.h) to its instance, for the
// instances `compiled` admits and no others. The generated units (csrc/api/gen/,
// scripts/gen_instances.py) each hold one (direction, activation dtype, VPT).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../dispatch/kernel_key.h"
#include "../kernels/backward.cuh"
#include "../kernels/backward_small.cuh"
#include "../kernels/backward_warp_chunks.cuh"
#include "../kernels/forward.cuh"
#include "registry.h"

namespace cake {

template <typename T>
constexpr int dtype_code() {
  return std::is_same<T, __nv_bfloat16>::value ? kBf16 : std::is_same<T, __half>::value ? kFp16 : kFp32;
}
template <typename T, typename WT, bool RES, int VPT>
constexpr KernelKey key_of(Family f, int tpr = 0, int rows = 1, WLoad wl = WLoad::kFirst,
                           GroupSync sync = GroupSync::kNamed, bool pair = false, bool from_y = false) {
  KernelKey k = plain_key(f, dtype_code<T>(), dtype_code<T>(), dtype_code<WT>(), RES, VPT);
  k.tpr = tpr;
  k.rows = rows;
  k.wload = wl;
  k.sync = sync;
  k.pair = pair;
  k.from_y = from_y;
  return k;
}
template <typename K>
const void* address(K kernel) {
  return reinterpret_cast<const void*>(kernel);
}

// ---- forward ----------------------------------------------------------------------------

template <typename T, typename WT, bool RES, int VPT, GroupSync kS>
const void* fwd_ring() {
  if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kFwdRing, 0, 1, WLoad::kFirst, kS))) {
    if constexpr (ring_max_regs<T, WT, RES, VPT, kS>() > 0)
      return address(rmsnorm_fwd_kernel_held<T, WT, RES, VPT, kS>);
    else
      return address(rmsnorm_fwd_kernel<T, WT, RES, VPT, kS>);
  }
  return nullptr;
}
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kS, int kTpr, int kRows>
const void* fwd_stream() {
  if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kFwdStream, kTpr, kRows, kW, kS))) {
    if constexpr (stream_max_regs<T, WT, RES, VPT, kW, kS, kTpr, kRows>() > 0)
      return address(rmsnorm_fwd_stream_kernel_held<T, WT, RES, VPT, kW, kS>);
    else
      return address(rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, kW, kS, kTpr, kRows>);
  }
  return nullptr;
}
template <typename T, typename WT, bool RES, int VPT, int kTpr>
const void* fwd_exact(int rows) {
  return rows == kStreamRows ? fwd_stream<T, WT, RES, VPT, WLoad::kFirst, GroupSync::kWarp, kTpr, kStreamRows>()
                             : fwd_stream<T, WT, RES, VPT, WLoad::kFirst, GroupSync::kWarp, kTpr, 1>();
}
template <typename T, typename WT, bool RES, int VPT, GroupSync kS>
const void* fwd_stream_sync(const KernelKey& k) {
  if (k.wload == WLoad::kAtUse) return fwd_stream<T, WT, RES, VPT, WLoad::kAtUse, kS, 0, 1>();
  if (k.wload == WLoad::kBeforeSum) return fwd_stream<T, WT, RES, VPT, WLoad::kBeforeSum, kS, 0, 1>();
  if constexpr (kS == GroupSync::kWarp) {
    switch (k.tpr) {
      case 4: return fwd_exact<T, WT, RES, VPT, 4>(k.rows);
      case 8: return fwd_exact<T, WT, RES, VPT, 8>(k.rows);
      case 16: return fwd_exact<T, WT, RES, VPT, 16>(k.rows);
      case 32: return fwd_exact<T, WT, RES, VPT, 32>(k.rows);
      default: break;
    }
  }
  return k.tpr == 0 ? fwd_stream<T, WT, RES, VPT, WLoad::kFirst, kS, 0, 1>() : nullptr;
}
template <typename T, typename WT, bool RES, int VPT>
const void* fwd_route(const KernelKey& k) {
  const bool warp = k.sync == GroupSync::kWarp;
  if (k.family == Family::kFwdRing)
    return warp ? fwd_ring<T, WT, RES, VPT, GroupSync::kWarp>() : fwd_ring<T, WT, RES, VPT, GroupSync::kNamed>();
  return warp ? fwd_stream_sync<T, WT, RES, VPT, GroupSync::kWarp>(k)
              : fwd_stream_sync<T, WT, RES, VPT, GroupSync::kNamed>(k);
}
template <typename T, int VPT>
const void* forward_kernel_of(const KernelKey& k) {
  if (k.w == kFp32) return k.residual ? fwd_route<T, float, true, VPT>(k) : fwd_route<T, float, false, VPT>(k);
  return k.residual ? fwd_route<T, T, true, VPT>(k) : fwd_route<T, T, false, VPT>(k);
}

// ---- backward ---------------------------------------------------------------------------

template <typename T, typename WT, bool RES, int VPT, bool PAIR, int kTpr, bool kFromY = false>
const void* bwd_rows() {
  if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kBwdRows, kTpr, 1, WLoad::kFirst, GroupSync::kNamed, PAIR, kFromY)))
    return address(rmsnorm_bwd_kernel<T, WT, RES, VPT, PAIR, kTpr, kFromY>);
  return nullptr;
}
// The backward from y (kernel_key.h: the runtime-width row kernel, its one launch and their wide CTAs).
template <typename T, typename WT, bool RES, int VPT>
const void* bwd_from_y(const KernelKey& k) {
  constexpr auto key = [](Family f) { return key_of<T, WT, RES, VPT>(f, 0, 1, WLoad::kFirst, GroupSync::kNamed, false, true); };
  if (k.tpr != 0 || k.pair) return nullptr;
  if (k.family == Family::kBwdRows) return bwd_rows<T, WT, RES, VPT, false, 0, true>();
  if constexpr (compiled(key(Family::kBwdOne)))
    if (k.family == Family::kBwdOne) return address(rmsnorm_bwd_one_kernel<T, WT, RES, VPT, 0, true>);
  if constexpr (compiled(key(Family::kBwdWide)))
    if (k.family == Family::kBwdWide) return address(rmsnorm_bwd_wide_kernel<T, WT, RES, true, VPT>);
  if constexpr (compiled(key(Family::kBwdOneWide)))
    if (k.family == Family::kBwdOneWide) return address(rmsnorm_bwd_one_wide_kernel<T, WT, RES, true>);
  return nullptr;
}
template <typename T, typename WT, bool RES, int VPT, int kTpr>
const void* bwd_one() {
  if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kBwdOne, kTpr)))
    return address(rmsnorm_bwd_one_kernel<T, WT, RES, VPT, kTpr>);
  return nullptr;
}
template <typename T, typename WT, bool RES, int VPT, int kTpr>
const void* bwd_warp_chunks() {
  if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kBwdWarpChunks, kTpr)))
    return address(rmsnorm_bwd_warp_chunks_kernel<T, WT, RES, kTpr, VPT>);
  return nullptr;
}
template <typename T, typename WT, bool RES, int VPT>
const void* bwd_route(const KernelKey& k) {
  if (k.from_y) return bwd_from_y<T, WT, RES, VPT>(k);
  switch (k.family) {
    case Family::kBwdRows:
      if (k.tpr == 32) return k.pair ? bwd_rows<T, WT, RES, VPT, true, 32>() : bwd_rows<T, WT, RES, VPT, false, 32>();
      if (k.tpr == 16) return k.pair ? nullptr : bwd_rows<T, WT, RES, VPT, false, 16>();
      if (k.tpr != 0) return nullptr;
      return k.pair ? bwd_rows<T, WT, RES, VPT, true, 0>() : bwd_rows<T, WT, RES, VPT, false, 0>();
    case Family::kBwdOne:
      if (k.tpr == 32) return bwd_one<T, WT, RES, VPT, 32>();
      if (k.tpr == 16) return bwd_one<T, WT, RES, VPT, 16>();
      return k.tpr == 0 ? bwd_one<T, WT, RES, VPT, 0>() : nullptr;
    case Family::kBwdWarpChunks:
      if (k.tpr == 4) return bwd_warp_chunks<T, WT, RES, VPT, 4>();
      return k.tpr == 8 ? bwd_warp_chunks<T, WT, RES, VPT, 8>() : nullptr;
    case Family::kBwdWide:
      if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kBwdWide)))
        return address(rmsnorm_bwd_wide_kernel<T, WT, RES, false, VPT>);
      return nullptr;
    case Family::kBwdOneWide:
      if constexpr (compiled(key_of<T, WT, RES, VPT>(Family::kBwdOneWide)))
        return address(rmsnorm_bwd_one_wide_kernel<T, WT, RES>);
      return nullptr;
    default: return nullptr;
  }
}
template <typename T, int VPT>
const void* backward_kernel_of(const KernelKey& k) {
  if (k.w == kFp32) return k.residual ? bwd_route<T, float, true, VPT>(k) : bwd_route<T, float, false, VPT>(k);
  return k.residual ? bwd_route<T, T, true, VPT>(k) : bwd_route<T, T, false, VPT>(k);
}

}  // namespace cake
