"""The program-sweep hook: invalid shapes are refused; on the GPU every valid candidate is
correct."""

import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm.tuning import BACKWARD, FORWARD, program_override
from conftest import HAS_CUDA
from reference import DW_REL_L2, assert_close_unit, make_rows, make_weight, ref_backward, ref_forward, rel_l2


@pytest.mark.parametrize("args", [(FORWARD, 48, 96, 2), (FORWARD, 64, 96, 2), (FORWARD, 64, 1024, 2),
                                  (FORWARD, 64, 128, 3), (BACKWARD, 64, 512, 2), (BACKWARD, 64, 128, 8),
                                  (2, 64, 128, 2)])
def test_invalid_programs_refused(args):
    with pytest.raises(ValueError):
        with program_override(*args):
            pass


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [512, 2048, 6144])
def test_candidates_are_correct(H, gen):
    T = 300
    x = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    y_ref, rstd_ref, _ = ref_forward(x, w, 1e-6)
    dx_ref, dw_ref = ref_backward(g, x, w, 1e-6)
    nvec = H // 8
    for tpr in (8, 32, 64, 128, 256):
        for rows in (1, 2, 4):
            cta = tpr * rows
            if cta < 32 or cta > 256:
                continue
            vpt = next((v for v in (1, 2, 4, 8) if v * tpr >= nvec), 8)
            with program_override(FORWARD, tpr, cta, vpt, ctas_per_sm=2):
                y, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
            assert_close_unit(y, y_ref, f"y tpr={tpr} cta={cta}")
            assert rel_l2(rstd, rstd_ref) <= 1e-5
            bvpt = next((v for v in (1, 2, 4) if v * tpr >= nvec), 4)
            if bvpt * tpr < nvec and rows > 1:
                continue  # the backward's second pass needs one row a CTA
            with program_override(BACKWARD, tpr, cta, bvpt):
                dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
            assert_close_unit(dx, dx_ref, f"dx tpr={tpr} cta={cta}")
            assert rel_l2(dw, dw_ref) <= DW_REL_L2
