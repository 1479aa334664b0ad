"""The ops, called the cheapest way that serves the call.

In eager, with nothing tracing or intercepting, a call goes straight to the op bodies through
the binding module ``_direct`` (no dispatcher, no boxing; the same bodies, so the same bits). Everything else goes through the registered ops (``torch.ops.cake_rmsnorm``): tracing
under torch.compile or export (which must see the ops), an active dispatch mode or functorch
transform, and tensors the direct path does not take (subclasses such as DTensor, fake or
meta tensors), for which the binding answers ``NotImplemented``. Tensors cross into the binding
through the stable ABI's Python shims (torch >= 2.14) or the tensor object's layout (2.10-2.13);
with neither (``CAKE_RMSNORM_DIRECT=off``) every call takes the registered ops.
"""

import torch

from ._lib import direct, ops

__all__ = ["fwd", "fwd_residual", "fwd_eager", "fwd_residual_eager", "fwd_out", "fwd_residual_out", "bwd", "bwd_dx", "bwd_out", "bwd_y", "bwd_y_dx",
           "DIRECT"]

DIRECT = direct is not None  # the direct binding is on (_lib.binding says through what)

_is_compiling = torch.compiler.is_compiling
_modes = torch._C._len_torch_dispatch_stack
_functorch = torch._C._are_functorch_transforms_active
_NI = NotImplemented

_fwd = ops.fwd.default
_fwd_residual = ops.fwd_residual.default
_fwd_out = ops.fwd_out.default
_fwd_residual_out = ops.fwd_residual_out.default
_bwd = ops.bwd.default
_bwd_dx = ops.bwd_dx.default
_bwd_out = ops.bwd_out.default
_bwd_y = ops.bwd_y.default
_bwd_y_dx = ops.bwd_y_dx.default


def eager() -> bool:
    """True where a call may skip the dispatcher: not tracing, no dispatch mode, no functorch."""
    return DIRECT and not _is_compiling() and not _modes() and not _functorch()


def fwd_eager(x, w, eps, out_dtype=None):
    """fwd where the caller has just seen eager() hold (one guard a call, not two)."""
    r = direct.fwd(x, w, eps, out_dtype)
    return _fwd(x, w, eps, out_dtype) if r is _NI else r


def fwd_residual_eager(x, residual, w, eps, out_dtype=None):
    r = direct.fwd_residual(x, residual, w, eps, out_dtype)
    return _fwd_residual(x, residual, w, eps, out_dtype) if r is _NI else r


def fwd(x, w, eps, out_dtype=None):
    if eager():
        r = direct.fwd(x, w, eps, out_dtype)
        if r is not _NI:
            return r
    return _fwd(x, w, eps, out_dtype)


def fwd_residual(x, residual, w, eps, out_dtype=None):
    if eager():
        r = direct.fwd_residual(x, residual, w, eps, out_dtype)
        if r is not _NI:
            return r
    return _fwd_residual(x, residual, w, eps, out_dtype)


def fwd_out(x, w, eps, y, rstd):
    if eager() and direct.fwd_out(x, w, eps, y, rstd) is not _NI:
        return
    _fwd_out(x, w, eps, y, rstd)


def fwd_residual_out(x, residual, w, eps, y, rstd, h_new):
    if eager() and direct.fwd_residual_out(x, residual, w, eps, y, rstd, h_new) is not _NI:
        return
    _fwd_residual_out(x, residual, w, eps, y, rstd, h_new)


def bwd(g, x, w, rstd, g_residual, dw_in_w_dtype=False):
    if eager():
        r = direct.bwd(g, x, w, rstd, g_residual, dw_in_w_dtype)
        if r is not _NI:
            return r
    return _bwd(g, x, w, rstd, g_residual, dw_in_w_dtype)


def bwd_dx(g, x, w, rstd, g_residual):
    if eager():
        r = direct.bwd_dx(g, x, w, rstd, g_residual)
        if r is not _NI:
            return r
    return _bwd_dx(g, x, w, rstd, g_residual)


def bwd_out(g, x, w, rstd, g_residual, dx, dw, workspace, max_ctas=0, accumulate=False):
    if eager() and direct.bwd_out(g, x, w, rstd, g_residual, dx, dw, workspace, max_ctas, accumulate) is not _NI:
        return
    _bwd_out(g, x, w, rstd, g_residual, dx, dw, workspace, max_ctas, accumulate)


def bwd_y(g, y, w, rstd, g_residual, dx_dtype=None, dw_in_w_dtype=False):
    if eager():
        r = direct.bwd_y(g, y, w, rstd, g_residual, dx_dtype, dw_in_w_dtype)
        if r is not _NI:
            return r
    return _bwd_y(g, y, w, rstd, g_residual, dx_dtype, dw_in_w_dtype)


def bwd_y_dx(g, y, w, rstd, g_residual, dx_dtype=None):
    if eager():
        r = direct.bwd_y_dx(g, y, w, rstd, g_residual, dx_dtype)
        if r is not _NI:
            return r
    return _bwd_y_dx(g, y, w, rstd, g_residual, dx_dtype)
