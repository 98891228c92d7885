"""Stage 3 as residues of products: INT8 GEMMs reduced mod p (``docs/spec.md`` §5).

:func:`mod_products` is the one entry point both schemes use. Each *item* is one
product of a residue plane of A with a residue plane of B, reduced modulo its own
modulus into one byte per element:

    out[q, i, j] = (sum_{k0 <= t < k0 + kc} RA[a_q, i, t] RB[b_q, j, t]) mod p_q  in [0, p_q)

Two backends give the same bytes (the integers are exact, the remainder unique):

``"wgmma"``
    ``kernels/modprod.cu``, Hopper only (sm_90a): bulk tensor copies into a
    shared-memory ring, ``wgmma`` INT8 products in registers, the remainder taken on
    the accumulators (multiply-high, :mod:`ozaki_backend.spec.remainders`), one byte written
    per element. The int32 products never reach device memory.
``"cublas"``
    one ``cublasGemmEx`` per item into an int32 buffer, then a reduction pass
    (any GPU CuPy supports).

Which one runs is decided per shape by :mod:`ozaki_backend.cuda.tuning` (a table
measured by ``python -m ozaki_backend tune``); ``OZAKI_BACKEND_CUDA_MODPROD`` forces one.
Whether the wgmma backend can run at all is :mod:`ozaki_backend.cuda.capability`'s
answer.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from functools import lru_cache

import cupy
import numpy as np

from ..spec import remainders
from . import loader, modgemm
from ._common import blocks, round_up
from .capability import wgmma_unavailable_reason
from .errors import CudaEngineError

BACKENDS = ("wgmma", "cublas")
TILE_M = 128
#: Per tile width: ring depth and resident CTAs per SM (shared memory per CTA: depth x
#: (16 KiB + width x 128 B); two CTAs of width 128 let one's epilogue hide under the
#: other's products).
CONFIGS = {128: (3, 2), 256: (4, 1)}
#: Bytes of k per stage (128: 128-byte swizzle; 64: 64-byte swizzle, twice the ring
#: depth). ``OZAKI_BACKEND_CUDA_BK`` overrides.
BK = 128
NEED_TILE = (128, 64)

_ITEM = np.dtype([("a", "<i4"), ("b", "<i4"), ("p", "<u4"), ("magic", "<u4"),
                  ("shift", "<i4"), ("bias", "<u4"), ("level", "<i4"), ("pad", "<i4")])
_TMAP = np.dtype([("opaque", "<u8", (16,))], align=True)
_lock = threading.Lock()


# ------------------------------------------------------------------ tensor maps

@lru_cache(maxsize=None)
def _libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuTensorMapEncodeTiled
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                  ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return lib


_U8 = 0            # CU_TENSOR_MAP_DATA_TYPE_UINT8 (the bytes are int8 residues)
_SWIZZLE = {128: 3, 64: 2}  # CU_TENSOR_MAP_SWIZZLE_128B / _64B
_L2_256B = 3       # CU_TENSOR_MAP_L2_PROMOTION_L2_256B


def tensor_map(planes, box_rows, bk=128):
    """A 3-D tiled tensor map over int8 planes ``(P, rows, kpad)`` (k contiguous).

    Boxes are ``bk (k) x box_rows x 1`` with the ``bk``-byte swizzle the wgmma
    descriptors expect; reads past any edge fill zeros.
    """
    P, rows, kpad = planes.shape
    if planes.dtype != np.int8 or not planes.flags.c_contiguous:
        raise ValueError("tensor maps need C-contiguous int8 planes")
    if kpad % 16 or planes.data.ptr % 16:
        raise ValueError("planes need 16-byte aligned rows")
    tm = np.zeros((), dtype=_TMAP)
    dims = (ctypes.c_uint64 * 3)(kpad, rows, P)
    strides = (ctypes.c_uint64 * 2)(kpad, rows * kpad)
    box = (ctypes.c_uint32 * 3)(bk, box_rows, 1)
    estr = (ctypes.c_uint32 * 3)(1, 1, 1)
    rc = _libcuda().cuTensorMapEncodeTiled(
        tm.ctypes.data, _U8, 3, ctypes.c_void_p(planes.data.ptr), dims, strides, box, estr,
        0, _SWIZZLE[bk], _L2_256B, 0)
    if rc != 0:
        raise CudaEngineError(f"cuTensorMapEncodeTiled failed with CUresult {rc} "
                              f"(planes {planes.shape}, box rows {box_rows})")
    return tm[()]


# ------------------------------------------------------------------ items

def item_table(items):
    """The kernel's item records: planes, modulus, its magic pair and bias, level."""
    rec = np.zeros(len(items), dtype=_ITEM)
    for q, (a, b, p, level) in enumerate(items):
        m, s = remainders.magic(int(p))
        rec[q] = (a, b, p, m, s, remainders.bias(int(p)), level, 0)
    return rec


