"""The host path of every entry point (issue 17, item 1), on the CPU engine.

* C-ordered, Fortran-ordered and transposed operands, ``out=`` in C and Fortran order,
  SciPy's ``dgemm`` with every ``trans_a``/``trans_b``: bitwise the C-ordered product.
* The dispatch layer hands the engine the caller's own memory (no host copy of C- or
  F-ordered operands, the result written straight into its destination).
* NaN/Inf in an operand: the dispatch layer makes no host pass over the operands; the
  engine declines and the entry point gives NumPy's (SciPy's) own answer.
"""

import numpy as np
import pytest
import scipy.linalg.blas as blas
from bits import assert_same_bits

import ozaki_backend as ob
from ozaki_backend.dispatch import route, routing
from ozaki_backend.reference.engine import CpuEngine
from layouts import LAYOUTS, layouts  # noqa: E402

CPU = dict(engine="cpu", min_size=0)
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
M_, K_, N_ = 13, 9, 11


@pytest.fixture(autouse=True)
def clean_state(clean_dispatch):
    ob.dispatch.install()


def operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M_, K_)), rng.standard_normal((K_, N_))


def reference(a, b):
    """The C-ordered path: contiguous copies through the public API."""
    return ob.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), engine="cpu")


@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("entry", ["@", "np.dot", "np.matmul", "einsum", "tensordot"])
def test_layouts_give_the_c_ordered_bits(entry, la, lb):
    a0, b0 = operands()
    a, b = layouts(a0)[la], layouts(b0)[lb]
    call = {"@": lambda: a @ b, "np.dot": lambda: np.dot(a, b),
            "np.matmul": lambda: np.matmul(a, b),
            "einsum": lambda: np.einsum("ij,jk->ik", a, b),
            "tensordot": lambda: np.tensordot(a, b, 1)}[entry]
    with ob.enabled(**CPU):
        got = call()
    assert ob.stats()["routed"] >= 1
    assert_same_bits(got, reference(a0, b0))


@pytest.mark.parametrize("entry, order", [("np.matmul", "C"), ("np.matmul", "F"),
                                          ("np.dot", "C"), ("einsum", "C"),
                                          ("einsum", "F")])  # np.dot: C-contiguous out only
def test_out_receives_the_c_ordered_bits(entry, order):
    a, b = operands(1)
    out = np.full((M_, N_), np.nan, order=order)
    with ob.enabled(**CPU):
        res = {"np.matmul": lambda: np.matmul(a, b, out=out),
               "np.dot": lambda: np.dot(a, b, out=out),
               "einsum": lambda: np.einsum("ij,jk->ik", a, b, out=out)}[entry]()
    assert res is out
    assert ob.stats()["routed"] >= 1
    assert_same_bits(out, reference(a, b))


def test_einsum_transposed_output_is_written_in_place():
    a, b = operands(2)
    with ob.enabled(**CPU):
        got = np.einsum("ij,jk->ki", a, b)
    assert got.flags.f_contiguous == np.einsum("ij,jk->ki", a, b).flags.f_contiguous
    assert_same_bits(got, reference(a, b).T)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("trans_a", [0, 1, 2])
@pytest.mark.parametrize("trans_b", [0, 1, 2])
def test_scipy_dgemm_trans_flags_give_the_c_ordered_bits(trans_a, trans_b, order):
    a0, b0 = operands(3)
    a = np.array(a0.T if trans_a else a0, order=order)
    b = np.array(b0.T if trans_b else b0, order=order)
    with ob.enabled(**CPU):
        got = blas.dgemm(1.0, a, b, trans_a=trans_a, trans_b=trans_b)
    assert ob.stats()["routed"] == 1
    assert got.flags.f_contiguous
    assert_same_bits(got, reference(a0, b0))


