#!/usr/bin/env bash
# cibuildwheel before-all: the CUDA 13.0 compiler and runtime headers/static runtime inside the
# manylinux_2_28 (AlmaLinux 8) image. A machine that already has nvcc (CUDA_HOME or PATH) keeps
# it and this script only reports it, so it runs anywhere.
set -euo pipefail
CUDA_VERSION=${CAKE_CUDA_VERSION:-13.0}
home=${CUDA_HOME:-/usr/local/cuda}
if [ -x "$home/bin/nvcc" ] || command -v nvcc >/dev/null 2>&1; then
  nvcc_bin=$( [ -x "$home/bin/nvcc" ] && echo "$home/bin/nvcc" || command -v nvcc )
  echo "install_cuda: using $($nvcc_bin --version | grep release)"
  exit 0
fi
if ! command -v dnf >/dev/null 2>&1; then
  echo "install_cuda: no nvcc and no dnf: install the CUDA $CUDA_VERSION toolkit by hand" >&2
  exit 1
fi
pkg=${CUDA_VERSION/./-}
dnf install -y dnf-plugins-core
dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo"
# The compiler, the runtime headers and static runtime (the library links cudart statically).
dnf install -y "cuda-nvcc-$pkg" "cuda-cudart-devel-$pkg" "cuda-crt-$pkg" "cuda-nvvm-$pkg"
ln -sfn "/usr/local/cuda-$CUDA_VERSION" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
