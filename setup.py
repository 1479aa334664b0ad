"""Builds cake_rmsnorm._C ahead of time: one library with the C API, the torch ops (LibTorch
stable ABI) and, when nvcc is found, fatbins for every shipped architecture.

Knobs (environment):
  CAKE_CUDA_ARCHS   semicolon list of archs to build, default every shipped one ("90a;100a;103a;107a",
                    csrc/include/cake_rmsnorm/cake_rmsnorm_archs.h) wherever a CUDA toolkit is found,
                    with or without a visible GPU. An arch the installed nvcc does not list is skipped,
                    and said so
  CAKE_FORCE_CPU=1  build the CPU-only library even when nvcc exists
  MAX_JOBS          parallel compiler jobs (torch's ninja build honours it)
  NVCC_THREADS      nvcc --threads per job (default 1)
  CAKE_DEFINES      semicolon list of NAME or NAME=VALUE compile definitions for every unit: how an
                    A/B variant is built (a flag the sources read), never by editing them; named in
                    the build's summary
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()


def shipped_archs():
    """The shipped sm numbers, from the one list the library and Python share."""
    text = (ROOT / "csrc" / "include" / "cake_rmsnorm" / "cake_rmsnorm_archs.h").read_text()
    m = re.search(r"#define CAKE_RMSNORM_SHIPPED_ARCHS ([0-9, ]+)\n", text)
    return [int(v) for v in m.group(1).split(",")]


SHIPPED_ARCHS = shipped_archs()
DEFAULT_ARCHS = ";".join(f"{sm}a" for sm in SHIPPED_ARCHS)
ARCH_BITS = {f"{sm}a": bit for bit, sm in enumerate(SHIPPED_ARCHS)}  # cake_rmsnorm_built_archs() order
# Stable-ABI level the sources compile against: the oldest torch the library runs on.
TORCH_TARGET_VERSION = "0x020a000000000000"  # 2.10


def log(msg):
    print(f"[cake-rmsnorm build] {msg}", file=sys.stderr, flush=True)


def read_version():
    text = (ROOT / "python" / "cake_rmsnorm" / "_version.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def _toolkit_of(nvcc):
    """(toolkit root, directory of libcudart_static.a) of an nvcc, which may be a wrapper script
    or a link outside its toolkit: nvcc's own dry run prints where it lives (TOP) and the
    library directories it links from (LIBRARIES)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.cu"
        src.write_text("")
        out = subprocess.run([nvcc, "--dryrun", "-c", str(src), "-o", str(Path(d) / "probe.o")],
                             capture_output=True, text=True)
    text = out.stdout + out.stderr
    top = re.search(r"^#\$ TOP=(.+)$", text, re.M)
    root = Path(top.group(1).strip()).resolve() if top else Path(nvcc).resolve().parent.parent
    dirs = [root / "lib64", root / "lib"]
    libs = re.search(r"^#\$ LIBRARIES=(.+)$", text, re.M)
    if libs:
        dirs += [Path(m).resolve() for m in re.findall(r'-L"?([^" ]+)"?', libs.group(1))]
    lib = next((d for d in dirs if (d / "libcudart_static.a").exists()), None)
    return root, lib


def find_nvcc():
    """(nvcc, toolkit root, libcudart_static directory), or None for a CPU-only build. Looks at
    CUDA_HOME / CUDA_PATH, then nvcc on PATH, then /usr/local/cuda, and says what it found."""
    if os.environ.get("CAKE_FORCE_CPU") == "1":
        log("CAKE_FORCE_CPU=1: building the CPU-only library")
        return None
    candidates = []
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        candidates.append(Path(home) / "bin" / "nvcc")
    if shutil.which("nvcc"):
        candidates.append(Path(shutil.which("nvcc")))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for nvcc in candidates:
        if not nvcc.exists():
            continue
        root, lib = _toolkit_of(str(nvcc))
        if lib is None:
            log(f"nvcc {nvcc}: toolkit {root} has no libcudart_static.a; not used")
            continue
        log(f"CUDA toolkit {root} (nvcc {nvcc}, libcudart_static in {lib})")
        return str(nvcc), root, lib
    log("no CUDA toolkit found (CUDA_HOME, nvcc on PATH, /usr/local/cuda): building the CPU-only library")
    return None


