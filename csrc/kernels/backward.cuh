// RMSNorm backward: dx = rstd * (g*w - mean(g*w*xhat) * xhat) (+ g_residual), xhat = x*rstd
// (or y (1 / w), the backward from y), and FP32 per-chunk dw partials; dw_finalize sums them
// in chunk order. Torch-free.
#pragma once

#include <type_traits>

#include "compensated.h"
#include "params.h"
#include "pipeline.cuh"
#include "reduce.cuh"
#include "vec.cuh"

namespace cake {

// Every rounding of dx spelled out (intrinsics are never contracted into FMAs), so a row's dx
// bits are a function of the row group's shape alone: with plain operators the compiler chose
// per instance which products to fuse, and the exact groups' kernels (the same adds in the
// same order) differed from the runtime-width ones in the last bit of a few elements in a
// thousand rows. The FMAs are where the compiler had put them (each leaf pair of the sum, the
// mean's term in dx), so the instruction mix is the one the timings were taken with.
__device__ __forceinline__ float gwxhat(float g, float w, float x, float rstd) {
  return __fmul_rn(__fmul_rn(g, w), __fmul_rn(x, rstd));
}
// The sum of g*w*xhat over one vector in Tree<8>'s order, each leaf pair one FMA.
__device__ __forceinline__ float gwxhat_sum(const float (&g)[kVec], const float (&w)[kVec], const float (&x)[kVec],
                                            float rstd) {
  float pr[kVec / 2];
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const int a = 2 * i, b = 2 * i + 1;
    pr[i] = __fmaf_rn(__fmul_rn(g[a], w[a]), __fmul_rn(x[a], rstd), gwxhat(g[b], w[b], x[b], rstd));
  }
  return tree_sum(pr);
}
// The backward from y (kFromY): xhat = y (1 / w), 1 / w a column's (params.h, inv_weight), then
// Tree<8>'s sum as gwxhat_sum's, each leaf pair one FMA: the CPU path's pairdot8 over g w and xhat.
__device__ __forceinline__ float gwxhat_sum_y(const float (&g)[kVec], const float (&w)[kVec], const float (&y)[kVec],
                                              const float (&iw)[kVec]) {
  float pr[kVec / 2];
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const int a = 2 * i, b = 2 * i + 1;
    pr[i] = __fmaf_rn(__fmul_rn(g[a], w[a]), __fmul_rn(y[a], iw[a]), __fmul_rn(__fmul_rn(g[b], w[b]), __fmul_rn(y[b], iw[b])));
  }
  return tree_sum(pr);
}
// 1 / w of eight columns (kFromY), NaN where y cannot rebuild xhat.
__device__ __forceinline__ void inv_weights(const float (&w)[kVec], const BwdParams& p, float (&iw)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) iw[j] = inv_weight(w[j], p.y_lo, p.y_hi);
}
// xhat of one element: x rstd, or (kFromY) y (1 / w).
template <bool kFromY>
__device__ __forceinline__ float xhat_of(float x, float rstd, float iw) {
  return kFromY ? __fmul_rn(x, iw) : __fmul_rn(x, rstd);
}
__device__ __forceinline__ float dx_value(float g, float w, float xhat, float mean, float rstd) {
  return __fmul_rn(rstd, __fmaf_rn(-mean, xhat, __fmul_rn(g, w)));
}
// g_residual meets dx rounded to the activation type, as eager's autograd adds the two
// gradients, so a compiled graph whose pass fuses that add has eager's bits.
template <typename T>
__device__ __forceinline__ float plus_residual(float dx, float g_residual) {
  return __fadd_rn(Pair<T>::rounded(dx), g_residual);
}
// One vector's dx (RES: d holds g_residual's on entry, added in) and dw products g * xhat.
template <typename T, bool RES>
__device__ __forceinline__ void dx_and_products(const float (&g)[kVec], const float (&w)[kVec], const float (&x)[kVec],
                                                float rstd, float mean, float (&d)[kVec], float (&prod)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float xhat = __fmul_rn(x[j], rstd);
    const float val = dx_value(g[j], w[j], xhat, mean, rstd);
    d[j] = RES ? plus_residual<T>(val, d[j]) : val;
    prod[j] = __fmul_rn(g[j], xhat);
  }
}
// A one-row call's dw (the one launch): the chunk's partial and the finalize's sum of one
// product are that product plus +0 (a -0 becomes +0), exactly.
__device__ __forceinline__ void one_row_dw(float (&prod)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) prod[j] = __fadd_rn(prod[j], 0.f);
}

