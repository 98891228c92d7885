"""precision="fp64" chooses its moduli count per product from the operands' exponent
spread (``docs/spec.md`` §1): the statistic (exact integers, hand-checked), the table
(monotone, well formed), the plan (a pure function of shape and options that holds the
rule), observability, and the accuracy promise on the calibration families.

The accuracy tests compare with native float64 through the exact oracle
(:func:`ozaki_backend.testing.exact_matmul`: the product rounded once), so there is no
tolerance to guess: the promise is ``max relative error <= native's`` on the same
operands, and every element must also lie within the rigorous a-priori bound
(:func:`ozaki_backend.testing.error_bound`) of the count actually used.
"""

import math

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.calibrate import (K_BUCKETS, OUTLIERS, PHIS, case_operands, close,
                                     fill_and_close, outlier_operands, spread_bucket)
from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI
from ozaki_backend.registry import exponent_spread
from ozaki_backend.spec.rules import fp64_rule, moduli_for_fp64
from ozaki_backend.spec.rules import fp64_table as _fp64_table
from ozaki_backend.reference import scaling
from ozaki_backend.reference.engine import product_2d as matmul_2d
from ozaki_backend.testing import (error_bound, exact_matmul, max_relative_error,
                                   phi_matrix)

MODES = ("fast", "accurate")


def bits(x):
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


