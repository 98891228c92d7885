"""Stages 3–4 with the memory-bound passes beside the INT8 GEMMs (off by default).

The same work as the tile loop of :func:`.pipeline.integer_product_into`, in another
order and on three streams; every kernel gets the same inputs, so the bits are the same.

cuBLAS's INT8 GEMM takes every SM, so a kernel on a second stream does not run beside it
(``../shared/notes/overlap-facts.md``: plain streams were slower than one). Here the
GEMMs are asked to leave ``side_sms()`` SMs free (``cublasSetSmCountTarget`` on the
handle, restored afterwards) and run on a high-priority stream, and the output is cut
into blocks:

    side stream:   residues(A_0, B_0) | residues(next block) crt(block 0) | ...
    GEMM stream:                      | GEMMs(block 0)   | GEMMs(block 1) | ...

The residues a block needs are made on the side stream while the previous block's
GEMMs run; each block's CRT pass runs while the next block's GEMMs run. Only the first
block's residues and the last block's CRT stay on the critical path. The high priority
of the GEMM stream keeps the side kernels' blocks (all short) from taking the SMs the
GEMMs were promised when one GEMM ends and the next starts.

Everything is ordered after the work queued on the caller's stream before the call,
and the caller's stream waits for both streams before it goes on (the workspace is
released on it).
"""

from __future__ import annotations

import ctypes
import os
import threading
from contextlib import contextmanager
from functools import lru_cache

import cupy

from . import crt, modgemm, residues
from ._common import block_view, span
from .modprod import _sm_count

#: SMs the GEMMs leave to the side stream (``OZAKI_BACKEND_CUDA_SIDE_SMS``; 0: no
#: overlap, the plain tile loop). Off by default: on the H200 every setting measured was
#: as slow or slower than the plain loop (2026-12-01, scripts/overlap_sweep.py; 8192^3:
#: 17.44 ms plain, 17.94-18.70 with 4-12 SMs left free; 16384^3: 120.4 against
#: 127.9-132.8). The INT8 GEMMs are compute-bound, so they slow down about in
#: proportion to the SMs they give up (11.5 -> 12.5 ms with 8 of 132 free), which eats
#: what the side stream hides (a CRT pass on 8 SMs streams ~0.55 TB/s).
SIDE_SMS = 0
#: Output block edge (``OZAKI_BACKEND_CUDA_OVERLAP_BLOCK``; 0: no overlap). By default
#: 4096 when both sides have at least 8192, else 2048.
BLOCK = None
#: Make a block's residues on the side stream while the previous block's GEMMs run
#: (False: all residues first, on the whole GPU, and only the CRT passes beside the
#: GEMMs — the GEMM stream then never waits for the side stream).
SIDE_RESIDUES = True
#: Below this many outputs the plain tile loop is used (the GEMMs of a block are then
#: too short to hide anything behind, and the host's launches dominate).
MIN_OUTPUTS = 4096 * 4096

#: Products run by :func:`product_into` (tests read it to see the schedule was taken).
RUNS = {"overlapped": 0}

_local = threading.local()


def side_sms() -> int:
    v = os.environ.get("OZAKI_BACKEND_CUDA_SIDE_SMS", "")
    return int(v) if v else SIDE_SMS


def block_for(m: int, n: int):
    """The output block edge of the overlapped schedule for an ``m x n`` product, or
    None where the plain tile loop is used (too small, one block, or switched off)."""
    v = os.environ.get("OZAKI_BACKEND_CUDA_OVERLAP_BLOCK", "")
    b = int(v) if v else BLOCK
    if b is None:
        if m * n < MIN_OUTPUTS:
            return None
        b = 4096 if min(m, n) >= 8192 else 2048
    if b <= 0 or side_sms() <= 0 or (m <= b and n <= b) or _cublas_sm_target() is None:
        return None
    return b


@lru_cache(maxsize=None)
def _cublas_sm_target():
    """``(set, get)`` of ``cublasSetSmCountTarget`` in the libcublas CuPy loaded
    (:func:`.modgemm.libcublas`), or None (not loaded yet or too old: then nothing is
    overlapped). CuPy does not wrap them."""
    lib = modgemm.libcublas()
    if lib is None:
        return None
    try:
        set_, get = lib.cublasSetSmCountTarget, lib.cublasGetSmCountTarget
    except AttributeError:
        return None
    set_.argtypes = [ctypes.c_void_p, ctypes.c_int]
    get.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    set_.restype = get.restype = ctypes.c_int
    return set_, get


