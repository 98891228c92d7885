"""Observation, the top layer of dispatch: ``stats()``, ``reset_stats()``,
``format_stats()`` and ``explain()``.

Reads every layer below and is imported by none of them. Counts come from three
places: ``ozaki_backend._stats`` (every routed product, with its time, and every
native decision made in Python, with its reason), the C loop hook (products it skipped
without calling Python while some scope was active), and the per-entry-point routed
counts of ``log``. All are process-wide. ``explain()`` reports the calling context's
state (``config``), the decision ``routing`` would make, and what ``patches`` has
installed.
"""

from __future__ import annotations

from .. import _native, _stats, _warnings, semantics
from . import blashook, config, costmodel, log, loophook, patches, route, routing

C_ERROR = "@/np.matmul: error in the C hook"
BLAS_C_ERROR = "BLAS hook: error in the C hook"


class Stats(dict):
    """What ``stats()`` returns: the counters as a dict that prints as a table.

    ``print(stats())`` (and its ``repr``) is ``format_stats()``'s table; indexing,
    iteration, ``json.dumps`` and comparisons are those of the plain dict, whose keys
    ``stats()`` documents.

    Attributes
    ----------
    details : dict
        ``{outcome: {reason key: long text}}``: the full explanation behind a short
        reason key (the latest one seen), where there is one.
    """

    __slots__ = ("details",)

    def __init__(self, data, details=None):
        super().__init__(data)
        self.details = {} if details is None else details

    def as_dict(self) -> dict:
        """The counters as a plain ``dict`` (a copy; nested dicts are copied too)."""
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self.items()}

    def __str__(self):
        return format_stats(self)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))


def stats() -> Stats:
    """What the backend did in this process since start or the last :func:`reset_stats`.

    Returns
    -------
    Stats
        A ``dict`` (``stats().as_dict()`` gives a plain copy) that prints as a
        table (``print(ozaki_backend.stats())``). Keys: ``routed``, ``native``, ``fallback``: product counts; ``reasons``: for each of
        those outcomes a ``{reason key: count}`` dict with short, stable keys (routed
        reasons name the engine; ``stats().details`` has the long text behind a key);
        ``routed_by_entry``: routed calls per entry point (``@/np.matmul``,
        ``np.dot``, ``scipy dgemm``, ``BLAS dgemm`` / ``BLAS dsyrk`` for products
        routed at NumPy's BLAS call site: ``ndarray.dot``, ``np.cov`` ...); ``seconds``: time spent per outcome;
        ``moduli``: ``{moduli count: 2-D products}`` of the Ozaki-II products
        computed (with ``precision="fp64"`` the count is chosen per product from its
        operands, ``docs/precision.md``); ``last_moduli``: the count of this thread's
        latest such product (None before the first); ``certificate``: ``{outcome:
        2-D products}`` with outcomes ``certified``, ``uncertified`` (a fixed count
        that misses the target), ``residual pass``, ``native fallback``
        (``docs/spec.md`` §10); ``c_fast_path``: products the C hooks left to NumPy
        without calling Python while some scope was active anywhere
        (``below_floor``, ``vector_shaped``): ``@``/``np.matmul`` (the loop hook) and
        the wrapped functions (``np.dot``, ``np.inner``, ``np.tensordot``,
        ``np.einsum``, SciPy's ``dgemm``: their C fast path). The C side
        cannot tell whose product it sees, so these also count other threads'
        products (never the backend's own, made while it computes a routed product);
        they are not part of ``native``.

    Notes
    -----
    Process-wide, all threads. Products made while no scope is active anywhere are
    not counted (they never leave the C fast path or the wrappers' first check); a
    loop-hook product counts once per inner-loop invocation, which NumPy may split
    into several for one non-coalescable stacked call.
    """
    snap = _stats.snapshot()
    reasons: dict = {"routed": {}, "native": {}, "fallback": {}}
    for (outcome, reason), n in snap["counts"].items():
        reasons.setdefault(outcome, {})[reason] = reasons.get(outcome, {}).get(reason, 0) + n
    c = loophook.counters()
    w = loophook.wrapper_counters()
    if c["errors"]:
        reasons["fallback"][C_ERROR] = reasons["fallback"].get(C_ERROR, 0) + c["errors"]
    bc = blashook.counters()
    if bc["errors"]:
        reasons["fallback"][BLAS_C_ERROR] = (reasons["fallback"].get(BLAS_C_ERROR, 0)
                                             + bc["errors"])
    out = {k: sum(v.values()) for k, v in reasons.items()}
    out.update(reasons=reasons, routed_by_entry=log.routed_by_entry(),
               seconds=snap["seconds"], moduli=snap["moduli"],
               certificate=snap["certificate"],
               symmetric=snap["symmetric"],
               last_moduli=_stats.last_moduli(),
               c_fast_path={"below_floor": c["below_floor"] + w["below_floor"],
                            "vector_shaped": c["vector_shaped"] + w["vector_shaped"]})
    details: dict = {}
    for (outcome, reason), text in _stats.details().items():
        details.setdefault(outcome, {})[reason] = text
    return Stats(out, details)


