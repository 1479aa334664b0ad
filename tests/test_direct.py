"""The direct eager path (_calls.py, csrc/torch/direct.cpp): the same bits as the registered ops,
the registered ops wherever something traces or intercepts, and documented errors."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cake_rmsnorm as cr
from cake_rmsnorm import _calls
from cake_rmsnorm import _lib
from cake_rmsnorm._lib import direct, ops
from conftest import devices

needs_direct = pytest.mark.skipif(not _calls.DIRECT, reason="the direct binding is off (CAKE_RMSNORM_DIRECT="
                                  f"{os.environ.get('CAKE_RMSNORM_DIRECT', 'auto')}, torch {torch.__version__})")


def _inputs(dev, gen, T=37, H=264, dtype=torch.bfloat16, wdtype=None):
    def r(*s):
        return torch.randn(*s, generator=gen).to(dev)
    x, res, g = r(T, H).to(dtype), r(T, H).to(dtype), r(T, H).to(dtype)
    w = (1 + 0.1 * r(H)).to(wdtype or dtype)
    return x, res, g, w


def _same(a, b):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    a, b = a.contiguous(), b.contiguous()
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), "bits differ"


@needs_direct
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype,wdtype,out_dtype", [
    (torch.bfloat16, None, None), (torch.float16, torch.float32, None), (torch.float32, torch.bfloat16, None),
    (torch.float32, torch.float32, torch.bfloat16)])
def test_direct_bits_equal_the_ops(device, dtype, wdtype, out_dtype, gen):
    x, res, g, w = _inputs(device, gen, dtype=dtype, wdtype=wdtype)
    eps = 1e-5
    _same(direct.fwd(x, w, eps, out_dtype), ops.fwd(x, w, eps, out_dtype))
    y, rstd, h = direct.fwd_residual(x, res, w, eps, out_dtype)
    _same((y, rstd, h), ops.fwd_residual(x, res, w, eps, out_dtype))
    gy = g.to(y.dtype)
    for dw16 in (False, True):
        _same(direct.bwd(gy, h, w, rstd, None, dw16), ops.bwd(gy, h, w, rstd, None, dw16))
        _same(direct.bwd(gy, h, w, rstd, res, dw16), ops.bwd(gy, h, w, rstd, res, dw16))
    _same(direct.bwd_dx(gy, h, w, rstd, res), ops.bwd_dx(gy, h, w, rstd, res))
    # Caller outputs: strided ones are written through a copy back, an FP32 dw accumulated into.
    outs = [torch.empty(x.shape[0], 2 * x.shape[1], dtype=y.dtype, device=device)[:, ::2] for _ in range(2)]
    rs = [torch.empty(x.shape[0], device=device) for _ in range(2)]
    direct.fwd_out(x, w, eps, outs[0], rs[0])
    ops.fwd_out(x, w, eps, outs[1], rs[1])
    _same(outs[0], outs[1])
    _same(rs[0], rs[1])
    dxs = [torch.empty_like(x) for _ in range(2)]
    dws = [torch.full((x.shape[1],), 0.5, device=device) for _ in range(2)]
    ws = cr.cake_rmsnorm_train_backward_workspace(x.shape[0], x.shape[1], device)
    direct.bwd_out(gy, h, w, rstd, None, dxs[0], dws[0], ws, 0, True)
    ops.bwd_out(gy, h, w, rstd, None, dxs[1], dws[1], ws, 0, True)
    _same(dxs, dxs[::-1])
    _same(dws[0], dws[1])


@needs_direct
def test_autograd_takes_the_direct_path_and_keeps_its_bits(gen):
    x, res, g, w = _inputs("cpu", gen)
    xs, ws_ = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = cr.cake_rmsnorm(xs, ws_, 1e-6)
    dx, dw = torch.autograd.grad(y, (xs, ws_), g)
    y_ref, rstd = ops.fwd(x, w, 1e-6)
    dx_ref, dw_ref = ops.bwd(g, x, w, rstd, None, True)
    _same((y, dx, dw), (y_ref, dx_ref, dw_ref))


class _Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_registered_ops(gen):
    x, _, g, w = _inputs("cpu", gen)
    with _Seen() as seen:
        assert not _calls.eager()
        cr.cake_rmsnorm(x, w, 1e-6)
    assert any(n.startswith("cake_rmsnorm.fwd") for n in seen.names), seen.names


def test_subclasses_and_meta_tensors_take_the_registered_ops(gen):
    x, _, _, w = _inputs("cpu", gen)

    class Sub(torch.Tensor):
        pass

    xs = x.as_subclass(Sub)
    if _calls.DIRECT:
        assert direct.fwd(xs, w, 1e-6, None) is NotImplemented
        assert direct.fwd(x.to("meta"), w.to("meta"), 1e-6, None) is NotImplemented
    _same(_calls.fwd(xs, w, 1e-6)[0].as_subclass(torch.Tensor), ops.fwd(x, w, 1e-6)[0])
    y, rstd = _calls.fwd(x.to("meta"), w.to("meta"), 1e-6)
    assert y.device.type == "meta" and rstd.shape == x.shape[:-1]


def test_functorch_transforms_take_the_registered_ops():
    seen = []
    torch.func.vmap(lambda t: seen.append(_calls.eager()) or t)(torch.ones(2, 8))
    assert seen == [False]


@pytest.mark.parametrize("case", ["meta_weight", "weight_shape", "weight_dtype", "residual_shape", "x_dtype"])
def test_refusals_through_the_fast_path_name_the_argument(case, gen):
    x, res, _, w = _inputs("cpu", gen)
    kwargs = {}
    if case == "meta_weight":
        w, err, match = w.to("meta"), ValueError, "w must be on cpu"
    elif case == "weight_shape":
        w, err, match = w[:-8], ValueError, r"w must be 1-D \[hidden\]"
    elif case == "weight_dtype":
        w, err, match = w.half(), TypeError, "w must be x's dtype"
    elif case == "residual_shape":
        kwargs, err, match = dict(residual=res[:-1]), ValueError, "residual must have x's shape"
    else:
        x, err, match = x.double(), TypeError, "x must be torch.bfloat16"
    for grad in (False, True):
        xi = x.clone().requires_grad_(grad)
        with pytest.raises(err, match=match):
            cr.cake_rmsnorm(xi, w, 1e-6, **kwargs)


def test_module_with_a_meta_weight_is_refused_by_name(gen):
    x, _, _, _ = _inputs("cpu", gen)
    m = cr.RMSNorm(x.shape[-1], device="meta", dtype=x.dtype)
    with pytest.raises(ValueError, match="w must be on cpu"):
        m(x)


def test_the_binding_is_on_wherever_torch_allows():
    """The stable shims from torch 2.14, the tensor object's layout on 2.10-2.13."""
    if os.environ.get("CAKE_RMSNORM_DIRECT", os.environ.get("CAKE_DIRECT", "auto")) != "auto":
        pytest.skip("CAKE_RMSNORM_DIRECT picks the binding by hand")
    has_shims = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 14)
    assert _lib.binding == ("shims" if has_shims else "layout")


