"""Where a patched training step's time goes against the unpatched one: both arms of one e2e
configuration (benchmarks/e2e.py's model, data and step) run --steps steps under torch.profiler
after warm-up, and the GPU time of each kernel name is summed per arm, then listed by the
difference (patched - unpatched), with the CPU time of the step beside it. For a row of the e2e
table that is slower patched: which kernels it adds, drops or slows.

    python lab/e2e_profile.py --model qwen3 --hidden 1024 --mode compile --amp 1 --out /tmp/qwen3-amp
"""

import argparse
import collections
import copy
import json
import os
import sys
import time

import torch

import cake_rmsnorm as cr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from e2e import MODES, SHAPES, build, make_step  # noqa: E402


def kernel_times(step, batches, steps):
    """{kernel name: (calls, GPU us)} over `steps` steps, and the wall ms a step."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(steps):
            step(batches[i % len(batches)])
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    out = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        # A record_function range (the op's name in a profile) shows on the GPU timeline too, as
        # an annotation spanning its kernels: counting it would count those kernels twice.
        annotation = getattr(e, "is_user_annotation", False) or e.name.startswith("cake_rmsnorm::")
        if e.device_type == torch.autograd.DeviceType.CUDA and not annotation:
            out[e.name][0] += 1
            out[e.name][1] += e.device_time_total
    return {k: (n // steps, us / steps) for k, (n, us) in out.items()}, wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3", choices=("llama", "qwen3"))
    p.add_argument("--hidden", type=int, default=1024, choices=sorted(SHAPES))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32768)  # e2e.py's
    p.add_argument("--mode", default="compile", choices=MODES)
    p.add_argument("--amp", type=int, default=1, choices=(0, 1))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", required=True, help="writes OUT.json and OUT.md")
    a = p.parse_args(argv)
    batch, seq = SHAPES[a.hidden]
    gen = torch.Generator(device="cpu").manual_seed(1)
    batches = [torch.randint(0, a.vocab, (batch, seq), generator=gen).cuda() for _ in range(4)]
    base = build(a.model, a.hidden, a.layers, a.vocab, a.amp == 1)
    patched = copy.deepcopy(base)
    cr.patch(patched)
    torch._dynamo.reset()
    per, wall = {}, {}
    for name, model in (("unpatched", base), ("patched", patched)):
        step = make_step(model, a.amp == 1, a.mode)
        for i in range(a.warmup):
            step(batches[i % len(batches)])
        per[name], wall[name] = kernel_times(step, batches, a.steps)
    names = set(per["unpatched"]) | set(per["patched"])
    rows = []
    for k in names:
        nu, tu = per["unpatched"].get(k, (0, 0.0))
        np_, tp = per["patched"].get(k, (0, 0.0))
        rows.append(dict(kernel=k, unpatched_calls=nu, unpatched_us=round(tu, 2), patched_calls=np_,
                         patched_us=round(tp, 2), diff_us=round(tp - tu, 2)))
    rows.sort(key=lambda r: -abs(r["diff_us"]))
    total = {n: round(sum(us for _, us in per[n].values()), 1) for n in per}
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, model=a.model, hidden=a.hidden,
                layers=a.layers, tokens=batch * seq, mode=a.mode, amp=a.amp, steps=a.steps,
                wall_ms=wall, gpu_us_a_step=total)
    with open(a.out + ".json", "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    lines = [f"# Kernels of a step, patched against unpatched ({meta['gpu']}, torch {meta['torch']})", "",
             f"{a.model} H {a.hidden}, {a.layers} layers, {batch * seq} tokens, {a.mode}, amp {a.amp}: wall ms a "
             f"step {wall['unpatched']:.2f} -> {wall['patched']:.2f} (under the profiler), GPU us a step "
             f"{total['unpatched']} -> {total['patched']}. The {a.top} largest differences, us a step:", "",
             "| kernel | calls (unpatched / patched) | us unpatched | us patched | patched - unpatched |",
             "|---|---|---|---|---|"]
    for r in rows[:a.top]:
        lines.append(f"| `{r['kernel'][:110]}` | {r['unpatched_calls']} / {r['patched_calls']} | {r['unpatched_us']} | "
                     f"{r['patched_us']} | {r['diff_us']} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
