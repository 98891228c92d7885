"""complex128 products on the GPU: Gaussian-integer residues, two real INT8 modular
products per modulus (``docs/spec.md`` §11). Mirrors
:mod:`ozaki_backend.reference.complex` stage by stage, bit for bit:

1. the parts ``Ar, Ai, Br, Bi`` are read in place, never copied (:class:`Parts`;
   operands with every imaginary part zero take the real pipeline, as in the reference);
2. equilibration: the real rule on ``[Ar; Ai]`` and ``[Br, Bi]``
   (:func:`.scaling.equilibration` on the four part views), applied on the fly by every
   later kernel;
3. the statistics of the real embedding ``Â = [Ar, -Ai]``, ``B̂ = [[Br, Bi], [Bi, -Br]]``
   (which the certificate is defined on) from the parts: the real kernels, one launch
   per part (``oz_row_stats_part``), ``B̂``'s mirrored rows from the same launches;
4. the embedding's bound GEMM from two INT8 GEMMs of the parts' size
   (:class:`EmbeddingBound`, ``kernels/complex.cu``), then the real engine's kept bits
   and certificate count over the complex moduli table
   (:data:`._common.COMPLEX_TABLE`), the shifts of columns ``j`` and ``n + j`` tied to
   their minimum, as the reference ties them;
5. ``kernels/complex.cu``: truncation, residues modulo the complex moduli and the
   Gaussian map, from the parts (the real kernel's float64 digits,
   ``kernels/residue_digits.cuh``);
6. the real engine's INT8 GEMMs (:func:`.modgemm.products_into`), twice per modulus;
7. ``kernels/crt.cu`` ``oz_cx_crt``: recombination into the residues of ``Re`` and
   ``Im`` and the CRT of both (the complex table's constants), in one pass written
   straight into the complex result;
8. only when some element passed no a-priori test (or a bound is asked for): the real
   engine's ``oz_certify`` on ``[Re, Im]``, then the residual pass, then ``ZGEMM``;
9. elements of the embedding with one or two terms (a diagonal or permutation factor,
   a difference operator) computed from their terms, as in the real scheme
   (``kernels/certificate.cu`` ``oz_cx_direct``, from the parts in place); when every
   element is such, no integer product at all.

Everything runs on the current CuPy stream; the usual path reads back one small array
(the certificate's count, with the Inf/NaN and zero-imaginary-part flags). The workspace
is the bound GEMM's (``2 k (m + n)`` bytes of quantised parts and ``4 m 2n`` of P, or
tiles of it), then per output tile ``2 N k (tm + tn)`` bytes of residues and
``8 N tm tn`` of int32 products.
"""

from __future__ import annotations

from typing import NamedTuple

import cupy
import numpy as np

from .. import _stats
from .._warnings import warn_native
from ..semantics import apply_alpha_beta
from ..spec import certificate as spec
from ..spec.complex_moduli import MAX_COMPLEX_MODULI, complex_crt_constants, \
    complex_moduli_for_bits
from ..spec.moduli import KSPLIT, MIN_MODULI
from . import certificate, direct, loader, modgemm, pipeline, scaling
from ._common import COMPLEX_TABLE, KPAD, LDC_PAD, Workspace, as_rows, blocks, round_up
from ._prelude import complex_crt_prelude, complex_table_prelude
from .modgemm import gemm_tn

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


# --------------------------------------------------------------------------- operands

def _same_strides(Xr, Xi):
    """The two parts as float64 views with one pair of element strides, as the kernels
    read them (:func:`._common.as_rows`): themselves (a complex128 array's ``.real`` and
    ``.imag``), else contiguous copies."""
    X, rs, cs, _ = as_rows(Xr)
    Y, rsi, csi, _ = as_rows(Xi)
    if (rs, cs) != (rsi, csi) or X is not Xr or Y is not Xi:
        return cupy.ascontiguousarray(Xr), cupy.ascontiguousarray(Xi)
    return X, Y


