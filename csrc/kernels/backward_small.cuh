// The one-launch backward for small T (few dw chunks): CTAs [0, dx_ctas) compute dx by rows
// (the row kernel's body without partials), the rest sum dw by columns straight from g, x and
// rstd in exactly the chunk-partials order, so neither partials nor a finalize kernel exist.
// The two roles share no memory: nothing waits. kFromY (the backward from y): p.x holds y, and both
// roles take xhat = y (1 / w), the column CTAs 1 / w of their columns once. Torch-free.
#pragma once

#include <type_traits>

#include "backward.cuh"

namespace cake {

// dw by columns, warp-wide: lane l sums chunks l, l + 32, ... (chunks < kFinalizeManyLanesChunks:
// 32 lanes a column), each chunk's rows in order in Kahan-compensated FP32 with the row
// kernel's products (g * (x * rstd), rounded as there) and rounding (acc - comp: the chunk's
// partial), the partials by Neumaier adds as dw_finalize_kernel's lane does, then the same xor
// butterfly over the 32 lanes: the same dw bits as the pair of kernels. A butterfly step whose
// partner lanes hold no chunk (o >= chunks) only merges zeros and is skipped (the sum s is
// unchanged by it, and c only in the sign of a zero, which s + c does not see).
template <typename T, typename WT, bool kFromY>
__device__ __forceinline__ void dw_columns(const BwdParams& p, int cta_index, int grid_ctas) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, l = threadIdx.x % 32;
  const int nvec = p.hidden / kVec;
  const int col_blocks = (nvec + warps * kDwColVecs - 1) / (warps * kDwColVecs);
#pragma unroll 1
  for (int cb = cta_index; cb < col_blocks; cb += grid_ctas) {
    const int v0 = (cb * warps + warp) * kDwColVecs;
    if (v0 >= nvec) break;  // this warp's columns are past the row (whole warps: the shuffles stay full)
    float s[kDwColVecs][kVec], c[kDwColVecs][kVec];
#pragma unroll
    for (int u = 0; u < kDwColVecs; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) s[u][j] = c[u][j] = 0.f;
    float iw[kFromY ? kDwColVecs : 1][kVec];  // kFromY: 1 / w of these columns (a masked vector's is dropped)
    if constexpr (kFromY) {
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u) {
        float wf[kVec];
        WVec<WT> wv;
        wv.load(p.w, (v0 + u < nvec ? v0 + u : v0) * kVec, true);
        wv.get_here(wf);
        inv_weights(wf, p, iw[u]);
      }
    }
    auto add_row = [&](float (&acc)[kDwColVecs][kVec], float (&comp)[kDwColVecs][kVec], const uint4 (&gv)[kDwColVecs],
                       const uint4 (&xv)[kDwColVecs], float rstd) {
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u) {
        float gf[kVec], xf[kVec];
        unpack8<T>(gv[u], gf);
        unpack8<T>(xv[u], xf);
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          kahan_add_hot(acc[u][j], comp[u][j], __fmul_rn(gf[j], xhat_of<kFromY>(xf[j], rstd, kFromY ? iw[kFromY ? u : 0][j] : 0.f)));
      }
    };
    auto load_row = [&](int64_t row, uint4 (&gv)[kDwColVecs], uint4 (&xv)[kDwColVecs]) {
      const T* g = static_cast<const T*>(p.g) + row * p.g_stride;
      const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u) {
        const int v = v0 + u < nvec ? v0 + u : v0;  // a masked vector reads the first one and is dropped
        gv[u] = load16(g + v * kVec);
        xv[u] = load16(x + v * kVec);
      }
    };
#pragma unroll 1
    for (int k = l; k < p.chunks; k += 32) {
      const int64_t begin = chunk_begin(k, p), end = chunk_begin(k + 1, p);
      float acc[kDwColVecs][kVec], comp[kDwColVecs][kVec];
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u)
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[u][j] = comp[u][j] = 0.f;
      int64_t row = begin;
#pragma unroll 1
      for (; row + 1 < end; row += 2) {  // two rows' loads in flight, then their adds in row order
        uint4 g0[kDwColVecs], x0[kDwColVecs], g1[kDwColVecs], x1[kDwColVecs];
        load_row(row, g0, x0);
        load_row(row + 1, g1, x1);
        const float r0 = kFromY ? 0.f : p.rstd[row], r1 = kFromY ? 0.f : p.rstd[row + 1];
        add_row(acc, comp, g0, x0, r0);
        add_row(acc, comp, g1, x1, r1);
      }
      if (row < end) {
        uint4 g0[kDwColVecs], x0[kDwColVecs];
        load_row(row, g0, x0);
        add_row(acc, comp, g0, x0, kFromY ? 0.f : p.rstd[row]);
      }
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u)
#pragma unroll
        for (int j = 0; j < kVec; ++j) neumaier_add(s[u][j], c[u][j], __fsub_rn(acc[u][j], comp[u][j]));
    }
#pragma unroll 1
    for (int o = 16; o > 0; o >>= 1) {
      if (o >= p.chunks) continue;  // uniform: every lane skips the same steps
#pragma unroll
      for (int u = 0; u < kDwColVecs; ++u)
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          neumaier_merge(s[u][j], c[u][j], __shfl_xor_sync(0xffffffffu, s[u][j], o),
                         __shfl_xor_sync(0xffffffffu, c[u][j], o));
    }
    if (l != 0) continue;
#pragma unroll
    for (int u = 0; u < kDwColVecs; ++u) {
      const int v = v0 + u;
      if (v >= nvec) break;
      float sum[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum[j] = s[u][j] + c[u][j];
      store_dw8<WT>(p, v, sum);
    }
  }
}

// One launch: row CTAs [0, p.dx_ctas) take one row a group (chunks of one row: dx has the same
// bits whatever the chunking), the others dw's column blocks; a one-row call has no column
// CTAs (its row group writes dw).
template <typename T, typename WT, bool RES, int VPT, int kTpr, bool kFromY>
__device__ __forceinline__ void one_launch_body(const BwdParams& p) {
  if (static_cast<int>(blockIdx.x) < p.dx_ctas) {
    BwdParams q = p;
    q.chunks = static_cast<int>(p.rows);
    q.chunk_rows = 1;
    q.chunk_rem = 0;
    bwd_rows<T, WT, RES, VPT, false, kTpr, false, kFromY>(q, blockIdx.x, p.dx_ctas);
  } else {
    dw_columns<T, WT, kFromY>(p, blockIdx.x - p.dx_ctas, gridDim.x - p.dx_ctas);
  }
}
template <typename T, typename WT, bool RES, int VPT, int kTpr = 0, bool kFromY = false>
__global__ void __launch_bounds__(kMaxBwdThreads, kBwdMinBlocks) rmsnorm_bwd_one_kernel(const BwdParams p) {
  one_launch_body<T, WT, RES, VPT, kTpr, kFromY>(p);
}
// The wide rows' one launch (rmsnorm_bwd_wide_kernel's CTAs and body).
template <typename T, typename WT, bool RES, bool kFromY = false>
__global__ void __launch_bounds__(kMaxBwdWideThreads, 1) rmsnorm_bwd_one_wide_kernel(const BwdParams p) {
  one_launch_body<T, WT, RES, 4, 0, kFromY>(p);
}

}  // namespace cake
