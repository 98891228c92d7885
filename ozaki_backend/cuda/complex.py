"""complex128 products on the GPU: Gaussian-integer residues, two real INT8 modular
products per modulus (``docs/spec.md`` §11). Mirrors
:mod:`ozaki_backend.reference.complex` stage by stage, bit for bit:

1. the parts ``Ar, Ai, Br, Bi`` (operands with every imaginary part zero take the real
   pipeline, as in the reference);
2. equilibration, the embedding's statistics, the tied shifts and the certificate's
   count (:mod:`.complex_stats` on CuPy arrays; the bound GEMMs ``P_re``, ``P_im`` on
   cuBLAS INT8);
3. ``kernels/complex.cu``: truncation, residues modulo the complex moduli and the
   Gaussian map, both maps' planes of A's rows and B's columns;
4. the real engine's INT8 GEMMs (:func:`.modgemm.products_into`), twice per modulus;
5. ``kernels/complex.cu``: recombination into the residues of ``Re`` and ``Im``;
6. the real engine's CRT kernel (``kernels/crt.cu``, ``oz_crt_u8``) compiled with the
   complex table's constants, once for ``Re`` and once for ``Im``, written straight
   into the real and imaginary parts of the complex result.

Everything runs on the current CuPy stream. The whole product is one tile (no output
tiling yet): the workspace is ``2 N k (m + n)`` bytes of residues, ``8 N m n`` of int32
products and ``2 N m n`` of recombined residues.
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import _stats
from .._warnings import warn_native
from ..semantics import apply_alpha_beta
from ..spec import certificate as spec
from ..spec.complex_moduli import MAX_COMPLEX_MODULI, complex_crt_constants, \
    complex_moduli_for_bits
from ..spec.moduli import KSPLIT
from . import complex_stats, crt, loader, modgemm, pipeline
from ._common import KPAD, LDC_PAD, blocks, round_up
from ._prelude import complex_crt_prelude

CERTIFIED, UNCERTIFIED = pipeline.CERTIFIED, pipeline.UNCERTIFIED
RESIDUAL, NATIVE = pipeline.RESIDUAL, pipeline.NATIVE

_tables = {}


def _device_tables(n_moduli):
    """int32 device arrays ``(moduli, roots, inv2, inv2r)`` of the first ``n_moduli``."""
    key = (cupy.cuda.Device().id, n_moduli)
    t = _tables.get(key)
    if t is None:
        cc = complex_crt_constants(n_moduli)
        t = tuple(cupy.asarray(np.array(v, dtype=np.int32))
                  for v in (cc.moduli, cc.roots, cc.inv2, cc.inv2r))
        _tables[key] = t
    return t


def bound_gemm(X, Y):
    """``X @ Y.T`` as float64 for non-negative integer matrices with entries <= 127
    (float64 ``(m, K)``, ``(n, K)``): cuBLAS INT8 -> INT32 (exact while
    ``K 127^2 < 2^31``), exact float64 beyond that."""
    m, K = X.shape
    n = Y.shape[0]
    if K * 127 * 127 >= 2 ** 31:
        return X @ Y.T                       # exact: integers below 2^53
    kpad = round_up(max(K, 1), KPAD)
    Xa = cupy.zeros((m, kpad), dtype=np.int8)
    Ya = cupy.zeros((n, kpad), dtype=np.int8)
    Xa[:, :K] = X.astype(np.int8)
    Ya[:, :K] = Y.astype(np.int8)
    ldc = round_up(max(n, 1), LDC_PAD)
    P = cupy.empty((m, ldc), dtype=np.int32)
    if m and n:
        modgemm.gemm_tn(Xa.data.ptr, Ya.data.ptr, P.data.ptr, m, n, kpad, kpad, kpad, ldc)
    return P[:, :n].astype(np.float64)


def residue_planes(Xr, Xi, shift, n_moduli):
    """``(U, V)``: int8 planes ``(N, rows, kpad)`` of both Gaussian maps of
    ``trunc(X 2^shift_row)`` (``Xr``, ``Xi``: the parts read row-wise, C-contiguous)."""
    rows, cols = Xr.shape
    kpad = round_up(max(cols, 1), KPAD)
    U = cupy.empty((n_moduli, rows, kpad), dtype=np.int8)
    V = cupy.empty_like(U)
    mods, roots, _, _ = _device_tables(n_moduli)
    if rows:
        loader.get_function("complex.cu", "oz_cx_residues")(
            (blocks(rows * kpad),), (256,),
            (Xr, Xi, np.int64(cols), np.int32(rows), np.int32(cols), np.int32(kpad),
             shift.astype(np.int32), np.int32(n_moduli), mods, roots, U, V,
             np.int64(rows * kpad)))
    return U, V


def recombine(C1, C2, n_moduli, rows, cols):
    """uint8 planes ``(RE, IM)`` (the layout of ``C1``) of ``Re``, ``Im`` mod ``m_l``."""
    RE = cupy.empty(C1.shape, dtype=np.uint8)
    IM = cupy.empty(C1.shape, dtype=np.uint8)
    mods, _, inv2, inv2r = _device_tables(n_moduli)
    if rows and cols:
        loader.get_function("complex.cu", "oz_cx_recombine")(
            (blocks(rows * cols),), (256,),
            (C1, C2, np.int64(C1.shape[1] * C1.shape[2]), np.int32(rows), np.int32(cols),
             np.int64(C1.shape[2]), np.int32(n_moduli), mods, inv2, inv2r, RE, IM))
    return RE, IM


def products(RA, RB, n_moduli, rows, cols, kpad):
    """int32 planes ``(N, rows, ldc)`` congruent modulo the complex moduli to the
    products of the residue planes: the real engine's INT8 GEMMs, one call per k chunk
    of at most ``KSPLIT`` (its own fold between chunks reduces modulo the real table,
    so longer reductions are cut here and the chunks reduced modulo the complex moduli
    in between; every chunk product is exact in int32)."""
    ldc = round_up(cols, LDC_PAD)
    C = cupy.empty((n_moduli, rows, ldc), dtype=np.int32)
    if kpad <= KSPLIT:
        modgemm.products_into(RA, RB, C, n_moduli, rows, cols, kpad)
        return C
    p = _device_tables(n_moduli)[0].reshape(n_moduli, 1, 1)
    C.fill(0)
    part = cupy.empty_like(C)
    for k0 in range(0, kpad, KSPLIT):
        kc = min(KSPLIT, kpad - k0)
        modgemm.products_into(cupy.ascontiguousarray(RA[:, :, k0:k0 + kc]),
                              cupy.ascontiguousarray(RB[:, :, k0:k0 + kc]), part,
                              n_moduli, rows, cols, kc)
        C += part % p             # floor remainder: [0, p); C stays below 2 * 255
        C %= p
    return C


def integer_product_into(Ar, Ai, Br, Bi, s, t, n_moduli, out):
    """``out = RN(Re A'B' 2^(-s-t)) + i RN(Im A'B' 2^(-s-t))`` (complex128 ``(m, n)``)
    for the Gaussian integers of the equilibrated parts with exponents ``s`` (m,) and
    ``t`` (n,)."""
    m, k = Ar.shape
    n = Br.shape[1]
    N = n_moduli
    kpad = round_up(max(k, 1), KPAD)
    UA, VA = residue_planes(cupy.ascontiguousarray(Ar), cupy.ascontiguousarray(Ai), s, N)
    UB, VB = residue_planes(cupy.ascontiguousarray(Br.T), cupy.ascontiguousarray(Bi.T),
                            t, N)
    C1 = products(UA, UB, N, m, n, kpad)
    C2 = products(VA, VB, N, m, n, kpad)
    del UA, VA, UB, VB
    RE, IM = recombine(C1, C2, N, m, n)
    del C1, C2
    s32, t32 = s.astype(np.int32), t.astype(np.int32)
    pre = complex_crt_prelude(N)
    crt.crt_into(RE, N, m, n, s32, t32, out.real, table_prelude=pre)
    crt.crt_into(IM, N, m, n, s32, t32, out.imag, table_prelude=pre)


def _real_if_exact(X):
    if X.dtype.kind == "c" and not bool(X.imag.any()):
        return cupy.ascontiguousarray(X.real)
    return X


def _compose(re, im):
    out = cupy.empty(re.shape, dtype=np.complex128)
    out.real[...] = re
    out.imag[...] = im
    return out


def _part_bound(b):
    n = b.shape[1] // 2
    return spec.up(b[:, :n] + b[:, n:])


def _real_product(A, B, plan, want_bound):
    """A real product through the real engine: ``(C, bound)``."""
    C = cupy.empty((A.shape[0], B.shape[1]), dtype=np.float64)
    bound = cupy.empty_like(C) if want_bound else None
    pipeline.product_into(A, B, plan, C, bound=bound)
    return C, bound


def _mixed(A, B, plan, want_bound):
    n = B.shape[1]
    m = A.shape[0]
    if B.dtype.kind == "c":
        C2, b = _real_product(A.astype(np.float64, copy=False),
                              cupy.concatenate([B.real, B.imag], axis=1), plan, want_bound)
        return _compose(C2[:, :n], C2[:, n:]), None if b is None else _part_bound(b)
    C2, b = _real_product(cupy.concatenate([A.real, A.imag], axis=0),
                          B.astype(np.float64, copy=False), plan, want_bound)
    return (_compose(C2[:m], C2[m:]),
            None if b is None else spec.up(b[:m] + b[m:]))


def fixed_count(plan, k):
    opts = plan.options
    if opts.get("moduli") is not None:
        return int(opts["moduli"])
    return complex_moduli_for_bits(int(opts["bits"]), max(k, 1))


def _residual_term(Xr, Xi, Yr, Yi, mode):
    """``(run, T)`` of a remainder product with the most moduli (mirrors the
    reference's ``_residual_term``): ``run()`` gives ``[Re, Im]`` (m, 2n)."""
    parts = complex_stats.equilibrate(cupy, Xr, Xi, Yr, Yi)
    st = complex_stats.statistics(cupy, *parts, mode, bound_gemm)
    s, t = complex_stats.shifts(cupy, st, MAX_COMPLEX_MODULI, mode)
    n = Yr.shape[1]

    def run():
        C = cupy.empty((Xr.shape[0], n), dtype=np.complex128)
        integer_product_into(*parts, s, t[:n], MAX_COMPLEX_MODULI, C)
        return cupy.concatenate([C.real, C.imag], axis=1)

    return run, spec.truncation_bound(complex_stats.cert_data(st), s, t)


def _truncated(X, shift, axis):
    """``trunc(X 2^shift) 2^-shift`` along rows (axis 0: shift per row) or columns."""
    sh = (shift[:, None] if axis == 0 else shift[None, :]).astype(np.int32)
    return cupy.ldexp(cupy.trunc(cupy.ldexp(X, sh)), -sh)


def residual_pass(parts, st, mode, n_moduli, C1):
    """The exact residual pass of a complex product (``docs/spec.md`` §11.4), as the
    reference's :func:`~ozaki_backend.reference.complex.residual_pass`: ``(C, bound)``
    in the embedding's layout, or None."""
    Ar, Ai, Br, Bi = parts
    n = Br.shape[1]
    s, t = complex_stats.shifts(cupy, st, n_moduli, mode)
    tn = t[:n]
    Art, Ait = _truncated(Ar, s, 0), _truncated(Ai, s, 0)
    Brt, Bit = _truncated(Br, tn, 1), _truncated(Bi, tn, 1)
    d = complex_stats.cert_data(st)
    return spec.add_residuals(d, C1, *_residual_term(Ar - Art, Ai - Ait, Br, Bi, mode),
                              *_residual_term(Art, Ait, Br - Brt, Bi - Bit, mode))


def product_2d(A, B, plan, *, want_bound=False):
    """``(C, bound)`` of finite 2-D CuPy operands, at least one complex128 (the other
    complex128 or float64): complex128 ``C`` (m, n), float64 bound or None. Mirrors
    :func:`ozaki_backend.reference.complex.complex_2d`."""
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return (cupy.zeros((m, n), dtype=np.complex128),
                cupy.zeros((m, n)) if want_bound else None)
    A, B = _real_if_exact(A), _real_if_exact(B)
    if A.dtype.kind != "c" and B.dtype.kind != "c":
        C, b = _real_product(A.astype(np.float64, copy=False),
                             B.astype(np.float64, copy=False), plan, want_bound)
        return _compose(C, cupy.zeros_like(C)), b
    if A.dtype.kind != "c" or B.dtype.kind != "c":
        return _mixed(A, B, plan, want_bound)
    xp = cupy
    Ar, Ai, Br, Bi = complex_stats.equilibrate(
        xp, cupy.ascontiguousarray(A.real), cupy.ascontiguousarray(A.imag),
        cupy.ascontiguousarray(B.real), cupy.ascontiguousarray(B.imag))
    st = complex_stats.statistics(xp, Ar, Ai, Br, Bi, plan.mode, bound_gemm)
    d = complex_stats.cert_data(st)
    if plan.adaptive:
        N, certified = complex_stats.choose_count(xp, st, plan.mode)
    else:
        N, certified = fixed_count(plan, k), None
    s, t = complex_stats.shifts(xp, st, N, plan.mode)
    C = cupy.empty((m, n), dtype=np.complex128)
    integer_product_into(Ar, Ai, Br, Bi, s, t[:n], N, C)
    C2 = None
    if certified is None:
        outcome = CERTIFIED if bool(spec.passes(d, s, t).all()) else UNCERTIFIED
    elif certified:
        outcome = CERTIFIED
    else:
        C2 = cupy.concatenate([C.real, C.imag], axis=1)
        bound = spec.result_bound(d, s, t, C2)
        if not bool(spec.meets_target(d, spec.truncation_bound(d, s, t), bound, C2).all()):
            rp = residual_pass((Ar, Ai, Br, Bi), st, plan.mode, N, C2)
            if rp is not None:
                C2, b2 = rp
                _stats.record_moduli(N)
                _stats.record_certificate(RESIDUAL)
                return _compose(C2[:, :n], C2[:, n:]), _part_bound(b2) if want_bound else None
            warn_native("neither the certificate of the complex product with up to "
                        f"{MAX_COMPLEX_MODULI} moduli nor the residual pass meets the "
                        "native-level target")
            _stats.record_certificate(NATIVE)
            return (cupy.matmul(A, B),
                    _part_bound(spec.native_bound(d)) if want_bound else None)
        outcome = CERTIFIED
    b = None
    if want_bound:
        if C2 is None:
            C2 = cupy.concatenate([C.real, C.imag], axis=1)
        b = _part_bound(spec.result_bound(d, s, t, C2))
    _stats.record_moduli(N)
    _stats.record_certificate(outcome)
    return C, b


def product_stacks(a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None, bound3=None):
    """Complex stacks of CuPy operands into the complex128 CuPy ``out3``; False if an
    operand holds Inf/NaN (the caller computes the product natively)."""
    if not bool(cupy.isfinite(a3).all() & cupy.isfinite(b3).all()):
        return False
    for idx in np.ndindex(*a3.shape[:-2]):
        C, b = product_2d(a3[idx], b3[idx], plan, want_bound=bound3 is not None)
        if bound3 is not None:
            bound3[idx] = b
        if alpha != 1.0 or beta != 0.0:
            C = apply_alpha_beta(C, alpha, beta, None if c3 is None else c3[idx])
        out3[idx] = C
    return True


def moduli_for(A, B, plan):
    """The count ``plan`` uses for the complex product ``A @ B`` (mirrors the
    reference's :func:`~ozaki_backend.reference.complex.moduli_for`)."""
    A, B = _real_if_exact(cupy.asarray(A)), _real_if_exact(cupy.asarray(B))
    if A.dtype.kind != "c" and B.dtype.kind != "c":
        return pipeline.moduli_for(A, B, plan)
    if A.dtype.kind != "c":
        return pipeline.moduli_for(A, cupy.concatenate([B.real, B.imag], axis=1), plan)
    if B.dtype.kind != "c":
        return pipeline.moduli_for(cupy.concatenate([A.real, A.imag], axis=0), B, plan)
    if not plan.adaptive:
        return fixed_count(plan, A.shape[1])
    if 0 in A.shape or B.shape[1] == 0:
        return 2
    parts = complex_stats.equilibrate(cupy, cupy.ascontiguousarray(A.real),
                                      cupy.ascontiguousarray(A.imag),
                                      cupy.ascontiguousarray(B.real),
                                      cupy.ascontiguousarray(B.imag))
    st = complex_stats.statistics(cupy, *parts, plan.mode, bound_gemm)
    return complex_stats.choose_count(cupy, st, plan.mode)[0]


__all__ = ["product_2d", "product_stacks", "moduli_for", "integer_product_into",
           "residue_planes", "recombine", "bound_gemm"]
