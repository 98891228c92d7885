"""Scopes: ``enabled()``, ``disabled()``, ``enable()``, ``disable()``.

The public face of the configuration state in ``config``: a scope validates its keys
at the ``with`` line, installs the interception layer (``patches.install``) the first
time something is enabled, and pushes its node onto the calling context's chain.
Above ``config`` and ``patches``, so that ``config`` itself never installs anything.

Threads started with ``threading.Thread`` or executor pools begin with an empty
context and therefore see the process default (:func:`enable`), not the scope of the
thread that started them; ``asyncio`` tasks and ``asyncio.to_thread`` copy the context
and see the scope (``loop.run_in_executor`` does not). Use :func:`enable` for a whole
program.
"""

from __future__ import annotations

import functools

from . import config as _config
from .config import Config
from .patches import install, remove_blas_hook_if_idle


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
        _config.push(self._enabled, self._config, owner=self)
        return self

    def __exit__(self, exc_type, exc, tb):
        if not _config.pop(owner=self):
            # Exiting a scope that is not the innermost one in this context (e.g. a
            # generator left open across scopes): refuse rather than corrupt the chain.
            raise RuntimeError("ozaki_backend scope exited out of order (it is not the "
                               "innermost active scope in this context)")
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
    return _Scope(True, Config.build(_config.current().config, config, "enabled"))


def disabled() -> _Scope:
    """Run the body natively even inside an enabled scope or after :func:`enable`.

    Context manager and decorator; affects the current thread / asyncio task only.
    """
    return _Scope(False, _config.current().config)


def enable(**config) -> None:
    """Enable routing process-wide (the default for every context without a scope).

    Takes the same keys as :func:`enabled`, applied on top of the library defaults
    (not on top of an earlier ``enable``). Threads that start later see it too.
    Installs the interception layer (:func:`install`). Scopes still override it.
    """
    cfg = Config.build(None, config, "enable")
    install()
    _config.set_default(True, cfg)


def disable() -> None:
    """Turn the process-wide default off again (scopes are not affected).

    The default configuration returns to the library defaults, so a later
    ``enabled()`` does not inherit what an earlier ``enable(...)`` set. When no scope
    is active anywhere any more, NumPy's BLAS call site gets its original pointers back
    (the next ``enabled()`` / ``enable()`` hooks it again).
    """
    _config.set_default(False, _config.DEFAULT_CONFIG)
    remove_blas_hook_if_idle()
