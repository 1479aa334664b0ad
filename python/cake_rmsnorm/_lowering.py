"""The compiled call: inductor's Python wrapper calls the op bodies through the direct binding.

Left alone, inductor lowers each op to a fallback whose wrapper line calls
``torch.ops.cake_rmsnorm.<op>.default``: argument parsing against the schema, the dispatcher and
the stable ABI's boxing, every call of every compiled step. This module registers a lowering for
each functional op that builds the same fallback node (the same fake outputs, layout constraint
and buffers, but a backward's g that the kernels cannot walk in place, which its producer is asked
to write dense instead of the op copying it) and only names another callable on its wrapper line,
``cake_rmsnorm._lowering.<op>``:
the direct binding (``_direct``), which runs the same op bodies, so the bits are the registered
op's. Where an out op computes the same result, the line calls it on buffers inductor plans
itself (``fwd_out``, ``fwd_residual_out``, ``bwd_out``), so a dead buffer of the graph can be reused
instead of allocated; and it skips inductor's check of each output's size and strides, which cost about as
much as the call (the bodies allocate what the fakes say; opcheck holds them to it). The graph
keeps the registered ops, so dynamo, AOTAutograd, the residual-fusion pass and export see
what they saw before; the FX graph cache keys on this module's source and state through the
fusion pass's uuid.

Under ``cpp_wrapper`` the generated C++ calls the ops' C shims (``csrc/torch/shims.cpp``, in the
library ``_C``, which the package loads into the global namespace) instead of the dispatcher:
install() declares them in ``torch._inductor.config.aot_inductor.custom_ops_to_c_shims``. An
AOTInductor package compiled so calls them too: the process that loads it must have loaded
``_C`` into the global namespace (importing cake_rmsnorm does).

Installed with the fusion pass, when torch.compile first traces an op (the ops' fakes run then).
``CAKE_RMSNORM_COMPILE_DIRECT=0`` leaves inductor's lowerings alone. The lowering uses inductor's
internal IR (``torch._inductor.ir.FallbackKernel``); where that differs, install() leaves the
default fallback in place and the graph calls the registered ops as before.
"""

import os

import torch
import torch.autograd.profiler as _profiler

from ._lib import direct, ops
from ._optable import BY_NAME as _BY_NAME
from ._optable import OPS as _TABLE
from ._optable import shim_params

__all__ = ["install", "installed", "OPS"]

OPS = tuple(op.name for op in _TABLE if op.shim)  # the functional ops inductor lowers here

def shim_declarations(name):
    """Inductor calls op ``name``'s shim aoti_torch_<device>_<name> (parameters from the op's
    table, _optable.py); the asm label binds that name to the library's own symbol."""
    params = shim_params(_BY_NAME[name])
    return [f'AOTITorchError aoti_torch_{dev}_{name}({params}) __asm__("cake_rmsnorm_shim_{dev}_{name}")'
            for dev in ("cpu", "cuda")]


def _served(name):
    """The callable a compiled graph's wrapper calls for op ``name``: the direct binding, or the
    registered op where the binding is off or declines the arguments."""
    op = getattr(ops, name).default
    if direct is None:
        return op
    body = getattr(direct, name)
    label = f"cake_rmsnorm::{name}"

    def run(args):
        out = body(*args)
        return op(*args) if out is NotImplemented else out

    def call(*args):
        # A profiler sees the call by name (the registered op's path would show as the op); with
        # none running this costs one attribute read.
        if _profiler._is_profiler_enabled:
            with torch.profiler.record_function(label):
                return run(args)
        return run(args)

    call.__name__ = call.__qualname__ = name
    return call


fwd, fwd_residual, bwd, bwd_dx = (_served(n) for n in OPS)
fwd_out, fwd_residual_out, bwd_out = (_served(n) for n in ("fwd_out", "fwd_residual_out", "bwd_out"))


