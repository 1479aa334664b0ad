"""Where the host time of one call goes: each layer of the call path timed on its own, eager, at a
launch-bound size (T 8, H 4096 on CUDA; T 1, H 64 on the CPU, where the row's work is
negligible). Each row adds one layer to the one above it, so the differences are the layers'
costs:

    python benchmarks/host_budget.py [--device cuda|cpu] [--tokens T] [--hidden H] [--out PREFIX]

- ``direct, caller outputs``: the binding with every output preallocated (``*_out``): its
  argument conversion, the op body's checks, the plan lookup and the launch (or the CPU kernel);
- ``direct``: + the outputs' allocation and their Python objects;
- ``routing``: + the eager / traced test of ``_calls`` (what the public functions call);
- ``registered op``: the same call through ``torch.ops.cake_rmsnorm`` (dispatcher, stable-ABI
  boxing), which torch.compile's Python wrapper pays; the ``aten clone`` row is the floor of any
  op call that allocates one output;
- ``public, no grad``: ``cake_rmsnorm`` / the backward entry point with their checks;
- ``autograd``: ``cake_rmsnorm`` building its autograd node (Function.apply, saved tensors);
- ``module``: ``RMSNorm.__call__``.

On CUDA the launch itself is read from the profiler (the CPU time of cudaLaunchKernel*), and the
device is synchronised only around each timed loop.
"""

import argparse
import json

import torch

import cake_rmsnorm as cr
from cake_rmsnorm import _calls
from cake_rmsnorm._lib import direct, ops
from cake_rmsnorm.bench.host import _time as timed


def launch_us(fn, device, calls=200):
    """CPU time a call spends in CUDA launch calls (profiler), or None on the CPU."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key.startswith(("cudaLaunch", "cuLaunch")))
    return us / calls


def layers(T, H, device, dtype=torch.bfloat16):
    """{op: [(layer, fn)]} from the innermost layer out."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, H, generator=g).to(device, dtype)
    r = torch.randn(T, H, generator=g).to(device, dtype)
    gy = torch.randn(T, H, generator=g).to(device, dtype)
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(device, dtype)
    eps = 1e-6
    y, rstd = ops.fwd(x, w, eps)
    _, rstd_r, h = ops.fwd_residual(x, r, w, eps)
    y_o, rstd_o, h_o, dx_o = torch.empty_like(x), torch.empty_like(rstd), torch.empty_like(x), torch.empty_like(x)
    dw_o = torch.empty(H, device=device)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, device)
    xg, wg, rg = x.clone().requires_grad_(), w.clone().requires_grad_(), r.clone().requires_grad_()
    module = cr.RMSNorm(H, eps=eps, device=device, dtype=dtype)
    table = {
        "fwd": [
            ("direct, caller outputs", lambda: direct.fwd_out(x, w, eps, y_o, rstd_o)),
            ("direct", lambda: direct.fwd(x, w, eps, None)),
            ("routing", lambda: _calls.fwd(x, w, eps)),
            ("registered op", lambda: ops.fwd.default(x, w, eps, None)),
            ("aten clone (floor)", lambda: x.clone()),
            ("public, no grad", lambda: cr.cake_rmsnorm(x, w, eps)),
            ("autograd", lambda: cr.cake_rmsnorm(xg, wg, eps)),
            ("module, autograd", lambda: module(xg)),
        ],
        "fwd_residual": [
            ("direct, caller outputs", lambda: direct.fwd_residual_out(x, r, w, eps, y_o, rstd_o, h_o)),
            ("direct", lambda: direct.fwd_residual(x, r, w, eps, None)),
            ("routing", lambda: _calls.fwd_residual(x, r, w, eps)),
            ("registered op", lambda: ops.fwd_residual.default(x, r, w, eps, None)),
            ("public, no grad", lambda: cr.cake_rmsnorm(x, w, eps, residual=r)),
            ("autograd", lambda: cr.cake_rmsnorm(xg, wg, eps, residual=rg)),
        ],
        "bwd": [
            ("direct, caller outputs", lambda: direct.bwd_out(gy, x, w, rstd, None, dx_o, dw_o, ws, 0, False)),
            ("direct", lambda: direct.bwd(gy, x, w, rstd, None, True)),
            ("routing", lambda: _calls.bwd(gy, x, w, rstd, None, True)),
            ("registered op", lambda: ops.bwd.default(gy, x, w, rstd, None, True)),
            ("public, no grad", lambda: cr.cake_rmsnorm_train_backward(gy, x, w, rstd)),
            ("autograd fwd + bwd", lambda: torch.autograd.grad(cr.cake_rmsnorm(xg, wg, eps), (xg, wg), gy)),
            ("module fwd + bwd", lambda: torch.autograd.grad(module(xg), (xg, module.weight), gy)),
            ("F.rms_norm fwd + bwd", lambda: torch.autograd.grad(
                torch.nn.functional.rms_norm(xg, (H,), wg, eps), (xg, wg), gy)),
        ],
        "bwd_dx": [
            ("direct, caller outputs", lambda: direct.bwd_out(gy, x, w, rstd, None, dx_o, None, None, 0, False)),
            ("direct", lambda: direct.bwd_dx(gy, x, w, rstd, None)),
            ("routing", lambda: _calls.bwd_dx(gy, x, w, rstd, None)),
            ("registered op", lambda: ops.bwd_dx.default(gy, x, w, rstd, None)),
            ("public, no grad", lambda: cr.cake_rmsnorm_train_backward(gy, x, w, rstd, weight_grad=False)),
        ],
    }
    # The innermost layer this torch has: the launch's share of one call.
    launches = {op: table[op][0 if _calls.DIRECT else 3][1] for op in ("fwd", "bwd")}
    return table, launches


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=None, help="PREFIX: write PREFIX.json and PREFIX.md")
    a = p.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    T = a.tokens or (8 if cuda else 1)
    H = a.hidden or (4096 if cuda else 64)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    table, launches = layers(T, H, device)
    rows = []
    for op, ls in table.items():
        for layer, fn in ls:
            if layer.startswith("direct") and not _calls.DIRECT:  # CAKE_RMSNORM_DIRECT=off: no direct binding
                continue
            rows.append(dict(op=op, layer=layer, us=round(timed(fn, a.calls, a.repeats, sync), 2)))
    launch = {op: launch_us(fn, device) for op, fn in launches.items()}
    where = torch.cuda.get_device_name(device) if cuda else "CPU"
    note = "" if _calls.DIRECT else " (no direct binding on this torch: every call takes the registered ops)"
    lines = [f"# Host budget of one call, us ({where}, T {T}, H {H}, torch {torch.__version__}){note}", "",
             "| op | layer | us | over the row above |", "|---|---|---|---|"]
    prev = {}
    for r in rows:
        d = r["us"] - prev[r["op"]] if r["op"] in prev else r["us"]
        lines.append(f"| {r['op']} | {r['layer']} | {r['us']:.2f} | {d:+.2f} |")
        prev[r["op"]] = r["us"]
    for op, us in launch.items():
        if us is not None:
            lines.append(f"| {op} | of which CUDA launch calls (profiler) | {us:.2f} | |")
    md = "\n".join(lines) + "\n"
    print(md)
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump(dict(device=where, T=T, H=H, torch=torch.__version__, rows=rows, launch_us=launch), f, indent=1)
        with open(a.out + ".md", "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
