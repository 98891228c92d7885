"""The certificate's formulas (:mod:`ozaki_backend.spec.certificate`,
``docs/spec.md`` §10) and its rule (:func:`ozaki_backend.spec.rules.certificate_factor`):
the bound GEMM's two bounds of ``|A||B|``, the target's relation to ``gamma_k``, and
the structural zeros. The formulas' inputs are the CPU reference's statistics; the
reference's own certificate stage is in ``tests/reference/test_certificate.py``."""

from fractions import Fraction

import numpy as np
import pytest

from ozaki_backend.reference import certificate, scaling
from ozaki_backend.spec import certificate as spec
from ozaki_backend.spec.rules import (CERT_C, CERT_DIV, CERT_SMALL, CERT_SMALL_DIV,
                                       certificate_factor)
from ozaki_backend.testing import exact_matmul, phi_matrix

U = 2.0 ** -53

@pytest.mark.parametrize("phi", [-1.0, 1.0, 4.0])
def test_bound_gemm_brackets_the_absolute_product(phi):
    """2^(E+F-14) P <= |A||B| <= 2^(E+F-14) U, element by element (exact oracle)."""
    rng = np.random.default_rng(int(10 * phi) + 20)
    A, B = phi_matrix((12, 90), phi, rng), phi_matrix((90, 9), phi, rng)
    A[3] = 0.0
    B[:, 2] = 0.0
    st_ = scaling.statistics(A, B, "accurate")
    d = certificate.data(st_)
    AB = exact_matmul(np.abs(A), np.abs(B))
    L = spec.lower_product(d)
    Up = spec.upper_product(d)
    assert (L <= AB).all()
    assert (AB <= Up * (1 + 2 * U)).all()          # AB itself is rounded: half an ulp
    assert (Up[3] == 0).all() and (Up[:, 2] == 0).all()


def test_target_implies_the_dgemm_bound():
    """(c + 1 + c u) u <= gamma_k: a certified product (method error c u |A||B|, the
    final rounding u |C| on top) is within every correct DGEMM's bound gamma_k |A||B|
    (docs/spec.md §10.2), at every k and output size; exact rational arithmetic."""
    for k in list(range(1, 80)) + [255, 256, 1000, 4096, 8192, 2 ** 20, 2 ** 30]:
        for elements in (1, CERT_SMALL - 1, CERT_SMALL, 10 ** 8):
            c = Fraction(certificate_factor(k, elements))
            gamma = Fraction(k) * Fraction(U) / (1 - Fraction(k) * Fraction(U))
            assert (c + 1 + c * Fraction(U)) * Fraction(U) <= gamma, (k, elements)


def test_target_factor_shape():
    """c = min(k - 1, CERT_C, isqrt(k) / d): d = CERT_DIV for outputs of CERT_SMALL
    elements and more, CERT_SMALL_DIV below; a multiple of 1/32 with at most ten
    significant bits (so c * P and c * u are the same IEEE operation on both engines)."""
    assert certificate_factor(1, 10 ** 6) == 0 and certificate_factor(0, 1) == 0
    assert certificate_factor(10 ** 6, 10 ** 6) == CERT_C
    assert certificate_factor(4096, CERT_SMALL) == 64 / CERT_DIV
    assert certificate_factor(4096, CERT_SMALL - 1) == 64 / CERT_SMALL_DIV
    assert certificate_factor(2, 10 ** 6) == 1 / CERT_DIV
    for k in range(1, 5000, 7):
        for elements in (10, 10 ** 6):
            c = certificate_factor(k, elements)
            assert c <= max(k - 1, 0) and c <= CERT_C
            q = Fraction(c) * 32
            assert q.denominator == 1 and int(q).bit_length() <= 10
            # monotone in k: a longer product is never held to a tighter target
            assert certificate_factor(k + 1, elements) >= c


def test_structural_zeros_are_exact():
    """Triangular factors: elements whose k ranges do not meet are certified exact."""
    rng = np.random.default_rng(7)
    L = np.tril(rng.standard_normal((30, 30)))
    Uu = np.triu(rng.standard_normal((30, 30)))
    st_ = scaling.statistics(Uu, L, "accurate")
    d = certificate.data(st_)
    ov = spec.overlap(d)
    i, j = np.indices(ov.shape)
    np.testing.assert_array_equal(ov, np.maximum(i, j) <= 29)   # U @ L: every pair meets
    st2 = scaling.statistics(L, Uu, "accurate")
    ov2 = spec.overlap(certificate.data(st2))
    np.testing.assert_array_equal(ov2, np.ones_like(ov2))
    st3 = scaling.statistics(Uu, Uu, "accurate")              # U @ U: zero below
    np.testing.assert_array_equal(spec.overlap(certificate.data(st3)), i <= j)


def test_isqrt_is_exact():
    """The element-wise integer square root both engines use (spec §10.2)."""
    xs = np.array([0, 1, 2, 3, 4, 8, 9, 15, 16, 17, 2 ** 31 - 1, 2 ** 40 + 5,
                   (2 ** 26 - 1) ** 2, (2 ** 26 - 1) ** 2 - 1, 2 ** 51 - 1], dtype=np.int64)
    import math
    np.testing.assert_array_equal(spec.isqrt(xs), [math.isqrt(int(x)) for x in xs])


def test_factor_follows_each_elements_overlap():
    """c_ij is certificate_factor of the number of k where row i of A and column j of B
    may both be non-zero: triangular operands hold short sums to a tighter target."""
    rng = np.random.default_rng(11)
    k = 300
    A = np.triu(rng.standard_normal((k, k)))      # row i non-zero on [i, k)
    B = np.tril(rng.standard_normal((k, k)))      # column j non-zero on [j, k)
    d = certificate.data(scaling.statistics(A, B, "accurate"))
    c = spec.factor(d)
    i, j = np.indices((k, k))
    ke = k - np.maximum(i, j)
    expected = np.array([[certificate_factor(int(x), k * k) for x in row] for row in ke])
    np.testing.assert_array_equal(c, expected)
    assert c[0, 0] == certificate_factor(k, k * k) and c[-1, -1] == 0.0