def _out_call(name, args, outs):
    """(out op, its arguments) that computes functional op ``name`` into ``outs``, inductor's own
    buffers; None where no out op gives the same result (bwd's dw in a 16-bit w's dtype is
    rounded by the functional op's finalize)."""
    if name == "fwd":
        return "fwd_out", [*args[:3], *outs]
    if name == "fwd_residual":
        return "fwd_residual_out", [*args[:4], *outs]
    if name == "bwd_dx":
        return "bwd_out", [*args[:5], outs[0], None, None, 0, False]
    if name == "bwd" and not args[5]:
        return "bwd_out", [*args[:5], *outs, None, 0, False]
    return None

installed = False


def install():
    """Register the lowerings once (idempotent). False where they are off or could not be made."""
    global installed
    if installed or os.environ.get("CAKE_RMSNORM_COMPILE_DIRECT", "1") == "0":
        return installed
    try:
        lowerings = _make_lowerings()
        from torch._inductor import config
        config.aot_inductor.custom_ops_to_c_shims  # noqa: B018  (present in this torch)
    except (ImportError, AttributeError, TypeError):  # another torch's inductor: keep its fallback
        return False
    from torch._inductor import config, lowering
    shims = dict(config.aot_inductor.custom_ops_to_c_shims)
    for name in OPS:
        shims.setdefault(getattr(ops, name).default, shim_declarations(name))
    config.aot_inductor.custom_ops_to_c_shims = shims
    # Its OpOverload keys do not pickle into inductor's cache key (which would bypass the FX graph
    # cache for every graph): the fusion pass's uuid carries this module's source and state instead.
    ignored = getattr(config, "_cache_config_ignore_prefix", None)
    if isinstance(ignored, list) and "aot_inductor.custom_ops_to_c_shims" not in ignored:
        ignored.append("aot_inductor.custom_ops_to_c_shims")
    for op, (constraint, handler) in lowerings.items():
        if op in lowering.lowerings:  # someone registered their own lowering: theirs stands
            continue
        if constraint is not None:
            lowering.add_layout_constraint(op, constraint)
        lowering.fallbacks.add(op)
        lowering.register_lowering(op, type_promotion_kind=None)(handler)
    installed = True
    return True


