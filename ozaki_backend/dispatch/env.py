"""Environment opt-in: ``OZAKI_BACKEND=1`` and the ``OZAKI_BACKEND_<KEY>`` variables.

How an unmodified script gets routed
------------------------------------
``pip install`` places three files at the top level of site-packages (``setup.py``
writes the two one-line files and copies ``_start.py`` from this folder):

* ``ozaki_backend.pth``: one ``import os; ...`` line that ``site`` runs at every
  interpreter start (Python <= 3.14). It reads ``OZAKI_BACKEND`` and, only when that is
  set to a true value, imports ``_ozaki_backend_start``; unset, nothing is imported.
* ``ozaki_backend.start``: the same hook as a PEP 829 entry point for Python 3.15+
  (where it replaces the ``.pth`` import line).
* ``_ozaki_backend_start.py`` (source: ``_start.py`` here): waits for ``import numpy``
  with a one-shot import hook and then calls :func:`activate_from_environ`. NumPy is
  not imported early, so a script can still set ``OMP_NUM_THREADS`` before it does.

``python -S`` skips ``.pth`` files (and so this hook); ``python -I`` does not. Child
processes inherit the variables and are routed too. ``python -m ozaki_backend run``
does the same activation without relying on the ``.pth`` file.

Variables (``docs/configuration.md`` has the table): ``OZAKI_BACKEND`` (on/off),
one ``OZAKI_BACKEND_<KEY>`` per config key (``ENGINE``, ``PRECISION``, ``BITS``,
``MODULI``, ``MODE``, ``SCHEME``, ``RESIDUAL``, ``MIN_SIZE``; an empty value means
unset), and ``OZAKI_BACKEND_LOG``, ``OZAKI_BACKEND_STATS``, ``OZAKI_BACKEND_HOST_GFLOPS``.

A typo never stops the program: :func:`problems` lists unknown ``OZAKI_BACKEND_*``
names (with a "did you mean" from :mod:`difflib`) and invalid values (the variable
named, values compared case-insensitively), and :func:`report_problems` warns each
once with ``ConfigurationWarning``; an invalid switch or config value leaves the
backend off, an invalid ``_LOG`` / ``_STATS`` / ``_HOST_GFLOPS`` is ignored.
``import ozaki_backend`` runs :func:`check_at_import` when any such variable is set.

Above the library's layers: it validates with ``config``, enables with ``scopes`` and
prints with ``observe``; ``_start``, ``cli`` and the package's ``__init__`` call it.
"""

from __future__ import annotations

import atexit
import difflib
import logging
import math
import os
import sys

from .. import _warnings
from . import config as _config
from .config import ENV, EXTRA_VARS, PREFIX, VARS, known_variables
from .observe import format_stats
from .scopes import enable

__all__ = ["ENV", "PREFIX", "VARS", "EXTRA_VARS", "requested", "switch", "problems",
           "config_from_environ", "setup_logging", "activate_from_environ", "environ_for"]

_FALSE = ("", "0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")
_TRUTH = "1/0, true/false, yes/no or on/off (any case)"
#: Config keys whose value is one of a few words: compared case-insensitively.
_WORD_KEYS = ("engine", "precision", "mode", "scheme", "emulation")


