"""Benchmark driver: shapes x ops x implementations -> JSON, a markdown table and a plot."""

import argparse
import json
import math
import os
import sys
import statistics
import time

import torch

import cake_rmsnorm as cr

from .check import TOL, check_arms
from .peers import PEERS, Case, available_peers, make_cake, make_cake_autograd, make_floor, make_torch_fused
from .timing import capture, copy_ceiling_tbps, measure

H_DEFAULT = [512, 1536, 2048, 4096, 5120, 6144]
T_DEFAULT = [256, 1024, 4096, 16384, 65536]
COPY_TBPS = 4.25  # the H200's device-to-device copy ceiling (read + written bytes), where a run measured none
FLOOR = "floor"  # the traffic floor's key in a row (peers.make_floor), never a peer
PATHS = ("autograd", "op")
OPS = ("fwd", "bwd", "step")  # the user's path (the headline) and the functional op path
ESIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def logical_bytes(op, T, H, residual, esize=2, wsize=2):
    """The protocol's bytes: x in and y out, rstd, w (fwd); g and x in, dx out, rstd, w in, an
    FP32 dw out (bwd); the residual route adds r in and h out (fwd), g_h in (bwd). esize and
    wsize: bytes of an activation and of a weight element (BF16: 2 and 2)."""
    e = esize
    fwd = 2 * e * T * H + 4 * T + wsize * H + (2 * e * T * H if residual else 0)
    bwd = 3 * e * T * H + 4 * T + (wsize + 4) * H + (e * T * H if residual else 0)
    return {"fwd": fwd, "bwd": bwd, "step": fwd + bwd}[op]


def _cake_arms(case, paths, deterministic=True):
    """{"cake@path": ops} for the paths asked for."""
    makers = {"autograd": make_cake_autograd, "op": make_cake}
    return {f"cake@{p}": makers[p](case, deterministic=deterministic) for p in paths}


def _rows_by_path(base, us, event_us, paths):
    """One row a path: ``us["cake"]`` is that path's time, the peers' are the same paired run's."""
    peers = {k: v for k, v in us.items() if not k.startswith("cake@")}
    rows = []
    for p in paths:
        key = f"cake@{p}"
        if key not in us:
            continue
        row = dict(base, path=p, us=dict(cake=us[key], **peers))
        if event_us is not None:
            row["event_us"] = dict(cake=event_us[key], **{k: v for k, v in event_us.items() if k in peers})
        rows.append(row)
    return rows


