"""The complex scheme's moduli table and constants (``docs/spec.md`` §11.2)."""

import math

import pytest

from ozaki_backend.spec.complex_moduli import (COMPLEX_MODULI, MAX_COMPLEX_MODULI, admissible,
                                               complex_crt_constants, complex_guaranteed_bits,
                                               complex_moduli_for_bits, pairwise_coprime,
                                               sqrt_minus_one)
from ozaki_backend.spec.moduli import MIN_MODULI


def _prime_factors(m):
    out, p = set(), 2
    while p * p <= m:
        while m % p == 0:
            out.add(p)
            m //= p
        p += 1
    if m > 1:
        out.add(m)
    return out


def test_every_modulus_has_a_root_of_minus_one_and_fits_int8():
    for m in COMPLEX_MODULI:
        assert m % 2 == 1 and 3 <= m <= 255       # symmetric residues in [-127, 127]
        assert all(p % 4 == 1 for p in _prime_factors(m))
        r = sqrt_minus_one(m)
        assert (r * r + 1) % m == 0 and 1 <= r < m
        assert all((x * x + 1) % m for x in range(1, r))      # the smallest root


def test_admissible_matches_the_prime_factor_rule():
    for m in range(1, 300):
        rule = 3 <= m <= 255 and m % 2 == 1 and all(p % 4 == 1 for p in _prime_factors(m))
        assert admissible(m) == rule, m
    for m in (3, 7, 9, 15, 21, 4, 12):
        with pytest.raises(ValueError):
            sqrt_minus_one(m)


def test_table_is_pairwise_coprime_and_greedy():
    assert pairwise_coprime(COMPLEX_MODULI)
    assert len(COMPLEX_MODULI) == MAX_COMPLEX_MODULI == 22
    # Greedy: the largest admissible value coprime with everything chosen before.
    chosen = []
    for _ in range(MAX_COMPLEX_MODULI):
        chosen.append(max(m for m in range(3, 256) if admissible(m)
                          and all(math.gcd(m, c) == 1 for c in chosen)))
    assert tuple(chosen) == COMPLEX_MODULI


def test_crt_constants_are_exact():
    for n in (MIN_MODULI, 7, MAX_COMPLEX_MODULI):
        cc = complex_crt_constants(n)
        assert cc.M == math.prod(COMPLEX_MODULI[:n]) and cc.M % 2 == 1
        assert cc.H == (cc.M - 1) // 2 - 1
        assert cc.H_f <= cc.H and math.nextafter(cc.H_f, math.inf) > cc.H
        for l, (p, w) in enumerate(zip(cc.moduli, cc.weights)):
            assert w % p == 1
            assert all(w % q == 0 for q in cc.moduli if q != p)
            assert (2 * cc.inv2[l]) % p == 1
            assert (2 * cc.roots[l] * cc.inv2r[l]) % p == 1
        for l in range(1, n):
            assert (cc.prefix[l] * cc.garner_inv[l]) % cc.moduli[l] == 1
    with pytest.raises(ValueError):
        complex_crt_constants(MAX_COMPLEX_MODULI + 1)
    with pytest.raises(ValueError):
        complex_crt_constants(1)


def test_recombination_identity_on_all_residue_pairs():
    """(P1 + P2)/2 and (P1 - P2)/(2r) invert the map (x, y) -> (x + r y, x - r y)."""
    cc = complex_crt_constants(MAX_COMPLEX_MODULI)
    for l, p in enumerate(cc.moduli):
        r = cc.roots[l]
        for x in range(0, p, 7):
            for y in range(0, p, 5):
                p1, p2 = (x + r * y) % p, (x - r * y) % p
                assert ((p1 + p2) * cc.inv2[l]) % p == x
                assert ((p1 - p2) * cc.inv2r[l]) % p == y


def test_bits_rule_covers_2k_terms():
    for k in (1, 100, 8192, 16384, 65536):
        for bits in (20, 40, 51):
            n = complex_moduli_for_bits(bits, k)
            H = complex_crt_constants(n).H
            if complex_guaranteed_bits(n, k) >= bits:
                assert H >= 2 * k * 4 ** bits
                if n > MIN_MODULI:
                    assert complex_crt_constants(n - 1).H < 2 * k * 4 ** bits
    assert complex_moduli_for_bits(51, 8192) == 16
    assert complex_moduli_for_bits(51, 16384) == 17