def switch(environ=None) -> tuple[bool, str | None]:
    """``(on, problem)`` for ``OZAKI_BACKEND``: on for 1/true/yes/on (any case), off
    for unset, empty, 0/false/no/off; any other value is off with a problem message."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV)
    value = (raw or "").strip().lower()
    if value in _TRUE:
        return True, None
    if value in _FALSE:
        return False, None
    return False, (f"{ENV}={raw!r} is not a valid switch (use {_TRUTH}); the backend "
                   "stays off")


def requested(environ=None) -> bool:
    """True when ``OZAKI_BACKEND`` is set to 1/true/yes/on (any case)."""
    return switch(environ)[0]


def _parse(key: str, raw: str):
    """The value of config key ``key`` from its variable's text ``raw`` (stripped).

    Raises
    ------
    ValueError
        Saying what the value must be (the caller names the variable).
    """
    if key in ("bits", "moduli"):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{key} must be an integer") from None
    if key == "min_size":
        if raw.lower() == _config.AUTO:
            return None
        try:
            return int(raw)
        except ValueError:
            try:
                v = float(raw)
            except ValueError:
                raise ValueError("min_size must be an integer or 'auto'") from None
            if not v.is_integer():
                raise ValueError("min_size must be an integer or 'auto'")
            return int(v)
    if key == "residual":
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"residual must be {_TRUTH}")
    if key in _WORD_KEYS:
        return raw.lower()
    return raw


def config_from_environ(environ=None) -> dict:
    """The config keys given by ``OZAKI_BACKEND_<KEY>`` variables (empty = unset).

    Raises
    ------
    ValueError
        Naming the variable and its value, for a value the scope would reject.
    """
    env = os.environ if environ is None else environ
    cfg = {}
    for key, var in VARS.items():
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        try:
            cfg[key] = _parse(key, raw.strip())
        except ValueError as exc:
            raise ValueError(f"{var}={raw!r}: {exc}") from None
    try:
        _config.Config.build(None, cfg, "OZAKI_BACKEND")
    except (TypeError, ValueError) as exc:
        # Name the variable when one alone is invalid, else the combination.
        for key in cfg:
            try:
                if key != "residual":  # residual=1 is only valid with scheme=phase22
                    _config.Config.build(None, {key: cfg[key]}, "OZAKI_BACKEND")
            except (TypeError, ValueError) as one:
                raise ValueError(f"{VARS[key]}={env.get(VARS[key])!r}: {one}") from None
        given = ", ".join(f"{VARS[k]}={env.get(VARS[k])!r}" for k in cfg)
        raise ValueError(f"{exc} (from {given})") from None
    return cfg


def host_gflops_problem(raw) -> str | None:
    """Why ``OZAKI_BACKEND_HOST_GFLOPS=raw`` is invalid, or None (unset/empty is valid)."""
    if raw is None or not raw.strip():
        return None
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if math.isfinite(v) and v > 0:
        return None
    return (f"OZAKI_BACKEND_HOST_GFLOPS={raw!r} must be a positive number of GFLOP/s; "
            "the host rate is measured instead")


def _int_list(n):
    def check(raw):
        parts = raw.split(",")
        return len(parts) == n and all(p.strip().isdigit() and int(p) > 0 for p in parts)
    return check


#: The CUDA engine's tuning variables: variable -> (check of the stripped value, what
#: it must be). Read by the engine at use; checked here so that a typo is reported.
_CUDA_CHECKS = {
    "OZAKI_BACKEND_CUDA_GEMM": (lambda v: v in ("batched", "loop"), "batched or loop"),
    "OZAKI_BACKEND_CUDA_PATH": (lambda v: v in ("cublas", "wgmma", "wgmma:128", "wgmma:256"),
                                "cublas, wgmma, wgmma:128 or wgmma:256"),
    "OZAKI_BACKEND_CUDA_TILE": (_int_list(2), "two positive integers 'tm,tn'"),
    "OZAKI_BACKEND_CUDA_COLBLOCK": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_ROWBLOCK": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_SIDE_SMS": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_OVERLAP_BLOCK": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_GRAPHS": (lambda v: v in ("0", "1"), "0 or 1"),
    "OZAKI_BACKEND_CUDA_GRAPH_MAX": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_BK": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_CUDA_CLUSTER": (str.isdigit, "an integer >= 0"),
    "OZAKI_BACKEND_PHASE22_ROWS": (str.isdigit, "an integer >= 0"),
}


def problems(environ=None) -> list:
    """What is wrong with the ``OZAKI_BACKEND*`` variables: a list of ``(variable,
    message)`` for unknown names (with a "did you mean" when one is close) and invalid
    values, each message naming the variable and what is done instead."""
    env = os.environ if environ is None else environ
    known = sorted(known_variables())
    out = []
    for name in sorted(k for k in env if k.startswith(ENV)):
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else \
            f"; known variables: {', '.join(known)}"
        out.append((name, f"unknown variable {name} ignored{hint}"))
    bad = switch(env)[1]
    if bad:
        out.append((ENV, bad))
    try:
        config_from_environ(env)
    except ValueError as exc:
        out.append(("config", f"{exc}; the backend stays off (NumPy computes everything)"))
    level = (env.get("OZAKI_BACKEND_LOG") or "").strip()
    if level and not isinstance(logging.getLevelName(level.upper()), int):
        out.append(("OZAKI_BACKEND_LOG", f"OZAKI_BACKEND_LOG={level!r} is not a logging "
                    "level (debug, info, warning, error); logging is not set up"))
    raw = env.get("OZAKI_BACKEND_STATS")
    if raw is not None and raw.strip().lower() not in _TRUE + _FALSE:
        out.append(("OZAKI_BACKEND_STATS", f"OZAKI_BACKEND_STATS={raw!r} must be {_TRUTH}; "
                    "no exit report"))
    gflops = host_gflops_problem(env.get("OZAKI_BACKEND_HOST_GFLOPS"))
    if gflops:
        out.append(("OZAKI_BACKEND_HOST_GFLOPS", gflops))
    for name, (ok, what) in _CUDA_CHECKS.items():
        raw = env.get(name)
        if raw is not None and raw.strip() and not ok(raw.strip()):
            out.append((name, f"{name}={raw!r} must be {what}; the CUDA engine will fail "
                        "on it (products fall back to NumPy)"))
    return out


_reported = False


def report_problems(environ=None) -> list:
    """Warn (:class:`~ozaki_backend.ConfigurationWarning`) once per problem of
    :func:`problems`; for ``os.environ`` only once per process. Returns the problems."""
    global _reported
    found = problems(environ)
    if environ is None:
        if _reported:
            return found
        _reported = True
    for _name, message in found:
        _warnings.warn_config(message)
    return found


def check_at_import() -> None:
    """What ``import ozaki_backend`` does when some ``OZAKI_BACKEND*`` variable is set:
    report the variables' problems and set up ``OZAKI_BACKEND_LOG``."""
    report_problems()
    try:
        setup_logging()
    except ValueError:
        pass  # reported above


