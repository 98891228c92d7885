"""Stage 3 on the GPU — the modular products as cuBLAS INT8 GEMMs (``docs/spec.md`` §5).

Mirrors :mod:`ozaki_backend.reference.modgemm`. The residue planes are int8, row-major
``rows x kpad`` with k contiguous (A's rows, B's columns), so that

    C[i, j] = sum_k RA[i, k] RB[j, k]

is one "TN" GEMM in cuBLAS's column-major terms: ``C^T (cols x rows) = RB_cm^T RA_cm``
with ``transa = T``, ``transb = N``, every leading dimension a multiple of 16 bytes
(``cublasGemmEx``, ``CUDA_R_8I`` inputs, ``CUDA_R_32I`` output, ``CUBLAS_COMPUTE_32I``).

Reductions longer than the exact int32 range are cut at ``KSPLIT = 65536`` (then every
chunk sum is at most ``65536 * 2^14 = 2^30``): after a chunk the products are folded
into ``[0, p)`` by a small kernel and the next chunk's GEMM accumulates onto them
(``beta = 1``), which never exceeds ``2^30 + 255``.

Two ways to issue the N GEMMs: one ``cublasGemmStridedBatchedEx`` over the moduli, or
one ``cublasGemmEx`` per modulus with the output cut into 8192 x 8192 blocks. Which is
faster depends on the size (``python -m ozaki_backend bench`` measures them); the
default follows those measurements, ``OZAKI_BACKEND_CUDA_GEMM=batched|loop`` forces one.
Every variant gives the same bits (exact integer products).
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache

import cupy
import numpy as np
from cupy.cuda import cublas

from ..spec.moduli import KSPLIT
from . import loader
from ._common import KPAD, LDC_PAD, blocks, round_up

#: The INT8 GEMMs' sizes are rounded up to a multiple of this where the planes have room
#: (:func:`products_into`; ``workspace._product_layout`` pads the planes so): cuBLAS's
#: INT8 kernels tile outputs by 128, and at 10000^3 sizes rounded to 32 (10016, its
#: 8192-column blocks leaving 1824) ran 27.6 ms of GEMMs against 21.8 at 10240^3.
GEMM_PAD = 128

_R_8I = 3      # cudaDataType CUDA_R_8I
_R_32I = 10    # cudaDataType CUDA_R_32I
_COMPUTE_32I = getattr(cublas, "CUBLAS_COMPUTE_32I", 72)
_ALGO = getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1)

_ONE = np.array([1], dtype=np.int32)
_ZERO = np.array([0], dtype=np.int32)

#: Output-column block of the per-modulus strategy (cuBLAS INT8 runs fastest at about
#: this width on the H200). ``OZAKI_BACKEND_CUDA_COLBLOCK`` overrides it (0: no blocking).
#: Measured on the H200 (bench, 16384^3, accurate, 19 moduli, 2026-11-29): one call per
#: modulus unblocked 182.5 ms, columns in 8192 blocks 163.4 ms, rows and columns in
#: 8192 blocks 158.3 ms, strided-batched 186.0 ms (all bitwise equal).
COL_BLOCK = 8192


#: Row block of the per-modulus strategy (0: none); ``OZAKI_BACKEND_CUDA_ROWBLOCK``.
ROW_BLOCK = 8192


def col_block() -> int:
    v = os.environ.get("OZAKI_BACKEND_CUDA_COLBLOCK", "")
    return int(v) if v else COL_BLOCK


def row_block() -> int:
    v = os.environ.get("OZAKI_BACKEND_CUDA_ROWBLOCK", "")
    return int(v) if v else ROW_BLOCK


def gemm_strategy(rows: int, cols: int) -> str:
    """``"batched"`` or ``"loop"`` for a tile of ``rows x cols`` outputs."""
    forced = os.environ.get("OZAKI_BACKEND_CUDA_GEMM", "")
    if forced in ("batched", "loop"):
        return forced
    # Small tiles: one batched launch beats N launches; large ones: per-modulus calls
    # run closer to the INT8 peak. Measured (fp64 accurate plan, whole product):
    # 2048^3 batched 1.58 / loop 2.02 ms; 4096^3 5.08 / 4.66; 8192^3 27.2 / 23.5.
    return "batched" if rows * cols <= 2048 * 2048 else "loop"


def libcublas():
    """The libcublas CuPy loaded, through ctypes (for what CuPy does not wrap or does
    not allow), or None (not loaded yet: asked again next time). Found by its path in
    this process's maps so that handles are shared with CuPy's copy."""
    global _LIBCUBLAS
    if _LIBCUBLAS is None:
        _LIBCUBLAS = _find_libcublas()
    return _LIBCUBLAS


_LIBCUBLAS = None


def _find_libcublas():
    try:
        with open("/proc/self/maps") as f:
            path = next((name for name in (line.rsplit(None, 1)[-1] for line in f)
                         if "/libcublas.so" in name), None)
    except OSError:
        return None
    if path is None:
        return None
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


@lru_cache(maxsize=None)
def _raw_gemm():
    """``(cublasGemmEx, cublasSetStream_v2, cublasGetStream_v2)`` through ctypes."""
    lib = libcublas()
    if lib is None:
        raise NotImplementedError("libcublas is not loaded: no GEMM in a graph capture")
    vp, i = ctypes.c_void_p, ctypes.c_int
    gemm = lib.cublasGemmEx
    gemm.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
    set_stream, get_stream = lib.cublasSetStream_v2, lib.cublasGetStream_v2
    set_stream.argtypes = [vp, vp]
    get_stream.argtypes = [vp, ctypes.POINTER(vp)]
    gemm.restype = set_stream.restype = get_stream.restype = ctypes.c_int
    return gemm, set_stream, get_stream


def _gemm_in_capture(h, stream, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                     ldc):
    """One INT8 ``cublasGemmEx`` on ``stream`` while it is captured into a CUDA graph
    (:mod:`.graphs`): cuBLAS records it, but CuPy's wrapper refuses any call during a
    capture. The handle's stream is restored afterwards, since CuPy may not set it
    again before its next call."""
    gemm, set_stream, get_stream = _raw_gemm()
    old = ctypes.c_void_p()
    if get_stream(h, ctypes.byref(old)) != 0 or set_stream(h, stream.ptr) != 0:
        raise RuntimeError("cublasSetStream failed during a graph capture")
    try:
        status = gemm(h, transa, transb, m, n, k, alpha, B, _R_8I, ldb, A, _R_8I, lda,
                      beta, C, _R_32I, ldc, _COMPUTE_32I, _ALGO)
    finally:
        set_stream(h, old)
    if status != 0:
        raise RuntimeError(f"cublasGemmEx failed during a graph capture (status {status})")


def handle():
    """This thread's cuBLAS handle, in host pointer mode (alpha/beta live on the host)."""
    h = cupy.cuda.device.get_cublas_handle()
    if cublas.getPointerMode(h) != cublas.CUBLAS_POINTER_MODE_HOST:
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
    return h


