"""The CUDA engine's entry points for both array worlds.

* :func:`matmul_numpy` — NumPy operands in, float64 NumPy result out. Host operands
  move through a pool of pinned staging buffers in chunks: worker threads copy a chunk
  from the NumPy array into a pinned buffer (NumPy releases the GIL) and queue its DMA,
  so host copies, DMAs and the other threads' copies overlap; the result comes back the
  same way. Pageable copies would run at 6 GB/s H2D and 2.4 GB/s D2H on the H200 host
  against 55 GB/s pinned (``DESIGN.md`` §5).
* :func:`matmul_cupy` — CuPy operands in, CuPy result out on their device, no host
  copies (one 4-byte read tells whether an operand held Inf/NaN, which then takes
  CuPy's native product, as NumPy's native path does for the CPU).

Both run :func:`ozaki_backend.cuda.pipeline.product_into` per 2-D slice; any device
failure surfaces as :class:`~ozaki_backend.cuda.errors.CudaEngineError`.
``scheme="phase22"`` runs its own kernels (:mod:`ozaki_backend.cuda.phase22`).
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import cupy
import numpy as np

from .. import _stats
from ..plan import Plan
from . import pipeline
from .crt import apply_alpha_beta
from .errors import CudaEngineError, translating

# --------------------------------------------------------------------------- staging

#: Bytes per pinned staging buffer (a chunk of a transfer).
CHUNK_BYTES = 8 << 20


class _Staging:
    """Pinned host buffers shared by all calls, and the worker threads that fill them."""

    def __init__(self):
        self.workers = max(2, min(16, os.cpu_count() or 2))
        self.nslots = 2 * self.workers
        self._free = queue.Queue()
        self._made = 0
        self._lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=self.workers,
                                       thread_name_prefix="ozaki-staging")

    def acquire(self):
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._made < self.nslots:
                self._made += 1
                mem = cupy.cuda.alloc_pinned_memory(CHUNK_BYTES)
                return np.ndarray((CHUNK_BYTES,), dtype=np.uint8, buffer=mem)
        return self._free.get()

    def release(self, slot):
        self._free.put(slot)


_staging = None
_staging_lock = threading.Lock()


def _get_staging():
    global _staging
    if _staging is None:
        with _staging_lock:
            if _staging is None:
                _staging = _Staging()
    return _staging


_H2D = 1  # cudaMemcpyHostToDevice
_D2H = 2  # cudaMemcpyDeviceToHost


def _chunks(nbytes, step):
    return [(o, min(step, nbytes - o)) for o in range(0, nbytes, step)]


def _upload_flat(x, stream):
    """Start copying a C-contiguous host array to a new device array (same shape)
    through pinned chunks; returns ``(device_array, futures)``.

    Slots are taken here, in the calling thread, and handed to the jobs: a worker never
    waits for a slot, so jobs of concurrent calls cannot starve each other (a job only
    waits for its own DMA).
    """
    st = _get_staging()
    dev = cupy.empty(x.shape, dtype=x.dtype)
    src = x.reshape(-1).view(np.uint8)
    dptr = dev.data.ptr

    def job(slot, off, nb, keep=dev):  # `keep`: the device buffer outlives its DMAs
        try:
            np.copyto(slot[:nb], src[off:off + nb])
            cupy.cuda.runtime.memcpyAsync(dptr + off, slot.ctypes.data, nb, _H2D, stream.ptr)
            ev = cupy.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
            ev.synchronize()  # the slot is reusable once its DMA is done
        finally:
            st.release(slot)

    futs = []
    for off, nb in _chunks(src.nbytes, CHUNK_BYTES):
        slot = st.acquire()
        try:
            futs.append(st.pool.submit(job, slot, off, nb))
        except BaseException:
            st.release(slot)
            raise
    return dev, futs


def upload_start(x, stream):
    """Start the device copy of a 2-D float64 host array: ``(device_array, futures)``.

    F-ordered arrays keep their layout (the kernels read any strides); other
    non-contiguous ones are packed into C order first."""
    if x.flags.c_contiguous:
        return _upload_flat(x, stream)
    if x.flags.f_contiguous:
        dev, futs = _upload_flat(x.T, stream)
        return dev.T, futs
    return _upload_flat(np.ascontiguousarray(x), stream)


def wait(futures):
    """Wait for staging jobs (re-raising the first failure)."""
    for f in futures:
        f.result()


def upload(x, stream):
    """Device copy of a 2-D float64 host array (blocking until the copy is queued)."""
    dev, futs = upload_start(x, stream)
    wait(futs)
    return dev


def download(dev, out, stream):
    """Copy the C-contiguous device array ``dev`` into the C-contiguous host ``out``."""
    st = _get_staging()
    dst = out.reshape(-1).view(np.uint8)
    sptr = dev.data.ptr
    futs = []

    def job(slot, ev, off, nb):
        try:
            ev.synchronize()
            np.copyto(dst[off:off + nb], slot[:nb])
        finally:
            st.release(slot)

    for off, nb in _chunks(dst.nbytes, CHUNK_BYTES):
        slot = st.acquire()
        try:
            cupy.cuda.runtime.memcpyAsync(slot.ctypes.data, sptr + off, nb, _D2H, stream.ptr)
            ev = cupy.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
        except BaseException:
            st.release(slot)
            raise
        futs.append(st.pool.submit(job, slot, ev, off, nb))
    for f in futs:
        f.result()


_tls = threading.local()


def _stream():
    """A non-blocking stream per thread for host-operand calls (concurrent calls from
    several threads then run independently)."""
    s = getattr(_tls, "stream", None)
    dev = cupy.cuda.Device().id
    if s is None or _tls.device != dev:
        s = cupy.cuda.Stream(non_blocking=True)
        _tls.stream, _tls.device = s, dev
    return s


# --------------------------------------------------------------------------- NumPy in/out

def matmul_numpy(a3, b3, plan, *, phases=None, check_finite=False, out=None):
    """Stacked product of finite float64 NumPy operands on the GPU.

    Parameters
    ----------
    a3 : ndarray (..., m, k), b3 : ndarray (..., k, n)
        Same leading (batch) shape, possibly broadcast views (zero strides).
    plan : Plan
    phases : pipeline.Phases, optional
        Per-phase device timing (benchmark).
    check_finite : bool
        Detect Inf/NaN on the device (in the scaling pass, no extra read of the
        operands) and return None then, so that the caller can take NumPy's native
        path; the host-side ``isfinite`` check costs ~140 ms at n = 8192.

    Returns
    -------
    ndarray or None
        float64, C order, shape ``batch + (m, n)``; None for a non-finite operand
        (``check_finite`` only).
    """
    batch = a3.shape[:-2]
    m, k = a3.shape[-2:]
    n = b3.shape[-1]
    if out is None:
        out = np.empty(batch + (m, n), dtype=np.float64)
    elif not (isinstance(out, np.ndarray) and out.dtype == np.float64
              and out.shape == batch + (m, n) and out.flags.c_contiguous):
        raise ValueError("out must be a C-contiguous float64 array of shape "
                         f"{batch + (m, n)}")
    if out.size == 0:
        return out
    if k == 0:
        out.fill(0.0)
        return out
    if plan.scheme == "phase22":
        from . import phase22

        if check_finite and not (np.isfinite(a3).all() and np.isfinite(b3).all()):
            return None
        with translating("CUDA engine (NumPy operands, phase22)"):
            for idx in np.ndindex(*batch):
                C = phase22.matmul_2d(cupy.asarray(a3[idx], dtype=np.float64),
                                      cupy.asarray(b3[idx], dtype=np.float64), plan)
                out[idx] = cupy.asnumpy(C)
        return out
    with translating("CUDA engine (NumPy operands)"):
        stream = _stream()
        with stream:
            last = {}
            for idx in np.ndindex(*batch):
                # both operands' chunks go through the staging threads together
                A, fa = _cached_upload(a3[idx], "a", last, stream)
                B, fb = _cached_upload(b3[idx], "b", last, stream)
                wait(fa + fb)
                C = cupy.empty((m, n), dtype=np.float64)
                if pipeline.product_into(A, B, plan, C, phases=phases,
                                         check_finite=check_finite) is None:
                    return None
                download(C, out[idx], stream)
                del C
            last.clear()
        stream.synchronize()
    return out


def _cached_upload(x, which, last, stream):
    """Upload, reusing the previous slice's device copy when a broadcast batch repeats
    the same host memory."""
    key = (x.__array_interface__["data"][0], x.shape, x.strides)
    hit = last.get(which)
    if hit is not None and hit[0] == key:
        return hit[1], []
    dev, futs = upload_start(np.asarray(x, dtype=np.float64), stream)
    last[which] = (key, dev)
    return dev, futs


# --------------------------------------------------------------------------- CuPy in/out

def _native_cupy(a, b, out, alpha, beta, c, reason):
    _stats.record("native", reason)
    if alpha == 1.0 and beta == 0.0:
        return cupy.matmul(a, b, out=out)
    res = apply_alpha_beta(cupy.matmul(a, b), alpha, beta, c)
    if out is not None:
        out[...] = res
        return out
    return res


def matmul_cupy(a, b, opts, *, out=None, alpha=1.0, beta=0.0, c=None, plan=None):
    """``matmul`` for CuPy operands: the result is a CuPy array on their device.

    Same semantics as the NumPy path (``numpy.matmul`` shapes and broadcasting, native
    fallback for non-float64 results and non-finite operands, ``out=``), plus BLAS-style
    ``alpha``/``beta``/``c`` (``docs/spec.md`` §7) applied on the device in the fused
    output pass.
    """
    from .._api import _matmul_shape

    if not (isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)):
        # Mixed NumPy/CuPy: CuPy's own matmul decides (and raises its own error).
        return _native_cupy(a, b, out, alpha, beta, c, "mixed NumPy/CuPy operands")
    shapes = _matmul_shape(a.shape, b.shape)
    if shapes is None:
        return _native_cupy(a, b, out, alpha, beta, c, "shape rejected by NumPy")
    if (a.dtype.kind not in "fiub" or b.dtype.kind not in "fiub"
            or np.result_type(a.dtype, b.dtype) != np.float64):
        return _native_cupy(a, b, out, alpha, beta, c,
                            "operands NumPy would not compute in float64")
    shape, batch, sa2, sb2 = shapes
    if out is not None and not (isinstance(out, cupy.ndarray) and out.shape == shape
                                and np.can_cast(np.float64, out.dtype, "same_kind")):
        return _native_cupy(a, b, out, alpha, beta, c, "invalid out")
    m, k, n = sa2[-2], sa2[-1], sb2[-1]
    p = plan if plan is not None else Plan(m, n, k, **opts)
    if (p.m, p.n, p.k) != (m, n, k):
        raise ValueError(f"plan is for ({p.m} x {p.k}) @ ({p.k} x {p.n}); "
                         f"operands are ({m} x {k}) @ ({k} x {n})")
    with translating("CUDA engine (CuPy operands)"):
        a = a.astype(np.float64, copy=False)
        b = b.astype(np.float64, copy=False)
        a3 = cupy.broadcast_to(a.reshape(sa2), batch + sa2[-2:])
        b3 = cupy.broadcast_to(b.reshape(sb2), batch + sb2[-2:])
        full = batch + (m, n)
        direct = (out is not None and out.dtype == np.float64 and out.flags.c_contiguous
                  and not _overlaps(out, a, b))
        res = out.reshape(full) if direct else cupy.empty(full, dtype=np.float64)
        c3 = None
        if beta != 0.0:
            c3 = cupy.broadcast_to(cupy.asarray(c, dtype=np.float64), shape).reshape(full)
        if opts.get("engine") == "cpu":
            return _host_fallback(a3, b3, p, res, out, shape, alpha, beta, c3, direct)
        if p.scheme == "phase22":
            if not bool(cupy.isfinite(a3).all() & cupy.isfinite(b3).all()):
                return _native_cupy(a, b, out, alpha, beta, c, "non-finite operand")
            from . import crt, phase22

            with _stats.timer() as tm:
                for idx in np.ndindex(*batch):
                    r = phase22.matmul_2d(a3[idx], b3[idx], p)
                    if alpha != 1.0 or beta != 0.0:
                        r = crt.apply_alpha_beta(r, alpha, beta,
                                                 None if c3 is None else c3[idx])
                    res[idx] = r
            _stats.record("routed", "engine=cuda (phase22, CuPy operands)", seconds=tm.seconds)
            return _deliver(res, out, shape, direct)
        with _stats.timer() as tm:
            finite = _run_device(a3, b3, p, res, batch, alpha, beta, c3)
        if not finite:
            return _native_cupy(a, b, out, alpha, beta, c, "non-finite operand")
        _stats.record("routed", "engine=cuda (CuPy operands)", seconds=tm.seconds)
    return _deliver(res, out, shape, direct)


def _deliver(res, out, shape, direct):
    """The result in the caller's ``shape``: ``res`` itself, or ``out`` (filled from
    ``res`` unless ``res`` already is a view of it)."""
    res = res.reshape(shape)
    if out is None:
        return res
    if not direct:
        out[...] = res
    return out


def _overlaps(out, a, b) -> bool:
    return bool(cupy.may_share_memory(out, a) or cupy.may_share_memory(out, b))


def _run_device(a3, b3, p, res, batch, alpha, beta, c3) -> bool:
    """Compute every slice; False if one held Inf/NaN (seen by the scaling pass)."""
    for idx in np.ndindex(*batch):
        done = pipeline.product_into(a3[idx], b3[idx], p, res[idx], alpha=alpha, beta=beta,
                                     C0=None if c3 is None else c3[idx], check_finite=True)
        if done is None:
            return False
    return True


def _host_fallback(a3, b3, p, res, out, shape, alpha, beta, c3, direct):
    """``engine="cpu"`` with CuPy operands: the CPU reference on host copies, result back
    on the device."""
    from ..reference.crt import apply_alpha_beta as host_ab
    from ..reference.pipeline import matmul_2d

    A, B = cupy.asnumpy(a3), cupy.asnumpy(b3)
    host = np.empty(res.shape)
    for idx in np.ndindex(*res.shape[:-2]):
        host[idx] = matmul_2d(A[idx], B[idx], p)
    if alpha != 1.0 or beta != 0.0:
        host = host_ab(host, alpha, beta, None if c3 is None else cupy.asnumpy(c3))
    res[...] = cupy.asarray(host)
    _stats.record("routed", f"engine=cpu ({p.scheme}, CuPy operands via host)")
    return _deliver(res, out, shape, direct)


__all__ = ["matmul_numpy", "matmul_cupy", "CudaEngineError"]
