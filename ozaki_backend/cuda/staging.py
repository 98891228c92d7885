"""Host operands in and out of the device through pinned staging buffers.

NumPy operands move in chunks: worker threads copy a chunk from the NumPy array into a
pinned buffer (NumPy releases the GIL) and queue its DMA, so host copies, DMAs and the
other threads' copies overlap; the result comes back the same way, tile by tile while
the next tiles compute (:class:`TileDownloads`). The pinned buffers are allocated once
per process and reused by every call (every NumPy path of the engine goes through
them). Pageable copies run
at 6 GB/s H2D and 2.4 GB/s D2H on the H200 host against 55 GB/s pinned
(``DESIGN.md`` §5). Each calling thread gets its own non-blocking stream, so concurrent
calls from several threads run independently.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import cupy
import numpy as np

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
            fut = st.pool.submit(job, slot, off, nb)
        except BaseException:
            st.release(slot)
            raise
        _on_cancel(fut, lambda slot=slot: st.release(slot))
        futs.append(fut)
    return dev, futs


def upload_start(x, stream):
    """Start the device copy of a 2-D float64 host array: ``(device_array, futures)``.

    F-ordered arrays keep their layout (the kernels read any strides); a view whose
    rows (or columns) are contiguous but spaced apart (``X[:, :k]``, ``X[:k].T``) is
    packed by the staging threads straight into the pinned chunks, block of rows by
    block of rows; only other strided views are packed on the host first."""
    if x.flags.c_contiguous:
        return _upload_flat(x, stream)
    if x.flags.f_contiguous:
        dev, futs = _upload_flat(x.T, stream)
        return dev.T, futs
    item = x.itemsize
    if x.ndim == 2 and x.strides[1] == item and x.shape[1] * item <= CHUNK_BYTES:
        return _upload_rows(x, stream)
    if x.ndim == 2 and x.strides[0] == item and x.shape[0] * item <= CHUNK_BYTES:
        dev, futs = _upload_rows(x.T, stream)
        return dev.T, futs
    return _upload_flat(np.ascontiguousarray(x), stream)


def _upload_rows(x, stream):
    """:func:`_upload_flat` for a 2-D array whose rows are contiguous but spaced apart:
    each job copies a block of whole rows into its pinned slot (the gather is the copy
    into pinned memory that a contiguous array needs anyway) and queues its DMA."""
    st = _get_staging()
    rows, cols = x.shape
    dev = cupy.empty(x.shape, dtype=x.dtype)
    row_bytes = cols * x.itemsize
    per = max(1, CHUNK_BYTES // row_bytes)
    dptr = dev.data.ptr

    def job(slot, r0, r1, keep=dev):  # `keep`: the device buffer outlives its DMAs
        try:
            nb = (r1 - r0) * row_bytes
            np.copyto(slot[:nb].view(x.dtype).reshape(r1 - r0, cols), x[r0:r1])
            cupy.cuda.runtime.memcpyAsync(dptr + r0 * row_bytes, slot.ctypes.data, nb,
                                          _H2D, stream.ptr)
            ev = cupy.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
            ev.synchronize()
        finally:
            st.release(slot)

    futs = []
    for r0 in range(0, rows, per):
        slot = st.acquire()
        try:
            fut = st.pool.submit(job, slot, r0, min(rows, r0 + per))
        except BaseException:
            st.release(slot)
            raise
        _on_cancel(fut, lambda slot=slot: st.release(slot))
        futs.append(fut)
    return dev, futs


def wait(futures):
    """Wait for staging jobs (re-raising the first failure).

    A KeyboardInterrupt (or a failed job) while waiting does not leave jobs running
    behind the exception: they read the caller's operands and write into its result,
    which NumPy frees as soon as the exception reaches it. The jobs not yet started are
    cancelled (their pinned slots are given back, once any DMA queued into them has
    landed) and the running ones are waited for, a few milliseconds at most (one 8 MiB
    chunk each); then the exception propagates.
    """
    try:
        for f in futures:
            f.result()
    except BaseException:
        _drain(futures)
        raise


def _drain(futures):
    """Cancel what has not started and wait for the rest, whatever interrupts."""
    for f in futures:
        f.cancel()
    pending = [f for f in futures if not f.cancelled()]
    while pending:
        try:
            for f in pending:
                f.exception()     # waits; never raises the job's own error
            pending = []
        except BaseException:     # another Ctrl-C: keep waiting, the first one wins
            pending = [f for f in pending if not f.done()]


def _on_cancel(future, release):
    """``release()`` when ``future`` is cancelled before its job ran (the job gives
    its pinned slot back itself otherwise)."""
    future.add_done_callback(lambda f: release() if f.cancelled() else None)


def download(dev, out, stream):
    """Copy the C-contiguous device array ``dev`` into the C-contiguous host ``out``."""
    wait(download_start(dev, out, stream))


def download_start(dev, out, stream):
    """Start copying the C-contiguous device array ``dev`` into the C-contiguous host
    ``out`` through pinned chunks (DMAs queued on ``stream``, host copies on the staging
    threads); returns the futures to :func:`wait` for. Blocks only while every pinned
    slot is in use (until earlier chunks have landed)."""
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
            fut = st.pool.submit(job, slot, ev, off, nb)
        except BaseException:
            st.release(slot)
            raise

        def release(slot=slot, ev=ev):
            # cancelled: the slot is free once the DMA queued into it has landed
            ev.synchronize()
            st.release(slot)

        _on_cancel(fut, release)
        futs.append(fut)
    return futs


# --------------------------------------------------------------------------- prefault
#: Results of at least this many bytes have their pages populated while the product
#: computes (:func:`prefault`).
PREFAULT_BYTES = 32 << 20
_MADV_POPULATE_WRITE = 23   # Linux >= 5.14
_madvise = None


def _madvise_fn():
    """libc's ``madvise`` (through ctypes), or False where there is none."""
    global _madvise
    if _madvise is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
            _madvise = fn
        except (OSError, AttributeError):
            _madvise = False
    return _madvise


