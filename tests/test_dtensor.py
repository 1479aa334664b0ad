"""DTensors through the ops, the module and a patched model (python/cake_rmsnorm/_sharding.py): 2
CPU processes on gloo, a 1-D mesh. Row tensors sharded on a non-feature dim give the unsharded
outputs' bits, dw is a Partial FP32 sum, a sharded feature dim or weight is gathered first, and
a patched transformers Llama trains under a tensor + sequence parallel plan."""

import os
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from procs import free_port

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

WORLD = 2


def _cases(rank, mesh):
    """Each case raises on a failure; returns the names checked."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    import cake_rmsnorm as cr
    ops = torch.ops.cake_rmsnorm
    g = torch.Generator().manual_seed(0)

    def r(*s, dtype=torch.bfloat16):
        return torch.randn(*s, generator=g, device="cpu").to(mesh.device_type, dtype)

    def D(t, p):
        return distribute_tensor(t, mesh, [p])

    x, res, gy = r(2, 8, 64), r(2, 8, 64), r(2, 8, 64)
    w = (1 + 0.1 * r(64, dtype=torch.float32)).bfloat16()
    eps = 1e-6
    y0, rstd0 = ops.fwd(x, w, eps, None)

    # Forward ops: every non-feature dim, outputs sharded as x is, the unsharded bits.
    for d in (0, 1):
        y, rstd = ops.fwd(D(x, Shard(d)), D(w, Replicate()), eps, None)
        assert y.placements == (Shard(d),) and rstd.placements == (Shard(d),)
        assert torch.equal(y.full_tensor(), y0) and torch.equal(rstd.full_tensor(), rstd0)
    outs = ops.fwd_residual(D(x, Shard(1)), D(res, Shard(1)), D(w, Replicate()), eps, None)
    for a, b in zip(outs, ops.fwd_residual(x, res, w, eps, None)):
        assert torch.equal(a.full_tensor(), b)
    y_out, rstd_out = D(torch.empty_like(x), Shard(1)), D(torch.empty(2, 8), Shard(1))
    ops.fwd_out(D(x, Shard(1)), D(w, Replicate()), eps, y_out, rstd_out)
    assert torch.equal(y_out.full_tensor(), y0) and torch.equal(rstd_out.full_tensor(), rstd0)

    # A written argument keeps its placement: a replicated y under sharded rows gets the whole
    # result (the rows gathered), never a dropped write into a temporary.
    y_rep, rstd_rep = D(torch.zeros_like(x), Replicate()), D(torch.zeros(2, 8), Replicate())
    ops.fwd_out(D(x, Shard(1)), D(w, Replicate()), eps, y_rep, rstd_rep)
    assert y_rep.placements == (Replicate(),) and torch.equal(y_rep.to_local(), y0)
    assert torch.equal(rstd_rep.to_local(), rstd0)

    # Backward ops: dx sharded with the unsharded bits, dw a Partial FP32 sum.
    sx, sg, sr = D(x, Shard(1)), D(gy, Shard(1)), D(rstd0, Shard(1))
    dx, dw = ops.bwd(sg, sx, D(w, Replicate()), sr, None, False)
    dx0, dw0 = ops.bwd(gy, x, w, rstd0, None, False)
    assert dx.placements == (Shard(1),) and dw.placements[0].is_partial() and dw.dtype == torch.float32
    assert torch.equal(dx.full_tensor(), dx0)
    assert torch.allclose(dw.full_tensor(), dw0, rtol=1e-5, atol=1e-5)
    assert torch.equal(ops.bwd_dx(sg, sx, D(w, Replicate()), sr, D(res, Shard(1))).full_tensor(),
                       ops.bwd_dx(gy, x, w, rstd0, res))

    # bwd_out accumulating into a replicated FP32 buffer (main_grad): every rank's copy gets the
    # whole sum once (rows gathered). With dx sharded beside it no strategy keeps both written
    # placements: refused, nothing dropped.
    mg = D(torch.full((64,), 0.5), Replicate())
    dx_o = D(torch.empty_like(x), Replicate())
    ops.bwd_out(sg, sx, D(w, Replicate()), sr, None, dx_o, mg, None, 0, True)
    assert torch.equal(dx_o.to_local(), dx0)
    assert torch.allclose(mg.to_local(), dw0 + 0.5, rtol=1e-5, atol=1e-5)
    try:
        ops.bwd_out(sg, sx, D(w, Replicate()), sr, None, D(torch.empty_like(x), Shard(1)), mg, None, 0, True)
        raise AssertionError("a sharded dx beside a replicated main_grad was accepted")
    except RuntimeError as e:
        assert "Sharding propagation failed for cake_rmsnorm.bwd_out" in str(e)  # torch 2.13 words the cause differently
    # Through autograd with main_grad: reduced in FP32, then added.
    mg2 = D(torch.zeros(64), Replicate())
    xa = D(x, Shard(1)).requires_grad_()
    cr.cake_rmsnorm(xa, D(w, Replicate()).requires_grad_(), eps, main_grad=mg2).backward(D(gy, Shard(1)))
    assert torch.allclose(mg2.to_local(), dw0, rtol=1e-5, atol=1e-5)
    # The backward from y (memory-efficient mode): dx sharded with the unsharded bits, dw a
    # Partial FP32 sum; through autograd the same, y saved in x's place.
    dxy, dwy = ops.bwd_from_y(sg, D(y0, Shard(1)), D(w, Replicate()), sr, None, None, False)
    dxy0, dwy0 = ops.bwd_from_y(gy, y0, w, rstd0, None, None, False)
    assert dxy.placements == (Shard(1),) and dwy.placements[0].is_partial()
    assert torch.equal(dxy.full_tensor(), dxy0)
    assert torch.allclose(dwy.full_tensor(), dwy0, rtol=1e-5, atol=1e-5)
    xa, wa = D(x, Shard(1)).requires_grad_(), D(w, Replicate()).requires_grad_()
    ya = cr.cake_rmsnorm(xa, wa, eps, memory_efficient=True)
    assert ya.grad_fn.saved_tensors[0].to_local().data_ptr() == ya.to_local().data_ptr()
    ya.backward(D(gy, Shard(1)))
    assert torch.equal(xa.grad.full_tensor(), dxy0)
    assert torch.equal(wa.grad.full_tensor(), dwy0.to(w.dtype))
    # bwd with dw in w's 16-bit dtype: the rounded dw is never a Partial sum.
    _, dw16 = ops.bwd(sg, sx, D(w, Replicate()), sr, None, True)
    assert dw16.placements == (Replicate(),) and dw16.dtype == torch.bfloat16

    # A sharded feature dim or weight is gathered (redistributed), as for torch's rms_norm.
    y, _ = ops.fwd(D(x, Shard(2)), D(w, Shard(0)), eps, None)
    assert torch.equal(y.full_tensor(), y0)

    # The module under SequenceParallel: y and dx the unsharded bits; dw reduced in FP32, then
    # cast once, so within a BF16 ulp of the unsharded dw (whose FP32 sum is one tree).
    torch.manual_seed(0)
    plain, sp = cr.RMSNorm(64, dtype=torch.bfloat16), cr.RMSNorm(64, dtype=torch.bfloat16)
    with torch.no_grad():
        plain.weight.copy_(w)
        sp.weight.copy_(w)
    parallelize_module(sp, mesh, SequenceParallel())
    xp = x.clone().requires_grad_()
    yp = plain(xp)
    yp.backward(gy)
    xs = D(x, Shard(1)).requires_grad_()
    ys = sp(xs)
    assert isinstance(ys, DTensor) and ys.placements == (Shard(1),)
    ys.backward(D(gy, Shard(1)))
    assert torch.equal(ys.full_tensor(), yp)
    assert torch.equal(xs.grad.full_tensor(), xp.grad)
    gw = sp.weight.grad
    assert gw.placements == (Replicate(),) and gw.dtype == torch.bfloat16
    ulp = torch.finfo(torch.bfloat16).eps * plain.weight.grad.float().abs()
    assert ((gw.full_tensor().float() - plain.weight.grad.float()).abs() <= ulp).all()

    # The same module compiled (fullgraph): the eager sharded module's bits.
    spc = cr.RMSNorm(64, dtype=torch.bfloat16)
    with torch.no_grad():
        spc.weight.copy_(w)
    parallelize_module(spc, mesh, SequenceParallel())
    xc = D(x, Shard(1)).requires_grad_()
    yc = torch.compile(spc, fullgraph=True)(xc)
    yc.backward(D(gy, Shard(1)))
    assert torch.equal(yc.full_tensor(), yp) and torch.equal(xc.grad.full_tensor(), xp.grad)
    assert torch.equal(spc.weight.grad.full_tensor(), gw.full_tensor())
    _patched_llama_tensor_parallel(mesh)
    _patched_llama_tensor_parallel(mesh, compiled=True)
    return rank


def _llama_plan(cfg):
    """torchtitan's plan for a transformers Llama: column- and row-wise linears, SequenceParallel
    norms, the residual stream sharded along the sequence between them."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        plan.update({
            p + "input_layernorm": SequenceParallel(),
            p + "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            p + "self_attn.q_proj": ColwiseParallel(), p + "self_attn.k_proj": ColwiseParallel(),
            p + "self_attn.v_proj": ColwiseParallel(), p + "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            p + "post_attention_layernorm": SequenceParallel(),
            p + "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            p + "mlp.gate_proj": ColwiseParallel(), p + "mlp.up_proj": ColwiseParallel(),
            p + "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1))})
    return plan


