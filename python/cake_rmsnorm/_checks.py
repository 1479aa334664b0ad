"""Argument validation and layout canonicalisation for the public API.

Every refusal is a TypeError (wrong kind or dtype) or ValueError (shape, device, layout,
value) naming the argument and the rule, raised before anything is written.
"""

import math
import numbers

import torch
import torch.autograd.forward_ad as _fw

ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
HALF_DTYPES = (torch.bfloat16, torch.float16)
# FP32 activations on CUDA: rows up to this wide (the CPU path serves every width).
FP32_CUDA_MAX_HIDDEN = 16384
MAX_HIDDEN = 2**30  # the C API's widest row (csrc/dispatch/contract.h, width_served)


def width_served(hidden: int) -> bool:
    """The C API's rule for a row width: a positive multiple of 8, at most MAX_HIDDEN."""
    return 0 < hidden <= MAX_HIDDEN and hidden % 8 == 0


def check_width(hidden: int, name: str = "hidden") -> int:
    if not width_served(hidden):
        raise ValueError(f"{name} must be a positive multiple of 8 up to {MAX_HIDDEN}, got {hidden}")
    return hidden


def _fake(t: torch.Tensor) -> bool:
    """True under tracing (fake or functional tensors), where data pointers do not exist; a
    subclass with real storage (checked like a plain tensor) is not."""
    if torch.compiler.is_compiling():
        return True
    if type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter):
        return False
    try:
        t.untyped_storage().data_ptr()
    except Exception:  # fake, functional, meta or wrapper tensors: no memory to compare
        return True
    return t.device.type == "meta"


def check_writable(out: torch.Tensor, name: str) -> None:
    """A caller output the kernels can write in full: no expanded (stride-0) or internally
    overlapping elements, and no leaf that requires grad (autograd forbids writing it)."""
    if out.requires_grad and out.is_leaf and torch.is_grad_enabled():
        raise ValueError(f"{name} is a leaf tensor that requires grad: autograd forbids writing it in place")
    if _fake(out):  # traced: strides may be symbolic and the compiled graph is functional
        return
    if any(st == 0 and n > 1 for n, st in zip(out.shape, out.stride())):
        raise ValueError(f"{name} has an expanded (stride-0) dimension: its elements alias one another; "
                         f"pass a tensor with its own memory for each element")
    # Dims by stride: each must step past everything the smaller-strided dims span.
    span = 0
    for n, st in sorted(((n, abs(st)) for n, st in zip(out.shape, out.stride()) if n > 1), key=lambda d: d[1]):
        if st <= span:
            raise ValueError(f"{name} overlaps itself in memory (strides {tuple(out.stride())} for shape "
                             f"{tuple(out.shape)}): its elements alias one another")
        span += (n - 1) * st


def require_tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_activation(x, name: str = "x") -> torch.Tensor:
    require_tensor(x, name)
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"{name} must be torch.bfloat16, torch.float16 or torch.float32, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension [..., hidden], got a 0-d tensor")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} must be on a CPU or CUDA device, got {x.device}")
    hidden = x.shape[-1]
    if not width_served(hidden):
        raise ValueError(f"hidden size ({name}.shape[-1]) must be a positive multiple of 8, got {hidden}")
    if x.dtype == torch.float32 and x.is_cuda and hidden > FP32_CUDA_MAX_HIDDEN:
        raise ValueError(f"float32 {name} on CUDA: hidden size up to {FP32_CUDA_MAX_HIDDEN}, got {hidden}")
    check_built_for(x)
    return x


def check_built_for(x: torch.Tensor) -> None:
    """A CUDA tensor needs kernels for its device: a RuntimeError naming the build and the
    device's architecture otherwise (a CPU-only library, an older GPU)."""
    if isinstance(x, torch.Tensor) and x.is_cuda and not _fake(x):
        from ._lib import cuda_refusal
        why = cuda_refusal(x.get_device())
        if why:
            raise RuntimeError(why)


def check_grad_like(t, x: torch.Tensor, name: str):
    """The gradient of y: x's shape and device, x's dtype or (float32 x) y's 16-bit dtype."""
    require_tensor(t, name)
    if t.dtype != x.dtype and not (x.dtype == torch.float32 and t.dtype in HALF_DTYPES):
        raise TypeError(f"{name} must have x's dtype {x.dtype} (or, with float32 x, a 16-bit one), got {t.dtype}")
    if t.shape != x.shape:
        raise ValueError(f"{name} must have x's shape {tuple(x.shape)}, got {tuple(t.shape)}")
    check_device(t, x, name)
    return t


