// RMSNorm forward: y = cast(h * rstd * w), rstd = 1 / sqrt(mean(h^2) + eps), FP32 inside.
// Torch-free.
#pragma once

#include "params.h"
#include "reduce.cuh"
#include "vec.cuh"

namespace cake {

// One row per group of p.tpr threads, blockDim.x / p.tpr groups per CTA, grid-stride over
// rows. Each thread caches VPT 16-byte vectors of its row in registers (all loads issued
// before the first use); vectors past VPT * tpr (very wide rows only) are read again from
// global memory in the second pass. The reduction order depends on (hidden, tpr, VPT) only,
// so a row's outputs do not depend on the number of rows.
template <typename T, typename WT, bool RES, int VPT>
__global__ void __launch_bounds__(kMaxFwdThreads) rmsnorm_fwd_kernel(const FwdParams p) {
  __shared__ float scratch[32];
  const int tpr = p.tpr;
  const int rpc = blockDim.x / tpr;
  const int group = threadIdx.x / tpr;
  const int lane = threadIdx.x % tpr;
  const int nvec = p.hidden / kVec;

  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rpc; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * rpc) {
    const int64_t row = base + group;
    const bool valid = row < p.rows;  // masked, not skipped: every thread reduces together
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    const T* r = RES ? static_cast<const T*>(p.r) + row * p.r_stride : nullptr;
    T* h = RES ? static_cast<T*>(p.h) + row * p.h_stride : nullptr;
    T* y = static_cast<T*>(p.y) + row * p.y_stride;

    uint4 hv[VPT];
    uint4 rv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = lane + k * tpr;
      hv[k] = make_uint4(0, 0, 0, 0);
      rv[k] = make_uint4(0, 0, 0, 0);
      if (valid && v < nvec) {
        hv[k] = load16(x + v * kVec);
        if (RES) rv[k] = load16(r + v * kVec);
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      float f[kVec];
      unpack8<T>(hv[k], f);
      if (RES) {
        float u[kVec];
        unpack8<T>(rv[k], u);
#pragma unroll
        for (int i = 0; i < kVec; ++i) f[i] += u[i];
        hv[k] = pack8<T>(f);  // h_new is rounded to the activation type, then normalised
        unpack8<T>(hv[k], f);
        const int v = lane + k * tpr;
        if (valid && v < nvec) store16(h + v * kVec, hv[k]);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) ss += f[i] * f[i];
    }
    // Rows wider than VPT * tpr vectors: first pass over the rest (writes h_new).
    for (int v = lane + VPT * tpr; valid && v < nvec; v += tpr) {
      float f[kVec];
      unpack8<T>(load16(x + v * kVec), f);
      if (RES) {
        float u[kVec];
        unpack8<T>(load16(r + v * kVec), u);
#pragma unroll
        for (int i = 0; i < kVec; ++i) f[i] += u[i];
        const uint4 packed = pack8<T>(f);
        store16(h + v * kVec, packed);
        unpack8<T>(packed, f);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) ss += f[i] * f[i];
    }
    ss = group_sum(ss, tpr, scratch);
    const float mean = __fdiv_rn(ss, static_cast<float>(p.hidden));
    const float rstd = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
    if (valid && lane == 0) p.rstd[row] = rstd;

#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = lane + k * tpr;
      if (valid && v < nvec) {
        float f[kVec], wf[kVec];
        unpack8<T>(hv[k], f);
        WeightLoader<WT>::load(p.w, v * kVec, wf);
#pragma unroll
        for (int i = 0; i < kVec; ++i) f[i] = (f[i] * rstd) * wf[i];
        store16(y + v * kVec, pack8<T>(f));
      }
    }
    // Second pass over the rest: the same thread wrote h_new there, so it reads its own store.
    for (int v = lane + VPT * tpr; valid && v < nvec; v += tpr) {
      float f[kVec], wf[kVec];
      unpack8<T>(RES ? *reinterpret_cast<const uint4*>(h + v * kVec) : load16(x + v * kVec), f);
      WeightLoader<WT>::load(p.w, v * kVec, wf);
#pragma unroll
      for (int i = 0; i < kVec; ++i) f[i] = (f[i] * rstd) * wf[i];
      store16(y + v * kVec, pack8<T>(f));
    }
  }
}

}  // namespace cake