def spread_python(X):
    """The statistic by definition, one row at a time with Python ints."""
    out = []
    for row in np.asarray(X, dtype=np.float64):
        es = [math.frexp(float(x))[1] for x in row if x != 0]
        out.append(max(es) - sum(es) // len(es) if es else 0)
    return out


# --------------------------------------------------------------------------- statistic


@pytest.mark.parametrize("row, d", [
    ([1.0, 2.0, 4.0], 1),                  # e = 1, 2, 3: E = 3, mean 2
    ([0.75, -3.0, 0.0, 0.0], 1),           # zeros do not count: e = 0, 2
    ([0.25, 0.5, 2.0], 2),                 # e = -1, 0, 2: sum 1, floor(1/3) = 0
    ([0.1, 0.3, 0.3], 1),                  # e = -3, -1, -1: floor(-5/3) = -2 (not -1)
    ([0.1, 0.3], 1),                       # e = -3, -1: mean -2
    ([5.0], 0),                            # one entry: its own mean
    ([0.0, 0.0, 0.0], 0),                  # all-zero row
    ([5e-324, 1e-310], 22),                # subnormals: e = -1073, -1029
    ([2.0 ** -1074, 2.0 ** 1023], 1049),   # the whole range: e = -1073, 1024, mean -25
    ([1.0] * 7 + [2.0 ** 40], 35),         # e = 1 x7, 41: floor(48/8) = 6
])
def test_row_spread_hand_checked(row, d):
    X = np.array([row])
    assert scaling.row_spreads(X).tolist() == [d]
    assert spread_python(X) == [d]


def test_row_spreads_match_python_ints():
    rng = np.random.default_rng(11)
    X = phi_matrix((40, 57), 3.0, rng)
    X[rng.random(X.shape) < 0.2] = 0.0
    X[3] = 0.0                                         # all-zero row
    X[5] = (rng.random(57) - 0.5) * 1e-310             # subnormal row
    X[6, :3] = (5e-324, -1.7e308, 1e300)               # extremes
    X[7, 1:] = 0.0                                     # one entry
    d = scaling.row_spreads(X)
    assert d.dtype == np.int64 and d.tolist() == spread_python(X)
    assert (d >= 0).all()


def test_exponent_spread_is_max_over_rows_of_a_and_columns_of_b():
    rng = np.random.default_rng(12)
    A = phi_matrix((9, 30), 1.0, rng)
    B = phi_matrix((30, 8), 2.0, rng)
    want = max(max(spread_python(A)), max(spread_python(B.T)))
    assert scaling.exponent_spread(A, B) == want == exponent_spread(A, B)
    # All-zero operands, empty operands, zero rows: no contribution.
    Z = np.zeros_like(A)
    assert scaling.exponent_spread(Z, B) == max(spread_python(B.T))
    assert scaling.exponent_spread(Z, np.zeros_like(B)) == 0
    assert scaling.exponent_spread(np.zeros((0, 30)), B) == max(spread_python(B.T))
    assert scaling.exponent_spread(np.zeros((4, 0)), np.zeros((0, 3))) == 0
    with pytest.raises(ValueError):
        exponent_spread(A, B.T)


def test_spread_ignores_row_and_column_scaling():
    """Scaling a row of A (a column of B) by 2^r shifts its exponents by r: the spread,
    the count and the product bits (scaled) are unchanged."""
    rng = np.random.default_rng(13)
    A = phi_matrix((50, 70), 1.0, rng)
    B = phi_matrix((70, 40), 1.0, rng)
    r = rng.integers(-30, 31, 50)
    c = rng.integers(-30, 31, 40)
    A2 = np.ldexp(A, r[:, None])
    B2 = np.ldexp(B, c[None, :])
    assert scaling.exponent_spread(A2, B2) == scaling.exponent_spread(A, B)
    for mode in MODES:
        p = ob.plan(50, 40, 70, mode=mode)
        assert p.moduli_for(A2, B2) == p.moduli_for(A, B)
        C = ob.matmul(A, B, mode=mode, engine="cpu")
        C2 = ob.matmul(A2, B2, mode=mode, engine="cpu")
        np.testing.assert_array_equal(bits(C2), bits(np.ldexp(C, (r[:, None] + c[None, :]))))


def test_outliers_raise_the_count():
    rng = np.random.default_rng(14)
    A = rng.standard_normal((64, 300))
    B = rng.standard_normal((300, 48))
    A2, B2 = outlier_operands(64, 48, 300, 20, 0)
    s0, s1 = scaling.exponent_spread(A, B), scaling.exponent_spread(A2, B2)
    assert s0 <= 6 and s1 >= 20
    for mode in MODES:
        p = ob.plan(64, 48, 300, mode=mode)
        assert p.moduli_for(A2, B2) > p.moduli_for(A, B)
        assert p.moduli_for(A2, B2) >= 19


# --------------------------------------------------------------------------- table


def test_table_well_formed_and_monotone():
    t = _fp64_table()
    edges = t["spread_edges"]
    assert edges == sorted(set(edges)) and edges[0] >= 0
    assert MIN_MODULI <= t["beyond"] <= MAX_MODULI
    for mode in MODES:
        rows = t[mode]
        ks = [k for k, _ in rows]
        assert ks == sorted(set(ks))
        table = [Ns for _, Ns in rows]
        for Ns in table:
            assert len(Ns) == len(edges)
            assert all(MIN_MODULI <= N <= MAX_MODULI for N in Ns)
            assert Ns[-1] <= t["beyond"]
        assert close(table) == table          # non-decreasing in k and in spread


@pytest.mark.parametrize("mode", MODES)
def test_rule_monotone_in_k_and_spread_including_extrapolation(mode):
    ks = [1, 2, 63, 64, 65, 1000, 4096, 16384, 16385, 70000, 300000, 2 ** 22]
    spreads = list(range(0, 60))
    grid = [[moduli_for_fp64(k, mode, s)[0] for s in spreads] for k in ks]
    assert close(grid) == grid
    for k, row in zip(ks, grid):
        lo, hi, _ = fp64_rule(k, mode)
        assert lo == row[0] and hi == max(row) == row[-1]


def test_fill_and_close():
    raw = [[15, None, 17, None], [None, 16, None, 19], [15, 15, 18, None]]
    # Empty cells take the smallest measured count at larger-or-equal k and spread (the
    # top when there is none), then the table is closed upwards in both directions.
    assert fill_and_close(raw, 20) == [[15, 15, 17, 19], [15, 16, 18, 19], [15, 16, 18, 20]]
    assert [spread_bucket(s, (4, 8)) for s in (0, 4, 5, 8, 9)] == [0, 0, 1, 1, 2]


# --------------------------------------------------------------------------- plan


def test_plan_is_a_function_of_shape_and_options():
    p, q = ob.plan(300, 200, 100), ob.plan(300, 200, 100)
    assert p.adaptive and p == q and repr(p) == repr(q) and hash(p) == hash(q)
    lo, hi = p.moduli_range
    assert MIN_MODULI <= lo <= hi <= MAX_MODULI and p.n_moduli == hi
    assert f"{lo}-{hi}, chosen per call" in repr(p) and "exponent spread" in p.rule
    for kw in (dict(moduli=lo), dict(bits=40)):
        f = ob.plan(300, 200, 100, **kw)
        assert not f.adaptive and f.moduli_range == (f.n_moduli, f.n_moduli)
        assert f != p                       # never equal to the adaptive plan
    assert not ob.plan(30, 20, 10, scheme="phase22").adaptive


@pytest.mark.parametrize("mode", MODES)
def test_resolve_gives_the_same_bits_and_is_observable(mode, clean_dispatch):
    rng = np.random.default_rng(15)
    fams = [phi_matrix((40, 90), 4.0, rng), rng.standard_normal((40, 90))]
    B = rng.standard_normal((90, 30))
    p = ob.plan(40, 30, 90, mode=mode)
    used = []
    for A in fams:
        N = p.moduli_for(A, B)
        r = p.resolve(A, B)
        assert not r.adaptive and r.n_moduli == N and r.mode == mode
        assert N == moduli_for_fp64(90, mode, exponent_spread(A, B))[0]
        assert r.rule.startswith("precision='fp64'")
        C = ob.matmul(A, B, mode=mode, engine="cpu")
        assert ob.stats()["last_moduli"] == N
        np.testing.assert_array_equal(bits(C), bits(r.matmul(A, B, engine="cpu")))
        np.testing.assert_array_equal(bits(C), bits(ob.matmul(A, B, moduli=N, mode=mode,
                                                             engine="cpu")))
        np.testing.assert_array_equal(bits(C), bits(matmul_2d(A, B, p)))
        used.append(N)
    assert used[0] > used[1]                     # phi = 4 needs more than N(0, 1)
    counts = ob.stats()["moduli"]
    assert counts[used[0]] >= 3 and counts[used[1]] >= 3
    # A stack: each 2-D product has its own count.
    C3 = ob.matmul(np.stack(fams), B, mode=mode, engine="cpu")
    for i, A in enumerate(fams):
        np.testing.assert_array_equal(bits(C3[i]), bits(ob.matmul(A, B, mode=mode,
                                                                  engine="cpu")))


def test_zero_operands_and_zero_rows():
    rng = np.random.default_rng(16)
    A = rng.standard_normal((6, 20))
    A[2] = 0.0
    B = np.zeros((20, 5))
    p = ob.plan(6, 5, 20)
    assert p.moduli_for(A, B) == moduli_for_fp64(20, "accurate",
                                                 max(spread_python(A)))[0]
    C = ob.matmul(A, B, engine="cpu")
    assert (C == 0).all() and not np.signbit(C).any()
    Z = np.zeros((6, 20))
    assert p.moduli_for(Z, B) == p.moduli_range[0]


# --------------------------------------------------------------------------- accuracy


FAMILIES = [("phi", phi) for phi in PHIS] + [("outliers", f) for f in OUTLIERS]


def _check_family(m, n, k, family, param, seed, modes=MODES):
    """Out-of-sample operands of a calibration family (k inside a bucket, not an edge;
    m = n smaller than the calibration's): fp64 no worse than native, and every element
    within the rigorous bound of the count used."""
    A, B = case_operands(m, n, k, family, param, seed)
    E = exact_matmul(A, B)
    native = max_relative_error(A @ B, E)
    for mode in modes:
        p = ob.plan(m, n, k, mode=mode)
        C = ob.matmul(A, B, mode=mode, engine="cpu")
        ours = max_relative_error(C, E)
        N = p.moduli_for(A, B)
        assert ours <= native, (family, param, seed, k, mode, N, ours, native)
        bound = error_bound(A, B, p, C)           # resolves the same count
        assert (np.abs(C - E) <= bound + np.spacing(np.abs(E)) / 2).all()


@pytest.mark.parametrize("family,param", FAMILIES)
@pytest.mark.parametrize("k", [40, 200])
def test_fp64_at_least_native_on_calibration_families(family, param, k):
    for seed in (5, 6):
        _check_family(96, 96, k, family, param, seed)


@pytest.mark.slow
@pytest.mark.parametrize("family,param", FAMILIES)
def test_fp64_at_least_native_on_calibration_families_longer_k(family, param):
    for seed in (5, 6):
        _check_family(64, 64, 700, family, param, seed)


def test_calibration_points_are_met():
    """On the calibration's own operands at its smallest k bucket (seed 0), the table
    meets its criterion in both modes for every family (a table/code mismatch would
    show here)."""
    k = K_BUCKETS[0]
    for family, param in FAMILIES:
        _check_family(128, 128, k, family, param, 0)
