// 16-byte vectors of eight 16-bit activations and their FP32 views. Torch-free.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

namespace cake {

constexpr int kVec = 8;  // elements per 16-byte vector of a 16-bit type

template <typename T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_float2(type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ type from_floats(float a, float b) {
    return __floats2bfloat162_rn(a, b);
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float a) { return __float2bfloat16_rn(a); }
  static __device__ __forceinline__ float rounded(float a) { return __bfloat162float(__float2bfloat16_rn(a)); }
};
template <>
struct Pair<__half> {
  using type = __half2;
  static __device__ __forceinline__ float2 to_float2(type v) { return __half22float2(v); }
  static __device__ __forceinline__ type from_floats(float a, float b) {
    return __floats2half2_rn(a, b);
  }
  static __device__ __forceinline__ __half from_float(float a) { return __float2half_rn(a); }
  static __device__ __forceinline__ float rounded(float a) { return __half2float(__float2half_rn(a)); }
};

// Read-only loads go through the non-coherent path; stores are plain.
__device__ __forceinline__ uint4 load16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ void store16(void* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }

// kBits (BF16 only): a BF16 value is the top half of its FP32 value, so one shift or one mask
// an element, where the conversion intrinsic compiles to a byte permute plus a shift for the
// upper half. The same values; used only where it was measured (forward.cuh, kLean): in
// others it moved the compiler's load schedule (docs/perf/dispatch.md#lean-row-code).
template <typename T, bool kBits = false>
__device__ __forceinline__ void unpack8(uint4 raw, float (&f)[kVec]) {
  if constexpr (kBits && std::is_same<T, __nv_bfloat16>::value) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
    return;
  }
  using P = Pair<T>;
  const typename P::type* h = reinterpret_cast<const typename P::type*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = P::to_float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&f)[kVec]) {
  using P = Pair<T>;
  uint4 raw;
  typename P::type* h = reinterpret_cast<typename P::type*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = P::from_floats(f[2 * i], f[2 * i + 1]);
  return raw;
}

// A copy the compiler cannot see through: values widened from it are widened at this use,
// not hoisted out of a loop or kept from an earlier widening, so packed 16-bit data costs
// four registers a vector instead of eight.
__device__ __forceinline__ uint4 opaque(uint4 v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
  return v;
}

// Fixed pairwise trees over a thread's values: a depth of log2(n) dependent adds instead of
// an n-long chain (at small T the warp's chain is the kernel's latency). The order is a
// function of the program's VPT alone, so a row's result still does not depend on T.
template <int N>
struct Tree {
  static __device__ __forceinline__ float sum(const float* v) {
    return Tree<N / 2>::sum(v) + Tree<N - N / 2>::sum(v + N / 2);
  }
};
template <>
struct Tree<1> {
  static __device__ __forceinline__ float sum(const float* v) { return v[0]; }
};
template <int N>
__device__ __forceinline__ float tree_sum(const float (&v)[N]) {
  return Tree<N>::sum(v);
}
// Tree<N>'s sum of M values and N - M copies of `pad`, what each of a group's vectors past the
// row adds (never folded away: v + 0 is not v for v = -0): the bits of the N-vector group.
template <int N, int M>
__device__ __forceinline__ float tree_sum_padded(const float (&v)[M], float pad) {
  static_assert(N >= M, "a group holds at most its order's vectors");
  float a[N];
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = i < M ? v[i] : pad;
  return Tree<N>::sum(a);
}

// Eight weights kept in registers in their storage type, loaded once per CTA. get() lets the
// compiler hoist the widening out of the row loop (FP32 copies held: faster in the forward);
// get_here() widens at each use (half the registers for a 16-bit weight: faster in the
// backward; docs/perf/dispatch.md#weight-widening).
template <typename WT>
struct WVec {
  uint4 a;
  __device__ __forceinline__ void load(const void* w, int col, bool valid) {
    a = valid ? load16(static_cast<const WT*>(w) + col) : make_uint4(0, 0, 0, 0);
  }
  template <bool kBits = false>
  __device__ __forceinline__ void get(float (&f)[kVec]) const { unpack8<WT, kBits>(a, f); }
  // Widened at this use: the compiler may not keep an earlier widening alive (see opaque).
  template <bool kBits = false>
  __device__ __forceinline__ void get_here(float (&f)[kVec]) const { unpack8<WT, kBits>(opaque(a), f); }
};
template <>
struct WVec<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const void* w, int col, bool valid) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + col);
    a = valid ? __ldg(p) : make_float4(0.f, 0.f, 0.f, 0.f);
    b = valid ? __ldg(p + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  template <bool kBits = false>
  __device__ __forceinline__ void get(float (&f)[kVec]) const {
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  }
  template <bool kBits = false>
  __device__ __forceinline__ void get_here(float (&f)[kVec]) const { get(f); }
};

// A thread's weights for its vectors lane, lane + tpr, ... (VPT of them), zeros past the row.
template <typename WT, int VPT>
__device__ __forceinline__ void load_weights(WVec<WT> (&wv)[VPT], const void* w, int lane, int tpr, int nvec) {
#pragma unroll
  for (int k = 0; k < VPT; ++k) wv[k].load(w, (lane + k * tpr) * kVec, lane + k * tpr < nvec);
}

}  // namespace cake
