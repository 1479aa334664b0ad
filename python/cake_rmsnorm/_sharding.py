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
import warnings

from ._lib import ops
from ._optable import NAMES, SCHEMAS, roles, writes

__all__ = ["install", "installed", "is_dtensor", "ROLES"]

# Each op's positional parameters: "r" a row tensor (sharded on a non-feature dim or
# replicated), "w" the weight or the workspace (replicated), "-" not a tensor; then its outputs
# ("p": dw). From the schemas, by the tensors' names (_optable.py).
ROLES = {name: roles(name) for name in NAMES}
# Each op's written arguments ("!").
_WRITES = {name: writes(name) for name in NAMES}
# Where an op takes dw_in_w_dtype, its position (read from the table, not spelled per op).
_DW16 = {name: [a.name for a in SCHEMAS[name][0]].index("dw_in_w_dtype") for name in NAMES
         if "dw_in_w_dtype" in [a.name for a in SCHEMAS[name][0]]}
_DTENSOR = "torch.distributed.tensor"
installed = False


def _strategies(name, roles, outputs, args):
    """The acceptable (output placements, input placements) of one call: every non-feature dim
    of the first argument sharded, or everything replicated.

    An out op's written arguments keep their placements: DTensor would redistribute one that
    differs into a temporary and drop the write, so only strategies that name each written
    argument's own placement are offered (a replicated main_grad under sharded rows leaves the
    all-replicated strategy: the rows are gathered, and the result is right). bwd's dw in a
    16-bit w's dtype is not a sum DTensor may add up after the rounding: replicated only."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    ndim = args[0].ndim

    def place(role, arg, d):
        if arg is None or role == "-":
            return None
        if role == "w" or d is None:
            return Replicate()
        return Partial() if role == "p" else Shard(d)

    written = {i for i in range(len(args)) if _WRITES[name][i] == "!"}
    dims = [*range(ndim - 1), None]
    i = _DW16.get(name)
    if i is not None and len(args) > i and args[i]:
        dims = [None]  # dw rounded to a 16-bit dtype is never a Partial sum
    out = []
    for d in dims:
        ins = [place(roles[i], a, d) for i, a in enumerate(args)]
        if any(args[i] is not None and any(p != ins[i] for p in args[i].placements) for i in written):
            continue
        out.append(([place(r, True, d) for r in outputs], ins))
    return out


def install():
    """Register the rules (idempotent); needs torch.distributed.tensor importable."""
    global installed
    if installed:
        return True
    from torch.distributed.tensor.experimental import register_sharding

    for name, (roles, outputs) in ROLES.items():
        def rule(*args, _name=name, _roles=roles, _outputs=outputs, **kwargs):
            return _strategies(_name, _roles, _outputs, args)
        register_sharding(getattr(ops, name).default)(rule)
    installed = True
    return True


def is_dtensor(t):
    """Whether t is a DTensor (without importing DTensor where nothing has)."""
    mod = sys.modules.get(_DTENSOR)
    return mod is not None and isinstance(t, mod.DTensor)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs install() right after torch.distributed.tensor is first imported. It stays on
    sys.meta_path until then (a find_spec probe that imports nothing leaves it armed)."""

    _busy = False

    def find_spec(self, fullname, path, target=None):
        if fullname != _DTENSOR or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader
        finder = self

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                if finder in sys.meta_path:
                    sys.meta_path.remove(finder)
                try:
                    install()
                except Exception as e:  # noqa: BLE001  (the user's import must not fail for us)
                    warnings.warn(f"cake_rmsnorm: DTensor sharding rules not registered: {e!r}")

            def __getattr__(self, attr):
                return getattr(inner, attr)

        spec.loader = Loader()
        return spec


def _arm():
    if _DTENSOR in sys.modules:
        install()
    else:
        sys.meta_path.insert(0, _AfterImport())


_arm()
