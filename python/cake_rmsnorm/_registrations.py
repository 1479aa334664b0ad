"""Fake (meta) kernels and autograd formulas of the C++ ops, so the ops trace under
torch.compile / export and differentiate when called directly."""

import torch

from ._lib import ops

_NS = "cake_rmsnorm"


@torch.library.register_fake(f"{_NS}::fwd")
def _fwd_fake(x, w, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32)


@torch.library.register_fake(f"{_NS}::fwd_residual")
def _fwd_residual_fake(x, residual, w, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:1], dtype=torch.float32), x.new_empty(x.shape)


@torch.library.register_fake(f"{_NS}::fwd_out")
def _fwd_out_fake(x, w, eps, y, rstd):
    return None


@torch.library.register_fake(f"{_NS}::fwd_residual_out")
def _fwd_residual_out_fake(x, residual, w, eps, y, rstd, h_new):
    return None


@torch.library.register_fake(f"{_NS}::bwd")
def _bwd_fake(g, x, w, rstd, g_residual, deterministic):
    return x.new_empty(x.shape), x.new_empty(x.shape[1:], dtype=torch.float32)


@torch.library.register_fake(f"{_NS}::bwd_dx")
def _bwd_dx_fake(g, x, w, rstd, g_residual):
    return x.new_empty(x.shape)


@torch.library.register_fake(f"{_NS}::bwd_out")
def _bwd_out_fake(g, x, w, rstd, g_residual, deterministic, dx, dw, workspace, max_ctas=0, accumulate=False):
    return None


def _dw_as(dw, w):
    return dw if w.dtype == torch.float32 else dw.to(w.dtype)


def _fwd_setup(ctx, inputs, output):
    x, w, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, w, rstd)
    ctx.mark_non_differentiable(rstd)


def _fwd_backward(ctx, grad_y, grad_rstd):
    x, w, rstd = ctx.saved_tensors
    dx, dw = ops.bwd(grad_y, x, w, rstd, None, True)  # the op copies layouts it cannot read
    return dx, _dw_as(dw, w), None


def _fwd_residual_setup(ctx, inputs, output):
    _, _, w, _ = inputs
    _, rstd, h = output
    ctx.save_for_backward(h, w, rstd)
    ctx.mark_non_differentiable(rstd)


def _fwd_residual_backward(ctx, grad_y, grad_rstd, grad_h):
    h, w, rstd = ctx.saved_tensors
    if grad_y is None:
        grad_y = torch.zeros_like(h)
    dx, dw = ops.bwd(grad_y, h, w, rstd, grad_h, True)
    return dx, dx, _dw_as(dw, w), None


torch.library.register_autograd(f"{_NS}::fwd", _fwd_backward, setup_context=_fwd_setup)
torch.library.register_autograd(f"{_NS}::fwd_residual", _fwd_residual_backward, setup_context=_fwd_residual_setup)
