"""The rules that turn options and shapes into counts (``docs/spec.md`` §1–2).

Quantisation widths of the two scaling modes, the bits a moduli count guarantees, the
count a ``bits=`` request needs, and the ``precision="fp64"`` table rule. Pure
functions of integers: the plan and both engines call them, so they cannot disagree.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from .moduli import MAX_MODULI, MIN_MODULI, crt_constants

#: Quantisation bits of the accurate mode: alpha, beta <= 64 fit in int8 and
#: k * 64**2 < 2**31 keeps the bound GEMM exact in int32 for k < 2**19.
ACCURATE_D = 6


def fast_quant_bits(k: int) -> int:
    """``D`` of the fast mode: every ``S_i <= k 4^D`` stays below 2**53."""
    return min(16, (53 - max(int(k), 1).bit_length()) // 2)


def guaranteed_bits(n_moduli: int, k: int) -> int:
    """Bits kept of each row's (column's) largest element, guaranteed for any data.

    Both scaling modes give ``s_i + E_i >= floor((log2 H - log2 k) / 2)``
    (``docs/spec.md`` §2), i.e. the largest integer ``b`` with ``H >= k * 4**b``.
    """
    H = crt_constants(n_moduli).H
    k = max(int(k), 1)
    b = (H // k).bit_length() - 1  # floor(log2(H // k)) == floor(log2(H / k))
    return b // 2


def moduli_for_bits(bits: int, k: int) -> int:
    """Fewest moduli whose :func:`guaranteed_bits` reach ``bits`` at this ``k``."""
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        if guaranteed_bits(n, k) >= bits:
            return n
    return MAX_MODULI


# --------------------------------------------------------------------- precision="fp64"

@lru_cache(maxsize=None)
def fp64_table():
    """The measured ``precision="fp64"`` table (``_data/fp64_moduli.json``)."""
    text = resources.files("ozaki_backend").joinpath("_data/fp64_moduli.json").read_text()
    return json.loads(text)


def spread_bucket(spread: int, edges) -> int:
    """Index of the first spread bucket edge ``>= spread`` (``len(edges)``: beyond)."""
    for b, edge in enumerate(edges):
        if spread <= edge:
            return b
    return len(edges)


def _fp64_row(k: int, mode: str):
    """``(counts, note)``: the table's counts for this ``k``, one per spread bucket plus
    one for spreads beyond the last edge, and where they came from."""
    table = fp64_table()
    beyond = int(table["beyond"])
    rows = table[mode]  # list of [k_max, [N per spread bucket]]
    for k_max, Ns in rows:
        if k <= k_max:
            return list(Ns) + [beyond], f"k <= {k_max}"
    # Beyond the largest calibrated k, each count grows like the bits the longer
    # reduction needs (log2 k / 2 bits more).
    k_max, Ns = rows[-1]
    extra_bits = math.ceil(max(0.0, math.log2(k / k_max)) / 2)
    out = []
    for N in Ns:
        need = guaranteed_bits(N, k_max) + extra_bits
        out.append(min(MAX_MODULI, max(N, moduli_for_bits(need, k))))
    for b in range(1, len(out)):
        out[b] = max(out[b], out[b - 1])
    return out + [max(beyond, out[-1])], f"extrapolated beyond k = {k_max} (+{extra_bits} bits)"


def moduli_for_fp64(k: int, mode: str, spread: int) -> tuple[int, str]:
    """Moduli count for ``precision="fp64"`` at reduction length ``k`` and exponent
    spread ``spread`` (``docs/spec.md`` §1.1), and the rule that chose it.

    The table ``_data/fp64_moduli.json`` was measured by
    ``python -m ozaki_backend calibrate``: for each k bucket and spread bucket, the
    fewest moduli whose max relative error on the calibration operands of that spread
    is no worse than native float64's; non-decreasing in k and in spread. Beyond the
    largest calibrated k, the count grows like the bits needed for the longer reduction
    (``log2 k / 2`` bits more); beyond the last spread edge it is the table's
    ``beyond`` (the most moduli).
    """
    edges = fp64_table()["spread_edges"]
    counts, note = _fp64_row(max(int(k), 1), mode)
    b = spread_bucket(int(spread), edges)
    where = f"spread <= {edges[b]}" if b < len(edges) else f"spread > {edges[-1]}"
    return counts[b], f"fp64 table ({mode}, {note}, {where}): {counts[b]} moduli"


def fp64_rule(k: int, mode: str) -> tuple[int, int, str]:
    """``(fewest, most, text)``: the range of counts ``precision="fp64"`` may pick at
    this ``k`` and the rule, spread bucket by spread bucket."""
    edges = fp64_table()["spread_edges"]
    counts, note = _fp64_row(max(int(k), 1), mode)
    parts, b = [], 0
    while b < len(edges):
        e = b
        while e + 1 < len(edges) and counts[e + 1] == counts[b]:
            e += 1
        parts.append(f"<= {edges[e]}: {counts[b]}")
        b = e + 1
    parts.append(f"> {edges[-1]}: {counts[-1]}")
    text = (f"fp64 table ({mode}, {note}), per call from the operands' exponent spread: "
            + ", ".join(parts))
    return min(counts), max(counts), text
