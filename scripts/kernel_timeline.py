"""Kernel-by-kernel timeline of the real product on the device (issue 18).

    python scripts/kernel_timeline.py [n ...]          (default: 4096 8192)

For N(0,1) operands of n x n x n (CuPy, on the device), ``ob.matmul`` with the default
precision is run under the PyTorch profiler (CUPTI records every kernel of the process,
CuPy's and cuBLAS's included), after a warm-up, three calls. Printed per call: the
wall time (host), the span from the first kernel's start to the last one's end, the
time the GPU was busy, the idle gaps (launch and synchronisation overhead), and each
kernel's name, count and total time, the largest first. No Nsight Systems on the device
image, so this is the timeline we can read.
"""

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


def timeline(n, calls=3):

    from torch.profiler import ProfilerActivity, profile

    rng = cupy.random.default_rng(0)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    C = cupy.empty((n, n))
    for _ in range(3):
        ob.matmul(A, B, out=C)
        cupy.matmul(A, B)
    cupy.cuda.Device().synchronize()
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
    print(f"n={n}: wall per call (host) " + ", ".join(f"{w * 1e3:.3f}" for w in walls)
          + f" ms; native DGEMM call {t_native * 1e3:.3f} ms")
    for gi, g in enumerate(groups[:calls]):
        span = g[-1][1] + g[-1][2] - g[0][1]
        busy = sum(d for _, _, d in g)
        gaps = []
        for a, b in zip(g, g[1:]):
            gap = b[1] - (a[1] + a[2])
            if gap > 0:
                gaps.append((gap, a[0][:40], b[0][:40]))
        print(f"  call {gi}: {len(g)} kernels, span {span / 1e3:.3f} ms, busy "
              f"{busy / 1e3:.3f} ms, idle {max(0.0, span - busy) / 1e3:.3f} ms")
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


def host_profile(n, calls=20):
    """cProfile of ``calls`` products (the host's share: Python, launches, allocations),
    the functions with the most time of their own first."""
    import cProfile
    import pstats

    rng = cupy.random.default_rng(0)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    C = cupy.empty((n, n))
    for _ in range(3):
        ob.matmul(A, B, out=C)
    cupy.cuda.Device().synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        ob.matmul(A, B, out=C)
    cupy.cuda.Device().synchronize()
    pr.disable()
    print(f"host profile, n={n}, {calls} calls (per call: divide by {calls})")
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(45)
    st.sort_stats("cumulative").print_stats(60)


def main(argv):
    sizes = [int(x) for x in argv] or [4096, 8192]
    for n in sizes:
        timeline(n)
    host_profile(sizes[0])


if __name__ == "__main__":
    main(sys.argv[1:])
