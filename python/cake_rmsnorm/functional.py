"""The training RMSNorm entry points: forward, backward and the backward workspace."""

import numbers
from typing import Optional, Tuple, Union

import torch

from . import _checks as C
from . import _calls as ops
from ._lib import saturating_rows, workspace_bytes

__all__ = [
    "cake_rmsnorm_train_forward",
    "cake_rmsnorm_train_backward",
    "cake_rmsnorm_train_backward_workspace_bytes",
    "cake_rmsnorm_train_backward_workspace",
]


MAX_ROWS = 2**62  # the C API's int64 sizes, with room for rows * hidden
MAX_HIDDEN = C.MAX_HIDDEN  # the C API's widest row


def _device(device) -> torch.device:
    if isinstance(device, bool):
        raise TypeError("device must be a torch.device, str or int, got bool")
    if isinstance(device, int) and device < 0:
        raise ValueError(f"device must be a CPU or CUDA device, got the index {device}")
    if isinstance(device, (str, int)):
        try:
            device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device must be a CPU or CUDA device, got {device!r} ({e})") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, str or int, got {type(device).__name__}")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a CPU or CUDA device, got {device}")
    return device


def _check_rows_hidden(rows, hidden):
    """(rows, hidden) as ints: Python or NumPy integers (bools refused)."""
    for name, v in (("rows", rows), ("hidden", hidden)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or type(v).__name__ == "bool_":
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    rows, hidden = int(rows), int(hidden)
    if not 0 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be >= 0 and at most {MAX_ROWS}, got {rows}")
    return rows, C.check_width(hidden)


def cake_rmsnorm_train_backward_workspace_bytes(rows: int, hidden: int, device=None) -> int:
    """Bytes of the caller-owned backward workspace for ``rows`` rows of width ``hidden``.

    Parameters
    ----------
    rows : int
        Largest token count (rows after collapsing leading dims) the workspace will serve.
    hidden : int
        Hidden size, a positive multiple of 8.
    device : torch.device, str or int, optional
        The device the workspace will live on (the size is the same on every device).

    Returns
    -------
    int
        ``chunks(rows, hidden) * hidden * 4``: one FP32 dw partial per row chunk. The chunk
        count is a function of ``rows`` and ``hidden`` alone (never of the device),
        nondecreasing in ``rows`` and capped, so a workspace sized for the largest T of a run
        serves every smaller T, and one sized for ``rows >= saturating_workspace_rows(hidden)``
        serves every T.
    """
    rows, hidden = _check_rows_hidden(rows, hidden)
    if device is not None:
        _device(device)
    return workspace_bytes(rows, hidden)


def cake_rmsnorm_train_backward_workspace(rows: int, hidden: int, device=None) -> torch.Tensor:
    """Allocate a zero-initialised uint8 backward workspace of
    :func:`cake_rmsnorm_train_backward_workspace_bytes` bytes (at least 16) on ``device``.

    The contents need not be preserved between calls: every backward overwrites what it reads.
    """
    n = cake_rmsnorm_train_backward_workspace_bytes(rows, hidden, device)
    dev = _device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {dev}: no CUDA device is available")
    return torch.zeros(max(n, 16), dtype=torch.uint8, device=dev)


def _check_out(out, ref: torch.Tensor, shape, dtype, name):
    C.require_tensor(out, name)
    if out.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {out.dtype}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    C.check_device(out, ref, name)
    C.check_writable(out, name)


def cake_rmsnorm_train_forward(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    *,
    residual: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    rstd: Optional[torch.Tensor] = None,
    residual_out: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Fused RMSNorm forward with FP32 statistics.

    ``rstd = 1 / sqrt(mean(h^2) + eps)`` and ``y = cast(h * rstd * w)``, where ``h = x``, or,
    with ``residual``, ``h = h_new = cast(x + residual)`` (returned). Statistics are FP32
    with IEEE division and square root.

    Parameters
    ----------
    x : torch.Tensor
        BF16, FP16 or FP32 ``[..., H]`` (FP32: the residual stream of mixed-precision training;
        on CUDA H <= 16384), H a positive multiple of 8, on CPU or CUDA. 2-D row-strided
        views with a contiguous feature dim and 16-byte aligned base and row stride are read in
        place; other 2-D layouts are copied once. N-D inputs need a contiguous feature dim and
        leading dims contiguous with one another (e.g. a ``[T, heads, 256]`` slice of a wider
        buffer), else ``ValueError``.
    w : torch.Tensor
        ``[H]`` weight of x's dtype, or FP32 (the effective ``1 + w`` of a zero-centred model);
        with FP32 x also BF16 or FP16.
    eps : float
        Variance epsilon, finite and >= 0.
    residual : torch.Tensor, optional
        Update of x's shape and dtype added to x before normalisation.
    out, rstd, residual_out : torch.Tensor, optional
        Preallocated outputs (keyword-only): y of x's shape and dtype, FP32 rstd of x's leading
        shape, and h_new of x's shape (with ``residual`` only). Any layout: dense aligned
        buffers are written directly, others receive a copy. Outputs may not overlap each
        other or the inputs.
    out_dtype : torch.dtype, optional
        y's dtype when not x's: with FP32 x, torch.bfloat16 or torch.float16 (the compute
        dtype autocast casts to next, done in the same pass). h_new and rstd stay FP32.

    Returns
    -------
    (y, rstd) or (y, rstd, h_new) when ``residual`` is given.

    Notes
    -----
    T = 0 returns empty outputs. A row's y, rstd and h_new do not depend on T: every program a
    width runs at some token count (``program_windows``) sums a row in one order
    (``docs/programs.md``, "One order a width"), and the residual route's y and rstd are the
    plain route's on h_new.
    """
    C.check_activation(x)
    C.check_weight(w, x)
    eps = C.check_eps(eps)
    out_dtype = C.check_out_dtype(out_dtype, x)
    y_dtype = out_dtype or x.dtype
    if residual is not None:
        C.check_residual(residual, x, w, out_dtype)
    elif residual_out is not None:
        raise ValueError("residual_out is only produced with residual")
    lead = x.shape[:-1]
    if out is not None:
        _check_out(out, x, x.shape, y_dtype, "out")
    if rstd is not None:
        _check_out(rstd, x, lead, torch.float32, "rstd")
    if residual_out is not None:
        _check_out(residual_out, x, x.shape, x.dtype, "residual_out")
    C.check_no_overlap({"out": out, "rstd": rstd, "residual_out": residual_out},
                       {"x": x, "w": w, "residual": residual})
    if torch.is_grad_enabled():
        # Not differentiable: its y would have no grad_fn, and a backward through it would fail
        # far from here (or leave w without a gradient). Said where the call is made instead.
        needs = [n for n, t in (("x", x), ("w", w), ("residual", residual)) if t is not None and t.requires_grad]
        if needs:
            raise ValueError(f"{', '.join(needs)} {'requires' if len(needs) == 1 else 'require'} grad, and "
                             "cake_rmsnorm_train_forward is not differentiable: call cake_rmsnorm(x, w, eps, ...) "
                             "(autograd), or run it under torch.no_grad()")

    # The ops read N-D inputs in place (or through one copy) and write caller buffers of any
    # layout directly or through a copy back.
    if out is None and rstd is None and residual_out is None:
        if residual is None:
            return ops.fwd(x, w, eps, out_dtype)
        return ops.fwd_residual(x, residual, w, eps, out_dtype)
    y = out if out is not None else torch.empty_like(x, dtype=y_dtype, memory_format=torch.contiguous_format)
    s = rstd if rstd is not None else x.new_empty(lead, dtype=torch.float32)
    if residual is None:
        ops.fwd_out(x, w, eps, y, s)
        return y, s
    h = residual_out if residual_out is not None else torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.fwd_residual_out(x, residual, w, eps, y, s, h)
    return y, s, h


def cake_rmsnorm_train_backward(
    g: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    rstd: torch.Tensor,
    *,
    g_residual: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    workspace: Optional[torch.Tensor] = None,
    dx: Optional[torch.Tensor] = None,
    dw: Optional[torch.Tensor] = None,
    weight_grad: bool = True,
    accumulate: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Fused RMSNorm backward: dx of x's dtype and the FP32 weight gradient dw.

    With ``xhat = x * rstd``: ``dx = rstd * (g*w - mean(g*w*xhat) * xhat)`` (plus
    ``g_residual`` when given) and ``dw = sum over rows of g * xhat``, all in FP32.

    Parameters
    ----------
    g : torch.Tensor
        Gradient of y, x's shape and dtype (with FP32 x also y's 16-bit dtype); dx and
        g_residual have x's dtype.
    x : torch.Tensor
        The normalised input of the forward: x, or h_new of the residual route.
    w : torch.Tensor
        The forward's weight ([H], x's dtype or FP32).
    rstd : torch.Tensor
        The forward's FP32 rstd, x's leading shape.
    g_residual : torch.Tensor, optional
        Gradient flowing into h_new from the residual stream; added into dx, so the returned
        dx_total is the gradient of both inputs of the residual add.
    deterministic : bool
        True (default): dw is bitwise identical across calls for a given T, on any GPU and on
        the CPU (the reduction tree is a function of T and the width alone). False may use a
        faster dw with the same accuracy; it runs the deterministic path, since no faster one
        was found on the H200 (atomic dw adds measured up to 3.2x slower, at best 1-2 %
        faster: docs/perf/runs/h200-nondet-atomic.md).
    workspace : torch.Tensor, optional
        Caller-owned buffer of at least :func:`cake_rmsnorm_train_backward_workspace_bytes`
        bytes on x's device, contiguous and 16-byte aligned. With it no memory is allocated
        (dx and dw given too), so the call can be captured in a CUDA graph.
    dx, dw : torch.Tensor, optional
        Preallocated outputs (dx of x's shape and dtype, FP32 dw [H]); any layout.
    weight_grad : bool
        False skips the weight gradient and its work (a frozen weight): returns (dx, None).
    accumulate : bool
        With ``dw`` given: ``dw += sum_rows(g * xhat)`` (the compensated sum is added with one
        rounding), e.g. into an FP32 ``main_grad`` buffer, instead of overwriting it.

    Returns
    -------
    (dx, dw), dw None when ``weight_grad`` is False.
    """
    C.check_activation(x)
    C.check_grad_like(g, x, "g")
    C.check_weight(w, x)
    C.check_rstd(rstd, x)
    C.check_bool(deterministic, "deterministic")
    C.check_bool(weight_grad, "weight_grad")
    C.check_bool(accumulate, "accumulate")
    if accumulate and dw is None:
        raise ValueError("accumulate needs dw, the buffer to add the weight gradient into")
    if not weight_grad and (dw is not None or accumulate):
        raise ValueError("dw and accumulate need weight_grad=True")
    if g_residual is not None:
        C.check_like(g_residual, x, "g_residual")
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    if dx is not None:
        _check_out(dx, x, x.shape, x.dtype, "dx")
    if dw is not None:
        _check_out(dw, x, (hidden,), torch.float32, "dw")
    if workspace is not None:
        C.require_tensor(workspace, "workspace")
        C.check_device(workspace, x, "workspace")
        if not workspace.is_contiguous():
            raise ValueError("workspace must be contiguous")
        if not C._fake(workspace):
            # Sizes and pointers exist in eager only; under torch.compile the C API checks
            # them when the graph runs (and no ctypes call breaks the graph).
            need = workspace_bytes(rows, hidden)
            have = workspace.numel() * workspace.element_size()
            if have < need:
                raise ValueError(
                    f"workspace too small: {rows} rows of hidden {hidden} need {need} bytes, got {have} "
                    f"(cake_rmsnorm_train_backward_workspace_bytes)")
            if workspace.data_ptr() % 16:
                raise ValueError("workspace must be 16-byte aligned")
    C.check_no_overlap({"dx": dx, "dw": dw, "workspace": workspace},
                       {"g": g, "x": x, "w": w, "rstd": rstd, "g_residual": g_residual})
    # The ops read N-D inputs in place (or through one copy), write caller buffers of any
    # layout (directly or through a copy back) and allocate the workspace when none is given.
    if not weight_grad and dx is None:
        return ops.bwd_dx(g, x, w, rstd, g_residual), None
    if dx is None and dw is None and workspace is None:
        return ops.bwd(g, x, w, rstd, g_residual)
    dx1 = dx if dx is not None else torch.empty_like(x, memory_format=torch.contiguous_format)
    if not weight_grad:
        ops.bwd_out(g, x, w, rstd, g_residual, dx1, None, None)
        return dx1, None
    dw1 = dw if dw is not None else x.new_empty((hidden,), dtype=torch.float32)
    ops.bwd_out(g, x, w, rstd, g_residual, dx1, dw1, workspace, 0, accumulate)
    return dx1, dw1


def saturating_workspace_rows(hidden: int) -> int:
    """Token count from which the backward workspace size for width ``hidden`` stops growing
    (8191 for hidden <= 256, 65505 up to 512, 32737 up to 2048, 16353 up to 4096, 511 above).
    The size there is the largest any T needs."""
    _, hidden = _check_rows_hidden(0, hidden)
    return saturating_rows(hidden)
