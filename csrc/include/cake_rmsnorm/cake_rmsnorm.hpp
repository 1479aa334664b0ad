// cake-rmsnorm for LibTorch users: functions on at::Tensor that call the registered ops
// (torch.ops.cake_rmsnorm.*) through the dispatcher, so CPU and CUDA tensors, torch's current
// stream and autograd-free training code all work as from Python. Link the library
// (cake_rmsnorm.get_library_path()) so its ops register when it loads.
//
// Inputs are [..., hidden] (any strides; the ops copy what the kernels cannot read in place);
// y/h_new/dx take x's dtype (y may take out_dtype), rstd (x's leading shape) and dw are FP32.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>

#include "cake_rmsnorm.h"

namespace cake_rmsnorm {

namespace detail {
template <typename Sig>
inline c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
}  // namespace detail

// (y, rstd) = RMSNorm(x) * w.
// out_dtype: y's dtype when not x's (a 16-bit compute dtype for FP32 x).
inline std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& w, double eps,
                                                  std::optional<at::ScalarType> out_dtype = std::nullopt) {
  static auto h = detail::op<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double,
                                                                std::optional<at::ScalarType>)>(
      "cake_rmsnorm::fwd");
  return h.call(x, w, eps, out_dtype);
}

// (y, rstd, h_new): h_new = cast(x + residual) is normalised (float32 x may take a 16-bit
// residual: AMP's branch added to the float32 stream, h_new float32).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_residual(
    const at::Tensor& x, const at::Tensor& residual, const at::Tensor& w, double eps,
    std::optional<at::ScalarType> out_dtype = std::nullopt) {
  static auto h = detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, double, std::optional<at::ScalarType>)>(
      "cake_rmsnorm::fwd_residual");
  return h.call(x, residual, w, eps, out_dtype);
}

// (dx, dw); g_residual, when given, is added into dx. dw is FP32, or in w's dtype with
// dw_in_w_dtype (rounded once from the FP32 sum by the finalize); its bits are reproducible on
// every path (there is no non-deterministic one).
inline std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& w,
                                                   const at::Tensor& rstd,
                                                   const std::optional<at::Tensor>& g_residual = std::nullopt,
                                                   bool dw_in_w_dtype = false) {
  static auto h = detail::op<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const std::optional<at::Tensor>&, bool)>("cake_rmsnorm::bwd");
  return h.call(g, x, w, rstd, g_residual, dw_in_w_dtype);
}

// Writes dx and dw into caller buffers with a caller workspace of at least
// cake_rmsnorm_backward_workspace_bytes(rows, hidden) bytes: no allocation on the CUDA path.
// dw = nullopt skips the weight gradient (dx only); accumulate adds into dw (main_grad).
inline void backward_out(const at::Tensor& g, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                         const std::optional<at::Tensor>& g_residual, at::Tensor& dx,
                         const std::optional<at::Tensor>& dw, const std::optional<at::Tensor>& workspace,
                         bool accumulate = false) {
  // The signature must match the schema exactly: the dispatcher boxes the arguments as given.
  static auto h = detail::op<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                  const std::optional<at::Tensor>&, at::Tensor&,
                                  const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, int64_t,
                                  bool)>("cake_rmsnorm::bwd_out");
  h.call(g, x, w, rstd, g_residual, dx, dw, workspace, 0, accumulate);
}

}  // namespace cake_rmsnorm
