#!/usr/bin/env bash
# cibuildwheel before-build (and CI): torch and the build tools in the build environment; the
# wheel is then built without isolation against this torch. CAKE_TORCH_INDEX selects a wheel
# index (e.g. the CUDA 13.0 one); plain pip otherwise.
set -euo pipefail
TORCH_VERSION=${CAKE_TORCH_VERSION:-2.14.1}
if [ -n "${CAKE_TORCH_INDEX:-}" ]; then
  python -m pip install -q --no-compile --index-url "$CAKE_TORCH_INDEX" "torch==$TORCH_VERSION"
else
  python -m pip install -q --no-compile "torch==$TORCH_VERSION"
fi
python -m pip install -q "setuptools>=64" wheel ninja build numpy
python -c "import torch; print('install_build_deps: torch', torch.__version__)"
