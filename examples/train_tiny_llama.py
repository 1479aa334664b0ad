"""Train a small Llama from `transformers` (random init, synthetic tokens, nothing downloaded)
the way training runs do, FP32 master weights under AMP (BF16 autocast), with and without
`cake_rmsnorm.patch()`, on identical batches from identical weights, and say whether the
patched model trains within the run's own noise.

Training is chaotic: moving one rounding anywhere moves the loss curve. So the noise is
measured, not assumed: the stock model is trained again with its norms computed in equivalent
ways that round differently (an IEEE 1 / sqrt in place of rsqrt, the sum of squares in FP64, y
rounded once at the end, and under torch.compile inductor's fused norm). The spread of their
final losses (the mean of the last steps) is the noise; the patched model's final loss is
reported against it, inside or outside, and by how much.

    python examples/train_tiny_llama.py                     # CUDA if present, 300 steps
    python examples/train_tiny_llama.py --device cpu --steps 60 --hidden 128 --layers 2 --no-compile
"""

import argparse
import copy
import json
import statistics
import time

import torch
import transformers

import cake_rmsnorm as cr


def synthetic_batches(steps, batch, seq, vocab, seed=0):
    """Arithmetic token sequences (start + k * stride mod vocab): learnable, so the loss falls."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 17, (batch, 1), generator=g)
        out.append((start + stride * torch.arange(seq)) % vocab)
    return out


class VariantNorm(torch.nn.Module):
    """The model's RMSNorm computed another equivalent way (the same formula, other roundings):
    "ieee" 1 / sqrt for rsqrt, "fp64" the statistics in FP64, "round_once" the whole formula in
    FP32 with y rounded once (as the fused kernels round it) where transformers rounds x_hat first."""

    def __init__(self, norm, kind):
        super().__init__()
        self.weight, self.eps, self.kind = norm.weight, norm.variance_epsilon, kind

    def forward(self, x):
        xf = x.double() if self.kind == "fp64" else x.float()
        ms = xf.pow(2).mean(-1, keepdim=True) + self.eps
        r = 1.0 / torch.sqrt(ms) if self.kind == "ieee" else torch.rsqrt(ms)
        if self.kind == "round_once":
            return (xf * r * self.weight.float()).to(x.dtype)
        return self.weight * (xf * r).float().to(x.dtype)


def use_variant(model, kind):
    for name, module in list(model.named_modules()):
        if type(module).__name__ == "LlamaRMSNorm":
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, VariantNorm(module, kind))


def run(base, batches, device, patched, compiled, lr, variant=None):
    model = copy.deepcopy(base).to(device)
    report = cr.patch(model) if patched else None
    if variant:
        use_variant(model, variant)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)

    net = torch.compile(model) if compiled else model  # the model's forward and backward; AdamW stays eager

    def step(ids):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):  # AMP: FP32 weights, BF16 compute
            loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    fn = step
    losses, times = [], []
    for i, ids in enumerate(batches):
        ids = ids.to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = fn(ids)
        losses.append(loss.item())  # synchronises
        if i >= 10:  # after warm-up and compilation
            times.append(time.perf_counter() - t0)
    return losses, statistics.median(times) * 1e3 if times else float("nan"), report


def final_loss(losses):
    """The mean of the last quarter of the steps (at most 50): where the run ends up."""
    k = max(1, min(50, len(losses) // 4))
    return statistics.fmean(losses[-k:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile runs")
    p.add_argument("--json", help="also write the curves and times here")
    args = p.parse_args()

    cfg = transformers.LlamaConfig(
        vocab_size=1024, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3 // 8 * 8,
        num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
        max_position_embeddings=args.seq, attn_implementation="sdpa")
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg)  # FP32 master weights; autocast computes in BF16
    batches = synthetic_batches(args.steps, args.batch, args.seq, cfg.vocab_size)

    arms = [("eager/stock", False, False, None), ("eager/cake", True, False, None)]
    arms += [(f"eager/stock-{v}", False, False, v) for v in ("ieee", "fp64", "round_once")]
    if not args.no_compile:
        arms += [("compile/stock", False, True, None), ("compile/cake", True, True, None)]
    results = {}
    for name, patched, compiled, variant in arms:
        torch._dynamo.reset()
        losses, ms, report = run(base, batches, args.device, patched, compiled, args.lr, variant)
        results[name] = {"losses": losses, "step_ms": ms, "final": final_loss(losses)}
        extra = f", {len(report.replaced)} norms patched" if report else ""
        print(f"{name:24s} loss {losses[0]:.4f} -> {losses[-1]:.4f} (final {results[name]['final']:.5f}), "
              f"median step {ms:.2f} ms{extra}")

    print(f"\n{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, batch {args.batch} x {args.seq} tokens, "
          f"{args.steps} steps, FP32 weights under BF16 autocast, {args.device}")
    for mode in ("eager",) if args.no_compile else ("eager", "compile"):
        a, b = results[f"{mode}/stock"], results[f"{mode}/cake"]
        print(f"{mode}: step {a['step_ms']:.2f} -> {b['step_ms']:.2f} ms ({a['step_ms'] / b['step_ms']:.3f}x)")
    # The noise: the final loss of every stock run, each rounding the norm another equivalent way.
    refs = {k: v["final"] for k, v in results.items() if "/stock" in k}
    lo, hi = min(refs.values()), max(refs.values())
    print("final loss of the stock model, its norm rounded each equivalent way (the run's noise): "
          + ", ".join(f"{k} {v:.5f}" for k, v in refs.items()) + f"; spread {lo:.5f}..{hi:.5f}")
    for name in (k for k in results if k.endswith("/cake")):
        got = results[name]["final"]
        if lo <= got <= hi:
            where = "inside that spread"
        else:
            off = lo - got if got < lo else got - hi
            where = f"outside that spread by {off:.5f} ({off / max(hi - lo, 1e-12):.2f}x its width)"
        print(f"{name}: final loss {got:.5f}, {where}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f)


if __name__ == "__main__":
    main()
