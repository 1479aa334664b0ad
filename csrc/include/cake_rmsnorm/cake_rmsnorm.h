/* cake-rmsnorm public C API: fused RMSNorm training forward and backward on raw pointers.
 *
 * Every function returns a status and never throws. Pointers are device pointers for
 * CAKE_DEVICE_CUDA (launched on `stream`, a cudaStream_t passed as void*) and host pointers
 * for CAKE_DEVICE_CPU (stream ignored). Row strides are in elements; the feature dimension
 * is contiguous. CUDA calls need 16-byte aligned base pointers and row strides whose byte
 * size is a multiple of 16; no call allocates or synchronises, so calls can be captured in a
 * CUDA graph. FP32 activations are served on CUDA for hidden <= 16384 (CAKE_ERR_UNSUPPORTED
 * beyond), on the CPU at every width.
 */
#ifndef CAKE_RMSNORM_H_
#define CAKE_RMSNORM_H_

#include <stddef.h>
#include <stdint.h>

#include "cake_rmsnorm_archs.h"

#if defined(_WIN32)
#define CAKE_API __declspec(dllexport)
#else
#define CAKE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CAKE_OK = 0,
  CAKE_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a bad size, stride or eps */
  CAKE_ERR_UNSUPPORTED = 2,      /* dtype combination or width not built */
  CAKE_ERR_MISALIGNED = 3,       /* CUDA path: base or row stride not 16-byte aligned */
  CAKE_ERR_WORKSPACE = 4,        /* backward workspace missing or too small */
  CAKE_ERR_NO_CUDA = 5,          /* library built without CUDA */
  CAKE_ERR_CUDA = 6,             /* a CUDA launch failed; see cake_rmsnorm_last_cuda_error */
  CAKE_ERR_ARCH = 7              /* the current device's architecture is not among the built ones
                                    (cake_rmsnorm_built_archs; nothing was launched) */
} cake_status_t;

typedef enum { CAKE_DTYPE_BF16 = 0, CAKE_DTYPE_FP16 = 1, CAKE_DTYPE_FP32 = 2 } cake_dtype_t;

typedef enum { CAKE_DEVICE_CPU = 0, CAKE_DEVICE_CUDA = 1 } cake_device_t;

/* y = cast(h * rstd * w) with h = x, or h = cast(x + residual) written to h_out. With FP32 x and a
 * 16-bit residual (residual_dtype: AMP's FP32 residual stream and the 16-bit branch added to it),
 * h = x + float(residual) in FP32, the same bits as an FP32 residual of the branch's values. */
typedef struct {
  cake_device_t device;
  cake_dtype_t x_dtype; /* BF16, FP16 or FP32 (the FP32 residual stream): x, residual, h_out, and y
                           unless y_dtype says otherwise */
  cake_dtype_t w_dtype; /* x_dtype or FP32; with FP32 x, BF16, FP16 or FP32 */
  int64_t rows;
  int64_t hidden; /* a positive multiple of 8 */
  const void* x;
  int64_t x_row_stride;
  const void* residual; /* NULL: no residual add */
  int64_t residual_row_stride;
  const void* w; /* [hidden], contiguous */
  void* y;
  int64_t y_row_stride;
  void* h_out; /* required with residual */
  int64_t h_row_stride;
  float* rstd; /* [rows], FP32 1 / sqrt(mean(h^2) + eps) */
  float eps;   /* finite, >= 0 */
  int y_dtype_set;      /* 1: y is of y_dtype; 0: of x_dtype */
  cake_dtype_t y_dtype; /* with FP32 x: BF16 or FP16 (the compute dtype, cast in the same pass) or
                           FP32; with 16-bit x: x_dtype */
  int residual_dtype_set;      /* 1: residual is of residual_dtype; 0: of x_dtype */
  cake_dtype_t residual_dtype; /* with FP32 x: BF16, FP16 or FP32 (h_out stays FP32); with 16-bit x:
                                  x_dtype */
} cake_rmsnorm_fwd_args;

/* dx = rstd * (g*w - mean(g*w*xhat) * xhat) (+ g_residual), xhat = x * rstd;
 * dw = sum over rows of g * xhat, FP32, in a fixed order that depends on (rows, hidden) alone. */
