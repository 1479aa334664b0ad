"""End-to-end training step: small transformers models trained with and without
cake_rmsnorm.patch(), in every mode users run (eager; torch.compile; mode="reduce-overhead",
CUDA graphs; inductor's cpp_wrapper), BF16 parameters or AMP (FP32 parameters under
torch.autocast(bfloat16)). AdamW, random token data, the same initial weights and data for both
arms. Under reduce-overhead each arm records the CUDA graphs inductor skipped (the skip counter).

Per configuration both arms are built (and compiled) first, then timed in alternating blocks
of steps (paired, so clock or thermal drift hits both alike); the step time is the median of
the measured steps (wall clock from the step's start to torch.cuda.synchronize() after the
optimizer step). The first step's loss of each arm is recorded: with the same weights and data
they differ only by the norms' rounding.

    python benchmarks/e2e.py --out docs/perf/h200-e2e
    python benchmarks/e2e.py --models llama --hidden 1024 --modes compile --amp 0   # one row

Writes OUT.json ({"rows": [{"model", "hidden", "layers", "tokens", "mode", "amp",
"unpatched_ms", "patched_ms", ...}]}, rewritten after every row) and OUT.md.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

import cake_rmsnorm as cr

CONFIGS = {"llama": ("LlamaConfig", "LlamaForCausalLM", {}), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {})}
# hidden: (batch, sequence): 4096 tokens a step at 1024, 8192 at 2048 and 4096.
SHAPES = {1024: (8, 512), 2048: (4, 2048), 4096: (2, 4096)}
MODES = ("eager", "compile", "reduce-overhead", "cpp_wrapper")


def build(model_name, hidden, layers, vocab, amp, seed=0):
    import transformers
    cfg_name, cls_name, extra = CONFIGS[model_name]
    heads = hidden // 128
    cfg = getattr(transformers, cfg_name)(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=int(hidden * 2.75) // 256 * 256,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(heads // 4, 1),
        head_dim=128, max_position_embeddings=4096, **extra)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(cfg)
    return model.to("cuda", torch.float32 if amp else torch.bfloat16)


def make_step(model, amp, compile_mode):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if compile_mode == "eager":
        fwd = model
    elif compile_mode == "reduce-overhead":
        fwd = torch.compile(model, mode="reduce-overhead")
    elif compile_mode == "cpp_wrapper":
        fwd = torch.compile(model, options={"cpp_wrapper": True})
    else:
        fwd = torch.compile(model)
    graphs = compile_mode == "reduce-overhead"

    def step(ids):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def time_steps(step, batches, n):
    out = []
    for i in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(batches[i % len(batches)])
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def run_config(model_name, hidden, layers, vocab, mode, amp, warmup, steps, block):
    batch, seq = SHAPES[hidden]
    gen = torch.Generator(device="cpu").manual_seed(1)
    batches = [torch.randint(0, vocab, (batch, seq), generator=gen).cuda() for _ in range(4)]
    base = build(model_name, hidden, layers, vocab, amp)
    patched_model = copy.deepcopy(base)
    report = cr.patch(patched_model)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters
    arms = {"unpatched": make_step(base, amp, mode), "patched": make_step(patched_model, amp, mode)}
    first_loss, skips = {}, {}
    for k, s in arms.items():  # one arm compiled at a time, so its CUDA-graph skips are its own
        before = sum(counters["inductor"].get(c, 0) for c in ("cudagraph_skips",))
        first_loss[k] = float(s(batches[0]))  # same weights, same data
        time_steps(s, batches, warmup)
        skips[k] = sum(counters["inductor"].get(c, 0) for c in ("cudagraph_skips",)) - before
    times = {k: [] for k in arms}
    rounds = []  # each round's patched / unpatched block medians: the ratio's spread beside it
    while len(times["patched"]) < steps:
        block_ms = {k: time_steps(s, batches, block) for k, s in arms.items()}
        for k, v in block_ms.items():
            times[k] += v
        rounds.append(statistics.median(block_ms["patched"]) / statistics.median(block_ms["unpatched"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    return dict(model=model_name, hidden=hidden, layers=layers, tokens=batch * seq, mode=mode, amp=amp,
                unpatched_ms=round(med["unpatched"], 3), patched_ms=round(med["patched"], 3),
                ratio=round(med["patched"] / med["unpatched"], 4), steps=len(times["patched"]),
                ratio_rounds=[round(min(rounds), 4), round(max(rounds), 4)],
                norms_replaced=len(report.replaced), loss_unpatched=round(first_loss["unpatched"], 5),
                loss_patched=round(first_loss["patched"], 5), vocab=vocab,
                spread_ms={k: [round(min(v), 3), round(max(v), 3)] for k, v in times.items()},
                cudagraph_skips=skips)


def spread(r):
    lo, hi = r.get("ratio_rounds") or (None, None)  # runs before the rounds were kept have none
    return "" if lo is None else f" ({lo:.3f}-{hi:.3f})"


def markdown(rows, meta):
    lines = [f"# End-to-end training step ({meta['gpu']}, torch {meta['torch']}, transformers "
             f"{meta['transformers']})", "",
             "Median ms a step (forward, backward, fused AdamW), unpatched vs `cake_rmsnorm.patch()`; "
             "amp: FP32 parameters under autocast(bfloat16), else BF16 parameters.", "",
             "| model | hidden | layers | tokens | mode | amp | unpatched ms | patched ms "
             "| patched / unpatched (its rounds' range) "
             "| first loss (unpatched / patched) | CUDA graphs skipped (unpatched / patched) |", "|---" * 11 + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['hidden']} | {r['layers']} | - | {r['mode']} | {r['amp']} | "
                         f"failed: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['hidden']} | {r['layers']} | {r['tokens']} | {r['mode']} | "
                     f"{r['amp']} | {r['unpatched_ms']:.2f} | {r['patched_ms']:.2f} | {r['ratio']:.3f}{spread(r)} | "
                     f"{r['loss_unpatched']:.4f} / {r['loss_patched']:.4f} | "
                     f"{r['cudagraph_skips']['unpatched']} / {r['cudagraph_skips']['patched']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="llama,qwen3", type=lambda s: s.split(","))
    p.add_argument("--hidden", default="1024,2048", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--modes", default=",".join(MODES), type=lambda s: s.split(","),
                   help="eager, compile, reduce-overhead (CUDA graphs), cpp_wrapper")
    p.add_argument("--amp", default="0,1", type=lambda s: [bool(int(v)) for v in s.split(",")])
    p.add_argument("--layers", default=4, type=int, help="layers (hidden 4096: at most --layers-4096)")
    p.add_argument("--layers-4096", default=2, type=int)
    p.add_argument("--vocab", default=32768, type=int)
    p.add_argument("--warmup", default=5, type=int)
    p.add_argument("--steps", default=24, type=int, help="measured steps an arm (>= 20)")
    p.add_argument("--block", default=4, type=int, help="steps an arm runs before the other's turn")
    p.add_argument("--out", default="e2e")
    a = p.parse_args(argv)
    import transformers
    torch._dynamo.config.recompile_limit = 64
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cake_rmsnorm": cr.__version__}
    rows = []
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    for model_name in a.models:
        for hidden in a.hidden:
            for amp in a.amp:
                for mode in a.modes:
                    t0 = time.time()
                    layers = min(a.layers, a.layers_4096) if hidden >= 4096 else a.layers
                    try:
                        row = run_config(model_name, hidden, layers, a.vocab, mode, amp, a.warmup, a.steps, a.block)
                    except Exception as e:  # a mode torch cannot compile this model in: recorded, not fatal
                        row = dict(model=model_name, hidden=hidden, layers=layers, mode=mode, amp=amp,
                                   error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
                    rows.append(row)
                    print(json.dumps(row), f"({time.time() - t0:.0f} s)", flush=True)
                    with open(a.out + ".json", "w") as f:
                        json.dump(dict(meta, rows=rows), f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
