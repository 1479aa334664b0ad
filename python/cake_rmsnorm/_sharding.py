"""DTensor sharding rules of the ops, so DTensors flow through them (tensor and sequence parallel).

A norm works row by row, so every op takes its row tensors (x, residual, g, rstd and the
outputs) sharded alike on any non-feature dimension, or replicated, with the weight replicated:
y, h_new, rstd and dx come out sharded as x is. The backward's dw is then a ``Partial`` sum (each
rank summed its rows); the autograd Function reduces it in FP32 and casts it to w's dtype once,
after the sum (autograd.py). A feature dimension or a weight that is sharded is not among these
strategies, so DTensor redistributes it to one that is (gathers it), as it does for torch's own
``rms_norm``.

The rules are registered when ``torch.distributed.tensor`` is imported, before or after this
package (importing it costs about 0.65 s, which a process that never uses DTensor should not pay).
"""

import importlib.abc
import importlib.util
import sys

from ._lib import ops

__all__ = ["install", "installed", "is_dtensor", "ROLES"]

# Each op's positional parameters: "r" a row tensor (sharded on a non-feature dim or
# replicated), "w" the weight (replicated), "-" not a tensor; then its outputs ("p": dw).
ROLES = {
    "fwd": ("rw--", "rr"),
    "fwd_residual": ("rrw--", "rrr"),
    "bwd": ("rrwrr-", "rp"),
    "bwd_dx": ("rrwrr", "r"),
    "fwd_out": ("rw-rr", ""),
    "fwd_residual_out": ("rrw-rrr", ""),
    "bwd_out": ("rrwrrrpw--", ""),
}
_DTENSOR = "torch.distributed.tensor"
installed = False


def _strategies(roles, outputs, args):
    """The acceptable (output placements, input placements) of one call: every non-feature dim
    of the first argument sharded, or everything replicated."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    ndim = args[0].ndim

    def place(role, arg, d):
        if arg is None or role == "-":
            return None
        if role == "w" or d is None:
            return Replicate()
        return Partial() if role == "p" else Shard(d)

    out = []
    for d in [*range(ndim - 1), None]:
        ins = [place(roles[i], a, d) for i, a in enumerate(args)]
        outs = [place(r, True, d) for r in outputs]
        out.append((outs, ins))
    return out


def install():
    """Register the rules (idempotent); needs torch.distributed.tensor importable."""
    global installed
    if installed:
        return True
    from torch.distributed.tensor.experimental import register_sharding

    for name, (roles, outputs) in ROLES.items():
        def rule(*args, _roles=roles, _outputs=outputs, **kwargs):
            return _strategies(_roles, _outputs, args)
        register_sharding(getattr(ops, name).default)(rule)
    installed = True
    return True


def is_dtensor(t):
    """Whether t is a DTensor (without importing DTensor where nothing has)."""
    mod = sys.modules.get(_DTENSOR)
    return mod is not None and isinstance(t, mod.DTensor)


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs install() right after torch.distributed.tensor is first imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _DTENSOR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        install()


def _arm():
    if _DTENSOR in sys.modules:
        install()
    else:
        sys.meta_path.insert(0, _AfterImport())


_arm()