def reset_stats() -> None:
    """Zero every counter of :func:`stats` (process-wide); the next fallback of each
    reason is logged at WARNING again."""
    _stats.reset()
    _warnings.reset_logged()
    loophook.reset_counters()
    blashook.reset_counters()
    log.reset_routed_by_entry()
    routing.recent.clear()


def format_stats(s: dict | None = None) -> str:
    """``stats()`` as a human-readable table (what ``print(stats())`` shows)."""
    s = stats() if s is None else s
    lines = [f"ozaki_backend stats: routed {s['routed']}, native {s['native']}, "
             f"fallback {s['fallback']}"]
    rows = [(outcome, n, reason) for outcome in ("routed", "native", "fallback")
            for reason, n in sorted(s["reasons"].get(outcome, {}).items(),
                                    key=lambda t: -t[1])]
    if rows:
        lines.append(f"  {'outcome':8s} {'products':>8s}  reason")
        lines.extend(f"  {o:8s} {n:8d}  {r}" for o, n, r in rows)
    if s["routed_by_entry"]:
        entries = ", ".join(f"{k} {v}" for k, v in sorted(s["routed_by_entry"].items()))
        lines.append(f"  routed by entry point: {entries}")
    if s.get("moduli"):
        lines.append("  moduli used: " + ", ".join(
            f"{n} x{c}" for n, c in sorted(s["moduli"].items())) + " (2-D products)")
    if s.get("certificate"):
        lines.append("  certificate: " + ", ".join(
            f"{o} {c}" for o, c in sorted(s["certificate"].items())) + " (2-D products)")
    sym = s.get("symmetric") or {}
    if sym.get("products"):
        lines.append(f"  symmetric products: {sym['products']} (one triangle, "
                     f"{sym['work'] / max(sym['general_work'], 1):.2f} of the general "
                     "INT8 work)")
    secs = ", ".join(f"{k} {v:.3f} s" for k, v in sorted(s["seconds"].items()) if v)
    if secs:
        lines.append(f"  time: {secs}")
    cf = s.get("c_fast_path", {})
    if any(cf.values()):
        lines.append(f"  C fast path (any thread, not routed): {cf['below_floor']} below the "
                     f"floor, {cf['vector_shaped']} matrix-vector shaped")
    if getattr(s, "details", None):
        lines.append("  (stats().details has the full text behind each reason)")
    return "\n".join(lines)


