// The op bodies, shared by the CPU and CUDA registrations, the direct binding and the shims;
// StreamOf supplies the stream (null on the CPU) and any device guard. Each body's signature is
// its op's in the table (python/cake_rmsnorm/_optable.py; tests/test_op_table.py holds them).
#pragma once

#include "op_common.h"

namespace cake_torch {

// Activations are [..., hidden] (the leading dimensions walked as rows in place where their
// layout allows); rstd has x's leading shape.
template <typename StreamOf>
struct Ops {
  // out_dtype: y's dtype (a 16-bit one with FP32 x: the compute dtype, cast in the same pass).
  static std::tuple<Tensor, Tensor> fwd(Tensor x, Tensor w, double eps, std::optional<ScalarType> out_dtype) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    Tensor y = new_like(x, out_dtype.value_or(x.scalar_type()));
    Tensor rstd = new_lead(x);
    forward_into(x, std::nullopt, w, eps, y, rstd, std::nullopt, ctx.stream);
    return {y, rstd};
  }

  static std::tuple<Tensor, Tensor, Tensor> fwd_residual(Tensor x, Tensor residual, Tensor w,
                                                         double eps, std::optional<ScalarType> out_dtype) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    Tensor y = new_like(x, out_dtype.value_or(x.scalar_type()));
    Tensor h = new_like(x, x.scalar_type());
    Tensor rstd = new_lead(x);
    forward_into(x, residual, w, eps, y, rstd, h, ctx.stream);
    return {y, rstd, h};
  }

  static void fwd_out(Tensor x, Tensor w, double eps, Tensor y, Tensor rstd) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    forward_into(x, std::nullopt, w, eps, y, rstd, std::nullopt, ctx.stream);
  }

  static void fwd_residual_out(Tensor x, Tensor residual, Tensor w, double eps, Tensor y,
                               Tensor rstd, Tensor h_new) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    forward_into(x, residual, w, eps, y, rstd, h_new, ctx.stream);
  }

  // dw_in_w_dtype: dw comes back in a 16-bit w's dtype, rounded once by the finalize (autograd).
  static std::tuple<Tensor, Tensor> bwd(Tensor g, Tensor x, Tensor w, Tensor rstd,
                                        std::optional<Tensor> g_residual, bool dw_in_w_dtype) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    Tensor dx = new_like(x, x.scalar_type());
    Tensor dw = new_vec(x, last_dim(x), dw_in_w_dtype ? w.scalar_type() : ScalarType::Float);
    backward_into(g, x, w, rstd, g_residual, dx, dw, std::nullopt, 0, false, dw_in_w_dtype, ctx.stream);
    return {dx, dw};
  }

  // dx only: the weight gradient and its work are skipped (a frozen weight).
  static Tensor bwd_dx(Tensor g, Tensor x, Tensor w, Tensor rstd, std::optional<Tensor> g_residual) {
    check_x(x);
    auto ctx = StreamOf::enter(x);
    Tensor dx = new_like(x, x.scalar_type());
    backward_into(g, x, w, rstd, g_residual, dx, std::nullopt, std::nullopt, 0, false, false, ctx.stream);
    return dx;
  }

  // The memory-efficient backward (from the output): y, the forward's output, where x is read
  // otherwise, and xhat = y (1 / w); dx in dx_dtype (x's dtype: y's, or float32 beside a 16-bit y).
  static std::tuple<Tensor, Tensor> bwd_from_y(Tensor g, Tensor y, Tensor w, Tensor rstd, std::optional<Tensor> g_residual,
                                          std::optional<ScalarType> dx_dtype, bool dw_in_w_dtype) {
    check_x(y);
    auto ctx = StreamOf::enter(y);
    Tensor dx = new_like(y, check_dx_dtype(y, dx_dtype));
    Tensor dw = new_vec(y, last_dim(y), dw_in_w_dtype ? w.scalar_type() : ScalarType::Float);
    backward_into(g, dx, w, rstd, g_residual, dx, dw, std::nullopt, 0, false, dw_in_w_dtype, ctx.stream, &y);
    return {dx, dw};
  }

  static Tensor bwd_from_y_dx(Tensor g, Tensor y, Tensor w, Tensor rstd, std::optional<Tensor> g_residual,
                         std::optional<ScalarType> dx_dtype) {
    check_x(y);
    auto ctx = StreamOf::enter(y);
    Tensor dx = new_like(y, check_dx_dtype(y, dx_dtype));
    backward_into(g, dx, w, rstd, g_residual, dx, std::nullopt, std::nullopt, 0, false, false, ctx.stream, &y);
    return dx;
  }

  static void bwd_out(Tensor g, Tensor x, Tensor w, Tensor rstd, std::optional<Tensor> g_residual, Tensor dx,
                      std::optional<Tensor> dw, std::optional<Tensor> workspace, int64_t max_ctas,
                      bool accumulate) {
    STD_TORCH_CHECK(max_ctas >= 0, "max_ctas must be >= 0");
    check_x(x);
    auto ctx = StreamOf::enter(x);
    backward_into(g, x, w, rstd, g_residual, dx, dw, workspace, max_ctas, accumulate, false, ctx.stream);
  }
};

}  // namespace cake_torch
