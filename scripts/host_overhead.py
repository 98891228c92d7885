"""Host time per call of the emulated product on device operands (issue 18: "per-call
host overhead"), with the prepare stage replayed as a CUDA graph and without.

For each shape, after four warm-up calls: ``calls`` products of N(0, 1) operands, one
after the other (each waits only for its own count read-back, as a user's loop does).
Printed per call (medians):
  wall  — the host's time in the call;
  wait  — of it, the time blocked in the count's read-back (the GPU catching up);
  host  — wall - wait: Python, launches and API calls (the overhead);
  gpu   — CUDA events around the call (the device's span of it).
Usage: python scripts/host_overhead.py [m,k,n ...]   (default 256,256,256 1024 4096)
HOST_PROFILE=1 adds a cProfile of the first shape (scripts/kernel_timeline.py's).
"""

from __future__ import annotations

import os
import sys
import time

import cupy
import numpy as np

import ozaki_backend as ob
from ozaki_backend.cuda import graphs, pipeline

from kernel_timeline import _shape, host_profile      # scripts/ is on sys.path


def measure(m, k, n, calls=20):
    rng = cupy.random.default_rng(0)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C = cupy.empty((m, n))
    waits = []
    wait0 = pipeline._ReadBack.wait

    def timed_wait(self):
        t0 = time.perf_counter()
        try:
            return wait0(self)
        finally:
            waits.append(time.perf_counter() - t0)

    pipeline._ReadBack.wait = timed_wait
    try:
        for _ in range(4):
            ob.matmul(A, B, out=C, engine="cuda")
        cupy.cuda.Device().synchronize()
        walls, hosts, gpus = [], [], []
        for _ in range(calls):
            waits.clear()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            t0 = time.perf_counter()
            ob.matmul(A, B, out=C, engine="cuda")
            wall = time.perf_counter() - t0
            stop.record()
            stop.synchronize()
            walls.append(wall)
            hosts.append(wall - sum(waits))
            gpus.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    finally:
        pipeline._ReadBack.wait = wait0
    med = lambda v: float(np.median(v)) * 1e6   # noqa: E731
    return med(walls), med(walls) - med(hosts), med(hosts), med(gpus)


def main(argv):
    shapes = [_shape(s) for s in (argv or ["256", "1024", "4096"])]
    print(f"{'m,k,n':>16} {'graphs':>6} {'wall us':>9} {'wait us':>9} {'host us':>9} "
          f"{'gpu us':>9}")
    for m, k, n in shapes:
        for on in ("1", "0"):
            os.environ["OZAKI_BACKEND_CUDA_GRAPHS"] = on
            graphs.clear()
            before = graphs.COUNTS["replayed"]
            wall, wait, host, gpu = measure(m, k, n)
            replays = graphs.COUNTS["replayed"] - before
            print(f"{m},{k},{n:>6} {on:>6} {wall:9.0f} {wait:9.0f} {host:9.0f} {gpu:9.0f}"
                  f"   ({replays} replays)")
    os.environ.pop("OZAKI_BACKEND_CUDA_GRAPHS", None)
    if os.environ.get("HOST_PROFILE", "0") != "0":
        # The same cProfile as the kernel timeline's (steady state, graphs on).
        host_profile(",".join(str(v) for v in shapes[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
