"""The ops, each declared once: its name, its arguments and outputs in the schema's own syntax,
and where it is served. Everything that repeats a signature is generated from this table by
``scripts/gen_bindings.py`` (the torch schemas and registrations, the direct binding's argument
parsing, the inductor shims, the LibTorch header, the eager wrappers ``_calls.py``); the fakes,
DTensor roles and vmap rules read it at import (``SCHEMAS``, ``roles``, ``writes`` below). Data
and its readers only: no torch import, so the generator runs without torch.

A tensor's DTensor role follows its name (``ROLE``): the weight and workspace replicated, dw a
Partial sum, every other tensor a row tensor. The rows tensor (``x``, or ``y`` for the backward
from the output) picks the device an eager call runs on.
"""

import ast
import re
from typing import NamedTuple, Optional, Tuple

__all__ = ["Op", "Arg", "OPS", "ROLE", "SHIM_C_TYPE", "NS", "NAMES", "BY_NAME", "SCHEMAS", "REQUIRED", "args_of",
           "returns_of", "default_value", "shim_params", "roles", "writes"]

NS = "cake_rmsnorm"

# A tensor's DTensor role by its name: "w" replicated, "p" a Partial sum, else "r" (rows).
ROLE = {"w": "w", "workspace": "w", "dw": "p"}

# An argument's C type in inductor's convention for a custom op's shim: optional values by
# pointer (null: None), a bool as int32_t; each output an AtenTensorHandle* it fills.
SHIM_C_TYPE = {"Tensor": "AtenTensorHandle", "Tensor?": "AtenTensorHandle*", "float": "double", "int": "int64_t",
               "bool": "int32_t", "ScalarType?": "int32_t*"}


class Op(NamedTuple):
    name: str
    args: str  # the schema's argument list
    returns: str  # the schema's returns: "Tensor y, Tensor rstd", or "" for an out op
    doc: str  # a line on what the op does, written beside its schema
    shim: bool = False  # inductor's cpp_wrapper calls it through a C shim (_lowering.OPS)
    cpp: Optional[str] = None  # its function in cake_rmsnorm.hpp (LibTorch), if any
    cpp_hidden: Tuple[str, ...] = ()  # arguments the LibTorch function does not take (their default)


OPS = (
    Op("fwd", "Tensor x, Tensor w, float eps, ScalarType? out_dtype=None", "Tensor y, Tensor rstd",
       "(y, rstd) = RMSNorm(x) * w; out_dtype: y's dtype when not x's (a 16-bit compute dtype for FP32 x)",
       shim=True, cpp="forward"),
    Op("fwd_residual", "Tensor x, Tensor residual, Tensor w, float eps, ScalarType? out_dtype=None",
       "Tensor y, Tensor rstd, Tensor h_new",
       "h_new = cast(x + residual) normalised (FP32 x may take a 16-bit residual: AMP's branch added to the "
       "FP32 stream)", shim=True, cpp="forward_residual"),
    Op("fwd_out", "Tensor x, Tensor w, float eps, Tensor(a!) y, Tensor(b!) rstd", "",
       "fwd into caller buffers"),
    Op("fwd_residual_out",
       "Tensor x, Tensor residual, Tensor w, float eps, Tensor(a!) y, Tensor(b!) rstd, Tensor(c!) h_new", "",
       "fwd_residual into caller buffers"),
    Op("bwd", "Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual, bool dw_in_w_dtype=False",
       "Tensor dx, Tensor dw",
       "(dx, dw); g_residual is added into dx; dw FP32, or in a 16-bit w's dtype with dw_in_w_dtype (the FP32 "
       "sum rounded once by the finalize); its bits are reproducible on every path", shim=True, cpp="backward"),
    Op("bwd_dx", "Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual", "Tensor dx",
       "dx only: the weight gradient and its work are skipped (a frozen weight)", shim=True),
    Op("bwd_out",
       "Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual, Tensor(a!) dx, Tensor(b!)? dw, "
       "Tensor(c!)? workspace, int max_ctas=0, bool accumulate=False", "",
       "into caller buffers; dw None skips the weight gradient, accumulate adds the sum into dw (main_grad), "
       "workspace None with dw: the op allocates one (cake_rmsnorm_backward_workspace_bytes)",
       cpp="backward_out", cpp_hidden=("max_ctas",)),
    Op("bwd_from_y",
       "Tensor g, Tensor y, Tensor w, Tensor rstd, Tensor? g_residual, ScalarType? dx_dtype=None, "
       "bool dw_in_w_dtype=False", "Tensor dx, Tensor dw",
       "the backward from the output y (from_y, the memory_efficient mechanism): y read where x is, xhat = y (1 / w); dx in dx_dtype "
       "(None: y's; float32 beside a 16-bit y, AMP's stream)"),
    Op("bwd_from_y_dx", "Tensor g, Tensor y, Tensor w, Tensor rstd, Tensor? g_residual, ScalarType? dx_dtype=None",
       "Tensor dx", "bwd_from_y's dx only"),
)


class Arg(NamedTuple):
    """One schema argument as the table spells it."""
    name: str
    type: str  # Tensor, Tensor?, float, int, bool, ScalarType?
    write: bool  # an out op's written argument (Tensor(a!))
    default: Optional[str]  # the schema's default as written (None: required)


def args_of(op: Op) -> Tuple[Arg, ...]:
    out = []
    for text in op.args.split(","):
        m = re.fullmatch(r"(Tensor|float|int|bool|ScalarType)(\([a-z]!\))?(\?)? (\w+)(?:=(\S+))?", text.strip())
        if not m:
            raise ValueError(f"op table: {op.name}: cannot read argument {text!r}")
        out.append(Arg(m.group(4), m.group(1) + (m.group(3) or ""), bool(m.group(2)), m.group(5)))
    return tuple(out)


def returns_of(op: Op) -> Tuple[str, ...]:
    """The returned tensors' names."""
    return tuple(r.split()[1] for r in op.returns.split(",")) if op.returns else ()


def shim_params(op: Op) -> str:
    """The op's C shim parameter list (gen/shims.h, _lowering.py's declarations): arguments, then outputs."""
    return ", ".join([f"{SHIM_C_TYPE[a.type]} {a.name}" for a in args_of(op)] +
                     [f"AtenTensorHandle* {r}" for r in returns_of(op)])


REQUIRED = object()  # default_value of an argument the schema leaves required


def default_value(a: Arg):
    """The Python value of an argument's default, or REQUIRED."""
    return REQUIRED if a.default is None else ast.literal_eval(a.default)


NAMES = tuple(op.name for op in OPS)
BY_NAME = {op.name: op for op in OPS}
SCHEMAS = {op.name: (args_of(op), returns_of(op)) for op in OPS}  # name -> (arguments, outputs' names)


def roles(name: str) -> Tuple[str, str]:
    """(the arguments' roles, "-" for a non-tensor; the outputs' roles), _sharding.py's ROLES."""
    args, rets = SCHEMAS[name]
    return ("".join(ROLE.get(a.name, "r") if a.type.startswith("Tensor") else "-" for a in args),
            "".join(ROLE.get(r, "r") for r in rets))


def writes(name: str) -> str:
    """"!" for each argument the op writes, "-" for the rest."""
    return "".join("!" if a.write else "-" for a in SCHEMAS[name][0])
