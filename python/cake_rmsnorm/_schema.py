"""Each op's signature as the Python layers use it, read from the op table (``_optable.py``, the
one declaration): the fakes' outputs, the DTensor roles and written arguments, the compiled
wrapper's shim parameters, each by the argument's name and type. ``tests/test_op_table.py``
holds the registered schemas and the generated bindings to the table."""

import ast
from typing import NamedTuple, Tuple

from ._optable import OPS, ROLE, args_of, returns_of
from ._optable import shim_params as _shim_params

__all__ = ["NAMES", "Arg", "SCHEMAS", "roles", "writes", "shim_params"]

NAMES = tuple(op.name for op in OPS)
_BY_NAME = {op.name: op for op in OPS}


class Arg(NamedTuple):
    name: str
    type: str  # as the schema spells it: Tensor, Tensor?, float, int, bool, ScalarType?
    write: bool  # an out op's written argument (Tensor(a!))
    default: object  # the Python value; Arg.REQUIRED where there is none

    REQUIRED = object()


def _value(text):
    return Arg.REQUIRED if text is None else ast.literal_eval(text)


def _read(op) -> Tuple[Tuple[Arg, ...], Tuple[str, ...]]:
    return tuple(Arg(a.name, a.type, a.write, _value(a.default)) for a in args_of(op)), returns_of(op)


# name -> (arguments, the returned tensors' names)
SCHEMAS = {op.name: _read(op) for op in OPS}


def roles(name):
    """(the arguments' roles, "-" for a non-tensor; the outputs' roles), _sharding.py's ROLES."""
    args, rets = SCHEMAS[name]
    return ("".join(ROLE.get(a.name, "r") if a.type.startswith("Tensor") else "-" for a in args),
            "".join(ROLE.get(r, "r") for r in rets))


def writes(name) -> str:
    """"!" for each argument the op writes, "-" for the rest."""
    return "".join("!" if a.write else "-" for a in SCHEMAS[name][0])


def shim_params(name) -> str:
    """The op's C shim parameter list, arguments then outputs."""
    return _shim_params(_BY_NAME[name])
