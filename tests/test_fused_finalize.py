"""The dw finalize in the main launch (a cooperative grid with a grid barrier) against the
second-kernel finalize: the same dx and the same dw bits, for every CTA size that can fuse,
chunk counts that are and are not multiples of 32, widths that are not multiples of 32, the
residual and FP32-weight routes, accumulation, and CUDA-graph replay."""

import pytest
import torch

import cake_rmsnorm as cr
from cake_rmsnorm.tuning import BACKWARD, FINALIZE_MODES, finalize_override, program_override
from conftest import HAS_CUDA
from reference import DW_REL_L2, make_rows, make_weight, ref_backward, rel_l2

EPS = 1e-6


@pytest.mark.parametrize("mode", ["pair", "", None, 1, "FUSED"])
def test_unknown_modes_refused(mode):
    with pytest.raises(ValueError):
        with finalize_override(mode):
            pass


def test_c_hook_refuses_out_of_range_modes():
    from cake_rmsnorm import _lib

    assert _lib.set_finalize_override(2) != 0 and _lib.set_finalize_override(-2) != 0
    for mode in (-1, *FINALIZE_MODES.values()):
        assert _lib.set_finalize_override(mode) == 0
    _lib.set_finalize_override(-1)


def _inputs(T, H, residual, w_fp32, gen):
    x = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    gr = make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous() if residual else None
    w = make_weight(H, torch.float32 if w_fp32 else torch.bfloat16, "cuda", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    return g, x, w, rstd, gr


def _both(fn):
    out = {}
    for mode in FINALIZE_MODES:
        with finalize_override(mode):
            out[mode] = fn()
    return out["separate"], out["fused"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("H,T", [(512, 1), (512, 300), (1000, 4099), (2048, 65), (6144, 256), (512, 70001),
                                 (5120, 20000), (131072, 37)])
@pytest.mark.parametrize("route", ["plain", "residual", "fp32_weight"])
def test_fused_matches_separate_bitwise(H, T, route, gen):
    g, x, w, rstd, gr = _inputs(T, H, route == "residual", route == "fp32_weight", gen)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")

    def run():
        ws.view(torch.uint8).fill_(0xFF)  # a stale partial would show as NaN
        dx, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr, workspace=ws)
        return dx.clone(), dw.clone()

    (dx0, dw0), (dx1, dw1) = _both(run)
    assert torch.equal(dx0, dx1)
    assert torch.equal(dw0.view(torch.int32), dw1.view(torch.int32))
    if T * H <= 1 << 24:
        _, dw_ref = ref_backward(g, x, w, EPS)  # g_residual adds to dx only
        assert rel_l2(dw1, dw_ref) <= DW_REL_L2


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("cta", [64, 96, 128, 256])  # 96: three warps cannot split 32 lanes: two kernels
@pytest.mark.parametrize("max_ctas", [0, 1, 5])
def test_fused_cta_sizes_and_grids(cta, max_ctas, gen):
    T, H = 3001, 1000
    g, x, w, rstd, _ = _inputs(T, H, False, False, gen)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    ref = None
    for mode in FINALIZE_MODES:
        with program_override(BACKWARD, 32, cta, 4, stages=2), finalize_override(mode):
            dx, dw = torch.empty_like(x), torch.empty(H, device="cuda")
            cr.ops.bwd_out(g, x, w, rstd, None, True, dx, dw, ws, max_ctas)
        if ref is None:
            ref = (dx, dw)
        assert torch.equal(dx, ref[0])
        assert torch.equal(dw.view(torch.int32), ref[1].view(torch.int32)), f"cta={cta} mode={mode}"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_fused_accumulates_and_replays_in_a_graph(gen):
    T, H = 777, 2048
    g, x, w, rstd, _ = _inputs(T, H, False, False, gen)
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    base = torch.randn(H, device="cuda")
    with finalize_override("separate"):
        dx_ref, dw_ref = torch.empty_like(x), base.clone()
        cr.cake_rmsnorm_train_backward(g, x, w, rstd, dx=dx_ref, dw=dw_ref, accumulate=True, workspace=ws)
    dx, dw = torch.empty_like(x), base.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with finalize_override("fused"), torch.cuda.stream(stream):
        cr.cake_rmsnorm_train_backward(g, x, w, rstd, dx=dx, dw=dw, accumulate=True, workspace=ws)  # warm-up
        dw.copy_(base)
        with torch.cuda.graph(graph, stream=stream):
            cr.cake_rmsnorm_train_backward(g, x, w, rstd, dx=dx, dw=dw, accumulate=True, workspace=ws)
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        dw.copy_(base)
        ws.view(torch.uint8).fill_(0xFF)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(dx, dx_ref)
        assert torch.equal(dw.view(torch.int32), dw_ref.view(torch.int32))
