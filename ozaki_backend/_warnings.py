"""The warnings and errors the backend issues through Python's ``warnings`` machinery.

A product the backend was to compute but then computed natively because something
failed (engine unavailable, out of memory, compile error, certificate miss) is never
silent: it is counted in ``stats()`` and warned with ``FallbackWarning``, which
``-W error``, ``pytest.warns`` and ``warnings.filterwarnings`` see like any other
warning. The warning points at the first frame outside this package (the user's call),
so the default filter shows it once per call site and message.
"""

from __future__ import annotations

import os
import sys
import warnings

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep


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
    """Issue ``NativeFallbackWarning`` (a certificate miss) with ``reason``."""
    warnings.warn(f"ozaki_backend: product computed natively: {reason}",
                  NativeFallbackWarning, stacklevel=_outside_level() + 1)


def warn_config(message: str) -> None:
    """Issue ``ConfigurationWarning`` with ``message``, at the user's call site."""
    warnings.warn(f"ozaki_backend: {message}", ConfigurationWarning,
                  stacklevel=_outside_level() + 1)
