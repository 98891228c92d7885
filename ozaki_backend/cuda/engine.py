"""The CUDA engine: :class:`ozaki_backend.engine.Engine` for NumPy and CuPy operands.

* NumPy operands in, float64 NumPy result out (:func:`matmul_numpy`): each 2-D slice
  moves through the pinned staging buffers (:mod:`.staging`) as it lies in memory (C or
  Fortran order, no host copy), runs :func:`.pipeline.product_into` and comes back
  straight into the caller's C- or Fortran-ordered result; ``alpha``/``beta`` are
  applied on the host.
* CuPy operands in, CuPy result out on their device (:func:`matmul_device`), no host
  copies; ``alpha``/``beta`` are applied in the fused output pass.

Inf/NaN in an operand is detected on the device by the exponent pass (one read of a few
bytes), and the product is then declined (the caller computes it natively). The seed
scheme runs its own kernels (:mod:`.phase22`). Any device failure surfaces as
:class:`~ozaki_backend.cuda.errors.CudaEngineError`.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..engine import DECLINED, DONE, OVERFLOW, Engine
from ..semantics import apply_alpha_beta, transpose_pair
from . import availability, outofcore, phase22, pipeline, staging, tuning
from . import complex as complex_
from .errors import CudaEngineError, translating


# --------------------------------------------------------------------------- NumPy in/out

def matmul_numpy(a3, b3, plan, *, phases=None, check_finite=False, out=None, bound=None,
                 flags=None, steps=None):
    """Stacked product of float64 NumPy operands on the GPU.

    Parameters
    ----------
    a3 : ndarray (..., m, k), b3 : ndarray (..., k, n)
        Same leading (batch) shape, possibly broadcast views (zero strides). A slice
        that is C- or Fortran-contiguous (a transposed view) is uploaded as it lies in
        memory, with no host copy; the kernels read the device copy's strides.
    plan : Plan
    phases : pipeline.Phases, optional
        Per-phase device timing (benchmark).
    check_finite : bool
        Detect Inf/NaN on the device (in the scaling pass, no extra read of the
        operands) and return None then, so that the caller can take NumPy's native
        path; a host-side ``isfinite`` pass costs ~140 ms at n = 8192.
    out : ndarray, optional
        float64 of shape ``batch + (m, n)`` whose 2-D slices are C- or
        Fortran-contiguous: the result is downloaded straight into it (a Fortran slice
        is transposed on the device first, never on the host).
    bound : ndarray, optional
        C-contiguous float64 like ``out``: receives the per-element error bound.
    flags : dict, optional
        Receives ``"overflow"``: whether some element is infinite (checked on the device).
    steps : dict, optional
        Receives wall seconds ``"upload"``, ``"engine"``, ``"download"`` summed over the
        slices (each step synchronised before the next one starts: benchmark only).

    Returns
    -------
    ndarray or None
        float64, shape ``batch + (m, n)`` (``out`` when given); None for a non-finite
        operand (``check_finite`` only).
    """
    batch = a3.shape[:-2]
    m, k = a3.shape[-2:]
    n = b3.shape[-1]
    if out is None:
        out = np.empty(batch + (m, n), dtype=np.float64)
    elif not (isinstance(out, np.ndarray) and out.dtype == np.float64
              and out.shape == batch + (m, n) and out.flags.writeable
              and all(_download_layout(out[idx]) for idx in np.ndindex(*batch))):
        raise ValueError("out must be a float64 array of shape "
                         f"{batch + (m, n)} with C- or Fortran-contiguous 2-D slices")
    if out.size == 0:
        return out
    if k == 0:
        out.fill(0.0)
        return out
    if plan.scheme == "phase22":
        if check_finite and not (np.isfinite(a3).all() and np.isfinite(b3).all()):
            return None
        with translating("CUDA engine (NumPy operands, phase22)"):
            stream = staging.thread_stream()
            with stream:
                last = {}
                for idx in np.ndindex(*batch):
                    A, fa = staging.cached_upload(a3[idx], "a", last, stream)
                    B, fb = staging.cached_upload(b3[idx], "b", last, stream)
                    staging.wait(fa + fb)
                    _download_into(phase22.matmul_2d(A, B, plan), out[idx], stream)
                last.clear()
            stream.synchronize()
        return out
    clock = _StepClock(steps)
    with translating("CUDA engine (NumPy operands)"):
        stream = staging.thread_stream()
        overflow = False
        with stream:
            last = {}
            for idx in np.ndindex(*batch):
                if bound is None and outofcore.needed(m, k, n, plan):
                    # larger than the device (or the budget): panels per output tile
                    if outofcore.product_into(a3[idx], b3[idx], plan, out[idx],
                                              check_finite=check_finite,
                                              phases=phases) is None:
                        return None
                    overflow = overflow or (flags is not None and bool(np.isinf(out[idx]).any()))
                    continue
                # both operands' chunks go through the staging threads together
                A, fa = staging.cached_upload(a3[idx], "a", last, stream)
                if transpose_pair(a3[idx], b3[idx]):
                    B, fb = A.T, []     # x.T @ x, x @ x.T: one upload, one triangle
                else:
                    B, fb = staging.cached_upload(b3[idx], "b", last, stream)
                staging.wait(fa + fb)
                clock.lap("upload", stream)
                C = cupy.empty((m, n), dtype=np.float64)
                Bd = None if bound is None else cupy.empty((m, n), dtype=np.float64)
                # Finished row (column) blocks of C download while the next compute;
                # not when the steps are timed one after the other.
                tiles = staging.TileDownloads(C, out[idx], stream, phases,
                                              blocks=1 if steps is not None else
                                              download_blocks(m, n))
                try:
                    outcome = pipeline.product_into(A, B, plan, C, phases=tiles,
                                                    check_finite=check_finite, bound=Bd)
                finally:
                    whole = tiles.finish()
                if outcome is None:
                    return None
                if flags is not None:
                    overflow = overflow or bool(cupy.isinf(C).any())
                clock.lap("engine", stream)
                if not whole or getattr(tiles, "rewritten", False) or outcome in (
                        pipeline.RESIDUAL, pipeline.NATIVE, pipeline.NATIVE_FASTER):
                    # not tiled, or rewritten after its tiles came down
                    _download_into(C, out[idx], stream)
                if Bd is not None:
                    _download_into(Bd, bound[idx], stream)
                clock.lap("download", stream)
                del C, Bd, tiles
            last.clear()
        stream.synchronize()
        if flags is not None:
            flags["overflow"] = overflow
    return out


#: Results of at least this many bytes (and sides of at least OVERLAP_MIN_SIDE) come
#: down in blocks while the rest computes (:func:`download_blocks`); smaller ones in
#: one piece after the product (the narrower GEMMs would cost more than the overlap
#: saves).
OVERLAP_BYTES = 32 << 20
OVERLAP_MIN_SIDE = 512
#: The fewest and the most blocks of an overlapped download, and the bytes per block
#: between them: only the last block's download is not hidden behind the compute, so
#: a 512 MiB result (8192^2) comes down in 8 blocks of 64 MiB, not 4 of 128 (about
#: 2.5 ms of pinned D2H and host copy saved at the end of the call); B's residue planes
#: are made once for all row blocks, so a block costs only its GEMM launches.
OVERLAP_BLOCKS = 4
OVERLAP_MAX_BLOCKS = 8
OVERLAP_BLOCK_BYTES = 64 << 20


def download_blocks(m, n) -> int:
    """Output blocks of an ``m x n`` result that download while the next compute."""
    nbytes = 8 * m * n
    if nbytes < OVERLAP_BYTES or min(m, n) < OVERLAP_MIN_SIDE:
        return 1
    return max(OVERLAP_BLOCKS, min(OVERLAP_MAX_BLOCKS, nbytes // OVERLAP_BLOCK_BYTES))


def _download_layout(o):
    """``"C"`` / ``"F"`` when the 2-D host slice ``o`` can take a download as it lies,
    else ``""``."""
    if o.flags.c_contiguous:
        return "C"
    return "F" if o.flags.f_contiguous else ""


def _download_into(C, o, stream):
    """The C-ordered device result ``C`` into the 2-D host slice ``o`` (C- or
    Fortran-contiguous), one pinned-staged transfer, no host transposing copy."""
    if not C.flags.c_contiguous:
        C = cupy.ascontiguousarray(C)
    if _download_layout(o) == "C":
        staging.download(C, o, stream)
    else:  # Fortran order: transpose on the device (a memory-bound pass), then copy flat
        staging.download(cupy.ascontiguousarray(C.T), o.T, stream)


class _StepClock:
    """Wall time of the host path's steps (upload, engine, download) when ``steps`` is
    a dict; does nothing (and never synchronises) otherwise."""

    def __init__(self, steps):
        self.steps = steps
        if steps is not None:
            import time

            self._now = time.perf_counter
            self.t = self._now()

    def lap(self, name, stream):
        if self.steps is None:
            return
        stream.synchronize()
        t = self._now()
        self.steps[name] = self.steps.get(name, 0.0) + (t - self.t)
        self.t = t


# --------------------------------------------------------------------------- CuPy in/out

def matmul_device(a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None, bound3=None) -> bool:
    """Stacked product of float64 CuPy operands into the CuPy ``out3`` (any strides),
    ``alpha``/``beta`` fused into the output pass (and the error bound into ``bound3``);
    False if an operand holds Inf/NaN."""
    if plan.scheme == "phase22":
        if not bool(cupy.isfinite(a3).all() & cupy.isfinite(b3).all()):
            return False
        for idx in np.ndindex(*a3.shape[:-2]):
            r = phase22.matmul_2d(a3[idx], b3[idx], plan)
            if alpha != 1.0 or beta != 0.0:
                r = apply_alpha_beta(r, alpha, beta, None if c3 is None else c3[idx])
            out3[idx] = r
        return True
    if a3.ndim == 2:
        # One matrix (most calls): indexing CuPy arrays by () would only make views, at
        # several microseconds each on the host, before the first launch.
        return pipeline.product_into(a3, b3, plan, out3, alpha=alpha, beta=beta, C0=c3,
                                     check_finite=True, bound=bound3) is not None
    for idx in np.ndindex(*a3.shape[:-2]):
        done = pipeline.product_into(a3[idx], b3[idx], plan, out3[idx], alpha=alpha,
                                     beta=beta, C0=None if c3 is None else c3[idx],
                                     check_finite=True,
                                     bound=None if bound3 is None else bound3[idx])
        if done is None:
            return False
    return True


# --------------------------------------------------------------------------- the engine

def gemm_path(plan) -> str:
    """How this engine computes ``plan``'s modular products on the current GPU, and
    why: the cuBLAS path or the fused Hopper kernel, from the tuning table measured by
    ``python -m ozaki_backend tune`` (``docs/gpu-kernels.md``)."""
    if plan.scheme == "phase22":
        # The seed scheme needs the residues themselves, which the fused kernel
        # writes directly; the cuBLAS backend adds a reduction pass per product.
        backend, width = tuning.modprod_choice(plan.m, plan.n, plan.k_chunk, 28)
        return (f"fused (128 x {width} tiles)" if backend == "wgmma" else
                "cuBLAS INT8 GEMMs, then a reduction pass per product")
    path, width, reason = tuning.choice(plan.m, plan.n, plan.k, plan.moduli_range[1])
    label = f"fused (128 x {width} tiles)" if path == "wgmma" else "cuBLAS INT8 GEMMs"
    return f"{label}; {reason}"


class CudaEngine(Engine):
    """The GPU engine (``engine="cuda"``): bitwise equal to the CPU reference."""

    name = "cuda"
    array_types = ("numpy", "cupy")

    def availability(self):
        return availability()

    def product(self, a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None,
                bound3=None) -> int:
        if out3.dtype.kind == "c":
            return self._complex_product(a3, b3, plan, out3, alpha, beta, c3, bound3)
        if isinstance(a3, np.ndarray):
            flags = {}
            res = matmul_numpy(a3, b3, plan, check_finite=True, out=out3, bound=bound3,
                               flags=flags)
            if res is None:
                return DECLINED
            if alpha != 1.0 or beta != 0.0:
                out3[...] = apply_alpha_beta(out3, alpha, beta, c3)
            return OVERFLOW if flags.get("overflow") else DONE
        with translating("CUDA engine (CuPy operands)"):
            done = matmul_device(a3, b3, plan, out3, alpha=alpha, beta=beta, c3=c3,
                                 bound3=bound3)
        return DONE if done else DECLINED

    def _complex_product(self, a3, b3, plan, out3, alpha, beta, c3, bound3):
        """Complex stacks (``docs/spec.md`` §11, :mod:`.complex`); NumPy operands go
        through the device and back (Inf/NaN is found on the device, in the embedding's
        pass: no host pass over the operands)."""
        host = isinstance(a3, np.ndarray)
        with translating("CUDA engine (complex)"):
            if not host:
                ok = complex_.product_stacks(a3, b3, plan, out3, alpha=alpha, beta=beta,
                                             c3=c3, bound3=bound3)
                return DONE if ok else DECLINED
            stream = staging.thread_stream()
            with stream:
                # Pinned, chunked transfers on the staging threads (as the real host path);
                # the stacks stay whole (one upload per operand).
                (d_a, fa), (d_b, fb) = (staging.upload_start(x, stream) for x in (a3, b3))
                d_c = None if c3 is None else cupy.asarray(c3)
                d_out = cupy.empty(out3.shape, dtype=np.complex128)
                d_bound = None if bound3 is None else cupy.empty(bound3.shape)
                staging.wait(fa + fb)
                if not complex_.product_stacks(d_a, d_b, plan, d_out, alpha=alpha, beta=beta,
                                               c3=d_c, bound3=d_bound):
                    return DECLINED
                overflow = cupy.isinf(d_out.view(np.float64)).any()   # on the device
                for host_arr, dev in ((out3, d_out), (bound3, d_bound)):
                    if host_arr is None:
                        continue
                    if host_arr.flags.c_contiguous:
                        staging.download(dev, host_arr, stream)
                    else:
                        host_arr[...] = cupy.asnumpy(dev, stream=stream)
                overflow = bool(overflow.get())
        return OVERFLOW if overflow else DONE

    def load_kernels(self):
        """Load the kernels that large products use and small ones do not (cuBLAS's
        INT8 GEMMs of the per-modulus calls, its DGEMMs of the native path): what
        ``warm_up`` adds to its small products (CUDA loads a kernel at its first
        launch)."""
        from . import modgemm

        modgemm.load_kernels()
        for m, k, n in ((4096, 4096, 4096), (8192, 2048, 8192)):
            cupy.matmul(cupy.zeros((m, k)), cupy.zeros((k, n)))
        cupy.cuda.get_current_stream().synchronize()

    def native_shortcut(self, plan, a, b, out=None):
        # Plain 2-D float64 CuPy operands only (the symmetric product mirrors a
        # triangle and stacks loop over their matrices, both in the full path), and an
        # `out` the full path would write in place (C-ordered float64, its shape).
        if (type(a) is not cupy.ndarray or type(b) is not cupy.ndarray or a.ndim != 2
                or b.ndim != 2 or a.dtype != np.float64 or b.dtype != np.float64
                or transpose_pair(a, b)):
            return None
        if out is not None and (type(out) is not cupy.ndarray or out.dtype != np.float64
                                or out.shape != (a.shape[0], b.shape[1])
                                or not out.flags.c_contiguous):
            return None
        return pipeline.native_shortcut(plan, a.shape[0], b.shape[1], a.shape[1])

    def moduli_for(self, A, B, plan):
        with translating("CUDA engine"):
            if np.iscomplexobj(A) or np.iscomplexobj(B):
                return complex_.moduli_for(A, B, plan)
            return pipeline.moduli_for(A, B, plan)

    def describe(self, plan) -> str:
        return "GEMM path: " + gemm_path(plan)


ENGINE = CudaEngine()

__all__ = ["CudaEngine", "ENGINE", "matmul_numpy", "matmul_device", "gemm_path",
           "CudaEngineError"]
