// The exported C API: argument checks, program selection and the CPU or CUDA launch.
// Never throws: every failure is a status.
#include "cake_rmsnorm/cake_rmsnorm.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "../dispatch/programs.h"
#include "../dispatch/windows.h"
#include "../kernels/cpu/rmsnorm_cpu.h"
#include "../kernels/params.h"
#include "tuning.h"
#if CAKE_WITH_CUDA
#include "../kernels/fp32_width.h"
#include "launch.h"
#endif

namespace {

thread_local std::string g_last_cuda_error;
// The architecture whose tables a call uses: the current device's; the CPU path has no device,
// and takes sm_90's.
[[maybe_unused]] int call_sm() {
#if CAKE_WITH_CUDA
  return cake::device_sm();
#else
  return 90;
#endif
}

bool is_16bit(cake_dtype_t t) { return t == CAKE_DTYPE_BF16 || t == CAKE_DTYPE_FP16; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool stride_ok(int64_t stride, int64_t hidden) { return stride >= hidden; }

bool is_dtype(int t) { return t == CAKE_DTYPE_BF16 || t == CAKE_DTYPE_FP16 || t == CAKE_DTYPE_FP32; }
int dtype_bytes(cake_dtype_t t) { return t == CAKE_DTYPE_FP32 ? 4 : 2; }

// x (and residual, h_new, dx, g_residual) of x; y or g of `other`: 16-bit x takes its own
// dtype throughout; FP32 x (the mixed-precision residual stream) any 16-bit or FP32 y / g / w.
cake_status_t check_types(cake_dtype_t x, cake_dtype_t w, int64_t rows, int64_t hidden,
                          cake_dtype_t other = CAKE_DTYPE_FP32, bool other_set = false) {
  if (!is_dtype(x) || !is_dtype(w) || !is_dtype(other)) return CAKE_ERR_UNSUPPORTED;
  if (is_16bit(x) && ((w != x && w != CAKE_DTYPE_FP32) || (other_set && other != x))) return CAKE_ERR_UNSUPPORTED;
  if (rows < 0 || hidden <= 0 || hidden % 8 != 0 || hidden > (int64_t(1) << 30))
    return CAKE_ERR_INVALID_ARGUMENT;
  return CAKE_OK;
}

[[maybe_unused]] cake_status_t cuda_status(int code) {
#if CAKE_WITH_CUDA
  if (code == 0) return CAKE_OK;
  g_last_cuda_error = cake::cuda_error_string(code);
  return CAKE_ERR_CUDA;
#else
  (void)code;
  return CAKE_ERR_NO_CUDA;
#endif
}

// fn(x type, w type, y-or-g type) of the CPU kernels.
template <typename Fn>
void with_types(cake_dtype_t x, cake_dtype_t w, cake_dtype_t other, Fn&& fn) {
  using namespace cake::cpu;
  auto with_w = [&](auto xt, auto ot) {
    if (w == CAKE_DTYPE_FP32) fn(xt, F32{}, ot);
    else if (w == CAKE_DTYPE_BF16) fn(xt, BF16{}, ot);
    else fn(xt, FP16{}, ot);
  };
  if (x == CAKE_DTYPE_BF16) {
    with_w(BF16{}, BF16{});
  } else if (x == CAKE_DTYPE_FP16) {
    with_w(FP16{}, FP16{});
  } else if (other == CAKE_DTYPE_BF16) {
    with_w(F32{}, BF16{});
  } else if (other == CAKE_DTYPE_FP16) {
    with_w(F32{}, FP16{});
  } else {
    with_w(F32{}, F32{});
  }
}

// CUDA rows of a 16-byte vector kernel: the row stride in bytes, for the element size, is a
// multiple of 16.
[[maybe_unused]] bool stride_aligned(int64_t stride, cake_dtype_t t) { return (stride * dtype_bytes(t)) % 16 == 0; }

}  // namespace

extern "C" {

cake_status_t cake_rmsnorm_forward(const cake_rmsnorm_fwd_args* a, void* stream) {
  if (a == nullptr) return CAKE_ERR_INVALID_ARGUMENT;
  if (a->y_dtype_set != 0 && a->y_dtype_set != 1) return CAKE_ERR_INVALID_ARGUMENT;
  const cake_dtype_t yd = a->y_dtype_set ? a->y_dtype : a->x_dtype;
  cake_status_t st = check_types(a->x_dtype, a->w_dtype, a->rows, a->hidden, yd, a->y_dtype_set == 1);
  if (st != CAKE_OK) return st;
  if (!std::isfinite(a->eps) || a->eps < 0.f) return CAKE_ERR_INVALID_ARGUMENT;
  if (a->rows == 0) return CAKE_OK;
  const bool res = a->residual != nullptr;
  if (a->x == nullptr || a->w == nullptr || a->y == nullptr || a->rstd == nullptr ||
      (res && a->h_out == nullptr))
    return CAKE_ERR_INVALID_ARGUMENT;
  if (!stride_ok(a->x_row_stride, a->hidden) || !stride_ok(a->y_row_stride, a->hidden) ||
      (res && (!stride_ok(a->residual_row_stride, a->hidden) ||
               !stride_ok(a->h_row_stride, a->hidden))))
    return CAKE_ERR_INVALID_ARGUMENT;

  cake::FwdParams p{};
  p.x = a->x; p.x_stride = a->x_row_stride;
  p.r = a->residual; p.r_stride = a->residual_row_stride;
  p.w = a->w;
  p.y = a->y; p.y_stride = a->y_row_stride;
  p.h = a->h_out; p.h_stride = a->h_row_stride;
  p.rstd = a->rstd;
  p.rows = a->rows;
  p.hidden = static_cast<int>(a->hidden);
  p.eps = a->eps;

  if (a->device == CAKE_DEVICE_CPU) {
    with_types(a->x_dtype, a->w_dtype, yd, [&](auto t, auto w, auto y) {
      cake::cpu::forward<decltype(t), decltype(w), decltype(y)>(p);
    });
    return CAKE_OK;
  }
  if (a->device != CAKE_DEVICE_CUDA) return CAKE_ERR_INVALID_ARGUMENT;
#if CAKE_WITH_CUDA
  const cake_dtype_t xd = a->x_dtype;
  if (xd == CAKE_DTYPE_FP32 && !cake::fp32_width_ok(a->hidden)) return CAKE_ERR_UNSUPPORTED;
  if (!aligned16(a->x) || !aligned16(a->w) || !aligned16(a->y) || !stride_aligned(a->x_row_stride, xd) ||
      !stride_aligned(a->y_row_stride, yd) ||
      (res && (!aligned16(a->residual) || !aligned16(a->h_out) || !stride_aligned(a->residual_row_stride, xd) ||
               !stride_aligned(a->h_row_stride, xd))))
    return CAKE_ERR_MISALIGNED;
  if (xd == CAKE_DTYPE_FP32) return cuda_status(cake::launch_fp32_forward(p, yd, a->w_dtype, stream));
  cake::Program prog;
  const int sm = call_sm();
  if (!cake::program_for_call(res ? cake::Route::kFwdResidual : cake::Route::kFwd, p.hidden, p.rows, sm, &prog))
    return CAKE_ERR_INVALID_ARGUMENT;
  const bool w32 = a->w_dtype == CAKE_DTYPE_FP32;
  const int code = a->x_dtype == CAKE_DTYPE_BF16 ? cake::launch_forward_bf16(p, w32, prog, sm, stream)
                                                 : cake::launch_forward_fp16(p, w32, prog, sm, stream);
  return cuda_status(code);
#else
  (void)stream;
  return CAKE_ERR_NO_CUDA;
#endif
}

cake_status_t cake_rmsnorm_backward(const cake_rmsnorm_bwd_args* a, void* stream) {
  if (a == nullptr) return CAKE_ERR_INVALID_ARGUMENT;
  if (a->g_dtype_set != 0 && a->g_dtype_set != 1) return CAKE_ERR_INVALID_ARGUMENT;
  const cake_dtype_t gd = a->g_dtype_set ? a->g_dtype : a->x_dtype;
  cake_status_t st = check_types(a->x_dtype, a->w_dtype, a->rows, a->hidden, gd, a->g_dtype_set == 1);
  if (st != CAKE_OK) return st;
  if (a->max_ctas < 0) return CAKE_ERR_INVALID_ARGUMENT;
  if (a->dw_in_w_dtype != 0 && a->dw_in_w_dtype != 1) return CAKE_ERR_INVALID_ARGUMENT;
  // A 16-bit dw is written once from the FP32 sum: nothing to accumulate into at FP32 precision.
  const bool dw16 = a->dw_in_w_dtype == 1 && a->w_dtype != CAKE_DTYPE_FP32;
  if (dw16 && a->accumulate_dw) return CAKE_ERR_INVALID_ARGUMENT;
  const size_t dw_bytes = static_cast<size_t>(a->hidden) * (dw16 ? 2 : 4);
  const bool want_dw = a->dw != nullptr;
  const bool res = a->g_residual != nullptr;
  if (a->rows > 0) {
    if (a->g == nullptr || a->x == nullptr || a->w == nullptr || a->rstd == nullptr ||
        a->dx == nullptr)
      return CAKE_ERR_INVALID_ARGUMENT;
    if (!stride_ok(a->g_row_stride, a->hidden) || !stride_ok(a->x_row_stride, a->hidden) ||
        !stride_ok(a->dx_row_stride, a->hidden) ||
        (res && !stride_ok(a->g_residual_row_stride, a->hidden)))
      return CAKE_ERR_INVALID_ARGUMENT;
  }
  const size_t need = cake_rmsnorm_backward_workspace_bytes(a->rows, a->hidden);
  if (want_dw && a->rows > 0 &&
      (a->workspace == nullptr || a->workspace_bytes < need || !aligned16(a->workspace)))
    return CAKE_ERR_WORKSPACE;

  cake::BwdParams p{};
  p.g = a->g; p.g_stride = a->g_row_stride;
  p.x = a->x; p.x_stride = a->x_row_stride;
  p.w = a->w;
  p.rstd = a->rstd;
  p.gr = a->g_residual; p.gr_stride = a->g_residual_row_stride;
  p.dx = a->dx; p.dx_stride = a->dx_row_stride;
  p.partials = want_dw ? static_cast<float*>(a->workspace) : nullptr;
  p.dw = a->dw;
  p.dw_w_dtype = dw16 ? 1 : 0;
  p.accumulate = a->accumulate_dw != 0;
  p.rows = a->rows;
  p.hidden = static_cast<int>(a->hidden);
  p.chunks = static_cast<int>(cake::backward_chunks(a->rows, a->hidden));
  p.chunk_rows = p.chunks > 0 ? p.rows / p.chunks : 0;
  p.chunk_rem = p.chunks > 0 ? static_cast<int>(p.rows % p.chunks) : 0;

  if (a->device == CAKE_DEVICE_CPU) {
    if (a->rows == 0) {
      if (want_dw && !a->accumulate_dw) std::memset(a->dw, 0, dw_bytes);
      return CAKE_OK;
    }
    with_types(a->x_dtype, a->w_dtype, gd, [&](auto t, auto w, auto g) {
      cake::cpu::backward<decltype(t), decltype(w), decltype(g)>(p);
    });
    return CAKE_OK;
  }
  if (a->device != CAKE_DEVICE_CUDA) return CAKE_ERR_INVALID_ARGUMENT;
#if CAKE_WITH_CUDA
  if (a->rows == 0)
    return want_dw && !a->accumulate_dw ? cuda_status(cake::zero_bytes(a->dw, dw_bytes, stream)) : CAKE_OK;
  const cake_dtype_t xd = a->x_dtype;
  if (xd == CAKE_DTYPE_FP32 && !cake::fp32_width_ok(a->hidden)) return CAKE_ERR_UNSUPPORTED;
  if (!aligned16(a->g) || !aligned16(a->x) || !aligned16(a->w) || !aligned16(a->dx) ||
      !stride_aligned(a->g_row_stride, gd) || !stride_aligned(a->x_row_stride, xd) ||
      !stride_aligned(a->dx_row_stride, xd) ||
      (res && (!aligned16(a->g_residual) || !stride_aligned(a->g_residual_row_stride, xd))))
    return CAKE_ERR_MISALIGNED;
  if (xd == CAKE_DTYPE_FP32) return cuda_status(cake::launch_fp32_backward(p, gd, a->w_dtype, stream));
  cake::Program prog;
  const int sm = call_sm();
  if (!cake::program_for_call(res ? cake::Route::kBwdResidual : cake::Route::kBwd, p.hidden, p.rows, sm, &prog))
    return CAKE_ERR_INVALID_ARGUMENT;
  const bool w32 = a->w_dtype == CAKE_DTYPE_FP32;
  const cake::BwdLimits lim = cake::backward_limits(sm);
  const int code = a->x_dtype == CAKE_DTYPE_BF16
                       ? cake::launch_backward_bf16(p, w32, prog, a->max_ctas, lim, stream)
                       : cake::launch_backward_fp16(p, w32, prog, a->max_ctas, lim, stream);
  return cuda_status(code);
#else
  (void)stream;
  return CAKE_ERR_NO_CUDA;
#endif
}

size_t cake_rmsnorm_backward_workspace_bytes(int64_t rows, int64_t hidden) {
  if (rows <= 0 || hidden <= 0) return 0;
  return static_cast<size_t>(cake::backward_chunks(rows, hidden)) * static_cast<size_t>(hidden) *
         sizeof(float);
}

int64_t cake_rmsnorm_backward_saturating_rows(int64_t hidden) {
  return hidden > 0 ? cake::backward_saturating_rows(hidden) : -1;
}

int64_t cake_rmsnorm_backward_chunks(int64_t rows, int64_t hidden) {
  return hidden > 0 ? cake::backward_chunks(rows, hidden) : -1;
}

unsigned cake_rmsnorm_built_archs(void) {
#ifdef CAKE_BUILT_ARCH_MASK
  return CAKE_BUILT_ARCH_MASK;
#else
  return 0u;
#endif
}

int cake_rmsnorm_shipped_archs(int* out, int capacity) {
  static constexpr int kShipped[] = {CAKE_RMSNORM_SHIPPED_ARCHS};
  constexpr int n = static_cast<int>(sizeof(kShipped) / sizeof(int));
  if (capacity < 0 || (capacity > 0 && out == nullptr)) return -1;
  for (int i = 0; i < n && i < capacity; ++i) out[i] = kShipped[i];
  return n;
}

const char* cake_rmsnorm_status_string(cake_status_t status) {
  switch (status) {
    case CAKE_OK: return "ok";
    case CAKE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case CAKE_ERR_UNSUPPORTED: return "unsupported dtype combination or width";
    case CAKE_ERR_MISALIGNED: return "CUDA pointers and row strides must be 16-byte aligned";
    case CAKE_ERR_WORKSPACE: return "backward workspace missing, misaligned or too small";
    case CAKE_ERR_NO_CUDA: return "library built without CUDA";
    case CAKE_ERR_CUDA: return "CUDA error";
  }
  return "unknown status";
}

const char* cake_rmsnorm_last_cuda_error(void) { return g_last_cuda_error.c_str(); }

}  // extern "C"
