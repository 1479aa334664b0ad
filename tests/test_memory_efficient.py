"""The memory-efficient mode (docs/python_api.md#memory-efficient): the forward saves y instead of
x, and the backward rebuilds xhat = y (1 / w); where a weight column lies outside the rebuild range
the call saves x after all (the standard path's gradients, bit for bit), and the kernels divide
by NaN there, so no call returns a silently biased gradient. FP64 references on fresh data."""

import math
import warnings

import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm import RMSNorm, _memory
from checkout import benchmark, load
from reference import assert_close_unit, rel_l2, ref_backward

ops = torch.ops.cake_rmsnorm
ME_BENCH, needs_bench = benchmark("memory_efficient")
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# One rounding of y's dtype (unit roundoff): the rebuilt xhat's error, and so dw's rel L2 bound.
U = {BF16: 2.0 ** -9, FP16: 2.0 ** -12, FP32: 2.0 ** -24}


def _saved_y(out):
    """Whether out's node saved out itself (y) rather than its input."""
    return out.grad_fn.saved_tensors[0].data_ptr() == out.data_ptr()


def _run(x, w, g, me, **kw):
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    y = cr.cake_rmsnorm(x, w, 1e-6, memory_efficient=me, **kw)
    saved_y = _saved_y(y)
    y.backward(g)
    return y.detach(), x.grad, w.grad, saved_y


@pytest.mark.parametrize("act,wd", [(BF16, BF16), (BF16, FP32), (FP16, FP16), (FP16, FP32), (FP32, FP32)])
@pytest.mark.parametrize("rows,hidden", [(1, 64), (37, 512), (300, 1024)])
def test_gradients_against_fp64(act, wd, rows, hidden):
    gen = torch.Generator().manual_seed(rows * 7 + hidden)
    x = torch.randn(rows, hidden, generator=gen).to(act)
    w = (1 + 0.3 * torch.randn(hidden, generator=gen)).to(wd)
    g = torch.randn(rows, hidden, generator=gen).to(act)
    y, dx, dw, saved_y = _run(x, w, g, True)
    assert saved_y
    dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
    assert_close_unit(dx, dx_ref, "dx")  # the standard path's tolerance
    # dw in w's dtype: one rounding of it on top of the rebuilt xhat's, relative.
    bound = 2 * U[act] + (U[wd] if wd != FP32 else 0) + 1e-6
    assert rel_l2(dw, dw_ref) <= bound, (rel_l2(dw, dw_ref), bound)
    # y itself is the standard forward's.
    assert torch.equal(y, ops.fwd(x, w, 1e-6, None)[0])


def test_residual_route_and_amp():
    gen = torch.Generator().manual_seed(3)
    h = 512
    x = torch.randn(24, h, generator=gen).bfloat16()
    res = torch.randn(24, h, generator=gen).bfloat16()
    w = (1 + 0.2 * torch.randn(h, generator=gen)).bfloat16()
    xa, ra, wa = (t.clone().requires_grad_() for t in (x, res, w))
    y, hn = cr.cake_rmsnorm(xa, wa, 1e-6, residual=ra, memory_efficient=True)
    assert y.grad_fn.saved_tensors[0].data_ptr() == y.data_ptr()
    gy, gh = torch.randn_like(y), torch.randn_like(hn)
    torch.autograd.backward([y, hn], [gy, gh])
    dx_ref, dw_ref = ref_backward(gy, hn.detach(), w, 1e-6)
    assert_close_unit(xa.grad, dx_ref + gh.double(), "dx")
    assert torch.equal(xa.grad, ra.grad)
    assert rel_l2(wa.grad, dw_ref) <= 2 * U[BF16] + U[BF16]
    # AMP: an FP32 stream, y in BF16 (out_dtype), dx FP32 rebuilt from the 16-bit y.
    xs = torch.randn(24, h, generator=gen)
    wf = 1 + 0.2 * torch.randn(h, generator=gen)
    xa, wa = xs.clone().requires_grad_(), wf.clone().requires_grad_()
    y = cr.cake_rmsnorm(xa, wa, 1e-6, out_dtype=BF16, memory_efficient=True)
    assert y.dtype == BF16 and _saved_y(y)
    gy = torch.randn_like(y)
    y.backward(gy)
    dx_ref, dw_ref = ref_backward(gy, xs, wf, 1e-6)
    assert xa.grad.dtype == FP32
    # FP32 dx from a BF16 y: within the tolerance, at BF16's precision rather than FP32's.
    assert_close_unit(xa.grad, dx_ref, "dx")
    assert rel_l2(xa.grad, dx_ref) <= 2 * U[BF16]
    assert rel_l2(wa.grad, dw_ref) <= 2 * U[BF16]