def _check(RA, RB, items, out, rows, cols, k0, kc):
    for name, R in (("RA", RA), ("RB", RB)):
        if R.dtype != np.int8 or R.ndim != 3 or not R.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous int8 planes (P, rows, kpad)")
    if RA.shape[2] != RB.shape[2]:
        raise ValueError("RA and RB planes must share kpad")
    kpad = RA.shape[2]
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[0] < len(items):
        raise ValueError("out must be uint8 (Q, rows, ldo) with Q >= len(items)")
    if out.shape[1] < rows or out.shape[2] < cols or out.strides[2] != 1:
        raise ValueError("out is too small for rows x cols")
    if rows > RA.shape[1] or cols > RB.shape[1]:
        raise ValueError("rows/cols exceed the planes")
    if not (0 <= k0 and k0 + kc <= kpad):
        raise ValueError(f"k range [{k0}, {k0 + kc}) outside [0, {kpad})")
    if k0 % 128 or (kc % 128 and k0 + kc != kpad):
        raise ValueError("k0 must be a multiple of 128, and kc too unless the range "
                         "reaches the end of the planes (which are zero-padded)")
    for a, b, p, _level in items:
        if not (0 <= a < RA.shape[0] and 0 <= b < RB.shape[0] and 2 <= p <= 256):
            raise ValueError(f"bad item {(a, b, p)}")


# ------------------------------------------------------------------ backends

