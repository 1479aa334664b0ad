// Resident CTAs of a kernel on the current device (SM count x occupancy), cached per
// (kernel, device, block size), for persistent grids. Queries neither allocate nor touch a
// stream, so they are legal during CUDA-graph capture.
#pragma once

#include <cuda_runtime.h>

namespace cake {

// 0 when the query fails (the caller then launches the full grid).
int64_t resident_ctas(const void* kernel, int threads, size_t smem);

// SMs of the current device (0 when the query fails).
int64_t resident_sms();

// A persistent grid for `wanted` CTAs of `threads` threads and `smem` bytes: at most the
// resident CTAs (ctas_per_sm > 0: that many a SM), at most max_ctas when > 0.
inline int64_t persistent_grid(const void* kernel, int threads, size_t smem, int ctas_per_sm, int64_t wanted,
                               int64_t max_ctas = 0) {
  int64_t resident = resident_ctas(kernel, threads, smem);
  if (ctas_per_sm > 0 && resident > 0) resident = resident_sms() * ctas_per_sm;
  if (resident > 0 && wanted > resident) wanted = resident;
  if (max_ctas > 0 && wanted > max_ctas) wanted = max_ctas;
  return wanted;
}

}  // namespace cake
