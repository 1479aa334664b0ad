// Sum over the threads of one row group. Torch-free.
#pragma once

namespace cake {

// A row group is `tpr` consecutive threads, tpr a power of two. Groups narrower than a warp
// reduce with an xor butterfly inside their aligned lanes (every lane ends with the same
// bits, as FP32 addition commutes); a group wider than a warp is the whole CTA (the
// dispatch guarantees it), so __syncthreads is uniform. Every thread of the CTA must call
// this together: callers keep their row loops uniform and mask invalid rows instead.
__device__ __forceinline__ float group_sum(float v, int tpr, float* scratch /* >= 32 floats */) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (tpr <= 32) return v;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = lane < (tpr >> 5) ? scratch[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

}  // namespace cake
