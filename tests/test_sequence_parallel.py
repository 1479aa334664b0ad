"""Sequence parallel with dw bitwise equal to the single-process one (cake_rmsnorm.
sequence_parallel): each rank's chunk partials, gathered in rank order, finalized once. In one
process over emulated ranks, and on gloo with 2 and 4 processes."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cake_rmsnorm as cr
from cake_rmsnorm import sequence_parallel as sp
from conftest import devices
from procs import free_port, run_rank
from reference import make_rows, make_weight

EPS = 1e-6


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _inputs(T, H, act, wd, device, seed, residual=False):
    gen = torch.Generator().manual_seed(seed)
    x, g, gr = (make_rows(T, H, act, "cpu", 1.0, None, 0, gen).contiguous().to(device) for _ in range(3))
    w = make_weight(H, wd, "cpu", gen).to(device)
    _, rstd = cr.cake_rmsnorm_train_forward(x, w, EPS)
    return g, x, w, rstd, gr if residual else None


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("act,wd", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                    (torch.float32, torch.float32), (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("T,H", [(2048, 128), (4096, 512), (1024, 4096), (96, 1536)])
@pytest.mark.parametrize("residual", [True, False])
def test_ranks_partials_give_the_unsharded_dw(device, act, wd, T, H, residual):
    """Emulated ranks (slices of T) with chunks_per_rank chunks each: the finalize over their
    partials in rank order is the single-process dw bitwise, FP32 and in w's dtype, and the
    slices' dx are the whole call's."""
    g, x, w, rstd, gr = _inputs(T, H, act, wd, device, seed=T + H, residual=residual)
    dx_ref, dw_ref = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
    for world in (1, 2, 4, 8):
        try:
            chunks = sp.chunks_per_rank(T, H, world)
        except ValueError:
            assert T % world or int(cr._lib._c.cake_rmsnorm_backward_chunks(T, H)) % world
            continue
        outs = [sp.backward_partials(g[s], x[s], w, rstd[s], chunks, g_residual=gr[s] if residual else None)
                for s in (slice(r * T // world, (r + 1) * T // world) for r in range(world))]
        parts = torch.cat([p for _, p in outs])
        assert torch.equal(_bits(sp.dw_from_partials(parts)), _bits(dw_ref)), world
        assert torch.equal(torch.cat([d for d, _ in outs]), dx_ref), world
        if wd != torch.float32:
            assert torch.equal(_bits(sp.dw_from_partials(parts, dtype=wd)), _bits(dw_ref.to(wd))), world


def test_refusals():
    g, x, w, rstd, _ = _inputs(64, 128, torch.bfloat16, torch.bfloat16, "cpu", 1)
    with pytest.raises(ValueError, match="chunks must be an int"):
        sp.backward_partials(g, x, w, rstd, 65)
    with pytest.raises(ValueError, match="chunks must be an int"):
        sp.backward_partials(g, x, w, rstd, 0)
    with pytest.raises(ValueError, match="divisible by world_size"):
        sp.chunks_per_rank(96, 128, 5)
    with pytest.raises(TypeError, match="partials must be a 2-D FP32"):
        sp.dw_from_partials(torch.zeros(4, 128, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="accumulate needs out"):
        sp.dw_from_partials(torch.zeros(4, 128), accumulate=True)
    dw = torch.ones(128)
    parts = torch.randn(4, 128)
    sp.dw_from_partials(parts, out=dw, accumulate=True)
    assert torch.equal(dw, 1 + sp.dw_from_partials(parts))
    import copy
    import pickle
    win = cr.program_windows("fwd", 2048, sm=90)["fwd"]
    assert copy.deepcopy(win) == win and pickle.loads(pickle.dumps(win))[0].group == win[0].group


def test_c_api_refusals_write_nothing():
    """cake_rmsnorm_backward_partials refuses a dw, accumulate, dw in w's dtype, more chunks
    than rows or than 4096, and writes neither dx nor the workspace; dw_finalize refuses a bad
    dtype, no chunks, and accumulate into a 16-bit dw."""
    import ctypes
    g, x, w, rstd, _ = _inputs(16, 64, torch.bfloat16, torch.bfloat16, "cpu", 3)
    dx = torch.full_like(x, 7.0)
    ws = torch.full((16, 64), 5.0)
    dw = torch.zeros(64)

    def args(**over):
        a = sp._BwdArgs(device=0, x_dtype=0, w_dtype=0, rows=16, hidden=64, g=g.data_ptr(), g_row_stride=64,
                        x=x.data_ptr(), x_row_stride=64, w=w.data_ptr(), rstd=rstd.data_ptr(), g_residual=None,
                        g_residual_row_stride=64, dx=dx.data_ptr(), dx_row_stride=64, dw=None,
                        workspace=ws.data_ptr(), workspace_bytes=ws.numel() * 4, max_ctas=0, accumulate_dw=0,
                        dw_in_w_dtype=0, g_dtype_set=0, g_dtype=0)
        for k, v in over.items():
            setattr(a, k, v)
        return ctypes.byref(a)
    c = sp._c
    for a, chunks in ((args(dw=dw.data_ptr()), 4), (args(accumulate_dw=1), 4), (args(dw_in_w_dtype=1), 4),
                      (args(), 17), (args(), 0), (args(rows=5000, workspace_bytes=1 << 30), 4097)):
        assert c.cake_rmsnorm_backward_partials(a, chunks, None) != 0
    assert (dx == 7.0).all() and (ws == 5.0).all() and (dw == 0).all()
    assert c.cake_rmsnorm_backward_partials(args(), 4, None) == 0 and not (ws == 5.0).all()
    p = ws.data_ptr()
    assert c.cake_rmsnorm_dw_finalize(0, p, 4, 64, dw.data_ptr(), 7, 0, None) != 0
    assert c.cake_rmsnorm_dw_finalize(0, p, 0, 64, dw.data_ptr(), 2, 0, None) != 0
    assert c.cake_rmsnorm_dw_finalize(0, p, 4, 64, dw.data_ptr(), 0, 1, None) != 0
    assert (dw == 0).all()


def _rank(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = {}
        for T, H, act in ((2048, 128, torch.bfloat16), (1024, 1536, torch.float32)):
            g, x, w, rstd, gr = _inputs(T, H, act, torch.float32, "cpu", seed=7, residual=True)
            _, dw_ref = cr.cake_rmsnorm_train_backward(g, x, w, rstd, g_residual=gr)
            s = slice(rank * T // world, (rank + 1) * T // world)
            dx, dw = sp.sequence_parallel_backward(g[s], x[s], w, rstd[s], g_residual=gr[s])
            _, dw_local = cr.cake_rmsnorm_train_backward(g[s], x[s], w, rstd[s], g_residual=gr[s])
            dist.all_reduce(dw_local)  # the usual sequence parallel, for comparison
            result[f"{T}x{H}"] = (torch.equal(_bits(dw), _bits(dw_ref)), float((dw_local - dw_ref).abs().max()))
        try:  # unequal rows: every rank raises, none waits in a collective
            sp.sequence_parallel_backward(g[: 8 + rank], x[: 8 + rank], w, rstd[: 8 + rank])
            result["unequal_rows_refused"] = False
        except ValueError:
            result["unequal_rows_refused"] = True
        if rank == 0:
            torch.save(result, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_processes_get_the_unsharded_dw(world, tmp_path):
    """Across processes: every rank's dw is the single-process dw bitwise (the all-reduce of
    each rank's dw is not, in general: another tree)."""
    out = str(tmp_path / "sp.pt")
    mp.spawn(run_rank, args=(_rank, world, free_port(), out), nprocs=world, join=True)
    result = torch.load(out)
    assert result.pop("unequal_rows_refused")
    for case, (bitwise, allreduce_err) in result.items():
        assert bitwise, case
        assert allreduce_err < 1e-3, case
