"""patch() over every transformers family whose modeling code has an RMSNorm: a tiny config
of each (no downloads), patched; every plain RMSNorm (a 1-D weight, a forward of the input
alone) is replaced, what is left alone says why, and the BF16 loss stays within noise."""

import importlib
import warnings

import pytest
import torch

import cake_rmsnorm as cr

transformers = pytest.importorskip("transformers")
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=128, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, num_experts=4, num_local_experts=4, n_routed_experts=4, moe_intermediate_size=32,
            num_experts_per_tok=2, n_shared_experts=1, shared_expert_intermediate_size=32, first_k_dense_replace=1,
            n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=16, tie_word_embeddings=True)
MAX_PARAMS = 200_000_000  # a model this large at the tiny config is not built
# Keys some families need beyond TINY, tried in turn until the unpatched model runs: MLA
# attention takes head_dim as the rotary part of the head; some check kv heads or experts;
# Gemma3n shares the KV cache across more layers than the tiny model has.
RETRIES = ({}, {"head_dim": 8}, {"num_key_value_heads": 4}, {"num_experts_per_tok": 1}, {"num_kv_shared_layers": 0})
STRUCTURAL = ("no 1-D weight parameter", "forward takes more than the input", "has a bias")
NOT_XHAT = ("forward does not return one tensor of the input's shape", "computes something else")


def _families():
    out = []
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
        except Exception:  # a family whose modeling code does not import here has nothing to patch
            continue
        if any("RMSNorm" in name for name in dir(mod)):
            out.append(model_type)
    return out


def _plain_rmsnorm(module) -> bool:
    w = getattr(module, "weight", None)
    return (type(module).__name__.endswith("RMSNorm") and isinstance(w, torch.nn.Parameter) and w.dim() == 1
            and getattr(module, "bias", None) is None and not cr._probe._extra_forward_args(module))


def _weightless_rmsnorm(module) -> bool:
    name = type(module).__name__
    return (("RMSNorm" in name or name.endswith("L2Norm")) and not any(True for _ in module.parameters())
            and cr._probe.eps_of(module) is not None and not cr._probe._extra_forward_args(module))


def _causal_lm_config(model_type, kw):
    """The tiny config, or, for a composite model (vision or audio towers that TINY leaves
    full size), its text model's: the decoder whose norms patch() serves."""
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    with torch.device("meta"):
        n = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    text = cfg.get_text_config()
    if n > 20_000_000 and text is not cfg and text.model_type != model_type:
        cfg = transformers.AutoConfig.for_model(text.model_type, **kw)
        with torch.device("meta"):
            n = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"the tiny config still has {n} parameters")
    return cfg


def _tiny_model(model_type):
    """(model, ids, loss after backward) of the first RETRIES entry the family runs with."""
    errors = []
    for extra in RETRIES:
        try:
            cfg = _causal_lm_config(model_type, dict(TINY, **extra))
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
            ids = torch.randint(3, 128, (2, 16), generator=torch.Generator().manual_seed(1))
            ref_loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            ref_loss.backward()
            return model, ids, ref_loss.float().item()
        except Exception as e:  # this family's code does not run on this config
            missing = f" (module {e.name!r})" if isinstance(e, ImportError) and e.name else ""
            errors.append(f"{type(e).__name__}: {e}{missing}")
    pytest.skip(f"the unpatched tiny model does not build or run: {errors[0]}")


@pytest.mark.parametrize("model_type", _families())
def test_patch_family(model_type):
    model, ids, ref = _tiny_model(model_type)
    plain = [p for p, m in model.named_modules() if _plain_rmsnorm(m)]
    weightless = {p for p, m in model.named_modules() if _weightless_rmsnorm(m)}
    with_grad = {p for p in plain if getattr(model.get_submodule(p), "weight", None) is not None
                 and model.get_submodule(p).weight.grad is not None}
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = cr.patch(model)
    replaced = {p for p, _ in report.replaced}
    assert set(plain) <= replaced, f"plain RMSNorms left alone: {sorted(set(plain) - replaced)}; {report.skipped}"
    for path, cls, reason in report.skipped:
        if "rms" in cls.lower():
            # A weightless module is served unless it computes no x_hat (HY-V4's returns rstd alone).
            assert reason.startswith(STRUCTURAL) or (path in weightless and reason.startswith(NOT_XHAT)), \
                (path, cls, reason)
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    assert abs(loss.float().item() - ref) <= 0.02 * max(abs(ref), 1.0), (loss.item(), ref)
    loss.backward()
    for path in with_grad:  # the norms on the loss's path (a tiny config can leave some unused)
        assert model.get_submodule(path).weight.grad is not None, path


def test_patch_warns_once_with_what_it_left_alone():
    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(16))
            self.variance_epsilon = 1e-6

        def forward(self, x, gate=None):
            return x

    class NotRMS(torch.nn.Module):  # has a weight and an eps, computes a LayerNorm
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(16))
            self.eps = 1e-6

        def forward(self, x):
            return torch.nn.functional.layer_norm(x, (16,), self.weight, None, self.eps)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Gated()
            self.b = NotRMS()
            self.c = torch.nn.RMSNorm(16)

    Gated.__name__, NotRMS.__name__ = "FooRMSNormGated", "BarRMSNorm"
    m = Model()
    with pytest.warns(UserWarning, match="BarRMSNorm .computes something else.*FooRMSNormGated .forward takes more"):
        report = cr.patch(m)
    assert [p for p, _ in report.replaced] == ["c"]
    assert {p for p, _, _ in report.skipped} == {"a", "b"}
    assert cr.probe_norm(torch.nn.RMSNorm(16, eps=1e-6)) == (False, "")


def test_weightless_norms_are_served():
    """Gemma3n's with_scale=False norms and Llama4's L2 norm (no weight; the latter keeps no
    width) run the kernels with a cached ones vector and no dw."""
    class WeightlessRMSNorm(torch.nn.Module):  # Gemma3n's v_norm: a width it does not keep
        def __init__(self, eps=1e-6):
            super().__init__()
            self.eps = eps

        def forward(self, x):
            xf = x.float()
            return (xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)).type_as(x)

    class TextL2Norm(WeightlessRMSNorm):
        pass

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.v_norm = WeightlessRMSNorm()
            self.l2 = TextL2Norm(1e-5)

        def forward(self, x, y):
            return self.v_norm(x), self.l2(y)

    m = Model()
    x, y = torch.randn(2, 5, 32, dtype=torch.bfloat16), torch.randn(3, 48, dtype=torch.bfloat16)
    ref = m(x, y)
    report = cr.patch(m)
    assert {p for p, _ in report.replaced} == {"v_norm", "l2"}, report.skipped
    assert isinstance(m.v_norm, cr.RMSNorm) and m.v_norm.weight is None and m.v_norm.any_width
    out = m(x, y)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    xs = x.clone().requires_grad_()
    m.v_norm(xs).sum().backward()
    assert xs.grad is not None and not list(m.parameters())