typedef struct {
  cake_device_t device;
  cake_dtype_t x_dtype;
  cake_dtype_t w_dtype;
  int64_t rows;
  int64_t hidden;
  const void* g;
  int64_t g_row_stride;
  const void* x; /* the normalised input: x, or h_new of the residual route */
  int64_t x_row_stride;
  const void* w;
  const float* rstd;
  const void* g_residual; /* NULL: none; else added into dx */
  int64_t g_residual_row_stride;
  void* dx;
  int64_t dx_row_stride;
  void* dw;         /* [hidden], contiguous, FP32 (or w_dtype with dw_in_w_dtype); NULL skips the
                       weight gradient and its work */
  void* workspace;  /* cake_rmsnorm_backward_workspace_bytes(rows, hidden) bytes, any content */
  size_t workspace_bytes;
  int max_ctas;      /* 0: the library's choice; > 0 caps the CUDA grid (dw bits do not change) */
  int accumulate_dw; /* 1: dw += the sum (one rounding of the compensated sum into dw); FP32 dw only */
  int dw_in_w_dtype; /* 1: dw is of w_dtype, the FP32 sum rounded once by the finalize (what autograd
                        hands back for a 16-bit weight, with no separate cast); 0: FP32 dw */
  int g_dtype_set;      /* 1: g is of g_dtype; 0: of x_dtype (dx and g_residual are x_dtype) */
  cake_dtype_t g_dtype; /* with FP32 x: BF16, FP16 or FP32 (y's dtype); with 16-bit x: x_dtype */
  /* The backward from the output (memory-efficient mode): x NULL and y the forward's output (of
     g's dtype), each xhat rebuilt as y * (1 / w) (one IEEE division a column) where the standard
     backward takes x * rstd; x_dtype stays the input's (dx's) dtype. Exact only for a weight whose every
     column lies in cake_rmsnorm_y_rebuild_range (the caller's rule: docs/python_api.md). */
  const void* y;
  int64_t y_row_stride;
} cake_rmsnorm_bwd_args;

/* A program's row group and CTA as numbers (the program's name spells the same). */
typedef struct {
  int threads_per_row;    /* threads of a row group */
  int groups_per_cta;     /* row groups a CTA */
  int vectors_per_thread; /* 16-byte vectors a thread (float4 with FP32 activations) */
  int ring_rows;          /* rows in a group's ring (0: the streaming forward, no ring) */
  int rows_per_group;     /* rows a streaming group takes (1 otherwise) */
} cake_rmsnorm_group;

/* The kernel instance a launch runs, as its template arguments (dispatch/kernel_key.h). */
typedef struct {
  int family;     /* 0 forward ring, 1 forward streaming, 2 backward rows, 3 backward wide-row CTAs,
                     4 backward one launch, 5 its wide-row CTAs, 6 backward warp chunks,
                     7 FP32-activation forward, 8 FP32-activation backward */
  cake_dtype_t x_dtype, y_dtype, w_dtype; /* y: y's (forward) or g's (backward) */
  int residual;
  int vectors;    /* 16-byte vectors a thread (float4 with FP32 activations) */
  int tpr;        /* a constant-width instance's threads a row; 0: the runtime width's */
  int rows;       /* rows a streaming group takes */
  int w_load;     /* 0 with x, 1 after the sum of squares, 2 at each use */
  int warp_sync;  /* 1: the instance for groups of at most a warp (no barrier) */
  int pair;       /* 1: the backward's row-pair instance */
  cake_dtype_t residual_dtype; /* the residual's dtype (x_dtype but for FP32 x with a 16-bit residual) */
  int from_y;     /* 1: the backward from y (cake_rmsnorm_bwd_args.y set: xhat = y (1 / w)) */
} cake_rmsnorm_kernel;

/* A token-count window (above, at_most] of a route and the program serving it. */
typedef struct {
  int64_t above;
  int64_t at_most; /* -1: no upper bound */
  char program[48];
  cake_rmsnorm_group group;
} cake_rmsnorm_window;

CAKE_API cake_status_t cake_rmsnorm_forward(const cake_rmsnorm_fwd_args* args, void* stream);
CAKE_API cake_status_t cake_rmsnorm_backward(const cake_rmsnorm_bwd_args* args, void* stream);

/* dw in two steps, for callers that hold the rows in several processes (sequence parallel):
 * cake_rmsnorm_backward_partials writes dx as cake_rmsnorm_backward does and, in place of dw
 * (args->dw must be NULL), the FP32 partials of `chunks` row chunks into the workspace
 * ([chunks, hidden] FP32, at least chunks * hidden * 4 bytes; chunk c holds rows
 * floor(c * rows / chunks) up to the next chunk's, summed in row order with compensation);
 * 1 <= chunks <= rows, chunks <= CAKE_RMSNORM_MAX_GIVEN_CHUNKS. cake_rmsnorm_dw_finalize sums `chunks` such partials
 * (contiguous, [chunks, hidden], 16-byte aligned on CUDA) in chunk order into dw, of dw_dtype
 * (FP32, or a 16-bit type rounded once; accumulate: dw += the sum, FP32 only). Where ranks
 * split T evenly and their count divides cake_rmsnorm_backward_chunks(T, hidden), each rank's
 * partials with chunks / ranks chunks are exactly its share of the global chunks, and the
 * finalize over all of them in rank order gives the single-process dw bitwise. */
