"""``python -m ozaki_backend bench --host`` at tiny sizes on the CPU engine: every row
is produced, the JSON file is written, and routed rows really were routed."""

import json

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
    assert names == ["A @ B", "np.dot(A, B)", "dgemm(1.0, A, B) Fortran"]
    for r in doc["entries"]:
        assert r["routed"] and r["fallbacks"] == 0 and r["native_s"] > 0
        assert r["max_rel_diff_vs_numpy"] < 1e-12
    assert doc["entries"][2]["result_order"] == "F"
    gram = {r["name"]: r for r in doc["gram"]}
    assert gram["X.T @ X"]["shape"] == [6, 6, 40] and "exactly_symmetric" in gram["X.T @ X"]
    assert [r["shape"] for r in doc["grid"]] == [[16, 16, 16], [20, 18, 4]]  # m, n, k
    assert all("decision" in r and "ok" in r for r in doc["grid"])
    assert doc["phases"] is None          # the CUDA engine's breakdown only


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
