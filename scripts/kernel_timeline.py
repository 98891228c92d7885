"""Kernel-by-kernel timeline of the real product on the device (issue 18).

    python scripts/kernel_timeline.py [--steady] [n | m,k,n ...]   (default: 4096 8192)

For N(0,1) operands of n x n x n or m x k x n (CuPy, on the device), ``ob.matmul`` with the default
precision is run under the PyTorch profiler (CUPTI records every kernel of the process,
CuPy's and cuBLAS's included), after a warm-up, three calls. Printed per call: the
wall time (host), the span from the first kernel's start to the last one's end, the
time the GPU was busy, the idle gaps (launch and synchronisation overhead), and each
kernel's name, count and total time, the largest first. No Nsight Systems on the device
image, so this is the timeline we can read. With the overlapped schedule (streams run
kernels at once) the busy time is the union of the kernels' intervals, and the time the
GEMMs and other kernels ran together is printed. ``TIMELINE_HOST=0``: no host profile.
``TIMELINE_PHI=2``: phi data ``(rand - 0.5) exp(phi randn)`` instead of N(0, 1);
``OZAKI_BACKEND_EMULATION=eager`` to see the emulation where the default would run
native DGEMM.

``--steady``: instead, ten calls back to back as a user's loop makes them (no
synchronisation between calls; each waits only for its own count), and per call the
span, the busy time and the idle time, with the idle gaps summed by the pair of kernels
around them: where the GPU waits for the host in the steady state.
"""

import os
import sys
import time
from collections import defaultdict

import cupy

import ozaki_backend as ob


def _kernels(prof):
    """(name, start_us, duration_us) of every GPU kernel and memset/memcpy recorded."""
    out = []
    for e in prof.events():
        dev = getattr(e, "device_type", None)
        if dev is None or "CUDA" not in str(dev):
            continue
        start = e.time_range.start
        out.append((e.name, start, e.time_range.end - start))
    return sorted(out, key=lambda r: r[1])


def _is_gemm(name):
    """cuBLAS's kernels (ours are all named oz_*; CuPy's elementwise ones cupy_*)."""
    low = name.lower()
    return not low.startswith(("oz_", "cupy_", "mem")) and (
        "gemm" in low or "xmma" in low or "cutlass" in low or "sm90" in low)


def _union(spans):
    """Total length of the union of ``(start, duration)`` intervals."""
    total, end = 0.0, None
    for a, d in sorted(spans):
        b = a + d
        if end is None or a > end:
            total += d
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def overlap_summary(g):
    """``(union, gemm_union, other_union, both)`` in us for one call's kernels: the
    time the GPU ran anything, the GEMMs, anything else, and both at once (the
    overlapped schedule's gain; streams run kernels concurrently, so the sum of the
    durations overstates the busy time)."""
    gem = [(a, d) for name, a, d in g if _is_gemm(name)]
    oth = [(a, d) for name, a, d in g if not _is_gemm(name)]
    u, ug, uo = _union([(a, d) for _, a, d in g]), _union(gem), _union(oth)
    return u, ug, uo, ug + uo - u


def _shape(spec):
    """``(m, k, n)`` from ``"n"`` (a cube) or ``"m,k,n"``."""
    v = [int(x) for x in str(spec).split(",")]
    return (v[0], v[0], v[0]) if len(v) == 1 else tuple(v)


def _operands(m, k, n):
    """Device operands ``(A, B)`` of an (m, k) @ (k, n) product: N(0, 1), or with
    ``TIMELINE_PHI=phi`` the phi data ``(rand - 0.5) exp(phi randn)``."""
    rng = cupy.random.default_rng(0)
    phi = float(os.environ.get("TIMELINE_PHI", "-1"))
    if phi < 0:
        return rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return tuple((rng.random(s) - 0.5) * cupy.exp(phi * rng.standard_normal(s))
                 for s in ((m, k), (k, n)))


def _warm_operands(spec, native=False):
    """``((m, k, n), A, B, C)``: device operands of the shape ``spec`` (:func:`_operands`)
    and an output, after five products (and five native ones with ``native``) have
    compiled the kernels, filled the memory pool and captured the prepare stage's graphs
    (the steady state of a loop: ``bench.WARMUP_CALLS``)."""
    m, k, n = _shape(spec)
    A, B = _operands(m, k, n)
    C = cupy.empty((m, n))
    for _ in range(5):
        ob.matmul(A, B, out=C)
        if native:
            cupy.matmul(A, B)
    cupy.cuda.Device().synchronize()
    return (m, k, n), A, B, C


