#!/usr/bin/env bash
# Compile-check every kernel with nvcc for sm_90, as NVRTC will see it (includes inlined,
# the CRT prelude generated for each moduli count given), and print ptxas's resource
# report (registers, stack frame, spills). No GPU needed.
#   scripts/compile-kernels.sh [N ...]      (default N: 2 8 16 20)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-/tmp/ozaki-kernels}
mkdir -p "$out"; rm -f "$out"/*.cu "$out"/*.o
ns=("$@"); [ ${#ns[@]} -eq 0 ] && ns=(2 8 16 20)
python3 - "$out" "${ns[@]}" <<'PY'
import sys
from ozaki_backend.cuda.loader import read_source
from ozaki_backend.cuda._prelude import crt_prelude
out, ns = sys.argv[1], [int(x) for x in sys.argv[2:]]
for name in ("scaling.cu", "residues.cu", "modgemm.cu"):
    open(f"{out}/{name}", "w").write(read_source(name))
for n in ns:
    open(f"{out}/crt_N{n}.cu", "w").write(crt_prelude(n) + read_source("crt.cu"))
PY
for f in "$out"/*.cu; do
  echo "== $(basename "$f")"
  nvcc -arch=sm_90 -std=c++17 -Xptxas -v -c "$f" -o "${f%.cu}.o" 2>&1 \
    | grep -E "error|warning|Compiling entry|Used|spill|stack" | sed -E 's/ptxas info *: //'
done
