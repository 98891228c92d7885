"""The GPU bench end to end at a tiny size: its JSON, and each emulated row's ratio to
the DGEMM timings beside it (not a speed test: the numbers are only consistent)."""

import json

import pytest


@pytest.mark.gpu
def test_bench_rows_take_their_ratio_from_the_dgemm_timings_beside_them(tmp_path):
    from ozaki_backend import bench

    out = tmp_path / "bench.json"
    assert bench.main(["--sizes", "256", "--shapes", "", "--phis=-1", "--modes", "fast",
                       "--phase22-sizes", "", "--reps", "1", "--numpy-max", "0",
                       "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = [r for r in doc["records"] if r["kind"] == "time"
            and r["impl"] == "ozaki_backend" and r["io"] == "device"]
    assert rows
    for r in rows:
        assert r["native_s_beside"] > 0
        assert r["speedup"] == pytest.approx(r["native_s_beside"] / r["seconds"], rel=1e-12)
