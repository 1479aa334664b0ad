"""Public API: refusals (one per branch), layouts, caller outputs, introspection."""


import pytest
import torch

import cake_rmsnorm as cr
from conftest import devices
from reference import assert_close_unit, make_rows, make_weight, ref_forward

EPS = 1e-6
BF = torch.bfloat16


def _xw(device="cpu", T=4, H=64):
    return torch.randn(T, H, dtype=BF, device=device), torch.ones(H, dtype=BF, device=device)


# ---------------------------------------------------------------- forward refusals
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(x=[1.0]), TypeError, "x must be a torch.Tensor"),
        (dict(x=torch.randn(4, 64, dtype=torch.float64)), TypeError,
         "x must be torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
        (dict(out_dtype=torch.float16), TypeError, "out_dtype must be x.s dtype"),
        (dict(x=torch.tensor(1.0, dtype=BF)), ValueError, "at least one dimension"),
        (dict(x=torch.randn(4, 60, dtype=BF), w=torch.ones(60, dtype=BF)), ValueError, "multiple of 8, got 60"),
        (dict(x=torch.empty(4, 64, dtype=BF, device="meta")), ValueError, "x must be on a CPU or CUDA device"),
        (dict(w=torch.ones(64, dtype=torch.float16)), TypeError, "w must be x's dtype"),
        (dict(w=torch.ones(32, dtype=BF)), ValueError, r"w must be 1-D \[hidden\]"),
        (dict(w=torch.ones(2, 64, dtype=BF)), ValueError, r"w must be 1-D \[hidden\]"),
        (dict(w=None), TypeError, "w must be a torch.Tensor"),
        (dict(eps="1e-6"), TypeError, "eps must be a float"),
        (dict(eps=True), TypeError, "eps must be a float"),
        (dict(eps=float("nan")), ValueError, "eps must be finite and >= 0"),
        (dict(eps=-1.0), ValueError, "eps must be finite and >= 0"),
        (dict(residual=torch.randn(4, 64)), TypeError, "residual must have x's dtype"),
        (dict(residual=torch.randn(4, 72, dtype=BF)), ValueError, "residual must have x's shape"),
        (dict(residual_out=torch.empty(4, 64, dtype=BF)), ValueError, "residual_out is only produced with residual"),
        (dict(out=torch.empty(4, 64)), TypeError, "out must be torch.bfloat16"),
        (dict(out=torch.empty(4, 72, dtype=BF)), ValueError, "out must have shape"),
        (dict(rstd=torch.empty(4, dtype=BF)), TypeError, "rstd must be torch.float32"),
        (dict(rstd=torch.empty(5)), ValueError, "rstd must have shape"),
        (dict(w=torch.ones(64, dtype=BF, device="meta")), ValueError, "w must be on cpu like x"),
        (dict(residual=torch.empty(4, 64, dtype=BF, device="meta")), ValueError, "residual must be on cpu like x"),
        (dict(out=torch.empty(4, 64, dtype=BF, device="meta")), ValueError, "out must be on cpu like x"),
        (dict(eps=float("inf")), ValueError, "eps must be finite and >= 0"),
    ],
)
def test_forward_refusals(kwargs, exc, match):
    x, w = _xw()
    args = dict(x=x, w=w, eps=EPS)
    args.update(kwargs)
    x, w, eps = args.pop("x"), args.pop("w"), args.pop("eps")
    with pytest.raises(exc, match=match):
        cr.cake_rmsnorm_train_forward(x, w, eps, **args)


def test_refusal_writes_nothing():
    x, w = _xw()
    out = torch.full((4, 64), 7.0, dtype=BF)
    rstd = torch.full((4,), 7.0)
    with pytest.raises(ValueError):
        cr.cake_rmsnorm_train_forward(x, w, -1.0, out=out, rstd=rstd)
    assert (out == 7).all() and (rstd == 7).all()
    dx = torch.full((4, 64), 7.0, dtype=BF)
    dw = torch.full((64,), 7.0)
    with pytest.raises(ValueError, match="workspace too small"):
        cr.cake_rmsnorm_train_backward(x, x, w, rstd, dx=dx, dw=dw, workspace=torch.empty(4, dtype=torch.uint8))
    assert (dx == 7).all() and (dw == 7).all()


