"""Dask integration: route the block products of ``dask.array`` on every worker, and
read what the workers did.

Needs the ``[dask]`` extra (``dask[array]``, ``distributed``); ``[dask-cuda]`` adds
dask-cuda for one worker per GPU. Never imported by ``import ozaki_backend``; it sits
above ``dispatch`` and uses only its public faces (``enable``, ``stats``, the routing
decision).

A dask matrix product ``a @ b`` is a set of block products ``A[i, l] @ B[l, j]`` (NumPy's
``matmul`` on each pair of chunks, run by the workers' threads) followed by a sum over
``l``. Routing is process-wide on each worker (:func:`ozaki_backend.enable`), so it
reaches the worker threads whatever the cluster (threads or processes, one host or
several). CuPy chunks are not NumPy arrays: NumPy's hooks never see them, so
``a @ b`` of CuPy-backed arrays stays CuPy's DGEMM; :func:`matmul` computes each block
product with :func:`ozaki_backend.matmul` instead, on the chunk's own device.

Functions
---------
register(client, **config), unregister(client)
    Enable routing on every current and future worker of ``client`` / undo it.
stats(client, per_worker=False), reset_stats(client)
    The workers' counters summed (or per worker) / zeroed.
matmul(a, b, **options)
    A dask product whose block products are explicit emulated products (NumPy or CuPy
    chunks).
local_gpu_cluster(n_workers)
    One worker process per GPU (dask-cuda's ``LocalCUDACluster``, or a fallback).
chunks_for(m, k, n, ...), rechunk_for_product(a, b, ...)
    Block sizes above the routing floor that fit one GPU's memory.
explain(a, b) / explain(product)
    How many block products a dask product has, and how many route.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Mapping

import dask.array as da
import numpy as np
from distributed import WorkerPlugin

from .dispatch import config as _config
from .dispatch import costmodel as _costmodel
from .dispatch import disable as _disable
from .dispatch import enable as _enable
from .dispatch import reset_stats as _reset_stats
from .dispatch import routing as _routing
from .dispatch import stats as _stats
from .plan import Plan

__all__ = ["register", "unregister", "stats", "reset_stats", "format_stats", "matmul",
           "chunks_for", "rechunk_for_product", "explain", "Explanation", "RoutingPlugin",
           "local_gpu_cluster"]

#: The name the worker plugin is registered under (one per client).
PLUGIN_NAME = "ozaki-backend-routing"

#: Identifies this process, so that workers sharing one (``processes=False``, whose
#: counters are one set) are counted once.
_PROCESS_TOKEN = uuid.uuid4().hex

#: ``client.id`` -> the config dict given to :func:`register` (read by :func:`explain`).
_registered: dict = {}


# --------------------------------------------------------------------- the plugin
class RoutingPlugin(WorkerPlugin):
    """Worker plugin: :func:`ozaki_backend.enable` with ``config`` on the worker at
    start-up (current workers at registration, later ones when they join), and
    :func:`ozaki_backend.disable` when removed or when the worker closes.

    Parameters
    ----------
    config : dict
        Keys as for :func:`ozaki_backend.enable`, already validated by :func:`register`.
    """

    name = PLUGIN_NAME

    def __init__(self, config: dict):
        self.config = dict(config)

    def setup(self, worker):
        from .dispatch import env

        # Each worker process prints its own report at exit under OZAKI_BACKEND_STATS=1:
        # named, so that the reports can be told apart (stats() sums them).
        env.set_report_label(f"dask worker {worker.address}")
        _enable(**self.config)

    def teardown(self, worker):
        from .dispatch import env

        env.set_report_label(None)
        _disable()


def _validated(config: dict) -> dict:
    """``config`` checked here, in the client's process (bad keys fail at the call,
    not in every worker's log)."""
    _config.Config.build(None, config, "register")
    return dict(config)