def _patched_llama_tensor_parallel(mesh, compiled=False):
    """A patched transformers Llama under a tensor + sequence parallel plan (torchtitan's: the
    linears column- and row-wise, the norms SequenceParallel), eager or compiled with
    fullgraph=True: the unsharded model's loss, and norm gradients within FP32 rounding of its."""
    import copy

    import transformers
    from torch.distributed.tensor.parallel import parallelize_module

    import cake_rmsnorm as cr
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg)
    model = copy.deepcopy(ref)
    assert len(cr.patch(model).replaced) == 2 * cfg.num_hidden_layers + 1
    parallelize_module(model, mesh, _llama_plan(cfg))
    norms = [n for n, _ in model.named_parameters() if "norm" in n]
    assert len(norms) == 2 * cfg.num_hidden_layers + 1
    if compiled:
        torch._dynamo.reset()
        model.compile(fullgraph=True)  # in place: the parameters keep their names
    _matches_unsharded(model, ref)


def _matches_unsharded(model, ref):
    """One step of both: the unsharded loss, and norm gradients within 1e-5 of its."""
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1), device="cpu")
    ids = ids.to(torch.get_default_device())  # tests/multigpu runs these helpers on CUDA
    pos = torch.arange(16).expand(2, 16)  # the rotary tables of the whole sequence, not a shard's
    loss = model(input_ids=ids, labels=ids, position_ids=pos).loss
    loss.backward()
    ref_loss = ref(input_ids=ids, labels=ids, position_ids=pos).loss
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item())
    ref_params = dict(ref.named_parameters())
    for n, p in model.named_parameters():
        if "norm" in n:
            g, g0 = p.grad.full_tensor(), ref_params[n].grad
            assert (g - g0).norm() <= 1e-5 * g0.norm(), n


