"""The checkout's scripts for the tests that run them: beside the tests, or CAKE_SOURCE_DIR where
the tests run from a copy (ci/smoke_test.sh)."""

import importlib.util
import os

import pytest

ROOT = os.environ.get("CAKE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def benchmark(name):
    """The path of benchmarks/<name>.py (the user-facing benchmarks) or lab/<name>.py (the A/B
    probes), and a skip mark for a tree without it."""
    path = os.path.join(ROOT, "benchmarks", name + ".py")
    if not os.path.exists(path):
        path = os.path.join(ROOT, "lab", name + ".py")
    return path, pytest.mark.skipif(not os.path.exists(path), reason=f"no checkout with {name}.py beside these tests")


def load(path):
    """A script as a module, without running its main."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
