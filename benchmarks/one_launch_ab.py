"""The backward's one launch (dx by rows and dw by columns in one grid) against the main kernel
and its finalize, paired in one process (the tuning hook picks the path at capture), beside
torch.compile and F.rms_norm: GPU kernel time of the user's path (autograd, BF16 w), cold L2.

    python benchmarks/one_launch_ab.py --hidden 512,2048,6144 --tokens 1,16,64,128,256 --out ab.json
"""

import argparse
import json

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.peers import Case, make_cake_autograd, make_torch_compile, make_torch_fused
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.timing import capture, measure
from cake_rmsnorm.tuning import one_launch


def under(limit, fn):
    def run():
        with one_launch(limit):
            return fn()
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="512,1536,2048,4096,5120,6144", type=int_list)
    p.add_argument("--tokens", default="1,16,64,128,256", type=int_list)
    p.add_argument("--ops", default="bwd,step")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for H in args.hidden:
        for T in args.tokens:
            case = Case(T, H)
            ours = make_cake_autograd(case)
            peers = {"tc": make_torch_compile(case), "F": make_torch_fused(case)}
            for op in args.ops.split(","):
                graphs = {"pair": capture(under(0, ours[op])), "one": capture(under(1023, ours[op]))}
                graphs.update({k: capture(v[op]) for k, v in peers.items()})
                res = measure(graphs, args.replays)
                row = {"op": op, "H": H, "T": T, "chunks": cr._lib.backward_chunks(T * 1, H),
                       "us": {k: v[0] for k, v in res.items()}, "event_us": {k: v[1] for k, v in res.items()}}
                rows.append(row)
                u = row["us"]
                print(f"{op} H={H} T={T} chunks={row['chunks']}: pair {u['pair']:.2f} one {u['one']:.2f} "
                      f"tc {u['tc']:.2f} F {u['F']:.2f} us  one/pair {u['one'] / u['pair']:.3f} "
                      f"best-peer/one {min(u['tc'], u['F']) / u['one']:.3f}", flush=True)
                del graphs
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
