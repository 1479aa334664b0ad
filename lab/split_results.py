"""Split benchmark runs (python -m cake_rmsnorm bench --out ...) into the forward and backward
result files of docs/perf: h200-forward.json (op fwd) and h200-backward.json (op bwd, step),
rows {"op", "H", "T", "residual", "weight", "per_head", "mode", "path", "dtype", "us": {impl: us}}, each with
the bench's markdown table (.md) and GB/s plot (.png, where matplotlib imports) beside it.
Each run is one paired measurement; rows keep the run they come from ("run"), and no row
mixes runs.

    python lab/split_results.py docs/perf/runs/h200-main.json docs/perf/runs/h200-residual-perhead.json \
        --out docs/perf/h200
"""

import argparse
import json
import math

from cake_rmsnorm.bench.run import COPY_TBPS, ESIZE, best_peer, logical_bytes, markdown, plot


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", default="docs/perf/h200")
    args = p.parse_args()
    meta, seen, fwd, bwd = None, set(), [], []
    for path in args.runs:
        run = json.load(open(path))
        if meta is None:
            meta = {k: run[k] for k in ("gpu", "torch", "timing")}
            meta["copy_TBps"] = run.get("copy_TBps", COPY_TBPS)  # None: the card's ceiling was not measured
        for r in run["rows"]:
            key = (r["op"], r["H"], r["T"], r["residual"], r["weight"], r["per_head"], r["mode"], r.get("path", "op"))
            if key in seen:  # the first run listed owns a shape
                continue
            seen.add(key)
            row = {k: r[k] for k in ("op", "H", "T", "residual", "weight", "per_head", "mode", "us")}
            row["path"] = r.get("path", "op")  # rows from before the path field are the op path's
            row["dtype"] = r.get("dtype", "bf16")
            if "floor_us" in r:  # the traffic floor (bench --floor), a reference and not a peer
                row["floor_us"] = r["floor_us"]
            for k in ("check", "wrong"):  # bench.check's results: a wrong peer stays out of the best
                if k in r:
                    row[k] = r[k]
            row["run"] = path.rsplit("/", 1)[-1]
            (fwd if r["op"] == "fwd" else bwd).append(row)
    for name, rows in (("forward", fwd), ("backward", bwd)):
        with open(f"{args.out}-{name}.json", "w") as f:
            json.dump({**meta, "runs": args.runs, "rows": rows}, f, indent=1)
        # The table and plot take each row's logical bytes (a per-head row has T * heads rows).
        sized = [dict(r, bytes=logical_bytes(r["op"], r["T"] * (r["per_head"] or 1), r["H"], r["residual"],
                                             ESIZE[r["dtype"]], ESIZE[r["weight"]])) for r in rows]
        title = f"{meta['gpu']}, torch {meta['torch']}, {meta['timing']}; from {', '.join(args.runs)}"
        with open(f"{args.out}-{name}.md", "w") as f:
            f.write(markdown(sized, title, ceiling=meta["copy_TBps"]))
        headline = [r for r in sized if r["path"] == "autograd"] or sized  # one curve an arm
        plot(headline, f"{args.out}-{name}.png", ceiling=meta["copy_TBps"])
        for op, path in sorted({(r["op"], r["path"]) for r in rows}):
            best = [(r, best_peer(r["us"], r.get("wrong", {}))[1]) for r in rows if r["op"] == op and r["path"] == path]
            sel = [r for r, pu in best if pu]
            ratios = [pu / r["us"]["cake"] for r, pu in best if pu]
            small = [x for x, r in zip(ratios, sel) if r["T"] <= 4096]
            gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")  # noqa: E731
            print(f"{op} ({path} path): {len(sel)} rows, geomean vs best peer {gm(ratios):.3f}x (T<=4096 {gm(small):.3f}x), "
                  f"min {min(ratios):.2f}x, max {max(ratios):.2f}x")


if __name__ == "__main__":
    main()
