"""The certificate's formulas (:mod:`ozaki_backend.spec.certificate`, ``docs/spec.md``
§10): the bound GEMM's and the gathers' bounds of ``|A||B|``, the cap's relation to
``gamma_k`` with the element's own terms, the native scale's relation to the terms'
2-norm, the codes, the direct values, the count's choice from a histogram. The formulas'
inputs are the CPU reference's statistics; the reference's own certificate stage is in
``tests/reference/test_certificate.py``."""

from fractions import Fraction

import numpy as np
import pytest

from ozaki_backend.reference import certificate, scaling
from ozaki_backend.spec import certificate as spec
from ozaki_backend.spec.rules import (KAPPA, NATIVE_K, OPTIMISTIC_ELEMENTS,
                                     OPTIMISTIC_FAILING, OPTIMISTIC_SHARE, POST_SHARE,
                                     REPAIR_ELEMENTS, REPAIR_SHARE_LOG2, REPAIR_TERMS,
                                     native_growth)
from ozaki_backend.testing import exact_matmul, phi_matrix

U = 2.0 ** -53


def _data(A, B):
    st_ = scaling.statistics(A, B, "accurate")
    return st_, certificate.data(st_, certificate.gathered(A, B, st_))


@pytest.mark.parametrize("phi", [-1.0, 1.0, 4.0])
def test_lower_and_upper_bounds_bracket_the_absolute_product(phi):
    """2^(E+F-14) Lambda <= |A||B| <= 2^(E+F-14) U, element by element (exact oracle),
    the gathers' terms included in Lambda."""
    rng = np.random.default_rng(int(10 * phi) + 20)
    A, B = phi_matrix((12, 90), phi, rng), phi_matrix((90, 9), phi, rng)
    A[3] = 0.0
    B[:, 2] = 0.0
    st_, d = _data(A, B)
    AB = exact_matmul(np.abs(A), np.abs(B))
    assert (spec.lower_product(d) <= AB).all()
    Up = spec.upper_product(d)
    assert (AB <= Up * (1 + 2 * U)).all()          # AB itself is rounded: half an ulp
    assert (Up[3] == 0).all() and (Up[:, 2] == 0).all()


@pytest.mark.parametrize("phi", [-1.0, 1.0, 2.0, 4.0])
def test_the_norm_factor_bounds_the_rows_2_norm_and_tightens_the_sum_bound(phi):
    """||A_i||_2 <= RA_i 2^(E_i - 3.5) (up to RA's one rounding, exact oracle), RA never
    above sqrt(QA) (the max |a| ||a||_1 bound it replaces) and on these rows well below
    it (the median ratio is 1.8 on N(0, 1) rows, 2.5-2.8 at phi = 1..4); B's columns
    alike."""
    rng = np.random.default_rng(int(10 * phi) + 40)
    A, B = phi_matrix((16, 400), phi, rng), phi_matrix((400, 12), phi, rng)
    A[5] = 0.0
    st_, d = _data(A, B)
    for X, E, R, Q in ((A, st_.E, d.RA, d.QA), (B.T, st_.F, d.RB, d.QB)):
        norm2 = np.sqrt(exact_matmul(np.abs(X), np.abs(X).T).diagonal())
        # RA's square root, 2^(E - 3.5), their product, the oracle's sum and its square
        # root: one rounding each, u = 2^-53 relative (2 u for a square root's)
        assert (norm2 <= R * np.exp2(E - 3.5) * (1 + 8 * U)).all()
        assert (R <= np.sqrt(Q)).all()
    assert d.RA[5] == 0.0
    live = d.RA > 0
    assert np.median(np.sqrt(d.QA[live]) / d.RA[live]) > 1.5


def test_the_cap_implies_the_dgemm_bound_of_the_elements_terms():
    """A certified element's method error is at most (k_ij - 1) u (|A||B|)_ij; with the
    final rounding u |C| on top it is within gamma_{k_ij} (|A||B|)_ij, the bound of every
    correct DGEMM with that many terms (exact rational arithmetic)."""
    for k in list(range(2, 80)) + [255, 256, 4096, 8192, 2 ** 20, 2 ** 30]:
        c = Fraction(k - 1)
        gamma = Fraction(k) * Fraction(U) / (1 - Fraction(k) * Fraction(U))
        assert (c + 1 + c * Fraction(U)) * Fraction(U) <= gamma, k


