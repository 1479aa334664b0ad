// Shared by the CPU and CUDA op implementations: checks at the op boundary (the Python layer
// has already validated and canonicalised; these are the last line for direct op callers),
// argument packing for the C API, and allocation of functional outputs. LibTorch stable ABI.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cake_rmsnorm/cake_rmsnorm.h"

namespace cake_torch {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

inline cake_dtype_t to_cake_dtype(const Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case ScalarType::BFloat16: return CAKE_DTYPE_BF16;
    case ScalarType::Half: return CAKE_DTYPE_FP16;
    case ScalarType::Float: return CAKE_DTYPE_FP32;
    default: STD_TORCH_CHECK(false, name, " must be bfloat16, float16 or float32");
  }
  return CAKE_DTYPE_FP32;
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* name) {
  STD_TORCH_CHECK(a.is_cuda() == b.is_cuda() && a.get_device_index() == b.get_device_index(),
                  name, " must be on the same device as x");
}

// A [rows, hidden] matrix of x's dtype and device (any strides: see ready_input).
inline void check_rows(const Tensor& t, const Tensor& x, const char* name) {
  STD_TORCH_CHECK(t.dim() == 2, name, " must be 2-D [rows, hidden], got ", t.dim(), " dims");
  STD_TORCH_CHECK(t.size(0) == x.size(0) && t.size(1) == x.size(1), name,
                  " must have x's shape [rows, hidden]");
  STD_TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have x's dtype");
  check_same_device(t, x, name);
}

inline int64_t row_stride(const Tensor& t) { return t.size(0) <= 1 ? t.size(1) : t.stride(0); }

// What the kernels read and write in place: a contiguous feature dimension, rows that do not
// overlap, and (CUDA) a 16-byte aligned base and row stride. Anything else goes through a
// dense copy, so every layout is served at the op boundary too.
inline bool kernel_ready(const Tensor& t) {
  if (t.numel() == 0) return true;
  if (t.size(1) > 1 && t.stride(1) != 1) return false;
  if (t.size(0) > 1 && t.stride(0) < t.size(1)) return false;
  if (!t.is_cuda()) return true;
  const auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
  return p % 16 == 0 && (row_stride(t) * static_cast<int64_t>(t.element_size())) % 16 == 0;
}

inline Tensor dense_copy(const Tensor& t) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  Tensor c = torch::stable::new_empty(t, sizes, t.scalar_type());
  torch::stable::copy_(c, t);
  return c;
}

inline Tensor ready_input(const Tensor& t) { return kernel_ready(t) ? t : dense_copy(t); }

// A caller output the kernels write directly, or a dense stand-in copied back by finish().
struct OutSlot {
  Tensor user, buf;
  bool copy_back;
  explicit OutSlot(const Tensor& t)
      : user(t), buf(t), copy_back(!kernel_ready(t)) {
    if (copy_back) {
      std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
      buf = torch::stable::new_empty(t, sizes, t.scalar_type());
    }
  }
  void finish() {
    if (copy_back) torch::stable::copy_(user, buf);
  }
};

inline void check_vec(const Tensor& t, const Tensor& x, int64_t n, ScalarType dtype, const char* name) {
  STD_TORCH_CHECK(t.dim() == 1 && t.size(0) == n, name, " must be 1-D of length ", n);
  STD_TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
  check_same_device(t, x, name);
}

inline void check_weight(const Tensor& w, const Tensor& x) {
  STD_TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(1), "w must be 1-D [hidden]");
  STD_TORCH_CHECK(w.scalar_type() == x.scalar_type() || w.scalar_type() == ScalarType::Float,
                  "w must have x's dtype or be float32");
  check_same_device(w, x, "w");
}

inline void raise_status(cake_status_t st, const char* what) {
  if (st == CAKE_OK) return;
  std::string msg = std::string("cake_rmsnorm ") + what + ": " + cake_rmsnorm_status_string(st);
  if (st == CAKE_ERR_CUDA) msg += std::string(" (") + cake_rmsnorm_last_cuda_error() + ")";
  STD_TORCH_CHECK(false, msg);
}

inline Tensor new_empty_like_rows(const Tensor& x, std::vector<int64_t> sizes, ScalarType dtype) {
  return torch::stable::new_empty(x, sizes, dtype);
}

