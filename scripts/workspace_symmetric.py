"""Issue 17 items 2 and 4 on the GPU: symmetric products, bounded workspace, out of core.

    python3 scripts/workspace_symmetric.py symmetric [--rows 60000 --cols 4096]
    python3 scripts/workspace_symmetric.py budget    [--n 32768 --budget 16GB]
    python3 scripts/workspace_symmetric.py outofcore [--check-n 4096 --n 32768 --budget 16GB]
    python3 scripts/workspace_symmetric.py all

symmetric  X (rows x cols, C order, device-resident): ``X.T @ X`` (the symmetric path)
           against the general product of the same shape (``X.T`` copied to its own
           buffer, so it is not detected); exactly symmetric, the time ratio (target
           <= 0.6), the INT8 work fraction; then the same with NumPy operands.
budget     n^3 device-resident, unbounded (the whole free memory) against ``--budget``:
           median time of 3, the workspace high-water mark (target <= the budget, time
           within 10 %), bitwise equality of the two results.
outofcore  (1) ``--check-n``^3 NumPy operands forced out of core with a small budget
           (a quarter of one operand, at least 64 MiB), bitwise against the CPU engine;
           (2) ``--n``^3 NumPy operands forced out of core with ``--budget``, bitwise
           against the in-core GPU result (itself the CPU engine's bits, by the GPU
           tests), and the time of both.

Prints one line per measurement, ``key: value``, and a JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _same_bits(x, y):
    import cupy

    x = x if isinstance(x, np.ndarray) else cupy.asnumpy(x)
    y = y if isinstance(y, np.ndarray) else cupy.asnumpy(y)
    return x.shape == y.shape and bool(
        (np.ascontiguousarray(x).view(np.uint64) == np.ascontiguousarray(y).view(np.uint64)).all())


def _wall(fn, reps=3):
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def symmetric(args, out):
    import cupy

    import ozaki_backend as ob
    from ozaki_backend import _stats

    rng = cupy.random.default_rng(0)
    X = rng.standard_normal((args.rows, args.cols))
    XT = cupy.ascontiguousarray(X.T)                 # another buffer: the general path
    C = ob.matmul(X.T, X, engine="cuda")
    work, general = _stats.last_symmetric_work()
    out["sym_exactly_symmetric"] = _same_bits(C, C.T)
    out["sym_work_fraction"] = work / general
    out["sym_s"] = _wall(lambda: ob.matmul(X.T, X, engine="cuda"))
    out["general_s"] = _wall(lambda: ob.matmul(XT, X, engine="cuda"))
    out["sym_time_ratio"] = out["sym_s"] / out["general_s"]
    out["sym_vs_native_dgemm_s"] = _wall(lambda: X.T @ X)
    Xh = cupy.asnumpy(X)
    Ch = ob.matmul(Xh.T, Xh, engine="cuda")
    out["sym_numpy_exactly_symmetric"] = _same_bits(Ch, Ch.T)
    out["sym_numpy_equals_device"] = _same_bits(Ch, C)
    out["sym_numpy_s"] = _wall(lambda: ob.matmul(Xh.T, Xh, engine="cuda"))
    XTh = np.ascontiguousarray(Xh.T)
    out["general_numpy_s"] = _wall(lambda: ob.matmul(XTh, Xh, engine="cuda"))


def budget(args, out):
    import cupy

    import ozaki_backend as ob
    from ozaki_backend.cuda import pipeline
    from ozaki_backend.spec.tiling import parse_bytes

    n = args.n
    rng = cupy.random.default_rng(1)
    A = rng.standard_normal((n, n))
    B = rng.standard_normal((n, n))
    C1 = cupy.empty((n, n))
    C2 = cupy.empty((n, n))
    unbounded = "1000TiB"          # capped at 85 % of the free memory
    out["budget_bytes"] = parse_bytes(args.budget)
    out["unbounded_s"] = _wall(lambda: ob.matmul(A, B, engine="cuda", out=C1,
                                                 workspace=unbounded))
    out["unbounded_peak_bytes"] = pipeline.last_workspace_peak()
    out["bounded_s"] = _wall(lambda: ob.matmul(A, B, engine="cuda", out=C2,
                                               workspace=args.budget))
    out["bounded_peak_bytes"] = pipeline.last_workspace_peak()
    out["peak_within_budget"] = out["bounded_peak_bytes"] <= out["budget_bytes"]
    out["bounded_time_ratio"] = out["bounded_s"] / out["unbounded_s"]
    out["bounded_equals_unbounded"] = _same_bits(C1, C2)
    out["native_dgemm_s"] = _wall(lambda: cupy.matmul(A, B, out=C1))


def outofcore(args, out):
    import cupy

    import ozaki_backend as ob
    from ozaki_backend.cuda import outofcore as ooc, pipeline

    rng = np.random.default_rng(2)
    m = args.check_n
    A = rng.standard_normal((m, m)) * np.exp2(rng.integers(-10, 10, size=(m, m)))
    B = rng.standard_normal((m, m))
    t0 = time.perf_counter()
    ref = ob.matmul(A, B, engine="cpu")
    out["ooc_check_cpu_s"] = time.perf_counter() - t0
    ooc.FORCE = True
    try:
        small = max(64 << 20, 8 * m * m // 4)     # a quarter of one operand
        t0 = time.perf_counter()
        got = ob.matmul(A, B, engine="cuda", workspace=small)
        out["ooc_check_s"] = time.perf_counter() - t0
        out["ooc_check_peak_bytes"] = pipeline.last_workspace_peak()
        out["ooc_check_budget_bytes"] = small
        out["ooc_check_equals_cpu_engine"] = _same_bits(got, ref)
        del got, ref, A, B
        n = args.n
        A = rng.standard_normal((n, n))
        B = rng.standard_normal((n, n))
        t0 = time.perf_counter()
        C_ooc = ob.matmul(A, B, engine="cuda", workspace=args.budget)
        out["ooc_s"] = time.perf_counter() - t0
        out["ooc_peak_bytes"] = pipeline.last_workspace_peak()
    finally:
        ooc.FORCE = False
    cupy.get_default_memory_pool().free_all_blocks()
    t0 = time.perf_counter()
    C_in = ob.matmul(A, B, engine="cuda")
    out["incore_numpy_s"] = time.perf_counter() - t0
    out["ooc_equals_incore"] = _same_bits(C_ooc, C_in)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["symmetric", "budget", "outofcore", "all"])
    p.add_argument("--rows", type=int, default=60000)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--budget", default="16GB")
    p.add_argument("--check-n", type=int, default=4096)
    args = p.parse_args(argv)
    out = {}
    steps = {"symmetric": [symmetric], "budget": [budget], "outofcore": [outofcore],
             "all": [symmetric, budget, outofcore]}[args.what]
    for step in steps:
        before = set(out)
        try:
            step(args, out)
        except Exception as exc:          # report and go on with the next part
            out[f"{step.__name__}_error"] = f"{type(exc).__name__}: {exc}"
        for key in out:
            if key not in before:
                print(f"{key}: {out[key]}", flush=True)
    print(json.dumps(out))
    return 0 if not any(k.endswith("_error") for k in out) else 1


if __name__ == "__main__":
    sys.exit(main())