def test_rows_are_t_invariant_and_dw_repeatable():
    gen = torch.Generator().manual_seed(5)
    h = 256
    x = torch.randn(700, h, generator=gen).bfloat16()
    w = (1 + 0.2 * torch.randn(h, generator=gen)).bfloat16()
    g = torch.randn(700, h, generator=gen).bfloat16()
    _, dx_all, dw_all, _ = _run(x, w, g, True)
    for t in (1, 5, 129, 700):
        _, dx_t, _, _ = _run(x[:t], w, g[:t], True)
        assert torch.equal(dx_t, dx_all[:t]), t
    _, _, dw_again, _ = _run(x, w, g, True)
    assert torch.equal(dw_again, dw_all)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, dx_1, dw_1, _ = _run(x, w, g, True)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(dx_1, dx_all) and torch.equal(dw_1, dw_all)


def _adversarial(h, act):
    tiny = torch.finfo(act).tiny
    cases = {
        "zero": torch.ones(h).index_fill_(0, torch.tensor([3]), 0.0),
        "1e-30": torch.ones(h).index_fill_(0, torch.tensor([7]), 1e-30),
        "denormal": torch.ones(h).index_fill_(0, torch.tensor([9]), tiny / 4),
        "mixed signs, one tiny": torch.where(torch.arange(h) % 2 == 0, 1.0, -1.0).index_fill_(0, torch.tensor([4]),
                                                                                          -tiny / 8),
        "huge": torch.ones(h).index_fill_(0, torch.tensor([1]), float(torch.finfo(act).max) / 2),
        "inf": torch.ones(h).index_fill_(0, torch.tensor([2]), math.inf),
    }
    return cases


@pytest.mark.parametrize("act", [BF16, FP16, FP32])
def test_adversarial_weights(act):
    """A weight y cannot rebuild x from saves x: the standard path's gradients, bit for bit. One
    inside the range (1e-30 in BF16 or FP32) saves y, and its gradients hold against FP64."""
    h = 64
    lo, hi = _memory.rebuild_range(act, h)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(16, h, generator=gen).to(act)
    g = torch.randn(16, h, generator=gen).to(act)
    for name, w in _adversarial(h, act).items():
        w = w.to(act)
        if name == "huge" and act == FP16:
            w = w.clamp(max=60000.0)
        a = w.float().abs()
        inside = bool(((a >= lo) & (a <= hi)).all())
        _, dx_me, dw_me, saved_y = _run(x, w, g, True)
        assert saved_y == inside, name
        if inside:
            dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
            assert_close_unit(dx_me, dx_ref, f"dx ({name})")
            assert rel_l2(dw_me, dw_ref) <= 3 * U[act] + 1e-6, name
            continue
        _, dx_std, dw_std, _ = _run(x, w, g, False)
        assert torch.equal(dx_me.nan_to_num(), dx_std.nan_to_num()), name
        assert torch.equal(dx_me.isnan(), dx_std.isnan()), name
        assert torch.equal(dw_me.nan_to_num(), dw_std.nan_to_num()), name


@pytest.mark.parametrize("act", [BF16, FP16])
def test_range_edges_rebuild_within_the_bound(act):
    """Weights at the range's ends (and mixed signs) save y, and xhat = y (1 / w) stays within one
    rounding of y's dtype, relative to xhat or to 1."""
    h = 256
    lo, hi = _memory.rebuild_range(act, h)
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(32, h, generator=gen).to(act)
    signs = torch.where(torch.arange(h) % 3 == 0, -1.0, 1.0)
    for scale in (lo, hi, 1.0):
        w = (signs * scale).to(act)
        if w.float().abs().min() < lo or w.float().abs().max() > hi:  # rounded out of the range: x saved
            continue
        y, rstd = ops.fwd(x, w, 1e-6, None)
        assert _memory.from_y_holds(w, act, h)
        xhat = y.float() * (1.0 / w.float())  # the kernels: one division a column
        ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
        err = (xhat.double() - ref).abs()
        assert (err <= 2 * U[act] * torch.maximum(ref.abs(), torch.ones_like(ref)) + 1e-6).all(), scale