def explain(*operands, entry: str = "@/np.matmul"):
    """Why a product would (not) be routed here, or the routing state.

    Parameters
    ----------
    *operands : array_like, optional
        ``explain(a, b)``: the decision for ``a @ b`` made now, in the calling context
        (scope, thread, asyncio task), including the operand checks (type, dtype,
        shape, NaN/inf). No product is computed.
        ``explain()``: a text report of the state in this context: enabled or not,
        the config, the engine, thresholds, what is installed, and the most recent
        decisions made in Python (products the C fast path skipped are only counted).
    entry : str
        Label for the entry point in the returned decision.

    Returns
    -------
    Decision or str
        A :class:`~ozaki_backend.dispatch.routing.Decision` (truthy if routed, printable)
        for two operands; a multi-line report for none.
    """
    if not operands:
        return _report()
    if len(operands) != 2:
        raise TypeError(f"explain() takes 0 or 2 operands ({len(operands)} given)")
    return _explain_pair(*operands, entry=entry)


def _explain_pair(a, b, entry):
    import numpy as np

    node = config.current()
    shape = _shape_of(a, b)

    def no(routed, reason, entry):
        return routing.Decision(routed, reason, entry=entry, **shape)

    if _native.SUSPENDED.get():
        return no(False, "inside the backend (interception suspended)", entry=entry)
    if not node.enabled:
        return no(False, "no enabled scope in this context and enable() not in force: "
                  "wrap the code in `with ozaki_backend.enabled():` to route it",
                  entry=entry)
    # CuPy arrays and torch tensors: the GPU-array hooks' decision (device cost model).
    from . import device_routing

    gpu = device_routing.explain_pair(a, b, entry, node)
    if gpu is not None:
        return gpu
    for x in (a, b):
        if type(x) is not np.ndarray:
            return no(False, f"operand of type {type(x).__module__}.{type(x).__qualname__}"
                      " is not a plain numpy.ndarray (NumPy's hooks give it to its own "
                      "implementation, or the wrappers pass it through unchanged)",
                      entry=entry)
    if semantics.product_dtype(a.dtype, b.dtype) is None:
        return no(False, f"dtypes {a.dtype}, {b.dtype}: the product is not float64 or "
                  "complex128", entry=entry)
    if a.ndim == 0 or b.ndim == 0:
        return no(False, "0-d operand: NumPy rejects it", entry=entry)
    if a.ndim == 1 or b.ndim == 1:
        return no(False, "1-d operand: matrix-vector shaped, left to BLAS", entry=entry)
    if a.shape[-1] != b.shape[-2]:
        return no(False, "shapes do not match: NumPy raises its own error", entry=entry)
    try:
        batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), dtype=np.int64))
    except ValueError:
        return no(False, "stack shapes do not broadcast: NumPy raises", entry=entry)
    d = routing.decide(node.config, a.shape[-2], b.shape[-1], a.shape[-1], batch, entry)
    if d.routed and not route.finite(a, b):
        d = d.replace(routed=False, reason=route.NON_FINITE, engine=None)
    return d


def _shape_of(a, b) -> dict:
    """``m``, ``n``, ``k``, ``batch`` of ``a @ b`` for a decision, or nothing when the
    operands are not a matrix product."""
    import numpy as np

    try:
        sa, sb = np.shape(a), np.shape(b)
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
            return {}
        batch = int(np.prod(np.broadcast_shapes(sa[:-2], sb[:-2]), dtype=np.int64))
    except (ValueError, TypeError):
        return {}
    return {"m": sa[-2], "n": sb[-1], "k": sa[-1], "batch": batch}


