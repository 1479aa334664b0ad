#!/usr/bin/env bash
# Stage and install the peers (Liger, Quack on CuTe DSL) on the device from wheels carried in parts
# (../shared/BENCH.md: the libs-cu13 wheel is over one call's carry limit beside the tree). Its
# contents travel as a tar.xz (61 MiB against the wheel's 88) split in parts, cu13xz.part.N. Each
# call that carries a part runs `scripts/gpu_peers.sh stage`: it copies .whl/*/ into $STAGE,
# outside the working tree. The call after the last part runs `source scripts/gpu_peers.sh
# install`: it joins the parts, checks the md5 given in $CU13_MD5, unpacks them into $SITE,
# installs the other wheels there and exports PYTHONPATH (source it in the shell that runs the
# bench, never in a pipeline, whose subshell drops the export; a later call on the same machine
# exports PYTHONPATH="$SITE/nvidia_cutlass_dsl/dsl_packages:$SITE" itself).
STAGE=${STAGE:-/tmp/peer-wheels} SITE=${SITE:-/tmp/peer-site}
mkdir -p "$STAGE"
cp -n .whl/*/* "$STAGE/" 2>/dev/null
if [ "${1:-stage}" = install ]; then
  cat "$STAGE"/cu13xz.part.* > "$STAGE/cu13.tar.xz"
  [ -z "${CU13_MD5:-}" ] || echo "$CU13_MD5  $STAGE/cu13.tar.xz" | md5sum -c -
  mkdir -p "$SITE" && tar -xJf "$STAGE/cu13.tar.xz" -C "$SITE"
  for w in "$STAGE"/nvidia_cutlass_dsl*.whl; do python3 -m zipfile -e "$w" "$SITE/"; done
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    $(ls "$STAGE"/*.whl | grep -v nvidia_cutlass_dsl)
  export PYTHONPATH="$SITE/nvidia_cutlass_dsl/dsl_packages:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import liger_kernel, quack.rmsnorm; print('peers: liger', liger_kernel.__file__, 'quack ok')"
fi
ls "$STAGE"
