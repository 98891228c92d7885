"""``python -m ozaki_backend tune``: measure which GEMM path is fastest on this GPU.

Times the whole CUDA product per shape along the cuBLAS path and the fused Hopper
kernel (both tile widths), checks that all give the same bits, and merges the winners
into a tuning table: the user's cache (``$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json``,
by default ``~/.cache/ozaki_backend/gemm_tuning.json``), which the engine reads on top
of the table shipped with the package (:mod:`ozaki_backend.cuda.tuning`); or
``--output FILE``; or, with ``--install``, the package's own table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

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
    ap.add_argument("--moduli", type=int, default=15, help="moduli count (default 15)")
    ap.add_argument("--mode", type=str.lower, choices=("fast", "accurate"), default="fast",
                    help="scaling mode of the timed products (default fast)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed runs per variant, median after a warm-up (default 5)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--output", metavar="FILE", default=None,
                       help="table file to merge into (default: the user cache, "
                            "$XDG_CACHE_HOME/ozaki_backend/gemm_tuning.json)")
    where.add_argument("--install", action="store_true",
                       help="merge into the installed package's own table instead")
    ap.add_argument("--dry-run", action="store_true", help="measure and print only")


def run(args) -> int:
    """Run ``tune`` with parsed arguments; returns the exit status."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable GPU
        print(f"ozaki_backend tune: error: needs a CUDA GPU through CuPy ({exc})",
              file=sys.stderr)
        return 1
    kw = {} if args.shapes is None else {"shapes": args.shapes}
    name, record = measure(n_moduli=args.moduli, mode=args.mode, repeats=args.repeats, **kw)
    if args.dry_run:
        return 0
    path = args.output
    if args.install:
        from .cuda import tuning_files

        path = tuning_files.table_path()
    path = write_table(name, record, path)
    print(f"wrote {len(record['entries'])} entries for {name} to {path}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend tune",
                                 description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))
