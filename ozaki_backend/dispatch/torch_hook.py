"""PyTorch's float64 and complex128 matrix products, routed through the dispatcher.

The hook overrides the CUDA and CPU kernels of the four ATen operators every float
matrix product of PyTorch reaches: ``aten::mm``, ``aten::addmm``, ``aten::bmm`` and
``aten::baddbmm`` (a ``torch.library`` implementation on the ``CUDA`` and ``CPU``
dispatch keys). ``matmul``, ``@``, ``linear``, ``einsum``, ``tensordot``, ``inner`` and
``nn.Linear`` are composite operators that decompose into those four, and the
dispatcher calls these kernels below autograd: the autograd formulas record the
product as usual and the backward pass's products (``grad.mm(w.t())`` ...) reach the
same kernels, so gradients are routed too.

Inside a scope, a float64 (complex128) product of CUDA tensors is decided by the device
cost model (``device_routing``) and computed by ``ozaki_backend._api.product`` on CuPy
views of the tensors' memory, on PyTorch's current stream (no copies, no host
synchronisation beyond the engine's own); a product of CPU tensors follows the NumPy
host path's rules and code (``route.routed``: the host cost model, NumPy views of the
tensors). Everything else — other dtypes, declined products, outside scopes — runs the
operator's own ``out=`` kernel (the same structured kernel the functional form runs),
so results and errors are PyTorch's.

Scopes in the backward pass: PyTorch runs a CUDA backward pass in a device thread of
its own, whose context holds no scope. ``torch.autograd.backward`` stashes the calling
context for such threads (``torch._C._stash_obj_in_tls("context", ...)``); the kernels
read the scope from it, so a backward pass started inside ``enabled()`` is routed as
its forward pass was (where a PyTorch version does not stash it, only ``enable()``'s
process default reaches those threads).

Cost on other operators: none (only these four are overridden). A product of another
dtype, or one outside every scope, pays one Python call on top of the native kernel
(about 6 µs on the CPU machine; measured in ``tests/gpu_arrays``).

Not routed: ``out=`` variants (``torch.mm(a, b, out=c)``, and what ``torch.compile``'s
generated code calls), ``mm.dtype``-style overloads, sparse, nested and meta tensors,
products during CUDA graph capture, and CUDA tensors where CuPy is not installed
(the CUDA engine computes on CuPy).

:func:`install` registers the kernels once ``torch`` is imported (now, or through an
import watcher; ``_start`` covers the case of a backend enabled by ``OZAKI_BACKEND=1``
while ``torch`` itself is importing); :func:`uninstall` removes them again, which
restores PyTorch's own. Nothing here imports torch before it is imported.
"""

from __future__ import annotations

import threading
import warnings

from .. import _native
from . import config as _config
from . import device_routing
from .import_watch import ImportWatcher
from .log import fallback
from .route import NOT_ROUTED, routed, scope_config

LIBRARY = "torch"
#: The operators overridden.
OPS = ("mm", "addmm", "bmm", "baddbmm")
#: The dispatch keys their kernels are overridden on.
KEYS = ("CUDA", "CPU")

_lock = threading.RLock()
_library = None           # the torch.library.Library holding the kernels
_watcher = None           # waiting for `import torch`
_pending = False          # install() ran while torch was still importing
_streams: dict = {}       # (device, stream pointer) -> CuPy stream object


# --------------------------------------------------------------------------- scopes
def _scope_config():
    """The config to route with here, or None: this context's scope, else (in an
    autograd device thread) the scope of the context that started the backward pass."""
    cfg = scope_config()
    if cfg is not None or _config.has_scope():
        return cfg
    import torch

    c = torch._C
    if not (hasattr(c, "_is_key_in_tls") and c._is_key_in_tls("context")):
        return None
    ctx = c._get_obj_in_tls("context")
    try:
        if ctx.get(_native.SUSPENDED, False):
            return None
        node = ctx.get(_config._STATE)
    except AttributeError:      # not a contextvars.Context
        return None
    if node is None or not node.enabled:
        return None
    return node.config


