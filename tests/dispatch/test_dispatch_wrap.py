"""Per-array opt-in: ozaki_backend.wrap / unwrap through NumPy's protocols."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import OzakiArray

rng = np.random.default_rng(9)
pytestmark = pytest.mark.usefixtures("clean_dispatch_scopes")


def M(*shape):
    return rng.standard_normal(shape)


def emu(a, b):
    return ob.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                     engine="cpu")


@pytest.fixture
def cpu_numerics():
    # Wrapped arrays use the scope's numerical options; engine="cpu" keeps the
    # expected bits independent of a GPU being present.
    with ob.enabled(engine="cpu", min_size=10**12):
        yield


def test_wrap_unwrap_basics():
    x = M(4, 5)
    w = ob.wrap(x)
    assert type(w) is OzakiArray and w.dtype == np.float64 and np.shares_memory(w, x)
    assert type(ob.unwrap(w)) is np.ndarray and np.shares_memory(ob.unwrap(w), x)
    assert ob.wrap([[1, 2], [3, 4]]).dtype == np.float64
    assert type(ob.unwrap([1.0, 2.0])) is np.ndarray
    assert type(w.T) is OzakiArray and type(w[1:]) is OzakiArray
    assert type(w + 1) is OzakiArray and type(np.sin(w)) is OzakiArray
    assert type(w > 0) is np.ndarray and (w > 0).dtype == bool
    assert type(np.asarray(w)) is np.ndarray


def test_matmul_routes_whatever_the_scope(cpu_numerics):
    a, b = M(10, 14), M(14, 9)
    ref = emu(a, b)
    wa = ob.wrap(a)
    with ob.disabled():                     # even here
        r = wa @ b
        r2 = np.matmul(a, ob.wrap(b))
    assert type(r) is OzakiArray and np.array_equal(r, ref) and not np.array_equal(r, a @ b)
    assert np.array_equal(r2, ref)
    out = ob.wrap(np.empty((10, 9)))
    assert np.matmul(wa, b, out=out) is out and np.array_equal(out, ref)
    stacked = ob.wrap(M(3, 10, 14))
    assert np.array_equal(stacked @ b, emu(np.asarray(stacked), b))
    assert ob.stats()["routed_by_entry"]["wrap: @"] == 4


def test_array_functions_route(cpu_numerics):
    a, b, c = M(10, 14), M(14, 9), M(9, 6)
    wa = ob.wrap(a)
    with ob.disabled():
        d = np.dot(wa, b)
        i = np.inner(wa, b.T)
        t = np.tensordot(wa, b, 1)
        e = np.einsum("ij,jk->ik", wa, b)
        md = np.linalg.multi_dot([wa, b, c])
    ref = emu(a, b)
    for r in (d, i, t, e):
        assert type(r) is OzakiArray and np.array_equal(r, ref)
    assert np.array_equal(md, np.linalg.multi_dot([a, b, c])) is False
    with ob.enabled(engine="cpu", min_size=0):
        assert np.array_equal(md, np.linalg.multi_dot([a, b, c]))


def test_not_routed_through_wrap():
    a, b = M(10, 14), M(14, 9)
    wa = ob.wrap(a)
    assert np.array_equal(wa.dot(b), a.dot(b))          # the method bypasses protocols
    v = M(14)
    assert np.array_equal(wa @ v, a @ v)                # matrix-vector stays native
    bad = a.copy()
    bad[0, 0] = np.inf
    assert np.array_equal(ob.wrap(bad) @ b, bad @ b, equal_nan=True)
    with pytest.raises(ValueError) as info:
        ob.wrap(M(3, 4)) @ M(5, 6)
    with pytest.raises(ValueError) as native:
        M(3, 4) @ M(5, 6)
    assert str(info.value) == str(native.value)
