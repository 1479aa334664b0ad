"""patch() as a user meets it: the user's hooks never see the probe, a model built on the meta
device is served (the check made on a real copy, the verdict kept through to_empty), unpatch
finds its own report, and a width the kernels do not take is said once, by patch()."""

import warnings

import torch
from torch import nn

import cake_rmsnorm as cr


class LlamaLikeNorm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.variance_epsilon = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype) * self.weight


class GemmaLikeNorm(LlamaLikeNorm):
    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * (1.0 + self.weight.float())
                ).to(x.dtype)


class Tiny(nn.Module):
    def __init__(self, h=64, norm=LlamaLikeNorm):
        super().__init__()
        self.proj = nn.Linear(h, h)
        self.norm = norm(h)
        self.head = nn.Linear(h, 8)

    def forward(self, x):
        return self.head(self.norm(self.proj(x)))


def test_patch_never_fires_the_users_hooks():
    m = Tiny()
    seen = []
    m.norm.register_forward_pre_hook(lambda mod, args: seen.append(("pre", tuple(args[0].shape))))
    m.norm.register_forward_hook(lambda mod, args, out: seen.append(("post", tuple(args[0].shape))))
    report = cr.patch(m)
    assert [p for p, _ in report.replaced] == ["norm"]
    assert seen == []
    m(torch.randn(5, 64))  # the hooks carried over run on the user's own calls
    assert seen == [("pre", (5, 64)), ("post", (5, 64))]


def test_a_model_built_on_meta_is_served_through_to_empty():
    for norm, zc in ((LlamaLikeNorm, False), (GemmaLikeNorm, True)):
        with torch.device("meta"):
            m = Tiny(norm=norm)
        report = cr.patch(m)
        assert [p for p, _ in report.replaced] == ["norm"], report
        assert isinstance(m.norm, cr.RMSNorm) and m.norm.zero_centered is zc
        m.to_empty(device="cpu")
        torch.manual_seed(0)
        ref = Tiny(norm=norm)
        m.load_state_dict(ref.state_dict())
        with torch.no_grad():
            ref.norm.weight.normal_()
            m.norm.weight.copy_(ref.norm.weight)
        x = torch.randn(4, 64)
        torch.testing.assert_close(m(x), ref(x), rtol=2e-5, atol=2e-5)
        m(x).sum().backward()
        assert m.norm.weight.grad is not None


def test_unpatch_without_the_report():
    m = Tiny()
    original = m.norm
    cr.patch(m)
    assert isinstance(m.norm, cr.RMSNorm)
    cr.unpatch(m)
    assert m.norm is original
    cr.unpatch(m)  # nothing left to undo: a no-op


def test_a_width_the_kernels_do_not_take_is_said_once():
    m = Tiny(h=12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = cr.patch(m)
        for _ in range(3):
            m(torch.randn(3, 12))
    said = [str(w.message) for w in caught if "eager formula" in str(w.message)]
    assert len(said) == 1 and "cake_rmsnorm.patch" in said[0], said
    assert [p for p, _, _ in report.fallback] == ["norm"]


class Stack(nn.Module):
    def __init__(self, h=64):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.RMSNorm(h), nn.Linear(h, h)) for _ in range(2)])
        self.norm = nn.RMSNorm(h)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return self.norm(x)


def test_under_autocast_the_output_dtype_is_the_models():
    """The final norm returns what the unpatched model returned (FP32 under autocast); the norms
    inside the blocks feed a Linear and take the fused cast, said in the report."""
    m = Stack()
    x = torch.randn(3, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(x)
    report = cr.patch(m)
    assert not m.norm.cast_output and all(layer[0].cast_output for layer in m.layers)
    assert any("autocast" in n for n in report.notes)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = m(x)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    cr.unpatch(m)
    cr.patch(m, cast_output=False)
    assert not any(layer[0].cast_output for layer in m.layers)