/* The most chunks cake_rmsnorm_backward_partials and cake_rmsnorm_dw_finalize take. */
#define CAKE_RMSNORM_MAX_GIVEN_CHUNKS 4096
CAKE_API cake_status_t cake_rmsnorm_backward_partials(const cake_rmsnorm_bwd_args* args, int64_t chunks,
                                                      void* stream);
CAKE_API cake_status_t cake_rmsnorm_dw_finalize(cake_device_t device, const float* partials, int64_t chunks,
                                                int64_t hidden, void* dw, cake_dtype_t dw_dtype, int accumulate,
                                                void* stream);

/* Bytes of backward workspace for `rows` rows of width `hidden`; a workspace sized for rows R
 * serves every call of that width with rows <= R, and every call at all once
 * R >= cake_rmsnorm_backward_saturating_rows(hidden). */
CAKE_API size_t cake_rmsnorm_backward_workspace_bytes(int64_t rows, int64_t hidden);
/* The weights from which y (of y_dtype, rows of `hidden`) rebuilds xhat = y * (1 / w) to within
   one rounding of y_dtype and two of FP32, relative to xhat or to 1 (the row's RMS of xhat),
   whichever is larger: every column with lo <= |w| <= hi (a zero, tiny, huge or non-finite
   weight falls outside; hi is at most 2^126, so 1 / w stays normal).
   CAKE_ERR_INVALID_ARGUMENT for another dtype or hidden < 1. */
CAKE_API cake_status_t cake_rmsnorm_y_rebuild_range(cake_dtype_t y_dtype, int64_t hidden, float* lo, float* hi);
CAKE_API int64_t cake_rmsnorm_backward_saturating_rows(int64_t hidden);
/* The number of dw partial chunks for `rows` rows of width `hidden`: a function of the two
 * alone (never of the device or the program), so dw has the same bits on every GPU and on the
 * CPU. -1 for hidden <= 0. */
CAKE_API int64_t cake_rmsnorm_backward_chunks(int64_t rows, int64_t hidden);

/* Writes up to `capacity` windows of route ("fwd", "fwd_residual", "bwd", "bwd_residual")
 * for `hidden` on architecture `sm` (e.g. 90 for sm_90a) with `sms` SMs: the table's window
 * edges that count CTAs or elements scale with the SM count (sms 0: the count the table was fit
 * at, 132 for every shipped table); returns the number of windows, or -1 when the route or width
 * is not served. cake_rmsnorm_program_windows is the same with sms 0. */
CAKE_API int cake_rmsnorm_program_windows_sms(const char* route, int64_t hidden, int sm, int64_t sms,
                                              cake_rmsnorm_window* out, int capacity);
CAKE_API int cake_rmsnorm_program_windows(const char* route, int64_t hidden, int sm,
                                          cake_rmsnorm_window* out, int capacity);

/* What one launch runs (dispatch/resolve.h): the Launch a call resolves to for `rows` rows of
 * `hidden` on `route`, activations of x_dtype, a weight of w_dtype and y (forward) or g
 * (backward) of y_dtype, on architecture `sm` with `sms` SMs (the finalize's shape depends on
 * it, and the windows and the backward's grid and ring), dw wanted, no grid cap and no tuning
 * hook; the backward's resident CTAs are then those its launch bounds guarantee. sm 0: the
 * current CUDA device's architecture, SM count (sms is ignored) and resident CTAs, so the grids
 * are those a call there launches.
 * Returns 0, -1 when the route, width or dtype combination is not served (or sm 0 finds no
 * device), or -2 when the plan's kernel is not compiled into the library (none is, by design:
 * tests/cpp/keys_sweep.cpp walks every plan). */
