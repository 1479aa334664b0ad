// RMSNorm forward and backward over FP32 activation rows: the FP32 residual stream of
// mixed-precision training (FP32 parameters under autocast). y may be FP32 or the 16-bit
// compute dtype (the cast autocast does next, done in the same pass); the gradient of y
// arrives in y's dtype; h_new, dx and g_residual are FP32; w is FP32 or 16-bit. Torch-free.
//
// One program a width (fp32_width.h): a row group of tpr threads (a power of two), each thread
// holding up to NV float4 vectors of the row (lane + k * tpr), so the reduction order, and with
// it a row's bits, depends on the width alone, never on T. The forward takes a row a group and
// issues the row's loads (x, r and, at most widths, w) before their first use. The backward's dw partials
// follow the 16-bit kernels' contract (chunks of rows, one group a chunk summing row by row in
// Kahan-compensated FP32, stored as sum - compensation), so the shared finalize and the CPU
// path give the same dw bits; a per-thread cp.async ring keeps the chunk's next row in flight
// while the current one is reduced and written, and w stays in registers across the chunk.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "compensated.h"
#include "fp32_width.h"
#include "params.h"
#include "pipeline.cuh"

namespace cake {

// Four 16-bit elements (BF16 or FP16) widened to FP32.
template <typename T>
__device__ __forceinline__ float4 widen4(uint2 raw) {
  float2 a, b;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  } else {
    a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  }
  return make_float4(a.x, a.y, b.x, b.y);
}

template <typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  if constexpr (std::is_same<T, float>::value)
    return *reinterpret_cast<const float4*>(p);
  else
    return widen4<T>(*reinterpret_cast<const uint2*>(p));
}

template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v) {
  if constexpr (std::is_same<T, float>::value) {
    *reinterpret_cast<float4*>(p) = v;
  } else {
    uint2 raw;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      *reinterpret_cast<__nv_bfloat162*>(&raw.x) = __floats2bfloat162_rn(v.x, v.y);
      *reinterpret_cast<__nv_bfloat162*>(&raw.y) = __floats2bfloat162_rn(v.z, v.w);
    } else {
      *reinterpret_cast<__half2*>(&raw.x) = __floats2half2_rn(v.x, v.y);
      *reinterpret_cast<__half2*>(&raw.y) = __floats2half2_rn(v.z, v.w);
    }
    *reinterpret_cast<uint2*>(p) = raw;
  }
}

__device__ __forceinline__ float sum4(float4 v) { return __fadd_rn(__fadd_rn(v.x, v.y), __fadd_rn(v.z, v.w)); }
__device__ __forceinline__ float4 mul4(float4 a, float4 b) {
  return make_float4(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y), __fmul_rn(a.z, b.z), __fmul_rn(a.w, b.w));
}
__device__ __forceinline__ float4 scale4(float4 a, float s) {
  return make_float4(__fmul_rn(a.x, s), __fmul_rn(a.y, s), __fmul_rn(a.z, s), __fmul_rn(a.w, s));
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

// Sum over a row group in a fixed tree: an xor butterfly within groups of at most a warp; a
// group of a whole CTA (tpr > 32) folds its warps' sums in warp order through shared memory.
// Every thread of the CTA calls it.
__device__ __forceinline__ float fp32_group_sum(float v, int tpr, float* scratch) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr <= 32) return v;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  float s = scratch[0];
  for (int i = 1; i < warps; ++i) s = __fadd_rn(s, scratch[i]);
  return s;
}

// 8 bytes global -> shared (a 16-bit g's four elements), through L1 like cp_async4.
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0)
               : "memory");
}
template <typename T>
__device__ __forceinline__ void cp_async_vec4(uint32_t dst, const T* src, bool valid) {
  if constexpr (sizeof(T) == 4)
    cp_async16(dst, src, valid);
  else
    cp_async8(dst, src, valid);
}
template <typename T>
__device__ __forceinline__ float4 lds_vec4(uint32_t addr) {
  if constexpr (sizeof(T) == 4) {
    const uint4 u = lds16(addr);
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
  } else {
    uint2 raw;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(raw.x), "=r"(raw.y) : "r"(addr));
    return widen4<T>(raw);
  }
}