// The two groups of a row pair meet (PAIR below). Runtime widths: named barrier `id`, a
// register, so ptxas reserves all 16 of the CTA's barriers (reduce.cuh says what that costs).
// Exact 32-thread groups have no other barrier: pair u of the CTA (at most 256 threads, so 4
// pairs) takes barrier u + 1 as an immediate, and ptxas reserves only those.
template <int kTpr>
__device__ __forceinline__ void pair_barrier(int id, int unit, int count) {
  if constexpr (kTpr == 32) {
    static_assert(kMaxBwdThreads / 64 <= 4, "one immediate barrier a pair");
    switch (unit) {
      case 0: asm volatile("bar.sync 1, 64;" ::: "memory"); break;
      case 1: asm volatile("bar.sync 2, 64;" ::: "memory"); break;
      case 2: asm volatile("bar.sync 3, 64;" ::: "memory"); break;
      default: asm volatile("bar.sync 4, 64;" ::: "memory"); break;
    }
  } else {
    group_barrier(id, count);
  }
}

// dw partials are per chunk: chunk c of p.chunks (a function of rows and hidden alone) covers
// rows [chunk_begin(c), chunk_begin(c + 1)) and one row group sums it, row by row in order, in
// Kahan-compensated FP32 (products and sums rounded explicitly: never contracted into FMAs),
// exactly as the CPU path does; so the dw bits depend on neither the program, the grid nor
// the device. Group j of CTA b takes chunks b * rpc + j, then every gridDim.x * rpc-th.
// Inside a chunk the rows come through the same cp.async ring as the forward's; columns past
// VPT * tpr vectors (very wide rows) are read directly, and their dw is summed in a second,
// column-wise sweep over the chunk.
// Loops stay rolled and free of integer division, as in the forward (forward.cuh says why).
// PAIR (chunks of at most two rows, groups of 32 threads or more, an even number a CTA): two
// row groups share a chunk, the low one taking its first row and the high one its second, so
// a small-T launch runs twice the groups, each with half the chain of dependent instructions.
// The high group leaves its dw products (g * xhat, rounded as always) in its own consumed ring
// slots; the low group adds them after its own row, the order of the one-group chunk: the
// same dw bits.
// kTpr > 0: an exact group of kTpr threads (programs.h, exact_group) whose VPT vectors a
// thread cover the row (hidden == kTpr * VPT * 8), as in the forward's exact groups: no masks,
// no rest loops, a butterfly of log2(kTpr) steps with neither barrier nor scratch, the mean's
// divisor a constant; BF16 widened by bit operations. The same adds in the same order: the
// same bits as the runtime-width instance.
// Eight columns of dw from their compensated sums: in w's 16-bit dtype (one rounding, as the
// finalize), or FP32, added into dw with accumulate.
template <typename WT>
__device__ __forceinline__ void store_dw8(const BwdParams& p, int v, const float (&sum)[kVec]) {
  if constexpr (!std::is_same<WT, float>::value) {
    if (p.dw_w_dtype) {
      store16(static_cast<WT*>(p.dw) + v * kVec, pack8<WT>(sum));
      return;
    }
  }
  float4* out = reinterpret_cast<float4*>(static_cast<float*>(p.dw) + v * kVec);
  float4 a = make_float4(sum[0], sum[1], sum[2], sum[3]), b = make_float4(sum[4], sum[5], sum[6], sum[7]);
  if (p.accumulate) {
    const float4 a0 = out[0], b0 = out[1];
    a = make_float4(a0.x + a.x, a0.y + a.y, a0.z + a.z, a0.w + a.w);
    b = make_float4(b0.x + b.x, b0.y + b.y, b0.z + b.z, b0.w + b.w);
  }
  out[0] = a;
  out[1] = b;
}

