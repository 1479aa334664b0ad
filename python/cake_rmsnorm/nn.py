"""`RMSNorm`: a `torch.nn.RMSNorm` subclass that runs the fused kernels."""

import math
import numbers
import warnings
from typing import Optional

import torch
from torch import nn

from ._checks import (_BF16, _FP16, _FP32, ACT_DTYPES, FP32_CUDA_MAX_HIDDEN, HALF_DTYPES, check_eps, check_main_grad,
                      mixed_stream)
from ._lib import cuda_refusal
from . import _memory
from ._probe import eps_of, probe_norm
from .autograd import apply, y_dtype_of, from_y_holds_for

_WARNED = set()  # CUDA devices the module warned it runs torch's formula on


def width_reason(width):
    return f"width {width} is not a multiple of 8 (the kernels' 16-byte vectors)"


def fallback_reason(x, residual, width):
    """Why a call of these inputs runs torch's formula instead of the kernels (None: it does not)."""
    if width % 8:
        return width_reason(width)
    if x.dtype not in ACT_DTYPES:
        return f"{x.dtype} activations (the kernels take bfloat16, float16 and float32)"
    if x.device.type not in ("cpu", "cuda"):
        return f"{x.device.type} tensors (the kernels run on CPU and CUDA)"
    if residual is not None and residual.dtype != x.dtype and mixed_stream(x, residual) is None:
        return (f"a {residual.dtype} residual with {x.dtype} x (the fused residual route takes x's dtype, or "
                "float32 beside a 16-bit branch; cast one of them)")
    if residual is not None and residual.shape != x.shape:
        return f"a residual of shape {tuple(residual.shape)} for x of shape {tuple(x.shape)}"
    f32 = x.dtype == torch.float32 or (residual is not None and residual.dtype == torch.float32)
    if f32 and x.is_cuda and width > FP32_CUDA_MAX_HIDDEN:
        return f"float32 activations wider than {FP32_CUDA_MAX_HIDDEN} on CUDA"
    return None


def _kernel_refusal(x):
    """Why the library cannot run x's device (None: it can, or x is not on CUDA)."""
    return cuda_refusal(x.get_device()) if x.is_cuda else None

__all__ = ["RMSNorm"]


