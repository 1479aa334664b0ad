"""The nn.Module drop-in, Hugging Face patching, frozen weights and main_grad accumulation."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import devices
from reference import assert_close_unit, make_rows, rel_l2

BF = torch.bfloat16


@pytest.mark.parametrize("device", devices())
def test_module_matches_torch_rmsnorm_and_state_dict(device, gen):
    ref = torch.nn.RMSNorm(1000, eps=1e-6, device=device, dtype=BF)
    with torch.no_grad():
        ref.weight.copy_(1 + 0.1 * torch.randn(1000, generator=gen))
    ours = cr.RMSNorm(1000, eps=1e-6, device=device, dtype=BF)
    ours.load_state_dict(ref.state_dict())
    assert set(ours.state_dict()) == {"weight"}
    ref.load_state_dict(ours.state_dict())  # and back
    x = make_rows(37, 1000, BF, device, 1.0, None, 0, gen).contiguous()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), ref(xb)
    assert_close_unit(ya, yb.float(), "y")
    g = torch.randn_like(ya)
    ya.backward(g)
    yb.backward(g)
    assert_close_unit(xa.grad, xb.grad.float(), "dx")
    assert rel_l2(ours.weight.grad.float(), ref.weight.grad.float()) < 1e-2


@pytest.mark.parametrize("device", devices())
def test_zero_centered_like_gemma(device, gen):
    w = 0.1 * torch.randn(512, generator=gen)
    m = cr.RMSNorm(512, 1e-6, zero_centered=True, device=device, dtype=torch.float32)
    assert torch.equal(m.weight.detach().cpu(), torch.zeros(512))
    with torch.no_grad():
        m.weight.copy_(w)
    x = make_rows(9, 512, BF, device, 1.0, None, 0, gen).contiguous().requires_grad_()
    y = m(x)
    assert y.dtype == BF and m.weight.dtype == torch.float32
    xf = x.detach().float()
    ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + m.weight.detach().float())).to(BF)
    assert_close_unit(y, ref.float(), "y")
    y.float().sum().backward()
    xhat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert m.weight.grad.dtype == torch.float32
    assert rel_l2(m.weight.grad, xhat.sum(0)) < 1e-4


@pytest.mark.parametrize("device", devices())
def test_fused_residual_form(device, gen):
    m = cr.RMSNorm(256, device=device, dtype=BF)
    x = make_rows(5, 256, BF, device, 1.0, None, 0, gen).contiguous()
    r = make_rows(5, 256, BF, device, 1.0, None, 0, gen).contiguous()
    y, h = m(x, r)
    assert torch.equal(h, x + r)
    assert torch.equal(y, m(h))


def test_eager_fallback_for_other_inputs(gen):
    m = cr.RMSNorm(12)  # not a multiple of 8, FP32 weight
    x = torch.randn(3, 12, generator=gen)
    ref = torch.nn.RMSNorm(12)
    assert torch.allclose(m(x), ref(x), atol=1e-6)
    m8 = cr.RMSNorm(16, eps=None)
    assert torch.allclose(m8(torch.ones(2, 16, dtype=torch.float64)), torch.ones(2, 16, dtype=torch.float64))


def test_true_torch_drop_in(gen):
    """torch.nn.RMSNorm's constructor (positional too), attributes, isinstance and state dict."""
    m = cr.RMSNorm(64, 1e-5, True)
    assert isinstance(m, torch.nn.RMSNorm) and m.elementwise_affine and m.eps == 1e-5
    assert torch.equal(m.weight, torch.ones(64)) and not m.zero_centered
    assert cr.RMSNorm(64).eps is None  # torch's default: finfo(x.dtype).eps at each call
    ref = torch.nn.RMSNorm(64, 1e-5)
    with torch.no_grad():
        ref.weight.normal_(generator=gen)
    m.load_state_dict(ref.state_dict())
    ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 64, generator=gen)
    assert torch.allclose(m(x), ref(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError):
        cr.RMSNorm(64, 1e-5, True, None, None, True)  # our options are keyword-only
    with pytest.raises(TypeError, match="elementwise_affine must be a bool"):
        cr.RMSNorm(64, 1e-5, "yes")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [BF, torch.float32])