def gemm_tn(RA_ptr, RB_ptr, C_ptr, rows, cols, kc, lda, ldb, ldc, *, accumulate=False,
            batch=1, stride_a=0, stride_b=0, stride_c=0, h=None):
    """``C[i, j] (+)= sum_k RA[i, k] RB[j, k]``: int8 row-major operands, int32 output.

    Pointers are raw device addresses (ints); strides are in elements of each type.
    Runs on the current CuPy stream (cuBLAS calls set it on the handle).
    """
    if h is None:
        h = handle()
    beta = (_ONE if accumulate else _ZERO).ctypes.data
    alpha = _ONE.ctypes.data
    if batch == 1:
        stream = cupy.cuda.get_current_stream()
        if stream.is_capturing():
            _gemm_in_capture(h, stream, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, cols, rows,
                             kc, alpha, RA_ptr, lda, RB_ptr, ldb, beta, C_ptr, ldc)
            return
        cublas.gemmEx(h, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, cols, rows, kc,
                      alpha, RB_ptr, _R_8I, ldb, RA_ptr, _R_8I, lda,
                      beta, C_ptr, _R_32I, ldc, _COMPUTE_32I, _ALGO)
    else:
        cublas.gemmStridedBatchedEx(
            h, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, cols, rows, kc,
            alpha, RB_ptr, _R_8I, ldb, stride_b, RA_ptr, _R_8I, lda, stride_a,
            beta, C_ptr, _R_32I, ldc, stride_c, batch, _COMPUTE_32I, _ALGO)


#: GEMM sizes (rows, cols, k) whose cuBLAS kernels :func:`load_kernels` launches once:
#: the per-modulus calls of large products (the "loop" strategy: up to ROW_BLOCK x
#: COL_BLOCK outputs, k up to KSPLIT). A kernel's first launch in a process loads it
#: (CUDA's lazy loading) and cuBLAS picks kernels by size, so small products warm
#: none of these: the first 8192^3 product after ``warm_up()`` spent ~9 ms in its
#: first cublasGemmEx call (H100), the GPU idle meanwhile.
LOAD_SHAPES = ((8192, 8192, 8192), (8192, 8192, 2048), (4096, 4096, 4096),
               (4096, 4096, 65536), (2048, 8192, 8192))


def load_kernels(shapes=LOAD_SHAPES):
    """Launch one INT8 GEMM of each size (on zeros), so that the kernels cuBLAS picks
    for them are loaded before a product needs them; synchronises."""
    A = cupy.zeros(max(r * k for r, _, k in shapes), dtype=np.int8)
    B = cupy.zeros(max(c * k for _, c, k in shapes), dtype=np.int8)
    C = cupy.empty(max(r * c for r, c, _ in shapes), dtype=np.int32)
    h = handle()
    for r, c, k in shapes:
        gemm_tn(A.data.ptr, B.data.ptr, C.data.ptr, r, c, k, k, k, c, h=h)
    cupy.cuda.get_current_stream().synchronize()


