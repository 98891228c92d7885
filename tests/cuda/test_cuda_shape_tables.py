"""When a shape that went native for its count is read again (``cuda/shape_tables.py``,
``docs/spec.md`` §10.4): CuPy-free bookkeeping, so it runs everywhere (CI included);
the GPU test of the same schedule through real products is
``test_cuda_deferred_count.py::test_a_read_that_decides_native_again_doubles_the_interval``.
"""

import threading

import pytest

from ozaki_backend.cuda import shape_tables as st


class _Plan:
    def __init__(self, emulation="performant"):
        self.options = {"emulation": emulation}


@pytest.fixture(autouse=True)
def _fresh_tables():
    st._local.__dict__.clear()
    yield
    st._local.__dict__.clear()


def _run(calls, decide, key=(64, 64, 64, "accurate"), plan=None):
    """Simulate ``calls`` products of one shape as the pipeline makes them: a call not
    answered by :func:`~st._native_again` reads its data and notes ``decide(i)`` (True:
    native for its count). Returns the 0-based calls that read."""
    plan = plan or _Plan()
    reads = []
    for i in range(calls):
        if st._native_again(plan, key):
            continue
        reads.append(i)
        st._note_native(key, decide(i))
    return reads


def test_reads_double_their_interval_up_to_the_cap():
    P, cap = st.NATIVE_PROBE, st.NATIVE_PROBE_MAX
    reads = _run(4 * cap, lambda i: True)
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    expected, g = [], P
    while len(expected) < len(gaps):
        expected.append(g)
        g = min(2 * g, cap)
    assert reads[0] == 0 and gaps == expected
    assert gaps[-1] == cap and gaps[0] == P


def test_an_emulated_read_forgets_the_shape_and_the_next_native_starts_over():
    P = st.NATIVE_PROBE
    key = (64, 64, 64, "accurate")
    decide = lambda i: i != 3 * P        # the third read (after 16 + 32 calls) emulates
    reads = _run(3 * P + 1, decide, key)
    assert reads == [0, P, 3 * P]
    assert st._native_interval(key) is None          # forgotten: every call reads
    assert _run(2, lambda i: False, key) == [0, 1]
    assert _run(P + 1, lambda i: True, key) == [0, P]
    assert st._native_interval(key) == 2 * P


def test_a_call_that_asks_twice_reads_once():
    """The native shortcut asks first and the full path again in the same call: the
    second ask of a read keeps it a read (the interval still doubles after it)."""
    key = (64, 64, 64, "accurate")
    plan = _Plan()
    st._note_native(key, True)
    for _ in range(st.NATIVE_PROBE - 1):
        assert st._native_again(plan, key)
    assert not st._native_again(plan, key)         # the shortcut: a read is due
    assert not st._native_again(plan, key)         # the full path: still the read
    st._note_native(key, True)
    assert st._native_interval(key) == 2 * st.NATIVE_PROBE


def test_eager_emulation_never_skips_a_read():
    key = (64, 64, 64, "accurate")
    st._note_native(key, True)
    assert not st._native_again(_Plan("eager"), key)


def test_tables_are_per_thread_and_bounded():
    key = (8, 8, 8, "fast")
    st._note_native(key, True)
    seen = []
    t = threading.Thread(target=lambda: seen.append(st._native_interval(key)))
    t.start()
    t.join()
    assert seen == [None] and st._native_interval(key) == st.NATIVE_PROBE
    for i in range(st.SHAPES_REMEMBERED):
        st._note_native((i, 1, 1, "fast"), True)
    assert len(st._shape_memory("native")) <= st.SHAPES_REMEMBERED