def test_overlapping_outputs_refused():
    x, w = _xw()
    buf = torch.empty(8, 64, dtype=BF)
    with pytest.raises(ValueError, match="out overlaps residual_out"):
        cr.cake_rmsnorm_train_forward(x, w, EPS, residual=x.clone(), out=buf[:4], residual_out=buf[2:6])
    with pytest.raises(ValueError, match="out overlaps x"):
        cr.cake_rmsnorm_train_forward(x, w, EPS, out=x)


@pytest.mark.parametrize("device", devices())
def test_any_layout_on_every_entry_point(device):
    """Permuted and strided N-D inputs (leading dims that do not collapse, a feature dim that is not
    contiguous) are served by the functions, autograd and the module, with the contiguous call's bits."""
    w = torch.randn(64, dtype=BF, device=device)
    for x in (torch.randn(4, 6, 64, dtype=BF, device=device).transpose(0, 1),
              torch.randn(4, 64, 6, dtype=BF, device=device).transpose(1, 2)):
        xc = x.contiguous()
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
        yc, rstdc = cr.cake_rmsnorm_train_forward(xc, w, EPS)
        assert torch.equal(y, yc) and torch.equal(rstd, rstdc)
        g = torch.randn_like(xc).transpose(0, 1).contiguous().transpose(0, 1)  # another odd layout
        dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
        dxc, dwc = cr.cake_rmsnorm_train_backward(g.contiguous(), xc, w, rstdc)
        assert torch.equal(dx, dxc) and torch.equal(dw, dwc)
        for fn in (lambda t: cr.cake_rmsnorm(t, w, EPS), cr.RMSNorm(64, eps=EPS).to(device, BF)):
            a, b = x.detach().requires_grad_(), xc.detach().requires_grad_()
            ya, yb = fn(a), fn(b)
            assert torch.equal(ya, yb)
            ya.backward(g)
            yb.backward(g)
            assert torch.equal(a.grad, b.grad)


@pytest.mark.gpu
def test_device_mismatch_refused():
    x, w = _xw()
    with pytest.raises(ValueError, match="w must be on cpu like x"):
        cr.cake_rmsnorm_train_forward(x, w.cuda(), EPS)
    with pytest.raises(ValueError, match="workspace must be on cuda:0 like x"):
        xc, wc = _xw("cuda")
        _, rstd = cr.cake_rmsnorm_train_forward(xc, wc, EPS)
        cr.cake_rmsnorm_train_backward(xc, xc, wc, rstd, workspace=torch.empty(1 << 20, dtype=torch.uint8))


# ---------------------------------------------------------------- backward refusals
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(g=torch.randn(4, 64)), TypeError, "g must have x's dtype"),
        (dict(g=torch.randn(3, 64, dtype=BF)), ValueError, "g must have x's shape"),
        (dict(rstd=torch.empty(4, dtype=BF)), TypeError, "rstd must be torch.float32"),
        (dict(rstd=torch.empty(3)), ValueError, "rstd must have x's leading shape"),
        (dict(rstd=None), TypeError, "rstd must be a torch.Tensor"),
        (dict(g_residual=torch.randn(4, 64)), TypeError, "g_residual must have x's dtype"),
        (dict(deterministic=1), TypeError, "deterministic must be a bool"),
        (dict(workspace=torch.empty(8, dtype=torch.uint8)), ValueError, "workspace too small"),
        (dict(workspace=[0]), TypeError, "workspace must be a torch.Tensor"),
        (dict(workspace=torch.empty(1 << 16, dtype=torch.uint8)[1:]), ValueError, "workspace must be 16-byte aligned"),
        (dict(workspace=torch.empty(1 << 16, dtype=torch.uint8)[::2]), ValueError, "workspace must be contiguous"),
        (dict(dx=torch.empty(4, 64)), TypeError, "dx must be torch.bfloat16"),
        (dict(dw=torch.empty(64, dtype=BF)), TypeError, "dw must be torch.float32"),
        (dict(dw=torch.empty(63)), ValueError, "dw must have shape"),
        (dict(g_residual=torch.randn(4, 72, dtype=BF)), ValueError, "g_residual must have x's shape"),
        (dict(g=torch.randn(4, 64, dtype=BF, device="meta")), ValueError, "g must be on cpu like x"),
        (dict(rstd=torch.empty(4, device="meta")), ValueError, "rstd must be on cpu like x"),
        (dict(workspace=torch.empty(1 << 16, dtype=torch.uint8, device="meta")), ValueError,
         "workspace must be on cpu like x"),
        (dict(weight_grad=1), TypeError, "weight_grad must be a bool"),
        (dict(accumulate="yes"), TypeError, "accumulate must be a bool"),
        (dict(dw=torch.empty(64), weight_grad=False), ValueError, "dw and accumulate need weight_grad=True"),
        (dict(accumulate=True), ValueError, "accumulate needs dw"),
    ],
)
def test_backward_refusals(kwargs, exc, match):
    x, w = _xw()
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    args = dict(g=torch.randn_like(x), x=x, w=w, rstd=rstd)
    args.update(kwargs)
    g, x, w, rstd = args.pop("g"), args.pop("x"), args.pop("w"), args.pop("rstd")
    with pytest.raises(exc, match=match):
        cr.cake_rmsnorm_train_backward(g, x, w, rstd, **args)


