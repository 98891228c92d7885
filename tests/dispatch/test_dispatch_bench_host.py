"""``python -m ozaki_backend bench --host`` at tiny sizes on the CPU engine: every row
is produced, the JSON file is written, and routed rows really were routed."""

import json
import time

import pytest

from ozaki_backend import bench, bench_host

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")

ARGS = ["--engine", "cpu", "--n", "24", "--gram", "40x6", "--grid", "16;20,18,4",
        "--reps", "1", "--grid-reps", "1"]


@pytest.mark.usefixtures("clean_dispatch")
def test_bench_host_runs_on_the_cpu_engine(tmp_path, capsys):
    path = tmp_path / "host.json"
    assert bench.main(["--host", *ARGS, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ozaki_backend bench --host" in out and "A @ B" in out
    doc = json.loads(path.read_text())
    assert doc["schema"] == bench_host.SCHEMA and doc["engine"] == "cpu"
    names = [r["name"] for r in doc["entries"]]
    assert names == ["A @ B", "np.dot(A, B)", "dgemm(1.0, A, B) Fortran"] + [
        name for name, _ in bench_host.OTHER_ENTRIES]
    for r in doc["entries"][:3]:
        assert r["routed"] and r["fallbacks"] == 0 and r["native_s"] > 0
        assert r["max_rel_diff_vs_numpy"] < 1e-12
    for r in doc["entries"][3:]:      # timed inside enabled() only, against A @ B
        assert r["routed_s"] > 0 and r["vs_matmul"] > 0 and "ok" in r
    assert doc["entries"][2]["result_order"] == "F"
    gram = {r["name"]: r for r in doc["gram"]}
    assert gram["X.T @ X"]["shape"] == [6, 6, 40] and "exactly_symmetric" in gram["X.T @ X"]
    assert [r["shape"] for r in doc["grid"]] == [[16, 16, 16], [20, 18, 4]]  # m, n, k
    assert [r["decision"] for r in doc["grid"]] == ["routed", "routed"]  # engine="cpu"
    assert all(r["routed"] and "ok" in r and r["reason"] for r in doc["grid"])
    assert doc["worst_declined"] is None and "none declined" in out
    assert doc["phases"] is None          # the CUDA engine's breakdown only


@pytest.mark.usefixtures("clean_dispatch")
def test_declined_shapes_and_the_worst_ratio(tmp_path, capsys):
    # engine="auto" without a GPU routes nothing: every grid shape is declined.
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here: engine='auto' would route")
    path = tmp_path / "host.json"
    assert bench.main(["--host", "--engine", "auto", "--n", "0", "--gram", "", "--grid",
                       "16;24", "--grid-reps", "2", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert [r["decision"] for r in doc["grid"]] == ["native", "native"]
    assert not any(r["routed"] for r in doc["grid"])
    worst = max(doc["grid"], key=lambda r: r["ratio"])
    assert doc["worst_declined"] == {"ratio": worst["ratio"], "shape": worst["shape"]}
    assert "worst declined ratio: " in capsys.readouterr().out


def test_declined_ratios_time_only_the_declined_shapes():
    import ozaki_backend as ob

    def scope():
        return ob.enabled(engine="cpu", min_size=20 ** 3)

    got = bench_host.declined_ratios([(8, 8, 8), (24, 24, 24)], 2, scope)
    assert list(got) == [(8, 8, 8)] and got[(8, 8, 8)] > 0


def test_alternating_times_alternates():
    import ozaki_backend as ob
    from ozaki_backend.dispatch import config

    seen = []
    bench_host.alternating_times(lambda: seen.append(config.current().enabled), 3,
                                 lambda: ob.enabled(engine="cpu"))
    assert seen == [False, True] * 4


def test_alternating_times_runs_long_enough_each_way():
    # A call of ~1 ms with min_seconds=0.02: at least 20 pairs, not the 3 asked, and
    # never more than MAX_REPS.
    import ozaki_backend as ob

    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.001)

    bench_host.alternating_times(fn, 3, lambda: ob.enabled(engine="cpu"),
                                 min_seconds=0.02)
    pairs = (len(calls) - 2) // 2
    assert 3 < pairs <= bench_host.MAX_REPS and len(calls) % 2 == 0
    calls.clear()
    bench_host.alternating_times(lambda: calls.append(1), 3,
                                 lambda: ob.enabled(engine="cpu"), min_seconds=1e6)
    assert (len(calls) - 2) // 2 == bench_host.MAX_REPS


def test_decided_in_reads_the_hook_counts():
    zero = {"below_floor": 0, "python_calls": 0}
    assert bench_host._decided_in(zero, {"below_floor": 5, "python_calls": 0}) == "C"
    assert bench_host._decided_in(zero, {"below_floor": 0, "python_calls": 5}) == "Python"
    assert bench_host._decided_in(zero, {"below_floor": 1, "python_calls": 5}) == "mixed"
    assert bench_host._decided_in(zero, zero) == "unknown"


@pytest.mark.usefixtures("clean_dispatch")
def test_grid_row_below_the_floor_is_decided_in_c():
    # engine="cpu" with min_size: 8^3 is below the floor (the C hook's comparison),
    # 24^3 above it and routed by the Python router.
    import ozaki_backend as ob
    from ozaki_backend.dispatch import loophook

    if not loophook.available():
        pytest.skip("the _loophook extension is not built")
    ob.dispatch.install()
    args = bench_host._parse(["--engine", "cpu", "--n", "0", "--gram", "",
                                  "--grid", "8;24", "--grid-reps", "1"])
    rows = bench_host.grid_rows(args, lambda: ob.enabled(engine="cpu", min_size=20 ** 3),
                                lambda *a: None)
    assert [r["decision"] for r in rows] == ["native", "routed"]
    assert rows[0]["decided_in"] == "C" and rows[1]["decided_in"] == "Python"


def test_median_time_keeps_the_slow_warmup_as_a_sample():
    calls = []

    def fn():
        calls.append(1)
        return len(calls)

    t, res = bench_host.median_time(fn, 3, slow_s=0.0)
    assert len(calls) == 3 and res == 3 and t >= 0
    calls.clear()
    t, res = bench_host.median_time(fn, 3, keep=False)
    assert len(calls) == 4 and res is None


def test_grid_shapes_follow_the_one_convention(capsys):
    # M,N,K as plan(m, n, k); the old MxKxN only where it cannot be misread.
    assert bench_host._parse(["--grid", "8;30,20,10;5x7x7"]).grid_shapes == [
        (8, 8, 8), (30, 20, 10), (5, 7, 7)]
    with pytest.raises(SystemExit) as exc:
        bench_host._parse(["--grid", "64x100000x64"])
    assert exc.value.code == 2
    assert "ambiguous" in capsys.readouterr().err
