"""Issue 16's multi-GPU run: the Dask integration on 1, 2, 4 ... GPUs of one host.

For each GPU count P (a fresh cluster each: dask-cuda's ``LocalCUDACluster``, else a
local cluster with ``CUDA_VISIBLE_DEVICES`` per worker; ``NCCL_NVLS_ENABLE=0`` either
way) and each size n, an ``n x n x n`` float64 product laid out so that no chunk
crosses between GPUs during the timed part:

* ``A`` is cut into P row panels, panel i made and kept on GPU i;
* each GPU makes its own copy of ``B`` (same seeds, same values);
* the bytes the workers still send each other during the product are reported
  (``moved GB``: 0 when the layout held);
* panel i of ``C`` is ``A_i @ B`` on GPU i, in ``block x block`` output blocks with the
  contraction in ``kblock`` pieces (default: whole, no partial sums).

Chunks are drawn by the workers and persisted before timing; the timed part is the
product. Cases per (P, n): CuPy chunks with ``ozaki_backend.dask.matmul`` (emulated
blocks) and with ``A @ B`` (CuPy's DGEMM blocks, the native baseline); and, for
``--numpy-size``, NumPy chunks on the host with ``A @ B`` routed by
``ozaki_backend.dask.register`` (each block product host -> GPU -> host).

Reported: time, TFLOPS, speed-up over the 1-GPU run of the same case and scaling
efficiency (speed-up / P), the emulated / native time ratio, routed block products and
moduli counts summed over the workers (and routed per worker), the max relative error
on sampled rows against the double-double oracle of ``ozaki_backend.testing``. Prints a
table and writes JSON (``--json``, into ``$OUT`` when set).

H200 x4: ``python3 scripts/multi_gpu_dask.py --gpus 1,2,4``. Trial run without a GPU:
``python3 scripts/multi_gpu_dask.py --engine cpu --gpus 1,2 --sizes 512 --numpy-size 512
--block 128``.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

import numpy as np
from distributed import Client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dask_bench_common as common  # noqa: E402

import dask.array as da  # noqa: E402

import ozaki_backend.dask as od  # noqa: E402

os.environ["NCCL_NVLS_ENABLE"] = "0"


def build_operands(workers, n, bm, bk, bn, xp_name):
    """``[(worker, A_i, B_i)]``: row panel i of A and a copy of B, both made on
    ``worker`` (lazy; names unique to this call)."""
    P = len(workers)
    tag = uuid.uuid4().hex[:8]
    rows = n // P
    out = []
    for i, w in enumerate(workers):
        A_i = common.on_worker(w, lambda: common.random_matrix(
            (rows, n), (bm, bk), 1, xp_name, offset=(i * rows // bm, 0),
            name=f"A-{xp_name}-{n}-{P}-{i}-{tag}"))
        B_i = common.on_worker(w, lambda: common.random_matrix(
            (n, n), (bk, bn), 2, xp_name, name=f"B-{xp_name}-{n}-{P}-{i}-{tag}"))
        out.append((w, A_i, B_i))
    return out


def product(panels, how, engine):
    """The lazy ``C``: each panel's product pinned to its worker, concatenated."""
    parts = []
    for w, A_i, B_i in panels:
        if how == "emulated":
            parts.append(common.on_worker(w, lambda: od.matmul(A_i, B_i, engine=engine)))
        else:
            parts.append(common.on_worker(w, lambda: A_i @ B_i))
    return da.concatenate(parts, axis=0)


def timed_case(client, panels, how, engine, n, rows, ref, repeats):
    od.reset_stats(client)
    best, C = float("inf"), None
    moved0 = common.moved_bytes(client)
    for _ in range(repeats):
        if C is not None:
            common.forget(client, C)
        C, t = common.timed_persist(client, product(panels, how, engine))
        best = min(best, t)
    moved = common.moved_bytes(client) - moved0
    total = od.stats(client)
    per = od.stats(client, per_worker=True)
    err = None if ref is None else common.sampled_error(common.host_rows(C, rows), ref)
    common.forget(client, C)
    return {"seconds": best, "tflops": common.tflops(n, n, n, best),
            "routed": total["routed"], "native": total["native"],
            "fallback": total["fallback"], "moduli": total["moduli"],
            "routed_per_worker": {w: s["routed"] for w, s in per.items()},
            "moved_gb": moved / 1e9,
            "max_rel_err": err}


