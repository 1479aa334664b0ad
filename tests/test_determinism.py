"""The determinism contract: dw bits repeat and do not depend on the grid, and a row's outputs
do not depend on T: within a window, and across every edge, the plain forward's wider group at
small T included (it sums each row in its ring group's order)."""


import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA, devices
from reference import make_rows, make_weight

EPS = 1e-6


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("H", [256, 512, 1000, 6144])
@pytest.mark.parametrize("T", [1, 129, 4099])
def test_dw_bitwise_repeatable_with_poisoned_workspace(device, H, T, gen):
    if device == "cpu" and T * H > 4099 * 1000:
        pytest.skip("CPU time budget of CI")
    x = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen)
    g = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen)
    w = make_weight(H, torch.bfloat16, device, gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, device)
    results = []
    for _ in range(3):
        ws.view(torch.uint8).fill_(0xFF)  # all-ones bytes: NaN in every FP32 slot
        dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, workspace=ws)
        results.append((dx.clone(), dw.clone()))
    for dx, dw in results[1:]:
        assert torch.equal(dx, results[0][0])
        assert torch.equal(dw.view(torch.int32), results[0][1].view(torch.int32))
    assert torch.isfinite(results[0][1]).all()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("H", [256, 512, 768, 1000, 1024, 1536, 2048, 2560, 4096, 5120, 6144, 8192])
def test_row_outputs_do_not_depend_on_T(device, H, gen):
    """Rows shared by two calls agree bitwise at every T: within a window and across every
    window edge of both forward routes (the streaming and the ring forward share a row group;
    on the GPU up to the last edge, 131072 rows at H 256), the plain route's edge into its
    wider small-T group included, which sums each row in its ring group's order
    (kernels/reduce.cuh, group_sum_pairs)."""
    if device == "cpu" and H != 2048:
        pytest.skip("CPU time budget of CI")
    windows = {route: cr.program_windows(route, H, sm=90)[route] for route in ("fwd", "fwd_residual")}
    edges = {a for route in windows for a, _, _ in windows[route]}
    big = 700 if device == "cpu" else max(8300, max(edges) + 3)
    x = make_rows(big, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
    r = make_rows(big, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
    g = make_rows(big, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.bfloat16, device, gen)
    w32 = make_weight(H, torch.float32, device, gen)
    y_big, s_big, h_big = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
    yp_big, sp_big = cr.cake_rmsnorm_train_forward(h_big, w, EPS)
    y32_big, s32_big = cr.cake_rmsnorm_train_forward(h_big, w32, EPS)
    dx_big, _ = cr.cake_rmsnorm_train_backward(g, h_big, w, s_big)
    # The residual route's group sums in the plain route's order (tests/cpp/pairs_twins.cpp).
    assert torch.equal(y_big, yp_big) and torch.equal(s_big, sp_big)
    ts = {1, 2, 3, 129, 513} | {e + d for e in edges if e > 0 for d in (0, 1)}
    for T in sorted(t for t in ts if t < big):
        y, s, h = cr.cake_rmsnorm_train_forward(x[:T], w, EPS, residual=r[:T])
        yp, sp = cr.cake_rmsnorm_train_forward(h_big[:T], w, EPS)
        y32, s32 = cr.cake_rmsnorm_train_forward(h_big[:T], w32, EPS)
        dx, _ = cr.cake_rmsnorm_train_backward(g[:T], h, w, s)
        assert torch.equal(y, y_big[:T]) and torch.equal(s, s_big[:T]) and torch.equal(h, h_big[:T]), T
        assert torch.equal(yp, yp_big[:T]) and torch.equal(sp, sp_big[:T]), T
        assert torch.equal(y32, y32_big[:T]) and torch.equal(s32, s32_big[:T]), T
        assert torch.equal(dx, dx_big[:T]), T


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(512, 4099), (6144, 4099), (131072, 37), (512, 1001), (2048, 255)])
def test_dw_bits_do_not_depend_on_grid(H, T, gen):
    """The dw reduction tree is a function of T alone: any grid (standing in for another SM
    count) gives the same bits, with row pairs (the last two shapes) or without."""
    x = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    outs = []
    for max_ctas in (0, 1, 7, 132, 1000):
        dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
        cr.ops.bwd_out(g, x, w, rstd, None, dx, dw, ws, max_ctas)
        outs.append((dx, dw))
    for dx, dw in outs[1:]:
        assert torch.equal(dx, outs[0][0])
        assert torch.equal(dw.view(torch.int32), outs[0][1].view(torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(512, 3), (2048, 4099), (6144, 1000), (5120, 70000), (131072, 37),
                                 # chunks of two rows: row pairs at H 512 (two groups a CTA), 1536 (odd
                                 # T) and 2048 (one group a CTA, doubled); one group a chunk beyond.
                                 # The finalize takes 8 columns a CTA up to H 1056 on an H200 (at most
                                 # 132 CTAs of 8), 32 beyond: both widths are here.
                                 (512, 1000), (1536, 255), (2048, 255), (6144, 256), (131072, 64),
                                 # Chunk counts that take 128 finalize lanes: 1024 (H 512, the held
                                 # half cap) and 4096 (H 256, the per-head view's width), 8 and 32
                                 # chunks a lane.
                                 (512, 4099), (256, 9001),
                                 # H 4096 past where its count holds at 256 (chunks of 3..4 rows).
                                 (4096, 777)])