// LATE_W: w loaded at its use, after the row's sum (dispatch/programs.h, ArchTable::fp32_fwd_late_w_tpr).
// TR: the residual's dtype, FP32 or a 16-bit branch (AMP's mixed add: h = x + float(r), exact
// widening, so the same bits as an FP32 residual of the same values).
template <typename TY, typename WT, bool RES, int NV, bool LATE_W, typename TR = float>
__global__ void __launch_bounds__(kFp32MaxTpr) fp32_fwd_kernel(FwdParams p) {
  __shared__ float scratch[32];
  const int tpr = p.tpr, lane = threadIdx.x % tpr, groups = blockDim.x / tpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * groups + threadIdx.x / tpr;
  const bool valid = row < p.rows;  // a group of a warp or less past the last row computes on zeros
  const int nvec = p.hidden / 4;
  const float* x = static_cast<const float*>(p.x) + (valid ? row : 0) * p.x_stride;
  const TR* r = RES ? static_cast<const TR*>(p.r) + (valid ? row : 0) * p.r_stride : nullptr;
  const WT* w = static_cast<const WT*>(p.w);
  float4 h[NV], rv[NV], wv[NV];
  // Every load first (w too, unless LATE_W): its latency then hides under x's instead of
  // following the reduction.
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int v = lane + k * tpr;
    h[k] = rv[k] = wv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (valid && v < nvec) {
      h[k] = load4(x + 4 * v);
      if (RES) rv[k] = load4(r + 4 * v);
      if (!LATE_W) wv[k] = load4(w + 4 * v);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int v = lane + k * tpr;
    if (RES) {
      h[k] = add4(h[k], rv[k]);
      if (valid && v < nvec) store4(static_cast<float*>(p.h) + row * p.h_stride + 4 * v, h[k]);
    }
    ss = __fadd_rn(ss, sum4(mul4(h[k], h[k])));
  }
  ss = fp32_group_sum(ss, tpr, scratch);
  const float rstd = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(p.hidden)), p.eps)));
  if (!valid) return;
  if (lane == 0) p.rstd[row] = rstd;
  TY* y = static_cast<TY*>(p.y) + row * p.y_stride;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int v = lane + k * tpr;
    if (v < nvec) store4(y + 4 * v, mul4(scale4(h[k], rstd), LATE_W ? load4(w + 4 * v) : wv[k]));
  }
}

// 1 / w of four columns (the backward from y; params.h, inv_weight), 0 past the row.
__device__ __forceinline__ float4 inv4(float4 w, const BwdParams& p, bool in_row) {
  if (!in_row) return make_float4(0.f, 0.f, 0.f, 0.f);
  return make_float4(inv_weight(w.x, p.y_lo, p.y_hi), inv_weight(w.y, p.y_lo, p.y_hi), inv_weight(w.z, p.y_lo, p.y_hi),
                     inv_weight(w.w, p.y_lo, p.y_hi));
}

