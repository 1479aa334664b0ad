"""The memory-efficient mode's rule: when the forward may save y (the output the next Linear keeps
anyway) instead of x, the backward rebuilding xhat = y (1 / w).

y rebuilds xhat to one rounding of y's dtype and two of FP32 (relative to xhat, or to 1, the
row's RMS of xhat) for every column whose effective weight (w, or 1 + w) lies in [lo, hi] (the C
API's cake_rmsnorm_y_rebuild_range: lo is y's smallest normal, hi half y's largest over sqrt(H),
at most 2^126). A
weight with a column outside (zero, tiny, denormal, huge, non-finite) gets x saved after all, so
the gradient is the standard path's; the kernels divide by NaN there, so no call can return a
silently biased gradient. Checking a weight reads it on the host: one sync a weight version,
remembered per tensor; the optimizer step hook checks every tracked module in one sync, so a
training step's eager calls pay none of their own.
"""

import ctypes
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook as _register_step_hook

from ._cabi import DTYPE_CODES as _DTYPE
from ._lib import _c
from ._sharding import is_dtensor

__all__ = ["rebuild_range", "from_y_holds", "track", "refresh", "why_saves_x"]

_RANGES = {}


def rebuild_range(y_dtype, hidden):
    """(lo, hi): the |w| for which y of ``y_dtype`` and width ``hidden`` rebuilds xhat."""
    key = (y_dtype, hidden)
    r = _RANGES.get(key)
    if r is None:
        lo, hi = ctypes.c_float(), ctypes.c_float()
        st = _c.cake_rmsnorm_y_rebuild_range(_DTYPE[y_dtype], hidden, ctypes.byref(lo), ctypes.byref(hi))
        if st != 0:
            raise ValueError(f"no rebuild range for y of {y_dtype} and hidden {hidden}")
        r = _RANGES[key] = (lo.value, hi.value)
    return r


def _check(w, y_dtype, hidden):
    lo, hi = rebuild_range(y_dtype, hidden)
    a = w.detach().float().abs()
    return bool(((a >= lo) & (a <= hi)).all())  # NaN fails both: x is saved


# A verdict is remembered on the tensor it was taken for (an attribute: no weak-reference
# lookup a call), stamped with the tensor's version and storage, the call's y dtype, width and
# transform, and the epoch, which refresh() advances to forget them all. refresh() leaves its
# own True verdicts with no y dtype (FP16's range, inside every other), so after an optimizer
# step the eager calls of a tracked module need no host sync of their own.
_EPOCH = [0]
_ATTR = "_cake_rmsnorm_y_verdict"


def _stamp(key, y_dtype, hidden, transform):
    local = getattr(key, "_local_tensor", key)
    return (key._version, local.data_ptr(), y_dtype, hidden, transform, _EPOCH[0])


def from_y_holds(w, y_dtype, hidden, source=None, transform=None):
    """True where the forward may save y: every column of the effective weight ``w`` lies in the
    rebuild range. ``source`` (the Parameter ``w`` derives from, ``transform`` naming how, as
    "1+w" does) keys the verdict, so a weight made afresh each call is checked once a version of
    the Parameter, not once a call. A write that bypasses the version counter (``p.data.*_``) is
    seen after the next optimizer step, which forgets every verdict (refresh)."""
    if y_dtype not in _DTYPE:
        return False  # no kernels for it: refused by the checks with the documented error
    key = source if source is not None else w
    stamp = _stamp(key, y_dtype, hidden, transform)
    seen = key.__dict__.get(_ATTR)
    if seen is not None and (seen[0] == stamp or (seen[1] and seen[0] == _stamp(key, None, hidden, transform))):
        return seen[1]
    if type(w) is not torch.Tensor and is_dtensor(w):  # a replicated weight's local copy is all of it
        w = w.to_local() if all(p.is_replicate() for p in w.placements) else w.full_tensor()
    verdict = _check(w, y_dtype, hidden)
    key.__dict__[_ATTR] = (stamp, verdict)
    return verdict


def why_saves_x(w, y_dtype):
    """The reason a call saves x: the effective weight's columns outside the range, counted."""
    lo, hi = rebuild_range(y_dtype, w.numel())
    a = w.detach().float().abs()
    bad = ~((a >= lo) & (a <= hi))
    return (f"{int(bad.sum())} of {a.numel()} weight columns lie outside the range y rebuilds x from "
            f"(|w| in [{lo:.3g}, {hi:.3g}] for y of {y_dtype}; zero, tiny, huge or not finite)")


def effective(module):
    """The weight the kernels see: w, or 1 + w (zero-centred), detached."""
    w = module.weight.detach()
    return 1.0 + w.float() if getattr(module, "zero_centered", False) else w


# Memory-efficient modules, whose verdict compiled calls read (RMSNorm._from_y): taken at creation
# and on every eager call, and refreshed after every optimizer step (one sync for them all), so
# a weight an optimizer moves out of the range is caught before the next compiled forward.
_TRACKED = weakref.WeakSet()
_HOOK = []


def track(module):
    _TRACKED.add(module)
    if not _HOOK:
        _HOOK.append(_register_step_hook(lambda *_: refresh(list(_TRACKED))))
    refresh([module])


def refresh(modules):
    """Each module's verdict for the narrowest range (FP16 y: right for every y dtype), one host
    sync for all; a module with no weight keeps True (its unit weight), a meta weight None. Every
    remembered eager verdict is forgotten first, so a
    write no version counter saw is caught by the next call after an optimizer step."""
    _EPOCH[0] += 1
    checks, owners = [], []
    for m in modules:
        w = getattr(m, "weight", None)
        if w is None:
            m._from_y = True
            continue
        if w.is_meta:
            m._from_y = None
            continue
        a = effective(m).float().abs()
        if type(a) is not torch.Tensor and is_dtensor(a):
            if not all(p.is_replicate() for p in a.placements):  # a shard (FSDP2): only eager calls see it whole
                m._from_y = None
                continue
            a = a.to_local()
        lo, hi = rebuild_range(torch.float16, w.numel())
        checks.append(((a >= lo) & (a <= hi)).all())
        owners.append(m)
    if checks:
        one_device = all(c.device == checks[0].device for c in checks)
        verdicts = torch.stack(checks).tolist() if one_device else [bool(c) for c in checks]
        for m, ok in zip(owners, verdicts):
            m._from_y = bool(ok)
            if ok:  # every y dtype's verdict for the eager calls (from_y_holds)
                w = m.weight
                transform = "1+w" if getattr(m, "zero_centered", False) else None
                w.__dict__[_ATTR] = (_stamp(w, None, w.numel(), transform), True)
