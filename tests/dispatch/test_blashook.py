"""The hook at NumPy's BLAS call site (``blashook``, C side ``_blashook.c``): every
float64 GEMM NumPy runs is routed inside a scope, whatever the Python entry point, and
NumPy's own bits come out everywhere else."""

import asyncio
import ctypes
import threading

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _api
from ozaki_backend.dispatch import blashook, config, dothook, patches, route

from bits import assert_same_bits

pytestmark = [
    pytest.mark.usefixtures("clean_dispatch"),
    pytest.mark.skipif(not blashook.available(),
                       reason="NumPy's BLAS call site cannot be hooked on this platform"),
]



@pytest.fixture(autouse=True)
def blas_hook_alone(monkeypatch):
    """These tests are about NumPy's BLAS call site: the dot hook (``dothook``), which
    hands ndarray.dot and NumPy's dot to the wrappers before NumPy reaches BLAS, is
    kept out of them (``tests/dispatch/test_dothook.py`` has its own)."""
    dothook.remove()
    monkeypatch.setattr(patches, "_install_dot_hook", lambda: None)
    yield
    monkeypatch.undo()
    if patches.installed():
        patches._install_dot_hook()


CPU = dict(engine="cpu", min_size=0)
rng = np.random.default_rng(12)
# NumPy's own `dot` function object, as a `from numpy import dot` made before the
# backend was installed holds it (np.dot itself may be the wrapper by now).
dot_bound_before = getattr(np.dot, "_ozaki_backend_original", np.dot)


def M(*shape):
    return rng.standard_normal(shape)


def emu(a, b):
    return ob.matmul(np.asarray(a), np.asarray(b), engine="cpu")


def blas_entries():
    s = ob.stats()["routed_by_entry"]
    return {k: v for k, v in s.items() if k.startswith("BLAS")}


# ----------------------------------------------------------------------- install / remove
def test_installed_by_a_scope_and_removed_by_disable():
    a, b = M(10, 14), M(14, 9)
    nat = a.dot(b)
    with ob.enabled(**CPU):
        st = blashook.status()
        assert st["installed"] and st["reason"] == ""
        kinds = {v["kind"] for v in st["symbols"].values() if v["installed"]}
        assert kinds == {"gemm", "syrk"}
        assert all(v["int_bits"] in (32, 64) and v["relocations"]
                   for v in st["symbols"].values())
        assert_same_bits(a.dot(b), emu(a, b))
    assert blashook.installed()          # still installed between scopes
    # tensordot and multi_dot stay wrapped: their complex128 products reach zgemm,
    # which the hook does not patch (numpy_wrappers.COVERED_BY_BLAS_HOOK)
    assert hasattr(np.tensordot, "_ozaki_backend_original")
    assert "numpy.linalg.multi_dot" in patches.installed_wrappers()
    ob.disable()                         # nothing enabled: the original pointers return
    assert not blashook.installed() and not blashook.settled
    assert_same_bits(a.dot(b), nat)
    with ob.enabled(**CPU):              # the next scope hooks again
        assert blashook.installed()
        assert_same_bits(a.dot(b), emu(a, b))
    assert "BLAS call-site hook installed" in ob.explain()


def test_disable_keeps_the_hook_while_a_scope_is_active():
    with ob.enabled(**CPU):
        ob.disable()
        assert blashook.installed()
    ob.disable()
    assert not blashook.installed()


def test_restore_removes_it_and_the_next_scope_reinstalls():
    a, b = M(10, 14), M(14, 9)
    ob.dispatch.install()
    assert blashook.installed()
    patches.restore()
    assert not blashook.installed()
    with ob.enabled(**CPU):
        assert_same_bits(a.dot(b), emu(a, b))


