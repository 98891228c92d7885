"""Issue 15's single-GPU run: a dask product on one GPU worker next to one
``ozaki_backend.matmul`` call and to native.

A cluster with one worker (dask-cuda's ``LocalCUDACluster``, else a local cluster with
``CUDA_VISIBLE_DEVICES=0``), ``ozaki_backend.dask.register(client, engine=...)``, and an
``n x n x n`` product in ``block x block`` chunks:

* NumPy chunks: ``A @ B`` routed block by block by the registered worker (each block
  product goes host -> GPU -> host), next to one ``ozaki_backend.matmul`` call on the
  whole NumPy operands (and, with ``--host-native``, NumPy's own product);
* CuPy chunks: ``ozaki_backend.dask.matmul(A, B)`` (explicit emulated block products on
  the device) and ``A @ B`` (CuPy's DGEMM per block), next to one
  ``ozaki_backend.matmul`` and one ``cupy.matmul`` call on the whole device operands.

Operands are drawn by the worker and persisted before timing; each single call runs on
the worker too (the operands concatenated there first, not timed). Prints a table and
writes JSON (``--json``, into ``$OUT`` when set).

H200: ``python3 scripts/dask_gpu.py`` (32768^2 in 8192^2 blocks). Trial run without a
GPU: ``python3 scripts/dask_gpu.py --engine cpu --n 512 --block 256``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import dask
import numpy as np
from distributed import Client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dask_bench_common as common  # noqa: E402

import ozaki_backend  # noqa: E402
import ozaki_backend.dask as od  # noqa: E402


def _sync(xp_name):
    if xp_name == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _single(a, b, method, engine, xp_name, repeats):
    """On the worker: best of ``repeats`` timed single products of the whole operands."""
    xp = common.xp_of(xp_name)
    a, b = xp.ascontiguousarray(a), xp.ascontiguousarray(b)
    if xp_name == "cupy":
        # Blocks the dask runs left in CuPy's pool: give the one big product the room.
        xp.get_default_memory_pool().free_all_blocks()
    best = float("inf")
    for _ in range(repeats):
        _sync(xp_name)
        t0 = time.perf_counter()
        if method == "ozaki":
            c = ozaki_backend.matmul(a, b, engine=engine)
        else:
            with ozaki_backend.disabled():
                c = xp.matmul(a, b)
        _sync(xp_name)
        best = min(best, time.perf_counter() - t0)
        del c
    return best


def _warm_up(client, engine, xp_names):
    """Compile the kernels and measure the host once on the worker before timing."""
    for xp_name in xp_names:
        A = common.random_matrix((1024, 1024), 512, 7, xp_name)
        od.matmul(A, A, engine=engine).compute()
        if xp_name == "numpy":
            (A @ A).compute()
    od.reset_stats(client)


def run_dask(client, label, product, n, rows, ref, repeats):
    """Time ``product`` (a lazy dask array) ``repeats`` times; its stats and its error
    on ``rows`` against ``ref`` (None: not checked)."""
    best, C = float("inf"), None
    od.reset_stats(client)
    for r in range(repeats):
        if C is not None:
            common.forget(client, C)
        C, t = common.timed_persist(client, product)
        best = min(best, t)
    s = od.stats(client)
    err = None if ref is None else common.sampled_error(common.host_rows(C, rows), ref)
    common.forget(client, C)
    return {"case": label, "seconds": best, "tflops": common.tflops(n, n, n, best),
            "routed": s["routed"], "native": s["native"], "fallback": s["fallback"],
            "below_floor": s["c_fast_path"]["below_floor"],
            "moduli": s["moduli"], "max_rel_err": err}


def run_single(client, label, method, engine, xp_name, n, A, B, repeats):
    t = dask.delayed(_single)(A, B, method, engine, xp_name, repeats).compute()
    return {"case": label, "seconds": t, "tflops": common.tflops(n, n, n, t)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--block", type=int, default=8192)
    p.add_argument("--sources", default=None,
                   help="numpy,cupy (default; numpy only with --engine cpu)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rows", type=int, default=8, help="sampled rows for the error")
    p.add_argument("--host-native", action="store_true",
                   help="also time NumPy's own product (minutes at n = 32768)")
    p.add_argument("--no-check", action="store_true", help="skip the sampled-rows error")
    p.add_argument("--json", default="dask_gpu.json")
    args = p.parse_args(argv)
    sources = (args.sources or ("numpy,cupy" if args.engine == "cuda" else "numpy")).split(",")
    n, blk = args.n, args.block
    rows = np.random.default_rng(1).choice(n, size=min(args.rows, n), replace=False)
    rows.sort()

    results = []
    with common.make_cluster(1, args.engine) as cluster, Client(cluster) as client:
        kind = common.cluster_kind(cluster)
        print(f"cluster: {kind}, workers {list(client.scheduler_info()['workers'])}")
        od.register(client, engine=args.engine)
        _warm_up(client, args.engine, sources)
        for xp_name in sources:
            A = common.random_matrix((n, n), blk, 1, xp_name)
            B = common.random_matrix((n, n), blk, 2, xp_name)
            A, _ = common.timed_persist(client, A)
            B, _ = common.timed_persist(client, B)
            print(od.explain(A @ B, client=client))
            ref = None if args.no_check else common.reference_rows(A, B, rows)
            if xp_name == "numpy":
                results.append(run_dask(client, "NumPy chunks: dask A @ B, routed blocks",
                                        A @ B, n, rows, ref, args.repeats))
                if args.host_native:
                    od.unregister(client)
                    results.append(run_dask(client, "NumPy chunks: dask A @ B, native",
                                            A @ B, n, rows, ref, args.repeats))
                    od.register(client, engine=args.engine)
                results.append(run_single(client, "NumPy: one ozaki_backend.matmul",
                                          "ozaki", args.engine, xp_name, n, A, B,
                                          args.repeats))
                if args.host_native:
                    results.append(run_single(client, "NumPy: one native np.matmul",
                                              "native", args.engine, xp_name, n, A, B,
                                              args.repeats))
            else:
                results.append(run_dask(client, "CuPy chunks: ozaki_backend.dask.matmul",
                                        od.matmul(A, B, engine=args.engine), n, rows,
                                        ref, args.repeats))
                results.append(run_dask(client, "CuPy chunks: dask A @ B (CuPy DGEMM)",
                                        A @ B, n, rows, ref, args.repeats))
                results.append(run_single(client, "CuPy: one ozaki_backend.matmul",
                                          "ozaki", args.engine, xp_name, n, A, B,
                                          args.repeats))
                results.append(run_single(client, "CuPy: one cupy.matmul (native)",
                                          "native", args.engine, xp_name, n, A, B,
                                          args.repeats))
            del A, B
        total = od.stats(client)
        od.unregister(client)

    print(f"\n{n} x {n} x {n} float64 in {blk} x {blk} blocks, engine={args.engine}, "
          f"cluster {kind} (1 worker)")
    common.print_table(results, [("case", "case", "{}"), ("seconds", "s", "{:.3f}"),
                                 ("tflops", "TFLOPS", "{:.2f}"),
                                 ("routed", "routed", "{}"), ("moduli", "moduli", "{}"),
                                 ("max_rel_err", "max rel err", "{:.2e}")])
    print("\nworkers' stats, summed over the run:")
    print(od.format_stats(total))
    meta = {"n": n, "block": blk, "engine": args.engine, "cluster": kind,
            "rows": rows.tolist(), "stats": total}
    print("\nwrote", common.write_json(results, meta, args.json))


if __name__ == "__main__":
    main()
