"""Fingerprints of every output bit of the GPU ops over a grid of shapes: each program window's
edges (program_windows), small T, pairs, and the chunk counts' steps, for BF16/FP16/FP32
activations, both weight dtypes and both routes. A change to the dispatch layer or the
executor that claims "same bits" is checked by running this before and after it and diffing
the two files (--compare).

    python lab/bits_fingerprint.py --out before.json
    python lab/bits_fingerprint.py --out after.json --compare before.json

A fingerprint is an exact integer hash of a tensor's bit patterns and positions, computed on
the GPU (int64 arithmetic wraps the same way every run), so large shapes cost no copies.
"""

import argparse
import json
import sys

import torch

import cake_rmsnorm as cr

WIDTHS = [128, 256, 512, 768, 1000, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 12288, 16384, 65536]
TOKENS = [1, 2, 3, 16, 64, 255, 256, 1024, 4096, 16384]
MAX_ELEMS = 1 << 26


def fingerprint(t):
    if t is None:
        return None
    bits = t.contiguous().view(-1)
    ints = bits.view(torch.int16 if bits.element_size() == 2 else torch.int32).to(torch.int64)
    pos = torch.arange(ints.numel(), device=ints.device, dtype=torch.int64)
    mixed = (ints + 0x9E37) * (pos * 2654435761 % 2147483647 + 1)
    return f"{int(mixed.sum()) & ((1 << 64) - 1):016x}:{int((ints * ints).sum()) & ((1 << 64) - 1):016x}"


def token_counts(H, residual):
    ts = set(TOKENS)
    for route in ("fwd_residual" if residual else "fwd",):
        for above, at_most, _ in cr.program_windows(route, H)[route]:
            ts.update(t for t in (above, above + 1, at_most, (at_most or 0) + 1) if t)
    return sorted(t for t in ts if t * H <= MAX_ELEMS)


def case(H, T, dtype, wdtype, residual, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s, dt=dtype: torch.randn(*s, generator=g, device="cuda").to(dt)
    x = rnd(T, H)
    r = rnd(T, H) if residual else None
    w = (1 + 0.1 * torch.randn(H, generator=g, device="cuda")).to(wdtype)
    gy = rnd(T, H)
    gr = rnd(T, H) if residual else None
    out = {}
    y, rstd, *h = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
    h = h[0] if h else None
    out.update(y=fingerprint(y), rstd=fingerprint(rstd), h=fingerprint(h))
    xs = h if residual else x
    dx, dw = cr.cake_rmsnorm_train_backward(gy, xs, w, rstd, g_residual=gr)
    out.update(dx=fingerprint(dx), dw=fingerprint(dw))
    # The user's path: autograd, dw handed back in w's dtype (a 16-bit w's rounded by the finalize).
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ra = r.clone().requires_grad_() if residual else None
    outs = cr.cake_rmsnorm(xa, wa, 1e-6, residual=ra)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, (gy, gr)[: len(outs)])
    out.update(ag_dx=fingerprint(xa.grad), ag_dw=fingerprint(wa.grad), ag_dr=fingerprint(ra.grad if residual else None))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--compare", help="an earlier output: exit 1 if any fingerprint differs")
    p.add_argument("--widths", type=lambda s: [int(v) for v in s.split(",")], default=WIDTHS)
    args = p.parse_args(argv)
    combos = [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32), (torch.float16, torch.float16),
              (torch.float16, torch.float32), (torch.float32, torch.bfloat16), (torch.float32, torch.float32)]
    rows = {}
    for H in args.widths:
        for dtype, wdtype in combos:
            if wdtype not in cr.weight_dtypes(H) and dtype != torch.float32:
                continue
            for residual in (False, True):
                for T in token_counts(H, residual):
                    if dtype == torch.float32 and T * H > MAX_ELEMS // 4:
                        continue
                    key = f"H{H}_T{T}_{str(dtype)[6:]}_w{str(wdtype)[6:]}{'_res' if residual else ''}"
                    try:
                        rows[key] = case(H, T, dtype, wdtype, residual, seed=H * 7919 + T)
                    except (ValueError, TypeError) as e:  # a width a dtype does not serve
                        rows[key] = {"refused": type(e).__name__}
        torch.cuda.empty_cache()
        print(f"H {H}: {len(rows)} cases", file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=0, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        moved = sorted(k for k in set(before) | set(rows) if before.get(k) != rows.get(k))
        for k in moved[:40]:
            print(f"moved: {k}: {before.get(k)} -> {rows.get(k)}")
        print(f"{len(rows)} cases, {len(moved)} differ")
        return 1 if moved else 0
    print(f"{len(rows)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
