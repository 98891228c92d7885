"""How a product is cut into pieces: symmetric panels, output tiles, workspace budgets.

Pure functions shared by both engines (and by the tests that check them). Nothing here
changes a bit of any result: every output element of Ozaki scheme II is the rounding of
one exact integer (``docs/spec.md`` §6), computed from the scaling of its whole row of A
and whole column of B, so which tile an element is computed in, and how large the tiles
are, only changes speed and memory.

* :func:`symmetric_panels` — the row panels of a symmetric product ``x.T @ x`` or
  ``x @ x.T``: panel ``[i0, i1)`` computes the output block ``C[i0:i1, i0:m]`` (the
  upper block triangle, diagonal blocks in full), the rest is mirrored.
  With ``t`` panels of equal height the work is ``t(t+1)/2`` of ``t^2`` blocks, i.e.
  ``(t+1)/(2t)`` of a general product: 0.53 for the default 16 panels
  (:func:`symmetric_work_fraction` gives the exact figure for ragged panels).
* :func:`tile_list` — output tiles covering an ``m x n`` product exactly once.
* :func:`parse_bytes` and :func:`default_budget` — the device workspace budget
  (``workspace=`` / ``OZAKI_BACKEND_WORKSPACE``).
"""

from __future__ import annotations

import re

#: Target number of row panels of a symmetric product: (16 + 1) / 32 = 0.53 of the
#: general product's INT8 work (at least 10 panels are needed for 0.55).
SYMMETRIC_PANELS = 16
#: Panel heights are multiples of this (whole warps / MMA tiles on the GPU).
PANEL_ALIGN = 64

#: Default workspace budget: this fraction of the device memory that is free when the
#: product starts (cuBLAS, the caller's arrays and other streams need the rest) ...
DEFAULT_FRACTION = 0.85
#: ... but never more than this. GEMMul8 caps its workspace at 12 GiB; 16 GiB keeps the
#: integer product's tiles at 8192 x 4096 or larger up to k = 32768 with 20 moduli
#: (INT8 GEMMs of that size run at cuBLAS's full rate, and the residue planes are
#: recomputed a few times only), while leaving most of an 80 GB device to the operands.
DEFAULT_CAP = 16 << 30


def symmetric_panels(m: int, panels: int = SYMMETRIC_PANELS, min_rows: int = PANEL_ALIGN):
    """Row panels ``[(i0, i1), ...]`` of a symmetric ``m x m`` product.

    Panel ``(i0, i1)`` computes ``C[i0:i1, i0:m]``; together they cover every element
    on or above the diagonal at least once (the diagonal blocks in full) and every
    block strictly below the diagonal never.

    Parameters
    ----------
    m : int
        Order of the product.
    panels : int
        Target number of panels (more panels: less work, smaller GEMMs).
    min_rows : int
        Smallest panel height (rounded up to :data:`PANEL_ALIGN`).
    """
    if m <= 0:
        return []
    rows = max(min_rows, -(-m // max(1, panels)))
    rows = -(-rows // PANEL_ALIGN) * PANEL_ALIGN
    return [(i0, min(m, i0 + rows)) for i0 in range(0, m, rows)]


def symmetric_work(panels, m: int) -> int:
    """Output elements the panels compute (each costs ``k`` multiply-adds per modulus)."""
    return sum((i1 - i0) * (m - i0) for i0, i1 in panels)


def symmetric_work_fraction(m: int, panels: int = SYMMETRIC_PANELS,
                            min_rows: int = PANEL_ALIGN) -> float:
    """The symmetric product's INT8 work as a fraction of the general product's."""
    if m <= 0:
        return 1.0
    return symmetric_work(symmetric_panels(m, panels, min_rows), m) / (m * m)


def tile_list(m: int, n: int, tm: int, tn: int):
    """Output tiles ``[(i0, i1, j0, j1), ...]`` of ``tm x tn`` (ragged at the edges),
    row-major, covering the ``m x n`` product exactly once."""
    if tm <= 0 or tn <= 0:
        raise ValueError(f"tile sizes must be positive; got {tm} x {tn}")
    return [(i0, min(m, i0 + tm), j0, min(n, j0 + tn))
            for i0 in range(0, m, tm) for j0 in range(0, n, tn)]


_UNITS = {"": 1, "b": 1,
          "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6,
          "g": 10 ** 9, "gb": 10 ** 9, "t": 10 ** 12, "tb": 10 ** 12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value, name: str = "workspace"):
    """A byte count from an int or a string such as ``"16GiB"``, ``"12 GB"``,
    ``"512MiB"``, ``"1e9"`` is not accepted (decimal and binary units: ``kB``/``KiB``
    ... ``TB``/``TiB``, case-insensitive); None and ``""`` stay None (the default).

    Raises
    ------
    TypeError
        For a value that is neither an int nor a string (``bool`` included).
    ValueError
        For an unknown unit, a malformed string or a count below one byte.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a byte count (int) or a string like '16GiB'; "
                        f"got {value!r}")
    if isinstance(value, str):
        if not value.strip():
            return None
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(f"{name} must be a byte count or a size like '16GiB', "
                             f"'12GB', '512MiB'; got {value!r}")
        nbytes = int(float(match.group(1)) * _UNITS[unit])
    else:
        try:
            nbytes = int(value.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"{name} must be a byte count (int) or a string like "
                            f"'16GiB'; got {type(value).__name__}") from None
    if nbytes < 1:
        raise ValueError(f"{name} must be at least 1 byte; got {value!r}")
    return nbytes


def default_budget(free: int) -> int:
    """The workspace budget when none is given: :data:`DEFAULT_FRACTION` of ``free``
    bytes, at most :data:`DEFAULT_CAP`."""
    return min(int(free * DEFAULT_FRACTION), DEFAULT_CAP)


def effective_budget(requested, free: int) -> int:
    """The budget a product works within: the requested one (bytes, or None for
    :func:`default_budget`), never more than :data:`DEFAULT_FRACTION` of ``free``."""
    cap = int(free * DEFAULT_FRACTION)
    if requested is None:
        return default_budget(free)
    return min(int(requested), cap)
