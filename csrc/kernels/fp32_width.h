// The FP32-activation kernels' row groups (fp32_rows.cuh), for the kernels and the C API's
// width check. Torch-free, CUDA-free.
#pragma once

#include <stdint.h>

#include "params.h"

namespace cake {

constexpr int kFp32MaxVec4 = 8;    // float4 vectors a thread holds at most (the widest instance)
constexpr int kFp32MaxTpr = 512;   // threads a row: rows up to 8 * 4 * 512 = 16384 wide

// Threads a row for width `hidden`: the fewest (a power of two, at most kFp32MaxTpr) that hold
// the row in `vectors` float4 vectors a thread (the architecture table's: dispatch/programs.h).
CAKE_HD constexpr int fp32_tpr(int hidden, int vectors) {
  const int vec4 = hidden / 4;
  int tpr = 1;
  while (tpr * vectors < vec4 && tpr < kFp32MaxTpr) tpr *= 2;
  return tpr;
}
// The instance's vectors a thread (NV, a compile-time bound) for a row group of tpr: 2, 4 or 8.
CAKE_HD constexpr int fp32_nv(int hidden, int tpr) {
  const int need = (hidden / 4 + tpr - 1) / tpr;
  return need <= 2 ? 2 : need <= 4 ? 4 : 8;
}
CAKE_HD constexpr bool fp32_width_ok(int64_t hidden) { return hidden <= int64_t(kFp32MaxVec4) * 4 * kFp32MaxTpr; }
// The backward's ring: per stage, each thread's NV x vectors, NV g vectors (4 elements of TG),
// NV g_residual vectors (RES) and its row's rstd, each region thread-major so a warp's reads
// are conflict-free.
CAKE_HD constexpr size_t fp32_bwd_smem_bytes(int cta, int nv, int stages, int g_bytes, bool res) {
  return size_t(stages) * cta * (size_t(nv) * (16 + 4 * g_bytes + (res ? 16 : 0)) + 4);
}

// Threads a CTA: groups of a warp or less share a CTA of min_cta threads; a wider group is its
// CTA alone, since its sum folds every warp of the CTA (fp32_group_sum). With two 64-thread groups
// in a 128-thread CTA each row's sum took the other's too (the H 1000 and 1024 rows failed
// their FP64 checks on the H200).
CAKE_HD constexpr int fp32_cta(int tpr, int min_cta) { return tpr > 32 ? tpr : min_cta; }

static_assert(fp32_tpr(1024, 2) == 128 && fp32_nv(1024, 128) == 2 && fp32_tpr(4096, 2) == 512 &&
                  fp32_nv(4096, 512) == 2 && fp32_tpr(6144, 2) == 512 && fp32_nv(6144, 512) == 4 &&
                  fp32_nv(16384, fp32_tpr(16384, 2)) == 8 && fp32_tpr(8, 2) == 1 && fp32_nv(8, 1) == 2 &&
                  fp32_tpr(1000, 2) == 128 && fp32_tpr(1024, 4) == 64 && fp32_nv(1024, 64) == 4 &&
                  fp32_tpr(4096, 4) == 256 && fp32_tpr(6144, 4) == 512 && fp32_nv(16384, fp32_tpr(16384, 4)) == 8,
              "FP32 row groups at the measured widths");

}  // namespace cake
