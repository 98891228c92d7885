"""Process-wide counters of what the backend did (routed, native, and why).

Kept tiny and dependency-free: the numerical core records events here, and the
dispatch layer's ``stats()`` / ``reset_stats()`` / ``explain()`` present them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

_lock = threading.Lock()
_counts: Counter = Counter()      # (outcome, reason) -> calls
_bytes: Counter = Counter()       # direction -> bytes moved host<->device
_seconds: Counter = Counter()     # outcome -> seconds spent


def record(outcome: str, reason: str, *, seconds: float = 0.0, **bytes_moved) -> None:
    """Count one call. ``outcome`` is "routed" or "native"; ``reason`` says why."""
    with _lock:
        _counts[(outcome, reason)] += 1
        _seconds[outcome] += seconds
        for k, v in bytes_moved.items():
            _bytes[k] += int(v)


def snapshot() -> dict:
    """A copy of the counters: ``{"counts": {...}, "bytes": {...}, "seconds": {...}}``."""
    with _lock:
        return {"counts": dict(_counts), "bytes": dict(_bytes), "seconds": dict(_seconds)}


def reset() -> None:
    with _lock:
        _counts.clear()
        _bytes.clear()
        _seconds.clear()


class timer:
    """``with timer() as t: ...; t.seconds``"""

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def __exit__(self, *exc):
        self.seconds = self.elapsed()
        return False
