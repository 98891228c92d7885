"""Bottom layer of dispatch: the logger, fallback accounting and per-entry counts.

Every other dispatch module reports here and nothing here looks upwards: this module
imports only ``ozaki_backend._stats`` (the process-wide outcome counters) and
``ozaki_backend._warnings``. The top layer (``observe``) reads what is recorded here
into ``stats()``.

Two channels, for two audiences: every routing decision made in Python is one line on
the ``ozaki_backend.dispatch`` logger at DEBUG (``OZAKI_BACKEND_LOG=debug`` shows them);
every product that was to be routed and was computed natively because something failed
is counted, and then either a :class:`~ozaki_backend.FallbackWarning` where the user
can act on it (``engine="cuda"`` where no GPU is usable: Python's warning filters decide
whether it is shown once, always, or raised) or, for the reasons the user's code cannot
change (out of memory, CUDA or compile errors, internal errors, certificate misses), a
log line (``ozaki_backend._warnings.log_fallback``): NumPy's own result came back, and
a warning would change what code that counts or raises warnings does.
"""

from __future__ import annotations

import threading

from .. import _stats
from .._warnings import EngineUnavailableError, log_fallback, warn_fallback

_logger = None
_DEBUG = 10  # logging.DEBUG, without importing logging at package import


def logger():
    """The ``ozaki_backend.dispatch`` logger (``logging`` is imported on first use:
    it is not otherwise needed to import the package)."""
    global _logger
    if _logger is None:
        import logging

        _logger = logging.getLogger("ozaki_backend.dispatch")
    return _logger


def decision(d) -> None:
    """Log one routing decision (a :class:`~ozaki_backend.dispatch.routing.Decision`,
    printed on one line) at DEBUG."""
    lg = logger()
    if lg.isEnabledFor(_DEBUG):
        lg.debug("decision: %s", d)


def fallback_key(exc: BaseException) -> str:
    """The short, stable reason a failure is counted under: ``engine unavailable``,
    ``out of memory``, ``compile error``, ``CUDA error``, or ``error (<exception
    type>)``. The CUDA engine's :class:`CudaEngineError` is classified by the CuPy error
    it wraps (its ``__cause__``)."""
    chain, e = [], exc
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__
    names = [c.__name__ for e in chain for c in type(e).__mro__]
    if any(isinstance(e, EngineUnavailableError) for e in chain):
        return "engine unavailable"
    if any(isinstance(e, MemoryError) for e in chain) or \
            any("OutOfMemory" in n for n in names) or "out of memory" in str(exc):
        return "out of memory"
    if any("Compile" in n or "NVRTC" in n for n in names) or "failed to compile" in str(exc):
        return "compile error"
    if "CudaEngineError" in names:
        return "CUDA error"
    return f"error ({type(exc).__name__})"


_lock = threading.Lock()
_routed_by_entry: dict = {}


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


#: The fallback kinds (:func:`fallback_key`) the user can act on: warned. The others
#: are logged (see the module docstring).
WARNED_KINDS = frozenset({"engine unavailable"})


def fallback(entry: str, exc: BaseException) -> None:
    """Count a failure in the routed path, and warn or log it.

    Counted in ``stats()`` under the short key ``"<entry>: <kind>"`` (see
    :func:`fallback_key`), with the exception's text as the key's detail. The caller
    then computes the product natively, so the user gets NumPy's result. A kind in
    :data:`WARNED_KINDS` is warned with :class:`FallbackWarning` (under ``-W error``
    the warning is raised from here and the product is not computed); every other kind
    is a log line (WARNING once per key, then DEBUG).
    """
    key = fallback_key(exc)
    text = f"{type(exc).__name__}: {exc}"
    _stats.record("fallback", f"{entry}: {key}", detail=text)
    # A traceback only where it can help: an unexpected error, and only at DEBUG.
    expected = not key.startswith("error (")
    logger().debug("fallback in %s: %s", entry, text, exc_info=not expected)
    if key in WARNED_KINDS:
        warn_fallback(f"{entry}: {key}: {exc}")
    else:
        log_fallback(f"{entry}: {key}: {exc}")