def test_terms_are_at_least_the_nonzero_terms_and_exact_for_structures():
    """k_ij >= the number of k with A_ik B_kj != 0, equal for banded and one-term
    operands; <= 0 exactly where every term is zero."""
    rng = np.random.default_rng(3)
    k = 60
    A = rng.standard_normal((20, k)) * (rng.random((20, k)) < 0.3)
    B = rng.standard_normal((k, 15)) * (rng.random((k, 15)) < 0.3)
    _, d = _data(A, B)
    ke = spec.terms(d)
    nnz = (A != 0).astype(int) @ (B != 0).astype(int)
    assert (ke >= nnz).all() and ((ke <= 0) <= (nnz == 0)).all()
    D = np.diag(rng.standard_normal(k))
    _, dd = _data(rng.standard_normal((7, k)), D)
    assert (spec.terms(dd) == 1).all()
    band = np.triu(np.tril(rng.standard_normal((k, k)), 2), -2)   # bandwidth 5
    _, db = _data(band, band)
    truth = (band != 0).astype(int) @ (band != 0).astype(int)
    assert (np.maximum(spec.terms(db), 0) >= truth).all() and spec.terms(db).max() <= 5


@pytest.mark.parametrize("phi", [-1.0, 1.0, 2.0, 4.0])
def test_native_scale_is_below_the_terms_2_norm(phi):
    """nu = g(k) max(P / sqrt(kw), G14) <= g(k) ||t_ij||_2 in units of 2^(E+F-14)
    (a lower estimate of native's error scale), up to its own roundings."""
    rng = np.random.default_rng(int(phi) + 40)
    A, B = phi_matrix((16, 200), phi, rng), phi_matrix((200, 12), phi, rng)
    st_, d = _data(A, B)
    ke = spec.terms(d)
    nu = np.ldexp(spec.native_scale(d, ke), st_.E[:, None] + st_.F[None, :] - 14)
    t2 = np.sqrt(exact_matmul(A * A, B * B))
    assert (nu <= native_growth(200) * t2 * (1 + 8 * U)).all()
    assert native_growth(10 ** 6) == native_growth(NATIVE_K) == np.sqrt(NATIVE_K / 2)


@pytest.mark.parametrize("phi", [-1.0, 1.0, 2.0, 4.0])
def test_window_terms_count_every_term_of_the_bound_gemm(phi):
    """kw_ij = max(1, min(k_ij, wA_i, wB_j)) is at least the number of k with
    alpha_ik > 0 and beta_kj > 0 (the terms P_ij sums, counted by a GEMM of the
    indicators) and at most max(1, k_ij); on wide-range rows, where few entries lie in
    the window, it is well below k_ij, so P / sqrt(kw) is the tighter lower bound of
    ||t_ij||_2."""
    rng = np.random.default_rng(int(phi) + 70)
    A, B = phi_matrix((20, 600), phi, rng), phi_matrix((600, 14), phi, rng)
    A[2, 100:] = 0.0
    st_, d = _data(A, B)
    ke = spec.terms(d)
    kw = spec.window_terms(d, ke)
    alpha = scaling.quantize_down(A, st_.E)
    beta = scaling.quantize_down(B.T, st_.F)
    pairs = (alpha > 0).astype(float) @ (beta > 0).astype(float).T
    assert (pairs <= kw).all() and (kw <= np.maximum(ke, 1)).all()
    assert (d.wA == (alpha > 0).sum(axis=1)).all() and (d.wB == (beta > 0).sum(axis=1)).all()
    if phi >= 2:
        assert np.median(kw / ke) < 0.5


def test_the_complex_embeddings_data_have_no_window_counts():
    """The complex embedding's statistics (no sums of squares) give no window counts,
    as on the CUDA engine: kw = max(1, k_ij) there."""
    rng = np.random.default_rng(77)
    A, B = phi_matrix((6, 50), 2.0, rng), phi_matrix((50, 5), 2.0, rng)
    st_ = scaling.statistics(A, B, "accurate", squares=False)
    d = certificate.data(st_)
    assert d.wA is None and d.wB is None
    ke = spec.terms(d)
    assert (spec.window_terms(d, ke) == np.maximum(ke, 1)).all()


def test_target_is_kappa_u_nu_in_the_spread_units():
    """w <= target  <=>  W = 2^(E+F-63.5) w <= KAPPA u nu 2^(E+F-14): the constant."""
    tgt = spec.target(None, np.float64(1.0))
    assert tgt == pytest.approx(KAPPA * 2.0 ** -53 * 2.0 ** -14 / 2.0 ** -63.5, rel=1e-15)


