"""Dispatch: route matrix products of existing NumPy/SciPy code through the backend.

``with ozaki_backend.enabled(): existing_numpy_code()`` sends float64 matrix products
made in the body (``@``, ``np.matmul``, ``np.dot``, ``np.inner``, ``np.tensordot``,
``np.einsum``, ``np.linalg.multi_dot``, ``scipy.linalg.blas.dgemm``,
``get_blas_funcs("gemm")``) to the emulated FP64 GEMM when the routing rules say so,
and leaves everything else to NumPy and SciPy.

Modules: ``config`` (scopes, process default, validation), ``routing`` (decisions
and the cost model), ``loophook`` + ``_loophook.c`` (``@`` / ``np.matmul``),
``patches`` (module-level wrappers), ``wrap`` (per-array opt-in), ``observe``
(``stats``, ``explain``), ``env`` + ``_start`` (``OZAKI_BACKEND=1`` start-up hook),
``cli`` (``python -m ozaki_backend run`` / ``info``).

Importing this package has no process-wide effect: the interception layer is installed
by the first ``enabled()`` / ``enable()`` (or :func:`install`). It imports NumPy only,
never SciPy or CuPy.
"""

from .config import (CONFIG_KEYS, Config, disable, disabled, enable, enabled, install,
                     installed)
from .observe import explain, format_stats, reset_stats, stats
from .routing import Decision, cost_model
from .wrap import OzakiArray, unwrap, wrap

__all__ = ["enabled", "disabled", "enable", "disable", "stats", "reset_stats", "explain",
           "wrap", "unwrap", "install", "installed", "Config", "CONFIG_KEYS", "Decision",
           "OzakiArray", "cost_model", "format_stats"]
