// Compensated FP32 sums shared by the CUDA kernels and the CPU path, so both round the same
// way (only additions: nothing for FMA contraction to fuse). Torch-free, CUDA-free.
#pragma once

#include <math.h>

#include "params.h"

namespace cake {

// A compensation term while the sum t is finite, else 0: once a sum overflows or meets an Inf
// or NaN it carries IEEE's result alone (inf - inf in the error term would turn an Inf into a
// NaN and spread it), as an uncompensated sum would. Finite sums keep their bits.
CAKE_HD inline float while_finite(float t, float e) { return fabsf(t) <= 3.40282346638528859811704183484516925e+38f ? e : 0.f; }

// Kahan: s + c carries the running sum to about twice FP32's precision (c holds the negated
// error), so a chunk's dw partial does not grow an error with its row count.
CAKE_HD inline void kahan_add(float& s, float& c, float v) {
  const float y = v - c;
  const float t = s + y;
  c = while_finite(t, (t - s) - y);
  s = t;
}

// kahan_add without the finite-range guard, for the GPU backward's per-row dw sums: the same
// bits for finite terms, an Inf term turns the column NaN (the guard costs backward time there;
// docs/refusals.md, docs/perf/dispatch.md#inf-guard).
CAKE_HD inline void kahan_add_hot(float& s, float& c, float v) {
  const float y = v - c;
  const float t = s + y;
  c = (t - s) - y;
  s = t;
}

// Neumaier: c accumulates every addition's rounding error (the sum is s + c).
CAKE_HD inline void neumaier_add(float& s, float& c, float v) {
  const float t = s + v;
  c = while_finite(t, c + (fabsf(s) >= fabsf(v) ? (s - t) + v : (v - t) + s));
  s = t;
}

// Merges two Neumaier pairs. Symmetric in its arguments (the same bits either way round), so
// the two partners of a butterfly step end with equal values.
CAKE_HD inline void neumaier_merge(float& s, float& c, float s2, float c2) {
  const float t = s + s2;
  const float e = fabsf(s) >= fabsf(s2) ? (s - t) + s2 : (s2 - t) + s;
  c = while_finite(t, (c + c2) + e);
  s = t;
}

}  // namespace cake
