"""The wrappers' C fast path (issue 29, item 1): inside a scope, a product no active
scope can route (matrix-vector shaped, or below the smallest floor) is left to NumPy
without entering Python; everything else still reaches the Python wrapper, which
decides, routes and counts as before. The wrapper passes for the function it wraps."""

import pickle

import numpy as np
import pytest
import scipy.linalg.blas as blas
from bits import assert_same_bits

import ozaki_backend as ob
from ozaki_backend.dispatch import _loophook, routing

pytestmark = pytest.mark.usefixtures("clean_dispatch")
rng = np.random.default_rng(29)
BIG = 10**12          # a floor no product of these tests reaches


def M(*shape):
    return rng.standard_normal(shape)


def emu(a, b):
    return ob.matmul(a, b, engine="cpu")


@pytest.fixture(autouse=True)
def installed():
    ob.dispatch.install()


def calls():
    """(products decided in Python, products the C fast paths left to NumPy)."""
    s = ob.stats()
    return s["native"] + s["routed"] + s["fallback"], sum(s["c_fast_path"].values())


PRODUCTS = {
    "np.dot": lambda a, b: np.dot(a, b),
    "np.dot stacked": lambda a, b: np.dot(np.stack([a, a]), b),
    "np.dot out=": lambda a, b: np.dot(a, b, out=np.empty((a.shape[0], b.shape[1]))),
    "np.inner": lambda a, b: np.inner(a, b.T),
    "np.tensordot": lambda a, b: np.tensordot(a, b, 1),
    "np.tensordot axes=2": lambda a, b: np.tensordot(a.reshape(6, 5, 1),
                                                     b.reshape(5, 1, 7), 2),
    "np.einsum": lambda a, b: np.einsum("ij,jk->ik", a, b),
    "np.einsum implicit": lambda a, b: np.einsum("ij,jk", a, b),
    "np.einsum spaces": lambda a, b: np.einsum("i j , j k -> k i", a, b),
    "dgemm": lambda a, b: blas.dgemm(1.0, a, b),
    "dgemm trans_a": lambda a, b: blas.dgemm(1.0, a.T.copy(), b, trans_a=1),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_below_every_floor_never_enters_python(name):
    a, b = M(6, 5), M(5, 7)
    ref = PRODUCTS[name](a, b)
    with ob.enabled(engine="cpu", min_size=BIG):
        got = PRODUCTS[name](a, b)
    assert_same_bits(got, ref)
    assert calls() == (0, 1)
    assert not routing.recent


@pytest.mark.parametrize("product", [lambda A, v: np.dot(A, v), lambda A, v: np.dot(v, A),
                                     lambda A, v: np.inner(A, v),
                                     lambda A, v: np.dot(A, v[:, None])])
def test_matrix_vector_never_enters_python(product):
    A, v = M(9, 9), M(9)
    with ob.enabled(engine="cpu", min_size=0):
        got = product(A, v)
    assert_same_bits(got, product(A, v))
    assert ob.stats()["c_fast_path"]["vector_shaped"] == 1 and calls()[0] == 0


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_above_the_floor_reaches_python_and_routes(name):
    a, b = M(6, 5), M(5, 7)
    with ob.enabled(engine="cpu", min_size=0):
        PRODUCTS[name](a, b)
    assert ob.stats()["routed"] == 1 and calls()[1] == 0


@pytest.mark.parametrize("call", [
    lambda a, b: np.einsum("ii,jk->jk", a[:5, :5], b),         # a trace
    lambda a, b: np.einsum("...j,jk->...k", a, b),             # ellipsis
    lambda a, b: np.einsum("ij,jk->ik", a[:1], b),             # fine, but m = 1
    lambda a, b: np.einsum("ij,jk->ik", a, b, optimize=False),  # a keyword
    lambda a, b: np.tensordot(a, b, axes=([1], [0])),          # axes as lists
    lambda a, b: np.dot(a, b.reshape(5, 7, 1)[:, :, 0][None]),  # N-d second operand
    lambda a, b: blas.dgemm(alpha=1.0, a=a, b=b),              # keywords only
])
def test_what_the_fast_path_does_not_read_goes_to_python(call):
    # Python decides these (native here: min_size is out of reach); the answer is
    # NumPy's either way, and nothing is counted twice.
    a, b = M(6, 5), M(5, 7)
    ref = call(a, b)
    with ob.enabled(engine="cpu", min_size=BIG):
        got = call(a, b)
    assert_same_bits(np.asarray(got), np.asarray(ref))
    assert calls()[1] <= 1


def test_nothing_enabled_anywhere_is_numpy_and_uncounted():
    a, b = M(6, 5), M(5, 7)
    assert_same_bits(np.dot(a, b), np.dot.original(a, b))
    assert calls() == (0, 0)


def test_the_wrapper_passes_for_the_function():
    for name, f in (("dot", np.dot), ("inner", np.inner), ("tensordot", np.tensordot),
                    ("einsum", np.einsum)):
        assert isinstance(f, _loophook.FastWrapper)
        assert f.__name__ == name and f.__module__ == "numpy"
        assert f.__wrapped__ is f.original is f._ozaki_backend_original
        assert f.__doc__ == f.original.__doc__
        assert pickle.loads(pickle.dumps(f)) is f
    assert np.dot._implementation is np.dot.original._implementation
    assert blas.dgemm.__name__ == "dgemm"

    class Holder:
        dot = np.dot            # bound like a function (and like NumPy's dispatcher)

    A = M(3, 3)

    class Arr(np.ndarray):
        pass

    assert_same_bits(Holder.dot(A, A), np.dot.original(A, A))
    with pytest.raises(TypeError):
        Holder().dot(A)         # self is the first operand: NumPy's own error
    assert np.dot(A.view(Arr), A).shape == (3, 3)


def test_an_error_is_numpys_own():
    with ob.enabled(engine="cpu", min_size=BIG):
        with pytest.raises(ValueError):
            np.dot(M(3, 4), M(5, 6))
        with pytest.raises(ValueError):
            np.einsum("ij,jk->ik", M(3, 4), M(5, 6))


def test_a_trivial_product_routed_by_a_scope_with_no_floor():
    # min_size=0: even a 2 x 2 product is the scope's to route.
    a, b = M(2, 3), M(3, 2)
    with ob.enabled(engine="cpu", min_size=0):
        got = np.einsum("ij,jk", a, b)
    assert_same_bits(got, emu(a, b)) and ob.stats()["routed"] == 1
