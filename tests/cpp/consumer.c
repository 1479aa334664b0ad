/* A C consumer of the cake-rmsnorm C API: forward (with residual) and backward on the CPU
 * path, checked against a double-precision reference; with CAKE_TEST_CUDA, the same on the
 * GPU through cudaMalloc'd buffers and the default stream, checked against the CPU results.
 * Exit status 0 on success. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cake_rmsnorm/cake_rmsnorm.h"

#ifdef CAKE_TEST_CUDA
#include <cuda_runtime.h>
#endif

enum { T = 37, H = 1000 };

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float uniform(unsigned* s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int fail(const char* what, cake_status_t st) {
  fprintf(stderr, "%s failed: %s (%s)\n", what, cake_rmsnorm_status_string(st), cake_rmsnorm_last_cuda_error());
  return 1;
}

typedef struct {
  uint16_t *x, *r, *w, *y, *h, *g, *dx;
  float *rstd, *dw;
  void* ws;
  size_t ws_bytes;
} Buffers;

/* The backward from y (memory-efficient): x NULL, b's y, g, w and rstd in, dx and dw out. */
static cake_rmsnorm_bwd_args from_y_args(cake_device_t dev, const Buffers* b, void* dx, float* dw) {
  cake_rmsnorm_bwd_args a;
  memset(&a, 0, sizeof a);
  a.device = dev;
  a.x_dtype = CAKE_DTYPE_BF16;
  a.w_dtype = CAKE_DTYPE_BF16;
  a.rows = T;
  a.hidden = H;
  a.g = b->g;
  a.g_row_stride = H;
  a.y = b->y;
  a.y_row_stride = H;
  a.w = b->w;
  a.rstd = b->rstd;
  a.dx = dx;
  a.dx_row_stride = H;
  a.dw = dw;
  a.workspace = b->ws;
  a.workspace_bytes = b->ws_bytes;
  return a;
}

static cake_status_t run(cake_device_t dev, const Buffers* b, void* stream) {
  cake_rmsnorm_fwd_args f;
  memset(&f, 0, sizeof f);
  f.device = dev;
  f.x_dtype = CAKE_DTYPE_BF16;
  f.w_dtype = CAKE_DTYPE_BF16;
  f.rows = T;
  f.hidden = H;
  f.x = b->x;
  f.x_row_stride = H;
  f.residual = b->r;
  f.residual_row_stride = H;
  f.w = b->w;
  f.y = b->y;
  f.y_row_stride = H;
  f.h_out = b->h;
  f.h_row_stride = H;
  f.rstd = b->rstd;
  f.eps = 1e-6f;
  cake_status_t st = cake_rmsnorm_forward(&f, stream);
  if (st != CAKE_OK) return st;
  cake_rmsnorm_bwd_args a;
  memset(&a, 0, sizeof a);
  a.device = dev;
  a.x_dtype = CAKE_DTYPE_BF16;
  a.w_dtype = CAKE_DTYPE_BF16;
  a.rows = T;
  a.hidden = H;
  a.g = b->g;
  a.g_row_stride = H;
  a.x = b->h;
  a.x_row_stride = H;
  a.w = b->w;
  a.rstd = b->rstd;
  a.dx = b->dx;
  a.dx_row_stride = H;
  a.dw = b->dw;
  a.workspace = b->ws;
  a.workspace_bytes = b->ws_bytes;
  return cake_rmsnorm_backward(&a, stream);
}

