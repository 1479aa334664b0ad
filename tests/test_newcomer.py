"""What a newcomer meets: the build's summary, unsupported GPUs refused or served by torch's formula."""

import subprocess
import sys

import pytest
import torch

import cake_rmsnorm as cr
import cake_rmsnorm._lib as lib
import cake_rmsnorm.nn as cnn


def test_build_info_says_how_the_library_was_built():
    info = cr.build_info()
    assert info.startswith(("CUDA ", "CPU-only: ")), info
    assert ("CPU-only" in info) == (cr.built_archs() == ()), (info, cr.built_archs())
    out = subprocess.run([sys.executable, "-m", "cake_rmsnorm", "info"], capture_output=True, text=True, check=True)
    assert f"build: {info}" in out.stdout


@pytest.mark.parametrize("built,cap,match", [
    ((), (9, 0), r"built without CUDA kernels .*pip install --no-build-isolation --force-reinstall"),
    ((90, 100, 103), (8, 0), r"no kernels for NVIDIA A100 \(sm_80\); it was built for sm_90a, sm_100a, sm_103a"),
    ((90, 100, 103), (9, 0), None),
])
def test_cuda_refusal_names_the_device_and_the_build(monkeypatch, built, cap, match):
    monkeypatch.setattr(lib, "built_archs", lambda: built)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA A100")
    monkeypatch.setattr(lib, "_ARCH_OK", {})
    why = lib.cuda_refusal(0)
    if match is None:
        assert why is None
    else:
        assert why is not None and __import__("re").search(match, why), why


def test_module_falls_back_to_torch_with_one_warning(monkeypatch):
    """An unsupported GPU, simulated: the kernels refuse, the module runs torch's formula and
    warns once for the device."""
    def refuse(*a, **k):
        raise RuntimeError("cake_rmsnorm forward: the GPU's architecture is not among the library's built ones")
    monkeypatch.setattr(cnn, "apply", refuse)
    monkeypatch.setattr(cnn, "_kernel_refusal", lambda x: "cake_rmsnorm has no kernels for NVIDIA A100 (sm_80)")
    monkeypatch.setattr(cnn, "_WARNED", set())
    m = cr.RMSNorm(64, eps=1e-6)
    x = torch.randn(3, 64)
    with pytest.warns(UserWarning, match="runs torch's formula"):
        y = m(x)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (64,), m.weight, 1e-6))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)  # no second warning for the same device


def test_other_runtime_errors_are_not_swallowed(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("something else")
    monkeypatch.setattr(cnn, "apply", broken)
    with pytest.raises(RuntimeError, match="something else"):
        cr.RMSNorm(64)(torch.randn(2, 64))
