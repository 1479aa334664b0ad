"""Residual fusion under torch.compile: an inductor post-grad pass over the ops' graphs.

A pre-norm transformer adds the residual stream right before each norm (``h = a + b;
y = norm(h)``) and, in the backward, adds the norm's dx to the gradient arriving from the next
residual add. Inductor fuses those adds into its own norm kernels; next to an opaque op it
launches each one on its own (measured on a compiled Llama, hidden 1024, 4 layers: 19 extra
add kernels a step, 0.13 ms of GPU time and their launches on the host). This pass gives those
adds to the kernels that already take them:

- forward: ``fwd(add(a, b), w, eps)`` becomes ``fwd_residual(a, b, w, eps)``, whose ``h_new``
  replaces the add's other uses. ``h_new`` has the add's bits (one rounding of ``a + b``); y
  is the residual route's normalisation of it, which sums each row in the plain route's order,
  so it has the eager graph's bits.
- backward: ``add(dx, other)``, where the add is dx's only use, becomes the backward's
  ``g_residual = other``, which meets dx rounded to the activation type: the eager graph's
  two roundings, so its bits.

Only adds of two tensors of one shape (no broadcast, no alpha) are taken: of one dtype, or AMP's
mixed add of the float32 residual stream and a 16-bit branch (promoted by the add, or widened
by a convert the add alone uses), which becomes the mixed route's ``fwd_residual(stream,
branch)``: the widening is exact, so ``h_new`` has the add's bits. Everything else is left as
it was. The pass joins inductor's
``post_grad_custom_post_pass`` (after any pass already set there) when torch.compile first
traces one of the ops; ``CAKE_RMSNORM_COMPILE_FUSION=0`` in the environment leaves inductor's
config alone.
"""

import functools
import hashlib
import operator
import os
import sys

import torch

from ._lib import ops

__all__ = ["fuse_residual_adds", "install", "stats"]

_FWD = ops.fwd.default
_FWD_RESIDUAL = ops.fwd_residual.default
_BWD = ops.bwd.default
_BWD_DX = ops.bwd_dx.default
_ADD = torch.ops.aten.add.Tensor
_CONVERT = torch.ops.prims.convert_element_type.default
_FUSABLE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_HALF = (torch.bfloat16, torch.float16)

# Matches made since import (the tests read them; a graph from the FX cache adds none).
stats = {"forward": 0, "backward": 0}


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _plain_add(node):
    """(a, b) when ``node`` is a + b of two tensors of one shape, dtype and device, else None."""
    if node.op != "call_function" or node.target is not _ADD or len(node.args) != 2:
        return None
    if node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = node.args
    va, vb, vh = _val(a), _val(b), _val(node)
    if not all(isinstance(v, torch.Tensor) for v in (va, vb, vh)):
        return None
    if vh.dtype not in _FUSABLE_DTYPES or va.dtype != vh.dtype or vb.dtype != vh.dtype:
        return None
    if not (_same_shape(va, vh) and _same_shape(vb, vh)) or va.device != vh.device or vb.device != vh.device:
        return None
    return a, b


def _widened(n):
    """The 16-bit node whose float32 widening ``n`` is: n itself (the add promotes it), or the
    input of a convert to float32 that only the add uses; else None."""
    v = _val(n)
    if isinstance(v, torch.Tensor) and v.dtype in _HALF:
        return n
    if (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is _CONVERT and len(n.users) == 1
            and len(n.args) == 2 and n.args[1] == torch.float32):
        src = _val(n.args[0])
        if isinstance(src, torch.Tensor) and src.dtype in _HALF:
            return n.args[0]
    return None


def _mixed_add(node):
    """(stream, branch) when ``node`` is AMP's residual add: a float32 tensor plus a 16-bit one
    (or its widening), one shape and device, no alpha; else None."""
    if node.op != "call_function" or node.target is not _ADD or len(node.args) != 2:
        return None
    if node.kwargs.get("alpha", 1) != 1:
        return None
    vh = _val(node)
    if not isinstance(vh, torch.Tensor) or vh.dtype != torch.float32:
        return None
    for s, b in (node.args, node.args[::-1]):
        vs, branch = _val(s), _widened(b)
        vb = _val(branch)
        if (isinstance(vs, torch.Tensor) and vs.dtype == torch.float32 and branch is not None and _same_shape(vs, vh)
                and _same_shape(vb, vh) and vs.device == vh.device and vb.device == vh.device):
            return s, branch
    return None


