#!/usr/bin/env bash
# GEMMul8 side by side: run GEMMul8's own DGEMM benchmark (the INT8 Ozaki-II library
# by RIKEN R-CCS, v2.0.14, GitHub RIKEN-RCCS/GEMMul8) on the GPU machine, in
# the same device call as our bench, so that both see the same GPU, driver and cuBLAS.
#
#   bash scripts/gemmul8-side-by-side.sh [driver options]
#     e.g. --sizes 4096,8192,16384 --phis -1,0.5,1 --moduli 12-20 --modes fast,accu
#          --warmup 3 --reps 10 --oz1 0|1   (these are the defaults, except --oz1 0)
#
# Nothing of GEMMul8 is in this repository. The untracked folder .gemmul8/ (listed in
# .git/info/exclude, carried to the device with run(carry=[".gemmul8"])) holds:
#   build/libgemmul8.a        GEMMul8's src/gemmul8.cu, compiled on the dev machine
#                             (nvcc 13.0, -gencode arch=compute_90,code=sm_90, cuBLAS 13.1 headers)
#   build/sbs_flops.o         bench/sbs_flops.cu: GEMMul8's testing/test_flops.hpp for DGEMM
#   build/sbs_flops_nooz1.o   with the sweep made configurable (same without cuBLAS Ozaki-I)
#   bin/sbs_flops             the same, linked on the dev machine (fallback when nvcc is absent)
#   src/, bench/, BUILD.txt   the sources these were built from, and how
# Here the objects are linked with the device's nvcc against the device's cuBLAS/cuBLASLt
# (searched for in the CUDA toolkit, the system and Python's nvidia-* wheels), then run
# under `timeout`. Raw output goes to $OUT/gemmul8.log (or /tmp/gemmul8-sbs/ without OUT);
# a compact table is printed last: one row per (n, mode, moduli) with TFLOPS (timed at the
# first phi only) and, for every phi, max/median relative error against the testing
# program's double-double reference.
#
# Time limits: GEMMUL8_LINK_TIMEOUT (default 60 s), GEMMUL8_RUN_TIMEOUT (default 200 s).
set -uo pipefail
cd "$(dirname "$0")/.."
G=$PWD/.gemmul8
LOGDIR=${OUT:-/tmp/gemmul8-sbs}
mkdir -p "$LOGDIR"
LOG=$LOGDIR/gemmul8.log
WORK=$(mktemp -d /tmp/gemmul8-sbs.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
die() { echo "gemmul8-side-by-side: ERROR: $*" | tee -a "$LOG" >&2; exit 2; }
: >"$LOG"

[ -d "$G" ] || die ".gemmul8/ is missing: carry it to the device (run(carry=[\".gemmul8\"]))"
for f in build/libgemmul8.a build/sbs_flops.o build/sbs_flops_nooz1.o; do
  [ -s "$G/$f" ] || die ".gemmul8/$f is missing (rebuild it on the dev machine)"
done

# ---- find the tools and libraries
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do [ -x "$c" ] && NVCC=$c && break; done
PYSITES=$(python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null || true)
libdirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda-*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
  [ -d "$d" ] && libdirs+=("$d")
done
while IFS= read -r s; do
  [ -n "$s" ] || continue
  for d in "$s"/nvidia/cu13/lib "$s"/nvidia/cublas/lib "$s"/nvidia/curand/lib "$s"/nvidia/*/lib; do
    [ -d "$d" ] && libdirs+=("$d")
  done
done <<<"$PYSITES"
mapfile -t libdirs < <(printf '%s\n' "${libdirs[@]}" | xargs -r -n1 readlink -f | awk '!seen[$0]++')

{
  echo "== gemmul8-side-by-side $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  else
    echo "nvidia-smi: not found"
  fi
  echo "nvcc: ${NVCC:-not found}"; [ -n "$NVCC" ] && "$NVCC" --version | tail -n 2
  echo "libraries found:"
  for d in "${libdirs[@]}"; do
    for pat in 'libcublas.so*' 'libcublasLt.so*' 'libcurand.so*' 'libnvidia-ml.so*' 'libcudart.so*'; do
      for f in "$d"/$pat; do [ -e "$f" ] && echo "  $f"; done
    done
  done
} 2>&1 | tee -a "$LOG"

# cuBLAS: prefer a directory whose libcublas has the cuBLAS >= 13.1 FP64-emulation API
# (then the driver can also time cuBLAS's Ozaki-I with --oz1 1), and libcublasLt beside it.
CUBLAS_DIR="" OBJ=sbs_flops_nooz1.o
for d in "${libdirs[@]}"; do
  if [ -e "$d/libcublas.so.13" ] && [ -e "$d/libcublasLt.so.13" ] &&
     grep -q cublasSetFixedPointEmulationMantissaControl "$d/libcublas.so.13"; then
    CUBLAS_DIR=$d OBJ=sbs_flops.o; break
  fi
done
if [ -z "$CUBLAS_DIR" ]; then
  for d in "${libdirs[@]}"; do
    [ -e "$d/libcublas.so.13" ] && [ -e "$d/libcublasLt.so.13" ] && CUBLAS_DIR=$d && break
  done
fi
[ -n "$CUBLAS_DIR" ] || die "no libcublas.so.13 + libcublasLt.so.13 found in: ${libdirs[*]}"
echo "using cuBLAS from $CUBLAS_DIR ($OBJ)" | tee -a "$LOG"
export LD_LIBRARY_PATH=$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- link (seconds; the device code was compiled on the dev machine)
BIN=$WORK/sbs_flops
if [ -n "$NVCC" ]; then
  timeout -k 5 "${GEMMUL8_LINK_TIMEOUT:-60}" "$NVCC" -gencode arch=compute_90,code=sm_90 -o "$BIN" \
    "$G/build/$OBJ" "$G/build/libgemmul8.a" -L"$CUBLAS_DIR" -l:libcublas.so.13 -l:libcublasLt.so.13 \
    -ldl -Xlinker -rpath="$CUBLAS_DIR" >>"$LOG" 2>&1 || { echo "link with $NVCC failed (see log)" | tee -a "$LOG"; BIN=""; }
else
  BIN=""
fi
if [ -z "$BIN" ]; then
  [ -f "$G/bin/sbs_flops" ] && chmod +x "$G/bin/sbs_flops" 2>/dev/null
  [ -x "$G/bin/sbs_flops" ] || die "cannot link (no nvcc or link failed) and no prebuilt .gemmul8/bin/sbs_flops"
  BIN=$G/bin/sbs_flops
  echo "using the prebuilt $BIN" | tee -a "$LOG"
fi
missing=$(ldd "$BIN" 2>/dev/null | grep "not found" || true)
[ -z "$missing" ] || die "unresolved libraries for $BIN: $missing"

# ---- run
echo "== $BIN $*" >>"$LOG"
t0=$(date +%s)
timeout -k 10 "${GEMMUL8_RUN_TIMEOUT:-200}" "$BIN" "$@" >>"$LOG" 2>&1
rc=$?
echo "== exit $rc after $(( $(date +%s) - t0 )) s" >>"$LOG"
case $rc in
  0) ;;
  124|137) echo "gemmul8-side-by-side: timed out after ${GEMMUL8_RUN_TIMEOUT:-200} s; partial table below" ;;
  *) echo "gemmul8-side-by-side: the benchmark failed (exit $rc); its last lines:"
     sed -n '/^== .*sbs_flops/,$p' "$LOG" | grep -v '^[-0-9]' | tail -n 12 ;;
esac

# ---- compact table last
echo "==== GEMMul8 v2.0.14 INT8 DGEMM emulation (full log: $LOG)"
grep '^# ' "$LOG"
# one row per (n, mode, moduli); TFLOPS from the timed (first) phi, errors for every phi
awk -F, '
  $1 ~ /^-?[0-9.e+-]+$/ && NF >= 8 {
    fn = $5; mode = fn; mod = "-"
    if (fn ~ /^OS2-/) { split(fn, p, "-"); mode = "gemmul8-" p[2]; mod = p[3] }
    else if (fn ~ /^Oz1-/) { split(fn, p, "-"); mode = "cublas-ozaki1"; mod = p[2] "sl" }
    else if (fn == "DGEMM") mode = "native-dgemm"
    key = $2 SUBSEP mode SUBSEP mod
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
    phi = $1 + 0
    if (!(phi in hasphi)) { hasphi[phi] = 1; phis[++np] = phi }
    if ($8 != "") tf[key] = sprintf("%.1f", $8)
    emax[key, phi] = $6; emed[key, phi] = $7
  }
  END {
    if (!nk) { print "(no results)"; exit }
    printf "%6s %-14s %-6s %7s", "n", "mode", "moduli", "TFLOPS"
    for (i = 1; i <= np; i++) printf " %10s %10s", "max@" phis[i], "med@" phis[i]
    printf "\n"
    for (k = 1; k <= nk; k++) {
      split(keys[k], f, SUBSEP)
      printf "%6d %-14s %-6s %7s", f[1], f[2], f[3], ((keys[k] in tf) ? tf[keys[k]] : "-")
      for (i = 1; i <= np; i++) {
        if ((keys[k], phis[i]) in emax) printf " %10.2e %10.2e", emax[keys[k], phis[i]], emed[keys[k], phis[i]]
        else printf " %10s %10s", "-", "-"
      }
      printf "\n"
    }
  }' "$LOG"
exit $rc
