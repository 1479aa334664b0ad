"""Multi-process checks of cake_rmsnorm under torchrun: DDP, FSDP2 and sequence parallelism.

    torchrun --nproc-per-node 2 tests/multigpu/run_multigpu.py                # NCCL, one GPU a rank
    torchrun --nproc-per-node 2 tests/multigpu/run_multigpu.py --device cpu   # gloo on CPU

1. ddp / fsdp2: a tiny Llama from `transformers` with `cake_rmsnorm.patch()`, BF16, trained a
   few steps on a global batch split across the ranks; its losses (mean over ranks) against
   one process training on the whole batch, and against the spread between two stock
   single-process runs in different reduction orders (the BF16 noise floor); the same for
   FSDP2 with patch(memory_efficient=True) and for DDP under AMP (FP32 parameters, autocast:
   the FP32 residual stream's mixed add).
2. ddp and fsdp2, each twice: the norm weights' gradients of every step after the all-reduce
   (DDP) or reduce-scatter (FSDP2, gathered whole), bitwise, across the two runs.
3. sequence parallel: x of [T, H] sharded along T; each rank's FP32 dw of its rows, summed by
   all-reduce, against the unsharded dw (max relative difference, bitwise or not) and against
   FP64; repeated to show the sharded result itself is bitwise repeatable.
4. DTensor (2 ranks): tests/test_dtensor.py's 1-D checks on this device: the ops' sharding
   rules, RMSNorm under SequenceParallel and a patched Llama under a tensor + sequence parallel
   plan, eager and compiled.
5. The time of a tensor + sequence parallel training step of a Llama (--tp-hidden), patched
   against unpatched, eager, median of --tp-steps, and the collectives' share of it (the
   profiler's NCCL kernels on CUDA, its c10d / gloo events on the CPU). Reported, not checked.

Every rank prints its lines; rank 0 also writes --json. Exits non-zero when a check fails
(losses outside the noise bound, DDP or FSDP2 norm gradients not bitwise repeatable, the sharded dw not
repeatable or more than 1e-5 from the unsharded one).
"""

import argparse
import copy
import datetime
import json
import os

import torch
import torch.distributed as dist
import transformers

import cake_rmsnorm as cr


def tiny_llama(hidden, layers, seq):
    cfg = transformers.LlamaConfig(
        vocab_size=512, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=seq, attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)


def batches(steps, batch, seq, vocab=512):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 17, (batch, 1), generator=g)
        out.append((start + stride * torch.arange(seq)) % vocab)
    return out


def norm_grads(model):
    inner = getattr(model, "module", model)
    out = {}
    for name, p in inner.named_parameters():
        if name.endswith("norm.weight") and p.grad is not None:
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            out[name] = g.detach().float().cpu().clone()
    return out


def train(model, data, device, rank, world, lr=1e-3, keep_grads=False, amp=False):
    """Per-step losses (mean over ranks) and, if asked, the norm gradients of every step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, grads = [], []
    for ids in data:
        shard = ids.chunk(world)[rank].to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=shard, labels=shard).loss
        loss.backward()
        if keep_grads:
            grads.append(norm_grads(model))
        opt.step()
        l = loss.detach().float().reshape(1)
        if world > 1:
            dist.all_reduce(l)
            l /= world
        losses.append(l.item())
    return losses, grads


def wrap(base, mode, device, world, **patch_kw):
    model = copy.deepcopy(base).to(device)
    cr.patch(model, **patch_kw)
    if mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(device, (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def single(base, data, device, patched, rows_split=1, amp=False, **patch_kw):
    """One process on the whole batch; rows_split > 1 runs the batch as that many micro-batches
    with summed gradients (a different reduction order: the stock model's own BF16 noise)."""
    model = copy.deepcopy(base).to(device)
    if patched:
        cr.patch(model, **patch_kw)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for ids in data:
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for part in ids.chunk(rows_split):
            part = part.to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=part, labels=part).loss / rows_split
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def sequence_parallel(device, rank, world, T, H, repeats=2):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(T, H, generator=g).bfloat16().to(device)
    gy = torch.randn(T, H, generator=g).bfloat16().to(device)
    w = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16().to(device)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    lo, hi = rank * T // world, (rank + 1) * T // world
    results = []
    for _ in range(repeats):
        _, dw = cr.cake_rmsnorm_train_backward(gy[lo:hi], x[lo:hi], w, rstd[lo:hi])
        dist.all_reduce(dw)
        results.append(dw.cpu())
    _, full = cr.cake_rmsnorm_train_backward(gy, x, w, rstd)
    full = full.cpu()
    # The bitwise mode (cake_rmsnorm.sequence_parallel): chunk partials, all-gathered, one finalize.
    from cake_rmsnorm import sequence_parallel as sp
    try:
        sp.chunks_per_rank(T, H, world)
    except ValueError as e:  # a world size that does not divide T or the chunk count
        bitwise = {"bitwise_mode": f"skipped: {e}"}
    else:
        _, dw_bits = sp.sequence_parallel_backward(gy[lo:hi], x[lo:hi], w, rstd[lo:hi])
        bitwise = {"bitwise_mode_equals_unsharded": torch.equal(dw_bits.cpu().view(torch.int32), full.view(torch.int32)),
                   **time_backwards(gy[lo:hi], x[lo:hi], w, rstd[lo:hi], device)}
    ref = (gy.double() * (x.double() * rstd.double()[:, None])).sum(0).cpu()
    rel = lambda a, b: ((a.double() - b.double()).norm() / b.double().norm()).item()  # noqa: E731
    return {
        "T": T, "H": H, "world": world,
        "sharded_repeatable_bitwise": all(torch.equal(r.view(torch.int32), results[0].view(torch.int32)) for r in results),
        "sharded_equals_unsharded_bitwise": torch.equal(results[0].view(torch.int32), full.view(torch.int32)),
        "rel_diff_sharded_vs_unsharded": rel(results[0], full),
        "rel_err_sharded_vs_fp64": rel(results[0], ref),
        "rel_err_unsharded_vs_fp64": rel(full, ref),
        **bitwise,
    }


