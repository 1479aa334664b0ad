"""The same bits everywhere (docs/numerics.md#reduction-order): a row's y, rstd, h_new and dx
are a function of the row alone, never of T, the program, the grid or the device, and the CPU
path computes the GPU's bits; dw is a function of (T, H) and equal on both."""

import random

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA, devices
from reference import make_rows, make_weight

EPS = 1e-6
ACTS = [torch.bfloat16, torch.float16, torch.float32]


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _weights(act):
    return (act, torch.float32) if act != torch.float32 else (torch.float32, torch.bfloat16)


def _run(x, w, g, res):
    """Every output of a forward and a backward with dw: y, rstd, (h_new), dx, dw."""
    if res is None:
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
        h = x
    else:
        y, rstd, h = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=res)
    dx, dw = cr.cake_rmsnorm_train_backward(g.to(y.dtype), h, w, rstd)
    return [y, rstd] + ([h] if res is not None else []) + [dx, dw]


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_cpu_rows_do_not_depend_on_T_or_slice(act, residual):
    """Property: random widths, T and row slices; a slice's y, rstd, h_new and dx have the
    bits of the same rows in the whole call."""
    rnd = random.Random()
    seed = rnd.randrange(1 << 30)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(6):
        H = 8 * rnd.choice([1, 3, 8, 13, 64, 96, 128, 192, 256, 385, 512, 768])
        T = rnd.randrange(2, 90)
        w = make_weight(H, rnd.choice(_weights(act)), "cpu", gen)
        x, r, g = (make_rows(T, H, act, "cpu", 1.0, None, 0, gen) for _ in range(3))
        whole = _run(x, w, g, r if residual else None)
        a = rnd.randrange(T)
        b = rnd.randrange(a + 1, T + 1)
        part = _run(x[a:b], w, g[a:b], r[a:b] if residual else None)
        for u, v in zip(part[:-1], whole[:-1]):  # dw is a function of the rows summed
            assert _equal(u, v[a:b]), (seed, H, T, a, b)


# The widths and token counts the GPU check walks: every window edge of both forward routes
# (a row group changes there, or the kernel), small T, and the widths of the BENCH matrix.
GPU_WIDTHS = [64, 128, 256, 512, 768, 1000, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384]


def _token_counts(H):
    ts = {1, 2, 3, 16, 64, 129}
    for route in ("fwd", "fwd_residual", "bwd"):
        for v in cr.program_windows(route, H, sm=90)[route]:
            ts |= {t for t in (v.above, v.above + 1, v.at_most or 0, (v.at_most or 0) + 1) if t > 0}
    return sorted(t for t in ts if t * H <= (1 << 21))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", GPU_WIDTHS)
@pytest.mark.parametrize("act", ACTS)
def test_gpu_has_the_cpu_paths_bits(H, act, gen):
    """On both sides of every window edge (so every program the plan chooses there), with the
    activations' and the other weight dtype, with and without a residual stream: y, rstd,
    h_new, dx and dw bitwise the CPU path's."""
    if act == torch.float32 and H > 16384:
        pytest.skip("FP32 activations serve widths up to 16384")
    for T in _token_counts(H):
        for wd in _weights(act):
            w = make_weight(H, wd, "cpu", gen)
            x, r, g = (make_rows(T, H, act, "cpu", 1.0, None, 0, gen) for _ in range(3))
            for res in (None, r):
                want = _run(x, w, g, res)
                got = _run(x.cuda(), w.cuda(), g.cuda(), None if res is None else res.cuda())
                names = ["y", "rstd"] + (["h_new"] if res is not None else []) + ["dx", "dw"]
                for name, a, b in zip(names, got, want):
                    assert _equal(a.cpu(), b), (name, H, T, act, wd, res is not None)


def _pre_norm(x, r, w):
    """A pre-norm residual block's norm: the sum feeds the norm and the next block."""
    h = x + r
    return cr.cake_rmsnorm(h, w, EPS), h


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("fusion", [True, False])
def test_compiled_is_eager_bitwise(device, dtype, fusion, monkeypatch, gen):
    """Under torch.compile, with the residual-fusion pass (the add into fwd_residual, the
    gradient add into the backward's g_residual) or without it: y, h and every gradient bitwise
    eager's. The fused backward adds g_residual to dx rounded to the activation type, as eager's
    separate add does."""
    from torch._inductor import config
    from cake_rmsnorm import _fusion
    if not fusion:
        monkeypatch.setenv("CAKE_RMSNORM_COMPILE_FUSION", "0")
    T, H = 40, 1536
    x, r, gy, gh = (make_rows(T, H, dtype, device, 1.0, None, 0, gen).contiguous() for _ in range(4))
    w = make_weight(H, dtype if dtype != torch.float32 else torch.bfloat16, device, gen)

    def run(fn):
        args = [a.detach().clone().requires_grad_() for a in (x, r, w)]
        y, h = fn(*args)
        torch.autograd.backward((y, h), (gy, gh))
        return [y, h] + [a.grad for a in args]

    want = run(_pre_norm)
    torch._dynamo.reset()
    before = dict(_fusion.stats)
    with config.patch(fx_graph_cache=False, force_disable_caches=True,
                      post_grad_custom_post_pass=None):
        got = run(torch.compile(_pre_norm, fullgraph=True))
    fused = (_fusion.stats["forward"] - before["forward"], _fusion.stats["backward"] - before["backward"])
    assert fused == ((1, 1) if fusion else (0, 0))
    for name, a, b in zip(("y", "h", "dx", "dr", "dw"), got, want):
        assert _equal(a, b), name
