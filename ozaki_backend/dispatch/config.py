"""Configuration state: :class:`Config`, the per-context scope chain, the process
default, and the activity summary the C loop hook reads.

Pure state, below routing and installation: this module imports ``_options`` (value
validation), ``costmodel`` (the floor of a config) and the C extension ``_loophook``
(to publish the activity summary), and nothing that installs, routes or observes. The
public ``enabled()`` / ``disabled()`` / ``enable()`` / ``disable()``, which install the
interception layer on first use, live above it in ``scopes``.

State model
-----------
The routing state of the running code is one :class:`contextvars.ContextVar` holding a
chain of scope nodes (``enabled`` flag, :class:`Config`, previous node). A context with
no node uses the *process default*, which :func:`set_default` sets (for ``enable()`` /
``disable()``).

* :func:`push` / :func:`pop` (``with enabled(...)`` / ``with disabled()``) add a node
  in the current context only, so threads and asyncio tasks are isolated; an exception
  inside a scope restores the previous state on the way out.
* Threads started with ``threading.Thread`` or executor pools begin with an empty
  context and therefore see the process default, not the scope of the thread that
  started them; ``asyncio`` tasks and ``asyncio.to_thread`` copy the context and see
  the scope (``loop.run_in_executor`` does not). Use ``enable()`` for a whole program.

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

import threading
from collections import Counter
from contextvars import ContextVar

from .. import _options
from . import costmodel
from .costmodel import NEVER

try:
    # The C extension itself (a leaf), not loophook.py: publishing the activity
    # summary must not pull in the routing layers above this one.
    from . import _loophook as _c_hook
except ImportError:  # not built: `@` is not intercepted (loophook.install() warns)
    _c_hook = None

#: Numerical keys (handed to the engine, validated by ``_options.normalize``).
NUMERIC_KEYS = ("engine", "precision", "bits", "moduli", "mode", "scheme", "residual",
                "emulation")
#: Every config key accepted by ``enabled()``, ``enable()`` and ``OZAKI_BACKEND_<KEY>``.
CONFIG_KEYS = NUMERIC_KEYS + ("min_size", "workspace")

#: ``min_size`` given as this (or None) means "use the cost model".
AUTO = "auto"

# --------------------------------------------------------------------------- variables
#: The on/off switch of the environment opt-in (``dispatch/env.py``).
ENV = "OZAKI_BACKEND"
PREFIX = "OZAKI_BACKEND_"
#: config key -> environment variable
VARS = {key: PREFIX + key.upper() for key in CONFIG_KEYS}
#: Variables that are not config keys, with what they do.
EXTRA_VARS = {
    "OZAKI_BACKEND_LOG": "level of the 'ozaki_backend' logger, with a stderr handler "
                         "(debug, info, warning, error)",
    "OZAKI_BACKEND_STATS": "1: print stats() to stderr when the process exits",
    "OZAKI_BACKEND_CUPY": "0: leave CuPy's float64/complex128 GEMMs to cuBLAS inside "
                          "scopes (they are routed by default: docs/gpu-arrays.md)",
    "OZAKI_BACKEND_HOST_GFLOPS": "host float64 GEMM rate for the cost model (GFLOP/s, "
                                 "> 0) instead of the rate table's (or the estimate "
                                 "from the CPU count)",
    # Read by the CUDA engine (ozaki_backend/cuda/) and its tools.
    "OZAKI_BACKEND_CUDA_GEMM": "CUDA engine: force 'batched' or 'loop' INT8 GEMM issue",
    "OZAKI_BACKEND_CUDA_TILE": "CUDA engine: force output tiles 'tm,tn'",
    "OZAKI_BACKEND_CUDA_PATH": "CUDA engine: force the GEMM path (tune/bench set it)",
    "OZAKI_BACKEND_CUDA_COLBLOCK": "CUDA engine: column block of the modular GEMM",
    "OZAKI_BACKEND_CUDA_ROWBLOCK": "CUDA engine: row block of the modular GEMM",
    "OZAKI_BACKEND_CUDA_SIDE_SMS": "CUDA engine: SMs the INT8 GEMMs leave to the residue "
                                   "and CRT passes beside them (0: no overlap)",
    "OZAKI_BACKEND_CUDA_OVERLAP_BLOCK": "CUDA engine: output block of the overlapped "
                                        "schedule (0: no overlap)",
    "OZAKI_BACKEND_CUDA_GRAPHS": "CUDA engine: 0 turns off the replay of the prepare "
                                 "stage as a CUDA graph",
    "OZAKI_BACKEND_CUDA_GRAPH_MAX": "CUDA engine: largest operands (m k + k n elements) "
                                    "whose prepare stage is replayed as a CUDA graph",
    "OZAKI_BACKEND_CUDA_BK": "CUDA engine: k tile of the fused kernel",
    "OZAKI_BACKEND_CUDA_CLUSTER": "CUDA engine: cluster size of the fused kernel",
    "OZAKI_BACKEND_PHASE22_ROWS": "CUDA engine: row block of the phase22 scheme",
    "OZAKI_BACKEND_CUDA_MODPROD": "CUDA engine: the fused product kernel's variant",
    "OZAKI_BACKEND_CUDA_OUT_OF_CORE": "CUDA engine: 1 forces the out-of-core path for "
                                      "NumPy operands",
    "OZAKI_BACKEND_RATES": "the cost model's rate table to read (and tune to write) "
                           "instead of the user cache's and the package's",
}


def known_variables() -> set:
    """Every ``OZAKI_BACKEND*`` environment variable the package reads."""
    return {ENV, *VARS.values(), *EXTRA_VARS}


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

    __slots__ = NUMERIC_KEYS + ("min_size", "workspace", "opts", "key")

    def __init__(self, opts: dict, min_size):
        for k in NUMERIC_KEYS:
            object.__setattr__(self, k, opts[k])
        object.__setattr__(self, "min_size", min_size)
        # The device workspace budget travels in opts (only when set) to the engine.
        object.__setattr__(self, "workspace", opts.get("workspace"))
        object.__setattr__(self, "opts", dict(opts))
        # Every config key and its value, made once: equal configs (a scope entered
        # again builds a new one) share routing's memo of decisions by it.
        key = tuple(self.as_dict().items())
        try:
            hash(key)
        except TypeError:
            key = None
        object.__setattr__(self, "key", key)

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
            cur["workspace"] = None
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
        opts = _options.normalize(**{k: cur[k] for k in NUMERIC_KEYS},
                                  workspace=cur["workspace"])
        return cls(opts, _check_min_size(cur["min_size"]))

    def as_dict(self) -> dict:
        """All config keys and their values."""
        return {k: getattr(self, k) for k in CONFIG_KEYS}

    def floor(self) -> int:
        """Smallest ``m*n*k`` this config may route now (``NEVER`` if none)."""
        return int(costmodel.floor(self))

    def __eq__(self, other):
        return isinstance(other, Config) and self.as_dict() == other.as_dict()

    def __hash__(self):
        return hash(self.key if self.key is not None else tuple(self.as_dict().items()))

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

    Returns
    -------
    node
        An object with ``enabled`` (bool) and ``config`` (:class:`Config`).
    """
    node = _STATE.get()
    return _process_default if node is None else node


