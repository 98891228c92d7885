"""NumPy semantics of ``ozaki_backend.matmul``: shapes, promotions, errors, dtypes,
``out=``, non-finite operands, and layout independence (hypothesis).

The reference is always :func:`numpy.matmul` itself: same result shape and type, the
same exception type and message, NumPy's own result (bitwise) wherever the call is not
emulated.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ozaki_backend as ob
from ozaki_backend.testing import error_bound, exact_matmul, phi_matrix

from bits import assert_same_bits

ENGINE = "cpu"


def emulate(a, b, **kw):
    kw.setdefault("engine", ENGINE)
    return ob.matmul(a, b, **kw)


def outcome(fn):
    """``("ok", result)`` or ``("raise", type, message)``."""
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - comparing exceptions is the point
        return ("raise", type(exc), str(exc))


def same_outcome(a, b, **kw):
    """Call both; return NumPy's result after checking type/shape/dtype agree, or
    check that both raised the same exception type with the same message."""
    ours = outcome(lambda: emulate(a, b, **kw))
    theirs = outcome(lambda: np.matmul(a, b, **kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "raise":
        assert ours[1:] == theirs[1:]
        return None, None
    r, t = ours[1], theirs[1]
    assert type(r) is type(t)
    assert np.shape(r) == np.shape(t) and np.result_type(r) == np.result_type(t)
    return r, t


# ------------------------------------------------------------------ shapes


def test_one_dimensional_promotions():
    """1-D operands are promoted to a row (left) or column (right), multiplied as 2-D
    products, and the added axis removed — bit for bit the explicit 2-D products."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal(5)
    M = rng.standard_normal((5, 3))
    S = rng.standard_normal((2, 4, 5))
    r, _ = same_outcome(v, M)
    assert_same_bits(r, emulate(v[None, :], M)[0])
    r, _ = same_outcome(M.T, v)
    assert_same_bits(r, emulate(M.T, v[:, None])[:, 0])
    r, _ = same_outcome(S, v)
    assert_same_bits(r, emulate(S, v[:, None])[..., 0])
    r, _ = same_outcome(v, S.transpose(0, 2, 1))
    assert_same_bits(r, emulate(v[None, :], S.transpose(0, 2, 1))[..., 0, :])


def test_vector_dot_vector_is_a_scalar_like_numpy():
    """``matmul(v, w)`` of two 1-D operands is a NumPy scalar, not a 0-d array."""
    v = np.arange(1.0, 6.0)
    r, t = same_outcome(v, v)
    assert r == 55.0
    assert_same_bits(r, emulate(v[None, :], v[:, None])[0, 0])


def test_broadcasting():
    rng = np.random.default_rng(1)
    for sa, sb in [((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (7, 1, 4, 6)), ((3, 4), (2, 2, 4, 1)),
                   ((0, 3, 4), (4, 2)), ((2, 3, 0), (2, 0, 5))]:
        a = rng.standard_normal(sa)
        b = rng.standard_normal(sb)
        r, t = same_outcome(a, b)
        assert r.shape == t.shape


@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 2)), ((3,), (4,)), ((2, 2, 3), (3, 3, 2)),
                                    ((), (3,)), ((3,), ()), ((2, 3), (2,)), ((4,), (3, 4))])
def test_bad_shapes_raise_numpys_error(sa, sb):
    a = np.ones(sa)
    b = np.ones(sb)
    same_outcome(a, b)
    assert outcome(lambda: np.matmul(a, b))[0] == "raise"      # the case is a bad one


def test_python_scalars_and_lists():
    same_outcome(2.0, np.ones((2, 2)))                          # scalar: NumPy's error
    r, t = same_outcome([[1.0, 2.0]], [[3.0], [4.0]])
    assert r[0, 0] == 11.0


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("da, db", [(np.float32, np.float32), (np.complex64, np.complex64),
                                    (np.float32, np.complex64), (object, np.float64),
                                    (np.int64, np.int64), (np.int8, np.int32), (bool, bool),
                                    (np.longdouble, np.float64), (np.float32, np.float16)])
def test_non_float64_products_are_numpys(da, db):
    """Products NumPy does not compute in float64 or complex128 are NumPy's own, bit for
    bit (complex128 products are emulated: ``tests/api/test_api_complex.py``)."""
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((4, 6)) * 10).astype(da)
    b = (rng.standard_normal((6, 3)) * 10).astype(db)
    r, t = same_outcome(a, b)
    if r.dtype == object or r.dtype == np.longdouble:
        # object: Python floats; long double: padding bytes are undefined.
        assert (r == t).all()
    else:
        assert_same_bits(r, t)


@pytest.mark.parametrize("da, db", [(np.int64, np.float64), (np.float64, np.int32),
                                    (np.float16, np.float64), (np.uint8, np.float64),
                                    (np.float32, np.float64), (bool, np.float64)])
def test_mixed_dtypes_promoting_to_float64_are_emulated(da, db):
    """NumPy computes these in float64, so they are emulated on the promoted values."""
    rng = np.random.default_rng(3)
    a = np.abs(rng.standard_normal((4, 6)) * 10).astype(da)
    b = np.abs(rng.standard_normal((6, 3)) * 10).astype(db)
    r, t = same_outcome(a, b)
    assert r.dtype == np.float64
    assert_same_bits(r, emulate(a.astype(np.float64), b.astype(np.float64)))


def test_bad_dtypes_raise_numpys_error():
    same_outcome(np.array([["a"]]), np.array([["b"]]))
    same_outcome(np.array([[1.0]]), np.array([["b"]]))
    same_outcome(np.array([[np.datetime64("2020-01-01")]]), np.array([[1.0]]))


# ------------------------------------------------------------------ out=


