"""complex128 products on the GPU: Gaussian-integer residues, two real INT8 modular
products per modulus (``docs/spec.md`` §11). Mirrors
:mod:`ozaki_backend.reference.complex` stage by stage, bit for bit:

1. the parts ``Ar, Ai, Br, Bi`` are read in place (operands with every imaginary part
   zero take the real pipeline, as in the reference);
2. equilibration: the real rule on ``[Ar; Ai]`` and ``[Br, Bi]``
   (:func:`.scaling.equilibration` on the four part views);
3. ``kernels/complex.cu``: the real embedding ``Â = [Ar, -Ai]``,
   ``B̂ = [[Br, Bi], [Bi, -Br]]`` of the scaled parts (``B̂`` stored transposed);
4. its statistics, bound GEMM, kept bits and certificate count: the real engine's
   kernels (:class:`.pipeline.Prepared`) over the complex moduli table
   (:data:`._common.COMPLEX_TABLE`), with the shifts of columns ``j`` and ``n + j``
   tied to their minimum, as the reference ties them;
5. ``kernels/complex.cu``: truncation, residues modulo the complex moduli and the
   Gaussian map, read from the embedding's halves (the real kernel's float64 digits,
   ``kernels/residue_digits.cuh``; a lane pair per element group, one lane per part);
6. the real engine's INT8 GEMMs (:func:`.modgemm.products_into`), twice per modulus;
7. ``kernels/crt.cu`` ``oz_cx_crt``: recombination into the residues of ``Re`` and
   ``Im`` and the CRT of both (the complex table's constants), in one pass written
   straight into the complex result;
8. only when some element passed no a-priori test (or a bound is asked for): the real
   engine's ``oz_certify`` on ``[Re, Im]``, then the residual pass, then ``ZGEMM``.

Everything runs on the current CuPy stream; the usual path reads back one small array
(the certificate's count). The whole product is one tile (no output tiling yet): the
workspace is the embedding (``8 (2 m k + 4 k n)`` bytes), ``2 N k (m + n)`` bytes of
residues and ``8 N m n`` of int32 products.
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
from ..spec.moduli import KSPLIT, MIN_MODULI
from . import certificate, loader, modgemm, pipeline, scaling
from ._common import COMPLEX_TABLE, KPAD, LDC_PAD, as_rows, blocks, round_up
from ._prelude import complex_crt_prelude, complex_table_prelude

CERTIFIED, UNCERTIFIED = pipeline.CERTIFIED, pipeline.UNCERTIFIED
RESIDUAL, NATIVE = pipeline.RESIDUAL, pipeline.NATIVE

_moduli = {}


def _device_moduli(n_moduli):
    """int32 device array of the first ``n_moduli`` complex moduli (the k-chunk fold)."""
    key = (cupy.cuda.Device().id, n_moduli)
    t = _moduli.get(key)
    if t is None:
        t = _moduli[key] = cupy.asarray(
            np.array(complex_crt_constants(n_moduli).moduli, dtype=np.int32))
    return t


def _kernel(name):
    """A kernel of ``kernels/complex.cu`` with the complex table's prelude."""
    return loader.get_function("complex.cu", name, prelude=complex_table_prelude())


# --------------------------------------------------------------------------- embedding

def _parts(Xr, Xi):
    """``(Xr, Xi, rs, cs, rows_fast)``: the two parts as float64 views with one pair of
    element strides, as the kernels read them (:func:`._common.as_rows`); contiguous
    copies when their strides differ or are not whole elements."""
    X, rs, cs, rf = as_rows(Xr)
    Y, rsi, csi, _ = as_rows(Xi)
    if (rs, cs) != (rsi, csi) or X is not Xr or Y is not Xi:
        Y = cupy.ascontiguousarray(Xi)
        X, rs, cs, rf = as_rows(cupy.ascontiguousarray(Xr))
    return X, Y, rs, cs, rf


