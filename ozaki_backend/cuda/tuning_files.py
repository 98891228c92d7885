"""Where the CUDA engine's GEMM tuning tables live (no CuPy here: ``tune`` and the tests
use it on any machine).

Two files: the table shipped with the package (``_data/gemm_tuning.json``) and the
user's, which ``python -m ozaki_backend tune`` writes by default
(``$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json``, ``~/.cache`` when unset). The
engine reads both; a device in the user's table replaces the package's entry for it.
"""

from __future__ import annotations

import json
import os
from importlib import resources

TABLE_FILE = "_data/gemm_tuning.json"


def table_path():
    """The package's tuning table (a :mod:`importlib.resources` traversable)."""
    return resources.files("ozaki_backend").joinpath(TABLE_FILE)


def user_table_path() -> str:
    """The user's tuning table, written by ``python -m ozaki_backend tune``:
    ``$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json`` (``~/.cache`` when unset). Its
    devices take precedence over the package's table."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ozaki_backend", "gemm_tuning.json")


def table_text() -> str:
    """The table the engine uses, as JSON text: the package's, with the user's devices
    on top ("" when neither file exists)."""
    tables = []
    for path in (table_path(), user_table_path()):
        try:
            text = path.read_text() if hasattr(path, "read_text") else open(path).read()
            tables.append(json.loads(text))
        except (FileNotFoundError, ValueError):
            continue
    if not tables:
        return ""
    merged = {"devices": {}}
    for t in tables:
        merged["devices"].update(t.get("devices", {}))
    return json.dumps(merged)
