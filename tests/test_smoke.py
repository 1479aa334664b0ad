"""Smoke suite for an installed wheel: import, op registration, the C API, CPU forward and
backward against FP64, the autograd path. Runs without a source tree or a compiler."""

import ctypes
import os

import torch

import cake_rmsnorm as cr


def test_import_and_registration():
    for name in ("fwd", "fwd_residual", "fwd_out", "fwd_residual_out", "bwd", "bwd_out"):
        assert hasattr(torch.ops.cake_rmsnorm, name), name
    assert os.path.isfile(cr.get_library_path())
    assert os.path.isfile(os.path.join(cr.get_include(), "cake_rmsnorm", "cake_rmsnorm.h"))
    assert os.path.isfile(os.path.join(cr.get_include(), "cake_rmsnorm", "cake_rmsnorm.hpp"))


def test_c_api_exports_only_its_own_symbols():
    lib = ctypes.CDLL(cr.get_library_path())
    assert lib.cake_rmsnorm_backward_workspace_bytes
    assert lib.cake_rmsnorm_forward and lib.cake_rmsnorm_backward and lib.cake_rmsnorm_program_windows
    for hidden in ("_ZN4cake3cpu7forward", "rmsnorm_fwd_kernel"):
        assert not hasattr(lib, hidden)


def test_cpu_forward_backward_against_fp64():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(19, 264, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(264, generator=g)).bfloat16()
    gy = torch.randn(19, 264, generator=g).bfloat16()
    y, rstd = cr.cake_rmsnorm_train_forward(x, w, 1e-6)
    xd = x.double()
    rs = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert (y.double() - xd * rs * w.double()).abs().max() < 2e-2
    assert ((rstd.double() - rs.squeeze(-1)).norm() / rs.norm()) < 1e-5
    dx, dw = cr.cake_rmsnorm_train_backward(gy, x, w, rstd)
    xhat, gw = xd * rs, gy.double() * w.double()
    dx_ref = rs * (gw - (gw * xhat).mean(-1, keepdim=True) * xhat)
    dw_ref = (gy.double() * xhat).sum(0)
    assert (dx.double() - dx_ref).abs().max() < 2e-2
    assert ((dw.double() - dw_ref).norm() / dw_ref.norm()) < 1e-4


def test_autograd_path():
    x = torch.randn(8, 64).bfloat16().requires_grad_()
    w = torch.ones(64).bfloat16().requires_grad_()
    y = cr.cake_rmsnorm(x, w, 1e-6)
    y.float().sum().backward()
    assert x.grad.shape == x.shape and w.grad.dtype == torch.bfloat16


def test_one_architecture_list():
    """The shipped architectures come from one list (cake_rmsnorm_archs.h): the library reports
    it, setup.py builds from it, every entry has a window table, and built_archs() is a subset."""
    import os
    import re

    assert cr.SHIPPED_ARCHS == (90, 100, 103, 107)
    assert set(cr.built_archs()) <= set(cr.SHIPPED_ARCHS)
    for sm in cr.SHIPPED_ARCHS:
        assert cr.program_windows("fwd", 4096, sm=sm)["fwd"]
    header = os.path.join(cr.get_include(), "cake_rmsnorm", "cake_rmsnorm_archs.h")
    listed = re.search(r"#define CAKE_RMSNORM_SHIPPED_ARCHS ([0-9, ]+)\n", open(header).read()).group(1)
    assert tuple(int(v) for v in listed.split(",")) == cr.SHIPPED_ARCHS
