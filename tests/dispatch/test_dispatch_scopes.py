"""Scopes: enabled()/disabled()/enable()/disable(), validation, nesting, decorators,
exception safety, thread and asyncio isolation, and the C hook's activity count."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _native
from ozaki_backend.dispatch import config, loophook

CPU = dict(engine="cpu", min_size=0)
pytestmark = pytest.mark.usefixtures("clean_dispatch")


@pytest.fixture(scope="module")
def ab():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((12, 20)), rng.standard_normal((20, 9))
    ref = ob.matmul(a, b, engine="cpu")
    assert not np.array_equal(ref, np.matmul(a, b)), "data cannot tell routed from native"
    return a, b, ref


def routed(a, b, ref):
    """True if ``a @ b`` computed now gives the emulated bits, False if NumPy's."""
    r = a @ b
    if np.array_equal(r, ref):
        return True
    assert np.array_equal(r, _native.matmul(a, b)), "neither the emulated nor NumPy's bits"
    return False


# ----------------------------------------------------------------------- validation
def test_unknown_key_raises_at_the_call_naming_it():
    with pytest.raises(TypeError, match="'enigne'"):
        ob.enabled(enigne="cpu")
    with pytest.raises(TypeError, match="'foo'"):
        ob.enable(foo=1)


@pytest.mark.parametrize("kw, exc, word", [
    (dict(engine="gpu"), ValueError, "engine"),
    (dict(moduli=1), ValueError, "moduli"),
    (dict(moduli=21), ValueError, "moduli"),
    (dict(moduli="8"), TypeError, "moduli"),
    (dict(bits=0), ValueError, "bits"),
    (dict(mode="slow"), ValueError, "mode"),
    (dict(scheme="ozaki3"), ValueError, "scheme"),
    (dict(precision="fp32"), ValueError, "precision"),
    (dict(residual=1), TypeError, "residual"),
    (dict(min_size=-1), ValueError, "min_size"),
    (dict(min_size=True), TypeError, "min_size"),
    (dict(min_size=2.5), TypeError, "min_size"),
    (dict(min_size="big"), TypeError, "min_size"),
    (dict(bits=30, moduli=8), ValueError, "bits"),
])
def test_bad_values_raise_naming_the_option(kw, exc, word):
    with pytest.raises(exc, match=word):
        ob.enabled(**kw)
    assert config._STATE.get() is None


def test_valid_values_and_min_size_forms():
    assert ob.enabled(min_size=1e6).config.min_size == 1_000_000
    assert ob.enabled(min_size=np.int64(5)).config.min_size == 5
    assert ob.enabled(min_size="auto").config.min_size is None
    c = ob.enabled(scheme="phase22", residual=True).config
    assert (c.scheme, c.residual) == ("phase22", True)


# ----------------------------------------------------------------------- routing on/off
def test_scope_routes_inside_and_not_outside(ab):
    a, b, ref = ab
    assert not routed(a, b, ref)
    with ob.enabled(**CPU) as scope:
        assert scope.config.engine == "cpu"
        assert routed(a, b, ref)
    assert not routed(a, b, ref)


def test_nesting_inherits_and_disabled_wins(ab):
    a, b, ref = ab
    with ob.enabled(engine="cpu", min_size=10**9):
        assert not routed(a, b, ref)               # below min_size
        with ob.enabled(min_size=0) as inner:      # inherits engine="cpu"
            assert inner.config.engine == "cpu"
            assert routed(a, b, ref)
            with ob.disabled():
                assert not routed(a, b, ref)
                with ob.enabled():                 # back on, config inherited
                    assert routed(a, b, ref)
            assert routed(a, b, ref)
        assert not routed(a, b, ref)


def test_precision_choice_replaces_inherited_alternative():
    with ob.enabled(moduli=10):
        c = ob.enabled(bits=30).config
        assert (c.bits, c.moduli) == (30, None)
        c = ob.enabled(precision="fp64").config
        assert (c.bits, c.moduli) == (None, None)
        c = ob.enabled(scheme="phase22").config
        assert (c.scheme, c.moduli) == ("phase22", None)


def test_exception_inside_scope_restores_state(ab):
    a, b, ref = ab
    with pytest.raises(KeyError):
        with ob.enabled(**CPU):
            assert routed(a, b, ref)
            raise KeyError("boom")
    assert config._STATE.get() is None
    assert not routed(a, b, ref)


def test_decorator_sync_and_reentrant(ab):
    a, b, ref = ab
    scope = ob.enabled(**CPU)

    @scope
    def f(depth):
        r = routed(a, b, ref)
        return [r] + (f(depth - 1) if depth else [])

    @ob.disabled()
    def g():
        return routed(a, b, ref)

    assert f.__name__ == "f"
    assert f(2) == [True, True, True]     # the same scope object re-entered
    assert not routed(a, b, ref)
    with ob.enabled(**CPU):
        assert g() is False
        assert routed(a, b, ref)