typedef struct {
  char program[48];      /* 16-bit x: as cake_rmsnorm_program_windows names it, _r<rows> where a
                            streaming group takes several rows; FP32 x: fp32_t<threads a row>x<rows
                            a CTA>_v<float4 vectors a thread>_s<backward ring rows> */
  int streaming;         /* forward: 1 a streaming kernel (no ring; every FP32 forward), 0 the ring */
  int exact;             /* 1: the constant-width instance of an exact narrow group */
  int warp_sync;         /* 1: groups of at most a warp, no barrier (GroupSync::kWarp) */
  int w_load;            /* streaming forward: 0 with x, 1 after the sum of squares, 2 at each use;
                            -1 otherwise */
  int64_t chunks;        /* backward: dw partial chunks (a function of rows and hidden alone) */
  int pair_min_resident; /* backward: row pairs run where the pair kernel holds at least this many
                            CTAs on the device (0: no pair twin) */
  int pair_cta;          /* backward: the pair twin's CTA threads (0: none) */
  int finalize_cols;     /* backward: dw columns a finalize CTA takes */
  int finalize_lanes;    /* backward: lanes a finalize column sums its chunks into */
  int table_measured;    /* 1: sm's tuning table was fit by measurement (sm_90a); 0: a copy of
                            sm_90a's (sm_100a, sm_103a, sm_107a: nothing was measured there) */
  int one_launch;        /* backward: 1 where dx and dw run in one launch (no partials, no
                            finalize; the table's limit, with max_ctas 0 and dw wanted) */
  int64_t dx_ctas;       /* backward, one launch: CTAs computing dx by rows */
  int64_t dw_ctas;       /* backward, one launch: CTAs summing dw by columns */
  int warp_chunks;       /* backward: 1 where a warp takes each dw chunk, its row groups a row
                            each (narrow rows, chunks of many rows); the program's groups */
  cake_rmsnorm_group group; /* the program's row group and CTA, as numbers */
  cake_rmsnorm_kernel kernel; /* the instance the launch runs */
  int64_t grid;          /* its CTAs (a persistent grid is capped at the resident CTAs only where
                            those are known: sm 0) */
  int block;             /* threads a CTA */
  int64_t smem_bytes;    /* dynamic shared memory a CTA */
  int finalize;          /* backward: 1 where the dw finalize runs after it */
  int64_t finalize_grid; /* its CTAs (threads a CTA: finalize_cols * finalize_lanes) */
} cake_rmsnorm_plan;

CAKE_API int cake_rmsnorm_launch_plan(const char* route, int64_t hidden, int64_t rows, int sm, int sms,
                                      cake_dtype_t x_dtype, cake_dtype_t w_dtype, cake_dtype_t y_dtype,
                                      cake_rmsnorm_plan* out);
/* The Launch of this thread's last CUDA forward or backward call, in launch_plan's fields
 * (program, group, kernel, grid, block, smem_bytes, finalize, finalize_grid, finalize_cols,
 * finalize_lanes, dx_ctas); returns 0, or -1 before any such call. */
CAKE_API int cake_rmsnorm_last_launch(cake_rmsnorm_plan* out);

/* The architectures this library carries machine code for, as a bit mask: bit i is the i-th
 * of CAKE_RMSNORM_SHIPPED_ARCHS (bit 0: sm_90a, bit 1: sm_100a, bit 2: sm_103a, bit 3:
 * sm_107a); 0 in a CPU-only build. */
CAKE_API unsigned cake_rmsnorm_built_archs(void);

/* Writes up to `capacity` of the shipped architectures (CAKE_RMSNORM_SHIPPED_ARCHS, as sm
 * numbers such as 90) to `out`; returns how many there are, or -1 when capacity is negative
 * or out is NULL with capacity > 0. */
CAKE_API int cake_rmsnorm_shipped_archs(int* out, int capacity);

/* The CPU path's threads: fn(begin, end, grain, body, ctx) must run body(lo, hi, ctx) over
 * disjoint ranges covering [begin, end), each of at least `grain` (but the last), in any order and
 * on any threads, and return when all are done (OpenMP's or a thread pool's parallel-for). The
 * CPU calls then spread rows (forward), dw chunks (backward) and dw columns (finalize) over it.
 * Each row, chunk and column is one range's, summed in one order: the outputs' bits do not
 * depend on it. NULL (the default in a C or C++ host) runs every call on the calling thread; the
 * PyTorch extension installs torch's parallel-for at load, so torch.set_num_threads governs it. */
typedef void (*cake_parallel_body_fn)(int64_t lo, int64_t hi, void* ctx);
typedef void (*cake_parallel_for_fn)(int64_t begin, int64_t end, int64_t grain, cake_parallel_body_fn body,
                                     void* ctx);
CAKE_API cake_status_t cake_rmsnorm_set_cpu_parallel_for(cake_parallel_for_fn fn);

/* How this library was built, in one line: the CUDA toolkit and architectures, or CPU-only and
 * why (no toolkit found, CAKE_FORCE_CPU=1, no listed architecture). */
CAKE_API const char* cake_rmsnorm_build_info(void);

CAKE_API const char* cake_rmsnorm_status_string(cake_status_t status);
/* The text of the last CUDA error seen by this thread ("" if none). */
CAKE_API const char* cake_rmsnorm_last_cuda_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CAKE_RMSNORM_H_ */
