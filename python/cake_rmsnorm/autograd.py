"""Autograd wrapper: saves only (x or h_new, w, rstd) for the fused backward."""

from typing import Optional

import torch

from . import _checks as C
from .functional import cake_rmsnorm_train_backward, cake_rmsnorm_train_forward

__all__ = ["CakeRMSNormFunction", "cake_rmsnorm"]


class CakeRMSNormFunction(torch.autograd.Function):
    """``forward(x, w, eps, residual=None, deterministic=True, main_grad=None)``.

    Returns ``y`` (no residual) or ``(y, h_new)``. The backward returns dx for x (and the same
    dx_total for residual, which receives the gradient of both inputs of the add) and dw in
    w's dtype (accumulated in FP32). A weight that needs no gradient costs no dw work. With
    ``main_grad`` (an FP32 [H] buffer), dw is added into it and no weight gradient is returned.
    """

    @staticmethod
    def forward(ctx, x, w, eps, residual=None, deterministic=True, main_grad=None):
        ctx.deterministic = deterministic
        ctx.has_residual = residual is not None
        ctx.main_grad = main_grad
        if residual is None:
            y, rstd = cake_rmsnorm_train_forward(x, w, eps)
            ctx.save_for_backward(x, w, rstd)
            return y
        y, rstd, h = cake_rmsnorm_train_forward(x, w, eps, residual=residual)
        ctx.save_for_backward(h, w, rstd)
        return y, h

    @staticmethod
    def backward(ctx, grad_y, grad_h=None):
        xs, w, rstd = ctx.saved_tensors
        grad_y = torch.zeros_like(xs) if grad_y is None else C.collapsible_or_copy(grad_y)
        g_res = C.collapsible_or_copy(grad_h) if ctx.has_residual and grad_h is not None else None
        if ctx.main_grad is not None:
            dx, _ = cake_rmsnorm_train_backward(grad_y, xs, w, rstd, g_residual=g_res, deterministic=ctx.deterministic,
                                                dw=ctx.main_grad, accumulate=True)
            dw = None
        else:
            dx, dw = cake_rmsnorm_train_backward(grad_y, xs, w, rstd, g_residual=g_res,
                                                 deterministic=ctx.deterministic, weight_grad=ctx.needs_input_grad[1])
            if dw is not None and w.dtype != torch.float32:
                dw = dw.to(w.dtype)
        return dx, dw, None, (dx if ctx.has_residual else None), None, None


def cake_rmsnorm(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float = 1e-6,
    residual: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    main_grad: Optional[torch.Tensor] = None,
):
    """Autograd-enabled fused RMSNorm (optionally with a fused residual add).

    Parameters
    ----------
    x : torch.Tensor
        BF16 or FP16 ``[..., H]`` (layout rules as :func:`cake_rmsnorm_train_forward`).
    w : torch.Tensor
        ``[H]`` weight, x's dtype or FP32. With ``requires_grad=False`` the backward skips dw.
    eps : float
        Variance epsilon.
    residual : torch.Tensor, optional
        When given, ``h_new = cast(x + residual)`` is normalised and returned too.
    deterministic : bool
        Passed to the backward (see :func:`cake_rmsnorm_train_backward`).
    main_grad : torch.Tensor, optional
        FP32 ``[H]`` buffer (Megatron's ``main_grad``): the backward adds dw into it in place and
        returns no gradient for ``w``.

    Returns
    -------
    y, or (y, h_new) with ``residual``. Only (x or h_new, w, rstd) are saved for the backward.
    """
    # x, w, eps and residual are validated once, by the forward inside the Function.
    C.check_bool(deterministic, "deterministic")
    if main_grad is not None:
        C.check_activation(x)
        C.require_tensor(main_grad, "main_grad")
        if main_grad.dtype != torch.float32 or tuple(main_grad.shape) != (x.shape[-1],):
            raise ValueError(f"main_grad must be float32 [{x.shape[-1]}], got {main_grad.dtype} "
                             f"{tuple(main_grad.shape)}")
        C.check_device(main_grad, x, "main_grad")
    return CakeRMSNormFunction.apply(x, w, eps, residual, deterministic, main_grad)