// The body of one CTA, `cta_index` of `grid_ctas` row CTAs; kDw false: dx only (no partials:
// the one-launch small-T kernel's row CTAs, backward_small.cuh), where a call of one row also
// writes dw (one_row_dw). kFromY: p.x holds y, and xhat = y (1 / w), 1 / w of the thread's columns
// taken once a CTA (the memory-efficient backward; runtime widths, no pairs: kernel_key.h); the
// plan gives kFromY's launches backward_smem_bytes(..., from_y) (the ring, rstd, then 1 / w).
// The one-launch kernel's row CTAs (kDw false) take kFromY too (backward_small.cuh).
// kOrder > VPT: the group's order has kOrder vectors a thread, the last kOrder - VPT always past
// the row (params.h, bwd_wide_held_vectors): held as VPT, summed as kOrder.
template <typename T, typename WT, bool RES, int VPT, bool PAIR, int kTpr, bool kDw, bool kFromY = false, int kOrder = VPT>
__device__ __forceinline__ void bwd_rows(const BwdParams& p, int cta_index, int grid_ctas) {
  static_assert(!kFromY || (!PAIR && kTpr == 0), "the backward from y: the row kernels at runtime widths");
  constexpr bool kExact = kTpr > 0;
  constexpr bool kBits = kExact && std::is_same<T, __nv_bfloat16>::value;
  constexpr GroupSync kSync = kExact ? GroupSync::kWarp : GroupSync::kNamed;
  extern __shared__ uint4 ring[];  // [stages][2 + RES][VPT][blockDim.x], rstd [stages][blockDim.x], kFromY's 1 / w
  __shared__ float scratch[kExact ? 1 : 32];  // unused (and dropped) by exact groups
  GroupScratch gs{scratch};
  constexpr int kStreams = RES ? 3 : 2;
  const RowGroupT<kTpr> rg(p.tpr);
  const int tpr = rg.tpr, rpc = rg.rpc, group = rg.group, lane = rg.lane;
  const int cta = blockDim.x, stages = p.stages;
  const int nvec = kExact ? kTpr * VPT : p.hidden / kVec;
  const int hidden = nvec * kVec;
  const bool want_dw = kDw && p.partials != nullptr;  // partials wanted (a finalize, or the caller's, sums them)
  const bool row_dw = !kDw && p.dw != nullptr && p.rows == 1;
  // Slot (stage s, stream, vector k) of this thread: base + ((s * kStreams + stream) * VPT + k) * kstep;
  // its rstd of stage s: rbase + s * cta * 4.
  const uint32_t base = smem_addr(ring) + threadIdx.x * 16u;
  const uint32_t kstep = cta * 16u;
  const uint32_t sstep = kStreams * VPT * kstep;
  const uint32_t rbase = smem_addr(ring) + stages * sstep + threadIdx.x * 4u;

  WVec<WT> wv[VPT];
  load_weights(wv, p.w, lane, tpr, nvec);
  auto w_of = [&](int k, float (&wf)[kVec]) {
    if constexpr (bwd_w_at_use(kFromY, VPT, kDw, std::is_same<WT, float>::value)) {  // w from L1 at each use: its registers go elsewhere
      WVec<WT> w2;
      w2.load(p.w, (lane + k * tpr) * kVec, lane + k * tpr < nvec);
      w2.get_here(wf);
    } else {
      wv[k].template get_here<kBits>(wf);
    }
  };
  // kFromY: 1 / w of this thread's columns, 0 past the row (zeros there). Where from_y_iw_in_smem
  // (params.h) it lives in shared memory past the rstd slots, two float4 a vector, each thread
  // reading only its own (no barrier); else in registers.
  constexpr bool kIwSmem = from_y_iw_in_smem(kFromY, VPT, RES);
  float iw[kFromY && !kIwSmem ? VPT : 1][kVec];
  const uint32_t ibase = smem_addr(ring) + stages * (sstep + cta * 4u) + threadIdx.x * 16u;
  if constexpr (kFromY) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      float wf[kVec], inv[kVec];
      wv[k].template get_here<kBits>(wf);
      inv_weights(wf, p, inv);
      if (lane + k * tpr >= nvec)
#pragma unroll
        for (int j = 0; j < kVec; ++j) inv[j] = 0.f;
      if constexpr (kIwSmem) {
        sts16f(ibase + 2 * k * kstep, inv[0], inv[1], inv[2], inv[3]);
        sts16f(ibase + (2 * k + 1) * kstep, inv[4], inv[5], inv[6], inv[7]);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) iw[k][j] = inv[j];
      }
    }
  }
  auto iw_of = [&](int k, float (&out)[kVec]) {
    if constexpr (kIwSmem) {
      const uint4 a = lds16(ibase + 2 * k * kstep), b = lds16(ibase + (2 * k + 1) * kstep);
      const uint32_t q[kVec] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = __uint_as_float(q[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = iw[kFromY ? k : 0][j];
    }
  };

  // PAIR: unit = the pair, whose two groups meet on named barrier pair_bar (past group_sum's).
  const int unit = PAIR ? group >> 1 : group, units = PAIR ? rpc >> 1 : rpc;
  const bool hi = PAIR && (group & 1);
  const int pair_bar = 1 + (tpr > 32 ? rpc : 0) + unit;
#pragma unroll 1
  for (int c = cta_index * units + unit; c < p.chunks; c += grid_ctas * units) {
    const int64_t cbegin = chunk_begin(c, p);
    const int64_t cend = chunk_begin(c + 1, p);
    // This group's rows of the chunk: all of them, or (PAIR) the first or the second.
    const int64_t split = cbegin + 1 < cend ? cbegin + 1 : cend;
    const int64_t begin = PAIR && hi ? split : cbegin;
    const int64_t end = PAIR && !hi ? split : cend;
    auto issue = [&](int64_t row, int s) {
      const bool valid = row < end;
      const int64_t r = valid ? row : begin;
      const T* g = static_cast<const T*>(p.g) + r * p.g_stride + lane * kVec;
      const T* x = static_cast<const T*>(p.x) + r * p.x_stride + lane * kVec;
      const T* gr = RES ? static_cast<const T*>(p.gr) + r * p.gr_stride + lane * kVec : nullptr;
      const uint32_t dst = base + s * sstep;
      if (valid) {  // past the chunk: an empty group, so the ring's group count stays uniform
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          const bool ok = kExact || lane + k * tpr < nvec;  // masked vectors land as zeros
          const int off = ok ? k * tpr * kVec : 0;
          cp_async16(dst + k * kstep, g + off, ok);
          cp_async16(dst + (VPT + k) * kstep, x + off, ok);
          if (RES) cp_async16(dst + (2 * VPT + k) * kstep, gr + off, ok);
        }
        cp_async4(rbase + s * cta * 4u, p.rstd + r, true);
      }
      cp_async_commit();
    };

    float acc[VPT][kVec], comp[VPT][kVec];
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[k][j] = comp[k][j] = 0.f;

#pragma unroll 1
    for (int s = 0; s + 1 < stages; ++s) issue(begin + s, s);
    int cur = 0, next = stages - 1;  // ring slots of this row and of the row issued next (no modulo)
#pragma unroll 1
    for (int64_t row = begin; row < end; ++row) {
      issue(row + stages - 1, next);
      next = ring_next(next, stages);
      cp_async_wait_ring(stages);
      const int s = cur;
      cur = ring_next(cur, stages);
      const uint32_t src = base + s * sstep;
      const T* g = static_cast<const T*>(p.g) + row * p.g_stride;
      const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
      T* dx = static_cast<T*>(p.dx) + row * p.dx_stride;
      const float rstd = lds4f(rbase + s * cta * 4u);

      float part[VPT];  // each vector's sum of g*w*xhat, then a tree over the vectors
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        float gf[kVec], xf[kVec], wf[kVec];
        unpack8<T, kBits>(lds16(src + k * kstep), gf);
        unpack8<T, kBits>(lds16(src + (VPT + k) * kstep), xf);
        w_of(k, wf);
        if constexpr (kFromY) {
          float iwk[kVec];
          iw_of(k, iwk);
          part[k] = gwxhat_sum_y(gf, wf, xf, iwk);
        } else
          part[k] = gwxhat_sum(gf, wf, xf, rstd);
      }
      float dot;
      if constexpr (kOrder > VPT) {  // the vectors past the row: zeros (cp.async's fill, w 0, 1 / w 0) times rstd
        const float z[kVec] = {};
        dot = tree_sum_padded<kOrder>(part, kFromY ? gwxhat_sum_y(z, z, z, z) : gwxhat_sum(z, z, z, rstd));
      } else {
        dot = tree_sum(part);
      }
#pragma unroll 1
      for (int v = lane + VPT * tpr; !kExact && v < nvec; v += tpr) {
        float gf[kVec], xf[kVec], wf[kVec];
        unpack8<T>(load16(g + v * kVec), gf);
        unpack8<T>(load16(x + v * kVec), xf);
        WVec<WT> w2;
        w2.load(p.w, v * kVec, true);
        w2.get_here(wf);
        if constexpr (kFromY) {
          float iw2[kVec];
          inv_weights(wf, p, iw2);
          dot += gwxhat_sum_y(gf, wf, xf, iw2);
        } else {
          dot += gwxhat_sum(gf, wf, xf, rstd);
        }
      }
      dot = group_sum<kSync>(dot, rg, gs);
      const float mean = kExact ? row_mean(dot, hidden) : __fdiv_rn(dot, static_cast<float>(p.hidden));

#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = lane + k * tpr;
        float gf[kVec], xf[kVec], wf[kVec], d[kVec];
        unpack8<T, kBits>(lds16(src + k * kstep), gf);
        unpack8<T, kBits>(lds16(src + (VPT + k) * kstep), xf);
        if (RES) unpack8<T, kBits>(lds16(src + (2 * VPT + k) * kstep), d);
        w_of(k, wf);
        float iwk[kVec];
        if constexpr (kFromY) iw_of(k, iwk);
        // dx_and_products' arithmetic, spelled out with the Kahan add in the same loop: calling
        // it moves this kernel's instruction order (docs/perf/dispatch.md#bwd-inline-products).
        float prod[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float xhat = xhat_of<kFromY>(xf[j], rstd, kFromY ? iwk[j] : 0.f);
          const float val = dx_value(gf[j], wf[j], xhat, mean, rstd);
          d[j] = RES ? plus_residual<T>(val, d[j]) : val;
          prod[j] = __fmul_rn(gf[j], xhat);
          if (!hi) kahan_add_hot(acc[k][j], comp[k][j], prod[j]);
        }
        if (hi) {  // into this vector's g and x slots, read above (stage 0: one row a chunk)
          sts16f(src + k * kstep, prod[0], prod[1], prod[2], prod[3]);
          sts16f(src + (VPT + k) * kstep, prod[4], prod[5], prod[6], prod[7]);
        }
        if (kExact || v < nvec) {
          store16(dx + v * kVec, pack8<T>(d));
          if (!kDw && row_dw) {
            one_row_dw(prod);
            store_dw8<WT>(p, v, prod);
          }
        }
      }
#pragma unroll 1
      for (int v = lane + VPT * tpr; !kExact && v < nvec; v += tpr) {
        float gf[kVec], xf[kVec], wf[kVec], d[kVec];
        unpack8<T>(load16(g + v * kVec), gf);
        unpack8<T>(load16(x + v * kVec), xf);
        WVec<WT> w2;
        w2.load(p.w, v * kVec, true);
        w2.get_here(wf);
        if (RES) unpack8<T>(load16(static_cast<const T*>(p.gr) + row * p.gr_stride + v * kVec), d);
        float iw2[kVec];
        if constexpr (kFromY) inv_weights(wf, p, iw2);
        float prod[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float xhat = xhat_of<kFromY>(xf[j], rstd, kFromY ? iw2[j] : 0.f);
          const float val = dx_value(gf[j], wf[j], xhat, mean, rstd);
          d[j] = RES ? plus_residual<T>(val, d[j]) : val;
          prod[j] = __fadd_rn(__fmul_rn(gf[j], xhat), 0.f);  // one_row_dw's product: stored by a one-row call only
        }
        store16(dx + v * kVec, pack8<T>(d));
        if (!kDw && row_dw) store_dw8<WT>(p, v, prod);
      }
    }
    // Copies of one thread complete in no set order: drain before the next chunk's prologue
    // refills the slots (only empty groups are pending here, so this costs nothing).
    cp_async_wait<0>();
    if (!want_dw) continue;
    if (PAIR) {
      if (tpr >= 32) pair_barrier<kTpr>(pair_bar, unit, 2 * tpr);  // the high group's products are in place
      if (!hi && split < cend) {
        const uint32_t hsrc = base + tpr * 16u;  // the high group's thread of this lane, stage 0
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          const uint4 a = lds16(hsrc + k * kstep), b = lds16(hsrc + (VPT + k) * kstep);
          const float q[kVec] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z),
                                 __uint_as_float(a.w), __uint_as_float(b.x), __uint_as_float(b.y),
                                 __uint_as_float(b.z), __uint_as_float(b.w)};
