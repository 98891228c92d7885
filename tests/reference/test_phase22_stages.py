"""Layers 2-4 of the seed's debugging order, each stage against Python integers.

2. prescale + hi/lo split + residues, element by element;
3. one prime's GEMM, then residues -> GEMMs -> CRT on small integer matrices;
4. the four pass scales and the float64 accumulation.
"""

from fractions import Fraction

import numpy as np
import pytest

from ozaki_backend.spec import seed as T
from ozaki_backend.reference import phase22 as P

# ---------------------------------------------------------------- Python oracles


def py_exponent(row):
    """E of one row: max frexp exponent over non-zeros, 0 if none."""
    import math

    es = [math.frexp(x)[1] for x in row if x != 0]
    return max(es) if es else 0


def py_split(x, E):
    """hi, lo of one element from exact rationals (Python round() is half-even)."""
    v = Fraction(x) / Fraction(2) ** E
    hi = round(v * 2 ** 17)
    lo = round((v - Fraction(hi, 2 ** 17)) * 2 ** 34)
    return hi, lo, v


SEED_VALUES = [0.0, 1.0, -1.0, 127.0, -127.0, 128.0, -128.0, 0.125, -0.125, -0.123456,
               # ties of round(v 2^17): 65536.5 -> 65536, 65537.5 -> 65538 (half-even)
               0.5 + 2.0 ** -18, 0.5 + 3 * 2.0 ** -18,
               # |v| just below 1 rounds hi up to 2^17; smallest subnormal
               float(np.nextafter(1.0, 0.0)), 5e-324, -3.3e-310, 1e300]


def _check_split(A):
    v, w, E, F = P.prescale(A, np.zeros((A.shape[1], 1)))
    hi, lo = P.split_hi_lo(v)
    res = P.residues_01(hi)
    resl = P.residues_01(lo)
    assert res.dtype == np.int8 and res.shape == (7,) + A.shape
    for i in range(A.shape[0]):
        Ei = py_exponent(A[i].tolist())
        assert E[i] == Ei
        for k in range(A.shape[1]):
            h, l, vx = py_split(float(A[i, k]), Ei)
            assert hi[i, k] == h and lo[i, k] == l, (A[i, k], hi[i, k], h, lo[i, k], l)
            assert abs(h) <= 2 ** 17 and abs(l) <= 2 ** 16
            # |v - Â| <= 2^-35 (v as the exact rational A 2^-E)
            assert abs(vx - Fraction(h, 2 ** 17) - Fraction(l, 2 ** 34)) <= Fraction(1, 2 ** 35) \
                + Fraction(1, 2 ** 1075)
            for pi, p in enumerate(T.PRIMES):
                assert int(res[pi, i, k]) == h % p  # Python % is in [0, p)
                assert int(resl[pi, i, k]) == l % p
                assert 0 <= res[pi, i, k] < p


def test_split_each_value_alone_in_its_row():
    # one element per row: v is the frexp mantissa of the value itself
    _check_split(np.array(SEED_VALUES).reshape(-1, 1))


def test_split_all_values_in_one_row():
    # one shared row exponent (that of 1e300): the small ones keep few or no bits
    _check_split(np.array(SEED_VALUES).reshape(1, -1))
    # the seed's list without the extreme entries: exponent of 128 (E = 8)
    _check_split(np.array(SEED_VALUES[:12]).reshape(1, -1))