@pytest.mark.parametrize("x", [1.0, 0.75, 0.7499999999999999, 0.5, 3.0, 5e-324, 1e-300,
                               2.0 ** 60 * 1.8, -7.25, 2.0 ** -70])
def test_codes_bound_the_entries_from_below_within_three_halves(x):
    E = np.array([int(np.frexp(abs(x))[1]) + 3])
    c = spec.codes(np.array([[x]]), E)
    v = Fraction(float(spec.code_value(c)[0, 0])) * Fraction(2) ** int(E[0])
    if c[0, 0] == spec.CODE_ZERO:
        assert abs(Fraction(x)) < Fraction(2) ** (int(E[0]) - 63)
    else:
        assert v <= abs(Fraction(x)) < v * Fraction(3, 2)


def test_structural_zeros_are_exact():
    """Triangular factors: elements whose k ranges do not meet have no terms."""
    rng = np.random.default_rng(7)
    Uu = np.triu(rng.standard_normal((30, 30)))
    _, d = _data(Uu, Uu)                                        # U @ U: zero below
    i, j = np.indices((30, 30))
    np.testing.assert_array_equal(spec.terms(d) <= 0, i > j)


def _exact(a1, b1, a2, b2):
    return Fraction(a1) * Fraction(b1) + Fraction(a2) * Fraction(b2)


def test_direct_values_are_within_their_bound_and_exact_where_products_are():
    """One term: RN(a b). Two terms: Dot2 (error <= u|C| + gamma_2^2 S), exact for
    products that are exact (selectors, differences), the plain sum out of range; each
    within its bound (exact rational arithmetic)."""
    rng = np.random.default_rng(8)
    n = 400
    a1, b1, a2, b2 = (rng.standard_normal(n) * np.ldexp(1.0, rng.integers(-40, 40, n))
                      for _ in range(4))
    a2[:100] = -a1[:100] * (1 + 2.0 ** -30)                  # strong cancellation
    b2[:100] = b1[:100]
    b1[100:150], b2[100:150] = 1.0, -1.0                      # differences: exact
    a1[150:160] *= 2.0 ** 600                                 # out of Dekker's range
    two = np.ones(n, dtype=bool)
    two[160:180] = False
    a2[160:180] = b2[160:180] = 0.0
    C, bound = spec.direct_values(a1, b1, a2, b2, two)
    for i in range(n):
        exact = _exact(a1[i], b1[i], a2[i], b2[i])
        assert abs(Fraction(C[i]) - exact) <= Fraction(bound[i]), i
        if 100 <= i < 150 or not two[i]:
            assert C[i] == float(exact), i                   # correctly rounded
    # Dot2 is faithful: within one ulp of the exact value on the cancelling ones
    for i in range(100):
        exact = _exact(a1[i], b1[i], a2[i], b2[i])
        assert abs(Fraction(C[i]) - exact) <= Fraction(np.spacing(abs(C[i]))), i


def test_choose_takes_the_fewest_count_with_at_most_a_sixteenth_failing():
    counts = list(range(2, 21))
    hist = {14: 900, 15: 60, 16: 30, 18: 10}
    ch = spec.choose(hist, 0, 1000, counts)
    assert ch == spec.Choice(15, 40, 18)
    assert spec.choose(hist, 100, 1000, counts) == spec.Choice(20, 100, None)
    assert 40 <= 1000 * POST_SHARE < 100


