"""rstd and y against FP64 in the kernels' row order (the pairs order, which the CPU path
computes bit for bit) and in the order the ring and streaming groups of 4 and 6 vectors used
before it (one tree over a thread's vectors), with a correctly rounded sum of squares as the
floor any FP32 statistic has. numpy emulation, checked bitwise against the CPU path's rstd
first. Runs on CPU. Usage: python lab/order_accuracy.py [--rows 8192] [--out F.json]"""

import argparse
import json

import numpy as np
import torch

import cake_rmsnorm as cr

EPS = 1e-6


def tree(a):
    """vec.cuh's Tree over the last axis: the first half, then the rest, then their sum."""
    n = a.shape[-1]
    if n == 1:
        return a[..., 0]
    return tree(a[..., :n // 2]) + tree(a[..., n // 2:])


def butterfly(a):
    """An xor butterfly over the last axis (a power of two lanes)."""
    n = a.shape[-1]
    lanes = np.arange(n)
    o = n // 2
    while o:
        a = a + a[..., lanes ^ o]
        o //= 2
    return a[..., 0]


def leaves(h):
    """forward.cuh's squares of 8-element vectors: fma(f[2i], f[2i], f[2i+1]^2), then a tree of 4.
    h holds 16-bit values, so f[2i]^2 and the FP64 sum below are exact: one rounding, as the FMA."""
    v = h.reshape(h.shape[0], -1, 4, 2).astype(np.float64)
    odd = (v[..., 1].astype(np.float32) * v[..., 1].astype(np.float32)).astype(np.float64)
    return tree((v[..., 0] * v[..., 0] + odd).astype(np.float32))


def row_sum(h, tpr, vectors, pairs):
    """row_order.h's RowSum for 16-bit rows whose group covers the row."""
    lv = leaves(h)
    rows, nvec = lv.shape
    assert nvec <= tpr * vectors, "a row past its group"
    lv = np.concatenate([lv, np.zeros((rows, tpr * vectors - nvec), np.float32)], axis=1)
    part = lv.reshape(rows, vectors, tpr).transpose(0, 2, 1)  # [row, lane, k]: vector lane + k tpr
    if not pairs:
        s = tree(part)
        if tpr <= 32:
            return butterfly(s)
        return butterfly(butterfly(s.reshape(rows, tpr // 32, 32)))
    e, o = tree(part[..., 0::2]), tree(part[..., 1::2])
    if tpr < 32:
        return butterfly(e + o)
    w = butterfly(e.reshape(rows, tpr // 32, 32)) + butterfly(o.reshape(rows, tpr // 32, 32))
    return butterfly(w)


def rstd_of(ss, H):
    ms = (ss / np.float32(H)).astype(np.float32) + np.float32(EPS)
    return (np.float32(1) / np.sqrt(ms)).astype(np.float32)


def orders(h, H):
    """rstd of rows h in the pairs order and in the one-tree order, for H's ring or streaming group."""
    g = cr.program_windows("fwd", H, sm=90)["fwd"][-1].group
    tpr, vectors = g["threads_per_row"], g["vectors_per_thread"]
    return rstd_of(row_sum(h, tpr, vectors, True), H), rstd_of(row_sum(h, tpr, vectors, False), H)


def ulps(a, ref):
    """|a - ref| in FP32 ulps of ref."""
    return np.abs(a.astype(np.float64) - ref) / np.spacing(ref.astype(np.float32)).astype(np.float64)


def make(rows, H, kind, gen):
    x = torch.randn(rows, H, generator=gen)
    if kind == "outliers":  # a few columns 30x the rest, as LLM activations carry
        cols = torch.randperm(H, generator=gen)[:max(1, H // 100)]
        x[:, cols] *= 30
    return x.to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--hidden", default="776,1000,1536,2048,4096,5120,6144,8192")
    ap.add_argument("--out")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    results = []
    print("| H | group | rows | data | rstd ulps vs FP64: floor mean/max | pairs mean/max | one tree mean/max "
          "| rows whose y is not FP64 y rounded: pairs / one tree |")
    print("|---|---|---|---|---|---|---|---|")
    for H in map(int, args.hidden.split(",")):
        g = cr.program_windows("fwd", H, sm=90)["fwd"][-1].group
        tpr, vectors = g["threads_per_row"], g["vectors_per_thread"]
        if vectors not in (4, 6):
            continue
        for kind in ("normal", "outliers"):
            x = make(args.rows, H, kind, gen)
            w = torch.ones(H, dtype=torch.bfloat16)
            y_cpu, r_cpu = cr.cake_rmsnorm_train_forward(x, w, EPS)
            h = x.float().numpy()
            pairs, one = orders(h, H)
            assert np.array_equal(pairs.view(np.int32), r_cpu.numpy().view(np.int32)), "emulation != the CPU path"
            hd = h.astype(np.float64)
            ss64 = (hd * hd).sum(1)
            floor = rstd_of(ss64.astype(np.float32), H)
            r64 = 1 / np.sqrt(ss64 / H + float(np.float32(EPS)))
            y64 = torch.from_numpy(hd * r64[:, None]).to(torch.bfloat16)

            def y_off(r):  # rows whose y (w = 1) is not FP64's y rounded to BF16 in any column
                y = (torch.from_numpy(h) * torch.from_numpy(r)[:, None]).to(torch.bfloat16)
                return int((y != y64).any(1).sum())

            assert torch.equal(y_cpu, (torch.from_numpy(h) * r_cpu[:, None]).to(torch.bfloat16))
            row = {"H": H, "tpr": tpr, "vectors": vectors, "rows": args.rows, "data": kind}
            for name, r in (("floor", floor), ("pairs", pairs), ("one_tree", one)):
                u = ulps(r, r64)
                row[name] = {"mean_ulps": float(u.mean()), "max_ulps": float(u.max()), "y_rows_off": y_off(r)}
            results.append(row)
            f = lambda k: f"{row[k]['mean_ulps']:.3f} / {row[k]['max_ulps']:.2f}"
            print(f"| {H} | {tpr}x{vectors} | {args.rows} | {kind} | {f('floor')} | {f('pairs')} | {f('one_tree')} "
                  f"| {row['pairs']['y_rows_off']} / {row['one_tree']['y_rows_off']} (floor {row['floor']['y_rows_off']}) |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
