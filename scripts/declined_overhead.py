"""Where a declined product's time goes inside enabled() (issue 29, item 1), on the
machine it runs on: plain NumPy against the same call inside a scope, timed
alternately (one call each way in turn), for cubes the cost model keeps native, in
three process states, and the parts of the scope's cost:

  state 1  before CuPy is imported (engine="cuda" forced: the cost model decides);
  state 2  after the CUDA engine is loaded and a device context exists;
  state 3  after a routed product (staging threads, pinned buffers, CuPy's pool alive);
  parts    the Python decision of one product (loophook._route), the C fast path
           (a product below the floor), NumPy's memset of ndarray.dot's output (fresh
           memory, as NumPy does it before its BLAS call) at n = 8192.

Usage: python scripts/declined_overhead.py [n ...]   (default 1024 1536 2048 3072)
Prints one line per (state, n): NumPy ms, scoped ms, ratio, decision.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import ozaki_backend as ob
from ozaki_backend import bench_host
from ozaki_backend.dispatch import loophook, routing


def rows(state, sizes, reps=7):
    scope = lambda: ob.enabled(engine="cuda")   # noqa: E731 (the cost model decides)
    with scope():
        cfg = ob.dispatch.config.current().config
    for n in sizes:
        d = routing.decide(cfg, n, n, n, entry="@/np.matmul")
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        t_nat, t_in = bench_host.alternating_times(lambda: a @ b, reps, scope)
        print(f"{state:28s} n={n:5d}: NumPy {t_nat * 1e3:8.2f} ms  in scope "
              f"{t_in * 1e3:8.2f} ms  ratio {t_in / t_nat:6.3f}  "
              f"{'routed' if d else 'native'} ({d.reason})", flush=True)


def parts():
    a3 = np.random.default_rng(0).standard_normal((1, 1536, 1536))
    o3 = np.empty_like(a3)
    with ob.enabled(engine="cuda"):
        loophook._route(a3, a3, o3)
        t0 = time.perf_counter()
        for _ in range(200):
            loophook._route(a3, a3, o3)
        dec = (time.perf_counter() - t0) / 200
        small = np.ones((8, 8))
        t0 = time.perf_counter()
        for _ in range(20000):
            small @ small
        fast_in = (time.perf_counter() - t0) / 20000
    t0 = time.perf_counter()
    for _ in range(20000):
        small @ small
    fast_out = (time.perf_counter() - t0) / 20000
    fills = []
    for _ in range(3):
        t0 = time.perf_counter()
        x = np.empty((8192, 8192))
        x.fill(0.0)      # NumPy's memset of a fresh ndarray.dot output, single thread
        fills.append(time.perf_counter() - t0)
        del x
    print(f"parts: Python decision of a declined 1536^3 product {dec * 1e6:.1f} us; "
          f"8x8 @ below the floor {fast_in * 1e6:.3f} us in scope vs {fast_out * 1e6:.3f} "
          f"us outside; memset of a fresh 8192^2 output {statistics.median(fills) * 1e3:.1f}"
          " ms (ndarray.dot pays it before its BLAS call)", flush=True)


def route_profile(n=1024, calls=500, top=22):
    """The Python router's own time for a declined n^3 product, function by function
    (cProfile of ``calls`` calls of ``loophook._route``, in us per product): which
    part of the decision costs what on this host."""
    import cProfile
    import pstats

    a3 = np.random.default_rng(0).standard_normal((1, n, n))
    o3 = np.empty_like(a3)
    with ob.enabled(engine="cuda"):
        for _ in range(20):
            loophook._route(a3, a3, o3)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            loophook._route(a3, a3, o3)
        prof.disable()
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    print(f"route profile, declined {n}^3, us per product (own / cumulative):")
    for (path, line, name), (cc, nc, tt, ct, _callers) in rows:
        print(f"  {tt / calls * 1e6:7.2f} {ct / calls * 1e6:8.2f}  {nc / calls:5.1f}x  "
              f"{path.rsplit('/', 2)[-1]}:{line}({name})")


def main(argv):
    sizes = [int(v) for v in argv] or [1024, 1536, 2048, 3072]
    ob.dispatch.install()
    rows("1 before CuPy", sizes)
    from ozaki_backend.cuda import availability

    ok, why = availability()
    if not ok:
        print(f"no GPU ({why}): states 2 and 3 skipped")
        parts()
        return 0
    import cupy

    cupy.zeros(1).sum()
    rows("2 CUDA context", sizes)
    x = np.random.default_rng(1).standard_normal((4096, 4096))
    with ob.enabled(engine="cuda", min_size=0):
        x @ x
    rows("3 after a routed product", sizes)
    parts()
    route_profile()
    print(ob.stats())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
