"""Per-thread tables of product shapes, and when a shape that went native is read
again (``docs/spec.md`` §10.4). CuPy-free: plain bookkeeping that
:mod:`.shape_memory` and :mod:`.pipeline` use, testable without a GPU.
"""

from __future__ import annotations

import threading

_local = threading.local()      # this thread's shape tables


#: A shape whose last product went native for its count (``native (faster)``) is
#: computed natively without statistics for this many calls, then read again.
NATIVE_PROBE = 16

#: Each read that decides native again doubles the calls before the next one, up to
#: this many. A read costs the prepare stage (statistics, bound GEMM, count: about 0.55
#: ms of GPU time at 4096^3 on N(0, 1) data on the H200, a quarter of its DGEMM; more
#: where the gathers run) on top of the DGEMM; every 16th call
#: of a loop that stays native paid it, and doubling makes that one call in 1024 within
#: six reads, while a loop whose data turn ordinary still goes back to the emulation
#: within 1024 calls. (The 0.95x of 4096^3 rows timed one synchronised call at a time
#: is the call's host time, not this: a median of 5 calls holds no read.)
NATIVE_PROBE_MAX = 1024


#: Shapes a thread remembers (counts, native decisions) before it forgets them all.
SHAPES_REMEMBERED = 256


def _shape_memory(name):
    """This thread's per-shape table ``name`` (made on first use)."""
    table = getattr(_local, name, None)
    if table is None:
        table = {}
        setattr(_local, name, table)
    return table


def _keep(table, key, value):
    """``table[key] = value``, the table emptied first when it holds
    :data:`SHAPES_REMEMBERED` other shapes."""
    if len(table) >= SHAPES_REMEMBERED and key not in table:
        table.clear()
    table[key] = value


def _performant(plan) -> bool:
    """Whether ``plan`` lets native DGEMM replace the emulation where it is cheaper
    (``emulation="performant"``, the default; ``"eager"`` always emulates)."""
    return plan.options.get("emulation", "performant") == "performant"


def _native_again(plan, key) -> bool:
    """Whether this thread's last product of shape ``key`` went native for its count
    and fewer calls than its interval (:data:`NATIVE_PROBE`, doubled by every read that
    decided native again, at most :data:`NATIVE_PROBE_MAX`) have passed since its data
    were read (counts the call)."""
    if not _performant(plan):
        return False
    entry = _shape_memory("native").get(key)
    if entry is None or entry[2]:   # (a call may ask twice: the shortcut, then the path)
        return False
    entry[0] += 1
    if entry[0] >= entry[1]:
        entry[2] = True             # this call reads the data again
        return False
    return True


def _native_interval(key):
    """The calls shape ``key`` is computed natively before its data are read again, or
    None when it is not remembered as native."""
    entry = _shape_memory("native").get(key)
    return None if entry is None else entry[1]


def _note_native(key, went_native):
    """Record whether the product of shape ``key`` just went native for its count: a
    read that decides native again doubles the shape's interval, a first one sets it to
    :data:`NATIVE_PROBE`, an emulated product forgets the shape."""
    native = _shape_memory("native")
    if went_native:
        entry = native.get(key)
        interval = (min(2 * entry[1], NATIVE_PROBE_MAX) if entry is not None and entry[2]
                    else NATIVE_PROBE)
        _keep(native, key, [0, interval, False])
    else:
        native.pop(key, None)