int main(void) {
  const size_t n = (size_t)T * H;
  Buffers c;
  c.x = malloc(2 * n); c.r = malloc(2 * n); c.w = malloc(2 * H); c.y = malloc(2 * n);
  c.h = malloc(2 * n); c.g = malloc(2 * n); c.dx = malloc(2 * n);
  c.rstd = malloc(4 * T); c.dw = malloc(4 * H);
  c.ws_bytes = cake_rmsnorm_backward_workspace_bytes(T, H);
  c.ws = aligned_alloc(64, (c.ws_bytes + 63) / 64 * 64);
  unsigned seed = 1;
  for (size_t i = 0; i < n; ++i) {
    c.x[i] = to_bf16(2.f * uniform(&seed));
    c.r[i] = to_bf16(uniform(&seed));
    c.g[i] = to_bf16(uniform(&seed));
  }
  for (int j = 0; j < H; ++j) c.w[j] = to_bf16(1.f + 0.1f * uniform(&seed));

  cake_status_t st = run(CAKE_DEVICE_CPU, &c, NULL);
  if (st != CAKE_OK) return fail("CPU forward/backward", st);

  /* Reference in double: h = bf16(x + r), y, rstd, dx, dw. */
  double max_y = 0, max_dx = 0, dw_err = 0, dw_norm = 0;
  double* dwr = calloc(H, sizeof(double));
  for (int t = 0; t < T; ++t) {
    double ss = 0, dot = 0;
    for (int j = 0; j < H; ++j) {
      double hv = from_bf16(c.h[t * H + j]);
      if (c.h[t * H + j] != to_bf16(from_bf16(c.x[t * H + j]) + from_bf16(c.r[t * H + j]))) {
        fprintf(stderr, "h_new mismatch at %d,%d\n", t, j);
        return 1;
      }
      ss += hv * hv;
    }
    const double rstd = 1.0 / sqrt(ss / H + 1e-6);
    if (fabs(rstd - c.rstd[t]) > 1e-5 * rstd) { fprintf(stderr, "rstd mismatch at %d\n", t); return 1; }
    for (int j = 0; j < H; ++j)
      dot += from_bf16(c.g[t * H + j]) * from_bf16(c.w[j]) * from_bf16(c.h[t * H + j]) * rstd;
    const double mean = dot / H;
    for (int j = 0; j < H; ++j) {
      const double xhat = from_bf16(c.h[t * H + j]) * rstd, gv = from_bf16(c.g[t * H + j]);
      const double y = xhat * from_bf16(c.w[j]);
      const double dx = rstd * (gv * from_bf16(c.w[j]) - mean * xhat);
      double e = fabs(from_bf16(c.y[t * H + j]) - y) / (1.0 + fabs(y));
      if (e > max_y) max_y = e;
      e = fabs(from_bf16(c.dx[t * H + j]) - dx) / (1.0 + fabs(dx));
      if (e > max_dx) max_dx = e;
      dwr[j] += gv * xhat;
    }
  }
  for (int j = 0; j < H; ++j) {
    dw_err += (c.dw[j] - dwr[j]) * (c.dw[j] - dwr[j]);
    dw_norm += dwr[j] * dwr[j];
  }
  dw_err = sqrt(dw_err / dw_norm);
  printf("cpu: max y err %.3g, max dx err %.3g, dw rel-L2 %.3g\n", max_y, max_dx, dw_err);
  if (max_y > 1e-2 || max_dx > 1e-2 || dw_err > 1e-4) return 1;

  /* The backward from y (memory-efficient): x NULL, y given, for a weight inside the rebuild
     range; dx within the same bound, dw within one BF16 rounding (the information y keeps). */
  uint16_t* dx2 = malloc(2 * n);
  float* dw2 = malloc(4 * H);
  {
    float lo = 0, hi = 0;
    st = cake_rmsnorm_y_rebuild_range(CAKE_DTYPE_BF16, H, &lo, &hi);
    if (st != CAKE_OK || lo != 0x1p-126f || !(hi > 1e36f)) return fail("y_rebuild_range", st);
    cake_rmsnorm_bwd_args a = from_y_args(CAKE_DEVICE_CPU, &c, dx2, dw2);
    st = cake_rmsnorm_backward(&a, NULL);
    if (st != CAKE_OK) return fail("CPU backward from y", st);
    a.x = c.h; /* both x and y: refused */
    if (cake_rmsnorm_backward(&a, NULL) != CAKE_ERR_INVALID_ARGUMENT) return fail("x and y both given", CAKE_OK);
    double dx_diff = 0, e2 = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = fabs(from_bf16(dx2[i]) - from_bf16(c.dx[i])) / (1.0 + fabs(from_bf16(c.dx[i])));
      if (d > dx_diff) dx_diff = d;
    }
    for (int j = 0; j < H; ++j) e2 += (dw2[j] - dwr[j]) * (dw2[j] - dwr[j]);
    e2 = sqrt(e2 / dw_norm);
    printf("cpu from y: max dx diff vs from x %.3g, dw rel-L2 %.3g\n", dx_diff, e2);
    if (dx_diff > 1e-2 || e2 > 1e-2) return 1;
  }

