"""The warnings and errors the backend issues through Python's ``warnings`` machinery.

A product the backend was to compute but then computed natively because something
failed (engine unavailable, out of memory, compile error, certificate miss) is never
silent: it is counted in ``stats()``, and then either warned or logged:

* an explicit call (``ozaki_backend.matmul``, ``Plan.matmul``) warns with
  ``FallbackWarning`` (``NativeFallbackWarning`` for a certificate miss): the caller
  asked for the emulated product and can act on it (more moduli, other data, another
  engine);
* a product intercepted inside ``enabled()`` (``@``, ``np.dot``, SciPy's ``dgemm`` ...)
  warns only where the user can act, a configuration that cannot work
  (``engine="cuda"`` without a usable GPU: every product falls back). Every other
  fallback there (certificate miss, out of device memory, a CUDA or compile error, an
  internal error) gives NumPy's own result for a reason the user's code cannot change,
  so it is a log line on the ``ozaki_backend`` logger (WARNING the first time per
  reason in a process, DEBUG afterwards) and a count in ``stats()``, not a warning: a
  warning there would change the behaviour of code that counts or raises warnings
  (test suites under ``catch_warnings``, ``-W error``) although no result changed.

A warning points at the first frame outside this package (the user's call), so the
default filter shows it once per call site and message.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from contextlib import contextmanager
from contextvars import ContextVar

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: True while the dispatch layer computes a product it intercepted (see the module
#: docstring): fallbacks are then logged instead of warned.
INTERCEPTED: ContextVar[bool] = ContextVar("ozaki_backend_intercepted", default=False)


@contextmanager
def intercepted():
    """Mark the body as the computation of an intercepted product (fallbacks inside are
    logged, not warned)."""
    token = INTERCEPTED.set(True)
    try:
        yield
    finally:
        INTERCEPTED.reset(token)


_seen_lock = threading.Lock()
_seen: set = set()


def reset_logged() -> None:
    """Forget which reasons :func:`log_fallback` has logged (``reset_stats()``): the next
    of each is at WARNING again."""
    with _seen_lock:
        _seen.clear()


def log_fallback(reason: str) -> None:
    """The log line of a fallback that is not warned: WARNING on the ``ozaki_backend``
    logger the first time ``reason`` is seen in this process, DEBUG afterwards (the
    count is in ``stats()``)."""
    import logging

    reason = str(reason)
    with _seen_lock:
        first = reason not in _seen
        _seen.add(reason)
    logging.getLogger("ozaki_backend").log(
        logging.WARNING if first else logging.DEBUG,
        "product computed natively (counted in ozaki_backend.stats()%s): %s",
        "; later ones of this reason at DEBUG" if first else "", reason)


class FallbackWarning(RuntimeWarning):
    """A product that was to be computed by the backend was computed natively instead,
    because something failed (the message says what: engine unavailable, out of
    memory, compile error, certificate miss). The result is NumPy's (or CuPy's)."""


class NativeFallbackWarning(FallbackWarning):
    """A product's certificate could not meet the native-level target with up to 20
    moduli nor with the residual pass: the native float64 GEMM computed it (a
    ``FallbackWarning``; the name is kept for code that filters it)."""


class ConfigurationWarning(UserWarning):
    """An ``OZAKI_BACKEND*`` environment variable is unknown or has an invalid value;
    the message names it (and what was done instead: the default, or staying off)."""


class EngineUnavailableError(RuntimeError):
    """The requested engine cannot run in this process (``engine="cuda"`` without CuPy
    or without a GPU); the message says why and how to install what is missing."""


def _outside_level() -> int:
    """``stacklevel`` of the first caller frame outside the package (for warn())."""
    level, frame = 1, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PKG):
        frame = frame.f_back
        level += 1
    return level


def warn_fallback(reason: str, category=FallbackWarning) -> None:
    """Issue ``category`` (``FallbackWarning`` or a subclass) with ``reason``, at
    the user's call site."""
    warnings.warn(f"ozaki_backend: product computed natively: {reason}",
                  category, stacklevel=_outside_level() + 1)


def warn_native(reason: str) -> None:
    """Issue ``NativeFallbackWarning`` (a certificate miss) with ``reason``; for an
    intercepted product a log line instead (:func:`log_fallback`)."""
    if INTERCEPTED.get():
        log_fallback(reason)
        return
    warnings.warn(f"ozaki_backend: product computed natively: {reason}",
                  NativeFallbackWarning, stacklevel=_outside_level() + 1)


def warn_config(message: str) -> None:
    """Issue ``ConfigurationWarning`` with ``message``, at the user's call site."""
    warnings.warn(f"ozaki_backend: {message}", ConfigurationWarning,
                  stacklevel=_outside_level() + 1)
