"""bench --gemmul8: the peer side by side after the bench, from a source checkout with
a GEMMul8 build; a clear error (status 2) without one, before any GPU work."""

import pytest

from ozaki_backend import bench


@pytest.mark.parametrize("entry", ["bench.main", "python -m ozaki_backend bench"])
def test_without_a_checkout_and_build_it_says_what_it_needs(monkeypatch, tmp_path, capsys,
                                                            entry):
    from ozaki_backend.__main__ import main as cli

    monkeypatch.setattr(bench, "_ROOT", str(tmp_path))
    argv = ["--gemmul8", "--sizes", "256"]
    rc = bench.main(argv) if entry == "bench.main" else cli(["bench"] + argv)
    assert rc == 2
    err = capsys.readouterr().err
    assert "--gemmul8 needs a source checkout" in err and bench.PEER_SCRIPT in err


def test_the_peer_runs_on_the_bench_sizes_shapes_and_phis(monkeypatch, tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / bench.PEER_SCRIPT).write_text("")
    (tmp_path / ".gemmul8").mkdir()
    monkeypatch.setattr(bench, "_ROOT", str(tmp_path))
    args = bench._parse(["--sizes", "4096,8191", "--shapes", "8192,8192,2048",
                         "--phis=-1,2"])
    cmd = bench.peer_command(args)
    # bench's --shapes are M,N,K (plan order); the peer's m x k x n
    assert cmd == ["bash", str(tmp_path / bench.PEER_SCRIPT), "--shapes",
                   "4096x4096x4096,8191x8191x8191,8192x2048x8192", "--phis=-1,2"]


def test_help_lists_it(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    assert "--gemmul8" in capsys.readouterr().out