def nvcc_info(nvcc):
    listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", version)
    return set(listed), (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def cuda_archs(nvcc):
    listed, version = nvcc_info(nvcc)
    wanted = [a.strip() for a in os.environ.get("CAKE_CUDA_ARCHS", DEFAULT_ARCHS).split(";") if a.strip()]
    archs = []
    for arch in wanted:
        if arch not in ARCH_BITS:
            raise SystemExit(f"CAKE_CUDA_ARCHS: unknown arch {arch!r}; choose from {sorted(ARCH_BITS)}")
        if f"compute_{arch.rstrip('a')}" not in listed:
            log(f"sm_{arch} skipped: nvcc {version[0]}.{version[1]} does not list compute_{arch.rstrip('a')}")
            continue
        archs.append(arch)
    return archs, version


def ab_defines():
    """CAKE_DEFINES as -D flags (an A/B build's variant), checked so a typo fails the build."""
    out = []
    for d in (v.strip() for v in os.environ.get("CAKE_DEFINES", "").split(";")):
        if not d:
            continue
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?", d):
            raise SystemExit(f"CAKE_DEFINES: {d!r} is not NAME or NAME=VALUE")
        out.append(f"-D{d}")
    return out


def write_build_info(summary):
    """The build's one-line summary as a generated header (build/gen): the library returns it
    (cake_rmsnorm_build_info) and `python -m cake_rmsnorm info` prints it, so it reaches the user
    even through pip's quiet output."""
    gen = ROOT / "build" / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    if ab_defines():
        summary += f" with {' '.join(ab_defines())}"
    text = summary.replace("\\", "/").replace('"', "'")
    header = gen / "cake_rmsnorm_build_info.h"
    content = f'#pragma once\n#define CAKE_BUILD_SUMMARY "{text}"\n'
    if not header.exists() or header.read_text() != content:
        header.write_text(content)
    log(summary)
    return str(gen)


def make_extension():
    # CppExtension even with CUDA sources: torch's BuildExtension compiles the .cu files with
    # nvcc either way, and CUDAExtension would link libcudart.so, libc10_cuda and libtorch_cuda,
    # which a CPU-only torch does not have. The library links the CUDA runtime statically and
    # looks torch's CUDA stream accessor up at run time, so one wheel loads under any torch
    # >= 2.10, CPU builds included (docs/packaging.md).
    from torch.utils.cpp_extension import CppExtension

    cxx = [
        "-O3",
        "-fvisibility=hidden",
        "-ffp-contract=off",  # the CPU path rounds every product: same bits on every host
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
    ] + ab_defines()
    include_dirs = [str(ROOT / "csrc" / "include")]
    link_args = [f"-Wl,--version-script={ROOT / 'csrc' / 'api' / 'exports.map'}"]
    sources = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "csrc" / "api").glob("*.cpp"))]
    sources += ["csrc/torch/ops.cpp", "csrc/torch/shims.cpp"]

    # CUDA wherever a toolkit is found, with or without a visible GPU (a cluster's login node
    # builds for its GPU nodes); CPU-only without one, or with CAKE_FORCE_CPU=1.
    found = find_nvcc()
    nvcc = found[0] if found else None
    archs, version = cuda_archs(nvcc) if nvcc else ([], (0, 0))
    if not archs:
        if os.environ.get("CAKE_FORCE_CPU") == "1":
            why = "CAKE_FORCE_CPU=1"
        elif nvcc:
            why = f"nvcc {version[0]}.{version[1]} lists none of the requested architectures"
        else:
            why = "no CUDA toolkit found (CUDA_HOME, nvcc on PATH, /usr/local/cuda)"
        include_dirs.append(write_build_info(f"CPU-only: {why}"))
        return CppExtension(
            "cake_rmsnorm._C", sources, include_dirs=include_dirs, py_limited_api=True,
            extra_compile_args={"cxx": cxx + ["-DCAKE_WITH_CUDA=0"]}, extra_link_args=link_args,
        ), None
    include_dirs.append(write_build_info(
        f"CUDA {version[0]}.{version[1]} (nvcc {nvcc}) for {', '.join('sm_' + a for a in archs)}"))

    # torch's BuildExtension takes nvcc from its CUDA_HOME, read when torch.utils.cpp_extension
    # was imported (from the wrapper's folder when nvcc on PATH is a script): set both.
    import torch.utils.cpp_extension as cpp_ext
    cuda_home = str(found[1])
    os.environ["CUDA_HOME"] = cuda_home
    cpp_ext.CUDA_HOME = cuda_home
    mask = sum(1 << ARCH_BITS[a] for a in archs)
    log(f"building CUDA for {', '.join('sm_' + a for a in archs)} with nvcc {version[0]}.{version[1]}")
    gencode = []
    for a in archs:
        gencode += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    nvcc_flags = [
        "-O3",
        "-DCAKE_WITH_CUDA=1",
        "--threads", os.environ.get("NVCC_THREADS", "1"),
        "-Xcompiler", "-fvisibility=hidden",
        # IEEE division and square root, no flush-to-zero: the numerics contract.
        "--prec-div=true", "--prec-sqrt=true", "--ftz=false",
    ] + ab_defines() + gencode
    sources += ["csrc/torch/ops_cuda.cpp"]
    sources += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "csrc" / "api").glob("*.cu"))]
    # One unit a (direction, dtype, VPT) of the 16-bit kernels (scripts/gen_instances.py).
    sources += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "csrc" / "api" / "gen").glob("*.cu"))]
    ext = CppExtension(
        "cake_rmsnorm._C", sources, include_dirs=include_dirs, py_limited_api=True,
        library_dirs=[str(found[2])],
        libraries=["cudart_static", "rt", "dl", "pthread"],
        extra_compile_args={
            "cxx": cxx + ["-DCAKE_WITH_CUDA=1", f"-DCAKE_BUILT_ARCH_MASK={mask}u"],
            "nvcc": nvcc_flags,
        },
        extra_link_args=link_args,
    )
    return ext, version


