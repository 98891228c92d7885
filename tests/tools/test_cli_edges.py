"""The command line's edges: every bad argument of every command is a usage error (exit
status 2) of one line on stderr that names the argument, never a traceback; ``-V``; the
progress line (stderr, terminals only, an estimate weighed by each item's cost); the
demo's one screen (NumPy's shape order, the legend, warm timing)."""

import io
import subprocess
import sys

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import __main__ as cli_main
from ozaki_backend import _cli, demo

BAD = [
    # (argv, the argument the message must name)
    (["demo", "--repeat", "0"], "--repeat"),
    (["demo", "--repeat", "-1"], "--repeat"),
    (["demo", "--repeat", "x"], "--repeat"),
    (["demo", "--engine", "gpu"], "--engine"),
    (["demo", "--bogus"], "--bogus"),
    (["bench", "--sizes", "abc"], "--sizes"),
    (["bench", "--sizes", "2048,0"], "--sizes"),
    (["bench", "--moduli", "1"], "--moduli"),
    (["bench", "--moduli", "12,21"], "--moduli"),
    (["bench", "--modes", "fast,slow"], "--modes"),
    (["bench", "--phis", "x"], "--phis"),
    (["bench", "--phis", ""], "--phis"),
    (["bench", "--reps", "0"], "--reps"),
    (["bench", "--err-rows", "0"], "--err-rows"),
    (["bench", "--numpy-max", "-1"], "--numpy-max"),
    (["bench", "--complex", "0"], "--complex"),
    (["bench", "--phase22-sizes", "x"], "--phase22-sizes"),
    (["bench", "--shapes", "1x2"], "--shapes"),
    (["bench", "--host", "--n", "-5"], "--n"),
    (["bench", "--host", "--n", "abc"], "--n"),
    (["bench", "--host", "--gram", "abc"], "--gram"),
    (["bench", "--host", "--gram", "0x10"], "--gram"),
    (["bench", "--host", "--grid", "1x2"], "--grid"),
    (["bench", "--host", "--reps", "0"], "--reps"),
    (["bench", "--host", "--grid-reps", "0"], "--grid-reps"),
    (["bench", "--host", "--engine", "gpu"], "--engine"),
    (["bench", "--host", "--n", "0", "--gram", "", "--grid", ""], "nothing to measure"),
    (["bench", "--host", "--bogus"], "--bogus"),
    (["tune", "--moduli", "1"], "--moduli"),
    (["tune", "--moduli", "21"], "--moduli"),
    (["tune", "--repeats", "0"], "--repeats"),
    (["tune", "--shapes", "abc"], "--shapes"),
    (["tune", "--mode", "slow"], "--mode"),
    (["info", "--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv, named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_naming_it_and_exit_status_2(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main.main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert named in lines[0] and ": error: " in lines[0], lines[0]
    assert lines[0].startswith("python -m ozaki_backend " + argv[0]), lines[0]
    assert not out


def test_bad_arguments_from_a_shell_print_no_traceback():
    """The same through ``python -m`` (the module's own entry point): the cases the
    issue found (``demo --repeat 0`` was an UnboundLocalError)."""
    for argv in (["demo", "--repeat", "0"], ["bench", "--host", "--gram", "abc"],
                 ["bench", "--sizes", "abc"]):
        p = subprocess.run([sys.executable, "-m", "ozaki_backend", *argv],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags(flag, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main.main([flag])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ozaki_backend {ob.__version__}"


def test_help_of_bench_host_has_no_markup(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main.main(["bench", "--host", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "usage: python -m ozaki_backend bench --host" in text
    assert "`" not in text and ":func:" not in text and "--gram" in text


def test_bench_host_defaults_follow_the_engine():
    from ozaki_backend import bench_host

    cpu = bench_host._parse(["--engine", "cpu"])
    assert (cpu.n, cpu.gram) == (256, "4000x128")
    assert max(m * n * k for m, n, k in cpu.grid_shapes) <= 512 ** 3
    gpu = bench_host._parse(["--engine", "cuda"])
    assert (gpu.n, gpu.gram_shape) == (8192, (60000, 4096))
    given = bench_host._parse(["--engine", "cpu", "--n", "0", "--grid", "16"])
    assert given.n == 0 and given.grid_shapes == [(16, 16, 16)]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_estimates_the_time_left_by_weight():
    now = [0.0]
    stream = _Terminal()
    p = _cli.Progress("tune", [1.0, 3.0], stream=stream, clock=lambda: now[0])
    now[0] = 10.0
    p.step()                                                 # 1 of 4 units in 10 s
    assert stream.getvalue().startswith("\r")
    assert p.status() == "tune: 1/2, 10 s so far, about 30 s left"
    now[0] = 100.0
    assert p.status() == "tune: 1/2, 1 min 40 s so far, about 5 min 00 s left"
    p.step()
    assert p.status().endswith("finishing")
    p.close()
    assert stream.getvalue().endswith("\r")                  # the line is erased


def test_progress_is_silent_unless_stderr_is_a_terminal():
    stream = io.StringIO()                                   # a pipe or a log file
    p = _cli.Progress("bench", [1.0], stream=stream).start()
    log = p.wrap(lambda line: None)
    log("a row")
    p.close()
    assert stream.getvalue() == ""
    shown = _Terminal()
    lines = []
    p = _cli.Progress("bench", [1.0, 1.0], stream=shown).start()
    log = p.wrap(lines.append, counts=lambda line: line.startswith("row"))
    log("header")
    log("row 1")
    assert lines == ["header", "row 1"] and p.done == 1
    assert "bench: 1/2" in shown.getvalue()


def test_demo_is_one_screen_in_numpy_shape_order(capsys):
    assert demo.main(["--small", "--repeat", "1", "--engine", "cpu"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for label, m, k, n, _phi, _opts in demo.CASES:
        m, k, n = m // 4, k // 4, n // 4
        row = [line for line in lines if line.startswith(label + " ")]
        assert len(row) == 1, label
        assert f"({m}, {k}) @ ({k}, {n})" in row[0]
    # the screen explains its columns and what the errors are measured against
    for word in ("moduli", "error", "exact", "u = 2^-53", "NumPy", "warm-up"):
        assert word in out, word
    # one screen (the engine line carries the reason an engine was picked, any length)
    assert len(lines) <= 24
    assert max(len(line) for line in lines if not line.startswith("engine:")) <= 100


def test_demo_error_is_in_roundings_of_the_terms():
    A = np.array([[1.0, 2.0], [3.0, -4.0]])
    B = np.array([[1.0, 0.0], [0.0, 1.0]])
    exact = A @ B
    assert demo.scaled_error(exact, exact, A, B) == 0.0
    C = exact.copy()
    C[1, 1] += 4.0 * 2.0 ** -53 * 3                         # 3 u of |A||B| = 4
    assert demo.scaled_error(C, exact, A, B) == pytest.approx(3.0)
