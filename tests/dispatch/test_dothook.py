"""The dot hook (``dothook``, C side ``_dothook.c``): inside a scope, ``ndarray.dot`` and
NumPy's ``dot`` builtin (behind ``np.dot``, ``np.cov`` and references taken before
installation) are handed to the dot wrappers before NumPy allocates and zero-fills the
result; everything else is NumPy's own call, results and errors included."""

import threading

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import blashook, dothook, patches, route

from bits import assert_same_bits

pytestmark = [
    pytest.mark.usefixtures("clean_dispatch"),
    pytest.mark.skipif(not hasattr(dothook._C, "dot_install"),
                       reason="the _loophook extension is not built"),
]

CPU = dict(engine="cpu", min_size=0)
rng = np.random.default_rng(29)
# NumPy's own dot, as a `from numpy import dot` made before installation holds it.
dot_bound_before = getattr(np.dot, "_ozaki_backend_original", np.dot)


def M(*shape):
    return rng.standard_normal(shape)


def emu(a, b):
    return ob.matmul(np.asarray(a), np.asarray(b), engine="cpu")


def entries():
    return dict(ob.stats()["routed_by_entry"])


def test_installed_by_a_scope_and_removed_by_restore():
    a, b = M(10, 14), M(14, 9)
    nat = a.dot(b)
    with ob.enabled(**CPU):
        assert dothook.installed() == {"ndarray.dot": True, "dot builtin": True}
        assert_same_bits(a.dot(b), emu(a, b))
    assert dothook.installed()["ndarray.dot"]       # inert between scopes
    assert_same_bits(a.dot(b), nat)
    patches.restore()
    assert dothook.installed() == {"ndarray.dot": False, "dot builtin": False}
    assert_same_bits(a.dot(b), nat)
    with ob.enabled(**CPU):                           # the next scope installs it again
        assert dothook.installed()["ndarray.dot"]
        assert_same_bits(a.dot(b), emu(a, b))


@pytest.mark.parametrize("call, entry", [
    (lambda a, b: a.dot(b), "ndarray.dot"),
    (lambda a, b: a.dot(b, out=np.empty((a.shape[0], b.shape[1]))), "ndarray.dot"),
    (lambda a, b: a.dot(b, np.empty((a.shape[0], b.shape[1]))), "ndarray.dot"),
    (lambda a, b: dot_bound_before(a, b), "np.dot"),
    (lambda a, b: np.cov(a), "np.dot"),
])
def test_routed_before_numpy_reaches_blas(call, entry):
    """Each product is routed by the dot hook's wrapper, counted once under its entry
    point, with the engine's bits: NumPy's BLAS call site never sees it (NumPy has not
    allocated, let alone zero-filled, a result)."""
    a, b = M(30, 20), M(20, 25)
    ref = call(a, b)
    with ob.enabled(**CPU):
        ob.reset_stats()
        got = call(a, b)
        s = ob.stats()
    assert entries() == {entry: s["routed"]} and s["fallback"] == 0
    assert not any(k.startswith("BLAS") for k in s["routed_by_entry"])
    assert got.shape == ref.shape and got.dtype == ref.dtype and got.flags.c_contiguous
    if entry == "ndarray.dot":
        assert_same_bits(got, emu(a, b))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_out_is_filled_and_returned():
    a, b = M(12, 8), M(8, 6)
    out = np.full((12, 6), np.nan)
    with ob.enabled(**CPU):
        res = a.dot(b, out=out)
    assert res is out
    assert_same_bits(out, emu(a, b))


@pytest.mark.parametrize("call", [
    lambda a, b: a.dot(b.tolist()),                       # b not an ndarray
    lambda a, b: np.asmatrix(a).dot(b),                   # a subclass
    lambda a, b: a.dot(np.asmatrix(b)),
    lambda a, b: a.dot(b[:, 0]),                          # matrix-vector
    lambda a, b: a[0].dot(b),
    lambda a, b: a.astype(np.float32).dot(b.astype(np.float32)),
    lambda a, b: a.dot(b, out=None),
])
def test_other_calls_give_numpys_results(call):
    a, b = M(10, 8), M(8, 7)
    ref = call(a, b)
    with ob.enabled(engine="cpu", min_size=10**12):   # nothing is large enough to route
        ob.reset_stats()
        got = call(a, b)
        assert ob.stats()["routed"] == 0
    assert type(got) is type(ref)
    assert_same_bits(np.asarray(got), np.asarray(ref))


