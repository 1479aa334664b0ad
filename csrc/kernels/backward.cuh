// RMSNorm backward: dx = rstd * (g*w - mean(g*w*xhat) * xhat) (+ g_residual), xhat = x*rstd,
// and FP32 per-chunk dw partials; dw_finalize sums them in chunk order. Torch-free.
#pragma once

#include "params.h"
#include "reduce.cuh"
#include "vec.cuh"

namespace cake {

// Chunk c of p.chunks (a function of rows alone) covers a fixed row range; CTAs stride over
// chunks, so the grid size changes neither dx nor the dw bits. Inside a chunk, group j of a
// CTA takes rows begin + j, begin + j + rpc, ...; each thread owns the same columns for every
// row and sums g * xhat for them in Kahan-compensated FP32 registers; the groups are then added
// in group order through shared memory and the chunk's partial row is written to p.partials.
// Columns past VPT * tpr vectors (very wide rows, where rpc == 1) are summed, uncompensated,
// straight into the partial row.
template <typename T, typename WT, bool RES, int VPT>
__global__ void __launch_bounds__(kMaxBwdThreads) rmsnorm_bwd_kernel(const BwdParams p) {
  extern __shared__ float smem[];  // [32] scratch, then rpc * VPT * tpr * 8 when rpc > 1
  float* scratch = smem;
  float* stage = smem + 32;
  const int tpr = p.tpr;
  const int rpc = blockDim.x / tpr;
  const int group = threadIdx.x / tpr;
  const int lane = threadIdx.x % tpr;
  const int nvec = p.hidden / kVec;
  const bool want_dw = p.dw != nullptr;

  float wf[VPT][kVec];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = lane + k * tpr;
    if (v < nvec) {
      WeightLoader<WT>::load(p.w, v * kVec, wf[k]);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) wf[k][i] = 0.f;
    }
  }

  for (int c = blockIdx.x; c < p.chunks; c += gridDim.x) {
    const int64_t begin = chunk_begin(c, p.rows, p.chunks);
    const int64_t end = chunk_begin(c + 1, p.rows, p.chunks);
    float* part = p.partials + static_cast<int64_t>(c) * p.hidden;
    float acc[VPT][kVec], comp[VPT][kVec];
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[k][i] = comp[k][i] = 0.f;
    if (want_dw) {
      for (int v = lane + VPT * tpr; v < nvec; v += tpr)
#pragma unroll
        for (int i = 0; i < kVec; ++i) part[v * kVec + i] = 0.f;
    }

    for (int64_t base = begin; base < end; base += rpc) {
      const int64_t row = base + group;
      const bool valid = row < end;  // masked, not skipped: every thread reduces together
      const T* g = static_cast<const T*>(p.g) + row * p.g_stride;
      const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
      T* dx = static_cast<T*>(p.dx) + row * p.dx_stride;
      uint4 gv[VPT], xv[VPT];
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = lane + k * tpr;
        gv[k] = make_uint4(0, 0, 0, 0);
        xv[k] = make_uint4(0, 0, 0, 0);
        if (valid && v < nvec) {
          gv[k] = load16(g + v * kVec);
          xv[k] = load16(x + v * kVec);
        }
      }
      const float rstd = valid ? p.rstd[row] : 0.f;
      float dot = 0.f;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        float gf[kVec], xf[kVec];
        unpack8<T>(gv[k], gf);
        unpack8<T>(xv[k], xf);
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot += (gf[i] * wf[k][i]) * (xf[i] * rstd);
      }
      for (int v = lane + VPT * tpr; valid && v < nvec; v += tpr) {
        float gf[kVec], xf[kVec], w2[kVec];
        unpack8<T>(load16(g + v * kVec), gf);
        unpack8<T>(load16(x + v * kVec), xf);
        WeightLoader<WT>::load(p.w, v * kVec, w2);
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot += (gf[i] * w2[i]) * (xf[i] * rstd);
      }
      dot = group_sum(dot, tpr, scratch);
      const float mean = __fdiv_rn(dot, static_cast<float>(p.hidden));

