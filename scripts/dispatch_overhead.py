"""Dispatch overhead of a tiny product (the interception's fixed cost): a 4x4 ``@`` and a
4x4 ``ndarray.dot`` with NumPy alone, with the interception installed but idle (no
scope active anywhere: the matmul loop hook and the BLAS call-site hook forward in C),
and inside ``enabled()`` below the size threshold (the C fast path of both hooks).
timeit, min of 7 repeats of 200000 calls, in microseconds.

Targets (issue 12): idle <= +0.05 us, in a scope below the floor <= +0.5 us.

    python scripts/dispatch_overhead.py
"""

import timeit

import numpy as np

N = 200000
STMTS = {"@": "a @ b", "ndarray.dot": "a.dot(b)", "np.dot": "np.dot(a, b)"}


def per_call(stmt, g):
    return min(timeit.repeat(stmt, globals=g, number=N, repeat=7)) / N * 1e6


def main():
    a, b = np.random.rand(4, 4), np.random.rand(4, 4)
    g = {"a": a, "b": b, "np": np}
    base = {k: per_call(s, g) for k, s in STMTS.items()}
    import ozaki_backend
    from ozaki_backend.dispatch import blashook

    ozaki_backend.dispatch.install()      # both hooks and the wrappers, nothing enabled
    idle = {k: per_call(s, g) for k, s in STMTS.items()}
    # min_size above 4*4*4: every product here is below the floor of an active scope.
    with ozaki_backend.enabled(engine="cpu", min_size=10**6):
        scope = {k: per_call(s, g) for k, s in STMTS.items()}
    print(f"BLAS call-site hook: {blashook.describe()}")
    for k in STMTS:
        print(f"4x4 {k:12s}: numpy {base[k]:.3f} us; installed, idle {idle[k]:.3f} us "
              f"({idle[k] - base[k]:+.3f}); inside enabled(), below the floor "
              f"{scope[k]:.3f} us ({scope[k] - base[k]:+.3f})")


if __name__ == "__main__":
    main()