def products_into(RA, RB, C, n_moduli, rows, cols, kpad, *, strategy=None,
                  accumulate=False):
    """All N modular products of one tile into ``C`` (int32 planes, values congruent to
    the products mod p_l, ``|value| <= 2^30 + 255``).

    Parameters
    ----------
    RA : cupy int8 (N, TM, kpad)
        Residue planes of A's rows (the first ``rows`` rows are used); rows contiguous
        (``kpad`` apart), the planes may be any distance apart (a row block of larger
        planes: the symmetric product reads both sides from one set of planes).
    RB : cupy int8 (N, TN, kpad)
        Residue planes of B's columns (the first ``cols`` used), laid out like ``RA``.
    C : cupy int32 (N, TM, ldc)
        Output planes; ``ldc >= cols``; rows contiguous, planes any distance apart.
    accumulate : bool
        Add to the products already in ``C`` (an earlier chunk of k): they are folded
        into ``[0, p_l)`` first, as between the chunks of one call.
    """
    N = n_moduli
    lda = ldb = kpad
    if RA.strides[1:] != (kpad, 1) or RB.strides[1:] != (kpad, 1) or C.strides[2] != 4:
        raise ValueError("residue planes need contiguous rows of kpad bytes")
    ldc = C.strides[1] // 4
    # cuBLAS's INT8 kernels slow down for sizes off their tile (8191^3 took twice
    # 8192^3's time): where the planes have room (the pipeline's layouts pad them), the
    # GEMMs run on sizes rounded up to GEMM_PAD. The padded rows and columns hold
    # whatever the buffers held; they only reach padded outputs, which nothing reads.
    grows = min(round_up(rows, GEMM_PAD), RA.shape[1], C.shape[1])
    gcols = min(round_up(cols, GEMM_PAD), RB.shape[1], ldc)
    sa, sb, sc = RA.strides[0], RB.strides[0], C.strides[0] // 4
    strategy = strategy or gemm_strategy(rows, cols)
    fold = loader.get_function("modgemm.cu", "oz_fold_products")
    h = handle()
    for c, k0 in enumerate(range(0, kpad, KSPLIT)):
        kc = min(KSPLIT, kpad - k0)
        acc = c > 0 or accumulate
        if acc:
            fold((blocks(rows * cols), N), (256,),
                 (C, np.int64(sc), np.int32(rows), np.int32(cols), np.int64(ldc)))
        a0, b0 = RA.data.ptr + k0, RB.data.ptr + k0
        if strategy == "batched":
            gemm_tn(a0, b0, C.data.ptr, grows, gcols, kc, lda, ldb, ldc, accumulate=acc,
                    batch=N, stride_a=sa, stride_b=sb, stride_c=sc, h=h)
            continue
        cb = col_block() or gcols
        rb = row_block() or grows
        for l in range(N):
            for i0 in range(0, grows, rb):
                ic = min(rb, grows - i0)
                for j0 in range(0, gcols, cb):
                    jc = min(cb, gcols - j0)
                    gemm_tn(a0 + l * sa + i0 * kpad, b0 + l * sb + j0 * kpad,
                            C.data.ptr + 4 * (l * sc + i0 * ldc + j0),
                            ic, jc, kc, lda, ldb, ldc, accumulate=acc, h=h)


def reduce_products(C, n_moduli, rows, cols):
    """``c_l = C_l mod p_l`` in ``[0, p_l)`` as int16 ``(N, rows, cols)`` (stage output)."""
    out = cupy.empty((n_moduli, rows, cols), dtype=np.int16)
    if rows and cols:
        fn = loader.get_function("modgemm.cu", "oz_reduce_products")
        fn((blocks(rows * cols), n_moduli), (256,),
           (C, np.int64(C.shape[1] * C.shape[2]), np.int32(rows), np.int32(cols),
            np.int64(C.shape[2]), out))
    return out


def planes_from_reference_layout(R, transpose=False):
    """int8 ``(N, rows, k)`` (or ``(N, k, rows)`` with ``transpose``) -> padded
    ``(N, rows, kpad)`` planes, as the residue kernel writes them."""
    R = cupy.asarray(R, dtype=np.int8)
    if transpose:
        R = R.transpose(0, 2, 1)
    N, rows, k = R.shape
    out = cupy.zeros((N, rows, round_up(max(k, 1), KPAD)), dtype=np.int8)
    out[:, :, :k] = R
    return out


def modular_products(RA, RB, moduli):
    """Residues of the products, ``(N, m, n)`` int16 in ``[0, p_l)`` (mirrors the reference).

    Parameters
    ----------
    RA : int8 array (N, m, k)
    RB : int8 array (N, k, n)
    moduli : sequence of int
        The first N entries of the moduli table.
    """
    N = len(moduli)
    PA = planes_from_reference_layout(RA)
    PB = planes_from_reference_layout(RB, transpose=True)
    m, n, kpad = PA.shape[1], PB.shape[1], PA.shape[2]
    C = cupy.empty((N, m, round_up(max(n, 1), LDC_PAD)), dtype=np.int32)
    if m and n:
        products_into(PA, PB, C, N, m, n, kpad)
    return reduce_products(C, N, m, n)
