"""The cost model from measured rates (issue 17, item 3): decisions on the benchmark's
grid from a given rate table, per-shape host rates, the margin, the floor as a lower
bound, the table's reading and writing, and ``tune``'s measuring function."""

import json
import math

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import tune
from ozaki_backend.dispatch import config, costmodel, routing

#: Rates of the shape of the H200 machine's (host DGEMM GFLOP/s per shape class; the
#: staged transfers, INT8 GEMM, device memory, fixed cost). Only their structure
#: matters to these tests, not their values.
HOST = {"dgemm": [
    {"m": 256, "n": 256, "k": 256, "gflops": 60.0},
    {"m": 1024, "n": 1024, "k": 1024, "gflops": 300.0},
    {"m": 4096, "n": 4096, "k": 4096, "gflops": 600.0},
    {"m": 8192, "n": 8192, "k": 8192, "gflops": 620.0},
    {"m": 16384, "n": 16384, "k": 256, "gflops": 450.0},
    {"m": 16384, "n": 16384, "k": 64, "gflops": 150.0},
    {"m": 64, "n": 64, "k": 100000, "gflops": 100.0}]}
DEVICE = {"h2d_gbps": 50.0, "d2h_gbps": 45.0, "int8_tops": 1000.0, "device_gbps": 3000.0,
          "overhead_s": 1e-3}
RATES = {"host": HOST, "device": DEVICE, "source": "test table"}

#: The benchmark's grid ``(m, k, n)``.
GRID = [(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384)] + [
    (100000, 64, 100000), (64, 100000, 64), (16384, 256, 16384)]

CUDA = config.Config.build(None, {"engine": "cuda"})


def model(**kw):
    return costmodel.CostModel(rates=kw.pop("rates", RATES), **kw)


@pytest.mark.parametrize("m, k, n", GRID)
def test_grid_decisions_follow_the_rates(m, k, n):
    cm = model()
    d = routing.decide(CUDA, m, n, k, cost=cm)
    assert d.est_host_s == cm.host_seconds(m, n, k)
    assert d.est_emulated_s > cm.overhead_s
    assert bool(d) == cm.routes(d.est_host_s, d.est_emulated_s)
    assert bool(d) == (d.est_emulated_s * 1.1 < d.est_host_s)
    assert d.reason == ("cost model: emulated faster" if d else "cost model: host BLAS faster")


def test_grid_extremes():
    cm = model()
    assert not routing.decide(CUDA, 256, 256, 256, cost=cm)
    assert routing.decide(CUDA, 16384, 16384, 16384, cost=cm).engine == "cuda"


def test_host_rate_is_per_shape_class():
    cm = model()
    assert cm.host_rate(4000, 4000, 4000) == 600.0
    assert cm.host_rate(100000, 100000, 64) == 150.0      # short k: memory bound
    assert cm.host_rate(64, 64, 100000) == 100.0
    assert cm.host_rate(20000, 20000, 300) == 450.0
    # The class's rate decides: the same inner-product shape flips with its rate.
    slow = model()
    fast = model(rates={"host": {"dgemm": [dict(e, gflops=1e4) if e["m"] == 64 else e
                                           for e in HOST["dgemm"]]}, "device": DEVICE})
    shape = dict(m=64, n=64, k=100000)
    assert routing.decide(CUDA, cost=slow, **shape)
    assert not routing.decide(CUDA, cost=fast, **shape)


def test_one_given_host_rate_overrides_the_table():
    cm = model(host_gflops=123.0)
    assert cm.host_rate(64, 64, 100000) == cm.host_rate(8192, 8192, 8192) == 123.0
    assert cm.host_gflops == 123.0


def test_margin_keeps_close_products_native():
    cm = model()
    m = n = k = 2048
    t_e = cm.emulated_seconds(m, n, k)
    assert cm.routes(1.2 * t_e, t_e)
    assert not cm.routes(1.05 * t_e, t_e)      # 5 % faster: within the estimates' error
    assert not model(margin=0.3).routes(1.2 * t_e, t_e)


def test_floor_is_a_lower_bound_of_routed_products():
    cm = model()
    f = cm.floor()
    assert f >= int(cm.overhead_s * 60e9 / 2)   # the slowest class (60 GFLOP/s)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        # shapes of every aspect ratio just below the floor
        e = rng.dirichlet((1, 1, 1)) * math.log(f * rng.uniform(0.5, 1.0))
        m, n, k = (max(1, int(math.exp(x))) for x in e)
        if m < 2 or n < 2:
            continue
        assert not routing.decide(CUDA, m, n, k, cost=cm), (m, n, k)


def test_defaults_before_tune():
    cm = costmodel.CostModel(host_gflops=500.0)
    for name, v in costmodel.DEFAULTS.items():
        assert getattr(cm, name) == v
    assert cm.host_table == () and cm.rates_source is None
    given = costmodel.CostModel(host_gflops=500.0, h2d_gbps=7.0, rates=RATES)
    assert given.h2d_gbps == 7.0 and given.d2h_gbps == DEVICE["d2h_gbps"]


