// The FP32-activation kernels' row groups (fp32_rows.cuh), for the kernels and the C API's
// width check. Torch-free, CUDA-free.
#pragma once

#include <stdint.h>

#include "params.h"

namespace cake {

constexpr int kFp32Vec4 = 8;       // float4 vectors a thread holds at most
constexpr int kFp32MaxTpr = 512;   // threads a row: rows up to 8 * 4 * 512 = 16384 wide
constexpr int kFp32MinCta = 128;

// Threads a row for width `hidden`: about four vectors a thread, a power of two.
CAKE_HD inline int fp32_tpr(int hidden) {
  const int vec4 = hidden / 4;
  int tpr = 1;
  while (tpr * 4 < vec4 && tpr < kFp32MaxTpr) tpr *= 2;
  return tpr;
}
CAKE_HD inline bool fp32_width_ok(int64_t hidden) { return hidden <= int64_t(kFp32Vec4) * 4 * kFp32MaxTpr; }
CAKE_HD inline int fp32_cta(int tpr) { return tpr > kFp32MinCta ? tpr : kFp32MinCta; }

}  // namespace cake
