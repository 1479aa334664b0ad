"""Draw a bench run's GB/s plot again from its JSON (the plots of kept runs are not stored):
python -m cake_rmsnorm.bench.replot RUN.json [--out RUN.png] [--path autograd]."""

import argparse
import json
import sys

from .run import plot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cake_rmsnorm.bench.replot", description=__doc__.split("\n")[0])
    p.add_argument("run", help="a bench JSON (python -m cake_rmsnorm bench --out PREFIX writes PREFIX.json)")
    p.add_argument("--out", help="the PNG to write (default: the JSON's name, .png)")
    p.add_argument("--path", help="the rows' path to draw (default: the first in the run, the headline)")
    args = p.parse_args(argv)
    with open(args.run) as f:
        run = json.load(f)
    rows = run.get("rows") if isinstance(run, dict) else None
    if not rows or not all(isinstance(r, dict) and "op" in r and "us" in r for r in rows):
        print(f"{args.run}: not a bench run (no kernel-time rows)", file=sys.stderr)
        return 2
    path = args.path or rows[0].get("path")
    sel = [r for r in rows if r.get("path") == path] if path else rows
    if not sel:
        print(f"{args.run}: no rows on path {path!r}", file=sys.stderr)
        return 2
    out = args.out or (args.run[:-5] if args.run.endswith(".json") else args.run) + ".png"
    plot(sel, out, ceiling=run.get("copy_TBps"))
    print(f"wrote {out} ({len(sel)} rows, path {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
