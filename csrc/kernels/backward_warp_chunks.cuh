// The backward for narrow rows at large T: a warp takes a dw chunk and its 32 / kTpr row groups
// one row each of every batch of consecutive rows, where the row kernel gives a chunk to one
// group. The chunk count is part of dw's bit contract (4096 at most), so with groups of 4 or
// 8 threads the row kernel ran 16K-32K threads on the whole GPU, latency-bound; here every chunk
// has a warp. dx is the row kernel's arithmetic for the same (tpr, VPT), so the same bits; the
// batch's dw products go through the warp's slice of shared memory and each lane adds its
// H / 32 columns' products row by row in order, Kahan-compensated and rounded as the row
// kernel: the same partials, then the same finalize. Torch-free.
#pragma once

#include <type_traits>

#include "backward.cuh"

namespace cake {

template <typename T, typename WT, bool RES, int kTpr, int VPT>
__global__ void __launch_bounds__(kMaxBwdThreads, kBwdMinBlocks) rmsnorm_bwd_warp_chunks_kernel(const BwdParams p) {
  static_assert(warp_chunks_instance(kTpr, VPT), "a compiled warp-chunk shape");
  constexpr int kRows = 32 / kTpr;          // rows a batch: the warp's groups
  constexpr int kH = kTpr * VPT * kVec;     // the width, covered exactly
  constexpr int kCols = kH / 32;            // dw columns a lane owns
  constexpr bool kBits = std::is_same<T, __nv_bfloat16>::value;
  extern __shared__ float prods[];          // [warps][kRows][kH]: a batch's dw products
  __shared__ float scratch[1];              // group_sum's kWarp path needs none
  GroupScratch gs{scratch};
  pdl_launch_dependents();  // the finalize may take its SM slots now; it waits for our memory
  const RowGroupT<kTpr> rg(kTpr);
  const int lane = rg.lane;
  const int warp = threadIdx.x / 32, wl = threadIdx.x % 32, slot = wl / kTpr;
  const int warps = blockDim.x / 32;
  float* sp = prods + warp * (kRows * kH);
  const bool want_dw = p.partials != nullptr;

  WVec<WT> wv[VPT];
  load_weights(wv, p.w, lane, kTpr, kTpr * VPT);

  struct RowData {
    uint4 g[VPT], x[VPT], r[VPT];
    float rstd;
  };
  auto load = [&](int64_t row, RowData& d) {
    const T* g = static_cast<const T*>(p.g) + row * p.g_stride + lane * kVec;
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride + lane * kVec;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      d.g[k] = load16(g + k * kTpr * kVec);
      d.x[k] = load16(x + k * kTpr * kVec);
      if (RES) d.r[k] = load16(static_cast<const T*>(p.gr) + row * p.gr_stride + (lane + k * kTpr) * kVec);
    }
    d.rstd = p.rstd[row];
  };

#pragma unroll 1
  for (int c = blockIdx.x * warps + warp; c < p.chunks; c += gridDim.x * warps) {
    const int64_t begin = chunk_begin(c, p), end = chunk_begin(c + 1, p);
    float acc[kCols], comp[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[j] = comp[j] = 0.f;
    // Rows past the chunk read its first row (every lane takes part in the shuffles) and
    // store nothing.
    RowData cur;
    load(begin + slot < end ? begin + slot : begin, cur);
#pragma unroll 1
    for (int64_t b = begin; b < end; b += kRows) {
      const int64_t row = b + slot;
      RowData nxt;
      const int64_t nrow = b + kRows + slot;
      load(nrow < end ? nrow : begin, nxt);  // the next batch in flight while this one is reduced

      const float rstd = cur.rstd;
      float part[VPT];
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        float gf[kVec], xf[kVec], wf[kVec];
        unpack8<T, kBits>(cur.g[k], gf);
        unpack8<T, kBits>(cur.x[k], xf);
        wv[k].template get_here<kBits>(wf);
        part[k] = gwxhat_sum(gf, wf, xf, rstd);
      }
      const float dot = group_sum<GroupSync::kWarp>(tree_sum(part), rg, gs);
      const float mean = row_mean(dot, kH);
      T* dx = static_cast<T*>(p.dx) + row * p.dx_stride;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = lane + k * kTpr;
        float gf[kVec], xf[kVec], wf[kVec], d[kVec], prod[kVec];
        unpack8<T, kBits>(cur.g[k], gf);
        unpack8<T, kBits>(cur.x[k], xf);
        if (RES) unpack8<T, kBits>(cur.r[k], d);
        wv[k].template get_here<kBits>(wf);
        dx_and_products<T, RES>(gf, wf, xf, rstd, mean, d, prod);
        if (row < end) store16(dx + v * kVec, pack8<T>(d));
        if (want_dw) {
          float4* s4 = reinterpret_cast<float4*>(sp + slot * kH + v * kVec);
          s4[0] = make_float4(prod[0], prod[1], prod[2], prod[3]);
          s4[1] = make_float4(prod[4], prod[5], prod[6], prod[7]);
        }
      }
      if (want_dw) {
        __syncwarp();
        const int64_t left = end - b;
        const int n = left < kRows ? static_cast<int>(left) : kRows;
#pragma unroll
        for (int q = 0; q < kRows; ++q) {  // the batch's rows in order
          if (q < n) {
            const float* src = sp + q * kH + wl * kCols;
#pragma unroll
            for (int j = 0; j < kCols; ++j) kahan_add_hot(acc[j], comp[j], src[j]);
          }
        }
        __syncwarp();  // read: the next batch may overwrite the slice
      }
      cur = nxt;
    }
    if (!want_dw) continue;
    float* part = p.partials + static_cast<int64_t>(c) * kH + wl * kCols;
#pragma unroll
    for (int j = 0; j < kCols; ++j) part[j] = __fsub_rn(acc[j], comp[j]);
  }
}

}  // namespace cake
