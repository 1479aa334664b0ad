"""The backward's alternative kernels: the one launch (dx by rows and dw by columns in one grid, at
the fewest dw chunks) and warp chunks (narrow rows, a warp a chunk):
the same dx and dw bits as the main kernel and its finalize, for every route, dtype and dw
output (FP32, accumulated, w's dtype through autograd), and against the FP64 reference."""

import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm.tuning import one_launch
from conftest import HAS_CUDA
from reference import DW_REL_L2, assert_close_unit, make_rows, make_weight, ref_backward, rel_l2


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def _inputs(T, H, dtype, wdtype, residual, gen):
    """x, g, g_residual (None without the residual route), w and the forward's rstd."""
    x = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    gr = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, wdtype, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    return x, g, gr, w, rstd


def _check_reference(dx, dw, g, x, w, gr):
    """dx (g_residual added) and dw against the FP64 reference."""
    dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
    if gr is not None:
        dx_ref = dx_ref + gr.double()
    assert_close_unit(dx, dx_ref, "dx")
    assert rel_l2(dw, dw_ref) <= DW_REL_L2


@pytest.mark.parametrize("bad", [-2, 1024, 5000])
def test_hook_refuses_out_of_range(bad):
    with pytest.raises(ValueError):
        with one_launch(bad):
            pass


@pytest.mark.parametrize("bad", [True, 1.0, "8"])
def test_hook_takes_only_ints(bad):
    with pytest.raises(TypeError):
        with one_launch(bad):
            pass


def test_plan_names_the_one_launch():
    """At the fewest chunks the plan says one launch and its grid; above the limit, the
    finalize. Plans are CUDA-free, so this runs on the CPU too."""
    p = cr.launch_plan("bwd", 4096, 16, sm=90, sms=132)
    assert p["chunks"] == 8 and "finalize" not in p
    assert p["one_launch"]["dx_ctas"] >= 1 and p["one_launch"]["dw_ctas"] >= 1
    q = cr.launch_plan("bwd", 4096, 4096, sm=90, sms=132)
    assert "one_launch" not in q and "finalize" in q
    assert "one_launch" in cr.launch_plan("bwd", 512, 128, sm=90, sms=132)  # 64 chunks: the bound
    assert "one_launch" not in cr.launch_plan("bwd", 512, 129, sm=90, sms=132)
    assert cr.launch_plan("bwd", 6144, 1, sm=90, sms=132)["one_launch"]["dw_ctas"] == 0  # one row: its group's dw
    # FP32 activations have no one launch.
    assert "one_launch" not in cr.launch_plan("bwd", 4096, 16, dtype=torch.float32, sm=90, sms=132)


def test_plan_names_warp_chunks():
    """Narrow exact-cover programs from 8 rows a chunk (4096 chunks: T 32768); not H 256, not
    a width without the instance (H 160), not 4 rows a chunk."""
    for H in (64, 96, 128, 192):
        assert cr.launch_plan("bwd", H, 32768, sm=90, sms=132).get("warp_chunks"), H
        assert cr.launch_plan("bwd_residual", H, 1 << 20, sm=90, sms=132).get("warp_chunks"), H
        assert not cr.launch_plan("bwd", H, 16384, sm=90, sms=132).get("warp_chunks"), H
    for H in (160, 256, 512):
        assert not cr.launch_plan("bwd", H, 1 << 20, sm=90, sms=132).get("warp_chunks"), H


SHAPES = [(64, 1), (256, 3), (512, 1), (512, 2), (512, 16), (512, 64), (768, 33), (1000, 7), (1536, 64), (2048, 16),
          (2056, 5), (4096, 1), (4096, 64), (6144, 17), (8192, 40), (16384, 9), (40960, 3)]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", SHAPES)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