def _fsdp_over_tensor_parallel(rank, mesh):
    """FSDP2 over a (dp, tp) mesh with the tensor + sequence parallel plan on tp: every dp rank
    trains the same batch, so the loss and the norms' gradients are the unsharded model's."""
    import copy

    import transformers
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    import cake_rmsnorm as cr
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg)
    model = copy.deepcopy(ref)
    cr.patch(model)
    parallelize_module(model, mesh["tp"], _llama_plan(cfg))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    _matches_unsharded(model, ref)
    return rank


def _worker(rank, port, out, case, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    code = 0
    try:
        from torch.distributed.device_mesh import init_device_mesh
        if case == "1d":
            _cases(rank, init_device_mesh("cpu", (world,)))
        else:
            _fsdp_over_tensor_parallel(rank, init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")))
        with open(os.path.join(out, f"ok{rank}"), "w") as f:
            f.write("ok")
    except BaseException as e:  # noqa: BLE001  (reported through the file; the process must exit)
        with open(os.path.join(out, f"err{rank}"), "w") as f:
            f.write(f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}")
        code = 1
    try:
        dist.barrier()
    finally:
        os._exit(code)  # gloo's threads make interpreter teardown hang


@pytest.mark.parametrize("case,world", [("1d", WORLD), ("fsdp_tp", 4)])
def test_dtensor_ops_modules_and_models(case, world, tmp_path):
    """1d: the ops, the module and a patched Llama (each eager and compiled) on a 1-D tp mesh;
    fsdp_tp: a patched Llama under FSDP2 over a (dp 2, tp 2) mesh, 4 processes."""
    ctx = mp.spawn(_worker, args=(free_port(), str(tmp_path), case, world), nprocs=world, join=False)
    try:
        ctx.join(timeout=600)
    except mp.ProcessExitedException:
        pass  # a failing rank exits 1; its error is in its file
    errors = [p.read_text() for p in sorted(tmp_path.glob("err*"))]
    assert not errors, errors
    assert sorted(p.name for p in tmp_path.glob("ok*")) == [f"ok{r}" for r in range(world)]


def test_rules_register_when_dtensor_is_imported_later():
    """Importing the package does not import DTensor (0.65 s); importing DTensor afterwards
    registers the rules."""
    import subprocess
    import sys
    script = ("import sys, cake_rmsnorm\n"
              "from cake_rmsnorm import _sharding\n"
              "print('torch.distributed.tensor' in sys.modules, _sharding.installed)\n"
              "import torch.distributed.tensor\n"
              "print(_sharding.installed)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False", "False", "True"]
