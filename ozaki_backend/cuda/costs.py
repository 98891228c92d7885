"""The device-side cost model: is this GPU's native DGEMM faster than the emulation?

``precision="fp64"`` on the CUDA engine (``emulation="performant"``, the default) runs
cuBLAS's DGEMM for a product whose emulation at its certified count is measured slower
than DGEMM on this GPU — short reductions, narrow outputs, small sizes on the H200; and
it escalates a product that needs more moduli to native DGEMM as soon as that is the
cheaper step. ``emulation="eager"`` always emulates (as cuBLAS's own emulation
strategies distinguish performant and eager).

The model is a roofline per stage, its rates per GPU in ``_data/device_rates.json``
(written from measurements by ``scripts/device_rates.py``, a device named there, else
one of its compute capability, else the H200's):

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

import cupy

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
    # Native unless the emulation is modelled at least 3 % faster: the model's error is
    # a few per cent (8192^3 phi = 1 on an H100, 2026-12-07: modelled 0.985x native at
    # 16 moduli, measured 20.70 ms against DGEMM's 19.83, 0.96x), and a toss-up must not
    # make a default product slower than the GPU's own DGEMM.
    "margin": 0.97,
    # The certificate's data-dependent passes, timed kernel by kernel on 8192^3 and
    # 16384^3 phi = 1, 2 products (scripts/kernel_timeline.py with TIMELINE_PHI):
    "post_per_element": 45e-12,     # the a-posteriori test (level and test passes)
    "gathers_per_element": 88e-12,  # the gathers' lower bounds and the second count
    "gathers_per_entry": 14.5e-12,  # each operand entry's top entries and codes
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
    from .tuning import device_name

    name = device_name(device_id)
    table = _table()
    if name in table:
        return {**H200, **table[name]["rates"]}
    cc = cupy.cuda.Device(device_id).compute_capability
    for rec in table.values():
        if rec.get("compute_capability") == cc:
            return {**H200, **rec["rates"]}
    return dict(H200)


def rates():
    """The current GPU's rates record."""
    return _rates_for(cupy.cuda.runtime.getDevice())


def native_seconds(m, n, k, r=None) -> float:
    """Modelled seconds of cuBLAS's DGEMM ``(m x k) @ (k x n)``."""
    r = r or rates()
    flops = 2.0 * m * n * k
    moved = 8.0 * (m * k + k * n + 2 * m * n)
    return max(flops / r["fp64"], moved / r["bandwidth"]) + r["native_fixed"]


def emulation_seconds(m, n, k, n_moduli, post=False, r=None, gathers=False) -> float:
    """Modelled seconds of the emulation at ``n_moduli`` (``post``: with the
    a-posteriori test; ``gathers``: with the gathers, ``docs/spec.md`` §10.2)."""
    r = r or rates()
    bw = r["bandwidth"]
    eff = k / (k + r["int8_k_half"])
    gemm = (n_moduli + 1) * 2.0 * m * n * k / (r["int8"] * eff)
    # statistics (three reads of each operand), the residue planes (a read and N int8
    # planes), the bound matrix (an int32 write and two reads), the CRT pass (N int32
    # planes in, one float64 out)
    passes = (3 * 8.0 * (m + n) * k + (8.0 + n_moduli) * (m + n) * k + 12.0 * m * n
              + (r["crt_bytes"] * n_moduli + 8.0) * m * n)
    extra = 0.0
    if post:
        extra += r["post_per_element"] * m * n
    if gathers:
        extra += r["gathers_per_element"] * m * n + r["gathers_per_entry"] * (m + n) * k
    return gemm + passes / bw + extra + r["fixed"]


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


def clear_cache():
    """Forget the loaded rates (after ``scripts/device_rates.py`` wrote new ones)."""
    _table.cache_clear()
    _rates_for.cache_clear()
