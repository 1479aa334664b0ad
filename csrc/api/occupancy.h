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

}  // namespace cake
