// Sum over the threads of one row group. Torch-free.
#pragma once

namespace cake {

// Synchronises the `count` threads (a multiple of 32) of one row group on barrier `id`
// (1..15; 0 is __syncthreads'), so several wide groups can share a CTA.
__device__ __forceinline__ void group_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// This thread's place among row groups of `tpr` consecutive threads (tpr a power of two, so
// shifts rather than integer division): rpc groups a CTA, its group and its lane in it.
struct RowGroup {
  int tpr, rpc, group, lane;
  __device__ __forceinline__ explicit RowGroup(int threads_per_row) : tpr(threads_per_row) {
    const int log_tpr = __ffs(tpr) - 1;
    rpc = static_cast<int>(blockDim.x) >> log_tpr;
    group = threadIdx.x >> log_tpr;
    lane = threadIdx.x & (tpr - 1);
  }
};

// A row group is `tpr` consecutive threads, tpr a power of two. Groups up to a warp reduce
// with an xor butterfly inside their aligned lanes (every lane ends with the same bits, as
// FP32 addition commutes); wider groups add their warps' sums through `scratch` (one float a
// warp of the CTA) behind a named barrier of their own. Every thread of a group must call
// this together: callers keep row loops uniform and mask invalid rows instead.
__device__ __forceinline__ float group_sum(float v, const RowGroup& rg, float* scratch /* >= 32 floats */) {
  const int tpr = rg.tpr;
  const int width = tpr < 32 ? tpr : 32;
#pragma unroll 1
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (tpr <= 32) return v;
  const int warps = tpr >> 5;
  const int lane = threadIdx.x & 31;
  float* mine = scratch + rg.group * warps;
  group_barrier(1 + rg.group, tpr);  // the previous call's readers are done with scratch
  if (lane == 0) mine[rg.lane >> 5] = v;
  group_barrier(1 + rg.group, tpr);
  float s = lane < warps ? mine[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

}  // namespace cake