def _progress(i, n, label):
    width = 30
    done = int(width * i / max(n, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label:<40}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")


SHAPE_KEYS = {"H", "T", "residual", "per_head", "weight", "family"}


def load_shapes(path):
    """A shape list (docs/perf/heldout/shapes.json): H, T and optionally residual, per_head (heads
    of a [T, heads, H] view), weight ("bf16", "fp16" or "fp32") and family (a label)."""
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: a JSON list of shapes")
    out = []
    for i, r in enumerate(rows):
        extra = set(r) - SHAPE_KEYS if isinstance(r, dict) else None
        if extra is None or extra or not {"H", "T"} <= set(r):
            raise ValueError(f"{path}: shape {i} must be an object with H and T (keys {sorted(SHAPE_KEYS)})")
        if r["H"] < 8 or r["H"] % 8 or r["T"] < 1 or r.get("weight", "bf16") not in ESIZE:
            raise ValueError(f"{path}: shape {i} ({r}): H a positive multiple of 8, T positive, weight one of "
                             f"{sorted(ESIZE)}")
        out.append(dict(H=r["H"], T=r["T"], residual=bool(r.get("residual", False)),
                        per_head=int(r.get("per_head", 0)), weight=r.get("weight"), family=r.get("family")))
    return out


def shapes(args):
    if getattr(args, "shapes", None):
        return load_shapes(args.shapes)
    out = []
    for H in args.hidden:
        for T in args.tokens:
            out.append(dict(H=H, T=T, residual=False, per_head=0))
    if args.residual:
        for T in args.tokens:
            out.append(dict(H=6144, T=T, residual=True, per_head=0))
    for heads, dim in args.per_head or ():
        for T in [t for t in args.tokens if t >= 1024]:
            out.append(dict(H=dim, T=T, residual=False, per_head=heads))
    return out


def head_views(s):
    """argparse type for per-head views: "32x128,8x128" -> [(32, 128), (8, 128)] (heads x head dim)."""
    try:
        views = [tuple(int(v) for v in item.split("x")) for item in s.split(",") if item]
    except ValueError:
        views = []
    if not views or any(len(v) != 2 or min(v) <= 0 for v in views):
        raise argparse.ArgumentTypeError(f"per-head views are HEADSxDIM[,HEADSxDIM...], got {s!r}")
    return views


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _dtypes(args):
    """(weight dtype, activation dtype) of the --weight and --dtype options."""
    return DTYPES[args.weight], DTYPES[args.dtype]


def run_gpu(args, on_row=lambda rows, missing: None):
    peers, missing = available_peers(args.peers)
    for reason in missing.values():
        print(f"skipped peer: {reason}", file=sys.stderr)
    rows, checked = [], {}
    todo = [(s, op) for s in shapes(args) for op in args.ops]
    wdtype, dtype = _dtypes(args)
    for i, (s, op) in enumerate(todo):
        _progress(i, len(todo), f"{op} H={s['H']} T={s['T']}{' res' if s['residual'] else ''}")
        weight = s.get("weight") or args.weight  # a shape file's own weight dtype, else --weight
        case = Case(s["T"], s["H"], s["residual"], s["per_head"], wdtype=DTYPES[weight], dtype=dtype)
        impls = _cake_arms(case, args.paths, deterministic=args.mode == "det")
        for key, maker in peers.items():
            try:
                impls[key] = maker(case)
            except Exception as e:  # a peer that cannot run this shape is left out of the row
                print(f"\npeer {key} failed on {s}: {type(e).__name__}: {e}", file=sys.stderr)
        shape = tuple(sorted(s.items(), key=lambda kv: kv[0]))
        if shape not in checked:  # once a shape, before any timing: a wrong arm times another op
            checked[shape] = check_arms(case, impls)
            torch.cuda.empty_cache()
            for key, why in checked[shape][1].items():
                print(f"\n{key} is wrong at {s}: {why}" + ("" if key.startswith("cake@") else
                      "; timed, but left out of the best peer"), file=sys.stderr)
        worst, wrong = checked[shape]
        floor = make_floor(case) if args.floor else None
        if floor is not None:
            impls[FLOOR] = floor
        graphs = {}
        for key, ops in impls.items():
            try:
                graphs[key] = capture(ops[op])
            except Exception as e:
                print(f"\n{key} could not be captured for {op} {s}: {type(e).__name__}: {e}", file=sys.stderr)
        res = measure(graphs, args.replays)
        floor_us = res.pop(FLOOR, None)  # a reference, kept out of the peers' columns
        nbytes = logical_bytes(op, case.rows, s["H"], s["residual"], ESIZE[args.dtype], ESIZE[weight])
        base = {"op": op, "H": s["H"], "T": s["T"], "residual": s["residual"], "weight": weight,
                "dtype": args.dtype, "per_head": s["per_head"], "mode": args.mode, "bytes": nbytes}
        if s.get("family"):
            base["family"] = s["family"]
        # The kernels each arm ran, from the profiler's names: which backend a peer really used.
        base["kernels"] = {k: v[2] for k, v in res.items() if not k.startswith("cake@")}
        base["kernels"]["cake"] = sorted({n for k, v in res.items() if k.startswith("cake@") for n in v[2]})
        if floor_us is not None:
            base["floor_us"] = round(floor_us[0], 3)
        base["check"] = worst  # each arm's worst rel-L2 error against FP64 (bench.check)
        base["wrong"] = wrong
        rows += _rows_by_path(base, {k: round(v[0], 3) for k, v in res.items()},
                              {k: round(v[1], 3) for k, v in res.items()}, args.paths)
        on_row(rows, missing)
        del graphs, impls, case
        torch.cuda.empty_cache()
    _progress(len(todo), len(todo), "done")
    return rows, missing


CPU_BLOCKS = 9  # paired blocks a row: every implementation runs one block in turn, 9 times


def cpu_ignored(args):
    """{option: why} for the options the CPU run cannot honour (it times the CPU kernels against
    F.rms_norm on plain rows, wall clock)."""
    out = {}
    if args.residual:
        out["--residual"] = "the CPU run times the plain route only"
    if args.per_head:
        out["--per-head"] = "the CPU run times plain [T, H] rows only"
    if args.mode != "det":
        out["--mode"] = "the CPU path has one (deterministic) backward"
    extra = [p for p in args.peers if p != "F"] if getattr(args, "peers_given", False) else []
    if extra:  # only where the user asked for them: the default names every peer
        out["--peers"] = f"{','.join(extra)} run on a GPU only; the CPU run compares with F.rms_norm"
    if args.floor:
        out["--floor"] = "the traffic floor is a GPU measurement"
    if getattr(args, "shapes", None):
        out["--shapes"] = "the CPU run times small plain shapes (--hidden / --tokens)"
    return out


def run_cpu(args, on_row=lambda rows, missing: None):
    """No GPU: time our CPU path on small shapes (wall clock), paired with F.rms_norm block by
    block, so a loaded machine moves both alike; each row keeps the median and the spread."""
    print("no CUDA device: timing the CPU path on small shapes (wall clock, not the GPU protocol)",
          file=sys.stderr)
    for opt, why in cpu_ignored(args).items():
        print(f"{opt} not honoured: {why}", file=sys.stderr)
    rows = []
    # Small shapes unless --hidden / --tokens name others (a CPU run is slow at large ones).
    todo = [(H, T) for H in (args.user_hidden or (512, 2048)) for T in (args.user_tokens or (16, 256))]
    wdtype, dtype = _dtypes(args)
    for i, (H, T) in enumerate(todo):
        _progress(i, len(todo), f"cpu H={H} T={T}")
        case = Case(T, H, wdtype=wdtype, dtype=dtype, device="cpu")
        impls = dict(_cake_arms(case, args.paths), F=make_torch_fused(case))
        worst, wrong = check_arms(case, impls)
        for key, why in wrong.items():
            print(f"\n{key} is wrong at H {H} T {T}: {why}", file=sys.stderr)
        for op in args.ops:
            for ops in impls.values():
                ops[op]()
            blocks = {name: [] for name in impls}
            for _ in range(CPU_BLOCKS):  # each a block of at least 5 calls and 10 ms, in turn
                for name, ops in impls.items():
                    n, t0 = 0, time.perf_counter()
                    while n < 5 or time.perf_counter() - t0 < 0.01:
                        ops[op]()
                        n += 1
                    blocks[name].append((time.perf_counter() - t0) / n * 1e6)
            us = {name: round(statistics.median(b), 2) for name, b in blocks.items()}
            base = {"op": op, "H": H, "T": T, "residual": False, "weight": args.weight, "dtype": args.dtype,
                    "per_head": 0, "mode": "det", "check": worst, "wrong": wrong,
                    "bytes": logical_bytes(op, T, H, False, ESIZE[args.dtype], ESIZE[args.weight])}
            for row in _rows_by_path(base, us, None, args.paths):
                mine = blocks[f"cake@{row['path']}"]
                ratios = sorted(f / c for f, c in zip(blocks["F"], mine))  # block by block: paired
                row["spread_us"] = {"cake": [round(min(mine), 2), round(max(mine), 2)],
                                    "F": [round(min(blocks["F"]), 2), round(max(blocks["F"]), 2)]}
                row["speedup_spread"] = [round(ratios[0], 3), round(ratios[-1], 3)]
                rows.append(row)
            on_row(rows, {})
    _progress(len(todo), len(todo), "done")
    noisy = [r for r in rows if r["speedup_spread"][1] > UNRELIABLE_SPREAD * max(r["speedup_spread"][0], 1e-9)]
    if noisy:  # the paired blocks disagree: something else ran on this machine meanwhile
        print(f"UNRELIABLE: {len(noisy)} of {len(rows)} rows' paired blocks differ by more than "
              f"{UNRELIABLE_SPREAD:g}x in speedup (e.g. {noisy[0]['op']} H {noisy[0]['H']} T {noisy[0]['T']}: "
              f"{noisy[0]['speedup_spread'][0]}-{noisy[0]['speedup_spread'][1]}x); the machine was busy: "
              "run again on an idle one (--threads N pins the threads)", file=sys.stderr)
        for r in noisy:
            r["unreliable"] = True
    return rows, {}


# Paired blocks of one row whose speedups differ by more than this: a run not to be read as a result.
UNRELIABLE_SPREAD = 2.0


def best_peer(us, wrong=()):
    """The fastest peer of a row's times, leaving out the arms bench.check found wrong."""
    peers = {k: v for k, v in us.items() if k != "cake" and k not in wrong}
    if not peers:
        return None, None
    k = min(peers, key=peers.get)
    return k, peers[k]


def markdown(rows, title, ceiling=COPY_TBPS):
    """The rows as a table, with each row's % of `ceiling` TB/s (the run's measured copy ceiling);
    `ceiling` None or False (the CPU path) leaves the column out."""
    floor = any("floor_us" in r for r in rows)
    extra = (" floor us | floor GB/s |", "---|---|") if floor else ("", "")
    ceil = (" % ceiling |", "---|") if ceiling else ("", "")
    lines = [f"## {title}", "",
             "| op | H | T | route | cake us | cake GB/s |" + ceil[0] + " best peer | peer us | speedup |" + extra[0],
             "|---|---|---|---|---|---|" + ceil[1] + "---|---|---|" + extra[1]]
    for r in rows:
        us = r["us"]["cake"]
        gbs = r["bytes"] / us / 1e3
        k, pu = best_peer(r["us"], r.get("wrong", {}))
        route = "residual" if r["residual"] else (f"per-head x{r['per_head']}" if r["per_head"] else "plain")
        route += f", {r.get('path', 'op')}"
        if r.get("dtype", "bf16") != "bf16":
            route += f", {r['dtype']}"
        if r.get("weight", "bf16") != r.get("dtype", "bf16"):  # FP32 x with a 16-bit w names it
            route += f", {r['weight']} w"
        peer = f"{k} | {pu:.1f} | {pu / us:.2f}x" if k else "- | - | -"
        if k and r.get("speedup_spread"):  # the CPU run: the paired blocks' lowest and highest ratio
            lo, hi = r["speedup_spread"]
            peer += f" ({lo:.2f}-{hi:.2f})"
        pct = f"{100 * gbs / (ceiling * 1e3):.0f} % | " if ceiling else ""
        line = f"| {r['op']} | {r['H']} | {r['T']} | {route} | {us:.1f} | {gbs:.0f} | {pct}{peer} |"
        if floor:
            fu = r.get("floor_us")
            line += f" {fu:.1f} | {r['bytes'] / fu / 1e3:.0f} |" if fu else " - | - |"
        lines.append(line)
    wrong = [(r, arm, why) for r in rows for arm, why in r.get("wrong", {}).items()]
    if wrong:
        lines += ["", f"Arms wrong against FP64 (rel-L2 > {TOL}; timed, left out of the best peer):", ""]
        lines += [f"- {arm} at {r['op']} H {r['H']} T {r['T']}{' residual' if r['residual'] else ''}: {why}"
                  for r, arm, why in wrong]
    used = {}  # arm -> the distinct kernels it ran over these rows (GPU runs record them)
    for r in rows:
        for arm, names in r.get("kernels", {}).items():
            used.setdefault(arm, set()).update(names)
    if used:
        lines += ["", "Kernels each arm ran (profiler names):", ""]
        lines += [f"- {arm}: " + ", ".join(f"`{n[:90]}`" for n in sorted(names)) for arm, names in sorted(used.items())]
    return "\n".join(lines) + "\n"


def plot(rows, path, ceiling=COPY_TBPS):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot", file=sys.stderr)
        return
    ops = sorted({r["op"] for r in rows})
    hs = sorted({(r["H"], r["residual"], r["per_head"]) for r in rows})
    fig, axes = plt.subplots(len(ops), len(hs), figsize=(3.2 * len(hs), 2.8 * len(ops)), squeeze=False)
    for i, op in enumerate(ops):
        for j, key in enumerate(hs):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["op"] == op and (r["H"], r["residual"], r["per_head"]) == key),
                         key=lambda r: r["T"])
            impls = sorted({k for r in sel for k in r["us"]})
            for k in impls:
                pts = [(r["T"], r["bytes"] / r["us"][k] / 1e3) for r in sel if k in r["us"]]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k,
                        linewidth=2.5 if k == "cake" else 1)
            if ceiling:
                ax.axhline(ceiling * 1e3, color="k", linestyle="--", linewidth=0.8)
            ax.set_xscale("log", base=2)
            name = f"H={key[0]}" + (" res" if key[1] else "") + (f" x{key[2]} heads" if key[2] else "")
            ax.set_title(f"{op} {name}", fontsize=9)
            if ceiling:
                ax.set_ylim(0, ceiling * 1e3 * 1.1)
            if j == 0:
                ax.set_ylabel("GB/s")
            if i == len(ops) - 1:
                ax.set_xlabel("T")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def int_list(s):
    """argparse type for a comma-separated list of ints ("256,1024")."""
    try:
        return [int(v) for v in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of integers, got {s!r}") from None


def _host_main(args):
    from .host import host_markdown, run_host
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows, skipped = [], {}
    for H in args.hidden or [4096]:
        for T in args.tokens or [8]:
            r, skipped = run_host(T, H, DTYPES[args.dtype], DTYPES[args.weight], dev, calls=args.calls)
            rows += r
    where = torch.cuda.get_device_name() if dev == "cuda" else "CPU path (no CUDA device)"
    # On a GPU the kernels run asynchronously and the loop times the host alone; on a CPU the
    # kernels run in the call, so the time is the call's whole cost, compute included.
    what = ("Host cost, us a call (host time: the GPU work runs behind it)" if dev == "cuda" else
            f"Wall clock, us a call on the CPU path (compute included, {torch.get_num_threads()} threads)")
    meta = {"device": where, "torch": torch.__version__, "cake_rmsnorm": cr.__version__,
            "timing": "host wall clock per call, eager, median of 5 loops" if dev == "cuda" else
                      "CPU wall clock per call (compute included), eager, median of 5 loops",
            "threads": torch.get_num_threads(), "skipped": skipped}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(meta, rows=rows), f, indent=1)
    md = host_markdown(rows, f"{what}: {where}, torch {torch.__version__}")
    md += "".join(f"\n- {a} skipped: {why}" for a, why in skipped.items())
    with open(args.out + ".md", "w") as f:
        f.write(md + "\n")
    print(md)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m cake_rmsnorm bench", description=__doc__)
    p.add_argument("--ops", default="fwd,bwd,step", type=lambda s: [v for v in s.split(",") if v],
                   help=f"comma-separated subset of {','.join(OPS)}: forward, backward from saved tensors, "
                        "forward + backward (default: all three)")
    p.add_argument("--hidden", default=None, type=int_list, help=f"widths (default {H_DEFAULT}; --host: 4096)")
    p.add_argument("--tokens", default=None, type=int_list, help=f"token counts (default {T_DEFAULT}; --host: 8)")
    p.add_argument("--host", action="store_true",
                   help="host cost instead: wall-clock us a call (fwd, fwd with grad, fwd + bwd), eager, every arm")
    p.add_argument("--calls", default=300, type=int, help="--host: calls a timed loop")
    p.add_argument("--residual", action="store_true", help="add the residual route at H 6144")
    p.add_argument("--per-head", nargs="?", const=[(24, 256)], default=None, type=head_views,
                   help="add per-head views [T, heads, dim] at T >= 1024: alone [T, 24, 256], or a list "
                        "such as 32x128,8x128,16x64,24x256")
    p.add_argument("--peers", default=None, type=lambda s: [v for v in s.split(",") if v],
                   help="comma-separated subset of " + ", ".join(f"{k} ({v[0]})" for k, v in PEERS.items())
                        + " (default: all; a peer that is not installed is skipped, and said so)")
    p.add_argument("--shapes", default=None, metavar="FILE",
                   help="a JSON list of shapes in place of --hidden/--tokens/--residual/--per-head: H, T and "
                        "optionally residual, per_head, weight, family (docs/perf/heldout/shapes.json)")
    p.add_argument("--weight", default=None, choices=["bf16", "fp16", "fp32"],
                   help="weight dtype: the activation dtype (default) or fp32 (any of the three with fp32 x)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"],
                   help="activation dtype (fp32: the residual stream of mixed precision)")
    p.add_argument("--path", default="autograd,op", type=lambda s: [v for v in s.split(",") if v],
                   help="our arms, one row each from the same paired run: autograd (the user's path: "
                        "cake_rmsnorm with autograd, dw in w's dtype) and op (functional calls, preallocated "
                        "workspace, FP32 dw)")
    p.add_argument("--mode", default="det", choices=["det", "nondet"],
                   help="our backward's deterministic flag (det, the default; nondet runs the same "
                        "deterministic kernels: docs/python_api.md)")
    p.add_argument("--floor", action="store_true",
                   help="also time torch elementwise ops of each op's traffic (row['floor_us']; not a peer)")
    p.add_argument("--replays", default=30, type=int, help="paired replays an arm (GPU; default 30)")
    p.add_argument("--threads", default=None, type=int,
                   help="CPU threads for every arm (torch.set_num_threads; default: torch's current count), "
                        "recorded in the results")
    p.add_argument("--out", default="bench", help="output prefix: PREFIX.json, PREFIX.md, PREFIX.png")
    p.add_argument("--quick", action="store_true",
                   help="H 2048 only: T 1024 and 16384 on a GPU, T 256 on the CPU")
    args = p.parse_args(argv)
    for name, vals, low in (("--hidden", args.hidden, 8), ("--tokens", args.tokens, 1)):
        for v in vals or ():
            if v < low or (name == "--hidden" and v % 8):
                p.error(f"{name} {v}: " + ("widths are positive multiples of 8" if name == "--hidden"
                                            else "token counts are positive"))
    bad = [v for v in args.ops if v not in OPS] or (not args.ops and ["(none)"])
    if bad:
        p.error(f"--ops {','.join(bad)}: choose from {','.join(OPS)}")
    args.peers_given = args.peers is not None
    if args.peers is None:
        args.peers = list(PEERS)
    bad = [v for v in args.peers if v not in PEERS]
    if bad:
        p.error(f"--peers {','.join(bad)}: choose from {','.join(PEERS)}")
    if args.shapes:
        try:
            load_shapes(args.shapes)
        except (OSError, ValueError, TypeError, KeyError) as e:
            p.error(f"--shapes: {e}")
    if args.weight is None:
        args.weight = args.dtype
    if args.dtype != "fp32" and args.weight not in (args.dtype, "fp32"):
        p.error(f"--weight {args.weight}: the weight is the activation dtype ({args.dtype}) or fp32")
    if not args.path or any(v not in PATHS for v in args.path):
        p.error(f"--path {','.join(args.path)}: a comma-separated subset of {','.join(PATHS)}")
    args.paths = [v for v in PATHS if v in args.path]
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads {args.threads}: at least 1")
        torch.set_num_threads(args.threads)  # pinned for every arm, ours and the peers'
    args.threads = torch.get_num_threads()
    if args.host:
        return _host_main(args)
    args.user_hidden, args.user_tokens = args.hidden, args.tokens
    args.hidden = args.hidden or H_DEFAULT
    args.tokens = args.tokens or T_DEFAULT
    if args.quick:
        args.hidden, args.tokens = [2048], [1024, 16384]
        args.user_hidden, args.user_tokens = [2048], [256]
    gpu = torch.cuda.is_available()
    meta = {"gpu": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__,
            "cake_rmsnorm": cr.__version__,
            "timing": "GPU kernel time: union of kernel-active intervals per replay (CUPTI), median"
                      if gpu else f"CPU wall clock, {args.threads} threads: median of {CPU_BLOCKS} blocks paired "
                                  "with F.rms_norm, the paired ratios' range beside it",
            "threads": args.threads}
    if gpu:
        meta["copy_TBps"] = copy_ceiling_tbps()  # this card's copy ceiling, for the % column
    else:
        meta["not_honoured"] = cpu_ignored(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def write_json(rows, missing, complete):
        # Rewritten after every row ("complete": false), so a run stopped by a time limit keeps
        # every row it measured.
        with open(args.out + ".json", "w") as f:
            json.dump(dict(meta, skipped_peers=missing, complete=complete, rows=rows), f, indent=1)

    on_row = lambda rows, missing: write_json(rows, missing, False)  # noqa: E731
    rows, missing = run_gpu(args, on_row) if gpu else run_cpu(args, on_row)
    write_json(rows, missing, True)
    ours_wrong = sorted({f"{r['op']} H {r['H']} T {r['T']}" for r in rows
                         if any(k.startswith("cake@") for k in r.get("wrong", {}))})
    ceiling = meta.get("copy_TBps")  # None on the CPU, or where the copy did not fit
    title = f"{meta['gpu']}, torch {meta['torch']}, {meta['timing']}"
    md = markdown(rows, title + (f"; % of this card's {ceiling} TB/s copy ceiling" if ceiling else ""), ceiling=ceiling)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    plot([r for r in rows if r["path"] == args.paths[0]], args.out + ".png", ceiling=ceiling)  # the headline path
    print(md)
    if gpu:
        for path in args.paths:
            best = [(r, best_peer(r["us"], r.get("wrong", {}))) for r in rows if r["path"] == path]
            sp = [pu / r["us"]["cake"] for r, (k, pu) in best if k]
            if sp:
                print(f"{path} path: geomean speedup over the best peer "
                      f"{math.exp(sum(map(math.log, sp)) / len(sp)):.3f}x over {len(sp)} rows")
    if ours_wrong:
        print("cake_rmsnorm's own results failed the FP64 check at: " + "; ".join(ours_wrong), file=sys.stderr)
        return 1
    return 0
