"""The 16-bit forward's sum of squares leaves one choice to the compiler: it fuses each pair's
f[2i]^2 + f[2i + 1]^2 into one FMA, and which square it fuses moves the bits. The CPU path
(kernels/cpu/row_order.h, squares8) computes fma(f[2i], f[2i], f[2i + 1]^2); this test holds
the compiler to it, in the PTX of every forward unit for every shipped architecture the
installed nvcc lists (ptxas cannot undo a PTX fma.rn). Needs nvcc and the source checkout."""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(ROOT, "csrc", "api", "gen")
NVCC = shutil.which("nvcc")
SHIPPED = ("90a", "100a", "103a", "107a")

pytestmark = [
    pytest.mark.skipif(not os.path.isdir(GEN), reason="needs the source checkout"),
    pytest.mark.skipif(NVCC is None, reason="needs nvcc"),
]


def listed_archs():
    out = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout
    return [a for a in SHIPPED if f"compute_{a.rstrip('a')}" in out.split()]  # as setup.py reads it


def ptx(unit, arch, out_dir):
    out = os.path.join(out_dir, f"{os.path.basename(unit)}.{arch}.ptx")
    # setup.py's nvcc flags that reach code generation.
    subprocess.run([NVCC, "-O3", "-std=c++17", "-DCAKE_WITH_CUDA=1", "--prec-div=true", "--prec-sqrt=true",
                    "--ftz=false", f"-arch=compute_{arch}", "-I", os.path.join(ROOT, "csrc"),
                    "-I", os.path.join(ROOT, "csrc", "include"), "-I", os.path.join(ROOT, "csrc", "api"),
                    "-ptx", "-o", out, unit], check=True)
    with open(out) as f:
        return f.read()


def fused_squares(text):
    """For each PTX `fma.rn.f32 d, a, a, c` with c = a 32-bit word's other half squared: 'even'
    (a is the word's low half, element 2i), 'odd', or why it is neither."""
    kinds = []
    for fn in re.split(r"\.entry|\.func", text)[1:]:
        defs = {}
        # fp16 widening: an inline block that splits a word and widens one half.
        for word, f, half in re.findall(r"mov\.b32 \{low,high\},(%r\d+);\s*cvt\.f32\.f16 (%f\d+), (low|high);", fn):
            defs[f] = ("half", half == "low", word)
        for line in fn.splitlines():
            m = re.match(r"\s*\{?\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)\s+(.*?);", line)
            if not m:
                continue
            op, args = m.groups()
            split = re.match(r"\{(%\w+), (%\w+)\}, (%\w+)", args)
            if op == "mov.b32" and split:  # bf16 widening: a word's halves as 16-bit registers
                defs[split.group(1)] = ("half", True, split.group(3))
                defs[split.group(2)] = ("half", False, split.group(3))
                continue
            ops = [a.strip() for a in args.split(",")]
            if ops[0].startswith("%") and ops[0] not in defs:
                defs[ops[0]] = (op, ops[1:])

        def half_of(reg, depth=0):  # (low half?, word) a widened value came from
            d = defs.get(reg)
            if d is None or depth > 4:
                return None
            if d[0] == "half":
                return d[1:]
            op, a = d
            if op.startswith("cvt.f32.") or op == "mov.b32":
                return half_of(a[0], depth + 1)
            if op == "shl.b32" and a[1] == "16":  # the lean bf16 widening
                return (True, a[0])
            if op == "and.b32" and a[1] == "-65536":
                return (False, a[0])
            return None

        for d in defs.values():
            if d[0] != "fma.rn.f32":
                continue
            a, b, c = d[1]
            dc = defs.get(c)
            if a != b or dc is None or not dc[0].startswith("mul.") or dc[1][0] != dc[1][1]:
                kinds.append("not a pair of squares")
                continue
            fa, fc = half_of(a), half_of(dc[1][0])
            if fa is None or fc is None or fa[1] != fc[1] or fa[0] == fc[0]:
                kinds.append("not one word's halves")
            else:
                kinds.append("even" if fa[0] else "odd")
    return kinds


def test_each_pairs_even_square_is_the_fused_one(tmp_path):
    archs = listed_archs()
    assert archs, "nvcc lists none of the shipped architectures"
    units = sorted(os.path.join(GEN, u) for u in os.listdir(GEN) if u.startswith("fwd_") and u.endswith(".cu"))
    assert len(units) >= 12
    jobs = [(u, a) for u in units for a in archs]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        texts = list(pool.map(lambda j: ptx(j[0], j[1], str(tmp_path)), jobs))
    for (unit, arch), text in zip(jobs, texts):
        kinds = fused_squares(text)
        where = f"{os.path.basename(unit)} for compute_{arch}"
        assert len(kinds) >= 64, f"{where}: only {len(kinds)} fused squares found"
        assert set(kinds) == {"even"}, f"{where}: {sorted(set(kinds))}"
