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

// A [rows, hidden] matrix with a contiguous feature dimension, x's dtype and device.
inline void check_rows(const Tensor& t, const Tensor& x, const char* name) {
  STD_TORCH_CHECK(t.dim() == 2, name, " must be 2-D [rows, hidden], got ", t.dim(), " dims");
  STD_TORCH_CHECK(t.size(0) == x.size(0) && t.size(1) == x.size(1), name,
                  " must have x's shape [rows, hidden]");
  STD_TORCH_CHECK(t.size(0) <= 1 || t.stride(1) == 1, name,
                  " must have a contiguous feature dimension (stride(1) == 1)");
  STD_TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have x's dtype");
  check_same_device(t, x, name);
}

inline int64_t row_stride(const Tensor& t) { return t.size(0) <= 1 ? t.size(1) : t.stride(0); }

inline void check_vec(const Tensor& t, const Tensor& x, int64_t n, ScalarType dtype, const char* name) {
  STD_TORCH_CHECK(t.dim() == 1 && t.size(0) == n, name, " must be 1-D of length ", n);
  STD_TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  STD_TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
  check_same_device(t, x, name);
}

inline void check_weight(const Tensor& w, const Tensor& x) {
  STD_TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(1), "w must be 1-D [hidden]");
  STD_TORCH_CHECK(w.is_contiguous(), "w must be contiguous");
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

// Runs the C API on stream (null for the CPU).
inline void forward_into(const Tensor& x, const std::optional<Tensor>& residual, const Tensor& w,
                         double eps, const Tensor& y, const Tensor& rstd,
                         const std::optional<Tensor>& h, void* stream) {
  check_weight(w, x);
  check_rows(y, x, "out");
  check_vec(rstd, x, x.size(0), ScalarType::Float, "rstd");
  if (residual) {
    check_rows(*residual, x, "residual");
    check_rows(*h, x, "residual_out");
  }
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
    a.h_out = h->data_ptr();
    a.h_row_stride = row_stride(*h);
  }
  a.w = w.data_ptr();
  a.y = y.data_ptr();
  a.y_row_stride = row_stride(y);
  a.rstd = static_cast<float*>(rstd.data_ptr());
  a.eps = static_cast<float>(eps);
  raise_status(cake_rmsnorm_forward(&a, stream), "forward");
}

inline void backward_into(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const std::optional<Tensor>& g_residual, const Tensor& dx,
                          const std::optional<Tensor>& dw, const std::optional<Tensor>& workspace,
                          int64_t max_ctas, void* stream) {
  STD_TORCH_CHECK(x.dim() == 2, "x must be 2-D [rows, hidden]");
  check_rows(g, x, "g");
  check_weight(w, x);
  check_vec(rstd, x, x.size(0), ScalarType::Float, "rstd");
  if (g_residual) check_rows(*g_residual, x, "g_residual");
  check_rows(dx, x, "dx");
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
  a.dx = dx.data_ptr();
  a.dx_row_stride = row_stride(dx);
  if (dw) {
    check_vec(*dw, x, x.size(1), ScalarType::Float, "dw");
    a.dw = static_cast<float*>(dw->data_ptr());
    STD_TORCH_CHECK(workspace.has_value(), "workspace is required with dw");
    STD_TORCH_CHECK(workspace->is_contiguous(), "workspace must be contiguous");
    check_same_device(*workspace, x, "workspace");
    a.workspace = workspace->data_ptr();
    a.workspace_bytes = static_cast<size_t>(workspace->numel()) * workspace->element_size();
  }
  a.deterministic = 1;
  a.max_ctas = static_cast<int>(max_ctas);
  raise_status(cake_rmsnorm_backward(&a, stream), "backward");
}

}  // namespace cake_torch
