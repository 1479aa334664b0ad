"""The tuning hooks: invalid shapes are refused; on the GPU every valid candidate is correct,
and the exact narrow groups have the bits of the runtime-width kernels they stand in for."""


import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm.tuning import BACKWARD, FORWARD, exact_groups, program_override
from conftest import HAS_CUDA
from reference import DW_REL_L2, assert_close_unit, make_rows, make_weight, ref_backward, ref_forward, rel_l2


@pytest.mark.parametrize("args", [(FORWARD, 48, 96, 2), (FORWARD, 64, 96, 2), (FORWARD, 64, 1024, 2),
                                  (FORWARD, 64, 128, 5), (BACKWARD, 64, 512, 2), (BACKWARD, 64, 128, 8),
                                  (FORWARD, 64, 128, 2, 0, -1), (BACKWARD, 64, 128, 2, 0, 0),
                                  (BACKWARD, 64, 128, 2, 0, 9),
                                  (FORWARD, 32, 128, 2, 0, 0, 2), (FORWARD, 32, 128, 2, 0, 2, 4),  # rows: 1, or 4 streaming
                                  (BACKWARD, 32, 128, 2, 0, 2, 4),
                                  (FORWARD, 512, 512, 8, 0, 4),  # a 256 KiB ring: over the limit
                                  (2, 64, 128, 2)])
def test_invalid_programs_refused(args):
    with pytest.raises(ValueError):
        with program_override(*args):
            pass


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("vpt", [4, 6])
def test_a_pairs_group_narrower_than_its_row_is_refused(vpt, gen):
    """The forward's 4 and 6 vectors a thread sum even and odd vectors apart and hold the row
    (kernels/forward.cuh, kPairs): a forced program that leaves a rest is refused on both
    routes, and the caller's output is not written; VPT 8 keeps its rest loop."""
    H = 32 * vpt * 8 * 2
    x = make_rows(5, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    y = torch.full_like(x, 7.0)
    rstd = torch.full((5,), 7.0, device="cuda")
    with program_override(FORWARD, 32, 128, vpt, stages=0):  # the C API's CAKE_ERR_INVALID_ARGUMENT
        with pytest.raises(RuntimeError, match="invalid argument"):
            torch.ops.cake_rmsnorm.fwd_out(x, w, 1e-6, y, rstd)
        assert (y == 7).all() and (rstd == 7).all()
        with pytest.raises(RuntimeError, match="invalid argument"):
            cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=x)
    with program_override(FORWARD, 32, 128, 8, stages=0):
        y2, _ = cr.cake_rmsnorm_train_forward(torch.cat([x, x], dim=1), torch.cat([w, w]), 1e-6)
    assert torch.isfinite(y2.float()).all()


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
    dw_bits = None
    for tpr in (8, 32, 64, 128, 256):
        for rows, stages in ((1, 1), (2, 2), (4, 3), (1, 8)):
            cta = tpr * rows
            if cta < 32 or cta > 256:
                continue
            vpt = next((v for v in (1, 2, 3, 4, 6, 8) if v * tpr >= nvec), 8)
            with program_override(FORWARD, tpr, cta, vpt, ctas_per_sm=2, stages=stages):
                y, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
            assert_close_unit(y, y_ref, f"y tpr={tpr} cta={cta}")
            assert rel_l2(rstd, rstd_ref) <= 1e-5
            bvpt = next((v for v in (1, 2, 3, 4) if v * tpr >= nvec), 4)  # wider rows: direct reads
            with program_override(BACKWARD, tpr, cta, bvpt, stages=stages):
                dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd_ref.float())
            assert_close_unit(dx, dx_ref, f"dx tpr={tpr} cta={cta}")
            assert rel_l2(dw, dw_ref) <= DW_REL_L2
            # dw's reduction tree belongs to (T, H), not to the program: the same bits for all.
            bits = dw.view(torch.int32)
            if dw_bits is None:
                dw_bits = bits
            assert torch.equal(bits, dw_bits), f"dw bits moved with the program tpr={tpr} cta={cta}"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(256, 700), (512, 300), (1000, 77), (1536, 200), (2048, 257), (2056, 33), (4096, 129),
                                 (4096, 16385), (6144, 300), (16384, 5), (40960, 3)])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32])
def test_streaming_forward_matches_the_ring_kernel(H, T, residual, wdtype, gen):
    """A streaming program (stages 0: no ring, a group a row, every row's group in the grid)
    runs the ring kernel's row body: with the ring program's tpr and VPT, y, rstd and h_new
    have the same bits, at any T and CTA size (the last CTA's empty groups store nothing), for
    each place the streaming kernel loads w (w first: H <= 1000, the residual route, an FP32 w
    on wide groups below 2^26 elements; before the sum: 16-bit w at VPT 6 and groups of 64+
    threads, an FP32 w there from 2^26 elements, H 4096 T 16385; at use: FP32 w at VPT 6)."""
    route = "fwd_residual" if residual else "fwd"
    # the ring program: general_t{tpr}x{rows}_v{vpt}_s{stages}, stages > 0; where the plain
    # route streams at every T (H 256, 512) the residual route's, the group it had
    ring = next(v.group for r in (route, "fwd_residual") for v in cr.program_windows(r, H)[r] if v.group["ring_rows"])
    tpr, rows, vpt, stages = (ring[k] for k in ("threads_per_row", "groups_per_cta", "vectors_per_thread", "ring_rows"))
    x = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    r = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, wdtype, "cuda", gen)
    with program_override(FORWARD, tpr, tpr * rows, vpt, stages=stages):
        want = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
    window_ctas = {v.group["threads_per_row"] * v.group["groups_per_cta"] for v in cr.program_windows(route, H)[route]}
    for cta in sorted({tpr * rows, max(tpr, 32), min(tpr * 4, 512)} | window_ctas):
        if cta % tpr or cta < 32 or (tpr > 32 and cta // tpr >= 16):
            continue
        with program_override(FORWARD, tpr, cta, vpt, stages=0):
            got = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
        for a, b in zip(got, want):
            assert torch.equal(a.view(torch.int16) if a.dtype != torch.float32 else a.view(torch.int32),
                               b.view(torch.int16) if b.dtype != torch.float32 else b.view(torch.int32)), name


# The forward's exact narrow groups (dispatch/kernel_key.h, compiled; exact_group) at the widths
# they cover, and the activation / weight dtypes their instances are compiled for.
EXACT_NARROW_GROUPS = pytest.mark.parametrize("H,tpr,vpt", [(64, 4, 2), (128, 8, 2), (256, 8, 4), (256, 16, 2),
                                                         (512, 16, 4), (512, 32, 2),
                                                         (768, 32, 3), (1024, 32, 4)])
NARROW_DTYPES = pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16),
                                                         (torch.bfloat16, torch.float32),
                                                         (torch.float16, torch.float16)])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@EXACT_NARROW_GROUPS
