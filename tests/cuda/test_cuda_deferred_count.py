"""The deferred read-back of the count (issue 18): a product starts with a guessed count
(a fixed plan's, or the last count of its shape), the status is read while its GEMMs
run, and a wrong guess is abandoned before anything is written. Whatever the guess, the
bits, outcomes and counts are the CPU engine's. Marked ``gpu``."""

import warnings

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.plan import Plan
from ozaki_backend.reference.engine import product_2d as ref_2d
from ozaki_backend.semantics import apply_alpha_beta
from ozaki_backend.testing import family_operands

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from ozaki_backend.cuda import graphs, pipeline, shape_memory  # noqa: E402  (needs CuPy)

SHAPE = (48, 260, 40)     # m, k, n: one shape for every case, so the guesses carry over


def _operands(name, seed):
    m, k, n = SHAPE
    return family_operands(name, m, k, n, np.random.default_rng(seed))


def _run(A, B, engine, mode):
    """``(C, certificate outcomes, moduli counts)`` of one product (a native fallback's
    warning is expected for phi4)."""
    ob.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ob.NativeFallbackWarning)
        C = ob.matmul(A, B, engine=engine, mode=mode)
    s = ob.stats()
    return (C if isinstance(C, np.ndarray) else C.get()), s["certificate"], s["moduli"]


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_guessed_counts_right_and_wrong_give_the_reference_bits(mode):
    """A sequence whose counts repeat and change (16, 18, and phi4's escalation after
    a guess): right guesses and wrong ones both happen, and every product has the CPU
    engine's bits (the native fallback's: cuBLAS's), outcome and count."""
    seq = ["phi0.5", "phi0.5", "phi2", "phi2", "phi0.5", "phi4", "phi1", "cancellation",
           "phi2", "phi0.5", "phi0.5"]
    before = dict(shape_memory.GUESSES)
    counts = set()
    for i, name in enumerate(seq):
        A, B = _operands(name, 100 + i)
        C0, out0, mod0 = _run(A, B, "cpu", mode)
        counts.update(mod0)
        dA, dB = cupy.asarray(A), cupy.asarray(B)
        C, out, mod = _run(dA, dB, "cuda", mode)
        assert out == out0, (name, out, out0)
        assert mod == mod0, (name, mod, mod0)
        assert_same_bits(C, (dA @ dB).get() if "native fallback" in out else C0)
    assert len(counts) > 1, counts       # the sequence does change the count
    assert shape_memory.GUESSES["right"] > before["right"]
    assert shape_memory.GUESSES["wrong"] > before["wrong"]


def test_a_wrong_guess_leaves_c_intact_for_an_in_place_update():
    """``C = alpha AB + beta C`` in place, the guess wrong: the abandoned product wrote
    nothing, so the update reads the original C."""
    m, k, n = SHAPE
    plan = Plan(m, n, k)
    A1, B1 = _operands("phi0.5", 1)
    A2, B2 = _operands("phi2", 2)
    for A, B in ((A1, B1), (A1, B1), (A2, B2)):     # the third guesses the first's count
        C0 = np.random.default_rng(3).standard_normal((m, n))
        want = apply_alpha_beta(ref_2d(A, B, plan), 0.5, -2.0, C0)
        before = dict(shape_memory.GUESSES)
        C = cupy.asarray(C0)
        pipeline.product_into(cupy.asarray(A), cupy.asarray(B), plan, C, alpha=0.5,
                              beta=-2.0, C0=C, check_finite=True)
        assert_same_bits(C, want)
    assert shape_memory.GUESSES["wrong"] == before["wrong"] + 1, \
        "the last guess was not wrong"


def test_inf_nan_after_a_guess_takes_the_native_path():
    """A NaN/Inf operand of a shape with a guessed count: the guessed product is
    abandoned and the result is the native one (cuBLAS's bits)."""
    A, B = _operands("phi0.5", 5)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    for _ in range(2):
        ob.matmul(dA, dB, engine="cuda")
    before = dict(shape_memory.GUESSES)
    A[3, 7] = np.nan
    B[0, 2] = np.inf
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    got = ob.matmul(dA, dB, engine="cuda").get()
    assert_same_bits(got, (dA @ dB).get())
    assert np.isnan(got[3]).all()
    assert shape_memory.GUESSES["wrong"] == before["wrong"] + 1


@pytest.mark.parametrize("N", [4, 12, 20])
def test_fixed_counts_read_back_after_their_gemms(N):
    """A fixed count always starts at once (its guess is the plan's); the bits and the
    certificate's outcome are the CPU engine's."""
    m, k, n = SHAPE
    A, B = _operands("phi2", 7)
    plan = Plan(m, n, k, moduli=N)
    assert plan.n_moduli == N
    ob.reset_stats()
    ref = plan.matmul(A, B, engine="cpu")
    out0 = ob.stats()["certificate"]
    before = dict(shape_memory.GUESSES)
    ob.reset_stats()
    got = plan.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda").get()
    assert_same_bits(got, ref)
    assert ob.stats()["certificate"] == out0
    assert shape_memory.GUESSES["right"] == before["right"] + 1


