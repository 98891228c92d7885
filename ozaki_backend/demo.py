"""``python -m ozaki_backend demo``: the main job of the quick start.

Multiplies a few real-sized float64 matrices with the backend and prints, for each,
the engine (and why), the moduli count, the max relative error against an exact
reference next to native float64's, and the time next to NumPy's.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import plan as make_plan
from . import registry
from ._api import matmul
from ._warnings import EngineUnavailableError
from .shapes import HEADER as SHAPE_HEADER
from .shapes import format_shape

CASES = (
    # (label, m, k, n, phi)
    ("N(0,1) square", 1024, 1024, 1024, -1.0),
    ("phi=1 wide range", 768, 2048, 512, 1.0),
    ("phi=2 tall-skinny", 2000, 300, 400, 2.0),
    ("seed accuracy bits=34", 1024, 1024, 1024, -1.0),
)


def _time(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``demo`` options (shared by :func:`main` and ``python -m ozaki_backend``)."""
    ap.add_argument("--engine", default="auto", type=str.lower, choices=("auto", "cpu", "cuda"),
                    help="engine to compute with (default auto: the GPU when CuPy and a "
                         "device are usable, else the CPU reference engine)")
    ap.add_argument("--small", action="store_true", help="quarter-size matrices (quick)")
    ap.add_argument("--repeat", type=int, default=1, help="timing repeats (best of)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend demo",
                                 description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args) -> int:
    """Run the demo with parsed arguments; returns the exit status."""
    if args.engine == "cuda":
        try:
            registry.get("cuda")
        except EngineUnavailableError as exc:
            print(f"ozaki_backend demo: error: {exc}", file=sys.stderr)
            return 1
    from .testing import exact_matmul, max_relative_error, phi_matrix

    engine, why = registry.resolve_name(args.engine)
    print(f"ozaki_backend demo — engine: {engine} ({why})")
    if engine == "cpu":
        print("  The CPU engine is the exact NumPy reference: bitwise what the GPU gives,"
              " but slower than BLAS.")
    print()
    rng = np.random.default_rng(2026)
    hdr = (f"{'case':24} {'shape ' + SHAPE_HEADER:>18} {'moduli':>6} {'max rel err':>11} "
           f"{'native err':>10} {'time':>8} {'numpy':>8}")
    print(hdr)
    print("-" * len(hdr))
    for label, m, k, n, phi in CASES:
        if args.small:
            m, k, n = max(m // 4, 1), max(k // 4, 1), max(n // 4, 1)
        A = phi_matrix((m, k), phi, rng)
        B = phi_matrix((k, n), phi, rng)
        opts = {"bits": 34} if "bits=34" in label else {}
        p = make_plan(m, n, k, engine=args.engine, **opts)
        C, t_emu = _time(lambda: matmul(A, B, engine=args.engine, **opts), args.repeat)
        C_np, t_np = _time(lambda: A @ B, max(args.repeat, 3))
        E = exact_matmul(A, B)
        err = max_relative_error(C, E)
        err_np = max_relative_error(C_np, E)
        print(f"{label:24} {format_shape(m, n, k):>18} {p.moduli_for(A, B):>6} {err:>11.2e} "
              f"{err_np:>10.2e} {t_emu:>7.3f}s {t_np:>7.3f}s")
    print()
    print("max rel err: max over elements of |C - exact| / |exact| (exact: "
          "ozaki_backend.testing.exact_matmul).")
    print("precision='fp64' picks, per product, the fewest moduli at least as accurate as "
          "native float64 for the operands' exponent spread; bits=34 is the seed blog's "
          "accuracy.")
    return 0