def _sync(device):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def median_ms(fn, device, reps, warmup=1):
    """Median ms of fn over reps calls, the ranks lined up by a barrier before each."""
    import statistics
    import time
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def time_backwards(g, x, w, rstd, device, reps=20):
    """Median ms of one rank's backward with dw: the all-reduce of its dw against the bitwise
    mode's partials, all-gather and finalize (what the option costs)."""
    from cake_rmsnorm import sequence_parallel as sp

    def allreduce():
        _, dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
        dist.all_reduce(dw)

    return {name: median_ms(fn, device, reps)
            for name, fn in (("ms_allreduce", allreduce),
                             ("ms_bitwise", lambda: sp.sequence_parallel_backward(g, x, w, rstd)))}


def tp_sp_step_time(device, rank, world, hidden, steps):
    """Median ms of a tensor + sequence parallel training step (forward, backward, SGD) of a
    Llama under torchtitan's plan, stock and patched, and the collectives' share of a step."""
    if world != 2:
        return {"skipped": f"the plan is checked for 2 ranks, not {world}"}
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import test_dtensor
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh(device, (world,))
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 2,
                                   num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                                   max_position_embeddings=256)
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
    ids = torch.randint(0, 1024, (4, 256), generator=torch.Generator().manual_seed(1)).to(device)
    pos = torch.arange(256, device=device).expand(4, 256)
    sync = _sync(device)
    out = {"hidden": hidden, "tokens": 4 * 256}
    for name, patched in (("stock", False), ("patched", True)):
        model = copy.deepcopy(base)
        if patched:
            cr.patch(model)
        parallelize_module(model, mesh, test_dtensor._llama_plan(cfg))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            opt.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids, position_ids=pos).loss.backward()
            opt.step()

        ms = median_ms(step, device, steps, warmup=2)
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            step()
            sync()
        if device == "cuda":
            total = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            comm = sum(e.device_time for e in prof.events()
                       if e.device_type == torch.autograd.DeviceType.CUDA and "nccl" in e.name.lower())
        else:
            top = [e for e in prof.events() if e.cpu_parent is None]
            total = sum(e.cpu_time_total for e in top)
            comm = sum(e.cpu_time_total for e in top if "c10d" in e.name or "gloo" in e.name.lower())
        out[name] = {"ms": ms, "collectives_share": comm / total if total else None}
        del model, opt
    out["patched_over_stock"] = out["patched"]["ms"] / out["stock"]["ms"]
    return out