def _make_lowerings():
    """{op: (layout constraint, lowering)}, built before anything is registered."""
    import torch
    from torch._inductor import ir, lowering
    from torch._inductor.virtualized import V
    from torch.utils import _pytree as pytree

    class DirectCall(ir.FallbackKernel):
        """inductor's fallback of a cake op, whose Python wrapper line calls the direct binding."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not V.graph.cpp_wrapper:
                self.python_kernel_name = f"cake_rmsnorm._lowering.{self.op_overload._schema.name.split('::')[1]}"

        def codegen_size_asserts(self, wrapper):
            no_asserts(wrapper)  # a single output (bwd_dx) is this node itself

        def codegen_alignment_asserts(self, wrapper):
            no_asserts(wrapper)

        def codegen(self, wrapper):
            if not V.graph.cpp_wrapper:
                wrapper.add_import_once("import cake_rmsnorm._lowering")
            super().codegen(wrapper)

    def no_asserts(wrapper):
        """The bodies allocate every output dense and aligned, as the fakes say (opcheck holds them
        to it): inductor's per-output size and alignment checks would cost about as much as the call."""

    def wrap(x):
        if not isinstance(x, ir.IRNode):
            return x
        return x.wrap_for_lowering() if hasattr(x, "wrap_for_lowering") else ir.TensorBox.create(x)

    def buffers_like(vals):
        """Inductor-planned buffers of the fake outputs' layouts (inductor may reuse dead ones)."""
        return [lowering.empty_strided(ir.convert_shape_to_inductor(v.shape),
                                       ir.convert_shape_to_inductor(v.stride()), dtype=v.dtype, device=v.device)
                for v in vals]

    def lowering_of(op):
        later = op._schema.arguments
        name = op._schema.name.split("::")[1]

        def handler(*args, **kwargs):
            # Every argument positional, defaults filled: the binding takes positions alone.
            full = list(args) + [kwargs.get(a.name, a.default_value) for a in later[len(args):]]
            vals = V.graph.current_node.meta["val"]
            vals = list(vals) if isinstance(vals, (tuple, list)) else [vals]
            if not V.graph.cpp_wrapper and _out_call(name, full, vals) is not None:
                # The out op into inductor's buffers (cpp_wrapper calls the functional shims).
                outs = buffers_like(vals)
                out_name, out_args = _out_call(name, full, outs)
                DirectCall.create(getattr(torch.ops.cake_rmsnorm, out_name).default, *out_args)
                return outs[0] if len(outs) == 1 else tuple(outs)
            result = DirectCall.create(op, *full)
            for out in pytree.tree_leaves(result):
                if isinstance(out, ir.MultiOutput):
                    out.codegen_size_asserts = out.codegen_alignment_asserts = no_asserts
            return pytree.tree_map(wrap, result)
        return handler

    dense = getattr(ir.ExternKernel, "require_contiguous_strides", ir.ExternKernel.require_contiguous)
    exact = getattr(lowering, "constrain_to_fake_tensors", None)
    exact_one = getattr(lowering, "constrain_to_fake_tensor", None)

    def apply(base, n, args, kwargs):
        """The tag's constraint as inductor applies it (graph.py: exact strides from the node's
        eager input values where it has them, none without), on the arguments as given."""
        if base is None:
            return args, kwargs
        if base is not exact:
            return base(n, *args, **kwargs)
        if "eager_input_vals" not in n.meta or exact_one is None:
            return args, kwargs
        fakes = torch.fx.operator_schemas.normalize_function(
            n.target, *n.meta["eager_input_vals"], normalize_to_only_use_kwargs=True).kwargs
        names = [a.name for a in n.target._schema.arguments]
        return (tuple(exact_one(a, fakes.get(names[i])) for i, a in enumerate(args)),
                {k: exact_one(v, fakes.get(k)) for k, v in kwargs.items()})

    def g_rows(base):
        """The backward's constraint: the tag's for every input, but a g the kernels cannot walk in
        place (as RoPE's backward leaves the QK norms' g: heads outermost) is asked for dense, so
        its producer writes it so instead of the op copying it (eager still copies)."""
        def constraint(n, *args, **kwargs):
            eager = n.meta.get("eager_input_vals")
            fake = eager[0][0] if eager and eager[0] else getattr(n.args[0] if n.args else None, "meta", {}).get("val")
            if not args or not isinstance(args[0], ir.IRNode) or not isinstance(fake, torch.Tensor) \
                    or walkable(fake):
                return apply(base, n, args, kwargs)
            rest, kwargs = apply(base, n, (None, *args[1:]), kwargs)
            return (dense(args[0]), *rest[1:]), kwargs
        return constraint

    out = {}
    for name in OPS:
        op = getattr(torch.ops.cake_rmsnorm, name).default
        tag = lowering.get_layout_constraint_tag(op, with_default=True)
        constraint = lowering.tag_to_layout_constraint(tag)
        out[op] = (g_rows(constraint) if name in ("bwd", "bwd_dx") else constraint, lowering_of(op))
    return out


def walkable(t):
    """Rows the kernels walk in place (op_common.h kernel_row_stride, but the CUDA alignment, which
    a fake tensor cannot tell): a unit feature stride and leading dimensions contiguous with one
    another, rows not overlapping. Symbolic sizes decide only where they are known without a new
    guard; an undecided layout counts as walkable (the op copies what it cannot walk)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known
    if t.dim() == 0 or known(t.numel() == 0):
        return True
    hidden = t.shape[-1]
    if known(hidden > 1) and known(t.stride(-1) != 1):
        return False
    rs = inner = None
    for size, stride in reversed(list(zip(t.shape[:-1], t.stride()[:-1]))):
        if known(size == 1):
            continue
        if rs is None:
            rs = stride
        elif known(stride != inner[0] * inner[1]):
            return False
        inner = (stride, size)
    return rs is None or not known(rs < hidden)