def test_split_known_values():
    # hand-checked against the seed's formula: -0.123456 alone in its row has
    # E = -3, v = -0.987648, hi = round(-129452.97...) = -129453
    A = np.array([[-0.123456]])
    v, _, E, _ = P.prescale(A, np.zeros((1, 1)))
    hi, lo = P.split_hi_lo(v)
    assert E.tolist() == [-3] and hi.tolist() == [[-129453]]
    # -129453 = -1020 * 127 + 87
    assert (-129453) % 127 == 87 and P.residues_01(hi)[0, 0, 0] == 87
    # 128 with E = 8: v = 0.5, hi = 2^16, lo = 0; -1 in that row: hi = -2^9
    A = np.array([[128.0, -1.0, 0.0]])
    v, _, E, _ = P.prescale(A, np.zeros((3, 1)))
    hi, lo = P.split_hi_lo(v)
    assert E.tolist() == [8]
    assert hi.tolist() == [[65536, -512, 0]] and lo.tolist() == [[0, 0, 0]]
    r = P.residues_01(hi)[:, 0, 1]
    assert r.tolist() == [(-512) % p for p in T.PRIMES]
    assert all(0 <= x < p for x, p in zip(r.tolist(), T.PRIMES))


def test_prescale_column_exponents_and_zero_lines():
    B = np.array([[0.0, 3.0, 0.0], [0.0, -0.25, 2.0 ** -1070]])
    F = P.col_exponents(B)
    assert F.tolist() == [0, 2, -1069]
    A = np.zeros((2, 0))
    assert P.row_exponents(A).tolist() == [0, 0]
    _, w, _, F = P.prescale(np.zeros((1, 2)), B)
    assert np.all(np.abs(w) < 1)
    assert w[1, 2] == 0.5


def test_split_rejects_unscaled_values():
    with pytest.raises(ValueError):
        P.split_hi_lo(np.array([1.0]))


def test_recombine_and_tails_are_exact():
    rng = np.random.default_rng(11)
    A = rng.standard_normal((6, 9)) * np.exp2(rng.integers(-40, 40, (6, 1)))
    v, _, _, _ = P.prescale(A, np.zeros((9, 1)))
    hi, lo = P.split_hi_lo(v)
    Ah = P.recombine(hi, lo)
    Ta = v - Ah
    for x, h, l, a, t in zip(v.ravel(), hi.ravel(), lo.ravel(), Ah.ravel(), Ta.ravel()):
        assert Fraction(a) == Fraction(int(h), 2 ** 17) + Fraction(int(l), 2 ** 34)
        assert Fraction(t) == Fraction(x) - Fraction(a)  # Ta = v - Â exactly
        assert abs(t) <= 2.0 ** -35


def test_residues_negative_and_large():
    x = np.array([0, 1, -1, 126, -126, 127, -127, 128, -128, 2 ** 17, -2 ** 17, -3],
                 dtype=np.int64)
    r = P.residues_01(x)
    for i, p in enumerate(T.PRIMES):
        assert r[i].tolist() == [int(v) % p for v in x]
    assert r.min() >= 0 and r.max() <= 126
    assert r[0, -1] == 124  # the seed's example: -3 mod 127 is 124, not -3


# ------------------------------------------------------------ layer 3: prime GEMM


def test_prime_gemm_matches_int64_worst_case_chunk():
    # a full 4096 chunk of the largest residue (126): the accumulator's maximum
    kc = T.K_CHUNK_MAX
    ra = np.full((3, kc), 126, dtype=np.int8)
    rb = np.full((kc, 2), 126, dtype=np.int8)
    assert P.prime_gemm(ra, rb).tolist() == [[126 * 126 * kc] * 2] * 3
    rng = np.random.default_rng(5)
    for p in T.PRIMES:
        ra = rng.integers(0, p, (17, 300)).astype(np.int8)
        rb = rng.integers(0, p, (300, 13)).astype(np.int8)
        ref = ra.astype(np.int64) @ rb.astype(np.int64)
        got = P.prime_gemm(ra, rb)
        assert got.dtype == np.int64 and np.array_equal(got, ref)


