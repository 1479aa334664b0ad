#!/usr/bin/env bash
# Builds and runs the C and LibTorch consumers against the installed cake_rmsnorm, with plain
# compiler lines (the paths come from cake_rmsnorm.get_include() / get_library_path()).
#   tests/cpp/build_and_run.sh            CPU path (what CI runs)
#   CUDA=1 tests/cpp/build_and_run.sh     also the GPU path of the C consumer (needs nvcc's toolkit)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
eval "$(python - <<'PY'
import os, torch, cake_rmsnorm as cr
lib = cr.get_library_path()
print(f"INC={cr.get_include()}")
print(f"LIBDIR={os.path.dirname(lib)}")
print(f"LIBNAME={os.path.basename(lib)}")
print(f"TORCH_LIB={os.path.join(os.path.dirname(torch.__file__), 'lib')}")
print(f"TORCH_INC={os.path.join(os.path.dirname(torch.__file__), 'include')}")
PY
)"
rpath="-Wl,-rpath,$LIBDIR -Wl,-rpath,$TORCH_LIB"
link="-L$LIBDIR -l:$LIBNAME -L$TORCH_LIB -ltorch_cpu -lc10"

cc -O2 -std=c11 -I"$INC" "$here/consumer.c" -o "$out/consumer_c" -Wl,--no-as-needed $link $rpath -lm
"$out/consumer_c"

if [ "${CUDA:-0}" = 1 ]; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  cc -O2 -std=c11 -DCAKE_TEST_CUDA -I"$INC" -I"$cuda/include" "$here/consumer.c" -o "$out/consumer_cuda" \
    -Wl,--no-as-needed $link -L"$cuda/lib64" -lcudart $rpath -Wl,-rpath,"$cuda/lib64" -lm
  "$out/consumer_cuda"
fi

c++ -O1 -std=c++20 -I"$INC" -I"$TORCH_INC" -I"$TORCH_INC/torch/csrc/api/include" "$here/consumer_torch.cpp" \
  -o "$out/consumer_torch" -Wl,--no-as-needed $link $rpath
"$out/consumer_torch"