def check_out_dtype(out_dtype, x: torch.Tensor):
    """y's dtype: x's (None), or with float32 x a 16-bit compute dtype cast in the same pass."""
    if out_dtype is None or out_dtype == x.dtype:
        return None
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
    if x.dtype != torch.float32 or out_dtype not in HALF_DTYPES:
        raise TypeError(f"out_dtype must be x's dtype, or torch.bfloat16 / torch.float16 with float32 x; "
                        f"got {out_dtype} for {x.dtype} x")
    return out_dtype


def check_like(t, x: torch.Tensor, name: str, x_name: str = "x") -> torch.Tensor:
    require_tensor(t, name)
    if t.dtype != x.dtype:
        raise TypeError(f"{name} must have {x_name}'s dtype {x.dtype}, got {t.dtype}")
    if t.shape != x.shape:
        raise ValueError(f"{name} must have {x_name}'s shape {tuple(x.shape)}, got {tuple(t.shape)}")
    check_device(t, x, name)
    return t


def mixed_stream(x, residual):
    """AMP's mixed add: (the float32 residual stream, the 16-bit branch) where x and residual are
    one of each, else None. The kernels take the stream as x (the add is the same either way)."""
    if residual is None or not isinstance(residual, torch.Tensor) or not isinstance(x, torch.Tensor):
        return None
    xd, rd = x.dtype, residual.dtype
    if xd is _FP32 and (rd is _BF16 or rd is _FP16):
        return x, residual
    if rd is _FP32 and (xd is _BF16 or xd is _FP16):
        return residual, x
    return None


