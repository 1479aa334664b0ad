"""The CPU path on torch's threads: rows (forward), dw chunks (backward) and dw columns (the
finalize) are spread over torch.set_num_threads threads, each one task's, so every output is
bitwise the same at 1, 2 and 16 threads (16 on fewer cores: oversubscribed, still correct)."""

import pytest
import torch

import cake_rmsnorm as cr


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _run(T, H, dtype, residual, wdtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    r = torch.randn(T, H, generator=g).to(dtype) if residual else None
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(wdtype)
    gy = torch.randn(T, H, generator=g).to(dtype)
    out = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
    h = out[2] if residual else x
    dx, dw = cr.cake_rmsnorm_train_backward(gy, h, w, out[1], g_residual=gy if residual else None)
    # The autograd path, dw in w's dtype through the finalize.
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = cr.cake_rmsnorm(xa, wa, 1e-6)
    y.backward(gy)
    return [*out, dx, dw, y.detach(), xa.grad, wa.grad]


@pytest.mark.parametrize("T, H, dtype, residual, wdtype", [
    (3000, 512, torch.bfloat16, False, torch.bfloat16),
    (777, 2048, torch.bfloat16, True, torch.float32),
    (4096, 256, torch.float16, False, torch.float16),
    (1500, 1000, torch.float32, False, torch.float32),
    (64, 8192, torch.bfloat16, False, torch.bfloat16),
])
def test_bits_do_not_depend_on_the_thread_count(T, H, dtype, residual, wdtype):
    before = torch.get_num_threads()
    try:
        runs = {}
        for n in (1, 2, 16):
            torch.set_num_threads(n)
            runs[n] = _run(T, H, dtype, residual, wdtype, seed=T + H)
        for n in (2, 16):
            for i, (a, b) in enumerate(zip(runs[1], runs[n])):
                assert a.dtype == b.dtype and torch.equal(_bits(a), _bits(b)), (n, T, H, i)
    finally:
        torch.set_num_threads(before)
