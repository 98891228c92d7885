"""Stage 2 (residues), checked element by element against Python integers."""

import numpy as np
import pytest

from ozaki_backend.spec.moduli import MODULI
from ozaki_backend.reference.residues import residues


def _sym(x: int, p: int) -> int:
    r = x % p
    return r - p if r > (p - 1) // 2 else r


# The seed's hand-picked values, their negatives, and integers far beyond 2^53
# (held exactly in float64 as mantissa * 2^q).
VALUES = [0, 1, -1, 127, -127, 128, -128, 255, -255, 256, -256, 2**31 - 1, -(2**31),
          2**53 - 1, -(2**53 - 1), 2**53, 2**53 + 2, 3 * 2**60, -(5 * 2**99 + 2**47),
          (2**53 - 1) * 2**117]


@pytest.mark.parametrize("p", MODULI)
def test_residue_of_each_value_matches_python_int(p):
    x = np.array([float(v) for v in VALUES])
    r = residues(x[None, :], (p,))[0, 0]
    for v, got in zip(VALUES, r):
        assert int(got) == _sym(int(float(v)), p), (v, p)


@pytest.mark.parametrize("p", MODULI)
def test_symmetric_range_and_int8(p):
    rng = np.random.default_rng(p)
    x = np.trunc(rng.standard_normal((7, 9)) * 2.0 ** rng.integers(0, 150, (7, 9)))
    r = residues(x, (p,))[0]
    assert r.dtype == np.int8
    lo, hi = -(p // 2), (p - 1) // 2
    assert r.min() >= lo and r.max() <= hi
    for v, got in zip(x.ravel(), r.ravel()):
        assert int(got) == _sym(int(v), p)


def test_all_planes_written_in_one_pass():
    x = np.array([[3.0, -5.0], [-7.0, 11.0]])
    r = residues(x, MODULI)
    assert r.shape == (len(MODULI), 2, 2)
    for l, p in enumerate(MODULI):
        assert [int(v) for v in r[l].ravel()] == [_sym(v, p) for v in (3, -5, -7, 11)]
