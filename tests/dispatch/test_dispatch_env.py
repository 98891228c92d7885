"""Start-up paths in fresh interpreters: the OZAKI_BACKEND=1 .pth hook, the
``python -m ozaki_backend run`` / ``info`` commands, and what ``import ozaki_backend``
does (and does not) import or install."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ozaki_backend as ob

# An unmodified NumPy + SciPy program: it saves what it computed for the test to check.
SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import scipy.linalg
    from scipy.linalg import blas

    rng = np.random.default_rng(3)
    A, B, C = rng.standard_normal((12, 20)), rng.standard_normal((20, 9)), rng.standard_normal((9, 7))
    res = {
        "matmul": A @ B,
        "dot": np.dot(A, B),
        "einsum": np.einsum("ij,jk->ik", A, B),
        "multi_dot": np.linalg.multi_dot([A, B, C]),
        "dgemm": blas.dgemm(1.0, A, B),
        "gemm": scipy.linalg.get_blas_funcs("gemm", (A, B))(1.0, A, B),
        "vector": A @ np.ones(20),
    }
    np.savez(sys.argv[1], **res)
    print("args", sys.argv[2:])
""")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OZAKI_BACKEND")}
    env.update(extra)
    return env


def _py(args, env, cwd=None, check=True):
    p = subprocess.run([sys.executable] + args, env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


@pytest.fixture(scope="module")
def expected():
    rng = np.random.default_rng(3)
    A, B, C = rng.standard_normal((12, 20)), rng.standard_normal((20, 9)), rng.standard_normal((9, 7))
    emu = ob.matmul(A, B, engine="cpu")
    with ob.enabled(engine="cpu", min_size=0):
        chain = np.linalg.multi_dot([A, B, C])
    return {"emu": emu, "native": A @ B, "multi_dot": chain, "vector": A @ np.ones(20)}


def _check_routed(npz, expected):
    with np.load(npz) as r:
        for key in ("matmul", "dot", "einsum", "dgemm", "gemm"):
            assert np.array_equal(r[key], expected["emu"]), key
            assert not np.array_equal(r[key], expected["native"]), key
        assert np.array_equal(r["multi_dot"], expected["multi_dot"])
        assert np.array_equal(r["vector"], expected["vector"])
        assert r["dgemm"].flags.f_contiguous


def _check_native(npz, expected):
    with np.load(npz) as r:
        for key in ("matmul", "dot", "einsum", "dgemm", "gemm"):
            assert np.allclose(r[key], expected["native"]), key
        assert np.array_equal(r["matmul"], expected["native"])


def test_import_is_cheap_and_installs_nothing():
    code = textwrap.dedent("""
        import sys, json
        import numpy as np
        from numpy import dot as dot_before
        orig = np.dot
        import ozaki_backend as ob
        from ozaki_backend.dispatch import blashook, loophook
        out = {"imported": sorted(m for m in ("cupy", "scipy") if m in sys.modules),
               "installed": loophook.installed() or blashook.installed()
                            or np.dot is not orig,
               "blas_hook": blashook.available()}
        from scipy.linalg.blas import dgemm as dgemm_before  # still before installation
        a = np.random.default_rng(0).standard_normal((10, 10))
        ref = ob.matmul(a, a, engine="cpu")
        with ob.enabled(engine="cpu", min_size=0):
            out["np_dot"] = bool(np.array_equal(np.dot(a, a), ref))
            out["dot_bound_before"] = bool(np.array_equal(dot_before(a, a), ref))
            out["dgemm_bound_before"] = bool(np.array_equal(dgemm_before(1.0, a, a), ref))
            out["blas_dgemm"] = bool(np.array_equal(
                sys.modules["scipy.linalg.blas"].dgemm(1.0, a, a), ref))
        print(json.dumps(out))
    """)
    out = json.loads(_py(["-c", code], _env()).stdout)
    # A `dot` bound before installation is routed through NumPy's BLAS call site where
    # that can be hooked (Linux ELF); SciPy's own BLAS is not hooked.
    assert out == {"imported": [], "installed": False, "np_dot": True,
                   "dot_bound_before": out["blas_hook"], "dgemm_bound_before": False,
                   "blas_dgemm": True, "blas_hook": out["blas_hook"]}


def test_start_hook_truth_values():
    from ozaki_backend.dispatch import _start, env

    for value, want in [(None, False), ("", False), ("0", False), ("off", False),
                        (" False ", False), ("no", False), ("1", True), ("yes", True),
                        ("on", True), ("ON", True), ("anything", False)]:
        e = {} if value is None else {"OZAKI_BACKEND": value}
        assert env.requested(e) is want
        # The start hook wakes up for any value that is not off, so that activation
        # can warn about an invalid one.
        assert _start.requested(e) is (want or value == "anything")


def test_pth_hook_imports_nothing_when_unset_and_waits_for_numpy_when_set():
    code = textwrap.dedent("""
        import json, sys
        before = [m in sys.modules for m in ("_ozaki_backend_start", "numpy", "ozaki_backend")]
        import numpy
        from ozaki_backend.dispatch import config as c
        print(json.dumps([before, c.current().enabled, c.current().config.min_size,
                          c.current().config.moduli]))
    """)
    assert json.loads(_py(["-c", code], _env()).stdout) == [[False] * 3, False, None, None]
    # set: the start module is loaded, but NumPy (and the package) only on demand
    out = _py(["-c", code], _env(OZAKI_BACKEND="1", OZAKI_BACKEND_ENGINE="cpu",
                                 OZAKI_BACKEND_MIN_SIZE="0", OZAKI_BACKEND_MODULI="",
                                 OZAKI_BACKEND_BITS=" "))
    assert json.loads(out.stdout) == [[True, False, False], True, 0, None]


def test_env_var_routes_an_unmodified_script(tmp_path, expected):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    npz = tmp_path / "out.npz"
    p = _py([str(script), str(npz)], _env(OZAKI_BACKEND="1", OZAKI_BACKEND_ENGINE="cpu",
                                          OZAKI_BACKEND_MIN_SIZE="0", OZAKI_BACKEND_STATS="1"))
    _check_routed(npz, expected)
    assert "ozaki_backend stats: routed" in p.stderr and "scipy dgemm 2" in p.stderr
    # an invalid variable: a warning naming it, and the script runs untouched
    p = _py([str(script), str(npz)], _env(OZAKI_BACKEND="1", OZAKI_BACKEND_ENGINE="cpu",
                                          OZAKI_BACKEND_MODULI="99"))
    assert "OZAKI_BACKEND_MODULI='99'" in p.stderr and "stays off" in p.stderr
    assert "ConfigurationWarning" in p.stderr and "Traceback" not in p.stderr
    _check_native(npz, expected)


def test_configuration_typos_warn_and_never_stop_the_program(tmp_path, expected):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    npz = tmp_path / "out.npz"
    # Values are case-insensitive: ENGINE=CPU is engine="cpu".
    _py([str(script), str(npz)], _env(OZAKI_BACKEND="On", OZAKI_BACKEND_ENGINE="CPU",
                                      OZAKI_BACKEND_MIN_SIZE="0"))
    _check_routed(npz, expected)
    # A misspelt variable: a warning with a suggestion (the rest still applies).
    p = _py([str(script), str(npz)], _env(OZAKI_BACKEND="1", OZAKI_BACKEND_ENGINE="cpu",
                                          OZAKI_BACKEND_MIN_SIZE="0", OZAKI_BACKEND_MODULU="9"))
    assert "unknown variable OZAKI_BACKEND_MODULU" in p.stderr
    assert "did you mean OZAKI_BACKEND_MODULI?" in p.stderr
    _check_routed(npz, expected)
    # OZAKI_BACKEND=maybe is not a switch: warned, the backend stays off.
    p = _py([str(script), str(npz)], _env(OZAKI_BACKEND="maybe", OZAKI_BACKEND_ENGINE="cpu",
                                          OZAKI_BACKEND_MIN_SIZE="0"))
    assert "OZAKI_BACKEND='maybe'" in p.stderr and "stays off" in p.stderr
    _check_native(npz, expected)
    # A host rate of 0 or -5: warned with the variable named, the rate measured, and
    # no product ever divides by it (the cost model decides with engine='auto').
    for rate in ("0", "-5", "fast"):
        p = _py(["-c", "import numpy as np; a = np.ones((300, 300)); a @ a; print('ok')"],
                _env(OZAKI_BACKEND="1", OZAKI_BACKEND_HOST_GFLOPS=rate,
                     OZAKI_BACKEND_LOG="warning"))
        assert p.stdout.strip() == "ok", p.stderr
        assert f"OZAKI_BACKEND_HOST_GFLOPS={rate!r}" in p.stderr
        assert "ZeroDivisionError" not in p.stderr and "Traceback" not in p.stderr
    # -W error turns the warning into an error where the user asked for it.
    p = _py(["-W", "error::UserWarning", "-c", "import ozaki_backend"],
            _env(OZAKI_BACKEND_ENGIN="cpu"), check=False)
    assert p.returncode != 0 and "did you mean OZAKI_BACKEND_ENGINE?" in p.stderr


def test_log_debug_shows_every_routing_decision(tmp_path):
    code = ("import numpy as np, ozaki_backend as ob\n"
            "a = np.ones((8, 8))\n"
            "with ob.enabled(engine='cpu', min_size=100):\n"
            "    a @ a; np.dot(a, a); np.dot(a[:2, :2], a[:2, :2])\n"
            "    a[:2, :2] @ a[:2, :2]; a @ a[0]\n")
    p = _py(["-c", code], _env(OZAKI_BACKEND_LOG="debug"))
    lines = [ln for ln in p.stderr.splitlines() if "decision:" in ln]
    # The last three never leave the C fast paths (the wrappers' and the loop hook's:
    # below every floor, matrix-vector shaped): they are counted in
    # stats()["c_fast_path"], not logged.
    assert len(lines) == 2, p.stderr
    assert "routed to engine=cpu" in lines[0] and "np.dot" in lines[1]
    assert "routed to engine=cpu" in lines[1]


def test_run_command_script_argv_exit_code_and_children(tmp_path, expected):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT + textwrap.dedent("""
        import subprocess
        child = subprocess.run([sys.executable, "-c",
            "import numpy, ozaki_backend.dispatch.config as c; print(c.current().enabled)"],
            capture_output=True, text=True).stdout.strip()
        print("child", child)
        sys.exit(3)
    """))
    npz = tmp_path / "out.npz"
    p = _py(["-m", "ozaki_backend", "run", "--engine", "cpu", "--min-size=0", "--stats",
             str(script), str(npz), "x", "--y"], _env(), check=False)
    assert p.returncode == 3, p.stderr
    assert "args ['x', '--y']" in p.stdout and "child True" in p.stdout
    assert "ozaki_backend stats: routed" in p.stderr
    _check_routed(npz, expected)


