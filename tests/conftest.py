import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    # Registered here too: the suite also runs away from the source tree (installed-wheel CI).
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


def devices():
    """CPU always; CUDA as a `gpu`-marked parameter."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture
def gen():
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh data each run
    return g
