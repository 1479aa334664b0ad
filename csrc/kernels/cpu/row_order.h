// A row's sums in the CUDA kernels' order, so the CPU path's rstd, y, h_new and dx are the
// GPU's bits (dw already was). The order is a function of the width's row group alone
// (dispatch/programs.h hands it over: RowOrder); this file spells out what the kernels do with
// it. Torch-free, CUDA-free.
#pragma once

#include <cmath>

namespace cake {
namespace cpu {

// The row group whose order a width's kernels follow.
struct RowOrder {
  int tpr = 1;         // threads a row
  int vectors = 1;     // vectors a thread holds (8 elements; FP32 activations: 4)
  bool pairs = false;  // even and odd vectors summed apart (kernels/forward.cuh, kPairs)
  bool fp32 = false;   // the FP32-activation kernels' order (kernels/fp32_rows.cuh)
};

// Tree<N> of kernels/vec.cuh: the first N / 2 values, then the rest, then their sum.
inline float tree(const float* v, int n) { return n == 1 ? v[0] : tree(v, n / 2) + tree(v + n / 2, n - n / 2); }

// An xor butterfly over n values (a power of two), as n lanes run it: each step adds every
// value's partner at distance o, o = n / 2 .. 1. FP32 addition commutes, so partners end
// alike: lane 0's result is the tree that adds lane i + o into lane i for i < o at each step
// (n - 1 adds; the other lanes' copies are never read). Overwrites a.
inline float butterfly(float* a, int n) {
  for (int o = n / 2; o > 0; o >>= 1)
    for (int i = 0; i < o; ++i) a[i] = a[i] + a[i + o];
  return a[0];
}

// One row's sum of its vectors' leaves in the order of `o`. lf[v] is vector v's value as the
// kernels compute it (leaves_of); lf is padded with +0 up to o.vectors * o.tpr, as the kernels'
// zero-filled loads count a vector past the row. Each step runs over the group's lanes (threads)
// in one loop, so it vectorises.
class RowSum {
 public:
  static constexpr int kMaxTpr = 512;  // the widest group of any kernel
  // Leaves the padded array of a row of nvec vectors needs.
  static int padded(const RowOrder& o, int nvec) { return nvec > o.vectors * o.tpr ? nvec : o.vectors * o.tpr; }
  float operator()(const RowOrder& o, int nvec, const float* lf) {
    const int tpr = o.tpr, nk = o.vectors;
    if (o.fp32) {  // fp32_rows.cuh: a running sum over the thread's vectors, from +0
      for (int l = 0; l < tpr; ++l) a_[l] = 0.f + lf[l];
      for (int k = 1; k < nk; ++k)
        for (int l = 0; l < tpr; ++l) a_[l] = a_[l] + lf[l + k * tpr];
    } else if (o.pairs) {  // forward.cuh: the even and the odd vectors' trees
      tree(lf, tpr, 0, 2, nk / 2, a_);
      tree(lf, tpr, 1, 2, nk / 2, b_);
    } else {
      tree(lf, tpr, 0, 1, nk, a_);
      for (int v0 = nk * tpr; v0 < nvec; v0 += tpr)  // a row past the group: each lane's next vector
        for (int l = 0; l < tpr && v0 + l < nvec; ++l) a_[l] = a_[l] + lf[v0 + l];
    }
    return group(o);
  }

 private:
  // out[l] = tree() over m < n of lane l's vector k0 + m * step (each lane's part[k0 + m * step]).
  static void tree(const float* lf, int tpr, int k0, int step, int n, float* out) {
    if (n == 1) {
      for (int l = 0; l < tpr; ++l) out[l] = lf[l + k0 * tpr];
      return;
    }
    float right[kMaxTpr];
    tree(lf, tpr, k0, step, n / 2, out);
    tree(lf, tpr, k0 + (n / 2) * step, step, n - n / 2, right);
    for (int l = 0; l < tpr; ++l) out[l] = out[l] + right[l];
  }

  // reduce.cuh's group_sum / group_sum_pairs, fp32_rows.cuh's fp32_group_sum.
  float group(const RowOrder& o) {
    const int tpr = o.tpr;
    if (tpr < 32 || (tpr == 32 && !o.pairs)) {
      if (o.pairs)
        for (int l = 0; l < tpr; ++l) a_[l] = a_[l] + b_[l];
      return butterfly(a_, tpr);
    }
    const int warps = tpr / 32;
    for (int w = 0; w < warps; ++w) {
      ws_[w] = butterfly(a_ + 32 * w, 32);
      if (o.pairs) ws_[w] = ws_[w] + butterfly(b_ + 32 * w, 32);
    }
    if (o.fp32) {  // the warps' sums in warp order
      float s = ws_[0];
      for (int w = 1; w < warps; ++w) s = s + ws_[w];
      return s;
    }
    return butterfly(ws_, warps);
  }

  float a_[kMaxTpr], b_[kMaxTpr], ws_[kMaxTpr / 32];  // per thread: a sum (the even half), the odd half
};

// The kernels' leaves. 16-bit activations, vectors of 8: the forward's squares, where the
// compiler fuses each pair's f[2i]^2 + f[2i + 1]^2 into fma(f[2i], f[2i], f[2i + 1]^2) (not
// spelled out in forward.cuh, where spelling it out moved 150 of 258 schedules; the PTX of
// every forward unit is held to it by tests/test_fused_squares.py), and backward.cuh's
// gwxhat_sum (each pair one FMA, spelled out), then (p0 + p1) + (p2 + p3); FP32 activations,
// vectors of 4: fp32_rows.cuh's sum4 of rounded products.
// h holds 16-bit values, whose squares are exact in FP32 down to 2^-120: there the FMA is one
// add, and a libm fmaf call a pair (no FMA instruction in a baseline x86-64 build) is avoided.
inline float square_plus(float a, float c) {
  return std::fabs(a) >= 0x1p-60f ? a * a + c : std::fma(a, a, c);
}
inline float squares8(const float* h) {
  float pr[4];
  for (int i = 0; i < 4; ++i) pr[i] = square_plus(h[2 * i], h[2 * i + 1] * h[2 * i + 1]);
  return tree(pr, 4);
}
// The backward's leaves over the products already rounded, p = g w and q = xhat (x rstd, or
// y (1 / w) in the memory-efficient backward): backward.cuh's gwxhat_sum (each pair one FMA, then
// (p0 + p1) + (p2 + p3)) and fp32_rows.cuh's sum4 of rounded products.
inline float pairdot8(const float* p, const float* q) {
  float pr[4];
  for (int i = 0; i < 4; ++i) pr[i] = std::fma(p[2 * i], q[2 * i], p[2 * i + 1] * q[2 * i + 1]);
  return tree(pr, 4);
}
inline float dot4(const float* p, const float* q) {
  return (p[0] * q[0] + p[1] * q[1]) + (p[2] * q[2] + p[3] * q[3]);
}
inline float squares4(const float* h) { return (h[0] * h[0] + h[1] * h[1]) + (h[2] * h[2] + h[3] * h[3]); }

}  // namespace cpu
}  // namespace cake