def test_a_shape_native_at_any_count_takes_the_native_shortcut(monkeypatch):
    """A product the CUDA engine computes natively from its shape alone (native DGEMM
    modelled faster at any count) is, from the thread's second call of that shape on,
    computed by the engine's native shortcut (``Engine.native_shortcut``): the driver
    is not entered, and the bits and the stats are the full path's; when the cost
    model prefers the emulation again, the full path runs again."""
    from ozaki_backend.cuda import costs

    faster = [True]
    monkeypatch.setattr(costs, "native_faster", lambda *a, **k: faster[0])
    driven = []
    real = pipeline.product_into

    def counted(*a, **k):
        driven.append(1)
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "product_into", counted)
    A, B = _operands("phi1", 8)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    native = (dA @ dB).get()
    seen = []
    for _ in range(4):
        ob.reset_stats()
        C = ob.matmul(dA, dB, engine="cuda", emulation="performant")
        s = ob.stats()
        seen.append((s["certificate"], s["routed"], s["native"], s["fallback"]))
        assert_same_bits(C.get(), native)
    out = cupy.empty((A.shape[0], B.shape[1]))
    for _ in range(3):          # into out=: a shortcut of its own, from its second call
        ob.reset_stats()
        res = ob.matmul(dA, dB, engine="cuda", emulation="performant", out=out)
        s = ob.stats()
        seen.append((s["certificate"], s["routed"], s["native"], s["fallback"]))
        assert res is out
        assert_same_bits(out.get(), native)
    m, k, n = SHAPE
    plan = ob.plan(m, n, k, engine="cuda", emulation="performant")
    for _ in range(2):          # Plan.matmul: a shortcut of its own, from its second call
        ob.reset_stats()
        C = plan.matmul(dA, dB)
        s = ob.stats()
        seen.append((s["certificate"], s["routed"], s["native"], s["fallback"]))
        assert_same_bits(C.get(), native)
    assert len(driven) == 3, "the shortcut entered the driver"
    assert seen == [({"native (faster)": 1}, 0, 1, 0)] * 9, seen
    with pytest.raises(ValueError):  # a plan of another shape is refused, as always
        ob.plan(m + 1, n, k, engine="cuda", emulation="performant").matmul(dA, dB)
    faster[0] = False
    C0, out0, _ = _run(A, B, "cpu", "accurate")
    ob.reset_stats()
    C = ob.matmul(dA, dB, engine="cuda", emulation="performant")
    assert len(driven) == 4 and ob.stats()["certificate"] == out0
    assert_same_bits(C.get(), C0)


def test_a_shape_that_went_native_for_its_count_stays_native_until_the_probe(monkeypatch):
    """``emulation="performant"``: once a shape's count made native DGEMM the cheaper
    product, the next calls of that shape run cuBLAS's DGEMM without preparing the
    operands (the statistics would only decide the same again); every
    :data:`~shape_memory.NATIVE_PROBE` calls the data are read again, and when the
    emulation is the cheaper one again it computes the reference's bits."""
    from ozaki_backend.cuda import costs

    monkeypatch.setattr(costs, "native_faster", lambda *a, **k: False)   # no early native
    prefer_native = [True]
    monkeypatch.setattr(pipeline, "_native_faster", lambda *a: prefer_native[0])
    prepared = []
    real = pipeline.Prepared

    class Counted(real):
        def __init__(self, *a, **k):
            prepared.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(pipeline, "Prepared", Counted)    # the driver's name for it
    A, B = _operands("phi1", 7)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    native = (dA @ dB).get()

    def call():
        ob.reset_stats()
        C = ob.matmul(dA, dB, engine="cuda", emulation="performant").get()
        return C, ob.stats()["certificate"]

    C, out = call()
    assert out == {"native (faster)": 1} and len(prepared) == 1
    assert_same_bits(C, native)
    for _ in range(shape_memory.NATIVE_PROBE - 1):
        C, out = call()
        assert out == {"native (faster)": 1}
        assert_same_bits(C, native)
    assert len(prepared) == 1, "a remembered native shape prepared its operands"
    prefer_native[0] = False
    C, out = call()             # the probe: read again, now emulated
    assert len(prepared) == 2 and out == {"certified": 1}
    C0, out0, _ = _run(A, B, "cpu", "accurate")
    assert_same_bits(C, C0)
    replays = graphs.COUNTS["replayed"]
    C, out = call()             # emulated shapes are not remembered as native
    # its statistics computed again: a new Prepared, or stages 0-2 replayed as a graph
    # (captured by this call or an earlier test's product of the same shape and count)
    assert len(prepared) + graphs.COUNTS["replayed"] - replays == 3
    assert out == {"certified": 1}


