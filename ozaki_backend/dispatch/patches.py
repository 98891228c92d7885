"""Installing the interception layer: :func:`install`, :func:`restore`, :func:`installed`.

The patches this package applies to NumPy and SciPy, and the saved originals (the
model is ``mkl_fft``'s ``patch_numpy_fft`` / ``restore_numpy_fft`` / ``is_patched``):

* NumPy matmul's float64 inner loop is replaced by the C hook (``loophook``; once per
  process, never undone, see ``_loophook.c``);
* NumPy's BLAS call site (the GOT slots of its cblas ``dgemm`` / ``dsyrk`` imports) leads
  to the BLAS hook (``blashook``; Linux ELF; removed again by ``disable()`` when nothing
  is enabled, see :func:`remove_blas_hook_if_idle`);
* ``numpy.dot``, ``numpy.inner``, ``numpy.einsum`` (and ``numpy.tensordot``,
  ``numpy.linalg.multi_dot`` where the BLAS hook is not installed: it sees all their
  products) are rebound to wrappers (``numpy_wrappers``);
* ``ndarray.dot`` and NumPy's ``dot`` builtin (behind ``np.dot``, ``np.cov`` and
  references taken before installation) lead to the dot hook (``dothook``), which hands
  their calls to a dot wrapper before NumPy allocates the result; removed by
  :func:`restore`;
* ``scipy.linalg.blas.dgemm`` (and ``scipy.linalg._fblas.dgemm``, which
  ``get_blas_funcs("gemm")`` returns) is rebound now if SciPy is imported, else by a
  post-import hook as soon as ``scipy.linalg.blas`` loads (``scipy_blas``);
* GPU arrays: CuPy's cuBLAS GEMM functions (``cupy_hook``) and PyTorch's ``mm`` /
  ``addmm`` / ``bmm`` / ``baddbmm`` kernels (``torch_hook``), now if the library is
  imported, else as soon as it is (neither library is ever imported from here).

Every wrapper is inert outside a scope. This module owns the ``installed`` flag and the
originals; it sits above the modules it installs and below ``scopes``, whose
``enabled()`` / ``enable()`` call :func:`install` on first use.
"""

from __future__ import annotations

import functools
import sys
import threading

from . import (blashook, cupy_hook, dothook, loophook, numpy_wrappers, scipy_blas,
               torch_hook)
from .import_watch import ImportWatcher
from .route import make_wrapper

_lock = threading.RLock()
_installed = False
_originals: dict = {}     # (module name, attribute) -> original object
_wrappers: dict = {}      # (module name, attribute) -> wrapper installed
_scipy_hook = None        # the post-import hook while SciPy is not imported yet
_method_router = None     # the dot wrapper ndarray.dot's calls are handed to (dothook)


def install() -> None:
    """Install the interception layer (once per process; later calls do nothing).

    Process-wide effects: replaces NumPy matmul's float64 inner loop (C hook, never
    undone), points NumPy's BLAS dgemm/dsyrk call sites at the BLAS hook (again after
    ``disable()`` removed it), rebinds ``numpy.dot``, ``numpy.inner``,
    ``numpy.einsum`` (and, without the BLAS hook, ``numpy.tensordot`` and
    ``numpy.linalg.multi_dot``) to wrappers, and patches
    ``scipy.linalg.blas.dgemm`` / ``get_blas_funcs("gemm")`` now or as soon as
    ``scipy.linalg`` is imported. Everything installed is inert outside a scope. The
    first ``enabled()`` / ``enable()`` calls this; call it yourself early (before
    starting threads that use ``np.matmul``) if you want the loop replaced at a
    moment of your choosing, as NumPy does not support replacing a loop while another
    thread runs it.
    """
    global _installed
    if _installed and blashook.settled and not torch_hook.pending():
        return
    with _lock:
        if not blashook.settled:
            blashook.install()  # again after disable() removed it
        if _installed:
            torch_hook.install()   # a registration left for torch's import to finish
            return
        loophook.install()
        _install_wrappers()
        if cupy_hook.wanted():
            cupy_hook.install()
        torch_hook.install()
        _installed = True


def remove_blas_hook_if_idle() -> None:
    """Put NumPy's BLAS slots back when no scope is active anywhere (``disable()``).

    The BLAS hook, unlike the matmul loop (a ufunc table entry that must not change
    while another thread runs it), is one pointer per slot: writing the original back
    is safe at any time, and a call already inside the hook finishes normally.
    """
    from . import config as _config

    with _lock:
        if blashook.settled and not _config.ANY_ACTIVE:
            blashook.remove()