def test_decorator_async(ab):
    a, b, ref = ab

    @ob.enabled(**CPU)
    async def f():
        await asyncio.sleep(0)
        return routed(a, b, ref)

    assert asyncio.run(f()) is True
    assert not routed(a, b, ref)


def test_scope_object_reused_across_threads(ab):
    a, b, ref = ab
    scope = ob.enabled(**CPU)
    barrier = threading.Barrier(2)

    def work():
        with scope:
            barrier.wait()
            r = routed(a, b, ref)
            barrier.wait()
        return r

    with ThreadPoolExecutor(2) as ex:
        assert list(ex.map(lambda _: work(), range(2))) == [True, True]


def test_out_of_order_exit_is_refused():
    s1, s2 = ob.enabled(**CPU), ob.enabled(**CPU)
    s1.__enter__()
    s2.__enter__()
    with pytest.raises(RuntimeError, match="out of order"):
        s1.__exit__(None, None, None)
    s2.__exit__(None, None, None)
    s1.__exit__(None, None, None)


# ----------------------------------------------------------------------- isolation
def test_threads_do_not_inherit_a_scope_but_see_enable(ab):
    a, b, ref = ab
    res = {}
    with ob.enabled(**CPU):
        t = threading.Thread(target=lambda: res.update(scoped=routed(a, b, ref)))
        t.start()
        t.join()
        assert routed(a, b, ref)
    assert res["scoped"] is False
    ob.enable(**CPU)
    try:
        t = threading.Thread(target=lambda: res.update(default=routed(a, b, ref)))
        t.start()
        t.join()
        with ob.disabled():
            assert not routed(a, b, ref)
    finally:
        ob.disable()
    assert res["default"] is True
    assert not routed(a, b, ref)


def test_concurrent_threads_with_different_scopes(ab):
    a, b, ref = ab
    barrier = threading.Barrier(2)

    def on():
        with ob.enabled(**CPU):
            barrier.wait()
            r = [routed(a, b, ref) for _ in range(3)]
            barrier.wait()
        return r

    def off():
        barrier.wait()
        r = [routed(a, b, ref) for _ in range(3)]
        barrier.wait()
        return r

    with ThreadPoolExecutor(2) as ex:
        f_on, f_off = ex.submit(on), ex.submit(off)
        assert f_on.result() == [True] * 3
        assert f_off.result() == [False] * 3


def test_asyncio_tasks_are_isolated(ab):
    a, b, ref = ab

    async def scoped(ev_in, ev_out):
        with ob.enabled(**CPU):
            ev_in.set()
            await ev_out.wait()
            return routed(a, b, ref)

    async def plain(ev_in, ev_out):
        await ev_in.wait()
        r = routed(a, b, ref)
        ev_out.set()
        return r

    async def main():
        e1, e2 = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(scoped(e1, e2), plain(e1, e2))

    assert asyncio.run(main()) == [True, False]


def test_asyncio_task_inherits_scope_at_creation(ab):
    a, b, ref = ab

    async def child():
        return routed(a, b, ref)

    async def main():
        with ob.enabled(**CPU):
            t = asyncio.create_task(child())
        return await t, await asyncio.to_thread(routed, a, b, ref)

    assert asyncio.run(main()) == (True, False)


# ----------------------------------------------------------------------- process state
def test_enable_disable_process_default(ab):
    a, b, ref = ab
    ob.enable(**CPU)
    assert config.current().enabled
    assert routed(a, b, ref)
    ob.enable(engine="cpu", min_size=10**9)      # replaces, not merged
    assert config.current().config.min_size == 10**9
    assert not routed(a, b, ref)
    ob.disable()
    assert not routed(a, b, ref)


def test_c_activity_count_and_floor_follow_scopes():
    assert loophook.state()[0] == 0
    with ob.enabled(engine="cpu", min_size=5000):
        assert loophook.state() == (1, 5000)
        with ob.enabled(min_size=70):
            assert loophook.state() == (2, 70)
        assert loophook.state() == (1, 5000)
        ob.enable(engine="cpu", min_size=30)
        assert loophook.state() == (2, 30)
        ob.disable()
    assert loophook.state()[0] == 0
    with ob.enabled(engine="auto"):   # no GPU here: the cost model routes nothing
        from ozaki_backend.cuda import availability

        if not availability()[0]:
            assert loophook.state() == (1, config.NEVER)


def test_auto_engine_without_gpu_routes_only_with_min_size(ab):
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here")
    a, b, ref = ab
    with ob.enabled():
        d = ob.explain(a, b)
        assert not d and "no usable GPU" in d.reason
        assert not routed(a, b, ref)
    with ob.enabled(min_size=0):
        d = ob.explain(a, b)
        assert d and d.engine == "cpu"
        assert routed(a, b, ref)