inline bool vec_ready(const Tensor& t, bool aligned) {
  if (t.numel() > 1 && t.stride(0) != 1) return false;
  return !aligned || !t.is_cuda() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// A 1-D caller output (rstd, dw): written directly when contiguous, else through a copy
// (which starts from the caller's values when the kernel accumulates into them).
struct VecSlot {
  Tensor user, buf;
  bool copy_back;
  explicit VecSlot(const Tensor& t, bool preload = false)
      : user(t), buf(t), copy_back(!vec_ready(t, false)) {
    if (copy_back) buf = preload ? dense_copy(t) : torch::stable::new_empty(t, {t.size(0)}, t.scalar_type());
  }
  void finish() {
    if (copy_back) torch::stable::copy_(user, buf);
  }
};

inline Tensor ready_weight(const Tensor& w) { return vec_ready(w, true) ? w : dense_copy(w); }

// Runs the C API on stream (null for the CPU). Inputs of any layout are read in place when
// the kernels can, else through one dense copy; outputs likewise.
inline void forward_into(const Tensor& x_in, const std::optional<Tensor>& residual_in,
                         const Tensor& w_in, double eps, const Tensor& y_in,
                         const Tensor& rstd_in, const std::optional<Tensor>& h_in, void* stream) {
  check_weight(w_in, x_in);
  check_rows(y_in, x_in, "out");
  check_vec(rstd_in, x_in, x_in.size(0), ScalarType::Float, "rstd");
  if (residual_in) {
    check_rows(*residual_in, x_in, "residual");
    STD_TORCH_CHECK(h_in.has_value(), "residual_out is required with residual");
    check_rows(*h_in, x_in, "residual_out");
  }
  const Tensor x = ready_input(x_in);
  const Tensor w = ready_weight(w_in);
  std::optional<Tensor> residual;
  if (residual_in) residual = ready_input(*residual_in);
  OutSlot y(y_in);
  VecSlot rstd(rstd_in);
  std::optional<OutSlot> h;
  if (h_in && residual_in) h.emplace(*h_in);

  cake_rmsnorm_fwd_args a{};
  a.device = x.is_cuda() ? CAKE_DEVICE_CUDA : CAKE_DEVICE_CPU;
  a.x_dtype = to_cake_dtype(x, "x");
  a.w_dtype = to_cake_dtype(w, "w");
  a.rows = x.size(0);
  a.hidden = x.size(1);
  a.x = x.data_ptr();
  a.x_row_stride = row_stride(x);
  if (residual) {
    a.residual = residual->data_ptr();
    a.residual_row_stride = row_stride(*residual);
    a.h_out = h->buf.data_ptr();
    a.h_row_stride = row_stride(h->buf);
  }
  a.w = w.data_ptr();
  a.y = y.buf.data_ptr();
  a.y_row_stride = row_stride(y.buf);
  a.rstd = static_cast<float*>(rstd.buf.data_ptr());
  a.eps = static_cast<float>(eps);
  raise_status(cake_rmsnorm_forward(&a, stream), "forward");
  y.finish();
  rstd.finish();
  if (h) h->finish();
}

inline void backward_into(const Tensor& g_in, const Tensor& x_in, const Tensor& w_in,
                          const Tensor& rstd_in, const std::optional<Tensor>& g_residual_in,
                          const Tensor& dx_in, const std::optional<Tensor>& dw_in,
                          const std::optional<Tensor>& workspace, int64_t max_ctas, bool accumulate,
                          void* stream) {
  STD_TORCH_CHECK(x_in.dim() == 2, "x must be 2-D [rows, hidden]");
  check_rows(g_in, x_in, "g");
  check_weight(w_in, x_in);
  check_vec(rstd_in, x_in, x_in.size(0), ScalarType::Float, "rstd");
  if (g_residual_in) check_rows(*g_residual_in, x_in, "g_residual");
  check_rows(dx_in, x_in, "dx");
  if (dw_in) {
    check_vec(*dw_in, x_in, x_in.size(1), ScalarType::Float, "dw");
    STD_TORCH_CHECK(workspace.has_value(), "workspace is required with dw");
    STD_TORCH_CHECK(workspace->is_contiguous(), "workspace must be contiguous");
    check_same_device(*workspace, x_in, "workspace");
  }
  const Tensor g = ready_input(g_in);
  const Tensor x = ready_input(x_in);
  const Tensor w = ready_weight(w_in);
  const Tensor rstd = vec_ready(rstd_in, false) ? rstd_in : dense_copy(rstd_in);
  std::optional<Tensor> g_residual;
  if (g_residual_in) g_residual = ready_input(*g_residual_in);
  OutSlot dx(dx_in);
  std::optional<VecSlot> dw;
  if (dw_in) dw.emplace(*dw_in, accumulate);

  cake_rmsnorm_bwd_args a{};
  a.device = x.is_cuda() ? CAKE_DEVICE_CUDA : CAKE_DEVICE_CPU;
  a.x_dtype = to_cake_dtype(x, "x");
  a.w_dtype = to_cake_dtype(w, "w");
  a.rows = x.size(0);
  a.hidden = x.size(1);
  a.g = g.data_ptr();
  a.g_row_stride = row_stride(g);
  a.x = x.data_ptr();
  a.x_row_stride = row_stride(x);
  a.w = w.data_ptr();
  a.rstd = static_cast<const float*>(rstd.data_ptr());
  if (g_residual) {
    a.g_residual = g_residual->data_ptr();
    a.g_residual_row_stride = row_stride(*g_residual);
  }
  a.dx = dx.buf.data_ptr();
  a.dx_row_stride = row_stride(dx.buf);
  if (dw) {
    a.dw = static_cast<float*>(dw->buf.data_ptr());
    a.workspace = workspace->data_ptr();
    a.workspace_bytes = static_cast<size_t>(workspace->numel()) * workspace->element_size();
  }
  a.deterministic = 1;
  a.max_ctas = static_cast<int>(max_ctas);
  a.accumulate_dw = accumulate ? 1 : 0;
  raise_status(cake_rmsnorm_backward(&a, stream), "backward");
  dx.finish();
  if (dw) dw->finish();
}

}  // namespace cake_torch
