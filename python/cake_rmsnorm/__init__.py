"""cake-rmsnorm: fused RMSNorm training kernels (forward and backward) for PyTorch.

    import cake_rmsnorm as cr
    y, rstd = cr.cake_rmsnorm_train_forward(x, w, eps)
    dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    y = cr.cake_rmsnorm(x, w, eps)          # autograd
"""

import os

import torch

from ._version import __version__
from ._lib import SHIPPED_ARCHS, build_info, built_archs, library_path, ops, plan as _plan, windows as _windows
from ._lib import last_launch as _last_launch
from . import _checks as _C_checks
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
    """Every weight dtype some activation dtype takes at width ``hidden``: (torch.bfloat16,
    torch.float16, torch.float32), or () when the width is not served (not a positive multiple
    of 8). Which pairs go together: a 16-bit x takes its own dtype or torch.float32; FP32 x
    takes any of the three. ``device`` (a CPU or CUDA device, or None) is checked and changes
    nothing: every device, the CPU path included, serves the same pairs."""
    if isinstance(hidden, bool) or not isinstance(hidden, int):
        raise TypeError(f"hidden must be an int, got {type(hidden).__name__}")
    if device is not None:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError) as e:
            raise TypeError(f"device must be a torch.device or a device string, got {device!r}") from e
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be a CPU or CUDA device, got {dev}")
    if not _C_checks.width_served(hidden):
        return ()
    return (torch.bfloat16, torch.float16, torch.float32)


def _device_sm(device, who) -> int:
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda":
        raise ValueError(f"{who} needs a CUDA device or an explicit sm, got {dev}")
    if not torch.cuda.is_available():
        raise ValueError(f"{who}: no CUDA device is available; pass sm= (one of {_ARCH_NAMES})")
    major, minor = torch.cuda.get_device_capability(dev)
    return major * 10 + minor


