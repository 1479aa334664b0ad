"""The implementations a benchmark compares: ours and every importable peer.

Each maker returns callables for the three ops on one shape: `fwd()`, `bwd()` (backward only,
from tensors saved by one forward) and `step()` (forward + backward). Peers that are not
importable are reported with the reason.
"""

import torch
import torch.nn.functional as F

import cake_rmsnorm as cr


class Case:
    """Inputs of one shape: x [rows, H] (or a [T, heads, 256] view), w, grads, eps."""

    def __init__(self, T, H, residual=False, per_head=0, wdtype=torch.bfloat16, dtype=torch.bfloat16,
                 device="cuda", seed=0):
        # Drawn on the device: a CPU draw of the largest shapes took seconds per tensor.
        g = torch.Generator(device=device).manual_seed(seed)
        shape = (T, per_head, H) if per_head else (T, H)
        mk = lambda: torch.randn(shape, generator=g, device=device).to(dtype)  # noqa: E731
        self.T, self.H, self.residual, self.per_head = T, H, residual, per_head
        self.eps = 1e-6
        # Rows of unequal scale, and g partly x's own draw: an arm that skips rstd or the mean
        # term of dx moves its results well past bench.check's tolerance at every width.
        draw = torch.randn(shape, generator=g, device=device)
        scale = torch.exp(0.5 * torch.randn(shape[:-1] + (1,), generator=g, device=device))
        self.x = (draw * scale).to(dtype)
        self.r = mk() if residual else None
        self.gy = (torch.randn(shape, generator=g, device=device) + draw).to(dtype)
        del draw, scale
        # The residual route's second output (h) gets a gradient of its own: a distinct tensor,
        # so no implementation reads one buffer twice and finds it in L2.
        self.gr = mk() if residual else None
        self.w = (1 + 0.1 * torch.randn(H, generator=g, device=device)).to(wdtype)

    @property
    def rows(self):
        return self.x.numel() // self.H


def _autograd_ops(case, forward):
    """fwd/bwd/step callables for an implementation differentiated by autograd."""
    x = case.x.detach().clone().requires_grad_()
    w = case.w.detach().clone().requires_grad_()
    r = case.r.detach().clone().requires_grad_() if case.residual else None
    inputs = (x, w) if r is None else (x, r, w)

    def fwd():
        with torch.no_grad():
            return forward(x, w, r)

    def grad(out, **kw):
        outs = out if isinstance(out, tuple) else (out,)
        return torch.autograd.grad(outs, inputs, (case.gy, case.gr)[: len(outs)], **kw)

    saved = {}

    def bwd():
        if "y" not in saved:  # the forward whose graph every replay walks, made on the capture stream
            saved["y"] = forward(x, w, r)
        return grad(saved["y"], retain_graph=True)

    def step():
        return grad(forward(x, w, r))

    def outputs():  # one step's results by name, for bench.check (never timed)
        out = forward(x, w, r)
        outs = out if isinstance(out, tuple) else (out,)
        g = grad(outs, retain_graph=True)  # as bwd() does: a compiled backward donates buffers otherwise
        res = {"y": outs[0], "dx": g[0], "dw": g[-1]}
        if r is not None:
            res.update(h=outs[1], dr=g[1])
        return res

    return {"fwd": fwd, "bwd": bwd, "step": step, "outputs": outputs}


def make_cake(case, deterministic=True):
    """The op path: the functional calls with a preallocated workspace, dx and FP32 dw."""
    x, w, eps = case.x, case.w, case.eps
    ws = cr.cake_rmsnorm_train_backward_workspace(case.rows, case.H, x.device)
    if case.residual:
        y, rstd, h = cr.cake_rmsnorm_train_forward(x, w, eps, residual=case.r)
    else:
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, eps)
        h = x
    dx, dw = torch.empty_like(x), torch.empty(case.H, device=x.device)
    gres = case.gr if case.residual else None

    def fwd():
        if case.residual:
            return cr.cake_rmsnorm_train_forward(x, w, eps, residual=case.r)
        return cr.cake_rmsnorm_train_forward(x, w, eps)

    def bwd():
        return cr.cake_rmsnorm_train_backward(case.gy, h, w, rstd, g_residual=gres, workspace=ws, dx=dx, dw=dw,
                                              deterministic=deterministic)

    def step():
        out = fwd()
        return cr.cake_rmsnorm_train_backward(case.gy, out[2] if case.residual else x, w, out[1], g_residual=gres,
                                              workspace=ws, dx=dx, dw=dw, deterministic=deterministic)

    def outputs():  # one step's results by name, for bench.check (never timed)
        out = fwd()
        gx, gw = step()
        res = {"y": out[0], "dx": gx.clone(), "dw": gw.clone()}
        if case.residual:  # one gradient serves x and r: dr is dx
            res.update(h=out[2], dr=res["dx"])
        return res

    return {"fwd": fwd, "bwd": bwd, "step": step, "outputs": outputs}


