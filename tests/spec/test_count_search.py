"""The windowed count search (``docs/spec.md`` §10.3): the GPU computes the exponents of
:data:`~ozaki_backend.spec.certificate.WINDOW` counts only and searches within them;
:func:`~ozaki_backend.spec.certificate.window_choice` says when that settles the
product's count. Here the search of ``kernels/scaling.cu`` ``oz_cert_counts`` is
modelled per element from its documented semantics (the GPU test
``tests/cuda/test_cuda_certificate.py::test_count_windows_find_the_reference_count``
runs the kernel itself), and checked against the full sweep on every window, guess and
many per-element counts: whenever the rule says settled, the count and the elements
failing at it are the full search's."""

import numpy as np
import pytest

from ozaki_backend.cuda.loader import read_source
from ozaki_backend.spec.certificate import (WINDOW, choose, count_window,
                                            window_choice)

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


def _histogram(reports):
    """``(hist, none, undecided)`` of the kernel's per-element reports."""
    hist, none, undecided = {}, 0, 0
    for r, u in reports:
        if u:
            undecided += 1
        elif r == 0:
            none += 1
        else:
            hist[r] = hist.get(r, 0) + 1
    return hist, none, undecided


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
def test_a_settled_window_gives_the_full_search(n_counts):
    """Random element counts (clustered as ordinary data's are, spread, with elements
    that pass nowhere and elements exact at every count), every start and guess."""
    rng = np.random.default_rng(n_counts)
    top = n_counts - 1
    counts = list(range(FIRST, FIRST + n_counts))
    kinds = {"settled": 0, "open": 0}
    for trial in range(300):
        fewest = _random_elements(rng, n_counts, 40, 3, none=0.02, exact=0.0, zero=0.1)
        full = _histogram([_kernel_search(f, 0, 0, top, top) for f in fewest])
        want = choose(full[0], full[1], len(fewest), counts)
        for start in range(n_counts):
            lo, hi, _ = count_window(n_counts, start)
            for guess in {start, lo, hi, int(rng.integers(0, n_counts))}:
                hist, none, undecided = _histogram(
                    [_kernel_search(f, guess, lo, hi, top) for f in fewest])
                got = window_choice(hist, none, undecided, (lo, hi), counts, len(fewest))
                if got is not None:
                    kinds["settled"] += 1
                    assert (got.n_moduli, got.failing) == (want.n_moduli, want.failing)
                    assert got.all_pass in (None, want.all_pass)
                else:
                    kinds["open"] += 1
    assert min(kinds.values()) > 100          # both outcomes are exercised


def test_no_window_is_the_full_choice():
    counts = list(range(FIRST, FIRST + 19))
    assert window_choice({7: 3}, 0, 0, None, counts, 3) == choose({7: 3}, 0, 3, counts)


def test_the_kernel_window_width_is_the_spec_s():
    text = read_source("scaling.cu")
    assert f"#define OZ_NW {WINDOW} " in text


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
