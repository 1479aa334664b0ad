"""Where a compiled training step spends its host time, unpatched vs patched: both arms of
benchmarks/e2e.py compiled in one process, the host time to enqueue the forward, the backward
and the optimizer step (no synchronisation inside a step), then a profiler diff of self CPU time
by op name (patched minus unpatched, largest first).

    python benchmarks/compile_host.py llama 1024
"""
import sys, time, copy, statistics, torch
sys.path.insert(0, "benchmarks")
import e2e, cake_rmsnorm as cr
from torch.profiler import profile, ProfilerActivity
from collections import defaultdict
model, hidden = sys.argv[1], int(sys.argv[2])
torch._dynamo.config.recompile_limit = 64
batch, seq = e2e.SHAPES[hidden]
ids = torch.randint(0, 32768, (batch, seq)).cuda()
base = e2e.build(model, hidden, 4, 32768, False)
pm = copy.deepcopy(base); cr.patch(pm)
arms = {}
for name, m in (("unpatched", base), ("patched", pm)):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    arms[name] = (torch.compile(m), opt)
def step(name, ids, parts=None):
    f, opt = arms[name]
    t0 = time.perf_counter()
    loss = f(input_ids=ids, labels=ids).loss
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step(); opt.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    if parts is not None:
        parts.append((t1 - t0, t2 - t1, t3 - t2))
for name in arms:
    for _ in range(6): step(name, ids)
torch.cuda.synchronize()
parts = {k: [] for k in arms}
for _ in range(10):
    for name in arms:
        for _ in range(3):
            torch.cuda.synchronize(); step(name, ids, parts[name])
for name in arms:
    med = [statistics.median(p[i] for p in parts[name]) * 1e3 for i in range(3)]
    print(f"{name:10s} host enqueue ms: fwd {med[0]:.2f} bwd {med[1]:.2f} opt {med[2]:.2f}")
tabs = {}
for name in arms:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3): step(name, ids)
        torch.cuda.synchronize()
    d = defaultdict(lambda: [0.0, 0])
    for e in prof.key_averages():
        d[e.key] = [e.self_cpu_time_total / 3, e.count / 3]
    tabs[name] = d
keys = set(tabs["patched"]) | set(tabs["unpatched"])
rows = sorted(keys, key=lambda k: -abs(tabs["patched"].get(k, [0, 0])[0] - tabs["unpatched"].get(k, [0, 0])[0]))
print(f"{'self CPU us a step (profiled)':70s} {'unpatched':>10s} {'n':>6s} {'patched':>10s} {'n':>6s}")
for k in rows[:40]:
    u = tabs["unpatched"].get(k, [0, 0]); p = tabs["patched"].get(k, [0, 0])
    print(f"{k[:70]:70s} {u[0]:10.0f} {u[1]:6.1f} {p[0]:10.0f} {p[1]:6.1f}")
print("totals", {k: round(sum(v[0] for v in t.values())) for k, t in tabs.items()})