def register(client, **config) -> None:
    """Route matrix products on every current and future worker of ``client``.

    Parameters
    ----------
    client : distributed.Client
    **config
        Keys as for :func:`ozaki_backend.enable` (``engine``, ``precision``,
        ``min_size`` ...). ``engine="cuda"`` on a dask-cuda cluster uses each worker's
        own GPU (dask-cuda sets ``CUDA_VISIBLE_DEVICES`` per worker).

    Raises
    ------
    TypeError, ValueError
        An unknown key or a bad value, at the call (before anything reaches a worker).

    Notes
    -----
    Registering again replaces the configuration (the plugin has one name). With
    ``processes=False`` the workers share the client's process, so routing is enabled
    process-wide there too, the client's own products included.
    """
    cfg = _validated(config)
    plugin = RoutingPlugin(cfg)
    if hasattr(client, "register_plugin"):
        client.register_plugin(plugin, name=PLUGIN_NAME)
    else:   # distributed < 2023.9
        client.register_worker_plugin(plugin, name=PLUGIN_NAME)
    _registered[client.id] = cfg


def unregister(client) -> None:
    """Undo :func:`register`: routing off on every worker, the plugin removed (workers
    that join later no longer enable routing).

    Parameters
    ----------
    client : distributed.Client

    Raises
    ------
    ValueError
        ``client`` has no ozaki_backend plugin registered.
    """
    try:
        client.unregister_worker_plugin(PLUGIN_NAME)   # calls teardown on each worker
    except ValueError as exc:
        raise ValueError(f"no ozaki_backend plugin is registered on {client!r}") from exc
    _registered.pop(client.id, None)


# --------------------------------------------------------------------- clusters
#: Set for every worker :func:`local_gpu_cluster` starts (the machines' rule: NVLink
#: multicast stays off in NCCL).
GPU_WORKER_ENV = {"NCCL_NVLS_ENABLE": "0"}


def local_gpu_cluster(n_workers: int | None = None, *, threads_per_worker: int = 1,
                      use_dask_cuda: bool = True, **kwargs):
    """A local cluster with one worker process per GPU.

    dask-cuda's ``LocalCUDACluster`` where it works (host and device spilling off,
    so that timings are not spilling's), else (with a warning when dask-cuda is
    installed but fails) a cluster of ``distributed.Nanny`` workers, worker ``i``
    started with ``CUDA_VISIBLE_DEVICES`` set to the i-th visible device: either way
    each worker's current device is its own GPU, which the CUDA engine uses.

    Parameters
    ----------
    n_workers : int, optional
        Workers (GPUs ``0 .. n_workers - 1``). Default: every GPU CuPy sees.
    threads_per_worker : int
        Threads each worker runs tasks in (1: one block product per GPU at a time).
    use_dask_cuda : bool
        Try dask-cuda first.
    **kwargs
        Passed to ``LocalCUDACluster`` (or to ``distributed.SpecCluster``).

    Returns
    -------
    distributed.deploy.Cluster
        Use it as a context manager, or ``close()`` it.
    """
    import os

    if n_workers is None:
        import cupy

        n_workers = cupy.cuda.runtime.getDeviceCount()
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"n_workers must be a positive int; got {n_workers!r}")
    os.environ.update(GPU_WORKER_ENV)
    if use_dask_cuda:
        opts = dict(n_workers=n_workers, threads_per_worker=threads_per_worker,
                    device_memory_limit=0, memory_limit=0, dashboard_address=":0")
        opts.update(kwargs)
        try:
            from dask_cuda import LocalCUDACluster

            return LocalCUDACluster(**opts)
        except Exception as exc:   # not installed, or its CUDA bindings do not load
            import warnings

            warnings.warn(f"dask-cuda is not usable here ({type(exc).__name__}: {exc}); "
                          "starting one distributed.Nanny worker per GPU with "
                          "CUDA_VISIBLE_DEVICES set instead", stacklevel=2)
    from distributed import Nanny, Scheduler, SpecCluster

    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = devices.split(",") if devices else [str(i) for i in range(n_workers)]
    if len(ids) < n_workers:
        raise ValueError(f"{n_workers} workers asked for, CUDA_VISIBLE_DEVICES names "
                         f"{len(ids)} devices")
    workers = {i: {"cls": Nanny,
                   "options": {"nthreads": threads_per_worker, "memory_limit": 0,
                               "env": dict(GPU_WORKER_ENV, CUDA_VISIBLE_DEVICES=ids[i])}}
               for i in range(n_workers)}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    return SpecCluster(workers=workers, scheduler=scheduler, **kwargs)


