#!/usr/bin/env bash
# One device call for issue 30 (CuPy and PyTorch products inside enabled()): install
# from this checkout, run the GPU-array tests (tests/gpu_arrays: every routed product
# checked bit for bit against ozaki_backend.matmul), run an unmodified CuPy script and
# an unmodified PyTorch script under OZAKI_BACKEND=1 (their exit reports), run
# `python -m ozaki_backend bench --gpu-arrays`, log everything under $OUT and print a
# short summary table last.
#
#   bash scripts/gpu-arrays-check.sh [--clean] [--no-tests] [--no-bench] [bench args ...]
#
#   --clean     run the committed tree instead of the working tree, so that work in
#               progress of other files cannot get in the way: .clean/ when it is there
#               (made here with `git archive HEAD | tar -x -C .clean`, ignored, and
#               carried: run(carry=[".whl", ".clean"])), else `git archive HEAD` when
#               .git travelled
#   bench args  go to bench --gpu-arrays (default: --reps 3 --rounds 2 --warmup 2)
#
# TEST_TIMEOUT / SCRIPT_TIMEOUT / BENCH_TIMEOUT (seconds) bound each part; the logs
# survive a timeout. Needs CuPy, PyTorch (CUDA) and pytest on the device;
# array-api-compat is installed from .whl/ (carry it: run(carry=[".whl"])).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ozaki-gpu-arrays}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

clean=0 run_tests=1 run_bench=1
while [ $# -gt 0 ]; do
  case "$1" in
    --clean) clean=1; shift ;;
    --no-tests) run_tests=0; shift ;;
    --no-bench) run_bench=0; shift ;;
    *) break ;;
  esac
done
bench_args=("$@")
[ ${#bench_args[@]} -eq 0 ] && bench_args=(--reps 3 --rounds 2 --warmup 2)

wheels=$(ls .whl/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ozaki-site $wheels && export PYTHONPATH=/tmp/ozaki-site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ $clean = 1 ]; then
  if [ -f .clean/setup.py ]; then
    cp -r .whl .clean/ 2>/dev/null; cd .clean
    echo "running the committed tree carried in .clean/" | tee "$OUT/tree.txt"
  elif git rev-parse --git-dir >/dev/null 2>&1; then
    rm -rf /tmp/ozaki-clean && mkdir -p /tmp/ozaki-clean
    git archive HEAD | tar -x -C /tmp/ozaki-clean && cd /tmp/ozaki-clean
    echo "running the committed tree $(git -C "$OLDPWD" rev-parse --short HEAD)" | tee "$OUT/tree.txt"
  else
    echo "--clean: no .git here; running the working tree" | tee "$OUT/tree.txt"
  fi
fi
# The project: an editable install (its .pth start-up hook makes OZAKI_BACKEND=1 work);
# if that cannot build here, the checkout on PYTHONPATH and `python -m ozaki_backend run`.
pth=1
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1; then
  echo "editable install failed (see install.log); using PYTHONPATH" | tee -a "$OUT/install.log"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  pth=0
fi
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import sys, numpy, cupy, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  python3 -c "import sklearn, array_api_compat; print('scikit-learn', sklearn.__version__, 'array-api-compat', array_api_compat.__version__)"
} 2>&1 | tee "$OUT/env.txt"

rc_tests=-1
if [ $run_tests = 1 ]; then
  t0=$(date +%s)
  # scikit-learn's array-API mode needs SciPy's (test_scikit_learn_array_api_mode...).
  SCIPY_ARRAY_API=1 timeout "${TEST_TIMEOUT:-170}" python3 -m pytest -q -rfEs -p no:cacheprovider \
    tests/gpu_arrays >"$OUT/pytest.log" 2>&1
  rc_tests=$?
  echo "pytest: rc=$rc_tests in $(( $(date +%s) - t0 )) s" >>"$OUT/pytest.log"
fi

# Unmodified scripts: no ozaki_backend in them; the default cost model decides (8192^3
# is routed on an H200, 16384 x 1024 x 16384 is not).
cat >"$OUT/cupy_script.py" <<'EOF'
import cupy
rng = cupy.random.default_rng(0)
a, b = rng.standard_normal((8192, 8192)), rng.standard_normal((8192, 8192))
c = a @ b
d = cupy.dot(c, b)
s, t = rng.standard_normal((16384, 1024)), rng.standard_normal((1024, 16384))
u = s @ t
cupy.cuda.Device().synchronize()
print("cupy script done", float(abs(d).max()) > 0)
EOF
cat >"$OUT/torch_script.py" <<'EOF'
import torch
torch.manual_seed(0)
lin = torch.nn.Linear(8192, 8192, dtype=torch.float64, device="cuda")
x = torch.randn(8192, 8192, dtype=torch.float64, device="cuda")
loss = lin(x).square().mean()
loss.backward()
y = torch.randn(16384, 1024, dtype=torch.float64, device="cuda") @ \
    torch.randn(1024, 16384, dtype=torch.float64, device="cuda")
torch.cuda.synchronize()
print("torch script done", bool(lin.weight.grad.abs().max() > 0))
EOF
script_report() {   # name, script
  local cmd=(python3 "$2")
  [ $pth = 0 ] && cmd=(python3 -m ozaki_backend run "$2")
  OZAKI_BACKEND=1 OZAKI_BACKEND_STATS=1 timeout "${SCRIPT_TIMEOUT:-60}" "${cmd[@]}" \
    >"$OUT/$1.log" 2>&1
  echo "rc=$?" >>"$OUT/$1.log"
}
script_report cupy-script "$OUT/cupy_script.py"
script_report torch-script "$OUT/torch_script.py"

rc_bench=-1
if [ $run_bench = 1 ]; then
  timeout "${BENCH_TIMEOUT:-150}" python3 -m ozaki_backend bench --gpu-arrays \
    --json "$OUT/bench-gpu-arrays.json" "${bench_args[@]}" >"$OUT/bench.log" 2>&1
  rc_bench=$?
fi

echo
echo "=== summary (logs in $OUT) ==="
printf '%-14s %s\n' "tests" "$(grep -E '(passed|failed|error)' "$OUT/pytest.log" 2>/dev/null | tail -1) [rc=$rc_tests]"
for s in cupy-script torch-script; do
  printf '%-14s %s | %s | %s\n' "$s" "$(grep -m1 -E 'script done|Error' "$OUT/$s.log")" \
    "$(grep -m1 'ozaki_backend stats:' "$OUT/$s.log")" \
    "$(grep -m1 'routed by entry point' "$OUT/$s.log" | sed 's/^ *//')"
done
echo "bench --gpu-arrays [rc=$rc_bench]:"
sed -n '/^library /,$p' "$OUT/bench.log" 2>/dev/null
grep -E '^(FAILED|ERROR)' "$OUT/pytest.log" 2>/dev/null | head -20
exit $(( rc_tests > 0 || rc_bench > 0 ))