class BuildPyWithHeaders(build_py):
    """Ships the public C/C++ headers inside the package (cake_rmsnorm.get_include()) and stamps
    the full version, local tag included, into the built package's _version.py."""

    full_version = None

    def run(self):
        super().run()
        if self.full_version:
            (Path(self.build_lib) / "cake_rmsnorm" / "_version.py").write_text(
                f'__version__ = "{self.full_version}"\n')
        dst = Path(self.build_lib) / "cake_rmsnorm" / "include" / "cake_rmsnorm"
        dst.mkdir(parents=True, exist_ok=True)
        for header in sorted((ROOT / "csrc" / "include" / "cake_rmsnorm").glob("*.h*")):
            shutil.copy2(header, dst / header.name)


def main():
    from torch.utils.cpp_extension import BuildExtension

    ext, cuda_version = make_extension()
    from torch.utils.cpp_extension import CppExtension
    # The direct binding (csrc/torch/direct.cpp): a Python module of its own, so the C API's
    # library references no Python symbol; it calls _C's exported C API.
    direct = CppExtension(
        "cake_rmsnorm._direct", ["csrc/torch/direct.cpp"], include_dirs=[str(ROOT / "csrc" / "include")],
        py_limited_api=True,
        extra_compile_args={"cxx": ["-O3", "-fvisibility=hidden", f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}"]},
        extra_link_args=[f"-Wl,--version-script={ROOT / 'csrc' / 'torch' / 'direct.map'}"])
    local = f"cu{cuda_version[0]}{cuda_version[1]}" if cuda_version else "cpu"
    BuildPyWithHeaders.full_version = f"{read_version()}+{local}"
    setup(
        name="cake-rmsnorm",
        version=BuildPyWithHeaders.full_version,
        package_dir={"": "python"},
        packages=find_packages("python"),
        ext_modules=[ext, direct],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "build_py": BuildPyWithHeaders},
        options={"bdist_wheel": {"py_limited_api": "cp39"}},
        python_requires=">=3.9",
        install_requires=["torch>=2.10"],
        # What the test suite needs (nothing in it skips for a missing package with these), and
        # the benchmark's plot.
        # (timm: transformers' Gemma3n builds its vision tower with it).
        extras_require={"test": ["pytest", "pytest-xdist", "numpy", "hypothesis", "transformers", "expecttest", "timm"],
                        "bench": ["matplotlib"]},
        zip_safe=False,
    )


if __name__ == "__main__":
    main()
