"""What moves across the forward's window edges on the local GPU: the rows a window's last T
computes, against the same rows computed at T = edge + 1 by the next window's program. rstd in
FP32 ulps, y in ulps of the activation type, each as the largest distance and the share of rows
that moved; a few random inputs per edge, BF16/FP16 activations, activation-dtype and FP32
weights. Edges between programs of one row group give zeros (the tests hold them bitwise).

    python lab/window_edges.py --hidden 512,1536,2048,4096,6144 --out edges.json
"""

import argparse
import json

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.ulps import ulp_distance as ulps


def edge_stats(H, edge, dtype, wdtype, residual, seeds):
    worst = dict(rstd_max_ulps=0, rstd_rows_pct=0.0, y_max_ulps=0, y_rows_pct=0.0, y_without_rstd=0)
    for seed in range(seeds):
        g = torch.Generator().manual_seed(seed * 1000 + H)
        x = torch.randn(edge + 1, H, generator=g).to(dtype).cuda()
        r = torch.randn(edge + 1, H, generator=g).to(dtype).cuda() if residual else None
        w = (1 + 0.1 * torch.randn(H, generator=g)).to(wdtype).cuda()
        small = cr.cake_rmsnorm_train_forward(x[:edge], w, 1e-6, residual=None if r is None else r[:edge])
        large = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
        ds = ulps(small[1], large[1][:edge])
        dy = ulps(small[0], large[0][:edge]).amax(dim=1)
        worst["rstd_max_ulps"] = max(worst["rstd_max_ulps"], int(ds.max()))
        worst["rstd_rows_pct"] = max(worst["rstd_rows_pct"], 100 * float((ds > 0).float().mean()))
        worst["y_max_ulps"] = max(worst["y_max_ulps"], int(dy.max()))
        worst["y_rows_pct"] = max(worst["y_rows_pct"], 100 * float((dy > 0).float().mean()))
        worst["y_without_rstd"] += int(((dy > 0) & (ds == 0)).sum())
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="512,1536,2048,4096,6144", type=int_list)
    p.add_argument("--residual", action="store_true", help="the residual route's edges instead of the plain route's")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-rows", type=int, default=1 << 17, help="skip edges above this T")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    route = "fwd_residual" if args.residual else "fwd"
    rows = []
    for H in args.hidden:
        windows = cr.program_windows(route, H)[route]
        for (_, edge, before), (_, _, after) in zip(windows, windows[1:]):
            if edge > args.max_rows:
                continue
            for dtype in (torch.bfloat16, torch.float16):
                for wdtype in (dtype, torch.float32):
                    r = dict(route=route, H=H, edge=edge, before=before, after=after, dtype=str(dtype)[6:],
                             weight="fp32" if wdtype == torch.float32 else "act",
                             **edge_stats(H, edge, dtype, wdtype, args.residual, args.seeds))
                    rows.append(r)
                    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                          flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
