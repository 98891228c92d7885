"""How a product is cut into pieces: symmetric panels, output tiles, workspace budgets.

Pure functions shared by both engines (and by the tests that check them). Nothing here
changes a bit of any result: every output element of Ozaki scheme II is the rounding of
one exact integer (``docs/spec.md`` §6), computed from the scaling of its whole row of A
and whole column of B, so which tile an element is computed in, and how large the tiles
are, only changes speed and memory.

* :func:`symmetric_tiles` — the tiles of a symmetric product ``x.T @ x`` or
  ``x @ x.T``: the upper block triangle, halved recursively (large off-diagonal GEMMs,
  small diagonal blocks computed in full); the rest is mirrored. With 16 diagonal
  blocks the work is 17/32 = 0.53 of a general product
  (:func:`symmetric_work_fraction` gives the exact figure for ragged sizes).
* :func:`tile_list` — output tiles covering an ``m x n`` product exactly once.
* :func:`parse_bytes` and :func:`default_budget` — the device workspace budget
  (``workspace=`` / ``OZAKI_BACKEND_WORKSPACE``).
"""

from __future__ import annotations

import re

#: Target number of diagonal blocks of a symmetric product: (16 + 1) / 32 = 0.53 of
#: the general product's INT8 work (at least 10 are needed for 0.55).
SYMMETRIC_PANELS = 16
#: Block boundaries are multiples of this (whole warps / MMA tiles on the GPU).
PANEL_ALIGN = 64

#: Default workspace budget: this fraction of the device memory that is free when the
#: product starts (cuBLAS, the caller's arrays and other streams need the rest) ...
DEFAULT_FRACTION = 0.85
#: ... but never more than this. GEMMul8 caps its workspace at 12 GiB; 16 GiB keeps the
#: integer product's tiles at 8192 x 4096 or larger up to k = 32768 with 20 moduli
#: (INT8 GEMMs of that size run at cuBLAS's full rate, and the residue planes are
#: recomputed a few times only), while leaving most of an 80 GB device to the operands.
DEFAULT_CAP = 16 << 30