def setup_logging(level: str | None = None) -> None:
    """Attach a stderr handler to the ``ozaki_backend`` logger at ``level``."""
    level = (level if level is not None else os.environ.get("OZAKI_BACKEND_LOG", "")).strip()
    if not level:
        return
    logger = logging.getLogger("ozaki_backend")
    num = logging.getLevelName(level.upper())
    if not isinstance(num, int):
        raise ValueError(f"OZAKI_BACKEND_LOG={level!r}: not a logging level")
    logger.setLevel(num)
    if not any(getattr(h, "_ozaki_backend", False) for h in logger.handlers):
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        h._ozaki_backend = True
        logger.addHandler(h)


_stats_registered = False


#: Who prints the exit report (None: the process itself); set by :func:`set_report_label`.
_report_label = None


def set_report_label(label) -> None:
    """Name this process in its exit report (``OZAKI_BACKEND_STATS=1``), e.g. a dask
    worker's address, so that the reports of many processes can be told apart; None
    removes the name."""
    global _report_label
    _report_label = None if label is None else str(label)


def exit_report() -> str:
    """The text :func:`print_stats_at_exit` prints: :func:`format_stats`, headed by the
    process's label and pid when :func:`set_report_label` gave one."""
    text = format_stats()
    if _report_label:
        text = f"[{_report_label}, pid {os.getpid()}]\n{text}"
    return text


def print_stats_at_exit() -> None:
    """Print :func:`exit_report` to stderr when the interpreter exits (registered once)."""
    global _stats_registered
    if _stats_registered:
        return
    _stats_registered = True

    def _print():
        try:
            sys.stderr.write(exit_report() + "\n")
        except Exception:  # interpreter shutting down: nothing useful to do
            pass

    atexit.register(_print)


def activate_from_environ(environ=None) -> bool:
    """Enable the backend process-wide if ``OZAKI_BACKEND`` asks for it.

    Reads the ``OZAKI_BACKEND_<KEY>`` variables, calls :func:`enable` with them (which
    installs the interception layer process-wide), sets up logging from
    ``OZAKI_BACKEND_LOG`` and the exit report from ``OZAKI_BACKEND_STATS``.

    Returns
    -------
    bool
        Whether the backend was enabled.

    Warns
    -----
    ConfigurationWarning
        For an unknown ``OZAKI_BACKEND_*`` variable (with a "did you mean") or an
        invalid value (the variable named); an invalid ``OZAKI_BACKEND`` or config
        variable leaves the backend off (NumPy computes everything), an invalid
        ``OZAKI_BACKEND_LOG`` / ``_STATS`` / ``_HOST_GFLOPS`` is ignored.
    """
    env = os.environ if environ is None else environ
    on, _ = switch(env)
    found = report_problems(environ)
    if not on:
        return False
    if any(name == "config" for name, _ in found):
        return False  # warned: an invalid variable leaves the backend off
    cfg = config_from_environ(env)
    try:
        setup_logging(env.get("OZAKI_BACKEND_LOG", ""))
    except ValueError:
        pass  # warned above
    enable(**cfg)
    if (env.get("OZAKI_BACKEND_STATS") or "").strip().lower() in _TRUE:
        print_stats_at_exit()
    logging.getLogger("ozaki_backend.dispatch").info(
        "enabled from the environment: %r", _config.current().config)
    return True


def environ_for(cfg: dict) -> dict:
    """The ``OZAKI_BACKEND*`` variables that reproduce ``cfg`` in a child process."""
    out = {ENV: "1"}
    for key, value in cfg.items():
        if value is None:
            out[VARS[key]] = _config.AUTO if key == "min_size" else ""
        elif isinstance(value, bool):
            out[VARS[key]] = "1" if value else "0"
        else:
            out[VARS[key]] = str(value)
    return out
