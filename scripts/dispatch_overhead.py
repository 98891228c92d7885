"""Dispatch overhead of a tiny product (the interception's fixed cost): a 4x4 ``@`` with
NumPy alone, with the backend imported but idle, and inside ``enabled()`` below the size
threshold. timeit, min of 7 repeats of 200000 calls, in microseconds.

    python scripts/dispatch_overhead.py
"""

import timeit

import numpy as np

N = 200000


def per_call(stmt, g):
    return min(timeit.repeat(stmt, globals=g, number=N, repeat=7)) / N * 1e6


def main():
    a, b = np.random.rand(4, 4), np.random.rand(4, 4)
    g = {"a": a, "b": b}
    base = per_call("a @ b", g)
    import ozaki_backend

    idle = per_call("a @ b", g)
    with ozaki_backend.enabled():
        scope = per_call("a @ b", g)
    print(f"4x4 @: numpy {base:.3f} us; backend imported, idle {idle:.3f} us "
          f"({idle - base:+.3f}); inside enabled() {scope:.3f} us ({scope - base:+.3f})")


if __name__ == "__main__":
    main()
