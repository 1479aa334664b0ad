"""The committed per-instantiation sources (csrc/api/gen/) are what scripts/gen_instances.py writes
from programs.h's VPT lists: a VPT added to the tables without regenerating fails here."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gen_instances.py")
# The suite also runs from a copy of tests/ against an installed wheel (CI), where there is no
# source tree; .ci/run checks the sources there itself.
pytestmark = pytest.mark.skipif(not os.path.exists(SCRIPT), reason="needs the source checkout")


def test_generated_sources_are_current():
    r = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_vpt_has_its_unit():
    names = set(os.listdir(os.path.join(ROOT, "csrc", "api", "gen")))
    for d, vs in (("fwd", (1, 2, 3, 4, 6, 8)), ("bwd", (1, 2, 3, 4))):
        for t in ("bf16", "fp16"):
            for v in vs:
                assert f"{d}_{t}_v{v}.cu" in names
