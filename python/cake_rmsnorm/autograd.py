"""Autograd wrapper: saves only (x or h_new, w, rstd) for the fused backward."""

from typing import Optional

import torch

from . import _checks as C
from .functional import cake_rmsnorm_train_backward, cake_rmsnorm_train_forward

__all__ = ["CakeRMSNormFunction", "cake_rmsnorm"]


class CakeRMSNormFunction(torch.autograd.Function):
    """``forward(x, w, eps, residual=None, deterministic=True)``.

    Returns ``y`` (no residual) or ``(y, h_new)``. The backward returns dx for x (and the same
    dx_total for residual, which receives the gradient of both inputs of the add) and dw in
    w's dtype (accumulated in FP32).
    """

    @staticmethod
    def forward(ctx, x, w, eps, residual=None, deterministic=True):
        if residual is None:
            y, rstd = cake_rmsnorm_train_forward(x, w, eps)
            ctx.save_for_backward(x, w, rstd)
            ctx.has_residual = False
            ctx.deterministic = deterministic
            return y
        y, rstd, h = cake_rmsnorm_train_forward(x, w, eps, residual=residual)
        ctx.save_for_backward(h, w, rstd)
        ctx.has_residual = True
        ctx.deterministic = deterministic
        return y, h

    @staticmethod
    def backward(ctx, grad_y, grad_h=None):
        xs, w, rstd = ctx.saved_tensors
        if grad_y is None:
            grad_y = torch.zeros_like(xs)
        dx, dw = cake_rmsnorm_train_backward(
            grad_y, xs, w, rstd, g_residual=grad_h if ctx.has_residual else None,
            deterministic=ctx.deterministic)
        dw = dw if w.dtype == torch.float32 else dw.to(w.dtype)
        if not ctx.needs_input_grad[1]:
            dw = None
        if ctx.has_residual:
            return dx, dw, None, dx, None
        return dx, dw, None, None, None


def cake_rmsnorm(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float = 1e-6,
    residual: Optional[torch.Tensor] = None,
    deterministic: bool = True,
):
    """Autograd-enabled fused RMSNorm (optionally with a fused residual add).

    Parameters
    ----------
    x : torch.Tensor
        BF16 or FP16 ``[..., H]`` (layout rules as :func:`cake_rmsnorm_train_forward`).
    w : torch.Tensor
        ``[H]`` weight, x's dtype or FP32.
    eps : float
        Variance epsilon.
    residual : torch.Tensor, optional
        When given, ``h_new = cast(x + residual)`` is normalised and returned too.
    deterministic : bool
        Passed to the backward (see :func:`cake_rmsnorm_train_backward`).

    Returns
    -------
    y, or (y, h_new) with ``residual``. Only (x or h_new, w, rstd) are saved for the backward.
    """
    C.check_activation(x)
    C.check_weight(w, x)
    C.check_eps(eps)
    C.check_bool(deterministic, "deterministic")
    if residual is not None:
        C.check_like(residual, x, "residual")
    return CakeRMSNormFunction.apply(x, w, eps, residual, deterministic)
