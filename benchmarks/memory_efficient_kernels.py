"""The backward from y against the backward from x, paired in one process on the user's path
(autograd through cake_rmsnorm, memory_efficient False and True): GPU kernel time of the
backward (and of forward + backward) per shape, cold L2, with the ratio and its target (the
mode moves the same bytes: within 2 %). The plan sends the backward from y to the row kernel at
runtime widths and its one launch (no pairs, warp chunks or exact groups), so where the backward
from x runs those, from y may differ.

    python benchmarks/memory_efficient_kernels.py --out docs/perf/runs/h200-me-kernels             # BENCH widths
    python benchmarks/memory_efficient_kernels.py --shapes docs/perf/heldout/shapes.json --out ...  # held-out
"""

import argparse
import json
import statistics

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.peers import Case, _autograd_ops
from cake_rmsnorm.bench.run import DTYPES, int_list, load_shapes
from cake_rmsnorm.bench.timing import capture, measure


def arms(case):
    def forward(me):
        return lambda x, w, r: cr.cake_rmsnorm(x, w, case.eps, residual=r, memory_efficient=me)
    return {"x": _autograd_ops(case, forward(False)), "y": _autograd_ops(case, forward(True))}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="1024,2048,4096,5120,8192", type=int_list)
    p.add_argument("--tokens", default="1,64,1024,4096,16384,65536", type=int_list)
    p.add_argument("--residual", default="0", help="routes of the --hidden x --tokens grid: 0, 1 or 0,1")
    p.add_argument("--weights", default="bf16", help="weight dtypes of the grid: bf16, fp32 or bf16,fp32")
    p.add_argument("--shapes", default=None, help="a shape list (docs/perf/heldout/shapes.json) instead")
    p.add_argument("--ops", default="bwd,step")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--out", required=True, help="writes OUT.json and OUT.md")
    a = p.parse_args()
    shapes = load_shapes(a.shapes) if a.shapes else [
        dict(H=H, T=T, residual=r == "1", per_head=0, weight=wd)
        for H in a.hidden for T in a.tokens for r in a.residual.split(",") for wd in a.weights.split(",")]
    rows = []
    for s in shapes:
        wd = DTYPES[s.get("weight") or "bf16"]
        case = Case(s["T"], s["H"], residual=s["residual"], per_head=s["per_head"], wdtype=wd)
        ours = arms(case)
        for op in a.ops.split(","):
            res = measure({k: capture(v[op]) for k, v in ours.items()}, a.replays)
            row = dict(op=op, H=s["H"], T=s["T"], residual=s["residual"], per_head=s["per_head"], weight=str(wd),
                       us={k: v[0] for k, v in res.items()}, kernels={k: sorted(set(v[2])) for k, v in res.items()})
            row["y_over_x"] = row["us"]["y"] / row["us"]["x"]
            rows.append(row)
            print(f"{op} H={s['H']} T={s['T']} res={int(s['residual'])} w={wd}: from x {row['us']['x']:.2f} us, "
                  f"from y {row['us']['y']:.2f} us, y/x {row['y_over_x']:.3f}", flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "version": cr.__version__}
    with open(a.out + ".json", "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
    lines = [f"# The backward from y against from x ({meta['gpu']}, torch {meta['torch']}, cake {meta['version']})",
             "", "Kernel time, user's path (autograd), cold L2, paired; target y/x <= 1.02.", "",
             "| op | H | T | residual | w | from x us | from y us | y/x |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['H']} | {r['T']} | {int(r['residual'])} | {r['weight']} | "
                     f"{r['us']['x']:.2f} | {r['us']['y']:.2f} | {r['y_over_x']:.3f} |")
    for op in a.ops.split(","):
        q = [r["y_over_x"] for r in rows if r["op"] == op]
        if q:
            gm = statistics.geometric_mean(q)
            lines.append(f"\n{op}: geomean y/x {gm:.3f}, worst {max(q):.3f}, rows over 1.02: "
                         f"{sum(v > 1.02 for v in q)} of {len(q)}")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
