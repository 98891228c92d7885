"""The float64 residue kernel (``kernels/residues.cu``), bitwise against the reference.

The kernel reduces ``A' = trunc(x 2^s)`` modulo each modulus with float64 arithmetic
(digits of 43 bits, ``t = fma(y, fl(1/p), 1.5 2^52)``, low words as integers; the proof
is in the kernel's header) and falls back to 32-bit integer arithmetic beyond 2^128 or
for ``|s| > 1600``. Two kinds of tests:

* CPU only (run everywhere): the constants the proof relies on (the table of ``fl(1/p)``
  in the source, the inequality ``2^52 |fl(1/p) - 1/p| < 1/(2p)``), and an emulation of
  the kernel's float64 steps in exact rational arithmetic (each fma/mul/sub rounded once,
  to nearest or toward zero, as the hardware does), run on the boundary values: the
  emulated bytes must equal the symmetric residues of the Python integers, and the
  intermediate claims of the proof (exact digits, ``|y| < 2^52``, ``t = 1.5 2^52 + n``)
  are asserted on the way. The emulation also replays the kernel's per-warp choice of
  the digit count on the GPU tests' inputs.
* GPU (marked ``gpu``): the CUDA residues against ``ozaki_backend.reference.residues``
  on adversarial inputs, one magnitude class per matrix so that every path of the
  kernel (1, 2, 3 digits, integer fallback) runs on whole warps, and mixed.
"""

import math
import re
import struct
from fractions import Fraction

import numpy as np
import pytest

from ozaki_backend.cuda.loader import read_source
from ozaki_backend.spec.moduli import MODULI
from ozaki_backend.reference import residues as rres
from ozaki_backend.reference import scaling as rsc

DIGIT = 43          # OZ_DIGIT
SMAX = 1600         # OZ_FP_SMAX
MAGIC = 1.5 * 2.0 ** 52
M32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------------
# Constants of the kernel source

def _inv_table():
    src = read_source("residues.cu")
    body = src[src.index("oz_inv_tab[OZ_MAX_MODULI] = {"):]
    body = body[:body.index("};")]
    return [float.fromhex(h) for h in re.findall(r"0x[0-9a-fA-Fp.+-]+", body)]


def _define(name):
    src = read_source("residues.cu")
    return int(re.search(rf"#define {name} (\d+)", src).group(1))


