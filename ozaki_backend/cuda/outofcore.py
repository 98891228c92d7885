"""NumPy products larger than the device: out of core, bitwise the in-core result.

Every output bit depends on quantities of the whole product — the equilibration
exponents ``S`` (column maxima of all of A, row maxima of all of B), the column rule
``tau_j`` (a minimum over every row of A) and, for ``precision="fp64"``, the moduli
count (a maximum over every element) — so the operands cannot simply be cut into
independent products (their results would differ in the last bits from the CPU
engine's). Instead the one pipeline (:class:`~.pipeline.Prepared`,
:func:`~.pipeline.integer_product_into`) runs on operands that stay in host memory
(:class:`HostRows`): every stage that reads an operand reads a row block of A or of
``B.T``, uploaded on demand (the last block of each is kept), as NVBLAS uploads panels
per output tile. The statistics are read in row blocks (the column reductions
accumulate, the row statistics concatenate), the bound GEMM and the integer product go
tile by tile, and each result tile is copied into the host result.

The tiles count the uploaded blocks and the result tile against the workspace budget.
The rare escalation (an element no a-priori count certifies) and ``return_bound`` need
the whole result on the device: such products are declined (computed natively by the
caller, with a warning), never returned uncertified.
"""

from __future__ import annotations

import os

import cupy
import numpy as np

from .. import _stats
from .._warnings import warn_native
from ..spec import tiling
from . import pipeline, staging
from ._common import free_device_bytes

#: Force the out-of-core path for every NumPy product (tests, benchmarks):
#: ``OZAKI_BACKEND_CUDA_OUT_OF_CORE=1``, or set this to True.
FORCE = False


class HostRows:
    """A 2-D float64 host array read row-wise by device row blocks.

    ``X[i0:i1]`` uploads rows ``i0:i1`` (C order) on the current stream and returns the
    device block; the last block is kept for repeated reads of the same rows.
    """

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, X):
        self.X = X
        self.shape = X.shape
        self._key = None
        self._block = None

    def __getitem__(self, rows):
        if not isinstance(rows, slice):
            raise TypeError("HostRows takes a slice of rows")
        i0, i1, step = rows.indices(self.shape[0])
        if step != 1:
            raise ValueError("HostRows takes contiguous rows")
        if self._key != (i0, i1):
            # The previous block is released on this stream first: in stream order the
            # kernels still reading it finish before the upload reuses its memory.
            self._block = None
            rows = self.X[i0:i1]
            stream = cupy.cuda.get_current_stream()
            if abs(rows.strides[0]) < abs(rows.strides[1]):
                # column-major rows (B.T of a C-ordered B): gather its columns in their
                # own order (no transposing copy on the host); kernels read any strides
                dev, futures = staging.upload_start(
                    np.ascontiguousarray(rows.T, dtype=np.float64), stream)
                dev = dev.T
            else:
                dev, futures = staging.upload_start(
                    np.ascontiguousarray(rows, dtype=np.float64), stream)
            staging.wait(futures)
            self._block, self._key = dev, (i0, i1)
        return self._block

    def release(self):
        self._block = self._key = None


def forced() -> bool:
    return FORCE or os.environ.get("OZAKI_BACKEND_CUDA_OUT_OF_CORE", "") not in ("", "0")


def needed(m, k, n, plan, free=None) -> bool:
    """Whether a NumPy product goes out of core: forced, or its operands and result
    (float64) do not fit on the device beside the workspace budget."""
    if plan.scheme != "ozaki2":
        return False
    if forced():
        return True
    if free is None:
        free = free_device_bytes()
    resident = 8 * (m * k + k * n + m * n)
    return resident + pipeline.workspace_budget(free) > free * tiling.DEFAULT_FRACTION


def product_into(a, b, plan, out, *, check_finite=True, phases=None):
    """``out = a @ b`` (host float64 arrays, any strides; ``out`` C-contiguous) with the
    operands left in host memory.

    Returns
    -------
    str or None
        The certificate's outcome, or None when declined: an operand holds Inf/NaN
        (with ``check_finite``), the product would need the escalation path, or the
        device ran out of memory with every retry (both warned).
    """
    done, res = pipeline.with_retries(
        lambda: _attempt(a, b, plan, out, check_finite, phases), phases)
    if done:
        return res
    warn_native(res)
    _stats.record_certificate(pipeline.NATIVE)
    return None


def _attempt(a, b, plan, out, check_finite, phases):
    from ..semantics import transpose_pair

    m, k = a.shape
    ph = phases or pipeline._nothing
    budget = pipeline.workspace_budget()
    A, Bt = HostRows(a), HostRows(b.T)
    # Row blocks of the statistics pass: a quarter of the budget each.
    block = max(pipeline._MIN_TILE, budget // (4 * 8 * max(k, 1)))

    def extra(tm, tn):
        return 8 * k * (tm + tn) + 8 * tm * tn

    try:
        with pipeline.tile_extra(extra):
            prep = pipeline.Prepared(A, None, plan.mode, ph, certify=True,
                                     sym=transpose_pair(a, b), Bt=Bt, block=block,
                                     fixed=None if plan.adaptive else plan.n_moduli)
            with ph("scaling"):
                st = prep.status(True, fixed=None if plan.adaptive else plan.n_moduli)
            host = st.get()
            if check_finite and host[0] > 1024:
                return None
            dec = prep.count(host, None if plan.adaptive else plan.n_moduli)
            if plan.adaptive:
                N = dec.n_moduli
                if dec.failing and not dec.direct:
                    # The a-posteriori test needs the whole result on the device: out
                    # of core the count every element passes a priori is used instead
                    # (certified; its bits can differ from the in-memory product's).
                    N = prep.all_pass(dec)
                if dec.direct or N is None:
                    warn_native("out of core, the product needs the a-posteriori test "
                                "or direct elements on the whole result")
                    _stats.record_certificate(pipeline.NATIVE)
                    return None
                outcome = pipeline.CERTIFIED
            else:
                N = plan.n_moduli
                outcome = pipeline.CERTIFIED if dec.failing == 0 else pipeline.UNCERTIFIED
            prep.release()
            s, t = prep.shifts(N)
            pipeline.integer_product_into(prep, N, s, t, out, ph=ph)
    finally:
        A.release()
        Bt.release()
    _stats.record_moduli(N)
    _stats.record_certificate(outcome)
    return outcome
