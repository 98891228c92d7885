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
    assert s["reasons"]["native"] == {"product is not float64 or complex128": 1,
                                      "non-finite operand": 1, "below min_size": 1}
    assert s.details["native"]["below min_size"] == "below min_size (m*n*k < 1000000)"
    assert s["seconds"]["routed"] > 0 and s["fallback"] == 0
    text = ob.dispatch.format_stats(s)
    assert "routed 2" in text and "non-finite operand" in text and "np.dot 1" in text
    ob.reset_stats()
    s = ob.stats()
    assert s["routed"] == s["native"] == s["fallback"] == 0 and s["routed_by_entry"] == {}
    assert s["c_fast_path"] == {"below_floor": 0, "vector_shaped": 0}


def test_fallback_of_an_unusable_engine_warns_with_the_reason(caplog):
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here: engine='cuda' would not fail")
    a, b = M(10, 14), M(14, 9)
    nat = a @ b
    caplog.set_level(logging.DEBUG, logger="ozaki_backend")
    with pytest.warns(ob.FallbackWarning) as caught:
        with ob.enabled(engine="cuda", min_size=0):
            r1 = a @ b
            r2 = np.dot(a, b)
    assert np.array_equal(r1, nat) and np.array_equal(r2, np.dot(a, b))
    assert [str(w.message).split(": ")[2] for w in caught] == ["@/np.matmul", "np.dot"]
    assert all("engine unavailable" in str(w.message) and "ozaki_backend[cuda" in
               str(w.message) and w.filename == __file__ for w in caught)
    s = ob.stats()
    assert s["fallback"] == 2 and s["routed"] == 0
    assert s["reasons"]["fallback"] == {"@/np.matmul: engine unavailable": 1,
                                        "np.dot: engine unavailable": 1}
    # Logged at DEBUG only, without a traceback (an expected failure).
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert any("fallback in np.dot" in r.getMessage() for r in caplog.records)


def test_fallback_warning_follows_the_warning_filters():
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here: engine='cuda' would not fail")
    a, b = M(10, 14), M(14, 9)
    import warnings

    assert issubclass(ob.FallbackWarning, RuntimeWarning)
    assert issubclass(ob.NativeFallbackWarning, ob.FallbackWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ob.FallbackWarning)
        with ob.enabled(engine="cuda", min_size=0), pytest.raises(ob.FallbackWarning):
            np.dot(a, b)
    # The default filter: once per call site and message.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        with ob.enabled(engine="cuda", min_size=0):
            for _ in range(3):
                np.dot(a, b)
    assert len([w for w in caught if issubclass(w.category, ob.FallbackWarning)]) == 1
    assert ob.stats()["reasons"]["fallback"]["np.dot: engine unavailable"] == 4


def test_print_stats_is_a_table_and_the_dict_stays():
    import json

    a, b = M(10, 14), M(14, 9)
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
        np.dot(a, M(14))
    s = ob.stats()
    text = str(s)
    assert text == repr(s) == ob.dispatch.format_stats(s)
    assert text.splitlines()[1].split() == ["outcome", "products", "reason"]
    assert "routed          1  engine=cpu" in text and "matrix-vector shaped" in text
    plain = s.as_dict()
    assert type(plain) is dict and plain == s and json.loads(json.dumps(s))["routed"] == 1
    assert max(len(k) for v in s["reasons"].values() for k in v) <= 40


def test_matrix_vector_counts_are_the_users_products_only():
    a, v = M(300, 300), M(300)
    with ob.enabled(engine="cpu"):
        a @ a                 # routed: the engine's own matrix-vector products are not counted
        np.dot(a, a)
        a @ v
        a @ v
    s = ob.stats()
    assert s["routed"] == 2 and s["c_fast_path"]["vector_shaped"] == 2


def test_explain_without_a_scope_says_how_to_enable():
    a, b = M(10, 14), M(14, 9)
    d = ob.explain(a, b)
    assert "(10 x 14) @ (14 x 9)" in str(d) and "ozaki_backend.enabled()" in str(d)
    assert "(0 x 0)" not in str(ob.explain(M(3), M(3)))
    report = ob.explain()
    assert "nothing is routed in this context" in report and "(0 x 0)" not in report


def test_info_reports_version_engines_config_and_hooks():
    import json

    i = ob.info()
    assert i["version"] == ob.__version__
    assert i["engines"]["cpu"]["available"] is True
    from ozaki_backend.cuda import availability

    assert (i["engines"]["cuda"]["available"], i["engines"]["cuda"]["reason"]) == availability()
    assert i["config"]["enabled"] is False and i["config"]["engine"] == "auto"
    with ob.enabled(engine="CPU", min_size=7):
        i = ob.info()
    assert i["config"]["enabled"] and i["config"]["engine"] == "cpu"
    assert i["config"]["min_size"] == 7 and i["config"]["scope"] == "context"
    assert i["hooks"]["installed"] is True and "numpy.dot" in i["hooks"]["wrappers"]
    json.dumps(i, default=str)


