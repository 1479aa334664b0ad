"""The launch-plan query (cake_rmsnorm.launch_plan, dispatch/plan.h): what a call runs, from the
window tables and the call's shape; CUDA-free, so it runs on every machine with sm and sms given."""

import pytest
import torch

import cake_rmsnorm as cr

H200 = dict(sm=90, sms=132)


def window_program(route, hidden, T):
    for above, at_most, name in cr.program_windows(route, hidden, sm=90)[route]:
        if T > above and (at_most is None or T <= at_most):
            return name
    raise AssertionError("no window")


@pytest.mark.parametrize("route", cr.ROUTES)
@pytest.mark.parametrize("H", [256, 512, 1024, 1536, 2048, 4096, 6144, 8192])
@pytest.mark.parametrize("T", [1, 2, 256, 1024, 4096, 65536])
def test_plan_runs_the_window_program(route, H, T):
    # With a 16-bit w every window's program runs as named (a streaming group of several rows
    # has its instance); the backward runs the table's row group, CTA and ring, its
    # pair twin (the CTA doubled when it holds one group, a one-row ring) where pairs fit, at
    # the fewest chunks its one launch (a one-row ring), and warp chunks in CTAs of 8 warps.
    plan = cr.launch_plan(route, H, T, **H200)
    want = window_program(route, H, T)
    head, stages = want.rsplit("_s", 1)
    tpr, groups = (int(v) for v in head.split("_t")[1].split("_")[0].split("x"))
    if "one_launch" in plan:
        want = head + "_s1"
    elif plan.get("warp_chunks"):
        want = f"{head.split('x')[0]}x{256 // tpr}_{head.split('_', 2)[2]}_s{stages}"
    elif "pairs" in plan and plan["launch"]["instance"]["pair"]:
        pair_groups = groups if groups % 2 == 0 else 2 * groups
        want = f"{head.split('x')[0]}x{pair_groups}_{head.split('_', 2)[2]}_s1"
    elif route.startswith("bwd"):
        assert plan["program"].rsplit("_s", 1)[1] == stages
        want = head + "_s" + plan["program"].rsplit("_s", 1)[1]
    assert plan["program"] == want


def test_forward_plans_at_measured_widths():
    p = cr.launch_plan("fwd", 512, 65536, **H200)
    assert p["program"].endswith("_r4") and p["exact"] and p["warp_sync"] and p["w_load"] == "with x"
    # An FP32 w at 4 rows a group has no instance: the group's ring runs instead (same bits).
    p32 = cr.launch_plan("fwd", 1024, 65536, weight_dtype=torch.float32, **H200)
    assert p32["kernel"] == "ring"
    assert cr.launch_plan("fwd", 6144, 65536, **H200)["w_load"] == "after the sum of squares"
    assert cr.launch_plan("fwd", 6144, 65536, weight_dtype=torch.float32, **H200)["w_load"] == "at each use"
    assert cr.launch_plan("fwd", 2048, 65536, **H200)["warp_sync"] is False
    # The tuning hook's runtime-width kernels are not planned here: exact groups on.
    assert cr.launch_plan("fwd_residual", 6144, 1024, **H200)["kernel"] == "ring"


def test_backward_plans_pairs_and_finalize():
    p = cr.launch_plan("bwd", 512, 256, **H200)
    assert p["chunks"] == 128 and p["pairs"] == {"cta": 128, "when_resident_ctas_at_least": 128}
    assert p["finalize"] == (8, 32)  # 64 CTAs of 8 columns fit one an SM
    assert "pairs" not in cr.launch_plan("bwd", 512, 4096, **H200)  # chunks of more than two rows
    assert "pairs" not in cr.launch_plan("bwd", 6144, 256, **H200)  # a doubled CTA would pass 256 threads
    assert cr.launch_plan("bwd", 512, 65536, **H200)["finalize"] == (8, 128)  # 2048 chunks: wide lanes
    assert cr.launch_plan("bwd", 4096, 1024, **H200)["finalize"] == (32, 32)
    assert cr.launch_plan("bwd", 4096, 1024, sm=90, sms=1024)["finalize"] == (8, 32)
    for T in (1, 7, 4096, 100000):
        assert cr.launch_plan("bwd", 2048, T, **H200)["chunks"] == cr._lib._c.cake_rmsnorm_backward_chunks(T, 2048)


