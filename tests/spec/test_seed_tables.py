"""Layer 1 of the seed's debugging order: the CRT table alone, then CRT on scalars.

The numbers written out here are copied from the seed posts (002: the prefix products
and the nl = 7 coefficients; 000/002: M), not recomputed, so a drift in the table
builder shows up as a mismatch with the posts.
"""

import doctest
import math

import numpy as np
import pytest

from ozaki_backend.spec import seed as T
from ozaki_backend.reference import phase22 as P

# --- as printed in the seed posts -------------------------------------------------
POST_PRIMES = (127, 113, 109, 107, 103, 101, 97)
POST_M = 168897325606883
POST_PREFIX = {1: 127, 2: 14351, 3: 1564259, 4: 167375713, 5: 17239698439,
               6: 1741209542339, 7: 168897325606883}
POST_F7 = (147618922380819, 112099994871825, 134807957135769, 34726552928518,
           96747011755399, 130435558389474, 19153304965729)
POST_OFFSETS = (0, 1, 2, 4, 7, 11, 16, 22)


def test_primes_and_M_match_the_posts():
    assert T.PRIMES == POST_PRIMES
    assert T.M == POST_M == math.prod(POST_PRIMES)
    # all below 128 so residues 0..126 fit a signed int8 unchanged
    assert max(T.PRIMES) < 128
    for i, p in enumerate(T.PRIMES):
        assert all(math.gcd(p, q) == 1 for q in T.PRIMES[i + 1:])


def test_prefix_products_match_the_posts():
    assert len(T.M_PREFIX) == 8
    assert T.M_PREFIX[0] == 1  # reserved: empty product
    for nl, Mn in POST_PREFIX.items():
        assert T.M_PREFIX[nl] == Mn == math.prod(POST_PRIMES[:nl])


def test_flat_table_layout_and_nl7_coefficients():
    assert T.coeff_offsets == POST_OFFSETS
    assert len(T.coeffs_flat) == 29
    assert T.coeffs_flat[0] == 0  # reserved slot
    off = T.coeff_offsets[7]
    assert T.coeffs_flat[off:off + 7] == POST_F7
    # the slices for consecutive nl tile the table exactly, after the reserved slot
    for nl in range(1, 8):
        assert T.coeff_offsets[nl] == 1 + nl * (nl - 1) // 2
        assert T.coeffs_flat[T.coeff_offsets[nl]:T.coeff_offsets[nl] + nl] == \
            T.crt_coefficients(nl)


@pytest.mark.parametrize("nl", range(1, 8))
def test_coefficients_are_crt_building_blocks(nl):
    Mn = T.M_PREFIX[nl]
    f = T.crt_coefficients(nl)
    assert len(f) == nl
    for i, fi in enumerate(f):
        assert 0 <= fi < Mn
        for j, pj in enumerate(T.PRIMES[:nl]):
            assert fi % pj == (1 if i == j else 0)


def test_nl_guard():
    for bad in (0, 8, -1, 7.0, True):
        with pytest.raises(ValueError):
            T.crt_coefficients(bad)


def test_seed_day5_example_3_5_7_gives_23():
    # run the docstring example too (doc-test style check of the algorithm)
    res = doctest.testmod(T)
    assert res.attempted >= 2 and res.failed == 0
    f = T.coefficients_for((3, 5, 7))
    assert f == (70, 21, 15)
    assert (2 * f[0] + 3 * f[1] + 2 * f[2]) % 105 == 23


HALF = (T.M - 1) // 2  # largest |x| the full 7-prime set reconstructs (M is odd)
SCALARS = [0, 1, -1, 123456789, -123456789, T.M // 2 - 1, -(T.M // 2 - 1), HALF, -HALF]


@pytest.mark.parametrize("x", SCALARS)
def test_scalar_crt_every_nl_that_holds_x(x):
    used = 0
    for nl in range(1, 8):
        Mn = T.M_PREFIX[nl]
        if 2 * abs(x) >= Mn:
            continue
        used += 1
        r = [x % p for p in T.PRIMES]  # Python % lands in [0, p) for negative x too
        assert T.reconstruct_int(r, nl) == x
        # the vectorised engine stage, on a 1-element array
        c = np.array(r, dtype=np.int64).reshape(7, 1)
        assert P.crt_reconstruct_nl(c, nl).tolist() == [x]
    assert used >= 1
    # and a prefix too small wraps around: the fold is doing real work
    too_small = [nl for nl in range(1, 8) if 2 * abs(x) >= T.M_PREFIX[nl]]
    for nl in too_small:
        r = [x % p for p in T.PRIMES]
        assert T.reconstruct_int(r, nl) != x


def test_vectorised_crt_mixed_nl_map():
    # many x at once, each with its own smallest valid nl (as the tile map does)
    rng = np.random.default_rng(7)
    xs = [0, 1, -1, 63, -63, 64, 7175, -7175, 7176, HALF, -HALF]
    xs += [int(v) for v in rng.integers(-HALF, HALF, 40, endpoint=True)]
    nls = [min(nl for nl in range(1, 8) if 2 * abs(x) < T.M_PREFIX[nl]) for x in xs]
    c = np.array([[x % p for x in xs] for p in T.PRIMES], dtype=np.int64)
    got = P.crt_reconstruct_nl(c, np.array(nls))
    assert got.tolist() == xs
    # the same with every element forced to nl = 7
    assert P.crt_reconstruct_nl(c, 7).tolist() == xs


def test_crt_rejects_out_of_range_residues_and_nl():
    c = np.zeros((7, 3), dtype=np.int64)
    c[0, 1] = 127
    with pytest.raises(ValueError):
        P.crt_reconstruct_nl(c, 7)
    with pytest.raises(ValueError):
        P.crt_reconstruct_nl(np.zeros((7, 3), dtype=np.int64), 0)
    with pytest.raises(ValueError):
        P.crt_reconstruct_nl(np.zeros((3, 3), dtype=np.int64), 4)
    with pytest.raises(ValueError):
        T.reconstruct_int([-3, 0, 0], 3)  # the "% of a negative" pitfall


def test_k_chunk_limit_is_the_seeds_bound():
    # K * 2^17 * 2^17 < M/2 holds at 4096 and fails at the next power of two
    assert 2 * T.K_CHUNK_MAX * 2 ** 34 < T.M
    assert 2 * (2 * T.K_CHUNK_MAX) * 2 ** 34 >= T.M


def test_barrett_and_magic_constants():
    assert T.BARRETT_MU == 109218 == 2 ** 64 // T.M
    # the kernel's weighted sum stays below (1 + 126) * M before each reduction
    rng = np.random.default_rng(3)
    xs = [0, 1, T.M - 1, T.M, T.M + 1, 127 * T.M - 1, 2 ** 64 - 1]
    xs += [int(v) for v in rng.integers(0, 2 ** 63, 200, dtype=np.int64)]
    for x in xs:
        q = (x * T.BARRETT_MU) >> 64
        r = x - q * T.M
        if r >= T.M:
            r -= T.M
        assert r == x % T.M
    bound = 126 * 126 * T.K_CHUNK_MAX
    for p, magic in zip(T.PRIMES, T.MAGIC_U32):
        assert magic == 2 ** 32 // p
        xs = [0, 1, p - 1, p, p + 1, bound, bound - 1, 2 ** 32 - 1]
        xs += [j * p + d for j in (1000, 65535, bound // p) for d in (-1, 0, 1)]
        for x in xs:
            q = (x * magic) >> 32
            r = x - q * p
            if r >= p:
                r -= p
            assert r == x % p, (p, x)
