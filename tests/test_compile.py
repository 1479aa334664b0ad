"""Every entry point under torch.compile(fullgraph=True, dynamic=True): no graph break, at most
one recompile across token counts, and the compiled results equal the eager ones bitwise (the
same kernels run; a residual add next to a norm, which the fusion pass rewrites, too; graphs
that also give inductor BF16 arithmetic of its own are held to the FP64 result). eps is passed as a Python float, as an argument and as a module attribute,
the way models call a norm (torch's default specialize_float=False makes it symbolic)."""

import pytest
import torch
from torch._dynamo.utils import counters

import cake_rmsnorm as cr
from conftest import devices
from reference import make_rows, make_weight

SIZES = (5, 17, 64)  # token counts through one dynamic graph
H = 64


def _compile_and_check(fn, make_inputs, device, backward=True, dynamic=True):
    """Runs fn eagerly and compiled over SIZES; asserts no graph break, <= 1 recompile and equal
    results (outputs and the inputs' gradients)."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
    for t in SIZES:
        args = make_inputs(t)
        eager_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in args]
        out, ref = compiled(*args), fn(*eager_args)
        outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
        for o, r in zip(outs, refs):
            assert torch.equal(o, r)
        if backward:
            sum(o.float().sum() for o in outs).backward()
            sum(r.float().sum() for r in refs).backward()
            for a, b in zip(args, eager_args):
                if isinstance(a, torch.Tensor) and a.requires_grad:
                    assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    frames = counters["stats"]["unique_graphs"]
    assert frames <= 2, f"{frames} graphs for {len(SIZES)} token counts"


def _rows(t, device, gen, grad=True):
    return make_rows(t, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous().requires_grad_(grad)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("residual", [False, True])
def test_functional_eps_argument(device, residual, gen):
    w = make_weight(H, torch.bfloat16, device, gen).requires_grad_()

    def fn(x, r, eps):
        return cr.cake_rmsnorm(x, w, eps, residual=r if residual else None)

    _compile_and_check(fn, lambda t: (_rows(t, device, gen), _rows(t, device, gen), 1e-5), device)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("eps", [1e-6, None])
def test_default_module(device, eps, gen):
    """The default RMSNorm(H) (eps a float attribute, or None: finfo(x.dtype).eps)."""
    m = cr.RMSNorm(H, eps=eps).to(device, torch.bfloat16)
    _compile_and_check(m, lambda t: (_rows(t, device, gen),), device)


@pytest.mark.parametrize("device", devices())
def test_module_residual_frozen_and_3d(device, gen):
    m = cr.RMSNorm(H).to(device, torch.bfloat16)
    m.weight.requires_grad_(False)

    def make(t):
        x = make_rows(2 * t, H, torch.bfloat16, device, 1.0, None, 0, gen).view(2, t, H).requires_grad_()
        return x, torch.randn_like(x).requires_grad_()

    _compile_and_check(m, make, device)


@pytest.mark.parametrize("device", devices())
def test_main_grad_accumulation(device, gen):
    m = cr.RMSNorm(H, accumulate_main_grad=True).to(device, torch.bfloat16)
    m.weight.main_grad = torch.zeros(H, device=device)
    x = _rows(9, device, gen)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(m, fullgraph=True, dynamic=True)
    compiled(x).float().sum().backward()
    got = m.weight.main_grad.clone()
    m.weight.main_grad.zero_()
    m(x.detach().requires_grad_()).float().sum().backward()
    assert torch.equal(got, m.weight.main_grad) and m.weight.grad is None
    assert sum(counters["graph_break"].values()) == 0


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("weight_grad", [True, False])
def test_backward_with_caller_buffers(device, weight_grad, gen):
    """The functional backward with workspace, dx and dw (or dx alone) traces too."""
    w = make_weight(H, torch.bfloat16, device, gen)
    ws = cr.cake_rmsnorm_train_backward_workspace(max(SIZES), H, device)

    def fn(x, g, eps):
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, eps)
        dx = torch.empty_like(x)
        if not weight_grad:
            return y, cr.cake_rmsnorm_train_backward(g, x, w, rstd, dx=dx, weight_grad=False)[0]
        dw = torch.empty(H, device=x.device)
        return (y,) + cr.cake_rmsnorm_train_backward(g, x, w, rstd, workspace=ws, dx=dx, dw=dw)

    _compile_and_check(fn, lambda t: (_rows(t, device, gen, False), _rows(t, device, gen, False), 1e-6),
                       device, backward=False)


@pytest.mark.parametrize("device", devices())
def test_under_autocast(device, gen):
    """16-bit activations under autocast keep the kernels' path and trace the same."""
    m = cr.RMSNorm(H).to(device, torch.bfloat16)
    lin = torch.nn.Linear(H, H).to(device)

    def fn(x):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return m(lin(x))

    _compile_and_check(fn, lambda t: (torch.randn(t, H, device=device, generator=None).requires_grad_(),),
                       device)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("amp", [False, True])
