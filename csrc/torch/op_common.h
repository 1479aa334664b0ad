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

// A shim call's status as an exception (the macro torch names for this changed across releases).
#define CAKE_SHIM_CHECK(call) STD_TORCH_CHECK((call) == AOTI_TORCH_SUCCESS, "cake_rmsnorm: " #call " failed")

inline int32_t device_type(const Tensor& t) {
  int32_t d = 0;
  CAKE_SHIM_CHECK(aoti_torch_get_device_type(t.get(), &d));
  return d;
}

// The same device type and index (a meta or other-device tensor beside a CPU x is refused).
inline void check_same_device(const Tensor& a, const Tensor& b, const char* name) {
  STD_TORCH_CHECK(device_type(a) == device_type(b) && a.get_device_index() == b.get_device_index(),
                  name, " must be on the same device as x");
}

inline void check_x(const Tensor& x) {
  STD_TORCH_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) > 0, "x must be [..., hidden] with hidden > 0");
}

inline int64_t last_dim(const Tensor& t) { return t.size(t.dim() - 1); }
inline int64_t rows_of(const Tensor& t) {
  const int64_t h = last_dim(t);
  return h > 0 ? t.numel() / h : 0;
}

// A [..., hidden] tensor of x's shape and device (any strides: see kernel_row_stride), of x's
// dtype, or (any_16bit, FP32 x: y and g of mixed precision) a 16-bit one.
inline void check_rows(const Tensor& t, const Tensor& x, const char* name, bool any_16bit = false) {
  bool same = t.dim() == x.dim();
  for (int64_t i = 0; same && i < x.dim(); ++i) same = t.size(i) == x.size(i);
  STD_TORCH_CHECK(same, name, " must have x's shape [..., hidden]");
  const bool other_ok = any_16bit && x.scalar_type() == ScalarType::Float &&
                        (t.scalar_type() == ScalarType::BFloat16 || t.scalar_type() == ScalarType::Half);
  STD_TORCH_CHECK(t.scalar_type() == x.scalar_type() || other_ok, name, " must have x's dtype",
                  any_16bit ? " (or, with float32 x, a 16-bit one)" : "");
  check_same_device(t, x, name);
}

// The row stride of a [..., hidden] tensor the kernels can walk as [rows, hidden] in place: a
// contiguous feature dimension and leading dimensions contiguous with one another (size-1
// dimensions free), rows that do not overlap and (CUDA) a 16-byte aligned base and row stride.
// -1 when the tensor must go through a dense copy instead. N-D inputs are read in place, so the
// Python layer reshapes nothing and autograd records no view.
inline int64_t kernel_row_stride(const Tensor& t) {
  const int64_t hidden = last_dim(t);
  if (t.numel() == 0) return hidden;
  const int64_t nd = t.dim();
  if (hidden > 1 && t.stride(nd - 1) != 1) return -1;
  int64_t rs = -1, inner_stride = 0, inner_size = 0;
  for (int64_t i = nd - 2; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (rs < 0) {
      rs = t.stride(i);
    } else if (t.stride(i) != inner_stride * inner_size) {
      return -1;
    }
    inner_stride = t.stride(i);
    inner_size = t.size(i);
  }
  if (rs < 0) rs = hidden;  // at most one row
  if (rs < hidden) return -1;
  if (!t.is_cuda()) return rs;
  const auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
  return p % 16 == 0 && (rs * static_cast<int64_t>(t.element_size())) % 16 == 0 ? rs : -1;
}

inline int32_t aoti_dtype(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case ScalarType::Half: return aoti_torch_dtype_float16();
    case ScalarType::Float: return aoti_torch_dtype_float32();
    case ScalarType::Byte: return aoti_torch_dtype_uint8();
    default: STD_TORCH_CHECK(false, "cake_rmsnorm: no allocation of this dtype");
  }
  return 0;
}

// A dense tensor of `sizes` on like's device: one direct allocation (torch::stable::new_empty
// is a boxed dispatcher call that looks the op up by name every time).
inline Tensor empty_on(const Tensor& like, const int64_t* sizes, int64_t ndim, ScalarType dtype) {
  std::vector<int64_t> strides(static_cast<size_t>(ndim > 0 ? ndim : 1));
  int64_t step = 1;
  for (int64_t i = ndim - 1; i >= 0; --i) {
    strides[i] = step;
    step *= sizes[i] > 1 ? sizes[i] : 1;
  }
  AtenTensorHandle h = nullptr;
  CAKE_SHIM_CHECK(aoti_torch_empty_strided(ndim, sizes, strides.data(), aoti_dtype(dtype),
                                                         device_type(like), like.get_device_index(), &h));
  return Tensor(h);
}

inline Tensor new_like(const Tensor& t, ScalarType dtype) {
  return empty_on(t, t.sizes().data(), t.dim(), dtype);
}

inline Tensor new_vec(const Tensor& like, int64_t n, ScalarType dtype) { return empty_on(like, &n, 1, dtype); }

inline Tensor dense_copy(const Tensor& t) {
  Tensor c = new_like(t, t.scalar_type());
  torch::stable::copy_(c, t);
  return c;
}

