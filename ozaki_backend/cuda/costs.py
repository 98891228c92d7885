"""The device-side cost model: is this GPU's native DGEMM faster than the emulation?

``precision="fp64"`` on the CUDA engine (``emulation="performant"``, the default) runs
cuBLAS's DGEMM for a product whose emulation at its certified count is measured slower
than DGEMM on this GPU — short reductions, narrow outputs, small sizes on the H200; and
it escalates a product that needs more moduli to native DGEMM as soon as that is the
cheaper step. ``emulation="eager"`` always emulates (as cuBLAS's own emulation
strategies distinguish performant and eager).

The model is a roofline per stage, its rates per GPU in ``_data/device_rates.json``
(fitted to measurements by ``scripts/device_rates.py`` with :func:`fit`: the device named
there, else the slowest-memory record of its compute capability, else the H200's):

* native: ``2mnk / fp64`` against the bytes it moves, plus a launch latency;
* emulation at ``N`` moduli: ``N + 1`` INT8 GEMMs (the bound GEMM included) at the INT8
  rate (reduced for short ``k`` by the measured ``int8_k_half``: a GEMM of reduction
  ``k`` runs at ``k / (k + int8_k_half)`` of it), the memory passes (statistics, residue
  planes, the CRT pass over ``N`` int32 planes, the certificate's pass over ``P``) at
  the device bandwidth, and a fixed host cost for the launches; the a-posteriori test
  and the gathers (wide-range data) add their measured time per output element and per
  operand entry.

It decides speed only: the bits of an emulated product never depend on it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np

#: The H200's measured rates (scripts/device_rates.py timings, fitted over 1024^3 ..
#: 16384^3 and short reductions): the default for unknown GPUs of the same generation,
#: and the shape of a rates record.
H200 = {
    "fp64": 54.5e12,          # cuBLAS DGEMM, large square
    "int8": 1.40e15,          # cublasGemmEx INT8 -> INT32, large square
    "int8_k_half": 660,       # k at which an INT8 GEMM runs at half its rate
    "bandwidth": 3.6e12,      # the memory passes' achieved bytes per second
    "crt_bytes": 10.0,        # the CRT pass's cost per element and modulus, in bytes
    "fixed": 330e-6,          # the emulation's launches and its one read-back
    "native_fixed": 12e-6,    # host time of one DGEMM call
    # cuBLAS's DGEMM where a leading dimension is odd (k or n of the row-major product:
    # rows of 8-byte elements that 16-byte vector loads cannot read): 8191^3 took
    # 25.8-25.9 ms against 19.3-19.8 at 8192^3 on both the H100 and the H200
    # (scripts/peer_side_by_side.py, 2026-12-04 and 2026-12-07), 1.31x; the emulation
    # pads its GEMMs and has no such cliff (19.9 against 20.0 ms)
    "fp64_odd_ld": 1.31,
    # Native unless the emulation is modelled at least 3 % faster: the model's error is
    # a few per cent (8192^3 phi = 1 on an H100, 2026-12-07: modelled 0.985x native at
    # 16 moduli, measured 20.70 ms against DGEMM's 19.83, 0.96x), and a toss-up must not
    # make a default product slower than the GPU's own DGEMM.
    "margin": 0.97,
    # The certificate's data-dependent passes, timed kernel by kernel on eager 8192^3
    # phi = 2 and 16384^3 phi = 1 products (scripts/device_rates.py passes). Measured on
    # an H100 on 2026-12-07 after the gathers compared integer keys and the
    # a-posteriori passes staged their rows (the H100's record); taken unscaled here:
    # the H200 has the same SMs and clocks and faster memory, so these bound its times
    # from above (the H200's own, before those changes, were 45, 88 and 14.5 ps).
    "post_per_element": 28.57e-12,     # the a-posteriori test (level and test passes)
    "gathers_per_element": 60.89e-12,  # the gathers' lower bounds and the second count
    "gathers_per_entry": 14.18e-12,    # each operand entry's top entries and codes
}


@lru_cache(maxsize=None)
def _table():
    try:
        text = resources.files("ozaki_backend").joinpath("_data/device_rates.json").read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    return json.loads(text).get("devices", {})


@lru_cache(maxsize=None)
def _rates_for(device_id: int):
    import cupy

    from .tuning import device_name

    return rates_of(device_name(device_id), cupy.cuda.Device(device_id).compute_capability,
                    _table())


def rates_of(name: str, compute_capability: str, table: dict) -> dict:
    """The rates record of GPU ``name`` from ``table`` (``_data/device_rates.json``'s
    ``devices``): its own, else — a GPU not measured — the record of its compute
    capability with the slowest memory (the memory-bound passes are what differ most
    between GPUs of one generation, the H100's HBM3 against the H200's HBM3e, and the
    slower record sends more products to DGEMM: never slower than native by default),
    else the H200's."""
    if name in table:
        return {**H200, **table[name]["rates"]}
    same = [{**H200, **rec["rates"]} for rec in table.values()
            if rec.get("compute_capability") == compute_capability]
    return min(same, key=lambda r: r["bandwidth"]) if same else dict(H200)