def test_the_kernels_divide_by_nan_outside_the_range():
    """Called directly with a weight outside the range, the backward from y returns NaN, never a
    biased gradient."""
    x = torch.randn(8, 64).bfloat16()
    w = torch.ones(64).bfloat16()
    y, rstd = ops.fwd(x, w, 1e-6, None)
    w0 = w.clone()
    w0[5] = 0
    dx, dw = ops.bwd_from_y(torch.randn_like(y), y, w0, rstd, None, None, False)
    assert dx.isnan().all() and dw[5].isnan() and not dw[torch.arange(64) != 5].isnan().any()
    with pytest.raises(RuntimeError, match="dx_dtype"):
        ops.bwd_from_y(y, y, w, rstd, None, FP16, False)


def test_the_module_follows_its_weight_through_an_optimizer_step():
    torch.manual_seed(0)
    m = RMSNorm(64, memory_efficient=True)
    assert m._from_y is True
    x = torch.randn(8, 64, requires_grad=True)
    assert _saved_y(m(x))
    # An SGD step that lands column 5 on exactly zero: the next call saves x, with one warning.
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    m.weight.grad = torch.zeros(64)
    m.weight.grad[5] = 1.0
    opt.step()
    assert m.weight[5].item() == 0.0 and m._from_y is False  # the step hook took the verdict
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = m(x)
    assert not _saved_y(y)
    assert any("saves x, not y" in str(r.message) and "1 of 64" in str(r.message) for r in rec)
    ref = RMSNorm(64)
    with torch.no_grad():
        ref.weight.copy_(m.weight)
    g = torch.randn(8, 64)
    xa, xb = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    m(xa).backward(g)
    ref(xb).backward(g)
    assert torch.equal(xa.grad, xb.grad)


def test_zero_centred_divides_by_one_plus_w():
    torch.manual_seed(1)
    m = RMSNorm(128, zero_centered=True, memory_efficient=True, dtype=BF16)
    with torch.no_grad():
        m.weight.normal_(0, 0.2)
    x = torch.randn(10, 128).bfloat16().requires_grad_()
    y = m(x)
    assert _saved_y(y)
    g = torch.randn_like(y)
    y.backward(g)
    w_eff = 1.0 + m.weight.detach().float()
    dx_ref, dw_ref = ref_backward(g, x.detach(), w_eff, m.eps or torch.finfo(BF16).eps)
    assert_close_unit(x.grad, dx_ref, "dx")
    assert rel_l2(m.weight.grad, dw_ref) <= 3 * U[BF16]
    # w = -1 makes 1 + w zero: x is saved.
    with torch.no_grad():
        m.weight[0] = -1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not _saved_y(m(x))


def _saved_bytes(fn):
    """Bytes of the distinct storages autograd saved while fn ran, and fn's output: the
    benchmark's own count (benchmarks/memory_efficient.py), so the test holds what it reports."""
    return load(ME_BENCH).saved_bytes(fn)


@needs_bench
def test_a_patched_llama_saves_one_activation_a_norm_less():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).to(BF16)
    ids = torch.randint(0, 256, (2, 48))
    res = {}
    for me in (False, True):
        model = transformers.LlamaForCausalLM(cfg).to(BF16)
        model.load_state_dict(base.state_dict())
        report = cr.patch(model, memory_efficient=me)
        nb, out = _saved_bytes(lambda: model(ids, labels=ids).loss)
        out.backward()
        res[me] = (nb, out.detach(), len(report.replaced), model.model.norm.weight.grad.clone())
    norms = res[True][2]
    assert norms == 2 * cfg.num_hidden_layers + 1
    want = norms * ids.numel() * cfg.hidden_size * 2  # T x H x 2 bytes a norm
    got = res[False][0] - res[True][0]
    assert abs(got - want) <= 0.05 * want, (got, want)
    assert torch.equal(res[False][1], res[True][1])  # the forward is the same
    assert rel_l2(res[True][3], res[False][3]) < 2e-2


def test_patch_reports_weights_that_save_x():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.norm.weight[:3] = 0
    report = cr.patch(model, memory_efficient=True)
    assert [p for p, _, _ in report.saves_x] == ["model.norm"]
    assert "3 of 64" in report.saves_x[0][2]
    report2 = cr.patch(transformers.LlamaForCausalLM(cfg), memory_efficient=True)
    assert not [n for n in report2.notes if "checkpointing" in n]  # no checkpointing: nothing about it
    m3 = transformers.LlamaForCausalLM(cfg)
    (getattr(m3, "activation_checkpointing_enable", None) or m3.gradient_checkpointing_enable)()
    assert any("checkpointing" in n for n in cr.patch(m3, memory_efficient=True).notes)