#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = lane + k * tpr;
        if (valid && v < nvec) {
          float gf[kVec], xf[kVec], d[kVec];
          unpack8<T>(gv[k], gf);
          unpack8<T>(xv[k], xf);
          if (RES) unpack8<T>(load16(static_cast<const T*>(p.gr) + row * p.gr_stride + v * kVec), d);
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            const float xhat = xf[i] * rstd;
            const float val = rstd * ((gf[i] * wf[k][i]) - mean * xhat);
            d[i] = RES ? val + d[i] : val;
            kahan_add(acc[k][i], comp[k][i], gf[i] * xhat);
          }
          store16(dx + v * kVec, pack8<T>(d));
        }
      }
      for (int v = lane + VPT * tpr; valid && v < nvec; v += tpr) {
        float gf[kVec], xf[kVec], w2[kVec], d[kVec];
        unpack8<T>(load16(g + v * kVec), gf);
        unpack8<T>(load16(x + v * kVec), xf);
        WeightLoader<WT>::load(p.w, v * kVec, w2);
        if (RES) unpack8<T>(load16(static_cast<const T*>(p.gr) + row * p.gr_stride + v * kVec), d);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float xhat = xf[i] * rstd;
          const float val = rstd * ((gf[i] * w2[i]) - mean * xhat);
          d[i] = RES ? val + d[i] : val;
          if (want_dw) part[v * kVec + i] += gf[i] * xhat;
        }
        store16(dx + v * kVec, pack8<T>(d));
      }
    }

    if (!want_dw) continue;
    if (rpc == 1) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = lane + k * tpr;
        if (v < nvec)
#pragma unroll
          for (int i = 0; i < kVec; ++i) part[v * kVec + i] = acc[k][i] - comp[k][i];
      }
    } else {
      // Column index of acc[k][i] is (k * tpr + lane) * 8 + i; stage by group, add in order.
      const int span = VPT * tpr * kVec;
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          stage[group * span + (k * tpr + lane) * kVec + i] = acc[k][i] - comp[k][i];
      __syncthreads();
      for (int col = threadIdx.x; col < p.hidden && col < span; col += blockDim.x) {
        float s = stage[col];
        for (int j = 1; j < rpc; ++j) s += stage[j * span + col];
        part[col] = s;
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ void neumaier_add(float& s, float& c, float v) {
  const float t = s + v;
  c += fabsf(s) >= fabsf(v) ? (s - t) + v : (v - t) + s;
  s = t;
}

// dw[col] = the chunk partials summed in a fixed order: chunk k goes to lane k % kLanes of the
// column (coalesced 32-column rows, kLanes chunks in flight), each lane sums its chunks in
// order, then the lanes are added in lane order; Neumaier compensation throughout, one
// rounding at the end. The order depends on (chunks, hidden) alone.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) dw_finalize_kernel(const float* __restrict__ partials,
                                                              int chunks, int hidden,
                                                              float* __restrict__ dw, int accumulate) {
  constexpr int kLanes = THREADS / 32;
  __shared__ float sums[kLanes][32], comps[kLanes][32];
  const int cl = threadIdx.x & 31, lane = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + cl;
  float s = 0.f, c = 0.f;
  if (col < hidden)
    for (int k = lane; k < chunks; k += kLanes)
      neumaier_add(s, c, partials[static_cast<int64_t>(k) * hidden + col]);
  sums[lane][cl] = s;
  comps[lane][cl] = c;
  __syncthreads();
  if (lane == 0 && col < hidden) {
    float total = 0.f, tc = 0.f;
    for (int j = 0; j < kLanes; ++j) {
      neumaier_add(total, tc, sums[j][cl]);
      tc += comps[j][cl];
    }
    const float sum = total + tc;
    dw[col] = accumulate ? dw[col] + sum : sum;
  }
}

}  // namespace cake
