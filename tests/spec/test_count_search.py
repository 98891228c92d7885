"""The windowed count search (``docs/spec.md`` §10.3): the GPU computes the exponents of
:data:`~ozaki_backend.spec.certificate.WINDOW` counts only and searches within them;
:func:`~ozaki_backend.spec.certificate.window_decides` says when that settles the
product's count. Here the search of ``kernels/scaling.cu`` ``oz_cert_counts`` is
modelled per element from its documented semantics (the GPU test
``tests/cuda/test_cuda_certificate.py::test_count_windows_find_the_reference_count``
runs the kernel itself), and checked against the full sweep on every window and many
per-element counts: whenever the rule says decided, the count and the number of
elements with none are the full search's."""

import numpy as np
import pytest

from ozaki_backend.cuda.loader import read_source
from ozaki_backend.spec.certificate import WINDOW, count_window, window_decides

FIRST = 2                       # the smallest count of both tables (OZ_NLO)


def _kernel_search(fewest, guess, lo, hi, top):
    """One element of ``oz_cert_counts`` with the window ``lo .. hi`` and ``top`` (the
    largest index): ``(reported count or 0, undecided)``. ``fewest``: the index of the
    fewest count whose test the element passes, None for none (the test is monotone:
    it passes at every index from ``fewest`` on)."""
    def passes(c):
        return fewest is not None and c >= fewest

    g = min(max(guess, lo), hi)
    if passes(g):
        c = g
        if c > lo and passes(g - 1):
            c = g - 1
            while c > lo and passes(c - 1):
                c -= 1
        return FIRST + c, False
    c = g + 1
    while c <= hi and not passes(c):
        c += 1
    if c <= hi:
        return FIRST + c, False
    if hi == top:
        return 0, False
    return 0, passes(top)


def _full(fewest):
    """The full sweep: the largest count of the elements that have one, and how many
    have none."""
    have = [FIRST + f for f in fewest if f is not None]
    return max(have, default=0), sum(f is None for f in fewest)


def _random_elements(rng, n_counts, max_size, max_spread, *, none, exact, zero):
    """A random list of elements (fewer than ``max_size``): each the index of its fewest
    passing count, clustered around one count within ``max_spread`` as ordinary data's
    are, or with probabilities ``none`` (None: no count passes), ``exact`` (``"exact"``:
    no overlap along k) and ``zero`` (index 0: exact at every count)."""
    size = int(rng.integers(1, max_size))
    centre = int(rng.integers(0, n_counts))
    spread = int(rng.integers(0, max_spread + 1))
    out = []
    for _ in range(size):
        r = rng.random()
        if r < none:
            out.append(None)
        elif r < none + exact:
            out.append("exact")
        elif r < none + exact + zero:
            out.append(0)
        else:
            out.append(int(np.clip(centre + rng.integers(-spread, spread + 1), 0, n_counts - 1)))
    return out


@pytest.mark.parametrize("n_counts", [19, 21])    # the real and the complex table
def test_windows_are_five_distinct_counts_with_the_largest(n_counts):
    for start in range(n_counts):
        lo, hi, counts = count_window(n_counts, start)
        assert len(set(counts)) == len(counts) == WINDOW
        assert lo <= start <= hi and counts[-1] == n_counts - 1
        assert set(range(lo, hi + 1)) <= set(counts)
        assert 0 <= lo and hi <= n_counts - 1


@pytest.mark.parametrize("n_counts", [19, 21])
def test_a_decided_window_gives_the_full_search(n_counts):
    """Random element counts (clustered as ordinary data's are, spread, with elements
    that pass nowhere and elements exact at every count), every start and guess."""
    rng = np.random.default_rng(n_counts)
    top = n_counts - 1
    kinds = {"decided": 0, "undecided": 0}
    for trial in range(400):
        fewest = _random_elements(rng, n_counts, 12, 3, none=0.1, exact=0.0, zero=0.1)
        want = _full(fewest)
        for start in range(n_counts):
            lo, hi, _ = count_window(n_counts, start)
            for guess in {start, lo, hi, int(rng.integers(0, n_counts))}:
                rep = [_kernel_search(f, guess, lo, hi, top) for f in fewest]
                largest = max(r for r, _ in rep)
                undecided = sum(u for _, u in rep)
                none = sum(r == 0 and not u for r, u in rep)
                if window_decides(largest, undecided, (lo, hi), FIRST):
                    kinds["decided"] += 1
                    assert (largest, none) == want, (fewest, start, guess)
                else:
                    kinds["undecided"] += 1
    assert min(kinds.values()) > 100          # both outcomes are exercised


