#!/usr/bin/env bash
# One device call for the CUDA engine: install from this checkout, run the GPU tests
# (bitwise against the CPU reference), run `python -m ozaki_backend bench`, log
# everything under $OUT and print a short table last.
#
#   bash scripts/gpu-check.sh [--tests-only | --bench-only] [-k EXPR] [bench args ...]
#
# TEST_TIMEOUT / BENCH_TIMEOUT (seconds) bound each part; logs survive a timeout.
# Needs: CuPy and pytest on the device; array-api-compat is installed from .whl/ if the
# wheel is there (carry it: `run(carry=[".whl"])`; see .library/device/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ozaki-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

run_tests=1 run_bench=1 kexpr=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) run_bench=0; shift ;;
    --bench-only) run_tests=0; shift ;;
    -k) kexpr=(-k "$2"); shift 2 ;;
    *) break ;;
  esac
done

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ozaki-site .whl/*.whl && export PYTHONPATH=/tmp/ozaki-site${PYTHONPATH:+:$PYTHONPATH}
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
  timeout "${TEST_TIMEOUT:-280}" python3 -m pytest -q -rfEs --durations=8 -p no:cacheprovider "${kexpr[@]}" \
    tests/test_cuda_sources.py tests/test_cuda_stages.py tests/test_cuda_end_to_end.py \
    >"$OUT/pytest.log" 2>&1
  rc_tests=$?
  echo "pytest: rc=$rc_tests in $(( $(date +%s) - t0 )) s" >>"$OUT/pytest.log"
fi
if [ $run_bench = 1 ]; then
  timeout "${BENCH_TIMEOUT:-300}" \
    python3 -c "import sys; from ozaki_backend.bench import main; sys.exit(main(sys.argv[1:]))" \
    --json "$OUT/bench.json" "$@" >"$OUT/bench.log" 2>&1
  rc_bench=$?
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
exit $(( rc_tests != 0 || rc_bench != 0 ))
