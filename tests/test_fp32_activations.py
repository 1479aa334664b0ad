"""FP32 activations: the residual stream of mixed-precision training (FP32 parameters under
autocast). x and residual FP32 with an FP32 or 16-bit w; y in x's dtype or a 16-bit out_dtype
(cast in the same pass); its gradient in y's dtype; h_new, dx and rstd FP32. Against FP64 on
fresh random data, dw bits repeatable, and the GPU's dw bits equal to the CPU path's."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA, devices
from reference import DW_REL_L2, RSTD_REL_L2, assert_close_unit, make_rows, make_weight, ref_backward, rel_l2

EPS = 1e-6
F32 = torch.float32
HALF = (torch.bfloat16, torch.float16)


def _ref_forward(x, w, r):
    h = (x.double() + r.double()) if r is not None else x.double()
    rstd = torch.rsqrt(h.pow(2).mean(-1) + EPS)
    return h * rstd.unsqueeze(-1) * w.double(), rstd, h


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("wdtype", [F32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("T, H", [(1, 64), (37, 1000), (300, 4096), (5, 16384)])
def test_forward_against_fp64(device, wdtype, out_dtype, residual, T, H, gen):
    x = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    r = make_rows(T, H, F32, device, 1.0, None, 0, gen) if residual else None
    w = make_weight(H, wdtype, device, gen)
    out = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r, out_dtype=out_dtype)
    y, rstd = out[0], out[1]
    y_ref, rstd_ref, h_ref = _ref_forward(x, w, r)
    assert y.dtype == (out_dtype or F32) and rstd.dtype == F32
    assert rel_l2(rstd, rstd_ref) <= RSTD_REL_L2
    assert_close_unit(y, y_ref, "y")
    if out_dtype is None:  # FP32 y: FP32 rounding, far inside the 16-bit tolerance
        assert rel_l2(y, y_ref) <= 1e-6
    else:  # the 16-bit y is the FP32 y rounded once
        y32 = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)[0]
        assert torch.equal(y, y32.to(out_dtype))
    if residual:
        assert out[2].dtype == F32 and rel_l2(out[2], h_ref) <= 1e-7


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("wdtype", [F32, torch.bfloat16])
@pytest.mark.parametrize("gdtype", [F32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("g_residual", [False, True])
@pytest.mark.parametrize("T, H", [(1, 64), (37, 1000), (1000, 2048), (9, 16384)])
def test_backward_against_fp64(device, wdtype, gdtype, g_residual, T, H, gen):
    x = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    g = make_rows(T, H, gdtype, device, 1.0, None, 0, gen)
    gr = make_rows(T, H, F32, device, 1.0, None, 0, gen) if g_residual else None
    w = make_weight(H, wdtype, device, gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    dx_ref, dw_ref = ref_backward(g, x, w, EPS)
    if gr is not None:
        dx_ref = dx_ref + gr.double()
    assert dx.dtype == F32 and dw.dtype == F32
    assert rel_l2(dx, dx_ref) <= 1e-5
    assert rel_l2(dw, dw_ref) <= DW_REL_L2
    dx2, dw2 = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2), "deterministic"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [64, 1000, 4096, 16384])
@pytest.mark.parametrize("T", [1, 300, 5000])
def test_gpu_dw_bits_equal_cpu(H, T, gen):
    """The chunked, compensated dw partials and the shared finalize: the same dw bits on the GPU
    and on the CPU path (given the same rstd), for FP32 activations too."""
    x = make_rows(T, H, F32, "cpu", 1.0, None, 0, gen)
    g = make_rows(T, H, torch.bfloat16, "cpu", 1.0, None, 0, gen)
    w = make_weight(H, F32, "cpu", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x.cuda(), w.cuda(), EPS)
    _, dw_gpu = cr.cake_rmsnorm_train_backward(g.cuda(), x.cuda(), w.cuda(), rstd)
    _, dw_cpu = cr.cake_rmsnorm_train_backward(g, x, w, rstd.cpu())
    assert torch.equal(dw_gpu.cpu(), dw_cpu)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [64, 2048, 8192])
def test_gpu_rows_do_not_depend_on_T(H, gen):
    x = make_rows(700, H, F32, "cuda", 1.0, None, 0, gen)
    g = make_rows(700, H, torch.bfloat16, "cuda", 1.0, None, 0, gen)
    w = make_weight(H, F32, "cuda", gen)
    y, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS, out_dtype=torch.bfloat16)
    dx, _ = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    for t in (1, 33, 699):
        y_t, rstd_t = cr.cake_rmsnorm_train_forward(x[:t], w, EPS, out_dtype=torch.bfloat16)
        dx_t, _ = cr.cake_rmsnorm_train_backward(g[:t], x[:t], w, rstd_t)
        assert torch.equal(y_t, y[:t]) and torch.equal(rstd_t, rstd[:t]) and torch.equal(dx_t, dx[:t])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("residual", [False, True])
def test_autograd_with_out_dtype(device, residual, gen):
    """cake_rmsnorm with FP32 x and a BF16 y: y's gradient comes back in BF16, dx FP32, dw in
    w's dtype; the same as the eager formula's gradients within BF16 noise."""
    T, H = 24, 512
    x0 = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    r0 = make_rows(T, H, F32, device, 1.0, None, 0, gen)
    w0 = make_weight(H, F32, device, gen)
    gy = make_rows(T, H, torch.bfloat16, device, 1.0, None, 0, gen)

    def run(fn):
        x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
        out = fn(x, w, r if residual else None)
        y = out[0] if residual else out
        loss = (y.float() * gy.float()).sum() + (out[1].sum() if residual else 0)
        loss.backward()
        return y, x.grad, w.grad, r.grad if residual else None

    def eager(x, w, r):
        h = x if r is None else x + r
        y = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w).to(torch.bfloat16)
        return y if r is None else (y, h)

    ours = run(lambda x, w, r: cr.cake_rmsnorm(x, w, EPS, residual=r, out_dtype=torch.bfloat16))
    ref = run(eager)
    assert ours[0].dtype == torch.bfloat16 and ours[1].dtype == F32 and ours[2].dtype == F32
    assert_close_unit(ours[0], ref[0], "y")
    assert rel_l2(ours[1], ref[1]) < 1e-5 and rel_l2(ours[2], ref[2]) < 1e-5
    if residual:
        assert torch.equal(ours[1], ours[3])


@pytest.mark.parametrize("device", devices())
def test_module_under_autocast_takes_the_kernels(device, gen):
    """FP32 parameters and residual stream under autocast: RMSNorm runs the kernels (no eager
    fallback) and, with cast_output, returns y in the autocast dtype (FP32 without it, as torch's
    RMSNorm); outside autocast y stays FP32."""
    H = 256
    m = cr.RMSNorm(H, cast_output=True).to(device)
    x = make_rows(16, H, F32, device, 1.0, None, 0, gen).requires_grad_()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        y = m(x)
        y2, h = m(x, torch.ones_like(x))
    assert y.dtype == torch.bfloat16 and y2.dtype == torch.bfloat16 and h.dtype == F32
    want = cr.cake_rmsnorm(x.detach(), m.weight.detach(), torch.finfo(F32).eps, out_dtype=torch.bfloat16)
    assert torch.equal(y, want)
    y.float().sum().backward()
    assert x.grad.dtype == F32 and m.weight.grad.dtype == F32
    assert m(x).dtype == F32
    plain = cr.RMSNorm(H).to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        assert plain(x).dtype == F32 == torch.nn.RMSNorm(H).to(device)(x).dtype
