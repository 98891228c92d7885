"""Overhead of the dispatch layer on a tiny float64 product (4x4 ``@``).

Prints, for ``A @ B`` with 4x4 float64 operands:

* ``baseline``: NumPy alone (measured before the loop hook is installed);
* ``no scope``: the hook installed, no scope active anywhere (target: <= +0.05 us);
* ``in scope, below threshold``: inside ``enabled(engine="cpu", min_size=1000)``,
  where 4*4*4 = 64 < 1000 keeps the product in the C fast path (target: <= +0.5 us).

Each figure is the best of ``--repeats`` short timeit runs of ``--number`` products
(many short runs, so that the best one is undisturbed even on a busy machine); the
whole measurement runs in ``--processes`` fresh interpreters and the median of the
per-process differences is reported.

Usage: ``python scripts/dispatch_overhead.py [--number N] [--repeats R] [--processes P]``
"""

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, timeit
import numpy as np
number, repeats = int(sys.argv[1]), int(sys.argv[2])
a = np.random.default_rng(0).standard_normal((4, 4)); b = a.copy()

def best():
    return min(timeit.repeat("a @ b", globals={"a": a, "b": b}, number=number,
                             repeat=repeats)) / number * 1e6

import ozaki_backend
from ozaki_backend.dispatch import loophook
assert not loophook.installed()
base1 = best()
ozaki_backend.dispatch.install()
assert loophook.installed()
idle = best()
with ozaki_backend.enabled(engine="cpu", min_size=1000):
    scoped = best()
print(json.dumps({"baseline": base1, "no_scope": idle, "in_scope_below": scoped}))
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--number", type=int, default=5_000)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--processes", type=int, default=3)
    args = p.parse_args(argv)
    runs = []
    for _ in range(args.processes):
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.number), str(args.repeats)],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    base = statistics.median(r["baseline"] for r in runs)
    d_idle = statistics.median(r["no_scope"] - r["baseline"] for r in runs)
    d_scope = statistics.median(r["in_scope_below"] - r["baseline"] for r in runs)
    print(f"4x4 float64 A @ B, best of {args.repeats} x {args.number}, median of "
          f"{args.processes} processes")
    print(f"  baseline (NumPy, hook not installed) : {base:.3f} us")
    print(f"  no scope active          : {d_idle:+.3f} us  (target <= +0.05 us)")
    print(f"  in scope, below threshold: {d_scope:+.3f} us  (target <= +0.5 us)")
    for r in runs:
        print("  run: " + ", ".join(f"{k} {v:.3f} us" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