def _sym(v: int, p: int) -> int:
    r = v % p
    return r - p if r > (127 if p == 256 else (p - 1) // 2) else r


def test_kernel_constants_match_the_proof():
    assert _define("OZ_DIGIT") == DIGIT and _define("OZ_FP_SMAX") == SMAX


def test_inverse_table_is_round_to_nearest_of_one_over_p():
    inv = _inv_table()
    assert len(inv) == len(MODULI)
    for p, v in zip(MODULI, inv):
        assert v == 1.0 / p, (p, v.hex(), (1.0 / p).hex())     # IEEE division: RN


@pytest.mark.parametrize("p", MODULI[1:])
def test_reciprocal_error_leaves_the_quotient_exact(p):
    """The header's step (2): |y| < 2^52 keeps y fl(1/p) within 1/(2p) of y/p."""
    inv = Fraction(1.0 / p)
    err = abs(inv - Fraction(1, p))
    assert Fraction(1, 256) < Fraction(1, p) < Fraction(1, 128)
    assert err <= Fraction(1, 2 ** 61)
    assert 2 ** 52 * err < Fraction(1, 2 * p)
    # and the magic constant's binade holds every quotient: |y inv| < 2^45 <= 2^51
    assert 2 ** 52 * (inv + err) < 2 ** 45


@pytest.mark.parametrize("p", MODULI[1:])
def test_digit_weights_are_symmetric_residues(p):
    for k in (1, 2):
        c = _sym(pow(2, DIGIT * k, p), p)
        assert abs(c) <= (p - 1) // 2 <= 127
    # the y bounds of step (1)
    h = (p - 1) // 2
    assert (2 ** DIGIT - 1) * (1 + h) < 2 ** 50
    assert (2 ** DIGIT - 1) + h * ((2 ** DIGIT - 1) + (2 ** 42 - 1)) < 2 ** 51


# ---------------------------------------------------------------------------------
# Exact emulation of the float64 path

def _rn(v: Fraction) -> float:
    return v.numerator / v.denominator            # int / int: correctly rounded (RN-even)


def _rz(v: Fraction) -> float:
    r = _rn(v)
    if abs(Fraction(r)) > abs(v):
        r = math.nextafter(r, 0.0)
    return r


def _fma_rn(a, b, c):
    return _rn(Fraction(a) * Fraction(b) + Fraction(c))


def _fma_rz(a, b, c):
    return _rz(Fraction(a) * Fraction(b) + Fraction(c))


def _bits(d: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", d))[0]


def _lo(d):
    return _bits(d) & M32


def _hi(d):
    return _bits(d) >> 32


def _pow2d(e: int, neg: bool = False) -> float:
    assert -1022 <= e <= 1023                      # a normal double (oz_pow2d)
    v = math.ldexp(1.0, e)
    return -v if neg else v


def kernel_tier(xs, s: int) -> int:
    """The kernel's path for one thread's elements (before the warp vote)."""
    hmax = max((_hi(float(x)) & 0x7FFFFFFF) for x in xs)
    b = max(hmax >> 20, 1) - 1022 + s
    if s < -SMAX or s > SMAX:
        return 3
    return 0 if b <= 52 else 1 if b <= 2 * DIGIT else 2 if b <= 128 else 3


def emulate_digits(x: float, s: int, nd: int):
    """oz_digits: (d, w) with the proof's claims asserted."""
    s1 = s >> 1
    s2 = s - s1
    p1 = _pow2d(s1)
    sc = [_pow2d(s2 - DIGIT * k) for k in range(nd)]
    isc = [_pow2d(DIGIT * k - s2, True) for k in range(nd)]
    xhi = _hi(x)
    sm = M32 if xhi >> 31 else 0
    m = -(2.0 ** 52) if xhi >> 31 else 2.0 ** 52
    u = _rn(Fraction(x) * Fraction(p1))
    d, w = [0.0] * nd, [0] * nd
    for k in range(nd - 1, -1, -1):
        a = _fma_rz(u, sc[k], m)
        d[k] = _rn(Fraction(a) - Fraction(m))
        assert Fraction(d[k]) == Fraction(a) - Fraction(m)          # exact
        assert d[k] == int(d[k]) and abs(d[k]) < 2.0 ** (52 if nd == 1 else DIGIT)
        w[k] = ((_lo(a) ^ sm) - sm) & M32
        assert w[k] == int(d[k]) & M32
        if k > 0:
            exact = Fraction(d[k]) * Fraction(isc[k]) + Fraction(u)
            u = _rn(exact)
            assert Fraction(u) == exact                              # exact
    # the digits are those of trunc(x 2^s)
    v = Fraction(x) * Fraction(2) ** s
    A = math.trunc(v)
    assert sum(int(d[k]) << (DIGIT * k) for k in range(nd)) == A
    return d, w


def emulate_residue(p: int, inv: float, d, w) -> int:
    """oz_fp_residue: the int8 the kernel stores."""
    if p == 256:
        r = w[0]
    else:
        y, yw = d[0], w[0]
        for k in range(1, len(d)):
            c = _sym(pow(2, DIGIT * k, p), p)
            y2 = _fma_rn(d[k], float(c), y)
            assert Fraction(y2) == Fraction(d[k]) * c + Fraction(y)     # exact
            y = y2
            yw = (yw + w[k] * c) & M32
        assert abs(y) < 2.0 ** 52 and yw == int(y) & M32
        t = _fma_rn(y, inv, MAGIC)
        n = int(t - MAGIC)
        yi = int(y)
        assert n == (yi + (p - 1) // 2) // p                # the nearest integer to y/p
        assert _lo(t) == n & M32
        r = (yw - _lo(t) * p) & M32
    b = r & 0xFF
    return b - 256 if b > 127 else b


def emulate_kernel_value(x: float, s: int, nd: int, moduli=MODULI):
    d, w = emulate_digits(x, s, nd)
    return [emulate_residue(p, inv, d, w) for p, inv in zip(moduli, _inv_table())]


def _exact(x: float, s: int) -> int:
    return math.trunc(Fraction(x) * Fraction(2) ** s)


def _with_residue(e: int, p: int, target: int, sign: int) -> float:
    """sign M, M the largest 53-bit mantissa with sign M 2^e ≡ target (mod p)."""
    for M in range((1 << 53) - 1, (1 << 53) - 1 - 4 * p, -1):
        if (sign * M * pow(2, e, p)) % p == target % p:
            return float(sign * M)
    raise AssertionError


def _boundary_cases():
    """(x, s, minimal tier): values at every boundary of the proof."""
    cases = []
    for sign in (1, -1):
        for v in (0, 1, 2, 127, 128, 255, 256, 2 ** 31 - 1, 2 ** 32, 2 ** 32 + 1,
                  2 ** 43 - 1, 2 ** 43, 2 ** 51 - 1, 2 ** 51, 2 ** 51 + 1, 2 ** 52 - 1):
            cases.append((float(sign * v), 0))                         # tier 0 integers
        for v in (2 ** 52, 2 ** 52 + 1, 2 ** 53 - 1):
            cases.append((float(sign * v), 0))                         # 53 bits: tier 1
        for e in (11, 33, 34, 53, 64, 75, 76, 127 - 52):              # mant 2^e up to 2^128
            cases.append((float(sign * ((1 << 53) - 1)), e))
        for e in range(128):
            cases.append((float(sign), e))                             # powers of two
        # fractions: trunc toward zero
        for x, s in ((2.5, 0), (0.75, 1), (2 ** 52 - 0.5, 0), (2 ** 51 + 0.5, 0),
                     (1.999999999999999, 52), (0.9999999999999999, 0)):
            cases.append((sign * x, s))
        # subnormals and tiny values with large shifts (the u underflow case)
        for x, s in ((5e-324, 1074), (5e-324, 1073), (5e-324, 1074 + 51),
                     (5e-324, 1074 + 52), (1e-310, 1080), (2.2250738585072014e-308, 1022),
                     (2.2250738585072014e-308, 1021 + 52), (1e-300, 1600), (3e-320, 1600),
                     (1.7976931348623157e308, -1600), (1.7976931348623157e308, -1000),
                     (1.7976931348623157e308, -1024 + 52), (1e308, -1020 + 60),
                     (1.0, -1600), (1.0, -1), (1.0, -52), (1.5, 1600 - 1600)):
            cases.append((sign * x, s))
        cases.append((sign * 0.0, 0))
        cases.append((sign * 0.0, 1600))
        cases.append((sign * 0.0, -1600))
    return cases


def _residue_boundary_cases():
    """Integers y ≡ ±(p-1)/2, 0, ±1 (mod p): the quotient closest to a half-integer, at
    the largest magnitudes of each digit count."""
    cases = []
    for p in MODULI[1:]:
        h = (p - 1) // 2
        for target in (h, -h, 0, 1, -1):
            for sign in (1, -1):
                # below 2^52 (one digit): y = n p + target near 2^52
                n = ((1 << 52) - 1 - sign * target) // p
                y = sign * (n * p) + target
                assert abs(y) < 2 ** 52 and y % p == target % p
                cases.append((float(y), 0))
                # 53-bit mantissas at shifts e (two and three digits)
                for e in (0, 11, 33, 60, 75):
                    cases.append((_with_residue(e, p, target, sign), e))
    return cases


def _check(x, s):
    exact = _exact(x, s)
    need = kernel_tier([x], s)
    assert need < 3, (x, s)
    for nd in range(need + 1, 4):                  # the warp may vote any higher count
        got = emulate_kernel_value(x, s, nd)
        assert got == [_sym(exact, p) for p in MODULI], (x, s, nd)


def test_emulated_float64_path_on_boundary_values():
    n_fp = 0
    for x, s in _boundary_cases():
        if kernel_tier([x], s) == 3:            # the integer path (GPU tests)
            continue
        _check(x, s)
        n_fp += 1
    assert n_fp > 300


def test_emulated_float64_path_at_residue_boundaries():
    for x, s in _residue_boundary_cases():
        _check(x, s)


def test_emulated_float64_path_random():
    rng = np.random.default_rng(2024)
    mant = rng.integers(-(2 ** 53) + 1, 2 ** 53, size=400)
    e = rng.integers(-60, 76, size=400)
    s = rng.integers(-70, 70, size=400)
    for mi, ei, si in zip(mant, e, s):
        x = math.ldexp(float(mi), int(ei))
        if kernel_tier([x], int(si)) < 3:
            _check(x, int(si))


def test_tier_bound_is_an_upper_bound():
    """|trunc(x 2^s)| < 2^b for the kernel's b, also for subnormals and zero."""
    for x, s in _boundary_cases():
        hmax = _hi(x) & 0x7FFFFFFF
        b = max(hmax >> 20, 1) - 1022 + s
        assert abs(_exact(x, s)) < Fraction(2) ** b


# ---------------------------------------------------------------------------------
# GPU: the CUDA residues against the reference

def _reference(Aint, N):
    return rres.residues(Aint, MODULI[:N])


def _int_matrix(kind, rng, rows=40, cols=100):
    """Exact integers held in float64, one magnitude class (one kernel path) per kind."""
    if kind == "lt2^52":
        mant = rng.integers(-(2 ** 52) + 1, 2 ** 52, size=(rows, cols)).astype(np.float64)
        mant[0, :8] = [2 ** 52 - 1, -(2 ** 52 - 1), 0.0, -0.0, 1.0, -1.0, 2 ** 51, -(2 ** 51)]
        return mant
    if kind == "lt2^86":
        mant = rng.integers(-(2 ** 53) + 1, 2 ** 53, size=(rows, cols)).astype(np.float64)
        A = np.ldexp(mant, rng.integers(0, 33, size=mant.shape))
        A[0, :6] = [2 ** 53 - 1, -(2 ** 53 - 1), (2 ** 53 - 1) * 2.0 ** 32, 2.0 ** 85, -0.0, 1.0]
        return A
    if kind == "lt2^128":
        mant = rng.integers(-(2 ** 53) + 1, 2 ** 53, size=(rows, cols)).astype(np.float64)
        A = np.ldexp(mant, rng.integers(0, 75, size=mant.shape))
        A[0, :5] = [(2 ** 53 - 1) * 2.0 ** 74, -(2.0 ** 127), 2.0 ** 86, -(2.0 ** 64), 3.0]
        return A
    if kind == "huge":
        mant = rng.integers(-(2 ** 53) + 1, 2 ** 53, size=(rows, cols)).astype(np.float64)
        A = np.ldexp(mant, rng.integers(0, 900, size=mant.shape))
        A[0, :4] = [2.0 ** 128, -(2.0 ** 1000), 1.7976931348623157e308, 5.0]
        return A
    # mixed: every class in one matrix (warps mostly on the wider paths)
    parts = [_int_matrix(k, rng, rows, cols) for k in ("lt2^52", "lt2^86", "lt2^128", "huge")]
    pick = rng.integers(0, 4, size=(rows, cols))
    return np.choose(pick, parts)


def _adversarial_integers():
    """Integers at the residue boundaries of every modulus, below and above 2^52."""
    vals = []
    for x, s in _residue_boundary_cases():
        vals.append(math.ldexp(x, s))
    for sign in (1.0, -1.0):
        vals += [sign * (2.0 ** 53 - 1), sign * 2.0 ** 53, sign * (2.0 ** 52 - 1), sign * 0.0]
        vals += [sign * 2.0 ** e for e in range(0, 200, 3)]
    return np.array(vals)


KINDS = ["lt2^52", "lt2^86", "lt2^128", "huge", "mixed"]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("N", [2, 15, 16, 20])
def test_gpu_residues_match_reference_per_path(kind, N):
    cupy = pytest.importorskip("cupy")
    from ozaki_backend.cuda import residues

    rng = np.random.default_rng(100 * KINDS.index(kind) + N)
    Aint = _int_matrix(kind, rng)
    ref = _reference(Aint, N)
    for view in (Aint, np.asfortranarray(Aint)):
        got = residues.residues(cupy.asarray(view), MODULI[:N]).get()
        np.testing.assert_array_equal(got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("N", [2, 15, 20])
def test_gpu_residues_adversarial_integers(N):
    cupy = pytest.importorskip("cupy")
    from ozaki_backend.cuda import residues

    vals = _adversarial_integers()
    cols = 96
    vals = np.concatenate([vals, np.zeros((-vals.size) % cols)])
    Aint = vals.reshape(-1, cols)
    ref = _reference(Aint, N)
    got = residues.residues(cupy.asarray(Aint), MODULI[:N]).get()
    np.testing.assert_array_equal(got, ref)
    # and against Python integers directly
    for l, p in enumerate(MODULI[:N]):
        exp = np.array([[_sym(int(v), p) for v in row] for row in Aint], dtype=np.int8)
        np.testing.assert_array_equal(got[l], exp)
    # every value alone in its warp (its own path)
    for start in range(0, vals.size, 7):
        one = np.zeros((8, 32))
        one[3, 5] = vals[start]
        got1 = residues.residues(cupy.asarray(one), MODULI[:N]).get()
        np.testing.assert_array_equal(got1, _reference(one, N))


def _shifted_rows(rng, rows, cols):
    """Operand rows and shifts s whose trunc(x 2^s) lands in every class: below 1 (all
    zero), < 2^52, 2^53..2^64, < 2^86, < 2^128, beyond; subnormal rows; |s| up to and
    beyond the float64 path's 1600; negative zeros."""
    A = (rng.random((rows, cols)) - 0.5) * np.exp(2.0 * rng.standard_normal((rows, cols)))
    A[rng.random((rows, cols)) < 0.05] = -0.0
    E = np.frexp(np.abs(A).max(axis=1))[1]
    targets = [-3, 20, 52, 53, 60, 64, 65, 86, 87, 100, 128, 129, 300]
    s = np.array([targets[i % len(targets)] for i in range(rows)]) - E
    sub = [r for r in range(rows) if r % 13 == 5]
    for r in sub:                                          # subnormal rows
        A[r] = (rng.random(cols) - 0.5) * 1e-310
        A[r, 0] = 5e-324
        s[r] = 1074 + [10, 52, 60, 100, 0, -5][r % 6]
    big = [r for r in range(rows) if r % 17 == 3]
    for r in big:                                          # huge rows, very negative s
        A[r] = (rng.random(cols) - 0.5) * 1e305
        A[r, 1] = -1.7976931348623157e308
        s[r] = -1024 + [52, 40, 86, 120][r % 4]
    if rows > 8:
        A[7] = (rng.random(cols) - 0.5) * 1e-300
        s[7] = 1600                                        # the float64 path's limit...
        A[8] = (rng.random(cols) - 0.5) * 1e-300
        s[8] = 1601                                        # ...and beyond it
        s[0] = -1601
        s[1] = -1600
    return A, s.astype(np.int64)


@pytest.mark.gpu
@pytest.mark.parametrize("N", [2, 15, 16, 20])
def test_gpu_fused_planes_with_shifts(N):
    """The production pass: truncation fused, A and B (transposed read), padding zeroed."""
    cupy = pytest.importorskip("cupy")
    from ozaki_backend.cuda import residues
    from ozaki_backend.cuda._common import round_up

    rng = np.random.default_rng(100 + N)
    m, k = 61, 203
    A, s = _shifted_rows(rng, m, k)
    At = rsc.truncate(A, s)
    ref = _reference(At, N)
    kpad = round_up(k, 16)
    views = [A, np.asfortranarray(A)]
    wide = np.zeros((m, 2 * k))
    wide[:, ::2] = A
    views.append(wide[:, ::2])
    for Av in views:
        R = cupy.full((N, m, kpad), 99, dtype=np.int8)
        residues.residue_planes_into(cupy.asarray(Av), cupy.asarray(s, dtype=np.int32), R, N)
        R = R.get()
        np.testing.assert_array_equal(R[:, :, :k], ref)
        assert not R[:, :, k:].any()
    # B = A.T read through its transpose (rows_fast), as the pipeline does
    B = np.ascontiguousarray(A.T)
    R = cupy.full((N, m, kpad), 99, dtype=np.int8)
    residues.residue_planes_into(cupy.asarray(B).T, cupy.asarray(s, dtype=np.int32), R, N)
    R = R.get()
    np.testing.assert_array_equal(R[:, :, :k], ref)
    assert not R[:, :, k:].any()


@pytest.mark.gpu
def test_gpu_large_operand_all_paths():
    """Many blocks, partial tiles at both edges, every path in one launch."""
    cupy = pytest.importorskip("cupy")
    from ozaki_backend.cuda import residues
    from ozaki_backend.cuda._common import round_up

    rng = np.random.default_rng(7)
    m, k, N = 333, 1031, 20
    A, s = _shifted_rows(rng, m, k)
    ref = _reference(rsc.truncate(A, s), N)
    kpad = round_up(k, 16)
    R = cupy.full((N, m, kpad), 99, dtype=np.int8)
    residues.residue_planes_into(cupy.asarray(A), cupy.asarray(s, dtype=np.int32), R, N)
    R = R.get()
    np.testing.assert_array_equal(R[:, :, :k], ref)
    assert not R[:, :, k:].any()


# ---------------------------------------------------------------------------------
# The emulation replays the kernel on the GPU tests' inputs (CPU): the per-warp vote of
# the digit count and the float64 path must give the reference bytes there too.

def _emulate_kernel(A, s, N):
    """The kernel's output (rows x cols x N) for one operand, emulated: warps of 8 rows x
    32 columns (4 lanes x 8 elements per row), the vote, the float64 path (the integer
    path, tier 3, is left to the reference: returns None there)."""
    rows, cols = A.shape
    out = np.zeros((N, rows, cols), dtype=np.int8)
    inv = _inv_table()
    for r0 in range(0, rows, 32):
        for c0 in range(0, cols, 64):
            for wr in range(4):
                for wc in range(2):
                    rr = range(r0 + 8 * wr, min(rows, r0 + 8 * wr + 8))
                    cc = range(c0 + 32 * wc, min(cols, c0 + 32 * wc + 32))
                    if not len(rr) or not len(cc):
                        continue
                    tier = 0
                    for i in rr:
                        for l0 in range(cc.start, cc.stop, 8):
                            xs = [A[i, j] for j in range(l0, min(cc.stop, l0 + 8))]
                            tier = max(tier, kernel_tier(xs, int(s[i])))
                    if tier == 3:
                        out[:, rr.start:rr.stop, cc.start:cc.stop] = _reference(
                            rsc.truncate(A[rr.start:rr.stop, cc.start:cc.stop],
                                         s[rr.start:rr.stop]), N)
                        continue
                    for i in rr:
                        for j in cc:
                            d, w = emulate_digits(float(A[i, j]), int(s[i]), tier + 1)
                            out[:, i, j] = [emulate_residue(p, q, d, w)
                                            for p, q in zip(MODULI[:N], inv)]
    return out


def test_emulated_kernel_on_gpu_test_inputs():
    rng = np.random.default_rng(100 + 20)
    A, s = _shifted_rows(rng, 40, 70)
    N = 20
    ref = _reference(rsc.truncate(A, s), N)
    np.testing.assert_array_equal(_emulate_kernel(A, s, N), ref)
    for kind in ("lt2^52", "lt2^86", "lt2^128"):
        Aint = _int_matrix(kind, np.random.default_rng(5), rows=12, cols=40)
        z = np.zeros(Aint.shape[0], dtype=np.int64)
        np.testing.assert_array_equal(_emulate_kernel(Aint, z, N), _reference(Aint, N))
