"""Autograd, torch.compile, opcheck and CUDA-graph capture."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA, devices
from reference import assert_close_unit, make_rows, make_weight, rel_l2

EPS = 1e-6


def eager_rmsnorm(x, w, eps, residual=None):
    """The FP32 eager formula, differentiated by autograd."""
    h = x if residual is None else x + residual
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return y.to(x.dtype) if residual is None else (y.to(x.dtype), h)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("residual", [False, True])
def test_autograd_matches_eager(device, wdtype, residual, gen):
    T, H = 33, 1000
    x0 = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
    r0 = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
    w0 = make_weight(H, wdtype, device, gen)
    gy = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen)
    gh = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen)

    def run(fn):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        r = r0.clone().requires_grad_() if residual else None
        out = fn(x, w, EPS, r)
        if residual:
            y, h = out
            torch.autograd.backward([y, h], [gy, gh])
        else:
            y = out
            y.backward(gy)
        return y, x.grad, w.grad, (r.grad if residual else None)

    ours = run(lambda x, w, e, r: cr.cake_rmsnorm(x, w, e, residual=r))
    ref = run(lambda x, w, e, r: eager_rmsnorm(x, w, e, r))
    assert_close_unit(ours[0], ref[0], "y")
    assert_close_unit(ours[1], ref[1], "dx")
    assert ours[2].dtype == wdtype
    assert rel_l2(ours[2], ref[2]) < 1e-2
    if residual:
        assert torch.equal(ours[1], ours[3]), "both inputs of the add receive dx_total"


@pytest.mark.parametrize("device", devices())
def test_function_apply_is_the_autograd(device, gen):
    """CakeRMSNormFunction.apply (what cake_rmsnorm calls) differentiates like the functional
    backward; the bare ops carry no autograd formula of their own."""
    x = make_rows(8, 64, torch.bfloat16, device, 1.0, None, 0, gen).contiguous().requires_grad_()
    w = make_weight(64, torch.bfloat16, device, gen).requires_grad_()
    y = cr.CakeRMSNormFunction.apply(x, w, EPS)
    y.float().sum().backward()
    _, rstd = cr.ops.fwd(x.detach(), w.detach(), EPS)
    dx, dw = cr.cake_rmsnorm_train_backward(torch.ones_like(y), x.detach(), w.detach(), rstd)
    assert torch.equal(x.grad, dx) and torch.equal(w.grad, dw.to(w.dtype))
    with torch.no_grad():
        assert torch.equal(cr.CakeRMSNormFunction.apply(x, w, EPS), y)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [1, 37, 1000])
def test_dw_in_weight_dtype_from_the_finalize(device, dtype, T, gen):
    """The autograd dw of a 16-bit weight is the FP32 sum rounded once, by the finalize itself:
    bitwise the FP32 op's dw cast to w's dtype, and one launch fewer."""
    H = 264
    x = make_rows(T, H, dtype, device, 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, dtype, device, 1.0, None, 0, gen).contiguous()
    w = make_weight(H, dtype, device, gen)
    _, rstd = cr.ops.fwd(x, w, EPS)
    dx32, dw32 = cr.ops.bwd(g, x, w, rstd, None)
    dx16, dw16 = cr.ops.bwd(g, x, w, rstd, None, True)
    assert dw32.dtype == torch.float32 and dw16.dtype == dtype
    assert torch.equal(dx16, dx32) and torch.equal(dw16, dw32.to(dtype))
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    cr.cake_rmsnorm(xa, wa, EPS).backward(g)
    assert torch.equal(wa.grad, dw16) and torch.equal(xa.grad, dx32)
    # An FP32 weight keeps an FP32 dw either way; the _out op (accumulate) takes an FP32 dw only.
    w32 = w.float()
    assert cr.ops.bwd(g, x, w32, rstd, None, True)[1].dtype == torch.float32
    with pytest.raises(RuntimeError, match="dw has the wrong dtype"):
        cr.ops.bwd_out(g, x, w, rstd, None, torch.empty_like(x), torch.empty(H, dtype=dtype, device=device),
                       None, 0, True)


@pytest.mark.parametrize("device", devices())
def test_second_order_and_out_with_grad_refused(device, gen):
    x = make_rows(4, 64, torch.bfloat16, device, 1.0, None, 0, gen).contiguous().requires_grad_()
    w = make_weight(64, torch.bfloat16, device, gen).requires_grad_()
    with pytest.raises(RuntimeError, match="no second-order derivative"):
        torch.autograd.grad(cr.cake_rmsnorm(x, w, EPS).float().sum(), x, create_graph=True)
    # The functional forward is not differentiable: refused by name where it is called, with or
    # without caller buffers, instead of a y without grad_fn that fails at backward time.
    for kwargs in ({}, {"out": torch.empty_like(x)}):
        with pytest.raises(ValueError, match=r"x, w require grad.*cake_rmsnorm\(x, w, eps"):
            cr.cake_rmsnorm_train_forward(x, w, EPS, **kwargs)
    with pytest.raises(ValueError, match="^w requires grad"):
        cr.cake_rmsnorm_train_forward(x.detach(), w, EPS)
    with torch.no_grad():
        cr.cake_rmsnorm_train_forward(x, w, EPS, out=torch.empty_like(x))
    cr.cake_rmsnorm_train_forward(x.detach(), w.detach(), EPS)


def _samples(device):
    g = torch.Generator().manual_seed(0)
    x = make_rows(16, 64, torch.bfloat16, device, 1.0, None, 0, g).contiguous()
    r = make_rows(16, 64, torch.bfloat16, device, 1.0, None, 0, g).contiguous()
    w = make_weight(64, torch.bfloat16, device, g)
    w32 = make_weight(64, torch.float32, device, g)
    _, rstd = cr.ops.fwd(x, w, EPS)
    ws = torch.zeros(cr.cake_rmsnorm_train_backward_workspace_bytes(16, 64), dtype=torch.uint8, device=device)
    return x, r, w, w32, rstd, ws


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    x, r, w, w32, rstd, ws = _samples(device)
    o = cr.ops
    e = torch.empty_like
    cases = [
        (o.fwd.default, (x, w, EPS)),
        (o.fwd.default, (x.detach().view(2, 8, 64), w32, EPS)),
        (o.fwd_residual.default, (x.detach(), r, w, EPS)),
        (o.fwd_out.default, (x.detach(), w, EPS, e(x.detach()), e(rstd))),
        (o.fwd_residual_out.default, (x.detach(), r.detach(), w.detach(), EPS, e(x.detach()), e(rstd), e(x.detach()))),
        (o.bwd.default, (x.detach(), x.detach(), w.detach(), rstd, None)),
        (o.bwd.default, (x.detach(), x.detach(), w.detach(), rstd, r.detach(), False)),
        (o.bwd.default, (x.detach(), x.detach(), w.detach(), rstd, None, True)),
        (o.bwd.default, (x.detach().view(4, 4, 64), x.detach().view(4, 4, 64), w.detach(), rstd.view(4, 4), None,
                         True)),
        (o.bwd_out.default, (x.detach(), x.detach(), w.detach(), rstd, None, e(x.detach()),
                             torch.empty(64, device=device), ws)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


class TinyBlock(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.ones(h, dtype=torch.bfloat16))
        self.w2 = torch.nn.Parameter(torch.ones(h, dtype=torch.bfloat16))
        self.lin = torch.nn.Linear(h, h, dtype=torch.bfloat16)

    def forward(self, x, r):
        y, h = cr.cake_rmsnorm(x, self.w1, 1e-6, residual=r)
        return cr.cake_rmsnorm(self.lin(y), self.w2, 1e-6) + h


@pytest.mark.parametrize("device", devices())
def test_torch_compile_fullgraph_dynamic(device, gen):
    torch._dynamo.reset()
    model = TinyBlock(64).to(device)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for T in (5, 17, 64):  # several token counts through one dynamic graph
        x = make_rows(T, 64, torch.bfloat16, device, 1.0, None, 0, gen).contiguous().requires_grad_()
        r = make_rows(T, 64, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
        out = compiled(x, r)
        out.float().sum().backward()
        x2 = x.detach().clone().requires_grad_()
        model.zero_grad()
        ref = model(x2, r)
        ref.float().sum().backward()
        assert torch.equal(out, ref)
        assert torch.equal(x.grad, x2.grad)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_graph_capture(gen):
    """Forward + backward with caller buffers and a workspace, captured once, replayed on new data."""
    T, H = 300, 2048
    x = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    g = torch.empty_like(x)
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    y, rstd, dx = torch.empty_like(x), torch.empty(T, device="cuda"), torch.empty_like(x)
    dw = torch.empty(H, device="cuda")
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture
        cr.cake_rmsnorm_train_forward(x.normal_(), w, EPS, out=y, rstd=rstd)
        cr.cake_rmsnorm_train_backward(g.normal_(), x, w, rstd, dx=dx, dw=dw, workspace=ws)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cr.cake_rmsnorm_train_forward(x, w, EPS, out=y, rstd=rstd)
        cr.cake_rmsnorm_train_backward(g, x, w, rstd, dx=dx, dw=dw, workspace=ws)
    for _ in range(3):
        x.copy_(torch.randn(T, H, generator=gen).to(torch.bfloat16))
        g.copy_(torch.randn(T, H, generator=gen).to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        y_ref, rstd_ref = cr.cake_rmsnorm_train_forward(x, w, EPS)
        dx_ref, dw_ref = cr.cake_rmsnorm_train_backward(g, x, w, rstd_ref)
        assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)
        assert torch.equal(dx, dx_ref) and torch.equal(dw, dw_ref)
