"""What ``scripts/dask_gpu.py`` and ``scripts/multi_gpu_dask.py`` share: operands made
by the workers in place, timed persists, the sampled-rows error, the cluster, and the
table / JSON output.

Operands are never built in the client: each chunk is drawn on the worker that holds it
from a seed and its block index (``numpy`` or ``cupy`` generator), so a chunk has the
same values wherever it is made and a product's inputs need not travel between workers.
"""

from __future__ import annotations

import json
import os
import time

import dask
import dask.array as da
import numpy as np
from dask.core import flatten
from distributed import wait

import ozaki_backend.dask as od


def xp_of(name):
    """The array module called ``name`` ("numpy" or "cupy")."""
    if name == "cupy":
        import cupy

        return cupy
    return np


def _draw(x, block_info=None, seed=0, xp_name="numpy", offset=(0, 0)):
    """One chunk of standard normal entries, from ``seed`` and the chunk's index (plus
    ``offset`` blocks: the index in the whole matrix when this array is a panel)."""
    xp = xp_of(xp_name)
    loc = [i + o for i, o in zip(block_info[None]["chunk-location"], offset)]
    rng = xp.random.default_rng(np.random.SeedSequence([seed, *loc]).generate_state(2))
    return rng.standard_normal(block_info[None]["chunk-shape"])


def _meta(xp_name):
    return xp_of(xp_name).empty((0, 0), dtype=np.float64)


def random_matrix(shape, chunks, seed, xp_name="numpy", *, offset=(0, 0), name=None):
    """A lazy dask array of standard normal float64 entries, drawn chunk by chunk by
    the worker that computes the chunk (NumPy or CuPy chunks). A panel of a larger
    matrix gives its first block's index there as ``offset`` (uniform chunks)."""
    template = da.empty(shape, chunks=chunks, dtype=np.float64)
    return template.map_blocks(_draw, seed=seed, xp_name=xp_name, offset=tuple(offset),
                               dtype=np.float64, meta=_meta(xp_name), name=name)


def on_worker(worker, build):
    """``build()``'s dask array with every task it creates pinned to ``worker``."""
    if worker is None:
        return build()
    with dask.annotate(workers=[worker], allow_other_workers=False):
        return build()


def _synchronize_device():
    """Wait for the GPU work a worker has queued (a CuPy task is done in dask's eyes
    once its kernels are launched, not finished)."""
    import sys

    if "cupy" in sys.modules:
        sys.modules["cupy"].cuda.Device().synchronize()


def timed_persist(client, x):
    """``(persisted x, seconds)``: wall time until every chunk of ``x`` is computed,
    its GPU work included (every worker's device synchronised)."""
    t0 = time.perf_counter()
    y = client.persist(x, optimize_graph=False)   # keep the worker annotations
    wait(y)
    client.run(_synchronize_device)
    return y, time.perf_counter() - t0


def _known(keys, dask_scheduler=None):
    return sum(k in dask_scheduler.tasks for k in keys)


def forget(client, y):
    """Drop the persisted ``y`` from the cluster and wait until the scheduler has
    forgotten its keys, so that a repeat of the same graph (same keys) computes again
    instead of finding it (or racing its cancellation)."""
    keys = list(flatten(y.__dask_keys__()))
    client.cancel(y, force=True)
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline and (
            any(k in client.futures for k in keys) or client.run_on_scheduler(_known, keys)):
        time.sleep(0.02)


def _outgoing(dask_worker=None):
    return dask_worker.transfer_outgoing_bytes_total


def moved_bytes(client):
    """Bytes the workers have sent each other so far (chunks moved between them)."""
    return sum(client.run(_outgoing).values())


def _to_host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _panel_reference(a_rows, b_panel):
    """On a worker: the double-double reference of ``a_rows @ b_panel`` on the panel's
    device, returned to the host."""
    from ozaki_backend.testing import sampled_rows_reference

    xp = xp_of("cupy" if type(b_panel).__module__.startswith("cupy") else "numpy")
    hi, lo = sampled_rows_reference(xp.asarray(a_rows), b_panel)
    return _to_host(hi), _to_host(lo)


def host_rows(X, rows):
    """Rows ``rows`` of the dask array ``X`` as one NumPy array in the client."""
    return X[rows].map_blocks(_to_host, dtype=np.float64, meta=np.empty((0, 0))).compute()


def reference_rows(A, B, rows):
    """``(hi, lo)`` on the host: the sampled-rows oracle (``ozaki_backend.testing``)
    of ``(A @ B)[rows]``, one column panel of ``B`` at a time on the workers (the
    oracle holds five slices of its ``B``)."""
    a_rows = host_rows(A, rows)
    parts, start = [], 0
    for width in B.chunks[1]:
        parts.append(dask.delayed(_panel_reference)(a_rows, B[:, start:start + width]))
        start += width
    done = dask.compute(*parts)
    return (np.concatenate([h for h, _ in done], axis=1),
            np.concatenate([lo for _, lo in done], axis=1))


def sampled_error(C_rows, ref):
    """Max relative error of the host rows ``C_rows`` against ``reference_rows``."""
    from ozaki_backend.testing import sampled_rows_error

    return sampled_rows_error(C_rows, ref)


def make_cluster(workers, engine):
    """One worker per GPU (``ozaki_backend.dask.local_gpu_cluster``); for a CPU-engine
    trial run, the same cluster without dask-cuda (no GPU is touched)."""
    return od.local_gpu_cluster(workers, use_dask_cuda=engine == "cuda")


def cluster_kind(cluster):
    return type(cluster).__name__


def tflops(m, n, k, seconds):
    return 2.0 * m * n * k / seconds / 1e12


def write_json(rows, meta, path):
    """Write ``{"meta": meta, "rows": rows}`` to ``path`` (into ``$OUT`` when set and
    ``path`` is relative)."""
    out = os.environ.get("OUT")
    if out and not os.path.isabs(path):
        path = os.path.join(out, path)
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    return path


def print_table(rows, columns):
    """Rows (dicts) as an aligned text table of ``columns`` ``[(key, header, fmt)]``."""
    cells = [[h for _, h, _ in columns]]
    for r in rows:
        cells.append([("" if r.get(k) is None else fmt.format(r[k])) for k, _, fmt in columns])
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)))
