"""Host cost of one call inside a compiled graph, in us: a graph of 16 chained calls against a graph
of one, (t16 - t1) / 15, so dynamo's guards and the graph's own entry cost cancel. Arms:

- cake: ``cake_rmsnorm`` (inductor's Python wrapper calls the direct binding, _lowering.py);
- cake, registered op: the same with ``CAKE_RMSNORM_COMPILE_DIRECT=0`` (a child process), the
  wrapper calling ``torch.ops.cake_rmsnorm.fwd`` through the dispatcher;
- cake, cpp_wrapper: inductor's C++ wrapper calling the ops' C shims (and, in a child process
  with the opt-out, through ``aoti_torch_call_dispatcher``);
- one inductor kernel: ``x * sigmoid(x.sum())``, whose sum over every element needs the whole
  previous result, so on CUDA each call is one generated kernel (a Triton launch; the count in
  the 16-call graph is printed). Chained ``F.rms_norm`` calls, or column sums, would not do:
  rows (columns) are independent, and inductor fuses the chain into one kernel.

No grad (the forward op alone), T x H activations, medians of repeated timed loops.

    python lab/compiled_call.py [--device cuda|cpu] [--tokens 8] [--hidden 4096] [--cpp-wrapper auto|on|off]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import cake_rmsnorm as cr

N = 16


def chain(fn, n):
    def f(x, w):
        for _ in range(n):
            x = fn(x, w)
        return x
    return f


KERNELS = {}


def per_call(fn, x, w, sync, cpp_wrapper=False, calls=500, repeats=9, count=None):
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code
    times = {}
    for n in (1, N):
        torch._dynamo.reset()
        with config.patch(cpp_wrapper=cpp_wrapper, fx_graph_cache=False):
            f = torch.compile(chain(fn, n), fullgraph=True)
            with torch.no_grad():
                _, codes = run_and_get_code(f, x, w)
                if count and n == N:
                    KERNELS[count] = sum(c.count(".run(") + c.count("cpp_fused") // 2 for c in codes)
                for _ in range(20):
                    f(x, w)
                sync()
                runs = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    for _ in range(calls):
                        f(x, w)
                    runs.append((time.perf_counter() - t) / calls * 1e6)
                    sync()
        times[n] = statistics.median(runs)
    return (times[N] - times[1]) / (N - 1)


def arms(device, tokens, hidden, cpp):
    x = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
    w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cake = lambda x, w: cr.cake_rmsnorm(x, w)  # noqa: E731
    out = {"cake": per_call(cake, x, w, sync)}
    if cpp:
        out["cake, cpp_wrapper"] = per_call(cake, x, w, sync, cpp_wrapper=True)
    if os.environ.get("CAKE_RMSNORM_COMPILE_DIRECT", "1") == "1":
        one = lambda x, w: x * x.sum().sigmoid()  # noqa: E731
        out["one inductor kernel"] = per_call(one, x, w, sync, count="one inductor kernel")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4096)
    # The C shims need torch >= 2.14; on older torch the cpp_wrapper arms only time C++ compiles.
    p.add_argument("--cpp-wrapper", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    cpp = a.cpp_wrapper == "on" or (a.cpp_wrapper == "auto" and tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 14))
    res = arms(a.device, a.tokens, a.hidden, cpp)
    if a.child:
        print(json.dumps(res))
        return
    env = dict(os.environ, CAKE_RMSNORM_COMPILE_DIRECT="0")
    child = subprocess.run([sys.executable, __file__, "--child", "--device", a.device, "--tokens", str(a.tokens),
                            "--hidden", str(a.hidden), "--cpp-wrapper", "on" if cpp else "off"], env=env, capture_output=True, text=True, check=True)
    off = json.loads(child.stdout.strip().splitlines()[-1])
    res["cake, registered op"] = off["cake"]
    if cpp:
        res["cake, cpp_wrapper, dispatcher"] = off["cake, cpp_wrapper"]
    bar = res["one inductor kernel"]
    where = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    print(f"# Host us a call inside a compiled graph ({where}, T {a.tokens}, H {a.hidden}, torch {torch.__version__})\n")
    kernels = KERNELS.get("one inductor kernel")
    print(f"Generated kernels in the graph of {N} whole-sum calls: {kernels}\n")
    print("| arm | us a call | vs one inductor kernel |\n|---|---|---|")
    for k, v in res.items():  # no ratio where inductor fused the chain (the CPU backend does)
        print(f"| {k} | {v:.2f} | {f'{v / bar:.2f}x' if kernels and kernels >= N else 'n/a'} |")


if __name__ == "__main__":
    main()
