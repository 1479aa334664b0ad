"""torch.func on the functional API, the module and a patched model: grad, vmap, jacrev, jvp,
jacfwd and functional_call, each against FP64 torch on fresh random data; under vmap the batch
folds into rows, so the outputs are the unbatched call's bits. Forward-mode dual tensors too."""

import pytest
import torch
import torch.autograd.forward_ad as fw
from torch import nn

import cake_rmsnorm as cr
from conftest import devices

H = 64
EPS = 1e-6


def _data(seed, *shape, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device, dtype)


def f(x, w):
    return cr.cake_rmsnorm(x, w, EPS)


def ref(x, w):
    return torch.nn.functional.rms_norm(x.double(), (x.shape[-1],), w.double(), EPS)


def close(a, b, tol=2e-6):
    assert a.shape == b.shape
    assert (a.double() - b.double()).abs().max().item() <= tol * max(1.0, b.double().abs().max().item())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vmap_folds_the_batch_into_rows_bits(dim, dtype, device):
    x, w = _data(1, 4, 5, 3, H, dtype=dtype, device=device), _data(2, H, dtype=dtype, device=device)
    got = torch.func.vmap(f, in_dims=(dim, None))(x, w)
    assert torch.equal(got, f(x.movedim(dim, 0), w))


def test_vmap_over_the_weight_runs_each_sample():
    x, ws = _data(3, 4, 5, H), _data(4, 4, H)
    got = torch.func.vmap(f)(x, ws)
    for b in range(4):
        assert torch.equal(got[b], f(x[b], ws[b]))


def test_vmap_residual_bits():
    x, r, w = _data(5, 3, 6, H), _data(6, 3, 6, H), _data(7, H)
    fn = lambda x, r: cr.cake_rmsnorm(x, w, EPS, residual=r)  # noqa: E731
    y, h = torch.func.vmap(fn)(x, r)
    y1, h1 = fn(x, r)
    assert torch.equal(y, y1) and torch.equal(h, h1)


@pytest.mark.parametrize("device", devices())
def test_grad_and_jacrev_against_fp64(device):
    x, w = _data(8, 3, 7, H, device=device), _data(9, H, device=device)
    g = torch.func.grad(lambda x, w: (f(x, w) * x).sum(), argnums=(0, 1))(x, w)
    want = torch.func.grad(lambda x, w: (ref(x, w) * x).sum(), argnums=(0, 1))(x.double(), w.double())
    close(g[0], want[0])
    close(g[1], want[1], 1e-5)
    close(torch.func.jacrev(f, argnums=(0, 1))(x[0, :2], w)[1], torch.func.jacrev(ref, argnums=(0, 1))(
        x[0, :2].double(), w.double())[1])


@pytest.mark.parametrize("device", devices())
def test_per_sample_gradients(device):
    x, w = _data(10, 5, 9, H, device=device), _data(11, H, device=device)
    psg = torch.func.vmap(torch.func.grad(lambda w, x: f(x, w).pow(2).sum()), in_dims=(None, 0))(w, x)
    for b in range(5):
        close(psg[b], torch.func.grad(lambda w: ref(x[b], w).pow(2).sum())(w.double()), 1e-5)


@pytest.mark.parametrize("device", devices())
def test_jvp_jacfwd_and_dual_tensors(device):
    x, w, t, tw = (_data(12, 4, H, device=device), _data(13, H, device=device), _data(14, 4, H, device=device),
                   _data(15, H, device=device))
    y, yt = torch.func.jvp(f, (x, w), (t, tw))
    _, want = torch.func.jvp(ref, (x.double(), w.double()), (t.double(), tw.double()))
    assert torch.equal(y, f(x, w))
    close(yt, want)
    close(torch.func.jacfwd(f)(x, w), torch.func.jacfwd(ref)(x.double(), w.double()))
    want_x = torch.func.jvp(lambda x: ref(x, w), (x.double(),), (t.double(),))[1]
    with fw.dual_level():
        got = fw.unpack_dual(f(fw.make_dual(x, t), w)).tangent
    close(got, want_x)


def test_module_functional_call_and_patched_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(H, H), nn.RMSNorm(H, eps=EPS), nn.Linear(H, 4))
    stock = nn.Sequential(*[m for m in model])
    x = _data(16, 6, H)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    want = torch.func.grad(lambda p: torch.func.functional_call(stock, p, (x,)).pow(2).sum())(params)
    report = cr.patch(model)
    assert [c for _, c in report.replaced] == ["RMSNorm"]
    assert isinstance(model[1], cr.RMSNorm)
    got = torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).pow(2).sum())(params)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-5)
    ys = torch.func.vmap(lambda p, x: torch.func.functional_call(model, p, (x,)), in_dims=(None, 0))(
        params, x.view(2, 3, H))
    assert torch.equal(ys.view(6, 4), torch.func.functional_call(model, params, (x,)))
    m = cr.RMSNorm(H, eps=EPS)
    _, jt = torch.func.jvp(m, (x,), (x,))
    close(jt, torch.func.jvp(lambda x: ref(x, m.weight.detach()), (x.double(),), (x.double(),))[1])


@pytest.mark.parametrize("how", ["hessian", "jacrev_of_jacrev", "grad_of_grad"])
def test_second_order_is_refused_by_name(how):
    x, w = _data(17, 3, H), _data(18, H)
    g = lambda x: f(x, w).pow(2).sum()  # noqa: E731
    with pytest.raises(RuntimeError, match="no second-order derivative"):
        if how == "hessian":
            torch.func.hessian(g)(x)
        elif how == "jacrev_of_jacrev":
            torch.func.jacrev(torch.func.jacrev(g))(x)
        else:
            torch.func.grad(lambda x: torch.func.grad(g)(x).sum())(x)


def test_vmap_of_the_out_ops():
    """The out ops under vmap write each sample's rows into the batched outputs; an output that is
    not batched while the inputs are is refused (as torch's out= ops are)."""
    x, w = _data(19, 3, 4, H), _data(20, H)
    y, rstd = torch.empty_like(x), torch.empty(3, 4)
    torch.func.vmap(lambda x, y, r: cr.ops.fwd_out(x, w, EPS, y, r), out_dims=None)(x, y, rstd)
    want_y, want_r = cr.ops.fwd(x, w, EPS)
    assert torch.equal(y, want_y) and torch.equal(rstd, want_r)
    with pytest.raises(RuntimeError, match="not batched"):
        torch.func.vmap(lambda x: cr.ops.fwd_out(x, w, EPS, torch.empty(4, H), torch.empty(4)), out_dims=None)(x)
