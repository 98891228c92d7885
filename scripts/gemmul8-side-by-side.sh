#!/usr/bin/env bash
# GEMMul8 side by side: cuBLAS DGEMM, ours and GEMMul8 3.0.5 (the INT8 Ozaki-II library
# of Uchino, Ozaki and Imamura; UCHINO-Yuki/GEMMul8 @ f9b626b) in its accurate mode, its
# stock fast mode and a "3.5-style" fast mode (GEMMul8 3.5.0's scale-invariant fast
# shift ported into the 3.0.5 build), timed in ONE Python process on the same CuPy
# operands by scripts/peer_side_by_side.py (its docstring says what is measured and how).
#
#   bash scripts/gemmul8-side-by-side.sh [peer_side_by_side.py options]
#     e.g. --quick  (4096^3 and 8191^3, phi -1, moduli 14-16: a first check)
#          --shapes 4096,8192x2048x8192 --phis -1,1,2 --moduli 13-18   (defaults:
#          shapes 4096,8192,16384,10000,8191, phis -1,1,2, moduli 13-18)
#
# Nothing of GEMMul8 is in this repository. The untracked folder .gemmul8/ (in
# .gitignore) holds, built on the dev machine by .gemmul8/build.sh (.gemmul8/BUILD.txt):
#   lib/libg8sbs_305.so     GEMMul8 3.0.5's DGEMM/INT8 path for sm_90 + an extern "C"
#                           shim (g8_worksize, g8_dgemm, ...), cudart static, cuBLAS and
#                           cuBLASLt 13 by soname (the device's Python nvidia/cu13/lib copies)
#   lib/libg8sbs_35fast.so  the same with the 3.5.0 fast shift (patches/fast-shift-3.5.patch)
#   build/obj/*.o           the objects they were linked from (used here only to relink
#                           with this machine's nvcc if the prebuilt libraries don't load)
#   src/, wrapper/, patches/, build.sh, BUILD.txt   sources and how they were built
# Carry to the device: run(carry=[".gemmul8", ".whl"]) (32 MiB; the parts used are lib/,
# build/obj/ and wrapper/exports.map). .whl/ holds array-api-compat, installed to
# /tmp/ozaki-site as scripts/gpu-check.sh does; this checkout goes first on PYTHONPATH.
#
# Output: the driver's progress and tables, the compact table last; a log in
# $OUT/peer-side-by-side.log and the JSON in $OUT/peer-side-by-side.json (or under
# /tmp/peer-sbs without OUT). Time limit: PEER_SBS_TIMEOUT (default 540 s).
set -uo pipefail
ARGS=("$@")
cd "$(dirname "$0")/.."
G=$PWD/.gemmul8
export OUT=${OUT:-/tmp/peer-sbs}
mkdir -p "$OUT"
LOG=$OUT/peer-side-by-side.log
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
die() { echo "gemmul8-side-by-side: ERROR: $*" | tee -a "$LOG" >&2; exit 2; }
: >"$LOG"

[ -d "$G" ] || die ".gemmul8/ is missing: build it (bash .gemmul8/build.sh) and carry .gemmul8/lib"

# Python packages from .whl/ (array-api-compat), and this checkout first on the path.
wheels=$(ls .whl/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ozaki-site $wheels >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/ozaki-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

LIBDIR=$G/lib
# The prebuilt libraries were linked on the dev machine's image; if they do not load
# here (other system libraries), relink the carried objects with this machine's nvcc
# against the cuBLAS that CuPy uses (seconds).
python3 scripts/peer_side_by_side.py --check-libs --lib-dir "$LIBDIR" >>"$LOG" 2>&1
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then     # 2: no CuPy or no GPU; relinking cannot help
  die "$(grep 'peer_side_by_side: ERROR' "$LOG" | tail -n1)"
fi
if [ "$rc" = 3 ]; then
  echo "prebuilt .gemmul8/lib does not load here ($(grep 'ERROR' "$LOG" | tail -n1)); relinking" | tee -a "$LOG"
  NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -n1)
  [ -n "$NVCC" ] || die "no nvcc here to relink .gemmul8/build/obj"
  [ -s "$G/build/obj/g8sbs_305.o" ] || die ".gemmul8/build/obj is missing (carry it)"
  CUBLAS_DIR=$(python3 scripts/peer_side_by_side.py --print-cublas-dir 2>>"$LOG" | tail -n1)
  [ -n "$CUBLAS_DIR" ] || die "no libcublas.so.13 + libcublasLt.so.13 found"
  LIBDIR=/tmp/g8sbs-lib; mkdir -p "$LIBDIR"
  O=$G/build/obj
  COMMON="$O/gemm_i8_d_d_d.o $O/worksize_real_i8.o $O/block_size_trsm.o $O/mod_hi2mid_real_i8_full.o
          $O/accu_scaling_d_i8_full_nonunit_out_full.o $O/extract_d_i8_full_nonunit.o
          $O/scaling_rowwise_d_i8_full_nonunit_conj0.o $O/undo_scaling_d_i8_full_d_d.o"
  for pair in "libg8sbs_305.so:305" "libg8sbs_35fast.so:350"; do
    name=${pair%%:*} v=${pair##*:}
    timeout -k 5 120 "$NVCC" -gencode arch=compute_90,code=sm_90 -shared -cudart static -o "$LIBDIR/$name" \
      "$O/g8sbs_$v.o" $COMMON "$O/fast_scaling_d_i8_full_nonunit_$v.o" \
      -L"$CUBLAS_DIR" -l:libcublas.so.13 -l:libcublasLt.so.13 -ldl -lpthread -lrt \
      -Xlinker -Bsymbolic -Xlinker --version-script="$G/wrapper/exports.map" >>"$LOG" 2>&1 \
      || die "relinking $name failed (see $LOG)"
  done
  python3 scripts/peer_side_by_side.py --check-libs --lib-dir "$LIBDIR" >>"$LOG" 2>&1 \
    || die "the relinked libraries do not load either (see $LOG)"
fi

# ---- run (one process: cuBLAS, ours and both GEMMul8 builds on the same operands)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv >>"$LOG" 2>&1
echo "== python3 scripts/peer_side_by_side.py --lib-dir $LIBDIR ${ARGS[*]:-}" >>"$LOG"
t0=$(date +%s)
timeout -k 10 "${PEER_SBS_TIMEOUT:-540}" python3 scripts/peer_side_by_side.py --lib-dir "$LIBDIR" "${ARGS[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
echo "== exit $rc after $(( $(date +%s) - t0 )) s (log: $LOG)" | tee -a "$LOG"
case $rc in
  124|137) echo "gemmul8-side-by-side: timed out after ${PEER_SBS_TIMEOUT:-540} s (no table: rerun with fewer shapes or --budget-s)" ;;
esac
exit "$rc"