def embedding(Ar, Ai, Br, Bi, flags=None):
    """``(Â, B̂ᵀ, S)``: the real embedding of the equilibrated parts (float64 views of
    any strides, ``Ar``/``Ai`` (m, k), ``Br``/``Bi`` (k, n)): ``Â = [Ar, -Ai] 2^-S``
    (m, 2k) and ``B̂ᵀ`` (2n, 2k) with rows ``[Br_j, Bi_j] 2^S`` and
    ``[Bi_j, -Br_j] 2^S``; ``S`` (int32, k) the complex rule's exponents. ``flags``
    (int32 device array of 4, zero on entry), when given, receives ``[A holds Inf/NaN,
    A has a non-zero imaginary part, the same for B]`` from the same pass."""
    fa = None if flags is None else flags[:2]
    fb = None if flags is None else flags[2:]
    m, k = Ar.shape
    n = Br.shape[1]
    S = scaling.equilibration((Ar, Ai), (Br.T, Bi.T))[0]
    Ah = cupy.empty((m, 2 * k), dtype=np.float64)
    Bh = cupy.empty((2 * n, 2 * k), dtype=np.float64)
    if m and k:
        Xr, Xi, rs, cs, _ = _parts(Ar, Ai)
        _kernel("oz_cx_embed_a")(
            (blocks(m * k),), (256,), (Xr, Xi, rs, cs, np.int32(m), np.int32(k), S, Ah, fa))
    if n and k:
        Yr, Yi, rs, cs, _ = _parts(Br, Bi)
        _kernel("oz_cx_embed_b")(
            (-(-n // 32), -(-k // 32)), (32, 8),
            (Yr, Yi, rs, cs, np.int32(k), np.int32(n), S, Bh, fb))
    return Ah, Bh, S


def halves(Ah, Bh):
    """The parts ``(Ar, -Ai, Br^T, Bi^T)`` as views of the embedding's halves (``-Ai``:
    the right half of ``Â`` holds the negated imaginary part)."""
    k = Ah.shape[1] // 2
    n = Bh.shape[0] // 2
    return Ah[:, :k], Ah[:, k:], Bh[:n, :k], Bh[:n, k:]


def _tie(kept, n):
    """``kept[:, j] = kept[:, n + j] = min(...)``: the shifts of the real and the
    imaginary part of column ``j`` of ``B`` are tied (``t = kept - F`` with the same
    ``F`` and non-zero count for both columns, so tying the kept bits ties ``t``)."""
    tc = cupy.minimum(kept[:, :n], kept[:, n:])
    kept[:, :n] = tc
    kept[:, n:] = tc


def prepare(Ar, Ai, Br, Bi, mode, ph=None, flags=None):
    """``(Â, B̂ᵀ, prep)``: the embedding (``flags``: as :func:`embedding`'s) and its
    :class:`.pipeline.Prepared` (statistics, bound GEMM, kept bits over the complex
    table, tied)."""
    with (ph or pipeline._nothing)("scaling"):
        Ah, Bh, _ = embedding(Ar, Ai, Br, Bi, flags)
    prep = pipeline.Prepared(Ah, None, mode, ph, certify=True, Bt=Bh, equilibrate=False,
                             table=COMPLEX_TABLE)
    with (ph or pipeline._nothing)("scaling"):
        _tie(prep.b.kept, Bh.shape[0] // 2)
    return Ah, Bh, prep


# --------------------------------------------------------------------------- stages

def residue_planes(Xr, Xi, shift, n_moduli, negate_imag=False):
    """``(U, V)``: int8 planes ``(N, rows, kpad)`` of both Gaussian maps of
    ``trunc(X 2^shift_row)`` (``Xr``, ``Xi``: the parts read row-wise, float64 views of
    the same strides; ``negate_imag``: ``Xi`` holds ``-Im``)."""
    rows, cols = Xr.shape
    kpad = round_up(max(cols, 1), KPAD)
    U = cupy.empty((n_moduli, rows, kpad), dtype=np.int8)
    V = cupy.empty_like(U)
    if rows:
        Xr, Xi, rs, cs, rf = _parts(Xr, Xi)
        _kernel("oz_cx_residues")(
            (-(-kpad // 64), -(-rows // 32)), (1024,),    # kernels/complex.cu OZ_CX_THREADS
            (Xr, Xi, rs, cs, np.int32(rows), np.int32(cols), rf, np.int32(kpad),
             cupy.asarray(shift).astype(np.int32), U, V, np.int64(rows * kpad),
             np.int32(n_moduli), np.int32(bool(negate_imag))))
    return U, V


def recombine_crt_into(C1, C2, n_moduli, rows, cols, s, t, out):
    """``out`` (complex128 ``(rows, cols)`` view, any strides) from the int32 products of
    the two maps: recombination into the residues of ``Re`` and ``Im`` and the CRT of
    both, in one pass (``kernels/crt.cu`` ``oz_cx_crt``, compiled with the complex
    table and its CRT constants); ``s``, ``t``: int32 exponents."""
    if rows == 0 or cols == 0:
        return
    fn = loader.get_function("crt.cu", "oz_cx_crt",
                             prelude=complex_table_prelude() + complex_crt_prelude(n_moduli))
    fn((-(-cols // 256), min(rows, 65535)), (256,),
       (C1, C2, np.int64(C1.shape[1] * C1.shape[2]), np.int64(C1.shape[2]), np.int32(rows),
        np.int32(cols), s, t, out, np.int64(out.strides[0] // 8),
        np.int64(out.strides[1] // 8)))


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
    p = _device_moduli(n_moduli).reshape(n_moduli, 1, 1)
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


def workspace_bytes(tm, tn, kpad, N):
    """Device bytes of one output tile of the integer product: the residue planes of
    both maps for ``tm`` rows of A and ``tn`` columns of B, and the two int32 product
    planes (with the chunk buffers of a reduction beyond ``KSPLIT``)."""
    ldc = round_up(max(tn, 1), LDC_PAD)
    planes = 2 * N * kpad * (tm + tn)
    prods = 2 * 4 * N * tm * ldc
    if kpad > KSPLIT:
        prods += 4 * N * tm * ldc + N * KSPLIT * (tm + tn)
    return planes + prods


def integer_product_into(Ah, Bh, s, t, n_moduli, out, ph=None):
    """``out = RN(Re A'B' 2^(-s-t)) + i RN(Im A'B' 2^(-s-t))`` (complex128 ``(m, n)``)
    for the Gaussian integers of the embedding's scaled parts (``Ah``, ``Bh``: from
    :func:`embedding`) with exponents ``s`` (m,) and ``t`` (n,), tile by tile within the
    workspace budget (:func:`.pipeline.tiles_for`; every element is computed alone, so
    the tiles give the same bits)."""
    ph = ph or pipeline._nothing
    m = Ah.shape[0]
    k = Ah.shape[1] // 2
    n = Bh.shape[0] // 2
    N = n_moduli
    kpad = round_up(max(k, 1), KPAD)
    Ar, Ain, BrT, BiT = halves(Ah, Bh)
    s32, t32 = s.astype(np.int32, copy=False), t.astype(np.int32, copy=False)
    tm, tn = pipeline.tiles_for(m, n, lambda tm, tn: workspace_bytes(tm, tn, kpad, N))
    for j0 in range(0, n, tn):
        j1 = min(n, j0 + tn)
        with ph("residues"):
            UB, VB = residue_planes(BrT[j0:j1], BiT[j0:j1], t32[j0:j1], N)
        for i0 in range(0, m, tm):
            i1 = min(m, i0 + tm)
            with ph("residues"):
                UA, VA = residue_planes(Ar[i0:i1], Ain[i0:i1], s32[i0:i1], N,
                                        negate_imag=True)
            with ph("gemms"):
                C1 = products(UA, UB, N, i1 - i0, j1 - j0, kpad)
                C2 = products(VA, VB, N, i1 - i0, j1 - j0, kpad)
            del UA, VA
            with ph("crt"):
                recombine_crt_into(C1, C2, N, i1 - i0, j1 - j0, s32[i0:i1], t32[j0:j1],
                                   out[i0:i1, j0:j1])
            del C1, C2
        del UB, VB


def flags_into(X, flags):
    """Queue ``flags[0] |= any Inf/NaN in X`` and, for complex ``X``, ``flags[1] |= any
    non-zero imaginary part`` (``flags``: int32 device array, zero on entry): one pass,
    no synchronisation (CuPy's own reductions over the strided ``X.imag`` view took
    55 ms at 8192^2 on the H200)."""
    if X.size == 0:
        return
    if X.dtype.kind != "c":
        flags[0] |= (~cupy.isfinite(X)).any().astype(np.int32)
        return
    if any(st % 16 for st in X.strides):
        X = cupy.ascontiguousarray(X)
    rs, cs = X.strides[0] // 16, X.strides[1] // 16
    rows, cols = X.shape
    if abs(rs) < abs(cs):                       # the unit stride along the inner loop
        rows, cols, rs, cs = cols, rows, cs, rs
    grid = (max(1, min(-(-cols // 256), 64)), max(1, min(rows, 4096)))
    _kernel("oz_cx_flags")(grid, (256,), (X, np.int64(rs), np.int64(cs), np.int32(rows),
                                          np.int32(cols), flags))


def _operand_flags(A, B):
    """Host int32 ``[A holds Inf/NaN, A has a non-zero imaginary part, the same for B]``
    (:func:`flags_into`, one read-back)."""
    f = cupy.zeros(4, dtype=np.int32)
    flags_into(A, f[:2])
    flags_into(B, f[2:])
    return f.get()


def _real_if_exact(X, real):
    """``X``, or its real part when ``X`` is complex and ``real`` (every imaginary part
    zero): such an operand is multiplied as a real one (§11.5)."""
    return cupy.ascontiguousarray(X.real) if X.dtype.kind == "c" and real else X


def _compose(re, im):
    out = cupy.empty(re.shape, dtype=np.complex128)
    out.real[...] = re
    out.imag[...] = im
    return out


def _stacked(C):
    """``[Re C, Im C]`` (m, 2n): the embedding's layout of a complex result."""
    return cupy.concatenate([C.real, C.imag], axis=1)


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


def _certify(Ah, Bh, prep, s, t, C2, want_failures):
    """``oz_certify`` on ``C2 = [Re, Im]`` (m, 2n): ``(bound, failures or None)``."""
    bound = cupy.empty(C2.shape, dtype=np.float64)
    fails = cupy.zeros(1, dtype=np.int32) if want_failures else None
    certificate.certify_into(prep.a, prep.b, prep.bound_matrix(), prep.btiles, prep.k,
                             s, t, C2, bound=bound, failures=fails)
    return bound, None if fails is None else int(fails.get()[0])


def _residual_term(Xr, Xi, Yr, Yi, mode):
    """``(run, T)`` of a remainder product with the most moduli (mirrors the
    reference's ``_residual_term``): ``run()`` gives ``[Re, Im]`` (m, 2n)."""
    Ah, Bh, prep = prepare(Xr, Xi, Yr, Yi, mode)
    s, t = prep.shifts(MAX_COMPLEX_MODULI)
    n = Yr.shape[1]

    def run():
        C = cupy.empty((Xr.shape[0], n), dtype=np.complex128)
        integer_product_into(Ah, Bh, s, t[:n], MAX_COMPLEX_MODULI, C)
        return _stacked(C)

    return run, spec.truncation_bound(prep.data(), s.astype(np.int64), t.astype(np.int64))


def _truncated(X, shift, axis):
    """``trunc(X 2^shift) 2^-shift`` along rows (axis 0: shift per row) or columns."""
    sh = (shift[:, None] if axis == 0 else shift[None, :]).astype(np.int32)
    return cupy.ldexp(cupy.trunc(cupy.ldexp(X, sh)), -sh)


def residual_pass(Ah, Bh, prep, n_moduli, d, C2):
    """The exact residual pass of a complex product (``docs/spec.md`` §11.4), as the
    reference's :func:`~ozaki_backend.reference.complex.residual_pass`: ``(C, bound)``
    in the embedding's layout, or None."""
    Ar, Ain, BrT, BiT = halves(Ah, Bh)
    Ai, Br, Bi = -Ain, BrT.T, BiT.T           # the equilibrated parts (exact)
    n = Br.shape[1]
    s, t = (x.astype(np.int64) for x in prep.shifts(n_moduli))
    tn = t[:n]
    Art, Ait = _truncated(Ar, s, 0), _truncated(Ai, s, 0)
    Brt, Bit = _truncated(Br, tn, 1), _truncated(Bi, tn, 1)
    return spec.add_residuals(d, C2, *_residual_term(Ar - Art, Ai - Ait, Br, Bi, prep.mode),
                              *_residual_term(Art, Ait, Br - Brt, Bi - Bit, prep.mode))


def product_2d(A, B, plan, *, want_bound=False, phases=None, real_a=None, real_b=None,
               out=None):
    """``(C, bound)`` of 2-D CuPy operands, at least one complex128 (the other complex128
    or float64): complex128 ``C`` (m, n), float64 bound or None; None when an operand
    holds Inf/NaN (the caller computes the product natively). Mirrors
    :func:`ozaki_backend.reference.complex.complex_2d`. ``phases``: a
    :class:`.pipeline.Phases` timing the stages (both operands complex); ``real_a``,
    ``real_b``: whether every imaginary part is zero, when the caller knows (and has
    checked that the operands are finite); ``out``: a complex128 ``(m, n)`` view (any
    strides) the usual path writes ``C`` into (``C`` is then ``out``).

    Two complex operands are checked for Inf/NaN and zero imaginary parts by the
    embedding's own pass and read back with the certificate's count (one
    synchronisation); an operand found real is then multiplied as a real one (§11.5)."""
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return (cupy.zeros((m, n), dtype=np.complex128),
                cupy.zeros((m, n)) if want_bound else None)
    both = A.dtype.kind == "c" and B.dtype.kind == "c"
    known = real_a is not None and real_b is not None
    if not both and not known:
        f = _operand_flags(A, B)
        if f[0] or f[2]:
            return None
        real_a, real_b = not f[1], not f[3]
        known = True
    A, B = _real_if_exact(A, real_a), _real_if_exact(B, real_b)
    if A.dtype.kind != "c" and B.dtype.kind != "c":
        C, b = _real_product(A.astype(np.float64, copy=False),
                             B.astype(np.float64, copy=False), plan, want_bound)
        return _compose(C, cupy.zeros_like(C)), b
    if A.dtype.kind != "c" or B.dtype.kind != "c":
        return _mixed(A, B, plan, want_bound)
    done, res = pipeline.with_retries(
        lambda: _complex_once(A, B, plan, want_bound, phases, None if known else
                              cupy.zeros(4, dtype=np.int32), out))
    if done:
        return res
    # Out of device memory even with the smallest tiles: ZGEMM (less memory), warned.
    warn_native(res)
    _stats.record_certificate(NATIVE)
    C = cupy.matmul(A, B)
    return C, (cupy.full((m, n), np.inf) if want_bound else None)


def _complex_once(A, B, plan, want_bound, phases, flags, out):
    """One attempt at the product of two complex operands (:func:`product_2d`), within
    the current workspace budget; ``flags``: a zeroed device array of 4 when the
    operands were not checked for Inf/NaN and zero imaginary parts yet."""
    m, k = A.shape
    n = B.shape[1]
    Ah, Bh, prep = prepare(A.real, A.imag, B.real, B.imag, plan.mode, phases, flags)
    fixed = None if plan.adaptive else fixed_count(plan, k)
    with (phases or pipeline._nothing)("scaling"):
        st = prep.status(True, fixed=fixed)
    host = (st if flags is None else cupy.concatenate([flags, st])).get()
    if flags is not None:
        fl, host = host[:4], host[4:]
        if fl[0] or fl[2]:
            return None
        if not (fl[1] and fl[3]):           # found real: its parts were embedded for nothing
            return product_2d(A, B, plan, want_bound=want_bound, phases=phases,
                              real_a=not fl[1], real_b=not fl[3], out=out)
    _, need, unsure = (int(v) for v in host)
    if fixed is None:
        N = certificate.chosen_count(need, unsure, COMPLEX_TABLE)
        outcome = CERTIFIED
    else:
        N = fixed
        outcome = CERTIFIED if unsure == 0 else UNCERTIFIED
    escalate = fixed is None and unsure > 0
    if not (escalate or want_bound):
        prep.release()              # the bound GEMM's workspace: only the rare paths
    s, t = prep.shifts(N)
    C = out if out is not None else cupy.empty((m, n), dtype=np.complex128)
    integer_product_into(Ah, Bh, s, t[:n], N, C, phases)
    _stats.record_moduli(N)
    b = None
    if escalate or want_bound:
        C2 = _stacked(C)
        b2, fails = _certify(Ah, Bh, prep, s, t, C2, escalate)
        if fails:
            d = prep.data()
            rp = residual_pass(Ah, Bh, prep, N, d, C2)
            if rp is not None:
                C2, b2 = rp
                _stats.record_certificate(RESIDUAL)
                return _compose(C2[:, :n], C2[:, n:]), _part_bound(b2) if want_bound else None
            warn_native("neither the certificate of the complex product with up to "
                        f"{MAX_COMPLEX_MODULI} moduli nor the residual pass meets the "
                        "native-level target")
            _stats.record_certificate(NATIVE)
            return (cupy.matmul(A, B),
                    _part_bound(spec.native_bound(d)) if want_bound else None)
        if want_bound:
            b = _part_bound(b2)
    _stats.record_certificate(outcome)
    return C, b


def product_stacks(a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None, bound3=None):
    """Complex stacks of CuPy operands into the complex128 CuPy ``out3``; False if an
    operand holds Inf/NaN (the caller computes the product natively)."""
    for idx in np.ndindex(*a3.shape[:-2]):
        o = out3[idx]
        res = product_2d(a3[idx], b3[idx], plan, want_bound=bound3 is not None, out=o)
        if res is None:
            return False
        C, b = res
        if bound3 is not None:
            bound3[idx] = b
        if alpha != 1.0 or beta != 0.0:
            C = apply_alpha_beta(C, alpha, beta, None if c3 is None else c3[idx])
        if C is not o:              # a fallback's or alpha/beta's new array
            o[...] = C
    return True


def moduli_for(A, B, plan):
    """The count ``plan`` uses for the complex product ``A @ B`` (mirrors the
    reference's :func:`~ozaki_backend.reference.complex.moduli_for`)."""
    A, B = cupy.asarray(A), cupy.asarray(B)
    f = _operand_flags(A, B)
    A, B = _real_if_exact(A, not f[1]), _real_if_exact(B, not f[3])
    if A.dtype.kind != "c" and B.dtype.kind != "c":
        return pipeline.moduli_for(A, B, plan)
    if A.dtype.kind != "c":
        return pipeline.moduli_for(A, cupy.concatenate([B.real, B.imag], axis=1), plan)
    if B.dtype.kind != "c":
        return pipeline.moduli_for(cupy.concatenate([A.real, A.imag], axis=0), B, plan)
    if not plan.adaptive:
        return fixed_count(plan, A.shape[1])
    if 0 in A.shape or B.shape[1] == 0:
        return MIN_MODULI
    _, _, prep = prepare(A.real, A.imag, B.real, B.imag, plan.mode)
    _, need, unsure = (int(v) for v in prep.status(True).get())
    return certificate.chosen_count(need, unsure, COMPLEX_TABLE)


__all__ = ["product_2d", "product_stacks", "moduli_for", "integer_product_into",
           "embedding", "prepare", "residue_planes", "recombine_crt_into"]