def warm_up(client, workers, engine, sources):
    """Compile the kernels and measure the host once on every worker."""
    for xp_name in sources:
        panels = build_operands(workers, 512 * len(workers), 512, 512, 512, xp_name)
        C, _ = common.timed_persist(client, product(panels, "emulated", engine))
        common.forget(client, C)
    od.reset_stats(client)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--gpus", default=None, help="GPU counts, e.g. 1,2,4 (default: 1 and all)")
    p.add_argument("--sizes", default="65536,32768", help="n of the CuPy-chunk products")
    p.add_argument("--numpy-size", type=int, default=32768,
                   help="n of the NumPy-chunk product (0: none)")
    p.add_argument("--block", type=int, default=8192, help="output block (rows, columns)")
    p.add_argument("--kblock", type=int, default=0, help="contraction block (0: whole)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rows", type=int, default=8, help="sampled rows for the error")
    p.add_argument("--no-native", action="store_true", help="skip the native baselines")
    p.add_argument("--host-native", action="store_true",
                   help="also time the NumPy-chunk product with native host BLAS blocks")
    p.add_argument("--no-check", action="store_true", help="skip the sampled-rows error")
    p.add_argument("--baseline", default=None,
                   help="JSON of an earlier run whose 1-GPU rows give the speed-ups "
                        "(when this run has no 1-GPU count)")
    p.add_argument("--json", default="multi_gpu_dask.json")
    args = p.parse_args(argv)

    if args.gpus:
        counts = [int(c) for c in args.gpus.split(",")]
    else:
        import cupy

        total = cupy.cuda.runtime.getDeviceCount()
        counts = sorted({1, total})
    device_xp = "cupy" if args.engine == "cuda" else "numpy"
    cases = [(int(n), device_xp, "emulated") for n in args.sizes.split(",") if n]
    if not args.no_native:
        cases += [(int(n), device_xp, "native") for n in args.sizes.split(",") if n]
    if args.numpy_size:
        cases.append((args.numpy_size, "numpy", "routed"))
        if args.host_native:
            cases.append((args.numpy_size, "numpy", "native"))
    cases.sort(key=lambda c: (-c[0], c[1] != device_xp))

    results, refs, kinds = [], {}, set()
    for P in counts:
        with common.make_cluster(P, args.engine) as cluster, Client(cluster) as client:
            client.wait_for_workers(P)
            workers = sorted(client.scheduler_info()["workers"])
            kinds.add(common.cluster_kind(cluster))
            print(f"\n== {P} GPU(s): {common.cluster_kind(cluster)}, workers {workers}",
                  flush=True)
            od.register(client, engine=args.engine)
            warm_up(client, workers, args.engine, sorted({device_xp, "numpy"}))
            for n, xp_name, how in cases:
                if n % P or (n // P) % min(args.block, n // P):
                    print(f"skip n={n} on {P} GPUs: rows do not split into blocks")
                    continue
                bm = bn = min(args.block, n // P)
                bk = args.kblock or n
                panels = build_operands(workers, n, bm, bk, bn, xp_name)
                # Persist the operands first: drawing them is not the product's time.
                panels = [(w, client.persist(A_i, optimize_graph=False),
                           client.persist(B_i, optimize_graph=False))
                          for w, A_i, B_i in panels]
                for _, A_i, B_i in panels:
                    common.wait([A_i, B_i])
                if not args.no_check and (n, xp_name) not in refs:
                    rows = np.sort(np.random.default_rng(n).choice(
                        n, size=min(args.rows, n), replace=False))
                    A = da.concatenate([A_i for _, A_i, _ in panels], axis=0)
                    refs[(n, xp_name)] = rows, common.reference_rows(A, panels[0][2], rows)
                rows, ref = refs.get((n, xp_name), (np.arange(0), None))
                if how == "native" and xp_name == "numpy":
                    od.unregister(client)
                r = timed_case(client, panels, "emulated" if how == "emulated" else "dask @",
                               args.engine, n, rows, ref, args.repeats)
                if how == "native" and xp_name == "numpy":
                    od.register(client, engine=args.engine)
                r.update(gpus=P, n=n, chunks=xp_name, how=how, block=(bm, bk, bn))
                results.append(r)
                print(f"  n={n} {xp_name} {how}: {r['seconds']:.3f} s, "
                      f"{r['tflops']:.1f} TFLOPS, routed {r['routed']}, "
                      f"err {r['max_rel_err']}", flush=True)
                for _, A_i, B_i in panels:
                    common.forget(client, A_i)
                    common.forget(client, B_i)
                del panels
            od.unregister(client)

    # Speed-up over 1 GPU (same case), efficiency, emulated / native ratio.
    earlier = []
    if args.baseline:
        import json

        with open(args.baseline) as f:
            earlier = [r for r in json.load(f)["rows"] if r["gpus"] == 1]
    by = {(r["gpus"], r["n"], r["chunks"], r["how"]): r for r in earlier + results}
    for r in results:
        base = by.get((1, r["n"], r["chunks"], r["how"]))
        if base:
            r["speedup"] = base["seconds"] / r["seconds"]
            r["efficiency"] = r["speedup"] / r["gpus"]
        nat = by.get((r["gpus"], r["n"], r["chunks"], "native"))
        if nat and r["how"] != "native":
            r["native_over_emulated"] = nat["seconds"] / r["seconds"]

    print(f"\nengine={args.engine}, clusters {sorted(kinds)}, NCCL_NVLS_ENABLE="
          f"{os.environ.get('NCCL_NVLS_ENABLE')}")
    common.print_table(results, [
        ("gpus", "GPUs", "{}"), ("n", "n", "{}"), ("chunks", "chunks", "{}"),
        ("how", "blocks", "{}"), ("seconds", "s", "{:.3f}"), ("tflops", "TFLOPS", "{:.2f}"),
        ("speedup", "speed-up", "{:.2f}"), ("efficiency", "efficiency", "{:.0%}"),
        ("native_over_emulated", "native/emu", "{:.2f}"), ("routed", "routed", "{}"),
        ("moduli", "moduli", "{}"), ("moved_gb", "moved GB", "{:.3f}"),
        ("max_rel_err", "max rel err", "{:.2e}")])
    meta = {"engine": args.engine, "gpu_counts": counts, "clusters": sorted(kinds),
            "block": args.block, "kblock": args.kblock or "whole",
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
    print("\nwrote", common.write_json(results, meta, args.json))


if __name__ == "__main__":
    main()