# ----------------------------------------------------------------------- routed entry points
def test_entry_points_that_reach_blas_are_routed():
    X, Y, Z = M(30, 20), M(20, 25), M(30, 20)
    S = M(8, 8) / 3
    cases = {
        "ndarray.dot": lambda: X.dot(Y),
        "dot bound before": lambda: dot_bound_before(X, Y),
        "np.cov": lambda: np.cov(X),
        "np.corrcoef": lambda: np.corrcoef(X, Z),
        "matrix_power": lambda: np.linalg.matrix_power(S, 5),
        "np.tensordot": lambda: np.tensordot(X.reshape(30, 4, 5), Y.reshape(4, 5, 25), 2),
        "np.linalg.multi_dot": lambda: np.linalg.multi_dot([X, Y, Y.T]),
    }
    ob.dispatch.install()
    native = {k: f() for k, f in cases.items()}
    for name, f in cases.items():
        with ob.enabled(**CPU):
            ob.reset_stats()
            got = f()
            s = ob.stats()
        assert s["routed"] >= 1 and s["fallback"] == 0, name
        # Each product counted once: at the BLAS call site, or by the wrapper that
        # decided it (tensordot, multi_dot), which lets its GEMM through the hook.
        wrapped = name in ("np.tensordot", "np.linalg.multi_dot")
        assert (sum(blas_entries().values()) == (0 if wrapped else s["routed"])
                or name == "matrix_power"), name
        assert got.shape == native[name].shape and got.dtype == native[name].dtype
        np.testing.assert_allclose(got, native[name], rtol=1e-12, atol=1e-12)


def test_dot_method_is_bitwise_the_engine_and_native_outside():
    X, Y = M(30, 20), M(20, 25)
    nat = X.dot(Y)
    with ob.enabled(**CPU):
        got = X.dot(Y)
        assert blas_entries() == {"BLAS dgemm": 1}
    assert_same_bits(got, emu(X, Y))
    assert not np.array_equal(got, nat), "data cannot tell routed from native"
    assert_same_bits(X.dot(Y), nat)              # outside any scope: NumPy's own
    with ob.enabled(**CPU), ob.disabled():
        assert_same_bits(X.dot(Y), nat)


@pytest.mark.parametrize("make", [
    lambda a, b: (np.asfortranarray(a), b),
    lambda a, b: (a, np.asfortranarray(b)),
    lambda a, b: (np.asfortranarray(a), np.asfortranarray(b)),
    lambda a, b: (a.T.copy().T, b.T.copy().T),
    lambda a, b: (np.repeat(a, 2, axis=1)[:, ::2], b[::-1][::-1]),   # strided: NumPy copies
    lambda a, b: (a, np.ascontiguousarray(b[:, :]).T.copy().T),
], ids=["F-a", "F-b", "F-both", "transposed-views", "strided", "F-b-view"])
def test_layouts(make):
    a, b = make(M(11, 13), M(13, 7))
    with ob.enabled(**CPU):
        got = a.dot(b)
        out = np.empty((11, 7))
        np.dot(a, b, out=out)  # through the wrapper: counted under np.dot
    assert_same_bits(got, emu(a, b))
    assert_same_bits(out, emu(a, b))


def test_syrk_products_are_the_engine_product_of_a_and_its_transpose():
    X = M(16, 9)
    with ob.enabled(**CPU):
        g1 = X.dot(X.T)               # dsyrk, no transpose
        g2 = X.T.dot(X)               # dsyrk, transposed
        g3 = dot_bound_before(X, X.T)
        assert blas_entries() == {"BLAS dsyrk": 3}
    assert_same_bits(g1, emu(X, X.T))
    assert_same_bits(g2, emu(X.T, X))
    assert_same_bits(g3, g1)
    assert_same_bits(g1, g1.T)


