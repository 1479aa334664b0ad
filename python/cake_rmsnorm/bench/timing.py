"""The measurement protocol: CUDA graphs, a cold L2 before every replay, paired interleaving,
and GPU kernel time as the union of kernel-active intervals between marker kernels (CUPTI,
through torch.profiler), with CUDA-event time as a second column."""

import json
import statistics

import torch

MARKER_BYTES = 512 << 20  # larger than the 60 MiB L2: each replay starts cold


def capture(fn, warmup=3):
    """A CUDA graph replaying fn (captured on a side stream after warm-up)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _kernel_events(prof):
    """(start_us, end_us, name) of every GPU activity, at the profiler's ns resolution."""
    out = []
    for e in prof.profiler.kineto_results.events():
        if "CUDA" not in str(e.device_type()):
            continue
        start = e.start_ns() / 1e3
        out.append((start, start + e.duration_ns() / 1e3, e.name()))
    return sorted(out)


def measure(graphs, replays=30):
    """{name: (kernel_us_median, event_us_median, kernel names)} for graphs {name: CUDAGraph},
    interleaved replay by replay (order rotated each round) with a marker kernel before each
    replay."""
    names = list(graphs)
    marker = torch.empty(MARKER_BYTES // 4, dtype=torch.int32, device="cuda")
    # Event-timed pass.
    ev = {n: [] for n in names}
    for i in range(replays):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            marker.bitwise_not_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graphs[n].replay()
            b.record()
            ev[n].append((a, b))
    torch.cuda.synchronize()
    event_us = {n: statistics.median(a.elapsed_time(b) * 1e3 for a, b in ev[n]) for n in names}

    # Kernel-time pass under the profiler: markers delimit the replays.
    sequence = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(replays):
            order = names[i % len(names):] + names[:i % len(names)]
            for n in order:
                marker.bitwise_not_()
                graphs[n].replay()
                sequence.append(n)
        marker.bitwise_not_()
        torch.cuda.synchronize()
    return replay_times(_kernel_events(prof), sequence, event_us)


def replay_times(kernels, sequence, event_us):
    """{name: (kernel_us_median, event_us_median, kernel names)} from the profiler's GPU activity
    (start, end, name): the marker kernels split it into replays, `sequence` names the arm of
    each. The names are the distinct kernels an arm ran, so a row says which kernel a peer
    actually used (torch may route F.rms_norm to another backend; Liger's functional call and
    its module differ)."""
    spans, current = [], None
    for start, end, name in kernels:
        if "bitwise_not" in name:
            if current is not None:
                spans.append(current)
            current = []
        elif current is not None:
            current.append((start, end, name))
    if len(spans) != len(sequence):
        raise RuntimeError(f"profiler saw {len(spans)} replays, expected {len(sequence)}")
    kt = {n: [] for n in event_us}
    names = {n: set() for n in event_us}
    for n, iv in zip(sequence, spans):
        kt[n].append(_union([(a, b) for a, b, _ in iv]))
        names[n].update(k for _, _, k in iv)
    return {n: (statistics.median(kt[n]), event_us[n], sorted(names[n])) for n in event_us}


def columns(res):
    """measure()'s result as a row's columns: kernel us, event us and the kernels each arm ran."""
    return {"us": {k: v[0] for k, v in res.items()}, "event_us": {k: v[1] for k, v in res.items()},
            "kernels": {k: v[2] for k, v in res.items()}}


def write_rows(path, rows):
    """A paired run's rows as JSON, with the GPU and torch they ran on."""
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


def copy_ceiling_tbps(nbytes=2 << 30, reps=5):
    """This device's copy ceiling, TB/s of read + written bytes: the best of `reps` device-to-device
    copies of `nbytes` (2 GiB: 4 GiB moved), by CUDA events. The % column of a run divides by it,
    so a card is held to its own memory, not another's; None where the buffers do not fit."""
    try:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
    except torch.OutOfMemoryError:
        src = None
        torch.cuda.empty_cache()
        return None
    dst.copy_(src)
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return round(2 * nbytes / best / 1e12, 3)