def test_compiled_residual_route_keeps_the_mode():
    torch._dynamo.reset()
    torch.manual_seed(4)
    m = RMSNorm(128, memory_efficient=True, dtype=BF16)
    x, r = torch.randn(2, 9, 128).bfloat16(), torch.randn(2, 9, 128).bfloat16()
    gy, gh = torch.randn(2, 9, 128).bfloat16(), torch.randn(2, 9, 128).bfloat16()
    grads = []
    for fn in (torch.compile(m, fullgraph=True), m):
        xa, ra = x.clone().requires_grad_(), r.clone().requires_grad_()
        y, h = fn(xa, ra)
        torch.autograd.backward([y, h], [gy, gh])
        grads.append((xa.grad, ra.grad, m.weight.grad.clone()))
        m.weight.grad = None
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_compiled_module_keeps_the_mode():
    torch._dynamo.reset()
    torch.manual_seed(2)
    m = RMSNorm(256, memory_efficient=True, dtype=BF16)
    with torch.no_grad():
        m.weight.normal_(1, 0.1)
    x = torch.randn(33, 256).bfloat16()
    g = torch.randn(33, 256).bfloat16()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(m, fullgraph=True)
    compiled(xa).backward(g)
    dwa = m.weight.grad.clone()
    m.weight.grad = None
    m(xb).backward(g)
    assert torch.equal(xa.grad, xb.grad) and torch.equal(dwa, m.weight.grad)


def test_bad_arguments_are_refused_by_name():
    x, w = torch.randn(2, 64), torch.ones(64)
    with pytest.raises(TypeError, match="memory_efficient"):
        cr.cake_rmsnorm(x, w, memory_efficient=1)
    with pytest.raises(TypeError, match="memory_efficient"):
        RMSNorm(64, memory_efficient="yes")
    with pytest.raises(TypeError, match="memory_efficient"):
        cr.patch(torch.nn.Sequential(torch.nn.Linear(2, 2)), memory_efficient=None)


def test_a_step_hook_verdict_spares_the_eager_calls_a_sync(monkeypatch):
    """After an optimizer step the hook's one check (FP16's range, inside every y dtype's) serves
    every tracked module's next eager call: no check, and so no host sync, of its own."""
    ms = [RMSNorm(256, memory_efficient=True, dtype=BF16) for _ in range(3)] + [
        RMSNorm(256, memory_efficient=True, dtype=BF16, zero_centered=True)]
    opt = torch.optim.SGD([m.weight for m in ms], lr=1e-3)
    x = torch.randn(8, 256, dtype=BF16, requires_grad=True)
    sum(m(x).float().sum() for m in ms).backward()
    opt.step()  # the hook checks all four at once
    calls = []
    check = _memory._check
    monkeypatch.setattr(_memory, "_check", lambda *a: calls.append(a) or check(*a))
    assert all(_saved_y(m(x)) for m in ms) and calls == []
    with torch.no_grad():
        ms[0].weight.mul_(2)  # a new version: that module checks again, once
    assert _saved_y(ms[0](x)) and _saved_y(ms[0](x)) and len(calls) == 1


