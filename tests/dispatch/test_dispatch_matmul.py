"""``@`` and ``np.matmul`` through the C inner-loop hook (CPU engine, min_size=0).

A routed product has the CPU engine's bits, which differ from NumPy's BLAS in the last
places, so every test can tell a routed product from a native one.
"""

import contextlib
import logging
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _native
from ozaki_backend.dispatch import loophook, route

CPU = dict(engine="cpu", min_size=0)
rng = np.random.default_rng(11)
pytestmark = [pytest.mark.usefixtures("clean_dispatch"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]  # np.matrix


def emu(a, b):
    """The CPU engine's product, computed outside any scope."""
    return ob.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                     engine="cpu")


def same(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)


def M(*shape):
    return rng.standard_normal(shape)


@contextlib.contextmanager
def router(fn):
    """Use ``fn`` as the C hook's Python callback for the body."""
    ob.dispatch.install()  # first, or installing later would put loophook._route back
    loophook._C.install(fn)
    try:
        yield
    finally:
        loophook._C.install(loophook._route)


# ----------------------------------------------------------------------- layouts
LAYOUTS = {
    "c": lambda: (M(10, 14), M(14, 9)),
    "fortran": lambda: (np.asfortranarray(M(10, 14)), np.asfortranarray(M(14, 9))),
    "transposed": lambda: (M(14, 10).T, M(9, 14).T),
    "strided": lambda: (M(20, 42)[::2, ::3], M(28, 27)[::2, ::3]),
    "negative": lambda: (M(10, 14)[::-1, ::-1], M(14, 9)[:, ::-1]),
    "stacked": lambda: (M(3, 10, 14), M(3, 14, 9)),
    "broadcast_b": lambda: (M(3, 10, 14), M(14, 9)),
    "broadcast_a": lambda: (M(10, 14), M(2, 3, 14, 9)),
    "broadcast_size1": lambda: (M(2, 1, 10, 14), M(1, 3, 14, 9)),
    "stacked_strided_4d": lambda: (M(2, 6, 10, 14)[:, ::2], M(2, 3, 9, 14).swapaxes(-1, -2)),
    "noncontig_stack": lambda: (M(4, 10, 14)[::-2], M(4, 14, 9)[1::2]),
    "zero_stride_core": lambda: (np.broadcast_to(M(1, 14), (10, 14)), M(14, 9)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_route_bitwise_like_the_cpu_engine(layout):
    a, b = LAYOUTS[layout]()
    ref = emu(a, b)
    nat = np.matmul(a, b)
    assert not np.array_equal(ref, nat)
    with ob.enabled(**CPU):
        r1 = a @ b
        r2 = np.matmul(a, b)
    assert same(r1, ref) and same(r2, ref)
    assert r1.flags.c_contiguous == nat.flags.c_contiguous
    assert same(a @ b, nat)                      # outside the scope: NumPy again
    assert ob.stats()["routed_by_entry"]["@/np.matmul"] >= 2


def test_out_argument_variants():
    a, b = M(12, 12), M(12, 12)
    ref = emu(a, b)
    with ob.enabled(**CPU):
        out = np.empty((12, 12))
        assert np.matmul(a, b, out=out) is out and same(out, ref)
        outf = np.empty((12, 12), order="F")
        np.matmul(a, b, out=outf)
        assert same(outf, ref)
        big = np.zeros((24, 36))
        view = big[::2, ::3]
        np.matmul(a, b, out=view)
        assert same(view, ref) and np.count_nonzero(big) == np.count_nonzero(ref)
        out32 = np.empty((12, 12), dtype=np.float32)
        np.matmul(a, b, out=out32)
        assert same(out32, ref.astype(np.float32))


@pytest.mark.parametrize("which", ["a", "b"])
def test_out_aliasing_an_input(which):
    a, b = M(12, 12), M(12, 12)
    ref = emu(a, b)
    with ob.enabled(**CPU):
        target = a if which == "a" else b
        np.matmul(a, b, out=target)
    assert same(target, ref)


def test_inplace_matmul_operator():
    a, b = M(12, 12), M(12, 12)
    ref = emu(a, b)
    with ob.enabled(**CPU):
        a @= b
    assert same(a, ref)


def test_float32_times_float64_promotes_into_the_hook():
    a, b = M(10, 14).astype(np.float32), M(14, 9)
    ref = emu(a.astype(np.float64), b)
    with ob.enabled(**CPU):
        r = a @ b
    assert same(r, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.int64, object])
def test_other_dtypes_are_untouched(dtype):
    a = (M(10, 14) * 4).astype(dtype)
    b = (M(14, 9) * 4).astype(dtype)
    nat = np.matmul(a, b)
    with ob.enabled(**CPU):
        r = a @ b
    assert r.dtype == nat.dtype and np.array_equal(r, nat)
    assert ob.stats()["routed_by_entry"] == {}


def test_matrix_subclass_keeps_its_semantics_and_is_routed():
    # NumPy's own subclass handling runs around the loop: the hook only sees float64
    # buffers, so np.matrix stays a matrix and its product is emulated.
    a, b = np.asmatrix(M(10, 14)), np.asmatrix(M(14, 9))
    ref = emu(np.asarray(a), np.asarray(b))
    with ob.enabled(**CPU):
        r = a @ b
    assert type(r) is np.matrix and np.array_equal(np.asarray(r), ref)


@pytest.mark.parametrize("shapes", [((10, 14), (14,)), ((14,), (14, 9)), ((10, 14), (14, 1)),
                                    ((1, 14), (14, 9)), ((14,), (14,)), ((3, 10, 14), (14,))])
def test_vector_shapes_stay_native(shapes):
    a, b = M(*shapes[0]), M(*shapes[1])
    nat = np.matmul(a, b)
    with ob.enabled(**CPU):
        r = a @ b
    assert np.array_equal(r, nat)
    assert ob.stats()["routed"] == 0


def test_non_finite_operands_take_the_native_path():
    a, b = M(10, 14), M(14, 9)
    a[3, 4] = np.nan
    b[0, 0] = np.inf
    nat = np.matmul(a, b)
    with ob.enabled(**CPU):
        r = a @ b
    assert np.array_equal(r, nat, equal_nan=True)
    s = ob.stats()
    assert s["routed"] == 0 and s["reasons"]["native"] == {"non-finite operand": 1}


def test_min_size_threshold():
    a, b = M(10, 14), M(14, 9)                   # m*n*k = 1260
    ref, nat = emu(a, b), np.matmul(a, b)
    with ob.enabled(engine="cpu", min_size=1261):
        assert same(a @ b, nat)
    with ob.enabled(engine="cpu", min_size=1260):
        assert same(a @ b, ref)
    assert ob.stats()["c_fast_path"]["below_floor"] >= 1


def test_matmul_stays_the_same_object():
    before = np.matmul
    ob.dispatch.install()
    with ob.enabled(**CPU):
        assert np.matmul is before
        assert isinstance(np.matmul, np.ufunc) and "dd->d" in np.matmul.types
    assert loophook.installed()


@pytest.mark.parametrize("shapes", [((3, 4), (5, 6)), ((2, 3, 4), (3, 4, 5)),
                                    ((3, 4), ()), ((2, 3, 4), (4, 3, 5))])
def test_bad_input_raises_numpys_error(shapes):
    a, b = M(*shapes[0]), np.asarray(M(*shapes[1]))

    def err():
        with pytest.raises(Exception) as info:
            np.matmul(a, b)
        return type(info.value), str(info.value)

    expected = err()
    with ob.enabled(**CPU):
        assert err() == expected


def test_exception_in_routed_path_falls_back_and_is_counted(monkeypatch, caplog):
    a, b = M(10, 14), M(14, 9)
    nat = np.matmul(a, b)

    def broken(x, y, opts, **scaling):
        view = x[0]  # noqa: F841  (a view of NumPy's loop buffer in a traceback frame)
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(route._api, "product", broken)
    caplog.set_level(logging.DEBUG, logger="ozaki_backend")
    with ob.enabled(**CPU), warnings.catch_warnings():
        warnings.simplefilter("error")       # logged, not warned (see _warnings)
        r = a @ b
    assert same(r, nat)
    s = ob.stats()
    assert s["fallback"] == 1 and s["routed"] == 0
    assert s["reasons"]["fallback"] == {"@/np.matmul: error (RuntimeError)": 1}
    assert s.details["fallback"]["@/np.matmul: error (RuntimeError)"] == \
        "RuntimeError: engine exploded"
    # The logged traceback (DEBUG) must not keep views of the (freed) loop buffers reachable.
    (record,) = [r for r in caplog.records if r.exc_info]
    tb = record.exc_info[2]
    while tb is not None:
        assert not any(isinstance(v, np.ndarray) for v in tb.tb_frame.f_locals.values())
        tb = tb.tb_next


def test_exception_escaping_the_python_router_is_cleared_in_c():
    a, b = M(10, 14), M(14, 9)
    nat = np.matmul(a, b)

    def raising_router(x, y, out):
        raise ValueError("not caught in Python")

    with router(raising_router), ob.enabled(**CPU):
        r = a @ b
        r2 = np.matmul(a, b)
    assert same(r, nat) and same(r2, nat)
    assert ob.stats()["reasons"]["fallback"] == {"@/np.matmul: error in the C hook": 2}


@pytest.mark.parametrize("stacked", [False, True])
def test_keyboard_interrupt_in_router_abandons_the_product(stacked):
    # Ctrl-C during a routed product propagates from the ufunc call itself: no native
    # recomputation first, nothing written, not counted as an error of the C hook; a
    # stacked call's later loop invocations return at once.
    a, b = M(10, 14), M(14, 9)
    if stacked:   # broadcast over two axes: NumPy invokes the loop twice (N = 3 each)
        a, b = M(2, 1, 10, 14), M(1, 3, 14, 9)
    out = np.zeros(np.matmul(a, b).shape)
    calls = []

    def interrupted(x, y, o):
        calls.append(x.shape)
        raise KeyboardInterrupt

    with router(interrupted), ob.enabled(**CPU):
        with pytest.raises(KeyboardInterrupt):
            np.matmul(a, b, out=out)
    assert len(calls) == 1
    with ob.enabled(**CPU):
        assert same(a @ b, emu(a, b))      # the next call is routed again
    assert not out.any()
    assert loophook.counters()["errors"] == 0
    assert ob.stats()["fallback"] == 0


def test_suspended_products_are_never_routed():
    a, b = M(10, 14), M(14, 9)
    nat = np.matmul(a, b)
    with ob.enabled(**CPU):
        with _native.suspended():
            assert same(a @ b, nat)
    assert ob.stats()["routed"] == 0


def test_gil_released_products_in_threads():
    # N*m*p > 500: NumPy releases the GIL around the loop; the hook re-acquires it.
    a, b = M(40, 30), M(30, 40)
    ref, nat = emu(a, b), np.matmul(a, b)
    barrier = threading.Barrier(2)

    def on():
        with ob.enabled(**CPU):
            barrier.wait()
            return [same(a @ b, ref) for _ in range(3)]

    def off():
        barrier.wait()
        return [same(a @ b, nat) for _ in range(3)]

    with ThreadPoolExecutor(2) as ex:
        f1, f2 = ex.submit(on), ex.submit(off)
        assert f1.result() == [True] * 3 and f2.result() == [True] * 3


def test_explain_matches_what_happens():
    a, b = M(10, 14), M(14, 9)
    assert not ob.explain(a, b)
    assert "no enabled scope" in ob.explain(a, b).reason
    with ob.enabled(engine="cpu", min_size=2000):
        d = ob.explain(a, b)
        assert not d and "below min_size" in d.reason and (d.m, d.n, d.k) == (10, 9, 14)
        with ob.enabled(min_size=0):
            d = ob.explain(a, b)
            assert d and d.engine == "cpu"
            assert not ob.explain(a.astype(np.float32), b.astype(np.float32))
            assert "1-d" in ob.explain(a, b[:, 0]).reason
            bad = a.copy()
            bad[0, 0] = np.nan
            assert ob.explain(bad, b).reason == "non-finite operand"
            assert "not a plain" in ob.explain(np.asmatrix(a), b).reason
            a @ b
            report = ob.explain()
            assert "enabled here: True" in report and "routed to engine=cpu" in report


def test_floating_point_flags_of_the_routed_path_do_not_leak_into_matmul():
    # NumPy warns "invalid value encountered in matmul" from the FP status flags left
    # after the loop. Code in the routed path (seen with the CUDA engine) can leave a
    # flag set without warning itself; the hook restores the flags around it.
    import ctypes
    import sys
    import warnings

    if not sys.platform.startswith("linux"):
        pytest.skip("raises the flag through glibc's feraiseexcept")
    libm = ctypes.CDLL("libm.so.6")
    FE_INVALID = 1  # x86-64 and aarch64 glibc

    a, b = M(10, 14), M(14, 9)
    ref = emu(a, b)

    def dirty_router(x, y, out):
        routed = loophook._route(x, y, out)
        libm.feraiseexcept(FE_INVALID)   # as if the engine's last step had set it
        return routed

    with router(dirty_router), ob.enabled(**CPU), warnings.catch_warnings():
        warnings.simplefilter("error")
        r = a @ b
    assert same(r, ref)