def rates():
    """The current GPU's rates record."""
    import cupy

    return _rates_for(cupy.cuda.runtime.getDevice())


def _native_work(m, n, k):
    """``(flops, bytes moved)`` of cuBLAS's DGEMM ``(m x k) @ (k x n)``."""
    return 2.0 * m * n * k, 8.0 * (m * k + k * n + 2 * m * n)


def native_seconds(m, n, k, r=None) -> float:
    """Modelled seconds of cuBLAS's DGEMM ``(m x k) @ (k x n)`` (slower by
    ``fp64_odd_ld`` where ``k`` or ``n``, a leading dimension, is odd)."""
    r = r or rates()
    flops, moved = _native_work(m, n, k)
    rate = r["fp64"] / (r["fp64_odd_ld"] if (k | n) & 1 else 1.0)
    return max(flops / rate, moved / r["bandwidth"]) + r["native_fixed"]


def _emulation_work(m, n, k, n_moduli, r):
    """``(INT8 operations at the full rate's k, bytes of the memory passes)`` of the
    emulation at ``n_moduli``: its seconds are ``ops / int8 + bytes / bandwidth`` plus
    the fixed cost (the form :func:`fit` inverts)."""
    # the INT8 GEMMs' operations, scaled up for short reductions (a GEMM of reduction
    # k runs at k / (k + int8_k_half) of the rate)
    ops = (n_moduli + 1) * 2.0 * m * n * k * (k + r["int8_k_half"]) / k
    # statistics (three reads of each operand), the residue planes (a read and N int8
    # planes), the bound matrix (an int32 write and two reads), the CRT pass (N int32
    # planes in, one float64 out)
    passes = (3 * 8.0 * (m + n) * k + (8.0 + n_moduli) * (m + n) * k + 12.0 * m * n
              + (r["crt_bytes"] * n_moduli + 8.0) * m * n)
    return ops, passes


def emulation_seconds(m, n, k, n_moduli, post=False, r=None, gathers=False) -> float:
    """Modelled seconds of the emulation at ``n_moduli`` (``post``: with the
    a-posteriori test; ``gathers``: with the gathers, ``docs/spec.md`` §10.2)."""
    r = r or rates()
    ops, passes = _emulation_work(m, n, k, n_moduli, r)
    extra = 0.0
    if post:
        extra += r["post_per_element"] * m * n
    if gathers:
        extra += r["gathers_per_element"] * m * n + r["gathers_per_entry"] * (m + n) * k
    return ops / r["int8"] + passes / r["bandwidth"] + extra + r["fixed"]


def native_faster(m, n, k, n_moduli, post=False, gathers=False) -> bool:
    """Whether native DGEMM is modelled faster than the emulation at ``n_moduli``."""
    r = rates()
    return native_seconds(m, n, k, r) * r["margin"] < emulation_seconds(
        m, n, k, n_moduli, post, r, gathers)


def residual_faster(m, n, k) -> bool:
    """Whether the residual pass (three emulated products at the most moduli) is modelled
    faster than native DGEMM: only on GPUs whose FP64 is much slower than their INT8."""
    r = rates()
    return 3 * emulation_seconds(m, n, k, 20, True, r) < native_seconds(m, n, k, r)


