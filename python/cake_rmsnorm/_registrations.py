"""Fake (meta) kernels of the C++ ops, so they trace under torch.compile and export. The
functional ops' fakes also install, once inductor is loaded, the residual-fusion pass
(_fusion.py) and the lowerings that call the direct binding (_lowering.py): they run when
torch.compile first traces an op, before inductor reads its passes and lowers the graph.

The ops carry no autograd formula: differentiation is ``CakeRMSNormFunction`` (autograd.py),
the one mechanism that eager calls and torch.compile both go through. A formula registered on
the ops (torch.library.register_autograd) puts a Python hop into every call of them, with or
without grad, compiled graphs included: 8.5 us a call on the H200's host (27.2 vs 18.7 us for
the forward op, docs/perf/h200-host.md). Backpropagating through a bare op gets torch's
"no autograd kernel" warning and no gradient; ``cake_rmsnorm`` is the differentiable call.
"""

import sys

import torch

from ._fusion import install as _install_fusion
from ._lib import ops  # noqa: F401  (loads the library that defines the ops)
from ._lowering import install as _install_lowering
from ._optable import NAMES, SCHEMAS, default_value
from ._vmap import install as _install_vmap


def _on_trace():
    """The pass and the lowerings, where inductor is in use (a process that never compiles
    never loads inductor for them)."""
    if "torch._inductor.config" in sys.modules:
        _install_fusion()
        _install_lowering()

_NS = "cake_rmsnorm"

# Each output's fake by its name (_optable.SCHEMAS reads the names from the table), from the call's
# arguments by name: y in out_dtype or x's dtype, rstd FP32 of x's leading shape, h_new and dx
# like x (or y, in dx_dtype where given), dw [H] in w's dtype where dw_in_w_dtype, else FP32.
_OUTPUT = {
    "y": lambda a: a["x"].new_empty(a["x"].shape, dtype=a.get("out_dtype") or a["x"].dtype),
    "rstd": lambda a: a["x"].new_empty(a["x"].shape[:-1], dtype=torch.float32),
    "h_new": lambda a: a["x"].new_empty(a["x"].shape),
    "dx": lambda a: _rows(a).new_empty(_rows(a).shape, dtype=a.get("dx_dtype") or _rows(a).dtype),
    "dw": lambda a: _rows(a).new_empty(_rows(a).shape[-1:], dtype=a["w"].dtype if a.get("dw_in_w_dtype")
                                       else torch.float32),
}


def _rows(a):
    """The row tensor a backward reads: x, or y (the backward from the output)."""
    return a["x"] if "x" in a else a["y"]


def _fake(name):
    args_schema, returns = SCHEMAS[name]
    names = [a.name for a in args_schema]
    defaults = {a.name: default_value(a) for a in args_schema if a.default is not None}

    def fake(*args, **kwargs):
        if not returns:  # an out op: it writes its arguments and returns nothing
            return None
        _on_trace()
        bound = dict(defaults, **dict(zip(names, args)), **kwargs)
        outs = tuple(_OUTPUT[r](bound) for r in returns)
        return outs[0] if len(outs) == 1 else outs

    fake.__name__ = f"_{name}_fake"
    return fake


for _name in NAMES:
    torch.library.register_fake(f"{_NS}::{_name}")(_fake(_name))

# vmap rules (torch.func): the batch folds into rows where it can (_vmap.py).
_install_vmap()
