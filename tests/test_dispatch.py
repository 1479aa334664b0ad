"""The dispatch tables' per-thread cache: select_program answers what a fresh table says, for
every route, width, architecture and T (a C++ check compiled from the source tree's headers)."""

import os
import shutil
import subprocess

import pytest

# The source tree: beside these tests, or CAKE_SOURCE_DIR where the suite runs from a copy
# (ci/smoke_test.sh runs it away from the tree, against the installed wheel).
ROOT = os.environ.get("CAKE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, "csrc")), reason="needs the source tree")
@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_select_program_cache_matches_the_tables(tmp_path):
    exe = tmp_path / "select_program_cache"
    subprocess.run(["c++", "-O1", "-std=c++17", "-I", os.path.join(ROOT, "csrc"),
                    os.path.join(ROOT, "tests", "cpp", "select_program_cache.cpp"), "-o", str(exe)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert " 0 mismatches" in run.stdout