@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(route="nope", hidden=512, tokens=1), ValueError, "route"),
    (dict(route="fwd", hidden=500, tokens=1), ValueError, "hidden"),
    (dict(route="fwd", hidden=512.0, tokens=1), TypeError, "hidden"),
    (dict(route="fwd", hidden=512, tokens=-1), ValueError, "tokens"),
    (dict(route="fwd", hidden=512, tokens=True), TypeError, "tokens"),
    (dict(route="fwd", hidden=512, tokens=1, weight_dtype=torch.float64), TypeError, "weight_dtype"),
    (dict(route="fwd", hidden=512, tokens=1, sm=75, sms=1), ValueError, "sm must be one of"),
])
def test_plan_refusals(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        cr.launch_plan(**{**dict(sm=90, sms=132), **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-device message")
def test_plan_without_a_device_asks_for_sms():
    with pytest.raises(ValueError, match="sms"):
        cr.launch_plan("fwd", 512, 1, sm=90)


def test_windows_cli_prints_plans(capsys):
    from cake_rmsnorm.__main__ import main
    assert main(["windows", "--hidden", "512", "--sm", "90", "--sms", "132", "--plan", "256", "--route", "bwd"]) == 0
    out = capsys.readouterr().out
    assert "bwd H=512 T=256: general_t32x4_v2_s1" in out and "chunks 128" in out and "pairs" in out
    assert "bwd_rows[v2, bfloat16 w, pair, tpr 32] 64 x 128" in out  # the launch bounds' residency fits pairs
    assert "; finalize " in out


def test_only_sm90_tables_are_measured():
    for sm in cr.SHIPPED_ARCHS:
        p = cr.launch_plan("fwd", 4096, 4096, sm=sm, sms=132)
        assert p["measured"] is (sm == 90)
        # The copies give the same programs until a fit on that architecture changes them.
        assert cr.program_windows(hidden=4096, sm=sm) == cr.program_windows(hidden=4096, sm=90)


def test_fp32_activation_plans():
    f = cr.launch_plan("fwd", 6144, 4096, dtype=torch.float32, **H200)
    assert f["program"] == "fp32_t512x1_v4_s0" and f["kernel"] == "streaming" and f["w_load"] == "at each use"
    assert cr.launch_plan("fwd", 4096, 4096, dtype=torch.float32, **H200)["w_load"] == "with x"
    b = cr.launch_plan("bwd", 1024, 16384, dtype=torch.float32, out_dtype=torch.bfloat16, **H200)
    assert b["program"] == "fp32_t128x1_v2_s2" and b["chunks"] == 512 and "pairs" not in b
    # The widest residual rows hold one row in the ring (two would pass the shared-memory limit).
    assert cr.launch_plan("bwd_residual", 16384, 64, dtype=torch.float32, **H200)["program"].endswith("_s1")
    with pytest.raises(ValueError, match="16384"):
        cr.launch_plan("fwd", 32768, 1, dtype=torch.float32, **H200)


@pytest.mark.parametrize("kwargs", [
    dict(dtype=torch.bfloat16, weight_dtype=torch.float16),
    dict(dtype=torch.float16, out_dtype=torch.float32),
    dict(dtype=torch.int8),
    dict(dtype=torch.float32, out_dtype=torch.float64),
])
def test_plan_dtype_refusals(kwargs):
    with pytest.raises(TypeError, match="dtype"):
        cr.launch_plan("fwd", 512, 1, **kwargs, **H200)


def _walk_widths():
    return sorted(set(range(8, 4097, 8)) | set(range(4096, 16385, 64)) | set(range(16384, 65537, 1024)) | {131072})


@pytest.mark.parametrize("route", ["fwd", "fwd_residual"])
def test_every_forward_plan_has_a_compiled_instance(route):
    """The streaming forward compiles only the (w load, sync) pairs a plan can choose (plan.h,
    forward_stream_instance; the plan query refuses any other). Every table's every window, at
    its edges and at powers of two inside it, both weight dtypes: each plan is served."""
    sms = {90: 132}
    seen = set()
    for sm in cr.SHIPPED_ARCHS:
        for H in _walk_widths():
            windows = cr.program_windows(route, H, sm=sm)[route]
            for lo, hi, _ in windows:
                ts = {max(lo, 1), max(lo + 1, 1)} | ({hi - 1, hi} if hi else {lo + 4096, lo + (1 << 20)})
                ts |= {t for t in (1 << k for k in range(21)) if lo < t and (hi is None or t <= hi)}
                for T in sorted(ts):
                    for wd in (torch.bfloat16, torch.float32):
                        p = cr.launch_plan(route, H, T, weight_dtype=wd, sm=sm, sms=sms.get(sm, 100))
                        if p["kernel"] == "streaming":
                            seen.add((p["w_load"], p["warp_sync"], wd == torch.float32))
    loads = {"with x", "after the sum of squares", "at each use"} if route == "fwd" else {"with x"}
    assert {s[0] for s in seen} == loads and {s[1] for s in seen} == {False, True}, seen  # every kind was walked


def _name_of(group, fp32):
    g = group
    base = f"t{g['threads_per_row']}x{g['groups_per_cta']}_v{g['vectors_per_thread']}_s{g['ring_rows']}"
    if fp32:
        return "fp32_" + base
    return "general_" + base + (f"_r{g['rows_per_group']}" if g["rows_per_group"] > 1 else "")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_plan_fields_spell_the_program(dtype):
    """The structured fields and the name come from the same program value: every window's and
    every plan's fields spell its name, so code reading either sees the same launch."""
    fp32 = dtype == torch.float32
    for route in cr.ROUTES:
        for H in (64, 128, 512, 768, 1024, 1536, 2048, 4096, 6144, 8192, 16384):
            if not fp32:
                for v in cr.program_windows(route, H, sm=90)[route]:
                    assert v.program == _name_of(v.group, False), (route, H, v)
            for T in (1, 7, 300, 4097, 70000):
                p = cr.launch_plan(route, H, T, dtype=dtype, sm=90, sms=132)
                assert p["program"] == _name_of(p["group"], fp32), (route, H, T, p)


@pytest.mark.gpu
@pytest.mark.parametrize("H", [256, 512, 1024, 1536, 2048, 4096, 6144, 12288])
def test_a_call_run_through_its_reported_plan_has_the_same_bits(H, gen):
    """Forcing the program launch_plan reports (the tuning override) runs what the call runs:
    outputs bitwise equal to the call left to the dispatch, at each window's edges."""
    from cake_rmsnorm.tuning import BACKWARD, FORWARD, program_override
    from reference import make_rows, make_weight
    props = torch.cuda.get_device_properties(0)
    sm, sms = 10 * props.major + props.minor, props.multi_processor_count
    w = make_weight(H, torch.bfloat16, "cuda", gen)
    ts = sorted({1, 3} | {t for v in cr.program_windows("fwd", H, sm=sm)["fwd"] for t in (v.above + 1, v.at_most or 0)
                          if 0 < t <= 40000})
    for T in ts:
        x, r, g = (make_rows(T, H, torch.bfloat16, "cuda", 1.0, None, 0, gen).contiguous() for _ in range(3))
        for res in (None, r):
            route = "fwd_residual" if res is not None else "fwd"
            want = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=res)
            grp = cr.launch_plan(route, H, T, sm=sm, sms=sms)["group"]
            with program_override(FORWARD, grp["threads_per_row"], grp["threads_per_row"] * grp["groups_per_cta"],
                                  grp["vectors_per_thread"], stages=grp["ring_rows"], rows=grp["rows_per_group"]):
                got = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=res)
            for a, b in zip(got, want):
                assert torch.equal(a, b), (route, H, T)
        y_rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
        want = cr.cake_rmsnorm_train_backward(g, x, w, y_rstd[1])
        grp = cr.launch_plan("bwd", H, T, sm=sm, sms=sms)["group"]
        with program_override(BACKWARD, grp["threads_per_row"], grp["threads_per_row"] * grp["groups_per_cta"],
                              grp["vectors_per_thread"], stages=grp["ring_rows"]):
            got = cr.cake_rmsnorm_train_backward(g, x, w, y_rstd[1])
        for a, b in zip(got, want):
            assert torch.equal(a, b), ("bwd", H, T)


@pytest.mark.parametrize("route", cr.ROUTES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_plan_reports_its_launch(route, dtype):
    """launch_plan serialises the Launch a call resolves to: the instance, a grid of every row's
    group (the streaming and FP32 forwards) or of the chunks (capped at the resident CTAs only
    where those are known), the CTA of the program's groups, and the finalize over dw's columns."""
    fp32 = dtype == torch.float32
    for H in (64, 512, 1024, 2048, 4096, 6144, 12288, 16384):
        for T in (1, 7, 300, 4097, 70000):
            p = cr.launch_plan(route, H, T, dtype=dtype, sm=90, sms=132)
            launch, g = p["launch"], p["group"]
            inst = launch["instance"]
            assert launch["block"] == g["threads_per_row"] * g["groups_per_cta"], (route, H, T, p)
            assert inst["x"] == str(dtype).split(".")[1] and inst["residual"] == route.endswith("residual")
            # The wide rows' instance holds the vectors the row fills: 3 of the group's 4 where every
            # thread's fourth is past the row (12288 at 512 threads a row).
            wide3 = inst["family"] == "bwd_wide_rows" and H <= g["threads_per_row"] * 3 * 8
            held = 3 if wide3 else g["vectors_per_thread"]
            assert inst["vectors"] == held, (route, H, T, inst)
            if route.startswith("fwd"):
                assert inst["family"] == ("fp32_fwd" if fp32 else f"fwd_{p['kernel']}")
                rows_per_cta = g["groups_per_cta"] * g["rows_per_group"]
                assert launch["grid"] == -(-T // rows_per_cta) and "finalize" not in launch
                assert (inst["tpr"] != 0) == p["exact"]
                continue
            if "one_launch" in p:
                assert inst["family"].startswith("bwd_one_launch") and "finalize" not in launch
                assert launch["grid"] == sum(p["one_launch"].values()) and launch["dx_ctas"] == p["one_launch"]["dx_ctas"]
                continue
            cols, lanes = p["finalize"]
            assert launch["finalize"] == {"grid": -(-H // cols), "block": cols * lanes}
            groups = max(g["groups_per_cta"] // (2 if inst["pair"] else 1), 1)
            per_cta = launch["block"] // 32 if p.get("warp_chunks") else groups
            # Persistent: at most a CTA a chunk (unit), at least every SM where there are enough.
            wanted = -(-p["chunks"] // per_cta)
            assert min(wanted, 132) <= launch["grid"] <= wanted, (route, H, T, p)


@pytest.mark.gpu
@pytest.mark.parametrize("route", cr.ROUTES)
@pytest.mark.parametrize("dtype, wdtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                           (torch.float32, torch.bfloat16)])
def test_a_call_launches_the_plan_it_reports(route, dtype, wdtype, gen):
    """What a call launched (last_launch) is the Launch launch_plan reports on the device: the
    same instance, grid (capped at the resident CTAs), block, shared memory and finalize."""
    from reference import make_rows, make_weight
    for H in (64, 512, 1024, 1536, 2048, 4096, 6144, 12288):
        if dtype == torch.float32 and H > 16384:
            continue
        w = make_weight(H, wdtype, "cuda", gen)
        for T in (1, 2, 3, 64, 300, 4097, 20000):
            x, r, g = (make_rows(T, H, dtype, "cuda", 1.0, None, 0, gen).contiguous() for _ in range(3))
            res = r if route.endswith("residual") else None
            _, rstd, *_ = cr.cake_rmsnorm_train_forward(x, w, 1e-6, residual=res)
            if route.startswith("bwd"):
                cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=res)
            got = cr.last_launch()
            want = cr.launch_plan(route, H, T, dtype=dtype, weight_dtype=wdtype, out_dtype=dtype)
            assert got["launch"] == want["launch"] and got["program"] == want["program"], (route, H, T, got, want)