def test_patched_transformers_model(family, amp):
    """A patched model (eps a module attribute) under fullgraph + dynamic, BF16 parameters or
    FP32 parameters under autocast, over three sequence lengths."""
    transformers = pytest.importorskip("transformers")
    cfg_cls, model_cls, extra = {"llama": ("LlamaConfig", "LlamaForCausalLM", {}),
                                 "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16})}[family]
    cfg = getattr(transformers, cfg_cls)(vocab_size=128, hidden_size=H, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg)
    if not amp:
        model = model.to(torch.bfloat16)
    report = cr.patch(model)
    assert report.replaced
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for t in (8, 24, 40):
        ids = torch.randint(0, 128, (2, t), generator=torch.Generator().manual_seed(t))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = compiled(ids, labels=ids).loss
        loss.backward()
        assert torch.isfinite(loss)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] <= 2


def _no_compile_caches():
    """Inductor's and AOTAutograd's caches skip the passes on a hit: compile afresh."""
    return torch._inductor.config.patch(fx_graph_cache=False, force_disable_caches=True)


def _near_eager(err_e, dtype):
    """The compiled gradients' bound (rel-L2 to FP64): within twice eager's error or the
    dtype's rounding noise over these graphs (BF16 4e-3, a few ulps of 2^-8; FP32 1e-5).
    Compiled and eager graphs round differently (inductor keeps BF16 chains in FP32; the pass
    rounds dx once), so each draw of fresh data moves the two by tens of percent around
    2-3e-3 in BF16; a wrong fusion (a lost or doubled gradient term) is off by 1e-1 and more."""
    return max(2.0 * err_e, 4e-3 if dtype == torch.bfloat16 else 1e-5)