def test_run_command_module_and_code(tmp_path, expected):
    (tmp_path / "progmod.py").write_text(SCRIPT)
    npz = tmp_path / "m.npz"
    _py(["-m", "ozaki_backend", "run", "-m", "progmod", str(npz), "a"], _env(
        OZAKI_BACKEND_ENGINE="cpu", OZAKI_BACKEND_MIN_SIZE="0"), cwd=tmp_path)
    _check_routed(npz, expected)
    code = ("import numpy as np, sys, ozaki_backend as ob; a = np.arange(16.).reshape(4, 4) / 7;"
            " print(__name__, sys.argv[1:], np.array_equal(a @ a, ob.matmul(a, a, engine='cpu')))")
    p = _py(["-m", "ozaki_backend", "run", "--engine=cpu", "--min-size", "0", "-c", code, "z"],
            _env())
    assert p.stdout.split() == ["__main__", "['z']", "True"]


def test_run_command_usage_errors(capsys, monkeypatch):
    from ozaki_backend.dispatch import cli, config, env

    for k in [k for k in os.environ if k.startswith("OZAKI_BACKEND")]:
        monkeypatch.delenv(k)
    for argv, word in [(["--moduli", "99", "-c", "pass"], "moduli"),
                       (["--bogus", "-c", "pass"], "--bogus"),
                       ([], "nothing to run"),
                       (["no_such_script.py"], "can't open file"),
                       (["--engine"], "expected one argument"),
                       (["-m"], "expected one argument"),
                       (["--min-size", "x", "-c", "pass"], "min_size must be")]:
        assert cli.run_main(argv) == 2, argv
        assert word in capsys.readouterr().err
    # An invalid variable is not a usage error: warned, and the program runs natively.
    monkeypatch.setenv("OZAKI_BACKEND_MIN_SIZE", "x")
    with pytest.warns(ob.ConfigurationWarning, match="OZAKI_BACKEND_MIN_SIZE='x'"):
        monkeypatch.setattr(env, "_reported", False)   # once per process otherwise
        assert cli.run_main(["-c", "import sys; sys.exit(4)"]) == 4
    assert cli.run_main(["--help"]) == 0 and "usage" in capsys.readouterr().out
    assert not config.current().enabled   # nothing was enabled by the failed runs


