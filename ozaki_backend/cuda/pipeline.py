"""The CUDA engine end to end on device operands: scaling -> residues -> GEMMs -> CRT.

Mirrors :mod:`ozaki_backend.reference.pipeline`. :func:`product_into` is the driver
both array worlds use (``engine.py`` moves NumPy operands in and out around it):

1. the workspace is sized up front for the largest output tile that fits in free
   device memory (the whole product when it fits; otherwise tiles over m and n);
2. exponents ``s``, ``t`` for the whole product (the accurate mode's bound matrix tile
   by tile when it does not fit);
3. per output tile: residue planes of A's row block and B's column block, the N INT8
   GEMMs, and the fused CRT / rounding / alpha-beta pass into the output tile.

Everything runs on the current CuPy stream; nothing synchronises except the optional
phase timer.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import cupy
import numpy as np

from ..semantics import apply_alpha_beta
from ..spec.moduli import MODULI
from . import crt, modgemm, modprod, residues, scaling, tuning
from ._common import KPAD, LDC_PAD, Workspace, free_device_bytes, round_up
from .errors import CudaEngineError
from .scaling import BoundMatrix

#: Tests may force small tiles: ``(tm, tn)``; ``OZAKI_BACKEND_CUDA_TILE="tm,tn"`` too.
TILE_OVERRIDE = None
#: Fraction of the free device memory the workspace may take (cuBLAS and the caller's
#: own allocations need some headroom).
MEMORY_FRACTION = 0.85
_MIN_TILE = 256


class Phases:
    """Optional per-phase timing with CUDA events (for the benchmark's breakdown)."""

    NAMES = ("scaling", "residues", "gemms", "crt")

    def __init__(self):
        self._pairs = []

    @contextmanager
    def __call__(self, name):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        try:
            yield
        finally:
            stop.record()
            self._pairs.append((name, start, stop))

    def totals(self):
        """Seconds per phase (synchronises)."""
        out = dict.fromkeys(self.NAMES, 0.0)
        for name, start, stop in self._pairs:
            stop.synchronize()
            out[name] = out.get(name, 0.0) + cupy.cuda.get_elapsed_time(start, stop) / 1e3
        return out


@contextmanager
def _nothing(_name):
    yield


def _layouts(tm, tn, kpad, N, mode, path="cublas"):
    """Workspace layouts: (scaling, products); they are live one after the other.

    The cuBLAS path keeps N int32 product planes; the fused path N residue bytes.
    """
    prod = Workspace()
    prod.need("RA", (N, tm, kpad), np.int8)
    prod.need("RB", (N, tn, kpad), np.int8)
    dtype = np.uint8 if path == "wgmma" else np.int32
    prod.need("C", (N, tm, round_up(tn, LDC_PAD)), dtype)
    bound = Workspace()
    if mode == "accurate":
        BoundMatrix.need(bound, tm, tn, kpad)
    return bound, prod


def workspace_bytes(tm, tn, kpad, N, mode, path="cublas") -> int:
    """Device bytes one call needs for ``(tm, tn)`` tiles (both stages share them)."""
    bound, prod = _layouts(tm, tn, kpad, N, mode, path)
    return max(bound.nbytes, prod.nbytes)


def choose_tiles(m, n, kpad, N, mode, free=None, path="cublas"):
    """``(tm, tn)``: the whole product when it fits, else the largest halving that does."""
    override = TILE_OVERRIDE
    env = os.environ.get("OZAKI_BACKEND_CUDA_TILE", "")
    if override is None and env:
        override = tuple(int(v) for v in env.split(","))
    if override is not None:
        return max(1, min(m, override[0])), max(1, min(n, override[1]))
    if free is None:
        free = free_device_bytes()
    budget = int(free * MEMORY_FRACTION)
    tm, tn = max(m, 1), max(n, 1)
    while workspace_bytes(tm, tn, kpad, N, mode, path) > budget:
        if tm <= _MIN_TILE and tn <= _MIN_TILE:
            raise CudaEngineError(
                f"device out of memory: the smallest tile ({tm} x {tn}, k = {kpad}) needs "
                f"{workspace_bytes(tm, tn, kpad, N, mode, path)} bytes of workspace, "
                f"{budget} are available")
        if tm >= tn:
            tm = max(_MIN_TILE, round_up(-(-tm // 2), 64))
        else:
            tn = max(_MIN_TILE, round_up(-(-tn // 2), 64))
    return tm, tn


def product_into(A, B, plan, out, *, alpha=1.0, beta=0.0, C0=None, phases=None,
                 strategy=None, check_finite=False):
    """``out = alpha * (A @ B) + beta * C0`` with Ozaki scheme II (``plan``), on device.

    Parameters
    ----------
    A : cupy float64 (m, k), B : cupy float64 (k, n)
        Finite operands, any strides (transposed and strided views are read in place).
    plan : Plan
        ``scheme="ozaki2"``; its moduli count (for ``precision="fp64"``: its rule, applied
        to the operands' exponent spread) and mode decide the bits.
    out : cupy float64 (m, n), any strides
        Every element is written.
    C0 : cupy float64 (m, n) or None
        Read only when ``beta != 0``.
    phases : Phases or None
        Records per-phase CUDA events when given.
    check_finite : bool
        Read (one synchronising read of a few bytes, shared with the moduli choice of
        ``precision="fp64"``) whether the exponent pass met Inf/NaN, and if so return
        None without computing: the caller takes the native path.

    Returns
    -------
    out, or None (non-finite operand, ``check_finite`` only)
    """
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0:
        return out
    ph = phases or _nothing
    if k == 0:
        out.fill(0.0)
        if alpha != 1.0 or beta != 0.0:
            out[...] = apply_alpha_beta(out, alpha, beta, C0)
        return out
    # The moduli count: the plan's, or for precision="fp64" the table entry for the
    # operands' exponent spread (one pass over A and B, one 8-byte read, which also
    # tells whether an operand holds Inf/NaN); the row exponents are reused below.
    with ph("scaling"):
        N, exps = scaling.choose_moduli(A, B, plan, check_finite=check_finite)
    if N is None:
        return None
    kpad = round_up(k, KPAD)
    # `strategy` may force the path (a cuBLAS issue order implies the cuBLAS path);
    # otherwise the tuning table decides, and gives the fused kernel's tile width.
    path = {"batched": "cublas", "loop": "cublas", "cublas": "cublas"}.get(strategy)
    width = 0
    if path is None:
        chosen, width, _ = tuning.choice(m, n, k, N)
        path = "wgmma" if strategy == "wgmma" else chosen
    if strategy not in ("batched", "loop"):
        strategy = None
    tm, tn = choose_tiles(m, n, kpad, N, plan.mode, path=path)
    bound, prod = _layouts(tm, tn, kpad, N, plan.mode, path)
    buf = cupy.empty(max(bound.nbytes, prod.nbytes), dtype=np.uint8)
    tiles = [(i0, min(m, i0 + tm), j0, min(n, j0 + tn))
             for i0 in range(0, m, tm) for j0 in range(0, n, tn)]
    Bt = B.T
    with ph("scaling"):
        if plan.mode == "accurate":
            s, t, EA, EB = scaling.shifts(A, B, N, "accurate", tiles=tiles, tm=tm, tn=tn,
                                          views=bound.carve(buf), exps=exps)
        else:
            s, t, EA, EB = scaling.shifts(A, B, N, "fast", exps=exps)
    v = prod.carve(buf)
    RA, RB, C = v["RA"], v["RB"], v["C"]
    items = [(l, l, p, l) for l, p in enumerate(MODULI[:N])]
    rows_key = cols_key = None
    for (i0, i1, j0, j1) in tiles:
        with ph("residues"):
            if rows_key != (i0, i1):
                residues.residue_planes_into(A[i0:i1], s[i0:i1], RA, N)
                rows_key = (i0, i1)
            if cols_key != (j0, j1):
                residues.residue_planes_into(Bt[j0:j1], t[j0:j1], RB, N)
                cols_key = (j0, j1)
        with ph("gemms"):
            if path == "wgmma":
                modprod.mod_products(RA, RB, items, C, i1 - i0, j1 - j0, backend="wgmma",
                                     bn=width)
            else:
                modgemm.products_into(RA, RB, C, N, i1 - i0, j1 - j0, kpad,
                                      strategy=strategy)
        with ph("crt"):
            crt.crt_into(C, N, i1 - i0, j1 - j0, s[i0:i1], t[j0:j1], out[i0:i1, j0:j1],
                         alpha=alpha, beta=beta,
                         C0=None if C0 is None else C0[i0:i1, j0:j1])
    del buf, v, RA, RB, C
    return out


def ozaki2_2d(A, B, plan):
    """Ozaki scheme II product of 2-D finite float64 device operands (CuPy result)."""
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    out = cupy.empty((A.shape[0], B.shape[1]), dtype=np.float64)
    return product_into(A, B, plan, out)