def test_matmul_products_are_counted_once():
    a, b = M(10, 14), M(14, 9)
    with ob.enabled(**CPU):
        a @ b                                  # the loop hook routes it
        a @ a.T                                # matmul's dsyrk path, still the loop hook
        c = a.copy()
        c[0, 0] = np.nan
        r = c @ b                              # declined (non-finite) by the loop hook:
        s = ob.stats()                         # NumPy's loop must not ask again
    assert s["routed_by_entry"] == {"@/np.matmul": 2}
    assert s["native"] == 1 and s["reasons"]["native"] == {route.NON_FINITE: 1}
    assert np.isnan(r[0]).all()


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_wrapper_decisions_are_counted_once():
    a, b = np.asmatrix(M(10, 14)), np.asmatrix(M(14, 9))
    with ob.enabled(**CPU):
        np.dot(a, b)          # the wrapper passes subclasses through: decided native...
        s = ob.stats()        # ...and NumPy's BLAS call is not decided again
    assert s["routed"] == 0 and s["native"] == 1


def test_engine_products_are_not_rerouted():
    X, Y = M(30, 20), M(20, 25)
    with ob.enabled(**CPU):
        X.dot(Y)
    c = blashook.counters()
    assert c["routed"] == 1 and c["python_calls"] == 1
    assert ob.stats()["routed"] == 1


def test_below_the_floor_and_vectors_stay_in_c():
    X, Y = M(30, 20), M(20, 25)
    nat = X.dot(Y)
    with ob.enabled(engine="cpu", min_size=10**9):
        assert_same_bits(X.dot(Y), nat)
        X.dot(Y[:, 0])
    c = blashook.counters()
    assert c["python_calls"] == 0 and c["below_floor"] >= 1
    assert ob.stats()["routed"] == ob.stats()["native"] == 0


# ----------------------------------------------------------------------- isolation
def test_a_thread_without_a_scope_is_never_routed():
    X, Y = M(30, 20), M(20, 25)
    nat, ref = X.dot(Y), emu(X, Y)
    results, go, done = {}, threading.Event(), threading.Event()

    def worker():
        go.wait()
        results["thread"] = [X.dot(Y) for _ in range(20)]
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    with ob.enabled(**CPU):
        go.set()
        mine = [X.dot(Y) for _ in range(20)]
        done.wait()
    t.join()
    for r in results["thread"]:
        assert_same_bits(r, nat)
    for r in mine:
        assert_same_bits(r, ref)


def test_asyncio_tasks_keep_their_scopes_through_the_blas_hook():
    X, Y = M(30, 20), M(20, 25)
    nat, ref = X.dot(Y), emu(X, Y)

    async def product(scoped):
        if scoped:
            with ob.enabled(**CPU):
                await asyncio.sleep(0)
                return X.dot(Y)
        await asyncio.sleep(0)
        return X.dot(Y)

    async def main():
        return await asyncio.gather(product(True), product(False), product(True))

    r = asyncio.run(main())
    assert_same_bits(r[0], ref)
    assert_same_bits(r[1], nat)
    assert_same_bits(r[2], ref)


def test_enable_reaches_new_threads():
    X, Y = M(30, 20), M(20, 25)
    out = {}
    ob.enable(**CPU)
    try:
        t = threading.Thread(target=lambda: out.setdefault("r", X.dot(Y)))
        t.start()
        t.join()
    finally:
        ob.disable()
    assert_same_bits(out["r"], emu(X, Y))
    assert not blashook.installed()


def test_overflow_is_reported_as_numpys_dot_reports_it():
    a = np.full((4, 4), 1e300)
    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError, match="overflow encountered in dot"):
            a.dot(a)                                   # NumPy's own report
        with ob.enabled(**CPU):
            with pytest.raises(FloatingPointError, match="overflow encountered in dot"):
                a.dot(a)                               # the routed product's, the same
    with ob.enabled(**CPU), np.errstate(over="ignore"):
        assert np.isposinf(a.dot(a)).all()
    assert blas_entries() == {"BLAS dgemm": 2}


