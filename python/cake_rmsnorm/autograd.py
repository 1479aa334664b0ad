"""The autograd entry point: one torch.autograd.Function over the ops, eager and compiled."""

import warnings
from typing import Optional

import torch
import torch.autograd.forward_ad as _fw_ad

from . import _checks as C
from ._sharding import is_dtensor
from ._calls import bwd as _bwd
from ._calls import eager as _eager
from ._calls import bwd_dx as _bwd_dx
from ._calls import bwd_out as _bwd_out
from ._calls import fwd as _fwd
from ._calls import fwd_residual as _fwd_residual
from ._calls import fwd_eager as _fwd_eager
from ._calls import fwd_residual_eager as _fwd_residual_eager
from ._calls import bwd_from_y as _bwd_from_y
from ._calls import bwd_from_y_dx as _bwd_from_y_dx
from ._memory import from_y_holds as _from_y_holds

__all__ = ["CakeRMSNormFunction", "cake_rmsnorm"]


def backward_core(grad_y, xs, w, rstd, g_res, main_grad, w_needs_grad, from_y=False, dx_dtype=None):
    """(dx, dw) of one norm: the fused backward and the dw finalize, which writes dw in w's
    dtype (None when w needs no gradient or main_grad received it in place). ``from_y``: xs is
    y, the forward's output (the memory-efficient mode), and dx comes back in ``dx_dtype``."""
    if grad_y is None:
        grad_y = torch.zeros_like(xs)
    if from_y:
        return _backward_from_y(grad_y, xs, w, rstd, g_res, main_grad, w_needs_grad, dx_dtype)
    if main_grad is not None:
        if type(xs) is not torch.Tensor and is_dtensor(xs):  # reduce in FP32, then accumulate
            dx, dw = _sharded_backward(grad_y, xs, w, rstd, g_res, torch.float32)
            main_grad.add_(dw)
            return dx, None
        dx = torch.empty_like(xs)
        _bwd_out(grad_y, xs, w, rstd, g_res, dx, main_grad, None, 0, True)
        return dx, None
    if w_needs_grad:
        if type(xs) is not torch.Tensor and is_dtensor(xs):
            return _sharded_backward(grad_y, xs, w, rstd, g_res)
        return _bwd(grad_y, xs, w, rstd, g_res, True)
    return _bwd_dx(grad_y, xs, w, rstd, g_res), None


def _backward_from_y(grad_y, y, w, rstd, g_res, main_grad, w_needs_grad, dx_dtype):
    """backward_core from y: xhat = y (1 / w) in the kernels; main_grad takes the FP32 dw in one add
    (the rounding the kernels' accumulate makes)."""
    dxd = None if dx_dtype == y.dtype else dx_dtype
    sharded = type(y) is not torch.Tensor and is_dtensor(y)
    if main_grad is not None or w_needs_grad:
        if sharded:
            dx, dw = _sharded_backward(grad_y, y, w, rstd, g_res, torch.float32 if main_grad is not None else None,
                                       from_y=True, dx_dtype=dxd)
        else:
            dx, dw = _bwd_from_y(grad_y, y, w, rstd, g_res, dxd, main_grad is None)
        if main_grad is None:
            return dx, dw
        main_grad.add_(dw)
        return dx, None
    return _bwd_from_y_dx(grad_y, y, w, rstd, g_res, dxd), None


def _sharded_backward(grad_y, xs, w, rstd, g_res, dtype=None, from_y=False, dx_dtype=None):
    """DTensor rows: each rank's dw is a Partial FP32 sum; DTensor reduces it in FP32, and the
    cast to w's dtype (or ``dtype``) comes once, after the reduction. ``from_y``: xs is y (the
    backward from the output), dx in ``dx_dtype`` (None: y's)."""
    from torch.distributed.tensor import Replicate
    if from_y:
        dx, dw = _bwd_from_y(grad_y, xs, w, rstd, g_res, dx_dtype, False)
    else:
        dx, dw = _bwd(grad_y, xs, w, rstd, g_res, False)
    dw = dw.redistribute(dw.device_mesh, [Replicate() if p.is_partial() else p for p in dw.placements])
    return dx, dw.to(dtype or w.dtype)


_SECOND_ORDER = ("cake_rmsnorm has no second-order derivative: its fused backward cannot be differentiated "
                 "(backward with create_graph=True, or torch.func's hessian, jacrev of jacrev, jacfwd of grad)")


