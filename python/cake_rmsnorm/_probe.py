"""Whether a module computes an RMSNorm this package can take over, checked on probe inputs.

The probe calls the module's own ``forward`` (not ``__call__``), so the user's forward hooks and
pre-hooks never see the probe's tensors. A module whose weight is on the meta device (a model built
there and materialised later, as FSDP2 and torchtitan start) is probed through a real copy on the
CPU with random weights: the verdict is the class's formula, which materialising does not change.
"""

import copy
import inspect
import math
import numbers
from typing import Optional, Tuple

import torch
from torch import nn

__all__ = ["probe_norm", "eps_of"]

_EPS_NAMES = ("variance_epsilon", "eps", "epsilon", "rms_norm_eps")
# A probe output within this of x_hat * w (or x_hat * (1 + w)), relative to its largest value,
# is that formula: BF16 weights and a module's own roundings stay far inside it, while a bias,
# a mean subtraction, a missing weight or a wrong eps miss it by tens of percent.
_PROBE_TOL = 2e-2


def eps_of(module):
    for name in _EPS_NAMES:
        v = getattr(module, name, None)
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            return float(v)
    return None


def _extra_forward_args(module) -> bool:
    """True when forward takes more than the input (a gate, a residual of its own, ...): the
    replacement would drop it, or read it as our residual."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return True
    return len([p for p in params if p.kind not in (p.VAR_KEYWORD,)]) != 1


def _structure_refusal(module: nn.Module) -> Optional[str]:
    """Why a module cannot be an RMSNorm we replace, from its structure alone (None: it can)."""
    if getattr(module, "bias", None) is not None:
        return "has a bias"
    if eps_of(module) is None:
        return "no eps attribute (variance_epsilon or eps)"
    if _extra_forward_args(module):
        return "forward takes more than the input (a gated or fused variant)"
    return None


def _probe_weightless(module: nn.Module) -> Tuple[Optional[bool], str]:
    """(False, "") when a module with no parameters computes ``x_hat`` with its eps at any
    width (Gemma3n's ``with_scale=False`` norms, Llama4's L2 norm): probed at two widths."""
    why = _structure_refusal(module)
    if why:
        return None, why
    eps = eps_of(module)
    for H in (64, 40):
        gen = torch.Generator().manual_seed(H)
        for scale in (1.0, math.sqrt(max(eps, 1e-12))):
            x = ((torch.randn(3, H, generator=gen, dtype=torch.float64) + 0.5) * scale).to(torch.float32)
            try:
                with torch.no_grad():
                    y = _forward(module, x)
            except Exception as e:
                return None, f"probe call failed ({type(e).__name__}: {str(e)[:80]})"
            if not isinstance(y, torch.Tensor) or y.shape != x.shape:
                return None, "forward does not return one tensor of the input's shape"
            xd = x.double()
            ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
            err = (y.detach().double().cpu() - ref).abs().max().item() / (ref.abs().max().item() or 1.0)
            if err > _PROBE_TOL:
                return None, f"computes something else (relative error {err:.2g} against x_hat at scale {scale:.2g})"
    return False, ""


def probe_norm(module: nn.Module) -> Tuple[Optional[bool], str]:
    """(zero_centered, "") when ``module`` computes an RMSNorm over its last dimension with its
    1-D ``weight`` and its eps, as ``x_hat * w`` (False) or Gemma's ``x_hat * (1 + w)`` (True),
    or, with no parameters at all, ``x_hat`` at any width (False), checked on probe inputs (one
    at a scale where eps matters); else (None, the reason). A ``torch.nn.RMSNorm`` is (False, "")
    as it is: ``patch`` replaces it whatever its eps (None: the dtype's epsilon) and shape."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if type(module) is nn.RMSNorm:
        return False, ""
    w = getattr(module, "weight", None)
    if not isinstance(w, nn.Parameter) and not any(True for _ in module.parameters()):
        return _probe_weightless(module)  # no weight, or an unused buffer (FalconMamba's)
    if not isinstance(w, nn.Parameter) or w.dim() != 1:
        return None, "no 1-D weight parameter"
    why = _structure_refusal(module)
    if why:
        return None, why
    eps = eps_of(module)
    if w.is_meta:
        return _probe_meta(module)
    H = w.shape[0]
    gen = torch.Generator().manual_seed(H)
    base = (torch.randn(3, H, generator=gen, dtype=torch.float64) + 0.5)
    kinds = None
    for scale in (1.0, math.sqrt(max(eps, 1e-12))):
        x = (base * scale).to(torch.float32)
        try:
            with torch.no_grad():
                y = _forward(module, x.to(w.device))
        except Exception as e:  # whatever the module refuses, it is not ours to replace
            return None, f"probe call failed ({type(e).__name__}: {str(e)[:80]})"
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            return None, "forward does not return one tensor of the input's shape"
        xd = x.double()
        xhat = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
        wd = w.detach().double().cpu()
        errs = {}
        for zc, ww in ((False, wd), (True, 1.0 + wd)):
            ref = xhat * ww
            den = ref.abs().max().item() or 1.0
            errs[zc] = (y.detach().double().cpu() - ref).abs().max().item() / den
        ok = {zc for zc, e in errs.items() if e <= _PROBE_TOL}
        kinds = ok if kinds is None else kinds & ok
        if not kinds:
            return None, (f"computes something else (relative error {min(errs.values()):.2g} against "
                          f"x_hat * w and x_hat * (1 + w) at scale {scale:.2g})")
    return (True in kinds), ""


def _forward(module, x):
    """The module's forward without its hooks (hooks are the user's: the probe is not a call)."""
    return type(module).forward(module, x)


def _probe_meta(module: nn.Module) -> Tuple[Optional[bool], str]:
    """probe_norm of a module on the meta device: a copy materialised on the CPU, its weight drawn
    at random (a weight of ones could not tell x_hat * w from x_hat * (1 + w) - 1)."""
    try:
        real = copy.deepcopy(module).to_empty(device="cpu")
    except Exception as e:  # noqa: BLE001  (a module that cannot be copied is not probed)
        return None, f"weight on the meta device and no real copy to probe ({type(e).__name__}: {str(e)[:60]})"
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7)
        for t in list(real.parameters()) + list(real.buffers()):
            if t.is_floating_point():
                t.copy_(torch.rand(t.shape, generator=gen, dtype=torch.float64).to(t.dtype) * 0.5 + 0.75)
    return probe_norm(real)