# --------------------------------------------------------------------------- operands
def _check(torch, op, a, b, c):
    """``(m, n, k, batch)`` when the call is one the hook can take (float64/complex128,
    one dtype and device, strided, matching shapes; ``c`` broadcasts to the result),
    else None: the native kernel then decides (and raises its own errors)."""
    nd = 3 if op in ("bmm", "baddbmm") else 2
    if a.dim() != nd or b.dim() != nd or b.dtype != a.dtype or b.device != a.device:
        return None
    if a.layout != torch.strided or b.layout != torch.strided:
        return None
    if a.shape[-1] != b.shape[-2] or (nd == 3 and a.shape[0] != b.shape[0]):
        return None
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    batch = a.shape[0] if nd == 3 else 1
    if c is not None:
        shape = (batch, m, n) if nd == 3 else (m, n)
        if (c.dtype != a.dtype or c.device != a.device or c.layout != torch.strided
                or c.dim() > nd):
            return None
        try:
            if tuple(torch.broadcast_shapes(tuple(c.shape), shape)) != shape:
                return None       # c would widen the result: the kernel raises
        except RuntimeError:
            return None
    return m, n, k, batch


def _plain(t):
    """``t`` without autograd history, conjugate or negative bit (a copy only where a
    bit has to be materialised)."""
    return t.detach().resolve_conj().resolve_neg()


def _scalar(v, complex_):
    v = v.item() if hasattr(v, "item") else v
    return complex(v) if complex_ else float(v)


def _cupy_view(cupy, t, device_id):
    """A CuPy array over the memory of CUDA tensor ``t`` (kept alive by the view)."""
    item = t.element_size()
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    mem = cupy.cuda.UnownedMemory(t.data_ptr(), max(extent, 1) * item, t, device_id)
    dtype = "complex128" if t.is_complex() else "float64"
    return cupy.ndarray(tuple(t.shape), dtype, cupy.cuda.MemoryPointer(mem, 0),
                        tuple(s * item for s in t.stride()))


def _cupy_stream(cupy, ptr, device_id):
    """CuPy's handle of PyTorch's current stream ``ptr`` (0: the legacy default)."""
    if ptr == 0:
        return cupy.cuda.Stream.null
    key = (device_id, ptr)
    s = _streams.get(key)
    if s is None:
        if len(_streams) > 64:   # streams come and go: keep the table small
            _streams.clear()
        s = _streams[key] = cupy.cuda.ExternalStream(ptr, device_id)
    return s


# --------------------------------------------------------------------------- routing
def _route(op, a, b, c=None, alpha=1, beta=0):
    """The routed result of ``alpha * (a @ b) + beta * c`` (``op``'s semantics) as a new
    tensor, or None: run the native kernel."""
    cfg = _scope_config()
    if cfg is None:
        return None
    import torch

    cpu = not a.is_cuda
    entry = f"torch {op}" + (" (CPU)" if cpu else "")
    try:
        dims = _check(torch, op, a, b, c if beta != 0 else None)
        if dims is None:
            return None
        m, n, k, batch = dims
        cplx = a.is_complex()
        alpha, beta = _scalar(alpha, cplx), _scalar(beta, cplx)
        shape = (batch, m, n) if op in ("bmm", "baddbmm") else (m, n)
        if cpu:
            return _route_host(cfg, entry, a, b, c, alpha, beta, shape)
        return _route_cuda(cfg, entry, torch, a, b, c, alpha, beta, shape, dims, cplx)
    except Warning:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug here must not cost the result
        fallback(entry, exc)
        return None


def _route_host(cfg, entry, a, b, c, alpha, beta, shape):
    """CPU tensors: the NumPy host path (its cost model, counts and fallbacks)."""
    import torch

    res = torch.empty(shape, dtype=a.dtype)
    cn = _plain(c).expand(shape).numpy() if beta != 0 else None
    got = routed(cfg, _plain(a).numpy(), _plain(b).numpy(), entry, alpha=alpha, beta=beta,
                 c=cn, out=res.numpy(), fp_name=None)
    return None if got is NOT_ROUTED else res


def _route_cuda(cfg, entry, torch, a, b, c, alpha, beta, shape, dims, cplx):
    """CUDA tensors: the device cost model, then the engine on CuPy views."""
    m, n, k, batch = dims
    try:        # the engine computes on CuPy, and the cost model asks it about the GPU
        import cupy
    except ImportError:
        device_routing.native_reason("CuPy is not installed (the CUDA engine computes "
                                     "on it)", entry, LIBRARY, m=m, n=n, k=k, batch=batch)
        return None
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    d = device_routing.decide(cfg, m, n, k, batch, entry, complex_=cplx, device_id=dev)
    if not d.routed:
        device_routing.native(d, LIBRARY)
        return None
    if torch.cuda.is_current_stream_capturing():
        device_routing.native(d.replace(routed=False, engine=None, reason=(
            "CUDA graph capture in progress (the engine synchronises)")), LIBRARY)
        return None
    a, b = _plain(a), _plain(b)
    res = torch.empty(shape, dtype=a.dtype, device=a.device)
    with cupy.cuda.Device(dev):
        stream = _cupy_stream(cupy, torch.cuda.current_stream(a.device).cuda_stream, dev)
        with stream:
            cc = _cupy_view(cupy, _plain(c).expand(shape), dev) if beta != 0 else None
            ok = device_routing.route_product(
                cfg, d, _cupy_view(cupy, a, dev), _cupy_view(cupy, b, dev),
                _cupy_view(cupy, res, dev), alpha=alpha, beta=beta, c=cc)
    return res if ok else None