def test_numpy_scalars_and_cudaless_refusals():
    np = pytest.importorskip("numpy")
    assert cr.cake_rmsnorm_train_backward_workspace_bytes(np.int64(64), np.int32(512)) == \
        cr.cake_rmsnorm_train_backward_workspace_bytes(64, 512)
    x, w = _xw()
    assert torch.equal(cr.cake_rmsnorm(x, w, np.float32(1e-6)), cr.cake_rmsnorm(x, w, float(np.float32(1e-6))))
    with pytest.raises(TypeError, match="eps must be a float"):
        cr.cake_rmsnorm(x, w, np.bool_(True))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            cr.program_windows("fwd", 512)
        with pytest.raises(ValueError, match="no CUDA device"):
            cr.cake_rmsnorm_train_backward_workspace(8, 512, device="cuda")


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: cr.cake_rmsnorm_train_backward_workspace_bytes(-1, 64), ValueError, "rows must be >= 0"),
        (lambda: cr.cake_rmsnorm_train_backward_workspace_bytes(4, 60), ValueError, "hidden must be a positive multiple of 8"),
        (lambda: cr.cake_rmsnorm_train_backward_workspace_bytes(4.0, 64), TypeError, "rows must be an int"),
        (lambda: cr.cake_rmsnorm_train_backward_workspace_bytes(4, 64, "meta"), ValueError, "device must be a CPU or CUDA"),
        (lambda: cr.cake_rmsnorm_train_backward_workspace_bytes(4, 64, 1.5), TypeError, "device must be"),
        (lambda: cr.program_windows("fwd", 60, sm=90), ValueError, "hidden must be a positive multiple of 8"),
        (lambda: cr.program_windows("nope", 64, sm=90), ValueError, "route must be one of"),
        (lambda: cr.program_windows("fwd", 64, sm=80), ValueError, "sm must be one of"),
        (lambda: cr.program_windows("fwd", "64", sm=90), TypeError, "hidden must be an int"),
        (lambda: cr.weight_dtypes("64"), TypeError, "hidden must be an int"),
        (lambda: cr.cake_rmsnorm(torch.randn(4, 64).double(), torch.ones(64), EPS), TypeError,
         "x must be torch.bfloat16"),
        (lambda: cr.cake_rmsnorm(*_xw(), EPS, deterministic=None), TypeError, "deterministic must be a bool"),
    ],
)
def test_other_refusals(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------- layouts and outputs
@pytest.mark.parametrize("device", devices())
def test_layouts_in_place_and_materialised(device, gen):
    H = 256
    w = make_weight(H, BF, device, gen)
    base = make_rows(32, 2 * H, BF, device, 1.0, None, 0, gen)
    cases = {
        "row-strided": base[:, :H],
        "odd offset": base[:, 1:H + 1],
        "transposed": make_rows(H, 32, BF, device, 1.0, None, 0, gen).t(),
        "3-D": base.view(4, 8, 2 * H)[:, :, :H],
        "1-D": base[0, :H],
        "expanded": base[0, :H].expand(5, H),
    }
    for name, x in cases.items():
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
        y_ref, rstd_ref, _ = ref_forward(x.cpu(), w.cpu(), EPS)
        assert y.shape == x.shape and rstd.shape == x.shape[:-1], name
        assert_close_unit(y, y_ref, f"y ({name})")


@pytest.mark.parametrize("device", devices())
def test_caller_outputs_any_layout(device, gen):
    T, H = 16, 128
    x = make_rows(T, H, BF, device, 1.0, None, 0, gen)
    r = make_rows(T, H, BF, device, 1.0, None, 0, gen)
    w = make_weight(H, BF, device, gen)
    y0, s0, h0 = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
    # dense, strided-aligned, transposed storage
    out_t = torch.empty(H, T, dtype=BF, device=device).t()
    rstd_s = torch.empty(T, 2, device=device)[:, 0]
    h_wide = torch.empty(T, 2 * H, dtype=BF, device=device)[:, :H]
    y, s, h = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r, out=out_t, rstd=rstd_s, residual_out=h_wide)
    assert y is out_t and s is rstd_s and h is h_wide
    assert torch.equal(y, y0) and torch.equal(s, s0) and torch.equal(h, h0)
    g = make_rows(T, H, BF, device, 1.0, None, 0, gen)
    dx0, dw0 = cr.cake_rmsnorm_train_backward(g, h0, w, s0)
    dx = torch.empty(H, T, dtype=BF, device=device).t()
    dw = torch.empty(H, 2, device=device)[:, 1]
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, device)
    rdx, rdw = cr.cake_rmsnorm_train_backward(g, h0, w, s0, dx=dx, dw=dw, workspace=ws)
    assert rdx is dx and rdw is dw
    assert torch.equal(dx, dx0) and torch.equal(dw, dw0)