def test_one_launch_has_the_pair_of_kernels_bits(H, T, residual, dtype, wdtype, gen):
    x, g, gr, w, rstd = _inputs(T, H, dtype, wdtype, residual, gen)
    assert "one_launch" in cr.launch_plan("bwd", H, T, dtype=dtype, weight_dtype=wdtype)
    runs = []
    for limit in (1023, 0):
        with one_launch(limit):
            dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
            acc = torch.linspace(-1, 1, H, device="cuda")
            cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr, dw=acc, accumulate=True)
        runs.append((dx, dw, acc))
    for i, (a, b) in enumerate(zip(*runs)):
        assert torch.equal(_bits(a), _bits(b)), f"output {i} moved between one launch and the pair"
    _check_reference(runs[0][0], runs[0][1], g, x, w, gr)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(512, 1), (2048, 16), (4096, 63), (6144, 64), (16384, 2)])
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32])
def test_autograd_dw_in_w_dtype_and_signed_zeros(H, T, wdtype, gen):
    """Through autograd (dw rounded once into w's dtype by the kernel) and on rows with exact
    zeros of both signs (products of -0 and +0 in g and x), the one launch and the pair agree
    bit for bit, and dw agrees with the CPU path's."""
    x0 = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g0 = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    x0[:, ::7] = 0.0
    x0[:, 3::11] = -0.0
    g0[:, 1::5] = -0.0
    w0 = make_weight(H, wdtype, "cuda", gen)
    grads = []
    for limit in (1023, 0):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        with one_launch(limit):
            cr.cake_rmsnorm(x, w, 1e-6).backward(g0)
        grads.append((x.grad, w.grad))
    for i, (a, b) in enumerate(zip(*grads)):
        assert torch.equal(_bits(a), _bits(b)), f"grad {i} moved between one launch and the pair"
    _, rstd = cr.cake_rmsnorm_train_forward(x0, w0, 1e-6)
    _, dw_gpu = cr.cake_rmsnorm_train_backward(g0, x0, w0, rstd)
    _, dw_cpu = cr.cake_rmsnorm_train_backward(g0.cpu(), x0.cpu(), w0.cpu(), rstd.cpu())
    assert torch.equal(_bits(dw_gpu.cpu()), _bits(dw_cpu))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [512, 4096])
def test_strided_rows_and_every_limit(H, gen):
    """Row strides (a view of a wider buffer) and every limit up to the chunk count: one launch
    wherever it fits, the pair elsewhere, the same bits."""
    T = 64
    base = make_rows(T, 2 * H, torch.bfloat16, "cuda", 1.0, None, 0, gen)
    x, g = base[:, :H], base[:, H:]
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    with one_launch(0):
        want = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    for limit in (1, 31, 32, 33, 1023):
        with one_launch(limit):
            got = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
        for a, b in zip(got, want):
            assert torch.equal(_bits(a), _bits(b)), f"limit {limit}"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [64, 96, 128, 192])
@pytest.mark.parametrize("T,min_rows", [(3001, 1), (40000, 8), (65541, 8)])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
def test_warp_chunks_have_the_row_kernels_bits(H, T, min_rows, residual, dtype, wdtype, gen):
    """Narrow rows with a warp a dw chunk (its groups a row each; batches that end inside a
    chunk; the hook forcing it on chunks of two rows) against one group a chunk: the same dx
    and dw bits, dw accumulated and dx-only calls included; held to the FP64 reference."""
    from cake_rmsnorm.tuning import warp_chunks
    x, g, gr, w, rstd = _inputs(T, H, dtype, wdtype, residual, gen)
    if min_rows == 8:
        assert cr.launch_plan("bwd", H, T, dtype=dtype, weight_dtype=wdtype).get("warp_chunks")
    runs = []
    for rows in (min_rows, 0):
        with warp_chunks(rows):
            dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
            acc = torch.linspace(-1, 1, H, device="cuda")
            cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr, dw=acc, accumulate=True)
            dx_only, _ = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr, weight_grad=False)
        runs.append((dx, dw, acc, dx_only))
    for i, (a, b) in enumerate(zip(*runs)):
        assert torch.equal(_bits(a), _bits(b)), f"output {i} moved between warp chunks and one group a chunk"
    _check_reference(runs[0][0], runs[0][1], g, x, w, gr)


def test_warp_chunks_hook_checks_its_argument():
    from cake_rmsnorm.tuning import warp_chunks
    with pytest.raises(ValueError):
        with warp_chunks(-1):
            pass
    with pytest.raises(TypeError):
        with warp_chunks(2.0):
            pass