def installed() -> bool:
    """Whether :func:`install` has run in this process (and :func:`restore` not since)."""
    return _installed


def _rebind(modname, attr, wrapper_of):
    """Replace ``modname.attr`` by ``wrapper_of(original)``, keeping the original."""
    mod = sys.modules[modname]
    key = (modname, attr)
    if key in _wrappers and getattr(mod, attr) is _wrappers[key]:
        return
    original = getattr(mod, attr)
    w = wrapper_of(original)
    _originals[key] = original
    _wrappers[key] = w
    setattr(mod, attr, w)


def _install_wrappers():
    """All module-level wrappers (idempotent). SciPy now if imported, else on its import."""
    global _scipy_hook
    with _lock:
        import numpy.linalg  # noqa: F401  (multi_dot's module)

        hooked = blashook.installed()
        for modname, attr, impl, entry in numpy_wrappers.TARGETS:
            if hooked and entry in numpy_wrappers.COVERED_BY_BLAS_HOOK:
                continue  # every product of theirs reaches the BLAS hook
            _rebind(modname, attr, functools.partial(make_wrapper, impl=impl, entry=entry))
        _install_dot_hook()
        if scipy_blas.MODULE in sys.modules:
            _patch_scipy()
        elif _scipy_hook is None:
            _scipy_hook = ImportWatcher(scipy_blas.MODULE, lambda _module: _patch_scipy(),
                                        "patch scipy.linalg.blas.dgemm")
            _scipy_hook.insert()


def _install_dot_hook():
    """ndarray.dot through a dot wrapper counted as ``"ndarray.dot"``, NumPy's ``dot``
    builtin through the installed ``np.dot`` wrapper (``dothook``)."""
    global _method_router
    key = ("numpy", "dot")
    if key not in _wrappers:
        return
    if _method_router is None:
        _method_router = make_wrapper(_originals[key], numpy_wrappers.route_ndarray_dot,
                                      "ndarray.dot")
    dothook.install(_method_router, _wrappers[key])


def _patch_scipy():
    """Patch ``dgemm`` in ``scipy.linalg.blas`` and ``scipy.linalg._fblas``; clear the memo.

    One wrapper for both modules, so that ``get_blas_funcs("gemm")`` returns the very
    object ``scipy.linalg.blas.dgemm`` is.
    """
    with _lock:
        blas = sys.modules[scipy_blas.MODULE]
        for name in scipy_blas.ROUTINES:          # dgemm, and zgemm (complex, spec §11)
            key = (scipy_blas.MODULE, name)
            original = getattr(blas, name, None)
            if original is None or (key in _wrappers and original is _wrappers[key]):
                continue
            w = scipy_blas.dgemm_wrapper(original, name)
            for mod in scipy_blas.dgemm_modules(blas, original, name):
                _originals[(mod.__name__, name)] = original
                _wrappers[(mod.__name__, name)] = w
                setattr(mod, name, w)
        scipy_blas.clear_memo()


def restore() -> None:
    """Put every original back (``np.dot`` etc., SciPy's ``dgemm``, NumPy's BLAS slots,
    CuPy's cuBLAS functions, PyTorch's kernels); clear SciPy's memo.

    The matmul loop hook is not affected (it is never undone). Scopes opened later
    install the wrappers again. Code that took a reference to a wrapper keeps it (it
    stays correct: a wrapper outside a scope is the original).
    """
    global _scipy_hook, _installed, _method_router
    with _lock:
        blashook.remove()
        dothook.remove()
        _method_router = None
        cupy_hook.uninstall()
        torch_hook.uninstall()
        for (modname, attr), w in list(_wrappers.items()):
            mod = sys.modules.get(modname)
            if mod is not None and getattr(mod, attr, None) is w:
                setattr(mod, attr, _originals[(modname, attr)])
        _wrappers.clear()
        if _scipy_hook is not None:
            _scipy_hook.remove()
            _scipy_hook = None
        scipy_blas.clear_memo()
        _installed = False  # the next scope re-installs the wrappers


def installed_wrappers() -> list:
    """``module.attr`` names that currently hold a wrapper."""
    with _lock:
        return [f"{m}.{a}" for (m, a), w in _wrappers.items()
                if getattr(sys.modules.get(m), a, None) is w]


def original(name: str):
    """The original object behind a wrapper, e.g. ``original("numpy.dot")``.

    Raises
    ------
    KeyError
        When no wrapper was ever installed for ``name``.
    """
    mod, _, attr = name.rpartition(".")
    return _originals[(mod, attr)]