def test_the_compiled_graph_does_not_keep_x():
    """Under torch.compile the partitioner saves what the backward reads: with the mode, y and
    not the input x (AOT's forward graph returns its saved tensors after the outputs)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def saved_inputs(me):
        torch._dynamo.reset()
        graphs = []

        def fw(gm, _):
            graphs.append(gm)
            return make_boxed_func(gm.forward)

        m = RMSNorm(256, memory_efficient=me, dtype=BF16)
        x = torch.randn(16, 256).bfloat16().requires_grad_()
        bw = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
        torch.compile(m, backend=aot_autograd(fw_compiler=fw, bw_compiler=bw), fullgraph=True)(x).sum().backward()
        out = next(n for n in graphs[0].graph.nodes if n.op == "output")
        placeholders = [n for n in graphs[0].graph.nodes if n.op == "placeholder"]
        rows = [p for p in placeholders if tuple(p.meta["val"].shape) == (16, 256)]
        return [a for a in out.args[0] if a in rows]

    assert len(saved_inputs(False)) == 1  # the standard mode keeps x
    assert saved_inputs(True) == []


def test_the_module_under_autocast_saves_the_16bit_y():
    """AMP: an FP32 stream in, y in the autocast dtype out; the mode saves that BF16 y (2 bytes
    an element) where the standard mode saves the FP32 x (4)."""
    m = RMSNorm(128, memory_efficient=True, cast_output=True)
    x = torch.randn(12, 128, requires_grad=True)
    with torch.autocast("cpu", dtype=BF16):
        y = m(x)
    assert y.dtype == BF16 and _saved_y(y)
    g = torch.randn_like(y)
    y.backward(g)
    dx_ref, dw_ref = ref_backward(g, x.detach(), m.weight.detach(), torch.finfo(FP32).eps)
    assert x.grad.dtype == FP32
    assert_close_unit(x.grad, dx_ref, "dx")
    assert rel_l2(m.weight.grad, dw_ref) <= 2 * U[BF16]


@needs_bench
def test_qk_norms_keep_saving_x():
    """Qwen3's QK norms feed RoPE, which keeps none of their output: patch() leaves them in the
    standard mode (the same bytes, full precision) and says so."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3Config(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=128)
    model = transformers.Qwen3ForCausalLM(cfg)
    report = cr.patch(model, memory_efficient=True)
    modes = {p: model.get_submodule(p).memory_efficient for p, _ in report.replaced}
    assert modes == {"model.layers.0.self_attn.q_norm": False, "model.layers.0.self_attn.k_norm": False,
                     "model.layers.0.input_layernorm": True, "model.layers.0.post_attention_layernorm": True,
                     "model.norm": True}
    assert any("QK norms" in n for n in report.notes)
    ids = torch.randint(0, 128, (2, 24))
    std = transformers.Qwen3ForCausalLM(cfg)
    std.load_state_dict(model.state_dict())
    cr.patch(std)
    got = _saved_bytes(lambda: model(ids, labels=ids).loss)[0]
    want = _saved_bytes(lambda: std(ids, labels=ids).loss)[0] - 3 * ids.numel() * 256 * 4
    assert got == want


def test_weights_changed_behind_the_version_counter_or_loaded():
    """A column zeroed through .data (no version bump) is caught after the next optimizer step,
    which forgets the remembered verdicts; a loaded state dict and a deepcopy get their own."""
    import copy
    m = RMSNorm(64, memory_efficient=True)
    x = torch.randn(4, 64, requires_grad=True)
    assert _saved_y(m(x))
    m.weight.data[7] = 0.0
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    m.weight.grad = torch.zeros(64)
    opt.step()
    assert m._from_y is False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = m(x)
    assert not _saved_y(y)
    y.backward(torch.ones_like(y))
    assert not x.grad.isnan().any()
    # load_state_dict through a parent module: the loaded weight's verdict, eager and compiled.
    parent = torch.nn.Sequential(RMSNorm(64, memory_efficient=True))
    assert parent[0]._from_y is True
    bad = {"0.weight": torch.ones(64).index_fill_(0, torch.tensor([2]), 0.0)}
    parent.load_state_dict(bad)
    assert parent[0]._from_y is False
    twin = copy.deepcopy(parent)
    assert twin[0]._from_y is False and twin[0] in list(_memory._TRACKED)
    with torch.no_grad():
        twin[0].weight.fill_(1.0)
    opt = torch.optim.SGD(twin.parameters(), lr=0.0)
    opt.step()
    assert twin[0]._from_y is True


def test_no_grad_calls_and_unserved_dtypes_skip_the_rule():
    m = RMSNorm(64, memory_efficient=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        m(torch.randn(2, 64))
    with pytest.raises(TypeError, match="x"):
        cr.cake_rmsnorm(torch.randn(2, 64, dtype=torch.float64), torch.ones(64), memory_efficient=True)


def test_the_functional_form_says_when_it_saves_x():
    x = torch.randn(4, 64, requires_grad=True)
    w = torch.ones(64).index_fill_(0, torch.tensor([1]), 0.0)
    with pytest.warns(UserWarning, match="saves x, not y"):
        y = cr.cake_rmsnorm(x, w, memory_efficient=True)
    assert not _saved_y(y)


def test_a_zero_centred_verdict_is_not_a_plain_one():
    """The verdict of 1 + w is remembered apart from w's, though both are keyed by the same tensor."""
    w = torch.full((64,), -1.0)  # 1 + w is zero: x saved; w itself is fine
    assert _memory.from_y_holds(w, FP32, 64) is True
    assert _memory.from_y_holds(1.0 + w, FP32, 64, source=w, transform="1+w") is False
    assert _memory.from_y_holds(w, FP32, 64) is True
