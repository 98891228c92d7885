"""Host time per call of the emulated product on device operands (issue 18: "per-call
host overhead"), with the prepare stage replayed as a CUDA graph and without.

For each shape, after four warm-up calls: ``calls`` products of N(0, 1) operands, one
after the other (each waits only for its own count read-back, as a user's loop does).
Printed per call (medians), first for ``cupy.matmul`` itself (the DGEMM a product the
engine computes natively costs), then for the product:
  wall  — the host's time in the call;
  wait  — of it, the time blocked in the count's read-back (the GPU catching up);
  host  — wall - wait: Python, launches and API calls (the overhead);
  gpu   — CUDA events around the call (the device's span of it).
Usage: python scripts/host_overhead.py [m,k,n ...]   (default 256,256,256 1024 4096)
HOST_PROFILE=1 adds a cProfile of the first shape (scripts/kernel_timeline.py's).
HOST_STEPS=1 adds, for the first shape, when each step of the call is entered and left
(medians over the calls, in us from the call's entry): how long the GPU waits before
its first launch when the previous call has finished (the bench's way of timing).
"""

from __future__ import annotations

import os
import sys
import time

import cupy
import numpy as np

import ozaki_backend as ob
from ozaki_backend.cuda import graphs, pipeline

from kernel_timeline import _shape, _warm_operands, host_profile  # scripts/ on sys.path


def measure(m, k, n, calls=20, native=False):
    """Medians of wall, wait, host and gpu (us) of ``ob.matmul`` (``native``: of
    ``cupy.matmul`` itself, the baseline of a product the engine hands to DGEMM)."""
    rng = cupy.random.default_rng(0)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C = cupy.empty((m, n))
    if native:
        def product():
            cupy.matmul(A, B, out=C)
    else:
        def product():
            ob.matmul(A, B, out=C, engine="cuda")
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
            product()
        cupy.cuda.Device().synchronize()
        walls, hosts, gpus = [], [], []
        for _ in range(calls):
            waits.clear()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            t0 = time.perf_counter()
            product()
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


#: The steps HOST_STEPS times: (module, function) entered by a product on device
#: operands, in call order.
STEPS = (("ozaki_backend._api", "product"), ("ozaki_backend.cuda.engine", "matmul_device"),
         ("ozaki_backend.cuda.pipeline", "product_into"),
         ("ozaki_backend.cuda.pipeline", "_product_once"),
         ("ozaki_backend.cuda.graphs", "replay"), ("ozaki_backend.cuda.graphs", "_launch"),
         ("ozaki_backend.cuda.pipeline", "integer_product_into"),
         ("ozaki_backend.cuda.residues", "residue_planes_into"),
         ("ozaki_backend.cuda.modgemm", "products_into"),
         ("ozaki_backend.cuda.pipeline", "_read_count"),
         ("ozaki_backend.cuda.crt", "crt_into"))


def steps(m, k, n, calls=20):
    """Median offsets (us from the call's entry) of each step's first entry and last
    exit, the previous call finished before each call (as the bench times them)."""
    import importlib

    _, A, B, C = _warm_operands(f"{m},{k},{n}")
    events, saved = [], []

    def wrap(name, fn):
        def timed(*a, **kw):
            events.append((name, "in", time.perf_counter()))
            try:
                return fn(*a, **kw)
            finally:
                events.append((name, "out", time.perf_counter()))
        return timed

    for mod_name, fn_name in STEPS:
        mod = importlib.import_module(mod_name)
        saved.append((mod, fn_name, getattr(mod, fn_name)))
        setattr(mod, fn_name, wrap(f"{mod_name.rsplit('.', 1)[-1]}.{fn_name}",
                                   getattr(mod, fn_name)))
    try:
        offsets = {}
        for _ in range(calls):
            cupy.cuda.Device().synchronize()
            events.clear()
            t0 = time.perf_counter()
            ob.matmul(A, B, out=C, engine="cuda")
            t1 = time.perf_counter()
            first, last = {}, {}
            for name, what, t in events:
                if what == "in":
                    first.setdefault(name, (t - t0) * 1e6)
                else:
                    last[name] = (t - t0) * 1e6
            for name in first:
                offsets.setdefault(name, []).append((first[name], last.get(name, 0.0)))
            offsets.setdefault("(return)", []).append(((t1 - t0) * 1e6,) * 2)
    finally:
        for mod, fn_name, fn in saved:
            setattr(mod, fn_name, fn)
    print(f"steps of one call, {m}x{k}x{n} (us from entry: first entered, last left)")
    for name, v in sorted(offsets.items(), key=lambda kv: np.median([a for a, _ in kv[1]])):
        print(f"  {name:<36} {np.median([a for a, _ in v]):8.0f} {np.median([b for _, b in v]):8.0f}")


def _outcome(m, k, n):
    """The certificate outcome of one product of the shape (after the timed calls)."""
    rng = cupy.random.default_rng(0)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    ob.reset_stats()
    ob.matmul(A, B, engine="cuda")
    return ",".join(sorted(ob.stats()["certificate"])) or "-"


def main(argv):
    shapes = [_shape(s) for s in (argv or ["256", "1024", "4096"])]
    print(f"{'m,k,n':>16} {'graphs':>6} {'wall us':>9} {'wait us':>9} {'host us':>9} "
          f"{'gpu us':>9}")
    for m, k, n in shapes:
        wall, wait, host, gpu = measure(m, k, n, native=True)
        print(f"{m},{k},{n:>6} {'DGEMM':>6} {wall:9.0f} {wait:9.0f} {host:9.0f} {gpu:9.0f}"
              f"   (cupy.matmul itself; the outcome of ours: {_outcome(m, k, n)})")
        for on in ("1", "0"):
            os.environ["OZAKI_BACKEND_CUDA_GRAPHS"] = on
            graphs.clear()
            before = graphs.COUNTS["replayed"]
            wall, wait, host, gpu = measure(m, k, n)
            replays = graphs.COUNTS["replayed"] - before
            print(f"{m},{k},{n:>6} {on:>6} {wall:9.0f} {wait:9.0f} {host:9.0f} {gpu:9.0f}"
                  f"   ({replays} replays)")
    os.environ.pop("OZAKI_BACKEND_CUDA_GRAPHS", None)
    if os.environ.get("HOST_STEPS", "0") != "0":
        steps(*shapes[0])
    if os.environ.get("HOST_PROFILE", "0") != "0":
        # The same cProfile as the kernel timeline's (steady state, graphs on).
        host_profile(",".join(str(v) for v in shapes[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