def test_explain_report_and_recent_decisions():
    a, b = M(10, 14), M(14, 9)
    assert "enabled here: False" in ob.explain()
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
        np.dot(a.astype(np.float32), b.astype(np.float32))
        np.dot(a, M(14))   # matrix-vector: decided in C, counted, not in the decisions
        text = ob.explain()
    assert "enabled here: True" in text and "floor (smallest m*n*k routed): 0" in text
    assert "np.dot" in text and "not float64" in text and "matrix-vector" not in text
    assert ob.stats()["c_fast_path"]["vector_shaped"] == 1
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


def test_environment_problems_name_the_variable():
    found = dict(env.problems({"OZAKI_BACKEND": "maybe", "OZAKI_BACKEND_ENGIN": "cpu",
                               "OZAKI_BACKEND_HOST_GFLOPS": "0", "OZAKI_BACKEND_LOG": "loud",
                               "OZAKI_BACKEND_STATS": "sometimes",
                               "OZAKI_BACKEND_MODE": "Quick"}))
    assert "did you mean OZAKI_BACKEND_ENGINE?" in found["OZAKI_BACKEND_ENGIN"]
    assert "stays off" in found["OZAKI_BACKEND"]
    assert "OZAKI_BACKEND_HOST_GFLOPS='0'" in found["OZAKI_BACKEND_HOST_GFLOPS"]
    assert "OZAKI_BACKEND_MODE='Quick'" in found["config"]
    assert set(found) == {"OZAKI_BACKEND_ENGIN", "OZAKI_BACKEND", "OZAKI_BACKEND_HOST_GFLOPS",
                          "OZAKI_BACKEND_LOG", "OZAKI_BACKEND_STATS", "config"}
    cuda = dict(env.problems({"OZAKI_BACKEND_CUDA_GEMM": "batch", "OZAKI_BACKEND_CUDA_TILE": "64",
                              "OZAKI_BACKEND_CUDA_BK": "x", "OZAKI_BACKEND_CUDA_PATH": "wgmma"}))
    assert set(cuda) == {"OZAKI_BACKEND_CUDA_GEMM", "OZAKI_BACKEND_CUDA_TILE",
                         "OZAKI_BACKEND_CUDA_BK"}
    assert "OZAKI_BACKEND_CUDA_GEMM='batch' must be batched or loop" in \
        cuda["OZAKI_BACKEND_CUDA_GEMM"]
    assert env.problems({"OZAKI_BACKEND": "ON", "OZAKI_BACKEND_ENGINE": "CPU",
                         "OZAKI_BACKEND_MODE": "Fast", "OZAKI_BACKEND_HOST_GFLOPS": "50"}) == []
    assert env.config_from_environ({"OZAKI_BACKEND_ENGINE": "CPU"}) == {"engine": "cpu"}
    # Invalid: warned, and the backend stays off (no exception).
    with pytest.warns(ob.ConfigurationWarning, match="OZAKI_BACKEND_MODULI='x'"):
        assert env.activate_from_environ({"OZAKI_BACKEND": "1",
                                          "OZAKI_BACKEND_MODULI": "x"}) is False
    with pytest.warns(ob.ConfigurationWarning, match="OZAKI_BACKEND='maybe'"):
        assert env.activate_from_environ({"OZAKI_BACKEND": "maybe"}) is False
    assert not config.current().enabled


def test_host_rate_of_zero_is_rejected_not_divided_by(monkeypatch):
    model = costmodel.CostModel()
    for bad in (0, -5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="host_gflops"):
            model.host_gflops = bad
    monkeypatch.setenv("OZAKI_BACKEND_HOST_GFLOPS", "0")
    monkeypatch.setattr(costmodel, "estimate_host_gflops", lambda: 12.5)
    fresh = costmodel.CostModel()
    with pytest.warns(ob.ConfigurationWarning, match="OZAKI_BACKEND_HOST_GFLOPS='0'"):
        assert fresh.host_gflops == 12.5
    assert fresh.host_seconds(10, 10, 10) > 0


@pytest.mark.parametrize("make, key", [
    (lambda: MemoryError("host"), "out of memory"),
    (lambda: ob.EngineUnavailableError("no CuPy"), "engine unavailable"),
    (lambda: _wrapped(type("OutOfMemoryError", (Exception,), {})("2 GiB")), "out of memory"),
    (lambda: _wrapped(type("CompileException", (Exception,), {})("nvrtc")), "compile error"),
    (lambda: _wrapped(ValueError("cublas")), "CUDA error"),
    (lambda: KeyError("x"), "error (KeyError)")])
def test_fallback_reasons_are_short_stable_keys(make, key):
    assert log.fallback_key(make()) == key


def _wrapped(cause):
    from ozaki_backend.cuda import CudaEngineError

    try:
        raise CudaEngineError(f"CUDA engine failed: {cause}") from cause
    except CudaEngineError as exc:
        return exc


