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

from .. import _native, _stats
from . import config, costmodel, log, loophook, patches, route, routing

C_ERROR = "@/np.matmul: error in the C hook"


def stats() -> dict:
    """What the backend did in this process since start or the last :func:`reset_stats`.

    Returns
    -------
    dict
        ``routed``, ``native``, ``fallback``: call counts; ``reasons``: for each of
        those outcomes a ``{reason: count}`` dict (routed reasons name the engine);
        ``routed_by_entry``: routed calls per entry point (``@/np.matmul``,
        ``np.dot``, ``scipy dgemm`` ...); ``seconds``: time spent per outcome;
        ``moduli``: ``{moduli count: 2-D products}`` of the Ozaki-II products
        computed (with ``precision="fp64"`` the count is chosen per product from its
        operands, ``docs/precision.md``); ``last_moduli``: the count of this thread's
        latest such product (None before the first); ``certificate``: ``{outcome:
        2-D products}`` with outcomes ``certified``, ``uncertified`` (a fixed count
        that misses the target), ``residual pass``, ``native fallback``
        (``docs/spec.md`` §10); ``c_fast_path``: ``@``/
        ``np.matmul`` products the C hook left to NumPy without calling Python while
        some scope was active anywhere (``below_floor``, ``vector_shaped``). The C side cannot tell
        whose product it sees, so these also count other threads' products and the
        backend's own native ones; they are not part of ``native``.

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
    if c["errors"]:
        reasons["fallback"][C_ERROR] = reasons["fallback"].get(C_ERROR, 0) + c["errors"]
    out = {k: sum(v.values()) for k, v in reasons.items()}
    out.update(reasons=reasons, routed_by_entry=log.routed_by_entry(),
               seconds=snap["seconds"], moduli=snap["moduli"],
               certificate=snap["certificate"],
               symmetric=snap["symmetric"],
               last_moduli=_stats.last_moduli(),
               c_fast_path={"below_floor": c["below_floor"],
                            "vector_shaped": c["vector_shaped"]})
    return out


def reset_stats() -> None:
    """Zero every counter of :func:`stats` (process-wide)."""
    _stats.reset()
    loophook.reset_counters()
    log.reset_routed_by_entry()
    routing.recent.clear()


def format_stats(s: dict | None = None) -> str:
    """:func:`stats` as a short human-readable block."""
    s = stats() if s is None else s
    lines = [f"ozaki_backend stats: routed {s['routed']}, native {s['native']}, "
             f"fallback {s['fallback']}"]
    for outcome in ("routed", "native", "fallback"):
        for reason, n in sorted(s["reasons"].get(outcome, {}).items(), key=lambda t: -t[1]):
            lines.append(f"  {outcome:8s} {n:7d}  {reason}")
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
    no = routing.Decision
    if _native.SUSPENDED.get():
        return no(False, "inside the backend (interception suspended)", entry=entry)
    if not node.enabled:
        return no(False, "no enabled scope in this context (and enable() not in force)",
                  entry=entry)
    for x in (a, b):
        if type(x) is not np.ndarray:
            return no(False, f"operand of type {type(x).__module__}.{type(x).__qualname__}"
                      " is not a plain numpy.ndarray (NumPy's hooks give it to its own "
                      "implementation, or the wrappers pass it through unchanged)",
                      entry=entry)
    if not all(x.dtype.kind in "fiub" for x in (a, b)) or \
            np.promote_types(a.dtype, b.dtype) != np.float64:
        return no(False, f"dtypes {a.dtype}, {b.dtype}: the product is not float64",
                  entry=entry)
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


def _report() -> str:
    node = config.current()
    lines = []
    if _native.SUSPENDED.get():
        lines.append("interception suspended (running inside the backend)")
    where = "this context's scope" if config.has_scope() else "process default"
    lines.append(f"enabled here: {node.enabled} ({where})")
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
    lines.append(f"cost model: {costmodel.cost_model()!r}")
    if routing.recent:
        lines.append("recent decisions (newest last):")
        lines.extend(f"  {d}" for d in list(routing.recent)[-10:])
    return "\n".join(lines)
