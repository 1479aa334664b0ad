"""Loads the compiled library once: the torch ops (torch.ops.cake_rmsnorm) and its C API
through ctypes (window tables, workspace sizing, built architectures)."""

import ctypes
import glob
import os

import torch

from ._cabi import DTYPE_NAMES as _DTYPE_NAMES
from ._cabi import Plan as _Plan
from ._cabi import Window as _Window
from ._cabi import declare as _declare

_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """Path of the compiled library (``_C*.so``) that holds the ops and the C API."""
    found = sorted(glob.glob(os.path.join(_DIR, "_C*.so")) + glob.glob(os.path.join(_DIR, "_C*.pyd")))
    if not found:
        raise ImportError(
            "cake_rmsnorm: the compiled library _C is missing; install the package "
            "(pip install --no-build-isolation .) rather than importing the source tree"
        )
    return found[0]


torch.ops.load_library(library_path())
ops = torch.ops.cake_rmsnorm
_c = _declare(ctypes.CDLL(library_path()))  # C types from the header (_cabi.py)

# The op bodies without the dispatcher (_calls.py): tensors cross through the stable ABI's Python
# shims (torch >= 2.14) or, on 2.10-2.13, the tensor object's layout, proven on a probe first.
# None where neither holds: the registered ops then serve every call. CAKE_RMSNORM_DIRECT (auto,
# shims, layout, off; CAKE_DIRECT, its older name, is still read) picks one by hand, to compare them or to turn the path off. The binding calls _C's C
# API, resolved from the global namespace: _C is promoted to it first (the same handle, RTLD_GLOBAL).
ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)
from . import _direct  # noqa: E402

_BINDINGS = ("auto", "shims", "layout", "off")


DIRECT_ENV = "CAKE_RMSNORM_DIRECT"  # every runtime setting is CAKE_RMSNORM_* (_lowering.py, _fusion.py)


def _direct_binding():
    import warnings
    name = DIRECT_ENV
    if DIRECT_ENV not in os.environ and "CAKE_DIRECT" in os.environ:
        name = "CAKE_DIRECT"
        warnings.warn(f"CAKE_DIRECT is read as {DIRECT_ENV}, its new name", DeprecationWarning, stacklevel=2)
    want = os.environ.get(name, "auto")
    if want not in _BINDINGS:
        raise ValueError(f"{name} must be one of {', '.join(_BINDINGS)}, got {want!r}")
    probe = torch.empty(0)
    got = _direct.setup(torch.Tensor, torch.nn.Parameter, (torch.bfloat16, torch.float16, torch.float32),
                        probe, probe._cdata, want)
    if got is None and want in ("shims", "layout"):  # asked for by hand, and not there: say so
        warnings.warn(f"{name}={want}: that binding is not available with torch {torch.__version__}; "
                      "every call takes the registered ops", RuntimeWarning, stacklevel=2)
    return got


binding = _direct_binding()  # "shims", "layout" or None
direct = _direct if binding else None


class Window(tuple):
    """``(above, at_most, program)``, and in ``.group`` the program's row group and CTA as numbers
    (``threads_per_row``, ``groups_per_cta``, ``vectors_per_thread``, ``ring_rows``,
    ``rows_per_group``): what the name spells, so nothing has to parse it."""

    def __new__(cls, above, at_most, program, group):
        self = super().__new__(cls, (above, at_most, program))
        self.group = group
        return self

    def __getnewargs__(self):  # copy and pickle
        return (*self, self.group)

    above = property(lambda self: self[0])
    at_most = property(lambda self: self[1])
    program = property(lambda self: self[2])


def _shipped_archs() -> tuple:
    buf = (ctypes.c_int * 16)()
    n = _c.cake_rmsnorm_shipped_archs(buf, 16)
    return tuple(buf[i] for i in range(min(n, 16)))


# The shipped architectures (cake_rmsnorm_archs.h, the list setup.py builds from), in the bit
# order of cake_rmsnorm_built_archs().
SHIPPED_ARCHS = _shipped_archs()
ARCH_BITS = {sm: bit for bit, sm in enumerate(SHIPPED_ARCHS)}


def set_program_override(direction: int, tpr: int, cta: int, vpt: int, ctas_per_sm: int, stages: int,
                         rows: int = 1) -> int:
    return int(_c.cake_rmsnorm_set_program_override(direction, tpr, cta, vpt, ctas_per_sm, stages, rows))


def set_exact_groups(enabled: bool) -> int:
    return int(_c.cake_rmsnorm_set_exact_groups(1 if enabled else 0))


def set_one_launch(max_chunks: int) -> int:
    return int(_c.cake_rmsnorm_set_one_launch(max_chunks))


def set_warp_chunks(min_chunk_rows: int) -> int:
    return int(_c.cake_rmsnorm_set_warp_chunks(min_chunk_rows))


def workspace_bytes(rows: int, hidden: int) -> int:
    return int(_c.cake_rmsnorm_backward_workspace_bytes(rows, hidden))


def backward_chunks(rows: int, hidden: int) -> int:
    return int(_c.cake_rmsnorm_backward_chunks(rows, hidden))


def saturating_rows(hidden: int) -> int:
    return int(_c.cake_rmsnorm_backward_saturating_rows(hidden))


def build_info() -> str:
    """How the library was built, in one line: CUDA toolkit and architectures, or CPU-only and why."""
    return _c.cake_rmsnorm_build_info().decode()


