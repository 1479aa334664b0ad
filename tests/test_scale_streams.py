"""Scale and concurrency on the GPU: more than 2^31 elements, two streams at once, long graph
replays."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA
from reference import assert_close_unit, rel_l2

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]
EPS = 1e-6


def test_64bit_indexing():
    """T x H = (2^19 + 3) x 4096 > 2^31 elements: sampled rows and dw against FP64."""
    T, H = (1 << 19) + 3, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=g)
    gy = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (1 + 0.1 * torch.randn(H, device="cuda", generator=g)).bfloat16()
    y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    dx, dw = cr.cake_rmsnorm_train_backward(gy, x, w, rstd)
    rows = torch.tensor([0, 1, T // 2, (1 << 19) - 1, 1 << 19, T - 2, T - 1], device="cuda")
    xs, gs = x[rows].double(), gy[rows].double()
    rs = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + EPS)
    assert_close_unit(y[rows], xs * rs * w.double(), "y")
    assert rel_l2(rstd[rows], rs.squeeze(-1)) <= 1e-5
    xhat, gw = xs * rs, gs * w.double()
    assert_close_unit(dx[rows], rs * (gw - (gw * xhat).mean(-1, keepdim=True) * xhat), "dx")
    ref = torch.zeros(H, dtype=torch.float64, device="cuda")
    for s in range(0, T, 1 << 16):  # FP64 dw in slices that fit
        xb, gb = x[s:s + (1 << 16)].double(), gy[s:s + (1 << 16)].double()
        ref += (gb * xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + EPS)).sum(0)
    assert rel_l2(dw, ref) <= 1e-4


def test_two_streams_with_separate_workspaces():
    """Forward + backward on two streams at once give the bits of serial calls."""
    T, H = 4099, 2048
    g = torch.Generator(device="cuda").manual_seed(1)
    data = [(torch.randn(T, H, device="cuda", generator=g).bfloat16(),
             torch.randn(T, H, device="cuda", generator=g).bfloat16()) for _ in range(2)]
    w = torch.ones(H, device="cuda", dtype=torch.bfloat16)
    serial = []
    for x, gy in data:
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
        serial.append((y, rstd) + cr.cake_rmsnorm_train_backward(gy, x, w, rstd))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    wss = [cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda") for _ in streams]
    outs = []
    torch.cuda.synchronize()
    for _ in range(5):
        outs.clear()
        for (x, gy), s, ws in zip(data, streams, wss):
            with torch.cuda.stream(s):
                y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
                outs.append((y, rstd) + cr.cake_rmsnorm_train_backward(gy, x, w, rstd, workspace=ws))
        torch.cuda.synchronize()
        for got, want in zip(outs, serial):
            for a, b in zip(got, want):
                assert torch.equal(a, b)


def test_graph_replayed_100_times_matches_eager():
    T, H = 1000, 6144
    x = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    gy, r = torch.empty_like(x), torch.empty_like(x)
    w = torch.ones(H, device="cuda", dtype=torch.float32)
    y, h, rstd = torch.empty_like(x), torch.empty_like(x), torch.empty(T, device="cuda")
    dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")

    def step():
        cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r, out=y, rstd=rstd, residual_out=h)
        cr.cake_rmsnorm_train_backward(gy, h, w, rstd, g_residual=gy, dx=dx, dw=dw, workspace=ws)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for t in (x, gy, r):
            t.normal_()
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    gen = torch.Generator(device="cuda").manual_seed(2)
    for i in range(100):
        for t in (x, gy, r):
            t.copy_(torch.randn(T, H, device="cuda", generator=gen))
        graph.replay()
        if i % 10 == 9:
            torch.cuda.synchronize()
            y2, rstd2, h2 = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
            dx2, dw2 = cr.cake_rmsnorm_train_backward(gy, h2, w, rstd2, g_residual=gy)
            for a, b in ((y, y2), (rstd, rstd2), (h, h2), (dx, dx2), (dw, dw2)):
                assert torch.equal(a, b)