def test_debug_matrix_residue_layout():
    # the seed's layout probe: A[row, kk] = 1000*row + kk, B[kk, col] = 1000*kk + col
    m, k, n = 5, 40, 6
    A = (1000 * np.arange(m)[:, None] + np.arange(k)[None, :]).astype(np.int64)
    B = (1000 * np.arange(k)[:, None] + np.arange(n)[None, :]).astype(np.int64)
    ra, rb = P.residues_01(A), P.residues_01(B)
    for row in range(m):
        for kk in range(k):
            assert ra[0, row, kk] == (1000 * row + kk) % 127
    # one prime (127): GEMM of residues, then mod p, against int64
    C127 = P.prime_gemm(ra[0], rb[0])
    assert np.array_equal(C127, (A % 127) @ (B % 127))
    assert np.array_equal(C127 % 127, (A @ B) % 127)
    # all primes + CRT: the exact integer product
    x, nl_tiles = P.pass_chunk(A, B)
    assert np.array_equal(x, A @ B)
    thr = k * int(A.max()) * int(B.max())
    assert nl_tiles.tolist() == [[min(nl for nl in range(1, 8) if 2 * thr < T.M_PREFIX[nl])]]


def test_seed_2x2_example_layer_by_layer():
    A = np.array([[3, -5], [-7, 11]], dtype=np.int64)
    B = np.array([[-13, 17], [19, -23]], dtype=np.int64)
    exact = [[-134, 166], [300, -372]]  # negative entries exercise the signed fold
    ra, rb = P.residues_01(A), P.residues_01(B)
    c = np.stack([P.prime_gemm(ra[i], rb[i]) % p for i, p in enumerate(T.PRIMES)])
    for i, p in enumerate(T.PRIMES):
        assert c[i].tolist() == [[e % p for e in row] for row in exact]
    nl = P.choose_nl_tiles(A, B)
    # threshold 2 * 11 * 23 = 506 needs M_nl > 1012: nl = 2 (M_2 = 14351)
    assert nl.tolist() == [[2]]
    for use in range(2, 8):
        assert P.crt_reconstruct_nl(c, use).tolist() == exact
    # one prime is not enough: 300 and -134 wrap around modulo 127
    assert P.crt_reconstruct_nl(c, 1).tolist() != exact
    x, _ = P.pass_chunk(A, B)
    assert x.tolist() == exact


def test_choose_nl_tiles_per_tile_against_python():
    rng = np.random.default_rng(2)
    m, kc, n = 300, 37, 150  # 3 x 3 tiles, partial last tiles
    a = rng.integers(-2 ** 17, 2 ** 17, (m, kc), endpoint=True)
    b = rng.integers(-2 ** 17, 2 ** 17, (kc, n), endpoint=True)
    a[:128] //= 2 ** 15   # tile row 0: small A slice
    b[:, 64:128] //= 2 ** 12  # tile column 1: small B slice
    a[256:] = 0           # tile row 2: zero -> nl = 1
    got = P.choose_nl_tiles(a, b)
    assert got.shape == (3, 3)
    for ti in range(3):
        for tj in range(3):
            ma = int(np.abs(a[ti * 128:(ti + 1) * 128]).max())
            mb = int(np.abs(b[:, tj * 64:(tj + 1) * 64]).max())
            thr = kc * ma * mb
            want = min(nl for nl in range(1, 8) if thr < Fraction(T.M_PREFIX[nl], 2))
            assert got[ti, tj] == want
    assert got[2].tolist() == [1, 1, 1]
    assert len(set(got.ravel().tolist())) >= 3


def test_choose_nl_refuses_unchunked_long_k():
    # the seed's silent overflow: K = 10000 of full 17-bit slices exceeds M/2
    a = np.full((1, 10000), 2 ** 17, dtype=np.int64)
    with pytest.raises(ValueError):
        P.choose_nl_tiles(a, a.T.copy())
    x, nl = P.pass_chunk(a[:, :4096], a.T[:4096].copy())
    assert x.tolist() == [[4096 * 2 ** 34]] and nl.tolist() == [[7]]


def test_force_nl_below_requirement_is_refused():
    a = np.full((2, 8), 2 ** 17, dtype=np.int64)
    with pytest.raises(ValueError):
        P.pass_chunk(a, a.T.copy(), force_nl=3)