def check_residual(residual, x, w, out_dtype=None, either: bool = False) -> None:
    """residual: x's dtype and shape, on x's device; or AMP's mixed add, float32 x and a 16-bit
    residual (the branch added to the stream; ``either``: the other way round too), where w and
    y (out_dtype) are then the branch's dtype or float32."""
    require_tensor(residual, "residual")
    if residual.dtype != x.dtype:
        pair = mixed_stream(x, residual)
        if pair is None or (not either and pair[0] is not x):
            both = " (or one of x and residual float32 and the other 16-bit)" if either else \
                " (or, with float32 x, bfloat16 or float16: the branch added to the residual stream)"
            raise TypeError(f"residual must have x's dtype {x.dtype}{both}, got {residual.dtype}")
        if pair[0] is residual:  # the kernels' x is the stream: its width rules (FP32 rows on CUDA)
            check_activation(residual, "residual")
        branch = pair[1].dtype
        if isinstance(w, torch.Tensor) and w.dtype not in (branch, _FP32):
            raise TypeError(f"w must be {branch} or torch.float32 beside a {branch} residual branch, got {w.dtype}")
        if out_dtype is not None and out_dtype not in (branch, _FP32):
            raise TypeError(f"out_dtype must be {branch} or torch.float32 beside a {branch} residual branch, "
                            f"got {out_dtype}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    check_device(residual, x, "residual")


def check_device(t: torch.Tensor, x: torch.Tensor, name: str) -> None:
    if t.device != x.device:
        raise ValueError(f"{name} must be on {x.device} like x, got {t.device}")


def check_weight(w, x: torch.Tensor) -> torch.Tensor:
    require_tensor(w, "w")
    if w.dtype not in (x.dtype, torch.float32) and not (x.dtype == torch.float32 and w.dtype in HALF_DTYPES):
        raise TypeError(f"w must be x's dtype {x.dtype} or torch.float32, got {w.dtype}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must be 1-D [hidden] = [{x.shape[-1]}], got shape {tuple(w.shape)}")
    check_device(w, x, "w")
    return w


EPS_MAX = 3.4028234663852886e38  # the largest FP32: eps is applied in FP32


def check_eps(eps):
    """eps as a float (Python, NumPy or any real scalar; bools refused), finite and >= 0. A
    symbolic float (torch.compile's dynamic floats) passes through unchecked: the C API
    refuses a bad value when the graph runs, and checking it here would specialise the graph."""
    if type(eps) is float:
        if 0.0 <= eps <= EPS_MAX:  # False for NaN too
            return eps
        raise ValueError(f"eps must be finite and >= 0 and at most {EPS_MAX:.6g} (applied in float32), got {eps}")
    if isinstance(eps, (torch.SymFloat, torch.SymInt)):
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or type(eps).__name__ == "bool_":
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    try:
        eps = float(eps)
    except OverflowError:  # an int too large for a float
        raise ValueError(f"eps must be finite and >= 0 and at most {EPS_MAX:.6g} (applied in float32), "
                         f"got {eps}") from None
    if not math.isfinite(eps) or not 0 <= eps <= EPS_MAX:
        raise ValueError(f"eps must be finite and >= 0 and at most {EPS_MAX:.6g} (applied in float32), got {eps}")
    return eps


def check_bool(v, name: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return v


_BF16, _FP16, _FP32 = torch.bfloat16, torch.float16, torch.float32


def check_forward_inputs(x, w, residual, layout: bool = True) -> None:
    """The autograd forward's checks: x, w, residual (and the N-D layout rule). The common case
    reads each property once (a few us a call on a slow host); anything off takes the full
    checks, which raise the documented error."""
    try:
        xd, wd, hidden = x.dtype, w.dtype, x.shape[-1]
        fast = ((xd is _BF16 or xd is _FP16) and (wd is xd or wd is _FP32) and hidden > 0 and hidden % 8 == 0
                and w.dim() == 1 and w.shape[0] == hidden and x.is_cuda == w.is_cuda
                and (x.is_cuda or (x.is_cpu and w.is_cpu)) and (not x.is_cuda or x.get_device() == w.get_device())
                and isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor))
    except (AttributeError, IndexError, TypeError):
        fast = False
    if not fast:
        check_activation(x)
        check_weight(w, x)
    elif not layout:  # after a refusal in eager: a CUDA x may lack kernels for its device
        check_built_for(x)
    if residual is not None:
        check_residual(residual, x, w, either=True)
    if not layout:  # the module serves every layout (through one copy where rows do not collapse)
        return


_FORWARD_AD = ("cake_rmsnorm has no forward-mode derivative (torch.func.jvp, jacfwd, forward_ad dual tensors): "
               "its fused backward is reverse-mode only; use torch.nn.functional.rms_norm where a jvp is needed")


def check_forward_mode(x, w, residual) -> None:
    """Forward-mode AD is refused by name rather than answered with zero tangents."""
    if not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active():
        from torch._C._functorch import TransformType, peek_interpreter_stack
        top = peek_interpreter_stack()
        if top is not None and top.key() == TransformType.Jvp:
            raise NotImplementedError(_FORWARD_AD)
    if _fw._current_level >= 0:
        for t in (x, w, residual):
            if isinstance(t, torch.Tensor) and _fw.unpack_dual(t).tangent is not None:
                raise NotImplementedError(_FORWARD_AD)


def check_main_grad(main_grad, x) -> None:
    require_tensor(main_grad, "main_grad")
    if main_grad.dtype != torch.float32 or tuple(main_grad.shape) != (x.shape[-1],):
        raise ValueError(f"main_grad must be float32 [{x.shape[-1]}], got {main_grad.dtype} "
                         f"{tuple(main_grad.shape)}")
    check_device(main_grad, x, "main_grad")


def check_rstd(rstd, x: torch.Tensor, name: str = "rstd") -> torch.Tensor:
    require_tensor(rstd, name)
    if rstd.dtype != torch.float32:
        raise TypeError(f"{name} must be torch.float32, got {rstd.dtype}")
    if tuple(rstd.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"{name} must have x's leading shape {tuple(x.shape[:-1])}, got {tuple(rstd.shape)}")
    check_device(rstd, x, name)
    return rstd


def _byte_range(t: torch.Tensor):
    if t.numel() == 0:
        return None
    es = t.element_size()
    span = sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + 1
    start = t.untyped_storage().data_ptr() + t.storage_offset() * es
    return start, start + span * es


def check_no_overlap(outputs: dict, inputs: dict) -> None:
    """Outputs may not overlap one another or any input (the kernels stream rows)."""
    if all(t is None for t in outputs.values()):
        return
    if any(_fake(t) for t in list(outputs.values()) + list(inputs.values()) if t is not None):
        return
    ranges = {n: _byte_range(t) for n, t in list(outputs.items()) + list(inputs.items()) if t is not None}
    out_names = [n for n, t in outputs.items() if t is not None]
    for i, a in enumerate(out_names):
        for b in list(ranges):
            if b == a or (b in out_names and out_names.index(b) < i):
                continue
            ra, rb = ranges[a], ranges[b]
            if ra and rb and ra[0] < rb[1] and rb[0] < ra[1]:
                raise ValueError(f"{a} overlaps {b} in memory; outputs must not alias other outputs or inputs")
