"""The compiled call (python/cake_rmsnorm/_lowering.py, csrc/torch/shims.cpp): inductor's Python
wrapper calls the direct binding and cpp_wrapper's C++ calls the ops' C shims, neither through the
dispatcher, with eager's bits; CAKE_RMSNORM_COMPILE_DIRECT=0 keeps inductor's own fallback."""

import os
import re
import subprocess
import sys

import pytest
import torch
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code

import cake_rmsnorm as cr
from conftest import devices

H = 64
DISPATCHED = re.compile(r"=\s*torch\.ops\.cake_rmsnorm\.\w+\.default\(")


def _model(x, r, w, w_frozen):
    """fwd_residual and fwd, then bwd (w learns) and bwd_dx (w_frozen does not)."""
    y, h = cr.cake_rmsnorm(x, w, residual=r)
    return cr.cake_rmsnorm(y, w_frozen), h  # no arithmetic of inductor's own: its rounding may differ


def _inputs(device, gen, T=37, dtype=torch.bfloat16):
    def r(*s):
        return torch.randn(*s, generator=gen).to(device)
    x, res = (r(T, H).to(dtype).requires_grad_() for _ in range(2))
    w = (1 + 0.1 * r(H)).to(dtype).requires_grad_()
    return x, res, w, (1 + 0.1 * r(H)).to(dtype)


def _compiled_and_eager(device, gen, dtype, **patch):
    args = _inputs(device, gen, dtype=dtype)
    eager = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False, **patch):
        compiled = torch.compile(_model, fullgraph=True)
        outs, codes = run_and_get_code(lambda: compiled(*args))
        _, bwd_codes = run_and_get_code(lambda: sum(o.float().sum() for o in outs).backward())
    refs = _model(*eager)
    sum(r.float().sum() for r in refs).backward()
    for o, r in zip(outs, refs):
        assert torch.equal(o, r)
    for a, b in zip(args, eager):
        if a.requires_grad:
            assert torch.equal(a.grad, b.grad)
    return "\n".join(codes), "\n".join(bwd_codes)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_python_wrapper_calls_the_binding(device, dtype, gen):
    fwd, bwd = _compiled_and_eager(device, gen, dtype)
    for op in ("fwd", "fwd_residual"):  # out ops into inductor's buffers
        assert f"cake_rmsnorm._lowering.{op}_out(" in fwd
    # bwd_dx into inductor's buffer; bwd's dw in a 16-bit w's dtype comes from the functional op
    assert bwd.count("cake_rmsnorm._lowering.bwd_out(") + bwd.count("cake_rmsnorm._lowering.bwd(") == 2
    assert not DISPATCHED.search(fwd + bwd)
    # Inductor's per-output checks are skipped for ours (the out ops write inductor's own buffers).
    assert not [line for line in (fwd + bwd).splitlines() if "assert" in line and "cake_rmsnorm" in line]


@pytest.mark.parametrize("device", devices())
def test_cpp_wrapper_calls_the_shims(device, gen):
    fwd, bwd = _compiled_and_eager(device, gen, torch.bfloat16, cpp_wrapper=True)
    for op, code in (("fwd", fwd), ("fwd_residual", fwd), ("bwd", bwd), ("bwd_dx", bwd)):
        assert re.search(rf"\baoti_torch_{device}_{op}\(\w", code), op  # a call, not only the declaration
        assert f'__asm__("cake_rmsnorm_shim_{device}_{op}")' in code
    assert 'aoti_torch_call_dispatcher("cake_rmsnorm' not in fwd + bwd


def test_dynamic_token_counts_keep_the_binding(gen):
    torch._dynamo.reset()
    w = torch.randn(H, generator=gen)
    compiled = torch.compile(lambda x: cr.cake_rmsnorm(x, w), fullgraph=True, dynamic=True)
    for t in (3, 29, 64):
        x = torch.randn(t, H, generator=gen)
        with inductor_config.patch(fx_graph_cache=False):
            out, codes = run_and_get_code(compiled, x)
        assert torch.equal(out, cr.cake_rmsnorm(x, w))
    assert "cake_rmsnorm._lowering.fwd_out(" in "\n".join(codes)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("weight_grad", [True, False])
