"""AMP's mixed residual add: a float32 residual stream and a 16-bit branch (the attention or MLP
output) added and normalised in one pass. h_new = stream + float(branch) in float32 (the widening
is exact, so the add's bits), y, rstd and the gradients the float32 route's on h_new, the
branch's gradient that dx rounded to its dtype. Against FP64 on fresh random data, and bitwise
against the float32 route, on the CPU and (gpu) CUDA; the module and the compile pass take it."""

import warnings

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA, devices
from reference import RSTD_REL_L2, assert_close_unit, make_rows, make_weight, rel_l2

EPS = 1e-6
F32 = torch.float32
HALF = (torch.bfloat16, torch.float16)


def _inputs(T, H, branch, wdtype, device, gen):
    s = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    b = make_rows(T, H, branch, device, 1.0, None, 0, gen)
    return s, b, make_weight(H, wdtype, device, gen)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("branch", HALF)
@pytest.mark.parametrize("w_is_branch", [False, True])
@pytest.mark.parametrize("y_is_branch", [False, True])
@pytest.mark.parametrize("T, H", [(1, 64), (37, 1000), (300, 4096), (5, 16384)])
def test_forward_is_the_fp32_route_on_the_add(device, branch, w_is_branch, y_is_branch, T, H, gen):
    s, b, w = _inputs(T, H, branch, branch if w_is_branch else F32, device, gen)
    out_dtype = branch if y_is_branch else None
    y, rstd, h = cr.cake_rmsnorm_train_forward(s, w, EPS, residual=b, out_dtype=out_dtype)
    assert h.dtype == F32 and rstd.dtype == F32 and y.dtype == (branch if y_is_branch else F32)
    assert torch.equal(h, s + b.float())  # one rounding of the add, as torch makes it
    # The float32 route on the same h_new: the same y and rstd, bit for bit.
    y32, rstd32 = cr.cake_rmsnorm_train_forward(h.clone(), w, EPS, out_dtype=out_dtype)
    assert torch.equal(y, y32) and torch.equal(rstd, rstd32)
    hd = s.double() + b.double()
    rstd_ref = torch.rsqrt(hd.pow(2).mean(-1) + EPS)
    assert rel_l2(rstd, rstd_ref) <= RSTD_REL_L2
    assert_close_unit(y, hd * rstd_ref.unsqueeze(-1) * w.double(), "y")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("branch", HALF)
@pytest.mark.parametrize("stream_first", [True, False])
@pytest.mark.parametrize("T, H", [(1, 128), (64, 2048), (1000, 1024)])
def test_autograd_either_order(device, branch, stream_first, T, H, gen):
    s, b, w = _inputs(T, H, branch, F32, device, gen)
    s.requires_grad_(); b.requires_grad_(); w.requires_grad_()
    x, r = (s, b) if stream_first else (b, s)
    y, h = cr.cake_rmsnorm(x, w, EPS, residual=r, out_dtype=branch)
    assert y.dtype == branch and h.dtype == F32
    gy = make_rows(T, H, branch, device, 1.0, None, 0, gen)
    gh = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    ds, db, dw = torch.autograd.grad((y, h), (s, b, w), (gy, gh))
    assert ds.dtype == F32 and db.dtype == branch and dw.dtype == F32
    # The float32 route's backward on h_new, bit for bit; the branch gets it rounded once.
    h32 = (s.detach() + b.detach().float()).requires_grad_()
    w32 = w.detach().clone().requires_grad_()
    y32 = cr.cake_rmsnorm(h32, w32, EPS, out_dtype=branch)
    assert torch.equal(y.detach(), y32.detach())
    dh, dw32 = torch.autograd.grad(y32, (h32, w32), gy)
    assert torch.equal(ds, dh + gh)  # the kernel adds g_h to dx in FP32, as torch would after it
    assert torch.equal(db, ds.to(branch)) and torch.equal(dw, dw32)


@pytest.mark.parametrize("device", devices())
def test_backward_matches_fp64(device, gen):
    T, H, branch = 257, 1536, torch.bfloat16
    s, b, w = _inputs(T, H, branch, F32, device, gen)
    s.requires_grad_(); b.requires_grad_(); w.requires_grad_()
    y, h = cr.cake_rmsnorm(b, w, EPS, residual=s)
    gy = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    gh = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    ds, db, dw = torch.autograd.grad((y, h), (s, b, w), (gy, gh))
    hd = s.detach().double() + b.detach().double()
    rstd = torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + EPS)
    xhat, gw = hd * rstd, gy.double() * w.detach().double()
    dx_ref = rstd * (gw - (gw * xhat).mean(-1, keepdim=True) * xhat) + gh.double()
    assert_close_unit(ds, dx_ref, "d stream")
    assert_close_unit(db, dx_ref, "d branch")
    assert rel_l2(dw, (gy.double() * xhat).sum(0)) <= 1e-4


