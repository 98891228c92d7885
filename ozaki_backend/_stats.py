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
_moduli: Counter = Counter()      # moduli count -> 2-D Ozaki-II products computed with it
_certificate: Counter = Counter()  # outcome -> 2-D Ozaki-II products
_details: dict = {}               # (outcome, reason) -> the latest long explanation
_symmetric: Counter = Counter()   # "products", "work", "general_work" (multiply-adds)
_last = threading.local()         # this thread's last moduli count
_uncounted = threading.local()    # this thread's products are not counted (warm_up)


class not_counted:
    """``with not_counted(): ...``: products of this thread are not recorded (the
    warm-up's own products, :func:`ozaki_backend.warm_up`); other threads' are."""

    def __enter__(self):
        self._was = getattr(_uncounted, "on", False)
        _uncounted.on = True
        return self

    def __exit__(self, *exc):
        _uncounted.on = self._was
        return False


def _counting() -> bool:
    return not getattr(_uncounted, "on", False)


def reason_key(reason: str) -> str:
    """The short, stable key a native reason is counted under: its text before the
    first parenthesis (``"below min_size (m*n*k < 1000)"`` -> ``"below min_size"``), so
    that keys do not vary with numbers or environment details."""
    return reason.split(" (", 1)[0]


#: The certificate outcome of a product the CUDA engine gave to cuBLAS's DGEMM because
#: this GPU runs it faster (``cuda/costs.py``): counted as native, not as a fallback.
NATIVE_BY_CHOICE = "native (faster)"


def computed_natively(certificate_outcome: str) -> bool:
    """Whether a certificate outcome (:func:`record_certificate`) means the product was
    computed by the native float64 GEMM: every outcome named ``"native ..."``
    (``"native fallback"``, and any other the engines add under that prefix)."""
    return certificate_outcome.startswith("native")


def begin_product() -> None:
    """A new product starts on this thread: forget a native certificate outcome left by
    one that did not finish (see :func:`record`)."""
    _last.__dict__.pop("native_outcome", None)


def record(outcome: str, reason: str, *, seconds: float = 0.0, detail: str | None = None,
           **bytes_moved) -> None:
    """Count one product. ``outcome`` is "routed", "native" or "fallback"; ``reason``
    says why: a native reason is counted under :func:`reason_key` of it, with the full
    text as its detail; ``detail`` is the long text otherwise (the latest one is kept
    per key, :func:`details`).

    A "routed" product whose certificate sent it (or one of its 2-D slices) to the
    native GEMM (:func:`computed_natively`, recorded by :func:`record_certificate`
    while it ran on this thread) is counted as a "fallback" under ``"certificate:
    <outcome>"``, with ``reason`` (the engine) as its detail: it was computed natively,
    whatever engine it was handed to."""
    if not _counting():
        return
    native_outcome = _last.__dict__.pop("native_outcome", None)
    if outcome == "routed" and native_outcome == NATIVE_BY_CHOICE:
        # the GPU's DGEMM was measured faster for this product: a decision, not a miss
        outcome, detail = "native", reason if detail is None else detail
        reason = "device DGEMM faster"
    elif outcome == "routed" and native_outcome is not None:
        outcome, detail = "fallback", reason if detail is None else detail
        reason = f"certificate: {native_outcome}"
    if outcome == "native":
        key = reason_key(reason)
        if key != reason and detail is None:
            detail = reason
        reason = key
    with _lock:
        _counts[(outcome, reason)] += 1
        if detail is not None:
            _details[(outcome, reason)] = detail
        _seconds[outcome] += seconds
        for k, v in bytes_moved.items():
            _bytes[k] += int(v)


def record_moduli(n_moduli: int) -> None:
    """Count one 2-D Ozaki-II product computed with ``n_moduli`` moduli (either engine;
    for ``precision="fp64"`` the count chosen for its operands)."""
    if not _counting():
        return
    with _lock:
        _moduli[int(n_moduli)] += 1
    _last.n_moduli = int(n_moduli)


def record_certificate(outcome: str) -> None:
    """Count one 2-D Ozaki-II product by its certificate's outcome (``"certified"``,
    ``"uncertified"``, ``"residual pass"``, ``"native fallback"``, or any other name an
    engine uses: outcomes are counted as given; those that start with ``"native"``
    mean the product was computed natively, see :func:`record`)."""
    if not _counting():
        return
    with _lock:
        _certificate[outcome] += 1
    if computed_natively(outcome):
        _last.native_outcome = outcome


def details() -> dict:
    """``{(outcome, reason): latest long text}`` for the keys recorded with a detail."""
    with _lock:
        return dict(_details)


def record_symmetric(work: int, general_work: int) -> None:
    """Count one 2-D symmetric product (``x.T @ x``, ``x @ x.T``: one triangle computed
    and mirrored) with the INT8 multiply-adds it did (``work``) and those the general
    product of that shape would do (``general_work``)."""
    if not _counting():
        return
    with _lock:
        _symmetric["products"] += 1
        _symmetric["work"] += int(work)
        _symmetric["general_work"] += int(general_work)
    _last.symmetric_work = (int(work), int(general_work))


def last_symmetric_work():
    """``(work, general_work)`` of this thread's most recent symmetric product, or None."""
    return getattr(_last, "symmetric_work", None)


def last_moduli():
    """The moduli count of this thread's most recent 2-D Ozaki-II product, or None."""
    return getattr(_last, "n_moduli", None)


def snapshot() -> dict:
    """A copy of the counters: ``{"counts": {...}, "bytes": {...}, "seconds": {...},
    "moduli": {...}, "certificate": {...}, "symmetric": {...}}``."""
    with _lock:
        return {"counts": dict(_counts), "bytes": dict(_bytes), "seconds": dict(_seconds),
                "moduli": dict(sorted(_moduli.items())), "certificate": dict(_certificate),
                "symmetric": dict(_symmetric)}


def reset() -> None:
    with _lock:
        _counts.clear()
        _details.clear()
        _bytes.clear()
        _seconds.clear()
        _moduli.clear()
        _certificate.clear()
        _symmetric.clear()
    _last.__dict__.pop("n_moduli", None)
    _last.__dict__.pop("symmetric_work", None)
    _last.__dict__.pop("native_outcome", None)


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