_ARCH_OK = {}  # CUDA device index -> None (served) or the refusal's text


def cuda_refusal(index: int):
    """None where the library has kernels for CUDA device `index`, else why not (cached)."""
    if index in _ARCH_OK:
        return _ARCH_OK[index]
    built = built_archs()
    major, minor = torch.cuda.get_device_capability(index)
    sm = 10 * major + minor
    why = None
    if not built:
        why = (f"cake_rmsnorm was built without CUDA kernels ({build_info()}); rebuild it where nvcc is on PATH "
               f"or CUDA_HOME is set: pip install --no-build-isolation --force-reinstall --no-deps .")
    elif sm not in built:
        why = (f"cake_rmsnorm has no kernels for {torch.cuda.get_device_name(index)} (sm_{sm}); it was built for "
               f"{', '.join(f'sm_{a}a' for a in built)} ({build_info()})")
    _ARCH_OK[index] = why
    return why


def built_archs() -> tuple:
    mask = int(_c.cake_rmsnorm_built_archs())
    return tuple(sm for sm, bit in ARCH_BITS.items() if mask & (1 << bit))


def windows(route: str, hidden: int, sm: int, sms: int = 0) -> list:
    buf = (_Window * 16)()
    n = _c.cake_rmsnorm_program_windows_sms(route.encode(), hidden, sm, sms, buf, 16)
    if n < 0:
        return []
    return [Window(w.above, None if w.at_most < 0 else w.at_most, w.program.decode(), _group(w.group))
            for w in buf[:n]]


def _group(g):
    """A cake_rmsnorm_group as a dict of its fields."""
    return {name: getattr(g, name) for name, _ in g._fields_}


_W_LOADS = {0: "with x", 1: "after the sum of squares", 2: "at each use"}


# Kernel families and dtype codes as cake_rmsnorm_kernel spells them (dispatch/kernel_key.h).
FAMILIES = ("fwd_ring", "fwd_streaming", "bwd_rows", "bwd_wide_rows", "bwd_one_launch", "bwd_one_launch_wide_rows",
            "bwd_warp_chunks", "fp32_fwd", "fp32_bwd")


def _launch(out):
    """The instance, grid, block and shared memory of a plan's Launch."""
    k = out.kernel
    d = {"instance": {"family": FAMILIES[k.family], "x": _DTYPE_NAMES[k.x_dtype], "y": _DTYPE_NAMES[k.y_dtype],
                      "w": _DTYPE_NAMES[k.w_dtype], "residual": bool(k.residual), "vectors": k.vectors,
                      "tpr": k.tpr, "rows": k.rows, "w_load": _W_LOADS[k.w_load], "warp_sync": bool(k.warp_sync),
                      "pair": bool(k.pair)},
         "grid": out.grid, "block": out.block, "smem_bytes": out.smem_bytes}
    if k.residual and k.residual_dtype != k.x_dtype:  # a 16-bit branch beside FP32 x
        d["instance"]["residual_dtype"] = _DTYPE_NAMES[k.residual_dtype]
    if k.from_y:  # the backward from y (the memory-efficient mode)
        d["instance"]["from_y"] = True
    if out.finalize:
        d["finalize"] = {"grid": out.finalize_grid, "block": out.finalize_cols * out.finalize_lanes}
    if out.one_launch:
        d["dx_ctas"] = out.dx_ctas
    return d


def plan(route: str, hidden: int, rows: int, sm: int, sms: int, x_code: int, w_code: int, y_code: int):
    """The launch plan as a dict (dtype codes as cake_dtype_t), or None when not served. sm 0: the
    current CUDA device's facts, residency included."""
    out = _Plan()
    rc = _c.cake_rmsnorm_launch_plan(route.encode(), hidden, rows, sm, sms, x_code, w_code, y_code, ctypes.byref(out))
    if rc == -2:  # never by design (dispatch/resolve.h): a plan the library compiled no kernel for
        raise RuntimeError(f"launch_plan: the {route} plan for hidden {hidden}, {rows} rows on sm {sm} has no compiled kernel")
    if rc != 0:
        return None
    d = {"program": out.program.decode(), "group": _group(out.group), "exact": bool(out.exact),
         "measured": bool(out.table_measured)}
    if route.startswith("fwd"):
        d.update(kernel="streaming" if out.streaming else "ring", warp_sync=bool(out.warp_sync))
        if out.streaming:
            d["w_load"] = _W_LOADS[out.w_load]
    elif out.one_launch:  # dx by rows and dw by columns in one grid: no partials, no finalize
        d.update(chunks=out.chunks, one_launch={"dx_ctas": out.dx_ctas, "dw_ctas": out.dw_ctas})
    else:
        d.update(chunks=out.chunks, finalize=(out.finalize_cols, out.finalize_lanes))
        if out.warp_chunks:  # a warp a chunk, the program's groups a row each
            d["warp_chunks"] = True
        if out.pair_cta:
            d["pairs"] = {"cta": out.pair_cta, "when_resident_ctas_at_least": out.pair_min_resident}
    d["launch"] = _launch(out)
    return d


def last_launch():
    """The Launch of this thread's last CUDA call (launch_plan's "program", "group" and "launch"
    fields), or None before any."""
    out = _Plan()
    if _c.cake_rmsnorm_last_launch(ctypes.byref(out)) != 0:
        return None
    return {"program": out.program.decode(), "group": _group(out.group), "launch": _launch(out)}
