"""``python -m ozaki_backend demo``: the main job of the quick start.

Multiplies a few real-sized float64 matrices with the backend and prints one
self-explaining screen: for each product the engine, the moduli count, the error against
the exact product next to NumPy's own float64 error (both in roundings of float64 at
the size of the terms summed), and the time next to NumPy's (best of ``--repeat``
warm calls on both sides).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import registry
from ._api import matmul
from ._cli import int_at_least
from ._warnings import EngineUnavailableError
from .plan import plan as make_plan

#: float64's unit roundoff u = 2^-53: the errors are printed in multiples of it.
U = 2.0 ** -53

CASES = (
    # (label, m, k, n, phi, options): A is (m, k), B is (k, n)
    ("N(0,1)", 1024, 1024, 1024, -1.0, {}),
    ("phi=1", 768, 2048, 512, 1.0, {}),
    ("phi=2, tall", 2000, 300, 400, 2.0, {}),
    ("N(0,1), bits=34", 1024, 1024, 1024, -1.0, {"bits": 34}),
)

#: The legend printed under the table: what each column means.
LEGEND = """\
moduli  each modulus is one INT8 matrix product of the operands' remainders; the exact
        integer product is rebuilt from them (Chinese Remainder Theorem) and rounded once
        to float64. precision="fp64" (the default) takes, per product, the fewest moduli
        whose error certificate is at native float64's level; more spread data needs more.
error   max over the elements of |C - exact| / (u * (|A| @ |B|)), u = 2^-53: the error
        in roundings of float64 at the size of the terms summed; NumPy's float64 product
        (same operands, same exact reference) is the yardstick. exact: the product in
        exact integer arithmetic, rounded once (ozaki_backend.testing.exact_matmul).
data    N(0,1): standard normal entries. phi=1, phi=2: (rand - 0.5) * exp(phi * randn),
        entries spread over about 2.6 phi decades (harder data). bits=34: keep 34 bits
        of each row's largest entry, not float64's 53 (fewer moduli: cheaper, less
        accurate), for contrast.
time    best of {repeat} calls after one warm-up call, on both sides."""


def _best_time(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    """``(result, best seconds)`` of ``repeat`` calls of ``fn`` after one warm-up call
    (first calls pay for plans, caches and, on a GPU, kernel compilation)."""
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def scaled_error(C: np.ndarray, exact: np.ndarray, A: np.ndarray, B: np.ndarray) -> float:
    """``max |C - exact| / (u (|A| @ |B|))`` over the elements whose terms are not all
    zero: the error in units of float64's rounding at the size of the terms summed
    (what the error certificate bounds, ``docs/precision.md``)."""
    scale = np.abs(A) @ np.abs(B)
    err = np.abs(np.asarray(C, dtype=np.float64) - exact)
    nonzero = scale > 0
    if not nonzero.any():
        return 0.0
    return float(np.max(err[nonzero] / scale[nonzero]) / U)


def _seconds(t: float) -> str:
    """A time with three significant digits in s or ms (NumPy's small products take
    well under a millisecond)."""
    return f"{t:.3g} s" if t >= 1 else f"{t * 1e3:.3g} ms"


def _shape(m: int, k: int, n: int) -> str:
    """NumPy's reading of the product: ``(m, k) @ (k, n)``."""
    return f"({m}, {k}) @ ({k}, {n})"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``demo`` options (shared by :func:`main` and ``python -m ozaki_backend``)."""
    ap.add_argument("--engine", default="auto", type=str.lower, choices=("auto", "cpu", "cuda"),
                    help="engine to compute with (default auto: the GPU when CuPy and a "
                         "device are usable, else the CPU reference engine)")
    ap.add_argument("--small", action="store_true", help="quarter-size matrices (quick)")
    ap.add_argument("--repeat", type=int_at_least(1), default=3,
                    help="timed calls per product after one warm-up call, best of "
                         "(default 3)")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the demo; returns the exit status."""
    from ._cli import Parser

    ap = Parser(prog="python -m ozaki_backend demo",
                description=(__doc__ or "").splitlines()[0].split(": ", 1)[-1])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed arguments; returns the exit status."""
    if args.engine == "cuda":
        try:
            registry.get("cuda")
        except EngineUnavailableError as exc:
            print(f"ozaki_backend demo: error: {exc}", file=sys.stderr)
            return 1
    from .testing import exact_matmul, phi_matrix

    engine, why = registry.resolve_name(args.engine)
    print("ozaki_backend demo: float64 C = A @ B from exact INT8 integer products "
          "(Ozaki scheme II)")
    print(f"engine: {engine} ({why})")
    if engine == "cpu":
        print("        the CPU engine is the exact NumPy reference: the same bits as the "
              "GPU, but slower than BLAS")
    print()
    rng = np.random.default_rng(2026)
    cols = (f"{'data':16} {'A @ B, NumPy shapes':>29} {'moduli':>6}  "
            f"{'error, ozaki':>12} {'NumPy':>7}  {'time, ozaki':>11} {'NumPy':>8}")
    print(cols)
    print("-" * len(cols))
    for label, m, k, n, phi, opts in CASES:
        if args.small:
            m, k, n = max(m // 4, 1), max(k // 4, 1), max(n // 4, 1)
        A = phi_matrix((m, k), phi, rng)
        B = phi_matrix((k, n), phi, rng)
        moduli = make_plan(m, n, k, engine=args.engine, **opts).moduli_for(A, B)
        C, t_emu = _best_time(lambda: matmul(A, B, engine=args.engine, **opts),
                              args.repeat)
        C_np, t_np = _best_time(lambda: A @ B, args.repeat)
        exact = exact_matmul(A, B)
        err, err_np = scaled_error(C, exact, A, B), scaled_error(C_np, exact, A, B)
        print(f"{label:16} {_shape(m, k, n):>29} {moduli:>6}  {err:>10.3g} u "
              f"{err_np:>5.3g} u  {_seconds(t_emu):>11} {_seconds(t_np):>8}", flush=True)
    print()
    print(LEGEND.format(repeat=args.repeat))
    return 0