class Parts(NamedTuple):
    """The operands of a complex product as the kernels read them, in place: ``Ar``,
    ``Ai`` (m, k) and ``BrT``, ``BiT`` (n, k: B's columns as rows), each pair with one
    pair of element strides, and ``S`` (int32, k), the complex rule's equilibration
    exponents (``2^-S`` on A's parts, ``2^S`` on B's, applied on the fly). The real
    embedding ``Â = [Ar, -Ai]``, ``B̂ = [[Br, Bi], [Bi, -Br]]`` whose statistics and bound
    GEMM the certificate reads is never stored."""

    Ar: object
    Ai: object
    BrT: object
    BiT: object
    S: object

    @classmethod
    def of(cls, Ar, Ai, Br, Bi):
        """The parts (float64 views of any strides: ``Ar``/``Ai`` (m, k), ``Br``/``Bi``
        (k, n)) and their equilibration (:func:`.scaling.equilibration` on
        ``[Ar; Ai]`` and ``[Br, Bi]``)."""
        Ar, Ai = _same_strides(Ar, Ai)
        BrT, BiT = _same_strides(Br.T, Bi.T)
        return cls(Ar, Ai, BrT, BiT, scaling.equilibration((Ar, Ai), (BrT, BiT))[0])

    def scaled(self):
        """``(Ar, Ai, Br, Bi)`` equilibrated, as new arrays (exact; the rare paths)."""
        S = self.S.astype(np.int32)[None, :]
        return (cupy.ldexp(self.Ar, -S), cupy.ldexp(self.Ai, -S),
                cupy.ldexp(self.BrT, S).T, cupy.ldexp(self.BiT, S).T)


def _sides(parts: Parts, mode, gmax, nonzero):
    """The :class:`.scaling.Side` of the embedding's rows, read from the parts: ``Â``'s
    ``[Ar_i, -Ai_i]`` and ``B̂ᵀ``'s ``[Br_j, Bi_j]`` and ``[Bi_j, -Br_j]`` (the same
    entries, so the same exponent, thresholds, counts and row sums; only the non-zero
    range along ``2k`` differs, recorded by the same launches). ``gmax[0]`` is raised
    above 1024 by an Inf/NaN entry; ``nonzero[0]``, ``nonzero[1]`` are set when ``Ai``,
    ``Bi`` have a non-zero entry."""
    Ar, Ai, BrT, BiT, S = parts
    m, k = Ar.shape
    n = BrT.shape[0]
    sa = scaling.statistics_buffer(m, 2 * k)
    scaling.row_stats_into(Ar, S, -1, sa, gmax)
    scaling.row_stats_into(Ai, S, -1, sa, gmax, koff=k, nonzero=nonzero[0:1])
    sb = scaling.statistics_buffer(2 * n, 2 * k)
    top, mirror = sb[:, :n], sb[:, n:]
    scaling.row_stats_into(BrT, S, 1, top, gmax, mirror=(mirror[4], mirror[5]), koff2=k)
    scaling.row_stats_into(BiT, S, 1, top, gmax, koff=k, mirror=(mirror[4], mirror[5]),
                           nonzero=nonzero[1:2])
    mirror[:3] = top[:3]
    for st in (sa, sb):
        scaling.finish_exponents(st)
    a = scaling.Side((Ar, Ai), -1, *sa[:4], lo=sa[4], hi=sa[5])
    b = scaling.Side((BrT, BiT), 1, *sb[:4], lo=sb[4], hi=sb[5])
    if mode == "fast":
        a.Sq = cupy.zeros(m, dtype=np.uint64)
        b.Sq = cupy.zeros(2 * n, dtype=np.uint64)
        for X in (Ar, Ai):
            scaling.row_sumsq_into(X, S, -1, a.E, 2 * k, a.Sq)
        for X in (BrT, BiT):
            scaling.row_sumsq_into(X, S, 1, b.E[:n], 2 * k, b.Sq[:n])
        b.Sq[n:] = b.Sq[:n]
    return a, b


