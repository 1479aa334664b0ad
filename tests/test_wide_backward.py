"""The backward's wide rows (wider than 10240 elements): one 512-thread group a CTA
(programs.h, backward_program; backward.cuh, rmsnorm_bwd_wide_kernel). dw has the bits of the
256-thread group, whose products and per-chunk order are the same; dx is held to the FP64
reference, and a row's dx does not depend on T: up to 12288 the row kernel holds 3 vectors a
thread and the one launch 4, one order (params.h, bwd_wide_held_vectors)."""

import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm.tuning import BACKWARD, one_launch, program_override
from conftest import HAS_CUDA
from reference import DW_REL_L2, assert_close_unit, make_rows, make_weight, ref_backward, rel_l2


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def test_plan_names_the_wide_group():
    """The plan (CUDA-free, so on the CPU too): up to 10240 the 256-thread group (the rest of a
    row past 8192 read directly), wider one 512-thread group a CTA at every T, the one launch
    included."""
    for H in (8192, 8200, 10240):
        assert cr.launch_plan("bwd", H, 4096, sm=90, sms=132)["program"].startswith("general_t256x1_v4"), H
    for H in (10248, 12800, 16384, 65536):
        for T in (1, 64, 4096):
            assert cr.launch_plan("bwd", H, T, sm=90, sms=132)["program"].startswith("general_t512x1_v4"), (H, T)
    assert "one_launch" in cr.launch_plan("bwd", 12800, 16, sm=90, sms=132)


def test_the_wide_row_kernel_holds_what_the_row_fills():
    """The wide row kernel holds 3 vectors a thread only where every thread's fourth is past the
    row (params.h, bwd_wide_held_vectors): up to 12288 at 512 threads a row; the one launch holds
    4. (A narrower group in a 512-thread CTA, which only a tuning hook forces, keeps 4:
    tests/cpp/keys_sweep.cpp checks every such program.)"""
    def inst(H, T=4096):
        return cr.launch_plan("bwd", H, T, sm=90, sms=132)["launch"]["instance"]
    for H, held in ((10248, 3), (12288, 3), (12296, 4), (16384, 4)):
        assert (inst(H)["family"], inst(H)["vectors"]) == ("bwd_wide_rows", held), H
        assert (inst(H, 16)["family"], inst(H, 16)["vectors"]) == ("bwd_one_launch_wide_rows", 4), H


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [10248, 12288, 12800, 16384, 20480])
@pytest.mark.parametrize("T", [1, 3, 130, 4097])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
def test_wide_rows_match_the_reference_and_the_narrower_groups_dw(H, T, residual, dtype, wdtype, gen):
    """dx and dw against the FP64 reference; dw bitwise the 256-thread group's (the same
    products, chunks and order), dx of both within the reference's bound; the pair of kernels
    at the fewest chunks has the one launch's bits."""
    x = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    gr = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, wdtype, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
    if residual:
        dx_ref = dx_ref + gr.double()
    assert_close_unit(dx, dx_ref, "dx")
    assert rel_l2(dw, dw_ref) <= DW_REL_L2
    with one_launch(0), program_override(BACKWARD, 256, 256, 4, stages=2):  # the 256-thread group, rest read directly
        dx256, dw256 = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    assert torch.equal(_bits(dw), _bits(dw256)), "dw moved from the 256-thread group's"
    assert_close_unit(dx256, dx_ref, "dx (256 threads)")
    with one_launch(0):  # the pair of kernels at the fewest chunks too: the one launch's bits
        dx2, dw2 = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    assert torch.equal(_bits(dx2), _bits(dx)) and torch.equal(_bits(dw2), _bits(dw))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [10248, 12288, 12800, 20480])
def test_wide_rows_dx_does_not_depend_on_T(H, gen):
    """A row's dx is the same in a call of 3 rows (the one launch), of 5000 (persistent chunks
    of the main kernel) and through autograd at 64 rows (whose dw comes back in w's dtype)."""
    x = make_rows(5000, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(5000, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    dx_all, _ = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    dx_few, _ = cr.cake_rmsnorm_train_backward(g[:3], x[:3], w, rstd[:3])
    assert torch.equal(_bits(dx_few), _bits(dx_all[:3]))
    xa = x[:64].detach().clone().requires_grad_()
    wa = w.detach().clone().requires_grad_()
    cr.cake_rmsnorm(xa, wa, 1e-6).backward(g[:64])
    assert wa.grad.dtype == torch.bfloat16 and torch.equal(_bits(xa.grad), _bits(dx_all[:64]))
