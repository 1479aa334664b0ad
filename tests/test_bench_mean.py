"""lab/bench_mean.py: the trimmed mean drops each tail's tenth, and the bench's GPU timer
still reads its statistic where the wrapper replaces it (else the wrapper times by the median)."""

import inspect

import pytest

import cake_rmsnorm.bench.timing as timing
from checkout import benchmark, load

SCRIPT, pytestmark = benchmark("bench_mean")


def _module():
    return load(SCRIPT)


def test_trimmed_mean_drops_each_tenth():
    m = _module()
    assert m.trimmed_mean([100.0] + [2.0] * 8 + [-50.0]) == 2.0
    assert m.trimmed_mean([1.0, 2.0, 4.0]) == pytest.approx(7 / 3)  # under ten values: nothing dropped
    assert m.trimmed_mean(iter([3.0, 1.0])) == 2.0  # measure() passes a generator


def test_the_timer_reads_the_statistic_the_wrapper_replaces(monkeypatch):
    src = inspect.getsource(timing.measure) + inspect.getsource(timing.replay_times)
    assert src.count("statistics.median(") == 2  # kernel and event times
    monkeypatch.setattr(timing, "statistics", timing.statistics)  # restored after the test
    _module().patch(timing)
    assert timing.statistics.median([9.0] + [1.0] * 9) == 1.0


def test_a_gpu_result_says_trimmed_mean(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"timing": "GPU kernel time: union of kernel-active intervals per replay (CUPTI), median",'
                    ' "rows": []}')
    _module().relabel(str(path))
    assert "10 %-trimmed mean" in path.read_text() and "median" not in path.read_text()
