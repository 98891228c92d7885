#!/usr/bin/env bash
# One device call for the CUDA engine: install from this checkout, run the GPU tests
# (bitwise against the CPU reference), run `python -m ozaki_backend bench`, log
# everything under $OUT and print a short table last.
#
#   bash scripts/gpu-check.sh [--tests-only | --bench-only | --host-bench] [--tune]
#                             [--sanitize] [--gemmul8] [-k EXPR] [bench args ...]
#
#   --host-bench  no tests; measure the cost model's rates on this machine
#               (tune --rates-only, written to $OUT/host_rates.json and used through
#               OZAKI_BACKEND_RATES), then `python -m ozaki_backend bench --host` (NumPy
#               operands through every entry point inside enabled(), next to plain
#               NumPy; $OUT/bench-host.json); the bench args go to bench --host
#               (e.g. --grid '256;8192' --no-ridge). RATES_TIMEOUT / BENCH_TIMEOUT.
#   --tune      also measure the GEMM-path table (python -m ozaki_backend tune), written
#               to $OUT/gemm_tuning.json (copy it to ozaki_backend/_data/ to ship it)
#   --sanitize  also run scripts/sanitize.py under compute-sanitizer memcheck and racecheck
#   --gemmul8   after our bench, GEMMul8's own benchmark in the same call
#               (scripts/gemmul8-side-by-side.sh; carry .gemmul8 too)
#   --workspace PARTS  only scripts/workspace_symmetric.py, for each comma-separated
#               part (symmetric, budget, outofcore; issue 17): symmetric vs general
#               time, a 16 GB budget vs unbounded, out of core bitwise; no tests, no
#               bench; WS_ARGS adds options, WS_TIMEOUT bounds each part
#   --profile SIZES  only the stage-by-stage costs: scripts/certificate_cost.py SIZES (the
#               real product's statistics and certificate stages, comma-separated n) and
#               scripts/complex_profile.py 8192 (the complex product's stages); logged to
#               $OUT/profile-real.log and $OUT/profile-complex.log, and
#               scripts/kernel_timeline.py SIZES (every kernel of the real product under
#               the PyTorch profiler: gaps, busy time) to $OUT/profile-timeline.log;
#               PROFILE_TIMEOUT
#   --overlap SHAPES  only scripts/overlap_sweep.py --shapes SHAPES ('m,k,n;...'): the
#               overlapped schedule for each SM count left free (OVERLAP_ARGS, e.g.
#               '--sms 0,8,16,24 --blocks 0,2048'), bits against the plain tile loop,
#               next to DGEMM; $OUT/overlap.log, $OUT/overlap.json; OVERLAP_TIMEOUT
#   --repairs CASES  also scripts/certificate_repairs.py CASES (space-separated n:phi):
#               the counts, outcome and unsettled elements (against the repair cap) of
#               one eager product each, with eager/default/DGEMM times;
#               $OUT/repairs.log; REPAIRS_TIMEOUT
#   --host-overhead SHAPES  also scripts/host_overhead.py SHAPES (space-separated m,k,n
#               or n; issue 18): the host's time per call of a device product, the
#               prepare stage replayed as a CUDA graph and not; $OUT/host-overhead.log
#   --steady SHAPES  also the steady state of a loop for each shape (space-separated n or
#               m,k,n; issue 18): scripts/steady_ratio.py (native, ob.matmul and
#               Plan.matmul side by side, three alternating rounds) and
#               scripts/kernel_timeline.py --steady (ten calls back to back: the GPU's
#               busy and idle time per call, the gaps by the kernels around them);
#               $OUT/steady.log; STEADY_TIMEOUT
#   --ncu SHAPE  also Nsight Compute over one product of SHAPE (n or m,k,n):
#               scripts/product_ncu.py under `ncu --section SpeedOfLight` (DRAM and SM
#               throughput of every kernel of one product, the first GEMM's included;
#               NCU_ARGS adds options); $OUT/ncu.log, a table of them printed last
#   --first-call SHAPES  also scripts/first_call.py SHAPES (space-separated n or m,k,n;
#               issue 33): the first five products of a fresh process, with and without
#               ob.warm_up(), against the steady time; $OUT/first-call.log and .json;
#               FIRST_CALL_TIMEOUT
#   --declined SIZES  also scripts/declined_overhead.py SIZES (space-separated n; issue
#               29): a declined product's cost inside enabled() in three process states,
#               its parts and the Python router's profile; $OUT/declined.log;
#               DECLINED_TIMEOUT
#   --dask      also scripts/dask_gpu.py (issue 15: one GPU worker; DASK_ARGS adds its
#               options), logged to $OUT/dask_gpu.log, JSON in $OUT/dask_gpu.json.
#               Needs the dask wheels: carry .whl_dask (installed like .whl)
#
# TEST_TIMEOUT / BENCH_TIMEOUT (seconds) bound each part; logs survive a timeout.
# Needs: CuPy and pytest on the device; array-api-compat is installed from .whl/ if the
# wheel is there (carry it: `run(carry=[".whl"])`; see .library/device/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ozaki-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

