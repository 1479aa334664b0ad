// The GPU kernels' reduction order of a row's statistics (docs/numerics.md#reduction-order), so
// the CPU path's y, rstd, h_new and dx have the GPU's bits: each vector's leaf sum as the
// kernels spell it, the canonical tree over the vectors, and the rest of rows wider than a
// group holds added in order as the width's program does. Torch-free.
#pragma once

#include <cmath>
#include <vector>

#include "../../dispatch/plan.h"

namespace cake {
namespace cpu {

// The pairwise tree over n values, the high half first (vec.cuh, high_tree); a is overwritten.
inline float high_tree(float* a, int n) {
  int pow2 = 1;
  while (pow2 < n) pow2 *= 2;
  for (int h = pow2 / 2; h > 0; h >>= 1)
    for (int i = 0; i < h; ++i)
      if (i + h < n) a[i] = a[i] + a[i + h];
  return a[0];
}

// The xor butterfly over w lanes (reduce.cuh, xor_sum): lane 0's result; v is overwritten.
inline float butterfly(float* v, int w) {
  for (int o = w / 2; o > 0; o >>= 1)
    for (int i = 0; i < w; ++i)
      if ((i & o) == 0) v[i] = v[i ^ o] = v[i] + v[i ^ o];
  return v[0];
}

// A group of `tpr` threads, each holding `held` vectors lane + k * tpr of a row.
struct GroupShape {
  int tpr, held;
};

// The row's sum of its vectors' leaf sums s[0..n) as the group computes it: each thread's held
// leaves by the canonical tree (a masked vector's leaf is +0), the rest of a wider row added
// in order, then group_sum (reduce.cuh, fp32_group_sum): lanes across warps first, then the
// butterfly. Where the group holds the row this is the canonical tree over s, whatever the shape.
inline float group_row_sum(const float* s, int n, GroupShape g, std::vector<float>& lanes) {
  lanes.resize(static_cast<size_t>(g.tpr));
  float part[8];  // held <= 8: the widest instances (VPT 8, 8 float4 vectors)
  for (int t = 0; t < g.tpr; ++t) {
    for (int k = 0; k < g.held; ++k) {
      const int v = k * g.tpr + t;
      part[k] = v < n ? s[v] : 0.f;
    }
    float acc = high_tree(part, g.held);
    for (int v = t + g.held * g.tpr; v < n; v += g.tpr) acc = acc + s[v];
    lanes[static_cast<size_t>(t)] = acc;
  }
  if (g.tpr <= 32) return butterfly(lanes.data(), g.tpr);
  const int warps = g.tpr / 32;
  float across[32], lane32[32];
  for (int l = 0; l < 32; ++l) {
    for (int w = 0; w < warps; ++w) across[w] = lanes[static_cast<size_t>(w * 32 + l)];
    lane32[l] = high_tree(across, warps);
  }
  return butterfly(lane32, 32);
}

// The shape whose order the CPU follows: the width's program (16-bit activations: the plain
// forward's ring program, or the backward's; FP32 activations: their plan). Every program of a
// width has this order (the canonical tree where a group holds the row; one program a width
// where it does not).
inline GroupShape forward_shape(int hidden, bool fp32) {
  if (fp32) {
    const Fp32Plan f = plan_fp32_forward(hidden);
    return GroupShape{f.tpr, f.nv};
  }
  const Program p = forward_program(hidden);
  return GroupShape{p.tpr, p.vpt};
}
inline GroupShape backward_shape(int hidden, bool fp32, int g_bytes, bool residual) {
  if (fp32) {
    const Fp32Plan f = plan_fp32_backward(hidden, g_bytes, residual);
    return GroupShape{f.tpr, f.nv};
  }
  const Program p = backward_program(hidden);
  return GroupShape{p.tpr, p.vpt};
}

// One vector's leaf sums, as the kernels spell them (FMAs where they have them).
// 16-bit activations, 8 values (vec.cuh, sumsq8):
inline float sumsq8(const float* f) {
  float pr[4];
  for (int i = 0; i < 4; ++i) pr[i] = std::fma(f[2 * i], f[2 * i], f[2 * i + 1] * f[2 * i + 1]);
  return (pr[0] + pr[1]) + (pr[2] + pr[3]);
}
// ... and the backward's g*w*xhat (backward.cuh, gwxhat_sum):
inline float gwxhat_sum8(const float* g, const float* w, const float* x, float rstd) {
  float pr[4];
  for (int i = 0; i < 4; ++i) {
    const int a = 2 * i, b = 2 * i + 1;
    pr[i] = std::fma(g[a] * w[a], x[a] * rstd, (g[b] * w[b]) * (x[b] * rstd));
  }
  return (pr[0] + pr[1]) + (pr[2] + pr[3]);
}
// FP32 activations, 4 values (fp32_rows.cuh, sum4 of mul4):
inline float sumsq4(const float* f) { return (f[0] * f[0] + f[1] * f[1]) + (f[2] * f[2] + f[3] * f[3]); }
inline float gwxhat_sum4(const float* g, const float* w, const float* xh) {
  return ((g[0] * w[0]) * xh[0] + (g[1] * w[1]) * xh[1]) + ((g[2] * w[2]) * xh[2] + (g[3] * w[3]) * xh[3]);
}

}  // namespace cpu
}  // namespace cake
