"""Every arm's results against an FP64 reference, before any arm is timed: a peer that computes
something else (a dropped stream, a missing gradient term) would time a smaller op and pass for
a faster one. An arm whose error passes TOL is recorded as wrong and leaves the best-peer column.

The reference normalizes h rounded to the activation dtype, as every arm stores it; it runs in
row chunks so the largest shapes need no FP64 copy of a whole tensor.
"""

import math

import torch

TOL = 2e-2  # rel-L2; BF16 results sit near 2e-3, a dropped stream or term near 0.5 and above
CHUNK = 1 << 24  # elements a reference chunk


def _rows(t, H):
    return t.reshape(-1, H)


def _reference_chunk(case, s, e):
    """FP64 y, h, dh (= dx = dr) of rows s:e, and those rows' terms of dw summed."""
    H = case.H
    x = _rows(case.x, H)[s:e]
    h = (x if case.r is None else x + _rows(case.r, H)[s:e]).double()  # x + r rounded to x's dtype
    w = case.w.double()
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + case.eps)
    xhat = h * rstd
    g = _rows(case.gy, H)[s:e].double()
    gw = g * w
    dh = rstd * (gw - (gw * xhat).mean(-1, keepdim=True) * xhat)
    if case.r is not None:
        dh = dh + _rows(case.gr, H)[s:e].double()
    return {"y": xhat * w, "h": h, "dx": dh, "dr": dh}, (g * xhat).sum(0)


def errors(case, outputs):
    """{field: rel-L2 error} of one arm's outputs (y, dx, dw; h and dr on the residual route)."""
    H, rows = case.H, case.rows
    step = max(1, CHUNK // H)
    num, den = {}, {}
    dw = torch.zeros(H, dtype=torch.float64, device=case.x.device)
    for s in range(0, rows, step):
        e = min(rows, s + step)
        ref, part = _reference_chunk(case, s, e)
        dw += part
        for k, r in ref.items():
            if k in outputs:
                got = _rows(outputs[k], H)[s:e].double()
                num[k] = num.get(k, 0.0) + (got - r).pow(2).sum().item()
                den[k] = den.get(k, 0.0) + r.pow(2).sum().item()
    num["dw"] = (outputs["dw"].double() - dw).pow(2).sum().item()
    den["dw"] = dw.pow(2).sum().item()
    return {k: math.sqrt(num[k] / den[k]) if den[k] > 0 else math.sqrt(num[k]) for k in num}


def check_arms(case, impls):
    """{arm: worst rel-L2 error over its fields} and the arms past TOL with the field at fault
    (a NaN error fails). An arm that raises is wrong too, with the exception as its reason; a
    reference that cannot be computed (out of memory) leaves the arm unchecked, not wrong."""
    worst, wrong = {}, {}
    for key, ops in impls.items():
        if "outputs" not in ops:
            continue
        try:
            outputs = ops["outputs"]()
        except Exception as e:  # an arm that cannot produce its results is not timed as correct
            wrong[key] = f"{type(e).__name__}: {e}"
            continue
        try:
            errs = errors(case, outputs)
        except torch.OutOfMemoryError:
            continue
        finally:
            del outputs
        field = max(errs, key=lambda k: errs[k] if errs[k] == errs[k] else math.inf)  # NaN first
        worst[key] = round(errs[field], 6)
        if not errs[field] <= TOL:
            wrong[key] = f"{field} rel-L2 {errs[field]:.3g} > {TOL}"
    return worst, wrong
