"""The CPU path computes each row's sums in the GPU kernels' order (kernels/cpu/row_order.h,
dispatch/contract.h row_order_group), so y, rstd, h_new and dx are bitwise the GPU's, as dw is:
at every window edge of both forward routes (every program a width's plan chooses), BF16,
FP16 and FP32 activations, a 16-bit and an FP32 weight, with and without the residual streams.
A row's CPU outputs do not depend on T, so at large T the GPU's first and last rows are held
against the CPU path on those rows; dw, a function of T, where the CPU runs the whole call."""

import pytest
import torch

import cake_rmsnorm as cr
from conftest import HAS_CUDA
from reference import make_rows, make_weight

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]

EPS = 1e-6
WIDTHS = [64, 128, 256, 264, 512, 768, 1000, 1024, 1536, 2048, 2056, 2560, 4096, 5120, 6144, 8192, 12288, 16384,
          40960]
CPU_ELEMS = 1 << 21  # the CPU runs whole calls up to this size, else the slice below
SLICE = 48
RING_SMEM = 227 * 1024  # sm_90's shared memory a CTA: a deeper ring is refused at the call


def token_counts(H):
    ts = {1, 2, 3, 17, 129, 513}
    for route in ("fwd", "fwd_residual"):
        for above, at_most, _ in cr.program_windows(route, H, sm=90)[route]:
            ts.update(t for t in (above, above + 1, at_most, (at_most or 0) + 1) if t)
    return sorted(t for t in ts if t * H <= 1 << 26)


def bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32).cpu()


def rows_of(t, idx):
    return t if idx is None else t[idx]


@pytest.mark.parametrize("H", WIDTHS)
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16), (torch.float32, torch.float32),
                                          (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("residual", [False, True])
def test_gpu_rows_have_the_cpu_paths_bits(H, dtype, wdtype, residual, gen):
    if dtype == torch.float32 and H > 16384:
        pytest.skip("FP32 activations run up to 16384 on the GPU")
    w = make_weight(H, wdtype, "cuda", gen)
    for T in token_counts(H):
        mk = lambda: make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous()
        x, g = mk(), mk()
        r, gr = (mk(), mk()) if residual else (None, None)
        whole = T * H <= CPU_ELEMS or T <= 2 * SLICE
        idx = None if whole else torch.cat([torch.arange(SLICE), torch.arange(T - SLICE, T)])
        on_cpu = lambda t: None if t is None else rows_of(t, idx).cpu()

        out = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
        ref = cr.cake_rmsnorm_train_forward(on_cpu(x), w.cpu(), EPS, residual=on_cpu(r))
        for name, a, b in zip(("y", "rstd", "h_new"), out, ref):
            assert torch.equal(bits(rows_of(a, idx)), bits(b)), (H, T, name)
        xs = out[2] if residual else x
        dx, dw = cr.cake_rmsnorm_train_backward(g, xs, w, out[1], g_residual=gr)
        dx_c, dw_c = cr.cake_rmsnorm_train_backward(on_cpu(g), on_cpu(xs), w.cpu(), on_cpu(out[1]),
                                                    g_residual=on_cpu(gr))
        assert torch.equal(bits(rows_of(dx, idx)), bits(dx_c)), (H, T, "dx")
        if whole:
            assert torch.equal(bits(dw), bits(dw_c)), (H, T, "dw")


def _forward_variants(route, H, sms=None):
    """Program overrides of the route's row groups (threads a row, vectors a thread; the small-T
    group and the large-T one): other CTA sizes, ring depths and the streaming kernel."""
    out = []
    for T in (320, 1 << 16):
        g = cr.launch_plan(route, H, T, sm=90, sms=sms)["group"]
        tpr, vpt = g["threads_per_row"], g["vectors_per_thread"]
        streams = 2 if route == "fwd_residual" else 1
        for cta in sorted({max(32, tpr), 256 if tpr <= 256 else tpr, 512}):
            out += [(tpr, cta, vpt, stages) for stages in (0, 2, 4) if (tpr, cta, vpt, stages) not in out
                    and stages * streams * vpt * cta * 16 <= RING_SMEM]
    return out


@pytest.mark.parametrize("H", [128, 256, 1000, 2048, 6144])
@pytest.mark.parametrize("residual", [False, True])
def test_programs_and_hooks_keep_the_cpu_paths_bits(H, residual, gen):
    """Every shape of a width's row group, and every backward hook (one launch or two, a chunk a
    warp or a group, exact or runtime widths), gives the CPU path's bits: the order is the row
    group's alone."""
    from cake_rmsnorm import tuning
    T = 320  # the CPU runs the whole call, dw included
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    mk = lambda: make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    x, g = mk(), mk()
    r, gr = (mk(), mk()) if residual else (None, None)
    cpu = lambda t: None if t is None else t.cpu()
    ref = cr.cake_rmsnorm_train_forward(cpu(x), w.cpu(), EPS, residual=cpu(r))
    ran = 0
    for tpr, cta, vpt, stages in _forward_variants("fwd_residual" if residual else "fwd", H):
        try:
            with tuning.program_override(tuning.FORWARD, tpr=tpr, cta=cta, vpt=vpt, stages=stages):
                out = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
        except ValueError:
            continue  # a shape the kernels never run (the call itself takes valid arguments)
        ran += 1
        for name, a, b in zip(("y", "rstd", "h_new"), out, ref):
            assert torch.equal(bits(a), bits(b)), (H, tpr, cta, vpt, stages, name)
    assert ran >= 3, (H, ran)
    xs = ref[2].cuda() if residual else x
    rstd = ref[1].cuda()
    dx_c, dw_c = cr.cake_rmsnorm_train_backward(cpu(g), cpu(xs), w.cpu(), ref[1], g_residual=cpu(gr))
    hooks = [tuning.one_launch(0), tuning.one_launch(1023), tuning.warp_chunks(0), tuning.warp_chunks(1),
             tuning.exact_groups(False)]
    for hook in hooks:
        with hook:
            dx, dw = cr.cake_rmsnorm_train_backward(g, xs, w, rstd, g_residual=gr)
        assert torch.equal(bits(dx), bits(dx_c)), (H, hook, "dx")
        assert torch.equal(bits(dw), bits(dw_c)), (H, hook, "dw")


@pytest.mark.parametrize("H,T", [(3584, 12345), (4096, 16352), (4096, 16353), (2048, 20000), (2048, 32737),
                                 (896, 31999), (512, 40000)])
@pytest.mark.parametrize("residual", [False, True])
def test_dw_at_the_chunk_doubling_has_the_cpu_paths_bits(H, T, residual, gen):
    """dw where the chunk count holds half the cap and where it doubles to the cap (contract.h,
    backward_chunks): a persistent grid with several chunks a CTA, the CPU running the whole call."""
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    mk = lambda: make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous()
    x, g = mk(), mk()
    r, gr = (mk(), mk()) if residual else (None, None)
    cpu = lambda t: None if t is None else t.cpu()
    out = cr.cake_rmsnorm_train_forward(x, w, EPS, residual=r)
    xs = out[2] if residual else x
    dx, dw = cr.cake_rmsnorm_train_backward(g, xs, w, out[1], g_residual=gr)
    dx_c, dw_c = cr.cake_rmsnorm_train_backward(cpu(g), cpu(xs), w.cpu(), cpu(out[1]), g_residual=cpu(gr))
    assert torch.equal(bits(dx), bits(dx_c)), (H, T, "dx")
    assert torch.equal(bits(dw), bits(dw_c)), (H, T, "dw", cr._lib.backward_chunks(T, H))