@pytest.mark.parametrize("device", devices())
def test_refused_by_name(device, gen):
    s, b, _ = _inputs(4, 64, torch.bfloat16, F32, device, gen)
    w16 = make_weight(64, torch.float16, device, gen)
    with pytest.raises(TypeError, match="^w must be torch.bfloat16 or torch.float32"):
        cr.cake_rmsnorm(s, w16, EPS, residual=b)
    with pytest.raises(TypeError, match="^out_dtype must be torch.bfloat16 or torch.float32"):
        cr.cake_rmsnorm(s, w16.float(), EPS, residual=b, out_dtype=torch.float16)
    with pytest.raises(TypeError, match="^residual must have x's dtype"):
        cr.cake_rmsnorm(b, w16.float(), EPS, residual=b.half())
    # The functional op's x is the stream: a float32 residual beside 16-bit x is refused by name.
    out = torch.full((4, 64), 7.0, dtype=torch.bfloat16, device=device)
    with pytest.raises(TypeError, match="^residual must have x's dtype torch.bfloat16 .*with float32 x"):
        cr.cake_rmsnorm_train_forward(b, w16.float(), EPS, residual=s, out=out)
    assert (out == 7).all()  # nothing written


@pytest.mark.parametrize("device", devices())
def test_module_takes_the_mixed_add(device, gen):
    H = 512
    m = cr.RMSNorm(H, eps=EPS, cast_output=True).to(device)
    s, b, _ = _inputs(16, H, torch.bfloat16, F32, device, gen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        y, h = m(b, s)
    assert torch.equal(h, s + b.float()) and y.dtype == F32
    assert torch.equal(y, cr.cake_rmsnorm(h, m.weight, EPS))
    with torch.autocast(device, dtype=torch.bfloat16):
        ya, ha = m(s, b)  # under autocast y comes in the compute dtype, cast in the same pass
    assert ya.dtype == torch.bfloat16 and torch.equal(ya, y.to(torch.bfloat16)) and torch.equal(ha, h)


def test_module_fallback_keeps_the_mixed_adds_dtypes(gen):
    """Torch's formula, where the module falls back (a width the kernels do not take), gives
    the mixed add what the kernels give: h_new and y in float32, eps of float32, either order."""
    m = cr.RMSNorm(60)
    s = make_rows(4, 60, F32, "cpu", 1e-2, None, 0, gen)
    b = make_rows(4, 60, torch.bfloat16, "cpu", 1e-2, None, 0, gen)
    with pytest.warns(UserWarning, match="not a multiple of 8"):
        y1, h1 = m(b, s)
    y2, h2 = m(s, b)
    assert y1.dtype == h1.dtype == F32 and torch.equal(y1, y2) and torch.equal(h1, h2)


@pytest.mark.parametrize("device", devices())
def test_compile_pass_fuses_the_mixed_add(device, gen):
    """``norm(stream + branch)`` under torch.compile: the pass gives the add to the mixed route
    (promoted by the add, or widened by a convert), with the eager graph's bits."""
    from cake_rmsnorm import _fusion
    H = 256
    s, b, w = _inputs(64, H, torch.bfloat16, F32, device, gen)

    def promoted(s, b, w):
        h = s + b
        return cr.cake_rmsnorm(h, w, EPS, out_dtype=torch.bfloat16), h

    def widened(s, b, w):
        h = s + b.float()
        return cr.cake_rmsnorm(h, w, EPS), h

    for fn in (promoted, widened):
        torch._dynamo.reset()
        before = _fusion.stats["forward"]
        with torch._inductor.config.patch(fx_graph_cache=False, force_disable_caches=True):  # a hit skips passes
            got = torch.compile(fn, fullgraph=True)(s, b, w)
        assert _fusion.stats["forward"] == before + 1, fn.__name__
        for e, c in zip(fn(s, b, w), got):
            assert torch.equal(e, c), fn.__name__

    def step(s, b, w):
        h = s + b
        return (cr.cake_rmsnorm(h, w, EPS).float() * torch.arange(H, device=s.device)).sum() + (h * h).sum()

    leaves = [t.clone().requires_grad_() for t in (s, b, w)]
    ref = torch.autograd.grad(step(*leaves), leaves)
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(step)(*leaves), leaves)
    assert [g.dtype for g in got] == [F32, torch.bfloat16, F32]
    assert all(torch.equal(a, c) for a, c in zip(ref, got))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("branch", HALF)
@pytest.mark.parametrize("T, H", [(3, 256), (1000, 4096), (64, 16384)])
def test_gpu_runs_the_mixed_instance_with_the_cpu_bits(branch, T, H, gen):
    s, b, w = _inputs(T, H, branch, F32, "cpu", gen)
    cpu = cr.cake_rmsnorm_train_forward(s, w, EPS, residual=b, out_dtype=branch)
    gpu = cr.cake_rmsnorm_train_forward(s.cuda(), w.cuda(), EPS, residual=b.cuda(), out_dtype=branch)
    torch.cuda.synchronize()
    inst = cr.last_launch()["launch"]["instance"]
    assert inst["family"] == "fp32_fwd" and inst["residual_dtype"] == str(branch).split(".")[1]
    for c, g in zip(cpu, gpu):
        assert torch.equal(c, g.cpu())
