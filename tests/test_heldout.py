"""benchmarks/heldout.py: the committed held-out set is the generator's, and its summary and cliff
checks read a bench result as the targets say."""

from checkout import benchmark, load

PATH, needs_checkout = benchmark("heldout")
pytestmark = needs_checkout


def test_the_committed_sets_are_the_generators():
    assert load(PATH).main(["shapes", "--check"]) == 0


def test_the_set_covers_real_families():
    m = load(PATH)
    rows = m.heldout_shapes()
    families = {r["family"].split()[0] for r in rows}
    assert 50 <= len(rows) <= 70 and len(families) >= 15
    assert all(1 <= r["T"] <= m.T_MAX for r in rows)
    dense = [r for r in rows if not r["per_head"]]
    assert min(r["H"] for r in dense) <= 512 and max(r["H"] for r in dense) >= 16384
    assert any(r["per_head"] for r in rows)
    assert len([r for r in rows if r["residual"]]) == len(rows) // 4 == len([r for r in rows if r["weight"] == "fp32"])
    assert not any(r["residual"] and r["per_head"] for r in rows)
    assert len(m.sweep_shapes()) == 4 * len(range(1024, 65537, 257))


def _row(op, H, T, us, peer):
    return dict(op=op, H=H, T=T, residual=False, per_head=0, path="autograd", bytes=6 * T * H,
                us=dict(cake=us, qk=peer, F=peer * 2))


def test_summary_finds_the_rows_behind():
    m = load(PATH)
    rows = [_row("bwd", 3584, 12345, 109.6, 95.6), _row("bwd", 4096, 4096, 10.0, 13.0)]
    s = m.summarize(rows)["bwd"]
    assert s["rows"] == 2 and len(s["below"]) == 1 and s["below"][0][2]["T"] == 12345
    assert abs(s["geomean"] - ((95.6 / 109.6) * 1.3) ** 0.5) < 1e-12
    assert s["ceiling_min"] is None  # no row at T >= 16384
    rows.append(_row("bwd", 2048, 16384, 6 * 16384 * 2048 / 3.4e6, 100.0))  # 3.4 TB/s of 4.25
    assert round(m.summarize(rows)["bwd"]["ceiling_min"]) == 80


def test_cliffs_are_rises_of_the_time_a_row():
    m = load(PATH)
    # Filling up (time a row falls), flat, then a step: 13.6 us for 1538 rows is 8 % a row over 1281's.
    times = ((1024, 10.0), (1281, 10.5), (1538, 13.6), (1795, 14.7))
    rows = [_row("bwd", 3584, t, us, 1.0) for t, us in times]
    assert m.cliffs(rows) == [("bwd", 3584, 1281, 10.5, 1538, 13.6)]
    assert m.cliffs(rows, rise=0.10) == []