def dtensor_parallel(device, rank, world):
    """tests/test_dtensor.py's 1-D checks on this device: every op with rows sharded against the
    unsharded bits, RMSNorm under SequenceParallel (eager and compiled), and a patched Llama
    under torchtitan's tensor + sequence parallel plan (eager and compiled). 2 ranks."""
    if world != 2:
        return {"skipped": f"the checks are written for 2 ranks, not {world}"}
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import test_dtensor  # (imports pytest: the test extras)
    from torch.distributed.device_mesh import init_device_mesh
    torch.set_default_device(device)  # the helpers' modules and factories
    try:
        test_dtensor._cases(rank, init_device_mesh(device, (world,)))
        return {"passed": True}
    except Exception as e:  # noqa: BLE001  (reported, and fails the run)
        return {"passed": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    finally:
        torch.set_default_device("cpu")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--sp-tokens", type=int, default=8192)
    p.add_argument("--tp-hidden", type=int, default=1024, help="the tensor + sequence parallel step's width")
    p.add_argument("--tp-steps", type=int, default=10)
    p.add_argument("--json")
    args = p.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = args.device
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    # A bounded wait: a rank that fails inside a collective the other rank is still in ends the
    # run after this, instead of hanging it.
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=datetime.timedelta(minutes=10))
    report = {"world": world, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    try:
        base = tiny_llama(args.hidden, args.layers, args.seq)
        data = batches(args.steps, args.batch, args.seq)
        ref = single(base, data, device, patched=True)
        stock = single(base, data, device, patched=False)
        stock_split = single(base, data, device, patched=False, rows_split=world if world > 1 else 2)
        noise = max(abs(a - b) for a, b in zip(stock, stock_split))
        report["single_patched_losses"] = ref
        report["bf16_noise"] = noise
        for mode in ("ddp", "fsdp2"):
            model = wrap(base, mode, device, world)
            losses, _ = train(model, data, device, rank, world)
            diff = max(abs(a - b) for a, b in zip(losses, ref))
            report[mode] = {"losses": losses, "max_diff_vs_single": diff, "within_noise": diff <= max(2 * noise, 1e-3)}
            del model
        # The memory-efficient mode under FSDP2 (y saved in x's place; on CUDA this version saves x
        # and says so), and AMP's mixed residual stream under DDP (FP32 parameters, autocast).
        ref_me = single(base, data, device, patched=True, memory_efficient=True)
        model = wrap(base, "fsdp2", device, world, memory_efficient=True)
        losses, _ = train(model, data, device, rank, world)
        diff = max(abs(a - b) for a, b in zip(losses, ref_me))
        report["fsdp2_memory_efficient"] = {"losses": losses, "max_diff_vs_single": diff,
                                            "within_noise": diff <= max(2 * noise, 1e-3)}
        del model
        base32 = copy.deepcopy(base).float()
        ref_amp = single(base32, data, device, patched=True, amp=True)
        model = wrap(base32, "ddp", device, world)
        losses, _ = train(model, data, device, rank, world, amp=True)
        diff = max(abs(a - b) for a, b in zip(losses, ref_amp))
        report["ddp_amp"] = {"losses": losses, "max_diff_vs_single": diff, "within_noise": diff <= max(2 * noise, 1e-3)}
        del model
        report["norm_grads_bitwise"] = {}
        for mode in ("ddp", "fsdp2"):
            runs = []
            for _ in range(2):
                model = wrap(base, mode, device, world)
                runs.append(train(model, data, device, rank, world, keep_grads=True)[1])
                del model
            report["norm_grads_bitwise"][mode] = all(
                torch.equal(a[k].view(torch.int32), b[k].view(torch.int32)) for a, b in zip(*runs) for k in a)
        report["norm_grads_checked"] = sorted(runs[0][0])[:3] + (["..."] if len(runs[0][0]) > 3 else [])
        report["sequence_parallel"] = sequence_parallel(device, rank, world, args.sp_tokens, args.hidden)
        report["dtensor"] = dtensor_parallel(device, rank, world)
        report["tp_sp_step"] = tp_sp_step_time(device, rank, world, args.tp_hidden, args.tp_steps)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    print(f"[rank {rank}] " + json.dumps({k: v for k, v in report.items() if k != "single_patched_losses"}), flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    ok = (report["ddp"]["within_noise"] and report["fsdp2"]["within_noise"] and all(report["norm_grads_bitwise"].values())
          and report["fsdp2_memory_efficient"]["within_noise"] and report["ddp_amp"]["within_noise"]
          and report["sequence_parallel"]["sharded_repeatable_bitwise"]
          and report["sequence_parallel"]["rel_diff_sharded_vs_unsharded"] <= 1e-5
          and report["sequence_parallel"].get("bitwise_mode_equals_unsharded", True)
          and report["dtensor"].get("passed", "skipped" in report["dtensor"]))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