def symmetric_leaf(m: int, panels: int = SYMMETRIC_PANELS, min_rows: int = PANEL_ALIGN) -> int:
    """Largest diagonal block of a symmetric ``m x m`` product: ``m / panels`` (rounded
    up to :data:`PANEL_ALIGN`), at least ``min_rows``."""
    rows = max(min_rows, -(-m // max(1, panels)))
    return -(-rows // PANEL_ALIGN) * PANEL_ALIGN


def symmetric_tiles(m: int, panels: int = SYMMETRIC_PANELS, min_rows: int = PANEL_ALIGN,
                    max_tile: int | None = None):
    """Output tiles ``[(i0, i1, j0, j1), ...]`` of a symmetric ``m x m`` product: the
    upper block triangle, cut recursively as a symmetric rank-k update is.

    ``[0, m)`` is halved until a block is at most :func:`symmetric_leaf` rows: each
    halving adds the full off-diagonal block ``(lower half) x (upper half)`` (one large
    GEMM), and each leaf is a diagonal block computed in full. So the tiles cover every
    element on or above the diagonal (the diagonal blocks in full, both their triangles)
    and nothing strictly below the diagonal blocks; with ``2^d`` leaves the work is
    ``1/2 + 1/2^(d+1)`` of the general product's (0.53 for 16 leaves). ``max_tile``
    cuts any tile into pieces of at most that many rows and columns (a workspace
    budget)."""
    if m <= 0:
        return []
    leaf = symmetric_leaf(m, panels, min_rows)
    out = []

    def split(i0, i1):
        if i1 - i0 <= leaf:
            out.append((i0, i1, i0, i1))
            return
        mid = i0 + -(-((i1 - i0) // 2) // PANEL_ALIGN) * PANEL_ALIGN
        mid = min(mid, i1 - 1)
        split(i0, mid)
        out.append((i0, mid, mid, i1))
        split(mid, i1)

    split(0, m)
    if max_tile is None:
        return out
    cut = []
    for i0, i1, j0, j1 in out:
        for a in range(i0, i1, max_tile):
            for b in range(j0, j1, max_tile):
                if i0 == j0 and b < a:      # below the diagonal of a diagonal block
                    continue
                cut.append((a, min(i1, a + max_tile), b, min(j1, b + max_tile)))
    return cut


def symmetric_work(tiles) -> int:
    """Output elements the tiles compute (each costs ``k`` multiply-adds per modulus)."""
    return sum((i1 - i0) * (j1 - j0) for i0, i1, j0, j1 in tiles)


def symmetric_work_fraction(m: int, panels: int = SYMMETRIC_PANELS,
                            min_rows: int = PANEL_ALIGN) -> float:
    """The symmetric product's INT8 work as a fraction of the general product's."""
    if m <= 0:
        return 1.0
    return symmetric_work(symmetric_tiles(m, panels, min_rows)) / (m * m)


def mirrored_blocks(tiles):
    """The tiles strictly above the diagonal blocks (``j0 >= i1``): the ones whose
    mirror images below the diagonal are copied, not computed."""
    return [t for t in tiles if t[2] >= t[1]]


#: Alignment of every buffer inside a workspace allocation (cuda/_common.Workspace).
BUFFER_ALIGN = 256
#: Smallest output tile side the GPU tiles down to.
MIN_TILE = 256


def layout_bytes(*buffers) -> int:
    """Bytes of one workspace allocation holding ``buffers`` (``(count, itemsize)``
    pairs), each aligned to :data:`BUFFER_ALIGN` as the CUDA engine carves them."""
    return sum(-(-max(count * size, 1) // BUFFER_ALIGN) * BUFFER_ALIGN
               for count, size in buffers)


def fit_tiles(m: int, n: int, nbytes, budget: int, min_tile: int = MIN_TILE):
    """``(tm, tn)``: the whole ``m x n`` product when ``nbytes(tm, tn) <= budget``, else
    the tile from halving the longer side (multiples of 64, at least ``min_tile``) until
    it fits; None when even ``min_tile x min_tile`` does not."""
    tm, tn = max(m, 1), max(n, 1)
    while nbytes(tm, tn) > budget:
        if tm <= min_tile and tn <= min_tile:
            return None
        if tm >= tn:
            tm = max(min_tile, -(-(-(-tm // 2)) // 64) * 64)
        else:
            tn = max(min_tile, -(-(-(-tn // 2)) // 64) * 64)
    return tm, tn


def symmetric_plan(m: int, kpad: int, n_moduli: int, budget: int,
                   min_rows: int = MIN_TILE):
    """``(tiles, rows, cols, whole)`` of a symmetric product on the GPU: the tiles of
    :func:`symmetric_tiles` (cut by halving, multiples of 256, until the workspace
    fits), the largest tile's rows and columns, and whether one set of residue planes
    for all ``m`` rows fits (``whole``; else each tile makes its own). The workspace is
    the int8 planes and the int32 products of the largest tile
    (:func:`symmetric_workspace_bytes`). None when even ``min_rows``-sized tiles do
    not fit ``budget``."""
    for whole in (True, False):
        cap = None
        while True:
            tiles = symmetric_tiles(m, min_rows=min_rows, max_tile=cap)
            rows = max(i1 - i0 for i0, i1, _, _ in tiles)
            cols = max(j1 - j0 for _, _, j0, j1 in tiles)
            if symmetric_workspace_bytes(m, rows, cols, kpad, n_moduli, whole) <= budget:
                return tiles, rows, cols, whole
            biggest = max(rows, cols)
            if biggest <= min_rows:
                break
            cap = max(min_rows, -(-(-(-biggest // 2)) // 256) * 256)
    return None


def symmetric_workspace_bytes(m, rows, cols, kpad, n_moduli, whole) -> int:
    """Workspace of the symmetric product: residue planes (all ``m`` rows when
    ``whole``, else a row block and a column block) and the int32 products of one
    ``rows x cols`` tile (``cols`` padded to 16)."""
    N = n_moduli
    planes = [(N * m * kpad, 1)] if whole else [(N * rows * kpad, 1), (N * cols * kpad, 1)]
    return layout_bytes(*planes, (N * rows * (-(-cols // 16) * 16), 4))


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
