"""The memory-efficient backward (from y) on CUDA: the row kernel, its one launch, their wide CTAs
and the FP32 backward with xhat = y (1 / w) give the CPU path's dx and dw bits (the one contract), within the
FP64 reference's tolerance, NaN outside the rebuild range, and the autograd path saves y on a
GPU with the CPU path's gradients. Fresh random data each run."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA
from reference import assert_close_unit, from_y_dx_slack, rel_l2, ref_backward

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]

ops = torch.ops.cake_rmsnorm
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
EPS = 1e-6
U = {BF16: 2.0 ** -9, FP16: 2.0 ** -12, FP32: 2.0 ** -24}


def _inputs(T, H, x_dt, y_dt, w_dt, gen, residual=False):
    x = torch.randn(T, H, generator=gen).to(x_dt)
    w = 1 + 0.3 * torch.randn(H, generator=gen)
    # Kept 1e-2 from zero: a draw inside FP16's rebuild range edge (|w| < 2^-14, about 0.6 % of
    # H 10240 draws) gets the documented NaN, which torch.equal never matches (the NaN net's own tests).
    w = torch.where(w.abs() < 1e-2, torch.full_like(w, 1e-2).copysign(w), w).to(w_dt)
    y, rstd = ops.fwd(x, w, EPS, None if y_dt == x_dt else y_dt)
    g = torch.randn(T, H, generator=gen).to(y_dt)
    gr = torch.randn(T, H, generator=gen).to(x_dt) if residual else None
    return x, w, y, rstd, g, gr


def _both(g, y, w, rstd, gr, dx_dt, dw16):
    cpu = ops.bwd_from_y(g, y, w, rstd, gr, dx_dt, dw16)
    cuda = ops.bwd_from_y(g.cuda(), y.cuda(), w.cuda(), rstd.cuda(), None if gr is None else gr.cuda(), dx_dt, dw16)
    torch.cuda.synchronize()
    return cpu, [t.cpu() for t in cuda], cr.last_launch()["launch"]["instance"]


# T 1 and 7 take the one launch (dx by rows, dw by columns), 300 and 4099 the row kernel and the
# finalize. Widths through every from-y instance (backward_group): VPT 1 (H 8), 16- and 32-thread groups
# (256, 512), VPT 2..4 at up to 256 threads, columns past a 256-thread group's (10240: the rest
# loops and the column-wise dw sweep), the wide CTAs holding 3 vectors (12288: 1 / w in shared
# memory on both routes) and 4 (16384), and columns past them (20480).
@pytest.mark.parametrize("H", [8, 64, 256, 512, 1000, 2048, 4096, 6144, 8192, 10240, 12288, 16384, 20480])
@pytest.mark.parametrize("T", [1, 7, 300, 4099])
@pytest.mark.parametrize("act,wd", [(BF16, BF16), (BF16, FP32), (FP16, FP16), (FP16, FP32)])
def test_16bit_rows_have_the_cpu_bits(act, wd, T, H, gen):
    x, w, y, rstd, g, _ = _inputs(T, H, act, act, wd, gen)
    (dx_c, dw_c), (dx_g, dw_g), inst = _both(g, y, w, rstd, None, None, wd != FP32)
    assert inst.get("from_y") and inst["tpr"] == 0
    assert inst["family"] in (("bwd_one_launch", "bwd_one_launch_wide_rows") if T <= 7 else ("bwd_rows", "bwd_wide_rows"))
    assert torch.equal(dx_c, dx_g) and torch.equal(dw_c, dw_g)
    dx_ref, dw_ref = ref_backward(g, x, w, EPS)
    # The standard tolerance plus the documented rebuild error carried into dx: at H 8 the
    # row's dot product c is as large as dx, and a BF16 y's rounding of xhat exceeds 1 %.
    assert_close_unit(dx_g, dx_ref, "dx", slack=from_y_dx_slack(g, x, w, EPS, U[act]))
    assert rel_l2(dw_g, dw_ref) <= 2 * U[act] + (U[wd] if wd != FP32 else 0) + 1e-6


@pytest.mark.parametrize("H", [8, 256, 4096, 6144, 8192, 10240, 12288, 16384, 20480])
@pytest.mark.parametrize("T", [1, 7, 513])  # the one launch, then the row kernel and the finalize
@pytest.mark.parametrize("act,wd", [(BF16, BF16), (BF16, FP32), (FP16, FP16), (FP16, FP32)])
def test_residual_gradient_is_added_as_on_the_cpu(act, wd, T, H, gen):
    x, w, y, rstd, g, gr = _inputs(T, H, act, act, wd, gen, residual=True)
    (dx_c, dw_c), (dx_g, dw_g), _ = _both(g, y, w, rstd, gr, None, wd != FP32)
    assert torch.equal(dx_c, dx_g) and torch.equal(dw_c, dw_g)
    dx_ref, _ = ref_backward(g, x, w, EPS)
    assert_close_unit(dx_g, dx_ref + gr.double(), "dx", slack=from_y_dx_slack(g, x, w, EPS, U[act]))


# FP32 x (AMP's stream): y in the compute dtype or FP32, w FP32 or 16-bit, every float4 count.
@pytest.mark.parametrize("H", [512, 4096, 8192, 12288])
@pytest.mark.parametrize("y_dt", [BF16, FP16, FP32])
@pytest.mark.parametrize("wd", [BF16, FP16, FP32])
@pytest.mark.parametrize("residual", [False, True])
def test_fp32_rows_have_the_cpu_bits(y_dt, wd, H, residual, gen):
    x, w, y, rstd, g, gr = _inputs(777, H, FP32, y_dt, wd, gen, residual)
    (dx_c, dw_c), (dx_g, dw_g), inst = _both(g, y, w, rstd, gr, FP32, False)
    assert inst["family"] == "fp32_bwd" and inst.get("from_y")
    assert torch.equal(dx_c, dx_g) and torch.equal(dw_c, dw_g)
    if not residual:
        dx_ref, dw_ref = ref_backward(g, x, w, EPS)
        assert_close_unit(dx_g, dx_ref, "dx")
        assert rel_l2(dw_g, dw_ref) <= 2 * U[y_dt] + 1e-6


# The bad column in a thread's held vectors (1 / w in registers at 4096, in shared memory at 6144
# and 8192), in the rest columns of a 256-thread group (9000 of 10240) and of the wide CTAs (17000
# of 20480), and in the FP32 rows with w held (4096) and read at each use (12288); T 64 takes the
# one launch, 300 the row kernel and the finalize. NaN bits are the device's own: only finite
# outputs are the CPU's bits.
@pytest.mark.parametrize("T", [64, 300])
@pytest.mark.parametrize("act,H,col", [(BF16, 4096, 5), (FP16, 6144, 6000), (BF16, 8192, 5), (BF16, 10240, 9000),
                                       (FP16, 20480, 17000), (FP32, 4096, 5), (FP32, 12288, 11000)])
def test_outside_the_range_the_kernels_give_nan(act, H, col, T, gen):
    """A zero column: every dx NaN (the row's mean reads it), that column's dw NaN, the rest finite."""
    _, w, y, rstd, g, _ = _inputs(T, H, act, act, act, gen)
    w[col] = 0
    dx, dw = ops.bwd_from_y(g.cuda(), y.cuda(), w.cuda(), rstd.cuda(), None, None, False)
    dx, dw = dx.cpu(), dw.cpu()
    assert dx.isnan().all() and dw[col].isnan() and not dw[torch.arange(H) != col].isnan().any()


def test_the_module_saves_y_on_a_gpu_with_the_cpu_gradients(gen):
    x = torch.randn(300, 2048, generator=gen).bfloat16()
    g = torch.randn(300, 2048, generator=gen).bfloat16()
    out = []
    for dev in ("cpu", "cuda"):
        m = cr.RMSNorm(2048, memory_efficient=True, dtype=BF16, device=dev)
        with torch.no_grad():
            m.weight.copy_(1 + 0.1 * torch.randn(2048, generator=torch.Generator().manual_seed(1)))
        xa = x.detach().to(dev).requires_grad_()  # a leaf on each device
        y = m(xa)
        assert y.grad_fn.saved_tensors[0].data_ptr() == y.data_ptr()  # y saved, not x
        y.backward(g.to(dev))
        out.append((xa.grad.cpu(), m.weight.grad.cpu()))
    assert all(torch.equal(a, b) for a, b in zip(*out))

