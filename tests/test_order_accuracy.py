"""lab/order_accuracy.py: its numpy pairs order is the CPU path's rstd bit for bit (the
script asserts it), its one-tree order is not, and the JSON holds both orders and the floor."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import cake_rmsnorm as cr
from checkout import benchmark, load

SCRIPT, pytestmark = benchmark("order_accuracy")


def _module():
    return load(SCRIPT)


def test_the_script_runs_and_writes_both_orders(tmp_path):
    out = tmp_path / "acc.json"
    subprocess.run([sys.executable, SCRIPT, "--rows", "64", "--hidden", "1000,1536,8192", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    rows = json.load(open(out))
    assert [(r["H"], r["data"]) for r in rows] == [(H, k) for H in (1000, 1536, 8192) for k in ("normal", "outliers")]
    for r in rows:
        assert 0 < r["floor"]["mean_ulps"] < 1 and r["pairs"]["max_ulps"] < 8 and r["one_tree"]["max_ulps"] < 8


@pytest.mark.parametrize("H", [776, 1536, 6144])
def test_one_tree_is_another_order(H):
    mod = _module()
    x = mod.make(256, H, "normal", torch.Generator().manual_seed(1))
    _, rstd = cr.cake_rmsnorm_train_forward(x, torch.ones(H, dtype=torch.bfloat16), mod.EPS)
    pairs, one = mod.orders(x.float().numpy(), H)
    assert np.array_equal(pairs.view(np.int32), rstd.numpy().view(np.int32))
    assert not np.array_equal(one.view(np.int32), rstd.numpy().view(np.int32))