def prefault(host):
    """Populate the pages of the host array ``host`` on the staging threads, without
    changing a byte of it (``madvise(MADV_POPULATE_WRITE)``); returns the futures.

    A result NumPy has just allocated is untouched memory: its first writes fault every
    page in (and the kernel zeroes it), single chunk after chunk inside the download
    jobs, at about half the speed of a copy into resident pages. Populated while the
    GPU computes, the pages are there when the result comes down. The data is never
    written, so it cannot race with a download of the same bytes, and an array whose
    pages are already present (NumPy's own memset, a reused ``out=``) costs a walk of
    its page tables. Nothing is done below :data:`PREFAULT_BYTES`, where madvise is
    missing or refuses (older kernels: EINVAL), or for memory not owned by NumPy in
    one block.
    """
    fn = _madvise_fn()
    if not fn or host.nbytes < PREFAULT_BYTES or not (
            host.flags.c_contiguous or host.flags.f_contiguous):
        return []
    page = 4096
    start = host.ctypes.data
    lo, hi = start - start % page, start + host.nbytes
    st = _get_staging()

    def job(a, b, keep=host):   # `keep`: the array outlives its job
        if fn(a, b - a, _MADV_POPULATE_WRITE) != 0:
            return False        # refused: the downloads fault the pages in themselves
        return True

    return [st.pool.submit(job, a, min(hi, a + CHUNK_BYTES))
            for a in range(lo, hi, CHUNK_BYTES)]


_tls = threading.local()


def _per_thread_stream(name):
    """This thread's non-blocking stream ``name`` on the current device (a new one when
    the thread has none there yet)."""
    dev = cupy.cuda.Device().id
    held = getattr(_tls, name, None)
    if held is None or held[1] != dev:
        held = (cupy.cuda.Stream(non_blocking=True), dev)
        setattr(_tls, name, held)
    return held[0]


def thread_stream():
    """A non-blocking stream per thread for host-operand calls (concurrent calls from
    several threads then run independently)."""
    return _per_thread_stream("stream")


def cached_upload(x, which, last, stream):
    """Upload, reusing the previous slice's device copy when a broadcast batch repeats
    the same host memory."""
    key = (x.__array_interface__["data"][0], x.shape, x.strides)
    hit = last.get(which)
    if hit is not None and hit[0] == key:
        return hit[1], []
    dev, futs = upload_start(np.asarray(x, dtype=np.float64), stream)
    last[which] = (key, dev)
    return dev, futs