def _backward(ctx, grad_y, grad_h):
    """Both Functions' backward: (dx, dw, dresidual), each None where not wanted."""
    if torch.is_grad_enabled():
        if not torch._C._are_functorch_transforms_active():
            raise RuntimeError(_SECOND_ORDER)
        _no_outer_derivative(getattr(ctx, "level", None))
    xs, w, rstd, main_grad = ctx.saved_tensors
    g_res = grad_h if ctx.has_residual else None
    dx, dw = backward_core(grad_y, xs, w, rstd, g_res, main_grad, ctx.needs_input_grad[1], ctx.from_y, ctx.dx_dtype)
    dres = None
    if ctx.has_residual and ctx.needs_input_grad[3]:
        dres = dx if ctx.residual_dtype == dx.dtype else dx.to(ctx.residual_dtype)
    return dx, dw, dres


def _no_outer_derivative(own_level):
    """Refuse a torch.func transform that would differentiate this backward: a live grad or jvp
    level other than the one the call was made at (the kernels' backward has no derivative, and
    functorch would otherwise see it as a constant)."""
    from torch._C._functorch import TransformType, get_interpreter_stack
    for level in get_interpreter_stack() or ():
        if level.key() in (TransformType.Grad, TransformType.Jvp) and level.level() != own_level:
            raise RuntimeError(_SECOND_ORDER)


class _NormFunction(torch.autograd.Function):
    """``apply(x, w, eps, residual, main_grad, out_dtype, from_y)``, inputs validated by the caller
    (:func:`apply` makes this one positional call; everything above it passes options by name).

    Returns ``y`` (no residual) or ``(y, h_new)``. The backward is the fused backward kernel
    and the dw finalize, which writes dw in w's dtype itself (FP32 accumulation, one rounding):
    two launches. dx goes to x (and, the same tensor, to residual: the gradient of both inputs
    of the add). A weight that needs no gradient costs no dw work. With ``main_grad`` (an FP32
    [H] buffer), dw is added into it in place and no weight gradient is returned. Saves only
    (x or h_new, w, rstd); with ``from_y`` (the memory-efficient mode, where the weight passed
    the rebuild rule: _memory.py), (y, w, rstd), and the backward rebuilds xhat = y (1 / w).
    Under torch.func's transforms the call goes to :class:`_TransformableFunction` instead.
    """

    @staticmethod
    def forward(ctx, x, w, eps, residual, main_grad, out_dtype, from_y):
        ctx.from_y, ctx.dx_dtype = from_y, x.dtype
        if residual is None:
            y, rstd = _fwd(x, w, eps, out_dtype)
            ctx.save_for_backward(y if from_y else x, w, rstd, main_grad)
            ctx.has_residual = False
            return y
        y, rstd, h = _fwd_residual(x, residual, w, eps, out_dtype)
        ctx.save_for_backward(y if from_y else h, w, rstd, main_grad)
        ctx.has_residual = True
        ctx.residual_dtype = residual.dtype  # a 16-bit branch beside float32 x gets its gradient cast
        return y, h

    @staticmethod
    def backward(ctx, grad_y, grad_h=None):
        dx, dw, dres = _backward(ctx, grad_y, grad_h)
        return dx, dw, None, dres, None, None, None


class CakeRMSNormFunction(_NormFunction):
    """The public Function with the seeds' signature, ``apply(x, w, eps, residual=None,
    deterministic=True, main_grad=None, out_dtype=None, from_y=False)``, inputs validated by the
    caller (``deterministic`` is accepted and changes nothing). :func:`cake_rmsnorm` is the
    checked call."""

    @staticmethod
    def forward(ctx, x, w, eps, residual=None, deterministic=True, main_grad=None, out_dtype=None, from_y=False):
        del deterministic  # the seeds' argument: dw is deterministic on every path
        return _NormFunction.forward(ctx, x, w, eps, residual, main_grad, out_dtype, from_y)

    @staticmethod
    def backward(ctx, grad_y, grad_h=None):
        dx, dw, dres = _backward(ctx, grad_y, grad_h)
        return dx, dw, None, dres, None, None, None, None