def test_no_window_always_decides():
    assert window_decides(7, 3, None, FIRST)


def test_the_kernel_window_width_is_the_spec_s():
    text = read_source("scaling.cu")
    assert f"#define OZ_NW {WINDOW} " in text


def _thread_search(elements, guess, lo, hi, top, shortcut):
    """One thread of ``oz_cert_counts`` over a sequence of elements (each the index of
    its fewest passing count, None for none, or ``"exact"`` for an element whose row
    and column do not overlap along k): ``(largest, none, outside)`` as the kernel
    accumulates them, ``outside`` the flag the last undecided test left, and how many
    elements took the shortcut. ``shortcut``: the kernel's running-maximum test (an
    element passing at the thread's largest count so far takes that one test instead
    of the search)."""
    need_max = none = outside = taken = 0
    for f in elements:
        if f == "exact":
            need = FIRST
        elif shortcut and need_max - FIRST >= lo and f is not None and need_max - FIRST >= f:
            need = FIRST + lo               # passes at the running maximum
            taken += 1
        else:
            need, undecided = _kernel_search(f, guess, lo, hi, top)
            if need == 0 and hi != top:
                outside = int(undecided)    # the kernel's flag: the last such test's
        need_max = max(need_max, need)
        none += need == 0 and not outside
    return need_max, none, outside, taken


@pytest.mark.parametrize("n_counts", [19, 21])
def test_the_running_maximum_shortcut_changes_no_output(n_counts):
    """The kernel skips the search for an element that passes at the thread's largest
    count so far; by monotonicity its count is at most that one, so the largest count,
    the elements with none and the undecided flag are those of the search of every
    element (sequences with clustered, spread, exact and failing elements; every window,
    several guesses)."""
    rng = np.random.default_rng(100 + n_counts)
    top = n_counts - 1
    skipped = 0
    for trial in range(300):
        seq = _random_elements(rng, n_counts, 20, 4, none=0.08, exact=0.08, zero=0.06)
        for start in range(n_counts):
            for lo, hi in (count_window(n_counts, start)[:2], (0, top)):
                for guess in {start, lo, hi, int(rng.integers(0, n_counts))}:
                    *fast, taken = _thread_search(seq, guess, lo, hi, top, True)
                    *slow, _ = _thread_search(seq, guess, lo, hi, top, False)
                    assert fast == slow, (seq, lo, hi, guess)
                    skipped += taken
    assert skipped > 1000          # the shortcut is exercised


def test_the_kernel_keeps_the_running_maximum_shortcut():
    """The model above is the kernel's: its test at the running maximum is there."""
    text = read_source("scaling.cu")
    assert "cur >= lo && test(cur)" in text


def test_the_hosts_block_heights_are_the_kernels():
    """The launch grids of the certificate's passes divide the rows by the kernels' rows
    per block (cuda/certificate.py _CR = OZ_CR, cuda/scaling.py _PR = OZ_PR): a host
    value larger than the kernel's would leave rows unread. Read as text, so that it
    runs where CuPy is not installed."""
    import re
    from pathlib import Path

    import ozaki_backend

    text = read_source("scaling.cu")
    cuda = Path(ozaki_backend.__file__).parent / "cuda"
    for name, host, file in (("OZ_CR", "_CR", "certificate.py"), ("OZ_PR", "_PR", "scaling.py")):
        kernel_value = int(re.search(rf"#define {name} (\d+)", text).group(1))
        host_value = int(re.search(rf"^{host} = (\d+)", (cuda / file).read_text(), re.M).group(1))
        assert host_value == kernel_value, (name, host_value, kernel_value)
