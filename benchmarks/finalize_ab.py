"""The backward's two dw finalize modes side by side under the benchmark protocol (CUDA
graphs, cold L2, paired replays, CUPTI kernel time): the PDL pair ("separate", the tables'
choice) and the finalize fused into the main launch ("fused": a cooperative grid with a grid
barrier). Shapes: the 30-shape matrix, the per-head view [T, 24, 256] and the residual route
at H 6144.

    python benchmarks/finalize_ab.py --replays 20 --out finalize-ab.json
"""

import argparse
import json

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.timing import capture, measure
from cake_rmsnorm.tuning import FINALIZE_MODES, finalize_override

TOKENS = (256, 1024, 4096, 16384, 65536)


def shapes():
    out = [("plain", H, T, T) for H in (512, 1536, 2048, 4096, 5120, 6144) for T in TOKENS]
    out += [("perhead", 256, T, 24 * T) for T in TOKENS[1:]]
    out += [("residual", 6144, T, T) for T in TOKENS]
    return out


def one(kind, H, T, rows, replays):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, H, generator=gen).bfloat16().cuda()
    g = torch.randn(rows, H, generator=gen).bfloat16().cuda()
    gr = torch.randn(rows, H, generator=gen).bfloat16().cuda() if kind == "residual" else None
    w = (1 + 0.1 * torch.randn(H, generator=gen)).bfloat16().cuda()
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
    ws = cr.cake_rmsnorm_train_backward_workspace(rows, H, "cuda")
    graphs = {}
    for mode in FINALIZE_MODES:
        with finalize_override(mode):
            graphs[mode] = capture(
                lambda: cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr, dx=dx, dw=dw, workspace=ws))
    res = measure(graphs, replays)
    return {"kind": kind, "H": H, "T": T, "sep": res["separate"][0], "fused": res["fused"][0]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--out", default="finalize-ab.json")
    a = p.parse_args()
    rows = []
    for kind, H, T, n in shapes():
        r = one(kind, H, T, n, a.replays)
        rows.append(r)
        print(f"{kind:8s} H={H:5d} T={T:6d} separate {r['sep']:8.2f} fused {r['fused']:8.2f} us "
              f"({r['sep'] / r['fused']:.3f}x)", flush=True)
    with open(a.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