run_tests=1 run_bench=1 run_tune=0 run_san=0 run_g8=0 run_dask=0 run_host=0 kexpr=() ws_parts=""
prof_sizes="" ov_shapes="" ho_shapes="" ncu_shape="" steady_shapes="" rep_cases="" fc_shapes=""
dc_sizes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) run_bench=0; shift ;;
    --bench-only) run_tests=0; shift ;;
    --host-bench) run_tests=0; run_bench=0; run_host=1; shift ;;
    --tune) run_tune=1; shift ;;
    --sanitize) run_san=1; shift ;;
    --gemmul8) run_g8=1; shift ;;
    --workspace) ws_parts="$2"; run_tests=0; run_bench=0; shift 2 ;;
    --dask) run_dask=1; shift ;;
    --profile) prof_sizes="$2"; run_tests=0; run_bench=0; shift 2 ;;
    --overlap) ov_shapes="$2"; run_tests=0; run_bench=0; shift 2 ;;
    --host-overhead) ho_shapes="$2"; shift 2 ;;
    --repairs) rep_cases="$2"; shift 2 ;;
    --ncu) ncu_shape="$2"; shift 2 ;;
    --steady) steady_shapes="$2"; shift 2 ;;
    --first-call) fc_shapes="$2"; shift 2 ;;
    --declined) dc_sizes="$2"; shift 2 ;;
    --host-path) run_hp=1; run_tests=0; run_bench=0; shift ;;
    -k) kexpr=(-k "$2"); shift 2 ;;
    *) break ;;
  esac
done

