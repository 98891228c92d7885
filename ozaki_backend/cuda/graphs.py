"""The prepare stage replayed as a CUDA graph, where host launches bound the call.

At 4096^3 the ~45 short kernels of stages 0–2 (equilibration, statistics, the bound GEMM,
the kept bits, the certificate's count, the shifts) take the host longer to launch
through CuPy (about 1 ms) than the GPU takes to run them (about 0.75 ms), so the GPU
waits for the host (``docs/performance.md``). Here the stage is captured once per shape
into a CUDA graph and then replayed on the caller's stream: two copies bring the
operands into the plan's own buffers (a staged plan), one graph launch does the rest.
When the same operands (addresses and strides) come twice in a row — a loop over fixed
buffers — a direct plan reads them in place and the copies go too; it holds the
operands, so their addresses cannot pass to other arrays while it lives. The graph runs
the eager path's kernels on the same values, so the bits are the eager path's.

A plan owns its memory: every allocation made while it is captured is held until the
plan is dropped, so nothing the graph writes can be handed to anyone else meanwhile.
It is replayed only on the stream it was captured for, so stream order keeps one call's
readers of its buffers (the residue and CRT passes) ahead of the next call's copies.

Only where it pays (:func:`eligible`): operands of at most :data:`MAX_ELEMENTS`
elements (the copies cost 16 bytes of traffic per element; above that size the GPU's
own work hides the launches). At most :data:`MAX_PLANS` plans per thread, within
:data:`MEMORY_FRACTION` of the device's memory; the oldest is dropped first.
``OZAKI_BACKEND_CUDA_GRAPHS=0`` turns replay off; :func:`clear` drops every plan.

The caller (:mod:`.pipeline`) decides what is captured and drops a plan whose call left
the ordinary path (a wrong count, a widened window): this module only keeps plans.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import cupy
import numpy as np

#: Operands larger than this (``m k + k n`` elements) are never captured: there the
#: GPU's work outlasts the host's launches and the copies would only add traffic.
#: ``OZAKI_BACKEND_CUDA_GRAPH_MAX`` overrides it (0: no replay).
MAX_ELEMENTS = 3 * 4096 * 4096
#: Plans kept per thread, staged and direct (least recently used dropped first).
MAX_PLANS = 6
#: The plans of one thread hold at most this fraction of the device's memory (a direct
#: plan's operands included).
MEMORY_FRACTION = 1 / 16
#: Captures tried per key before its calls stay eager.
CAPTURE_TRIES = 2

#: Plans captured, calls replayed, captures that failed (the call ran eagerly; also a
#: plan its call could not use, see :func:`drop`) and plans dropped, all threads
#: (tests and the benchmark read them).
COUNTS = {"captured": 0, "replayed": 0, "failed": 0, "dropped": 0}

#: Why the last capture failed (None: none has).
LAST_FAILURE = None

_local = threading.local()


def max_elements() -> int:
    """The operand size limit in elements (0: replay off)."""
    if os.environ.get("OZAKI_BACKEND_CUDA_GRAPHS", "1") == "0":
        return 0
    v = os.environ.get("OZAKI_BACKEND_CUDA_GRAPH_MAX", "")
    return int(v) if v.isdigit() else MAX_ELEMENTS


def eligible(A, B) -> bool:
    """Whether the product of ``A (m x k)`` and ``B (k x n)`` may be replayed."""
    m, k = A.shape
    n = B.shape[1]
    return 0 < m * k + k * n <= max_elements() and m * n * k > 0


def _order(X) -> str:
    return "F" if X.flags.f_contiguous and not X.flags.c_contiguous else "C"


def key_of(A, B, *extra):
    """The key of the plan for ``A``, ``B`` on the current device and stream: shapes,
    the staging buffers' memory orders, and ``extra`` (what else the captured work
    depends on)."""
    return (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr,
            A.shape, B.shape, _order(A), _order(B)) + tuple(extra)


class _Plan:
    __slots__ = ("key", "graph", "value", "A", "B", "staged", "held", "nbytes",
                 "last", "repeats")

    def __init__(self, key, A, B, staged, held):
        self.key, self.A, self.B, self.staged, self.held = key, A, B, staged, held
        self.graph = self.value = None
        self.nbytes = 0
        self.last, self.repeats = None, 0      # the operands' addresses, seen in a row

    def stage(self, A, B):
        """Copy this call's operands into the plan's buffers (current stream)."""
        stream = cupy.cuda.get_current_stream()
        for dst, src in ((self.A, A), (self.B, B)):
            same = (src.flags.c_contiguous if _order(dst) == "C" else src.flags.f_contiguous)
            if same:                # one memcpy (the usual case)
                dst.data.copy_from_device_async(src.data, src.nbytes, stream)
            else:                   # a strided view: CuPy's copy kernel
                cupy.copyto(dst, src)


def _plans() -> OrderedDict:
    p = getattr(_local, "plans", None)
    if p is None:
        p = _local.plans = OrderedDict()
        _local.seen = {}            # key -> captures that failed
    return p


def _capture_stream():
    s = getattr(_local, "stream", None)
    if s is None:
        s = _local.stream = cupy.cuda.Stream(non_blocking=True)
    return s


def _addresses(A, B):
    return (A.data.ptr, A.strides, B.data.ptr, B.strides)


def replay(key, A, B, build):
    """Run ``build``'s work on the current stream by replaying a plan of ``key``:
    ``(value, plan_key)``, or None when the call should run eagerly.

    ``build(X, Y)`` does the work on operands ``X``, ``Y`` with the values of ``A``,
    ``B`` and returns the objects it leaves its results in. A staged plan (``key``)
    runs it on its own copies of the operands, refreshed before every replay; once the
    same operands (addresses and strides) come twice in a row, a direct plan
    (``plan_key`` then adds the addresses) runs it on the operands in place and saves
    the copies. A key's first call runs eagerly (None): it makes whatever the work
    caches on the way (kernels, device tables: a table made inside a capture would be
    filled only by the graph), so the capture finds them all. None also after
    :data:`CAPTURE_TRIES` failed captures of the key.

    The value's device arrays belong to the plan: valid until its next replay or
    :func:`drop` of ``plan_key``. The caller must not change what they refer to (it
    drops the plan when it does)."""
    plans = _plans()
    where = _addresses(A, B)
    direct = plans.get(key + where)
    if direct is not None:
        return _launch(plans, direct)
    plan = plans.get(key)
    if plan is not None:
        plan.repeats = plan.repeats + 1 if plan.last == where else 0
        plan.last = where
        if plan.repeats >= 1 and _local.seen.get(key, 0) < CAPTURE_TRIES:
            direct = _new_plan(plans, key, where, A, B, build)
            if direct is not None:
                return direct.value, direct.key
        plan.stage(A, B)
        return _launch(plans, plan)
    seen = _local.seen
    if key not in seen:
        if len(seen) >= 1024:
            seen.clear()
        seen[key] = 0
        return None
    if seen[key] >= CAPTURE_TRIES:
        return None
    plan = _new_plan(plans, key, None, A, B, build)
    return None if plan is None else (plan.value, plan.key)


def _launch(plans, plan):
    plans.move_to_end(plan.key)
    plan.graph.launch()
    COUNTS["replayed"] += 1
    return plan.value, plan.key


def _new_plan(plans, key, where, A, B, build):
    """Capture, keep and launch the plan of ``key`` (staged) or ``key + where`` (direct,
    reading the operands at the addresses ``where``); None when the capture failed
    (counted against ``key``)."""
    plan = _capture(key if where is None else key + where, A, B, build, where is None)
    if plan is None:
        _local.seen[key] = _local.seen.get(key, 0) + 1
        COUNTS["failed"] += 1
        return None
    plans[plan.key] = plan
    COUNTS["captured"] += 1
    _evict(plans, keep=plan.key)
    plan.graph.launch()
    return plan


def _capture(key, A, B, build, staged):
    held = []
    base = cupy.cuda.get_allocator()

    def hold(size):
        # Every block stays the plan's until it is dropped: the graph writes it on
        # every replay, whoever freed it during the capture.
        mem = base(size)
        held.append(mem)
        return mem

    if staged:
        with cupy.cuda.using_allocator(hold):
            X = cupy.empty(A.shape, dtype=np.float64, order=_order(A))
            Y = cupy.empty(B.shape, dtype=np.float64, order=_order(B))
    else:
        # The graph reads the operands where they are: the plan holds them (their
        # addresses cannot be reused by other arrays while it lives).
        X, Y = A, B
    plan = _Plan(key, X, Y, staged, held)
    if staged:
        plan.stage(A, B)
    cap = _capture_stream()
    try:
        with cupy.cuda.using_allocator(hold), cap:
            cap.begin_capture()
            try:
                value = build(X, Y)
            finally:
                graph = cap.end_capture()
    except Exception as exc:        # noqa: BLE001 — anything that breaks a capture
        # (a synchronising call, an allocation the driver refuses during capture, an
        # out-of-memory error) leaves the call to the eager path, which raises any
        # genuine error itself.
        global LAST_FAILURE
        LAST_FAILURE = f"{type(exc).__name__}: {exc}"
        return None
    plan.graph, plan.value = graph, value
    plan.nbytes = sum(int(m.mem.size) for m in held) + \
        (0 if staged else A.nbytes + B.nbytes)
    return plan


def _evict(plans, keep):
    cap = MEMORY_FRACTION * cupy.cuda.Device().mem_info[1]
    while len(plans) > 1 and (len(plans) > MAX_PLANS or
                              sum(p.nbytes for p in plans.values()) > cap):
        oldest = next(k for k in plans if k != keep)
        drop(oldest)


def drop(key, failed=None):
    """Forget the plan of ``key`` (this thread), if any. Its memory goes back to the
    pool once the device has finished its last replay. ``failed``: the key given to
    :func:`replay` when the caller could not use the plan it got (counted in
    ``COUNTS["failed"]`` as a failed capture of that key: after :data:`CAPTURE_TRIES`
    of them the key runs eagerly instead of being captured and dropped again)."""
    plans = _plans()                # this thread's plans and keys seen
    if failed is not None:
        _local.seen[failed] = _local.seen.get(failed, 0) + 1
        COUNTS["failed"] += 1
    plan = plans.pop(key, None)
    if plan is None:
        return
    # A replay queued on the plan's stream may still read or write its blocks; once
    # they are back in the pool another stream could be handed them.
    cupy.cuda.Device().synchronize()
    plan.graph = plan.value = None
    plan.held.clear()
    COUNTS["dropped"] += 1


def clear():
    """Drop every plan of this thread (and forget the keys seen)."""
    for key in list(_plans()):
        drop(key)
    _local.seen.clear()


def info():
    """This thread's plans, least recently used first: ``[{"key": ..., "staged": ...,
    "nbytes": ...}, ...]`` (``staged``: False for a direct plan)."""
    return [{"key": p.key, "staged": p.staged, "nbytes": p.nbytes}
            for p in _plans().values()]
