"""The autograd entry point: one torch.autograd.Function over the ops, eager and compiled."""

from typing import Optional

import torch

from . import _checks as C
from ._lib import ops

__all__ = ["CakeRMSNormFunction", "cake_rmsnorm"]

_fwd = ops.fwd.default
_fwd_residual = ops.fwd_residual.default
_bwd = ops.bwd.default
_bwd_dx = ops.bwd_dx.default
_bwd_out = ops.bwd_out.default


def backward_core(grad_y, xs, w, rstd, g_res, main_grad, w_needs_grad):
    """(dx, dw) of one norm: the fused backward and the dw finalize, which writes dw in w's
    dtype (None when w needs no gradient or main_grad received it in place)."""
    if grad_y is None:
        grad_y = torch.zeros_like(xs)
    if main_grad is not None:
        dx = torch.empty_like(xs)
        _bwd_out(grad_y, xs, w, rstd, g_res, dx, main_grad, None, 0, True)
        return dx, None
    if w_needs_grad:
        return _bwd(grad_y, xs, w, rstd, g_res, True)
    return _bwd_dx(grad_y, xs, w, rstd, g_res), None


class CakeRMSNormFunction(torch.autograd.Function):
    """``apply(x, w, eps, residual=None, deterministic=True, main_grad=None, out_dtype=None)``,
    inputs validated by the caller (:func:`cake_rmsnorm` does).

    Returns ``y`` (no residual) or ``(y, h_new)``. The backward is the fused backward kernel
    and the dw finalize, which writes dw in w's dtype itself (FP32 accumulation, one rounding):
    two launches. dx goes to x (and, the same tensor, to residual: the gradient of both inputs
    of the add). A weight that needs no gradient costs no dw work. With ``main_grad`` (an FP32
    [H] buffer), dw is added into it in place and no weight gradient is returned. Saves only
    (x or h_new, w, rstd).
    """

    @staticmethod
    def forward(ctx, x, w, eps, residual=None, deterministic=True, main_grad=None, out_dtype=None):
        if residual is None:
            y, rstd = _fwd(x, w, eps, out_dtype)
            ctx.save_for_backward(x, w, rstd, main_grad)
            ctx.has_residual = False
            return y
        y, rstd, h = _fwd_residual(x, residual, w, eps, out_dtype)
        ctx.save_for_backward(h, w, rstd, main_grad)
        ctx.has_residual = True
        return y, h

    @staticmethod
    def backward(ctx, grad_y, grad_h=None):
        if torch.is_grad_enabled():  # create_graph=True: a graph of this backward is asked for
            raise RuntimeError("cake_rmsnorm has no second-order derivative: its fused backward cannot be "
                               "differentiated (backward with create_graph=True through it)")
        xs, w, rstd, main_grad = ctx.saved_tensors
        g_res = grad_h if ctx.has_residual else None
        dx, dw = backward_core(grad_y, xs, w, rstd, g_res, main_grad, ctx.needs_input_grad[1])
        return dx, dw, None, (dx if ctx.has_residual else None), None, None, None


def cake_rmsnorm(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float = 1e-6,
    residual: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    main_grad: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
):
    """Autograd-enabled fused RMSNorm (optionally with a fused residual add).

    Parameters
    ----------
    x : torch.Tensor
        BF16, FP16 or FP32 ``[..., H]`` (layout rules as :func:`cake_rmsnorm_train_forward`).
    w : torch.Tensor
        ``[H]`` weight, x's dtype or FP32 (any of the three with FP32 x). With
        ``requires_grad=False`` the backward skips dw.
    eps : float
        Variance epsilon (a Python or NumPy float; symbolic under torch.compile).
    residual : torch.Tensor, optional
        When given, ``h_new = cast(x + residual)`` is normalised and returned too.
    deterministic : bool
        Passed to the backward (see :func:`cake_rmsnorm_train_backward`).
    main_grad : torch.Tensor, optional
        FP32 ``[H]`` buffer (Megatron's ``main_grad``): the backward adds dw into it in place and
        returns no gradient for ``w``.
    out_dtype : torch.dtype, optional
        With FP32 x: y in torch.bfloat16 or torch.float16 (the compute dtype, cast in the same
        pass); its gradient comes back in that dtype, dx in FP32.

    Returns
    -------
    y, or (y, h_new) with ``residual``. The backward returns dw in w's dtype, written by the
    dw finalize itself (no separate cast). Only (x or h_new, w, rstd) are saved.
    """
    if type(eps) is not float or not 0.0 <= eps < C.INF:
        eps = C.check_eps(eps)
    C.check_forward_inputs(x, w, residual)
    if deterministic is not True and deterministic is not False:
        C.check_bool(deterministic, "deterministic")
    if main_grad is not None:
        C.check_main_grad(main_grad, x)
    if out_dtype is not None:
        out_dtype = C.check_out_dtype(out_dtype, x)
    return apply(x, w, eps, residual, deterministic, main_grad, out_dtype)


def apply(x, w, eps, residual, deterministic, main_grad, out_dtype=None):
    """CakeRMSNormFunction.apply on validated inputs, or the bare kernel where nothing needs a
    gradient (no autograd node to build: inference, frozen layers, activation recompute)."""
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                    or (residual is not None and residual.requires_grad)):
        return CakeRMSNormFunction.apply(x, w, eps, residual, deterministic, main_grad, out_dtype)
    if residual is None:
        return _fwd(x, w, eps, out_dtype)[0]
    y, _, h = _fwd_residual(x, residual, w, eps, out_dtype)
    return y, h
