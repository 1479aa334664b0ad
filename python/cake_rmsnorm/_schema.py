"""Each op's signature, read from the registered schemas: ``csrc/torch/ops.cpp`` declares an op
once, its arguments and its named outputs. The tables the Python layers keep derive from that
(the compiled wrapper's shim parameters, the DTensor roles and written arguments, the fakes'
outputs), each by the argument's name and type, so a new op or argument is declared in one
place. ``tests/test_op_schemas.py`` holds the C++ side (the direct binding, the inductor shims,
the op bodies) and the hand-kept eager wrappers (``_calls.py``) to the same schemas."""

from typing import NamedTuple, Tuple

from ._lib import ops

__all__ = ["NAMES", "Arg", "SCHEMAS", "roles", "writes", "shim_params"]

NAMES = ("fwd", "fwd_residual", "fwd_out", "fwd_residual_out", "bwd", "bwd_dx", "bwd_out", "bwd_y", "bwd_y_dx")


class Arg(NamedTuple):
    name: str
    type: str  # as the schema spells it: Tensor, Tensor?, float, int, bool, ScalarType?
    write: bool  # an out op's written argument (Tensor(a!))
    default: object  # Arg.REQUIRED where there is none

    REQUIRED = object()


def _type(a) -> str:
    t = str(a.real_type)
    return t[len("Optional["):-1] + "?" if t.startswith("Optional[") else t


def _read(name) -> Tuple[Tuple[Arg, ...], Tuple[str, ...]]:
    s = getattr(ops, name).default._schema
    args = tuple(Arg(a.name, _type(a), bool(a.alias_info and a.alias_info.is_write),
                     a.default_value if a.has_default_value() else Arg.REQUIRED) for a in s.arguments)
    return args, tuple(r.name for r in s.returns)


# name -> (arguments, the returned tensors' names)
SCHEMAS = {name: _read(name) for name in NAMES}

# A tensor's DTensor role by its name (every op names its tensors alike): the weight and the
# workspace replicated ("w"), dw a Partial sum ("p"), every other tensor a row tensor ("r").
_ROLE = {"w": "w", "workspace": "w", "dw": "p"}


def roles(name):
    """(the arguments' roles, "-" for a non-tensor; the outputs' roles), _sharding.py's ROLES."""
    args, rets = SCHEMAS[name]
    return ("".join(_ROLE.get(a.name, "r") if a.type.startswith("Tensor") else "-" for a in args),
            "".join(_ROLE.get(r, "r") for r in rets))


def writes(name) -> str:
    """"!" for each argument the op writes, "-" for the rest."""
    return "".join("!" if a.write else "-" for a in SCHEMAS[name][0])


# An argument's C type in inductor's convention for a custom op's shim: optional values by
# pointer (null: None), a bool as int32_t; each output an AtenTensorHandle* it fills.
_C_TYPE = {"Tensor": "AtenTensorHandle", "Tensor?": "AtenTensorHandle*", "float": "double", "int": "int64_t",
           "bool": "int32_t", "ScalarType?": "int32_t*"}


def shim_params(name) -> str:
    """The shim's parameter list (csrc/torch/shims.cpp), arguments then outputs."""
    args, rets = SCHEMAS[name]
    return ", ".join([f"{_C_TYPE[a.type]} {a.name}" for a in args] + [f"AtenTensorHandle* {r}" for r in rets])