def test_every_run_option_that_takes_a_value_is_known_to_the_argv_split():
    # The split decides where the program's own arguments start; an option it thought
    # a flag would take its value for the script ("nothing to run").
    import argparse

    from ozaki_backend.dispatch import cli

    ap = argparse.ArgumentParser()
    cli.add_run_arguments(ap)
    valued = {s for a in ap._actions if a.nargs != 0 and a.option_strings
              for s in a.option_strings} - {"-m", "-c"}   # those two end run's own
    assert valued == set(cli._RUN_VALUE_OPTS)
    for opt in sorted(valued):
        own, rest = cli.split_run_argv([opt, "v", "-c", "pass", "x"])
        assert own == [opt, "v", "-c", "pass"] and rest == ["x"], opt


def test_info_command(capsys, monkeypatch):
    from ozaki_backend.dispatch import cli

    monkeypatch.setenv("OZAKI_BACKEND_ENIGNE", "cpu")
    assert cli.info_main([]) == 0
    out = capsys.readouterr().out
    for word in ("GPU", "CuPy", "moduli table", "intercepted", "scipy.linalg.blas.dgemm",
                 "ndarray.dot", "GFLOP/s", "OZAKI_BACKEND_ENIGNE", "typo"):
        assert word in out, word
    assert cli.info_main(["--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["loop_hook"]["extension"] is True and info["version"] == ob.__version__
    assert set(info) >= {"version", "engines", "config", "hooks"}
    assert info["start_hook"]["pth_installed"] is True, "pip install did not place the .pth"
    assert info["moduli"]["table"][:3] == [256, 255, 253]
    assert cli.info_main(["--bogus"]) == 2


def test_every_variable_the_package_reads_is_known():
    # The unknown-variable warning must never fire for a variable the package itself
    # reads: every OZAKI_BACKEND_* name in the sources is a known one.
    import pathlib
    import re

    from ozaki_backend.dispatch import config

    root = pathlib.Path(ob.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        # (a name ending in "_" is a prefix the sources match against, not a variable)
        names |= {n for n in re.findall(r"OZAKI_BACKEND_[A-Z0-9_]+", path.read_text())
                  if not n.endswith("_")}
    assert names, "the scan found nothing: the test would pass vacuously"
    missing = sorted(names - config.known_variables())
    assert not missing, f"read but not known to the configuration check: {missing}"


def test_exit_report_names_the_process_when_labelled():
    from ozaki_backend.dispatch import env

    before = env._report_label      # (an in-process dask worker may have set one)
    try:
        env.set_report_label(None)
        assert env.exit_report() == ob.dispatch.format_stats()
        env.set_report_label("worker 7")
        head, body = env.exit_report().split("\n", 1)
        assert head == f"[worker 7, pid {os.getpid()}]"
        assert body == ob.dispatch.format_stats()
        env.set_report_label(None)
        assert env.exit_report() == ob.dispatch.format_stats()
    finally:
        env.set_report_label(before)