def _wgmma(RA, RB, items, out, rows, cols, k0, kc, need, bn, cluster):
    stages, per_sm = CONFIGS[bn]
    bk = int(os.environ.get("OZAKI_BACKEND_CUDA_BK", "0") or 0) or BK
    if bk not in _SWIZZLE:
        raise ValueError(f"OZAKI_BACKEND_CUDA_BK must be 64 or 128, got {bk}")
    stages = stages * 128 // bk
    fn = loader.get_function("modprod.cu", "oz_modprod", arch="sm_90a",
                             defines=(f"OZ_BN={bn}", f"OZ_STAGES={stages}", f"OZ_BK={bk}",
                                      f"OZ_CLUSTER={cluster}", f"OZ_MIN_BLOCKS={per_sm}"))
    smem = stages * (TILE_M * bk + bn * bk) + 2 * 8 * stages + 1024
    key = (id(fn), smem)
    if key not in _smem_set:
        with _lock:
            cupy.cuda.driver.funcSetAttribute(fn.ptr, 8, smem)  # MAX_DYNAMIC_SHARED_SIZE
            _smem_set.add(key)
    tmA = tensor_map(RA, TILE_M, bk)
    tmB = tensor_map(RB, bn // cluster, bk)
    rec = cupy.asarray(item_table(items).view(np.int32))
    gx, gy = -(-cols // bn), -(-rows // TILE_M)
    # Enough CTAs to fill the machine twice over, but several items per CTA so that
    # one item's epilogue overlaps the next item's loads.
    sms = _sm_count(cupy.cuda.runtime.getDevice()) * per_sm
    Q = len(items)
    gz = 1
    while gz < Q and gx * gy * gz < 2 * sms and -(-Q // (2 * gz)) >= 2:
        gz *= 2
    need_ld = 0 if need is None else need.shape[1]
    # Resident CTAs cover about `group` tile rows x (sms / group) tile columns: near
    # square in elements, so that A and B blocks are shared through L2.
    units = -(-gy // cluster)
    group = max(1, min(units, round(math.sqrt(sms * bn / (cluster * cluster * TILE_M)))))
    fn((gx * units * cluster, 1, gz), (288,),
       (tmA, tmB, rec, np.int32(Q), need, np.int32(need_ld), out,
        np.int64(out.shape[1] * out.shape[2]), np.int32(out.shape[2]), np.int32(rows),
        np.int32(cols), np.int32(k0), np.int32(-(-kc // bk)), np.int32(gy), np.int32(gx),
        np.int32(group)),
       shared_mem=smem)


_smem_set: set = set()


@lru_cache(maxsize=None)
def _sm_count(device_id: int) -> int:
    return cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device_id)


def _cublas(RA, RB, items, out, rows, cols, k0, kc, need):
    kpad = RA.shape[2]
    ldc = round_up(max(cols, 1), 16)
    C = cupy.empty((rows, ldc), dtype=np.int32)
    fold = loader.get_function("modgemm.cu", "oz_fold_mod")
    red = loader.get_function("modgemm.cu", "oz_reduce_u8")
    h = modgemm.handle()
    sa, sb = RA.shape[1] * kpad, RB.shape[1] * kpad
    grid = (blocks(rows * cols),)
    dims = (np.int64(ldc), np.int32(rows), np.int32(cols))
    for q, (a, b, p, _level) in enumerate(items):
        for c, kk in enumerate(range(k0, k0 + kc, remainders.FOLD_K)):
            kl = min(remainders.FOLD_K, k0 + kc - kk)
            if c:  # into [0, p) so that the next chunk cannot overflow int32
                fold(grid, (256,), (C,) + dims + (np.uint32(p),))
            modgemm.gemm_tn(RA.data.ptr + a * sa + kk, RB.data.ptr + b * sb + kk, C.data.ptr,
                            rows, cols, kl, kpad, kpad, ldc, accumulate=c > 0, h=h)
        o = out[q]
        red(grid, (256,), (C,) + dims + (np.uint32(p), o, np.int64(o.strides[0])))


def mod_products(RA, RB, items, out, rows, cols, k0=0, kc=None, *, need=None, backend=None,
                 bn=None, cluster=None):
    """``out[q] = (RA[a_q] RB[b_q]^T over k0..k0+kc) mod p_q`` in ``[0, p_q)``, uint8.

    Parameters
    ----------
    RA : cupy int8 (PA, TMA, kpad), C-contiguous
        Residue planes of A's rows, k contiguous, zero beyond the true k.
    RB : cupy int8 (PB, TNB, kpad), C-contiguous
        Residue planes of B's columns, k contiguous.
    items : sequence of (a, b, p, level)
        Plane of A, plane of B, modulus (2..256), and the item's level for ``need``.
    out : cupy uint8 (Q, rows, ldo)
        ``ldo >= cols``; even, so that byte pairs are aligned.
    rows, cols : int
        Used rows of the A planes and of the B planes.
    k0, kc : int
        The k range (default: all of kpad). ``k0`` is a multiple of 128 and so is
        ``kc`` unless the range reaches the end of the planes.
    need : cupy int8 (ceil(rows/128), ceil(cols/64)) or None
        Per 128 x 64 output tile, how many levels it needs: item q is written only
        where ``need > level_q`` (elsewhere ``out`` may be left unwritten).
    backend : {"wgmma", "cublas"} or None
        None picks by :func:`ozaki_backend.cuda.tuning.modprod_backend`.
    bn : {128, 256} or None
        Tile width of the wgmma kernel (None: by the tuning table).
    cluster : {1, 2} or None
        CTAs per cluster of the wgmma kernel: 2 pairs tile rows that share one B block,
        copied once and multicast into both (None: ``OZAKI_BACKEND_CUDA_CLUSTER`` or 1).
    """
    kpad = RA.shape[2]
    if kc is None:
        kc = kpad - k0
    _check(RA, RB, items, out, rows, cols, k0, kc)
    if out.shape[2] % 2 or out.strides[1] != out.shape[2]:
        raise ValueError("out must be C-contiguous with an even row length")
    if need is not None:
        need = cupy.ascontiguousarray(need, dtype=np.int8)
        if need.shape != (-(-rows // NEED_TILE[0]), -(-cols // NEED_TILE[1])):
            raise ValueError(f"need must have shape {(-(-rows // 128), -(-cols // 64))}")
    if rows == 0 or cols == 0 or not items:
        return out
    if kc == 0:
        out[:len(items), :rows, :cols] = 0
        return out
    if backend is None or bn is None:
        from .tuning import modprod_choice

        b2, bn2 = modprod_choice(rows, cols, kc, len(items))
        backend = backend or b2
        bn = bn or bn2
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "wgmma":
        reason = wgmma_unavailable_reason()
        if reason:
            raise CudaEngineError(f"the wgmma backend cannot run here: {reason}")
        if cluster is None:
            # Pairs with multicast B copies measured slower on the H200 (the partners
            # wait on each other's stage releases), so single CTAs are the default.
            cluster = int(os.environ.get("OZAKI_BACKEND_CUDA_CLUSTER", "0") or 0) or 1
        if cluster not in (1, 2):
            raise ValueError(f"cluster must be 1 or 2, got {cluster!r}")
        _wgmma(RA, RB, items, out, rows, cols, k0, kc, need, bn, cluster)
    else:
        _cublas(RA, RB, items, out, rows, cols, k0, kc, need)
    return out
