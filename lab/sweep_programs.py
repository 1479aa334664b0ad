"""Sweep program shapes per (direction, H, T) on the local GPU under the benchmark protocol
(CUDA graphs, cold L2, paired replays, CUPTI kernel time) and report the fastest candidates
next to the current table's choice: the measurements the window tables in csrc/dispatch are
filled from.

    python lab/sweep_programs.py --direction fwd --hidden 512,2048 --tokens 256,4096,65536 \
        --out sweep-fwd
"""

import argparse
import json
import sys

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.timing import capture, measure
from cake_rmsnorm.tuning import BACKWARD, FORWARD, program_override

MAX_THREADS = {"fwd": 512, "bwd": 512}
# The backward's CTAs past 256 threads run its wide instance, VPT 4 only (params.h, kMaxBwdWideThreads).
BWD_NARROW_THREADS = 256
VPTS = {"fwd": (1, 2, 3, 4, 6, 8), "bwd": (1, 2, 3, 4)}
SMEM_LIMIT = 227 * 1024


def ring_bytes(direction, cta, vpt, stages, residual=False):
    if direction == "fwd":
        return stages * (2 if residual else 1) * vpt * cta * 16
    return stages * cta * ((3 if residual else 2) * vpt * 16 + 4)


def candidates(direction, H, ctas_per_sm, stage_list, rows_list, group_rows=(1,), residual=False):
    nvec = H // 8
    out = []
    tpr = 1
    while tpr <= MAX_THREADS[direction]:
        vpt = next((v for v in VPTS[direction] if v * tpr >= nvec), None)
        if vpt is not None and tpr * vpt < 2 * nvec:  # drop groups twice wider than the row
            for rows in rows_list:
                cta = tpr * rows
                wide_ok = direction == "fwd" or cta <= BWD_NARROW_THREADS or vpt == 4
                if 32 <= cta <= MAX_THREADS[direction] and (tpr <= 32 or rows < 16) and wide_ok:
                    for stages in stage_list:
                        if ring_bytes(direction, cta, vpt, stages, residual) > SMEM_LIMIT:
                            continue
                        for cps in ctas_per_sm:
                            for gr in group_rows if stages == 0 else (1,):
                                out.append((tpr, cta, vpt, cps, stages, gr))
        tpr *= 2
    return out


def one(direction, H, T, args):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, H, generator=g).bfloat16().cuda()
    gy = torch.randn(T, H, generator=g).bfloat16().cuda()
    w = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16().cuda()
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    y, s = torch.empty_like(x), torch.empty(T, device="cuda")
    r = torch.randn(T, H, generator=g).bfloat16().cuda() if args.residual else None
    h = torch.empty_like(x) if args.residual else None
    dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    key = FORWARD if direction == "fwd" else BACKWARD

    def call():
        if direction == "fwd":
            cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r, out=y, rstd=s, residual_out=h)
        else:
            cr.cake_rmsnorm_train_backward(gy, x, w, rstd, g_residual=r, dx=dx, dw=dw, workspace=ws)

    graphs = {"table": capture(call)}
    for tpr, cta, vpt, cps, stages, gr in candidates(direction, H, args.ctas_per_sm, args.stages, args.rows,
                                                     args.group_rows, args.residual):
        with program_override(key, tpr, cta, vpt, cps, stages, gr):
            try:
                name = f"t{tpr}x{cta // tpr}_v{vpt}_s{stages}_c{cps}" + (f"_r{gr}" if gr > 1 else "")
                graphs[name] = capture(call)
            except RuntimeError as e:  # a shape this width cannot run
                print(f"skip {tpr},{cta},{vpt},{stages}: {e}", file=sys.stderr)
    res = measure(graphs, args.replays)
    ranked = sorted(res.items(), key=lambda kv: kv[1][0])
    return {"direction": direction, "residual": bool(args.residual), "H": H, "T": T, "table_us": res["table"][0],
            "best": [(k, round(v[0], 3)) for k, v in ranked[: args.top]],
            "all": {k: round(v[0], 3) for k, v in ranked}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--direction", choices=["fwd", "bwd"], default="fwd")
    p.add_argument("--hidden", default="512,2048,6144", type=int_list)
    p.add_argument("--tokens", default="256,4096,65536", type=int_list)
    p.add_argument("--ctas-per-sm", default="0", type=int_list)
    p.add_argument("--stages", default="2,3,4", type=int_list,
                   help="ring depths to try; 0: the streaming forward (no ring, a group a row)")
    p.add_argument("--rows", default="1,2,4,8", type=int_list,
                   help="row groups per CTA to try")
    p.add_argument("--group-rows", default="1", type=int_list,
                   help="rows a streaming row group takes (stages 0): 1, 4 (exact narrow groups)")
    p.add_argument("--residual", action="store_true",
                   help="the residual route: forward x + r -> h_new; backward with g_residual (h's gradient)")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--top", type=int, default=3)
    p.add_argument("--out", default="sweep")
    args = p.parse_args()
    rows = []
    for H in args.hidden:
        for T in args.tokens:
            r = one(args.direction, H, T, args)
            rows.append(r)
            with open(args.out + ".json", "w") as f:  # partial results survive a time limit
                json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
            best = ", ".join(f"{k} {v:.1f}" for k, v in r["best"])
            print(f"{args.direction}{'+res' if args.residual else ''} H={H} T={T}: table {r['table_us']:.1f} us; best {best}", flush=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
