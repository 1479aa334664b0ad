"""The held-out shapes: real model widths at token counts nobody tuned for, fixed before tuning.

    python benchmarks/heldout.py shapes            # (re)writes docs/perf/heldout/shapes.json, sweep.json
    python benchmarks/heldout.py shapes --check    # exits 1 if the committed files differ
    python -m cake_rmsnorm bench --shapes docs/perf/heldout/shapes.json --out docs/perf/runs/h200-heldout-NAME
    python benchmarks/heldout.py summary RUN.json  # the targets: ratios to the best peer, % of the ceiling
    python -m cake_rmsnorm bench --shapes docs/perf/heldout/sweep.json --peers F --ops bwd --out sweep
    python benchmarks/heldout.py cliffs sweep.json # where the time a row rises > 5 % from one T to a larger one

The set is drawn once from a fixed seed: the widths of real model families (dense hidden sizes and
the per-head views of QK-norm models), two token counts each, log-uniform in 1..131072, then ten
more draws of a family; a quarter of the dense rows take the residual route and a quarter of all
rows an FP32 weight. The fine sweep is T = 1024..65536 in steps of 257 at four widths. Both files
are committed; `--check` holds them to this generator, so the set cannot drift towards a tuning.
"""

import argparse
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "docs", "perf", "heldout")
SEED = 20261204
T_MAX = 131072

# (family, hidden, heads): heads 0 is a dense [T, hidden] norm, else a per-head [T, heads, hidden] view.
FAMILIES = [
    ("SmolLM2-360M", 960, 0), ("Qwen2.5-0.5B", 896, 0), ("DeepSeek-V3 kv_a_layernorm", 512, 0),
    ("Qwen2.5-1.5B", 1536, 0), ("Llama-3.2-1B", 2048, 0), ("Gemma-2-2B", 2304, 0), ("Qwen3-4B", 2560, 0),
    ("GPT-OSS-20B", 2880, 0), ("Llama-3.2-3B", 3072, 0), ("Qwen2.5-7B", 3584, 0), ("Gemma-3-12B", 3840, 0),
    ("Llama-3.1-8B", 4096, 0), ("Qwen3-14B", 5120, 0), ("Gemma-3-27B", 5376, 0), ("Mixtral-8x22B", 6144, 0),
    ("DeepSeek-V3", 7168, 0), ("Llama-3.1-70B", 8192, 0), ("Mistral-Large-2", 12288, 0),
    ("Llama-3.1-405B", 16384, 0),
    ("Qwen3-8B q_norm", 128, 32), ("Qwen3-8B k_norm", 128, 8), ("Qwen3-235B q_norm", 128, 64),
    ("Gemma-3-12B q_norm", 256, 16), ("Gemma-3-27B k_norm", 128, 16),
]
SWEEP_WIDTHS = [896, 2048, 3584, 4096]
SWEEP_T = range(1024, 65536 + 1, 257)


def draw_tokens(rng):
    return max(1, min(T_MAX, round(math.exp(rng.uniform(0.0, math.log(T_MAX))))))


