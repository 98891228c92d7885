"""What a thread remembers per product shape, and the guessed count it starts with.

The deferred read-back of the count (``docs/spec.md`` §10.7): a product of a shape
``(m, n, k, mode)`` this thread computed before starts its GEMMs with the count the
shape had last time (a fixed plan's count), the status array travels back meanwhile
(:class:`_ReadBack`), and :mod:`.pipeline` checks the count before anything is written
to the output, abandoning a wrong guess (:class:`_WrongGuess`). Here: the rule of the
guess (:func:`_early_guess`, :func:`_guess`, :data:`GUESS_MISSES`), the per-thread
tables of the counts (:func:`_remember`, :func:`_last_count`) and of the shapes that went
native for their count (``native (faster)``, §10.4: :func:`_native_again`,
:func:`_note_native`, :data:`NATIVE_PROBE`, kept CuPy-free in :mod:`.shape_tables`), at
most :data:`SHAPES_REMEMBERED` shapes each, and :data:`GUESSES`, how the guesses turned
out.
"""

from __future__ import annotations

import threading

import cupy
import numpy as np

from .shape_tables import (  # noqa: F401
    NATIVE_PROBE,
    NATIVE_PROBE_MAX,
    SHAPES_REMEMBERED,
    _keep,
    _native_again,
    _native_interval,
    _note_native,
    _performant,
    _shape_memory,
)
from .workspace import _bound_layout, _product_layout, retrying, workspace_budget

_local = threading.local()      # this thread's pinned status buffers


#: Products started with a guessed count, by how the guess turned out (all threads).
GUESSES = {"right": 0, "wrong": 0}

#: A shape whose guessed count was wrong this many times in a row is computed with the
#: count read first, until it shows the same count twice in a row again.
GUESS_MISSES = 2


def _early_guess(plan, key, bound, sym, phases=None):
    """The count :func:`_guess` will start the product with, as far as it can be told
    before the operands are prepared (None: the product reads its count first); the
    part of its rule that needs no prepared operands. The graph of stages 0-2 is
    captured for it (``phases`` timed stage by stage: never)."""
    if bound is not None or sym or phases is not None:
        return None
    if retrying():
        return None
    if not plan.adaptive:
        return plan.n_moduli
    seen = _seen(key)
    return None if seen is None or seen[1] >= GUESS_MISSES else seen[0]


def _guess(plan, key, prep, bound):
    """The count to start the product with before the status is read (None: read it
    first): a fixed plan's count, else the count of this thread's last product of the
    same shape and mode. Only for the plain path — no bound asked for, not the
    symmetric product (it writes its triangle tile by tile), one bound tile, no
    out-of-memory retry — and when the bound GEMM's workspace (kept until the check)
    fits the budget next to the whole product's."""
    if prep.bm is None or len(prep.btiles) != 1:
        return None
    N = _early_guess(plan, key, bound, prep.sym)
    if N is None:
        return None
    m, n = prep.a.E.shape[0], prep.b.E.shape[0]
    need = _bound_layout(m, n, prep.kpad).nbytes + \
        _product_layout(m, n, prep.kpad, N).nbytes
    return N if need <= workspace_budget() else None


def _seen(key):
    """``(count, wrong guesses in a row)`` of this thread's last product of shape
    ``key``, or None."""
    return _shape_memory("counts").get(key)


def _last_count(key):
    """The count of this thread's last product of shape ``key``, or None."""
    seen = _seen(key)
    return None if seen is None else seen[0]


def _remember(key, N, guessed=None):
    """Record ``N`` as the count of shape ``key``: after a guess (``guessed``), a right
    one clears the misses and a wrong one adds one; a count read before the product
    takes one miss off when it repeats the last count."""
    counts = _shape_memory("counts")
    last, misses = counts.get(key, (None, 0))
    if guessed is not None:
        misses = 0 if N == guessed else misses + 1
    elif N == last:
        misses = max(0, misses - 1)
    _keep(counts, key, (N, misses))


class _WrongGuess(Exception):
    """The deferred read-back found another count (or an Inf/NaN flag, or elements the
    count cannot certify) than the one the product was started with."""

    def __init__(self, got):
        super().__init__("the product's count differs from the guessed one")
        self.got = got


class _ReadBack:
    """The status array copied to pinned host memory on the current stream, without
    waiting; :meth:`wait` waits for that copy only (the work queued after it runs on)."""

    def __init__(self, st):
        self._host = _pinned_status(st.size)
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(self._host.ctypes.data, st.data.ptr, st.nbytes,
                                      _D2H, stream.ptr)
        self._done = cupy.cuda.Event(block=False, disable_timing=True)
        self._done.record(stream)

    def wait(self):
        self._done.synchronize()
        return self._host.copy()


_D2H = 2        # cudaMemcpyDeviceToHost


def _pinned_status(size):
    """This thread's pinned int32 buffer of ``size`` for the status read-back (allocated
    once per size)."""
    bufs = getattr(_local, "status_host", None)
    if bufs is None:
        bufs = _local.status_host = {}
    buf = bufs.get(size)
    if buf is None:
        mem = cupy.cuda.alloc_pinned_memory(4 * size)
        buf = bufs[size] = (np.frombuffer(mem, dtype=np.int32, count=size), mem)
    return buf[0]
