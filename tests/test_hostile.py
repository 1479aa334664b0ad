"""Hostile input: refused by name before anything is written (docs/refusals.md)."""

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fw
from torch import nn

import cake_rmsnorm as cr


def _xw(T=4, H=16, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(T, H, generator=g).to(dtype), torch.ones(H, dtype=dtype)


def test_plain_calls_inside_a_dual_level_still_run():
    x, w = _xw()
    with fw.dual_level():
        torch.testing.assert_close(cr.cake_rmsnorm(x, w), cr.cake_rmsnorm_train_forward(x, w, 1e-6)[0])


def _sentinel_out(kind, x):
    if kind == "expanded":
        return torch.full((x.shape[1],), 7.0, dtype=x.dtype).expand_as(x), "expanded"
    if kind == "overlapping":
        return torch.full((x.shape[0] + x.shape[1],), 7.0, dtype=x.dtype).as_strided(x.shape, (1, 1)), "overlaps itself"
    return torch.full(x.shape, 7.0, dtype=x.dtype, requires_grad=True), "leaf tensor that requires grad"


@pytest.mark.parametrize("kind", ["expanded", "overlapping", "leaf"])
@pytest.mark.parametrize("arg", ["out", "residual_out", "dx"])
def test_caller_outputs_refused_with_nothing_written(kind, arg):
    x, w = _xw()
    out, match = _sentinel_out(kind, x)
    before = out.detach().clone()
    with pytest.raises(ValueError, match=f"{arg} .*{match}|{arg} is a {match}|{arg} has an {match}"):
        if arg == "dx":
            _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
            cr.cake_rmsnorm_train_backward(torch.randn_like(x), x, w, rstd, dx=out)
        else:
            kw = {arg: out}
            cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=torch.randn_like(x), **kw)
    assert torch.equal(out.detach(), before), "a refused call wrote a caller buffer"


def test_a_subclass_output_is_checked_for_overlap():
    class Sub(torch.Tensor):
        pass

    x, w = _xw()
    xs = x.clone().as_subclass(Sub)
    before = xs.clone()
    with pytest.raises(ValueError, match="overlaps x"):
        cr.cake_rmsnorm_train_forward(xs, w, 1e-6, out=xs)
    assert torch.equal(xs.as_subclass(torch.Tensor), before.as_subclass(torch.Tensor))


@pytest.mark.parametrize("eps", [1e39, 10**400])
def test_eps_out_of_float32_range_is_refused(eps):
    x, w = _xw()
    with pytest.raises(ValueError, match="eps must be finite"):
        cr.cake_rmsnorm(x, w, eps)
    with pytest.raises(ValueError, match="eps must be finite"):
        cr.RMSNorm(16, eps=eps)


def test_module_checks_its_arguments():
    for bad in (8.0, None, "8"):
        with pytest.raises(TypeError, match="normalized_shape"):
            cr.RMSNorm(bad)
    assert cr.RMSNorm(np.int64(8)).normalized_shape == (8,)
    x, _ = _xw()
    m = cr.RMSNorm(16, dtype=x.dtype, accumulate_main_grad=True)
    m.weight.main_grad = torch.zeros(16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="main_grad must be float32"):
        m(x.requires_grad_())


def test_patch_checks_its_arguments_and_keeps_hooks():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        cr.patch(None)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        cr.patch(nn.Sequential(nn.RMSNorm(8)), deterministic="x")
    with pytest.raises(ValueError, match="model is itself a norm"):
        cr.patch(nn.RMSNorm(8))
    m = nn.Sequential(nn.RMSNorm(8))
    seen = []
    m[0].register_forward_hook(lambda mod, i, o: seen.append(type(mod)))
    cr.patch(m)
    m(torch.randn(2, 8))
    assert seen == [cr.RMSNorm]


def test_sizes_and_devices_are_checked_where_they_enter():
    with pytest.raises(ValueError, match="rows must be >= 0 and at most"):
        cr.cake_rmsnorm_train_backward_workspace_bytes(2**64, 64)
    with pytest.raises(ValueError, match="hidden must be a positive multiple of 8 up to"):
        cr.cake_rmsnorm_train_backward_workspace_bytes(8, 2**40)
    for dev in ("tpu", -1):
        with pytest.raises(ValueError, match="device must be a CPU or CUDA device"):
            cr.cake_rmsnorm_train_backward_workspace_bytes(8, 64, dev)
    with pytest.raises(TypeError, match="sm must be an int"):
        cr.program_windows(hidden=64, sm="90")
    with pytest.raises(ValueError, match="tokens must be >= 0 and at most"):
        cr.launch_plan("fwd", 64, 2**64, sm=90, sms=132)
    with pytest.raises(ValueError, match="sms must be a positive"):
        cr.launch_plan("fwd", 64, 8, sm=90, sms=0)
    with pytest.raises(ValueError, match="hidden must be a positive multiple of 8 up to"):
        cr.launch_plan("fwd", 2**40, 8, sm=90, sms=132)


def _nonfinite_case(case, dtype, device):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 64, generator=g)
    gy = torch.randn(6, 64, generator=g)
    if case == "inf_x":
        x[2, 7] = float("inf")
    elif case == "overflow_x":  # the row's sum of squares overflows FP32
        x[2, 7] = 1e30 if dtype == torch.float32 else 1e20
    else:  # an Inf in the gradient of y
        gy[4, 9] = float("inf")
    return x.to(device, dtype), gy.to(device, dtype)


