"""The benchmark CLI's dtype options (the CPU smoke run; the GPU protocol is not a test)."""

import json
import os

import pytest
import torch

from cake_rmsnorm.bench.run import main
from checkout import ROOT


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


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
def test_a_stopped_run_keeps_its_rows(tmp_path, monkeypatch):
    """The JSON is rewritten after every row, marked incomplete until the run ends, so a run
    stopped by a time limit keeps what it measured."""
    import cake_rmsnorm.bench.run as run

    calls = []

    def stop_at_the_third_shape(case, deterministic=True):
        calls.append(case.H)
        if len(calls) == 3:
            raise KeyboardInterrupt  # what a time limit's signal leaves behind
        return make_cake(case, deterministic)

    make_cake = run.make_cake
    monkeypatch.setattr(run, "make_cake", stop_at_the_third_shape)
    with pytest.raises(KeyboardInterrupt):
        main(["--ops", "fwd", "--path", "op", "--out", str(tmp_path / "b")])
    partial = json.load(open(tmp_path / "b.json"))
    assert partial["complete"] is False and len(partial["rows"]) == 2
    monkeypatch.setattr(run, "make_cake", make_cake)
    assert main(["--ops", "fwd", "--path", "op", "--out", str(tmp_path / "b")]) == 0
    done = json.load(open(tmp_path / "b.json"))
    assert done["complete"] is True and len(done["rows"]) == 4