def test_out_semantics():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 5))
    b = rng.standard_normal((5, 4))
    ref = emulate(a, b)
    out = np.empty((3, 4))
    assert emulate(a, b, out=out) is out
    assert_same_bits(out, ref)
    out32 = np.empty((3, 4), dtype=np.float32)                 # same_kind cast, as NumPy
    assert emulate(a, b, out=out32) is out32
    assert_same_bits(out32, ref.astype(np.float32))
    outc = np.empty((3, 4), dtype=np.complex128)
    emulate(a, b, out=outc)
    assert_same_bits(outc.real, ref)
    assert not outc.imag.any()
    # Output overlapping an input: the result is as if computed first.
    sq = rng.standard_normal((4, 4))
    ref_sq = emulate(sq, sq)
    emulate(sq, sq, out=sq)
    assert_same_bits(sq, ref_sq)


def test_out_as_a_one_tuple_like_numpy():
    """NumPy's ufuncs accept ``out=(array,)`` and ``out=(None,)``: the same product."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 5))
    b = rng.standard_normal((5, 4))
    ref = emulate(a, b)
    o = np.empty((3, 4))
    assert emulate(a, b, out=(o,)) is o
    assert_same_bits(o, ref)
    assert_same_bits(emulate(a, b, out=(None,)), ref)


@pytest.mark.parametrize("make_out", [
    lambda: np.empty((3, 3)),                       # wrong shape
    lambda: np.empty((3, 4, 1)),                    # wrong ndim
    lambda: np.empty((3, 4), dtype=np.int64),       # unsafe cast
    lambda: np.empty((3, 4), dtype=bool),
    lambda: [[0.0] * 4] * 3,                        # not an array
    lambda: np.empty((4, 4))[:3, ::2],              # wrong shape, strided view
])
def test_bad_out_raises_numpys_error(make_out):
    a = np.ones((3, 5))
    b = np.ones((5, 4))
    ours = outcome(lambda: emulate(a, b, out=make_out()))
    theirs = outcome(lambda: np.matmul(a, b, out=make_out()))
    assert ours[0] == theirs[0] == "raise"
    assert ours[1:] == theirs[1:]


# ------------------------------------------------------------------ non-finite


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_non_finite_operands_give_numpys_bits(special):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((5, 7))
    b = rng.standard_normal((7, 4))
    a[1, 2] = special
    b[3, 0] = special
    b[6, 3] = 0.0
    a[4, 6] = np.inf                                  # inf * 0 -> NaN somewhere
    for x, y in [(a, b), (b.T, a.T), (a[1], b), (np.stack([a, a * 0]), b)]:
        r, t = same_outcome(x, y)
        assert_same_bits(r, t)
        assert (np.isnan(r) == np.isnan(t)).all()


# ------------------------------------------------------------------ hypothesis


def _layout(x, kind, rng_int):
    """A view of (a copy of) ``x`` with the same values and a different memory layout."""
    if kind == "c":
        return np.ascontiguousarray(x)
    if kind == "f":
        return np.asfortranarray(x)
    if kind == "transposed":
        return np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    if kind == "negative":
        sl = (slice(None, None, -1),) * x.ndim
        return np.ascontiguousarray(x[sl])[sl]
    # strided: embed in a larger zero array and view every `step`-th element
    step = 2 + rng_int % 2
    big = np.zeros(tuple(s * step + 1 for s in x.shape))
    sl = tuple(slice(1, 1 + s * step, step) for s in x.shape)
    big[sl] = x
    return big[sl]


LAYOUTS = st.sampled_from(["c", "f", "transposed", "negative", "strided"])
batch_shapes = st.sampled_from([(), (1,), (2,), (3, 1), (1, 2)])


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(0, 9), k=st.integers(0, 12), n=st.integers(0, 9),
       ba=batch_shapes, bb=batch_shapes, la=LAYOUTS, lb=LAYOUTS,
       phi=st.sampled_from([-1.0, 0.5, 2.0, 4.0]), seed=st.integers(0, 2**16),
       mode=st.sampled_from(["fast", "accurate"]), N=st.sampled_from([None, 3, 9, 16, 20]))
def test_layouts_are_bitwise_irrelevant(m, k, n, ba, bb, la, lb, phi, seed, mode, N):
    rng = np.random.default_rng(seed)
    a = phi_matrix(ba + (m, k), phi, rng)
    b = phi_matrix(bb + (k, n), phi, rng)
    ref = emulate(a, b, mode=mode, moduli=N)
    assert ref.shape == np.matmul(a, b).shape
    got = emulate(_layout(a, la, seed), _layout(b, lb, seed + 1), mode=mode, moduli=N)
    assert_same_bits(got, ref)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 6), k=st.integers(1, 40), n=st.integers(1, 6),
       phi=st.sampled_from([-1.0, 0.0, 1.0, 4.0]), seed=st.integers(0, 2**16),
       mode=st.sampled_from(["fast", "accurate"]), N=st.integers(2, 20),
       scale=st.integers(-1000, 900))
def test_error_within_bound_property(m, k, n, phi, seed, mode, N, scale):
    # |entries| stay below 2^27 before scaling and k <= 40, so 2^900 keeps every exact
    # product finite; -1000 reaches deep into the subnormal range.
    rng = np.random.default_rng(seed)
    a = phi_matrix((m, k), phi, rng) * 2.0 ** (scale // 2)
    b = phi_matrix((k, n), phi, rng) * 2.0 ** (scale - scale // 2)
    plan = ob.plan(m, n, k, moduli=N, mode=mode)
    C = emulate(a, b, mode=mode, moduli=N)
    E = exact_matmul(a, b)
    bound = error_bound(a, b, plan, C)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.abs(C - E) <= bound + np.spacing(np.abs(E)) / 2) | (C == E)
    assert ok.all()
