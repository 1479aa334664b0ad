"""Property-based tests: random shapes, layouts, dtypes and caller buffers. Every call either
matches the FP64 reference or raises the documented error, and a refused call modifies no
input, output or workspace (all poisoned beforehand). CAKE_FUZZ_EXAMPLES sets the budget,
CAKE_FUZZ_DEVICE the device ("cpu" by default; "cuda" runs the same cases through the GPU
kernels, every layout built on the device itself)."""

import math
import os

import pytest
import torch

import cake_rmsnorm as cr
from reference import assert_close_unit, ref_backward, ref_forward, rel_l2

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("CAKE_FUZZ_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEVICE = os.environ.get("CAKE_FUZZ_DEVICE", "cpu")
if DEVICE != "cpu" and not torch.cuda.is_available():
    pytest.skip("CAKE_FUZZ_DEVICE names a CUDA device and none is present", allow_module_level=True)
POISON = 7.0
LAYOUTS = ["contig", "row_stride", "offset", "transposed", "nd", "nd_bad", "one_d"]


def make(T, H, dtype, layout, gen, a=1):
    """A [T, H]-like tensor in the given layout (N-D layouts are [a, T // a, H])."""
    rnd = lambda *s: torch.randn(*s, generator=gen).to(dtype).to(DEVICE)  # noqa: E731
    if layout == "contig":
        return rnd(T, H)
    if layout == "row_stride":
        return rnd(T, H + 5)[:, :H]
    if layout == "offset":
        return rnd(T * H + 3)[3:].view(T, H)
    if layout == "transposed":
        return rnd(H, T).t()
    if layout == "nd":
        return rnd(a, T // a, H)
    if layout == "nd_bad":
        return rnd(T // a, a, H).transpose(0, 1)
    return rnd(H)  # one_d


@st.composite
def forward_cases(draw):
    H = draw(st.one_of(st.integers(1, 96).map(lambda k: 8 * k), st.sampled_from([4, 12, 100, 1001])))
    layout = draw(st.sampled_from(LAYOUTS))
    a = draw(st.integers(1, 4))
    T = 1 if layout == "one_d" else a * draw(st.integers(0, 12))
    return dict(
        H=H, T=T, a=a, layout=layout,
        dtype=draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.float64])),
        wkind=draw(st.sampled_from(["same", "fp32", "fp32", "other16", "fp64"])),
        residual=draw(st.sampled_from([None, "same", "contig_other_layout", "wrong_dtype"])),
        outs=draw(st.sampled_from([None, "dense", "strided", "overlap_x", "overlap_each_other", "wrong_dtype"])),
        eps=draw(st.sampled_from([1e-6, 1e-5, 0.0, -1.0, math.nan, math.inf])),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
    )


def _weight(H, dtype, wkind, gen):
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    wd = {"same": dtype, "fp32": torch.float32, "other16": other, "fp64": torch.float64}[wkind]
    return (1 + 0.1 * torch.randn(H, generator=gen)).to(wd).to(DEVICE)


def expected_forward_error(c, x, w, r, outs):
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return TypeError
    if c["H"] % 8:
        return ValueError
    # FP32 activations take a weight of any of the three dtypes, 16-bit ones their own or FP32.
    if w.dtype not in (x.dtype, torch.float32) and not (x.dtype == torch.float32 and w.dtype != torch.float64):
        return TypeError
    if not (c["eps"] >= 0 and math.isfinite(c["eps"])):
        return ValueError
    if r is not None and r.dtype != x.dtype:
        return TypeError
    if outs and outs.get("kind") == "wrong_dtype":
        return TypeError
    if outs and outs["kind"] == "overlap_x" and x.numel():
        return ValueError
    if outs and outs["kind"] == "overlap_each_other" and r is not None and x.numel():
        return ValueError  # y and h_new in one buffer (without a residual there is no h_new)
    return None  # every layout is served (N-D inputs whose rows do not collapse through one copy)


def _outputs(c, x, gen):
    kind = c["outs"]
    if kind is None:
        return None
    shape, lead = x.shape, x.shape[:-1]
    dt = torch.float64 if kind == "wrong_dtype" else x.dtype
    if kind == "dense":
        y, h = torch.empty(shape, dtype=dt, device=DEVICE), torch.empty(shape, dtype=dt, device=DEVICE)
    elif kind == "strided":  # odd storage offsets and transposed storage: served through copies
        y = torch.empty(x.numel() + 1, dtype=dt, device=DEVICE)[1:].view(shape)
        h = torch.empty(tuple(reversed(shape)), dtype=dt, device=DEVICE).permute(*reversed(range(len(shape))))
    elif kind == "overlap_x":
        y, h = x, torch.empty(shape, dtype=dt, device=DEVICE)
    elif kind == "overlap_each_other":
        y = torch.empty(shape, dtype=dt, device=DEVICE)
        h = y
    else:
        y, h = torch.empty(shape, dtype=dt, device=DEVICE), torch.empty(shape, dtype=dt, device=DEVICE)
    s = torch.empty(lead, dtype=torch.float32, device=DEVICE)
    for t in (y, h, s):
        if t is not x and t.numel():
            t.fill_(POISON)
    return dict(kind=kind, out=y, rstd=s, residual_out=h)


