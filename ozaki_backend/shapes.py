"""The one convention for product shapes on the command line and in printed tables.

A product ``(m x k) @ (k x n)`` is written ``m,n,k``: the order of
``ozaki_backend.plan(m, n, k)`` and of BLAS's ``M, N, K``. ``demo``, ``bench`` and
``tune`` take and print shapes this way (table headers say ``m,n,k``). Accepted forms:

* ``M,N,K`` (plan's order), e.g. ``4096,4096,65536`` for a long ``k``;
* ``m=M,n=N,k=K`` in any order;
* ``N``: the cube ``N,N,N``;
* the older ``MxKxN`` (operand order), only where it cannot be misread: when its last
  two numbers are equal, both readings are the same product. Otherwise it is rejected
  with the two readings spelled out.
"""

from __future__ import annotations

import argparse

#: Column header of a shape in printed tables.
HEADER = "m,n,k"
#: ``--shapes`` help text (shared by the commands that take shapes).
HELP = ("product shapes as M,N,K (the order of plan(m, n, k): (M x K) @ (K x N)), "
        "m=M,n=N,k=K, or N for a cube")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``(m, n, k)`` from one shape written as the module docstring says.

    Raises
    ------
    argparse.ArgumentTypeError
        For anything else, with the accepted forms (a ``ValueError``, so it also works
        outside argparse).
    """
    t = text.strip().lower().replace(" ", "")
    try:
        if "=" in t:
            parts = dict(p.split("=", 1) for p in t.split(","))
            if set(parts) != {"m", "n", "k"}:
                raise ValueError
            m, n, k = (int(parts[x]) for x in "mnk")
        elif "," in t:
            m, n, k = (int(v) for v in t.split(","))
        elif "x" in t:
            a, b, c = (int(v) for v in t.split("x"))
            if b != c:
                raise argparse.ArgumentTypeError(
                    f"shape {text!r} is ambiguous: as M,N,K it would be "
                    f"{a},{b},{c} but the old MxKxN form meant {a},{c},{b}; write "
                    f"{a},{c},{b} (M,N,K: the order of plan(m, n, k)) or m={a},n={c},k={b}")
            m, n, k = a, c, b
        else:
            m = n = k = int(t)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"shape must be M,N,K, m=M,n=N,k=K or N; got {text!r}") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"shape sizes must be >= 1; got {text!r}")
    return m, n, k


def format_shape(m: int, n: int, k: int) -> str:
    """``"m,n,k"``: the form :func:`parse_shape` reads back."""
    return f"{m},{n},{k}"