// x's leading shape (rstd).
inline Tensor new_lead(const Tensor& x) { return empty_on(x, x.sizes().data(), x.dim() - 1, ScalarType::Float); }

// An input the kernels read: the tensor itself, or a dense copy of a layout they cannot walk.
struct InRows {
  Tensor t;
  int64_t stride;
  explicit InRows(const Tensor& in) : t(in), stride(kernel_row_stride(in)) {
    if (stride < 0) {
      t = dense_copy(in);
      stride = last_dim(in);
    }
  }
};

// A caller output the kernels write directly, or a dense stand-in copied back by finish().
struct OutSlot {
  Tensor user, buf;
  int64_t stride;
  bool copy_back;
  explicit OutSlot(const Tensor& t) : user(t), buf(t), stride(kernel_row_stride(t)), copy_back(stride < 0) {
    if (copy_back) {
      buf = new_like(t, t.scalar_type());
      stride = last_dim(t);
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

// rstd: FP32 of x's leading shape.
inline void check_lead(const Tensor& t, const Tensor& x, const char* name) {
  bool same = t.dim() == x.dim() - 1;
  for (int64_t i = 0; same && i < t.dim(); ++i) same = t.size(i) == x.size(i);
  STD_TORCH_CHECK(same, name, " must have x's leading shape");
  STD_TORCH_CHECK(t.scalar_type() == ScalarType::Float, name, " must be float32");
  check_same_device(t, x, name);
}

// dx's dtype in the backward from y: x's, which is y's or float32 (a 16-bit y of FP32 x).
inline ScalarType check_dx_dtype(const Tensor& y, std::optional<ScalarType> dx_dtype) {
  const ScalarType t = dx_dtype.value_or(y.scalar_type());
  STD_TORCH_CHECK(t == y.scalar_type() || t == ScalarType::Float, "dx_dtype must be y's dtype or float32");
  return t;
}

inline void check_weight(const Tensor& w, const Tensor& x) {
  STD_TORCH_CHECK(w.dim() == 1 && w.size(0) == last_dim(x), "w must be 1-D [hidden]");
  STD_TORCH_CHECK(w.scalar_type() == x.scalar_type() || w.scalar_type() == ScalarType::Float ||
                      x.scalar_type() == ScalarType::Float,
                  "w must have x's dtype or be float32");
  check_same_device(w, x, "w");
}

inline void raise_status(cake_status_t st, const char* what) {
  if (st == CAKE_OK) return;
  std::string msg = std::string("cake_rmsnorm ") + what + ": " + cake_rmsnorm_status_string(st);
  if (st == CAKE_ERR_CUDA) msg += std::string(" (") + cake_rmsnorm_last_cuda_error() + ")";
  if (st == CAKE_ERR_NO_CUDA || st == CAKE_ERR_ARCH)
    msg += std::string(" (this library: ") + cake_rmsnorm_build_info() +
           (st == CAKE_ERR_NO_CUDA ? "; rebuild where nvcc is on PATH or CUDA_HOME is set: pip install "
                                     "--no-build-isolation --force-reinstall --no-deps ." : "") + ")";
  STD_TORCH_CHECK(false, msg);
}

inline bool vec_ready(const Tensor& t, bool aligned) {
  if (t.numel() > 1 && !t.is_contiguous()) return false;
  return !aligned || !t.is_cuda() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// A 1-D or leading-shape caller output (rstd, dw): written directly when contiguous, else
// through a copy (which starts from the caller's values when the kernel accumulates into them).
struct VecSlot {
  Tensor user, buf;
  bool copy_back;
  explicit VecSlot(const Tensor& t, bool preload = false, bool aligned = false)
      : user(t), buf(t), copy_back(!vec_ready(t, aligned)) {
    if (copy_back) buf = preload ? dense_copy(t) : new_like(t, t.scalar_type());
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
  check_rows(y_in, x_in, "out", true);
  check_lead(rstd_in, x_in, "rstd");
  if (residual_in) {
    check_rows(*residual_in, x_in, "residual", true);  // float32 x: a 16-bit branch too (AMP)
    STD_TORCH_CHECK(h_in.has_value(), "residual_out is required with residual");
    check_rows(*h_in, x_in, "residual_out");
  }
  const InRows x(x_in);
  const Tensor w = ready_weight(w_in);
  std::optional<InRows> residual;
  if (residual_in) residual.emplace(*residual_in);
  OutSlot y(y_in);
  VecSlot rstd(rstd_in);
  std::optional<OutSlot> h;
  if (h_in && residual_in) h.emplace(*h_in);

  cake_rmsnorm_fwd_args a{};
  a.device = x_in.is_cuda() ? CAKE_DEVICE_CUDA : CAKE_DEVICE_CPU;
  a.x_dtype = to_cake_dtype(x_in, "x");
  a.w_dtype = to_cake_dtype(w, "w");
  a.rows = rows_of(x_in);
  a.hidden = last_dim(x_in);
  a.x = x.t.data_ptr();
  a.x_row_stride = x.stride;
  if (residual) {
    a.residual = residual->t.data_ptr();
    a.residual_row_stride = residual->stride;
    a.residual_dtype_set = 1;
    a.residual_dtype = to_cake_dtype(*residual_in, "residual");
    a.h_out = h->buf.data_ptr();
    a.h_row_stride = h->stride;
  }
  a.w = w.data_ptr();
  a.y = y.buf.data_ptr();
  a.y_row_stride = y.stride;
  a.rstd = static_cast<float*>(rstd.buf.data_ptr());
  a.eps = static_cast<float>(eps);
  a.y_dtype_set = y_in.scalar_type() != x_in.scalar_type() ? 1 : 0;
  a.y_dtype = to_cake_dtype(y_in, "out");
  raise_status(cake_rmsnorm_forward(&a, stream), "forward");
  y.finish();
  rstd.finish();
  if (h) h->finish();
}

// workspace absent with dw: allocated here, at the size the C API asks for.
inline void backward_into(const Tensor& g_in, const Tensor& x_in, const Tensor& w_in,
                          const Tensor& rstd_in, const std::optional<Tensor>& g_residual_in,
                          const Tensor& dx_in, const std::optional<Tensor>& dw_in,
                          const std::optional<Tensor>& workspace_in, int64_t max_ctas, bool accumulate,
                          bool dw_in_w_dtype, void* stream, const Tensor* from_y = nullptr) {
  // from_y (the memory-efficient backward): the forward's output y, read where x is otherwise,
  // and x_in is then dx itself, the reference for every shape and dtype (x's).
  if (from_y) {
    check_rows(*from_y, x_in, "y", true);
    STD_TORCH_CHECK(from_y->scalar_type() == g_in.scalar_type(), "g must have y's dtype");
  }
  check_rows(g_in, x_in, "g", true);
  check_weight(w_in, x_in);
  check_lead(rstd_in, x_in, "rstd");
  if (g_residual_in) check_rows(*g_residual_in, x_in, "g_residual");
  check_rows(dx_in, x_in, "dx");
  const int64_t rows = rows_of(x_in), hidden = last_dim(x_in);
  const bool dw16 = dw_in_w_dtype && w_in.scalar_type() != ScalarType::Float;
  std::optional<Tensor> workspace = workspace_in;
  if (dw_in) {
    check_vec(*dw_in, x_in, hidden, dw16 ? w_in.scalar_type() : ScalarType::Float, "dw");
    STD_TORCH_CHECK(!(dw16 && accumulate), "accumulate needs an FP32 dw");
    if (workspace) {
      STD_TORCH_CHECK(workspace->is_contiguous(), "workspace must be contiguous");
      check_same_device(*workspace, x_in, "workspace");
    } else {
      const int64_t bytes = static_cast<int64_t>(cake_rmsnorm_backward_workspace_bytes(rows, hidden));
      workspace = new_vec(x_in, bytes > 0 ? bytes : 16, ScalarType::Byte);
    }
  }
  const InRows g(g_in);
  const InRows x(from_y ? *from_y : x_in);
  const Tensor w = ready_weight(w_in);
  const Tensor rstd = vec_ready(rstd_in, false) ? rstd_in : dense_copy(rstd_in);
  std::optional<InRows> g_residual;
  if (g_residual_in) g_residual.emplace(*g_residual_in);
  OutSlot dx(dx_in);
  std::optional<VecSlot> dw;
  if (dw_in) dw.emplace(*dw_in, accumulate, true);  // a one-row call stores dw 16 bytes at a time

  cake_rmsnorm_bwd_args a{};
  a.device = x_in.is_cuda() ? CAKE_DEVICE_CUDA : CAKE_DEVICE_CPU;
  a.x_dtype = to_cake_dtype(x_in, "x");
  a.w_dtype = to_cake_dtype(w, "w");
  a.rows = rows;
  a.hidden = hidden;
  a.g = g.t.data_ptr();
  a.g_row_stride = g.stride;
  (from_y ? a.y : a.x) = x.t.data_ptr();
  (from_y ? a.y_row_stride : a.x_row_stride) = x.stride;
  a.w = w.data_ptr();
  a.rstd = static_cast<const float*>(rstd.data_ptr());
  if (g_residual) {
    a.g_residual = g_residual->t.data_ptr();
    a.g_residual_row_stride = g_residual->stride;
  }
  a.dx = dx.buf.data_ptr();
  a.dx_row_stride = dx.stride;
  if (dw) {
    a.dw = dw->buf.data_ptr();
    a.workspace = workspace->data_ptr();
    a.workspace_bytes = static_cast<size_t>(workspace->numel()) * workspace->element_size();
  }
  a.max_ctas = static_cast<int>(max_ctas);
  a.accumulate_dw = accumulate ? 1 : 0;
  a.dw_in_w_dtype = dw16 ? 1 : 0;
  a.g_dtype_set = g_in.scalar_type() != x_in.scalar_type() ? 1 : 0;
  a.g_dtype = to_cake_dtype(g_in, "g");
  raise_status(cake_rmsnorm_backward(&a, stream), "backward");
  dx.finish();
  if (dw) dw->finish();
}

}  // namespace cake_torch