def _same_shape(u, v):
    """Shapes known equal without a new guard (symbolic sizes: only what is already implied;
    an unbacked size is never evaluated)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return u.dim() == v.dim() and all(statically_known_true(p == q) for p, q in zip(u.shape, v.shape))


def _arg(node, index, name, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _getitems(node):
    """{index: getitem node} of a tuple-returning node, or None if it has another kind of use."""
    out = {}
    for u in node.users:
        if u.op != "call_function" or u.target is not operator.getitem:
            return None
        out[u.args[1]] = u
    return out


def _fuse_forward(graph, node):
    h = node.args[0]
    w, eps, out_dtype = node.args[1], node.args[2], _arg(node, 3, "out_dtype")
    if not isinstance(h, torch.fx.Node) or not isinstance(_val(w), torch.Tensor):
        return False
    mixed = _mixed_add(h)
    if mixed is not None:  # the mixed route's w and y: the branch's dtype or float32
        branch = _val(mixed[1]).dtype
        if _val(w).dtype not in (branch, torch.float32) or out_dtype not in (None, branch, torch.float32):
            mixed = None  # a plain float32 add may still fuse (a convert feeding it stays)
    pair = mixed or _plain_add(h)
    items = _getitems(node)
    if pair is None or items is None:
        return False
    a, b = pair
    if not h.meta["val"].is_contiguous():
        return False  # the op's h_new is dense: the add's other users may expect its strides
    widen = h.args[0] if h.args[0] is not a else h.args[1]  # the convert the fused op absorbs, if any
    fake_mode = torch._guards.detect_fake_mode([a.meta["val"], b.meta["val"]])
    if fake_mode is None:
        return False
    with fake_mode:
        val = _FWD_RESIDUAL(a.meta["val"], b.meta["val"], w.meta["val"], _val(eps) if isinstance(eps, torch.fx.Node)
                            else eps, out_dtype=out_dtype)
    with graph.inserting_before(node):
        fused = graph.call_function(_FWD_RESIDUAL, (a, b, w, eps), {"out_dtype": out_dtype})
        fused.meta["val"] = val
        outs = []
        for i, v in enumerate(fused.meta["val"]):
            g = graph.call_function(operator.getitem, (fused, i))
            g.meta["val"] = v
            outs.append(g)
    for i, old in items.items():
        old.replace_all_uses_with(outs[i])
        graph.erase_node(old)
    graph.erase_node(node)
    h.replace_all_uses_with(outs[2])
    graph.erase_node(h)
    if mixed is not None and widen is not b and not widen.users:
        graph.erase_node(widen)
    return True


def _ancestors_include(start, target, limit=100000):
    seen, stack = set(), [start]
    while stack and len(seen) < limit:
        n = stack.pop()
        if n is target:
            return True
        if n in seen:
            continue
        seen.add(n)
        stack.extend(i for i in n.all_input_nodes)
    return len(seen) >= limit  # too deep to tell: treat as dependent (no fusion)


def _fuse_backward(graph, node):
    if len(node.args) < 4 or _arg(node, 4, "g_residual") is not None:
        return False  # (g, x, w, rstd) positional, as traced graphs hold them
    if node.target is _BWD:
        items = _getitems(node)
        if items is None or 0 not in items:
            return False
        dx = items[0]
    else:
        dx = node
    if len(dx.users) != 1:
        return False
    add = next(iter(dx.users))
    pair = _plain_add(add)
    if pair is None:
        return False
    other = pair[1] if pair[0] is dx else pair[0]
    if other is dx or _ancestors_include(other, node):
        return False
    args = list(node.args) + [None] * (5 - len(node.args))
    args[4] = other
    node.args = tuple(args)
    if "g_residual" in node.kwargs:
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "g_residual"}
    add.replace_all_uses_with(dx)
    graph.erase_node(add)
    return True


def fuse_residual_adds(graph: torch.fx.Graph) -> int:
    """Rewrite ``graph`` in place (see the module's docstring); the number of adds taken."""
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is _FWD and _fuse_forward(graph, node):
            stats["forward"] += 1
            done += 1
        elif node.target in (_BWD, _BWD_DX) and _fuse_backward(graph, node):
            stats["backward"] += 1
            done += 1
    if done:
        # A moved operand (other, or a weight computed after the add) may now come later
        # than its new user: restore a topological order, keeping the rest as it was.
        from torch._inductor.pattern_matcher import stable_topological_sort
        stable_topological_sort(graph)
        graph.lint()
    return done


def _source_hash():
    """This pass's source and the lowerings' (_lowering.py): either changes what inductor makes."""
    h = hashlib.sha256()
    for path in (__file__, os.path.join(os.path.dirname(__file__), "_lowering.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _pass_class():
    """The pass's class, built on inductor's CustomGraphPass (its uuid() keys inductor's
    caches) once inductor is loaded: importing it with the package would cost ~1 s."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ResidualFusionPass(CustomGraphPass):
        """The inductor pass; ``then``, a pass installed before this one, runs first."""

        def __init__(self, then=None):
            self.then = then
            self._uuid = _source_hash()

        def __call__(self, graph):
            if self.then is not None:
                self.then(graph)
            fuse_residual_adds(graph)

        def uuid(self):
            from . import _lowering
            inner = self.then.uuid() if self.then is not None and hasattr(self.then, "uuid") else None
            # What the lowerings generate depends on whether they are installed and on the binding.
            return (self._uuid, _lowering.installed, _lowering.direct is not None, inner)

    return ResidualFusionPass


def install():
    """Add the pass to inductor's post-grad passes (idempotent); False when it is not there.

    Called by the ops' fake kernels, which run while torch.compile traces a graph holding
    them, before inductor reads its passes; a process that never compiles never loads inductor
    for it. ``CAKE_RMSNORM_COMPILE_FUSION=0`` keeps inductor's config untouched.
    """
    if os.environ.get("CAKE_RMSNORM_COMPILE_FUSION", "1") == "0":
        return False
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return False
    cls = _pass_class()
    current = config.post_grad_custom_post_pass
    if isinstance(current, cls) or (isinstance(current, (list, tuple)) and any(isinstance(p, cls) for p in current)):
        return True
    if isinstance(current, (list, tuple)):
        config.post_grad_custom_post_pass = type(current)(list(current) + [cls()])
    else:
        config.post_grad_custom_post_pass = cls(then=current)
    return True