def has_scope() -> bool:
    """Whether the calling context has a scope of its own (else the default applies)."""
    return _STATE.get() is not None


def push(enabled: bool, config: Config, owner) -> None:
    """Open a scope in the calling context: a node on top of its chain.

    Parameters
    ----------
    enabled : bool
        Route (True) or run natively (False) inside it.
    config : Config
    owner : object
        The scope object; :func:`pop` only removes a node pushed by the same owner.
    """
    _STATE.set(_Node(enabled, config, _STATE.get(), owner))


def pop(owner) -> bool:
    """Close the calling context's innermost scope if ``owner`` opened it.

    Returns
    -------
    bool
        False (and nothing changed) when the innermost node has another owner, e.g.
        a generator left open across scopes.
    """
    node = _STATE.get()
    if node is None or node.owner is not owner:
        return False
    _STATE.set(node.prev)  # the node stops counting once no context holds it
    return True


def set_default(enabled: bool, config: Config) -> None:
    """Replace the process default (the state of every context without a scope)."""
    global _process_default
    with _lock:
        _process_default = _Node(enabled, config, None, None)


# --------------------------------------------------------------------------- activity
#: True while any scope is active anywhere in the process (or enable() is in force).
#: The module-level wrappers read it first so that, when nothing is enabled, they cost
#: one attribute lookup more than the function they wrap.
ANY_ACTIVE = False

_lock = threading.RLock()
_active_floors: Counter = Counter()   # floor -> number of live enabled nodes


def refresh_floors() -> None:
    """Recompute the floor of enable()'s default after the cost model changed.

    Scopes already open keep the floor they were counted with (their products are
    still decided by the current model in Python); scopes opened later use the new one.
    Registered with :meth:`CostModel.subscribe` below.
    """
    global _process_default
    with _lock:
        if _process_default.enabled:
            _process_default = _Node(True, _process_default.config, None, None)


costmodel.cost_model().subscribe(refresh_floors)


class uncounted:
    """``with uncounted(): ...``: the C hook does not count the products this thread
    makes inside (the backend's own native products while it computes a routed one,
    which are not the user's products)."""

    __slots__ = ()

    def __enter__(self):
        if _depth is not None:
            _depth(1)
        return self

    def __exit__(self, *exc):
        if _depth is not None:
            _depth(-1)
        return False


# None with an extension built before backend_depth existed (rebuild it to count right).
_depth = getattr(_c_hook, "backend_depth", None)


def _publish():
    """Push the activity summary to the module flag and to the C hook. Holds _lock."""
    global ANY_ACTIVE
    n = sum(_active_floors.values())
    floor = min(_active_floors) if n else NEVER
    ANY_ACTIVE = n > 0
    if _c_hook is not None:
        _c_hook.set_state(n, min(floor, NEVER))


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