@pytest.mark.parametrize("dynamic", [False, True])
def test_backward_gets_g_in_rows_it_walks(device, weight_grad, dynamic, gen, monkeypatch):
    """A norm's g that arrives heads outermost (the QK norms' after RoPE's backward: here a
    transpose) is written dense by its producer for the compiled backward, so the op has no copy
    to make; the gradients stay eager's bits. With symbolic batch and sequence sizes too: the
    layout rule is decided from the strides' structure there without a guard."""
    from cake_rmsnorm import _lowering
    if not _lowering.install():
        pytest.skip("the compiled call is inductor's own fallback here")
    seen = []
    for name in ("bwd", "bwd_out"):
        body = getattr(_lowering, name)
        monkeypatch.setattr(_lowering, name, lambda *a, _body=body: (seen.append(a[0]), _body(*a))[1])

    def fn(x, w, m):  # x [B, S, heads, D]; a pointwise op and a matmul on [B, heads, S, D], as RoPE and attention
        return (cr.cake_rmsnorm(x, w, 1e-6).transpose(1, 2) * 1.5) @ m

    x = torch.randn(2, 9, 4, H, generator=gen).bfloat16().to(device).requires_grad_()
    w = (1 + 0.1 * torch.randn(H, generator=gen)).bfloat16().to(device).requires_grad_(weight_grad)
    args = x, w, torch.randn(H, H, generator=gen).bfloat16().to(device)
    eager = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False):
        out = torch.compile(fn, fullgraph=True, dynamic=dynamic)(*args)
        out.float().sum().backward()
    ref = fn(*eager)
    ref.float().sum().backward()
    assert torch.equal(out, ref)
    for a, b in zip(args, eager):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)
    assert [tuple(g.stride()) for g in seen] == [(9 * 4 * H, 4 * H, H, 1)]  # dense, not heads outermost


def test_walkable_is_the_kernels_row_rule():
    """_lowering.walkable follows op_common.h kernel_row_stride (alignment aside): a slice of
    whole rows (outermost) or of each row's leading features is walked in place; heads
    outermost, a slice of the heads or of a middle dim, a strided feature dim are not."""
    from cake_rmsnorm._lowering import walkable
    x = torch.empty(2, 9, 4, H)
    assert walkable(x) and walkable(x[1:]) and walkable(x.view(18, 4, H)[5:])
    assert walkable(torch.empty(2, 9, 4, 2 * H)[..., :H])
    assert walkable(torch.empty(1, 1, H)) and walkable(torch.empty(0, H)) and walkable(x[:1, :1])
    assert not walkable(x.transpose(1, 2).contiguous().transpose(1, 2))  # RoPE's backward: heads outermost
    assert not walkable(x[:, :, :2]) and not walkable(x[:, 3:]) and not walkable(torch.empty(H, 2)[:, 0])


def test_the_opt_out_keeps_inductors_fallback():
    script = ("import torch, cake_rmsnorm as cr\n"
              "from torch._inductor.utils import run_and_get_code\n"
              "from cake_rmsnorm import _lowering\n"
              "x, w = torch.randn(4, 64), torch.randn(64)\n"
              "f = torch.compile(lambda x: cr.cake_rmsnorm(x, w), fullgraph=True)\n"
              "out, codes = run_and_get_code(f, x)\n"
              "assert torch.equal(out, cr.cake_rmsnorm(x, w))\n"
              "print(_lowering.installed, '_lowering.fwd_out(' in codes[0], 'torch.ops.cake_rmsnorm.fwd.default(' in codes[0])\n")
    env = dict(os.environ, CAKE_RMSNORM_COMPILE_DIRECT="0", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["False", "False", "True"]


def test_shim_declarations_match_the_schemas():
    """Each declaration has one parameter an argument and one out-handle a returned tensor."""
    from cake_rmsnorm import _lowering
    for name in _lowering.OPS:
        schema = getattr(torch.ops.cake_rmsnorm, name).default._schema
        for decl in _lowering.shim_declarations(name):
            params = decl[decl.index("(") + 1:decl.index(")")].split(", ")
            assert len(params) == len(schema.arguments) + len(schema.returns), decl
            assert [p.split()[-1] for p in params[:len(schema.arguments)]] == [a.name for a in schema.arguments]


def test_fx_graph_cache_still_hits(tmp_path, monkeypatch):
    """The shim declarations (OpOverload keys, which do not pickle) stay out of inductor's cache
    key, so a graph with the ops is served from the FX graph cache the second time."""
    from torch._dynamo.utils import counters
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(4, H), torch.randn(H)
    counters.clear()
    with inductor_config.patch(fx_graph_cache=True):
        for _ in range(2):
            torch._dynamo.reset()
            torch.compile(lambda x: cr.cake_rmsnorm(x, w), fullgraph=True)(x)
    assert counters["inductor"]["fxgraph_cache_hit"] == 1, dict(counters["inductor"])