#pragma unroll
          for (int j = 0; j < kVec; ++j) kahan_add_hot(acc[k][j], comp[k][j], q[j]);
        }
      }
      if (tpr >= 32) pair_barrier<kTpr>(pair_bar, unit, 2 * tpr);  // read: the high group may refill
      if (hi) continue;
    }
    float* part = p.partials + static_cast<int64_t>(c) * p.hidden;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = lane + k * tpr;
      if (kExact || v < nvec) {
        float4* out = reinterpret_cast<float4*>(part + v * kVec);
        out[0] = make_float4(__fsub_rn(acc[k][0], comp[k][0]), __fsub_rn(acc[k][1], comp[k][1]),
                             __fsub_rn(acc[k][2], comp[k][2]), __fsub_rn(acc[k][3], comp[k][3]));
        out[1] = make_float4(__fsub_rn(acc[k][4], comp[k][4]), __fsub_rn(acc[k][5], comp[k][5]),
                             __fsub_rn(acc[k][6], comp[k][6]), __fsub_rn(acc[k][7], comp[k][7]));
      }
    }
    // The rest of a very wide row: column-wise over the chunk (g and x of these columns are
    // read a second time; only rows wider than VPT * tpr vectors get here).
#pragma unroll 1
    for (int v = lane + VPT * tpr; !kExact && v < nvec; v += tpr) {
      float a[kVec], e[kVec], iw2[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) a[j] = e[j] = 0.f;
      if constexpr (kFromY) {
        float wf[kVec];
        WVec<WT> w2;
        w2.load(p.w, v * kVec, true);
        w2.get_here(wf);
        inv_weights(wf, p, iw2);
      }
#pragma unroll 1
      for (int64_t row = cbegin; row < cend; ++row) {  // PAIR: the low group sweeps both rows
        float gf[kVec], xf[kVec];
        const float rstd = kFromY ? 0.f : p.rstd[row];
        unpack8<T>(load16(static_cast<const T*>(p.g) + row * p.g_stride + v * kVec), gf);
        unpack8<T>(load16(static_cast<const T*>(p.x) + row * p.x_stride + v * kVec), xf);
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          kahan_add_hot(a[j], e[j], __fmul_rn(gf[j], xhat_of<kFromY>(xf[j], rstd, kFromY ? iw2[j] : 0.f)));
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) part[v * kVec + j] = __fsub_rn(a[j], e[j]);
    }
  }
  cp_async_wait<0>();  // no copy outlives the CTA
}