@pytest.mark.parametrize("call", [
    lambda a, b: a.dot(b.T),                               # shapes not aligned
    lambda a, b: a.dot(),                                  # b missing
    lambda a, b: a.dot(b, None, None),                     # too many arguments
    lambda a, b: a.dot(b, bogus=1),                        # unknown keyword
    lambda a, b: a.dot(b, out=np.empty((3, 3))),           # out of the wrong shape
    lambda a, b: dot_bound_before(a, b.T),
])
def test_bad_calls_raise_numpys_errors(call):
    a, b = M(10, 8), M(8, 7)
    with pytest.raises(Exception) as native:
        call(a, b)
    with ob.enabled(**CPU):
        with pytest.raises(type(native.value)) as scoped:
            call(a, b)
    assert str(scoped.value) == str(native.value)


def test_a_thread_without_a_scope_is_not_routed():
    a, b = M(20, 16), M(16, 18)
    nat = a.dot(b)
    got = {}
    with ob.enabled(**CPU):
        t = threading.Thread(target=lambda: got.setdefault("c", a.dot(b)))
        t.start()
        t.join()
        assert_same_bits(a.dot(b), emu(a, b))
    assert_same_bits(got["c"], nat)


def test_products_inside_wrappers_are_decided_once():
    """tensordot and multi_dot call NumPy's dot themselves: those calls go to NumPy
    (each product is decided by one wrapper, and what it leaves undecided reaches the
    BLAS call site), never back through a second wrapper."""
    X, Y = M(30, 20), M(20, 25)
    with ob.enabled(**CPU):
        ob.reset_stats()
        np.tensordot(X.reshape(30, 4, 5), Y.reshape(4, 5, 25), 2)
        np.linalg.multi_dot([X, Y, Y.T])
        s = ob.stats()
    assert "ndarray.dot" not in s["routed_by_entry"]
    assert "np.dot" not in s["routed_by_entry"]
    assert s["fallback"] == 0


def test_keyboard_interrupt_propagates(monkeypatch):
    X, Y = M(30, 20), M(20, 25)
    calls = []

    def interrupted():
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(route, "scope_config", interrupted)
    with ob.enabled(**CPU):
        with pytest.raises(KeyboardInterrupt):
            X.dot(Y)
    assert calls == [1]
    assert ob.stats()["fallback"] == 0


def test_counters_say_what_was_handed_over():
    a, b = M(10, 8), M(8, 7)
    with ob.enabled(**CPU):
        before = dothook.counters()
        a.dot(b)
        a.dot(b.tolist())
        after = dothook.counters()
    assert after["handed_to_router"] - before["handed_to_router"] == 1
    assert after["left_to_numpy"] - before["left_to_numpy"] >= 1
    assert "routed before NumPy allocates" in dothook.status()


def test_the_blas_hook_still_routes_what_the_dot_hook_leaves(monkeypatch):
    """With the dot hook removed, NumPy's BLAS call site still routes ndarray.dot (after
    NumPy's allocation): the two hooks are independent."""
    if not blashook.available():
        pytest.skip("NumPy's BLAS call site cannot be hooked on this platform")
    a, b = M(30, 20), M(20, 25)
    monkeypatch.setattr(patches, "_install_dot_hook", lambda: None)
    dothook.remove()
    try:
        with ob.enabled(**CPU):
            ob.reset_stats()
            got = a.dot(b)
            assert set(entries()) == {"BLAS dgemm"}
        assert_same_bits(got, emu(a, b))
    finally:
        monkeypatch.undo()
        if patches.installed():
            patches._install_dot_hook()


def test_vector_shaped_and_small_products_never_enter_python():
    """Declined in C, as the wrappers' fast path declines them (and counted there): a
    matrix-vector ``a.dot(v)`` or a product below every floor costs what it costs
    outside a scope (statsmodels' suites make millions of them)."""
    from ozaki_backend.dispatch import routing

    A, v, B = M(9, 9), M(9), M(9, 9)
    calls = [lambda: A.dot(v), lambda: A.dot(B), lambda: v.dot(A),
             lambda: dot_bound_before(A, B)]
    ref = [f() for f in calls]
    routing.recent.clear()
    with ob.enabled(engine="cpu", min_size=10**9):
        ob.reset_stats()
        got = [f() for f in calls]
        s = ob.stats()
    assert s["c_fast_path"] == {"below_floor": 2, "vector_shaped": 2}, s["c_fast_path"]
    assert s["native"] == 0 and not routing.recent      # no Python decision was made
    for g, r in zip(got, ref):
        assert_same_bits(g, r)