@pytest.mark.parametrize("residual", [False, True])
@NARROW_DTYPES
def test_exact_narrow_groups_match_the_ring_kernel(H, tpr, vpt, residual, dtype, wdtype, gen):
    """The streaming kernel's exact narrow groups (a compile-time width whose vectors cover the
    row: dispatch/kernel_key.h, compiled; exact_group) have the bits of the ring kernel's
    runtime-width group with the same tpr and VPT, for every CTA size; the rows past T's last
    CTA stay unwritten."""
    T = 301
    x = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    r = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, wdtype, "cuda", gen)
    with program_override(FORWARD, tpr, max(tpr, 32), vpt, stages=2):
        want = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
    y_ref, _, _ = ref_forward(x, w, 1e-6, residual=r)
    assert_close_unit(want[0], y_ref, "ring")
    for cta in (32, 64, 128, 256):
        if cta < tpr:
            continue
        with program_override(FORWARD, tpr, cta, vpt, stages=0):
            got = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
        for a, b in zip(got, want):
            view = torch.int32 if a.dtype == torch.float32 else torch.int16
            assert torch.equal(a.view(view), b.view(view)), f"t{tpr}x{cta // tpr}_v{vpt}"


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@EXACT_NARROW_GROUPS
@pytest.mark.parametrize("residual", [False, True])
@NARROW_DTYPES
def test_streaming_rows_have_one_rows_bits(H, tpr, vpt, residual, dtype, wdtype, gen):
    """A streaming group taking 4 rows (programs.h, multirow_streaming) writes each row as the
    one-row kernel does: the same bits at row counts that leave the last CTA's groups with 0..3
    rows, every CTA size, and where no 4-row instance is compiled (the residual route, an FP32 w
    at VPT 4) the ring program of the same group serves. The rows past T stay unwritten."""
    w = make_weight(H, wdtype, "cuda", gen)
    for T in (1, 5, 63, 130, 1027):
        x = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
        r = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
        with program_override(FORWARD, tpr, max(tpr, 32), vpt, stages=0):
            want = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
        for cta in (32, 128, 256):
            if cta < tpr:
                continue
            y = torch.full((T + 3, H), float("nan"), dtype=dtype, device="cuda")
            with program_override(FORWARD, tpr, cta, vpt, stages=0, rows=4):
                got = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r, out=y[:T])
            assert torch.isnan(y[T:].float()).all(), "a row past T was written"
            for i, (a, b) in enumerate(zip(got, want)):
                assert torch.equal(_bits(a), _bits(b)), f"output {i} t{tpr}x{cta // tpr}_v{vpt} T={T}"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H", [64, 128, 256, 512, 768, 1024])
@pytest.mark.parametrize("T", [3, 129, 1000, 4097])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
def test_exact_groups_have_the_runtime_kernels_bits(H, T, residual, dtype, wdtype, gen):
    """The tables' programs at these widths have exact, compile-time-width kernels (the
    forward's streaming groups; the backward's t16 v2, t32 v2 and t32 v3, row pairs at T 3,
    129 and 1000 included): with the tuning hook off, the same programs run the runtime-width
    kernels, and every output has the same bits, dx and dw included. The exact run is also held
    to the FP64 reference."""
    x = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    r = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    g = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
    gr = make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, wdtype, "cuda", gen)
    runs = []
    for enabled in (True, False):
        with exact_groups(enabled):
            fwd = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
            h, rstd = (fwd[2], fwd[1]) if residual else (x, fwd[1])
            dx, dw = cr.cake_rmsnorm_train_backward(g, h, w, rstd, g_residual=gr)
        runs.append((*fwd, dx, dw))
    for i, (a, b) in enumerate(zip(*runs)):
        assert torch.equal(_bits(a), _bits(b)), f"output {i} moved between the exact and runtime-width kernels"
    dx_ref, dw_ref = ref_backward(g, h, w, 1e-6)
    if residual:
        dx_ref = dx_ref + gr.double()
    assert_close_unit(runs[0][-2], dx_ref, "dx")
    assert rel_l2(runs[0][-1], dw_ref) <= DW_REL_L2


def test_exact_groups_hook_takes_only_booleans():
    from cake_rmsnorm._lib import _c

    assert _c.cake_rmsnorm_set_exact_groups(2) != 0
    assert _c.cake_rmsnorm_set_exact_groups(1) == 0