def _two_blocks(x, r, w1, w2):
    """Two pre-norm residual blocks: the adds before each norm and their gradients fuse."""
    h = x + r
    y = cr.cake_rmsnorm(h, w1, 1e-6)
    h2 = h + y * 2.0
    y2 = cr.cake_rmsnorm(h2, w2, 1e-6)
    return y2 * 3.0, h2


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype,dynamic", [(torch.bfloat16, False), (torch.float32, False), (torch.bfloat16, True)])
def test_residual_adds_fused(device, dtype, dynamic, gen):
    """Under torch.compile the adds before the norms go into fwd_residual and the gradient adds
    after them into the backward's g_residual: outputs bitwise the eager ones, gradients within
    the contract of the FP64 result and no farther from it than eager's."""
    from cake_rmsnorm import _fusion
    t = 96
    mk = lambda: (make_rows(t, H, dtype, device, 1.0, None, 0, gen).contiguous().requires_grad_())
    x, r = mk(), mk()
    w1, w2 = (make_weight(H, dtype, device, gen).requires_grad_() for _ in range(2))
    gy = make_rows(t, H, dtype, device, 1.0, None, 0, gen).contiguous()
    gh = make_rows(t, H, dtype, device, 1.0, None, 0, gen).contiguous()
    leaves = (x, r, w1, w2)

    def grads(fn, cast):
        args = [a.detach().to(cast).requires_grad_() for a in leaves]
        y2, h2 = fn(*args)
        torch.autograd.backward((y2, h2), (gy.to(cast), gh.to(cast)))
        return (y2, h2), [a.grad for a in args]

    def ref64(x, r, w1, w2):  # the same graph in FP64
        def norm(h, w):
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        h = x + r
        h2 = h + norm(h, w1) * 2.0
        return norm(h2, w2) * 3.0, h2

    torch._dynamo.reset()
    before = dict(_fusion.stats)
    with _no_compile_caches():
        outs_c, g_c = grads(torch.compile(_two_blocks, fullgraph=True, dynamic=dynamic), dtype)
    assert _fusion.stats["forward"] - before["forward"] == 2
    assert _fusion.stats["backward"] - before["backward"] == 2
    outs_e, g_e = grads(_two_blocks, dtype)
    _, g_ref = grads(ref64, torch.float64)
    assert torch.equal(outs_c[1], outs_e[1])  # h2: the rounded sums, as eager
    for name, c, e, ref in zip(("x", "r", "w1", "w2"), g_c, g_e, g_ref):
        err_c = float((c.double() - ref).norm() / ref.norm())
        err_e = float((e.double() - ref).norm() / ref.norm())
        assert err_c <= _near_eager(err_e, dtype), (name, err_c, err_e)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_norm_of_a_residual_add_has_eager_bits(device, fusion, dtype, gen, monkeypatch):
    """norm(x + r) with a gradient into the sum as well (the residual stream), compiled with the
    pass (the add fused into fwd_residual, the gradient add into the backward's g_residual) and
    without it: every output and gradient is bitwise eager's. The residual route sums a row in
    the plain route's order (tests/cpp/pairs_twins.cpp), and g_residual meets dx rounded to the
    activation type, as eager's autograd adds the two."""
    from torch._inductor import config
    from cake_rmsnorm import _fusion
    sizes = (96, 700) if device == "cpu" else (1, 96, 700, 5000)
    if not fusion:
        monkeypatch.setenv("CAKE_RMSNORM_COMPILE_FUSION", "0")  # the fake kernels install no pass
    for h in (H, 1536, 6144) if device == "cuda" else (H, 1536):
        w = make_weight(h, dtype, device, gen).requires_grad_()

        def fn(x, r):
            s = x + r
            return cr.cake_rmsnorm(s, w, 1e-6), s

        torch._dynamo.reset()
        before = dict(_fusion.stats)
        with _no_compile_caches(), config.patch(post_grad_custom_post_pass=config.post_grad_custom_post_pass
                                                if fusion else None):
            compiled = torch.compile(fn, fullgraph=True, dynamic=True)
            for t in sizes:
                x, r, gy, gs = (make_rows(t, h, dtype, device, 1.0, None, 0, gen).contiguous() for _ in range(4))
                runs = []
                for f in (compiled, fn):
                    leaves = [x.clone().requires_grad_(), r.clone().requires_grad_()]
                    w.grad = None
                    y, s = f(*leaves)
                    torch.autograd.backward((y, s), (gy, gs))
                    runs.append((y, s, leaves[0].grad, leaves[1].grad, w.grad))
                for name, a, b in zip(("y", "sum", "dx", "dr", "dw"), *runs):
                    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (h, t, name)
        assert (_fusion.stats != before) == fusion


@pytest.mark.parametrize("device", devices())
def test_broadcast_add_not_fused(device, gen):
    """An add that broadcasts (a bias) is not a residual add: left to inductor, bits as eager."""
    from cake_rmsnorm import _fusion
    w = make_weight(H, torch.bfloat16, device, gen).requires_grad_()
    bias = make_weight(H, torch.bfloat16, device, gen)

    def fn(x):
        return cr.cake_rmsnorm(x + bias, w, 1e-6)

    before = dict(_fusion.stats)
    with _no_compile_caches():
        _compile_and_check(fn, lambda t: (_rows(t, device, gen),), device)
    assert _fusion.stats == before


