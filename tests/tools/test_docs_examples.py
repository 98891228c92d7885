"""Every code example of the README and the user guide runs, so none can drift.

The examples are the fenced blocks of ``README.md`` and ``docs/**/*.md``:

* a ``python`` block whose first line starts with ``>>>`` is a doctest: its output is
  compared (``...`` matches anything, whitespace is normalised);
* any other ``python`` block is run; the blocks of one page run in order in one
  namespace (a page reads like a notebook), after the page's :data:`SETUP` (the
  operands and the user's own code that the examples assume); a ``text`` block right
  after a ``python`` block (nothing but blank lines between) is what that block
  prints, compared the same way as a doctest's output;
* blocks that need a GPU (CuPy, ``dask_cuda``, ``engine="cuda"``) are skipped where no
  GPU is usable, and blocks that use Dask where it is not installed;
* ``bash`` blocks are not run (they install packages or take a GPU for minutes), but
  every ``python -m ozaki_backend ...`` command in them is parsed by the real command
  line, so an option that was renamed or removed fails here, and every ``scripts/...``
  file the guide names must exist.

``test_examples_type_check_strictly`` runs ``mypy --strict`` over the same examples
(each page one module: its setup, then its blocks; doctests as their source), against
the annotations of the package (``py.typed``).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import logging
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))

_AB = """\
import numpy as np
from numpy.typing import NDArray

rng = np.random.default_rng(0)
A: NDArray[np.float64] = rng.standard_normal((300, 200))
B: NDArray[np.float64] = rng.standard_normal((200, 100))


def existing_numpy_code() -> None:
    # the user's code, unchanged: products the scopes route (or leave native)
    C = A @ B
    np.dot(A, B)
    np.matmul(A.T, C)
"""

#: What the examples of a page take as given (typed: the mypy check reads it too).
SETUP = {
    "README.md": _AB,
    "docs/index.md": _AB,
    "docs/limitations.md": "import numpy as np\n\nC = np.arange(16.0).reshape(4, 4)\n",
    "docs/reproducibility.md": "import ozaki_backend\n\nm, n, k = 512, 384, 256\n",
    "docs/precision.md": "import ozaki_backend\n",
}

#: Pages whose examples are being rewritten elsewhere: their failures are reported as
#: skips with the reason until the rewrite lands (see the changelog).
PENDING: dict[str, str] = {}

_NEEDS_GPU = ("import cupy", "dask_cuda", 'engine="cuda"', "engine='cuda'")
_NEEDS_DASK = ("dask", "distributed")
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    page: str
    line: int          # of the opening fence
    info: str
    code: str
    output: str | None = field(default=None)   # the text block printed by this one

    @property
    def is_doctest(self) -> bool:
        return self.code.lstrip().startswith(">>>")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                    re.S | re.M)


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page``, a ``text`` block right after a ``python`` one
    attached to it as its output."""
    text = (REPO / page).read_text(encoding="utf-8")
    found: list[tuple[Block, int, int]] = []
    for m in _FENCE.finditer(text):
        code = textwrap.dedent(m["code"]) if m["indent"] else m["code"]
        b = Block(page, text.count("\n", 0, m.start()) + 1, m["info"].strip(), code)
        found.append((b, m.start(), m.end()))
    out = []
    for i, (b, start, _end) in enumerate(found):
        if b.info == "text" and i and found[i - 1][0].info == "python" \
                and not text[found[i - 1][2]:start].strip():
            found[i - 1][0].output = b.code
            continue
        out.append(b)
    return out


def _python_blocks(page: str) -> list[Block]:
    return [b for b in blocks(page) if b.info == "python"]


def _gpu_usable() -> bool:
    from ozaki_backend.cuda import availability

    return availability()[0]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _skip_reason(b: Block) -> str | None:
    if any(s in b.code for s in _NEEDS_GPU) and not _gpu_usable():
        return "needs a GPU"
    if any(re.search(rf"\b(import|from) {m}\b", b.code) for m in _NEEDS_DASK) and not (
            _has("dask") and _has("distributed")):
        return "needs dask and distributed"
    return None


