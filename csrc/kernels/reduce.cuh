// Sum over the threads of one row group. Torch-free.
#pragma once

#include "params.h"

namespace cake {

// Synchronises the `count` threads (a multiple of 32) of one row group on barrier `id`
// (1..15; 0 is __syncthreads'), so several wide groups can share a CTA.
__device__ __forceinline__ void group_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// This thread's place among row groups of `tpr` consecutive threads (tpr a power of two, so
// shifts rather than integer division): rpc groups a CTA, its group and its lane in it.
// kTpr > 0: the width is known at compile time (shifts by constants).
template <int kTpr = 0>
struct RowGroupT {
  static constexpr int kWidth = kTpr;  // 0: runtime
  int tpr, rpc, group, lane;
  __device__ __forceinline__ explicit RowGroupT(int threads_per_row) : tpr(kTpr > 0 ? kTpr : threads_per_row) {
    const int log_tpr = kTpr > 0 ? __builtin_ctz(kTpr) : __ffs(tpr) - 1;
    rpc = static_cast<int>(blockDim.x) >> log_tpr;
    group = threadIdx.x >> log_tpr;
    lane = threadIdx.x & (tpr - 1);
  }
};
using RowGroup = RowGroupT<0>;

// sum / hidden, correctly rounded. For a power-of-two width the reciprocal 2^-k is exact, so
// the product rounds the same real number once and has the quotient's bits, without the
// division's instruction sequence (at small T each row's chain is the kernel's latency).
__device__ __forceinline__ float row_mean(float sum, int hidden) {
  if ((hidden & (hidden - 1)) == 0) return __fmul_rn(sum, __int_as_float((127 - (__ffs(hidden) - 1)) << 23));
  return __fdiv_rn(sum, static_cast<float>(hidden));
}

// Cross-warp scratch of one CTA: two halves of one float a warp (a CTA has at most 16 warps),
// used in turn by successive group_sum calls, so one barrier a call suffices: a thread still
// reading half h of call i has not reached call i + 1's barrier, which every writer of call
// i + 2 (half h again) has passed.
struct GroupScratch {
  float* base;  // >= 32 floats of shared memory
  int half = 0;
};

// Xor butterfly over aligned blocks of `width` lanes (a runtime power of two; every step from
// 2 * FROM lanes up), steps FROM, FROM / 2, ..., 1: unrolled, the shuffles unconditional (no
// divergence checks), only the adds guarded by the width.
template <int FROM>
__device__ __forceinline__ float xor_sum(float v, int width) {
#pragma unroll
  for (int o = FROM; o > 0; o >>= 1) {
    const float t = __shfl_xor_sync(0xffffffffu, v, o);
    if (o < width) v += t;
  }
  return v;
}


// A row group is `tpr` consecutive threads, tpr a power of two. Groups up to a warp reduce
// with an xor butterfly inside their aligned lanes (every lane ends with the same bits, as
// FP32 addition commutes); wider groups add their warps' sums through the scratch behind a
// named barrier of their own; every aligned block of `warps` lanes then reads the same sums
// and runs the same butterfly over them, so all lanes end with the same bits. Every thread of a
// group must call this together: callers keep row loops uniform and mask invalid rows instead.
// The steps are unrolled with uniform guards (tpr is a runtime power of two): at small T the
// warp's dependent chain is the kernel's latency, and a rolled loop doubled each step.
// The cross-warp step of a group wider than a warp, once each warp's lanes hold its sum.
template <typename RG>
__device__ __forceinline__ float across_warps(float v, const RG& rg, GroupScratch& gs) {
  const int tpr = rg.tpr;
  const int warps = tpr >> 5;
  const int lane = threadIdx.x & 31;
  float* mine = gs.base + gs.half * 16 + rg.group * warps;
  gs.half ^= 1;
  if (lane == 0) mine[rg.lane >> 5] = v;
  group_barrier(1 + rg.group, tpr);
  return xor_sum<8>(mine[lane & (warps - 1)], warps);
}

template <GroupSync kSync = GroupSync::kNamed, typename RG>
__device__ __forceinline__ float group_sum(float v, const RG& rg, GroupScratch& gs) {
  if constexpr (RG::kWidth > 0) {  // a compile-time width: only its log2(width) butterfly steps
    static_assert(RG::kWidth <= 32 && kSync == GroupSync::kWarp, "compile-time widths are at most a warp");
    return xor_sum<RG::kWidth / 2>(v, RG::kWidth);
  }
  const int tpr = rg.tpr;
  v = xor_sum<16>(v, tpr);
  if (kSync == GroupSync::kWarp || tpr <= 32) return v;
  return across_warps(v, rg, gs);
}

// A warp's butterflies of e and of o, added: xor_sum<16>(e, 32) + xor_sum<16>(o, 32) in six
// shuffles, not ten. The low half-warp runs e's butterfly and the high half o's: each lane's
// first step adds its own value and its partner's of the same kind (the full butterfly's sums
// on those lanes), the last four steps stay in the half, and the halves then swap their sums.
__device__ __forceinline__ float warp_sum_halves(float e, float o) {
  const bool high = threadIdx.x & 16;
  float v = (high ? o : e) + __shfl_xor_sync(0xffffffffu, high ? e : o, 16);
  v = xor_sum<8>(v, 16);
  return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

// group_sum of e + o, where e and o are the sums of a thread's even and odd vectors: in the
// order of a group of twice the threads whose thread lane + j * tpr ... holds this thread's
// even vectors and lane + tpr their odd ones (the plain forward's small-T group,
// programs.h forward_small_program), so both groups give a row the same bits. That group's
// first step pairs the two: its top lane bit (this group narrower than a warp: e + o first),
// or its top warp bit, which comes after its lanes' butterfly (this group a warp or wider: each
// half's lanes summed apart, then e + o, then this group's warps).
template <GroupSync kSync = GroupSync::kNamed, typename RG>
__device__ __forceinline__ float group_sum_pairs(float e, float o, const RG& rg, GroupScratch& gs) {
  if constexpr (RG::kWidth > 0) {
    static_assert(RG::kWidth <= 32 && kSync == GroupSync::kWarp, "compile-time widths are at most a warp");
    if constexpr (RG::kWidth < 32) return xor_sum<RG::kWidth / 2>(e + o, RG::kWidth);
    return warp_sum_halves(e, o);
  }
  const int tpr = rg.tpr;
  if (tpr < 32) return xor_sum<16>(e + o, tpr);
  const float v = warp_sum_halves(e, o);
  if (kSync == GroupSync::kWarp || tpr == 32) return v;
  return across_warps(v, rg, gs);
}

}  // namespace cake
