"""`RMSNorm`, a drop-in `torch.nn.Module`, and `patch()` for Hugging Face models."""

import contextlib
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
from torch import nn

from ._checks import ACT_DTYPES, FP32_CUDA_MAX_HIDDEN, HALF_DTYPES, check_eps
from .autograd import apply

__all__ = ["RMSNorm", "patch", "unpatch", "patched", "PatchReport"]


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, with the fused kernels.

    Behaves like ``torch.nn.RMSNorm(hidden_size, eps)`` (same ``weight`` parameter and state
    dict), or, with ``zero_centered=True``, like Gemma's norm: ``y = norm(x) * (1 + weight)``
    computed with an FP32 effective weight, ``weight`` initialised to zeros and kept in the
    dtype it was created with (FP32 if the model keeps it so).

    ``forward(x)`` returns y; ``forward(x, residual)`` returns ``(y, h_new)`` with
    ``h_new = cast(x + residual)`` normalised (the fused pre-norm residual add).

    Parameters
    ----------
    hidden_size : int or tuple of one int
    eps : float or None
        None takes ``torch.finfo(x.dtype).eps`` at each call, as torch.nn.RMSNorm does.
    zero_centered : bool
        Gemma-style ``1 + weight``.
    deterministic : bool
        Reproducible dw bits (see ``cake_rmsnorm_train_backward``).
    accumulate_main_grad : bool
        When ``weight.main_grad`` (FP32 [H]) exists, the backward adds dw into it in place and
        leaves ``weight.grad`` alone (Megatron-style gradient buffers).

    Notes
    -----
    BF16, FP16 and FP32 activations run the kernels. FP32 ones are the residual stream of
    mixed precision: under ``torch.autocast`` y comes back in the autocast dtype (the cast the
    next matmul makes, done in the same pass). Inputs the kernels do not take (FP64, a width
    that is not a multiple of 8, FP32 rows wider than 16384 on CUDA, a device other than CPU or
    CUDA) run the eager formula instead, so the module can replace a norm in any model. A
    weight with ``requires_grad=False`` costs no dw work.
    """

    def __init__(self, hidden_size, eps: Optional[float] = 1e-6, zero_centered: bool = False,
                 deterministic: bool = True, accumulate_main_grad: bool = False, device=None, dtype=None):
        super().__init__()
        if isinstance(hidden_size, (tuple, list, torch.Size)):
            if len(hidden_size) != 1:
                raise ValueError(f"hidden_size must be an int or a 1-tuple, got {tuple(hidden_size)}")
            hidden_size = hidden_size[0]
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive int, got {hidden_size!r}")
        self.normalized_shape = (hidden_size,)
        self.eps = eps
        self.zero_centered = zero_centered
        self.deterministic = deterministic
        self.accumulate_main_grad = accumulate_main_grad
        self.weight = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.reset_parameters()

    @property
    def eps(self) -> Optional[float]:
        return self._eps

    @eps.setter
    def eps(self, value):
        # Checked once here, so neither the kernels' path nor the fallback checks it per call.
        self._eps = None if value is None else check_eps(value)

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(0.0 if self.zero_centered else 1.0)

    @classmethod
    def from_module(cls, module: nn.Module, zero_centered: bool, eps: Optional[float], **kwargs):
        """A RMSNorm sharing ``module.weight`` (the same Parameter object, so optimizer state
        and tied references keep working)."""
        w = module.weight
        new = cls(w.shape[0], eps=eps, zero_centered=zero_centered, device="meta", **kwargs)
        new.weight = w
        return new

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, zero_centered={self.zero_centered}, "
                f"deterministic={self.deterministic}")

    def _effective_weight(self, dtype):
        w = self.weight
        if self.zero_centered:
            return 1.0 + w.float()
        if w.dtype in (dtype, torch.float32) or (dtype == torch.float32 and w.dtype in HALF_DTYPES):
            return w  # the kernels take it as it is (FP32 activations: any of the three)
        return w.to(dtype)

    def _eager(self, x, residual):
        h = x if residual is None else x + residual
        hf = h.float()
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * self._effective_weight(torch.float32).float()
        y = y.to(x.dtype)
        return y if residual is None else (y, h)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        if (x.dtype not in ACT_DTYPES or x.device.type not in ("cpu", "cuda") or x.shape[-1] % 8
                or (residual is not None and residual.dtype != x.dtype)
                or (x.dtype == torch.float32 and x.is_cuda and x.shape[-1] > FP32_CUDA_MAX_HIDDEN)):
            return self._eager(x, residual)
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        out_dtype = None
        if x.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type):
            # The FP32 residual stream under autocast: y in the compute dtype, the cast the
            # next matmul would make, done in the same pass (h_new, dx and rstd stay FP32).
            ac = torch.get_autocast_dtype(x.device.type)
            out_dtype = ac if ac in HALF_DTYPES else None
        main_grad = None
        if self.accumulate_main_grad and self.weight.requires_grad:
            main_grad = getattr(self.weight, "main_grad", None)
        # The ops take any layout (N-D views whose rows do not collapse are copied once) and
        # check shapes; the module's eps was checked when it was set.
        return apply(x, self._effective_weight(x.dtype), eps, residual, self.deterministic, main_grad, out_dtype)


# Hugging Face norm classes by name -> zero-centred (Gemma's 1 + w).
KNOWN_NORMS = {
    "LlamaRMSNorm": False,
    "MistralRMSNorm": False,
    "Qwen2RMSNorm": False,
    "Qwen3RMSNorm": False,
    "Qwen3MoeRMSNorm": False,
    "GemmaRMSNorm": True,
    "Gemma2RMSNorm": True,
    "Gemma3RMSNorm": True,
    "RMSNorm": False,  # torch.nn.RMSNorm
}


@dataclass
class PatchReport:
    """What ``patch`` changed: ``replaced`` [(module path, class name)], ``skipped``
    [(module path, class name, reason)] for norm-like modules left alone."""

    replaced: List[Tuple[str, str]] = field(default_factory=list)
    skipped: List[Tuple[str, str, str]] = field(default_factory=list)
    _originals: dict = field(default_factory=dict, repr=False)

    def __bool__(self):
        return bool(self.replaced)


def _set_submodule(model, path, module):
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _eps_of(module):
    for name in ("variance_epsilon", "eps"):
        if hasattr(module, name):
            return getattr(module, name)
    return 1e-6


def patch(model: nn.Module, deterministic: bool = True, accumulate_main_grad: bool = False) -> PatchReport:
    """Replace the RMSNorm modules of a Hugging Face ``transformers`` model in place.

    Llama, Mistral, Qwen2, Qwen3 (q/k per-head norms included), Gemma, Gemma 2 and Gemma 3
    (zero-centred) and ``torch.nn.RMSNorm`` modules become :class:`RMSNorm` modules that share
    the original weight Parameter and keep its eps. Other modules whose class name looks like a
    norm are left alone and listed in ``report.skipped``. ``unpatch(model, report)`` (or the
    ``patched`` context manager) restores the originals.
    """
    report = PatchReport()
    for path, module in list(model.named_modules()):
        if not path or isinstance(module, RMSNorm):
            continue
        cls = type(module).__name__
        if cls in KNOWN_NORMS and isinstance(getattr(module, "weight", None), nn.Parameter):
            if cls == "RMSNorm" and not isinstance(module, nn.RMSNorm):
                report.skipped.append((path, cls, "unknown RMSNorm class"))
                continue
            new = RMSNorm.from_module(module, KNOWN_NORMS[cls], _eps_of(module), deterministic=deterministic,
                                      accumulate_main_grad=accumulate_main_grad)
            new.train(module.training)
            _set_submodule(model, path, new)
            report.replaced.append((path, cls))
            report._originals[path] = module
        elif "norm" in cls.lower():
            report.skipped.append((path, cls, "not a known RMSNorm class"))
    return report


def unpatch(model: nn.Module, report: PatchReport) -> None:
    """Put back the modules ``patch`` replaced."""
    for path, module in report._originals.items():
        _set_submodule(model, path, module)
    report._originals.clear()


@contextlib.contextmanager
def patched(model: nn.Module, **kwargs):
    """``with patched(model) as report:`` patch for the block, restore after it."""
    report = patch(model, **kwargs)
    try:
        yield report
    finally:
        unpatch(model, report)
