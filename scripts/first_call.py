"""The first products of a fresh process, with and without ``ozaki_backend.warm_up()``
(issue 33: no cold-call penalty).

    python scripts/first_call.py [SHAPES ...]        (default: 8192 8191 10000)

For each shape (``n`` or ``m,k,n``) and each way (``plain``: import, then the products;
``warm_up``: import, ``ob.warm_up()``, then the products) a new Python process imports
the package, makes N(0, 1) device operands, and times its first five ``ob.matmul``
calls of that shape (``out=`` given), each synchronised on its own (wall clock), then
the median of seven more: the steady time. It prints, per shape and way, the import
and warm-up times, calls 1-5 and each one's ratio to the steady time, and the first
call's ratio to cuBLAS's DGEMM of the same operands (timed after the products).
"""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time
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
if way == "warm_up":
    t0 = time.perf_counter()
    ob.warm_up()
    t_warm = time.perf_counter() - t0

def timed(f):
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    f()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - t0

first = [timed(lambda: ob.matmul(A, B, out=C)) for _ in range(5)]
steady = sorted(timed(lambda: ob.matmul(A, B, out=C)) for _ in range(7))[3]
native = sorted(timed(lambda: cupy.matmul(A, B, out=C)) for _ in range(7))[3]
print(json.dumps({"import_s": t_import, "warm_up_s": t_warm, "first_s": first,
                  "steady_s": steady, "native_s": native}))
"""


def _shape(text):
    parts = [int(x) for x in text.split(",")]
    return (parts * 3)[:3] if len(parts) == 1 else tuple(parts)


def main(argv):
    shapes = [_shape(a) for a in (argv or ["8192", "8191", "10000"])]
    rows = []
    for m, k, n in shapes:
        for way in ("plain", "warm_up"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(m), str(k), str(n), way],
                                 capture_output=True, text=True, env=dict(os.environ),
                                 check=False)
            if out.returncode:
                print(f"{m}x{k}x{n} {way}: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(shape=[m, k, n], way=way)
            rows.append(r)
            st = r["steady_s"]
            warm = "" if r["warm_up_s"] is None else f", warm_up {r['warm_up_s'] * 1e3:.0f} ms"
            calls = ", ".join(f"{t * 1e3:.1f} ({t / st:.2f}x)" for t in r["first_s"])
            print(f"{m}x{k}x{n} {way:8s} import {r['import_s'] * 1e3:.0f} ms{warm}; "
                  f"calls 1-5 ms (x steady {st * 1e3:.2f}): {calls}; "
                  f"DGEMM {r['native_s'] * 1e3:.2f} ms")
    if os.environ.get("FIRST_CALL_JSON"):
        with open(os.environ["FIRST_CALL_JSON"], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
