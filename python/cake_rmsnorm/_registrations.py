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


def _on_trace():
    """The pass and the lowerings, where inductor is in use (a process that never compiles
    never loads inductor for them)."""
    if "torch._inductor.config" in sys.modules:
        _install_fusion()
        _install_lowering()

_NS = "cake_rmsnorm"


@torch.library.register_fake(f"{_NS}::fwd")
def _fwd_fake(x, w, eps, out_dtype=None):
    _on_trace()
    return x.new_empty(x.shape, dtype=out_dtype or x.dtype), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake(f"{_NS}::fwd_residual")
def _fwd_residual_fake(x, residual, w, eps, out_dtype=None):
    _on_trace()
    return (x.new_empty(x.shape, dtype=out_dtype or x.dtype), x.new_empty(x.shape[:-1], dtype=torch.float32),
            x.new_empty(x.shape))


@torch.library.register_fake(f"{_NS}::fwd_out")
def _fwd_out_fake(x, w, eps, y, rstd):
    return None


@torch.library.register_fake(f"{_NS}::fwd_residual_out")
def _fwd_residual_out_fake(x, residual, w, eps, y, rstd, h_new):
    return None


@torch.library.register_fake(f"{_NS}::bwd")
def _bwd_fake(g, x, w, rstd, g_residual, dw_in_w_dtype=False):
    _on_trace()
    return x.new_empty(x.shape), x.new_empty(x.shape[-1:], dtype=w.dtype if dw_in_w_dtype else torch.float32)


@torch.library.register_fake(f"{_NS}::bwd_dx")
def _bwd_dx_fake(g, x, w, rstd, g_residual):
    _on_trace()
    return x.new_empty(x.shape)


@torch.library.register_fake(f"{_NS}::bwd_out")
def _bwd_out_fake(g, x, w, rstd, g_residual, dx, dw, workspace, max_ctas=0, accumulate=False):
    return None

