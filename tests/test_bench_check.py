"""bench.check: every arm's results against FP64 before it is timed. A peer that drops a stream
(the residual route's g_h) or a term must be found wrong and leave the best-peer column; ours and
torch's pass on the CPU."""

import json

import pytest
import torch
import torch.nn.functional as F

from cake_rmsnorm.bench import check
from cake_rmsnorm.bench.peers import Case, _autograd_ops, make_cake, make_cake_autograd, make_torch_fused
from cake_rmsnorm.bench.run import best_peer, main, markdown
from checkout import benchmark, load


def _case(residual, T=37, H=264, dtype=torch.bfloat16, wdtype=torch.bfloat16):
    return Case(T, H, residual=residual, wdtype=wdtype, dtype=dtype, device="cpu", seed=3)


def _drops_g_h(case):
    """A residual arm that returns h cut from the graph: h's gradient never reaches dx."""
    def forward(x, w, r):
        h = x + r
        return F.rms_norm(h, (case.H,), w, case.eps), h.detach().requires_grad_()
    return _autograd_ops(case, forward)


def _scaled_dw(case):
    ops = make_torch_fused(case)
    inner = ops["outputs"]
    ops["outputs"] = lambda: dict(inner(), dw=inner()["dw"] * 1.1)
    return ops


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                          (torch.float32, torch.float32)])
def test_ours_and_torch_pass(residual, dtype, wdtype):
    case = _case(residual, dtype=dtype, wdtype=wdtype)
    arms = {"cake@autograd": make_cake_autograd(case), "cake@op": make_cake(case), "F": make_torch_fused(case)}
    worst, wrong = check.check_arms(case, arms)
    assert not wrong, wrong
    assert set(worst) == set(arms) and max(worst.values()) < check.TOL / 2


def test_an_arm_that_drops_g_h_is_wrong():
    case = _case(True)
    worst, wrong = check.check_arms(case, {"F": make_torch_fused(case), "bad": _drops_g_h(case)})
    assert list(wrong) == ["bad"] and wrong["bad"].startswith("dx ") and worst["bad"] > 0.3


def test_a_wrong_dw_and_a_raising_arm_are_wrong():
    case = _case(False)

    def boom():
        raise RuntimeError("no kernel for this width")
    worst, wrong = check.check_arms(case, {"dw": _scaled_dw(case), "boom": dict(make_torch_fused(case), outputs=boom)})
    assert wrong["dw"].startswith("dw ") and "RuntimeError: no kernel" in wrong["boom"]
    assert "boom" not in worst


def test_chunks_give_the_whole_tensor_error(monkeypatch):
    case = _case(True, T=41)
    outs = _drops_g_h(case)["outputs"]()
    whole = check.errors(case, outs)
    monkeypatch.setattr(check, "CHUNK", case.H * 4)  # 11 chunks, the last one short
    assert check.errors(case, outs) == pytest.approx(whole, rel=1e-9)


def test_a_wrong_peer_leaves_the_best_peer_column():
    us = {"cake": 10.0, "qk": 5.0, "tc": 12.0}
    assert best_peer(us) == ("qk", 5.0)
    assert best_peer(us, {"qk": "dx rel-L2 0.7 > 0.02"}) == ("tc", 12.0)
    row = dict(op="bwd", H=4096, T=8, residual=True, per_head=0, path="autograd", bytes=1, us=us,
               wrong={"qk": "dx rel-L2 0.7 > 0.02"})
    md = markdown([row], "t")
    assert "| tc | 12.0 | 1.20x |" in md and "- qk at bwd H 4096 T 8 residual: dx rel-L2 0.7" in md


HELDOUT, needs_heldout = benchmark("heldout")


@needs_heldout
def test_heldout_summary_leaves_a_wrong_peer_out():
    m = load(HELDOUT)
    row = dict(op="bwd", H=4096, T=8, residual=True, path="autograd", bytes=1,
               us={"cake": 10.0, "qk": 5.0, "tc": 12.0}, wrong={"qk": "dx"})
    assert m.summarize([row])["bwd"]["geomean"] == pytest.approx(1.2)


