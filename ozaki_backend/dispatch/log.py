"""Bottom layer of dispatch: the logger, fallback accounting and per-entry counts.

Every other dispatch module reports here and nothing here looks upwards: this module
imports only ``ozaki_backend._stats`` (the process-wide outcome counters). The top
layer (``observe``) reads what is recorded here into ``stats()``.
"""

from __future__ import annotations

import threading

from .. import _stats


def logger():
    """The ``ozaki_backend.dispatch`` logger (``logging`` is imported on first use:
    it is not otherwise needed to import the package)."""
    import logging

    return logging.getLogger("ozaki_backend.dispatch")


_lock = threading.Lock()
_routed_by_entry: dict = {}
_warned: set = set()


def count_entry(entry: str) -> None:
    """Count one routed call by entry point (``stats()["routed_by_entry"]``)."""
    with _lock:
        _routed_by_entry[entry] = _routed_by_entry.get(entry, 0) + 1


def routed_by_entry() -> dict:
    """A copy of the routed calls per entry point counted by :func:`count_entry`."""
    with _lock:
        return dict(_routed_by_entry)


def reset_routed_by_entry() -> None:
    """Zero the counts of :func:`count_entry` (``reset_stats()`` calls this)."""
    with _lock:
        _routed_by_entry.clear()


def fallback(entry: str, exc: BaseException) -> None:
    """Count a failure in the routed path; log it (a warning the first time per kind).

    The caller then computes the product natively, so the user gets NumPy's result.
    """
    reason = f"{entry}: {type(exc).__name__}: {exc}"[:200]
    _stats.record("fallback", reason)
    key = (entry, type(exc).__name__)
    with _lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        logger().warning("%s failed in the routed path (%s: %s); NumPy computed it instead",
                         entry, type(exc).__name__, exc, exc_info=True)
    else:
        logger().debug("fallback in %s: %r", entry, exc)
