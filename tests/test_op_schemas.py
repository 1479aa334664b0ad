"""An op is declared once, in its registered schema (csrc/torch/ops.cpp): the Python tables
derive from it (cake_rmsnorm/_schema.py: shim parameters, DTensor roles and writes, the fakes'
outputs), and this file holds everything written out by hand to the same schema: the op bodies
(csrc/torch/ops_impl.h), the direct binding's argument counts (csrc/torch/direct.cpp), the
inductor shims (csrc/torch/shims.cpp) and the eager wrappers (_calls.py)."""

import inspect
import os
import re

import pytest
import torch

import cake_rmsnorm  # noqa: F401  (registers the ops)
from cake_rmsnorm import _calls, _lowering, _schema, _sharding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_DIR = os.path.join(ROOT, "csrc", "torch")
# The suite also runs from a copy of tests/ against an installed wheel (CI), with no source tree.
needs_source = pytest.mark.skipif(not os.path.exists(os.path.join(TORCH_DIR, "ops_impl.h")),
                                  reason="needs the source checkout")


def _source(name):
    with open(os.path.join(TORCH_DIR, name)) as f:
        return f.read()


def _params(text):
    """A C++ parameter list split at its top-level commas, whitespace collapsed."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(" ".join(cur.split()))
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(" ".join(cur.split()))
    return out


def test_every_op_is_read():
    assert tuple(_schema.SCHEMAS) == _schema.NAMES
    registered = {n for n in dir(torch.ops.cake_rmsnorm) if not n.startswith("_")} - {"name"}
    assert registered >= set(_schema.NAMES), registered


_CXX = {"Tensor": "Tensor", "Tensor?": "std::optional<Tensor>", "float": "double", "int": "int64_t", "bool": "bool",
        "ScalarType?": "std::optional<ScalarType>"}


@needs_source
@pytest.mark.parametrize("name", _schema.NAMES)
def test_the_op_body_has_the_schemas_signature(name):
    args, rets = _schema.SCHEMAS[name]
    m = re.search(r"static ([\w:<>, ]+?) " + name + r"\(([^)]*)\)", _source("ops_impl.h"))
    assert m, name
    ret = "void" if not rets else "Tensor" if len(rets) == 1 else "std::tuple<" + ", ".join(["Tensor"] * len(rets)) + ">"
    assert " ".join(m.group(1).split()) == ret
    got = [p.rsplit(" ", 1) for p in _params(m.group(2))]
    assert [t for t, _ in got] == [_CXX[a.type] for a in args], name
    assert [n for _, n in got] == [a.name for a in args], name


@needs_source
@pytest.mark.parametrize("name", _schema.NAMES)
def test_the_direct_binding_reads_every_argument(name):
    m = re.search(r"PyObject\* " + name + r"\(PyObject\*, PyObject\* const\* a, Py_ssize_t n\) \{\s*return guarded\(n, (\d+),",
                  _source("direct.cpp"))
    assert m, name
    assert int(m.group(1)) == len(_schema.SCHEMAS[name][0])


@needs_source
@pytest.mark.parametrize("name", _lowering.OPS)
def test_the_shims_have_the_schemas_c_types(name):
    src = _source("shims.cpp")
    m = re.search(r"cake_rmsnorm_shim_##device##_" + name + r"\(([^)]*)\)", src)
    assert m, name
    got = [p.replace("\\", "").rsplit(" ", 1)[0] for p in _params(m.group(1).replace("\\\n", " "))]
    want = [p.rsplit(" ", 1)[0] for p in _schema.shim_params(name).split(", ")]
    assert got == want, name
    decl = _lowering.shim_declarations(name)[0]
    assert _schema.shim_params(name) in decl


@pytest.mark.parametrize("name", _schema.NAMES)
def test_the_eager_wrappers_take_the_schemas_arguments(name):
    args = _schema.SCHEMAS[name][0]
    for fn in [getattr(_calls, name)] + ([getattr(_calls, name + "_eager")] if hasattr(_calls, name + "_eager") else []):
        params = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in params] == [a.name for a in args], fn.__name__
        for p, a in zip(params, args):
            want = inspect.Parameter.empty if a.default is _schema.Arg.REQUIRED else a.default
            assert p.default == want, (fn.__name__, p.name)


def test_the_sharding_tables_come_from_the_schemas():
    assert _sharding.ROLES["bwd_out"] == ("rrwrrrpw--", "")
    assert _sharding.ROLES["fwd_residual"] == ("rrw--", "rrr")
    assert _sharding.ROLES["bwd"] == ("rrwrr-", "rp")
    assert _sharding._WRITES["bwd_out"] == "-----!!!--" and set(_sharding._WRITES["fwd"]) == {"-"}


def _sample(name):
    x, w = torch.randn(3, 64), torch.randn(64)
    _, rstd = torch.ops.cake_rmsnorm.fwd(x, w, 1e-6)
    yb = torch.ops.cake_rmsnorm.fwd(x, w, 1e-6, torch.bfloat16)[0]  # AMP's 16-bit y of FP32 x
    return {
        "fwd": (x, w, 1e-6, torch.bfloat16),
        "fwd_residual": (x, x.clone(), w, 1e-6),
        "fwd_out": (x, w, 1e-6, torch.empty_like(x), torch.empty(3)),
        "fwd_residual_out": (x, x.clone(), w, 1e-6, torch.empty_like(x), torch.empty(3), torch.empty_like(x)),
        "bwd": (x.clone(), x, w.bfloat16(), rstd, None, True),
        "bwd_dx": (x.clone(), x, w, rstd, x.clone()),
        "bwd_out": (x.clone(), x, w, rstd, None, torch.empty_like(x), torch.empty(64), None, 0, False),
        "bwd_y": (yb.clone(), yb, w, rstd, None, torch.float32, False),
        "bwd_y_dx": (x.clone(), x, w, rstd, x.clone(), None),
    }[name]


@pytest.mark.parametrize("name", _schema.NAMES)
def test_the_derived_fakes_match_the_ops(name):
    """The fakes built from the outputs' names (_registrations.py) pass torch's opcheck
    (schema, fake tensor against the real op's outputs, AOT dispatch)."""
    torch.library.opcheck(getattr(torch.ops.cake_rmsnorm, name).default, _sample(name),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
