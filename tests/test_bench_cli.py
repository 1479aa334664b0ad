"""The benchmark CLI's dtype options (the CPU smoke run; the GPU protocol is not a test)."""

import json

import pytest
import torch

from cake_rmsnorm.bench.run import main


def test_weight_must_be_the_activation_dtype_or_fp32(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--dtype", "fp16", "--weight", "bf16"])
    assert e.value.code == 2
    assert "--weight bf16" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
@pytest.mark.parametrize("dtype,weight,wdtype", [("fp16", None, "fp16"), ("bf16", "fp32", "fp32")])
def test_cpu_run_records_its_dtypes(tmp_path, dtype, weight, wdtype):
    args = ["--ops", "fwd", "--dtype", dtype, "--out", str(tmp_path / "b")]
    if weight:
        args += ["--weight", weight]
    assert main(args) == 0
    rows = json.load(open(tmp_path / "b.json"))["rows"]
    assert rows and all(r["dtype"] == dtype and r["weight"] == wdtype and r["us"]["cake"] > 0 for r in rows)
