"""Where a compiled training step spends its host time, unpatched vs patched: both arms of
benchmarks/e2e.py compiled in one process, the host time to enqueue the forward, the backward
and the optimizer step (no synchronisation inside a step), then a profiler diff of self CPU time
by op name (patched minus unpatched, largest first).

    python lab/compile_host.py llama 1024
"""

import copy
import os
import statistics
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import cake_rmsnorm as cr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import e2e  # noqa: E402  (the models and shapes of the end-to-end benchmark)


def make_arms(model_name, hidden):
    base = e2e.build(model_name, hidden, 4, 32768, False)
    patched = copy.deepcopy(base)
    cr.patch(patched)
    return {name: (torch.compile(m), torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True))
            for name, m in (("unpatched", base), ("patched", patched))}


def step(arm, ids, parts=None):
    """One training step; appends (forward, backward, optimizer) host seconds to parts."""
    f, opt = arm
    t0 = time.perf_counter()
    loss = f(input_ids=ids, labels=ids).loss
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    if parts is not None:
        parts.append((t1 - t0, t2 - t1, t3 - t2))


def self_cpu_a_step(arm, ids, steps=3):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(arm, ids)
        torch.cuda.synchronize()
    table = defaultdict(lambda: [0.0, 0])
    for e in prof.key_averages():
        table[e.key] = [e.self_cpu_time_total / steps, e.count / steps]
    return table


def main():
    model_name, hidden = sys.argv[1], int(sys.argv[2])
    torch._dynamo.config.recompile_limit = 64
    batch, seq = e2e.SHAPES[hidden]
    ids = torch.randint(0, 32768, (batch, seq)).cuda()
    arms = make_arms(model_name, hidden)
    for arm in arms.values():
        for _ in range(6):
            step(arm, ids)
    torch.cuda.synchronize()
    parts = {k: [] for k in arms}
    for _ in range(10):  # paired blocks of 3 steps
        for name, arm in arms.items():
            for _ in range(3):
                torch.cuda.synchronize()
                step(arm, ids, parts[name])
    for name in arms:
        med = [statistics.median(p[i] for p in parts[name]) * 1e3 for i in range(3)]
        print(f"{name:10s} host enqueue ms: fwd {med[0]:.2f} bwd {med[1]:.2f} opt {med[2]:.2f}")
    tabs = {name: self_cpu_a_step(arm, ids) for name, arm in arms.items()}
    zero = [0, 0]
    diff = lambda k: abs(tabs["patched"].get(k, zero)[0] - tabs["unpatched"].get(k, zero)[0])  # noqa: E731
    print(f"{'self CPU us a step (profiled)':70s} {'unpatched':>10s} {'n':>6s} {'patched':>10s} {'n':>6s}")
    for k in sorted(set(tabs["patched"]) | set(tabs["unpatched"]), key=diff, reverse=True)[:40]:
        u, p = tabs["unpatched"].get(k, zero), tabs["patched"].get(k, zero)
        print(f"{k[:70]:70s} {u[0]:10.0f} {u[1]:6.1f} {p[0]:10.0f} {p[1]:6.1f}")
    print("totals", {k: round(sum(v[0] for v in t.values())) for k, t in tabs.items()})


if __name__ == "__main__":
    main()