class _TransformableFunction(torch.autograd.Function):
    """The same call in the form torch.func's transforms take (grad, vmap, jacrev, jvp, jacfwd,
    functional_call under them, forward-mode dual tensors): forward without ctx, setup_context,
    rstd as a non-differentiable output, vmap rules generated (the ops' own, _vmap.py: a batch
    folds into rows, so the kernels' bits) and a jvp from the saved statistics. Plain eager and
    compiled calls keep :class:`CakeRMSNormFunction`, whose one output costs less host time."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w, eps, residual, main_grad, out_dtype, from_y):
        if residual is None:
            return _fwd(x, w, eps, out_dtype)
        return _fwd_residual(x, residual, w, eps, out_dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, eps, residual, main_grad, out_dtype, from_y = inputs
        has_res = residual is not None
        y, rstd = output[0], output[1]
        h = output[2] if has_res else x
        ctx.from_y, ctx.dx_dtype = from_y, x.dtype
        ctx.y_dtype = y.dtype
        ctx.has_residual = has_res
        ctx.residual_dtype = residual.dtype if has_res else None
        ctx.save_for_backward(y if from_y else h, w, rstd, main_grad)
        ctx.save_for_forward(h, w, rstd)
        ctx.mark_non_differentiable(rstd)
        ctx.set_materialize_grads(False)
        ctx.level = torch._C._functorch.maybe_current_level()  # the transform level the call was made at

    @staticmethod
    def backward(ctx, grad_y, grad_rstd, grad_h=None):
        del grad_rstd  # rstd is not differentiable
        dx, dw, dres = _backward(ctx, grad_y, grad_h)
        return dx, dw, None, dres, None, None, None

    @staticmethod
    def jvp(ctx, x_t, w_t, eps_t, r_t, mg_t, od_t, sy_t):
        """y = xhat * w with xhat = h * rstd: y' = rstd w (h' - xhat mean(xhat h')) + xhat w'; in FP32."""
        h, w, rstd = ctx.saved_tensors  # save_for_forward's
        h_t = x_t if r_t is None else (r_t if x_t is None else x_t + r_t)
        y_dtype = ctx.y_dtype
        r = rstd.unsqueeze(-1)
        xhat = h.float() * r
        y_t = None
        if h_t is not None:
            ht = h_t.float()
            y_t = r * (ht - xhat * (xhat * ht).mean(-1, keepdim=True)) * w.float()
        if w_t is not None:
            y_t = xhat * w_t.float() if y_t is None else y_t + xhat * w_t.float()
        y_t = None if y_t is None else y_t.to(y_dtype)
        if ctx.has_residual:
            return y_t, None, (None if h_t is None else h_t.to(h.dtype))
        return y_t, None


def cake_rmsnorm(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float = 1e-6,
    residual: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    main_grad: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    memory_efficient: bool = False,
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
        Variance epsilon (a Python or NumPy float, finite, >= 0 and within FP32; under torch.compile a
        Python float is specialised, one graph per value, as for F.rms_norm).
    residual : torch.Tensor, optional
        When given, ``h_new = cast(x + residual)`` is normalised and returned too. x's dtype, or
        AMP's mixed add: one of x and residual float32 (the residual stream) and the other 16-bit
        (the branch added to it), in either order; ``h_new`` is then float32, y float32 or
        ``out_dtype`` (the branch's dtype), w the branch's dtype or float32, and the branch's
        gradient comes back in its dtype.
    deterministic : bool
        Accepted for the seeds' API and checked; it changes nothing: dw is summed in a fixed order
        on every path, and no faster non-deterministic dw was found (docs/python_api.md).
    main_grad : torch.Tensor, optional
        FP32 ``[H]`` buffer (Megatron's ``main_grad``): the backward adds dw into it in place and
        returns no gradient for ``w``.
    out_dtype : torch.dtype, optional
        With FP32 x (or an FP32 residual stream): y in torch.bfloat16 or torch.float16 (the
        compute dtype, cast in the same pass); its gradient comes back in that dtype, dx in FP32.

    memory_efficient : bool
        Save y (the output, which the next Linear keeps anyway) instead of x or h_new, and rebuild
        xhat = y (1 / w) in the backward, where every column of w lies in the rebuild range (else x is
        saved after all: no biased gradient; docs/python_api.md#memory-efficient). Checking w
        reads it on the host once a version of the tensor. The CPU path's kernels; under
        torch.compile this functional form saves x (the module form, ``RMSNorm``, keeps the mode).

    Returns
    -------
    y, or (y, h_new) with ``residual``. The backward returns dw in w's dtype, written by the
    dw finalize itself (no separate cast). Only (x or h_new, w, rstd) are saved, or (y, w, rstd).
    """
    if type(eps) is not float or not 0.0 <= eps <= C.EPS_MAX:
        eps = C.check_eps(eps)
    if deterministic is not True and deterministic is not False:
        C.check_bool(deterministic, "deterministic")
    if main_grad is not None:
        C.check_activation(x)
        C.check_main_grad(main_grad, x)
    if out_dtype is not None:
        C.check_activation(x)
        mixed = C.mixed_stream(x, residual)
        out_dtype = C.check_out_dtype(out_dtype, mixed[0] if mixed else x)
        if mixed:
            C.check_residual(residual, x, w, out_dtype, either=True)
    from_y = False
    if memory_efficient is not False:
        C.check_bool(memory_efficient, "memory_efficient")
        if memory_efficient and not torch.compiler.is_compiling():
            from_y = from_y_holds_for(x, w, residual, out_dtype)
            if not from_y and torch.is_grad_enabled() and isinstance(w, torch.Tensor) \
                    and isinstance(x, torch.Tensor) and y_dtype_of(x, residual, out_dtype) in C.ACT_DTYPES:
                warnings.warn("cake_rmsnorm(memory_efficient=True) saves x, not y: w has columns outside the range "
                              "y rebuilds x from (docs/python_api.md#memory-efficient-mode)", stacklevel=2)
    return apply(x, w, residual, eps=eps, main_grad=main_grad, out_dtype=out_dtype, from_y=from_y)


def y_dtype_of(x, residual, out_dtype):
    """y's dtype: out_dtype, or the stream's (x's, or float32 with AMP's mixed add)."""
    return out_dtype or (torch.float32 if C.mixed_stream(x, residual) else x.dtype)


def from_y_holds_for(x, w, residual, out_dtype, source=None, transform=None):
    """The memory-efficient rule for this call (_memory.py)."""
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() < 1 or w.dim() != 1:
        return False  # refused by the kernels' checks with the documented error
    return _from_y_holds(w, y_dtype_of(x, residual, out_dtype), x.shape[-1], source, transform)


def apply(x, w, residual=None, *, eps, main_grad=None, out_dtype=None, from_y=False):
    """The autograd call on inputs whose scalar options are checked (eps, main_grad, out_dtype),
    options by name. In eager the kernels' own checks gate the call, and a refusal re-runs the
    Python checks for the documented error; traced calls check up front."""
    if not _eager():
        if _transforms():  # torch.func (grad, vmap, jvp, ...) or forward-mode dual tensors
            C.check_forward_inputs(x, w, residual, layout=False)
            return _apply_transformable(x, w, residual, eps, main_grad, out_dtype, from_y)
        C.check_forward_mode(x, w, residual)
        C.check_forward_inputs(x, w, residual, layout=False)
        return _apply(x, w, residual, eps, main_grad, out_dtype, from_y, _fwd, _fwd_residual)
    if _fw_ad._current_level >= 0 and _dual(x, w, residual):  # forward_ad.dual_level() with dual inputs
        return _apply_transformable(x, w, residual, eps, main_grad, out_dtype, from_y)
    try:
        return _apply(x, w, residual, eps, main_grad, out_dtype, from_y, _fwd_eager, _fwd_residual_eager)
    except Exception:
        C.check_forward_inputs(x, w, residual, layout=False)  # raises the documented error
        raise


def _transforms() -> bool:
    return not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active()


def _dual(*ts) -> bool:
    return any(isinstance(t, torch.Tensor) and _fw_ad.unpack_dual(t).tangent is not None for t in ts)


def _apply_transformable(x, w, residual, eps, main_grad, out_dtype, from_y):
    """_apply's call under torch.func's transforms and forward-mode AD (_TransformableFunction)."""
    if residual is not None and residual.dtype is not x.dtype and residual.dtype is torch.float32:
        x, residual = residual, x
    out = _TransformableFunction.apply(x, w, eps, residual, main_grad, out_dtype, from_y)
    return out[0] if residual is None else (out[0], out[2])


def _apply(x, w, residual, eps, main_grad, out_dtype, from_y, fwd, fwd_residual):
    """_NormFunction.apply, or the bare kernel where nothing needs a gradient (no autograd node to
    build: inference, frozen layers, activation recompute). A float32 residual beside a 16-bit x
    goes in as x (the kernels' stream); the add, and each input's gradient, are the same."""
    if residual is not None and residual.dtype is not x.dtype and residual.dtype is torch.float32:
        x, residual = residual, x
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                    or (residual is not None and residual.requires_grad)):
        return _NormFunction.apply(x, w, eps, residual, main_grad, out_dtype, from_y)
    if residual is None:
        return fwd(x, w, eps, out_dtype)[0]
    y, _, h = fwd_residual(x, residual, w, eps, out_dtype)
    return y, h
