"""The workspace of one Ozaki-II product on the device: its budget, its layouts, its
tiles, its out-of-memory retries and what it is measured with.

The stages of :mod:`.pipeline` (:mod:`.prepared`, :mod:`.integer_product`) take their
buffers from here, within :func:`workspace_budget`: ``workspace=`` (or
``OZAKI_BACKEND_WORKSPACE``), else :func:`~ozaki_backend.spec.tiling.default_budget`,
never more than :data:`MEMORY_FRACTION` of the free device memory. A product whose
untiled workspace exceeds the budget is tiled (:func:`tiles_for`, the rules of
:mod:`ozaki_backend.spec.tiling`; tiles only partition the output, so the bits do not
change); one whose smallest tile still does not fit splits k (:func:`_k_tiles`). An
out-of-memory error retries with half the budget (:func:`with_retries`,
:data:`OOM_RETRIES` times) before the caller computes the product natively
(``docs/spec.md`` §10.4's native fallback). The workspace's high-water mark
(:func:`last_workspace_peak`) and the per-phase timing (:class:`Phases`) are recorded
here too.

This thread's retry budget, high-water mark and out-of-core tile extra live in one
thread-local record (``_local``), written only by this module.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from functools import lru_cache

import cupy
import numpy as np

from ..engine import requested_workspace
from ..spec import tiling
from . import graphs, modgemm
from ._common import KPAD, Workspace, free_device_bytes, round_up
from .errors import CudaEngineError, WorkspaceTooSmall
from .scaling import BoundMatrix

#: Tests may force small tiles: ``(tm, tn)``; ``OZAKI_BACKEND_CUDA_TILE="tm,tn"`` too.
TILE_OVERRIDE = None
#: Fraction of the free device memory the workspace may take (cuBLAS and the caller's
#: own allocations need some headroom); the default budget is also capped
#: (:data:`ozaki_backend.spec.tiling.DEFAULT_CAP`).
MEMORY_FRACTION = tiling.DEFAULT_FRACTION
_MIN_TILE = tiling.MIN_TILE
#: Out-of-memory retries, each with half the previous budget, before the product is
#: computed natively (with a warning).
OOM_RETRIES = 3

_local = threading.local()      # this thread's retry budget and high-water mark


def workspace_budget(free=None) -> int:
    """Bytes the current product's workspace may take: ``workspace=`` (or
    ``OZAKI_BACKEND_WORKSPACE``), else :func:`~ozaki_backend.spec.tiling.default_budget`;
    never more than ``MEMORY_FRACTION`` of the free memory (``free``, default: measured
    now), nor more than an out-of-memory retry's reduced budget."""
    if free is None:
        free = free_device_bytes()
    requested = requested_workspace()
    if requested is None:
        requested = tiling.parse_bytes(os.environ.get("OZAKI_BACKEND_WORKSPACE", ""),
                                       "OZAKI_BACKEND_WORKSPACE")
    budget = tiling.effective_budget(requested, free)
    retry = getattr(_local, "retry_budget", None)
    return budget if retry is None else min(budget, retry)


def _note_workspace():
    """Record the memory pool's use above the product's starting point (the workspace
    high-water mark: everything the product allocated, its result buffers excepted)."""
    base = getattr(_local, "base", None)
    if base is not None:
        used = cupy.get_default_memory_pool().used_bytes() - base
        _local.peak = max(getattr(_local, "peak", 0), used)


def retrying() -> bool:
    """Whether this thread's product is an out-of-memory retry (:func:`with_retries`
    reduced its budget)."""
    return getattr(_local, "retry_budget", None) is not None


@contextmanager
def tile_extra(extra):
    """Within the block, tile choices also count ``extra(tm, tn)`` bytes per tile (the
    out-of-core driver's operand blocks and result tile)."""
    prev = getattr(_local, "extra", None)
    _local.extra = extra
    try:
        yield
    finally:
        _local.extra = prev


def last_workspace_peak():
    """Device bytes of this thread's most recent Ozaki-II product's workspace at its
    high-water mark (CuPy pool use above the start of the product, sampled after each
    workspace allocation), or None."""
    return getattr(_local, "last_peak", None)


class Phases:
    """Optional per-phase timing with CUDA events (for the benchmark's breakdown)."""

    NAMES = ("scaling", "residues", "gemms", "crt")

    def __init__(self):
        self._pairs = []
        #: Workspace high-water mark of the last product timed (bytes).
        self.workspace_peak = None

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


def _host_tiles(ph, tm, tn):
    """``(tm, tn)`` capped by the host path's ``ph.tile_cap`` (``(rows, cols)``, set by
    ``engine.matmul_numpy`` so that finished output tiles download while the next ones
    compute); tiles only partition the output, so the bits do not change."""
    cap = getattr(ph, "tile_cap", None)
    if cap is None:
        return tm, tn
    return max(1, min(tm, cap[0])), max(1, min(tn, cap[1]))


