"""Does a call block the host on queued GPU work? Queue about 7 ms of matmuls, then time one
call: a call that synchronises takes as long as the queue. (The first autograd fwd+bwd at a
shape also meets torch's lazy kernel loading of the gradient accumulation, which waits.)

    python benchmarks/host_sync_probe.py
"""
import time, torch, cake_rmsnorm as cr, torch.nn.functional as F
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
def probe(name, fn):
    fn(); torch.cuda.synchronize()
    for _ in range(5): a @ a
    t0 = time.perf_counter(); fn(); t1 = time.perf_counter()
    torch.cuda.synchronize(); t2 = time.perf_counter()
    print(f"{name:34s} call {1e6*(t1-t0):9.1f} us  (queue drained after {1e3*(t2-t0):.2f} ms)")
for T, H in ((8, 4096), (4096, 1024)):
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(H, device="cuda", dtype=torch.bfloat16)
    g = torch.randn_like(x); r = torch.randn_like(x)
    y, rstd = cr.ops.fwd.default(x, w, 1e-6, None)
    print(f"T {T} H {H}")
    probe("x.neg()", lambda: x.neg())
    probe("F.rms_norm", lambda: F.rms_norm(x, (H,), w, 1e-6))
    probe("op fwd", lambda: cr.ops.fwd.default(x, w, 1e-6, None))
    probe("op fwd_residual", lambda: cr.ops.fwd_residual.default(x, r, w, 1e-6, None))
    probe("op bwd dw16", lambda: cr.ops.bwd.default(g, x, w, rstd, None, True, True))
    probe("op bwd fp32", lambda: cr.ops.bwd.default(g, x, w, rstd, None, True, False))
    probe("op bwd_dx", lambda: cr.ops.bwd_dx.default(g, x, w, rstd, None))
    xg = x.clone().requires_grad_(); wg = w.clone().requires_grad_()
    probe("autograd fwd", lambda: cr.cake_rmsnorm(xg, wg, 1e-6))
    yy = cr.cake_rmsnorm(xg, wg, 1e-6)
    probe("autograd fwd+bwd", lambda: cr.cake_rmsnorm(xg, wg, 1e-6).backward(g))
    probe("F fwd+bwd", lambda: F.rms_norm(xg, (H,), wg, 1e-6).backward(g))