class RMSNorm(nn.RMSNorm):
    """``torch.nn.RMSNorm`` with the fused kernels: the same constructor, attributes, ``weight``
    and state dict (``isinstance(m, torch.nn.RMSNorm)`` holds), plus keyword-only options.

    ``forward(x)`` returns y; ``forward(x, residual)`` returns ``(y, h_new)`` with
    ``h_new = cast(x + residual)`` normalised (the fused pre-norm residual add).

    Parameters
    ----------
    normalized_shape : int or tuple of ints
        The trailing dimensions normalised over, as torch's; several are served as one row of
        their product (the input's trailing dimensions must match).
    eps : float or None
        None takes ``torch.finfo(x.dtype).eps`` at each call, as torch.nn.RMSNorm does.
    elementwise_affine : bool
        False: no weight (y = x_hat), no dw.
    device, dtype
        Of the weight, as torch's.
    zero_centered : bool, keyword-only
        Gemma-style ``y = norm(x) * (1 + weight)`` computed with an FP32 effective weight,
        ``weight`` initialised to zeros and kept in the dtype it was created with.
    deterministic : bool, keyword-only
        Reproducible dw bits (see ``cake_rmsnorm_train_backward``).
    accumulate_main_grad : bool, keyword-only
        When ``weight.main_grad`` (FP32) exists, the backward adds dw into it in place and
        leaves ``weight.grad`` alone (Megatron-style gradient buffers).
    memory_efficient : bool, keyword-only
        Save y (which the next Linear keeps anyway) instead of x for the backward, which rebuilds
        xhat = y (1 / w); where a column of the weight lies outside the rebuild range, x is saved
        after all (docs/python_api.md#memory-efficient says the rule and what it costs).
    cast_output : bool, keyword-only
        Under ``torch.autocast``, return y of an FP32 input in the autocast dtype, the cast the
        next matmul would make, fused into the norm's pass. False (the default) returns FP32, as
        ``torch.nn.RMSNorm`` does. ``patch()`` turns it on for the norms inside a model's
        repeated blocks, whose outputs feed the block's own layers, and says so in its report.

    Inputs the kernels do not take (a width that is not a multiple of 8, FP64 or another dtype,
    a device other than CPU and CUDA, a residual of another dtype or shape) run torch's eager
    formula instead, with one ``UserWarning`` a module and reason naming the module (its path
    where ``patch()`` made it), the width and the reason.

    Notes
    -----
    BF16, FP16 and FP32 activations run the kernels. FP32 ones are the residual stream of
    mixed precision: under ``torch.autocast`` y comes back in FP32 as torch's, or with
    ``cast_output`` in the autocast dtype (the cast the next matmul makes, done in the same
    pass). Inputs the kernels do not take (FP64, computed
    in FP64; a width that is not a multiple of 8; FP32 rows wider than 16384 on CUDA; a device
    other than CPU or CUDA) run the eager formula instead, so the module can replace a norm in
    any model. A weight with ``requires_grad=False`` costs no dw work.
    """

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, zero_centered: bool = False, deterministic: bool = True,
                 accumulate_main_grad: bool = False, memory_efficient: bool = False, cast_output: bool = False):
        def _int(n):
            return isinstance(n, numbers.Integral) and not isinstance(n, bool) and type(n).__name__ != "bool_"
        if _int(normalized_shape):
            shape = (int(normalized_shape),)
        elif isinstance(normalized_shape, (tuple, list, torch.Size)) and all(_int(n) for n in normalized_shape):
            shape = tuple(int(n) for n in normalized_shape)
        else:
            raise TypeError(f"normalized_shape must be an int or a tuple of ints, got {normalized_shape!r}")
        if not shape or any(n <= 0 for n in shape):
            raise ValueError(f"normalized_shape must be a positive int or a tuple of them, got {normalized_shape!r}")
        for name, v in (("elementwise_affine", elementwise_affine), ("zero_centered", zero_centered),
                        ("deterministic", deterministic), ("accumulate_main_grad", accumulate_main_grad),
                        ("memory_efficient", memory_efficient), ("cast_output", cast_output)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
        if zero_centered and not elementwise_affine:
            raise ValueError("zero_centered needs a weight (elementwise_affine=True)")
        super().__init__(shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype)
        self.zero_centered = zero_centered
        self.any_width = False  # weightless replacements of norms that keep no width (from_module)
        self.deterministic = deterministic
        self.accumulate_main_grad = accumulate_main_grad
        self.memory_efficient = memory_efficient
        self.cast_output = cast_output
        self._from_y = None  # the memory-efficient verdict compiled calls read (None: not taken)
        self.reset_parameters()
        self.register_load_state_dict_post_hook(RMSNorm._reloaded)
        if memory_efficient:
            _memory.track(self)

    @property
    def eps(self) -> Optional[float]:
        return self._eps

    @eps.setter
    def eps(self, value):
        # Checked once here, so neither the kernels' path nor the fallback checks it per call.
        self._eps = None if value is None else check_eps(value)

    def reset_parameters(self):
        if self.weight is not None:
            with torch.no_grad():
                self.weight.fill_(0.0 if getattr(self, "zero_centered", False) else 1.0)

    @classmethod
    def from_module(cls, module: nn.Module, zero_centered: Optional[bool] = None, eps: Optional[float] = None,
                    **kwargs):
        """A RMSNorm sharing ``module.weight`` (the same Parameter object, so optimizer state
        and tied references keep working); a module without a weight gives one without.

        ``zero_centered`` and ``eps`` default to the module's own: a ``torch.nn.RMSNorm``'s eps
        (None: the input dtype's epsilon, as torch does) and ``x_hat * w``; for another module,
        what ``probe_norm`` finds it computes (``x_hat * w`` or Gemma's ``x_hat * (1 + w)``) and
        its eps attribute. A module that computes no RMSNorm is refused with the reason.
        ``kwargs`` go to the constructor (``deterministic``, ``accumulate_main_grad``)."""
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if type(module) is nn.RMSNorm:
            zero_centered = False if zero_centered is None else zero_centered
            eps = module.eps if eps is None else eps
        elif zero_centered is None or eps is None:
            found, why = probe_norm(module) if zero_centered is None else (zero_centered, "")
            if found is None:
                raise ValueError(f"module ({type(module).__name__}) does not compute an RMSNorm this class can "
                                 f"take over: {why}")
            zero_centered = found
            eps = eps_of(module) if eps is None else eps
        if not isinstance(zero_centered, bool):
            raise TypeError(f"zero_centered must be a bool, got {type(zero_centered).__name__}")
        w = getattr(module, "weight", None)
        if not isinstance(w, nn.Parameter):  # weightless (a buffer there is no weight, nor the width it runs at)
            w = None
        shape = getattr(module, "normalized_shape", None) or (tuple(w.shape) if w is not None else None)
        new = cls(shape or 1, eps=eps, elementwise_affine=w is not None, device="meta", zero_centered=zero_centered,
                  **kwargs)
        if w is not None:
            new.weight = w
            if new.memory_efficient and not w.is_meta:  # a meta weight gets its verdict once it is real
                _memory.refresh([new])
        elif shape is None:  # a weightless norm that keeps no width (Llama4's L2 norm): any last dim
            new.any_width = True
        return new

    def extra_repr(self):
        shape = "any width" if self.any_width else self.normalized_shape
        return (f"{shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"zero_centered={self.zero_centered}, deterministic={self.deterministic}"
                + (", memory_efficient=True" if self.memory_efficient else "")
                + (", cast_output=True" if self.cast_output else ""))

    def _unit_weight(self, width, device):
        """The ones a weightless norm runs the kernels with, kept between calls (else every call
        allocates and fills one); traced graphs make their own."""
        if torch.compiler.is_compiling():
            return torch.ones(width, dtype=torch.float32, device=device)
        t = self.__dict__.get("_unit_w")
        if t is None or t.device != device or t.numel() != width:
            t = torch.ones(width, dtype=torch.float32, device=device)
            self.__dict__["_unit_w"] = t
        return t

    def _effective_weight(self, dtype, width, device):
        w = self.weight
        if w is None:
            return self._unit_weight(width, device)
        if w.dim() != 1:
            w = w.reshape(width)
        if self.zero_centered:
            return 1.0 + w.float()
        if w.dtype in (dtype, torch.float32) or (dtype == torch.float32 and w.dtype in HALF_DTYPES):
            return w  # the kernels take it as it is (FP32 activations: any of the three)
        return w.to(dtype)

    def _eager(self, x, residual):
        h = x if residual is None else x + residual  # AMP's mixed add promotes: y and eps in FP32
        k = len(self.normalized_shape)
        hf = h.double() if h.dtype == torch.float64 else h.float()
        eps = torch.finfo(h.dtype).eps if self.eps is None else self.eps
        dims = tuple(range(-k, 0))
        y = hf * torch.rsqrt(hf.pow(2).mean(dims, keepdim=True) + eps)
        if self.weight is not None:
            w = self.weight.to(hf.dtype)
            y = y * (1.0 + w if self.zero_centered else w)
        y = y.to(h.dtype)
        return y if residual is None else (y, h)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        # The common case in few attribute reads (nn.Module's parameter lookup alone costs a
        # microsecond): one trailing dim, 16-bit x on CPU or CUDA, a width the kernels take,
        # the weight as it is.
        w = self._parameters.get("weight")
        dt = x.dtype
        if (len(self.normalized_shape) == 1 and (dt is _BF16 or dt is _FP16) and (x.is_cuda or x.is_cpu)
                and w is not None and (w.dtype is dt or w.dtype is _FP32) and w.dim() == 1
                and not self.zero_centered and not self.accumulate_main_grad
                and x.shape[-1] == self.normalized_shape[0] and x.shape[-1] % 8 == 0
                and (residual is None or (residual.dtype is dt and residual.shape == x.shape))):
            eps = self._eps if self._eps is not None else torch.finfo(dt).eps
            return self._kernels(x, w, eps, residual, None, None)
        return self._forward(x, residual)

    def _kernels(self, x, w, eps, residual, main_grad, out_dtype):
        """The fused kernels; on a GPU the library has no kernels for (an older architecture, a
        CPU-only build), torch's formula with one warning a device."""
        if torch.compiler.is_compiling():  # the verdict as last taken outside the graph (_memory.track)
            from_y = self.memory_efficient and self._from_y is True
            return apply(x, w, residual, eps=eps, main_grad=main_grad, out_dtype=out_dtype, from_y=from_y)
        from_y = self.memory_efficient and torch.is_grad_enabled() and self._from_y_holds(x, w, residual, out_dtype)
        try:
            return apply(x, w, residual, eps=eps, main_grad=main_grad, out_dtype=out_dtype, from_y=from_y)
        except RuntimeError:
            why = _kernel_refusal(x)
            if why is None:
                raise
            if x.get_device() not in _WARNED:
                _WARNED.add(x.get_device())
                warnings.warn(f"{why}: cake_rmsnorm.RMSNorm runs torch's formula on this device", stacklevel=3)
            return self._eager(x, residual)

    def _from_y_holds(self, x, w, residual, out_dtype):
        """The memory-efficient rule for this call (_memory.py), remembered per version of the
        weight, with one warning each time the module turns to saving x. Compiled calls read
        _from_y (FP16's range, the narrowest, taken by _memory.refresh); a weight this call finds
        outside its range is outside FP16's too, so that verdict turns False here as well."""
        if residual is None or residual.dtype is x.dtype:  # the common case in few reads (host cost)
            ok = _memory.from_y_holds(w, out_dtype or x.dtype, x.shape[-1], self._parameters.get("weight"),
                                 "1+w" if self.zero_centered else None)
        else:
            ok = from_y_holds_for(x, w, residual, out_dtype, self._parameters.get("weight"),
                            "1+w" if self.zero_centered else None)
        if ok:
            if self.__dict__.get("_said_saves_x"):
                self.__dict__["_said_saves_x"] = False
            return ok
        if self._from_y is not False:
            self._from_y = False
        if not self.__dict__.get("_said_saves_x"):  # one warning each time the module turns to saving x
            self.__dict__["_said_saves_x"] = True
            self._say_saves_x(x, w, residual, out_dtype)
        return False

    def _say_saves_x(self, x, w, residual, out_dtype):
        name = self.__dict__.get("_path")
        who = f"cake_rmsnorm.RMSNorm {name!r}" if name else f"cake_rmsnorm.RMSNorm({self.extra_repr()})"
        why = _memory.why_saves_x(w, y_dtype_of(x, residual, out_dtype))
        warnings.warn(f"{who} saves x, not y, for its backward: {why}", stacklevel=5)

    def __setstate__(self, state):
        super().__setstate__(state)
        self.__dict__.setdefault("cast_output", False)  # a module pickled before the option
        if self.__dict__.get("memory_efficient"):  # a copy (deepcopy, pickle) is followed as the original
            _memory.track(self)

    @staticmethod
    def _reloaded(module, incompatible_keys):
        """load_state_dict's post hook: a loaded weight gets a fresh verdict."""
        if module.memory_efficient:
            _memory.refresh([module])

    def _say_fallback(self, why, quiet=False):
        """One warning a module and reason: a fallback is never silent, and never noisy (quiet:
        said already, by patch()'s one warning for every module it lists in report.fallback)."""
        if torch.compiler.is_compiling():
            return  # said by the eager call that precedes tracing, or by patch()'s report
        said = self.__dict__.setdefault("_fallbacks_said", set())
        if why in said:
            return
        said.add(why)
        if quiet:
            return
        name = self.__dict__.get("_path")
        who = f"cake_rmsnorm.RMSNorm {name!r}" if name else f"cake_rmsnorm.RMSNorm({self.extra_repr()})"
        warnings.warn(f"{who} runs torch's eager formula, not the fused kernels: {why}", stacklevel=4)

    def _forward(self, x, residual):
        k = len(self.normalized_shape)
        if self.any_width:
            pass  # a weightless norm over the last dimension, whatever its size
        elif tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(f"x's trailing dimensions {tuple(x.shape[-k:])} must be normalized_shape "
                             f"{self.normalized_shape}")
        width = x.shape[-1] if k == 1 else math.prod(self.normalized_shape)
        why = fallback_reason(x, residual, width)
        if why is not None:
            self._say_fallback(why)
            return self._eager(x, residual)
        # AMP's mixed add (a float32 stream and a 16-bit branch, either as x): h_new and the
        # statistics are float32, y, w and out_dtype the branch's dtype or float32.
        mixed = mixed_stream(x, residual)
        dtype = torch.float32 if mixed else x.dtype
        eps = torch.finfo(dtype).eps if self.eps is None else self.eps
        out_dtype = None
        if self.cast_output and dtype == torch.float32 and torch.is_autocast_enabled(x.device.type):
            # The FP32 residual stream under autocast: y in the compute dtype, the cast the
            # next matmul would make, done in the same pass (h_new, dx and rstd stay FP32).
            ac = torch.get_autocast_dtype(x.device.type)
            out_dtype = ac if ac in HALF_DTYPES and (not mixed or ac == mixed[1].dtype) else None
        main_grad = None
        if self.accumulate_main_grad and self.weight is not None and self.weight.requires_grad:
            main_grad = getattr(self.weight, "main_grad", None)
            if main_grad is not None and k > 1:
                main_grad = main_grad.view(width)
            if main_grad is not None:
                check_main_grad(main_grad, x)  # refused here, by name, not in the backward
        w = self._effective_weight(dtype, width, x.device)
        if mixed and w.dtype not in (mixed[1].dtype, torch.float32):
            w = w.float()  # the mixed add's kernels take w in the branch's dtype or float32
        if k > 1:  # several trailing dims: one row of their product
            shape = x.shape
            x = x.reshape(*shape[:-k], width)
            residual = residual.reshape(*shape[:-k], width) if residual is not None else None
            out = self._kernels(x, w, eps, residual, main_grad, out_dtype)
            if residual is None:
                return out.view(shape)
            return out[0].view(shape), out[1].view(shape)
        # The ops take any layout (N-D views whose rows do not collapse are copied once) and
        # check shapes; the module's eps was checked when it was set.
        return self._kernels(x, w, eps, residual, main_grad, out_dtype)