# ----------------------------------------------------------------------- errors
def test_errors_fall_back_to_the_original_blas(monkeypatch):
    X, Y = M(30, 20), M(20, 25)
    nat, nat2 = X.dot(Y), X.dot(X.T)

    def broken(*args, **kwargs):
        raise RuntimeError("engine exploded")

    with ob.enabled(**CPU):
        monkeypatch.setattr(_api, "product", broken)
        got = X.dot(Y)
        g2 = X.dot(X.T)
    assert_same_bits(got, nat)
    assert_same_bits(g2, nat2)
    s = ob.stats()
    assert s["routed"] == 0 and s["fallback"] == 2
    assert any("BLAS dgemm" in k for k in s["reasons"]["fallback"])


def test_an_exception_escaping_the_router_is_cleared_and_counted(monkeypatch):
    X, Y = M(30, 20), M(20, 25)
    nat = X.dot(Y)
    monkeypatch.setattr(blashook, "_scope_config", lambda: 1 / 0)  # beyond its try
    with ob.enabled(**CPU):
        got = X.dot(Y)
    assert_same_bits(got, nat)
    # _route_gemm turns it into a counted fallback; nothing is left set
    assert ob.stats()["fallback"] == 1


@pytest.mark.parametrize("kind", ["gemm", "syrk"])
def test_keyboard_interrupt_abandons_the_product_and_propagates(monkeypatch, kind):
    # Ctrl-C during a routed product: no native recomputation (it would delay the
    # interrupt by the whole product), the output is NaN (NumPy's caller gets it back
    # before the interpreter raises), and it is not an error of the hook.
    X, Y = M(30, 20), M(20, 25)
    Y = X.T if kind == "syrk" else Y
    calls = []

    def interrupted():
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(blashook, "_scope_config", interrupted)
    out = np.zeros((30, 30 if kind == "syrk" else 25))
    with ob.enabled(**CPU):
        with pytest.raises(KeyboardInterrupt):
            dot_bound_before(X, Y, out=out)
            for _ in range(10_000):  # the interrupt arrives at the next check
                pass
    assert calls == [1]
    assert np.isnan(out).all()       # dsyrk: the triangle, and NumPy mirrors it
    assert blashook.counters()["errors"] == 0
    assert ob.stats()["fallback"] == 0


# ----------------------------------------------------------------------- the C replacement
def _hook(kind):
    ilp64 = [v["int_bits"] for v in blashook.status()["symbols"].values()
             if v["kind"] == kind][0] == 64
    I = ctypes.c_int64 if ilp64 else ctypes.c_int32
    P = ctypes.c_void_p
    d = ctypes.c_double
    if kind == "gemm":
        proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, I, I, I, d,
                                 P, I, P, I, d, P, I)
    else:
        proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, I, I, d,
                                 P, I, d, P, I)
    return proto(blashook._C.blas_hook_address(kind, ilp64))


def _ptr(x):
    return x.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("order", [101, 102], ids=["row-major", "col-major"])