def make_cake_autograd(case, deterministic=True):
    """The user's path: autograd through ``cake_rmsnorm`` (a weight of its own dtype, so dw
    comes back in it from the finalize), everything it allocates and launches included."""
    def forward(x, w, r):
        return cr.cake_rmsnorm(x, w, case.eps, residual=r, deterministic=deterministic)

    return _autograd_ops(case, forward)


def _add(x, r):
    return x if r is None else x + r


def make_torch_fused(case):
    shape = (case.H,)
    def forward(x, w, r):
        h = _add(x, r)
        y = F.rms_norm(h, shape, w, case.eps)
        return y if r is None else (y, h)

    return _autograd_ops(case, forward)


def _eager_formula(x, w, r, eps):
    h = _add(x, r)
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    return y if r is None else (y, h)


def make_torch_compile(case):
    torch._dynamo.config.recompile_limit = 1024
    fn = torch.compile(lambda x, w, r: _eager_formula(x, w, r, case.eps), dynamic=False)

    def forward(x, w, r):
        # bwd replays one graph's backward (retain_graph), which a backward with donated buffers refuses
        with torch._functorch.config.patch(donated_buffer=False):
            return fn(x, w, r)

    return _autograd_ops(case, forward)


def make_liger(case):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def forward(x, w, r):
        h = _add(x, r)
        y = LigerRMSNormFunction.apply(h, w, case.eps, 0.0, "llama", False)
        return y if r is None else (y, h)

    return _autograd_ops(case, forward)


def make_quack(case):
    from quack.rmsnorm import rmsnorm

    def forward(x, w, r):
        if r is None:
            return rmsnorm(x, w, eps=case.eps)
        # prenorm=True returns h too, so h's gradient reaches Quack's backward as it reaches ours:
        # without it Quack's backward skips the g_h read and times a smaller op.
        return rmsnorm(x, w, residual=r, eps=case.eps, prenorm=True)

    return _autograd_ops(case, forward)


def make_floor(case):
    """The traffic floor of a shape: torch's elementwise kernels moving the op's bytes with no
    reduction (fwd: read x, write y; bwd: read x and g, write dx; step: both). Not a peer: a
    reference for how near a kernel of the same traffic gets to the copy ceiling at this size.
    None for the residual route, whose four-stream forward no single elementwise op moves."""
    if case.residual:
        return None
    x, gy = case.x, case.gy
    y, dx = torch.empty_like(x), torch.empty_like(x)

    def fwd():
        return torch.neg(x, out=y)

    def bwd():
        return torch.add(x, gy, out=dx)

    def step():
        fwd()
        return bwd()

    return {"fwd": fwd, "bwd": bwd, "step": step}


PEERS = {
    "F": ("F.rms_norm", make_torch_fused),
    "tc": ("torch.compile", make_torch_compile),
    "lg": ("Liger", make_liger),
    "qk": ("Quack", make_quack),
}


def available_peers(names):
    """{key: maker} for the importable peers; {key: reason} for the rest."""
    ok, missing = {}, {}
    for key in names:
        label, maker = PEERS[key]
        try:
            if key == "lg":
                import liger_kernel.ops.rms_norm  # noqa: F401
            elif key == "qk":
                import quack.rmsnorm  # noqa: F401
            elif key == "tc":
                import triton  # noqa: F401
            ok[key] = maker
        except Exception as e:  # any import failure means the peer is skipped, and said so
            missing[key] = f"{label} not importable ({type(e).__name__}: {e})"
    return ok, missing