def test_choose_goes_one_count_below_where_few_enough_fail_there():
    """With ``repairs`` (the real products) the count is one below the 1/16 rule's when
    the output has at least OPTIMISTIC_ELEMENTS elements and at most half of them, and
    at most OPTIMISTIC_FAILING times the repairable ones, fail a priori there; the
    rule's count is then ``safe``, the escalation's first step."""
    counts = list(range(2, 21))
    size = OPTIMISTIC_ELEMENTS
    hist = {14: size - 20000, 15: 18000, 16: 2000}   # rule: 15 (2000 fail); 14: 20000
    assert spec.choose(hist, 0, size, counts) == spec.Choice(15, 2000, 16)
    assert spec.choose(hist, 0, size, counts, repairs=4096) == \
        spec.Choice(14, 20000, 16, 15)
    # too many failing below: more than 8x the repairable ones, or more than half
    assert 20000 > OPTIMISTIC_FAILING * 2499
    assert spec.choose(hist, 0, size, counts, repairs=2499) == spec.Choice(15, 2000, 16)
    wide = {14: size - 40000, 15: 38000, 16: 2000}
    assert 40000 > OPTIMISTIC_SHARE * size
    assert spec.choose(wide, 0, size, counts, repairs=10 ** 6).safe is None
    # a smaller output never goes below
    small = {14: size - 1 - 20000, 15: 18000, 16: 2000}
    assert spec.choose(small, 0, size - 1, counts, repairs=4096).safe is None
    # the table's first count has none below; certified a priori at the rule's count
    assert spec.choose({2: size}, 0, size, counts, repairs=4096) == spec.Choice(2, 0, 2)
    assert spec.choose({14: size - 5000, 15: 5000}, 0, size, counts, repairs=4096) == \
        spec.Choice(14, 5000, 15, 15)
    assert spec.next_count(spec.Choice(14, 100, 16, 15), {14}, 20) == 15
    assert spec.next_count(spec.Choice(14, 100, 16, 15), {14, 15}, 20) == 16
    assert spec.next_count(spec.Choice(15, 40, 16), {15}, 20) == 16


@pytest.mark.parametrize("elements", [0, 2 ** 16, 2 ** 24, 2 ** 28])
def test_the_repair_cap_is_the_repairable_rule(elements):
    """The cap is REPAIR_ELEMENTS within REPAIR_TERMS terms, or 2^-REPAIR_SHARE_LOG2 of
    the output when that is more (large outputs: the unsettled elements grow with
    them); repairable() takes exactly that many, and none near the overflow."""
    share = elements >> REPAIR_SHARE_LOG2
    for k in (1, 64, 4096, REPAIR_TERMS // REPAIR_ELEMENTS + 1, 65536, 2 ** 27, 2 ** 28):
        cap = spec.repair_cap(k, elements)
        assert cap == max(min(REPAIR_ELEMENTS, REPAIR_TERMS // k), share)
        assert spec.repairable(cap, k, elements=elements) or cap == 0
        assert not spec.repairable(cap + 1, k, elements=elements)
        assert not spec.repairable(1, k, True, elements)
    # 16384^2 outputs at k = 16384: 65536 elements, not 4096
    assert spec.repair_cap(16384, 16384 ** 2) == 2 ** 16
    assert spec.repair_cap(16384, 256 ** 2) == REPAIR_ELEMENTS


@pytest.mark.parametrize("seed", range(40))
def test_a_settled_window_gives_the_full_choice(seed):
    """window_choice: a window whose search (per element: the fewest passing count of
    lo .. hi, lo for those passing there, none past the largest, undecided between)
    settles the count gives the full search's count and failures."""
    rng = np.random.default_rng(seed)
    counts = list(range(2, 21))
    size = int(rng.integers(1, 400))
    centre = int(rng.integers(0, len(counts)))
    fewest = np.clip(centre + rng.integers(-2, 3, size), 0, len(counts) - 1)
    fewest = [None if rng.random() < 0.02 else int(f) for f in fewest]
    full = {}
    for f in fewest:
        if f is not None:
            full[counts[f]] = full.get(counts[f], 0) + 1
    none_full = sum(f is None for f in fewest)
    repairs = int(rng.choice([0, 4, 4096]))
    # as many copies of each element as make the output large enough to go below
    copies = int(rng.choice([1, OPTIMISTIC_ELEMENTS // size + 1]))
    full = {c: v * copies for c, v in full.items()}
    none_full *= copies
    want = spec.choose(full, none_full, size * copies, counts, repairs)
    for start in range(len(counts)):
        lo, hi, _ = spec.count_window(len(counts), start)
        hist, none, undecided = {}, 0, 0
        for f in fewest:
            if f is None:
                none += 1
            elif f <= hi:
                c = counts[max(f, lo)]
                hist[c] = hist.get(c, 0) + 1
            elif hi == len(counts) - 1:
                none += 1
            else:
                undecided += 1
        hist = {c: v * copies for c, v in hist.items()}
        got = spec.window_choice(hist, none * copies, undecided * copies, (lo, hi), counts,
                                 size * copies, repairs)
        if got is not None:
            assert got.n_moduli == want.n_moduli and got.failing == want.failing, start
            assert got.safe == want.safe, start
            assert got.all_pass in (None, want.all_pass), start
    assert spec.window_choice(full, none_full, 0, None, counts, size * copies,
                              repairs) == want