def test_unknown_machine_gets_empty_records(tmp_path):
    path = tmp_path / "rates.json"
    assert costmodel.machine_rates(str(path), host="h", gpu="g") == \
        {"host": {}, "device": {}, "source": None}
    path.write_text("not json")
    assert costmodel.read_table(str(path))["hosts"] == {}


def test_write_rates_merges_per_machine(tmp_path):
    path = str(tmp_path / "sub" / "rates.json")
    costmodel.write_rates(path, HOST, DEVICE, host_name="cpu A", gpu_name="GPU X")
    costmodel.write_rates(path, {"dgemm": []}, None, host_name="cpu B")
    table = json.loads(open(path).read())
    assert table["schema"] == costmodel.RATES_SCHEMA
    assert set(table["hosts"]) == {"cpu A", "cpu B"} and set(table["devices"]) == {"GPU X"}
    rec = costmodel.machine_rates(path, host="cpu A", gpu="GPU X")
    cm = costmodel.CostModel(rates=rec)
    assert cm.h2d_gbps == DEVICE["h2d_gbps"] and cm.host_rate(4096, 4096, 4096) == 600.0
    assert costmodel.machine_rates(path, host="cpu A", gpu="GPU Y")["device"] == {}


def test_process_model_reads_the_table_it_is_pointed_to(tmp_path, monkeypatch):
    path = str(tmp_path / "rates.json")
    monkeypatch.setenv(costmodel.RATES_ENV, path)
    assert costmodel.rates_path() == path
    cm = costmodel.CostModel(rates="auto")
    costmodel.write_rates(path, HOST, DEVICE, gpu_name="GPU X")
    monkeypatch.setattr(costmodel, "gpu_key", lambda: "GPU X")
    assert cm.overhead_s == DEVICE["overhead_s"]            # loaded on first use
    assert cm.host_rate(8192, 8192, 8192) == 620.0
    assert path in cm.rates_source


def test_tune_measures_and_writes_to_the_given_path(tmp_path):
    path = str(tmp_path / "rates.json")
    lines = []
    got = tune.measure_rates(path, host_shapes=((32, 16, 24), (64, 8, 64)), device=False,
                             repeats=1, log=lines.append)
    assert got == path and len(lines) == 2
    rec = costmodel.machine_rates(path, gpu="none")
    rows = rec["host"]["dgemm"]
    assert [(r["m"], r["k"], r["n"]) for r in rows] == [(32, 16, 24), (64, 8, 64)]
    assert all(r["gflops"] > 0 and r["seconds"] > 0 for r in rows)
    assert rec["device"] == {}


def test_tune_rates_only_cli_without_gpu(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "rates.json")
    monkeypatch.setattr("ozaki_backend.cuda.availability", lambda: (False, "test"))
    real = tune.measure_host_rates
    monkeypatch.setattr(tune, "measure_host_rates",
                        lambda shapes, **kw: real(((16, 16, 16),), **kw))
    assert tune.main(["--rates-only", "--rates-output", path, "--repeats", "1"]) == 0
    assert "host rates only" in capsys.readouterr().out
    assert costmodel.read_table(path)["hosts"]


@pytest.mark.usefixtures("clean_dispatch")
def test_explicit_matmul_always_emulates():
    a = np.random.default_rng(1).standard_normal((8, 8))
    ob.matmul(a, a, engine="cpu")      # far below any floor: still emulated
    assert ob.stats()["routed"] == 1


def test_products_larger_than_the_device_are_estimated_out_of_core():
    small = model(device_mem_gb=80.0)
    big = model(device_mem_gb=1000.0)
    m = n = 100000
    k = 64
    assert small.out_of_core(m, n, k) and not big.out_of_core(m, n, k)
    assert not small.out_of_core(8192, 8192, 8192)
    t_small, t_big = small.emulated_seconds(m, n, k), big.emulated_seconds(m, n, k)
    # the result through pageable copies (2.4 GB/s by default) instead of the staged rate
    assert t_small - t_big >= 8.0 * m * n * (1 / 2.4e9 - 1 / DEVICE["d2h_gbps"] / 1e9) * 0.99
    assert routing.decide(CUDA, m, n, k, cost=big)
    assert not routing.decide(CUDA, m, n, k, cost=small)


# ------------------------------------------------------------- rates: once per machine
@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty user cache and package table, and no OZAKI_BACKEND_RATES."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(costmodel.RATES_ENV, raising=False)
    package = tmp_path / "package" / "host_rates.json"
    monkeypatch.setattr(costmodel, "package_rates_path", lambda: str(package))
    return tmp_path


def test_the_user_cache_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert costmodel.user_rates_path() == str(tmp_path / "ozaki_backend" / "host_rates.json")
    monkeypatch.setenv("XDG_CACHE_HOME", " ")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert costmodel.user_rates_path() == str(
        tmp_path / "home" / ".cache" / "ozaki_backend" / "host_rates.json")
    monkeypatch.delenv(costmodel.RATES_ENV, raising=False)
    assert costmodel.rates_path() == costmodel.user_rates_path()   # what tune writes


