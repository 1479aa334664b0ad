"""Host cost of a call on DTensors against the same call on plain tensors, for cake_rmsnorm and
torch's own F.rms_norm (whose DTensor strategy torch ships): the DTensor path's added cost is
mostly DTensor's dispatch (sharding propagation, wrapping), so both are shown. One process, a
1-rank gloo mesh (the same propagation a larger mesh runs), rows Shard(0), w Replicate.

    python lab/dtensor_host.py [--tokens 8] [--hidden 64] [--calls 300]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import cake_rmsnorm as cr
from cake_rmsnorm.bench.host import _time


def per_call(fn, calls, repeats=7):
    return _time(fn, calls, repeats, lambda: None)  # bench --host's timed loop


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--calls", type=int, default=300)
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (1,))
    x = torch.randn(a.tokens, a.hidden).bfloat16()
    w = torch.ones(a.hidden).bfloat16()
    gy = torch.randn(a.tokens, a.hidden).bfloat16()
    dx, dw = distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Replicate()])
    dgy = distribute_tensor(gy, mesh, [Shard(0)])
    arms = {
        "cake": lambda x, w: cr.cake_rmsnorm(x, w, 1e-6),
        "F.rms_norm": lambda x, w: F.rms_norm(x, (a.hidden,), w, 1e-6),
    }
    rows = []
    for name, fn in arms.items():
        def fwd(x=x, w=w, fn=fn):
            with torch.no_grad():
                fn(x, w)

        def fwd_bwd(x=x, w=w, g=gy, fn=fn):
            xa, wa = x.detach().requires_grad_(), w.detach().requires_grad_()
            fn(xa, wa).backward(g)

        plain = [per_call(lambda: fwd(), a.calls), per_call(lambda: fwd_bwd(), a.calls)]
        dt = [per_call(lambda: fwd(dx, dw), a.calls), per_call(lambda: fwd_bwd(dx, dw, dgy), a.calls)]
        rows.append((name, plain, dt))
    dist.destroy_process_group()
    print(f"# Host us a call, plain tensors vs DTensors (CPU, 1-rank gloo mesh, T {a.tokens}, H {a.hidden}, "
          f"torch {torch.__version__})\n")
    print("| arm | fwd plain | fwd DTensor | DTensor / plain | fwd+bwd plain | fwd+bwd DTensor | DTensor / plain |")
    print("|---|---|---|---|---|---|---|")
    for name, pl, dt in rows:
        print(f"| {name} | {pl[0]:.1f} | {dt[0]:.1f} | {dt[0] / pl[0]:.2f}x | {pl[1]:.1f} | {dt[1]:.1f} | "
              f"{dt[1] / pl[1]:.2f}x |")


if __name__ == "__main__":
    main()
