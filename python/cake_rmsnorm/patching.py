"""`patch()`: swap the RMSNorm modules of a model for :class:`RMSNorm`, recognised by what they
compute rather than by their class names."""

import contextlib
import inspect
import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
from torch import nn

from . import _memory
from ._probe import eps_of as _eps_of
from ._probe import probe_norm
from .nn import RMSNorm
from .nn import width_reason as _width_reason

__all__ = ["patch", "unpatch", "patched", "PatchReport", "probe_norm"]



@dataclass
class PatchReport:
    """What ``patch`` changed: ``replaced`` [(module path, class name)] every module it swapped,
    ``fallback`` [(module path, class name, reason)] those of them that run torch's eager
    formula at every call (a width that is not a multiple of 8), ``served`` the rest (the
    kernels run them, for the inputs they take), and ``skipped`` [(module path, class name,
    reason)] the norm-like modules left alone. With ``memory_efficient``, ``saves_x`` [(module
    path, class name, reason)] lists the modules whose weight, as patched, has columns y cannot
    rebuild x from (they save x until it has none), and ``notes`` says where the mode saves
    nothing (activation checkpointing recomputes the blocks anyway)."""

    replaced: List[Tuple[str, str]] = field(default_factory=list)
    skipped: List[Tuple[str, str, str]] = field(default_factory=list)
    fallback: List[Tuple[str, str, str]] = field(default_factory=list)
    saves_x: List[Tuple[str, str, str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    _originals: dict = field(default_factory=dict, repr=False)

    @property
    def served(self) -> List[Tuple[str, str]]:
        gone = {path for path, _, _ in self.fallback}
        return [(path, cls) for path, cls in self.replaced if path not in gone]

    def __bool__(self):
        return bool(self.replaced)


# The QK norms (Qwen3, Gemma 3, OLMo 2, ...) by their names: their output goes to RoPE, which
# keeps none of it, so saving y there costs the bytes saving x did.
_QK_NORMS = ("q_norm", "k_norm", "query_norm", "key_norm", "q_layernorm", "k_layernorm")


def _qk_norms_save_x(model, report):
    """QK norms keep the standard mode (the same bytes, full precision); report.notes says so."""
    qk = [p for p, _ in report.replaced if p.rpartition(".")[2] in _QK_NORMS]
    for p in qk:
        model.get_submodule(p).memory_efficient = False
    if qk:
        report.notes.append(f"{len(qk)} QK norms ({qk[0]}, ...) keep saving x: their output goes to RoPE, which "
                            "keeps none of it, so saving y would cost the same bytes")


def _checkpointing(model) -> bool:
    """Whether a transformers model recomputes its blocks in the backward (either spelling)."""
    on = getattr(model, "is_activation_checkpointing", None)
    return bool(on if on is not None else getattr(model, "is_gradient_checkpointing", False))


def _under_module_lists(model) -> set:
    """Paths of the modules inside a ModuleList or ModuleDict (a model's repeated blocks)."""
    out = set()
    for path, m in model.named_modules():
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)):
            out.update(f"{path}.{sub}" if path else sub for sub, _ in m.named_modules() if sub)
    return out


def _set_submodule(model, path, module):
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _norm_like(module) -> bool:
    return "norm" in type(module).__name__.lower()


