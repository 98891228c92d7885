"""The device-side cost model and decision of the GPU-array hooks, checked with
made-up GPUs (no GPU needed): routed where the emulation beats native DGEMM for the
shape, native where it does not, the scope's min_size/engine rules first, and the
decision visible in explain() and stats()."""

import pytest

from ozaki_backend.dispatch import config, device_routing, routing
from ozaki_backend.dispatch.device_routing import DeviceCostModel, rates_for

# The H200 with the rates measured on it (host_rates.json's device record).
H200 = rates_for("NVIDIA H200", (9, 0), 132, 1.98, {"int8_tops": 1512.7,
                                                      "device_gbps": 3725.8})
# A GPU with weak FP64 units (2 per SM) and INT8 tensor cores, nothing measured.
WEAK = rates_for("Some Workstation GPU", (8, 9), 128, 2.52)


def _cfg(**kw):
    return config.Config.build(None, kw, "test")


@pytest.fixture
def on_device(monkeypatch):
    """Decisions on device 0 use the given rates (no CUDA device queried)."""
    def use(rates):
        monkeypatch.setitem(device_routing._models, 0, DeviceCostModel(rates))
    yield use


def _decide(shape, **cfg):
    m, k, n = shape
    return device_routing.decide(_cfg(**cfg), m, n, k, 1, "test", device_id=0)


@pytest.mark.parametrize("shape, routed", [
    ((4096, 4096, 4096), False),      # measured 0.89x native: left native
    ((8192, 8192, 8192), True),       # 1.08x
    ((16384, 16384, 16384), True),    # 1.32x
    ((16384, 1024, 16384), False),    # short k: 0.45x
    ((8192, 512, 8192), False),       # 0.46x
    ((8192, 2048, 8192), False),      # 0.74x
    ((2048, 2048, 2048), False),
])
def test_on_the_h200_only_large_long_k_products_are_routed(on_device, shape, routed):
    on_device(H200)
    d = _decide(shape)
    assert bool(d) is routed, d
    assert d.reason.startswith("device cost model: ")
    assert "est. cuBLAS DGEMM" in d.reason and "emulated" in d.reason


def test_on_a_weak_fp64_gpu_almost_everything_above_a_small_size_is_routed(on_device):
    on_device(WEAK)
    assert not _decide((512, 512, 512))
    for n in (1024, 2048, 4096, 8192):
        assert _decide((n, n, n)), n
    assert _decide((4096, 1024, 4096))          # short k too
    assert WEAK.fp64_tflops < 2 and "estimated" in WEAK.source


def test_the_measured_products_calibrate_the_estimate():
    """Where the GEMM tuning table measured a product on this GPU, the estimate of that
    very shape is its measured time; a GPU without a table uses the rates alone."""
    model = DeviceCostModel(H200)
    assert H200.calibration, "the package's table has H200 entries"
    for m, n, k, gemms, n_mod, secs in H200.calibration:
        assert model.emulated_seconds(m, n, k, 1, gemms, n_mod) == pytest.approx(secs)
    bare = DeviceCostModel(H200._replace(calibration=()))
    assert bare.emulated_seconds(8192, 8192, 8192) != model.emulated_seconds(8192, 8192,
                                                                             8192)


def test_complex_products_compare_zgemm_with_two_real_products_per_modulus():
    model = DeviceCostModel(H200)
    real = model.estimate(8192, 8192, 8192)
    cplx = model.estimate(8192, 8192, 8192, complex_=True)
    assert cplx.native_s == pytest.approx(4 * real.native_s)
    assert cplx.emulated_s == pytest.approx(2 * real.emulated_s)
    assert cplx.routes


def test_the_scope_rules_come_before_the_cost_model(on_device):
    on_device(H200)
    assert _decide((64, 64, 64), min_size=0).reason == "min_size=0"
    assert _decide((64, 64, 64), min_size=0).engine == "cuda"
    assert not _decide((64, 64, 64), min_size=10**6)
    d = _decide((64, 64, 64), engine="cpu")
    assert d and d.engine == "cpu"
    assert not _decide((64, 64, 1), min_size=0)       # matrix-vector: cuBLAS's
    assert not _decide((1, 64, 64), min_size=0)
    assert not device_routing.decide(_cfg(min_size=0), 8, 8, 8, 0, "test", device_id=0)


def test_a_native_decision_is_counted_with_its_library(clean_dispatch, on_device):
    import ozaki_backend as ob

    on_device(H200)
    d = _decide((4096, 4096, 4096))
    device_routing.native(d, "CuPy")
    s = ob.stats()
    assert s["native"] == 1
    assert list(s["reasons"]["native"]) == ["CuPy: device cost model: cuBLAS faster"]
    assert "est. cuBLAS DGEMM" in s.details["native"]["CuPy: device cost model: "
                                                     "cuBLAS faster"]
    assert routing.recent[-1].reason.startswith("CuPy: device cost model")


def test_rates_of_unknown_architectures_stay_on_the_native_side():
    """An architecture the tables do not know is assumed to have a weak INT8 rate (no
    tensor cores) and, unless listed, weak FP64: its estimate routes nothing large of
    a strong-FP64 part by mistake."""
    r = rates_for("Future GPU", (13, 0), 100, 2.0)
    assert r.int8_tops == pytest.approx(100 * 2.0 * device_routing.INT8_OTHER * 0.7 / 1e3)
    model = DeviceCostModel(r)
    assert not model.estimate(16384, 16384, 16384).routes or r.fp64_tflops < 5


@pytest.fixture
def engine_costs(monkeypatch):
    """The CUDA engine's device cost model (``ozaki_backend.cuda.costs``, importable
    without CuPy), with its default (H200) rates."""
    from ozaki_backend.cuda import costs

    monkeypatch.setattr(costs, "rates", lambda: dict(costs.H200))
    monkeypatch.setattr(device_routing, "_engine_costs", lambda: costs)
    return costs


def test_the_engines_own_cost_model_decides_where_it_has_one(on_device, engine_costs):
    on_device(H200)
    assert _decide((16384, 16384, 16384)) and _decide((8192, 8192, 8192))
    for shape in ((4096, 4096, 4096), (16384, 1024, 16384), (2048, 2048, 2048)):
        assert not _decide(shape), shape
    # the same verdict as the engine's own rule for these shapes
    d = _decide((16384, 1024, 16384))
    assert engine_costs.native_faster(16384, 16384, 1024, 15) and not d


def test_a_gpu_the_engines_model_has_no_rates_for_gets_its_architectures(on_device,
                                                                          engine_costs):
    on_device(WEAK)      # the engine would model it as an H200
    assert _decide((2048, 2048, 2048)) and _decide((4096, 1024, 4096))
    assert not _decide((256, 256, 256))