@pytest.mark.parametrize("device", devices())
def test_zero_tokens(device):
    for shape in [(0, 64), (2, 0, 64)]:
        x = torch.empty(shape, dtype=BF, device=device)
        w = torch.ones(64, dtype=BF, device=device)
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
        assert y.shape == shape and rstd.shape == shape[:-1]
        y, rstd, h = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=x.clone())
        dx, dw = cr.cake_rmsnorm_train_backward(x, x, w, rstd)
        assert dx.shape == shape and torch.equal(dw.cpu(), torch.zeros(64))
        assert cr.cake_rmsnorm_train_backward_workspace_bytes(0, 64) == 0


def test_introspection():
    assert cr.weight_dtypes(4096) == (torch.bfloat16, torch.float16, torch.float32)
    assert cr.weight_dtypes(100) == ()
    for sm in (90, 100, 103, 107):
        table = cr.program_windows(hidden=6144, sm=sm)
        assert set(table) == set(cr.ROUTES)
        for route, windows in table.items():
            assert windows[0][0] == 0 and windows[-1][1] is None, route
            for (a0, b0, _), (a1, _, _) in zip(windows, windows[1:]):
                assert b0 == a1
    assert cr.cake_rmsnorm_det_train_forward is cr.cake_rmsnorm_train_forward
    assert cr.cake_rmsnorm_det_train_backward is cr.cake_rmsnorm_train_backward
    import os
    assert os.path.exists(os.path.join(cr.get_include(), "cake_rmsnorm", "cake_rmsnorm.h"))
    assert os.path.exists(cr.get_library_path())


def test_forward_routes_take_their_own_rules():
    """The plain forward aims at 6 vectors a thread where a row splits evenly into them, the
    residual forward at 4 (its ring holds two streams); widths with a 4-vector split share it."""
    def prog(route, H):  # the ring program (streaming windows run its row group with stages 0)
        return next(n for _, _, n in cr.program_windows(route, H, sm=90)[route] if "_s0" not in n)
    assert prog("fwd", 6144) == "general_t128x2_v6_s2" and prog("fwd_residual", 6144) == "general_t256x1_v3_s2"
    assert prog("fwd", 1536) == "general_t32x8_v6_s2" and prog("fwd_residual", 1536) == "general_t64x4_v3_s2"
    for H in (2048, 4096, 8192):
        assert prog("fwd", H) == prog("fwd_residual", H), H
    assert prog("fwd_residual", 512) == "general_t16x8_v4_s2"  # the plain route streams every T there