@pytest.mark.parametrize("ta, tb", [(111, 111), (112, 111), (111, 112), (112, 112)])
def test_gemm_replacement_orders_transposes_alpha_beta(order, ta, tb):
    m, n, k = 7, 6, 5
    opA, opB, C0 = M(m, k), M(k, n), M(m, n)
    alpha, beta = 1.5, -0.5
    # Store each operand the way the BLAS call describes it.
    store = (lambda x: np.ascontiguousarray(x)) if order == 101 else np.asfortranarray
    A = store(opA.T) if ta == 112 else store(opA)
    B = store(opB.T) if tb == 112 else store(opB)
    C = store(C0.copy())
    ld = (lambda x: x.shape[1]) if order == 101 else (lambda x: x.shape[0])
    gemm = _hook("gemm")
    ob.dispatch.install()
    cfg = config.Config.build(None, CPU)
    want = _api.product(opA, opB, dict(cfg.opts), alpha=alpha, beta=beta, c=C0)
    with ob.enabled(**CPU):
        gemm(order, ta, tb, m, n, k, alpha, _ptr(A), ld(A), _ptr(B), ld(B), beta, _ptr(C),
             ld(C))
    assert blas_entries() == {"BLAS dgemm": 1}
    assert_same_bits(np.ascontiguousarray(C), np.ascontiguousarray(want))
    # the same call outside a scope is the BLAS itself
    C2 = store(C0.copy())
    gemm(order, ta, tb, m, n, k, alpha, _ptr(A), ld(A), _ptr(B), ld(B), beta, _ptr(C2),
         ld(C2))
    np.testing.assert_allclose(C2, alpha * opA @ opB + beta * C0, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("order", [101, 102], ids=["row-major", "col-major"])
@pytest.mark.parametrize("uplo", [121, 122], ids=["upper", "lower"])
@pytest.mark.parametrize("trans", [111, 112], ids=["N", "T"])
def test_syrk_replacement_writes_only_the_requested_triangle(order, uplo, trans):
    n, k = 6, 4
    opA = M(n, k)
    store = (lambda x: np.ascontiguousarray(x)) if order == 101 else np.asfortranarray
    A = store(opA.T) if trans == 112 else store(opA)
    C = store(np.full((n, n), 7.0))
    ld = (lambda x: x.shape[1]) if order == 101 else (lambda x: x.shape[0])
    syrk = _hook("syrk")
    ob.dispatch.install()
    with ob.enabled(**CPU):
        syrk(order, uplo, trans, n, k, 1.0, _ptr(A), ld(A), 0.0, _ptr(C), ld(C))
    assert blas_entries() == {"BLAS dsyrk": 1}
    want = emu(opA, opA.T)
    tri = np.triu if uplo == 121 else np.tril
    other = np.tril if uplo == 121 else np.triu
    assert_same_bits(tri(C), tri(want))
    assert (other(C, -1 if uplo == 121 else 1) == other(np.full((n, n), 7.0),
                                                       -1 if uplo == 121 else 1)).all()


def test_bad_leading_dimension_is_left_to_blas():
    gemm = _hook("gemm")
    a = M(4, 4)
    c = np.zeros((4, 4))
    ob.dispatch.install()
    with ob.enabled(**CPU):
        # lda < k: BLAS itself reports the error (OpenBLAS prints and returns); the hook
        # must not build views over memory that is not there.
        gemm(101, 111, 111, 4, 4, 4, 1.0, _ptr(a), 2, _ptr(a), 4, 0.0, _ptr(c), 4)
    assert ob.stats()["routed"] == 0 and blashook.counters()["python_calls"] == 0


# ----------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_dot_method_and_syrk_are_bitwise_the_cpu_engine():
    X, Y = M(300, 200), M(200, 250)
    with ob.enabled(engine="cuda", min_size=0):
        d = X.dot(Y)
        g = X.dot(X.T)
        c = np.cov(X)
        s = ob.stats()
    assert s["routed_by_entry"].get("BLAS dgemm") == 1
    assert s["routed_by_entry"].get("BLAS dsyrk") == 2
    assert all("cuda" in r for r in s["reasons"]["routed"])
    assert_same_bits(d, emu(X, Y))
    assert_same_bits(g, emu(X, X.T))
    with ob.enabled(**CPU):
        c_cpu = np.cov(X)
    assert_same_bits(c, c_cpu)


def test_a_module_without_blas_imports_is_reported_and_nothing_is_patched():
    assert not blashook.installed()
    other = blashook._C.__file__          # imports no cblas symbol
    try:
        assert blashook._C.blas_install(other, blashook._route_gemm,
                                        blashook._route_syrk) is False
        st = blashook.status()
        assert not st["installed"] and st["symbols"] == {}
        assert "imports no cblas dgemm/dsyrk symbol" in st["reason"]
        assert blashook._C.blas_install("/nonexistent/module.so", blashook._route_gemm,
                                        blashook._route_syrk) is False
        assert "dlopen" in blashook.status()["reason"]
    finally:
        with ob.enabled(**CPU):               # NumPy's module is found again
            assert blashook.installed()
