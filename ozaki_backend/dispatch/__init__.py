"""Dispatch: route matrix products of existing NumPy/SciPy code through the backend.

``with ozaki_backend.enabled(): existing_numpy_code()`` sends float64 matrix products
made in the body (``@``, ``np.matmul``, ``np.dot``, ``np.inner``, ``np.tensordot``,
``np.einsum``, ``np.linalg.multi_dot``, ``scipy.linalg.blas.dgemm``,
``get_blas_funcs("gemm")``) to the emulated FP64 GEMM when the routing rules say so,
and leaves everything else to NumPy and SciPy.

Modules, in layers: each imports only from the layers above it in this list (a test
checks that the import graph, function-local imports included, has no cycle).

1. ``log``: the ``ozaki_backend.dispatch`` logger, fallbacks, routed counts per entry.
2. ``costmodel``: :class:`CostModel`, :func:`cost_model`, the floor of a config;
   parameter changes are pushed to listeners.
3. ``config``: :class:`Config`, the per-context scope chain, the process default, and
   the activity summary published to the C extension ``_loophook``.
4. ``routing``: :func:`routing.decide` returns an immutable :class:`Decision`.
5. ``route``: the one routing helper every entry point uses (decide, non-finite check,
   compute through ``ozaki_backend._api.product``, count, fall back).
6. ``loophook`` + ``_loophook.c`` (``@`` / ``np.matmul``), ``numpy_wrappers``
   (``np.dot`` ...), ``scipy_blas`` (``dgemm``, ``get_blas_funcs``), ``wrap``
   (per-array opt-in).
7. ``patches``: :func:`install` / ``restore`` / :func:`installed`, the saved originals.
8. ``scopes``: ``enabled()``, ``disabled()``, ``enable()``, ``disable()``.
9. ``observe``: ``stats()``, ``reset_stats()``, ``format_stats()``, ``explain()``,
   ``info()``.
10. ``env`` + ``_start`` (``OZAKI_BACKEND=1`` start-up hook), ``cli``
    (``python -m ozaki_backend run`` / ``info``).

Importing this package has no process-wide effect: the interception layer is installed
by the first ``enabled()`` / ``enable()`` (or :func:`install`). It imports NumPy only,
never SciPy or CuPy.
"""

from .config import CONFIG_KEYS, Config
from .costmodel import cost_model
from .observe import Stats, explain, format_stats, info, reset_stats, stats
from .patches import install, installed
from .routing import Decision
from .scopes import disable, disabled, enable, enabled
from .wrap import OzakiArray, unwrap, wrap

__all__ = ["enabled", "disabled", "enable", "disable", "stats", "reset_stats", "explain",
           "wrap", "unwrap", "install", "installed", "Config", "CONFIG_KEYS", "Decision",
           "OzakiArray", "cost_model", "format_stats", "info", "Stats"]