def test_forward_windows_stream_around_the_ring():
    """The streaming forward takes small T (a grid of <= 512 CTAs reading <= 4M elements) and
    T * H >= 2^24 where a CTA reads >= 16 KB (2^25 where its CTA is widened to read that);
    VPT 6 programs stream only from 2^24 on the plain route, unwidened. Before them the plain
    route streams a wider row group (VPT target 3, 32..256 threads) up to that group's own small
    bounds (at every T for H 768; not where the ring's group is an exact warp, H 1024); every
    other window of a width and route shares one row group. The backward keeps one window."""
    def win(route, H):
        return cr.program_windows(route, H, sm=90)[route]
    assert win("fwd", 4096) == [(0, 512, "general_t256x1_v2_s0"), (512, 1024, "general_t128x2_v4_s0"),
                                (1024, 4095, "general_t128x2_v4_s2"), (4095, None, "general_t128x2_v4_s0")]
    assert win("fwd_residual", 4096) == [(0, 512, "general_t128x2_v4_s0"), (512, 4095, "general_t128x2_v4_s2"),
                                         (4095, None, "general_t128x2_v4_s0")]
    # Narrow exact rows: past the first streaming window its group takes 4 rows (programs.h,
    # multirow_streaming), in place of the ring; one row group at every T.
    assert win("fwd", 512) == [(0, 4096, "general_t32x8_v2_s0"), (4096, None, "general_t32x4_v2_s0_r4")]
    assert win("fwd", 256) == [(0, 8192, "general_t8x16_v4_s0"), (8192, None, "general_t8x16_v4_s0_r4")]
    assert win("fwd_residual", 512) == [(0, 4096, "general_t16x8_v4_s0"), (4096, 32767, "general_t16x8_v4_s2"),
                                        (32767, None, "general_t16x8_v4_s0")]
    assert win("fwd", 2048) == [(0, 1024, "general_t128x2_v2_s0"), (1024, 2048, "general_t64x4_v4_s0"),
                                (2048, 8191, "general_t64x4_v4_s2"), (8191, None, "general_t64x4_v4_s0")]
    assert win("fwd", 6144) == [(0, 512, "general_t256x1_v3_s0"), (512, 2730, "general_t128x2_v6_s2"),
                                (2730, None, "general_t128x2_v6_s0")]
    assert win("fwd", 1536) == [(0, 2048, "general_t64x4_v3_s0"), (2048, 10922, "general_t32x8_v6_s2"),
                                (10922, None, "general_t32x8_v6_s0")]
    # H 768: the wider group (an exact warp) at every T, the ring never streaming; H 1024: no wider
    # group, the ring's own exact warp streams the small T.
    assert win("fwd", 768) == [(0, None, "general_t32x8_v3_s0")]
    assert win("fwd", 1024) == [(0, 4096, "general_t32x8_v4_s0"), (4096, None, "general_t32x4_v4_s0_r4")]
    assert win("fwd", 8192)[0] == (0, 512, "general_t256x1_v4_s0")  # no 512-thread group: not measured
    assert win("fwd_residual", 6144) == [(0, 341, "general_t256x1_v3_s0"), (341, 2730, "general_t256x1_v3_s2"),
                                         (2730, None, "general_t256x1_v3_s0")]
    assert len(win("bwd", 4096)) == 1 and len(win("bwd_residual", 512)) == 1
    for H in (8, 64, 256, 1000, 8192, 16384, 32768, 131072):
        for route in ("fwd", "fwd_residual"):
            w = win(route, H)
            assert w[0][0] == 0 and w[-1][1] is None and all(a[1] == b[0] for a, b in zip(w, w[1:])), (route, H)
            groups = [(v.group["threads_per_row"], v.group["vectors_per_thread"]) for v in w]
            rest = groups[1:] if route == "fwd" and len(groups) > 1 and groups[0] != groups[1] else groups
            assert len(set(rest)) == 1, (route, H)  # one row group (tpr, VPT); CTAs may differ


def test_workspace_sizing():
    b = cr.cake_rmsnorm_train_backward_workspace_bytes
    for H in (128, 512, 4096, 6144):
        sat = cr.saturating_workspace_rows(H)
        sizes = [b(t, H) for t in range(1, 2 * sat, 7)]
        assert sizes == sorted(sizes), "nondecreasing in rows"
        assert b(sat, H) == b(10 ** 7, H), "saturates"
        assert b(sat - 1, H) < b(sat, H), "grows up to the saturating count: it is the first"
    ws = cr.cake_rmsnorm_train_backward_workspace(100, 4096)
    assert ws.dtype == torch.uint8 and ws.numel() >= b(100, 4096) and (ws == 0).all()
