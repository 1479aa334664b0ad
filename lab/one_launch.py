"""Launch one implementation's forward or backward a few times at one shape, for a profiler
that picks its kernels by name (ncu -k, nsys): no timing of its own.

    ncu --clock-control none --nvtx --nvtx-include probe/ --launch-skip 1 --launch-count 2 \
        python lab/one_launch.py --op fwd --impl cake --hidden 512 --tokens 256
"""

import argparse

import torch
import torch.nn.functional as F

import cake_rmsnorm as cr


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=["fwd", "bwd"], default="fwd")
    p.add_argument("--impl", choices=["cake", "tc", "F", "lg"], default="cake")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--launches", type=int, default=4)
    p.add_argument("--weight", choices=["bf16", "fp32"], default="bf16", help="w's dtype (x is BF16)")
    a = p.parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.tokens, a.hidden, generator=g).bfloat16().cuda()
    gy = torch.randn(a.tokens, a.hidden, generator=g).bfloat16().cuda()
    w = (1 + 0.1 * torch.randn(a.hidden, generator=g)).to(torch.float32 if a.weight == "fp32" else torch.bfloat16).cuda()
    if a.impl == "cake":
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
        dx, dw = torch.empty_like(x), torch.empty(a.hidden, device="cuda")
        ws = cr.cake_rmsnorm_train_backward_workspace(a.tokens, a.hidden, "cuda")
        if a.op == "fwd":
            run = lambda: cr.cake_rmsnorm_train_forward(x, w, 1e-6, out=y, rstd=rstd)  # noqa: E731
        else:
            run = lambda: cr.cake_rmsnorm_train_backward(gy, x, w, rstd, dx=dx, dw=dw, workspace=ws)  # noqa: E731
    else:
        norm = (lambda t, ww: F.rms_norm(t, (a.hidden,), ww, 1e-6))
        if a.impl == "lg":  # Liger 0.8.5, casting mode llama (the benchmark's peer)
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            norm = (lambda t, ww: LigerRMSNormFunction.apply(t, ww, 1e-6, 0.0, "llama", False))
        if a.impl == "tc":
            norm = torch.compile(norm)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        if a.op == "fwd":
            run = lambda: norm(xr, wr)  # noqa: E731
        else:
            def run():
                xr.grad = wr.grad = None
                norm(xr, wr).backward(gy)
    run()  # compiles and warms up outside the profiled range
    torch.cuda.synchronize()
    with torch.cuda.nvtx.range("probe"):  # ncu --nvtx --nvtx-include probe/
        for _ in range(a.launches):
            run()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
