"""Scopes and configuration: ``enabled()``, ``disabled()``, ``enable()``, ``disable()``.

State model
-----------
The routing state of the running code is one :class:`contextvars.ContextVar` holding a
chain of scope nodes (``enabled`` flag, :class:`Config`, previous node). A context with
no node uses the *process default*, which :func:`enable` / :func:`disable` set.

* ``with enabled(...)`` / ``with disabled()`` push a node in the current context only,
  so threads and asyncio tasks are isolated; an exception inside a scope restores the
  previous state on the way out.
* Threads started with ``threading.Thread`` or executor pools begin with an empty
  context and therefore see the process default, not the scope of the thread that
  started them; ``asyncio`` tasks and ``asyncio.to_thread`` copy the context and see
  the scope (``loop.run_in_executor`` does not). Use :func:`enable` for a whole program.

Besides the per-context value, the process keeps a count of the enabled scope nodes
alive *anywhere* (plus ``enable()``'s default) and the smallest ``m*n*k`` any of them
may route (its *floor*). The C loop hook reads those two integers without the GIL, so a
process where nothing is enabled, or where a product is below every active floor,
never leaves C (see ``loophook.py``). A node stays counted until no context holds it
any more (an asyncio task created inside a scope keeps it); the count may briefly be
too high, never too low, which only costs a call into Python that then finds the
calling context not enabled.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from contextvars import ContextVar

from .. import _options

#: Numerical keys (handed to the engine, validated by ``_options.normalize``).
NUMERIC_KEYS = ("engine", "precision", "bits", "moduli", "mode", "scheme", "residual")
#: Every config key accepted by ``enabled()``, ``enable()`` and ``OZAKI_BACKEND_<KEY>``.
CONFIG_KEYS = NUMERIC_KEYS + ("min_size",)

#: ``min_size`` given as this (or None) means "use the cost model".
AUTO = "auto"

#: A floor no product reaches (also the C hook's "never route").
NEVER = 2**63 - 1


def _check_min_size(value):
    """``None`` for the cost model, else a non-negative int (validated, with the key named)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return None
    if isinstance(value, bool):
        raise TypeError(f"min_size must be a non-negative int or 'auto'; got {value!r}")
    try:
        import numbers

        if isinstance(value, numbers.Integral):
            v = int(value)
        elif isinstance(value, numbers.Real) and float(value).is_integer():
            v = int(value)  # 1e6 is a natural way to write a size
        else:
            raise TypeError
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"min_size must be a non-negative int or 'auto'; got {value!r}") from None
    if v < 0:
        raise ValueError(f"min_size must be >= 0 (0 routes every eligible product); got {v}")
    return v


class Config:
    """One validated routing configuration (immutable).

    Attributes
    ----------
    engine, precision, bits, moduli, mode, scheme, residual
        The numerical options, as for :func:`ozaki_backend.matmul`.
    min_size : int or None
        Smallest ``m*n*k`` routed; ``None`` means the cost model decides
        (``docs/configuration.md``).
    opts : dict
        The numerical options as ``_options.normalize`` returns them.
    """

    __slots__ = NUMERIC_KEYS + ("min_size", "opts")

    def __init__(self, opts: dict, min_size):
        for k in NUMERIC_KEYS:
            object.__setattr__(self, k, opts[k])
        object.__setattr__(self, "min_size", min_size)
        object.__setattr__(self, "opts", dict(opts))

    def __setattr__(self, name, value):
        raise AttributeError("Config is immutable; open a nested scope instead")

    @classmethod
    def build(cls, base: "Config | None", overrides: dict, who: str = "enabled") -> "Config":
        """Validate ``overrides`` on top of ``base`` (library defaults when None).

        Raises ``TypeError`` for an unknown key (named) and ``TypeError``/``ValueError``
        for a bad value (the option is named), so a bad scope fails at its ``with`` line.
        """
        unknown = [k for k in overrides if k not in CONFIG_KEYS]
        if unknown:
            raise TypeError(f"{who}() got an unexpected keyword argument {unknown[0]!r}; "
                            f"config keys are: {', '.join(CONFIG_KEYS)}")
        cur = dict(_options.DEFAULTS) if base is None else base.as_dict()
        if base is None:
            cur["min_size"] = None
        # precision, bits and moduli are alternative ways to pick the moduli count:
        # giving one replaces an inherited other instead of clashing with it.
        if any(k in overrides for k in ("precision", "bits", "moduli")):
            for k in ("bits", "moduli"):
                if k not in overrides:
                    cur[k] = None
        if overrides.get("scheme") == "phase22":
            for k in ("bits", "moduli"):
                if k not in overrides:
                    cur[k] = None
        if overrides.get("scheme") == "ozaki2" and "residual" not in overrides:
            cur["residual"] = False
        cur.update(overrides)
        opts = _options.normalize(**{k: cur[k] for k in NUMERIC_KEYS})
        return cls(opts, _check_min_size(cur["min_size"]))

    def as_dict(self) -> dict:
        """All config keys and their values."""
        return {k: getattr(self, k) for k in CONFIG_KEYS}

    def floor(self) -> int:
        """Smallest ``m*n*k`` this config may route now (``NEVER`` if none)."""
        from . import routing

        return int(routing.floor(self))

    def __eq__(self, other):
        return isinstance(other, Config) and self.as_dict() == other.as_dict()

    def __hash__(self):
        return hash(tuple(self.as_dict().items()))

    def __repr__(self):
        items = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Config({items})"


