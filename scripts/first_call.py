"""The first products of a fresh process, with and without ``ozaki_backend.warm_up()``
(issue 33: no cold-call penalty).

    python scripts/first_call.py [SHAPES ...]        (default: 8192 8191 10000)

For each shape (``n`` or ``m,k,n``) and each way (``plain``: import, then the products;
``warm_up``: import, ``ob.warm_up()``, then the products) a new Python process imports
the package, makes N(0, 1) device operands, and times its first five ``ob.matmul``
calls of that shape (``out=`` given), each synchronised on its own (wall clock), then
the median of seven more: the steady time. It prints, per shape and way, the import
and warm-up times, calls 1-5 and each one's ratio to the steady time, and the first
call's ratio to cuBLAS's DGEMM of the same operands (timed after the products). Ways:
``plain``, ``warm_up`` and ``other_first`` (``warm_up()`` then five products of an
n/2 cube: a warm process meeting a new shape), ``pool_first`` (``warm_up()``, then
CuPy's pool grown by one block larger than the workspace, its cudaMalloc timed) and
``warm_up_shape`` (``warm_up(shapes=[shape])``); ``FIRST_CALL_WAYS`` picks some
(space-separated). ``FIRST_CALL_PROFILE=1``: a cProfile of
each first call (its largest cumulative entries) and CuPy's pool growth in it.
"""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import cupy
import ozaki_backend as ob
t_import = time.perf_counter() - t0
m, k, n, way = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = cupy.random.default_rng(1)
A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
C = cupy.empty((m, n))
cupy.cuda.Device().synchronize()
t_warm = None
if way in ("warm_up", "pool_first"):
    t0 = time.perf_counter()
    ob.warm_up()
    t_warm = time.perf_counter() - t0
elif way == "warm_up_shape":
    t0 = time.perf_counter()
    ob.warm_up(shapes=[(m, k, n)])
    t_warm = time.perf_counter() - t0
t_pool = None
if way == "pool_first":
    # CuPy's pool grown beforehand by one block larger than the product's workspace
    # (freed to the pool, which splits it): what is left of call 1 is not the growth
    est = 28 * (m * k + k * n) + 64 * m * n
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    blk = cupy.empty(est, dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()
    t_pool = time.perf_counter() - t0
    del blk

def timed(f):
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    f()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - t0

if way == "other_first":
    # a warm process meeting a new shape: warm_up(), then products of another shape
    ob.warm_up()
    h = max(256, m // 2)
    A2, B2 = rng.standard_normal((h, h)), rng.standard_normal((h, h))
    C2 = cupy.empty((h, h))
    for _ in range(5):
        timed(lambda: ob.matmul(A2, B2, out=C2))
pool = cupy.get_default_memory_pool()
pool_before = pool.total_bytes()
if os.environ.get("FIRST_CALL_PROFILE"):
    # where the first call's host time goes (cudaMalloc of the pool's growth, lazy
    # module loads inside cuBLAS, compiles): its 18 largest cumulative entries
    import cProfile, io, pstats
    prof = cProfile.Profile()
    first0 = timed(lambda: prof.runcall(ob.matmul, A, B, out=C))
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(18)
    sys.stderr.write(f"--- first call of {m}x{k}x{n} ({way}): {first0 * 1e3:.1f} ms\n"
                     + s.getvalue())
    first = [first0] + [timed(lambda: ob.matmul(A, B, out=C)) for _ in range(4)]
else:
    first = [timed(lambda: ob.matmul(A, B, out=C)) for _ in range(5)]
pool_growth = pool.total_bytes() - pool_before
steady = sorted(timed(lambda: ob.matmul(A, B, out=C)) for _ in range(7))[3]
native = sorted(timed(lambda: cupy.matmul(A, B, out=C)) for _ in range(7))[3]
print(json.dumps({"import_s": t_import, "warm_up_s": t_warm, "first_s": first,
                  "steady_s": steady, "native_s": native, "pool_growth": pool_growth,
                  "pool_alloc_s": t_pool}))
"""


#: plain: the process's first product; warm_up: after ob.warm_up(); other_first: after
#: ob.warm_up() and five products of another shape (n/2 cubed): a warm process meeting
#: a new shape, the issue's case.
#: pool_first: ob.warm_up(), then one block larger than the workspace allocated and
#: freed (its cudaMalloc timed): call 1 without the pool's growth; warm_up_shape:
#: ob.warm_up(shapes=[the shape]).
WAYS = ("plain", "warm_up", "other_first", "pool_first", "warm_up_shape")


def _shape(text):
    parts = [int(x) for x in text.split(",")]
    return (parts * 3)[:3] if len(parts) == 1 else tuple(parts)


def main(argv):
    shapes = [_shape(a) for a in (argv or ["8192", "8191", "10000"])]
    rows = []
    for m, k, n in shapes:
        for way in os.environ.get("FIRST_CALL_WAYS", "").split() or WAYS:
            out = subprocess.run([sys.executable, "-c", CHILD, str(m), str(k), str(n), way],
                                 capture_output=True, text=True, env=dict(os.environ),
                                 check=False)
            if os.environ.get("FIRST_CALL_PROFILE") and not out.returncode:
                print(out.stderr[-6000:])
            if out.returncode:
                print(f"{m}x{k}x{n} {way}: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(shape=[m, k, n], way=way)
            rows.append(r)
            st = r["steady_s"]
            warm = "" if r["warm_up_s"] is None else f", warm_up {r['warm_up_s'] * 1e3:.0f} ms"
            warm += f", pool +{r['pool_growth'] / 2**30:.2f} GiB in call 1"
            if r.get("pool_alloc_s") is not None:
                warm += f" (a block grown beforehand in {r['pool_alloc_s'] * 1e3:.1f} ms)"
            calls = ", ".join(f"{t * 1e3:.1f} ({t / st:.2f}x)" for t in r["first_s"])
            print(f"{m}x{k}x{n} {way:8s} import {r['import_s'] * 1e3:.0f} ms{warm}; "
                  f"calls 1-5 ms (x steady {st * 1e3:.2f}): {calls}; "
                  f"DGEMM {r['native_s'] * 1e3:.2f} ms")
    if os.environ.get("FIRST_CALL_JSON"):
        with open(os.environ["FIRST_CALL_JSON"], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