wheels=$(ls .whl/*.whl .whl_dask/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ozaki-site $wheels && export PYTHONPATH=/tmp/ozaki-site${PYTHONPATH:+:$PYTHONPATH}
fi
# The project: an editable install (kernels/ then imports as ozaki_backend.kernels);
# if that cannot build here, the checkout on PYTHONPATH (the loader finds kernels/).
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1; then
  echo "editable install failed (see install.log); using PYTHONPATH" | tee -a "$OUT/install.log"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

if ! python3 -c "import array_api_compat" 2>/dev/null; then
  echo "array-api-compat is missing on this machine: carry it as a wheel in .whl/" \
       "(python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12" \
       "--implementation cp -d .whl array-api-compat) and pass carry=['.whl']" | tee "$OUT/env.txt"
  exit 2
fi
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import sys, numpy, cupy; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"
} 2>&1 | tee "$OUT/env.txt"

rc_tests=0 rc_bench=0
if [ $run_tests = 1 ]; then
  t0=$(date +%s)
  # Every test marked gpu (the CUDA stages and end to end, the fused kernel, the seed
  # scheme's GPU path, the data-adaptive moduli count).
  timeout "${TEST_TIMEOUT:-360}" python3 -m pytest -q -rfEs --durations=8 -p no:cacheprovider "${kexpr[@]}" \
    -m gpu tests >"$OUT/pytest.log" 2>&1
  rc_tests=$?
  echo "pytest: rc=$rc_tests in $(( $(date +%s) - t0 )) s" >>"$OUT/pytest.log"
fi
rc_tune=0 rc_san=0 rc_g8=0 rc_ws=0 rc_dask=0 rc_host=0 rc_prof=0 rc_ov=0
if [ -n "$ov_shapes" ]; then
  # shellcheck disable=SC2086
  timeout "${OVERLAP_TIMEOUT:-300}" python3 scripts/overlap_sweep.py --shapes "$ov_shapes" \
    --json "$OUT/overlap.json" ${OVERLAP_ARGS:-} >"$OUT/overlap.log" 2>&1 || rc_ov=1
fi
rc_ncu=0
if [ -n "$ncu_shape" ]; then
  # shellcheck disable=SC2086
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)
  timeout "${NCU_TIMEOUT:-240}" "${ncu:-ncu}" --clock-control none --profile-from-start off \
    --section SpeedOfLight ${NCU_ARGS:-} python3 scripts/product_ncu.py "$ncu_shape" \
    >"$OUT/ncu.log" 2>&1 || rc_ncu=1
fi
rc_steady=0
if [ -n "$steady_shapes" ]; then
  # shellcheck disable=SC2086
  { timeout "${STEADY_TIMEOUT:-300}" python3 scripts/steady_ratio.py $steady_shapes &&
    timeout "${STEADY_TIMEOUT:-300}" python3 scripts/kernel_timeline.py --steady $steady_shapes
  } 2>&1 | grep -v -i "warn" >"$OUT/steady.log" || rc_steady=1
fi
rc_fc=0
if [ -n "$fc_shapes" ]; then
  # shellcheck disable=SC2086
  FIRST_CALL_JSON="$OUT/first-call.json" timeout "${FIRST_CALL_TIMEOUT:-300}" \
    python3 scripts/first_call.py $fc_shapes >"$OUT/first-call.log" 2>&1 || rc_fc=1
fi
rc_dc=0
if [ -n "$dc_sizes" ]; then
  # shellcheck disable=SC2086
  timeout "${DECLINED_TIMEOUT:-200}" python3 scripts/declined_overhead.py $dc_sizes \
    >"$OUT/declined.log" 2>&1 || rc_dc=1
fi
rc_rep=0
if [ -n "$rep_cases" ]; then
  # shellcheck disable=SC2086
  timeout "${REPAIRS_TIMEOUT:-200}" python3 scripts/certificate_repairs.py $rep_cases \
    >"$OUT/repairs.log" 2>&1 || rc_rep=1
fi
rc_ho=0
if [ -n "$ho_shapes" ]; then
  # shellcheck disable=SC2086
  timeout "${HOST_OVERHEAD_TIMEOUT:-200}" python3 scripts/host_overhead.py $ho_shapes \
    >"$OUT/host-overhead.log" 2>&1 || rc_ho=1
fi
if [ $run_host = 1 ]; then
  export OZAKI_BACKEND_RATES="$OUT/host_rates.json"
  timeout "${RATES_TIMEOUT:-150}" python3 -m ozaki_backend tune --rates-only \
    --rates-output "$OUT/host_rates.json" >"$OUT/rates.log" 2>&1
  rc_host=$?
  timeout "${BENCH_TIMEOUT:-400}" python3 -m ozaki_backend bench --host \
    --json "$OUT/bench-host.json" "$@" >"$OUT/bench-host.log" 2>&1 || rc_host=1
fi
if [ $run_tune = 1 ]; then
  timeout "${TUNE_TIMEOUT:-240}" python3 -m ozaki_backend tune --output "$OUT/gemm_tuning.json" \
    >"$OUT/tune.log" 2>&1
  rc_tune=$?
fi
if [ $run_san = 1 ]; then
  OUT_DIR=/tmp/ozaki-kernels bash scripts/compile-kernels.sh 2 >"$OUT/kernels.log" 2>&1
  for tool in memcheck racecheck; do
    timeout "${SAN_TIMEOUT:-200}" compute-sanitizer --tool $tool --print-limit 20 \
      python3 scripts/sanitize.py >"$OUT/sanitize-$tool.log" 2>&1 || rc_san=1
  done
fi
if [ $run_bench = 1 ]; then
  timeout "${BENCH_TIMEOUT:-300}" \
    python3 -c "import sys; from ozaki_backend.bench import main; sys.exit(main(sys.argv[1:]))" \
    --json "$OUT/bench.json" "$@" >"$OUT/bench.log" 2>&1
  rc_bench=$?
fi
if [ -n "$ws_parts" ]; then
  for part in ${ws_parts//,/ }; do
    timeout "${WS_TIMEOUT:-280}" python3 scripts/workspace_symmetric.py "$part" ${WS_ARGS:-} \
      >"$OUT/workspace-$part.log" 2>&1 || rc_ws=1
  done
fi
if [ -n "$prof_sizes" ]; then
  timeout "${PROFILE_TIMEOUT:-240}" python3 scripts/certificate_cost.py ${prof_sizes//,/ } \
    >"$OUT/profile-real.log" 2>&1 || rc_prof=1
  timeout "${PROFILE_TIMEOUT:-240}" python3 scripts/complex_profile.py 8192 3 \
    >"$OUT/profile-complex.log" 2>&1 || rc_prof=1
  timeout "${PROFILE_TIMEOUT:-240}" python3 scripts/kernel_timeline.py ${prof_sizes//,/ } \
    >"$OUT/profile-timeline.log" 2>&1 || rc_prof=1
fi
if [ $run_dask = 1 ]; then
  timeout "${DASK_TIMEOUT:-420}" env NCCL_NVLS_ENABLE=0 python3 scripts/dask_gpu.py \
    --json dask_gpu.json ${DASK_ARGS:-} >"$OUT/dask_gpu.log" 2>&1
  rc_dask=$?
fi
if [ $run_g8 = 1 ]; then
  # GEMMUL8_ARGS: driver options, e.g. "--moduli 14-17 --reps 5"
  bash scripts/gemmul8-side-by-side.sh ${GEMMUL8_ARGS:-} >"$OUT/gemmul8-table.log" 2>&1
  rc_g8=$?
fi

# --host-path  (issue 29) only the host path: the host-path GPU tests (NumPy 2.5's
#             deprecations as errors), the cost model's rates measured once into
#             $OUT/host_rates.json, where a declined product's time goes
#             (scripts/declined_overhead.py), and bench --host at n = 8192 (every entry
#             point against A @ B, the 256..8192 grid with the worst declined ratio) and
#             at n = 4096; logs host-path-*.log, JSON bench-host-8192.json / -4096.json
rc_hp=0
if [ "${run_hp:-0}" = 1 ]; then
  timeout "${TEST_TIMEOUT:-280}" python3 -m pytest -q -rfEs -p no:cacheprovider \
    -W error::DeprecationWarning tests/cuda/test_cuda_host_path.py \
    tests/api/test_api_host_path.py tests/dispatch/test_dispatch_host_path.py \
    >"$OUT/host-path-tests.log" 2>&1 || rc_hp=1
  export OZAKI_BACKEND_RATES="$OUT/host_rates.json"
  timeout "${RATES_TIMEOUT:-150}" python3 -m ozaki_backend tune --rates-only \
    --rates-output "$OUT/host_rates.json" >"$OUT/host-path-rates.log" 2>&1 || rc_hp=1
  timeout "${HP_TIMEOUT:-300}" python3 scripts/declined_overhead.py \
    >"$OUT/host-path-declined.log" 2>&1 || rc_hp=1
  timeout "${BENCH_TIMEOUT:-400}" python3 -m ozaki_backend bench --host --n 8192 \
    --gram '' --no-ridge --grid '256;512;768;1024;1536;2048;3072;4096;8192' \
    --json "$OUT/bench-host-8192.json" >"$OUT/host-path-bench-8192.log" 2>&1 || rc_hp=1
  timeout "${BENCH_TIMEOUT:-400}" python3 -m ozaki_backend bench --host --n 4096 \
    --gram '' --no-ridge --grid '' --json "$OUT/bench-host-4096.json" \
    >"$OUT/host-path-bench-4096.log" 2>&1 || rc_hp=1
  echo "==== host path (rc=$rc_hp): tests, declined products, bench --host 8192 and 4096"
  tail -n 3 "$OUT/host-path-tests.log"
  grep -v -i "warn" "$OUT/host-path-declined.log" | tail -n 16
  for n in 8192 4096; do
    sed -n '/^ozaki_backend bench --host/,$p' "$OUT/host-path-bench-$n.log" | tail -n 30
  done
fi

# ---- short summary last
if [ $run_tests = 1 ]; then
  echo "==== GPU tests (full log: pytest.log)"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -30
  tail -n 2 "$OUT/pytest.log"
fi
if [ $run_bench = 1 ]; then
  echo "==== bench (rc=$rc_bench; full log: bench.log, bench.json)"
  if grep -q "^ozaki_backend bench" "$OUT/bench.log"; then
    sed -n '/^ozaki_backend bench/,$p' "$OUT/bench.log"
  else
    tail -n 40 "$OUT/bench.log"
  fi
fi
if [ $run_host = 1 ]; then
  echo "==== cost model rates (rates.log, host_rates.json)"; tail -n 16 "$OUT/rates.log"
  echo "==== bench --host (rc=$rc_host; full log: bench-host.log, bench-host.json)"
  if grep -q "^ozaki_backend bench --host" "$OUT/bench-host.log"; then
    sed -n '/^ozaki_backend bench --host/,$p' "$OUT/bench-host.log"
  else
    tail -n 40 "$OUT/bench-host.log"
  fi
fi
if [ $run_tune = 1 ]; then
  echo "==== tune (rc=$rc_tune; tune.log, gemm_tuning.json)"; tail -n 12 "$OUT/tune.log"
fi
if [ $run_san = 1 ]; then
  echo "==== compute-sanitizer (sanitize-*.log) and SASS of the fused kernel (kernels.log)"
  grep -E "IGMMA|UTMALDG|Used|spill" "$OUT/kernels.log" | tail -n 12
  for tool in memcheck racecheck; do tail -n 3 "$OUT/sanitize-$tool.log"; done
fi
if [ -n "$ws_parts" ]; then
  for part in ${ws_parts//,/ }; do
    echo "==== workspace_symmetric.py $part (workspace-$part.log)"
    grep -v '^{' "$OUT/workspace-$part.log" | tail -n 25
  done
fi
if [ -n "$rep_cases" ]; then
  echo "==== a-posteriori stage (repairs.log), rc=$rc_rep"; tail -n 12 "$OUT/repairs.log"
fi
if [ -n "$ho_shapes" ]; then
  echo "==== host time per call (host-overhead.log), rc=$rc_ho"; tail -n 20 "$OUT/host-overhead.log"
fi
if [ -n "$steady_shapes" ]; then
  echo "==== steady state of a loop (steady.log), rc=$rc_steady"; cat "$OUT/steady.log"
fi
if [ -n "$dc_sizes" ]; then
  echo "==== declined products inside enabled() (declined.log), rc=$rc_dc"
  grep -v -i "warn" "$OUT/declined.log" | tail -n 40
fi
if [ -n "$fc_shapes" ]; then
  echo "==== first products of a fresh process (first-call.log), rc=$rc_fc"
  tail -n 12 "$OUT/first-call.log"
fi
if [ -n "$ncu_shape" ]; then
  echo "==== Nsight Compute, one product of $ncu_shape (ncu.log), rc=$rc_ncu"
  # kernel name, then DRAM and SM throughput (% of peak) and the duration
  awk '/^  [A-Za-z_0-9]+.*\(/ {name=$1} /DRAM Throughput/ {d=$NF} /^ +Duration/ {t=$NF " " $(NF-1)}
       /Compute \(SM\) Throughput/ {printf "  %-44s DRAM %6s %%  SM %6s %%  %s\n", substr(name,1,44), d, $NF, t}' \
    "$OUT/ncu.log" | head -n 80
fi
if [ -n "$ov_shapes" ]; then
  echo "==== overlapped schedule (overlap.log), rc=$rc_ov"; tail -n 60 "$OUT/overlap.log"
fi
if [ -n "$prof_sizes" ]; then
  echo "==== stages of the real product (profile-real.log)"; grep -v "^ *$" "$OUT/profile-real.log" | tail -n 40
  echo "==== stages of the complex product (profile-complex.log)"; head -n 4 "$OUT/profile-complex.log"
  echo "==== kernel timeline (profile-timeline.log)"; tail -n 60 "$OUT/profile-timeline.log"
fi
if [ $run_dask = 1 ]; then
  echo "==== dask, one GPU worker (rc=$rc_dask; dask_gpu.log, dask_gpu.json)"
  sed -n '/^[0-9]* x [0-9]* x [0-9]* float64/,$p' "$OUT/dask_gpu.log" | grep -v "distributed\." \
    || tail -n 40 "$OUT/dask_gpu.log"
fi
if [ $run_g8 = 1 ]; then
  echo "==== GEMMul8 side by side (rc=$rc_g8; gemmul8.log)"; tail -n 60 "$OUT/gemmul8-table.log"
fi
exit $(( rc_hp != 0 || rc_tests != 0 || rc_bench != 0 || rc_tune != 0 || rc_san != 0 || rc_g8 != 0 || rc_ws != 0 || rc_dask != 0 || rc_host != 0 || rc_prof != 0 || rc_ov != 0 ))