@pytest.mark.parametrize("residual", [False, True])
def test_dw_bits_match_the_cpu_path(H, T, residual, gen):
    """dw's tree (chunks of T and H, Kahan within a chunk, Neumaier across) and its products
    are the same on the GPU and the CPU: the same bits, so every GPU model agrees as well."""
    x = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    gr = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    _, dw_gpu = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    _, dw_cpu = cr.cake_rmsnorm_train_backward(g.cpu(), x.cpu(), w.cpu(), rstd.cpu(),
                                               g_residual=None if gr is None else gr.cpu())
    assert torch.equal(dw_gpu.cpu().view(torch.int32), dw_cpu.view(torch.int32))


def _replay_dw(g, x, rstd, chunks):
    """The documented dw tree in NumPy float32 (every operation rounded once, no FMA): chunk c
    holds rows [floor(c T / chunks), floor((c + 1) T / chunks)), a Kahan sum of g * (x * rstd)
    over them in order, resolved (s - c); chunk k goes to lane k % L (L 128 from 1024 chunks,
    else 32) by Neumaier sums, lanes l + 32 q fold into lane l in order, an xor butterfly merges
    the 32 lanes, dw = s + c."""
    np = pytest.importorskip("numpy")
    f = np.float32
    T, H = g.shape
    prod = g.float().numpy() * (x.float().numpy() * rstd.numpy()[:, None])  # float32, one rounding each

    def kahan(rows):
        s, c = np.zeros(H, f), np.zeros(H, f)
        for r in rows:
            y = prod[r] - c
            t = s + y
            c = (t - s) - y
            s = t
        return s, c

    def neumaier(s, c, v):
        t = s + v
        c = c + np.where(np.abs(s) >= np.abs(v), (s - t) + v, (v - t) + s)
        return t, c

    def merge(s, c, s2, c2):
        t = s + s2
        e = np.where(np.abs(s) >= np.abs(s2), (s - t) + s2, (s2 - t) + s)
        return t, (c + c2) + e

    parts = []
    for k in range(chunks):
        s, c = kahan(range(k * T // chunks, (k + 1) * T // chunks))
        parts.append(s - c)
    lanes = 128 if chunks >= 1024 else 32
    ls, lc = [np.zeros(H, f) for _ in range(lanes)], [np.zeros(H, f) for _ in range(lanes)]
    for k, p in enumerate(parts):
        ls[k % lanes], lc[k % lanes] = neumaier(ls[k % lanes], lc[k % lanes], p)
    for l in range(32):
        for q in range(1, lanes // 32):
            ls[l], lc[l] = merge(ls[l], lc[l], ls[l + 32 * q], lc[l + 32 * q])
    o = 16
    while o:
        ls[:32], lc[:32] = zip(*[merge(ls[j], lc[j], ls[j ^ o], lc[j ^ o]) for j in range(32)])
        ls, lc = list(ls), list(lc)
        o //= 2
    return torch.from_numpy(ls[0] + lc[0])


@pytest.mark.parametrize("H,T", [(512, 6001), (1536, 4001), (2048, 1500), (6144, 300)])
def test_cpu_dw_is_the_documented_tree(H, T, gen):
    """The CPU path (which the GPU matches bit for bit) computes the tree the C API describes
    (cake_rmsnorm_backward_chunks), replayed here operation by operation."""
    from cake_rmsnorm._lib import backward_chunks
    x = make_rows(T, H, torch.bfloat16, "cpu", 1.0, None, 0, gen)
    g = make_rows(T, H, torch.bfloat16, "cpu", 1.0, None, 0, gen)
    w = make_weight(H, torch.bfloat16, "cpu", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    _, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    want = _replay_dw(g, x, rstd, backward_chunks(T, H))
    assert torch.equal(dw.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("H", [256, 512, 768, 1024, 1536])
def test_widened_weight_gives_the_same_bits(device, H, gen):
    """A BF16 w and the same w stored as FP32 hold the same values, so y, rstd and h_new have
    the same bits with either, in every window. On the GPU the BF16-w launch of a narrow group
    runs the lean row code (forward.cuh, kLean: bit-operation widening, a power-of-two width's
    mean by its exact reciprocal) and the FP32-w launch the previous code."""
    windows = cr.program_windows("fwd", H, sm=90)["fwd"]
    ts = [1, 129] if device == "cpu" else sorted({1, 129, 4097} | {a + 1 for a, _, _ in windows if 0 < a < 20000})
    w = make_weight(H, torch.bfloat16, device, gen)
    for T in ts:
        x = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
        r = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()
        for res in (None, r):
            a = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=res)
            b = cr.cake_rmsnorm_train_forward(x, w.float(), EPS, residual=res)
            for u, v in zip(a, b):
                assert torch.equal(u, v), (H, T, res is None)
