"""lab/split_results.py: the first run listed owns a shape, the floor's time travels
with its row, and the table (and plot, where matplotlib imports) land beside each JSON."""

import json
import subprocess
import sys

import pytest

from checkout import benchmark

SCRIPT, needs_script = benchmark("split_results")
META = {"gpu": "test gpu", "torch": "0", "copy_TBps": 4.25, "timing": "test timing"}


def _row(op, H, T, cake, peer, floor=None, per_head=0):
    r = {"op": op, "H": H, "T": T, "residual": False, "weight": "bf16", "per_head": per_head, "mode": "det",
         "us": {"cake": cake, "tc": peer}}
    if floor is not None:
        r["floor_us"] = floor
    return r


@needs_script
def test_split_keeps_the_first_runs_rows_and_writes_tables(tmp_path):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(dict(META, rows=[_row("fwd", 512, 256, 2.0, 2.5, floor=1.5),
                                             _row("bwd", 512, 256, 4.0, 5.0, floor=1.75),
                                             _row("step", 256, 1024, 25.0, 30.0, per_head=24)])))
    b.write_text(json.dumps(dict(META, rows=[_row("fwd", 512, 256, 9.0, 9.0), _row("fwd", 1024, 256, 3.0, 2.0)])))
    out = tmp_path / "h"
    subprocess.run([sys.executable, SCRIPT, str(a), str(b), "--out", str(out)], check=True, capture_output=True,
                   text=True)
    fwd = json.load(open(f"{out}-forward.json"))["rows"]
    bwd = json.load(open(f"{out}-backward.json"))["rows"]
    assert [(r["H"], r["us"]["cake"], r["run"]) for r in fwd] == [(512, 2.0, "a.json"), (1024, 3.0, "b.json")]
    assert fwd[0]["floor_us"] == 1.5 and "floor_us" not in fwd[1]
    assert [r["op"] for r in bwd] == ["bwd", "step"] and bwd[1]["per_head"] == 24
    md = open(f"{out}-forward.md").read()
    assert "| fwd | 512 | 256 | plain, op | 2.0 |" in md and "| tc | 2.5 | 1.25x | 1.5 |" in md
    assert "| per-head x24, op |" in open(f"{out}-backward.md").read()
