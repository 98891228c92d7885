"""Small pieces shared by the CUDA stage modules: operand views, launches, workspace.

Imported only once CuPy is known to be usable (never by ``import ozaki_backend``).
"""

from __future__ import annotations

import math
import struct
import threading
from contextlib import contextmanager
from typing import Callable, NamedTuple

import cupy
import numpy as np

from ..spec.complex_moduli import (MAX_COMPLEX_MODULI, complex_crt_constants,
                                   expected_complex_moduli)
from ..spec.moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ..spec.rules import expected_moduli

#: k is padded to a multiple of this (16-byte aligned int8 rows: cuBLAS's IMMA path).
KPAD = 16
#: The real product's planes pad k further, to whole 128-byte rows: at 10000^3 rows of
#: 10000 bytes left the INT8 GEMMs at 27.7 ms and the residues at 2.85 ms, against 21.9
#: and 1.69 ms at 10240^3 (H200).
GEMM_KPAD = 128
#: Leading dimension of the int32 products is padded to a multiple of this.
LDC_PAD = 16

INT_MIN = -(2 ** 31)
INT_MAX = 2 ** 31 - 1


def round_up(x: int, q: int) -> int:
    return -(-x // q) * q


def span(x, i0, i1):
    """``x[i0:i1]``, or ``x`` itself when that is all of it: a CuPy slice costs the host
    microseconds, and a product in one tile slices every per-row array of every launch."""
    return x if i0 == 0 and i1 == x.shape[0] else x[i0:i1]


def block_view(x, i0, i1, j0, j1):
    """``x[i0:i1, j0:j1]`` as :func:`span` does it for 2-D arrays: ``x`` itself when that
    is all of it, and None stays None (an absent ``C0``)."""
    if x is None or (i0 == 0 and j0 == 0 and (i1, j1) == x.shape):
        return x
    return x[i0:i1, j0:j1]


def from_row(x, i0):
    """The 1-D view of a count-major table ``x`` from element ``i0`` of its first row
    (``x[0, i0:]``; ``x`` itself for 0: a kernel reads only its address)."""
    return x if i0 == 0 else x[0, i0:]


def as_rows(X):
    """``(X, rs, cs, rows_fast)`` for a 2-D float64 CuPy view read row-wise.

    ``rs``, ``cs`` are element strides (may be negative or zero); ``rows_fast`` tells the
    kernels which index has unit stride so that their global reads coalesce.
    """
    if X.dtype != np.float64:
        raise TypeError(f"expected float64, got {X.dtype}")
    s0, s1 = X.strides
    if s0 % 8 or s1 % 8:  # e.g. a float64 view into a byte buffer at an odd offset
        X = cupy.ascontiguousarray(X)
        s0, s1 = X.strides
    rs, cs = s0 // 8, s1 // 8
    # The row index is the fast one when it has unit stride, or the smaller stride of
    # an interleaved view (a complex operand's transposed part: rs = 2, cs = 2n).
    rows_fast = int((abs(rs) == 1 and abs(cs) != 1) or 1 < abs(rs) < abs(cs)) \
        if X.shape[0] > 1 else 0
    return X, np.int64(rs), np.int64(cs), np.int32(rows_fast)


class CountTable(NamedTuple):
    """The moduli table whose counts the scaling and certificate kernels of
    ``kernels/scaling.cu`` evaluate in one pass (a traits record that the host code and,
    through ``defines``, the kernels read).

    Attributes
    ----------
    name : str
    counts : tuple of int
        The counts ``OZ_NLO .. OZ_NLO + OZ_NN - 1`` (``OZ_NLO = 2``).
    constants : callable
        ``n -> CRTConstants`` of the first ``n`` moduli (``H_f``).
    expected : callable
        ``(k, elements) -> int``: where the certificate's count search starts.
    defines : tuple of str
        Preprocessor definitions ``scaling.cu`` is compiled with for this table (none
        for the real table: the kernel's default ``OZ_NN`` is its 19 counts).
    repairs : bool
        Whether the products of this table repair the elements their a-posteriori test
        leaves unsettled (the real ones): their count may then lie one below the 1/16
        rule's (:func:`~ozaki_backend.spec.certificate.optimistic`).
    """

    name: str
    counts: tuple
    constants: Callable
    expected: Callable
    defines: tuple
    repairs: bool = False

    @property
    def most(self) -> int:
        return self.counts[-1]


#: ``kernels/scaling.cu``'s default ``OZ_NN``: the real table compiles without defines.
_KERNEL_DEFAULT_NN = 19

REAL_TABLE = CountTable("real", tuple(range(MIN_MODULI, MAX_MODULI + 1)), crt_constants,
                        expected_moduli, (), repairs=True)
COMPLEX_TABLE = CountTable(
    "complex", tuple(range(MIN_MODULI, MAX_COMPLEX_MODULI + 1)), complex_crt_constants,
    expected_complex_moduli, (f"OZ_NN={MAX_COMPLEX_MODULI - MIN_MODULI + 1}",))
assert len(REAL_TABLE.counts) == _KERNEL_DEFAULT_NN


def h_params(n_moduli: int, table: CountTable = REAL_TABLE):
    """``(eh, fh)``: frexp exponent of ``H_f`` and its 52-bit fraction field (spec §1)."""
    H_f = table.constants(n_moduli).H_f
    _, eh = math.frexp(H_f)
    bits = struct.unpack("<Q", struct.pack("<d", H_f))[0]
    return np.int32(eh), np.uint64(bits & ((1 << 52) - 1))


def lam1(n_moduli: int, table: CountTable = REAL_TABLE) -> int:
    """``lambda(1)`` exactly (spec §1)."""
    mh, eh = math.frexp(table.constants(n_moduli).H_f)
    mx, ex = math.frexp(1.0)
    return eh - ex - (1 if mx > mh else 0)


def not_capturing(what: str):
    """Raise when the current stream is being captured into a CUDA graph
    (:mod:`.graphs`): ``what`` (a device table cached for every later product) would be
    filled only when the graph runs. The capture then fails and the call runs eagerly."""
    if cupy.cuda.get_current_stream().is_capturing():
        raise RuntimeError(f"{what} made during a CUDA graph capture")


def blocks(total: int, per_block: int = 256, cap: int = 1 << 20) -> int:
    """1-D grid size for a grid-stride loop over ``total`` items."""
    return max(1, min(cap, -(-total // per_block)))


class Workspace:
    """A layout of aligned typed buffers inside one allocation from CuPy's pool.

    The caller registers every buffer (:meth:`need`), allocates ``nbytes`` (or the
    largest of several layouts that are live one after the other, on one stream) and
    :meth:`carve` s the views: the whole workspace is sized up front, so an
    out-of-memory error happens before any kernel runs.
    """

    ALIGN = 256

    def __init__(self):
        self._items = []
        self._size = 0

    def need(self, name, shape, dtype):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._items.append((name, tuple(int(s) for s in shape), dtype, self._size))
        self._size += round_up(max(nbytes, 1), self.ALIGN)

    @property
    def nbytes(self) -> int:
        return self._size

    def carve(self, buf):
        """Typed views of this layout over ``buf`` (a CuPy uint8 array, >= nbytes)."""
        assert buf.nbytes >= self._size
        views = {}
        for name, shape, dtype, off in self._items:
            views[name] = cupy.ndarray(shape, dtype=dtype, memptr=buf.data + off)
        return views


_sample = threading.local()


@contextmanager
def one_memory_query():
    """Within the block (one product), :func:`free_device_bytes` asks the driver once
    and follows the memory pool's own allocations from the driver after that.

    ``cudaMemGetInfo`` costs ~30 us of host time on the H200 and a product's tile
    choices ask three times before its GEMMs start. The driver's free memory changes by
    exactly what the pool takes or gives back (its ``total_bytes``), other allocators
    and processes apart, whose allocations a query a millisecond earlier misses too.
    Nested blocks share the outer one's query."""
    if getattr(_sample, "active", False):
        yield
        return
    _sample.active, _sample.value = True, None
    try:
        yield
    finally:
        _sample.active, _sample.value = False, None


def free_device_bytes() -> int:
    """Bytes a new allocation can get: free device memory plus CuPy's cached free
    blocks, within the memory pool's limit when one is set (see
    :func:`one_memory_query`)."""
    pool = cupy.get_default_memory_pool()
    if getattr(_sample, "active", False):
        if _sample.value is None:
            _sample.value = (int(cupy.cuda.runtime.memGetInfo()[0]), int(pool.total_bytes()))
        free0, held0 = _sample.value
        free = free0 - (int(pool.total_bytes()) - held0)
    else:
        free, _total = cupy.cuda.runtime.memGetInfo()
    avail = int(free) + int(pool.free_bytes())
    limit = int(pool.get_limit())
    if limit:
        avail = min(avail, limit - int(pool.used_bytes()))
    return max(avail, 0)