@contextmanager
def sm_target(handle, count):
    """cuBLAS calls on ``handle`` launched inside use at most ``count`` SMs (the
    handle's previous target is restored on the way out; 0 means all)."""
    set_, get = _cublas_sm_target()
    old = ctypes.c_int(0)
    if get(handle, ctypes.byref(old)) != 0 or set_(handle, count) != 0:
        raise RuntimeError("cublasSetSmCountTarget failed")
    try:
        yield
    finally:
        set_(handle, old.value)


def _streams():
    """This thread's (GEMM stream, side stream) on the current device: non-blocking,
    the GEMMs' at the highest priority."""
    dev = cupy.cuda.Device().id
    cache = getattr(_local, "streams", None)
    if cache is None:
        cache = _local.streams = {}
    if dev not in cache:
        # CUDA clamps a priority beyond the device's range to its end (the highest).
        cache[dev] = (cupy.cuda.Stream(non_blocking=True, priority=-(1 << 20)),
                      cupy.cuda.Stream(non_blocking=True))
    return cache[dev]


def product_into(A, Bt, S, s, t, RA, RB, C, out, n_moduli, kpad, block, *,
                 alpha=1.0, beta=0.0, C0=None, before_output=None):
    """``out = alpha RN(A'B' 2^(-s-t)) + beta C0`` over ``block x block`` output blocks,
    the residue and CRT passes beside the GEMMs.

    Parameters
    ----------
    A, Bt : cupy float64 (m, k), (n, k)
        The operands read row-wise (B as its transpose).
    S, s, t : cupy int32 or None
        Equilibration exponents along k; A's row and B's column shifts.
    RA, RB, C : cupy int8 (N, m, kpad), int8 (N, n, kpad), int32 (N, m, ldc)
        The workspace of the whole product (one tile, one chunk of k).
    before_output : callable or None
        Called once after the first block's GEMMs are queued and before anything is
        written to ``out`` (it may raise to abandon the product).
    """
    m, n, N = A.shape[0], Bt.shape[0], n_moduli
    RUNS["overlapped"] += 1
    cur = cupy.cuda.get_current_stream()
    gemm_s, side_s = _streams()
    start = cur.record()
    gemm_s.wait_event(start)
    side_s.wait_event(start)
    ready = {}          # ("a", i0) / ("b", j0) -> event: those residues are written

    def need(tile):
        i0, i1, j0, j1 = tile
        with side_s:
            if ("a", i0) not in ready:
                residues.residue_planes_into(A[i0:i1], span(s, i0, i1), RA[:, i0:i1], N,
                                             S=S, ks=-1)
                ready["a", i0] = side_s.record()
            if ("b", j0) not in ready:
                residues.residue_planes_into(Bt[j0:j1], span(t, j0, j1), RB[:, j0:j1],
                                             N, S=S, ks=+1)
                ready["b", j0] = side_s.record()

    tiles = [(i0, min(m, i0 + block), j0, min(n, j0 + block))
             for i0 in range(0, m, block) for j0 in range(0, n, block)]
    h = modgemm.handle()
    try:
        for tile in (tiles[:1] if SIDE_RESIDUES else tiles):
            need(tile)
        with sm_target(h, max(1, _sm_count(cupy.cuda.Device().id) - side_sms())):
            for idx, tile in enumerate(tiles):
                i0, i1, j0, j1 = tile
                with gemm_s:
                    gemm_s.wait_event(ready["a", i0])
                    gemm_s.wait_event(ready["b", j0])
                    # the last block along a side reaches into the planes' padding
                    # (modgemm.GEMM_PAD: aligned GEMM sizes; the rows there unread)
                    ie = RA.shape[1] if i1 == m else i1
                    je = RB.shape[1] if j1 == n else j1
                    modgemm.products_into(RA[:, i0:ie], RB[:, j0:je],
                                          C[:, i0:ie, j0:je], N, i1 - i0, j1 - j0, kpad,
                                          strategy="loop")
                    done = gemm_s.record()
                if idx + 1 < len(tiles):
                    need(tiles[idx + 1])
                if before_output is not None:
                    before_output()
                    before_output = None
                with side_s:
                    side_s.wait_event(done)
                    crt.crt_into(C[:, i0:i1, j0:j1], N, i1 - i0, j1 - j0,
                                 span(s, i0, i1), span(t, j0, j1),
                                 block_view(out, i0, i1, j0, j1), alpha=alpha, beta=beta,
                                 C0=block_view(C0, i0, i1, j0, j1))
    finally:
        # The workspace is freed on the caller's stream: it waits for both streams
        # (also when the product is abandoned with GEMMs still queued).
        cur.wait_event(side_s.record())
        cur.wait_event(gemm_s.record())
