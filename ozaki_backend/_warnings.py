"""The warnings the backend issues through Python's :mod:`warnings` machinery.

A product the backend routed but then computed natively is never silent: it is counted
in ``stats()`` and warned with :class:`NativeFallbackWarning`, which ``-W error``,
``pytest.warns`` and ``warnings.filterwarnings`` see like any other warning. The warning
points at the first frame outside this package (the user's call), so the default
filter shows it once per call site.
"""

from __future__ import annotations

import os
import sys
import warnings

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep


class NativeFallbackWarning(RuntimeWarning):
    """A routed product was computed by the native float64 GEMM instead of the
    emulation (its certificate could not meet the native-level target)."""


def _outside_level() -> int:
    """``stacklevel`` of the first caller frame outside the package (for warn())."""
    level, frame = 1, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PKG):
        frame = frame.f_back
        level += 1
    return level


def warn_native(reason: str) -> None:
    """Issue :class:`NativeFallbackWarning` with ``reason``, at the user's call site."""
    warnings.warn(f"ozaki_backend: product computed natively: {reason}",
                  NativeFallbackWarning, stacklevel=_outside_level() + 1)