def _same_nonfinite(a, b, name):
    a, b = a.float().cpu(), b.float().cpu()
    assert torch.equal(a.isnan(), b.isnan()), f"{name}: NaN at {a.isnan().nonzero().tolist()}, torch's at {b.isnan().nonzero().tolist()}"
    assert torch.equal(a.isinf() & (a > 0), b.isinf() & (b > 0)) and torch.equal(a.isinf() & (a < 0), b.isinf() & (b < 0)), name
    fin = a.isfinite()
    torch.testing.assert_close(a[fin], b[fin], atol=2e-2, rtol=2e-2, msg=name)


@pytest.mark.parametrize("device", [d for d in ("cpu", "cuda") if d == "cpu" or torch.cuda.is_available()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["inf_x", "overflow_x", "inf_g"])
def test_nonfinite_values_stay_where_torch_keeps_them(case, dtype, device):
    """One Inf (or a row whose sum of squares overflows) poisons what F.rms_norm's does and no
    more: its element of y and dx's row, one column of dw; an Inf in g makes its column of dw
    Inf on the CPU (NaN on the GPU). The compensated sums carry IEEE's result once they leave
    the finite range."""
    x, gy = _nonfinite_case(case, dtype, device)
    w = torch.linspace(0.5, 1.5, 64).to(device, dtype)
    outs = []
    for f in (lambda a, b: cr.cake_rmsnorm(a, b, 1e-6), lambda a, b: torch.nn.functional.rms_norm(a, (64,), b, 1e-6)):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = f(xs, ws)
        dx, dw = torch.autograd.grad(y, (xs, ws), gy)
        outs.append((y, dx, dw))
    for name, a, b in zip(("y", "dx", "dw"), *outs):
        if name == "dw" and case == "inf_g" and device == "cuda":
            b = torch.where(b.isinf(), torch.nan, b)  # the GPU's unguarded dw sums (docs/refusals.md)
        _same_nonfinite(a, b, f"{case} {name}")


def _confined_like_the_cpu_path(gpu, cpu, name):
    """The GPU's non-finite dw columns are the CPU path's, each the CPU's value or NaN (the
    GPU's unguarded per-row sums, docs/refusals.md); every finite column is the CPU's bits."""
    gpu, cpu = gpu.cpu(), cpu.cpu()
    bad = ~cpu.isfinite()
    assert torch.equal(~gpu.isfinite(), bad), f"{name}: non-finite at {(~gpu.isfinite()).nonzero().tolist()}, CPU's at {bad.nonzero().tolist()}"
    assert bool((gpu[bad].isnan() | (gpu[bad] == cpu[bad])).all()), name
    assert torch.equal(gpu[~bad].view(torch.int32), cpu[~bad].view(torch.int32)), f"{name}: finite bits differ"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(512, 3), (512, 1000), (1536, 255), (2048, 255), (2048, 4099), (4096, 777),
                                 (6144, 256), (256, 9001), (131072, 37), (128, 32768), (192, 40000)])
@pytest.mark.parametrize("act", ["bf16", "bf16_residual", "fp32", "fp32_bf16_out"])
def test_gpu_dw_keeps_an_inf_of_g_to_its_column(H, T, act):
    """Every backward program (one launch, row pairs, rings, warp chunks, the wide rows' second
    sweep, the FP32 rows) keeps an Inf of g to its dw column, where the CPU path has +Inf, -Inf, or NaN where both
    signs meet, and every other column keeps the CPU path's bits."""
    dt = torch.float32 if act.startswith("fp32") else torch.bfloat16
    H = min(H, 16384) if dt == torch.float32 else H  # FP32 rows' widest on CUDA
    gen = torch.Generator().manual_seed(H * 7 + T)
    gdt = torch.bfloat16 if act == "fp32_bf16_out" else dt
    x = torch.randn(T, H, generator=gen).to(dt)
    g = torch.randn(T, H, generator=gen).to(gdt)
    w = (1 + 0.1 * torch.randn(H, generator=gen)).to(dt)
    rows = torch.randperm(T, generator=gen)[:3].tolist()
    g[rows[0], 5] = float("inf")
    g[rows[1], H - 3] = -float("inf")
    g[rows[2], H // 2] = float("inf")
    g[rows[0], H // 2] = -float("inf")  # both signs in one column: NaN
    for r, col in ((rows[0], 5), (rows[1], H - 3), (rows[2], H // 2), (rows[0], H // 2)):
        x[r, col] = 1.0  # xhat > 0: each Inf keeps its sign in g * xhat
    gr = torch.randn(T, H, generator=gen).to(dt) if act == "bf16_residual" else None
    kw = {"out_dtype": torch.bfloat16} if act == "fp32_bf16_out" else {}
    _, rstd = cr.cake_rmsnorm_train_forward(x.cuda(), w.cuda(), 1e-6, **kw)  # one rstd for both (dw's bits are promised, rstd's not)
    dws = []
    for dev in ("cuda", "cpu"):
        _, dw = cr.cake_rmsnorm_train_backward(g.to(dev), x.to(dev), w.to(dev), rstd.to(dev),
                                               g_residual=None if gr is None else gr.to(dev))
        dws.append(dw.float())
    gpu, cpu = dws
    assert cpu[5].item() == float("inf") and cpu[H - 3].item() == -float("inf") and cpu[H // 2].isnan()
    _confined_like_the_cpu_path(gpu, cpu, f"dw, {act}, H {H}, T {T}")


@pytest.mark.parametrize("fullgraph", [False, True])
def test_bad_eps_under_compile_is_named(fullgraph):
    """A bad eps refused while dynamo traces: the ValueError itself, or (fullgraph) dynamo's
    report of it, which carries the same message."""
    x, w = torch.randn(4, 64), torch.randn(64)
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: cr.cake_rmsnorm(x, w, eps=-1.0), fullgraph=fullgraph)
    with pytest.raises(Exception, match="eps must be finite and >= 0") as err:
        f(x, w)
    assert isinstance(err.value, ValueError) or "Observed exception" in str(err.value)