class TileDownloads:
    """Finished output tiles downloaded while the next ones compute.

    ``engine.matmul_numpy`` hands this object to ``pipeline.product_into`` as its
    ``phases`` (it forwards ``phases(name)`` timing to a real :class:`Phases` when
    given): the pipeline caps its output tiles at :attr:`tile_cap` and calls
    :meth:`tile_done` after each tile's final pass. A tile that spans the whole rows of
    a C-ordered destination (or the whole columns of a Fortran-ordered one, transposed
    on the device) is then copied on a second stream, ordered after the tile by an
    event, from a download thread, so neither the compute thread nor the GPU waits.

    Parameters
    ----------
    C : cupy.ndarray (m, n), C order
        The device result the pipeline writes.
    host : numpy.ndarray (m, n)
        C- or Fortran-contiguous destination.
    stream : cupy.cuda.Stream
        The compute stream.
    phases : callable or None
        The benchmark's ``Phases`` (timing is forwarded).
    blocks : int
        Tiles along the destination's contiguous axis (1: no overlap).
    """

    def __init__(self, C, host, stream, phases=None, blocks=4):
        m, n = C.shape
        self.C, self.stream, self.phases = C, stream, phases
        self.order = "C" if host.flags.c_contiguous else "F"
        self.host = host if self.order == "C" else host.T
        self.futs = []
        self.done = []  # (i0, i1, j0, j1) of the tiles downloaded
        # The result's pages are faulted in on the staging threads while the GPU
        # computes, not by the downloads (see prefault).
        self.futs += prefault(host)
        if blocks > 1:
            step = -(-(m if self.order == "C" else n) // blocks)
            step = -(-step // 64) * 64
            self.tile_cap = (step, n) if self.order == "C" else (m, step)
        else:
            self.tile_cap = None

    def __call__(self, name):
        return self.phases(name) if self.phases is not None else _no_phase()

    @property
    def workspace_peak(self):
        """Forwarded to the benchmark's ``Phases`` (the pipeline records it there)."""
        return getattr(self.phases, "workspace_peak", None)

    @workspace_peak.setter
    def workspace_peak(self, value):
        if self.phases is not None:
            self.phases.workspace_peak = value

    def tile_done(self, i0, i1, j0, j1):
        """Queue the download of the finished tile ``C[i0:i1, j0:j1]`` when it covers
        whole rows (C destination) or whole columns (Fortran destination)."""
        m, n = self.C.shape
        if self.order == "C" and (j0, j1) == (0, n):
            src, dst = self.C[i0:i1], self.host[i0:i1]
        elif self.order == "F" and (i0, i1) == (0, m):
            src = cupy.ascontiguousarray(self.C[:, j0:j1].T)  # on the compute stream
            dst = self.host[j0:j1]
        else:
            return
        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(self.stream)
        self.futs.append(_downloader().submit(self._copy, src, dst, ev,
                                              cupy.cuda.Device().id))
        self.done.append((i0, i1, j0, j1))

    @staticmethod
    def _copy(src, dst, ev, device):
        with cupy.cuda.Device(device):
            s = _download_stream()
            s.wait_event(ev)
            wait(download_start(src, dst, s))

    def finish(self):
        """Wait for every queued tile; returns whether the whole result came down."""
        wait(self.futs)
        self.futs = []
        m, n = self.C.shape
        if self.order == "C":
            rows = sum(i1 - i0 for (i0, i1, _, _) in self.done)
            return rows == m
        return sum(j1 - j0 for (_, _, j0, j1) in self.done) == n


@contextmanager
def _no_phase():
    yield


_download_pool = None


def _downloader():
    """The one thread that queues tile downloads (so that the compute thread never
    blocks on a pinned slot)."""
    global _download_pool
    if _download_pool is None:
        with _staging_lock:
            if _download_pool is None:
                _download_pool = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="ozaki-download")
    return _download_pool


def _download_stream():
    """The download thread's own non-blocking stream on the current device."""
    return _per_thread_stream("dstream")