@pytest.mark.parametrize("binding", ["layout", "shims", "off"])
def test_each_binding_gives_the_ops_bits(binding):
    """Each binding, chosen by hand in a fresh process, serves the calls with the registered ops' bits."""
    env = dict(os.environ, CAKE_RMSNORM_DIRECT=binding)
    child = subprocess.run([sys.executable, "-c", "from cake_rmsnorm import _lib; print(_lib.binding)"], env=env,
                           capture_output=True, text=True, check=True)
    probe = child.stdout.strip()
    if binding == "shims" and probe == "None":
        assert "CAKE_RMSNORM_DIRECT=shims: that binding is not available" in child.stderr  # said, not silent
        pytest.skip(f"torch {torch.__version__} has no stable Python shims")
    assert probe == ("None" if binding == "off" else binding)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__, "-k",
                          "bits_equal_the_ops or autograd_takes_the_direct_path or refusals_through"],
                         env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert ("the direct binding is off" in run.stdout) == (binding == "off")


def test_an_unknown_binding_is_refused_by_name():
    env = dict(os.environ, CAKE_DIRECT="fast")
    run = subprocess.run([sys.executable, "-c", "import cake_rmsnorm"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "CAKE_DIRECT must be one of auto, shims, layout, off" in run.stderr


def test_the_old_setting_name_is_read_and_said():
    """CAKE_DIRECT, the setting's older name, still picks the binding, with a DeprecationWarning."""
    env = {k: v for k, v in os.environ.items() if k != "CAKE_RMSNORM_DIRECT"}
    env["CAKE_DIRECT"] = "off"
    child = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c",
                            "from cake_rmsnorm import _lib; print(_lib.binding)"], env=env, capture_output=True,
                           text=True, check=True)
    assert child.stdout.strip() == "None" and "CAKE_DIRECT is read as CAKE_RMSNORM_DIRECT" in child.stderr