template <typename T, typename WT, bool RES, int VPT, bool PAIR, int kTpr = 0, bool kFromY = false>
__global__ void __launch_bounds__(kMaxBwdThreads, kBwdMinBlocks) rmsnorm_bwd_kernel(const BwdParams p) {
  pdl_launch_dependents();  // the finalize may take its SM slots now; it waits for our memory
  bwd_rows<T, WT, RES, VPT, PAIR, kTpr, true, kFromY>(p, blockIdx.x, gridDim.x);
}

// The wide rows' instance (params.h, kMaxBwdWideThreads): CTAs of up to 512 threads, VPT 4,
// the same body. A 512-thread group holds rows up to 16384 elements in its ring, where a
// 256-thread group read the columns past 8192 directly, twice, and swept them again for dw.
// VPT 3: rows up to 12288, held as 3 vectors a thread, summed as 4 (bwd_wide_held_vectors).
template <typename T, typename WT, bool RES, bool kFromY = false, int VPT = kBwdWideVpt>
__global__ void __launch_bounds__(kMaxBwdWideThreads, 1) rmsnorm_bwd_wide_kernel(const BwdParams p) {
  pdl_launch_dependents();
  bwd_rows<T, WT, RES, VPT, false, 0, true, kFromY, kBwdWideVpt>(p, blockIdx.x, gridDim.x);
}