def program_windows(route: str = None, hidden: int = None, sm: int = None, device=None, sms: int = None) -> dict:
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
    sms : int, optional
        The SM count: the window edges that count CTAs or elements scale with it (the tables were
        fit at 132). Taken from the device when ``sm`` is too, else the table's own count.

    Returns
    -------
    dict
        ``{route: [(above, at_most, program), ...]}``: the program serving
        ``above < T <= at_most`` (``at_most`` None: unbounded), named
        ``general_t{threads a row}x{row groups a CTA}_v{vectors a thread}_s{ring stages}``
        (``s0``: the streaming forward, no ring), with ``_r{rows}`` where a streaming row group
        takes several rows. Each window's ``.group`` holds the same as numbers:
        ``threads_per_row``, ``groups_per_cta``, ``vectors_per_thread``, ``ring_rows`` and
        ``rows_per_group``.
    """
    if isinstance(hidden, bool) or not isinstance(hidden, int):
        raise TypeError(f"hidden must be an int, got {type(hidden).__name__}")
    _C_checks.check_width(hidden)
    if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int)):
        raise TypeError(f"sm must be an int such as 90, got {type(sm).__name__}")
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= 1 << 20):
        raise ValueError(f"sms must be a positive SM count, got {sms!r}")
    if sm is None:
        dev = device if device is not None else torch.device("cuda")
        sm = _device_sm(dev, "program_windows")
        if sms is None:
            sms = torch.cuda.get_device_properties(torch.device(dev)).multi_processor_count
    routes = ROUTES if route is None else (route,)
    for r in routes:
        if r not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {r!r}")
    out = {r: _windows(r, hidden, sm, sms or 0) for r in routes}
    if not any(out.values()):
        raise ValueError(f"sm must be one of {_ARCH_NAMES}, got {sm}")
    return out


from ._cabi import DTYPE_CODES as _DTYPE_CODES  # noqa: E402  (cake_dtype_t, from the C header)


def launch_plan(route: str, hidden: int, tokens: int, *, dtype=torch.bfloat16, weight_dtype=None, out_dtype=None,
                sm: int = None, sms: int = None, device=None) -> dict:
    """What one call runs: the Launch a call resolves to (``csrc/dispatch/resolve.h``).

    Parameters
    ----------
    route : str
        One of ``ROUTES``.
    hidden, tokens : int
        The row width (a multiple of 8) and the number of rows (tokens, or tokens x heads).
    dtype : torch.dtype
        The activations': torch.bfloat16 (default), torch.float16 or torch.float32.
    weight_dtype : torch.dtype, optional
        w's: ``dtype`` (default) or torch.float32 with 16-bit activations; any of the three with
        FP32 activations (default torch.float32). The forward's w load depends on it.
    out_dtype : torch.dtype, optional
        y's (forward) or g's (backward), with FP32 activations: any of the three (default FP32).
    sm, sms : int, optional
        Architecture (one of ``SHIPPED_ARCHS``) and SM count; taken from ``device`` (or the
        current CUDA device) when omitted. The SM count sets the windows' edges that count CTAs or
        elements, the backward's grid and its finalize shape.

    Returns
    -------
    dict
        ``program``, ``group`` (its row group and CTA as numbers, as :func:`program_windows`
        gives them), ``exact`` (the constant-width instance of an exact narrow group) and
        ``measured`` (False where sm's tuning table is an unmeasured copy of sm_90a's); the
        forward adds ``kernel`` ("ring" or "streaming"), ``warp_sync`` and, when streaming,
        ``w_load``; the backward adds ``chunks`` (dw partials) and either ``one_launch``
        (``dx_ctas`` and ``dw_ctas``: at the fewest chunks dx by rows and dw by columns run in
        one grid, with no partials and no finalize) or ``finalize`` (columns a CTA, lanes a
        column), ``warp_chunks`` (True where narrow rows give each dw chunk a warp, the
        program's groups a row each) and, where the program has a row-pair twin, ``pairs``: its
        CTA and the resident CTAs of the pair kernel from which it runs (a device fact the
        launcher queries). ``launch`` is the Launch itself: the kernel ``instance`` (its family
        and template arguments), ``grid``, ``block``, ``smem_bytes`` and, for the backward,
        ``finalize`` (its grid and block). With neither ``sm`` nor ``sms`` given and a CUDA device
        there, the device's resident CTAs cap the persistent grids as a call's are
        (:func:`last_launch` reports what a call ran); otherwise the backward's resident CTAs are
        those its launch bounds guarantee (a model of the device, not its occupancy query). 16-bit programs are named as in :func:`program_windows` (``_r{rows}`` where a
        streaming group takes several rows); FP32 ones
        ``fp32_t{threads a row}x{rows a CTA}_v{float4 vectors a thread}_s{backward ring rows}``.
    """
    for name, v in (("hidden", hidden), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    _C_checks.check_width(hidden)
    if not 0 <= tokens <= 2**62:
        raise ValueError(f"tokens must be >= 0 and at most {2**62}, got {tokens}")
    for name, v in (("sm", sm), ("sms", sms)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if sms is not None and not 1 <= sms <= 1 << 20:
        raise ValueError(f"sms must be a positive SM count, got {sms}")
    fp32 = dtype == torch.float32
    weight_dtype = weight_dtype if weight_dtype is not None else (torch.float32 if fp32 else dtype)
    out_dtype = out_dtype if out_dtype is not None else dtype
    for name, v in (("dtype", dtype), ("weight_dtype", weight_dtype), ("out_dtype", out_dtype)):
        if v not in _DTYPE_CODES:
            raise TypeError(f"{name} must be torch.bfloat16, torch.float16 or torch.float32, got {v}")
    if not fp32 and (weight_dtype not in (dtype, torch.float32) or out_dtype != dtype):
        raise TypeError(f"with {dtype} activations weight_dtype is {dtype} or torch.float32 and out_dtype {dtype}, "
                        f"got {weight_dtype} and {out_dtype}")
    on_cuda = device is None or torch.device(device).type == "cuda"
    if sm is None and sms is None and on_cuda and built_archs() and torch.cuda.is_available():
        with torch.cuda.device(torch.device(device if device is not None else "cuda")):
            out = _plan(route, hidden, tokens, 0, 0, _DTYPE_CODES[dtype], _DTYPE_CODES[weight_dtype],
                        _DTYPE_CODES[out_dtype])
        if out is not None:
            return out
    if sm is None or sms is None:
        dev = torch.device(device if device is not None else "cuda")
        if sm is None:
            sm = _device_sm(dev, "launch_plan")
        if sms is None:
            if dev.type != "cuda" or not torch.cuda.is_available():
                raise ValueError("launch_plan: no CUDA device to take the SM count from; pass sms=")
            sms = torch.cuda.get_device_properties(dev).multi_processor_count
    out = _plan(route, hidden, tokens, sm, sms, _DTYPE_CODES[dtype], _DTYPE_CODES[weight_dtype],
                _DTYPE_CODES[out_dtype])
    if out is None:
        if fp32 and hidden > 16384:
            raise ValueError(f"hidden must be at most 16384 with FP32 activations, got {hidden}")
        raise ValueError(f"sm must be one of {_ARCH_NAMES}, got {sm}")
    return out


def last_launch():
    """What this thread's last CUDA call ran: ``program``, ``group`` and ``launch`` as
    :func:`launch_plan` reports them, or None before any CUDA call."""
    return _last_launch()


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
    "saturating_workspace_rows",
    "program_windows",
    "launch_plan",
    "last_launch",
    "built_archs",
    "build_info",
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
