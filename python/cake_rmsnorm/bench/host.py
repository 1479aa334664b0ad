"""Host cost: wall-clock microseconds a call at a launch-bound size (T = 8 rows by default),
eager, for every arm. The GPU kernel time cannot see this cost; at small T and in models whose
step is host-bound it is what the user pays.

Ops timed per arm: ``fwd`` (forward, no grad), ``fwd_grad`` (forward with inputs that need a
gradient: the autograd node is built) and ``fwd_bwd`` (forward + ``torch.autograd.grad`` of x
and w). Each arm runs `calls` calls after a warm-up, `repeats` times; the median per call is
reported. On CUDA the device is synchronised only around each timed loop, so the loop measures
how fast the host issues calls.
"""

import statistics
import time

import torch
import torch.nn.functional as F

import cake_rmsnorm as cr

OPS = ("fwd", "fwd_grad", "fwd_bwd")
CLONE = "aten clone (floor)"


def _arms(device, H, wdtype):
    """{name: forward(x, w) -> y} for every importable implementation, and {name: reason}."""
    eps = 1e-6
    arms = {
        "cake": lambda x, w: cr.cake_rmsnorm(x, w, eps),
        "F.rms_norm": lambda x, w: F.rms_norm(x, (H,), w, eps),
        "eager": lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
                               * w.float()).to(x.dtype),
    }
    # The floor of any op call that allocates an output: an aten clone of x (no grad only).
    arms[CLONE] = lambda x, w: x.clone()
    module = cr.RMSNorm(H, eps=eps, device=device, dtype=wdtype)
    arms["cake RMSNorm"] = lambda x, w: module(x)
    missing = {}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        arms["Liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
    except Exception as e:  # a peer that does not import is skipped, and said so
        missing["Liger"] = f"not importable ({type(e).__name__}: {e})"
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm
        arms["Quack"] = lambda x, w: quack_rmsnorm(x, w, eps=eps)
    except Exception as e:
        missing["Quack"] = f"not importable ({type(e).__name__}: {e})"
    if device.type != "cuda":
        for name in ("Liger", "Quack"):
            if name in arms:
                del arms[name]
                missing[name] = "GPU only"
    return arms, module, missing


def _time(fn, calls, repeats, sync):
    for _ in range(max(calls // 10, 20)):
        fn()
    sync()
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call)


def run_host(T=8, H=4096, dtype=torch.bfloat16, wdtype=torch.bfloat16, device=None, calls=300, repeats=5):
    """[{"arm", "op", "T", "H", "us"}] and {arm: reason} for the arms that were skipped."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(T, H, generator=g).to(device, dtype)
    gy = torch.randn(T, H, generator=g).to(device, dtype)
    w0 = (1 + 0.1 * torch.randn(H, generator=g)).to(device, wdtype)
    arms, module, missing = _arms(device, H, wdtype)
    with torch.no_grad():
        module.weight.copy_(w0)
    rows = []
    for name, forward in arms.items():
        x = x0.clone().requires_grad_()
        w = module.weight if name == "cake RMSNorm" else w0.clone().requires_grad_()
        xd, wd = x0, w0

        def fwd():
            with torch.no_grad():
                return forward(xd, wd)

        def fwd_grad():
            return forward(x, w)

        def fwd_bwd():
            return torch.autograd.grad(forward(x, w), (x, w), gy)

        for op, fn in (("fwd", fwd), ("fwd_grad", fwd_grad), ("fwd_bwd", fwd_bwd)):
            if name == CLONE and op != "fwd":
                continue
            rows.append(dict(arm=name, op=op, T=T, H=H, device=device.type,
                             us=round(_time(fn, calls, repeats, sync), 2)))
    return rows, missing


def host_markdown(rows, title):
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    us = {(r["arm"], r["op"]): r["us"] for r in rows}
    ref = "F.rms_norm"

    def cell(a, o):
        return f"{us[(a, o)]:.1f}" if (a, o) in us else "-"

    def ratio(a, o, b):  # a speedup, as everywhere: b's time over a's (> 1: a is faster)
        return f"{us[(b, o)] / us[(a, o)]:.2f}x" if (a, o) in us and (b, o) in us else "-"

    lines = [f"# {title}", "",
             "Speedups: the other's time over the arm's (> 1: the arm is faster).", "",
             "| arm | " + " | ".join(OPS) + " | fwd_grad speedup vs F.rms_norm | fwd_bwd speedup vs F.rms_norm "
             "| fwd speedup vs clone |",
             "|---" * (len(OPS) + 4) + "|"]
    for a in arms:
        lines.append(f"| {a} | " + " | ".join(cell(a, o) for o in OPS)
                     + f" | {ratio(a, 'fwd_grad', ref)} | {ratio(a, 'fwd_bwd', ref)} | {ratio(a, 'fwd', CLONE)} |")
    return "\n".join(lines) + "\n"