// Adds this lane's chunks k, k + LANES, ... of one column in order, BATCH loads at a time,
// while a whole batch remains; leaves k at the first chunk not added.
template <int BATCH, int LANES>
__device__ __forceinline__ void add_chunk_batches(const float* src, int hidden, int chunks, int& k, float& s,
                                                  float& c) {
#pragma unroll 1
  for (; k + (BATCH - 1) * LANES < chunks; k += BATCH * LANES) {
    float v[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) v[u] = src[static_cast<int64_t>(k + u * LANES) * hidden];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) neumaier_add(s, c, v[u]);
  }
}

// dw[col] = the chunk partials summed in a fixed order: chunk k goes to lane k % LANES of the
// column, each lane sums its chunks in order, lanes l + 32, l + 64, ... are folded into lane l
// in order, then the 32 lanes are merged by an xor butterfly; Neumaier compensation
// throughout, one rounding at the end. The order depends on (chunks, hidden) alone (LANES is
// finalize_lanes(chunks)); the CPU path replays it.
// A CTA takes COLS columns (thread t: column t % COLS, lane t / COLS), so narrow rows spread
// over more SMs: COLS 32 reads whole 128-byte rows of partials; COLS 8 gives H 512 64 CTAs
// instead of 16, where a few SMs had to pull megabytes of partials at small-to-mid T. Both
// sum the same chunks in the same order: the same bits.
// 32 registers a thread (2048 threads an SM) let the finalize's CTAs sit beside the main
// kernel's while they wait (PDL; docs/perf/dispatch.md#finalize-kernel).
// OutT: FP32, or the 16-bit weight's own type, so autograd gets dw in w's dtype from this
// kernel (one rounding of the compensated sum) instead of from a separate cast kernel.
template <int COLS, int LANES, typename OutT>
__global__ void __launch_bounds__(COLS * LANES, 2048 / (COLS * LANES))
    dw_finalize_kernel(const float* __restrict__ partials, int chunks, int hidden, OutT* __restrict__ dw,
                       int accumulate) {
  static_assert(LANES >= 32 && LANES % 32 == 0, "whole warps of lanes: at least one warp a column to merge it");
  __shared__ float sums[LANES][COLS + 1], comps[LANES][COLS + 1];  // padded: conflict-free transpose
  pdl_wait_primary();  // launched as a dependent of the main kernel: its partials are visible
  const int cl = threadIdx.x % COLS, lane = threadIdx.x / COLS;
  const int col = blockIdx.x * COLS + cl;
  float s = 0.f, c = 0.f;
  if (col < hidden) {
    // Batches of 16, then 4, then single chunks, each batch's unpredicated loads in flight
    // before its ordered adds (predicated ones kept only four in flight in 32 registers;
    // docs/perf/dispatch.md#finalize-kernel).
    int k = lane;
    add_chunk_batches<16, LANES>(partials + col, hidden, chunks, k, s, c);
    add_chunk_batches<4, LANES>(partials + col, hidden, chunks, k, s, c);
    add_chunk_batches<1, LANES>(partials + col, hidden, chunks, k, s, c);
  }
  sums[lane][cl] = s;
  comps[lane][cl] = c;
  __syncthreads();
  // Transposed: warp w (one a column) folds its column's lanes into 32 and merges those with
  // an xor butterfly (a fixed tree, 5 steps instead of a 32-long chain).
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (w >= COLS) return;  // whole warps: the butterfly's full-mask shuffles stay valid
  s = sums[l][w];
  c = comps[l][w];
#pragma unroll
  for (int q = 1; q < LANES / 32; ++q) neumaier_merge(s, c, sums[l + 32 * q][w], comps[l + 32 * q][w]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    neumaier_merge(s, c, __shfl_xor_sync(0xffffffffu, s, o), __shfl_xor_sync(0xffffffffu, c, o));
  const int out = blockIdx.x * COLS + w;
  if (l == 0 && out < hidden) {
    const float sum = s + c;
    if constexpr (std::is_same<OutT, float>::value) {
      dw[out] = accumulate ? dw[out] + sum : sum;
    } else {
      dw[out] = Pair<OutT>::from_float(sum);  // accumulate is FP32-only (the C API refuses it)
    }
  }
}

}  // namespace cake
