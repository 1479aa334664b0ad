"""Train a small Llama from `transformers` (random init, synthetic tokens, nothing downloaded)
with and without `cake_rmsnorm.patch()`, eagerly and under `torch.compile`, on identical
batches from identical weights; print the largest loss difference between the patched and
the stock model and the median step time of each run.

    python examples/train_tiny_llama.py                     # CUDA if present, 300 steps
    python examples/train_tiny_llama.py --device cpu --steps 20 --hidden 128 --layers 2
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


class RoundOnceNorm(torch.nn.Module):
    """The model's RMSNorm with its rounding moved: the whole formula in FP32, y rounded once (as
    the fused kernels round it), where transformers' module rounds x_hat before the weight."""

    def __init__(self, norm):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.variance_epsilon

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def round_once(model):
    for name, module in list(model.named_modules()):
        if type(module).__name__ == "LlamaRMSNorm":
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, RoundOnceNorm(module))


def run(base, batches, device, patched, compiled, lr, rounded_once=False):
    model = copy.deepcopy(base).to(device)
    report = cr.patch(model) if patched else None
    if rounded_once:
        round_once(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)

    net = torch.compile(model) if compiled else model  # the model's forward and backward; AdamW stays eager

    def step(ids):
        opt.zero_grad(set_to_none=True)
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
    base = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    batches = synthetic_batches(args.steps, args.batch, args.seq, cfg.vocab_size)

    modes = [False] if args.no_compile else [False, True]
    results = {}
    for compiled in modes:
        for patched in (False, True):
            torch._dynamo.reset()
            losses, ms, report = run(base, batches, args.device, patched, compiled, args.lr)
            name = f"{'compile' if compiled else 'eager'}/{'cake' if patched else 'stock'}"
            results[name] = {"losses": losses, "step_ms": ms}
            extra = f", {len(report.replaced)} norms patched" if report else ""
            print(f"{name:16s} loss {losses[0]:.4f} -> {losses[-1]:.4f}, median step {ms:.2f} ms{extra}")

    print(f"\n{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, batch {args.batch} x {args.seq} tokens, "
          f"{args.steps} steps, BF16, {args.device}")
    def max_diff(a, b):
        return max(abs(x - y) for x, y in zip(results[a]["losses"], results[b]["losses"]))

    for compiled in modes:
        mode = "compile" if compiled else "eager"
        a, b = results[f"{mode}/stock"], results[f"{mode}/cake"]
        print(f"{mode}: max |loss(cake) - loss(stock)| = {max_diff(f'{mode}/stock', f'{mode}/cake'):.4f}; "
              f"step {a['step_ms']:.2f} -> {b['step_ms']:.2f} ms ({a['step_ms'] / b['step_ms']:.3f}x)")
    # The BF16 noise of this run: what moving one rounding changes, with no norm of ours in it.
    # Stock eager against stock inductor where both ran, and stock against the same model whose
    # norms round once (the formula in FP32, y rounded at the end: the fused kernels' rounding).
    torch._dynamo.reset()
    losses, ms, _ = run(base, batches, args.device, False, False, args.lr, rounded_once=True)
    results["eager/round-once"] = {"losses": losses, "step_ms": ms}
    refs = {"stock with its norms rounding once": max_diff("eager/stock", "eager/round-once")}
    if len(modes) == 2:
        refs["stock eager against stock compile"] = max_diff("eager/stock", "compile/stock")
    noise = max(refs.values())
    worst = max(max_diff(f"{m}/stock", f"{m}/cake") for m in ("compile" if c else "eager" for c in modes))
    print("BF16 noise reference (no norm of ours in it): " + "; ".join(f"{k} {v:.4f}" for k, v in refs.items()))
    print(f"cake against stock: {worst:.4f}, {'within' if worst <= noise else 'OUTSIDE'} the noise reference "
          f"({noise:.4f}); cake against round-once: {max_diff('eager/cake', 'eager/round-once'):.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f)


if __name__ == "__main__":
    main()