def test_no_weight_and_multidim_shapes(device, dtype, gen):
    """elementwise_affine=False (no weight, no dw) and a normalized_shape of several dims, as
    torch's module computes them."""
    x = torch.randn(6, 4, 64, generator=gen).to(device, dtype)
    for shape, affine in (((64,), False), ((4, 64), True), ((4, 64), False)):
        ref = torch.nn.RMSNorm(shape, 1e-6, affine, device=device)
        if affine:
            with torch.no_grad():
                ref.weight.copy_(1 + 0.1 * torch.randn(shape, generator=gen))
        ours = cr.RMSNorm(shape, 1e-6, affine, device=device)
        ours.load_state_dict(ref.state_dict())
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ours(xa), ref(xb)
        assert ya.shape == x.shape and ya.dtype == dtype
        assert_close_unit(ya, yb.float(), f"y {shape} {affine}")
        ya.float().sum().backward()
        yb.float().sum().backward()
        assert_close_unit(xa.grad, xb.grad.float(), "dx")
        if affine:
            assert ours.weight.grad.shape == shape and rel_l2(ours.weight.grad, ref.weight.grad) < 1e-2
        else:
            assert ours.weight is None and set(ours.state_dict()) == set()
    with pytest.raises(ValueError, match="normalized_shape"):
        cr.RMSNorm((4, 64))(torch.randn(2, 64, 4))


def test_fp64_computed_in_fp64():
    m = cr.RMSNorm(16, 1e-6, dtype=torch.float64)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))
    ref = torch.nn.RMSNorm(16, 1e-6, dtype=torch.float64)
    ref.load_state_dict(m.state_dict())
    assert torch.allclose(m(x), ref(x), atol=1e-12)


@pytest.mark.parametrize("device", devices())
def test_frozen_weight_skips_dw(device, gen):
    m = cr.RMSNorm(512, eps=1e-6, device=device, dtype=BF)
    m.weight.requires_grad_(False)
    x = make_rows(8, 512, BF, device, 1.0, None, 0, gen).contiguous().requires_grad_()
    m(x).float().sum().backward()
    assert m.weight.grad is None and x.grad is not None
    dx, dw = cr.cake_rmsnorm_train_backward(torch.ones_like(x), x.detach(), m.weight, cr.cake_rmsnorm_train_forward(
        x.detach(), m.weight, 1e-6)[1], weight_grad=False)
    assert dw is None and torch.equal(dx, x.grad)


@pytest.mark.parametrize("device", devices())
def test_main_grad_accumulation(device, gen):
    """dw is added into weight.main_grad across micro-batches; weight.grad stays None."""
    m = cr.RMSNorm(520, accumulate_main_grad=True, device=device, dtype=BF)
    m.weight.main_grad = torch.zeros(520, device=device)
    ref = cr.RMSNorm(520, device=device, dtype=torch.float32)  # FP32 weight: FP32 grads to sum
    total = torch.zeros(520, device=device)
    for _ in range(3):
        x = make_rows(33, 520, BF, device, 1.0, None, 0, gen).contiguous().requires_grad_()
        g = make_rows(33, 520, BF, device, 1.0, None, 0, gen)
        m(x).backward(g)
        ref.weight.grad = None
        ref(x.detach()).backward(g)
        total += ref.weight.grad
    assert m.weight.grad is None
    assert rel_l2(m.weight.main_grad, total) < 1e-5
    # The functional form: dw += into any layout.
    x = make_rows(10, 64, BF, device, 1.0, None, 0, gen)
    w = torch.ones(64, dtype=BF, device=device)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    base = torch.randn(64, 2, device=device)[:, 0]
    start = base.clone()
    _, dw = cr.cake_rmsnorm_train_backward(x, x, w, rstd)
    out = cr.cake_rmsnorm_train_backward(x, x, w, rstd, dw=base, accumulate=True)[1]
    assert out is base and rel_l2(base, start + dw) < 1e-6