def test_out_of_memory_in_the_routed_path_is_logged_and_computed_natively(monkeypatch,
                                                                          caplog):
    # Nothing the user's code can change: NumPy's result, a count and a log line (a
    # WARNING the first time per reason, DEBUG afterwards), no Python warning.
    import warnings

    from ozaki_backend.dispatch import route

    def oom(*args, **kwargs):
        raise MemoryError("cannot allocate")

    monkeypatch.setattr(route._api, "product", oom)
    a, b = M(10, 14), M(14, 9)
    caplog.set_level(logging.DEBUG, logger="ozaki_backend")
    with ob.enabled(engine="cpu", min_size=0), warnings.catch_warnings():
        warnings.simplefilter("error")
        r = np.dot(a, b)
        r2 = np.dot(a, b)
    assert np.array_equal(r, np.dot(a, b)) and np.array_equal(r2, r)
    assert ob.stats()["reasons"]["fallback"] == {"np.dot: out of memory": 2}
    lines = [(rec.levelno, rec.getMessage()) for rec in caplog.records
             if "np.dot: out of memory: cannot allocate" in rec.getMessage()]
    assert [lv for lv, _ in lines] == [logging.WARNING, logging.DEBUG]
    assert "product computed natively" in lines[0][1]


def test_warning_filters_set_to_error_raise_from_every_entry_point():
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here: engine='cuda' would not fail")
    import warnings

    a, b = M(10, 14), M(14, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ob.FallbackWarning)
        with ob.enabled(engine="cuda", min_size=0):
            # `@` too: the C hook keeps the warning set and NumPy raises it.
            for product in (lambda: a @ b, lambda: np.matmul(a, b), lambda: np.dot(a, b),
                            lambda: ob.wrap(a) @ b):
                with pytest.raises(ob.FallbackWarning, match="engine unavailable"):
                    product()
    s = ob.stats()
    assert s["fallback"] == 4, s     # each counted once, no "error in the C hook"
    assert all("engine unavailable" in k for k in s["reasons"]["fallback"])


@pytest.fixture
def certificate_miss(monkeypatch):
    """The CPU engine's 2-D product as a certificate miss computed natively, under the
    outcome name given (the engines may add new ``native ...`` outcomes)."""
    from ozaki_backend import _native, _warnings
    from ozaki_backend.reference import pipeline

    state = {"outcome": "native fallback"}

    def missed(A, B, plan, *, want_bound=False):
        _warnings.warn_native("the certificate cannot meet the target (test)")
        ob_stats.record_certificate(state["outcome"])
        return pipeline.Product(_native.matmul(A, B), None, 0, state["outcome"])

    from ozaki_backend import _stats as ob_stats

    monkeypatch.setattr(pipeline, "ozaki2_2d", missed)
    return state


@pytest.mark.parametrize("outcome", ["native fallback", "native (cost)"])
def test_a_certificate_miss_inside_a_scope_is_a_logged_fallback(certificate_miss, caplog,
                                                               outcome):
    import warnings

    certificate_miss["outcome"] = outcome
    a, b = M(10, 14), M(14, 9)
    caplog.set_level(logging.DEBUG, logger="ozaki_backend")
    with ob.enabled(engine="cpu", min_size=0), warnings.catch_warnings():
        warnings.simplefilter("error")       # a warning here would raise
        r = a @ b
        r2 = np.dot(a, b)
    assert np.array_equal(r, a @ b) and np.array_equal(r2, np.dot(a, b))
    s = ob.stats()
    assert (s["routed"], s["fallback"]) == (0, 2)          # the top line says so
    assert s["reasons"]["fallback"] == {f"certificate: {outcome}": 2}
    assert s["certificate"] == {outcome: 2}
    assert s.details["fallback"][f"certificate: {outcome}"] == "engine=cpu"
    assert str(s).startswith("ozaki_backend stats: routed 0, native 0, fallback 2")
    levels = [r.levelno for r in caplog.records if "test" in r.getMessage()
              and "computed natively" in r.getMessage()]
    assert levels == [logging.WARNING, logging.DEBUG]


def test_a_certificate_miss_of_an_explicit_call_warns(certificate_miss):
    a, b = M(10, 14), M(14, 9)
    with pytest.warns(ob.NativeFallbackWarning, match="cannot meet the target"):
        r = ob.matmul(a, b, engine="cpu")
    assert np.array_equal(r, a @ b)
    s = ob.stats()
    assert (s["routed"], s["fallback"]) == (0, 1)


def test_an_unfinished_product_leaves_no_native_outcome_behind(certificate_miss,
                                                                monkeypatch):
    # A certificate miss recorded by a product that then failed must not turn the next,
    # certified product into a fallback.
    from ozaki_backend import _stats as ob_stats

    ob_stats.record_certificate("native fallback")   # left by a product that raised
    monkeypatch.undo()
    a, b = M(10, 14), M(14, 9)
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
    assert ob.stats()["routed"] == 1