def test_fusion_pass_chains_and_opts_out(monkeypatch):
    """The pass joins a pass the user installed (which still runs, first) and stays out when
    CAKE_RMSNORM_COMPILE_FUSION=0."""
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from cake_rmsnorm import _fusion
    seen = []

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            seen.append(len(graph.nodes))

        def uuid(self):
            return "user"

    with config.patch(post_grad_custom_post_pass=None):
        monkeypatch.setenv("CAKE_RMSNORM_COMPILE_FUSION", "0")
        assert not _fusion.install() and config.post_grad_custom_post_pass is None
        monkeypatch.delenv("CAKE_RMSNORM_COMPILE_FUSION")
    user = UserPass()
    with config.patch(post_grad_custom_post_pass=user):
        assert _fusion.install()
        installed = config.post_grad_custom_post_pass
        assert installed is not user and installed.then is user
        assert _fusion.install() and config.post_grad_custom_post_pass is installed  # idempotent
        assert installed.uuid()[-1] == "user"
        g = torch.fx.Graph()
        g.output(g.placeholder("x"))
        installed(g)
        assert seen == [2]


@pytest.mark.parametrize("device", devices())
def test_two_norms_of_one_sum(device, gen):
    """Two norms read one residual sum: the first takes the add, the second reads its h_new;
    in the backward one norm's dx becomes the other's g_residual (a dependency between the two
    backward ops, kept in order). Gradients no farther from FP64 than eager's."""
    from cake_rmsnorm import _fusion
    t = 48
    mk = lambda: make_rows(t, H, torch.bfloat16, device, 1.0, None, 0, gen).contiguous()  # noqa: E731
    leaves = [mk().requires_grad_(), mk().requires_grad_()] + [
        make_weight(H, torch.bfloat16, device, gen).requires_grad_() for _ in range(2)]
    gy = mk()

    def fn(x, r, w1, w2, norm=lambda h, w: cr.cake_rmsnorm(h, w, 1e-6)):
        h = x + r
        return norm(h, w1) * 2.0 + norm(h, w2) * 3.0

    def norm64(h, w):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def grads(f, cast):
        args = [a.detach().to(cast).requires_grad_() for a in leaves]
        return torch.autograd.grad(f(*args), args, gy.to(cast))

    torch._dynamo.reset()
    before = dict(_fusion.stats)
    with _no_compile_caches():
        g_c = grads(torch.compile(fn, fullgraph=True), torch.bfloat16)
    assert (_fusion.stats["forward"] - before["forward"], _fusion.stats["backward"] - before["backward"]) == (1, 1)
    g_e = grads(fn, torch.bfloat16)
    g_ref = grads(lambda x, r, w1, w2: fn(x, r, w1, w2, norm=norm64), torch.float64)
    for c, e, ref in zip(g_c, g_e, g_ref):
        err_c = float((c.double() - ref).norm() / ref.norm())
        err_e = float((e.double() - ref).norm() / ref.norm())
        assert err_c <= _near_eager(err_e, torch.bfloat16), (err_c, err_e)


@pytest.mark.parametrize("device", devices())
def test_compiled_norm_shows_in_a_profile(device, gen):
    """Under torch.compile the norm leaves a CPU-side event named cake_rmsnorm::<op> in a
    torch.profiler trace (the wrapper calls the op bodies directly, which the profiler would not
    otherwise see); with no profiler running, nothing is recorded."""
    from cake_rmsnorm import _lowering
    if not _lowering.install():
        pytest.skip("the compiled call is inductor's own fallback here: the registered op shows")
    x = make_rows(16, 64, torch.bfloat16, device, 1.0, None, 0, gen).contiguous().requires_grad_()
    w = make_weight(64, torch.bfloat16, device, gen).requires_grad_()
    fn = torch.compile(lambda x, w: cr.cake_rmsnorm(x, w, 1e-6), fullgraph=True)
    fn(x, w).float().sum().backward()  # compiled and run once outside the profiler
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(x, w).float().sum().backward()
    names = {e.name for e in prof.events() if e.name.startswith("cake_rmsnorm::")}
    # The forward is named by the op the graph calls (fwd_out: the out op on inductor's own buffers).
    assert any(n.startswith("cake_rmsnorm::fwd") for n in names) and "cake_rmsnorm::bwd" in names, sorted(names)
