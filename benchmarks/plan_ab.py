"""The backward's derived plan (dispatch/plan.h, plan_backward: CTAs an SM and ring depth from the
device) against the table's plain program (every resident CTA, the table's ring), paired in one
process on the op path: the tuning hook `program_override` runs the table's program as given,
which is the plan before the derivation. Same bits either way (checked here on every shape).

    python benchmarks/plan_ab.py --shapes docs/perf/heldout/shapes.json --out ab-heldout
    python benchmarks/plan_ab.py --hidden 512,1536,2048,4096,5120,6144 --tokens 256,1024,4096,16384,65536
    python benchmarks/plan_ab.py --hidden 2048,3584 --tokens 1024:65536:257 --only-moved --out ab-sweep

Rows whose derived plan equals the table's are skipped with --only-moved (they time the same
kernel twice). Prints each row's derived/table time ratio and the geomean.
"""

import argparse
import json
import math

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.peers import Case, make_cake, make_torch_fused
from cake_rmsnorm.bench.run import load_shapes
from cake_rmsnorm.bench.timing import capture, measure
from cake_rmsnorm.tuning import BACKWARD, program_override


def tokens(s):
    if ":" in s:
        lo, hi, step = (int(v) for v in s.split(":"))
        return list(range(lo, hi + 1, step))
    return [int(v) for v in s.split(",")]


def table_program(route, H, T):
    """The window table's backward program for (H, T) as override arguments (every resident CTA)."""
    for w in cr.program_windows(route, H)[route]:
        above, at_most, _ = w
        if T > above and (at_most is None or T <= at_most):
            g = w.group
            return dict(tpr=g["threads_per_row"], cta=g["threads_per_row"] * g["groups_per_cta"],
                        vpt=g["vectors_per_thread"], ctas_per_sm=0, stages=g["ring_rows"])
    raise ValueError("no window")


def under(prog, fn):
    def run():
        with program_override(BACKWARD, **prog):
            return fn()
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=None)
    p.add_argument("--hidden", default="3584", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--tokens", default="12345", type=tokens, help="a list, or LO:HI:STEP")
    p.add_argument("--ops", default="bwd")
    p.add_argument("--only-moved", action="store_true")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    shapes = load_shapes(a.shapes) if a.shapes else [dict(H=h, T=t, residual=False, per_head=0, weight=None)
                                                     for h in a.hidden for t in a.tokens]
    rows, ratios = [], []
    for s in shapes:
        case = Case(s["T"], s["H"], s["residual"], s["per_head"],
                    wdtype=torch.float32 if s.get("weight") == "fp32" else torch.bfloat16)
        route = "bwd_residual" if s["residual"] else "bwd"
        prog = table_program(route, s["H"], case.rows)
        ours, yard = make_cake(case), make_torch_fused(case)
        derived = [t.clone() for t in ours["bwd"]()]  # the op path writes the same dx and dw each call
        mine = cr.last_launch()
        with program_override(BACKWARD, **prog):
            table = [t.clone() for t in ours["bwd"]()]
        theirs = cr.last_launch()
        moved = (mine["program"], mine["launch"]["grid"]) != (theirs["program"], theirs["launch"]["grid"])
        if a.only_moved and not moved:
            continue
        same = all(torch.equal(x, y) for x, y in zip(derived, table))
        for op in a.ops.split(","):
            graphs = {"derived": capture(ours[op]), "table": capture(under(prog, ours[op])), "F": capture(yard[op])}
            res = measure(graphs, a.replays)
            us = {k: v[0] for k, v in res.items()}
            row = dict(op=op, H=s["H"], T=s["T"], per_head=s["per_head"], residual=s["residual"],
                       weight=s.get("weight") or "bf16", plan=mine["program"], grid=mine["launch"]["grid"],
                       table=theirs["program"], table_grid=theirs["launch"]["grid"], us=us, same_bits=same,
                       moved=moved)
            rows.append(row)
            ratios.append(us["derived"] / us["table"])
            print(f"{op} H {s['H']} T {s['T']}: {mine['program']} grid {mine['launch']['grid']} "
                  f"{us['derived']:.2f} us vs table {us['table']:.2f} ({us['derived'] / us['table']:.3f}), "
                  f"F {us['F']:.2f}, bits {'same' if same else 'DIFFER'}", flush=True)
    if ratios:
        print(f"geomean derived/table {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f} over {len(ratios)} rows")
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
