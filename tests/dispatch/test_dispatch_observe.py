"""stats(), reset_stats(), explain(), logging, the cost model and environment parsing."""

import logging

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import config, costmodel, env, log, loophook, routing

rng = np.random.default_rng(2)
pytestmark = pytest.mark.usefixtures("clean_dispatch")


def M(*shape):
    return rng.standard_normal(shape)


def test_stats_counts_reasons_entries_and_reset():
    a, b = M(10, 14), M(14, 9)
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
        np.dot(a, b)
        np.dot(a.astype(np.float32), b.astype(np.float32))
        bad = a.copy()
        bad[1, 1] = np.nan
        bad @ b
        with ob.enabled(min_size=10**6):
            np.dot(a, b)                        # decided in Python: below min_size
    s = ob.stats()
    assert s["routed"] == 2 and s["routed_by_entry"] == {"@/np.matmul": 1, "np.dot": 1}
    assert s["reasons"]["routed"] == {"engine=cpu": 2}
    assert s["reasons"]["native"] == {"product is not float64 or complex128": 1, "non-finite operand": 1,
                                      "below min_size (m*n*k < 1000000)": 1}
    assert s["seconds"]["routed"] > 0 and s["fallback"] == 0
    text = ob.dispatch.format_stats(s)
    assert "routed 2" in text and "non-finite operand" in text and "np.dot 1" in text
    ob.reset_stats()
    s = ob.stats()
    assert s["routed"] == s["native"] == s["fallback"] == 0 and s["routed_by_entry"] == {}
    assert s["c_fast_path"] == {"below_floor": 0, "vector_shaped": 0}


def test_fallback_of_an_unusable_engine_is_logged_once(caplog, monkeypatch):
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here: engine='cuda' would not fail")
    # The first-warning memory is process-wide: an earlier test's RuntimeError in the
    # routed `@` path (test_dispatch_matmul) would otherwise make this one a debug line.
    monkeypatch.setattr(log, "_warned", set())
    a, b = M(10, 14), M(14, 9)
    nat = a @ b
    caplog.set_level(logging.DEBUG, logger="ozaki_backend")
    with ob.enabled(engine="cuda", min_size=0):
        r1 = a @ b
        r2 = np.dot(a, b)
        r3 = a @ b
    assert np.array_equal(r1, nat) and np.array_equal(r3, nat)
    assert np.array_equal(r2, np.dot(a, b))
    assert ob.stats()["fallback"] == 3 and ob.stats()["routed"] == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" failed")[0] for r in warnings] == ["@/np.matmul", "np.dot"]
    assert any(r.levelno == logging.DEBUG and "fallback" in r.getMessage()
               for r in caplog.records)


def test_explain_report_and_recent_decisions():
    a, b = M(10, 14), M(14, 9)
    assert "enabled here: False" in ob.explain()
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
        np.dot(a, M(14))
        text = ob.explain()
    assert "enabled here: True" in text and "floor (smallest m*n*k routed): 0" in text
    assert "np.dot" in text and "matrix-vector" in text
    with pytest.raises(TypeError):
        ob.explain(a)


def test_cost_model_decisions_and_floor():
    model = costmodel.cost_model()
    cfg = config.Config.build(None, {"engine": "cuda"})
    old = model.host_gflops
    try:
        model.host_gflops = 500.0
        assert model.floor() == int(model.overhead_s * 500e9 / 2)
        small = routing.decide(cfg, 64, 64, 64)
        big = routing.decide(cfg, 8192, 8192, 8192)
        assert not small and small.reason == "cost model: host BLAS faster"
        assert big and big.engine == "cuda" and big.est_emulated_s < big.est_host_s
        assert "est. host BLAS" in repr(big)
        assert costmodel.floor(cfg) == model.floor()
        ob.enable(engine="cuda")
        assert loophook.state() == (1, model.floor())
        model.host_gflops = 1000.0                 # enable()'s floor follows the model
        assert loophook.state() == (1, model.floor())
        with pytest.raises(AttributeError):
            model.nonsense = 1
    finally:
        ob.disable()
        model.host_gflops = old
    assert not routing.decide(cfg, 1, 64, 64) and not routing.decide(cfg, 64, 64, 0)


def test_environment_parsing():
    assert env.config_from_environ({}) == {}
    e = {"OZAKI_BACKEND_ENGINE": "cpu", "OZAKI_BACKEND_MIN_SIZE": "1e6",
         "OZAKI_BACKEND_MODULI": "12", "OZAKI_BACKEND_MODE": "", "OZAKI_BACKEND_BITS": " "}
    assert env.config_from_environ(e) == {"engine": "cpu", "min_size": 1_000_000, "moduli": 12}
    assert env.config_from_environ({"OZAKI_BACKEND_MIN_SIZE": "auto"}) == {"min_size": None}
    e = {"OZAKI_BACKEND_SCHEME": "phase22", "OZAKI_BACKEND_RESIDUAL": "yes"}
    assert env.config_from_environ(e) == {"scheme": "phase22", "residual": True}
    for e, words in [({"OZAKI_BACKEND_MODULI": "x"}, "OZAKI_BACKEND_MODULI='x'"),
                     ({"OZAKI_BACKEND_MODULI": "30"}, "OZAKI_BACKEND_MODULI='30'"),
                     ({"OZAKI_BACKEND_ENGINE": "gpu"}, "OZAKI_BACKEND_ENGINE='gpu'"),
                     ({"OZAKI_BACKEND_MIN_SIZE": "-3"}, "OZAKI_BACKEND_MIN_SIZE='-3'"),
                     ({"OZAKI_BACKEND_RESIDUAL": "maybe"}, "OZAKI_BACKEND_RESIDUAL"),
                     ({"OZAKI_BACKEND_RESIDUAL": "1"}, "OZAKI_BACKEND_RESIDUAL='1'"),
                     ({"OZAKI_BACKEND_BITS": "30", "OZAKI_BACKEND_MODULI": "8"},
                      "OZAKI_BACKEND_BITS='30'")]:
        with pytest.raises(ValueError, match=words):
            env.config_from_environ(e)
    cfg = {"engine": "cpu", "min_size": None, "residual": False, "moduli": 9}
    assert env.config_from_environ(env.environ_for(cfg)) == cfg
    assert env.activate_from_environ({"OZAKI_BACKEND": "0"}) is False
    assert not config.current().enabled


def test_activate_from_environ_enables_process_wide(capsys):
    assert env.activate_from_environ({"OZAKI_BACKEND": "1", "OZAKI_BACKEND_ENGINE": "cpu",
                                      "OZAKI_BACKEND_MIN_SIZE": "0"}) is True
    assert config.current().enabled and config.current().config.min_size == 0
    with pytest.raises(ValueError, match="OZAKI_BACKEND_LOG"):
        env.setup_logging("loud")
