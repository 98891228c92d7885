"""Magic-number remainders of the fused kernel: exactness proven at the boundaries.

The kernel (``kernels/modprod.cu``) reduces int32 accumulators with the constants of
:mod:`ozaki_backend.spec.remainders`; these tests check the constants and their ranges with
Python integers (no GPU). ``tests/cuda/test_cuda_modprod.py`` runs the kernel itself at the
largest accumulators.
"""

import re
from pathlib import Path

import pytest

from ozaki_backend.spec import remainders
from ozaki_backend.spec.moduli import MODULI
from ozaki_backend.spec.seed import PRIMES as PHASE22_PRIMES

ALL = sorted(set(MODULI) | set(PHASE22_PRIMES))
KERNEL = Path(__file__).resolve().parents[2] / "kernels" / "modprod.cu"


def test_ranges_fit_the_kernel_arithmetic():
    # One fold interval of the largest products plus a residue stays below 2^30, so
    # u = x + bias is a non-negative 32-bit value below U_MAX.
    assert remainders.X_MAX < 2 ** 30
    assert remainders.U_MAX <= 2 ** 31 + 2 ** 9
    assert all(2 ** 30 <= remainders.bias(p) < 2 ** 30 + p for p in ALL)
    assert all(remainders.bias(p) % p == 0 for p in ALL)
    assert all(remainders.bias(p) - remainders.X_MAX >= 0 for p in ALL)
    assert all(remainders.bias(p) + remainders.X_MAX < remainders.U_MAX for p in ALL)


def test_kernel_constants_match():
    src = KERNEL.read_text()
    fold_k = int(re.search(r"#define OZ_FOLD_K (\d+)", src).group(1))
    assert fold_k == remainders.FOLD_K
    assert fold_k % 128 == 0  # whole k blocks at either block size


@pytest.mark.parametrize("p", ALL)
def test_magic_is_exact_on_the_whole_range(p):
    m, s = remainders.magic(p)
    assert m < 2 ** 32
    assert remainders.magic_exact(p, m, s, remainders.U_MAX)
    # The boundary values: the top of the range, and both sides of the multiples of p
    # nearest to it and to zero, where a too-small multiplier fails first.
    top = remainders.U_MAX - 1
    us = {0, 1, p - 1, p, p + 1, top, top - 1}
    for base in (top - top % p, p * 2 ** 20):
        us.update(base + d for d in (-p - 1, -p, -1, 0, 1, p - 1))
    for u in sorted(v for v in us if 0 <= v < remainders.U_MAX):
        assert ((u * m) >> 32) >> s == u // p, (p, u)


def test_the_exactness_check_can_fail():
    # One shift less than chosen is inexact somewhere below U_MAX for these moduli.
    for p in (255, 253, 241, 127, 97):
        m, s = remainders.magic(p)
        if s == 0:
            continue
        m2 = -(-(2 ** (32 + s - 1)) // p)
        assert not remainders.magic_exact(p, m2, s - 1, remainders.U_MAX)
        # ...and the failure is real: find a witness near a multiple of p at the top.
        top = remainders.U_MAX - 1
        witness = [u for u in range(top - 4 * p, top + 1)
                   if ((u * m2) >> (32 + s - 1)) != u // p]
        assert witness


@pytest.mark.parametrize("p", ALL)
def test_umod_at_the_largest_accumulators(p):
    X = remainders.X_MAX
    xs = [0, 1, -1, X, -X, X - 1, -X + 1, p, -p, 2 ** 29, -(2 ** 29)]
    xs += [X - X % p + d for d in (-1, 0, 1)] + [-(X - X % p) + d for d in (-1, 0, 1)]
    for x in xs:
        if abs(x) <= X:
            assert remainders.umod(x, p) == x % p, (p, x)
    with pytest.raises(ValueError):
        remainders.umod(X + 1, p)


def test_bad_modulus():
    with pytest.raises(ValueError):
        remainders.magic(1)
    with pytest.raises(ValueError):
        remainders.magic(257)
