"""The instances the library compiles are exactly those a call can resolve to (#37): the C++
sweep of dispatch/resolve.h (tests/cpp/keys_sweep.cpp) over every architecture's table, route,
dtype combination, width, token count and tuning hook finds every compiled key
(dispatch/kernel_key.h, `compiled`) and no call without one. The dispatch layer is CUDA-free,
so the host compiler builds it here."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


SWEEP = os.path.join(ROOT, "tests", "cpp", "keys_sweep.cpp")
# The suite also runs from a copy of tests/ against an installed wheel (CI), with no source tree.
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "csrc", "dispatch", "resolve.h")),
                                reason="needs the source checkout")


@pytest.mark.skipif(CXX is None, reason="no host C++ compiler")
def test_every_compiled_kernel_is_one_a_call_resolves_to(tmp_path):
    exe = tmp_path / "keys_sweep"
    subprocess.run([CXX, "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"), "-o", str(exe),
                    SWEEP], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    last = out.stdout.strip().splitlines()[-1]
    fields = dict(zip(last.split()[::2], (int(v) for v in last.split()[1::2])))
    assert out.returncode == 0 and fields["dead"] == 0 and fields["unresolved"] == 0, out.stdout[-4000:]
    assert fields["oversized"] == 0, out.stdout[-4000:]  # no launch asks more shared memory than a CTA has
    assert fields["compiled"] == fields["emitted"] > 500, last


@pytest.mark.skipif(CXX is None, reason="no host C++ compiler")
def test_the_small_T_group_is_the_ring_groups_pairs_twin(tmp_path):
    """Every table's wider small-T group is (2 tpr, VPT / 2) of its width's ring group, whose VPT
    sums even and odd vectors apart, and every table's row order is the one the CPU path
    computes (tests/cpp/pairs_twins.cpp): the premises of one order a width on every device,
    which the GPU tests check bitwise."""
    exe = tmp_path / "pairs_twins"
    subprocess.run([CXX, "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"), "-o", str(exe),
                    os.path.join(ROOT, "tests", "cpp", "pairs_twins.cpp")], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:]