@lru_cache(maxsize=512)
def _product_layout(tm, tn, kpad, N, path="cublas"):
    """Workspace of the integer product for ``(tm, tn)`` tiles: the residue planes and
    the N products (int32 planes on the cuBLAS path, residue bytes on the fused one).
    Cached (a layout is never changed after it is made; the tile search and every
    product of a shape ask again)."""
    prod = Workspace()
    # The cuBLAS path's planes hold rows up to a multiple of GEMM_PAD: its GEMMs then run
    # on aligned sizes (modgemm.products_into), the extra rows never read back.
    pm, pn = (tm, tn) if path == "wgmma" else (round_up(tm, modgemm.GEMM_PAD),
                                               round_up(tn, modgemm.GEMM_PAD))
    prod.need("RA", (N, pm, kpad), np.int8)
    prod.need("RB", (N, pn, kpad), np.int8)
    prod.need("C", (N, pm, round_up(pn, 16)), np.uint8 if path == "wgmma" else np.int32)
    return prod


@lru_cache(maxsize=512)
def _bound_layout(tm, tn, kpad):
    bound = Workspace()
    BoundMatrix.need(bound, tm, tn, kpad)
    return bound


def workspace_bytes(tm, tn, kpad, N, mode=None, path="cublas") -> int:
    """Device bytes of the larger of the two stages' workspaces for ``(tm, tn)`` tiles
    (the bound GEMM's, then the integer product's; ``mode`` is accepted for callers that
    pass it and changes nothing: both modes compute the bound GEMM)."""
    return max(_bound_layout(tm, tn, kpad).nbytes,
               _product_layout(tm, tn, kpad, N, path).nbytes)


def tiles_for(m, n, nbytes, free=None):
    """``(tm, tn)``: the whole product when ``nbytes(tm, tn)`` fits, else the largest
    halving that does."""
    override = TILE_OVERRIDE
    env = os.environ.get("OZAKI_BACKEND_CUDA_TILE", "")
    if override is None and env:
        override = tuple(int(v) for v in env.split(","))
    if override is not None:
        return max(1, min(m, override[0])), max(1, min(n, override[1]))
    budget = workspace_budget(free)
    extra = getattr(_local, "extra", None)
    if extra is not None:           # out of core: operand blocks and the result tile too
        size = nbytes
        nbytes = lambda tm, tn: size(tm, tn) + extra(tm, tn)   # noqa: E731
    tiles = tiling.fit_tiles(m, n, nbytes, budget, _MIN_TILE)
    if tiles is None:
        t = min(m, _MIN_TILE), min(n, _MIN_TILE)
        raise WorkspaceTooSmall(
            f"device out of memory: the smallest tile ({t[0]} x {t[1]}) needs "
            f"{nbytes(*t)} bytes of workspace, {budget} are available")
    return tiles


def choose_tiles(m, n, kpad, N, mode=None, free=None, path="cublas"):
    """``(tm, tn)`` of the integer product with ``N`` moduli (see :func:`tiles_for`)."""
    return tiles_for(m, n, lambda tm, tn: _product_layout(tm, tn, kpad, N, path).nbytes,
                      free)


_tile_list = tiling.tile_list


def _k_tiles(m, n, kpad, N):
    """``(tm, tn, kc)``: the smallest output tiles and the longest chunk of k (a
    multiple of ``KPAD``) whose integer-product workspace fits the budget."""
    budget = workspace_budget()
    extra = getattr(_local, "extra", None) or (lambda tm, tn: 0)
    tm, tn = min(m, _MIN_TILE), min(n, _MIN_TILE)
    kc = kpad
    while _product_layout(tm, tn, kc, N).nbytes + extra(tm, tn) > budget:
        if kc <= KPAD:
            raise WorkspaceTooSmall(
                f"device out of memory: a {tm} x {tn} tile with k in chunks of {KPAD} "
                f"needs more than the {budget} bytes available")
        kc = round_up(-(-kc // 2), KPAD)
    return tm, tn, kc


def with_retries(attempt, phases=None, in_place=False):
    """``(True, attempt())``, retried after an out-of-memory error with half the
    workspace budget (:data:`OOM_RETRIES` times), or ``(False, reason)`` when every
    attempt ran out of memory (or even the smallest tile exceeds the budget). Records the
    workspace high-water mark (:func:`last_workspace_peak`, ``phases.workspace_peak``).

    ``in_place``: the result overwrites an input (``C`` updated in place): a retry after
    a partial write would read a damaged input, so the error is raised instead.
    """
    pool = cupy.get_default_memory_pool()
    _local.base, _local.peak = pool.used_bytes(), 0
    _local.retry_budget = None
    reason = ""
    try:
        for n in range(OOM_RETRIES + 1):
            try:
                return True, attempt()
            except (cupy.cuda.memory.OutOfMemoryError, WorkspaceTooSmall) as exc:
                reason = f"device out of memory ({exc})"
                if isinstance(exc, WorkspaceTooSmall) or n == OOM_RETRIES:
                    break
                if in_place:
                    raise CudaEngineError(f"{reason} while updating C in place") from exc
                graphs.clear()          # the replayed plans' buffers too
                pool.free_all_blocks()
                _local.retry_budget = workspace_budget() // 2
        return False, reason
    finally:
        _local.last_peak = getattr(_local, "peak", None)
        if phases is not None:
            phases.workspace_peak = _local.last_peak
        _local.base = _local.retry_budget = None
