"""cake-rmsnorm: fused RMSNorm training kernels (forward and backward) for PyTorch.

    import cake_rmsnorm as cr
    y, rstd = cr.cake_rmsnorm_train_forward(x, w, eps)
    dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    y = cr.cake_rmsnorm(x, w, eps)          # autograd
"""

import os

import torch

from ._version import __version__
from ._lib import SHIPPED_ARCHS, built_archs, library_path, ops, plan as _plan, windows as _windows
from . import _registrations  # noqa: F401  (fakes of the ops)
from .autograd import CakeRMSNormFunction, cake_rmsnorm
from .nn import RMSNorm
from .patching import PatchReport, patch, patched, probe_norm, unpatch
from .functional import (
    cake_rmsnorm_train_backward,
    cake_rmsnorm_train_backward_workspace,
    cake_rmsnorm_train_backward_workspace_bytes,
    cake_rmsnorm_train_forward,
    saturating_workspace_rows,
)

# The seeds' deterministic-package names: the default path is the deterministic one.
cake_rmsnorm_det_train_forward = cake_rmsnorm_train_forward
cake_rmsnorm_det_train_backward = cake_rmsnorm_train_backward
cake_rmsnorm_det_train_backward_workspace_bytes = cake_rmsnorm_train_backward_workspace_bytes
cake_rmsnorm_det_train_backward_workspace = cake_rmsnorm_train_backward_workspace
cake_rmsnorm_det = cake_rmsnorm

ROUTES = ("fwd", "fwd_residual", "bwd", "bwd_residual")
_ARCH_NAMES = ", ".join(str(sm) for sm in SHIPPED_ARCHS)


def weight_dtypes(hidden: int, device=None) -> tuple:
    """Weight dtypes served for ``hidden`` on ``device``: the activation's own dtype
    (torch.bfloat16 or torch.float16) and torch.float32. Empty if the width is not served."""
    if isinstance(hidden, bool) or not isinstance(hidden, int):
        raise TypeError(f"hidden must be an int, got {type(hidden).__name__}")
    if hidden <= 0 or hidden % 8:
        return ()
    return (torch.bfloat16, torch.float16, torch.float32)


def _device_sm(device) -> int:
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda":
        raise ValueError(f"program_windows needs a CUDA device or an explicit sm, got {dev}")
    if not torch.cuda.is_available():
        raise ValueError(f"program_windows: no CUDA device is available; pass sm= (one of {_ARCH_NAMES})")
    major, minor = torch.cuda.get_device_capability(dev)
    return major * 10 + minor


def program_windows(route: str = None, hidden: int = None, sm: int = None, device=None) -> dict:
    """The token-count windows of the dispatch tables.

    Parameters
    ----------
    route : str, optional
        One of ``ROUTES``; all when omitted.
    hidden : int
        Hidden size (a multiple of 8).
    sm : int, optional
        Architecture as one of ``SHIPPED_ARCHS`` (90, 100, 103, 107); taken from ``device`` (or the current CUDA
        device) when omitted.

    Returns
    -------
    dict
        ``{route: [(above, at_most, program), ...]}``: the program serving
        ``above < T <= at_most`` (``at_most`` None: unbounded), named
        ``general_t{threads a row}x{row groups a CTA}_v{vectors a thread}_s{ring stages}``
        (``s0``: the streaming forward, no ring), with ``_r{rows}`` where a streaming row group
        takes several rows.
    """
    if isinstance(hidden, bool) or not isinstance(hidden, int):
        raise TypeError(f"hidden must be an int, got {type(hidden).__name__}")
    if hidden <= 0 or hidden % 8:
        raise ValueError(f"hidden must be a positive multiple of 8, got {hidden}")
    if sm is None:
        sm = _device_sm(device if device is not None else torch.device("cuda"))
    routes = ROUTES if route is None else (route,)
    for r in routes:
        if r not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {r!r}")
    out = {r: _windows(r, hidden, sm) for r in routes}
    if not any(out.values()):
        raise ValueError(f"sm must be one of {_ARCH_NAMES}, got {sm}")
    return out


def launch_plan(route: str, hidden: int, tokens: int, *, weight_dtype=None, sm: int = None, sms: int = None,
                device=None) -> dict:
    """What one call of BF16/FP16 activations runs: the plan the launchers resolve.

    Parameters
    ----------
    route : str
        One of ``ROUTES``.
    hidden, tokens : int
        The row width (a multiple of 8) and the number of rows (tokens, or tokens x heads).
    weight_dtype : torch.dtype, optional
        torch.float32 or a 16-bit dtype (default: 16-bit); the forward's w load depends on it.
    sm, sms : int, optional
        Architecture (one of ``SHIPPED_ARCHS``) and SM count; taken from ``device`` (or the
        current CUDA device) when omitted. The SM count sets the backward's finalize shape.

    Returns
    -------
    dict
        ``program`` (named as in :func:`program_windows`, ``_r{rows}`` where a streaming group
        takes several rows), ``exact`` (the constant-width instance of an exact narrow group)
        and ``measured`` (False where sm's tuning table is an unmeasured copy of sm_90a's); the forward adds ``kernel`` ("ring" or "streaming"), ``warp_sync`` and, when
        streaming, ``w_load``; the backward adds ``chunks`` (dw partials), ``finalize``
        (columns a CTA, lanes a column) and, where the program has a row-pair twin, ``pairs``:
        its CTA and the resident CTAs of the pair kernel from which it runs (a device fact
        the launcher queries). FP32 activations run their own kernels and have no plan.
    """
    for name, v in (("hidden", hidden), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    if hidden <= 0 or hidden % 8:
        raise ValueError(f"hidden must be a positive multiple of 8, got {hidden}")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    if weight_dtype is not None and weight_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"weight_dtype must be torch.float32, torch.bfloat16 or torch.float16, got {weight_dtype}")
    if sm is None or sms is None:
        dev = torch.device(device if device is not None else "cuda")
        if sm is None:
            sm = _device_sm(dev)
        if sms is None:
            if dev.type != "cuda" or not torch.cuda.is_available():
                raise ValueError("launch_plan: no CUDA device to take the SM count from; pass sms=")
            sms = torch.cuda.get_device_properties(dev).multi_processor_count
    out = _plan(route, hidden, tokens, sm, sms, weight_dtype == torch.float32)
    if out is None:
        raise ValueError(f"sm must be one of {_ARCH_NAMES}, got {sm}")
    return out


def get_include() -> str:
    """Directory holding the public C header ``cake_rmsnorm/cake_rmsnorm.h``."""
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "include")
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(os.path.dirname(here)), "csrc", "include")  # editable install


def get_library_path() -> str:
    """Path of the shared library exporting the C API (link against it from C/C++)."""
    return library_path()


__all__ = [
    "__version__",
    "cake_rmsnorm",
    "CakeRMSNormFunction",
    "cake_rmsnorm_train_forward",
    "cake_rmsnorm_train_backward",
    "cake_rmsnorm_train_backward_workspace_bytes",
    "cake_rmsnorm_train_backward_workspace",
    "cake_rmsnorm_det_train_forward",
    "cake_rmsnorm_det_train_backward",
    "cake_rmsnorm_det_train_backward_workspace_bytes",
    "cake_rmsnorm_det_train_backward_workspace",
    "weight_dtypes",
    "program_windows",
    "launch_plan",
    "built_archs",
    "SHIPPED_ARCHS",
    "get_include",
    "get_library_path",
    "ops",
    "RMSNorm",
    "patch",
    "unpatch",
    "patched",
    "PatchReport",
    "probe_norm",
]
