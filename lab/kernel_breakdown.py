"""Per-kernel GPU time of cake_rmsnorm's launches (forward; backward main kernel and dw
finalize), cold L2, medians over replays of a CUDA graph: where a small-T backward spends its
microseconds.

    python lab/kernel_breakdown.py --hidden 512,2048,6144 --tokens 256,1024,4096
"""

import argparse
import collections
import statistics

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.timing import MARKER_BYTES, _kernel_events, capture


def breakdown(fn, replays):
    graph = capture(fn)
    marker = torch.empty(MARKER_BYTES // 4, dtype=torch.int32, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            marker.bitwise_not_()
            graph.replay()
        torch.cuda.synchronize()
    per = collections.defaultdict(list)
    for start, end, name in _kernel_events(prof):
        if "bitwise_not" in name or "BitwiseNot" in name:
            continue
        short = "finalize" if "finalize" in name else ("bwd" if "bwd" in name else ("fwd" if "fwd" in name else name[:40]))
        per[short].append(end - start)
    return {k: statistics.median(v) for k, v in per.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="512,2048,6144", type=int_list)
    p.add_argument("--tokens", default="256,1024,4096", type=int_list)
    p.add_argument("--replays", type=int, default=20)
    args = p.parse_args()
    for H in args.hidden:
        for T in args.tokens:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(T, H, generator=g).bfloat16().cuda()
            gy = torch.randn(T, H, generator=g).bfloat16().cuda()
            w = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16().cuda()
            y, s = torch.empty_like(x), torch.empty(T, device="cuda")
            dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
            ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
            cr.cake_rmsnorm_train_forward(x, w, 1e-6, out=y, rstd=s)
            f = breakdown(lambda: cr.cake_rmsnorm_train_forward(x, w, 1e-6, out=y, rstd=s), args.replays)
            b = breakdown(lambda: cr.cake_rmsnorm_train_backward(gy, x, w, s, dx=dx, dw=dw, workspace=ws), args.replays)
            parts = " ".join(f"{k} {v:.2f}" for k, v in sorted({**f, **b}.items()))
            print(f"H={H} T={T} chunks={cr._lib.backward_chunks(T, H)}: {parts} us", flush=True)


if __name__ == "__main__":
    main()
