"""``cuda/complex_stats.py`` (the device engine's scaling and certificate of the complex
scheme, computed from the parts without the embedding) on NumPy arrays against the
reference, which runs the real scheme's statistics on the materialised embedding: every
statistic, every shift and the count are the same integers (``docs/spec.md`` §11.1)."""

import numpy as np
import pytest

from ozaki_backend.cuda import complex_stats as cs
from ozaki_backend.reference import complex as cx
from ozaki_backend.reference import scaling
from ozaki_backend.spec.complex_moduli import MAX_COMPLEX_MODULI
from ozaki_backend.spec.moduli import MIN_MODULI
from ozaki_backend.testing import phi_matrix

from bits import assert_same_bits


def _float_gemm(X, Y):
    return X @ Y.T          # exact: integers below 2^53


def _operands(case, rng):
    m, k, n = 9, 23, 7
    A = phi_matrix((m, k), 2.0, rng) + 1j * phi_matrix((m, k), 2.0, rng)
    B = phi_matrix((k, n), 2.0, rng) + 1j * phi_matrix((k, n), 2.0, rng)
    if case == "structured":
        A.real[:, :5] = 0
        A.imag[:, -4:] = 0
        A[2] = 0
        B.imag[:3] = 0
        B[:, 1] = 0
        B.real[-6:, 3] = 0
        A[4, 7] = 5e-320 + 1e300j
    elif case == "kscaled":
        D = np.ldexp(1.0, rng.integers(-200, 200, k))
        A, B = A * D, B / D[:, None]
    elif case == "graded_parts":      # unrelated scalings of the parts: no count certifies
        A = A.real * np.ldexp(1.0, rng.integers(-60, 61, m))[:, None] \
            + 1j * A.imag * np.ldexp(1.0, rng.integers(-60, 61, m))[:, None]
        B = B.real * np.ldexp(1.0, rng.integers(-60, 61, n)) \
            + 1j * B.imag * np.ldexp(1.0, rng.integers(-60, 61, n))
    return A, B


@pytest.mark.parametrize("mode", ["accurate", "fast"])
@pytest.mark.parametrize("case", ["dense", "structured", "kscaled", "graded_parts"])
def test_port_matches_the_reference(mode, case):
    rng = np.random.default_rng(7)
    A, B = _operands(case, rng)
    parts = [np.ascontiguousarray(x) for x in (A.real, A.imag, B.real, B.imag)]
    ref = cx.equilibrate_parts(*parts)
    got = cs.equilibrate(np, *parts)
    for r, g in zip(ref, got):
        assert_same_bits(g, r)
    rst = scaling.statistics(*cx.embed(*ref), mode)
    gst = cs.statistics(np, *got, mode, _float_gemm)
    for name in cs.EmbeddingStats._fields:
        r, g = getattr(rst, name), getattr(gst, name)
        if r is None:
            assert g is None, name
        elif name == "k":
            assert r == g
        else:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(r), err_msg=name)
    for N in range(MIN_MODULI, MAX_COMPLEX_MODULI + 1):
        rs, rt = cx.shifts(rst, N, mode)
        gs, gt = cs.shifts(np, gst, N, mode)
        np.testing.assert_array_equal(gs, rs)
        np.testing.assert_array_equal(gt, rt)
    assert cs.choose_count(np, gst, mode) == cx.choose_count(rst, mode)