def _report() -> str:
    node = config.current()
    lines = []
    if _native.SUSPENDED.get():
        lines.append("interception suspended (running inside the backend)")
    where = "this context's scope" if config.has_scope() else "process default"
    lines.append(f"enabled here: {node.enabled} ({where})")
    if not node.enabled:
        lines.append("  nothing is routed in this context: wrap the code in "
                     "`with ozaki_backend.enabled():` (or call ozaki_backend.enable()); "
                     "explain(a, b) tells why a given product would (not) be routed")
    lines.append(f"config: {node.config!r}")
    if node.enabled:
        eng, why = routing.resolve_engine(node.config)
        lines.append(f"engine: {eng} ({why})")
        f = node.config.floor()
        lines.append("floor (smallest m*n*k routed): "
                     + ("never routes" if f >= config.NEVER else str(f)))
    active, floor = loophook.state()
    lines.append(f"process: {active} active scope(s) anywhere, C floor "
                 + ("none" if floor >= config.NEVER else str(floor)))
    lines.append(f"installed: loop hook {loophook.installed()} (extension "
                 f"{'available' if loophook.available() else 'missing'}), wrappers "
                 f"{sorted(patches.installed_wrappers()) or 'none'}")
    lines.append(blashook.describe())
    from . import device_routing

    lines.append(device_routing.describe())
    lines.append(f"cost model: {costmodel.cost_model()!r}")
    if routing.recent:
        lines.append("recent decisions (newest last):")
        lines.extend(f"  {d}" for d in list(routing.recent)[-10:])
    return "\n".join(lines)


