"""``_api.product`` for the host path (issue 17): a Fortran-ordered ``out`` is written
by the engine in place, bitwise the C-ordered result; a product the engine declines
(NaN/Inf) hands the caller the ``declined`` marker instead of computing natively."""

import numpy as np
import pytest
from bits import assert_same_bits

import ozaki_backend as ob
from ozaki_backend import _api, _options
from ozaki_backend.reference.engine import CpuEngine

OPTS = _options.normalize(engine="cpu")


def operands(seed=0, m=9, k=7, n=6):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


@pytest.fixture
def engine_outs(monkeypatch):
    outs = []
    real = CpuEngine.product

    def spy(self, a3, b3, plan, out3, **kw):
        outs.append(out3)
        return real(self, a3, b3, plan, out3, **kw)

    monkeypatch.setattr(CpuEngine, "product", spy)
    return outs


@pytest.mark.parametrize("order", ["C", "F"])
def test_out_in_either_order_is_written_in_place(engine_outs, order):
    a, b = operands(1)
    out = np.full((9, 6), np.nan, order=order)
    assert ob.matmul(a, b, engine="cpu", out=out) is out
    assert np.shares_memory(engine_outs[0], out)
    assert_same_bits(out, ob.matmul(a, b, engine="cpu"))


def test_fortran_out_of_a_stack_goes_through_one_copy(engine_outs):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 5, 4)), rng.standard_normal((3, 4, 6))
    out = np.full((3, 5, 6), np.nan, order="F")   # its 2-D slices are not contiguous
    assert ob.matmul(a, b, engine="cpu", out=out) is out
    assert not np.shares_memory(engine_outs[0], out)
    assert_same_bits(out, ob.matmul(a, b, engine="cpu"))


@pytest.mark.usefixtures("clean_dispatch")
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_declined_product_returns_the_marker(value):
    a, b = operands(3)
    a[2, 2] = value
    out = np.full((9, 6), 7.0)
    marker = object()
    assert _api.product(a, b, OPTS, out=out, declined=marker) is marker
    assert (out == 7.0).all()              # nothing written: the caller computes it
    assert ob.stats()["reasons"]["native"] == {"non-finite operand": 1}
    with np.errstate(all="ignore"):
        assert_same_bits(_api.product(a, b, OPTS), np.matmul(a, b))
