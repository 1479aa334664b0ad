"""A backward kernel choice on and off, paired in one process (a tuning hook picks the path at
capture), beside torch.compile and F.rms_norm: GPU kernel time of the user's path (autograd,
BF16 w), cold L2. --hook one_launch: dx by rows and dw by columns in one grid against the main
kernel and its finalize; --hook warp_chunks: a warp a dw chunk for narrow rows against one row
group a chunk (--per-head HEADSxH views of [T, heads, H]).

    python lab/backward_ab.py --hidden 512,2048,6144 --tokens 1,16,64,128,256 --out ab.json
    python lab/backward_ab.py --hook warp_chunks --on 8 --per-head 16x64,32x128 --tokens 4096,65536
"""

import argparse

import cake_rmsnorm as cr
from cake_rmsnorm.bench.peers import Case, make_cake_autograd, make_torch_compile, make_torch_fused
from cake_rmsnorm.bench.run import int_list
from cake_rmsnorm.bench.timing import capture, columns, measure, write_rows
from cake_rmsnorm.tuning import one_launch, warp_chunks

HOOKS = {"one_launch": one_launch, "warp_chunks": warp_chunks}


def under(hook, value, fn):
    def run():
        with HOOKS[hook](value):
            return fn()
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="512,1536,2048,4096,5120,6144", type=int_list)
    p.add_argument("--tokens", default="1,16,64,128,256", type=int_list)
    p.add_argument("--ops", default="bwd,step")
    p.add_argument("--hook", default="one_launch", choices=sorted(HOOKS))
    p.add_argument("--on", type=int, default=1023, help="the hook's value for the kernel under test")
    p.add_argument("--per-head", default="", help="HEADSxH,...: [T, heads, H] views instead of --hidden")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    shapes = [(int(v.split("x")[1]), int(v.split("x")[0])) for v in args.per_head.split(",") if v] or \
        [(H, 0) for H in args.hidden]
    for H, heads in shapes:
        for T in args.tokens:
            case = Case(T, H, per_head=heads)
            ours = make_cake_autograd(case)
            peers = {"tc": make_torch_compile(case), "F": make_torch_fused(case)}
            for op in args.ops.split(","):
                graphs = {"off": capture(under(args.hook, 0, ours[op])),
                          "on": capture(under(args.hook, args.on, ours[op]))}
                graphs.update({k: capture(v[op]) for k, v in peers.items()})
                row = {"op": op, "H": H, "T": T, "per_head": heads, "hook": args.hook,
                       "chunks": cr._lib.backward_chunks(case.rows, H), **columns(measure(graphs, args.replays))}
                rows.append(row)
                u = row["us"]
                print(f"{op} H={H} T={T}x{heads or 1} chunks={row['chunks']}: off {u['off']:.2f} on {u['on']:.2f} "
                      f"tc {u['tc']:.2f} F {u['F']:.2f} us  on/off {u['on'] / u['off']:.3f} "
                      f"best-peer/on {min(u['tc'], u['F']) / u['on']:.3f}", flush=True)
                del graphs
    if args.out:
        write_rows(args.out, rows)


if __name__ == "__main__":
    main()