def _run_block(b: Block, ns: dict) -> str | None:
    """Run one block in ``ns``; returns a failure message or None."""
    if b.is_doctest:
        test = doctest.DocTestParser().get_doctest(b.code, ns, b.where, b.page, b.line)
        report = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=_FLAGS)
        runner.run(test, out=report.write, clear_globs=False)
        return report.getvalue() or None if runner.failures else None
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(b.code, b.where, "exec"), ns)
    except Exception as exc:   # noqa: BLE001 - any failure of an example is reported
        import traceback

        return f"{b.where} raised:\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    if b.output is not None and not doctest.OutputChecker().check_output(
            b.output, printed.getvalue(), _FLAGS):
        return (f"{b.where}: printed output differs from the text block under it\n"
                f"--- documented\n{b.output}--- printed\n{printed.getvalue()}")
    return None


@contextlib.contextmanager
def _isolated(tmp_path):
    """Examples may configure logging, enable routing process-wide or write files:
    restore all of it afterwards."""
    import ozaki_backend as ob

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = logging.getLogger("ozaki_backend")
    our_level = ours.level
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield
    finally:
        os.chdir(cwd)
        ob.disable()
        ob.reset_stats()
        root.handlers[:] = handlers
        root.setLevel(level)
        ours.setLevel(our_level)


EXAMPLE_PAGES = [p for p in PAGES if _python_blocks(p)]


@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_examples_of_the_page_run(page, tmp_path):
    ns: dict = {"__name__": "__main__"}
    failures, skipped, ran = [], [], 0
    with _isolated(tmp_path):
        exec(compile(SETUP.get(page, ""), f"{page} (setup)", "exec"), ns)
        for b in _python_blocks(page):
            reason = _skip_reason(b)
            if reason:
                skipped.append(f"{b.where}: {reason}")
                continue
            ran += 1
            failure = _run_block(b, ns)
            if failure:
                failures.append(failure)
    if failures and page in PENDING:
        pytest.skip(f"{page}: {PENDING[page]}; failing now:\n" + "\n".join(failures))
    assert not failures, "\n\n".join(failures)
    if not ran:
        pytest.skip("; ".join(skipped))


def test_pending_pages_are_listed_for_a_reason():
    for page, reason in PENDING.items():
        assert page in EXAMPLE_PAGES and reason, page


def test_blocks_are_found_with_their_output():
    got = {(b.info, b.output is not None) for b in blocks("docs/dask.md")}
    assert ("python", True) in got     # the cluster example prints its text block
    assert [b for b in _python_blocks("docs/index.md") if b.is_doctest]


# ------------------------------------------------------------------- shell commands

def _commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every ``python -m ozaki_backend`` command in a bash block
    (commands chained with ``&&``, ``;`` or a pipe count one by one; quotes respected)."""
    found = []
    for page in PAGES:
        for b in blocks(page):
            if b.info not in ("bash", "sh", "console"):
                continue
            code = re.sub(r"\$\([^)]*\)", "X", b.code.replace("\\\n", " "))   # $(...)
            lex = shlex.shlex(code, posix=True,
                              punctuation_chars=";&|\n")   # a newline ends a command
            lex.whitespace, lex.whitespace_split, lex.commenters = " \t\r", True, "#"
            command: list[str] = []
            for token in [*lex, ";"]:
                if token == "" or not set(token) <= set(";&|\n"):   # '' is a word
                    command.append(token)
                    continue
                while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", command[0]):
                    command.pop(0)             # VAR=value before the command
                if command[:3] in (["python", "-m", "ozaki_backend"],
                                   ["python3", "-m", "ozaki_backend"]):
                    found.append((b.where, command[3:]))
                command = []
    return found


def _parse_only(argv: list[str]) -> None:
    """Parse ``argv`` as ``python -m ozaki_backend`` would, without running anything."""
    from ozaki_backend import __main__ as cli

    if argv[:1] == ["run"]:
        from ozaki_backend.dispatch.cli import split_run_argv

        argv = ["run"] + split_run_argv(argv[1:])[0]
    if argv[:1] == ["bench"] and "--host" in argv:
        from ozaki_backend import bench_host

        bench_host._parse([a for a in argv[1:] if a != "--host"])
        return
    cli.build_parser().parse_args(argv)


def test_every_documented_command_line_parses(capsys):
    commands = _commands()
    assert len(commands) >= 5, commands
    bad = []
    for where, argv in commands:
        try:
            _parse_only(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                bad.append(f"{where}: python -m ozaki_backend {shlex.join(argv)}\n"
                           f"    {capsys.readouterr().err.strip()}")
    capsys.readouterr()
    assert not bad, "\n".join(bad)


def test_every_script_the_docs_name_exists():
    missing = []
    for page in PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        for m in re.finditer(r"\bscripts/[\w./-]+\.(?:py|sh)\b", text):
            if not (REPO / m.group(0)).is_file():
                missing.append(f"{page}: {m.group(0)}")
    assert not missing, "\n".join(missing)


#: The Development section of the site (mkdocs.yml): the pages for people working on
#: the package, the only ones that may name the repository's tools.
DEVELOPMENT_PAGES = {"docs/development.md", "docs/architecture.md", "docs/internals.md",
                     "docs/gpu-kernels.md",
                     "docs/benchmark-log.md", "docs/data/README.md"}
#: Guide pages being rewritten elsewhere, with the tools they still name.
TOOLS_PENDING: dict[str, str] = {}


def test_development_pages_are_the_nav_section():
    yaml = pytest.importorskip("yaml")
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    (section,) = [e["Development"] for e in nav if isinstance(e, dict) and "Development" in e]
    assert {f"docs/{next(iter(e.values()))}" for e in section} == DEVELOPMENT_PAGES


def test_the_user_guide_names_no_development_tools():
    """``scripts/`` and ``.ci/`` belong to the Development pages; a user's page says what
    to run with the package's own command line instead."""
    named = {}
    for page in PAGES:
        if page == "README.md" or page in DEVELOPMENT_PAGES or page in TOOLS_PENDING:
            continue
        text = (REPO / page).read_text(encoding="utf-8")
        found = re.findall(r"(?<![\w/.])(?:scripts/|\.ci/)[\w./-]*", text)
        if found:
            named[page] = found
    assert not named, named


