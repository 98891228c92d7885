"""Validation of the user-facing options shared by ``matmul``, ``plan`` and the scopes.

One place decides what a valid option is, so that ``matmul``, ``plan``,
``enabled(...)`` and the ``OZAKI_BACKEND_*`` environment variables reject the same
things with the same messages.
"""

from __future__ import annotations

import os
from functools import lru_cache

PRECISIONS = ("fp64",)
MODES = ("fast", "accurate")
SCHEMES = ("ozaki2", "phase22")
ENGINES = ("auto", "cpu", "cuda")
#: ``performant``: on the CUDA engine, products this GPU's native DGEMM runs faster are
#: computed natively (and escalations stop at native as soon as it is cheaper);
#: ``eager``: always emulate (the CPU engine always does).
EMULATIONS = ("performant", "eager")

# Default values of the numerical options (what ``matmul`` uses when not told).
DEFAULTS = {
    "precision": "fp64",
    "bits": None,
    "moduli": None,
    "mode": "accurate",
    "scheme": "ozaki2",
    "engine": "auto",
    "residual": False,
    "emulation": None,           # OZAKI_BACKEND_EMULATION, else "performant"
}


def _choice(name, value, choices):
    # One rule for case everywhere (arguments, scopes, environment): "CPU" is "cpu".
    if isinstance(value, str):
        value = value.strip().lower()
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _optional_int(name, value, lo, hi):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"{name} must be an int or None; got {type(value).__name__}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {value}")
    return value


def parse_workspace(value):
    """The ``workspace=`` option (``OZAKI_BACKEND_WORKSPACE``): bytes as an int, or a
    string such as ``"16GiB"``, ``"12GB"``, ``"512MiB"``; None (or ``""``) for the
    default budget (``docs/configuration.md``)."""
    from .spec.tiling import parse_bytes

    return parse_bytes(value, "workspace")


def normalize(precision="fp64", bits=None, moduli=None, mode="accurate",
              scheme="ozaki2", engine="auto", residual=False, workspace=None,
              emulation=None):
    """Validate the numerical options; return them as a dict (a new one each call).

    ``workspace`` (a device-memory budget, :func:`parse_workspace`) changes no bit of
    any result; it is in the dict only when given. ``emulation`` (:data:`EMULATIONS`;
    None: ``OZAKI_BACKEND_EMULATION``, else ``"performant"``) decides whether the CUDA
    engine may run native DGEMM where it is faster.

    Raises
    ------
    ValueError
        For an unknown choice or an out-of-range count, naming the option.
    TypeError
        For a value of the wrong type.
    """
    args = (precision, bits, moduli, mode, scheme, engine, residual, workspace, emulation)
    env = os.environ.get("OZAKI_BACKEND_EMULATION", "") if emulation is None else None
    # Validated once per distinct set of values: every explicit matmul normalizes its
    # options, 10-20 us of Python that a device product computed by cuBLAS (2.4 ms at
    # 4096^3) pays in full. Keyed by type too (True is not 1); errors are not cached.
    try:
        key = tuple((type(v), v) for v in args) + (env,)
        hash(key)
    except TypeError:                    # an unhashable value: validated (and refused) here
        return _normalize(*args)
    return dict(_normalized(key))


@lru_cache(maxsize=256)
def _normalized(key):
    return _normalize(*(v for _, v in key[:-1]))


def _normalize(precision, bits, moduli, mode, scheme, engine, residual, workspace,
               emulation):
    from .spec.moduli import MAX_MODULI, MIN_MODULI

    out = {
        "precision": _choice("precision", precision, PRECISIONS),
        "bits": _optional_int("bits", bits, 1, 72),
        "moduli": _optional_int("moduli", moduli, MIN_MODULI, MAX_MODULI),
        "mode": _choice("mode", mode, MODES),
        "scheme": _choice("scheme", scheme, SCHEMES),
        "engine": _choice("engine", engine, ENGINES),
        # None: OZAKI_BACKEND_EMULATION (empty means unset), else "performant"
        "emulation": _choice("emulation", emulation if emulation is not None else
                             (os.environ.get("OZAKI_BACKEND_EMULATION", "").strip()
                              or "performant"), EMULATIONS),
    }
    if not isinstance(residual, bool):
        raise TypeError(f"residual must be a bool; got {type(residual).__name__}")
    out["residual"] = residual
    workspace = parse_workspace(workspace)
    if workspace is not None:
        out["workspace"] = workspace
    if out["bits"] is not None and out["moduli"] is not None:
        raise ValueError("give at most one of bits= and moduli=")
    if out["scheme"] == "phase22" and (out["bits"] is not None or out["moduli"] is not None):
        raise ValueError("scheme='phase22' has a fixed prime set: bits= and moduli= do not apply")
    if residual and out["scheme"] != "phase22":
        raise ValueError("residual=True applies to scheme='phase22' only")
    return out