def heldout_shapes():
    rng = random.Random(SEED)
    picks = [f for f in FAMILIES for _ in range(2)] + [rng.choice(FAMILIES) for _ in range(10)]
    rows = []
    for name, hidden, heads in picks:
        rows.append(dict(family=name, H=hidden, T=draw_tokens(rng), per_head=heads, residual=False, weight="bf16"))
    dense = [r for r in rows if not r["per_head"]]
    for r in rng.sample(dense, len(rows) // 4):
        r["residual"] = True
    for r in rng.sample(rows, len(rows) // 4):
        r["weight"] = "fp32"
    return sorted(rows, key=lambda r: (r["per_head"] > 0, r["H"], r["T"], r["residual"], r["weight"]))


def sweep_shapes():
    return [dict(family="sweep", H=h, T=t, per_head=0, residual=False, weight="bf16") for h in SWEEP_WIDTHS
            for t in SWEEP_T]


def _dump(rows):
    return "[\n" + ",\n".join(json.dumps(r, sort_keys=True) for r in rows) + "\n]\n"


def cmd_shapes(args):
    files = {"shapes.json": _dump(heldout_shapes()), "sweep.json": _dump(sweep_shapes())}
    stale = []
    for name, text in files.items():
        path = os.path.join(OUT, name)
        if args.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(path)
            continue
        os.makedirs(OUT, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print(f"{path}: {text.count(chr(10)) - 2} shapes")
    if stale:
        print("differs from the generator: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


def _geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


# The targets (H200, user's path, best peer in one paired run): (no row below, geomean at least).
TARGETS = {"bwd": (1.00, 1.25), "step": (1.00, 1.20), "fwd": (0.97, 1.02)}
# The H200's copy ceiling, for runs that recorded none (cake_rmsnorm.bench.run.COPY_TBPS; kept here, as the
# best-peer rule below, so the script runs without the package).
COPY_TBPS = 4.25


def summarize(rows, path="autograd", ceiling=COPY_TBPS):
    """{op: dict(rows, geomean, worst, below, ceiling)} over one path's rows with a peer; the %
    of `ceiling` TB/s, the run's own copy ceiling where it recorded one (None: no %)."""
    out = {}
    for op in ("fwd", "bwd", "step"):
        sel = [r for r in rows if r["op"] == op and r.get("path", "op") == path]
        ratios = []
        for r in sel:
            peers = {k: v for k, v in r["us"].items() if k != "cake" and k not in r.get("wrong", {})}
            if peers:
                k = min(peers, key=peers.get)
                ratios.append((peers[k] / r["us"]["cake"], k, r))
        if not ratios:
            continue
        floor, target = TARGETS[op]
        big = [r for r in sel if r["T"] * max(r.get("per_head", 0), 1) >= 16384 and r["H"] >= 1024]
        pct = [100 * r["bytes"] / r["us"]["cake"] / 1e3 / (ceiling * 1e3) for r in big] if ceiling else []
        out[op] = dict(rows=len(ratios), geomean=_geomean([x for x, _, _ in ratios]),
                       worst=min(ratios, key=lambda t: t[0]), below=[t for t in ratios if t[0] < floor],
                       target=(floor, target), ceiling_min=min(pct) if pct else None)
    return out


def cmd_summary(args):
    with open(args.run) as f:
        run = json.load(f)
    ceiling = run.get("copy_TBps", COPY_TBPS)  # None: the run's card has no measured ceiling
    for op, s in summarize(run["rows"], args.path, ceiling).items():
        floor, target = s["target"]
        x, k, r = s["worst"]
        print(f"{op}: {s['rows']} rows, geomean {s['geomean']:.3f}x the best peer (target >= {target}), "
              f"worst {x:.3f}x {k} at H {r['H']} T {r['T']}, {len(s['below'])} below {floor}")
        for x, k, r in s["below"]:
            print(f"   {x:.3f}x {k}: H {r['H']} T {r['T']} per_head {r.get('per_head', 0)} "
                  f"{'residual ' if r['residual'] else ''}w {r.get('weight')}")
        if s["ceiling_min"] is not None:
            print(f"   lowest % of the {ceiling} TB/s ceiling at T >= 16384, H >= 1024: {s['ceiling_min']:.0f} %")
    return 0


def cliffs(rows, impl="cake", rise=0.05):
    """[(op, H, T_a, us_a, T_b, us_b)]: within one (op, H, route, path), each larger T_b whose time a
    row (us / T) is more than `rise` above the best time a row at any smaller T_a. Per-row time
    falls while a launch fills the machine and then stays flat; a rise is a plan that fills it
    worse at the larger T (a wave quantized badly, a window edge in the wrong place)."""
    out = []
    keys = {(r["op"], r["H"], r["residual"], r.get("per_head", 0), r.get("path", "op")) for r in rows}
    for key in sorted(keys):
        sel = sorted((r for r in rows if (r["op"], r["H"], r["residual"], r.get("per_head", 0),
                                          r.get("path", "op")) == key), key=lambda r: r["T"])
        best = None  # (T, us) with the lowest us / T so far
        for r in sel:
            us = r["us"][impl]
            if best is not None and us / r["T"] > (1 + rise) * best[1] / best[0]:
                out.append((key[0], key[1], best[0], best[1], r["T"], us))
            if best is None or us / r["T"] < best[1] / best[0]:
                best = (r["T"], us)
    return out


def cmd_cliffs(args):
    with open(args.run) as f:
        rows = json.load(f)["rows"]
    found = cliffs(rows, args.impl, args.rise)
    for op, h, ta, ua, tb, ub in found:
        print(f"{op} H {h}: T {tb} took {ub:.2f} us, {ub / tb / (ua / ta) - 1:+.1%} a row over T {ta} ({ua:.2f} us)")
    print(f"{len(found)} cliffs over {args.rise:.0%}" if found else f"no cliff over {args.rise:.0%}")
    return 1 if found else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shapes", help="write (or --check) docs/perf/heldout/shapes.json and sweep.json")
    s.add_argument("--check", action="store_true", help="exit 1 if the committed files differ from the generator")
    s = sub.add_parser("summary", help="a held-out run against the targets")
    s.add_argument("run", help="a bench JSON (python -m cake_rmsnorm bench --shapes ... --out PREFIX)")
    s.add_argument("--path", default="autograd", choices=["autograd", "op"])
    s = sub.add_parser("cliffs", help="token counts of a sweep whose time a row rises over a smaller T's")
    s.add_argument("run")
    s.add_argument("--impl", default="cake", help="whose times (default: ours)")
    s.add_argument("--rise", default=0.05, type=float, help="the rise that counts (default 0.05)")
    a = p.parse_args(argv)
    return {"shapes": cmd_shapes, "summary": cmd_summary, "cliffs": cmd_cliffs}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