def test_windows_command_lists_the_windows(capsys):
    """`python -m cake_rmsnorm windows`: each width's windows in order, the plain forward's wider
    small-T group first where the table has one; refusals name the rule."""
    from cake_rmsnorm.__main__ import main as cli

    assert cli(["windows", "--hidden", "2048,6144", "--sm", "90", "--route", "fwd", "--route", "bwd"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "sm_90a (132 SMs) fwd H=2048: (0, 1024] general_t128x2_v2_s0 | (1024, 2048] general_t64x4_v4_s0 | "
        "(2048, 8191] general_t64x4_v4_s2 | (8191, inf) general_t64x4_v4_s0",
        "sm_90a (132 SMs) bwd H=2048: (0, inf) general_t128x1_v2_s2",
        "sm_90a (132 SMs) fwd H=6144: (0, 512] general_t256x1_v3_s0 | (512, 2730] general_t128x2_v6_s2 | "
        "(2730, inf) general_t128x2_v6_s0",
        "sm_90a (132 SMs) bwd H=6144: (0, inf) general_t256x1_v3_s2",
    ]
    with pytest.raises(SystemExit) as e:
        cli(["windows", "--hidden", "100", "--sm", "90"])
    assert e.value.code == 2 and "multiple of 8" in capsys.readouterr().err
    # 264 SMs: the streaming edges twice as far (they count CTAs and elements), the groups as they were.
    assert cli(["windows", "--hidden", "6144", "--sm", "90", "--sms", "264", "--route", "fwd"]) == 0
    assert capsys.readouterr().out.strip() == (
        "sm_90a (264 SMs) fwd H=6144: (0, 1024] general_t256x1_v3_s0 | (1024, 5461] general_t128x2_v6_s2 | "
        "(5461, inf) general_t128x2_v6_s0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-device default")
def test_windows_without_a_device_shows_every_architecture(capsys):
    from cake_rmsnorm.__main__ import main as cli

    assert cli(["windows", "--hidden", "4096", "--route", "bwd"]) == 0
    captured = capsys.readouterr()
    assert [line.split(" bwd")[0] for line in captured.out.splitlines()] == [
        "sm_90a (132 SMs)", "sm_100a (148 SMs)", "sm_103a (152 SMs)", "sm_107a (212 SMs)"]
    assert "no CUDA device" in captured.err
    assert cli(["windows", "--hidden", "4096", "--sm", "100", "--route", "bwd", "--plan", "12345"]) == 0
    assert "sm_100a bwd H=4096 T=12345" in capsys.readouterr().out


def test_floor_moves_each_ops_traffic_and_stays_out_of_the_peers():
    """The traffic floor (peers.make_floor) computes elementwise ops over the op's tensors (fwd
    reads x and writes y; bwd reads x and g and writes dx), has no residual-route version, and
    the table reports it in its own columns, never as the best peer."""
    from cake_rmsnorm.bench.peers import Case, make_floor
    from cake_rmsnorm.bench.run import markdown

    case = Case(4, 16, device="cpu")
    ops = make_floor(case)
    assert torch.equal(ops["fwd"](), -case.x)
    assert torch.equal(ops["bwd"](), case.x + case.gy)
    assert make_floor(Case(4, 16, residual=True, device="cpu")) is None
    row = {"op": "fwd", "H": 16, "T": 4, "residual": False, "per_head": 0, "bytes": 1000,
           "us": {"cake": 2.0, "tc": 3.0}, "floor_us": 1.0}
    md = markdown([row], "t")
    assert "floor us" in md and "| tc | 3.0 | 1.50x |" in md and md.rstrip().endswith("| 1.0 | 1 |")
    without = {k: v for k, v in row.items() if k != "floor_us"}
    assert "floor" not in markdown([without], "t")


def test_host_mode_times_every_arm(tmp_path):
    """`bench --host` (the host-cost benchmark) runs on the machine at hand: every arm that is
    installed gets fwd, fwd with grad and fwd + bwd, and the table compares with F.rms_norm."""
    out = tmp_path / "host"
    assert main(["--host", "--hidden", "512", "--tokens", "8", "--calls", "20", "--out", str(out)]) == 0
    data = json.load(open(str(out) + ".json"))
    rows = data["rows"]
    arms = {r["arm"] for r in rows}
    assert {"cake", "cake RMSNorm", "F.rms_norm", "aten clone (floor)"} <= arms, arms
    for a in arms - {"aten clone (floor)"}:
        assert {r["op"] for r in rows if r["arm"] == a} == {"fwd", "fwd_grad", "fwd_bwd"}
    assert {r["op"] for r in rows if r["arm"] == "aten clone (floor)"} == {"fwd"}
    assert all(r["us"] > 0 and r["T"] == 8 and r["H"] == 512 for r in rows)
    md = open(str(out) + ".md").read()
    assert "speedup vs F.rms_norm" in md and "fwd speedup vs clone" in md
    assert data["threads"] == torch.get_num_threads()
    if not torch.cuda.is_available():
        assert md.startswith("# Wall clock, us a call on the CPU path (compute included")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
def test_cpu_run_pins_and_records_its_threads(tmp_path):
    before = torch.get_num_threads()
    try:
        assert main(["--ops", "fwd", "--path", "op", "--hidden", "512", "--tokens", "16", "--threads", "1",
                     "--out", str(tmp_path / "b")]) == 0
        data = json.load(open(tmp_path / "b.json"))
        assert data["threads"] == 1 and "1 threads" in data["timing"]
        md = open(tmp_path / "b.md").read()
        assert "1 threads" in md and all(r["speedup_spread"][0] <= r["speedup_spread"][1] for r in data["rows"])
    finally:
        torch.set_num_threads(before)
    with pytest.raises(SystemExit):
        main(["--threads", "0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
def test_rows_say_their_path_and_share_the_peers_run(tmp_path):
    """Each shape and op gives an autograd row (the user's path) and an op row, the peers'
    times the same in both (one paired run); FP32 activations with a BF16 weight are a dtype
    of their own."""
    out = tmp_path / "b"
    assert main(["--ops", "fwd,bwd", "--hidden", "512", "--tokens", "16", "--out", str(out)]) == 0
    rows = json.load(open(str(out) + ".json"))["rows"]
    assert {(r["op"], r["path"]) for r in rows} == {(o, p) for o in ("fwd", "bwd") for p in ("autograd", "op")}
    for op in ("fwd", "bwd"):
        a, b = (next(r for r in rows if r["op"] == op and r["path"] == p) for p in ("autograd", "op"))
        assert a["us"]["F"] == b["us"]["F"] and a["us"]["cake"] > 0 and b["us"]["cake"] > 0
    assert main(["--ops", "fwd", "--hidden", "512", "--tokens", "16", "--dtype", "fp32", "--weight", "bf16",
                 "--path", "autograd", "--out", str(out)]) == 0
    rows = json.load(open(str(out) + ".json"))["rows"]
    assert [(r["path"], r["dtype"], r["weight"]) for r in rows] == [("autograd", "fp32", "bf16")]
    assert rows[0]["bytes"] == 2 * 4 * 16 * 512 + 4 * 16 + 2 * 512  # FP32 x in, y out; rstd; BF16 w


def test_per_head_views_and_refusal(capsys):
    """--per-head alone is the [T, 24, 256] view; a list names each view; a bad one is refused."""
    import argparse
    from cake_rmsnorm.bench.run import head_views, shapes

    args = argparse.Namespace(hidden=[512], tokens=[256, 1024], residual=False, per_head=head_views("32x128,16x64"))
    got = [(s["H"], s["T"], s["per_head"]) for s in shapes(args)]
    assert got == [(512, 256, 0), (512, 1024, 0), (128, 1024, 32), (64, 1024, 16)]
    with pytest.raises(SystemExit) as e:
        main(["--per-head", "32by128"])
    assert e.value.code == 2 and "HEADSxDIM" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run's reporting")
def test_cpu_run_says_what_it_did_not_honour_and_its_spread(tmp_path):
    out = tmp_path / "b"
    assert main(["--hidden", "64", "--tokens", "8", "--ops", "fwd", "--residual", "--peers", "F,lg",
                 "--out", str(out)]) == 0
    data = json.load(open(str(out) + ".json"))
    assert set(data["not_honoured"]) == {"--residual", "--peers"}
    assert "copy_TBps" not in data  # the H200's ceiling means nothing on a CPU
    for r in data["rows"]:
        lo, hi = r["speedup_spread"]
        assert 0 < lo <= hi
    assert "(" in open(str(out) + ".md").read()  # the ratio's spread beside it


@pytest.mark.parametrize("bad", ["100", "abc", "-8"])
def test_bad_widths_are_argparse_errors(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--hidden", bad])
    assert e.value.code == 2
    assert "--hidden" in capsys.readouterr().err


@pytest.mark.parametrize("argv, text", [
    (["--ops", "forward"], "--ops forward: choose from fwd,bwd,step"),
    (["--peers", "xyz"], "--peers xyz: choose from F,tc,lg,qk"),
    (["--shapes", "/nonexistent.json"], "--shapes"),
])
def test_bad_arguments_are_refused_by_name(capsys, argv, text):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and text in capsys.readouterr().err


def test_options_have_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for opt in ("--ops", "--peers", "--mode", "--replays", "--shapes"):
        assert out.split(opt, 1)[1].split("\n  --", 1)[0].strip(), f"{opt} has no help"


def test_shape_files_are_checked(tmp_path):
    from cake_rmsnorm.bench.run import load_shapes

    good = tmp_path / "s.json"
    good.write_text('[{"H": 896, "T": 777, "weight": "fp32", "family": "x"}, {"H": 128, "T": 9, "per_head": 32}]')
    rows = load_shapes(str(good))
    assert rows[0]["weight"] == "fp32" and rows[1]["per_head"] == 32 and rows[1]["residual"] is False
    for text in ('[{"H": 900, "T": 1}]', '[{"H": 512}]', '[{"H": 512, "T": 1, "colour": 3}]', "{}"):
        good.write_text(text)
        with pytest.raises(ValueError):
            load_shapes(str(good))


def test_the_heldout_set_loads():
    from cake_rmsnorm.bench.run import load_shapes

    path = os.path.join(ROOT, "docs", "perf", "heldout", "shapes.json")
    if not os.path.exists(path):
        pytest.skip("no checkout with docs/ beside these tests")
    rows = load_shapes(path)
    assert len(rows) >= 50 and len({r["H"] for r in rows}) >= 15


def test_replay_times_name_each_arms_kernels():
    from cake_rmsnorm.bench.timing import replay_times

    k = [(0, 1, "bitwise_not"), (1, 3, "rms_a"), (2, 4, "rms_b"), (5, 6, "bitwise_not"), (6, 7, "cute_rms"),
         (8, 9, "bitwise_not")]
    got = replay_times(k, ["ours", "peer"], {"ours": 1.0, "peer": 2.0})
    assert got["ours"] == (3.0, 1.0, ["rms_a", "rms_b"]) and got["peer"] == (1.0, 2.0, ["cute_rms"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
def test_the_cpu_run_names_only_what_the_user_asked_for(tmp_path, capsys):
    assert main(["--ops", "fwd", "--hidden", "64", "--tokens", "4", "--out", str(tmp_path / "a")]) == 0
    assert "not honoured" not in capsys.readouterr().err  # no --peers given: nothing to refuse
    assert main(["--ops", "fwd", "--hidden", "64", "--tokens", "4", "--peers", "F,qk", "--out",
                 str(tmp_path / "b")]) == 0
    assert "--peers not honoured" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the full protocol, not the CPU smoke run")
def test_a_busy_machines_run_is_called_unreliable(tmp_path, capsys, monkeypatch):
    import cake_rmsnorm.bench.run as run
    monkeypatch.setattr(run, "UNRELIABLE_SPREAD", 1.0)  # every real spread exceeds it
    assert main(["--ops", "fwd", "--hidden", "64", "--tokens", "4", "--out", str(tmp_path / "a")]) == 0
    assert "UNRELIABLE" in capsys.readouterr().err
    assert all(r.get("unreliable") for r in json.load(open(tmp_path / "a.json"))["rows"])


def test_windows_says_which_tables_this_build_cannot_run_and_survives_a_closed_pipe():
    import subprocess
    import sys
    import cake_rmsnorm as cr
    p = subprocess.Popen([sys.executable, "-m", "cake_rmsnorm", "windows", "--hidden", "512,1024,2048,4096"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdout.close()  # as `| head -1` does
    err = p.stderr.read()
    p.wait()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    missing = [sm for sm in cr.SHIPPED_ARCHS if sm not in cr.built_archs()]
    if missing and not torch.cuda.is_available():
        r = subprocess.run([sys.executable, "-m", "cake_rmsnorm", "windows", "--hidden", "512"],
                           capture_output=True, text=True)
        assert f"sm_{missing[0]}a: not in this build" in r.stderr


def test_replot_draws_a_kept_runs_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from cake_rmsnorm.bench.replot import main as replot
    rows = [{"op": "bwd", "H": 512, "T": t, "residual": False, "per_head": 0, "path": "autograd", "bytes": 1e6,
             "us": {"cake": 5.0, "F": 9.0}} for t in (256, 1024)]
    (tmp_path / "r.json").write_text(json.dumps({"copy_TBps": 3.0, "rows": rows}))
    assert replot([str(tmp_path / "r.json")]) == 0 and (tmp_path / "r.png").stat().st_size > 0
    (tmp_path / "bad.json").write_text(json.dumps({"rows": [{"x": 1}]}))
    assert replot([str(tmp_path / "bad.json")]) == 2
