"""Where a GPU product's time goes beyond the kernels, at one size (default n = 4096).

    python3 scripts/call_overhead.py [n]

Times the same 15-moduli (and precision="fp64") fast product five ways — the pipeline
alone with and without the Inf/NaN read, the data-adaptive pipeline, and the public
``plan.matmul`` for both plans — as CUDA-event medians after a warm-up, plus the host
time of the call alone and of the call followed by a synchronisation. The difference
between the first line and the others is the price of the host round trips (moduli
count, Inf/NaN flag) and of the API layer.
"""

import sys
import time

import cupy

from ozaki_backend.cuda.pipeline import product_into
from ozaki_backend.plan import Plan
from ozaki_backend.provenance import median_device_time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rng = cupy.random.default_rng(0)
    A = rng.standard_normal((n, n))
    B = rng.standard_normal((n, n))
    C = cupy.empty((n, n))
    fixed = Plan(n, n, n, moduli=15, mode="fast")
    adapt = Plan(n, n, n, mode="fast")
    cases = {
        "pipeline, 15 moduli": lambda: product_into(A, B, fixed, C),
        "pipeline, 15 moduli, Inf/NaN read": lambda: product_into(A, B, fixed, C,
                                                                  check_finite=True),
        "pipeline, fp64 (adaptive)": lambda: product_into(A, B, adapt, C),
        "plan.matmul, 15 moduli": lambda: fixed.matmul(A, B, out=C),
        "plan.matmul, fp64 (adaptive)": lambda: adapt.matmul(A, B, out=C),
    }
    flops = 2.0 * n ** 3
    for name, f in cases.items():
        t = median_device_time(f, 7)
        walls = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            t1 = time.perf_counter()
            cupy.cuda.Device().synchronize()
            walls.append((t1 - t0, time.perf_counter() - t0))
        walls.sort()
        call, total = walls[len(walls) // 2]
        print(f"{name:36s} events {t * 1e3:7.3f} ms ({flops / t / 1e12:5.1f} TFLOPS)  "
              f"host call {call * 1e3:6.3f} ms  call+sync {total * 1e3:6.3f} ms")


if __name__ == "__main__":
    main()
