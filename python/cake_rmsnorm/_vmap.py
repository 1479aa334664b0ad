"""vmap rules of the ops (torch.func.vmap, and the Function's generated rule under grad, jacrev,
per-sample gradients): from the op table's roles, one rule for every op.

A norm works row by row, so where only row tensors are batched the batch folds into the rows:
each batched row tensor's batch dimension moves to the front (a view), an unbatched one is
expanded, and the op runs once on the whole batch, so every row has the kernels' bits. Where a
weight or workspace is batched, or the op returns dw (a sum over rows, which must stay per
sample), the op runs once per sample, each call with its sample's bits.
"""

import torch

from ._lib import ops
from ._optable import NS
from ._optable import NAMES, SCHEMAS, roles

__all__ = ["install"]


def _rule(name):
    op = getattr(ops, name).default
    args, rets = SCHEMAS[name]
    arg_roles, ret_roles = roles(name)
    written = [a.write for a in args]

    def rule(info, in_dims, *a):
        dims = list(in_dims) + [None] * (len(a) - len(in_dims))
        if any(wr and r != "w" and isinstance(v, torch.Tensor) and d is None
               for v, d, wr, r in zip(a, dims, written, arg_roles)):  # (a workspace is scratch)
            # as torch's own out= ops under vmap: a batched result cannot go into an unbatched buffer
            raise RuntimeError(f"vmap: cake_rmsnorm::{name} writes an output that is not batched while its "
                               "inputs are; pass the outputs batched, or call it outside vmap")
        fold = "p" not in ret_roles and all(d is None for d, r in zip(dims, arg_roles) if r in "wp")
        if fold:
            n = info.batch_size
            moved = [(v.movedim(d, 0) if d is not None else v.expand(n, *v.shape))
                     if r == "r" and isinstance(v, torch.Tensor) else v for v, d, r in zip(a, dims, arg_roles)]
            out = op(*moved)
        else:
            outs = [op(*[v.select(d, b) if isinstance(v, torch.Tensor) and d is not None else v
                         for v, d in zip(a, dims)]) for b in range(info.batch_size)]
            if not rets:
                return None, None
            out = torch.stack(outs) if len(rets) == 1 else tuple(torch.stack(o) for o in zip(*outs))
        if not rets:
            return None, None
        return out, (0 if len(rets) == 1 else (0,) * len(rets))

    return rule


installed = False


def install():
    """Register the rules once (idempotent); False where this torch has no register_vmap."""
    global installed
    if installed:
        return True
    register = getattr(torch.library, "register_vmap", None)
    if register is None:
        return False
    for name in NAMES:
        register(f"{NS}::{name}", _rule(name))
    installed = True
    return True
