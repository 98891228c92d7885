"""Measure what the docs plot, and write it as a benchmark file (docs/data/README.md).

    python scripts/measure.py cpu  --out docs/data/cpu-<machine>-<date>.json
    python scripts/measure.py accuracy --out docs/data/accuracy-<machine>-<date>.json
    python scripts/measure.py gpu  --out docs/data/gpu-<machine>-<date>.json

``cpu``: the CPU engine against NumPy, square sizes. ``accuracy``: max relative error
against the exact product (``ozaki_backend.testing``) for each phi and moduli count,
the fp64 default, the seed scheme and NumPy. ``gpu``: native cuBLAS DGEMM and one
INT8 GEMM through CuPy (the ceilings), NumPy -> GPU -> NumPy end to end, NumPy on the
host's cores, and the CUDA engine where this checkout has one.

``python -m ozaki_backend bench --json FILE`` writes the same format; either kind of
file goes under docs/data/, and ``python scripts/make_plots.py`` redraws the plots.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys

import numpy as np

from ozaki_backend.provenance import commit, machine, median_wall_time

SCHEMA = "ozaki_backend-bench/1"
SEED = 20260101
PHIS = (-1.0, 0.5, 1.0, 2.0, 4.0)


def _header(name, gpu=None, cupy_version=None):
    import ozaki_backend

    return {
        "schema": SCHEMA,
        "machine": machine(name, gpu=gpu, cupy=cupy_version),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "command": "python " + shlex.join(sys.argv),
        "ozaki_backend": {"version": ozaki_backend.__version__, "commit": commit()},
        "records": [],
    }


def _time_record(impl, n, seconds, repeats, io, **extra):
    rec = {"kind": "time", "impl": impl, "m": n, "n": n, "k": n, "seconds": seconds,
           "repeats": repeats, "io": io, "tflops": 2.0 * n ** 3 / seconds / 1e12}
    rec.update(extra)
    return rec


def cmd_cpu(args):
    import ozaki_backend

    doc = _header(args.machine)
    rng = np.random.default_rng(SEED)
    for n in args.sizes:
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        reps = max(3, min(args.repeats, int(2e9 // (n ** 3) + 1)))
        t = median_wall_time(lambda: np.matmul(a, b), reps * 5)
        doc["records"].append(_time_record("numpy", n, t, reps * 5, "host"))
        for mode in ("accurate", "fast"):
            p = ozaki_backend.plan(n, n, n, mode=mode, engine="cpu")
            t = median_wall_time(lambda: p.matmul(a, b), reps)
            doc["records"].append(_time_record(
                "ozaki_backend", n, t, reps, "host", engine="cpu", scheme="ozaki2",
                mode=mode, moduli=p.moduli_for(a, b)))
            print(f"n={n} {mode}: {t:.4f} s ({p.moduli_for(a, b)} moduli)", flush=True)
        p = ozaki_backend.plan(n, n, n, scheme="phase22", engine="cpu")
        t = median_wall_time(lambda: p.matmul(a, b), reps)
        doc["records"].append(_time_record(
            "ozaki_backend", n, t, reps, "host", engine="cpu", scheme="phase22",
            mode=None, moduli=7))
    return doc


def cmd_accuracy(args):
    import ozaki_backend
    from ozaki_backend import testing

    doc = _header(args.machine)
    n = args.size
    for phi in PHIS:
        rng = np.random.default_rng(SEED)
        a = testing.phi_matrix((n, n), phi, rng)
        b = testing.phi_matrix((n, n), phi, rng)
        exact = testing.exact_matmul(a, b)
        base = {"kind": "accuracy", "m": n, "n": n, "k": n, "phi": phi, "seed": SEED,
                "reference": "exact"}

        def add(c, **what):
            err = float(testing.max_relative_error(c, exact))
            doc["records"].append({**base, **what, "max_rel_err": err})

        add(np.matmul(a, b), impl="numpy")
        for mode in ("accurate", "fast"):
            for N in range(args.min_moduli, 21):
                add(ozaki_backend.matmul(a, b, moduli=N, mode=mode, engine="cpu"),
                    impl="ozaki_backend", engine="cpu", scheme="ozaki2", mode=mode, moduli=N,
                    precision=None)
            p = ozaki_backend.plan(n, n, n, mode=mode)
            add(p.matmul(a, b, engine="cpu"), impl="ozaki_backend", engine="cpu",
                scheme="ozaki2", mode=mode, moduli=p.moduli_for(a, b), precision="fp64")
        for residual in (False, True):
            add(ozaki_backend.matmul(a, b, scheme="phase22", residual=residual, engine="cpu"),
                impl="ozaki_backend", engine="cpu", scheme="phase22", mode=None, moduli=7,
                residual=residual)
        print(f"phi={phi} done", flush=True)
    return doc


def cmd_gpu(args):
    import cupy as cp

    import ozaki_backend

    props = cp.cuda.runtime.getDeviceProperties(0)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    doc = _header(args.machine, gpu=gpu, cupy_version=cp.__version__)
    doc["machine"]["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
    sync = cp.cuda.Device().synchronize
    try:
        from ozaki_backend.cuda import availability
        have_engine = availability()[0]
    except ImportError:
        have_engine = False
    rng = np.random.default_rng(SEED)
    for n in args.sizes:
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        da, db = cp.asarray(a), cp.asarray(b)
        t = median_wall_time(lambda: cp.matmul(da, db), args.repeats, sync)
        doc["records"].append(_time_record("cupy", n, t, args.repeats, "device"))
        t = median_wall_time(lambda: cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b))),
                         args.repeats, sync)
        doc["records"].append(_time_record("cupy", n, t, args.repeats, "host"))
        if n <= args.numpy_max:
            t = median_wall_time(lambda: np.matmul(a, b), 3)
            doc["records"].append(_time_record("numpy", n, t, 3, "host"))
        # One INT8 x INT8 -> INT32 GEMM (cuBLAS, TN): the unit the emulation is built of.
        a8 = cp.asarray(rng.integers(-128, 128, (n, n), dtype=np.int8))
        b8 = cp.asarray(rng.integers(-128, 128, (n, n), dtype=np.int8))
        c32 = cp.empty((n, n), dtype=np.int32)
        t = median_wall_time(lambda: _int8_gemm(cp, a8, b8, c32), args.repeats, sync)
        doc["records"].append(_time_record("int8-gemm", n, t, args.repeats, "device"))
        if have_engine:
            for mode in ("accurate", "fast"):
                p = ozaki_backend.plan(n, n, n, mode=mode, engine="cuda")
                t = median_wall_time(lambda: p.matmul(da, db), args.repeats, sync)
                doc["records"].append(_time_record(
                    "ozaki_backend", n, t, args.repeats, "device", engine="cuda",
                    scheme="ozaki2", mode=mode, moduli=p.moduli_for(da, db)))
                t = median_wall_time(lambda: p.matmul(a, b), args.repeats, sync)
                doc["records"].append(_time_record(
                    "ozaki_backend", n, t, args.repeats, "host", engine="cuda",
                    scheme="ozaki2", mode=mode, moduli=p.moduli_for(da, db)))
        print(f"n={n} done", flush=True)
        da = db = a8 = b8 = c32 = None  # free the device memory before the next size
        cp.get_default_memory_pool().free_all_blocks()
    return doc


def _int8_gemm(cp, a8, b8, c32):
    """C = A @ B with cublasGemmEx, int8 in, int32 out (column-major: C^T = B^T A^T)."""
    from cupy_backends.cuda.libs import cublas

    n = a8.shape[0]
    handle = cp.cuda.device.get_cublas_handle()
    one = np.array(1, dtype=np.int32)
    zero = np.array(0, dtype=np.int32)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.gemmEx(handle, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, n, n, n,
                  one.ctypes.data, b8.data.ptr, 3, n, a8.data.ptr, 3, n,
                  zero.ctypes.data, c32.data.ptr, 10, n,
                  cublas.CUBLAS_COMPUTE_32I, cublas.CUBLAS_GEMM_DEFAULT)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("cpu", "accuracy", "gpu"):
        s = sub.add_parser(name)
        s.add_argument("--out", required=True)
        s.add_argument("--machine", default=platform.node() or "unknown",
                       help="a short human name for the machine (goes on the plots)")
        s.add_argument("--repeats", type=int, default=5)
    sub.choices["cpu"].add_argument("--sizes", type=int, nargs="+",
                                    default=[64, 128, 256, 512, 1024])
    sub.choices["accuracy"].add_argument("--size", type=int, default=128)
    sub.choices["accuracy"].add_argument("--min-moduli", type=int, default=6)
    sub.choices["gpu"].add_argument("--sizes", type=int, nargs="+",
                                    default=[1024, 2048, 4096, 8192, 16384])
    sub.choices["gpu"].add_argument("--numpy-max", type=int, default=8192)
    args = ap.parse_args(argv)
    doc = {"cpu": cmd_cpu, "accuracy": cmd_accuracy, "gpu": cmd_gpu}[args.cmd](args)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({len(doc['records'])} records)")


if __name__ == "__main__":
    main()