# --------------------------------------------------------------------------- kernels
def _kernels(torch):
    """The four kernels (one per operator, for both keys)."""
    aten = torch.ops.aten
    ours = (torch.float64, torch.complex128)
    mm_out, addmm_out = aten.mm.out, aten.addmm.out
    bmm_out, baddbmm_out = aten.bmm.out, aten.baddbmm.out

    # Native: the operator's out= kernel into an empty tensor, which it resizes (the
    # functional kernel is the same structured kernel, with the same checks).
    def mm(self, mat2):
        if _config.ANY_ACTIVE and self.dtype in ours:
            r = _route("mm", self, mat2)
            if r is not None:
                return r
        return mm_out(self, mat2, out=self.new_empty(0))

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        if _config.ANY_ACTIVE and mat1.dtype in ours:
            r = _route("addmm", mat1, mat2, self, alpha, beta)
            if r is not None:
                return r
        return addmm_out(self, mat1, mat2, beta=beta, alpha=alpha, out=mat1.new_empty(0))

    def bmm(self, mat2):
        if _config.ANY_ACTIVE and self.dtype in ours:
            r = _route("bmm", self, mat2)
            if r is not None:
                return r
        return bmm_out(self, mat2, out=self.new_empty(0))

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        if _config.ANY_ACTIVE and batch1.dtype in ours:
            r = _route("baddbmm", batch1, batch2, self, alpha, beta)
            if r is not None:
                return r
        return baddbmm_out(self, batch1, batch2, beta=beta, alpha=alpha,
                           out=batch1.new_empty(0))

    return {"mm": mm, "addmm": addmm, "bmm": bmm, "baddbmm": baddbmm}


# --------------------------------------------------------------------------- installing
def _register(torch) -> None:
    global _library, _pending
    with _lock:
        _pending = False
        if _library is not None:
            return
        lib = torch.library.Library("aten", "IMPL")
        kernels = _kernels(torch)
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point.
            warnings.simplefilter("ignore", UserWarning)
            for key in KEYS:
                for op in OPS:
                    lib.impl(op, kernels[op], key)
        _library = lib


def _registered_on_import(module) -> None:
    """The watcher's callback: ``torch`` has just been imported."""
    global _watcher
    with _lock:
        _watcher = None
        _register(module)


def install() -> None:
    """Override the four kernels now if ``torch`` is imported, else as soon as it is
    (never imports it). While ``torch`` is still importing (the backend enabled by
    ``OZAKI_BACKEND=1`` when torch imports NumPy), the registration is left to
    :func:`library_loaded`, which ``_start``'s watcher calls after torch's import."""
    global _watcher, _pending
    import sys

    with _lock:
        if _library is not None:
            _pending = False
            return
        mod = device_routing.fully_imported("torch")
        if mod is not None:
            _register(mod)
        elif "torch" in sys.modules:
            _pending = True
        elif _watcher is None:
            _watcher = ImportWatcher("torch", _registered_on_import)
            _watcher.insert()


def library_loaded() -> None:
    """Called once ``torch`` has finished importing (``_start``'s watcher): register
    the kernels if :func:`install` had to wait for that."""
    import sys

    with _lock:
        # Called at the end of torch's module code: the import machinery still marks
        # the module as initialising, but torch is complete.
        mod = sys.modules.get("torch")
        if _pending and mod is not None:
            _register(mod)


def pending() -> bool:
    """Whether :func:`install` ran while ``torch`` was still importing and the kernels
    are not registered yet."""
    return _pending


def uninstall() -> None:
    """Remove the kernels (PyTorch's own are in force again) and stop waiting."""
    global _library, _watcher, _pending
    with _lock:
        _pending = False
        if _watcher is not None:
            _watcher.remove()
            _watcher = None
        if _library is not None:
            _library._destroy()
            _library = None


def installed() -> bool:
    """Whether the kernels are registered."""
    return _library is not None


def state() -> str:
    """``"installed"``, ``"waiting for its import"`` or ``"not installed"``."""
    if installed():
        return "installed"
    return "waiting for its import" if (_watcher is not None or _pending) else \
        "not installed"


device_routing.register_hook(LIBRARY, state)
