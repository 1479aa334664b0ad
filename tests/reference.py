"""FP64 references (computed on the inputs' device), input makers and the accuracy
contract's checks."""

import torch

Y_ATOL = Y_RTOL = 1e-2  # y and dx: elementwise, after unit-scale normalisation
RSTD_REL_L2 = 1e-5
DW_REL_L2 = 1e-4


def make_rows(rows, hidden, dtype, device, scale=1.0, row_stride=None, offset=0, gen=None):
    """Random normal [rows, hidden] of `scale`, optionally a row-strided view at an element offset."""
    stride = row_stride or hidden
    n = offset + (rows - 1) * stride + hidden if rows else offset + hidden
    base = (torch.randn(n, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)
    if rows == 0:
        return base[offset:offset].view(0, hidden)
    return base.as_strided((rows, hidden), (stride, 1), offset)


def make_weight(hidden, dtype, device, gen=None):
    return (1.0 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype).to(device)


def ref_forward(x, w, eps, residual=None):
    """(y, rstd, h) in FP64; h is rounded to the activation dtype as the contract says."""
    h = x if residual is None else (x.float() + residual.float()).to(x.dtype)
    hd = h.double()
    rstd = torch.rsqrt((hd * hd).mean(-1) + eps)
    return hd * rstd.unsqueeze(-1) * w.double(), rstd, h


def ref_backward(g, x, w, eps):
    """(dx, dw) in FP64 from FP64 statistics of x (x: the normalised input h)."""
    xd, gd, wd = x.double(), g.double(), w.double()
    rstd = torch.rsqrt((xd * xd).mean(-1, keepdim=True) + eps)
    xhat = xd * rstd
    gw = gd * wd
    dx = rstd * (gw - (gw * xhat).mean(-1, keepdim=True) * xhat)
    dw = (gd * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def eager_dw(g, x, rstd):
    """The eager FP32 formula peers use: (g * x * rstd).sum over rows."""
    return (g.float() * x.float() * rstd.float().unsqueeze(-1)).reshape(-1, x.shape[-1]).sum(0)


def rel_l2(a, ref):
    a, ref = a.double(), ref.double().to(a.device)
    den = ref.norm()
    return ((a - ref).norm() / den).item() if den > 0 else (a - ref).norm().item()


def from_y_dx_slack(g, x, w, eps, u):
    """What the backward from y may add to dx's error: xhat rebuilt to u max(|xhat|, 1) (one
    rounding of y's dtype, docs/python_api.md#memory-efficient-mode, with FP32's two) carried
    through dx = rstd (g w - c xhat), c = mean(g w xhat), to first order. At narrow rows c is
    large against dx and this dominates the standard tolerance."""
    xd, gd, wd = x.double(), g.double(), w.double()
    rstd = torch.rsqrt((xd * xd).mean(-1, keepdim=True) + eps)
    xhat = xd * rstd
    e = (u + 2.0 ** -23) * xhat.abs().clamp(min=1.0)
    gw = gd * wd
    c = (gw * xhat).mean(-1, keepdim=True)
    dc = (gw.abs() * e).mean(-1, keepdim=True)
    return rstd * (c.abs() * e + xhat.abs() * dc)


def assert_close_unit(out, ref, name, mask_rows=None, slack=None):
    """|out - ref| <= atol + rtol |ref| (+ slack, an elementwise allowance such as
    from_y_dx_slack's) with all divided by ref's RMS (unit scale)."""
    out, ref = out.double(), ref.double().to(out.device)
    slack = None if slack is None else slack.double().to(out.device).expand_as(ref)
    if mask_rows is not None:
        mask_rows = mask_rows.to(out.device)
        out, ref = out[mask_rows], ref[mask_rows]
        slack = None if slack is None else slack[mask_rows]
    if ref.numel() == 0:
        return
    scale = ref.pow(2).mean().sqrt().item()
    scale = scale if scale > 0 else 1.0
    err = (out - ref).abs() / scale
    bound = Y_ATOL + Y_RTOL * ref.abs() / scale + (0 if slack is None else slack / scale)
    bad = ~(err <= bound)
    if bad.any():
        out, ref, err = out.cpu(), ref.cpu(), err.cpu()
        i = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {ref.numel()} elements out of tolerance; first at {i}: "
            f"got {out[tuple(i)].item()}, want {ref[tuple(i)].item()} (scale {scale:g})")