def test_the_user_cache_overrides_the_package_table_per_machine(cache, monkeypatch):
    costmodel.write_rates(costmodel.package_rates_path(), HOST, DEVICE,
                          host_name="cpu A", gpu_name="GPU X")
    mine = {"dgemm": [dict(e, gflops=2 * e["gflops"]) for e in HOST["dgemm"]]}
    costmodel.write_rates(costmodel.user_rates_path(), mine, None, host_name="cpu A")
    rec = costmodel.machine_rates(host="cpu A", gpu="GPU X")
    assert rec["host"] == mine and rec["device"] == DEVICE          # host from the cache
    assert costmodel.user_rates_path() in rec["source"]
    assert costmodel.package_rates_path() in rec["source"]
    # OZAKI_BACKEND_RATES replaces both
    other = str(cache / "other.json")
    monkeypatch.setenv(costmodel.RATES_ENV, other)
    assert costmodel.machine_rates(host="cpu A", gpu="GPU X")["host"] == {}


def test_a_process_never_measures_the_host_itself(cache, monkeypatch):
    def measured(*a, **k):
        raise AssertionError("the cost model measured the host")

    monkeypatch.setattr(costmodel, "measure_host_gflops", measured)
    monkeypatch.setattr(costmodel, "time_host_dgemm", measured)
    monkeypatch.delenv("OZAKI_BACKEND_HOST_GFLOPS", raising=False)
    a, b = costmodel.CostModel(rates="auto"), costmodel.CostModel(rates="auto")
    assert a.host_gflops == b.host_gflops == costmodel.estimate_host_gflops()
    assert a.floor() == b.floor()               # the same decisions in every process
    assert a.host_source.startswith("estimated") and "tune --rates-only" in a.host_source
    assert costmodel.estimate_host_gflops() == (costmodel.ESTIMATE_GFLOPS_PER_CPU
                                                * costmodel.usable_cpus())


def test_tune_writes_the_user_cache_unless_told_otherwise(cache, monkeypatch, capsys):
    monkeypatch.setattr("ozaki_backend.cuda.availability", lambda: (False, "test"))
    real = tune.measure_host_rates
    monkeypatch.setattr(tune, "measure_host_rates",
                        lambda shapes, **kw: real(((16, 16, 16),), **kw))
    model = costmodel.cost_model()
    try:
        assert tune.main(["--rates-only", "--repeats", "1"]) == 0
        assert costmodel.read_table(costmodel.user_rates_path())["hosts"]
        assert not costmodel.read_table(costmodel.package_rates_path())["hosts"]
        # the process-wide model reads what tune wrote, from the cache
        assert model.host_table and costmodel.user_rates_path() in model.rates_source
        assert tune.main(["--rates-only", "--repeats", "1", "--install"]) == 0
        assert costmodel.read_table(costmodel.package_rates_path())["hosts"]
    finally:
        monkeypatch.undo()
        model.reload()


def test_process_wide_decisions_are_remembered_until_the_model_changes():
    # The same decision object for the same config key, shape and entry (a scope
    # entered again builds an equal config); a parameter set on the model is a new
    # version: decided again, with the new estimate.
    cm = costmodel.cost_model()
    cfg1 = config.Config.build(None, {"engine": "cuda"})
    cfg2 = config.Config.build(None, {"engine": "cuda"})
    assert cfg1 is not cfg2 and cfg1.key == cfg2.key
    d1 = routing.decide(cfg1, 3000, 3000, 3000, entry="@/np.matmul")
    assert routing.decide(cfg2, 3000, 3000, 3000, entry="@/np.matmul") is d1
    assert routing.decide(cfg1, 3000, 3000, 3001, entry="@/np.matmul") is not d1
    before = cm.overhead_s
    version = cm.version
    try:
        cm.overhead_s = before * 2
        assert cm.version > version
        d2 = routing.decide(cfg1, 3000, 3000, 3000, entry="@/np.matmul")
        assert d2 is not d1 and d2.est_emulated_s > d1.est_emulated_s
    finally:
        cm.overhead_s = before
    assert routing.decide(cfg1, 3000, 3000, 3000, entry="@/np.matmul") == d1


def test_an_explicit_model_is_never_remembered():
    cm = model()
    d1 = routing.decide(CUDA, 3000, 3000, 3000, cost=cm)
    cm.overhead_s = cm.overhead_s * 100     # the given model's own change
    d2 = routing.decide(CUDA, 3000, 3000, 3000, cost=cm)
    assert d2.est_emulated_s > d1.est_emulated_s


def test_the_memo_starts_over_when_full(monkeypatch):
    monkeypatch.setattr(routing, "MEMO_KEPT", 3)
    monkeypatch.setattr(routing, "_MEMO", {})
    for n in range(2, 10):
        routing.decide(CUDA, n, n, n)
        assert len(routing._MEMO) <= 3