DEFAULT_CONFIG = Config.build(None, {})


class _Node:
    """One entry of a context's scope chain (or the process default).

    An enabled node counts as active for the C hook from its creation until it is
    garbage collected, not until its ``with`` block ends: contexts copied while the
    scope was open (``asyncio.create_task``, ``contextvars.copy_context``) still hold
    the node and must still be routed after the block has exited.
    """

    __slots__ = ("enabled", "config", "prev", "owner", "floor")

    def __init__(self, enabled, config, prev, owner):
        self.enabled = enabled
        self.config = config
        self.prev = prev
        self.owner = owner
        self.floor = None
        if enabled:
            self.floor = _activate(config)  # what __del__ removes again

    def __del__(self):
        if self.floor is not None:
            try:
                _deactivate(self.floor)
            except Exception:  # interpreter shutdown: module globals may be gone
                pass


_STATE: ContextVar = ContextVar("ozaki_backend_scope", default=None)

_process_default = _Node(False, DEFAULT_CONFIG, None, None)


def current():
    """The scope node in force in the calling context (process default if none).

    Returns an object with ``enabled`` (bool) and ``config`` (:class:`Config`).
    """
    node = _STATE.get()
    return _process_default if node is None else node


# --------------------------------------------------------------------------- activity
#: True while any scope is active anywhere in the process (or enable() is in force).
#: The module-level wrappers read it first so that, when nothing is enabled, they cost
#: one attribute lookup more than the function they wrap.
ANY_ACTIVE = False

_lock = threading.RLock()
_active_floors: Counter = Counter()   # floor -> number of live enabled nodes
_installed = False


def refresh_floors():
    """Recompute the floor of enable()'s default after the cost model changed.

    Scopes already open keep the floor they were counted with (their products are
    still decided by the current model in Python); scopes opened later use the new one.
    """
    global _process_default
    with _lock:
        if _process_default.enabled:
            _process_default = _Node(True, _process_default.config, None, None)


def _publish():
    """Push the activity summary to the module flag and to the C hook. Holds _lock."""
    global ANY_ACTIVE
    n = sum(_active_floors.values())
    floor = min(_active_floors) if n else NEVER
    ANY_ACTIVE = n > 0
    from . import loophook

    loophook.set_state(n, floor)


def _activate(config: Config) -> int:
    floor = config.floor()
    with _lock:
        _active_floors[floor] += 1
        _publish()
    return floor


def _deactivate(floor: int) -> None:
    with _lock:
        _active_floors[floor] -= 1
        if _active_floors[floor] <= 0:
            del _active_floors[floor]
        _publish()


