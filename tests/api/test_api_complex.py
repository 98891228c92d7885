"""NumPy semantics of ``ozaki_backend.matmul`` on complex operands (``docs/spec.md``
§11.5): which dtypes are emulated, result types, ``out=``, 1-D operands, errors."""

import numpy as np
import pytest

import ozaki_backend as ob

from ozaki_backend.testing import exact_complex_matmul, max_relative_error

from bits import assert_same_bits


def emulate(a, b, **kw):
    kw.setdefault("engine", "cpu")
    return ob.matmul(a, b, **kw)


def operands(da, db, rng):
    a = rng.standard_normal((5, 7)) + (1j * rng.standard_normal((5, 7))
                                       if np.dtype(da).kind == "c" else 0)
    b = rng.standard_normal((7, 4)) + (1j * rng.standard_normal((7, 4))
                                       if np.dtype(db).kind == "c" else 0)
    return a.astype(da), b.astype(db)


@pytest.mark.parametrize("da, db", [(np.complex128, np.complex128), (np.float64, np.complex128),
                                    (np.complex128, np.float32), (np.complex64, np.float64),
                                    (np.int32, np.complex128)])
def test_complex128_products_are_emulated(da, db):
    rng = np.random.default_rng(1)
    a, b = operands(da, db, rng)
    ob.reset_stats()
    r = emulate(a, b)
    t = np.matmul(a, b)
    assert r.dtype == t.dtype == np.complex128 and r.shape == t.shape
    assert ob.stats()["routed"] == 1
    E = exact_complex_matmul(a, b)
    assert max_relative_error(r, E) <= 2 * max(max_relative_error(t, E), 2.0**-53)


@pytest.mark.parametrize("da, db", [(np.complex64, np.complex64), (np.float32, np.complex64),
                                    (np.clongdouble, np.complex128)])
def test_other_complex_products_are_numpys(da, db):
    rng = np.random.default_rng(2)
    a, b = operands(da, db, rng)
    r = emulate(a, b)
    t = np.matmul(a, b)
    assert r.dtype == t.dtype
    if r.dtype == np.clongdouble:
        assert (r == t).all()         # padding bytes are undefined
    else:
        assert_same_bits(r, t)


def test_seed_scheme_leaves_complex_to_numpy():
    rng = np.random.default_rng(3)
    a, b = operands(np.complex128, np.complex128, rng)
    assert_same_bits(emulate(a, b, scheme="phase22"), np.matmul(a, b))


def test_out_and_vectors():
    rng = np.random.default_rng(4)
    a, b = operands(np.complex128, np.complex128, rng)
    out = np.empty((5, 4), dtype=np.complex128)
    assert emulate(a, b, out=out) is out
    assert_same_bits(out, emulate(a, b))
    v, w = a[0], b[:, 0]
    s = emulate(v, w)
    assert np.ndim(s) == 0 and type(s) is type(np.matmul(v, w))
    assert_same_bits(np.asarray(s), emulate(v[None, :], w[:, None])[0, 0])
    # float64 out= cannot take a complex result: NumPy's own error.
    bad = np.empty((5, 4))
    with pytest.raises(Exception) as ours:
        emulate(a, b, out=bad)
    with pytest.raises(Exception) as theirs:
        np.matmul(a, b, out=bad)
    assert type(ours.value) is type(theirs.value)
    out64 = np.empty((5, 4), dtype=np.complex64)      # same_kind cast, as NumPy does
    emulate(a, b, out=out64)
    assert_same_bits(out64, emulate(a, b).astype(np.complex64))


def test_moduli_are_recorded_from_the_complex_table():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 300)) + 1j * rng.standard_normal((40, 300))
    b = rng.standard_normal((300, 30)) + 1j * rng.standard_normal((300, 30))
    ob.reset_stats()
    emulate(a, b)
    counts = ob.stats()["moduli"]
    assert sum(counts.values()) == 1
    assert 2 <= next(iter(counts)) <= 20
    assert ob.stats()["certificate"] == {"certified": 1}


def test_plan_moduli_for_counts_on_the_complex_table():
    """``Plan.moduli_for`` on complex operands: the complex count (bits= on the complex
    table; fp64 the certificate's, as the product records it)."""
    from ozaki_backend.spec.complex_moduli import complex_moduli_for_bits

    rng = np.random.default_rng(6)
    a = rng.standard_normal((40, 500)) + 1j * rng.standard_normal((40, 500))
    b = rng.standard_normal((500, 30)) + 1j * rng.standard_normal((500, 30))
    assert ob.plan(40, 30, 500, bits=40).moduli_for(a, b) == complex_moduli_for_bits(40, 500)
    assert ob.plan(40, 30, 500, moduli=9).moduli_for(a, b) == 9
    ob.reset_stats()
    emulate(a, b)
    assert ob.stats()["moduli"] == {ob.plan(40, 30, 500).moduli_for(a, b): 1}
