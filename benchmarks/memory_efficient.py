"""The memory-efficient mode where users feel it: a patched transformers model's training step
with patch(model) and patch(model, memory_efficient=True), the same weights and data.

Per configuration: the activation bytes autograd saved in the step's forward (distinct storages,
saved_tensors_hooks; eager only), on CUDA the step's peak (max_memory_allocated over the step,
less what was allocated before it), and the median step time over paired blocks. The expected
saving is T x H x (bytes an element of the norm's input: 2 in BF16, 4 under AMP) x (norms in the
mode: patch() keeps per-head QK norms saving x, docs/python_api.md#memory-efficient-mode).

    python benchmarks/memory_efficient.py --out docs/perf/h200-memory-efficient      # CUDA
    python benchmarks/memory_efficient.py --tokens 256 --layers 2 --out /tmp/me-cpu   # the CPU path
"""

import argparse
import json
import statistics
import time

import torch

import cake_rmsnorm as cr

CONFIGS = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}


def build(name, hidden, layers, amp, dev, seed=0):
    import transformers
    cfg_name, cls_name = CONFIGS[name]
    heads = max(hidden // 128, 1)
    cfg = getattr(transformers, cfg_name)(
        vocab_size=1024, hidden_size=hidden, intermediate_size=int(hidden * 2.75) // 256 * 256,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(heads // 4, 1),
        head_dim=128, max_position_embeddings=max(8192, 4096))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return getattr(transformers, cls_name)(cfg).to(dev, torch.float32 if amp else torch.bfloat16)


def saved_bytes(run):
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    return sum(seen.values()), loss


def arm(name, hidden, layers, amp, mode, me, ids, dev):
    model = build(name, hidden, layers, amp, dev)
    report = cr.patch(model, memory_efficient=me)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    fwd = model if mode == "eager" else torch.compile(model)

    def loss_of():
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
            return fwd(input_ids=ids, labels=ids).loss

    def step():
        loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step()  # warm (compile, the optimizer's state)
    # The norms in the mode: patch() keeps per-head norms (their output goes to RoPE) saving x.
    mem = sum(bool(getattr(model.get_submodule(p), "memory_efficient", False)) for p, _ in report.replaced)
    out = {"norms": len(report.replaced), "mode_norms": mem, "saves_x": len(report.saves_x)}
    if mode == "eager":
        nb, loss = saved_bytes(loss_of)
        loss.backward()
        opt.zero_grad(set_to_none=True)
        out["saved_bytes"] = nb
    if dev == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        out["peak_bytes"] = torch.cuda.max_memory_allocated() - base
    return out, step


def timed(step, dev, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        if dev == "cuda":
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--hidden", default=None, help="one a model, in --models' order (default 4096,2048)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=None, help="tokens a step (default 8192 on CUDA, 256 on a CPU)")
    p.add_argument("--amp", default="0,1", help="0: BF16 parameters; 1: FP32 parameters under autocast(bfloat16)")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--steps", type=int, default=5, help="timed steps an arm, in alternating blocks of one")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads), recorded")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.threads:
        torch.set_num_threads(a.threads)
    models = a.models.split(",")
    hiddens = [int(h) for h in (a.hidden or "4096,2048").split(",")]
    tokens = a.tokens or (8192 if dev == "cuda" else 256)
    seq = min(tokens, 2048)
    rows = []
    for name, hidden in zip(models, hiddens):
        for amp in (bool(int(v)) for v in a.amp.split(",")):
            for mode in a.modes.split(","):
                ids = torch.randint(0, 1024, (tokens // seq, seq), device=dev)
                std, step_std = arm(name, hidden, a.layers, amp, mode, False, ids, dev)
                eff, step_eff = arm(name, hidden, a.layers, amp, mode, True, ids, dev)
                ms = {False: [], True: []}
                for _ in range(a.steps):  # paired: one step of each, alternately
                    ms[False].append(timed(step_std, dev, 1))
                    ms[True].append(timed(step_eff, dev, 1))
                want = eff["mode_norms"] * tokens * hidden * (4 if amp else 2)
                row = dict(model=name, hidden=hidden, layers=a.layers, tokens=tokens, amp=amp, mode=mode, device=dev,
                           threads=torch.get_num_threads(), norms=std["norms"], mode_norms=eff["mode_norms"],
                           expected_saving=want,
                           saves_x=eff["saves_x"], std_ms=statistics.median(ms[False]),
                           eff_ms=statistics.median(ms[True]))
                for k in ("saved_bytes", "peak_bytes"):
                    if k in std:
                        row[k + "_std"], row[k + "_eff"] = std[k], eff[k]
                        row[k + "_saving_over_expected"] = (std[k] - eff[k]) / want
                row["time_ratio"] = row["eff_ms"] / row["std_ms"]
                rows.append(row)
                print(json.dumps(row), flush=True)
                with open(a.out + ".json", "w") as f:
                    json.dump({"rows": rows}, f, indent=1)
    lines = [f"# memory_efficient=True against the standard mode ({dev}, {torch.__version__})", "",
             "| model | H | T | amp | mode | saved activations saving / expected | peak saving / expected "
             "| step ms std | step ms eff | eff / std |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sv = r.get("saved_bytes_saving_over_expected")
        pk = r.get("peak_bytes_saving_over_expected")
        lines.append(f"| {r['model']} | {r['hidden']} | {r['tokens']} | {int(r['amp'])} | {r['mode']} | "
                     f"{'-' if sv is None else f'{sv:.3f}'} | {'-' if pk is None else f'{pk:.3f}'} | "
                     f"{r['std_ms']:.1f} | {r['eff_ms']:.1f} | {r['time_ratio']:.3f} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
