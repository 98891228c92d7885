"""Stage 4 (CRT reconstruction and the one rounding) against Python integers."""

import math
import random

import numpy as np

from ozaki_backend.semantics import apply_alpha_beta
import pytest

from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI, MODULI, crt_constants
from ozaki_backend.reference import crt, modgemm
from ozaki_backend.reference.residues import residues


def _residues_of(xs, moduli):
    return np.array([[x % p for x in xs] for p in moduli], dtype=np.int16)[:, None, :]


def _limbs_to_ints(L):
    return [sum(int(L[j, i]) << (crt.LIMB * j) for j in range(crt.NLIMB))
            for i in range(L.shape[1])]


def _correctly_rounded(x: int, e: int) -> float:
    """RN(x * 2^-e): CPython's int true division and int->float are correctly rounded."""
    try:
        return x / (1 << e) if e >= 0 else float(x << -e)
    except OverflowError:
        return math.copysign(math.inf, x)


@pytest.mark.parametrize("n", range(MIN_MODULI, MAX_MODULI + 1))
def test_reconstruct_posts_values_and_extremes(n):
    cc = crt_constants(n)
    H = cc.H
    xs = [0, 1, -1, 123456789, -123456789, H, -H, H - 1, -(H - 1), cc.M // 2 - 1,
          -(cc.M // 2)]  # the two ends of [-M/2, M/2)
    xs = [x for x in xs if -(cc.M // 2) <= x < cc.M // 2]
    rng = random.Random(n)
    xs += [rng.randrange(-(cc.M // 2), cc.M // 2) for _ in range(300)]
    X = crt.reconstruct(_residues_of(xs, cc.moduli), cc.moduli)
    assert _limbs_to_ints(X) == xs


def test_seed_2x2_example_with_signs():
    # Seed post 002: A = [[3, -5], [-7, 11]], B = [[-13, 17], [19, -23]]: negative
    # inner products exercise the signed fold.
    A = np.array([[3.0, -5.0], [-7.0, 11.0]])
    B = np.array([[-13.0, 17.0], [19.0, -23.0]])
    moduli = MODULI[:3]
    c = modgemm.modular_products(residues(A, moduli), residues(B, moduli), moduli)
    X = crt.reconstruct(c, moduli)
    assert _limbs_to_ints(X) == [-134, 166, 300, -372]
    out = crt.reconstruct_round(c, moduli, np.zeros(2, np.int64), np.zeros(2, np.int64))
    np.testing.assert_array_equal(out, A @ B)


def test_round_scaled_matches_correct_rounding():
    rng = random.Random(7)
    xs, es = [], []
    for _ in range(6000):
        b = rng.randint(0, 154)
        x = rng.getrandbits(b) if b else 0
        if rng.random() < 0.3 and x >> 20:
            x = ((x >> 20) << 20) | (1 << 19)        # exact ties at the rounding bit
        if rng.random() < 0.5:
            x = -x
        e = rng.choice([rng.randint(-1100, 1300), rng.randint(1000, 1250),
                        rng.randint(-1000, -900), 0, rng.randint(1070, 1080)])
        xs.append(x)
        es.append(e)
    L = np.array([crt._limbs_of(x) for x in xs], dtype=np.int64).T.copy()
    crt.normalize(L)
    got = crt.round_scaled(L, np.array(es, dtype=np.int64))
    want = np.array([_correctly_rounded(x, e) for x, e in zip(xs, es)])
    np.testing.assert_array_equal(got, want)


def test_subnormal_and_overflow_edges():
    cases = [(1, 1074), (1, 1075), (3, 1076), (2**53 + 1, 1074 + 53), ((1 << 60) - 1, 1134),
             (1, -1023), ((1 << 53) - 1, -971), ((1 << 54) - 1, -971), (5, 1076)]
    L = np.array([crt._limbs_of(x) for x, _ in cases], dtype=np.int64).T.copy()
    got = crt.round_scaled(crt.normalize(L), np.array([e for _, e in cases]))
    want = [_correctly_rounded(x, e) for x, e in cases]
    np.testing.assert_array_equal(got, want)


def test_alpha_beta_follow_blas():
    C = np.array([[1.0, 2.0]])
    C0 = np.array([[np.nan, 4.0]])
    np.testing.assert_array_equal(apply_alpha_beta(C, 2.0, 0.0, C0), [[2.0, 4.0]])
    np.testing.assert_array_equal(apply_alpha_beta(C, 1.0, 0.5, np.ones((1, 2))),
                                  [[1.5, 2.5]])
