"""The one bit-equality assertion of the test suite.

``from bits import assert_same_bits`` works from every folder under ``tests/``: pytest's
default import mode puts ``tests/`` (the folder of the top ``conftest.py``) on
``sys.path``.

Unlike :func:`numpy.testing.assert_array_equal`, which compares values (``-0.0 == 0.0``,
every NaN equal to every NaN), this compares the stored bits, so a lost sign of zero or
a different NaN payload fails. Keep ``assert_array_equal`` where values are what is
meant (e.g. against NumPy's own ``@``, whose sign of zero may legitimately differ).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["assert_same_bits"]


def _host(x):
    """A NumPy array of ``x`` (CuPy arrays are copied to the host)."""
    if hasattr(x, "get") and not isinstance(x, (np.ndarray, np.generic)):
        x = x.get()
    return np.asarray(x)


def _words(x):
    """``(size, itemsize)`` uint8 rows: each element's bytes, in C order."""
    flat = np.ascontiguousarray(x.reshape(-1))
    return flat.view(np.uint8).reshape(x.size, x.dtype.itemsize)


def _show(x, index):
    """An element as its value and its bits in hex (native byte order)."""
    value = x[index]
    raw = int.from_bytes(np.ascontiguousarray(value).tobytes(), sys.byteorder)
    return f"{value.item()!r} (0x{raw:0{2 * x.dtype.itemsize}x})"


def assert_same_bits(actual, expected, what=""):
    """Assert that two arrays hold the same bits: same dtype, same shape, same bytes in
    every element.

    Parameters
    ----------
    actual, expected : array_like
        NumPy or CuPy arrays (CuPy's are copied with ``.get()``), NumPy scalars or
        anything :func:`numpy.asarray` takes. Float and complex dtypes are compared bit
        for bit (``-0.0`` differs from ``0.0``; NaN payloads count); the memory layout
        (C, F, strided) does not matter.
    what : object
        Prefixed to the failure message (which case failed), unless ``""``.

    Raises
    ------
    AssertionError
        Naming the first differing element (C order), both values and their bits in
        hex, and how many elements differ.
    """
    a, e = _host(actual), _host(expected)
    prefix = "" if isinstance(what, str) and not what else f"{what}: "
    if a.dtype != e.dtype:
        raise AssertionError(f"{prefix}dtype {a.dtype} != expected {e.dtype}")
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shape {a.shape} != expected {e.shape}")
    if a.dtype.hasobject:
        raise TypeError("assert_same_bits compares stored bits; object arrays have none")
    if a.size == 0:
        return
    differ = (_words(a) != _words(e)).any(axis=1)
    if not differ.any():
        return
    first = np.unravel_index(int(np.argmax(differ)), a.shape)
    raise AssertionError(
        f"{prefix}{int(differ.sum())} of {a.size} elements differ in their bits; first at "
        f"index {tuple(int(i) for i in first)}: {_show(a, first)} != expected "
        f"{_show(e, first)}")
