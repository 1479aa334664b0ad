// The per-vector leaves of a row's sums (row_order.h: squares8 / gwxhat8, squares4 / gwxhat4)
// eight lanes wide, for the AVX2 + FMA clone of the row code (rmsnorm_cpu.h): the same
// operations in the same order, so the same bits (tests/cpp/fma_clone.cpp). The leaves of a
// row are computed first; the group's order then folds them (RowSum).
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#define CAKE_CPU_AVX2_LEAVES 1
#include <immintrin.h>

namespace cake {
namespace cpu {

// Vectors of 8 [0, n): pr_i = fma(p[2i], q[2i], p[2i+1] q[2i+1]), leaf = (pr0 + pr1) + (pr2 + pr3):
// squares8 with p = q = h (square_plus's a * a + c, where a * a is exact, is that fma too),
// gwxhat8 with p = g w and q = x rstd. Four vectors an iteration: even and odd elements apart,
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
// (p = q = h) and gwxhat4 (p = g w, q = x rstd).
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

}  // namespace cpu
}  // namespace cake
#endif
