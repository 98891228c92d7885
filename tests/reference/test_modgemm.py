"""Stage 3 (one modulus at a time): residue GEMMs against int64 arithmetic."""

import numpy as np
import pytest

from ozaki_backend.spec.moduli import MODULI
from ozaki_backend.reference import modgemm
from ozaki_backend.reference.residues import residues


@pytest.mark.parametrize("p", [256, 255, 173])
@pytest.mark.parametrize("k", [1, 31, 1024, 1025, 3000])
def test_one_modulus_against_int64(p, k):
    rng = np.random.default_rng(k + p)
    lo, hi = -(p // 2), (p - 1) // 2
    RA = rng.integers(lo, hi + 1, (1, 9, k)).astype(np.int8)
    RB = rng.integers(lo, hi + 1, (1, k, 7)).astype(np.int8)
    got = modgemm.modular_products(RA, RB, (p,))[0]
    want = (RA[0].astype(np.int64) @ RB[0].astype(np.int64)) % p
    np.testing.assert_array_equal(got, want)


def test_extreme_residues_stay_exact_across_fp32_chunks():
    # All entries -128 (only p = 256 reaches it): every product is 2^14, the largest
    # possible, so each float32 chunk sum reaches exactly 2^24.
    k = 3 * modgemm.FP32_KCHUNK + 5
    RA = np.full((1, 2, k), -128, dtype=np.int8)
    RB = np.full((1, k, 3), -128, dtype=np.int8)
    got = modgemm.modular_products(RA, RB, (256,))[0]
    assert (got == (k * 2**14) % 256).all()
    RB[0, :, 1] = 127
    got = modgemm.modular_products(RA, RB, (255,))[0]
    assert got[0, 1] == (-128 * 127 * k) % 255


def test_debug_matrix_of_the_seed():
    # The seed's recognisable pattern A[row, kk] = 1000*row + kk, through residues.
    m, k, n = 5, 40, 3
    A = (1000.0 * np.arange(m)[:, None] + np.arange(k)[None, :])
    B = (1000.0 * np.arange(k)[:, None] + np.arange(n)[None, :])
    RA, RB = residues(A, MODULI), residues(B, MODULI)
    c = modgemm.modular_products(RA, RB, MODULI)
    exact = A.astype(np.int64) @ B.astype(np.int64)
    for l, p in enumerate(MODULI):
        np.testing.assert_array_equal(c[l], exact % p)


def test_floor_mod_is_exact_for_large_integers():
    rng = np.random.default_rng(0)
    C = np.trunc(rng.uniform(-2.0**43, 2.0**43, 10000))
    for p in MODULI:
        got = modgemm.floor_mod(C, p)
        np.testing.assert_array_equal(got, C.astype(np.int64) % p)
