// The AVX2 + FMA clone's eight-lane loops (rmsnorm_cpu.h): the per-vector leaves of a row's sums
// (row_order.h: squares8 / pairdot8, squares4 / dot4), which the group's order then folds
// (RowSum), and the dw finalize's compensated sums eight columns at a time (compensated.h). The
// same operations in the same order as the scalar code, so the same bits
// (tests/cpp/fma_clone.cpp).
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#define CAKE_CPU_AVX2_LEAVES 1
#include <immintrin.h>
#include <stdint.h>

namespace cake {
namespace cpu {

// Vectors of 8 [0, n): pr_i = fma(p[2i], q[2i], p[2i+1] q[2i+1]), leaf = (pr0 + pr1) + (pr2 + pr3):
// squares8 with p = q = h (square_plus's a * a + c, where a * a is exact, is that fma too),
// pairdot8 with p = g w and q = xhat. Four vectors an iteration: even and odd elements apart,
// the products, then the pairs' and the halves' sums.
__attribute__((target("avx2,fma"))) inline void pairdot8_avx2(const float* p, const float* q, int n, float* out) {
  int v = 0;
  for (; v + 4 <= n; v += 4) {
    const float* x = p + 8 * v;
    const float* y = q + 8 * v;
    const __m256 pa = _mm256_loadu_ps(x), pb = _mm256_loadu_ps(x + 8), pc = _mm256_loadu_ps(x + 16),
                 pd = _mm256_loadu_ps(x + 24);
    const __m256 qa = _mm256_loadu_ps(y), qb = _mm256_loadu_ps(y + 8), qc = _mm256_loadu_ps(y + 16),
                 qd = _mm256_loadu_ps(y + 24);
    // [a0 a2 b0 b2 | a4 a6 b4 b6] and the odd ones: the pr of vectors a, b as [a0 a1 b0 b1 | a2 a3 b2 b3]
    const __m256 pab = _mm256_fmadd_ps(_mm256_shuffle_ps(pa, pb, 0x88), _mm256_shuffle_ps(qa, qb, 0x88),
                                       _mm256_mul_ps(_mm256_shuffle_ps(pa, pb, 0xdd), _mm256_shuffle_ps(qa, qb, 0xdd)));
    const __m256 pcd = _mm256_fmadd_ps(_mm256_shuffle_ps(pc, pd, 0x88), _mm256_shuffle_ps(qc, qd, 0x88),
                                       _mm256_mul_ps(_mm256_shuffle_ps(pc, pd, 0xdd), _mm256_shuffle_ps(qc, qd, 0xdd)));
    // [a0+a1 b0+b1 c0+c1 d0+d1 | a2+a3 b2+b3 c2+c3 d2+d3], then the halves added: a, b, c, d.
    const __m256 s = _mm256_hadd_ps(pab, pcd);
    _mm_storeu_ps(out + v, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
  }
  for (; v < n; ++v) {
    const float* x = p + 8 * v;
    const float* y = q + 8 * v;
    float pr[4];
    for (int i = 0; i < 4; ++i) pr[i] = __builtin_fmaf(x[2 * i], y[2 * i], x[2 * i + 1] * y[2 * i + 1]);
    out[v] = (pr[0] + pr[1]) + (pr[2] + pr[3]);
  }
}

// FP32 vectors of 4 [0, n): (p0 q0 + p1 q1) + (p2 q2 + p3 q3), every product rounded: squares4
// (p = q = h) and dot4 (p = g w, q = xhat).
__attribute__((target("avx2,fma"))) inline void dot4_avx2(const float* p, const float* q, int n, float* out) {
  int v = 0;
  for (; v + 4 <= n; v += 4) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(p + 4 * v), _mm256_loadu_ps(q + 4 * v));
    const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(p + 4 * v + 8), _mm256_loadu_ps(q + 4 * v + 8));
    const __m256 s = _mm256_hadd_ps(a, b);  // [v0 01, v0 23, v2 01, v2 23 | v1 .., v3 ..]
    const __m256 t = _mm256_hadd_ps(s, s);  // [v0, v2, v0, v2 | v1, v3, v1, v3]
    out[v] = _mm256_cvtss_f32(t);
    out[v + 2] = _mm_cvtss_f32(_mm_shuffle_ps(_mm256_castps256_ps128(t), _mm256_castps256_ps128(t), 1));
    const __m128 hi = _mm256_extractf128_ps(t, 1);
    out[v + 1] = _mm_cvtss_f32(hi);
    out[v + 3] = _mm_cvtss_f32(_mm_shuffle_ps(hi, hi, 1));
  }
  for (; v < n; ++v) {
    const float* x = p + 4 * v;
    const float* y = q + 4 * v;
    out[v] = (x[0] * y[0] + x[1] * y[1]) + (x[2] * y[2] + x[3] * y[3]);
  }
}

