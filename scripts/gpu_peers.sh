#!/usr/bin/env bash
# Stage and install the peers (Liger, Quack on CuTe DSL) on the device from wheels carried in parts
# (../shared/BENCH.md: the libs-cu13 wheel is over one call's carry limit). Each call that carries a
# part runs `scripts/gpu_peers.sh stage`: it copies .whl/*/ into $STAGE, outside the working tree.
# The call after the last part runs `source scripts/gpu_peers.sh install`: it joins the parts,
# checks the md5 given in $CU13_MD5, installs into $SITE and exports PYTHONPATH.
STAGE=${STAGE:-/tmp/peer-wheels} SITE=${SITE:-/tmp/peer-site}
mkdir -p "$STAGE"
cp -n .whl/*/* "$STAGE/" 2>/dev/null
if [ "${1:-stage}" = install ]; then
  ls "$STAGE"/cu13part.* >/dev/null 2>&1 && cat "$STAGE"/cu13part.* > "$STAGE/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl"
  [ -z "${CU13_MD5:-}" ] || echo "$CU13_MD5  $STAGE/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl" | md5sum -c -
  mkdir -p "$SITE"
  for w in "$STAGE"/nvidia_cutlass_dsl*.whl; do python3 -m zipfile -e "$w" "$SITE/"; done
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    $(ls "$STAGE"/*.whl | grep -v nvidia_cutlass_dsl)
  export PYTHONPATH="$SITE/nvidia_cutlass_dsl/dsl_packages:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import liger_kernel, quack.rmsnorm; print('peers: liger', liger_kernel.__file__, 'quack ok')"
fi
ls "$STAGE"