@SETTINGS
@given(forward_cases())
def test_forward_fuzz(c):
    gen = torch.Generator().manual_seed(c["seed"])
    x = make(c["T"], c["H"], c["dtype"], c["layout"], gen, c["a"])
    w = _weight(c["H"], c["dtype"], c["wkind"], gen)
    r = None
    if c["residual"] == "same":
        r = make(c["T"], c["H"], c["dtype"], c["layout"], gen, c["a"])
    elif c["residual"] == "contig_other_layout":
        r = torch.randn(x.shape, generator=gen).to(c["dtype"]).to(DEVICE)
    elif c["residual"] == "wrong_dtype":
        r = torch.randn(x.shape, generator=gen).to(torch.float64).to(DEVICE)
    outs = _outputs(c, x, gen)
    if outs is not None and r is None:
        outs["residual_out"] = None
    kwargs = {} if outs is None else {k: v for k, v in outs.items() if k != "kind"}
    err = expected_forward_error(c, x, w, r, outs)
    inputs = [t.clone() for t in (x, w) + ((r,) if r is not None else ())]
    if err is not None:
        snapshot = {k: v.clone() for k, v in kwargs.items() if v is not None}
        with pytest.raises(err):
            cr.cake_rmsnorm_train_forward(x, w, c["eps"], residual=r, **kwargs)
        for k, v in snapshot.items():
            assert torch.equal(kwargs[k], v) or (torch.isnan(v).all() and torch.isnan(kwargs[k]).all()), k
        for t, t0 in zip((x, w) + ((r,) if r is not None else ()), inputs):
            assert torch.equal(t, t0)
        return
    res = cr.cake_rmsnorm_train_forward(x, w, c["eps"], residual=r, **kwargs)
    for t, t0 in zip((x, w) + ((r,) if r is not None else ()), inputs):
        assert torch.equal(t, t0), "inputs are never written"
    y_ref, rstd_ref, h_ref = ref_forward(x, w, c["eps"], r)
    y, rstd = res[0], res[1]
    assert y.shape == x.shape and rstd.shape == x.shape[:-1]
    if outs is not None:
        assert y is outs["out"] and rstd is outs["rstd"]
    if r is not None:
        assert torch.equal(res[2], h_ref)
    if x.numel() and c["eps"] > 0:
        assert_close_unit(y, y_ref, "y")
        assert rel_l2(rstd, rstd_ref) <= 1e-5


@st.composite
def backward_cases(draw):
    H = 8 * draw(st.integers(1, 96))
    layout = draw(st.sampled_from([l for l in LAYOUTS if l != "nd_bad"]))
    a = draw(st.integers(1, 4))
    T = 1 if layout == "one_d" else a * draw(st.integers(0, 12))
    return dict(
        H=H, T=T, a=a, layout=layout, dtype=draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32])),
        wkind=draw(st.sampled_from(["same", "fp32"])),
        g_residual=draw(st.booleans()),
        fault=draw(st.sampled_from([None, None, None, "ws_small", "rstd_shape", "rstd_dtype", "g_shape", "g_dtype",
                                    "dw_dtype", "dx_overlaps_g", "accumulate_without_dw"])),
        outs=draw(st.sampled_from([None, "dense", "strided", "accumulate"])),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
    )