# ---------------------------------------------------------------------------- typing

MYPY_INI = """\
[mypy]
strict = True
warn_unreachable = True
# Not annotated yet: the testing helpers and the Dask integration (the public API of the
# package itself, ozaki_backend.*, is; calls into these two are not checked).
untyped_calls_exclude = ozaki_backend.testing,ozaki_backend.dask
# The package is checked as its users see it: its annotations, not its insides.
[mypy-ozaki_backend,ozaki_backend.*]
follow_imports = silent
# Libraries without type information that examples use.
[mypy-cupy.*,dask.*,distributed.*,dask_cuda.*,scipy.*]
ignore_missing_imports = True
follow_imports = skip
"""


#: The public API's types as a user's type checker sees them (checked, never run).
API_TYPES = """\
from typing import Any, assert_type

import numpy as np
from numpy.typing import NDArray

import ozaki_backend as ob

A: NDArray[np.float64] = np.ones((4, 3))
B: NDArray[np.float64] = np.ones((3, 2))
assert_type(ob.matmul(A, B), NDArray[Any])
assert_type(ob.matmul(A, B, bits=34, mode="fast", engine="cpu", out=None), NDArray[Any])
C, bound = ob.matmul(A, B, return_bound=True)
assert_type(bound, NDArray[Any])
p = ob.plan(4, 2, 3, moduli=15)
assert_type(p, ob.Plan)
assert_type(p.moduli_for(A, B), int)
assert_type(p.resolve(A, B), ob.Plan)
assert_type(p.n_moduli, int)
assert_type(p.key(), tuple[object, ...])
assert_type(ob.Plan(4, 2, 3).bits, int)
with ob.enabled(engine="cpu"):
    A @ B
with ob.disabled():
    A @ B
ob.enable(engine="cpu")
ob.disable()
print(ob.stats(), ob.info(), ob.explain(A, B))
ob.reset_stats()
assert_type(ob.__version__, str)
assert issubclass(ob.NativeFallbackWarning, ob.FallbackWarning)
"""


def _module_of(page: str) -> str:
    parts = [SETUP.get(page, "")]
    for b in _python_blocks(page):
        code = doctest.script_from_examples(b.code) if b.is_doctest else b.code
        parts.append(f"# --- {b.where}\n{code}")
    return "\n".join(parts)


def test_examples_type_check_strictly(tmp_path):
    pytest.importorskip("mypy")
    files = []
    for page in EXAMPLE_PAGES:
        name = re.sub(r"\W", "_", page.removesuffix(".md")).lower()
        path = tmp_path / f"example_{name}.py"
        path.write_text(_module_of(page), encoding="utf-8")
        files.append(str(path))
    (tmp_path / "api_types.py").write_text(API_TYPES, encoding="utf-8")
    files.append(str(tmp_path / "api_types.py"))
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    env = dict(os.environ, MYPYPATH=str(REPO))
    res = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                          str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path / "cache"),
                          "--no-error-summary", "--hide-error-context", *files],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