def test_a_read_that_decides_native_again_doubles_the_interval(monkeypatch):
    """Each read of a remembered native shape that decides native again doubles the
    calls before the next read (:data:`~shape_memory.NATIVE_PROBE`, 2x, 4x, ... at most
    :data:`~shape_memory.NATIVE_PROBE_MAX`): the data are read on calls 1, 17, 49,
    113, ...; an emulated product forgets the shape, so the next native decision starts
    again at ``NATIVE_PROBE``."""
    from ozaki_backend.cuda import costs

    monkeypatch.setattr(costs, "native_faster", lambda *a, **k: False)   # no early native
    prefer_native = [True]
    reads = []                  # the calls whose count reached the native-or-not decision

    def decide(*a):
        reads.append(len(calls))
        return prefer_native[0]

    monkeypatch.setattr(pipeline, "_native_faster", decide)
    A, B = _operands("phi1", 7)
    dA, dB = cupy.asarray(A[:, :40]), cupy.asarray(B[:40])
    native = (dA @ dB).get()
    calls = []
    key = (dA.shape[0], dB.shape[1], dA.shape[1], "accurate")
    P = shape_memory.NATIVE_PROBE
    expected = [0, P, 3 * P, 7 * P]              # 0-based calls that read the data
    for _ in range(expected[-1] + 1):
        C = ob.matmul(dA, dB, engine="cuda", emulation="performant")
        calls.append(1)
        assert_same_bits(C.get(), native)
    # a read may consult the decision more than once (the guessed count's check)
    assert sorted(set(reads)) == expected
    assert shape_memory._native_interval(key) == 8 * P <= shape_memory.NATIVE_PROBE_MAX
    prefer_native[0] = False        # the data turn ordinary: emulated at the next read
    for _ in range(8 * P + 1):      # the read, then a call that reads again
        ob.matmul(dA, dB, engine="cuda", emulation="performant")
        calls.append(1)
    last = expected[-1] + 8 * P
    assert sorted(set(reads)) == expected + [last, last + 1]
    assert shape_memory._native_interval(key) is None
    prefer_native[0] = True
    ob.matmul(dA, dB, engine="cuda", emulation="performant")
    assert shape_memory._native_interval(key) == P


def _reference_choice(A, B):
    """The CPU engine's :class:`~ozaki_backend.spec.certificate.Choice` for ``A @ B``."""
    from ozaki_backend.reference import certificate, equilibrate, scaling
    from ozaki_backend.spec import certificate as spec

    A1, B1, _ = equilibrate.equilibrate(A, B)
    st = scaling.statistics(A1, B1, "accurate")
    G = (certificate.gathered(A1, B1, st)
         if spec.gathers_needed(st.zA, st.nA, st.zB, st.nB) else None)
    d = certificate.data(st, G)
    return certificate.choose_count(d, st, "accurate")


def test_performant_takes_the_count_all_pass_where_the_test_costs_more(monkeypatch):
    """``emulation="performant"``: a product whose count leaves elements to the
    a-posteriori test is computed at the count every element passes a priori when the
    model prices that below the test (two passes over the output), certified, with the
    CPU engine's bits at that count — on the first call (read back) and on the next
    (started with the remembered count, checked before the output is written).
    ``emulation="eager"`` keeps the count and the test, as the CPU engine does."""
    from ozaki_backend.cuda import costs

    monkeypatch.setattr(costs, "native_faster", lambda *a, **k: False)   # no early native
    monkeypatch.setattr(pipeline, "_native_faster", lambda *a: False)
    m, k, n = 256, 4096, 256
    A, B = family_operands("banded", m, k, n, np.random.default_rng(0))
    ch = _reference_choice(A, B)
    assert ch.failing > 0 and ch.all_pass is not None and ch.all_pass > ch.n_moduli
    up = ch.all_pass
    assert costs.emulation_seconds(m, n, k, up, False) < costs.emulation_seconds(
        m, n, k, ch.n_moduli, True)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    ob.reset_stats()
    C = ob.matmul(dA, dB, engine="cuda", emulation="eager").get()
    s = ob.stats()
    C0, out0, mod0 = _run(A, B, "cpu", "accurate")
    assert ch.n_moduli in s["moduli"] and s["moduli"] == mod0
    assert s["certificate"] == out0 == {"certified": 1}
    assert_same_bits(C, C0)
    fixed = ob.matmul(A, B, engine="cpu", moduli=up)
    before = dict(shape_memory.GUESSES)
    for call in range(2):
        ob.reset_stats()
        C = ob.matmul(dA, dB, engine="cuda", emulation="performant").get()
        s = ob.stats()
        assert dict(s["moduli"]) == {up: 1}, (call, s["moduli"])
        assert s["certificate"] == {"certified": 1}
        assert_same_bits(C, fixed)
    assert shape_memory.GUESSES["right"] == before["right"] + 1
    # the plan says which count each setting computes with
    assert ob.plan(m, n, k, engine="cuda", emulation="performant").moduli_for(dA, dB) == up
    assert ob.plan(m, n, k, engine="cuda", emulation="eager").moduli_for(dA, dB) == \
        ch.n_moduli
