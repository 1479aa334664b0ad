"""Paired A/B of the exact narrow groups (compile-time-width kernels, programs.h exact_group)
against the runtime-width kernels of the same programs, in one build: the tuning hook
`exact_groups(False)` runs the latter. Both have the same bits (tests/test_tuning.py); this
measures what the compile-time width buys, under the benchmark protocol (CUDA graphs, cold L2,
interleaved replays, CUPTI kernel time).

    python lab/exact_ab.py --hidden 512,768 --tokens 256,4096,65536 --out exact-ab
    python lab/exact_ab.py --hidden 256 --tokens 256,65536 --heads 24   # the per-head view
"""

import argparse

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.timing import capture, measure, write_rows
from cake_rmsnorm.tuning import exact_groups


def one(H, T, args):
    rows = T * args.heads
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, H, generator=g).bfloat16().cuda()
    r = torch.randn(rows, H, generator=g).bfloat16().cuda() if args.residual else None
    gy = torch.randn(rows, H, generator=g).bfloat16().cuda()
    gr = torch.randn(rows, H, generator=g).bfloat16().cuda() if args.residual else None
    w = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16().cuda()
    y, s = torch.empty_like(x), torch.empty(rows, device="cuda")
    h = torch.empty_like(x) if args.residual else None
    cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r, out=y, rstd=s, residual_out=h)
    xs = h if args.residual else x
    dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
    ws = cr.cake_rmsnorm_train_backward_workspace(rows, H, "cuda")

    def fwd():
        cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r, out=y, rstd=s, residual_out=h)

    def bwd():
        cr.cake_rmsnorm_train_backward(gy, xs, w, s, g_residual=gr, dx=dx, dw=dw, workspace=ws)

    graphs = {}
    for op, fn in (("fwd", fwd), ("bwd", bwd)):
        if op not in args.ops:
            continue
        for enabled, tag in ((True, "exact"), (False, "runtime")):
            with exact_groups(enabled):
                graphs[f"{op}_{tag}"] = capture(fn)
    res = measure(graphs, args.replays)
    return {"H": H, "T": T, "heads": args.heads, "residual": bool(args.residual),
            "us": {k: round(v[0], 3) for k, v in res.items()}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="256,512,768", type=int_list)
    p.add_argument("--tokens", default="256,1024,4096,16384,65536", type=int_list)
    p.add_argument("--heads", type=int, default=1, help="rows a token (the per-head view [T, heads, H])")
    p.add_argument("--ops", default="fwd,bwd", type=lambda s: s.split(","))
    p.add_argument("--residual", action="store_true")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--out", default="exact-ab")
    args = p.parse_args()
    rows = []
    for H in args.hidden:
        for T in args.tokens:
            r = one(H, T, args)
            rows.append(r)
            write_rows(args.out + ".json", rows)  # partial results survive a time limit
            u = r["us"]
            cells = "  ".join(f"{op} {u[op + '_exact']:.2f} vs {u[op + '_runtime']:.2f} "
                              f"({u[op + '_runtime'] / u[op + '_exact']:.3f}x)" for op in args.ops)
            print(f"H={H} T={T}{f' x{args.heads}' if args.heads > 1 else ''}{' res' if args.residual else ''}: "
                  f"exact vs runtime us  {cells}", flush=True)


if __name__ == "__main__":
    main()