#ifdef CAKE_TEST_CUDA
  Buffers d;
  cudaMalloc((void**)&d.x, 2 * n); cudaMalloc((void**)&d.r, 2 * n); cudaMalloc((void**)&d.w, 2 * H);
  cudaMalloc((void**)&d.y, 2 * n); cudaMalloc((void**)&d.h, 2 * n); cudaMalloc((void**)&d.g, 2 * n);
  cudaMalloc((void**)&d.dx, 2 * n); cudaMalloc((void**)&d.rstd, 4 * T); cudaMalloc((void**)&d.dw, 4 * H);
  d.ws_bytes = c.ws_bytes;
  cudaMalloc(&d.ws, d.ws_bytes);
  cudaMemcpy(d.x, c.x, 2 * n, cudaMemcpyHostToDevice);
  cudaMemcpy(d.r, c.r, 2 * n, cudaMemcpyHostToDevice);
  cudaMemcpy(d.g, c.g, 2 * n, cudaMemcpyHostToDevice);
  cudaMemcpy(d.w, c.w, 2 * H, cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  st = run(CAKE_DEVICE_CUDA, &d, stream);
  if (st != CAKE_OK) return fail("CUDA forward/backward", st);
  uint16_t* y = malloc(2 * n);
  uint16_t* dx = malloc(2 * n);
  float* dw = malloc(4 * H);
  cudaMemcpyAsync(y, d.y, 2 * n, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(dx, d.dx, 2 * n, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(dw, d.dw, 4 * H, cudaMemcpyDeviceToHost, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) { fprintf(stderr, "CUDA sync failed\n"); return 1; }
  double gy = 0, gdx = 0, gdw = 0;
  for (size_t i = 0; i < n; ++i) {
    double e = fabs(from_bf16(y[i]) - from_bf16(c.y[i]));
    if (e > gy) gy = e;
    e = fabs(from_bf16(dx[i]) - from_bf16(c.dx[i]));
    if (e > gdx) gdx = e;
  }
  for (int j = 0; j < H; ++j) {
    double e = fabs(dw[j] - c.dw[j]) / (1e-6 + fabs(c.dw[j]));
    if (e > gdw) gdw = e;
  }
  printf("cuda vs cpu: max |y| diff %.3g, max |dx| diff %.3g, max dw rel diff %.3g\n", gy, gdx, gdw);
  if (gy > 0.05 || gdx > 0.05 || gdw > 1e-3) return 1;
  /* The backward from y on the device, from the CPU's y: the CPU's dx and dw bits. */
  {
    cudaMemcpy(d.y, c.y, 2 * n, cudaMemcpyHostToDevice);
    cudaMemcpy(d.rstd, c.rstd, 4 * T, cudaMemcpyHostToDevice);
    cake_rmsnorm_bwd_args a = from_y_args(CAKE_DEVICE_CUDA, &d, d.dx, d.dw);
    st = cake_rmsnorm_backward(&a, stream);
    if (st != CAKE_OK) return fail("CUDA backward from y", st);
    cudaMemcpyAsync(dx, d.dx, 2 * n, cudaMemcpyDeviceToHost, stream);
    cudaMemcpyAsync(dw, d.dw, 4 * H, cudaMemcpyDeviceToHost, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) { fprintf(stderr, "CUDA sync failed\n"); return 1; }
    if (memcmp(dx, dx2, 2 * n) != 0 || memcmp(dw, dw2, 4 * H) != 0) {
      fprintf(stderr, "CUDA backward from y: not the CPU's bits\n");
      return 1;
    }
    printf("cuda from y: the CPU's dx and dw bits\n");
  }
#endif
  free(dx2);
  free(dw2);
  printf("consumer OK\n");
  return 0;
}
