// Plain launch parameters shared by the CUDA and CPU kernels. Torch-free, CUDA-free.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define CAKE_HD __host__ __device__
#else
#define CAKE_HD
#endif

namespace cake {

// CTA size caps the kernels are compiled for (__launch_bounds__): 512 threads leave 128
// registers a thread for the forward's 8-vector cache, 256 leave the backward room for g, x,
// w and the dw sums of 4 vectors, spill-free.
constexpr int kMaxFwdThreads = 512;
constexpr int kMaxBwdThreads = 256;
// The dw finalize sums chunk k into lane k % kFinalizeLanes of its column, then the lanes.
constexpr int kFinalizeLanes = 8;

struct FwdParams {
  const void* x;
  int64_t x_stride;
  const void* r;  // null: no residual
  int64_t r_stride;
  const void* w;
  void* y;
  int64_t y_stride;
  void* h;  // h_new out (residual route)
  int64_t h_stride;
  float* rstd;
  int64_t rows;
  int hidden;
  float eps;
  int tpr;  // threads per row group (CUDA)
};

struct BwdParams {
  const void* g;
  int64_t g_stride;
  const void* x;
  int64_t x_stride;
  const void* w;
  const float* rstd;
  const void* gr;  // null: no g_residual
  int64_t gr_stride;
  void* dx;
  int64_t dx_stride;
  float* partials;  // [chunks, hidden] FP32 dw partials
  float* dw;        // null: skip dw
  int accumulate;   // dw += sum instead of dw = sum
  int64_t rows;
  int hidden;
  int chunks;
  int tpr;
};

// Row range [begin, end) of chunk c of `chunks` over `rows`: balanced, a function of rows.
CAKE_HD inline int64_t chunk_begin(int64_t c, int64_t rows, int64_t chunks) { return c * rows / chunks; }

}  // namespace cake