def patch(model: nn.Module, deterministic: bool = True, accumulate_main_grad: bool = False,
          memory_efficient: bool = False, cast_output: Optional[bool] = None) -> PatchReport:
    """Replace the RMSNorm modules of a model (``transformers`` or any other) in place.

    A module is replaced when it computes an RMSNorm: ``torch.nn.RMSNorm`` (any
    normalized_shape, with or without a weight), or a module with a 1-D ``weight``, an eps
    attribute and a forward of the input alone whose output on two probe inputs is
    ``x_hat * w`` (Llama, Mistral, Qwen, Phi-3, OLMo, Granite, DeepSeek, GLM, ...) or Gemma's
    ``x_hat * (1 + w)``. The :class:`RMSNorm` that replaces it shares the original weight
    Parameter (optimizer state and tied references keep working) and keeps its eps. Other
    norm-like modules are left alone and listed in ``report.skipped`` with the reason; a
    warning names the RMSNorm-like ones. ``unpatch(model, report)`` (or the ``patched`` context
    manager) restores the originals. ``memory_efficient``: every replacement saves y, not x, for
    its backward (``RMSNorm(memory_efficient=True)``; docs/python_api.md#memory-efficient).
    ``cast_output`` (``RMSNorm``'s): None, the default, turns it on for the norms inside a
    repeated block (under a ModuleList: their outputs feed the block's layers, which cast to the
    autocast dtype anyway) and leaves it off elsewhere (a final norm, whose output the user may
    read, returns FP32 under autocast as the model did); ``report.notes`` says which.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, v in (("deterministic", deterministic), ("accumulate_main_grad", accumulate_main_grad),
                    ("memory_efficient", memory_efficient)):
        if not isinstance(v, bool):
            raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    if cast_output is not None and not isinstance(cast_output, bool):
        raise TypeError(f"cast_output must be a bool or None, got {type(cast_output).__name__}")
    in_blocks = _under_module_lists(model)
    if isinstance(model, RMSNorm) or type(model) is nn.RMSNorm or (
            _norm_like(model) and not list(model.children()) and probe_norm(model)[0] is not None):
        # patch() replaces submodules in place; a norm at the top has no parent to hold the new one
        raise ValueError(f"model is itself a norm ({type(model).__name__}): patch() replaces the norms inside a "
                         f"model; wrap it, or build cake_rmsnorm.RMSNorm.from_module(norm, ...) directly")
    report = PatchReport()
    for path, module in list(model.named_modules()):
        if not path or isinstance(module, RMSNorm):
            continue
        cls = type(module).__name__
        if type(module) is nn.RMSNorm:
            zero_centered, eps = False, module.eps
        elif _norm_like(module) and not list(module.children()):
            zero_centered, reason = probe_norm(module)
            if zero_centered is None:
                report.skipped.append((path, cls, reason))
                continue
            eps = _eps_of(module)
        else:
            continue
        cast = (path in in_blocks) if cast_output is None else cast_output
        new = RMSNorm.from_module(module, zero_centered, eps, deterministic=deterministic,
                                  accumulate_main_grad=accumulate_main_grad, memory_efficient=memory_efficient,
                                  cast_output=cast)
        new.train(module.training)
        # The original's hooks run on the new module (a hook sees the new module as its first argument).
        for attr in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
                     "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called"):
            if hasattr(module, attr):
                getattr(new, attr).update(getattr(module, attr))
        _set_submodule(model, path, new)
        new._path = path  # named in its fallback warnings
        report.replaced.append((path, cls))
        report._originals[path] = module
        width = math.prod(new.normalized_shape) if not new.any_width else None
        if width is not None and width % 8:
            report.fallback.append((path, cls, f"width {width} is not a multiple of 8: torch's eager formula runs"))
            new._say_fallback(_width_reason(width), quiet=True)  # patch()'s warning below says it, once
    if report.fallback:
        warnings.warn(f"cake_rmsnorm.patch replaced {len(report.replaced)} modules; {len(report.fallback)} of them "
                      "run torch's eager formula, not the fused kernels: "
                      + "; ".join(f"{p} ({r})" for p, _, r in report.fallback[:4])
                      + ("; ..." if len(report.fallback) > 4 else "") + " (report.fallback lists them)", stacklevel=2)
    if memory_efficient:
        _qk_norms_save_x(model, report)
        for path, cls in report.replaced:
            new = model.get_submodule(path)
            if new.memory_efficient and new._from_y is False:  # the verdict compiled calls read (FP16's range)
                report.saves_x.append((path, cls, _memory.why_saves_x(_memory.effective(new), torch.float16)))
    casts = [p for p, _ in report.replaced if model.get_submodule(p).cast_output]
    if casts and len(casts) < len(report.replaced):
        report.notes.append(f"under torch.autocast, {len(casts)} norms inside repeated blocks return y in the autocast "
                            f"dtype (the cast their layers make, fused); the other {len(report.replaced) - len(casts)} "
                            "return FP32, as the model's own norms did")
    elif casts:
        report.notes.append("under torch.autocast, every replaced norm returns y in the autocast dtype (cast_output)")
    if memory_efficient and _checkpointing(model):
        report.notes.append("activation checkpointing is on: the blocks' forwards run again in the backward, so "
                            "memory_efficient saves nothing there")
    model.__dict__.setdefault("_cake_rmsnorm_reports", []).append(report)  # unpatch(model) finds it
    missed = sorted({(cls, reason) for _, cls, reason in report.skipped if "rms" in cls.lower()})
    if missed:
        warnings.warn("cake_rmsnorm.patch left these RMSNorm-like modules alone: "
                      + "; ".join(f"{c} ({r})" for c, r in missed), stacklevel=2)
    return report


def unpatch(model: nn.Module, report: Optional[PatchReport] = None) -> None:
    """Put back the modules ``patch`` replaced: those of ``report``, or (None) of every patch of
    ``model`` not yet undone, the latest first."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if report is not None and not isinstance(report, PatchReport):
        raise TypeError(f"report must be the PatchReport that patch(model) returned, got {type(report).__name__}")
    done = model.__dict__.setdefault("_cake_rmsnorm_reports", [])
    for r in ([report] if report is not None else list(reversed(done))):
        for path, module in r._originals.items():
            _set_submodule(model, path, module)
        r._originals.clear()
        if r in done:
            done.remove(r)


@contextlib.contextmanager
def patched(model: nn.Module, **kwargs):
    """``with patched(model) as report:`` patch for the block, restore after it."""
    report = patch(model, **kwargs)
    try:
        yield report
    finally:
        unpatch(model, report)
