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
// Threads a CTA: groups of a warp or less share a CTA of kFp32MinCta; a wider group is its CTA
// alone, since its sum folds every warp of the CTA (fp32_group_sum). With two 64-thread groups
// in a 128-thread CTA each row's sum took the other's too (the H 1000 and 1024 rows failed
// their FP64 checks on the H200).
CAKE_HD inline int fp32_cta(int tpr) { return tpr > 32 ? tpr : kFp32MinCta; }

}  // namespace cake
