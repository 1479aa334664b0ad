"""The CPU path sums each row in the order the GPU kernels use (docs/programs.md, "One order a
width"; kernels/cpu/row_order.h): checked here against that order written out again in exact
rational arithmetic, every rounding done by hand, on a few rows of widths that cover each
shape of it: groups narrower and wider than a warp, the even/odd pairs of 4 and 6 vectors,
masked vectors, a rest past the group (H 40960), and the FP32 activations' running sums and
warp-order fold. tests/test_cpu_gpu_bits.py holds the CPU path against the GPU itself."""

import math
import os
import shutil
import subprocess
from fractions import Fraction

import pytest
import torch

import cake_rmsnorm as cr
from reference import make_rows, make_weight

EPS = 1e-6


def f32(q):
    """q rounded to the nearest FP32 value, ties to even (normal range, as these rows stay)."""
    if q == 0:
        return Fraction(0)
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    ulp = Fraction(2) ** (e - 23)
    m = a / ulp
    n = m.numerator // m.denominator
    rem = m - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return (n * ulp) if q > 0 else -(n * ulp)


def f32_sqrt(q):
    """The correctly rounded FP32 square root of q > 0 (an exact floor to 60 bits, then rounded)."""
    scale = 1 << 120
    root = math.isqrt(q.numerator * scale * scale // q.denominator)
    lo, hi = Fraction(root, scale), Fraction(root + 1, scale)
    r_lo, r_hi = f32(lo), f32(hi)
    assert r_lo == r_hi, "a square root this close to a tie: widen the scale"
    return r_lo


def tree(v):
    if len(v) == 1:
        return v[0]
    h = len(v) // 2
    return f32(tree(v[:h]) + tree(v[h:]))


def butterfly(a):
    a = list(a)
    o = len(a) // 2
    while o:
        a = [f32(a[i] + a[i ^ o]) for i in range(len(a))]
        o //= 2
    return a[0]


def group_sum(per_thread, tpr, pairs, fp32):
    """reduce.cuh's group_sum / group_sum_pairs and fp32_rows.cuh's fp32_group_sum."""
    if pairs and tpr < 32:
        return butterfly([f32(e + o) for e, o in per_thread])
    if tpr <= 32 and not pairs:
        return butterfly(per_thread)
    warps = []
    for w in range(tpr // 32):
        lanes = per_thread[32 * w:32 * w + 32]
        warps.append(f32(butterfly([e for e, _ in lanes]) + butterfly([o for _, o in lanes])) if pairs
                     else butterfly(lanes))
    if fp32:
        s = warps[0]
        for v in warps[1:]:
            s = f32(s + v)
        return s
    return butterfly(warps)


def row_sum(leaves, tpr, vectors, pairs, fp32):
    nvec = len(leaves)
    per_thread = []
    for lane in range(tpr):
        part = [leaves[lane + k * tpr] if lane + k * tpr < nvec else Fraction(0) for k in range(vectors)]
        if fp32:
            s = Fraction(0)
            for p in part:
                s = f32(s + p)
            per_thread.append(s)
        elif pairs:
            per_thread.append((tree(part[0::2]), tree(part[1::2])))
        else:
            s = tree(part)
            for v in range(lane + vectors * tpr, nvec, tpr):
                s = f32(s + leaves[v])
            per_thread.append(s)
    return group_sum(per_thread, tpr, pairs, fp32)


def order(H, fp32, backward):
    """The row group dispatch/contract.h row_order_group names, through the public window tables."""
    if fp32:
        vectors = 2 if backward else 4  # the contract's fp32_bwd_vectors / fp32_fwd_vectors (contract.h, kGroupRule)
        tpr = 1
        while tpr * vectors < H // 4 and tpr < 512:
            tpr *= 2
        need = -(-(H // 4) // tpr)
        return tpr, max(need, 2 if need <= 2 else 4 if need <= 4 else 8), False
    route = "bwd" if backward else "fwd"
    last = cr.program_windows(route, H, sm=90)[route][-1].group  # the ring's group, or its streaming twin
    tpr, vectors = last["threads_per_row"], last["vectors_per_thread"]
    return tpr, vectors, not backward and vectors in (4, 6)


def exact(t):
    return [Fraction(float(v)) for v in t.float().tolist()]


def leaves_fwd(h, fp32):
    if fp32:
        return [f32(f32(f32(h[i] * h[i]) + f32(h[i + 1] * h[i + 1])) + f32(f32(h[i + 2] * h[i + 2]) + f32(h[i + 3] * h[i + 3])))
                for i in range(0, len(h), 4)]
    out = []
    for i in range(0, len(h), 8):
        pr = [f32(h[i + 2 * j] * h[i + 2 * j] + f32(h[i + 2 * j + 1] * h[i + 2 * j + 1])) for j in range(4)]
        out.append(tree(pr))
    return out


def leaves_bwd(g, w, x, rstd, fp32):
    if fp32:
        t = [f32(f32(g[i] * w[i]) * f32(x[i] * rstd)) for i in range(len(g))]
        return [f32(f32(t[i] + t[i + 1]) + f32(t[i + 2] + t[i + 3])) for i in range(0, len(t), 4)]
    out = []
    for i in range(0, len(g), 8):
        pr = []
        for j in range(4):
            a, b = i + 2 * j, i + 2 * j + 1
            pr.append(f32(f32(g[a] * w[a]) * f32(x[a] * rstd) + f32(f32(g[b] * w[b]) * f32(x[b] * rstd))))
        out.append(tree(pr))
    return out


@pytest.mark.parametrize("H,dtype", [(64, torch.bfloat16), (256, torch.bfloat16), (1000, torch.bfloat16),
                                     (1536, torch.float16), (5120, torch.bfloat16), (6144, torch.bfloat16),
                                     (40960, torch.bfloat16), (1000, torch.float32), (6144, torch.float32)])
def test_cpu_rows_follow_the_kernels_order(H, dtype, gen):
    fp32 = dtype == torch.float32
    T = 8 if H <= 2048 else 2  # exact arithmetic costs a row's width; the order is the width's, not the row's
    x = make_rows(T, H, dtype, "cpu", 1.0, None, 0, gen).contiguous()
    g = make_rows(T, H, dtype, "cpu", 1.0, None, 0, gen).contiguous()
    w = make_weight(H, torch.float32, "cpu", gen)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    dx, _ = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
    eps = Fraction(float(torch.tensor(EPS, dtype=torch.float32)))
    tpr, vectors, pairs = order(H, fp32, False)
    btpr, bvectors, _ = order(H, fp32, True)
    wq = exact(w)
    for row in range(T):
        h = exact(x[row])
        ss = row_sum(leaves_fwd(h, fp32), tpr, vectors, pairs, fp32)
        want = f32(1 / f32_sqrt(f32(f32(ss / H) + eps)))
        assert Fraction(float(rstd[row])) == want, (H, row, float(rstd[row]), float(want))
        gq, r = exact(g[row]), want
        mean = f32(row_sum(leaves_bwd(gq, wq, h, r, fp32), btpr, bvectors, False, fp32) / H)
        for i in range(0, H, max(1, H // 64)):  # 64 columns of the row
            xh, gw = f32(h[i] * r), f32(gq[i] * wq[i])
            d = f32(r * f32(gw - f32(mean * xh))) if fp32 else f32(r * f32(-mean * xh + gw))
            assert Fraction(float(dx[row, i].float())) == (f32(d) if fp32 else Fraction(float(torch.tensor(float(d)).to(dtype).float()))), (H, row, i)


CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(CXX is None or not os.path.exists(os.path.join(ROOT, "csrc", "kernels", "cpu", "row_order.h")),
                    reason="needs a host C++ compiler and the source checkout")
def test_the_leafs_plain_add_is_the_fma(tmp_path):
    """The forward leaf adds a 16-bit value's square where it is exact and keeps the FMA below
    (row_order.h, square_plus): every BF16 and FP16 value against a stride of squares
    (tests/cpp/square_plus.cpp; 26784 mismatches without the FMA below 2^-60)."""
    exe = tmp_path / "square_plus"
    subprocess.run([CXX, "-std=c++17", "-O2", "-ffp-contract=off", "-I", os.path.join(ROOT, "csrc"), "-o", str(exe),
                    os.path.join(ROOT, "tests", "cpp", "square_plus.cpp")], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0 and "mismatches 0" in out.stdout, out.stdout[-2000:]


@pytest.mark.skipif(CXX is None or not os.path.exists(os.path.join(ROOT, "csrc", "kernels", "cpu", "rmsnorm_cpu.h")),
                    reason="needs a host C++ compiler and the source checkout")
def test_the_fma_clone_has_the_baseline_bits(tmp_path):
    """x86-64 hosts with FMA run the CPU rows compiled for it (rmsnorm_cpu.h, forward_fma and
    backward_fma): y, rstd, h_new, dx, dw partials and dw bitwise the baseline code's, every
    dtype pair, 15 widths, unit / tiny / huge / subnormal data with Inf and NaN
    (tests/cpp/fma_clone.cpp; built with -ffp-contract=fast, which lets the clone fuse
    products, it finds mismatches)."""
    exe = tmp_path / "fma_clone"
    subprocess.run([CXX, "-std=c++17", "-O3", "-ffp-contract=off", "-I", os.path.join(ROOT, "csrc"), "-o", str(exe),
                    os.path.join(ROOT, "tests", "cpp", "fma_clone.cpp")], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    if out.returncode == 2:
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0 and "mismatches 0" in out.stdout, out.stdout[-2000:]
