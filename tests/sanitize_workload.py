"""A small workload touching every CUDA kernel instantiation path, for compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/sanitize_workload.py
    (also --tool racecheck, --tool synccheck)

Covers BF16/FP16 activations, BF16/FP32 weights, residual on/off, every register-cache size
(vectors per thread), narrow rows sharing a CTA, wide rows with a second pass, row-strided
inputs, T = 1, chunk-edge token counts, a capped grid, dw accumulation and dx-only calls, the
streaming forward's windows on both sides of the ring's (the small T of most widths; H 4096 T
4096 and up; the residual route's large window at H 256 and 512; VPT 6 from 2^24 elements,
with each place the kernel loads w; the plain route's wider small-T group at its edge; four
rows a streaming group at H 256, 512 and 1024; forward only); row pairs (chunks of two rows:
T = 129 at widths of 32-thread groups and up, where the pair grid fits in half the resident
CTAs); the exact narrow groups of both directions; the backward's one launch (T <= 128: dx by
rows, dw by columns; one row: no column CTAs) and warp chunks (H 64, 96, 128, 192 from 8 rows
a chunk)."""

import torch

import cake_rmsnorm as cr


def run(T, H, dtype, wdtype, residual, stride=None, max_ctas=0, backward=True):
    g = torch.Generator().manual_seed(T * 131 + H)
    s = stride or H
    base = torch.randn(T * s, generator=g).to(dtype).cuda()
    x = base.as_strided((T, H), (s, 1))
    r = torch.randn(T, H, generator=g).to(dtype).cuda() if residual else None
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(wdtype).cuda()
    out = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=r)
    xs = out[2] if residual else x
    if not backward:
        torch.cuda.synchronize()
        return
    gy = torch.randn(T, H, generator=g).to(dtype).cuda()
    ws = cr.cake_rmsnorm_train_backward_workspace(T, H, "cuda")
    dx, dw = torch.empty(T, H, dtype=dtype, device="cuda"), torch.empty(H, device="cuda")
    cr.ops.bwd_out(gy, xs, w, out[1], gy if residual else None, dx, dw, ws, max_ctas)
    cr.ops.bwd_out(gy, xs, w, out[1], None, dx, dw, ws, max_ctas, True)  # dw += (main_grad)
    cr.ops.bwd_out(gy, xs, w, out[1], None, dx, None, None)  # dx only (frozen weight)
    torch.cuda.synchronize()
    assert torch.isfinite(dw).all()


