"""The DRAM bytes and kernel time of each arm's backward at one shape, to run under ncu: which
arm moves fewer bytes than the op needs (a peer whose time implies more than the HBM peak skips a
stream, or reads it from L2). Each arm's backward runs --calls times inside an NVTX range named
after it, after one warm-up call outside any range.

    ncu --clock-control none --nvtx --nvtx-include 'qk/' --nvtx-include 'cake/' \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        python lab/peer_bytes.py --hidden 4096 --tokens 55552 --residual --weight fp32
"""

import argparse

import torch

from cake_rmsnorm.bench.peers import PEERS, Case, available_peers, make_cake_autograd
from cake_rmsnorm.bench.run import DTYPES


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--residual", action="store_true")
    p.add_argument("--weight", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--peers", default="qk", help=f"comma-separated subset of {','.join(PEERS)}")
    p.add_argument("--calls", type=int, default=2)
    a = p.parse_args()
    case = Case(a.tokens, a.hidden, residual=a.residual, wdtype=DTYPES[a.weight])
    ok, missing = available_peers([k for k in a.peers.split(",") if k])
    for reason in missing.values():
        print("skipped:", reason)
    arms = {"cake": make_cake_autograd(case), **{k: make(case) for k, make in ok.items()}}
    streams = 4 if a.residual else 3  # read g, h (and g_h), write dx: the op's floor
    floor = case.x.numel() * case.x.element_size() * streams
    print(f"H {a.hidden} T {a.tokens} residual {a.residual} w {a.weight}: the floor is {streams} streams, "
          f"{floor / 1e6:.1f} MB a call")
    for name, ops in arms.items():
        ops["bwd"]()  # warm-up (compiles, autotunes), outside the ranges ncu keeps
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(name)
        for _ in range(a.calls):
            ops["bwd"]()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print("ran", name)


if __name__ == "__main__":
    main()
