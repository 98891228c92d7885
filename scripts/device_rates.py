"""Measurements behind the device cost model and the certificate's native scale (on the
GPU; ``ozaki_backend/cuda/costs.py``, ``docs/precision.md``).

    python scripts/device_rates.py timings [--json rates.json]
        cuBLAS DGEMM and the emulation (emulation="eager", fixed counts) per shape,
        next to the model's predictions; --json writes the fitted rates record for
        ozaki_backend/_data/device_rates.json
    python scripts/device_rates.py native-errors
        cuBLAS DGEMM's error relative to g(k) ||t||_2 u (the certificate's native scale)
        over k, on N(0,1) and phi = 2 data
"""

from __future__ import annotations

import argparse
import json
import sys

import cupy
import numpy as np

import ozaki_backend as ob
from ozaki_backend.cuda import costs
from ozaki_backend.provenance import median_device_time
from ozaki_backend.spec.rules import native_growth
from ozaki_backend.testing import sampled_rows_reference

SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 16384, 16384), (8192, 512, 8192), (8192, 2048, 8192), (16384, 1024, 16384),
          (8192, 8192, 512), (512, 8192, 8192), (8191, 8191, 8191), (10000, 10000, 10000))


def _time(f, reps=7):
    return median_device_time(f, reps, warmup=3)


def _shape_rows(rng, m, k, n, r):
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = cupy.empty((m, n))
    t_nat = _time(lambda: cupy.matmul(A, B, out=out))
    rows = []
    for N in (14, 16):
        t_em = _time(lambda: ob.matmul(A, B, moduli=N, out=out, engine="cuda",
                                       emulation="eager"))
        rows.append({"shape": [m, k, n], "N": N, "native": t_nat, "emulation": t_em,
                     "model_native": costs.native_seconds(m, n, k, r),
                     "model_emulation": costs.emulation_seconds(m, n, k, N, False, r)})
    return rows


def timings(args):
    rng = cupy.random.default_rng(0)
    rows = []
    r = costs.rates()
    for (m, k, n) in SHAPES:
        for x in _shape_rows(rng, m, k, n, r):
            rows.append(x)
            print(f"{m}x{k}x{n} N={x['N']}: DGEMM {1e3 * x['native']:8.3f} ms (model "
                  f"{1e3 * x['model_native']:8.3f})  emulation {1e3 * x['emulation']:8.3f} "
                  f"ms (model {1e3 * x['model_emulation']:8.3f})", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                       "rows": rows}, f, indent=1)
    return 0


def native_errors(args):
    rng = cupy.random.default_rng(1)
    u = 2.0 ** -53
    for phi in (-1.0, 2.0):
        for k in (256, 1024, 4096, 16384, 65536):
            m = n = 512
            draw = ((lambda s: rng.standard_normal(s)) if phi == -1 else
                    (lambda s: (rng.random(s) - 0.5) * cupy.exp(phi * rng.standard_normal(s))))
            A, B = draw((m, k)), draw((k, n))
            rows = cupy.arange(0, m, m // 16)
            hi, lo = sampled_rows_reference(A[rows], B)
            C = cupy.matmul(A, B)[rows]
            t2 = cupy.sqrt(cupy.matmul(A[rows] ** 2, B ** 2))
            ratio = (cupy.abs((C - hi) - lo) / (u * native_growth(k) * t2)).get().ravel()
            print(f"phi {phi:4.1f} k {k:6d}: cuBLAS error / (u g(k) ||t||_2) median "
                  f"{np.median(ratio):.3f} p99 {np.quantile(ratio, 0.99):.3f} max "
                  f"{ratio.max():.3f}", flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("timings", "native-errors"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    return timings(args) if args.what == "timings" else native_errors(args)


if __name__ == "__main__":
    sys.exit(main())
