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

Above the library's layers: it validates with ``config``, enables with ``scopes`` and
prints with ``observe``; ``_start`` and ``cli`` call it.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

from . import config as _config
from .observe import format_stats
from .scopes import enable

ENV = "OZAKI_BACKEND"
PREFIX = "OZAKI_BACKEND_"
#: config key -> environment variable
VARS = {key: PREFIX + key.upper() for key in _config.CONFIG_KEYS}
#: Variables that are not config keys.
EXTRA_VARS = {
    "OZAKI_BACKEND_LOG": "level of the 'ozaki_backend' logger, with a stderr handler "
                         "(debug, info, warning, error)",
    "OZAKI_BACKEND_STATS": "1: print stats() to stderr when the process exits",
    "OZAKI_BACKEND_HOST_GFLOPS": "host float64 GEMM rate for the cost model (GFLOP/s) "
                                 "instead of measuring it",
    # Read by the CUDA engine (ozaki_backend/cuda/), listed so `info` knows them.
    "OZAKI_BACKEND_CUDA_GEMM": "CUDA engine: force 'batched' or 'loop' INT8 GEMM issue",
    "OZAKI_BACKEND_CUDA_TILE": "CUDA engine: force output tiles 'tm,tn'",
}
_FALSE = ("", "0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


def requested(environ=None) -> bool:
    """True when ``OZAKI_BACKEND`` is set to anything but empty/0/false/no/off."""
    env = os.environ if environ is None else environ
    return (env.get(ENV) or "").strip().lower() not in _FALSE


def _parse(key: str, raw: str):
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
        raise ValueError("residual must be 1/0, true/false, yes/no or on/off")
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


def print_stats_at_exit() -> None:
    """Print :func:`stats` to stderr when the interpreter exits (registered once)."""
    global _stats_registered
    if _stats_registered:
        return
    _stats_registered = True

    def _print():
        try:
            sys.stderr.write(format_stats() + "\n")
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

    Raises
    ------
    ValueError
        For an invalid variable (named in the message); nothing is enabled then.
    """
    env = os.environ if environ is None else environ
    if not requested(env):
        return False
    cfg = config_from_environ(env)
    setup_logging(env.get("OZAKI_BACKEND_LOG", ""))
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