def main():
    widths = [8, 64, 256, 520, 1000, 2048, 3080, 6144, 8192, 16384, 32768, 65536, 131072]
    for H in widths:
        for T in (1, 3, 129):
            if H >= 65536 and T > 3:
                continue
            for residual in (False, True):
                run(T, H, torch.bfloat16, torch.bfloat16, residual)
        run(7, H, torch.float16, torch.float32, True)
    run(513, 512, torch.bfloat16, torch.float32, False, stride=520)
    run(4099, 1536, torch.bfloat16, torch.bfloat16, True, max_ctas=7)
    for H in (256, 6144):
        sat = cr.saturating_workspace_rows(H)  # the chunk count's edge: it stops growing here
        for T in (sat - 1, sat, sat + 1):
            run(T, H, torch.bfloat16, torch.bfloat16, False)
    for T in (1023, 1024, 1025):  # H 2048: where the count first holds (512 chunks, two rows and more)
        run(T, 2048, torch.bfloat16, torch.bfloat16, False)
    for T in (512, 513):  # H 4096: where the count first holds (256 chunks)
        run(T, 4096, torch.bfloat16, torch.bfloat16, False)
    for T in (12345, 16352, 16353):  # H 4096: half the cap to the cap in one step (256 -> 512 chunks)
        run(T, 4096, torch.bfloat16, torch.bfloat16, False)
    for T in (1025, 4095, 4096, 4097):  # H 4096: the ring window's last rows, the large streaming window
        for residual in (False, True):
            run(T, 4096, torch.bfloat16, torch.bfloat16, residual)
    for H, T in ((512, 32767), (512, 32768), (256, 65535), (256, 65536)):  # the residual route's large window, its edge
        run(T, H, torch.bfloat16, torch.bfloat16, True, backward=False)
    # VPT 6 streams from 2^24 elements (H 6144 T 2731, H 1536 T 10923), w loaded before the sum
    # (16-bit w) or at use (FP32 w); an FP32 w before the sum on 128-thread groups from 2^26
    # elements (H 4096 T 16385; T 4096/4097 above run 16-bit w before the sum).
    for H, T in ((6144, 2730), (6144, 2731), (1536, 10923)):
        for wdtype in (torch.bfloat16, torch.float32):
            run(T, H, torch.bfloat16, wdtype, False, backward=False)
    run(16385, 4096, torch.float16, torch.float32, False, backward=False)
    # The plain forward's wider small-T group and its upper edge (H 512 t32x8 v2 to T 4096, H
    # 1536 t64x4 v3 to 2048, H 2048 t128x2 v2 to 1024, H 6144 t256x1 v3 to 512), both weights.
    for H, T in ((512, 4096), (512, 4097), (1536, 2048), (1536, 2049), (2048, 1024), (2048, 1025), (6144, 512),
                 (6144, 513)):
        for wdtype in (torch.bfloat16, torch.float32):
            run(T, H, torch.bfloat16, wdtype, False, backward=False)
    # The exact narrow groups (a compile-time width): H 768 t32x8 v3 at every T, H 1024 t32 v4
    # (past T 4096 four rows a group with a 16-bit w, plain route), H 256 t8 v4 and H 512
    # t16 v4 on the residual route, a partial last CTA each.
    for H, T in ((768, 129), (768, 4097), (768, 16385), (1024, 4097), (1024, 16385), (256, 8191), (512, 4095)):
        for wdtype in (torch.bfloat16, torch.float32):
            run(T, H, torch.bfloat16, wdtype, True, backward=False)
            run(T, H, torch.float16, torch.float16 if wdtype == torch.bfloat16 else wdtype, False, backward=False)
    # Four rows a streaming group (programs.h, multirow_streaming): the plain route past the first
    # window at H 256 (from 8193 rows), 512 and 1024 (from 4097), rows leaving the last CTA's
    # groups 1..4 rows, 16-bit and FP32 w (the latter the group's ring at VPT 4), FP16 activations.
    # H 64 (t4 v2) and 128 (t8 v2) from 16385 and 8193 rows.
    for H, T in ((64, 16385), (64, 16387), (128, 8193), (128, 8196), (256, 8193), (256, 8195), (512, 4097),
                 (512, 4099), (512, 65537), (1024, 4097), (1024, 4098)):
        for wdtype in (torch.bfloat16, torch.float32):
            run(T, H, torch.bfloat16, wdtype, False, backward=False)
        run(T, H, torch.float16, torch.float16, False, backward=False)
    # The backward's exact groups (H 256 t16 v2 above; H 512 t32 v2, H 768 t32 v3): the one
    # launch at T 3, row pairs at T 129 (immediate pair barriers), whole chunks at 4097, both
    # routes and weights.
    for H in (512, 768):
        for T in (3, 129, 4097):
            for residual in (False, True):
                run(T, H, torch.bfloat16, torch.bfloat16, residual)
        run(129, H, torch.float16, torch.float32, True)
    # The one launch (up to 64 chunks of at most two rows) at its bound and one row, runtime and
    # exact groups, rows wider than their group's vectors, both weights and FP16.
    for H in (64, 512, 1000, 4096, 16384, 40960):
        for T in (1, 2, 64, 128):
            for residual in (False, True):
                run(T, H, torch.bfloat16, torch.bfloat16, residual)
            run(T, H, torch.float16, torch.float32, False)
    # Warp chunks: the narrow exact covers from 8 rows a chunk (4096 chunks: T 32768), a last
    # batch ending inside a chunk (T 40003), both routes and weights.
    for H in (64, 96, 128, 192):
        for T in (32768, 40003):
            run(T, H, torch.bfloat16, torch.bfloat16, T == 40003)
        run(40003, H, torch.float16, torch.float32, False)
    # Wide rows: one 512-thread group a CTA (held whole up to 16384, the rest read directly past
    # it), a capped grid, both routes and weights.
    for H in (10248, 12800, 20480):
        for T in (130, 4097):
            run(T, H, torch.bfloat16, torch.bfloat16, T == 130)
        run(4097, H, torch.float16, torch.float32, True, max_ctas=7)
    print("sanitize workload done")


if __name__ == "__main__":
    main()