@SETTINGS
@given(backward_cases())
def test_backward_fuzz(c):
    gen = torch.Generator().manual_seed(c["seed"])
    x = make(c["T"], c["H"], c["dtype"], c["layout"], gen, c["a"])
    g = make(c["T"], c["H"], c["dtype"], c["layout"], gen, c["a"])
    w = _weight(c["H"], c["dtype"], c["wkind"], gen)
    gr = torch.randn(x.shape, generator=gen).to(c["dtype"]).to(DEVICE) if c["g_residual"] else None
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    rows = max(x.numel() // c["H"], 0)
    kw = {"g_residual": gr}
    if c["outs"] in ("dense", "accumulate"):
        kw.update(dx=torch.full(x.shape, POISON, dtype=x.dtype, device=DEVICE), dw=torch.full((c["H"],), POISON, device=DEVICE))
    elif c["outs"] == "strided":
        kw.update(dx=torch.full((x.numel() + 1,), POISON, dtype=x.dtype, device=DEVICE)[1:].view(x.shape),
                  dw=torch.full((c["H"], 2), POISON, device=DEVICE)[:, 1])
    if c["outs"] == "accumulate":
        kw["accumulate"] = True
    ws_bytes = cr.cake_rmsnorm_train_backward_workspace_bytes(rows, c["H"])
    kw["workspace"] = torch.full((max(ws_bytes, 16),), 0xFF, dtype=torch.uint8, device=DEVICE)

    err = None
    f = c["fault"]
    if f == "ws_small" and ws_bytes > 0:
        kw["workspace"] = torch.full((ws_bytes - 1,), 0xFF, dtype=torch.uint8, device=DEVICE)
        err = ValueError
    elif f == "rstd_shape":
        rstd = torch.ones(rows + 1, device=DEVICE)
        err = ValueError
    elif f == "rstd_dtype":
        rstd = rstd.double()
        err = TypeError
    elif f == "g_shape":
        g = torch.randn(x.shape[:-1] + (c["H"] + 8,), generator=gen).to(c["dtype"]).to(DEVICE)
        err = ValueError
    elif f == "g_dtype":
        g = g.double()
        err = TypeError
    elif f == "dw_dtype":
        kw["dw"] = torch.full((c["H"],), POISON, dtype=torch.float64, device=DEVICE)
        err = TypeError
    elif f == "dx_overlaps_g" and g.numel():
        kw["dx"] = g
        err = ValueError
    elif f == "accumulate_without_dw":
        kw["accumulate"] = True
        kw.pop("dw", None)
        err = ValueError

    watched = {k: v.clone() for k, v in kw.items() if isinstance(v, torch.Tensor)}
    inputs = [t.clone() for t in (g, x, w, rstd)]
    if err is not None:
        with pytest.raises(err):
            cr.cake_rmsnorm_train_backward(g, x, w, rstd, **kw)
        for k, v in watched.items():
            assert torch.equal(kw[k], v) or (v.dtype.is_floating_point and torch.equal(kw[k].isnan(), v.isnan())), k
        for t, t0 in zip((g, x, w, rstd), inputs):
            assert torch.equal(t, t0)
        return
    start_dw = kw["dw"].clone() if "dw" in kw else None
    dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, **kw)
    for t, t0 in zip((g, x, w, rstd), inputs):
        assert torch.equal(t, t0), "inputs are never written"
    dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
    if gr is not None:
        dx_ref = dx_ref + gr.double()
    if c["outs"] == "accumulate":
        dw_ref = dw_ref + start_dw.double()
    assert dx.shape == x.shape and dw.shape == (c["H"],)
    if x.numel():
        assert_close_unit(dx, dx_ref, "dx")
        assert rel_l2(dw, dw_ref) <= 1e-4


@SETTINGS
@given(H=st.integers(1, 512).map(lambda k: 8 * k), T=st.integers(2, 300), data=st.data(),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
       wdtype=st.sampled_from(["x", torch.float32]), residual=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_a_rows_outputs_do_not_depend_on_the_call(H, T, data, dtype, wdtype, residual, seed):
    """Any slice of a call's rows, run as a call of its own (another T, another program window
    on the GPU), gives those rows' y, rstd, h_new and dx bitwise (#38: one order a width)."""
    gen = torch.Generator().manual_seed(seed)
    lo = data.draw(st.integers(0, T - 1))
    hi = data.draw(st.integers(lo + 1, T))
    rnd = lambda: torch.randn(T, H, generator=gen).to(dtype).to(DEVICE)  # noqa: E731
    x, g = rnd(), rnd()
    r, gr = (rnd(), rnd()) if residual else (None, None)
    w = (1 + 0.1 * torch.randn(H, generator=gen)).to(dtype if wdtype == "x" else wdtype).to(DEVICE)
    cut = lambda t: None if t is None else t[lo:hi]  # noqa: E731

    def run(x, r, g, gr):
        out = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
        dx, _ = cr.cake_rmsnorm_train_backward(g, out[2] if residual else x, w, out[1], g_residual=gr)
        return (*out, dx)

    whole, part = run(x, r, g, gr), run(cut(x), cut(r), cut(g), cut(gr))
    bits = lambda t: t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)  # noqa: E731
    for name, a, b in zip(("y", "rstd", "h_new", "dx"), whole, part):
        assert torch.equal(bits(a[lo:hi]), bits(b)), (name, H, T, lo, hi)