def test_accumulate_refusals():
    x = torch.randn(4, 64, dtype=BF)
    w = torch.ones(64, dtype=BF)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    with pytest.raises(ValueError, match="accumulate needs dw"):
        cr.cake_rmsnorm_train_backward(x, x, w, rstd, accumulate=True)
    with pytest.raises(ValueError, match="dw and accumulate need weight_grad=True"):
        cr.cake_rmsnorm_train_backward(x, x, w, rstd, dw=torch.zeros(64), weight_grad=False)
    with pytest.raises(ValueError, match="main_grad must be float32"):
        cr.cake_rmsnorm(x, w, 1e-6, main_grad=torch.zeros(64, dtype=BF))
    with pytest.raises(ValueError, match="normalized_shape must be"):
        cr.RMSNorm((4, 0))


# ---------------------------------------------------------------- Hugging Face patching
transformers = pytest.importorskip("transformers")

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaRMSNorm", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", "MistralRMSNorm", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2RMSNorm", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "Qwen3RMSNorm", {"head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "GemmaRMSNorm", {"head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "Gemma2RMSNorm", {"head_dim": 16}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", "Gemma3RMSNorm", {"head_dim": 16}),
}


def tiny_model(family, dtype=BF, device="cpu"):
    cfg_name, model_name, _, extra = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).to(device=device, dtype=dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.05 * torch.randn_like(p))  # norms that are not the identity
    return model


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patch_each_family(family):
    model = tiny_model(family)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits.float()
    weights = {n: p for n, p in model.named_parameters()}
    report = cr.patch(model)
    norm_cls = FAMILIES[family][2]
    n_norms = 2 * 2 + 1 + (2 * 2 if family in ("qwen3", "gemma3") else 0)  # per layer, final, q/k
    if family in ("gemma2", "gemma3"):
        n_norms += 2 * 2  # pre/post feed-forward norms
    assert len(report.replaced) == n_norms, report.replaced
    assert all(cls == norm_cls for _, cls in report.replaced)
    assert not any(type(m).__name__ == norm_cls for m in model.modules())
    for n, p in model.named_parameters():
        assert p is weights[n], "patched modules share the original Parameters"
    with torch.no_grad():
        out = model(ids).logits.float()
    # The kernels round once (y = cast(h * rstd * w)); Llama-style norms round h * rstd first.
    assert (out - ref).abs().max() <= 0.05 * ref.abs().max(), (out - ref).abs().max()
    loss = torch.nn.functional.cross_entropy(model(ids).logits.float().view(-1, 128), ids.view(-1))
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "norm" in n)
    cr.unpatch(model, report)
    assert sum(type(m).__name__ == norm_cls for m in model.modules()) == n_norms


def test_patched_context_and_unknown_norms():
    class Custom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(16)
            self.rms = torch.nn.RMSNorm(16)
            self.bare = torch.nn.RMSNorm((2, 8), elementwise_affine=False)

    m = Custom()
    with cr.patched(m) as report:
        assert isinstance(m.rms, cr.RMSNorm) and isinstance(m.norm, torch.nn.LayerNorm)
        assert isinstance(m.bare, cr.RMSNorm) and m.bare.weight is None and m.bare.normalized_shape == (2, 8)
        assert report.skipped == [("norm", "LayerNorm", "has a bias")]
    assert isinstance(m.rms, torch.nn.RMSNorm)


def test_patched_model_compiles_without_graph_breaks():
    torch._dynamo.reset()
    model = tiny_model("qwen3")
    cr.patch(model)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(ids).logits
    out.float().sum().backward()
    with torch.no_grad():
        assert torch.allclose(out.float(), model(ids).logits.float(), atol=0.05, rtol=0.05)