// One row group a chunk (chunk c = group index), its rows in order: dx, and the chunk's
// Kahan-compensated dw partial of each of the thread's columns. TG: the dtype of g (y's).
// p.stages rows of the chunk in the ring (1 or 2). kFromY: the backward from y (p.x holds y, of
// g's dtype, in x's ring slots), xhat = y (1 / w), 1 / w held with w (or taken at each use).
template <typename TG, typename WT, bool RES, int NV, bool kFromY = false>
__global__ void __launch_bounds__(kFp32MaxTpr) fp32_bwd_kernel(BwdParams p) {
  extern __shared__ uint4 fp32_ring[];
  __shared__ float scratch[32];
  // w in registers for the whole chunk where it fits (NV <= 4: 16 registers beside the 32 of
  // the dw sums); the widest rows read it from L1 at each use.
  constexpr bool kHoldW = NV <= 4;
  const int tpr = p.tpr, lane = threadIdx.x % tpr, groups = blockDim.x / tpr, cta = blockDim.x;
  const int stages = p.stages;
  const int c = blockIdx.x * groups + threadIdx.x / tpr;
  const bool valid = c < p.chunks;
  const bool want_dw = p.partials != nullptr;
  const int nvec = p.hidden / 4;
  const WT* w = static_cast<const WT*>(p.w);
  const uint32_t xs = smem_addr(fp32_ring) + threadIdx.x * 16;
  const uint32_t gs = smem_addr(fp32_ring) + uint32_t(stages) * NV * cta * 16 + threadIdx.x * 4 * sizeof(TG);
  const uint32_t grs = smem_addr(fp32_ring) + uint32_t(stages) * NV * cta * (16 + 4 * sizeof(TG)) + threadIdx.x * 16;
  const uint32_t rs =
      smem_addr(fp32_ring) + uint32_t(stages) * NV * cta * (16 + 4 * sizeof(TG) + (RES ? 16 : 0)) + threadIdx.x * 4;
  float4 wv[kHoldW ? NV : 1], iwv[kHoldW && kFromY ? NV : 1], acc[NV], comp[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    acc[k] = comp[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (kHoldW) {
      const int v = lane + k * tpr;
      wv[k] = v < nvec ? load4(w + 4 * v) : acc[k];
      if constexpr (kFromY) iwv[k] = inv4(wv[k], p, v < nvec);
    }
  }
  const int64_t begin = valid ? chunk_begin(c, p) : 0, end = valid ? chunk_begin(c + 1, p) : 0;
  // Row `i` of the chunk into ring slot `slot`: one commit group a call, empty past the chunk's
  // end, so the wait counts stay uniform.
  auto issue = [&](int64_t i, int slot) {
    const int64_t row = begin + i;
    const bool live = row < end;
    const int64_t at = live ? row : 0;
    const TG* g = static_cast<const TG*>(p.g) + at * p.g_stride;
    const float* x = static_cast<const float*>(p.x) + at * p.x_stride;
    const TG* y = static_cast<const TG*>(p.x) + at * p.x_stride;  // kFromY
    const float* gr = RES ? static_cast<const float*>(p.gr) + at * p.gr_stride : nullptr;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int v = lane + k * tpr;
      const bool ok = live && v < nvec;
      const int off = ok ? 4 * v : 0;
      const uint32_t s = uint32_t(slot * NV + k) * cta;
      if constexpr (kFromY)
        cp_async_vec4(xs + s * 16, y + off, ok);
      else
        cp_async16(xs + s * 16, x + off, ok);
      cp_async_vec4(gs + s * 4 * sizeof(TG), g + off, ok);
      if (RES) cp_async16(grs + s * 16, gr + off, ok);
    }
    cp_async4(rs + uint32_t(slot) * cta * 4, p.rstd + at, live);
    cp_async_commit();
  };
  // Every group runs the longest chunk's row count (chunks differ by one row at most), idle on
  // the rows past its own: the butterfly's full-warp shuffles and the CTA barriers need every
  // thread of a warp or CTA at each call.
  const int64_t steps = p.chunk_rows + (p.chunk_rem > 0 ? 1 : 0);
  if (stages > 1) issue(0, 0);
  int slot = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const int ahead = stages > 1 ? ring_next(slot, stages) : slot;
    issue(stages > 1 ? i + 1 : i, ahead);
    if (stages > 1)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    const int64_t row = begin + i;
    const bool live = row < end;
    const float rstd = lds4f(rs + uint32_t(slot) * cta * 4);
    // g and xhat held for the second pass.
    float4 xh[NV], gv[NV];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const uint32_t s = uint32_t(slot * NV + k) * cta;
      gv[k] = lds_vec4<TG>(gs + s * 4 * sizeof(TG));
      if constexpr (!kFromY) xh[k] = scale4(lds_vec4<float>(xs + s * 16), rstd);
      const int v = lane + k * tpr;
      const float4 wk = kHoldW ? wv[k] : (v < nvec ? load4(w + 4 * v) : make_float4(0.f, 0.f, 0.f, 0.f));
      if constexpr (kFromY) xh[k] = mul4(lds_vec4<TG>(xs + s * 16), kHoldW ? iwv[k] : inv4(wk, p, v < nvec));
      dot = __fadd_rn(dot, sum4(mul4(mul4(gv[k], wk), xh[k])));
    }
    dot = fp32_group_sum(dot, tpr, scratch);
    if (live) {
      const float mean = __fdiv_rn(dot, static_cast<float>(p.hidden));
      float* dx = static_cast<float*>(p.dx) + row * p.dx_stride;
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int v = lane + k * tpr;
        if (v >= nvec) continue;
        const float4 wk = kHoldW ? wv[k] : load4(w + 4 * v);
        const float4 a = mul4(gv[k], wk), b = xh[k];
        float4 d = make_float4(__fmul_rn(rstd, __fsub_rn(a.x, __fmul_rn(mean, b.x))),
                               __fmul_rn(rstd, __fsub_rn(a.y, __fmul_rn(mean, b.y))),
                               __fmul_rn(rstd, __fsub_rn(a.z, __fmul_rn(mean, b.z))),
                               __fmul_rn(rstd, __fsub_rn(a.w, __fmul_rn(mean, b.w))));
        if (RES) d = add4(d, lds_vec4<float>(grs + uint32_t(slot * NV + k) * cta * 16));
        store4(dx + 4 * v, d);
        if (want_dw) {
          const float4 q = mul4(gv[k], b);
          kahan_add_hot(acc[k].x, comp[k].x, q.x);
          kahan_add_hot(acc[k].y, comp[k].y, q.y);
          kahan_add_hot(acc[k].z, comp[k].z, q.z);
          kahan_add_hot(acc[k].w, comp[k].w, q.w);
        }
      }
    }
    slot = ahead;
  }
  cp_async_wait<0>();  // the last (empty) group
  if (!valid || !want_dw) return;
  float* part = p.partials + static_cast<int64_t>(c) * p.hidden;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int v = lane + k * tpr;
    if (v < nvec)
      store4(part + 4 * v, make_float4(__fsub_rn(acc[k].x, comp[k].x), __fsub_rn(acc[k].y, comp[k].y),
                                       __fsub_rn(acc[k].z, comp[k].z), __fsub_rn(acc[k].w, comp[k].w)));
  }
}

}  // namespace cake
