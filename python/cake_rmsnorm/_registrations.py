"""Fake (meta) kernels of the C++ ops, so they trace under torch.compile and export, and their
autograd formula for direct op callers (the backward of ``CakeRMSNormFunction``)."""

import torch

from ._lib import ops  # noqa: F401  (loads the library that defines the ops)
from .autograd import backward_core

_NS = "cake_rmsnorm"


@torch.library.register_fake(f"{_NS}::fwd")
def _fwd_fake(x, w, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake(f"{_NS}::fwd_residual")
def _fwd_residual_fake(x, residual, w, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32), x.new_empty(x.shape)


@torch.library.register_fake(f"{_NS}::fwd_out")
def _fwd_out_fake(x, w, eps, y, rstd):
    return None


@torch.library.register_fake(f"{_NS}::fwd_residual_out")
def _fwd_residual_out_fake(x, residual, w, eps, y, rstd, h_new):
    return None


@torch.library.register_fake(f"{_NS}::bwd")
def _bwd_fake(g, x, w, rstd, g_residual, deterministic, dw_in_w_dtype=False):
    return x.new_empty(x.shape), x.new_empty(x.shape[-1:], dtype=w.dtype if dw_in_w_dtype else torch.float32)


@torch.library.register_fake(f"{_NS}::bwd_dx")
def _bwd_dx_fake(g, x, w, rstd, g_residual):
    return x.new_empty(x.shape)


@torch.library.register_fake(f"{_NS}::bwd_out")
def _bwd_out_fake(g, x, w, rstd, g_residual, deterministic, dx, dw, workspace, max_ctas=0, accumulate=False):
    return None


# Autograd of the ops for direct callers (torch.ops.cake_rmsnorm.fwd with inputs that need a
# gradient): the backward of CakeRMSNormFunction, which cake_rmsnorm, RMSNorm and patch() use
# (and which reaches these ops' kernels below this formula, so no call pays for both).
def _fwd_setup(ctx, inputs, output):
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])
    ctx.mark_non_differentiable(output[1])


def _fwd_backward(ctx, grad_y, grad_rstd):
    x, w, rstd = ctx.saved_tensors
    dx, dw = backward_core(ctx, grad_y, x, w, rstd, None, None, ctx.needs_input_grad[1])
    return dx, dw, None


def _fwd_residual_setup(ctx, inputs, output):
    _, rstd, h = output
    ctx.save_for_backward(h, inputs[2], rstd)
    ctx.mark_non_differentiable(rstd)


def _fwd_residual_backward(ctx, grad_y, grad_rstd, grad_h):
    h, w, rstd = ctx.saved_tensors
    dx, dw = backward_core(ctx, grad_y, h, w, rstd, grad_h, None, ctx.needs_input_grad[2])
    return dx, dx, dw, None


torch.library.register_autograd(f"{_NS}::fwd", _fwd_backward, setup_context=_fwd_setup)
torch.library.register_autograd(f"{_NS}::fwd_residual", _fwd_residual_backward, setup_context=_fwd_residual_setup)