// compensated.h's neumaier_add and neumaier_merge on eight independent columns: both of the
// scalar code's branches computed, the one it takes kept (|s| >= |v| false for a NaN, as there;
// while_finite's 0 a +0).
struct Neumaier8 {
  __m256 s, c;
};
__attribute__((target("avx2,fma"))) inline __m256 abs8(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
}
__attribute__((target("avx2,fma"))) inline __m256 two_sum_error8(__m256 s, __m256 v, __m256 t) {
  const __m256 ge = _mm256_cmp_ps(abs8(s), abs8(v), _CMP_GE_OQ);
  return _mm256_blendv_ps(_mm256_add_ps(_mm256_sub_ps(v, t), s), _mm256_add_ps(_mm256_sub_ps(s, t), v), ge);
}
__attribute__((target("avx2,fma"))) inline __m256 while_finite8(__m256 t, __m256 e) {
  return _mm256_and_ps(_mm256_cmp_ps(abs8(t), _mm256_set1_ps(3.40282346638528859811704183484516925e+38f), _CMP_LE_OQ), e);
}
__attribute__((target("avx2,fma"))) inline void neumaier_add8(Neumaier8& a, __m256 v) {
  const __m256 t = _mm256_add_ps(a.s, v);
  a.c = while_finite8(t, _mm256_add_ps(a.c, two_sum_error8(a.s, v, t)));
  a.s = t;
}
__attribute__((target("avx2,fma"))) inline void neumaier_merge8(Neumaier8& a, const Neumaier8& b) {
  const __m256 t = _mm256_add_ps(a.s, b.s);
  a.c = while_finite8(t, _mm256_add_ps(_mm256_add_ps(a.c, b.c), two_sum_error8(a.s, b.s, t)));
  a.s = t;
}

// The finalize's sums of eight columns from `chunks` partials of row stride `stride` (rmsnorm_cpu.h,
// finalize_cols): chunk k into lane k % lanes, lanes l + 32 q folded into lane l, the 32 lanes'
// butterfly; out[j] = s + c of column j.
__attribute__((target("avx2,fma"))) inline void finalize8_avx2(const float* part, int64_t stride, int chunks,
                                                             int lanes, int lanes_folded, float* out) {
  Neumaier8 acc[128];  // kFinalizeLanesMany
  for (int l = 0; l < lanes; ++l) acc[l] = Neumaier8{_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int k = 0; k < chunks; ++k) neumaier_add8(acc[k % lanes], _mm256_loadu_ps(part + k * stride));
  for (int l = 0; l < lanes_folded; ++l)
    for (int q = 1; q < lanes / lanes_folded; ++q) neumaier_merge8(acc[l], acc[l + lanes_folded * q]);
  for (int o = lanes_folded / 2; o > 0; o >>= 1)
    for (int m = 0; m < o; ++m) neumaier_merge8(acc[m], acc[m + o]);
  _mm256_storeu_ps(out, _mm256_add_ps(acc[0].s, acc[0].c));
}

}  // namespace cpu
}  // namespace cake
#endif