def fit(rows, reference, base=None) -> dict:
    """The rates record of a GPU from its measured times, relative to the same
    measurements on the GPU whose record is ``base`` (the H200's).

    ``rows`` and ``reference``: dicts with ``shape`` ``[m, k, n]``, ``N`` (a fixed count)
    and the measured seconds of cuBLAS's DGEMM (``native``) and of the emulation at ``N``
    without the a-posteriori test or the gathers (``emulation``), as ``scripts/
    device_rates.py timings`` writes them; rows of one shape and count are compared,
    shapes that are not multiples of 256 left out (they measure the padding, not the
    GPU).

    The roofline misses some shapes by 10-20 % (launch gaps, cuBLAS's kernel choice),
    and those errors are the code's, the same on both GPUs: each shape's prediction is
    corrected by the reference's measured-to-modelled ratio, so that only the rates
    are fitted and ``fit(reference, reference)`` gives ``base`` back.

    * ``fp64``: the median over the shapes the model says are compute-bound of the rate
      the corrected model needs to match this GPU's DGEMM time;
    * ``int8``, ``bandwidth`` and ``fixed``: least squares of the corrected emulation
      model's relative error, which is linear in ``1/int8``, ``1/bandwidth`` and
      ``fixed`` (``int8_k_half`` kept); a coefficient the fit would make negative keeps
      ``base``'s value;
    * the a-posteriori test's and the gathers' costs per element and entry are
      memory-bound passes: ``base``'s, scaled by the bandwidths' ratio.
    """
    base = dict(H200 if base is None else base)
    ref = {(tuple(x["shape"]), x["N"]): x for x in reference}
    pairs = [(x, ref[(tuple(x["shape"]), x["N"])]) for x in rows
             if (tuple(x["shape"]), x["N"]) in ref and
             all(d % 256 == 0 for d in x["shape"])]
    if not pairs:
        raise ValueError("fit needs at least one aligned shape measured on both GPUs")
    fp64 = []
    for x, y in pairs:
        m, k, n = x["shape"]
        flops, moved = _native_work(m, n, k)
        if flops / base["fp64"] > moved / base["bandwidth"]:
            kappa = y["native"] / (flops / base["fp64"] + base["native_fixed"])
            t = x["native"] / kappa - base["native_fixed"]
            if t > 0:
                fp64.append(flops / t)
    out = dict(base)
    if fp64:
        out["fp64"] = float(np.median(fp64))
    inv = _fit_emulation(pairs, base)
    if inv is not None:
        out.update(int8=1.0 / inv[0], bandwidth=1.0 / inv[1], fixed=inv[2])
    scale = base["bandwidth"] / out["bandwidth"]
    for key in ("post_per_element", "gathers_per_element", "gathers_per_entry"):
        out[key] = base[key] * scale
    return out


def _fit_emulation(pairs, base):
    """``(1/int8, 1/bandwidth, fixed)``: the weighted least squares of :func:`fit` over
    ``pairs`` (this GPU's row, the reference's); None when no coefficient is positive."""
    given = [1.0 / base["int8"], 1.0 / base["bandwidth"], base["fixed"]]
    X, y = [], []
    for x, r in pairs:
        m, k, n = x["shape"]
        terms = np.array([*_emulation_work(m, n, k, x["N"], base), 1.0])
        kappa = r["emulation"] / float(terms @ given)    # the reference's correction
        X.append(kappa * terms / x["emulation"])
        y.append(1.0)
    X, y = np.asarray(X), np.asarray(y)
    free = [0, 1, 2]
    while free:
        rest = sum(X[:, j] * given[j] for j in range(3) if j not in free)
        coef, *_ = np.linalg.lstsq(X[:, free], y - rest, rcond=None)
        bad = [j for j, c in zip(free, coef) if c <= 0]
        if not bad:
            break
        free = [j for j in free if j not in bad]
    if not free:
        return None
    sol = list(given)
    for j, c in zip(free, coef):
        sol[j] = float(c)
    return tuple(sol)


def clear_cache():
    """Forget the loaded rates (after ``scripts/device_rates.py`` wrote new ones)."""
    _table.cache_clear()
    _rates_for.cache_clear()
