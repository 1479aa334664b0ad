"""Does a call block the host on queued GPU work? Queue about 7 ms of matmuls, then time one
call: a call that synchronises takes as long as the queue. (The first autograd fwd+bwd at a
shape also meets torch's lazy kernel loading of the gradient accumulation, which waits.)

    python lab/host_sync_probe.py
"""

import time

import torch
import torch.nn.functional as F

import cake_rmsnorm as cr


def probe(name, fn, queue):
    fn()
    torch.cuda.synchronize()
    for _ in range(5):
        queue @ queue
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"{name:34s} call {1e6 * (t1 - t0):9.1f} us  (queue drained after {1e3 * (t2 - t0):.2f} ms)")


def main():
    queue = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ops = cr.ops
    for T, H in ((8, 4096), (4096, 1024)):
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(H, device="cuda", dtype=torch.bfloat16)
        g, r = torch.randn_like(x), torch.randn_like(x)
        _, rstd = ops.fwd.default(x, w, 1e-6, None)
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        print(f"T {T} H {H}")
        calls = {
            "x.neg()": lambda: x.neg(),
            "F.rms_norm": lambda: F.rms_norm(x, (H,), w, 1e-6),
            "op fwd": lambda: ops.fwd.default(x, w, 1e-6, None),
            "op fwd_residual": lambda: ops.fwd_residual.default(x, r, w, 1e-6, None),
            "op bwd dw16": lambda: ops.bwd.default(g, x, w, rstd, None, True),
            "op bwd fp32": lambda: ops.bwd.default(g, x, w, rstd, None, False),
            "op bwd_dx": lambda: ops.bwd_dx.default(g, x, w, rstd, None),
            "autograd fwd": lambda: cr.cake_rmsnorm(xg, wg, 1e-6),
            "autograd fwd+bwd": lambda: cr.cake_rmsnorm(xg, wg, 1e-6).backward(g),
            "F fwd+bwd": lambda: F.rms_norm(xg, (H,), wg, 1e-6).backward(g),
        }
        for name, fn in calls.items():
            probe(name, fn, queue)


if __name__ == "__main__":
    main()
