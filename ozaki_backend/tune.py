"""``python -m ozaki_backend tune``: measure which GEMM path is fastest on this GPU.

Times the whole CUDA product per shape along the cuBLAS path and the fused Hopper
kernel (both tile widths), checks that all give the same bits, and merges the winners
into a tuning table: the user's cache (``$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json``,
by default ``~/.cache/ozaki_backend/gemm_tuning.json``), which the engine reads on top
of the table shipped with the package (:mod:`ozaki_backend.cuda.tuning`); or
``--output FILE``; or, with ``--install``, the package's own table.

It then measures the rates the dispatch layer's cost model compares (:func:`measure_rates`:
host DGEMM GFLOP/s per shape class, staged H2D/D2H GB/s, INT8 GEMM TOPS, device memory
GB/s, the fixed cost of a call) and merges them into the user's rate table
(``$XDG_CACHE_HOME/ozaki_backend/host_rates.json``; ``$OZAKI_BACKEND_RATES`` when set;
``--rates-output FILE``; with ``--install`` the package's own table), which every later
process reads: rates are measured once per machine, never by a process on its own.
``--rates-only`` does only that (the host part needs no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from ._cli import Parser, Progress, int_at_least
from .shapes import HELP as SHAPES_HELP
from .shapes import format_shape, parse_shape

#: Format of the table file (``ozaki_backend/_data/gemm_tuning.json``).
SCHEMA = "ozaki_backend-tuning/1"
#: ``(m, k, n)`` of the products timed by default: squares up to 16384 and two skinny
#: shapes (long k; short k with a large output).
DEFAULT_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                  (8192, 8192, 8192), (4096, 4096, 16384), (16384, 16384, 1024),
                  (16384, 16384, 16384))


def _shape(text):
    """``(m, k, n)`` (this module's order) from a shape in the CLI's ``M,N,K`` form."""
    m, n, k = parse_shape(text)
    return m, k, n


def _time_shape(rng, m, k, n, variants, n_moduli, mode, repeats):
    """Seconds of the whole product per variant key, on ``m x k x n`` standard normal
    operands drawn from ``rng``.

    Every variant's result must equal the first's (the cuBLAS path's) bit for bit
    before its time counts; a mismatch raises. The operands are freed on return.
    """
    import cupy

    from .cuda.pipeline import product_into
    from .plan import Plan
    from .provenance import median_device_time

    A = cupy.asarray(rng.standard_normal((m, k)))
    B = cupy.asarray(rng.standard_normal((k, n)))
    plan = Plan(m, n, k, moduli=n_moduli, mode=mode)
    ref = None
    secs = {}
    for path, width in variants:
        key = path if width is None else f"{path}:{width}"
        os.environ["OZAKI_BACKEND_CUDA_PATH"] = key
        out = cupy.empty((m, n))
        product_into(A, B, plan, out)
        if ref is None:
            ref = out.copy()
        elif not bool((out.view(np.int64) == ref.view(np.int64)).all()):
            raise RuntimeError(f"{key} differs from the cuBLAS path at {m}x{k}x{n}")
        secs[key] = median_device_time(lambda: product_into(A, B, plan, out), repeats)
    return secs


def measure(shapes=DEFAULT_SHAPES, *, n_moduli=15, mode="fast", repeats=5, log=print):
    """Time the whole product both ways per shape; returns this device's table record.

    Every variant's result is checked bitwise against the cuBLAS path's before its time
    counts (the paths must agree; a mismatch raises).

    Parameters
    ----------
    shapes : sequence of (m, k, n)
    n_moduli : int
    mode : {"fast", "accurate"}
    repeats : int
        Timed runs per variant (median, after one warm-up).
    log : callable
        Receives one line per shape.

    Returns
    -------
    name : str
        The GPU's name (the table's key).
    record : dict
        ``compute_capability``, ``measured`` (date), ``command`` and ``entries``: per
        shape ``m``, ``n``, ``k``, ``n_moduli``, ``mode``, ``seconds`` per variant
        (``"cublas"``, ``"wgmma:128"``, ``"wgmma:256"``), the fastest as ``choice`` (the
        path) and ``choice_key``, and ``width`` when the fused kernel won.
    """
    import cupy

    from .cuda import tuning
    from .cuda.capability import wgmma_available

    dev = cupy.cuda.Device()
    name = tuning.device_name(dev.id)
    variants = [("cublas", None)]
    if wgmma_available():
        variants += [("wgmma", 128), ("wgmma", 256)]
    entries = []
    rng = np.random.default_rng(0)
    old = os.environ.get("OZAKI_BACKEND_CUDA_PATH")
    try:
        for m, k, n in shapes:
            secs = _time_shape(rng, m, k, n, variants, n_moduli, mode, repeats)
            best = min(secs, key=secs.get)
            path, _, width = best.partition(":")
            e = {"m": m, "n": n, "k": k, "n_moduli": n_moduli, "mode": mode,
                 "seconds": secs, "choice": path, "choice_key": best}
            if width:
                e["width"] = int(width)
            entries.append(e)
            log(f"{format_shape(m, n, k)}: " + ", ".join(f"{kk} {v * 1e3:.2f} ms" for kk, v in secs.items())
                + f" -> {best}")
            cupy.get_default_memory_pool().free_all_blocks()
    finally:
        if old is None:
            os.environ.pop("OZAKI_BACKEND_CUDA_PATH", None)
        else:
            os.environ["OZAKI_BACKEND_CUDA_PATH"] = old
    return name, {"compute_capability": dev.compute_capability,
                  "measured": time.strftime("%Y-%m-%d"),
                  "command": "python -m ozaki_backend tune", "entries": entries}


#: ``(m, k, n)`` of the host DGEMMs timed for the cost model: squares, short k (outer
#: products: the host is memory bound there), long k with a small output.
HOST_SHAPES = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
               (4096, 4096, 4096), (8192, 8192, 8192), (4096, 64, 4096),
               (4096, 256, 4096), (16384, 256, 16384), (16384, 64, 16384),
               (64, 100000, 64), (256, 65536, 256), (65536, 64, 256))


def measure_host_rates(shapes=HOST_SHAPES, *, repeats=3, log=print) -> dict:
    """The host's native DGEMM rate per shape: the cost model's host record.

    Parameters
    ----------
    shapes : sequence of (m, k, n)
    repeats : int
        Best of this many runs per shape, after a warm-up.
    log : callable

    Returns
    -------
    dict
        ``measured`` (date), ``command``, ``cpus`` and ``dgemm``: per shape ``m``, ``n``,
        ``k``, ``seconds`` and ``gflops``.
    """
    from .dispatch.costmodel import time_host_dgemm

    rows = []
    for m, k, n in shapes:
        t = time_host_dgemm(m, n, k, repeats)
        rows.append({"m": m, "n": n, "k": k, "seconds": t, "gflops": 2.0 * m * n * k / t / 1e9})
        log(f"host DGEMM {m}x{k}x{n}: {t * 1e3:.2f} ms, {rows[-1]['gflops']:.1f} GFLOP/s")
    return {"measured": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
            "command": "python -m ozaki_backend tune", "dgemm": rows}


def measure_device_rates(*, transfer_mib=256, gemm_n=8192, repeats=5,
                         calibration_sizes=(1024, 2048, 4096), log=print) -> dict:
    """The GPU side of the cost model, measured on the current device.

    * ``h2d_gbps``/``d2h_gbps``: a ``transfer_mib`` MiB float64 array through the
      staged path NumPy operands take (:mod:`ozaki_backend.cuda.staging`: pinned
      buffers kept across calls, filled by several threads), best of ``repeats``;
    * ``int8_tops``: one cuBLAS INT8 GEMM of ``gemm_n`` cubed (one modulus' product);
    * ``device_gbps``: a device-to-device copy (bytes read + written);
    * ``overhead_s``: the fixed cost of a routed call: the largest gap, over whole
      NumPy-operand products of ``calibration_sizes`` cubed (and 128 cubed), between
      the measured time and what the other rates predict (transfers, INT8 GEMMs,
      memory passes): staging, the certificate, launches and synchronisation that the
      rates do not see. The largest gap keeps the model on the native side;
    * ``pageable_gbps``: a plain ``.get()`` into a fresh array (out-of-core result
      tiles); ``device_mem_gb``: the device's memory.

    Returns
    -------
    dict
        Those rates, ``measured`` and ``command``.
    """
    import cupy

    from .cuda import engine, modgemm, staging
    from .plan import Plan
    from .provenance import median_device_time, median_wall_time

    n_el = transfer_mib * (1 << 20) // 8
    host = np.random.default_rng(1).standard_normal(n_el)
    back = np.empty_like(host)
    stream = staging.thread_stream()

    def up():
        with stream:
            dev, futs = staging.upload_start(host, stream)
            staging.wait(futs)
            stream.synchronize()
        return dev

    dev = up()
    t_up = min(_wall(up) for _ in range(repeats))
    # Into a fresh array each time, as a routed call's result (its first-touch page
    # faults are part of the rate the call sees).
    t_down = min(_wall(lambda: staging.download(dev, np.empty_like(host), stream))
                 for _ in range(repeats))
    staging.download(dev, back, stream)
    if not np.array_equal(back.view(np.int64), host.view(np.int64)):
        raise RuntimeError("staged round trip changed the data")
    dst = cupy.empty_like(dev)
    t_copy = median_device_time(lambda: cupy.copyto(dst, dev), repeats)
    dev = dst = None  # free the device buffers before the GEMM
    R = cupy.ones((2, gemm_n, gemm_n), dtype=np.int8)
    C32 = cupy.empty((gemm_n, gemm_n), dtype=np.int32)
    h = modgemm.handle()
    g = gemm_n
    t_gemm = median_device_time(lambda: modgemm.gemm_tn(R[0].data.ptr, R[1].data.ptr,
                                                        C32.data.ptr, g, g, g, g, g, g,
                                                        h=h), repeats)
    R = C32 = None
    small = np.random.default_rng(2).standard_normal((2, 128, 128))
    plan = Plan(128, 128, 128)
    t_small = median_wall_time(lambda: engine.matmul_numpy(small[0], small[1], plan),
                               repeats)
    small_dev = cupy.asarray(host[: n_el // 4])   # a plain copy: out-of-core result tiles
    t_pageable = min(_wall(lambda: small_dev.get()) for _ in range(repeats))
    small_dev_nbytes = small_dev.nbytes
    small_dev = None
    _, total = cupy.cuda.runtime.memGetInfo()
    nbytes = host.nbytes
    rec = {"h2d_gbps": nbytes / t_up / 1e9, "d2h_gbps": nbytes / t_down / 1e9,
           "pageable_gbps": small_dev_nbytes / t_pageable / 1e9, "device_mem_gb": total / 1e9,
           "int8_tops": 2.0 * g ** 3 / t_gemm / 1e12,
           "device_gbps": 2.0 * nbytes / t_copy / 1e9, "overhead_s": t_small,
           "measured": time.strftime("%Y-%m-%d"), "command": "python -m ozaki_backend tune"}
    rec["overhead_s"] = max(t_small, _fixed_cost_gap(rec, calibration_sizes, repeats, log))
    log("device rates: " + ", ".join(f"{k} {v:.4g}" for k, v in rec.items()
                                     if isinstance(v, float)))
    cupy.get_default_memory_pool().free_all_blocks()
    return rec


def _fixed_cost_gap(rec, sizes, repeats, log) -> float:
    """The largest ``measured - predicted`` over whole NumPy-operand products of
    ``sizes`` cubed, the prediction being the cost model's with the rates in ``rec``
    and no fixed cost (0 when ``sizes`` is empty)."""
    from .cuda import engine
    from .dispatch import costmodel, routing
    from .plan import Plan
    from .provenance import median_wall_time
    from .spec.rules import CERT_SMALL

    model = costmodel.CostModel(host_gflops=1.0, rates={"device": dict(rec, overhead_s=0.0)})
    rng = np.random.default_rng(3)
    gap = 0.0
    for n in sizes:
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        plan = Plan(n, n, n)
        engine.matmul_numpy(a, b, plan)                       # warm-up (compiles, staging)
        t = median_wall_time(lambda: engine.matmul_numpy(a, b, plan), repeats)
        n_gemms, n_mod = routing._plan_counts(n, min(n * n, CERT_SMALL),
                                              (("precision", "fp64"),))
        pred = model.emulated_seconds(n, n, n, 1, n_gemms, n_mod)
        log(f"routed {n}^3 with NumPy operands: {t * 1e3:.2f} ms; rates predict "
            f"{pred * 1e3:.2f} ms without a fixed cost")
        gap = max(gap, t - pred)
    return gap


def _wall(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_rates(path=None, *, host_shapes=HOST_SHAPES, device=True, repeats=3,
                  log=print) -> str:
    """Measure the cost model's rates on this machine and merge them into the rate
    table at ``path`` (default: :func:`ozaki_backend.dispatch.costmodel.rates_path`, the
    user's cache unless ``$OZAKI_BACKEND_RATES`` names another file).

    Parameters
    ----------
    path : str, optional
    host_shapes : sequence of (m, k, n)
        Host DGEMMs to time (:func:`measure_host_rates`).
    device : bool
        Also measure the GPU side (:func:`measure_device_rates`); needs CuPy and a GPU.
    repeats : int
    log : callable

    Returns
    -------
    str
        The path written.
    """
    from .dispatch import costmodel

    host = measure_host_rates(host_shapes, repeats=repeats, log=log)
    dev = measure_device_rates(log=log) if device else None
    return costmodel.write_rates(path or costmodel.rates_path(), host, dev)


def write_table(name, record, path=None):
    """Merge one device's record into a table file: ``path``, by default the user's
    cache (:func:`ozaki_backend.cuda.tuning_files.user_table_path`), which the engine reads on
    top of the package's table.

    The engine's cached copy of the table is dropped, so the next product reads the
    new one. Returns the path written.
    """
    from .cuda import tuning_files

    if path is None:
        path = tuning_files.user_table_path()
    os.makedirs(os.path.dirname(os.path.abspath(str(path))), exist_ok=True)
    try:
        table = json.loads(open(path).read())
    except (FileNotFoundError, ValueError):
        table = {"schema": SCHEMA, "devices": {}}
    table["devices"][name] = record
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    if "cupy" in sys.modules:  # the engine may have read the old table: drop its copy
        from .cuda import tuning

        tuning.clear_cache()
    return path


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``tune`` options (shared by :func:`main` and ``python -m ozaki_backend``)."""
    ap.add_argument("--shapes", type=_shape, nargs="+", default=None, metavar="SHAPE",
                    help=SHAPES_HELP + " (default: cubes 1024 to 16384 and two skinny "
                         "shapes)")
    from .spec.moduli import MAX_MODULI, MIN_MODULI

    ap.add_argument("--moduli", type=int_at_least(MIN_MODULI, MAX_MODULI), default=15,
                    help=f"moduli count, {MIN_MODULI} to {MAX_MODULI} (default 15)")
    ap.add_argument("--mode", type=str.lower, choices=("fast", "accurate"), default="fast",
                    help="scaling mode of the timed products (default fast)")
    ap.add_argument("--repeats", type=int_at_least(1), default=5,
                    help="timed runs per variant, median after a warm-up (default 5)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--output", metavar="FILE", default=None,
                       help="table file to merge into (default: the user cache, "
                            "$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json)")
    where.add_argument("--install", action="store_true",
                       help="merge into the installed package's own tables instead (the "
                            "GEMM-path table and, unless --rates-output is given, the "
                            "rate table)")
    ap.add_argument("--dry-run", action="store_true", help="measure and print only")
    ap.add_argument("--rates-output", default=None,
                    help="rate table of the cost model to merge into (default: "
                         "$OZAKI_BACKEND_RATES, else the user cache, "
                         "$XDG_CACHE_HOME/ozaki_backend/host_rates.json)")
    ap.add_argument("--rates-only", action="store_true",
                    help="measure only the cost model's rates (host part without a GPU)")


def _rates_output(args):
    """Where the rates go: ``--rates-output``, else the package's table with
    ``--install``, else the default (the user's cache, or ``$OZAKI_BACKEND_RATES``)."""
    if args.rates_output:
        return args.rates_output
    if getattr(args, "install", False):
        from .dispatch import costmodel

        return costmodel.package_rates_path()
    return None


def run(args) -> int:
    """Run ``tune`` with parsed arguments; returns the exit status."""
    if args.rates_only:
        from .cuda import availability

        ok, why = availability()
        if not ok:
            print(f"no usable GPU ({why}): measuring the host rates only")
        path = measure_rates(_rates_output(args), device=ok, repeats=args.repeats,
                             log=_progress_log("tune: host rates", HOST_SHAPES))
        print(f"wrote the cost model's rates to {path}")
        return 0
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable GPU
        print(f"ozaki_backend tune: error: needs a CUDA GPU through CuPy ({exc})",
              file=sys.stderr)
        return 1
    shapes = DEFAULT_SHAPES if args.shapes is None else args.shapes
    name, record = measure(shapes, n_moduli=args.moduli, mode=args.mode,
                           repeats=args.repeats,
                           log=_progress_log("tune: GEMM paths", shapes))
    if args.dry_run:
        return 0
    path = args.output
    if args.install:
        from .cuda import tuning_files

        path = tuning_files.table_path()
    path = write_table(name, record, path)
    print(f"wrote {len(record['entries'])} entries for {name} to {path}")
    path = measure_rates(_rates_output(args), repeats=args.repeats,
                         log=_progress_log("tune: rates", HOST_SHAPES))
    print(f"wrote the cost model's rates to {path}")
    return 0


def _progress_log(label, shapes):
    """``print`` for the measurements' ``log=``, with a status line and the time left
    on stderr (terminals only): :func:`measure` and :func:`measure_host_rates` log one
    line per shape, each weighed by its flops; later lines (the device rates) print
    under a finishing status."""
    progress = Progress(label, [2.0 * m * k * n for m, k, n in shapes]).start()
    return progress.wrap(lambda line: print(line, flush=True))


def main(argv=None) -> int:
    ap = Parser(prog="python -m ozaki_backend tune",
                description=__doc__.split("\n\n")[0].split(": ", 1)[-1].replace("``", ""))
    add_arguments(ap)
    return run(ap.parse_args(argv))
