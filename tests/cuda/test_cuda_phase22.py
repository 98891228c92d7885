"""CUDA engine, ``scheme="phase22"``: every stage bitwise against the CPU reference.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing. The shapes sit on the
kernels' edges: m, n around multiples of the 128 x 64 tiles, k around multiples of the
4096 chunk and below the 16-byte padding; the data are U(-1, 1), a wide exponent
spread with zero lines and subnormals, and a mix that gives different tiles different
prime counts.
"""

import re

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.spec import seed as T
from ozaki_backend.plan import Plan
from ozaki_backend.reference import phase22 as R

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

U = 2.0 ** -53
KC = T.K_CHUNK_MAX

#: (m, k, n): tile edges +-1, chunk edges +-1, k below the padding.
SHAPES = [(1, 1, 1), (5, 7, 3), (127, 15, 63), (128, 16, 64), (129, 17, 65),
          (256, 300, 192), (64, KC - 1, 128), (130, KC, 66), (127, KC + 1, 129),
          (200, 2 * KC - 1, 70), (33, 2 * KC + 1, 31)]
KINDS = ("uniform", "wide", "mixed_nl")


def _g(x):
    return cupy.asnumpy(x)


def _data(rng, m, k, kind):
    """An (m, k) operand; ``mixed_nl`` is built so that tiles need different nl:
    rows 0..127 are scaled by 2^-30 outside the first chunk (their later chunks have
    tiny slices), rows 128..255 hold small integers (lo slice 0: the lo passes need
    one prime there), one row is zero."""
    if kind == "uniform":
        return rng.uniform(-1.0, 1.0, (m, k))
    A = (rng.random((m, k)) - 0.5) * np.exp(2.0 * rng.standard_normal((m, k)))
    A[rng.random((m, k)) < 0.05] = 0.0
    if kind == "wide":
        if m > 4 and k > 2:
            A[1] = 0.0
            A[2] = (rng.random(k) - 0.5) * 1e-310    # subnormal row
            A[3] = (rng.random(k) - 0.5) * 1e300     # huge row
            A[4, 0] = 5e-324                         # prescale rounds (subnormal v)
            A[4, 1] = -1.7e308
        return A
    A = rng.uniform(-1.0, 1.0, (m, k))
    A[:128, min(k, KC):] *= 2.0 ** -30
    if k > 1:
        A[:128, 1] *= 2.0 ** -30  # also inside the first chunk: smaller lo there
    A[128:256] = rng.integers(-40, 41, (max(0, min(m, 256) - 128), k))
    if m > 2:
        A[m - 2] = 0.0
    return A


def _operands(m, k, n, kind, seed):
    rng = np.random.default_rng(seed)
    A = _data(rng, m, k, kind)
    B = _data(rng, n, k, kind).T.copy()   # B's columns play A's rows
    return A, B


def _plan(m, n, k, residual=False):
    return Plan(m, n, k, scheme="phase22", residual=residual)


# ------------------------------------------------------------------ constants