def test_pass_integer_sums_chunks_exactly():
    rng = np.random.default_rng(9)
    a = rng.integers(-2 ** 17, 2 ** 17, (3, 9000), endpoint=True)
    b = rng.integers(-2 ** 17, 2 ** 17, (9000, 2), endpoint=True)
    log = []
    x = P.pass_integer(a, b, 4096, nl_log=log)
    ref = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(9000)) for j in range(2)]
           for i in range(3)]
    assert x.tolist() == ref
    assert len(log) == 3  # 4096 + 4096 + 808


# --------------------------------------------------------------- layer 4: scales


def test_pass_table_and_scales():
    assert T.PASSES == (("hi", "hi", -34), ("hi", "lo", -51), ("lo", "hi", -51),
                        ("lo", "lo", -68))


def test_pass_integers_rebuild_the_split_product_exactly():
    # asymmetric data: hi x lo != lo x hi, so a swapped mapping or scale is caught
    rng = np.random.default_rng(4)
    A = rng.uniform(-1, 1, (4, 7)) * np.array([[1.0], [3.0], [1e-3], [-7e5]])
    B = rng.uniform(-1, 1, (7, 5)) ** 3
    v, w, E, F = P.prescale(A, B)
    hiA, loA = P.split_hi_lo(v)
    hiB, loB = P.split_hi_lo(w)
    sl = {"hiA": hiA, "loA": loA, "hiB": hiB, "loB": loB}
    xs = [P.pass_integer(sl[sa + "A"], sl[sb + "B"]) for sa, sb, _ in T.PASSES]
    assert not np.array_equal(xs[1], xs[2])
    Ah, Bh = P.recombine(hiA, loA), P.recombine(hiB, loB)
    for i in range(4):
        for j in range(5):
            total = sum(Fraction(int(x[i, j])) * Fraction(2) ** s
                        for x, (_, _, s) in zip(xs, T.PASSES))
            exact = sum(Fraction(Ah[i, k]) * Fraction(Bh[k, j]) for k in range(7))
            assert total == exact


def test_accumulate_passes_follows_the_spec_order():
    # values where float(x) rounds (|x| > 2^53) and where the additions round
    rows = [[2 ** 53 + 1, 3, 5, -7],
            [0, 0, 0, 0],
            [-(2 ** 60) - 12345, 2 ** 62 + 1, -(2 ** 62), 2 ** 61 + 3],
            [1, 1, 1, 1],
            [2 ** 40 + 1, -(2 ** 57) + 1, 2 ** 56 + 1, 2 ** 62 - 1]]
    xs = [np.array([[r[l]] for r in rows], dtype=np.int64) for l in range(4)]
    acc = P.accumulate_passes(xs)
    for idx, r in enumerate(rows):
        a = 0.0
        for x, (_, _, s) in zip(r, T.PASSES):
            a += float(x) * 2.0 ** s  # Python float(int) rounds to nearest even
        assert acc[idx, 0] == a
        # and within gamma_4 of the exact sum (the bound used end to end)
        exact = sum(Fraction(x) * Fraction(2) ** s for x, (_, _, s) in zip(r, T.PASSES))
        S = sum(abs(Fraction(x)) * Fraction(2) ** s for x, (_, _, s) in zip(r, T.PASSES))
        u = Fraction(1, 2 ** 53)
        assert abs(Fraction(acc[idx, 0]) - exact) <= 4 * u / (1 - 4 * u) * S
    assert np.signbit(acc[1, 0]) == False  # noqa: E712  (zero passes give +0.0)


def test_finalize_is_ldexp_by_row_plus_column_exponent():
    acc = np.array([[0.75, -0.5], [1.5, 0.0]])
    C = P.finalize(acc, np.array([3, -1074]), np.array([1, 1000]))
    assert C.tolist() == [[0.75 * 16, -0.5 * 2.0 ** 1003], [1.5 * 2.0 ** -1073, 0.0]]
