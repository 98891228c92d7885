#!/usr/bin/env bash
# Compile-check every kernel with nvcc for sm_90, as NVRTC will see it (includes inlined,
# the CRT prelude generated for each moduli count given), and print ptxas's resource
# report (registers, stack frame, spills). No GPU needed. The fused product kernel
# (modprod.cu) is built for sm_90a at both tile widths; where cuobjdump exists (the
# device machine) its SASS is searched for the matrix and bulk-copy instructions.
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
for name in ("scaling.cu", "residues.cu", "modgemm.cu", "certificate.cu"):
    open(f"{out}/{name}", "w").write(read_source(name))
# The complex scheme's kernels as cuda/complex.py compiles them: complex.cu with the
# complex table's prelude, scaling.cu with COMPLEX_TABLE.defines, crt.cu with both
# preludes (oz_cx_crt).
from ozaki_backend.cuda._common import COMPLEX_TABLE
from ozaki_backend.cuda._prelude import complex_crt_prelude, complex_table_prelude
open(f"{out}/complex.cu", "w").write(complex_table_prelude() + read_source("complex.cu"))
defs = "".join("#define " + d.replace("=", " ") + "\n" for d in COMPLEX_TABLE.defines)
open(f"{out}/scaling_complex.cu", "w").write(defs + read_source("scaling.cu"))
for n in (2, 16, 22):
    open(f"{out}/crt_complex_N{n}.cu", "w").write(
        complex_table_prelude() + complex_crt_prelude(n) + read_source("crt.cu"))
for n in ns:
    open(f"{out}/crt_N{n}.cu", "w").write(crt_prelude(n) + read_source("crt.cu"))
open(f"{out}/modprod.src", "w").write(read_source("modprod.cu"))
PY
for f in "$out"/*.cu; do
  echo "== $(basename "$f")"
  nvcc -arch=sm_90 -std=c++17 -Xptxas -v -c "$f" -o "${f%.cu}.o" 2>&1 \
    | grep -E "error|warning|Compiling entry|Used|spill|stack" | sed -E 's/ptxas info *: //'
done
for cfg in "128 3 2" "256 4 1"; do
  set -- $cfg
  echo "== modprod.cu (sm_90a, OZ_BN=$1, OZ_STAGES=$2, OZ_MIN_BLOCKS=$3)"
  cp "$out/modprod.src" "$out/modprod_$1.cu"
  nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -DOZ_BN=$1 -DOZ_STAGES=$2 -DOZ_MIN_BLOCKS=$3 \
    -cubin "$out/modprod_$1.cu" -o "$out/modprod_$1.cubin" 2>&1 \
    | grep -E "error|warning|Used|spill|stack" | sed -E 's/ptxas info *: //'
  if command -v cuobjdump >/dev/null; then
    cuobjdump -sass "$out/modprod_$1.cubin" | grep -oE "(IGMMA|HGMMA|IMMA|UTMALDG|UTMASTG|SYNCS)[A-Z0-9_.x]*" \
      | sort | uniq -c
  fi
done
# phase22.cu (scheme="phase22") with its generated prelude (ozaki_backend/cuda/_prelude.py).
python3 -c 'import sys
from ozaki_backend.cuda.loader import read_source
from ozaki_backend.cuda._prelude import phase22_prelude
open(sys.argv[1], "w").write(phase22_prelude() + read_source("phase22.cu"))' "$out/phase22.cu"
echo "== phase22.cu"
nvcc -arch=sm_90 -std=c++17 -Xptxas -v -c "$out/phase22.cu" -o "$out/phase22.o" 2>&1 \
  | grep -E "error|warning|Compiling entry|Used|spill|stack" | sed -E 's/ptxas info *: //'