def info() -> dict:
    """What this process would do: version, engines, configuration, hooks installed.

    What ``python -m ozaki_backend info --json`` prints. Looks for a GPU (imports CuPy
    when it is installed) and SciPy, unlike ``import ozaki_backend``.

    Returns
    -------
    dict
        ``version``; ``engines``: ``{name: {"available": bool, "reason": str}}`` for
        ``cpu`` and ``cuda``, and ``auto``: the engine ``engine="auto"`` picks and why;
        ``config``: the calling context's state (``enabled``, ``scope``: this context's
        scope or the process default, and the config keys); ``hooks``: what is
        installed (``installed``: the interception layer, ``loop_hook``,
        ``wrappers``); ``environment``: the ``OZAKI_BACKEND*`` variables set, each
        with ``known`` (False: not a variable the package reads); plus the versions
        of Python, NumPy, SciPy, CuPy, the cost model's routing thresholds, the
        moduli table and what is (not) intercepted.
    """
    import importlib.util
    import os
    import sys
    import platform

    import numpy as np

    from .._version import __version__
    from ..plan import Plan
    from ..registry import cuda_availability as availability
    from ..spec.moduli import MODULI
    from ..spec.rules import EXPECTED_BITS, KAPPA, NATIVE_K
    from . import numpy_wrappers

    ok, why = availability()
    cupy = None
    if "cupy" in sys.modules:
        cupy = getattr(sys.modules["cupy"], "__version__", "?")
    try:
        import scipy

        scipy_version = scipy.__version__
    except ImportError:
        scipy_version = None
    node = config.current()
    model = costmodel.cost_model()
    eng_auto, eng_why = routing.resolve_engine(config.DEFAULT_CONFIG)
    cross = []
    for n in (256, 512, 1024, 2048, 4096, 8192, 16384):
        p = Plan(n, n, n)
        N = p.expected_moduli     # the estimate assumes ordinary data
        t_h = model.host_seconds(n, n, n)
        t_e = model.emulated_seconds(n, n, n, 1, p.n_gemms - (p.n_moduli - N) * p.k_split,
                                     N)
        cross.append({"n": n, "moduli": N, "host_ms": t_h * 1e3,
                      "emulated_ms": t_e * 1e3, "routed": model.routes(t_h, t_e)})
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("OZAKI_BACKEND")}
    known = config.known_variables()
    loop_hook = {"extension": loophook.available(),
                 "extension_path": loophook.extension_path(),
                 "installed_in_this_process": loophook.installed()}
    blas_hook = {"platform": blashook.available(), **blashook.status()}
    return {
        "version": __version__,
        "engines": {"cpu": {"available": True, "reason": "NumPy reference engine"},
                    "cuda": {"available": ok, "reason": why},
                    "auto": {"engine": eng_auto, "why": eng_why}},
        "config": {"enabled": node.enabled,
                   "scope": "context" if config.has_scope() else "process default",
                   **node.config.as_dict()},
        "hooks": {"installed": patches.installed(), "loop_hook": loop_hook,
                  "blas_hook": blas_hook, "wrappers": patches.installed_wrappers()},
        "ozaki_backend": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy_version,
        "gpu": {"usable": ok, "detail": why},
        "cupy": cupy,
        "engine_auto": {"engine": eng_auto, "why": eng_why},
        "loop_hook": loop_hook,
        "blas_hook": blas_hook,
        "state": {"enabled_here": node.enabled, "config": node.config.as_dict(),
                  "c_state": dict(zip(("active_scopes", "floor"), loophook.state()))},
        "cost_model": {"host_gflops": model.host_gflops, "host_source": model.host_source,
                       "rates": model.rates_source, "margin": model.margin,
                       **{k: getattr(model, k) for k in model.PARAMS},
                       "floor_mnk": model.floor(), "cubes": cross},
        "moduli": {"table": list(MODULI),
                   "fp64": {"rule": "per product, the fewest moduli at which every "
                                    "element's truncation error is at most native's: "
                                    f"size <= {KAPPA:g} u sqrt(min(k, {NATIVE_K})/2) "
                                    "||t||_2, rigorous bound <= (k-1) u |A||B|; then "
                                    "an a-posteriori test, more moduli, the residual "
                                    "pass or native",
                            "expected": {str(k): Plan(256, 256, k).expected_moduli
                                         for k in (64, 1024, 8192, 65536)},
                            "expected_bits": EXPECTED_BITS}},
        "intercepted": {
            "@ / np.matmul": "C inner-loop hook (float64 dd->d loop)",
            "ndarray.dot, np.cov, held dot":
                "BLAS call-site hook (NumPy dgemm/dsyrk GOT slots)" if blashook.available()
                else "not hooked on this platform",
            **{f"{m}.{a}": ("BLAS call-site hook (no wrapper)"
                            if blashook.available()
                            and e in numpy_wrappers.COVERED_BY_BLAS_HOOK
                            else "module-level wrapper")
               for m, a, _, e in numpy_wrappers.TARGETS},
            "scipy.linalg.blas.dgemm": "module-level wrapper (also scipy.linalg._fblas.dgemm)",
            "scipy.linalg.get_blas_funcs('gemm')": "returns the dgemm wrapper (memo cleared)",
            "CuPy @, matmul, dot, tensordot, inner, einsum, cupy.linalg, cupyx.scipy":
                "CuPy's cuBLAS functions (gemmEx, gemmStridedBatchedEx, dgemm, zgemm, "
                "...StridedBatched), float64/complex128; docs/gpu-arrays.md",
            "torch mm, addmm, bmm, baddbmm (matmul, @, linear, einsum, backward)":
                "PyTorch dispatcher kernels on the CUDA and CPU keys; docs/gpu-arrays.md",
        },
        "installed_wrappers": patches.installed_wrappers(),
        "not_intercepted": ([] if blashook.available() else [
            "ndarray.dot (method of an immutable type)",
            "names bound before installation (from numpy import dot)",
            "NumPy internals holding their own reference (np.cov, tensordot's dot)",
        ]) + [
            "SciPy internals and compiled code (expm, cython_blas: SciPy's own BLAS)",
            "GEMMs inside LAPACK (solve, eig, qr, ...) and compiled extensions",
            "get_blas_funcs('gemm', ilp64=True) (scipy.linalg._fblas_64)",
            "float32, complex64, integer, object products; ndarray subclasses",
            "complex128 products that reach BLAS directly (ndarray.dot, np.cov): the BLAS "
            "hook patches the float64 GEMM/SYRK only",
        ],
        "environment": {k: {"value": v, "known": k in known} for k, v in env_vars.items()},
        "start_hook": {"pth_installed": importlib.util.find_spec("_ozaki_backend_start")
                       is not None},
    }