def test_the_cpu_run_records_each_arms_check(tmp_path):
    out = str(tmp_path / "r")
    assert main(["--ops", "bwd", "--hidden", "264", "--tokens", "9", "--threads", "1", "--out", out]) == 0
    rows = json.load(open(out + ".json"))["rows"]
    assert rows and all(set(r["check"]) >= {"cake@autograd", "cake@op", "F"} and r["wrong"] == {} for r in rows)


def test_the_check_leaves_a_compiled_peer_timeable():
    """The check's backward keeps the graph, as the timed bwd does, and torch.compile's arm
    compiles without donated buffers: a backward with them refuses bwd's retain_graph."""
    pytest.importorskip("torch._inductor")
    from cake_rmsnorm.bench.peers import make_torch_compile
    case = _case(True, T=16)
    ops = make_torch_compile(case)
    worst, wrong = check.check_arms(case, {"tc": ops})
    assert not wrong
    ops["bwd"]()
    ops["bwd"]()


def test_the_percent_column_is_of_the_runs_own_ceiling():
    row = dict(op="bwd", H=4096, T=8, residual=False, per_head=0, path="autograd", bytes=3.35e6, us={"cake": 1.0})
    assert "| 100 % |" in markdown([row], "t", ceiling=3.35)  # 3.35 TB/s is this card's 100 %
    assert "| 79 % |" in markdown([row], "t")  # a run with no ceiling of its own: the H200's
    assert "%" not in markdown([row], "t", ceiling=None)


@needs_heldout
def test_heldout_summary_prints_no_percent_without_a_ceiling(tmp_path, capsys):
    m = load(HELDOUT)
    row = dict(op="bwd", H=4096, T=16384, residual=False, path="autograd", bytes=1e9,
               us={"cake": 300.0, "qk": 310.0})
    run = tmp_path / "r.json"
    for ceiling, shown in ((None, False), (3.35, True)):
        run.write_text(json.dumps({"copy_TBps": ceiling, "rows": [row]}))
        m.main(["summary", str(run)])
        assert ("ceiling" in capsys.readouterr().out) == shown


def _wrong_formula(case, rstd=True, mean=True):
    """A plain arm that skips rstd (y = x w) or the mean term of dx, differentiated by autograd."""
    def forward(x, w, r):
        xf = x.float()
        s = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + case.eps) if rstd else torch.ones_like(xf[..., :1])
        if not mean:  # the mean term lives in rstd's gradient: cut it
            s = s.detach()
        return (xf * s * w.float()).to(x.dtype)
    return _autograd_ops(case, forward)


@pytest.mark.parametrize("H", [264, 4096])
def test_an_arm_that_skips_rstd_or_the_mean_term_is_wrong(H):
    """The bench's data (rows of unequal scale, g partly x's draw) makes either slip large at
    every width, where unit-scale rows of independent g hid them above H 1250 and 2500."""
    case = _case(False, T=64, H=H)
    worst, wrong = check.check_arms(case, {"F": make_torch_fused(case), "no_rstd": _wrong_formula(case, rstd=False),
                                           "no_mean": _wrong_formula(case, mean=False)})
    assert set(wrong) == {"no_rstd", "no_mean"}, (worst, wrong)
    assert wrong["no_mean"].startswith("dx ") and min(worst["no_rstd"], worst["no_mean"]) > 10 * check.TOL


def test_a_nan_in_any_field_fails():
    case = _case(False)
    ops = make_torch_fused(case)
    inner = ops["outputs"]

    def nan_dw():
        out = inner()
        out["dw"][3] = float("nan")
        return out
    worst, wrong = check.check_arms(case, {"nan": dict(ops, outputs=nan_dw)})
    assert wrong["nan"].startswith("dw rel-L2 nan")