def timeline(spec, calls=3):

    from torch.profiler import ProfilerActivity, profile

    (m, k, n), A, B, C = _warm_operands(spec, native=True)
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            ob.matmul(A, B, out=C)
            cupy.cuda.Device().synchronize()
            walls.append(time.perf_counter() - t0)
            time.sleep(0.01)          # separates the calls in the timeline
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        cupy.matmul(A, B, out=C)
        cupy.cuda.Device().synchronize()
        t_native = time.perf_counter() - t0
    ks = _kernels(prof)
    # split into calls at gaps of more than 5 ms
    groups, cur = [], []
    for r in ks:
        if cur and r[1] - (cur[-1][1] + cur[-1][2]) > 5000:
            groups.append(cur)
            cur = []
        cur.append(r)
    if cur:
        groups.append(cur)
    print(f"{m}x{k}x{n}: wall per call (host) " + ", ".join(f"{w * 1e3:.3f}" for w in walls)
          + f" ms; native DGEMM call {t_native * 1e3:.3f} ms")
    for gi, g in enumerate(groups[:calls]):
        span = g[-1][1] + g[-1][2] - g[0][1]
        busy = sum(d for _, _, d in g)
        gaps = []
        for a, b in zip(g, g[1:]):
            gap = b[1] - (a[1] + a[2])
            if gap > 0:
                gaps.append((gap, a[0][:40], b[0][:40]))
        u, ug, uo, both = overlap_summary(g)
        print(f"  call {gi}: {len(g)} kernels, span {span / 1e3:.3f} ms, busy "
              f"{u / 1e3:.3f} ms (sum of kernels {busy / 1e3:.3f}), idle "
              f"{max(0.0, span - u) / 1e3:.3f} ms; GEMMs {ug / 1e3:.3f} ms, other "
              f"kernels {uo / 1e3:.3f} ms, both at once {both / 1e3:.3f} ms")
        if gi == len(groups[:calls]) - 1:
            agg = defaultdict(lambda: [0, 0.0])
            for name, _, d in g:
                agg[name][0] += 1
                agg[name][1] += d
            for name, (c, d) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
                print(f"      {d / 1e3:8.3f} ms  x{c:<3d} {name[:90]}")
            print("    largest gaps:")
            for gap, a, b in sorted(gaps, reverse=True)[:8]:
                print(f"      {gap / 1e3:8.3f} ms  after {a}  before {b}")
    sys.stdout.flush()


def steady(spec, calls=10):
    """Idle time of ``calls`` products issued back to back (the steady state of a loop)
    and the gaps that make it, summed by the kernels around them."""
    from torch.profiler import ProfilerActivity, profile

    (m, k, n), A, B, C = _warm_operands(spec, native=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            ob.matmul(A, B, out=C)
        cupy.cuda.Device().synchronize()
        wall = time.perf_counter() - t0
    ks = _kernels(prof)
    span = ks[-1][1] + ks[-1][2] - ks[0][1]
    u = _union([(a, d) for _, a, d in ks])
    gaps = defaultdict(lambda: [0, 0.0])
    end = ks[0][1]
    prev = ks[0][0]
    for name, a, d in ks:
        if a > end:
            key = (prev[:44], name[:44])
            gaps[key][0] += 1
            gaps[key][1] += a - end
        if a + d >= end:
            end, prev = a + d, name
    print(f"{m}x{k}x{n} steady, {calls} calls: wall {wall / calls * 1e3:.3f} ms per call, "
          f"GPU span {span / calls / 1e3:.3f}, busy {u / calls / 1e3:.3f}, idle "
          f"{(span - u) / calls / 1e3:.3f} ms per call; idle gaps by the kernels around "
          f"them (per call):")
    for (a, b), (c, g) in sorted(gaps.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"    {g / calls / 1e3:8.3f} ms  x{c / calls:<4.1f} after {a}  before {b}")
    sys.stdout.flush()


def host_profile(spec, calls=20):
    """cProfile of ``calls`` products (the host's share: Python, launches, allocations),
    the functions with the most time of their own first."""
    import cProfile
    import pstats

    (m, k, n), A, B, C = _warm_operands(spec)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        ob.matmul(A, B, out=C)
    cupy.cuda.Device().synchronize()
    pr.disable()
    print(f"host profile, {m}x{k}x{n}, {calls} calls (per call: divide by {calls})")
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(45)
    st.sort_stats("cumulative").print_stats(60)


def main(argv):
    if argv and argv[0] == "--steady":
        for n in argv[1:] or ["4096"]:
            steady(n)
        return
    sizes = argv or ["4096", "8192"]
    for n in sizes:
        timeline(n)
    if os.environ.get("TIMELINE_HOST", "1") != "0":
        host_profile(sizes[0])


if __name__ == "__main__":
    main(sys.argv[1:])