def install():
    """Install the interception layer (once per process; later calls do nothing).

    Process-wide effects: replaces NumPy matmul's float64 inner loop (C hook, never
    undone), rebinds ``numpy.dot``, ``numpy.inner``, ``numpy.tensordot``,
    ``numpy.einsum``, ``numpy.linalg.multi_dot`` to wrappers, and patches
    ``scipy.linalg.blas.dgemm`` / ``get_blas_funcs("gemm")`` now or as soon as
    ``scipy.linalg`` is imported. Everything installed is inert outside a scope. The
    first ``enabled()`` / ``enable()`` calls this; call it yourself early (before
    starting threads that use ``np.matmul``) if you want the loop replaced at a
    moment of your choosing, as NumPy does not support replacing a loop while another
    thread runs it.
    """
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from . import loophook, patches

        loophook.install()
        patches.install()
        _installed = True


def installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return _installed


# --------------------------------------------------------------------------- scopes
class _Scope:
    """Context manager and decorator returned by :func:`enabled` / :func:`disabled`."""

    __slots__ = ("_enabled", "_config", "__weakref__")

    def __init__(self, enabled: bool, config: Config):
        self._enabled = enabled
        self._config = config

    @property
    def config(self) -> Config:
        """The configuration this scope applies."""
        return self._config

    def __enter__(self):
        if self._enabled:
            install()
        _STATE.set(_Node(self._enabled, self._config, _STATE.get(), self))
        return self

    def __exit__(self, exc_type, exc, tb):
        node = _STATE.get()
        if node is None or node.owner is not self:
            # Exiting a scope that is not the innermost one in this context (e.g. a
            # generator left open across scopes): refuse rather than corrupt the chain.
            raise RuntimeError("ozaki_backend scope exited out of order (it is not the "
                               "innermost active scope in this context)")
        _STATE.set(node.prev)  # the node stops counting once no context holds it
        return False

    def __call__(self, func):
        """Use the scope as a decorator: every call of ``func`` runs inside it.

        Works for plain and ``async def`` functions (the scope spans the awaited body).
        """
        import inspect

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                with self:
                    return await func(*args, **kwargs)

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper

    def __repr__(self):
        if not self._enabled:
            return "ozaki_backend.disabled()"
        return f"ozaki_backend.enabled({self._config!r})"


def enabled(**config) -> _Scope:
    """Route matrix products in the body through the backend.

    A context manager and a decorator. Nested scopes inherit the keys they do not set
    from the enclosing scope (or from the process default); ``precision``, ``bits`` and
    ``moduli`` are one choice, so setting one of them drops an inherited other.

    Parameters
    ----------
    engine : {"auto", "cpu", "cuda"}
        ``auto``: the GPU when CuPy and a device are usable, else the CPU reference.
    precision, bits, moduli, mode, scheme, residual
        As for :func:`ozaki_backend.matmul`.
    min_size : int or "auto"
        Smallest ``m*n*k`` routed; ``0`` routes every eligible product. ``"auto"``
        (default) lets the cost model decide: with the CUDA engine, route where the
        estimated transfer + GPU time beats the measured host BLAS; with
        ``engine="cpu"`` route every eligible product (you asked for the reference
        engine's results); with ``engine="auto"`` and no GPU, route nothing.

    Returns
    -------
    context manager / decorator

    Raises
    ------
    TypeError, ValueError
        At the call (the ``with`` line) for an unknown key or a bad value; the
        message names it.

    Notes
    -----
    The first enabled scope installs the interception layer process-wide
    (:func:`install`). The scope itself only affects the current thread / asyncio
    task; see the module docstring for how new threads behave.
    """
    return _Scope(True, Config.build(current().config, config, "enabled"))


def disabled() -> _Scope:
    """Run the body natively even inside an enabled scope or after :func:`enable`.

    Context manager and decorator; affects the current thread / asyncio task only.
    """
    return _Scope(False, current().config)


def enable(**config) -> None:
    """Enable routing process-wide (the default for every context without a scope).

    Takes the same keys as :func:`enabled`, applied on top of the library defaults
    (not on top of an earlier ``enable``). Threads that start later see it too.
    Installs the interception layer (:func:`install`). Scopes still override it.
    """
    global _process_default
    cfg = Config.build(None, config, "enable")
    install()
    with _lock:
        _process_default = _Node(True, cfg, None, None)


def disable() -> None:
    """Turn the process-wide default off again (scopes are not affected).

    The default configuration returns to the library defaults, so a later
    ``enabled()`` does not inherit what an earlier ``enable(...)`` set.
    """
    global _process_default
    with _lock:
        _process_default = _Node(False, DEFAULT_CONFIG, None, None)