def test_prelude_is_generated_from_the_tables():
    from ozaki_backend.cuda import phase22 as G

    text = G.prelude()

    def arr(name):
        body = text[text.index(name + "["):].split("{", 1)[1].split("}", 1)[0]
        return [int(v.rstrip("ul")) for v in body.replace(" ", "").split(",")]

    assert arr("OZ22_M") == list(T.M_PREFIX)
    assert arr("OZ22_COEF") == list(T.coeffs_flat)
    assert arr("OZ22_OFF") == list(T.coeff_offsets)
    mu = arr("OZ22_MU")
    assert mu[1:] == [2 ** 64 // M for M in T.M_PREFIX[1:]]
    assert mu[-1] == T.BARRETT_MU
    body = text[text.index("oz22_prime(int i)"):].split(";", 1)[0]
    assert tuple(int(v) for v in re.findall(r"\?\s*(\d+)", body)) + \
        (int(re.findall(r":\s*(\d+)\s*$", body)[0]),) == T.PRIMES
    scales = [float.fromhex(v) for v in
              re.search(r"OZ22_PASS_SCALE\[4\] = \{([^}]*)\}", text).group(1).split(",")]
    assert scales == [2.0 ** s for _, _, s in T.PASSES]


# -------------------------------------------------------------------- scaling

@pytest.mark.parametrize("kind", KINDS)
def test_exponents_and_prescale_match_reference(kind):
    from ozaki_backend.cuda import phase22 as G

    A, B = _operands(37, 53, 29, kind, 1)
    v, w, E, F = R.prescale(A, B)
    for Av in (A, np.asfortranarray(A)):
        gv, gw, gE, gF = G.prescale(cupy.asarray(Av), cupy.asarray(B))
        np.testing.assert_array_equal(_g(gE), E)
        np.testing.assert_array_equal(_g(gF), F)
        assert_same_bits(gv, v)
        assert_same_bits(gw, w)


def test_prescale_subnormal_rounding_and_zero_lines():
    from ozaki_backend.cuda import phase22 as G

    # ldexp(x, -E) below 2^-1022 rounds (ties to even) exactly as np.ldexp
    tiny = [5e-324, 1.5e-323, 2.5e-323, -3.3e-310, 2.0 ** -1070 * 3]
    A = np.array([[1e300] + tiny, [0.0] * 6, [2.0 ** 60] + tiny[::-1]])
    B = np.zeros((6, 2))
    v, w, E, F = R.prescale(A, B)
    gv, gw, gE, gF = G.prescale(cupy.asarray(A), cupy.asarray(B))
    np.testing.assert_array_equal(_g(gE), E)
    np.testing.assert_array_equal(_g(gF), F)
    assert_same_bits(gv, v)
    assert_same_bits(gw, w)


# ------------------------------------------------------------------ hi / lo

SEED_VALUES = [0.0, 1.0, -1.0, 127.0, -127.0, 128.0, -128.0, 0.125, -0.125, -0.123456,
               0.5 + 2.0 ** -18, 0.5 + 3 * 2.0 ** -18, 0.5 + 2.0 ** -35, 0.5 + 3 * 2.0 ** -35,
               -(0.5 + 2.0 ** -35), 2.0 ** -18, 2.0 ** -18 + 2.0 ** -40, 2.0 ** -35,
               3 * 2.0 ** -35, float(np.nextafter(1.0, 0.0)), 5e-324, -3.3e-310, 1e300]


def test_split_hi_lo_matches_reference():
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(2)
    for A in (np.array(SEED_VALUES).reshape(-1, 1), np.array(SEED_VALUES).reshape(1, -1),
              _data(rng, 40, 70, "wide")):
        v, _, _, _ = R.prescale(A, np.zeros((A.shape[1], 1)))
        hi, lo = R.split_hi_lo(v)
        ghi, glo = G.split_hi_lo(cupy.asarray(v))
        np.testing.assert_array_equal(_g(ghi), hi)
        np.testing.assert_array_equal(_g(glo), lo)
        # the tails' input: recombine exact and equal
        assert_same_bits(G.recombine(ghi, glo), R.recombine(hi, lo))
    with pytest.raises(ValueError):
        G.split_hi_lo(cupy.asarray(np.array([[1.0]])))


def test_residues_01_matches_reference():
    from ozaki_backend.cuda import phase22 as G

    x = np.array([0, 1, -1, 126, -126, 127, -127, 128, -128, 2 ** 17, -2 ** 17, -3],
                 dtype=np.int64)
    np.testing.assert_array_equal(_g(G.residues_01(cupy.asarray(x))), R.residues_01(x))


def _tile_max_ref(s, tile, k0, k1):
    """max |slice| per tile of rows over columns k0..k1-1 (NumPy)."""
    a = np.abs(s[:, k0:k1]).max(axis=1) if k1 > k0 else np.zeros(s.shape[0], np.int64)
    return np.maximum.reduceat(a, np.arange(0, s.shape[0], tile))


@pytest.mark.parametrize("kchunk", [KC, 128])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_residue_planes_and_maxima_match_reference(m, k, n, kchunk):
    """The production pass: planes slice*7+prime, k contiguous, padding zeroed; B read
    through its transpose; per (slice, chunk, tile) maxima."""
    from ozaki_backend.cuda import phase22 as G
    from ozaki_backend.cuda._common import round_up

    if k > KC and kchunk == 128 and m * n > 10000:
        pytest.skip("many chunks on a large shape: covered by the smaller ones")
    A, B = _operands(m, k, n, "mixed_nl", m + k + n)
    v, w, E, F = R.prescale(A, B)
    kpad = round_up(k, 16)
    nch = -(-k // kchunk)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    views = [("C", dA, dB), ("F", cupy.asfortranarray(dA), cupy.asfortranarray(dB)),
             ("strided", cupy.asarray(np.repeat(A, 2, axis=1))[:, ::2],
              cupy.asarray(np.repeat(B, 2, axis=0))[::2])]
    for label, Av, Bv in views:
        for X, Xt_ref, ex, tile, name in ((Av, v, E, 128, "A"), (Bv.T, w.T, F, 64, "B")):
            rows = X.shape[0]
            hi, lo = R.split_hi_lo(Xt_ref)
            Rp = cupy.full((14, rows, kpad), 99, dtype=np.int8)
            smax = cupy.zeros((2, nch, -(-rows // tile)), dtype=np.uint32)
            G.residue_planes_into(X, cupy.asarray(ex, dtype=np.int32), Rp, kchunk=kchunk,
                                  tile_rows=tile, smax=smax)
            Rp = _g(Rp)
            for s, sl in enumerate((hi, lo)):
                np.testing.assert_array_equal(Rp[7 * s:7 * s + 7, :, :k], R.residues_01(sl),
                                              err_msg=f"{label} {name} slice {s}")
                for c in range(nch):
                    ref = _tile_max_ref(sl, tile, c * kchunk, min(k, (c + 1) * kchunk))
                    np.testing.assert_array_equal(_g(smax)[s, c], ref)
            assert not Rp[:, :, k:].any()


# ------------------------------------------------------------------ adaptive nl

def test_choose_nl_tiles_matches_reference():
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(5)
    for m, kc, n in [(1, 1, 1), (300, 4096, 200), (129, 100, 65), (257, 7, 130)]:
        a = rng.integers(-2 ** 17, 2 ** 17 + 1, (m, kc))
        b = rng.integers(-2 ** 17, 2 ** 17 + 1, (kc, n))
        # tiles of every magnitude: each 128-row / 64-column block its own bit length
        for t in range(-(-m // 128)):
            a[t * 128:(t + 1) * 128] >>= 3 * t
        for t in range(-(-n // 64)):
            b[:, t * 64:(t + 1) * 64] >>= 5 * t
        if m > 200:
            a[:128] = 0  # an all-zero tile: nl = 1
        ref = R.choose_nl_tiles(a, b)
        got = _g(G.choose_nl_tiles(cupy.asarray(a), cupy.asarray(b)))
        np.testing.assert_array_equal(got, ref)
    # the boundary: 2 kc a b just below and just above M_nl (odd), where nl steps up
    for nl in range(1, 8):
        M = T.M_PREFIX[nl]
        found = set()
        # the nearest products on each side (M_7 / 2 lies beyond 4096 2^34: no upper side)
        for target in _interleave(range((M - 1) // 2, (M - 1) // 2 - 400, -1),
                                  range((M + 1) // 2, (M + 1) // 2 + 400)):
            if 2 * target < M and True in found or 2 * target > M and False in found:
                continue
            f = _factor3(target)
            if f is None:
                continue
            kc, av, bv = f
            a = np.zeros((3, kc), dtype=np.int64)
            b = np.zeros((kc, 2), dtype=np.int64)
            a[1, -1], b[0, 0] = -av, bv
            ref = R.choose_nl_tiles(a, b)
            got = _g(G.choose_nl_tiles(cupy.asarray(a), cupy.asarray(b)))
            np.testing.assert_array_equal(got, ref)
            found.add(2 * target < M)
        assert found == {True, False} or nl == 7, (nl, found)


def _interleave(xs, ys):
    for x, y in zip(xs, ys):
        yield x
        yield y


def _factor3(target):
    """``(kc, a, b)`` with ``kc a b = target``, ``kc <= 4096``, ``a, b <= 2^17``, or None."""
    lim = 2 ** 17
    for kc in range(1, 4097):
        if target % kc:
            continue
        r = target // kc
        if r > lim * lim:
            continue
        lo_ = max(1, -(-r // lim))
        cand = np.arange(lo_, min(lim, r) + 1, dtype=np.int64)
        hit = cand[r % cand == 0]
        if hit.size:
            return kc, int(hit[0]), r // int(hit[0])
    return None


def test_choose_nl_refuses_the_out_of_range_chunk():
    from ozaki_backend.cuda import phase22 as G

    a = np.full((2, 8192), 2 ** 17, dtype=np.int64)
    with pytest.raises(ValueError, match="7-prime CRT range"):
        R.choose_nl_tiles(a, a.T)
    with pytest.raises(ValueError, match="7-prime CRT range"):
        G.choose_nl_tiles(cupy.asarray(a), cupy.asarray(a.T))


# ------------------------------------------------------------------ reconstruction

def _fold_py(s, nl):
    M = T.M_PREFIX[nl]
    r = s % M
    return r - M if 2 * r > M else r


def test_fold_is_exact_over_the_whole_u64_range():
    """Barrett with mu = floor(2^64 / M_nl) and one correction is exact for every
    64-bit sum; checked at the kernel's largest sum sum_i (p_i - 1) f_i (< 7 126 max f),
    around multiples of M_nl, at the fold point M_nl / 2 and up to 2^64 - 1."""
    from ozaki_backend.cuda import phase22_driver as G

    rng = np.random.default_rng(6)
    s_list, nl_list = [], []
    for nl in range(1, 8):
        M = T.M_PREFIX[nl]
        coef = T.coeffs_flat[T.coeff_offsets[nl]:T.coeff_offsets[nl] + nl]
        top = sum((p - 1) * f for p, f in zip(T.PRIMES, coef))
        bound = 7 * 126 * max(T.coeffs_flat)
        vals = [0, 1, M // 2, M // 2 + 1, M - 1, M, M + 1, top, top - 1, bound, 2 ** 58,
                2 ** 63, 2 ** 64 - 1, 2 ** 64 - M]
        for q in (1, 2, 3, 2 ** 20 + 7, (2 ** 64 - 1) // M, (2 ** 64 - 1) // M - 1):
            vals += [q * M - 1, q * M, q * M + 1, q * M + M // 2, q * M + M // 2 + 1]
        vals += [int(x) for x in rng.integers(0, 2 ** 63, 200, dtype=np.int64)]
        vals += [int(x) * 2 + 1 for x in rng.integers(0, 2 ** 63, 50, dtype=np.int64)]
        vals = [x for x in vals if 0 <= x < 2 ** 64]
        s_list += vals
        nl_list += [nl] * len(vals)
    s = cupy.asarray(np.array(s_list, dtype=np.uint64))
    nl = cupy.asarray(np.array(nl_list, dtype=np.int32))
    out = cupy.empty(len(s_list), dtype=np.int64)
    G._fn("oz22_fold_test")((-(-len(s_list) // 256),), (256,),
                            (s, nl, out, np.int32(len(s_list))))
    assert _g(out).tolist() == [_fold_py(x, n) for x, n in zip(s_list, nl_list)]


def _residues_of(x, P=7):
    return np.stack([np.mod(x, p) for p in T.PRIMES[:P]]).astype(np.int16)


@pytest.mark.parametrize("m,n", [(1, 1), (127, 63), (128, 64), (129, 65), (300, 130)])
def test_crt_reconstruct_nl_matches_reference(m, n):
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(m * n)
    ntr, ntc = -(-m // 128), -(-n // 64)
    nl_tiles = rng.integers(1, 8, (ntr, ntc)).astype(np.int8)
    # random residues (any x: the fold picks the representative of |x| < M_nl / 2)
    c = np.stack([rng.integers(0, p, (m, n)) for p in T.PRIMES]).astype(np.int16)
    # the largest sums and the fold's edges in the first row / column
    c[:, 0, 0] = [p - 1 for p in T.PRIMES]
    nlmap = R.expand_tiles(nl_tiles, m, n)
    if n > 3:
        for j, off in enumerate((0, 1, -1)):
            Mn = T.M_PREFIX[int(nlmap[0, j + 1])]
            x = (Mn - 1) // 2 * (1 if off >= 0 else -1) + (0 if off == 0 else -off)
            c[:, 0, j + 1] = [x % p for p in T.PRIMES]
    ref = R.crt_reconstruct_nl(c, nlmap)
    got = _g(G.crt_reconstruct_nl(cupy.asarray(c), cupy.asarray(nl_tiles)))
    np.testing.assert_array_equal(got, ref)
    # every nl alone, all residues at their maximum: the largest sums
    for nl in range(1, 8):
        cm = np.broadcast_to(np.array([p - 1 for p in T.PRIMES])[:, None, None], (7, m, n))
        np.testing.assert_array_equal(_g(G.crt_reconstruct_nl(cupy.asarray(cm.copy()), nl)),
                                      R.crt_reconstruct_nl(cm, nl))


def _random_residues(rng, x):
    """uint8 residues of the int64 array x for every prime, (7,) + x.shape."""
    return np.stack([np.mod(x, p) for p in T.PRIMES]).astype(np.uint8)


@pytest.mark.parametrize("nchunks,xin,xout,fin", [(1, False, False, True), (3, False, False, True),
                                                   (2, True, True, False), (2, True, False, True),
                                                   (3, False, True, True), (0, True, False, True)])
def test_crt_finalize_fused_matches_reference(nchunks, xin, xout, fin):
    """The fused kernel: CRT of every chunk of a group and every pass (per-tile nl, each
    chunk and pass its own map), summed in int64 onto the incoming sums, then the
    float64 accumulation and the ldexp -- against the reference's stages, bit for bit."""
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(100 + 10 * nchunks + 2 * xin + xout)
    m, n = 200, 131
    ntr, ntc = -(-m // 128), -(-n // 64)
    ldo = -(-n // 16) * 16
    nl = rng.integers(1, 8, (max(nchunks, 1), 4, ntr, ntc)).astype(np.int8)
    Rp = np.full((max(nchunks, 1) * 28, m, ldo), 0xEE, dtype=np.uint8)  # unread garbage
    X0 = rng.integers(-2 ** 57, 2 ** 57, (4, m, n), dtype=np.int64) if xin \
        else np.zeros((4, m, n), dtype=np.int64)
    x = [X0[P].copy() for P in range(4)]
    for g in range(nchunks):
        for P in range(4):
            nlmap = R.expand_tiles(nl[g, P], m, n)
            Mh = np.array([T.M_PREFIX[v] // 2 for v in range(8)], dtype=np.int64)[nlmap]
            val = rng.integers(-2 ** 62, 2 ** 62, (m, n), dtype=np.int64) % (2 * Mh + 1) - Mh
            val[0, :3] = [Mh[0, 0], -Mh[0, 1], 0]       # the fold's edges
            c = _random_residues(rng, val)
            for i in range(7):
                keep = nlmap > i                          # planes the tile reads
                Rp[(g * 4 + P) * 7 + i, :, :n] = np.where(keep, c[i], 0xEE)
            x[P] = x[P] + R.crt_reconstruct_nl(c.astype(np.int64), nlmap)
    E = rng.integers(-30, 30, m).astype(np.int32)
    F = rng.integers(-30, 30, n).astype(np.int32)
    dX = cupy.asarray(X0)
    dC = cupy.zeros((m, n)) if fin else None
    dacc = cupy.zeros((m, n)) if fin else None
    G.crt_finalize_into(cupy.asarray(Rp), m, n, cupy.asarray(nl), nchunks, X=dX, xin=xin,
                        xout=xout, E=cupy.asarray(E) if fin else None,
                        F=cupy.asarray(F) if fin else None, C=dC, acc_out=dacc)
    if xout:
        for P in range(4):
            np.testing.assert_array_equal(_g(dX[P]), x[P], err_msg=f"pass {P}")
    else:
        np.testing.assert_array_equal(_g(dX), X0)       # untouched
    if fin:
        acc = R.accumulate_passes(x)
        assert_same_bits(dacc, acc)
        assert_same_bits(dC, R.finalize(acc, E, F))


# ------------------------------------------------------------------ accumulation

def test_accumulate_passes_matches_reference():
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(8)
    m, n = 37, 41
    lim = [2 ** 62, 2 ** 58, 2 ** 58, 2 ** 50]  # beyond 2^53: RN(x) rounds
    xs = [rng.integers(-L, L, (m, n), dtype=np.int64) for L in lim]
    xs[0][0, :4] = [2 ** 53 + 1, -(2 ** 53 + 1), 2 ** 54 + 2, 0]
    xs[1][0, :4] = [1, -1, 0, 0]
    xs[3][0, :4] = [1, -1, 3, 0]
    xs[2][1] = -xs[1][1]  # cancellations
    ref = R.accumulate_passes(xs)
    got = G.accumulate_passes([cupy.asarray(x) for x in xs])
    assert_same_bits(got, ref)


def test_finalize_matches_np_ldexp_at_underflow_and_overflow():
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(9)
    m, n = 64, 33
    acc = rng.standard_normal((m, n)) * np.exp2(rng.integers(-70, 30, (m, n)))
    acc[0, :6] = [0.0, 1.0, 1.5, 2.5 * 2.0 ** -60, -3.0, 1.0 + 2.0 ** -52]
    for lo_, hi_ in ((-40, 40), (-1100, -1000), (-600, -450), (480, 560), (-1200, 1200)):
        E = rng.integers(lo_, hi_, m).astype(np.int32)
        F = rng.integers(lo_, hi_, n).astype(np.int32)
        with np.errstate(over="ignore", under="ignore"):
            ref = R.finalize(acc, E, F)
        got = G.finalize(cupy.asarray(acc), cupy.asarray(E), cupy.asarray(F))
        assert_same_bits(got, ref)
    # ties at the subnormal rounding: (2k+1) 2^-1075 goes to even
    acc = np.array([[1.0, 3.0, 5.0, 7.0, 1.5, -1.0]])
    E = np.array([-1075], dtype=np.int32)
    F = np.zeros(6, dtype=np.int32)
    assert_same_bits(G.finalize(cupy.asarray(acc), cupy.asarray(E), cupy.asarray(F)),
                     R.finalize(acc, E, F))


# ------------------------------------------------------------------ end to end

def _check_trace(A, B, plan):
    from ozaki_backend.cuda import phase22 as G

    C, tr = R.matmul_2d_trace(A, B, plan)
    gC, gt = G.matmul_2d_trace(cupy.asarray(A), cupy.asarray(B), plan)
    for key in ("E", "F", "hiA", "loA", "hiB", "loB"):
        np.testing.assert_array_equal(_g(gt[key]), tr[key], err_msg=key)
    for P in range(4):
        np.testing.assert_array_equal(_g(gt["x"][P]), tr["x"][P], err_msg=f"pass {P}")
        assert len(gt["nl"][P]) == len(tr["nl"][P])
        for c, ref in enumerate(tr["nl"][P]):
            np.testing.assert_array_equal(_g(gt["nl"][P][c]), ref, err_msg=f"nl {P} {c}")
    assert_same_bits(gt["acc"], tr["acc"])
    assert_same_bits(gt["C_main"], tr["C_main"])
    if not plan.residual:
        assert_same_bits(gC, C)
        assert_same_bits(G.matmul_2d(cupy.asarray(A), cupy.asarray(B), plan), C)
    return tr, gt


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_every_stage_matches_reference(m, k, n, kind):
    A, B = _operands(m, k, n, kind, 3 * m + 5 * k + 7 * n)
    with np.errstate(over="ignore", under="ignore"):
        _check_trace(A, B, _plan(m, n, k))


def test_tiles_with_different_prime_counts():
    """The mixed data really gives tiles different nl (so unwritten product tiles would
    be read if need were wrong), and every bit still matches."""
    m, k, n = 300, 2 * KC + 5, 140
    A, B = _operands(m, k, n, "mixed_nl", 10)
    tr, _ = _check_trace(A, B, _plan(m, n, k))
    distinct = {int(v) for P in range(4) for c in tr["nl"][P] for v in np.unique(c)}
    assert len(distinct) >= 3, distinct
    per_chunk = [len(np.unique(c)) for P in range(4) for c in tr["nl"][P]]
    assert max(per_chunk) >= 2


def test_row_blocks_give_the_same_bits(monkeypatch):
    from ozaki_backend.cuda import phase22_driver as G

    m, k, n = 300, 200, 70
    A, B = _operands(m, k, n, "mixed_nl", 11)
    ref = R.matmul_2d(A, B, _plan(m, n, k))
    monkeypatch.setattr(G, "ROW_BLOCK_OVERRIDE", 128)
    _check_trace(A, B, _plan(m, n, k))
    got = G.matmul_2d(cupy.asarray(A), cupy.asarray(B), _plan(m, n, k))
    assert_same_bits(got, ref)


@pytest.mark.parametrize("group_max", [1, 2])
def test_chunk_groups_through_the_int64_sums(monkeypatch, group_max):
    """Fewer chunks per CRT launch than chunks (the int64 pass sums carry between
    launches; the last group's CRT is fused with the finalize), with row blocks too."""
    from ozaki_backend.cuda import phase22_driver as G

    m, k, n = 260, 2 * KC + 5, 70
    A, B = _operands(m, k, n, "mixed_nl", 21)
    plan = _plan(m, n, k)
    ref = R.matmul_2d(A, B, plan)
    monkeypatch.setattr(G, "GROUP_MAX", group_max)
    assert G.choose_blocks(m, n, k + 11, 3)[1] == group_max
    assert_same_bits(G.matmul_2d(cupy.asarray(A), cupy.asarray(B), plan), ref)
    monkeypatch.setattr(G, "ROW_BLOCK_OVERRIDE", 128)
    _check_trace(A, B, plan)


def test_choose_blocks_prefers_whole_groups_then_long_row_blocks():
    from ozaki_backend.cuda import phase22_driver as G

    big = 1 << 40
    assert G.choose_blocks(8192, 8192, 8192, 2, free=big) == (8192, 2)
    assert G.choose_blocks(2048, 2048, 2048, 1, free=big) == (2048, 1)
    assert G.choose_blocks(512, 256, 40960, 10, free=big) == (512, G.GROUP_MAX)
    # memory for all rows only with one chunk per group: the whole group on half the rows
    # (still >= MIN_ROWS), else -- rows below MIN_ROWS -- one chunk per group on all rows
    # (3 chunks: 3 x 28 B of product planes per element against 28 B + 32 B of sums)
    need1 = G._fixed_bytes(256, 12288, 3) + G._row_block_bytes(8192, 256, 12288, 3, 1, True)
    need3 = G._fixed_bytes(256, 12288, 3) + G._row_block_bytes(8192, 256, 12288, 3, 3, False)
    assert need1 < need3
    free = int((need1 + need3) / 2 / G.MEMORY_FRACTION)
    assert G.choose_blocks(8192, 256, 12288, 3, free=free) == (4096, 3)
    tm8, g8 = G.choose_blocks(8192, 256, 12288, 3, free=free // 8)
    assert tm8 < G.MIN_ROWS and g8 == max(g for g in (1, 2, 3) if G._row_block_bytes(
        tm8, 256, 12288, 3, g, g < 3) <= int(free // 8 * G.MEMORY_FRACTION)
        - G._fixed_bytes(256, 12288, 3))
    tm, g = G.choose_blocks(8192, 8192, 8192, 2, free=4 << 30)
    assert tm % 128 == 0 and tm < 8192 and g >= 1
    with pytest.raises(Exception, match="out of memory"):
        G.choose_blocks(8192, 8192, 8192, 2, free=1 << 20)


def test_driver_reads_the_device_once(monkeypatch):
    """No host synchronisation inside the driver: one small device-to-host read (the
    non-finite flag and the nl maxima) after every launch is queued."""
    from ozaki_backend.cuda import phase22_driver as G

    m, k, n = 130, KC + 3, 66
    A, B = _operands(m, k, n, "uniform", 22)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    plan = _plan(m, n, k)
    reads = []
    real = cupy.asnumpy
    monkeypatch.setattr(cupy, "asnumpy", lambda a, *x, **kw: reads.append(a.size) or real(a, *x, **kw))
    got = G.matmul_2d(dA, dB, plan)
    monkeypatch.undo()
    assert len(reads) == 1 and reads[0] <= 1 + 2 * (-(-m // 128)), reads
    assert_same_bits(got, R.matmul_2d(A, B, plan))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_strided_operands():
    from ozaki_backend.cuda import phase22 as G

    m, k, n = 70, 90, 50
    A, B = _operands(m, k, n, "wide", 12)
    ref = R.matmul_2d(A, B, _plan(m, n, k))
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    for a, b in ((cupy.asfortranarray(dA), dB), (dA, cupy.ascontiguousarray(dB.T).T),
                 (cupy.asarray(np.repeat(A, 2, axis=1))[:, ::2], dB)):
        assert_same_bits(G.matmul_2d(a, b, _plan(m, n, k)), ref)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_pipeline_and_public_api_equal_cpu_engine():
    from ozaki_backend.cuda import phase22 as pipeline

    for (m, k, n), kind in (((129, 4097, 65), "uniform"), ((40, 50, 30), "wide")):
        A, B = _operands(m, k, n, kind, 13)
        plan = _plan(m, n, k)
        cpu = ob.matmul(A, B, scheme="phase22", engine="cpu")
        assert_same_bits(cpu, R.matmul_2d(A, B, plan))
        got = pipeline.matmul_2d(cupy.asarray(A), cupy.asarray(B), plan)
        assert_same_bits(got, cpu)
        assert_same_bits(ob.matmul(A, B, scheme="phase22", engine="cuda"), cpu)
        gd = ob.matmul(cupy.asarray(A), cupy.asarray(B), scheme="phase22", engine="cuda")
        assert isinstance(gd, cupy.ndarray)
        assert_same_bits(gd, cpu)
        assert_same_bits(plan.matmul(A, B, engine="cuda"), cpu)


def test_residual_main_part_bitwise_and_tail_within_derived_bound():
    """With ``residual=True`` everything before the tail is bitwise; the tail
    ``S = Ta w + Â Tb`` goes through each engine's own float64 GEMM. Each engine's
    ``fl(fl(P1) + fl(P2))`` is within ``(gamma_k (1 + u) + u) (|Ta||w| + |Â||Tb|)`` of
    the exact ``S`` (any summation order, FMA or not; ``|S|`` is at most that absolute
    sum), so the two engines differ by at most twice that, scaled by the exact
    ``2^(E+F)`` (no subnormal results here). The bound is evaluated in float64 and
    inflated by ``1 + 4 (k + 4) u`` for its own rounding."""
    for m, k, n in ((60, 70, 50), (129, 4097, 65)):
        A, B = _operands(m, k, n, "uniform", 14)
        plan = _plan(m, n, k, residual=True)
        tr, gt = _check_trace(A, B, plan)
        v, w, E, F = R.prescale(A, B)
        Ah = R.recombine(tr["hiA"], tr["loA"])
        Bh = R.recombine(tr["hiB"], tr["loB"])
        absS = np.abs(v - Ah) @ np.abs(w) + np.abs(Ah) @ np.abs(w - Bh)
        gamma = k * U / (1 - k * U)
        bound = 2 * (gamma * (1 + U) + U) * absS * (1 + 4 * (k + 4) * U)
        bound = np.ldexp(bound, E[:, None] + F[None, :])
        diff = np.abs(_g(gt["residual"]) - tr["residual"])
        assert np.all(diff <= bound)
        # and the sum: C = C_main + R, one more rounding on each side
        C = tr["C_main"] + tr["residual"]
        gC = _g(gt["C_main"]) + _g(gt["residual"])
        assert np.all(np.abs(gC - C) <= diff + U * (np.abs(gC) + np.abs(C)))


def test_input_validation_and_empty():
    from ozaki_backend.cuda import phase22 as G

    A = cupy.asarray(np.ones((2, 3)))
    B = cupy.asarray(np.ones((3, 4)))
    with pytest.raises(ValueError):
        G.matmul_2d(A, B, Plan(2, 4, 3))                    # an ozaki2 plan
    with pytest.raises(ValueError):
        G.matmul_2d(A, B, _plan(2, 4, 5))                   # wrong shape
    Bn = B.copy()
    Bn[1, 2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        G.matmul_2d(A, Bn, _plan(2, 4, 3))
    p = _plan(2, 4, 3)
    p.k_chunk = 100
    with pytest.raises(ValueError, match="multiple of 128"):
        G.matmul_2d(A, B, p)
    for m, k, n in ((0, 3, 4), (2, 0, 4), (2, 3, 0)):
        C = G.matmul_2d(cupy.zeros((m, k)), cupy.zeros((k, n)), _plan(m, n, k))
        assert C.shape == (m, n) and not _g(C).any()


def test_integer_inputs_are_exact():
    from ozaki_backend.cuda import phase22 as G

    rng = np.random.default_rng(15)
    A = rng.integers(-1000, 1001, (90, 130)).astype(np.float64)
    B = rng.integers(-1000, 1001, (130, 70)).astype(np.float64)
    got = _g(G.matmul_2d(cupy.asarray(A), cupy.asarray(B), _plan(90, 70, 130)))
    np.testing.assert_array_equal(got, (A.astype(np.int64) @ B.astype(np.int64)).astype(np.float64))
