// CPU forward and backward with the CUDA kernels' semantics and bits: FP32 statistics, IEEE
// arithmetic, each row's sums in the kernels' order (row_order.h), the same chunked dw
// partials and chunk-order compensated finalize. Spread over threads by rows (forward), dw
// chunks (backward) and columns (finalize) where a parallel-for is installed (parallel.h): each
// row, chunk and column is one task's, computed in one order, so the bits do not depend on the
// thread count. Torch-free.
#pragma once

#include <cmath>
#include <vector>

#include "parallel.h"

#include "../compensated.h"
#include "../params.h"
#include "avx2.h"
#include "numeric.h"
#include "row_order.h"

namespace cake {
namespace cpu {

template <typename W>
inline void load_weight(const void* w, int n, std::vector<float>& out) {
  const W* src = static_cast<const W*>(w);
  out.resize(n);
  for (int i = 0; i < n; ++i) out[i] = W::to_float(src[i]);
}

// Every vector's leaf of a row into lf: in the AVX2 clone eight lanes wide from the products'
// operands p and q (avx2.h), else by the scalar leaves leaf4 (FP32 rows) or leaf8.
template <bool kAvx2, typename Leaf4, typename Leaf8>
inline void leaves_of(const RowOrder& order, const float* p, const float* q, int nvec, float* lf, Leaf4 leaf4,
                      Leaf8 leaf8) {
#if CAKE_CPU_AVX2_LEAVES
  if constexpr (kAvx2) {
    if (order.fp32)
      dot4_avx2(p, q, nvec, lf);
    else
      pairdot8_avx2(p, q, nvec, lf);
    return;
  }
#endif
  (void)p, (void)q;
  if (order.fp32)
    for (int v = 0; v < nvec; ++v) lf[v] = leaf4(v);
  else
    for (int v = 0; v < nvec; ++v) lf[v] = leaf8(v);
}

// Rows [r0, r1) of the forward. T: x and h_new; W: w (wf: as floats); TY: y (T, or the 16-bit
// compute dtype of FP32 activations); R: the residual (T, or a 16-bit branch beside FP32 x).
// `order`: the row group whose sums the GPU kernels run (row_order.h).
template <typename T, typename W, typename TY = T, typename R = T, bool kAvx2 = false>
void forward_rows(const FwdParams& p, const RowOrder& order, const float* wf, int64_t r0, int64_t r1) {
  const int H = p.hidden;
  const int nvec = order.fp32 ? H / 4 : H / 8;
  std::vector<float> h(H), leaves(RowSum::padded(order, nvec), 0.f);  // +0 past the row
  RowSum row_sum;
  for (int64_t row = r0; row < r1; ++row) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    for (int i = 0; i < H; ++i) h[i] = T::to_float(x[i]);
    if (p.r != nullptr) {
      const R* r = static_cast<const R*>(p.r) + row * p.r_stride;
      T* hout = static_cast<T*>(p.h) + row * p.h_stride;
      for (int i = 0; i < H; ++i) {
        hout[i] = T::from_float(h[i] + R::to_float(r[i]));
        h[i] = T::to_float(hout[i]);
      }
    }
    // Every vector's leaf first, then the group's order over them.
    float* lf = leaves.data();
    leaves_of<kAvx2>(order, h.data(), h.data(), nvec, lf, [&](int v) { return squares4(&h[4 * v]); },
                     [&](int v) { return squares8(&h[8 * v]); });
    const float ss = row_sum(order, nvec, lf);
    const float mean = ss / static_cast<float>(H);
    const float rstd = 1.f / std::sqrt(mean + p.eps);
    p.rstd[row] = rstd;
    TY* y = static_cast<TY*>(p.y) + row * p.y_stride;
    for (int i = 0; i < H; ++i) y[i] = TY::from_float((h[i] * rstd) * wf[i]);
  }
}
template <typename T, typename W, typename TY = T>
void forward(const FwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  forward_rows<T, W, TY>(p, order, wf.data(), 0, p.rows);
}

// dw[i + j] for j < n from the FP32 sums: FP32 (added into dw with p.accumulate), or W where
// p.dw_w_dtype (one rounding of the sum).
template <typename W>
void write_dw(const BwdParams& p, int i, int n, const float* sum) {
  for (int j = 0; j < n; ++j) {
    if (p.dw_w_dtype) {
      static_cast<W*>(p.dw)[i + j] = W::from_float(sum[j]);
    } else {
      float* dw = static_cast<float*>(p.dw);
      dw[i + j] = p.accumulate ? dw[i + j] + sum[j] : sum[j];
    }
  }
}

// dw of columns [i0, i1) from p.chunks FP32 partials (p.partials, [chunks, hidden]) into p.dw.
template <typename W, bool kAvx2 = false>
void finalize_cols(const BwdParams& p, int i0, int i1) {
  const int H = p.hidden;
  // The GPU finalize's order: chunk k into lane k % lanes, lanes l + 32, l + 64, ... folded
  // into lane l in order, then the 32 lanes merged by the xor butterfly. The merge is
  // symmetric, so after the step of offset o lanes j and j ^ o hold equal values: lane 0's
  // result is the tree that merges lane j + o into lane j for j < o. Columns go kCols at a
  // time, each step over them in one loop (contiguous partials; it vectorises), each column
  // summed alone as ever.
  constexpr int kCols = 8;
  const int lanes = finalize_lanes(p.chunks);
  float s[kFinalizeLanesMany][kCols], c[kFinalizeLanesMany][kCols], sum[kCols];
  for (int i = i0; i < i1; i += kCols) {
    const int n = i1 - i < kCols ? i1 - i : kCols;
#if CAKE_CPU_AVX2_LEAVES
    if constexpr (kAvx2) {
      if (n == kCols) {
        finalize8_avx2(p.partials + i, H, p.chunks, lanes, kFinalizeLanes, sum);
        write_dw<W>(p, i, n, sum);
        continue;
      }
    }
#endif
    for (int l = 0; l < lanes; ++l)
      for (int j = 0; j < kCols; ++j) s[l][j] = c[l][j] = 0.f;
    for (int k = 0; k < p.chunks; ++k) {
      const float* part = p.partials + static_cast<int64_t>(k) * H + i;
      float* sl = s[k % lanes];
      float* cl = c[k % lanes];
      if (n == kCols)
        for (int j = 0; j < kCols; ++j) neumaier_add(sl[j], cl[j], part[j]);
      else
        for (int j = 0; j < n; ++j) neumaier_add(sl[j], cl[j], part[j]);
    }
    for (int l = 0; l < kFinalizeLanes; ++l)
      for (int q = 1; q < lanes / kFinalizeLanes; ++q)
        for (int j = 0; j < kCols; ++j)
          neumaier_merge(s[l][j], c[l][j], s[l + kFinalizeLanes * q][j], c[l + kFinalizeLanes * q][j]);
    for (int o = kFinalizeLanes / 2; o > 0; o >>= 1)
      for (int m = 0; m < o; ++m)
        for (int j = 0; j < kCols; ++j) neumaier_merge(s[m][j], c[m][j], s[m + o][j], c[m + o][j]);
    for (int j = 0; j < kCols; ++j) sum[j] = s[0][j] + c[0][j];
    write_dw<W>(p, i, n, sum);
  }
}
template <typename W>
void finalize(const BwdParams& p) {
  finalize_cols<W>(p, 0, p.hidden);
}

// A row's terms g * xhat into the chunk's Kahan sums of each column.
inline void kahan_products(float* __restrict s, float* __restrict c, const float* __restrict g,
                           const float* __restrict xh, int n) {
  for (int i = 0; i < n; ++i) kahan_add(s[i], c[i], g[i] * xh[i]);
}

// dx of the rows of chunks [c0, c1) and their dw partials. T: x, dx and g_residual; W: w (wf: as
// floats); TG: g (y's dtype).
template <typename T, typename W, typename TG = T, bool kAvx2 = false>
void backward_chunks(const BwdParams& p, const RowOrder& order, const float* wf, int c0, int c1) {
  const int H = p.hidden;
  const int nvec = order.fp32 ? H / 4 : H / 8;
  std::vector<float> gf(H), xh(H), gw(H), dv(H), comp(H), leaves(RowSum::padded(order, nvec), 0.f);
  RowSum row_sum;
  // The backward from y multiplies y by 1 / w (one IEEE division a column, as the CUDA kernels)
  // where w lies in p's y_rebuild_range, and by NaN elsewhere (params.h, inv_weight); the Python
  // layer saves x instead for such a weight (docs/python_api.md#memory-efficient-mode).
  std::vector<float> inv_w;
  if (p.from_y) {
    inv_w.resize(H);
    for (int i = 0; i < H; ++i) inv_w[i] = inv_weight(wf[i], p.y_lo, p.y_hi);
  }
  for (int c = c0; c < c1; ++c) {
    float* part = p.partials != nullptr ? p.partials + static_cast<int64_t>(c) * H : nullptr;
    if (part != nullptr)
      for (int i = 0; i < H; ++i) part[i] = comp[i] = 0.f;
    const int64_t end = chunk_begin(c + 1, p);
    for (int64_t row = chunk_begin(c, p); row < end; ++row) {
      const TG* g = static_cast<const TG*>(p.g) + row * p.g_stride;
      const float rstd = p.rstd[row];
      for (int i = 0; i < H; ++i) {
        gf[i] = TG::to_float(g[i]);
        gw[i] = gf[i] * wf[i];
      }
      if (p.from_y) {  // the memory-efficient backward: xhat = y (1 / w), y of g's type
        const TG* y = static_cast<const TG*>(p.x) + row * p.x_stride;
        for (int i = 0; i < H; ++i) xh[i] = TG::to_float(y[i]) * inv_w[i];
      } else {
        const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
        for (int i = 0; i < H; ++i) xh[i] = T::to_float(x[i]) * rstd;
      }
      // gwxhat8 / gwxhat4 of every vector, from the products g w and xhat (x rstd, or y (1 / w)).
      float* lf = leaves.data();
      leaves_of<kAvx2>(order, gw.data(), xh.data(), nvec, lf, [&](int v) { return dot4(&gw[4 * v], &xh[4 * v]); },
                       [&](int v) { return pairdot8(&gw[8 * v], &xh[8 * v]); });
      const float dot = row_sum(order, nvec, lf);
      const float mean = dot / static_cast<float>(H);
      T* dx = static_cast<T*>(p.dx) + row * p.dx_stride;
      const T* gr = p.gr != nullptr ? static_cast<const T*>(p.gr) + row * p.gr_stride : nullptr;
      // One loop a step, each over arrays that do not alias, so each vectorises.
      float* __restrict d = dv.data();
      const float* __restrict gwp = gw.data();
      const float* __restrict xhp = xh.data();
      // dx's roundings as the kernels': backward.cuh's dx_value, fp32_rows.cuh's.
      if (order.fp32)
        for (int i = 0; i < H; ++i) d[i] = rstd * (gwp[i] - mean * xhp[i]);
      else
        for (int i = 0; i < H; ++i) d[i] = rstd * std::fma(-mean, xhp[i], gwp[i]);
      // g_residual meets dx rounded, as eager's autograd adds them (kernels/backward.cuh).
      if (gr != nullptr)
        for (int i = 0; i < H; ++i) d[i] = T::to_float(T::from_float(d[i])) + T::to_float(gr[i]);
      for (int i = 0; i < H; ++i) dx[i] = T::from_float(d[i]);
      if (part != nullptr) kahan_products(part, comp.data(), gf.data(), xhp, H);
    }
    if (part != nullptr)
      for (int i = 0; i < H; ++i) part[i] -= comp[i];
  }
}
template <typename T, typename W, typename TG = T>
void backward(const BwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  backward_chunks<T, W, TG>(p, order, wf.data(), 0, p.chunks);
  if (p.dw != nullptr) finalize<W>(p);
}

// x86-64 hosts with AVX2 and FMA run the row code compiled for them (every call inlined into a
// clone built for that target): std::fma is then one instruction instead of a libm fmaf call
// in a baseline build, and the elementwise loops run eight lanes wide (docs/perf/runs/cpu-threads.md).
// Both round once, no product is
// contracted and no sum reassociated, so the bits are the same on either path
// (tests/cpp/fma_clone.cpp). That needs -ffp-contract=off, as every
// build of this header does (setup.py): GCC's default would fuse products in the clone, as it
// already would on targets where FMA is baseline (aarch64, -march=native).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__FMA__)
#define CAKE_CPU_FMA_CLONE 1
inline bool host_has_fma() {
  static const bool has = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  return has;
}
template <typename T, typename W, typename TY, typename R = T>
__attribute__((target("avx2,fma"), flatten)) void forward_rows_fma(const FwdParams& p, const RowOrder& order,
                                                             const float* wf, int64_t r0, int64_t r1) {
  forward_rows<T, W, TY, R, true>(p, order, wf, r0, r1);
}
template <typename W>
__attribute__((target("avx2,fma"), flatten)) void finalize_cols_fma(const BwdParams& p, int i0, int i1) {
  finalize_cols<W, true>(p, i0, i1);
}
template <typename T, typename W, typename TG>
__attribute__((target("avx2,fma"), flatten)) void backward_chunks_fma(const BwdParams& p, const RowOrder& order,
                                                                const float* wf, int c0, int c1) {
  backward_chunks<T, W, TG, true>(p, order, wf, c0, c1);
}
// Whole calls on one thread, as forward and backward (tests/cpp/fma_clone.cpp).
template <typename T, typename W, typename TY>
void forward_fma(const FwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  forward_rows_fma<T, W, TY>(p, order, wf.data(), 0, p.rows);
}
template <typename T, typename W, typename TG>
void backward_fma(const BwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  backward_chunks_fma<T, W, TG>(p, order, wf.data(), 0, p.chunks);
  if (p.dw != nullptr) finalize<W>(p);
}
#else
#define CAKE_CPU_FMA_CLONE 0
#endif

// The finalize spread over columns (a column's sum is one task's).
template <typename W>
void run_finalize(const BwdParams& p) {
  if (p.accumulate) return finalize<W>(p);  // adds into dw: each column once, whatever befalls a range
  const int64_t grain = std::max<int64_t>(8, kParallelGrainElems / std::max(p.chunks, 1));
  parallel_for(0, p.hidden, grain, [&](int64_t lo, int64_t hi) {
#if CAKE_CPU_FMA_CLONE
    if (host_has_fma()) return finalize_cols_fma<W>(p, static_cast<int>(lo), static_cast<int>(hi));
#endif
    finalize_cols<W>(p, static_cast<int>(lo), static_cast<int>(hi));
  });
}

// The entry points: rows (forward) or dw chunks (backward) spread over the installed
// parallel-for, each range run by the FMA clone where the host has the instruction, else by the
// baseline code; then the finalize over columns.
template <typename T, typename W, typename TY = T, typename R = T>
void run_forward(const FwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElems / p.hidden);
  parallel_for(0, p.rows, grain, [&](int64_t lo, int64_t hi) {
#if CAKE_CPU_FMA_CLONE
    if (host_has_fma()) return forward_rows_fma<T, W, TY, R>(p, order, wf.data(), lo, hi);
#endif
    forward_rows<T, W, TY, R>(p, order, wf.data(), lo, hi);
  });
}
template <typename T, typename W, typename TG = T>
void run_backward(const BwdParams& p, const RowOrder& order) {
  std::vector<float> wf;
  load_weight<W>(p.w, p.hidden, wf);
  const int64_t chunk_elems = std::max<int64_t>(1, p.rows / std::max(p.chunks, 1)) * p.hidden;
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElems / chunk_elems);
  parallel_for(0, p.chunks, grain, [&](int64_t lo, int64_t hi) {
#if CAKE_CPU_FMA_CLONE
    if (host_has_fma()) return backward_chunks_fma<T, W, TG>(p, order, wf.data(), int(lo), int(hi));
#endif
    backward_chunks<T, W, TG>(p, order, wf.data(), static_cast<int>(lo), static_cast<int>(hi));
  });
  if (p.dw != nullptr) run_finalize<W>(p);
}

}  // namespace cpu
}  // namespace cake