class EmbeddingBound:
    """The embedding's bound GEMM ``P = [P1, P2]`` (m x 2n) from two INT8 GEMMs of the
    parts' size per tile (``kernels/complex.cu``: ``oz_cx_quantize``, then
    ``oz_cx_bound_combine``), the same exact integers as ``alpha beta^T`` of the
    embedding. The interface of :class:`.scaling.BoundMatrix`: :meth:`tile` takes a tile
    of P's columns within one half (:func:`bound_tiles`) and returns it as a view; a
    block of B's columns computes both halves, so the two tiles of a pair share it."""

    def __init__(self, a, b, S, k, tm, tn):
        self.a, self.b, self.S, self.k = a, b, S, k
        self.n = b.E.shape[0] // 2
        self.kp = round_up(max(k, 1), KPAD)
        self.half = round_up(tn, 16)
        ws = self.layout(tm, tn, k)
        v = ws.carve(cupy.empty(ws.nbytes, dtype=np.uint8))
        self.QAp, self.QAm, self.QBp, self.QBm, self.P = (
            v[x] for x in ("QAp", "QAm", "QBp", "QBm", "P"))
        self.P32 = v.get("P32")
        self._rows_key = self._cols_key = self._tile_key = None
        self._summed = set()

    @staticmethod
    def layout(tm, tn, k) -> Workspace:
        """The buffers of ``(tm, tn)`` tiles (``tn`` columns of B: both halves of P)."""
        kp = round_up(max(k, 1), KPAD)
        ld = round_up(2 * round_up(tn, 16), LDC_PAD)
        ws = Workspace()
        for name, rows in (("QAp", tm), ("QAm", tm), ("QBp", tn), ("QBm", tn)):
            ws.need(name, (rows, kp), np.int8)
        # P1 <= 2k 127^2 + ...: the embedding's (2k long) rule for int64 P.
        if round_up(2 * max(k, 1), KPAD) > scaling.BOUND_CHUNK:
            ws.need("P", (tm, ld), np.int64)
            ws.need("P32", (tm, ld), np.int32)
        else:
            ws.need("P", (tm, ld), np.int32)
        return ws

    def counted(self, tiles):
        """Mark the row sums of every block of ``tiles`` as accumulated already."""
        n = self.n
        self._summed = {("a", (i0, i1)) for (i0, i1, _, _) in tiles} | \
            {("b", (j0, j1)) for (_, _, j0, j1) in tiles if j0 < n}
        return self

    def _quantize(self, which, key, Qp, Qm):
        side = self.a if which == "a" else self.b
        i0, i1 = key
        Xr, Xi = (X[i0:i1] for X in side.X_op)
        rows = i1 - i0
        first = (which, key) not in self._summed
        SA = side.SA[i0:i1] if first else cupy.empty(rows, dtype=np.int32)
        Xr, rs, cs, rf = as_rows(Xr)
        Xi = as_rows(Xi)[0]
        _kernel("oz_cx_quantize")(
            (-(-self.kp // 64), -(-rows // 32)), (256,),
            (Xr, Xi, rs, cs, np.int32(rows), np.int32(self.k), rf, self.S,
             np.int32(side.ks), np.int32(self.kp), side.E[i0:i1], Qp, Qm, SA))
        if first and which == "b":      # the mirrored rows' sums: the same entries
            n = self.n
            side.SA[n + i0:n + i1] = SA
        self._summed.add((which, key))

    def _gemms(self, rows, cols):
        """``[G+, G-]`` of the current blocks into P (int64 through int32 chunks of k)."""
        P, kp = self.P, self.kp
        ld = P.shape[1]
        pairs = ((self.QAp, self.QBp, 0), (self.QAm, self.QBm, self.half))
        if P.dtype == np.int32:
            for QA, QB, off in pairs:
                gemm_tn(QA.data.ptr, QB.data.ptr, P.data.ptr + 4 * off, rows, cols, kp,
                        kp, kp, ld)
            return
        P[:rows].fill(0)
        acc = loader.get_function("scaling.cu", "oz_accumulate_i64")
        for k0 in range(0, kp, scaling.BOUND_CHUNK):
            kc = min(scaling.BOUND_CHUNK, kp - k0)
            for QA, QB, off in pairs:
                gemm_tn(QA.data.ptr + k0, QB.data.ptr + k0, self.P32.data.ptr + 4 * off,
                        rows, cols, kc, kp, kp, ld)
            acc((blocks(rows * ld),), (256,), (self.P32, P, np.int64(rows * ld)))

    def tile(self, i0, i1, j0, j1):
        """The P tile of rows ``i0:i1`` and columns ``j0:j1`` (within one half), a view."""
        n = self.n
        right = j0 >= n
        c0, c1 = (j0 - n, j1 - n) if right else (j0, j1)
        if self._tile_key != (i0, i1, c0, c1):
            if self._rows_key != (i0, i1):
                self._quantize("a", (i0, i1), self.QAp, self.QAm)
                self._rows_key = (i0, i1)
            if self._cols_key != (c0, c1):
                self._quantize("b", (c0, c1), self.QBp, self.QBm)
                self._cols_key = (c0, c1)
            rows, cols = i1 - i0, c1 - c0
            self._gemms(rows, cols)
            _kernel(scaling.variant("oz_cx_bound_combine", self.P))(
                (-(-cols // 256), min(rows, 65535)), (256,),
                (self.P, np.int64(self.P.shape[1]), np.int32(rows), np.int32(cols),
                 np.int64(self.half), self.a.SA[i0:i1], self.b.SA[c0:c1],
                 np.int32(self.k)))
            self._tile_key = (i0, i1, c0, c1)
        off = self.half if right else 0
        return self.P[:, off:off + c1 - c0]

    def kernel(self, name, table=COMPLEX_TABLE):
        """The ``_i32`` or ``_i64`` variant of a kernel reading P tiles."""
        return scaling.kernel(scaling.variant(name, self.P), table)


def bound_tiles(m, n, k):
    """``(tm, tn, tiles)``: the tiles of the embedding's P (m x 2n) within the workspace
    budget, in pairs ``(i0, i1, j0, j1)``, ``(i0, i1, n + j0, n + j1)`` that share one
    block of B's columns."""
    tm, tn = pipeline.tiles_for(m, n, lambda tm, tn: EmbeddingBound.layout(tm, tn, k).nbytes)
    tiles = []
    for (i0, i1, j0, j1) in pipeline._tile_list(m, n, tm, tn):
        tiles += [(i0, i1, j0, j1), (i0, i1, n + j0, n + j1)]
    return tm, tn, tiles


def prepare(Ar, Ai, Br, Bi, mode, ph=None, nonzero=None, fixed=None):
    """``(parts, prep)``: the :class:`Parts` and the :class:`.pipeline.Prepared` of the
    embedding (statistics, bound GEMM, kept bits over the complex table, tied; around
    the ``fixed`` count when the plan fixes it), read from the parts in place.
    ``prep.st[0]`` exceeds 1024 when an operand holds Inf/NaN; ``nonzero`` (int32
    device array of 2, zero on entry) receives whether ``Ai`` and ``Bi`` have a
    non-zero entry, from the same passes."""
    with (ph or pipeline._nothing)("scaling"):
        parts = Parts.of(Ar, Ai, Br, Bi)
        m, k = parts.Ar.shape
        n = parts.BrT.shape[0]
        st = cupy.zeros(certificate.status_size(COMPLEX_TABLE), dtype=np.int32)
        if nonzero is None:
            nonzero = cupy.zeros(2, dtype=np.int32)
        a, b = _sides(parts, mode, st[:1], nonzero)
        tm, tn, btiles = bound_tiles(m, n, k)
        bm = EmbeddingBound(a, b, parts.S, k, tm, tn)
        pipeline._note_workspace()

        def fresh_bound():
            return EmbeddingBound(a, b, parts.S, k, tm, tn).counted(btiles)

        prep = pipeline.Prepared.of_sides(a, b, parts.S, 2 * k, mode, st, btiles, bm,
                                          fresh_bound, COMPLEX_TABLE, fixed=fixed)
    return parts, prep


# --------------------------------------------------------------------------- stages

def residue_planes(Xr, Xi, shift, n_moduli, negate_imag=False, S=None, ks=0):
    """``(U, V)``: int8 planes ``(N, rows, kpad)`` of both Gaussian maps of
    ``trunc(X 2^shift_row)`` (``Xr``, ``Xi``: the parts read row-wise, float64 views;
    ``negate_imag``: map ``Xr - i Xi``; ``S``, ``ks``: the equilibration, ``x 2^(ks S_k)``,
    applied on the fly)."""
    rows, cols = Xr.shape
    kpad = round_up(max(cols, 1), KPAD)
    U = cupy.empty((n_moduli, rows, kpad), dtype=np.int8)
    V = cupy.empty_like(U)
    if rows:
        Xr, Xi = _same_strides(Xr, Xi)
        Xr, rs, cs, rf = as_rows(Xr)
        _kernel("oz_cx_residues")(
            (-(-kpad // 64), -(-rows // 32)), (1024,),    # kernels/complex.cu OZ_CX_THREADS
            (Xr, Xi, rs, cs, np.int32(rows), np.int32(cols), rf, S, np.int32(ks),
             np.int32(kpad), cupy.asarray(shift).astype(np.int32), U, V,
             np.int64(rows * kpad), np.int32(n_moduli), np.int32(bool(negate_imag))))
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


def integer_product_into(parts: Parts, s, t, n_moduli, out, ph=None):
    """``out = RN(Re A'B' 2^(-s-t)) + i RN(Im A'B' 2^(-s-t))`` (complex128 ``(m, n)``)
    for the Gaussian integers of the equilibrated parts (:class:`Parts`) with exponents
    ``s`` (m,) and ``t`` (n,), tile by tile within the workspace budget
    (:func:`.pipeline.tiles_for`; every element is computed alone, so the tiles give the
    same bits)."""
    ph = ph or pipeline._nothing
    Ar, Ai, BrT, BiT, S = parts
    m, k = Ar.shape
    n = BrT.shape[0]
    N = n_moduli
    kpad = round_up(max(k, 1), KPAD)
    s32, t32 = s.astype(np.int32, copy=False), t.astype(np.int32, copy=False)
    tm, tn = pipeline.tiles_for(m, n, lambda tm, tn: workspace_bytes(tm, tn, kpad, N))
    for j0 in range(0, n, tn):
        j1 = min(n, j0 + tn)
        with ph("residues"):
            UB, VB = residue_planes(BrT[j0:j1], BiT[j0:j1], t32[j0:j1], N, S=S, ks=1)
        for i0 in range(0, m, tm):
            i1 = min(m, i0 + tm)
            with ph("residues"):
                UA, VA = residue_planes(Ar[i0:i1], Ai[i0:i1], s32[i0:i1], N, S=S, ks=-1)
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


def _certify(prep, N, C2, want_bound, test):
    """The bound of ``C2 = [Re, Im]`` (m, 2n) and, with ``test``, the a-posteriori test
    of the embedding's elements: ``(bound or None, unsettled, level)``."""
    bound = cupy.empty(C2.shape, dtype=np.float64) if want_bound else None
    res, _, level = certificate.posterior_into(
        prep.a, prep.b, prep.bound_matrix(), prep.btiles, prep.k, N, C2, bound=bound,
        test=test, fac=prep.factors(), table=COMPLEX_TABLE, cap=0)
    return bound, (int(res.get()[0]) if test else 0), level


def _direct_into(parts: Parts, prep, C2, bound):
    """The embedding's direct elements written into ``C2 = [Re, Im]`` (and ``bound``),
    from the caller's parts (:func:`.direct.direct_embedding_into`)."""
    direct.direct_embedding_into(parts.Ar, parts.Ai, parts.BrT, parts.BiT, prep.a, prep.b,
                                 C2, bound)


def _unstack_into(C2, C):
    """``C`` (complex (m, n)) from the embedding's layout ``C2 = [Re, Im]``, in place."""
    n = C.shape[1]
    C.real[...] = C2[:, :n]
    C.imag[...] = C2[:, n:]
    return C


def _residual_term(Xr, Xi, Yr, Yi, mode):
    """``(run, T)`` of a remainder product with the most moduli (mirrors the
    reference's ``_residual_term``): ``run()`` gives ``[Re, Im]`` (m, 2n)."""
    parts, prep = prepare(Xr, Xi, Yr, Yi, mode, fixed=MAX_COMPLEX_MODULI)
    s, t = prep.shifts(MAX_COMPLEX_MODULI)
    n = Yr.shape[1]

    def run():
        C = cupy.empty((Xr.shape[0], n), dtype=np.complex128)
        integer_product_into(parts, s, t[:n], MAX_COMPLEX_MODULI, C)
        return _stacked(C)

    return run, spec.truncation_bound(prep.data(), s.astype(np.int64), t.astype(np.int64))


def _truncated(X, shift, axis):
    """``trunc(X 2^shift) 2^-shift`` along rows (axis 0: shift per row) or columns."""
    sh = (shift[:, None] if axis == 0 else shift[None, :]).astype(np.int32)
    return cupy.ldexp(cupy.trunc(cupy.ldexp(X, sh)), -sh)


def residual_pass(parts: Parts, prep, n_moduli, d, C2, level):
    """The exact residual pass of a complex product (``docs/spec.md`` §11.4), as the
    reference's :func:`~ozaki_backend.reference.complex.residual_pass`: ``(C, bound)``
    in the embedding's layout, or None."""
    Ar, Ai, Br, Bi = parts.scaled()             # the equilibrated parts (exact)
    n = Br.shape[1]
    s, t = (x.astype(np.int64) for x in prep.shifts(n_moduli))
    tn = t[:n]
    Art, Ait = _truncated(Ar, s, 0), _truncated(Ai, s, 0)
    Brt, Bit = _truncated(Br, tn, 1), _truncated(Bi, tn, 1)
    return spec.add_residuals(d, spec.prior(d), C2, level,
                              *_residual_term(Ar - Art, Ai - Ait, Br, Bi, prep.mode),
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
    statistics' own passes and read back with the certificate's count (one
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
                              cupy.zeros(2, dtype=np.int32), out))
    if done:
        return res
    # Out of device memory even with the smallest tiles: ZGEMM (less memory), warned.
    warn_native(res)
    _stats.record_certificate(NATIVE)
    C = cupy.matmul(A, B)
    return C, (cupy.full((m, n), np.inf) if want_bound else None)


def _complex_once(A, B, plan, want_bound, phases, nonzero, out):
    """One attempt at the product of two complex operands (:func:`product_2d`), within
    the current workspace budget; ``nonzero``: a zeroed device array of 2 when the
    operands were not checked for zero imaginary parts (nor for Inf/NaN) yet."""
    m, k = A.shape
    n = B.shape[1]
    fixed = None if plan.adaptive else fixed_count(plan, k)
    parts, prep = prepare(A.real, A.imag, B.real, B.imag, plan.mode, phases, nonzero, fixed)
    with (phases or pipeline._nothing)("scaling"):
        st = prep.status(True, fixed=fixed)
    host = (st if nonzero is None else cupy.concatenate([nonzero, st])).get()
    off = 0 if nonzero is None else 2
    if host[off] > 1024:
        return None                         # Inf/NaN: the caller's native product
    if nonzero is not None and not (host[0] and host[1]):
        # found real: its parts were read for nothing
        return product_2d(A, B, plan, want_bound=want_bound, phases=phases,
                          real_a=not host[0], real_b=not host[1], out=out)
    dec = prep.count(host[off:], fixed)
    C = out if out is not None else cupy.empty((m, n), dtype=np.complex128)
    if fixed is None and dec.direct_only:
        # every element of the embedding has at most two terms: no integer product
        C2 = cupy.zeros((m, 2 * n), dtype=np.float64)
        b2 = cupy.zeros((m, 2 * n), dtype=np.float64) if want_bound else None
        _direct_into(parts, prep, C2, b2)
        _stats.record_certificate(CERTIFIED)
        return _unstack_into(C2, C), None if b2 is None else _part_bound(b2)
    N = dec.n_moduli
    outcome = CERTIFIED if fixed is None or not (dec.failing or dec.direct) else UNCERTIFIED
    test = fixed is None and dec.failing > 0
    patch = fixed is None and dec.direct > 0      # elements computed directly (§11.4)
    if not (test or want_bound):
        prep.release()              # the bound GEMM's workspace: only the rare paths
    tried = set()
    while True:
        tried.add(N)
        s, t = prep.shifts(N)
        integer_product_into(parts, s, t[:n], N, C, phases)
        _stats.record_moduli(N)
        if not (test or want_bound or patch):
            break
        C2 = _stacked(C)
        b2, unsettled, level = _certify(prep, N, C2, want_bound, test) \
            if test or want_bound else (None, 0, 0.0)
        if not unsettled:
            if patch:
                _direct_into(parts, prep, C2, b2)
                _unstack_into(C2, C)
            b = None if b2 is None else _part_bound(b2)
            _stats.record_certificate(outcome)
            return C, b
        all_pass = prep.all_pass(dec)
        if all_pass is not None and all_pass not in tried:
            N = all_pass
            continue
        if MAX_COMPLEX_MODULI not in tried:
            N = MAX_COMPLEX_MODULI
            continue
        d = prep.data()
        rp = residual_pass(parts, prep, N, d, C2, level)
        if rp is not None:
            C2, b2 = rp
            if patch:
                _direct_into(parts, prep, C2, b2)
            _stats.record_certificate(RESIDUAL)
            return _unstack_into(C2, C), _part_bound(b2) if want_bound else None
        warn_native("neither the certificate of the complex product with up to "
                    f"{MAX_COMPLEX_MODULI} moduli nor the residual pass meets the "
                    "native-level target")
        _stats.record_certificate(NATIVE)
        return (cupy.matmul(A, B),
                _part_bound(spec.native_bound(d)) if want_bound else None)
    _stats.record_certificate(outcome)
    return C, None


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
    _, prep = prepare(A.real, A.imag, B.real, B.imag, plan.mode)
    dec = prep.count(prep.status(True).get())
    return 0 if dec.direct_only else dec.n_moduli


__all__ = ["product_2d", "product_stacks", "moduli_for", "integer_product_into",
           "Parts", "EmbeddingBound", "prepare", "residue_planes", "recombine_crt_into"]