# --------------------------------------------------------------------- counters
def _as_dict(s) -> dict:
    """A stats result as plain nested dicts (``stats()`` may return a Mapping type)."""
    s = s.as_dict() if hasattr(s, "as_dict") else s
    return {k: _as_dict(v) if isinstance(v, Mapping) else v for k, v in s.items()}


def _worker_stats():
    """Run on a worker by :func:`stats`: this process's token and its counters."""
    return _PROCESS_TOKEN, _as_dict(_stats())


def _add(total: dict, part: dict) -> None:
    """Add the counters of ``part`` into ``total`` (nested dicts key by key)."""
    for key, v in part.items():
        if isinstance(v, dict):
            _add(total.setdefault(key, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[key] = total.get(key, 0) + v


def _summed(parts) -> dict:
    total: dict = {}
    for part in parts:
        _add(total, part)
    for key in ("routed", "native", "fallback"):
        total.setdefault(key, 0)
    for key in ("reasons", "routed_by_entry", "seconds", "moduli", "certificate",
                "c_fast_path"):
        total.setdefault(key, {})
    for outcome in ("routed", "native", "fallback"):
        total["reasons"].setdefault(outcome, {})
    total["moduli"] = dict(sorted(total["moduli"].items()))
    # A per-thread value: meaningless across workers.
    total["last_moduli"] = None
    return total


def stats(client, per_worker: bool = False) -> dict:
    """What the backend did on the workers of ``client``, summed.

    Parameters
    ----------
    client : distributed.Client
    per_worker : bool
        Return the counters of each worker instead of their sum.

    Returns
    -------
    dict
        The keys of :func:`ozaki_backend.stats` (``routed``, ``native``, ``fallback``,
        ``reasons`` by outcome and reason, ``routed_by_entry``, ``seconds``,
        ``moduli``, ``certificate``, ``c_fast_path``), each count summed over the
        worker processes; ``last_moduli`` is None (it is per thread). With
        ``per_worker=True``: ``{worker address: stats}``; workers that share one
        process (``LocalCluster(processes=False)``) share one set of counters, listed
        once under their addresses joined by ``", "``, so the per-worker entries
        always add up to the sum.

    Notes
    -----
    Counters are process-wide on each worker and start at the worker's start (or the
    last :func:`reset_stats`). A worker that has left takes its counts with it.
    """
    by_process: dict = {}
    for addr, (token, s) in sorted(client.run(_worker_stats).items()):
        by_process.setdefault(token, ([], s))[0].append(addr)
    if per_worker:
        return {", ".join(addrs): _summed([s]) for addrs, s in by_process.values()}
    return _summed(s for _, s in by_process.values())


def reset_stats(client) -> None:
    """Zero the counters on every worker of ``client``."""
    client.run(_reset_stats)


def format_stats(s: dict) -> str:
    """A :func:`stats` sum (or one worker's entry) as the short text block of
    :func:`ozaki_backend.dispatch.format_stats`."""
    from .dispatch import format_stats as _format

    return _format(s)


# --------------------------------------------------------------------- products
def _block_product(a, b, options):
    """One block product, as dask's own ``matmul`` lays it out (the contraction axis
    kept as a length-1 axis, summed afterwards)."""
    from ._api import matmul as _matmul

    c = _matmul(a, b, **options)
    return c[..., None, :]


def matmul(a, b, **options):
    """``a @ b`` of two dask arrays, each block product an explicit emulated product.

    Unlike ``a @ b`` under :func:`register` (which routes NumPy chunks the routing
    rule accepts), every block product here is :func:`ozaki_backend.matmul`, whatever
    its size, and CuPy chunks stay on their device (CuPy arrays in, CuPy arrays out).

    Parameters
    ----------
    a, b : dask.array.Array
        At least 2-d, float64 after promotion; the chunks of ``a``'s last axis must
        equal those of ``b``'s second to last.
    **options
        As for :func:`ozaki_backend.matmul` (``precision``, ``bits``, ``moduli``,
        ``engine`` ...).

    Returns
    -------
    dask.array.Array
        The lazy product; each output block is the sum over the contraction blocks.

    Raises
    ------
    ValueError
        0-d or 1-d operands, shapes or contraction chunks that do not match.
    TypeError, ValueError
        Bad options (checked at the call).
    """
    from ._options import normalize

    normalize(**options)      # bad options fail here, not on a worker
    a, b = da.asanyarray(a), da.asanyarray(b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError("ozaki_backend.dask.matmul needs operands of at least 2 "
                         f"dimensions; got {a.ndim} and {b.ndim}")
    if a.shape[-1] != b.shape[-2]:
        raise _mismatch(a.shape[-1], b.shape[-2])
    if a.chunks[-1] != b.chunks[-2]:
        raise ValueError("the chunks of a's last axis and b's second to last differ "
                         f"({a.chunks[-1]} and {b.chunks[-2]}): rechunk one of them "
                         "(rechunk_for_product does both)")
    if a.ndim < b.ndim:
        a = a[(b.ndim - a.ndim) * (None,)]
    elif a.ndim > b.ndim:
        b = b[(a.ndim - b.ndim) * (None,)]
    nd = a.ndim
    out_ind = tuple(range(nd + 1))
    lhs_ind = tuple(range(nd))
    rhs_ind = tuple(range(nd - 2)) + (lhs_ind[-1], nd)
    blocks = da.blockwise(_block_product, out_ind, a, lhs_ind, b, rhs_ind,
                          options=dict(options), adjust_chunks={lhs_ind[-1]: 1},
                          dtype=np.float64, concatenate=False, token="ozaki-matmul",
                          meta=da.utils.meta_from_array(a._meta, ndim=nd + 1,
                                                        dtype=np.float64))
    return blocks.sum(axis=-2, dtype=np.float64)


# --------------------------------------------------------------------- block sizes
def _mismatch(ka: int, kb: int) -> ValueError:
    """NumPy's error for ``matmul`` operands whose inner dimensions differ."""
    return ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                      f"(size {kb} is different from {ka})")


def _matrix_pair(a, b, who: str):
    """``a``, ``b`` as dask arrays, checked to be the 2-d operands of ``a @ b``."""
    a, b = da.asanyarray(a), da.asanyarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"{who} takes 2-d operands; got {a.ndim}-d and {b.ndim}-d")
    if a.shape[1] != b.shape[0]:
        raise _mismatch(a.shape[1], b.shape[0])
    return a, b


def _block_bytes(bm: int, bk: int, bn: int, options: dict) -> int:
    """Device bytes of one routed block product: its operands and result in float64
    and the engine's workspace (:attr:`Plan.workspace_bytes`)."""
    p = Plan(bm, bn, bk, **options)
    return 8 * (bm * bk + bk * bn + bm * bn) + p.workspace_bytes


def _device_memory() -> int:
    """Free memory of the current GPU (bytes); RuntimeError where there is none."""
    try:
        import cupy

        free, _total = cupy.cuda.runtime.memGetInfo()
        return int(free)
    except Exception as exc:   # no CuPy, no device
        raise RuntimeError("no GPU here to size blocks for: pass memory_bytes=") from exc


def chunks_for(m: int, k: int, n: int, *, memory_bytes: int | None = None,
               workers: int = 1, multiple: int = 256, fraction: float = 0.85,
               floor: int | None = None, **options) -> tuple[int, int, int]:
    """Block sizes ``(bm, bk, bn)`` for a dask product ``(m, k) @ (k, n)``.

    The rule: the largest blocks (multiples of ``multiple``, or the whole dimension)
    whose operands, result and emulation workspace fit ``fraction`` of one GPU's
    memory; then, while there are fewer output blocks than ``workers`` and the blocks
    stay at or above the routing floor, halve the larger of ``bm``, ``bn``. Every block
    product ``bm * bn * bk`` must be at least the floor: if even the whole product is
    below it, nothing routes and the sizes say so by raising.

    Parameters
    ----------
    m, k, n : int
        The product's shape.
    memory_bytes : int, optional
        One GPU's memory to fit in (bytes). Default: the current GPU's free memory;
        required where there is no GPU.
    workers : int
        Workers (GPUs) the product should keep busy: at least this many output blocks
        where the floor allows.
    multiple : int
        Block sizes are multiples of this (the engines' tiles are multiples of 64).
    fraction : float
        Share of ``memory_bytes`` a block product may take (dask holds a few blocks
        at a time besides).
    floor : int, optional
        Smallest ``m*n*k`` routed. Default: the floor of ``engine`` and
        ``min_size`` in ``options`` (``engine="cuda"`` by default: the cost model's).
    **options
        ``engine``, ``min_size`` and the numerical options of
        :func:`ozaki_backend.matmul` (they set the moduli count, hence the workspace).

    Returns
    -------
    (bm, bk, bn) : tuple of int

    Raises
    ------
    ValueError
        Non-positive sizes, or no block size both fits and reaches the floor.
    RuntimeError
        No ``memory_bytes`` and no GPU to measure.
    """
    for name, v in (("m", m), ("k", k), ("n", n), ("workers", workers),
                    ("multiple", multiple)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int; got {v!r}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction!r}")
    options = dict(options)
    engine = options.pop("engine", "cuda")
    min_size = options.pop("min_size", "auto")
    _config.Config.build(None, dict(options, engine=engine, min_size=min_size),
                         "chunks_for")     # bad options fail here
    if floor is None:
        if min_size != "auto":
            floor = int(min_size)
        elif engine == "cpu":
            floor = 0
        else:   # the cost model's floor: below it routing never pays off
            floor = _costmodel.cost_model().floor()
    budget = int((memory_bytes if memory_bytes is not None else _device_memory()) * fraction)

    def size(d, s):
        return d if s >= d else max(multiple, s // multiple * multiple)

    s = max(m, k, n)
    while _block_bytes(size(m, s), size(k, s), size(n, s), options) > budget:
        if s <= multiple:
            raise ValueError(f"no block of {multiple} fits {budget} bytes")
        s = max(multiple, s // 2)
    bm, bk, bn = size(m, s), size(k, s), size(n, s)
    if bm * bn * bk < floor:
        raise ValueError(f"the largest block that fits, ({bm} x {bk}) @ ({bk} x {bn}), "
                         f"is below the routing floor m*n*k >= {floor}: nothing would "
                         "route (the product is too small for the engine to pay off)")

    def nblocks(bm, bn):
        return math.ceil(m / bm) * math.ceil(n / bn)

    while nblocks(bm, bn) < workers:
        if bm >= bn and bm > multiple:
            nbm = size(m, bm // 2)
            cand = (nbm, bn)
        elif bn > multiple:
            cand = (bm, size(n, bn // 2))
        else:
            break
        if cand[0] * cand[1] * bk < floor or cand == (bm, bn):
            break
        bm, bn = cand
    return int(bm), int(bk), int(bn)


def rechunk_for_product(a, b, **kwargs):
    """``a`` and ``b`` rechunked to :func:`chunks_for`'s block sizes.

    Parameters
    ----------
    a, b : dask.array.Array
        2-d operands of ``a @ b``.
    **kwargs
        As for :func:`chunks_for`.

    Returns
    -------
    (dask.array.Array, dask.array.Array)
    """
    a, b = _matrix_pair(a, b, "rechunk_for_product")
    bm, bk, bn = chunks_for(a.shape[0], a.shape[1], b.shape[1], **kwargs)
    return a.rechunk((bm, bk)), b.rechunk((bk, bn))


# --------------------------------------------------------------------- explain
class Explanation:
    """How the block products of one dask product would be decided.

    Attributes
    ----------
    blocks : int
        Block products.
    routed, native : int
        How many the routing rule sends to the backend / leaves to the chunk's library.
    reasons : dict
        ``{(outcome, reason): block products}``.
    shapes : dict
        ``{(bm, bk, bn): (block products of that shape, Decision)}``.
    """

    def __init__(self, shapes: dict):
        self.shapes = shapes
        self.blocks = sum(c for c, _ in shapes.values())
        self.routed = sum(c for c, d in shapes.values() if d.routed)
        self.native = self.blocks - self.routed
        reasons: Counter = Counter()
        for c, d in shapes.values():
            reasons[("routed" if d.routed else "native", d.reason)] += c
        self.reasons = dict(reasons)

    def __repr__(self):
        lines = [f"dask product: {self.blocks} block products, {self.routed} routed, "
                 f"{self.native} native"]
        for (bm, bk, bn), (c, d) in sorted(self.shapes.items(), reverse=True):
            what = "native"
            if d.routed:
                what = "routed" + (f" (engine={d.engine})" if d.engine else "")
            lines.append(f"  {c:5d} x ({bm} x {bk}) @ ({bk} x {bn}): {what}: {d.reason}")
        return "\n".join(lines)

    __str__ = __repr__


def _is_cupy(meta) -> bool:
    return type(meta).__module__.split(".")[0] == "cupy"


def _decide_blocks(row_chunks, k_chunks, col_chunks, cfg, *, chunk_type=None,
                   explicit=False) -> Explanation:
    shapes: dict = {}
    counts = Counter((bm, bk, bn) for bm in row_chunks for bk in k_chunks
                     for bn in col_chunks)
    D = _routing.Decision
    for (bm, bk, bn), c in counts.items():
        if explicit:
            d = D(True, "explicit ozaki_backend.dask.matmul", engine=None,
                  entry="ozaki_backend.matmul", m=bm, n=bn, k=bk)
        elif chunk_type is not None:
            d = D(False, f"{chunk_type} chunks: NumPy's hooks never see them (their own "
                  "library computes the product); use ozaki_backend.dask.matmul",
                  entry="@/np.matmul", m=bm, n=bn, k=bk)
        elif cfg is None:
            d = D(False, "routing is not enabled (no register() on a client, no "
                  "enable() or scope here)", entry="@/np.matmul", m=bm, n=bn, k=bk)
        else:
            d = _routing.decide(cfg, bm, bn, bk, 1, "@/np.matmul")
        shapes[(bm, bk, bn)] = (c, d)
    return Explanation(shapes)


def _config_for(client, config):
    """The routing config :func:`explain` applies, or None when routing is off."""
    if config:
        return _config.Config.build(None, config, "explain")
    if client is not None:
        if client.id not in _registered:
            return None
        return _config.Config.build(None, _registered[client.id], "explain")
    if len(_registered) == 1:
        return _config.Config.build(None, next(iter(_registered.values())), "explain")
    node = _config.current()
    return node.config if node.enabled else None


def _matmul_layers(product):
    """``[(row_chunks, k_chunks, col_chunks, chunk type or None, explicit)]`` of the
    matrix-product layers in ``product``'s graph."""
    graph = product.__dask_graph__()
    layers = getattr(graph, "layers", {})
    found = []
    for name, layer in layers.items():
        explicit = name.startswith("ozaki-matmul-")
        if not (explicit or name.startswith("matmul-")):
            continue
        indices = getattr(layer, "indices", None)
        if not indices or len(indices) != 2:
            continue
        ins = []
        for in_name, _ind in indices:
            ann = getattr(layers.get(in_name), "collection_annotations", None) or {}
            ins.append(ann)
        if not all("chunks" in x for x in ins):
            continue
        ca, cb = ins[0]["chunks"], ins[1]["chunks"]
        if len(ca) != 2 or len(cb) != 2:
            raise ValueError("explain() of a dask product reads 2-d products only; "
                             f"this one has {len(ca)}-d and {len(cb)}-d operands")
        ct = ins[0].get("chunk_type")
        kind = None
        ct_name = ct if isinstance(ct, str) else f"{getattr(ct, '__module__', '')}."
        if ct_name.split(".")[0] == "cupy":
            kind = "CuPy"
        found.append((ca[0], ca[1], cb[1], kind, explicit))
    return found


def explain(a, b=None, *, client=None, **config) -> Explanation:
    """How many block products a dask product has and how many route.

    Parameters
    ----------
    a, b : dask.array.Array
        ``explain(a, b)``: the 2-d operands of ``a @ b``. ``explain(product)``: a
        product built with ``@`` / :func:`dask.array.matmul` or :func:`matmul` (its
        graph's matrix-product layers are read).
    client : distributed.Client, optional
        Apply the configuration :func:`register` gave this client.
    **config
        Apply this configuration (keys as for :func:`ozaki_backend.enable`) instead.

    Returns
    -------
    Explanation
        Printable; ``blocks``, ``routed``, ``native``, ``reasons`` and ``shapes``.

    Notes
    -----
    Without ``client`` or ``config``: the configuration of the one client registered
    in this process, else the calling context's (enabled scope or :func:`enable`),
    else nothing routes. The decision is the routing rule's for each block shape
    (:func:`ozaki_backend.dispatch.routing.decide`); operands with NaN or infinity,
    which are checked when the block is computed, still take the native path.
    """
    cfg = _config_for(client, config)
    if b is None:
        layers = _matmul_layers(da.asanyarray(a))
        if not layers:
            raise ValueError("no matrix product found in this dask array's graph; pass "
                             "the operands: explain(a, b)")
        merged: dict = {}
        for rows, ks, cols, kind, explicit in layers:
            e = _decide_blocks(rows, ks, cols, cfg, chunk_type=kind, explicit=explicit)
            for shape, (c, d) in e.shapes.items():
                prev = merged.get(shape)
                merged[shape] = (c + (prev[0] if prev else 0), d)
        return Explanation(merged)
    a, b = _matrix_pair(a, b, "explain(a, b)")
    if a.chunks[1] != b.chunks[0]:
        # dask's matmul unifies the contraction chunks first: decide on those.
        _, (a, b) = da.core.unify_chunks(a, "ik", b, "kj")
    if not (np.promote_types(a.dtype, b.dtype) == np.float64
            and all(x.dtype.kind in "fiub" for x in (a, b))):
        d = _routing.Decision(False, f"dtypes {a.dtype}, {b.dtype}: the product is not "
                              "float64", entry="@/np.matmul")
        counts = len(a.chunks[0]) * len(a.chunks[1]) * len(b.chunks[1])
        return Explanation({(a.shape[0], a.shape[1], b.shape[1]): (counts, d)})
    kind = "CuPy" if _is_cupy(a._meta) or _is_cupy(b._meta) else None
    return _decide_blocks(a.chunks[0], a.chunks[1], b.chunks[1], cfg, chunk_type=kind)


