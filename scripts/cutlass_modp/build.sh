#!/usr/bin/env bash
# Build the probe's shared library. CUTLASS's headers from the nvidia-cutlass wheel
# (CUTLASS_DIR: its cutlass_library/source; on the device, the wheel installed by
# gpu-check.sh into /tmp/ozaki-site). About a minute on one core.
set -euo pipefail
cd "$(dirname "$0")"
INC=${CUTLASS_DIR:-/tmp/ozaki-site/cutlass_library/source}
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -Xcompiler -fPIC -shared -I"$INC/include" -I"$INC/tools/util/include" -Xptxas -v \
  -o liboz_cutlass_modp.so modp_gemm.cu 2>&1 | grep -E "error|registers|spill" || true
test -f liboz_cutlass_modp.so
