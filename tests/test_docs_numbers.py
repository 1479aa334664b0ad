"""The numbers the README and install guide quote are the recorded runs' and the package's own:
the headline table is recomputed from the runs it names (docs/perf/runs.tar.xz), and the wheel
the install guide names carries this version."""

import io
import json
import math
import os
import re
import tarfile

import pytest

from cake_rmsnorm import __version__
from cake_rmsnorm.bench.run import best_peer
from checkout import ROOT

README = os.path.join(ROOT, "README.md")
pytestmark = pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout")


def _runs(names):
    with tarfile.open(os.path.join(ROOT, "docs", "perf", "runs.tar.xz")) as tar:
        return {n: json.load(io.TextIOWrapper(tar.extractfile(f"runs/{n}.json"))) for n in names}


def test_the_readme_headline_table_is_the_runs():
    rows = re.findall(r"^\| [^|]*\(`([\w.-]+)`\) \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|$",
                      open(README).read(), re.M)
    assert len(rows) >= 2, "the README's headline table names its runs"
    runs = _runs([name for name, *_ in rows])
    for name, *quoted in rows:
        for op, want in zip(("fwd", "bwd", "step"), quoted):
            sp = []
            for r in runs[name]["rows"]:
                if r["op"] == op and r.get("path") == "autograd":
                    k, t = best_peer(r["us"], r.get("wrong", {}))
                    sp.append(t / r["us"]["cake"])
            got = math.exp(sum(map(math.log, sp)) / len(sp))
            assert abs(got - float(want)) < 6e-4, (name, op, got, want)


def test_the_install_guide_names_this_version():
    text = open(os.path.join(ROOT, "docs", "install.md")).read()
    base = __version__.split("+")[0]
    # the commands and the file the build writes (a past run's record names its own version)
    names = re.findall(r"(?:pip install |writes `dist/)cake_rmsnorm-([\d.]+)\+", text)
    assert names and set(names) == {base}, names
