"""dw's chunk count A/B, paired in one process: the backward with the contract's count (half the
cap, then the cap in one step) against the count that grew by one chunk per 32 rows from half
the cap, both through `sequence_parallel.backward_partials` + `dw_from_partials` (the library's
kernels given a chunk count), beside the user's path (autograd through `cake_rmsnorm`, which
runs the contract's count) and F.rms_norm. GPU kernel time, cold L2, the bench's protocol.
Checks, per shape: dx the same bits in both arms, and the contract arm's dx and dw the op's.

    python lab/chunks_ab.py --hidden 3584,4096 --tokens 8477,10000,12345,16352,16353 --out ab.json
"""

import argparse

import torch

import cake_rmsnorm as cr
from cake_rmsnorm.bench.peers import Case, make_cake_autograd, make_torch_fused
from cake_rmsnorm.bench.run import int_list, logical_bytes
from cake_rmsnorm.bench.timing import capture, columns, measure, write_rows
from cake_rmsnorm.sequence_parallel import backward_partials, dw_from_partials


def grown_chunks(rows, hidden):
    """The former count: where the contract holds half the cap (its saturating rows past two a
    chunk at the cap), half the cap, then one chunk per 32 rows up to the cap."""
    sat = cr.saturating_workspace_rows(hidden)
    cap = cr._lib.backward_chunks(sat, hidden)
    c = min(-(-rows // 2), cap)
    if sat > 2 * cap:
        c = min(c, max(-(-rows // 32), cap // 2))
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", default="896,2048,3584,4096", type=int_list)
    p.add_argument("--tokens", default="8477,10000,12345,16352,16958,20000,25696,32635", type=int_list)
    p.add_argument("--residual", default="0", type=int_list)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for H in args.hidden:
        for T in args.tokens:
            for res in args.residual:
                case = Case(T, H, residual=bool(res))
                counts = {"contract": cr._lib.backward_chunks(T, H), "grown": grown_chunks(T, H)}
                if counts["contract"] == counts["grown"]:
                    print(f"H={H} T={T}: the same count ({counts['contract']}), skipped", flush=True)
                    continue
                x, r, gy, gr, w = case.x, case.r, case.gy, case.gr, case.w
                fwd = cr.cake_rmsnorm_train_forward(x, w, case.eps, residual=r)
                rstd, h = fwd[1], (x if r is None else fwd[2])

                def arm(chunks):
                    def run():
                        dx, part = backward_partials(gy, h, w, rstd, chunks, g_residual=gr)
                        return dx, dw_from_partials(part, dtype=w.dtype)
                    return run

                arms = {k: arm(v) for k, v in counts.items()}
                outs = {k: backward_partials(gy, h, w, rstd, v, g_residual=gr) for k, v in counts.items()}
                same_dx = torch.equal(outs["contract"][0], outs["grown"][0])
                # The op (the user path's backward) runs the contract's count: its dx and FP32 dw bits.
                dx_op, dw_op = cr.cake_rmsnorm_train_backward(gy, h, w, rstd, g_residual=gr)
                op_bits = torch.equal(dx_op, outs["contract"][0]) and torch.equal(dw_op, dw_from_partials(outs["contract"][1]))
                user = make_cake_autograd(case)
                fused = make_torch_fused(case)
                graphs = {k: capture(f) for k, f in arms.items()}
                graphs["user"] = capture(user["bwd"])
                graphs["F"] = capture(fused["bwd"])
                row = {"H": H, "T": T, "residual": bool(res), "chunks": counts, "dx_same_bits": same_dx, "op_bits": op_bits,
                       **columns(measure(graphs, args.replays)),
                       "bytes": logical_bytes("bwd", T, H, r is not None)}
                us = row["us"]
                rows.append(row)
                print(f"H={H} T={T} res={res} chunks {counts['contract']} vs {counts['grown']}: contract "
                      f"{us['contract']:.2f} grown {us['grown']:.2f} user {us['user']:.2f} F {us['F']:.2f} us  "
                      f"grown/contract {us['grown'] / us['contract']:.3f}  dx same {same_dx}, op bits {op_bits}", flush=True)
                del graphs
    if args.out:
        write_rows(args.out, rows)


if __name__ == "__main__":
    main()