def test_scipy_dgemm_alpha_beta_and_overwrite_c():
    a, b = operands(4)
    c = np.asfortranarray(np.random.default_rng(9).standard_normal((M_, N_)))
    want = ob.matmul(a, b, engine="cpu")
    want = 2.0 * want + 0.5 * c   # spec §7: one rounding per operation
    with ob.enabled(**CPU):
        got = blas.dgemm(2.0, a, b, beta=0.5, c=c.copy(order="F"))
        c0 = np.asfortranarray(np.zeros((M_, N_)))
        same = blas.dgemm(1.0, a, b, c=c0, overwrite_c=1)
    assert_same_bits(got, want)
    assert same is c0
    assert_same_bits(c0, reference(a, b))


# ------------------------------------------------------------ no host copies
@pytest.fixture
def engine_calls(monkeypatch):
    """The arrays each CPU-engine product received: ``(a3, b3, out3)``."""
    calls = []
    original = CpuEngine.product

    def spy(self, a3, b3, plan, out3, **kw):
        calls.append((a3, b3, out3))
        return original(self, a3, b3, plan, out3, **kw)

    monkeypatch.setattr(CpuEngine, "product", spy)
    return calls


@pytest.mark.parametrize("la", ["C", "F", "T"])
@pytest.mark.parametrize("entry", ["@", "np.dot", "dgemm", "einsum"])
def test_engine_gets_the_callers_memory(engine_calls, monkeypatch, entry, la):
    a0, b0 = operands(5)
    a, b = layouts(a0)[la], layouts(b0)[la]
    copies = []  # the copying calls made before the engine runs (the engine's own
    # pipeline makes contiguous working arrays of its scaled operands)
    for name in ("ascontiguousarray", "asfortranarray", "copy"):
        real = getattr(np, name)
        monkeypatch.setattr(np, name, lambda x, *args, _r=real, **kw:
                            (engine_calls or copies.append(np.shape(x))) and None
                            or _r(x, *args, **kw))
    with ob.enabled(**CPU):
        res = {"@": lambda: a @ b, "np.dot": lambda: np.dot(a, b),
               "dgemm": lambda: blas.dgemm(1.0, a, b),
               "einsum": lambda: np.einsum("ij,jk->ik", a, b)}[entry]()
    monkeypatch.undo()
    assert copies == [], "the dispatch layer copied an operand on the host"
    (a3, b3, out3), = engine_calls
    assert np.shares_memory(a3, a) and np.shares_memory(b3, b)
    assert np.shares_memory(out3, res), "the result was not written in place"
    assert_same_bits(res, reference(a0, b0))


# ------------------------------------------------------------ NaN / Inf
NON_FINITE = [np.nan, np.inf, -np.inf]


def _poisoned(value, seed=6):
    a, b = operands(seed)
    a[3, 4] = value
    return a, b


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("entry", ["@", "np.dot", "dgemm", "einsum"])
def test_non_finite_operands_give_the_native_answer(entry, value):
    a, b = _poisoned(value)
    a_f, b_f = np.asfortranarray(a), np.asfortranarray(b)
    call = {"@": lambda: a @ b, "np.dot": lambda: np.dot(a, b),
            "dgemm": lambda: blas.dgemm(1.0, a_f, b_f),
            "einsum": lambda: np.einsum("ij,jk->ik", a, b)}[entry]
    with np.errstate(all="ignore"):
        want = call()
        with ob.enabled(**CPU):
            got = call()
    assert_same_bits(got, want)
    s = ob.stats()
    assert s["routed"] == 0
    assert s["reasons"]["native"] == {route.NON_FINITE: 1}
    assert routing.recent[-1].reason == route.NON_FINITE


def test_dispatch_makes_no_host_finiteness_pass(monkeypatch):
    """The dispatch layer leaves NaN/Inf to the engine: no isfinite over the operands
    before the engine is called (the CPU engine checks itself)."""
    a, b = operands(7)
    seen = []
    real = np.isfinite

    def spy(x, *args, **kw):
        seen.append(np.shape(x))
        return real(x, *args, **kw)

    monkeypatch.setattr(route.np, "isfinite", spy)
    monkeypatch.setattr(CpuEngine, "product", lambda self, a3, b3, plan, out3, **kw:
                        seen.append("engine") or 0)
    with ob.enabled(**CPU):
        a @ b
    assert seen == ["engine"]
