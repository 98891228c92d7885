"""``matmul`` with ``ndarray`` subclasses behaves as ``np.matmul`` does with them: an
``np.matrix`` stays a matrix (of NumPy's shape), a masked array gets NumPy's mask or
NumPy's error, ``out=`` comes back as given; the numbers are the emulated product of
the arrays' data, bit for bit."""

import numpy as np
import pytest

import ozaki_backend as ob
from bits import assert_same_bits

RNG = np.random.default_rng(31)


def _plain(x):
    return np.asarray(x).view(np.ndarray)


@pytest.mark.parametrize("left, right", [
    ("matrix", "matrix"), ("matrix", "2-D"), ("2-D", "matrix"), ("matrix", "1-D"),
    ("1-D", "matrix")])
def test_a_matrix_stays_a_matrix_of_numpys_shape(left, right):
    make = {"matrix": lambda: np.matrix(RNG.standard_normal((6, 6))),
            "2-D": lambda: RNG.standard_normal((6, 6)),
            "1-D": lambda: RNG.standard_normal(6)}
    a, b = make[left](), make[right]()
    C, ref = ob.matmul(a, b, engine="cpu"), np.matmul(a, b)
    assert type(C) is type(ref) is np.matrix
    assert C.shape == ref.shape
    assert_same_bits(_plain(C).ravel(), _plain(ob.matmul(_plain(a), _plain(b),
                                                         engine="cpu")).ravel())


def test_a_matrix_with_return_bound_wraps_both():
    a = np.matrix(RNG.standard_normal((5, 4)))
    b = np.matrix(RNG.standard_normal((4, 3)))
    C, bound = ob.matmul(a, b, engine="cpu", return_bound=True)
    assert type(C) is np.matrix and type(bound) is np.matrix
    assert np.all(np.abs(_plain(C) - _plain(a) @ _plain(b)) <= _plain(bound) + 1e-12)


def test_out_is_returned_as_given_like_numpy():
    a = np.matrix(RNG.standard_normal((4, 4)))
    out = np.empty((4, 4))
    assert type(np.matmul(a, a, out=out)) is np.ndarray       # NumPy's behaviour
    res = ob.matmul(a, a, engine="cpu", out=out)
    assert res is out
    assert_same_bits(out, ob.matmul(_plain(a), _plain(a), engine="cpu"))


def test_a_masked_array_gets_numpys_mask():
    data = RNG.standard_normal((5, 5))
    m = np.ma.array(data, mask=RNG.random((5, 5)) < 0.3)
    C, ref = ob.matmul(m, m, engine="cpu"), np.matmul(m, m)
    assert type(C) is type(ref) is np.ma.MaskedArray
    assert np.array_equal(np.ma.getmaskarray(C), np.ma.getmaskarray(ref))
    assert_same_bits(C.data, ob.matmul(data, data, engine="cpu"))


def test_a_masked_array_raises_where_numpy_raises():
    a = np.ma.array(RNG.standard_normal((3, 2)), mask=[[1, 0], [0, 0], [0, 0]])
    b = RNG.standard_normal((2, 4))
    with pytest.raises(ValueError) as numpy_error:
        np.matmul(a, b)
    with pytest.raises(type(numpy_error.value)):
        ob.matmul(a, b, engine="cpu")


class _Low(np.ndarray):
    __array_priority__ = 1.0


class _High(np.ndarray):
    __array_priority__ = 5.0


def test_the_subclass_of_highest_priority_wraps_as_in_numpy():
    a = RNG.standard_normal((3, 3)).view(_Low)
    b = RNG.standard_normal((3, 3)).view(_High)
    for x, y in ((a, b), (b, a)):
        assert type(ob.matmul(x, y, engine="cpu")) is type(np.matmul(x, y)) is _High
    c = RNG.standard_normal((3, 3)).view(_Low)
    assert type(ob.matmul(a, c, engine="cpu")) is type(np.matmul(a, c)) is _Low


def test_plain_arrays_are_untouched():
    a = RNG.standard_normal((4, 4))
    assert type(ob.matmul(a, a, engine="cpu")) is np.ndarray
    v = RNG.standard_normal(4)
    r, ref = ob.matmul(v, v, engine="cpu"), np.matmul(v, v)
    assert type(r) is type(ref)
