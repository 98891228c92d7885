"""``python -m ozaki_backend``: argparse sub-commands, ``--version``, usage errors, help
texts, ``info --json``, ``demo --engine cuda`` without CuPy, where ``tune`` writes,
and the one shape convention (m,n,k, the order of ``plan(m, n, k)``)."""

import argparse
import json
import os
import subprocess
import sys

import pytest

import ozaki_backend as ob
from ozaki_backend import __main__ as cli_main
from ozaki_backend import shapes


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OZAKI_BACKEND")}
    env.update(extra)
    return env


def _cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "ozaki_backend", *args], env=_env(**env),
                          capture_output=True, text=True, timeout=300)


def test_version():
    p = _cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"ozaki_backend {ob.__version__}"


@pytest.mark.parametrize("args", [(), ("bogus",)])
def test_no_command_or_an_unknown_one_exits_2_with_usage(args):
    p = _cli(*args)
    assert p.returncode == 2 and p.stderr.startswith("usage: python -m ozaki_backend")
    # (a bad option of a command is one line instead: tests/tools/test_cli_edges.py)


def _subparsers(ap):
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    raise AssertionError("no sub-commands")


def test_every_option_has_help_and_no_help_text_shows_markup():
    ap = cli_main.build_parser()
    subs = _subparsers(ap)
    assert set(subs) == {"demo", "bench", "info", "run", "tune"}
    for name, sp in subs.items():
        for action in sp._actions:
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
        text = sp.format_help()
        assert "``" not in text and ":func:" not in text and "`" not in text, name
    assert "`" not in ap.format_help()


def test_info_json_is_info():
    p = _cli("info", "--json")
    assert p.returncode == 0, p.stderr
    printed = json.loads(p.stdout)
    assert set(printed) == set(ob.info())
    assert printed["version"] == ob.__version__
    assert printed["engines"]["cpu"] == {"available": True, "reason": "NumPy reference engine"}


def test_demo_with_an_unusable_cuda_engine_is_one_line_and_nonzero():
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("a GPU is usable here")
    p = _cli("demo", "--engine", "cuda", "--small")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ozaki_backend demo: error: engine='cuda'")


def test_run_passes_the_program_exit_code_and_arguments(tmp_path):
    p = _cli("run", "--engine", "CPU", "-c", "import sys; print(sys.argv[1:]); sys.exit(5)",
             "--engine", "x")
    assert p.returncode == 5 and p.stdout.strip() == "['--engine', 'x']", p.stderr


def test_tune_writes_to_the_user_cache_not_the_package(tmp_path, monkeypatch):
    from ozaki_backend import tune
    from ozaki_backend.cuda import tuning_files

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    package_table = tuning_files.table_path().read_text()
    record = {"compute_capability": "00", "entries": []}
    path = tune.write_table("Test GPU", record)
    assert path == str(tmp_path / "ozaki_backend" / "gemm_tuning.json")
    assert tuning_files.table_path().read_text() == package_table
    merged = json.loads(tuning_files.table_text())
    assert merged["devices"]["Test GPU"] == record
    assert set(json.loads(package_table)["devices"]) < set(merged["devices"])
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning_files.user_table_path() == str(
        tmp_path / "home" / ".cache" / "ozaki_backend" / "gemm_tuning.json")
    out = tmp_path / "given.json"
    assert tune.write_table("Other", record, str(out)) == str(out)
    assert json.loads(out.read_text())["devices"] == {"Other": record}


def test_tune_options():
    ap = argparse.ArgumentParser()
    from ozaki_backend import tune

    tune.add_arguments(ap)
    args = ap.parse_args(["--shapes", "4096,4096,65536", "2048", "--install"])
    assert args.shapes == [(4096, 65536, 4096), (2048, 2048, 2048)]   # (m, k, n) inside
    assert args.install and args.output is None
    with pytest.raises(SystemExit):
        ap.parse_args(["--install", "--output", "x.json"])


@pytest.mark.parametrize("text, mnk", [("4096,4096,65536", (4096, 4096, 65536)),
                                       ("m=10, k=30, n=20", (10, 20, 30)),
                                       ("512", (512, 512, 512)),
                                       ("2048x1024x1024", (2048, 1024, 1024))])
def test_shapes_are_m_n_k_like_plan(text, mnk):
    assert shapes.parse_shape(text) == mnk
    assert shapes.parse_shape(shapes.format_shape(*mnk)) == mnk
    p = ob.plan(*mnk)
    assert (p.m, p.n, p.k) == mnk


@pytest.mark.parametrize("text", ["1024x16384x1024", "1x2", "a,b,c", "0,1,1", "m=1,n=2"])
def test_ambiguous_or_bad_shapes_are_rejected(text):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        shapes.parse_shape(text)
    if text == "1024x16384x1024":
        assert "ambiguous" in str(info.value) and "1024,1024,16384" in str(info.value)


def test_bench_shapes_use_the_same_convention():
    from ozaki_backend import bench

    args = bench._parse(["--shapes", "4096,4096,65536;16384,16384,1024"])
    assert bench._shapes_mkn(args.shapes) == [(4096, 65536, 4096), (16384, 1024, 16384)]
    assert bench._shapes_mkn(bench._DEFAULT_SHAPES_TEXT) == list(bench.DEFAULT_SHAPES)
    with pytest.raises(SystemExit):
        bench._parse(["--shapes", "1024x16384x1024"])
