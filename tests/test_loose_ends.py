"""What a user meets at the edges of the API: each call either works as documented or refuses by
name (docs/python_api.md)."""

import warnings

import pytest
import torch
from torch import nn

import cake_rmsnorm as cr


def test_from_module_takes_a_torch_rmsnorm_as_it_is():
    src = nn.RMSNorm(64)
    new = cr.RMSNorm.from_module(src)
    assert new.weight is src.weight and new.eps is None and new.zero_centered is False
    x = torch.randn(3, 64)
    torch.testing.assert_close(new(x), src(x))
    assert cr.RMSNorm.from_module(nn.RMSNorm(64, eps=1e-5)).eps == 1e-5


def test_from_module_probes_other_modules():
    class Gemma(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(32) * 0.1)
            self.eps = 1e-6

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)

    new = cr.RMSNorm.from_module(Gemma())
    assert new.zero_centered is True and new.eps == 1e-6

    class NotANorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(32))
            self.eps = 1e-6

        def forward(self, x):
            return x * self.weight

    with pytest.raises(ValueError, match="does not compute an RMSNorm"):
        cr.RMSNorm.from_module(NotANorm())
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        cr.RMSNorm.from_module(3)


def test_unpatch_names_a_wrong_report():
    model = nn.Sequential(nn.Linear(8, 8), nn.RMSNorm(8))
    with pytest.raises(TypeError, match="report must be the PatchReport"):
        cr.unpatch(model, "report")
    report = cr.patch(model)
    cr.unpatch(model, report)
    assert type(model[1]) is nn.RMSNorm


def test_probe_norm_takes_a_torch_rmsnorm():
    assert cr.probe_norm(nn.RMSNorm(64)) == (False, "")
    assert cr.probe_norm(nn.RMSNorm((4, 16), eps=1e-5)) == (False, "")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-device message")
def test_launch_plan_without_a_device_names_itself():
    with pytest.raises(ValueError, match="^launch_plan: no CUDA device"):
        cr.launch_plan("fwd", 512, 1, sms=132)
    with pytest.raises(ValueError, match="^program_windows: no CUDA device"):
        cr.program_windows("fwd", 512)


def test_weight_dtypes_checks_its_device():
    assert cr.weight_dtypes(64, "cpu") == cr.weight_dtypes(64) == (torch.bfloat16, torch.float16, torch.float32)
    assert cr.weight_dtypes(60) == ()
    with pytest.raises(ValueError, match="device must be a CPU or CUDA device"):
        cr.weight_dtypes(64, "meta")
    with pytest.raises(TypeError, match="device must be"):
        cr.weight_dtypes(64, 3.5)


def test_sequence_parallel_backward_warns_nothing():
    """Its all-gather takes torch's current collective (all_gather_single where torch has it), so a
    call raises no FutureWarning; world size 1 on gloo, in this process."""
    import os

    import torch.distributed as dist
    from procs import free_port

    from cake_rmsnorm.sequence_parallel import sequence_parallel_backward

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        x, g = torch.randn(16, 64).bfloat16(), torch.randn(16, 64).bfloat16()
        w = torch.ones(64, dtype=torch.bfloat16)
        y, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            dx, dw = sequence_parallel_backward(g, x, w, rstd)
        assert not [w for w in seen if issubclass(w.category, FutureWarning)], [str(w.message) for w in seen]
        want_dx, want_dw = cr.cake_rmsnorm_train_backward(g, x, w, rstd)
        assert torch.equal(dx, want_dx) and torch.equal(dw, want_dw)
    finally:
        dist.destroy_process_group()


def test_a_width_the_kernels_do_not_take_says_so_once():
    """patch() keeps serving a width that is not a multiple of 8 with torch's formula, and says
    so: in its report and in one warning at patch time, not again at each module's first call."""
    model = nn.Sequential(nn.Linear(60, 60), nn.RMSNorm(60), nn.Linear(64, 64), nn.RMSNorm(64))
    with pytest.warns(UserWarning, match=r"1 of them run torch's eager formula.*'?1'? \(width 60 is not a multiple of 8"):
        report = cr.patch(model)
    assert [p for p, _ in report.replaced] == ["1", "3"]
    assert [p for p, _, _ in report.fallback] == ["1"] and [p for p, _ in report.served] == ["3"]
    x = torch.randn(2, 60, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = model[1](x)  # said once, by patch()
        model[1](x)
        model[3](torch.randn(2, 64, dtype=torch.bfloat16))  # served: nothing to say
    torch.testing.assert_close(y, nn.functional.rms_norm(x.float(), (60,), model[1].weight.float()).bfloat16())


def test_every_fallback_names_its_reason():
    m = cr.RMSNorm(64)
    with pytest.warns(UserWarning, match="torch.float64 activations"):
        m(torch.randn(2, 64, dtype=torch.float64))
    with pytest.warns(UserWarning, match="a torch.float16 residual with torch.bfloat16 x"):
        m.bfloat16()(torch.randn(2, 64, dtype=torch.bfloat16), torch.randn(2, 64, dtype=torch.float16))
