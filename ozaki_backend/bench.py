"""``python -m ozaki_backend bench``: native DGEMM against the emulation, side by side.

For each shape (square n in ``--sizes``, plus a few non-square ones), in one run:

* native cuBLAS DGEMM through CuPy: TFLOPS and max relative error;
* the emulation (CuPy operands, CuPy result) for each mode and moduli count: TFLOPS,
  speed-up over native, max relative error, and the phase breakdown (scaling,
  residues, INT8 GEMMs, CRT) from CUDA events;
* the two ways of issuing the INT8 GEMMs (batched / one call per modulus) for the
  ``precision="fp64"`` accurate plan;
* NumPy operands in, NumPy result out (``matmul(engine="cuda")`` wall time, transfers
  included; also the engine alone and its upload / product / download steps) next to
  NumPy on the host CPU and next to a plain CuPy round trip
  (``asnumpy(asarray(a) @ asarray(b))``), for outputs up to ``--numpy-max`` elements.

Errors are max over the elements of ``|C - R| / |R|`` against a double-double
reference ``R`` on a sample of rows (``--err-rows``;
:func:`ozaki_backend.testing.sampled_rows_reference`: the operands are cut into 5
integer slices of ``b = (53 - log2 k) / 2`` bits per row / column, every slice product
is an exact FP64 GEMM (integer sums below 2^53), and the 25 products are summed in
double-double). Test matrices (GEMMul8's): ``phi < 0`` standard normal, else
``(U(0,1) - 0.5) exp(phi N(0,1))``, for ``phi`` in ``--phis``; timings use the first.

JSON (``--json FILE``): the docs' benchmark format, schema ``ozaki_backend-bench/1``
(``docs/data/README.md``): a ``machine`` object, ``date``, ``command``, the package
version/commit, a ``bench`` object (run parameters) and flat ``records``: one
``kind="time"`` record per timed product (native DGEMM as ``impl="cupy"``, each
emulation plan as ``impl="ozaki_backend"`` with ``mode``, ``moduli``, ``precision``,
``bits``, ``speedup``, ``phases_s``; ``io="host"`` records for the NumPy in/out
comparison), one ``kind="accuracy"`` record per (product, phi) with
``reference="double-double"``, and ``kind="gemm-issue"`` records for the GEMM issue
strategies. The machine and commit fields come from :mod:`ozaki_backend.provenance`.

``--host`` runs the host-path benchmark instead (:mod:`ozaki_backend.bench_host`:
NumPy operands through every entry point inside ``enabled()``, next to plain NumPy).

Times are medians of ``--reps`` runs after one warm-up (:data:`WARMUP_CALLS` for the
emulated product on device operands: the steady state of a loop over one shape, the
prepare stage replayed as a CUDA graph; CUDA events for device work,
wall clock for NumPy in/out; :mod:`ozaki_backend.provenance`'s timers); TFLOPS =
2 m n k / time. An emulated row's ratio (``xnat``, ``speedup``) is to the mean of
DGEMM's timings just before and just after it, so that the GPU's clock drift across a
shape's rows does not enter it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

from . import provenance
from ._cli import Parser, Progress, choice_list, float_list, int_at_least, int_list
from .provenance import median_device_time, median_wall_time
from .shapes import HEADER as SHAPE_HEADER
from .spec.moduli import MAX_MODULI, MIN_MODULI
from .shapes import HELP as SHAPES_HELP
from .shapes import format_shape, parse_shape
from .testing import sampled_rows_error, sampled_rows_reference

DEFAULT_SIZES = (2048, 4096, 8192, 16384)
#: Extra shapes ``(m, k, n)`` (this module's order; the command line's is m,n,k).
DEFAULT_SHAPES = ((4096, 65536, 4096), (16384, 1024, 16384))
_DEFAULT_SHAPES_TEXT = ";".join(format_shape(m, n, k) for m, k, n in DEFAULT_SHAPES)


def _shapes_mkn(text):
    """``[(m, k, n), ...]`` from ``--shapes`` (shapes separated by ';' or spaces)."""
    out = []
    for part in text.replace(";", " ").split():
        m, n, k = parse_shape(part)
        out.append((m, k, n))
    return out


def _bench_shapes(args):
    """``[(m, k, n), ...]``: the cubes of ``--sizes``, then the ``--shapes``."""
    return ([(n, n, n) for n in (int(x) for x in args.sizes.split(",") if x)]
            + _shapes_mkn(args.shapes))


def _checked_shapes(text):
    """``--shapes`` as given, after checking that every shape parses (argparse type)."""
    _shapes_mkn(text)
    return text


DEFAULT_MODULI = (12, 14, 15, 16, 17)
#: Calls of an emulated configuration before it is timed (see _bench_shape).
WARMUP_CALLS = 5


def _parse(argv):
    ap = Parser(prog="python -m ozaki_backend bench",
                description=__doc__.split("\n\n")[0].split(": ", 1)[-1].replace("``", ""))
    add_arguments(ap)
    return _finish(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``bench`` options (shared by :func:`main` and ``python -m ozaki_backend``)."""
    # Every value is checked as it is parsed (a bad one is a usage error naming it),
    # not when the measurement that would use it starts.
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), type=int_list(1),
                    help="square sizes n, comma separated (default %(default)s)")
    ap.add_argument("--shapes", default=_DEFAULT_SHAPES_TEXT, type=_checked_shapes,
                    help=f"extra {SHAPES_HELP}, separated by ';' ('' for none; default "
                         "%(default)s)")
    ap.add_argument("--moduli", default=",".join(map(str, DEFAULT_MODULI)),
                    type=int_list(MIN_MODULI, MAX_MODULI),
                    help="moduli counts to time besides the fp64 and bits=34 plans")
    ap.add_argument("--modes", default="fast,accurate", type=choice_list(("fast", "accurate")),
                    help="scaling modes to time, comma separated (default %(default)s)")
    ap.add_argument("--phis", default="-1,0.5,1", type=float_list,
                    help="test-matrix phi values, comma separated; < 0: standard normal "
                         "(default %(default)s)")
    ap.add_argument("--reps", type=int_at_least(1), default=3,
                    help="timed runs per product, median after a warm-up (default 3)")
    ap.add_argument("--err-rows", type=int_at_least(1), default=32,
                    help="rows of the double-double reference for the errors (default 32)")
    ap.add_argument("--numpy-max", type=int_at_least(0), default=8192 * 8192,
                    help="largest m*n for the NumPy in/out comparison (0: none)")
    ap.add_argument("--host", action="store_true",
                    help="run the host-path benchmark instead (NumPy operands through "
                         "every entry point); its options: bench --host --help")
    ap.add_argument("--gpu-arrays", action="store_true",
                    help="run the GPU-array benchmark instead (CuPy and PyTorch loops "
                         "inside enabled() and without); its options: bench --gpu-arrays "
                         "--help")
    ap.add_argument("--gemmul8", action="store_true",
                    help="after the bench, GEMMul8 side by side with cuBLAS and ours on "
                         "its sizes, shapes and phis (one process; needs a source "
                         "checkout and a GEMMul8 build in .gemmul8/)")
    ap.add_argument("--host-numpy-max", type=int_at_least(0), default=8192 * 8192,
                    help="largest m*n timed with NumPy on the host CPU")
    ap.add_argument("--phase22-sizes", default="2048,8192", type=int_list(1),
                    help="n for the seed-scheme comparison with 28 bare INT8 GEMMs "
                         "('' skips it)")
    ap.add_argument("--complex", default="", metavar="SIZES", type=int_list(1),
                    help="also complex128 products at these square sizes (e.g. 4096,8192): "
                         "cuBLAS ZGEMM (CuPy matmul) against the emulation on device "
                         "operands, and NumPy in/out (matmul(engine='cuda'), @ inside "
                         "enabled()) against host NumPy (docs/spec.md section 11)")
    ap.add_argument("--complex-only", action="store_true",
                    help="skip the real products and the seed scheme (with --complex)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, fewer configurations (a smoke run)")
    ap.add_argument("--json", metavar="FILE",
                    help="write the results as JSON (schema ozaki_backend-bench/1)")
    ap.add_argument("--machine-name", default=None,
                    help="short human name of the machine for the JSON file (goes on the "
                         "docs' plots; default: '<GPU> (<host name>)')")


def _finish(args):
    """Apply ``--quick`` to the defaults the user did not change."""
    if args.quick:
        if args.sizes == ",".join(map(str, DEFAULT_SIZES)):
            args.sizes = "2048,4096"
        if args.shapes == _DEFAULT_SHAPES_TEXT:
            args.shapes = format_shape(1024, 1024, 16384)
        if args.moduli == ",".join(map(str, DEFAULT_MODULI)):
            args.moduli = ""
        args.reps = min(args.reps, 2)
    args._finished = True
    return args


# ----------------------------------------------------------------------------- data

def _matrix(cp, rng, shape, phi):
    if phi < 0:
        return rng.standard_normal(shape, dtype=np.float64)
    return (rng.random(shape, dtype=np.float64) - 0.5) * cp.exp(phi * rng.standard_normal(shape))


# ----------------------------------------------------------------------------- configs

def _configs(m, n, k, args):
    from .plan import Plan

    modes = [x for x in args.modes.split(",") if x]
    out = []
    for mode in modes:
        p = Plan(m, n, k, mode=mode)   # adaptive: the label gets the count _bench_shape
        out.append((f"{mode}-{{N}} (fp64)", p))   # measures on the timed operands
        p = Plan(m, n, k, bits=34, mode=mode)
        out.append((f"{mode}-{p.n_moduli} (bits=34)", p))
        for N in [int(x) for x in args.moduli.split(",") if x]:
            out.append((f"{mode}-{N}", Plan(m, n, k, moduli=N, mode=mode)))
    seen, uniq = set(), []
    for label, p in out:
        if p.key() not in seen:
            seen.add(p.key())
            uniq.append((label, p))
    return uniq


def _bench_shape(cp, m, k, n, args, log):
    from .cuda import pipeline
    from .plan import Plan

    phis = [float(x) for x in args.phis.split(",")]
    rng = cp.random.default_rng(m * 31 + k * 7 + n)
    data = {phi: (_matrix(cp, rng, (m, k), phi), _matrix(cp, rng, (k, n), phi)) for phi in phis}
    rows = cp.linspace(0, m - 1, min(m, args.err_rows)).astype(cp.int64)
    refs = {phi: sampled_rows_reference(A[rows], B) for phi, (A, B) in data.items()}
    A, B = data[phis[0]]
    flops = 2.0 * m * n * k
    res = {"shape": [m, k, n]}

    C = cp.empty((m, n))
    t_nat = median_device_time(lambda: cp.matmul(A, B, out=C), args.reps)
    res["native"] = {"seconds": t_nat, "tflops": flops / t_nat / 1e12, "max_rel_err": {
        str(phi): sampled_rows_error(cp.matmul(Ap[rows], Bp), refs[phi])
        for phi, (Ap, Bp) in data.items()}}
    log(f"  native DGEMM {t_nat * 1e3:9.2f} ms  {flops / t_nat / 1e12:6.1f} TFLOPS")

    res["emulated"] = []
    t_before = t_nat
    for i, (label, plan) in enumerate(_configs(m, n, k, args)):
        cold = None
        if i == 0:
            # The first calls of this shape, before anything else of the emulation has
            # seen it (plans, graphs, counts and cuBLAS's heuristics are per shape).
            cold = provenance.wall_times(lambda: plan.matmul(A, B, out=C), 3,
                                         sync=cp.cuda.Device().synchronize)
        # precision="fp64" chooses the count per product: the timed operands' count
        # names the config, and each phi's count is kept with its error.
        N = plan.moduli_for(A, B)   # one pass over the operands on the device
        label = label.replace("{N}", str(N))
        # Five warm-up calls reach the steady state of a loop over one shape's fixed
        # buffers: the first reads the count, the second starts from it, the third
        # captures the prepare stage's graph (cuda/graphs.py) on copies of the
        # operands, the fourth replays it and the fifth captures the direct plan (the
        # same buffers again) that the timed calls replay.
        from .cuda import graphs

        replayed = graphs.COUNTS["replayed"]
        t = median_device_time(lambda: plan.matmul(A, B, out=C), args.reps,
                               warmup=WARMUP_CALLS)
        replayed = graphs.COUNTS["replayed"] - replayed
        # DGEMM timed again right after: the ratio is to the mean of the DGEMM timings
        # on either side of this one, so that clock drift over the shape's configs
        # (up to 10 % on an H100 near its power limit) does not enter it
        t_after = median_device_time(lambda: cp.matmul(A, B, out=C), args.reps)
        t_side = 0.5 * (t_before + t_after)
        t_before = t_after
        errs, used = {}, {}
        for phi, (Ap, Bp) in data.items():
            Ce = plan.matmul(Ap, Bp)
            errs[str(phi)] = sampled_rows_error(Ce[rows], refs[phi])
            used[str(phi)] = plan.moduli_for(Ap, Bp)
        ph = pipeline.Phases()
        pipeline.product_into(A, B, plan, C, phases=ph)
        phases = ph.totals()
        from .cuda.modgemm import gemm_strategy
        from .cuda.tuning import choice as path_choice

        path = path_choice(m, n, k, N)
        busy = sum(phases.values())
        share = phases.get("gemms", 0.0) / busy if busy else 0.0
        res["emulated"].append({
            "label": label, "mode": plan.mode, "moduli": N,
            "moduli_by_phi": used, "rule": plan.rule,
            "seconds": t, "tflops": flops / t / 1e12, "speedup": t_side / t,
            "native_s_beside": t_side,
            "max_rel_err": errs, "phases_s": phases, "gemm_share": share,
            "cold_s": cold, "graph_replays": replayed,
            "gemm_strategy": gemm_strategy(m, n), "gemm_path": path[0],
            "gemm_path_reason": path[2]})
        log(f"  {label:24s} {t * 1e3:9.2f} ms  {flops / t / 1e12:6.1f} TFLOPS "
            f"x{t_side / t:4.2f}  err {max(errs.values()):.1e}  {path[0]:6s} " + " ".join(
                f"{k_[:4]} {v * 1e3:.2f}" for k_, v in phases.items())
            + f"  gemm share {share:.0%}")
        if cold is not None:
            log("  " + " " * 24 + " cold calls 1-3: " + ", ".join(
                f"{c * 1e3:.2f} ms ({c / t:.2f}x steady)" for c in cold))

    res["gemm_strategies"] = {}
    plan = Plan(m, n, k, mode="accurate")

    # cuBLAS issue orders, then the fused kernel at both tile widths (all must agree).
    variants = [("batched", "batched", "", ""), ("loop", "loop", "", "")]
    if n > 8192 or m > 8192:
        variants += [("loop-unblocked", "loop", "0", "0"), ("loop-2d-blocks", "loop", "", "8192")]
    from .cuda.capability import wgmma_available

    if wgmma_available():
        variants += [("fused-256", "wgmma:256", "", ""), ("fused-128", "wgmma:128", "", "")]
    reference = plan.matmul(A, B)
    res["gemm_strategies_bitwise_equal"] = True
    for name, strategy, cb, rb in variants:
        if strategy.startswith("wgmma"):
            os.environ["OZAKI_BACKEND_CUDA_PATH"] = strategy
        else:
            os.environ["OZAKI_BACKEND_CUDA_PATH"] = "cublas"
            os.environ["OZAKI_BACKEND_CUDA_GEMM"] = strategy
        os.environ["OZAKI_BACKEND_CUDA_COLBLOCK"] = cb
        os.environ["OZAKI_BACKEND_CUDA_ROWBLOCK"] = rb
        try:
            res["gemm_strategies"][name] = median_device_time(
                lambda: plan.matmul(A, B, out=C), max(1, args.reps - 1))
            if not bool(cp.array_equal(C.view(cp.int64), reference.view(cp.int64))):
                res["gemm_strategies_bitwise_equal"] = False
        finally:
            for v in ("GEMM", "COLBLOCK", "ROWBLOCK", "PATH"):
                os.environ.pop(f"OZAKI_BACKEND_CUDA_{v}", None)
    log("  GEMM strategies (fp64 accurate): " + ", ".join(
        f"{s} {v * 1e3:.2f} ms" for s, v in res["gemm_strategies"].items())
        + f"; bitwise equal: {res['gemm_strategies_bitwise_equal']}")

    res["numpy_io"] = None
    if m * n <= args.numpy_max:
        res["numpy_io"] = _numpy_io(cp, A, B, m, n, k, args, log)
    return res


def _numpy_io(cp, A, B, m, n, k, args, log):
    """NumPy in / NumPy out: through the public API, through the engine directly, and
    the engine's three steps (upload, product, download) timed separately."""
    import ozaki_backend
    from .cuda import engine, pipeline, staging
    from .plan import Plan

    a_h, b_h = cp.asnumpy(A), cp.asnumpy(B)
    plan = Plan(m, n, k)
    t_api = median_wall_time(lambda: ozaki_backend.matmul(a_h, b_h, engine="cuda"), args.reps)
    t_eng = median_wall_time(lambda: engine.matmul_numpy(a_h, b_h, plan), args.reps)
    t_rt = median_wall_time(lambda: cp.asnumpy(cp.asarray(a_h) @ cp.asarray(b_h)), args.reps)
    t_host = median_wall_time(lambda: a_h @ b_h, 1) if m * n <= args.host_numpy_max else None
    t_fin = median_wall_time(lambda: bool(np.isfinite(a_h).all() and np.isfinite(b_h).all()), 1)
    stream = staging.thread_stream()
    steps = []
    for _ in range(2):  # the second run is the one reported (pinned buffers warm)
        with stream:
            t0 = time.perf_counter()
            dA, fa = staging.upload_start(a_h, stream)
            dB, fb = staging.upload_start(b_h, stream)
            staging.wait(fa + fb)
            stream.synchronize()
            t1 = time.perf_counter()
            C = cp.empty((m, n))
            pipeline.product_into(dA, dB, plan, C)
            stream.synchronize()
            t2 = time.perf_counter()
            out = np.empty((m, n))
            staging.download(C, out, stream)
            t3 = time.perf_counter()
        steps = [t1 - t0, t2 - t1, t3 - t2]
    io = {"plan": f"{plan.mode}-{plan.moduli_for(A, B)}", "api_s": t_api,
          "emulated_s": t_eng,
          "numpy_host_s": t_host, "cupy_roundtrip_s": t_rt, "host_isfinite_s": t_fin,
          "upload_s": steps[0], "compute_s": steps[1], "download_s": steps[2]}
    log(f"  NumPy in/out ({io['plan']}): matmul() {t_api * 1e3:.1f} ms, engine "
        f"{t_eng * 1e3:.1f} ms (upload {steps[0] * 1e3:.1f} + product {steps[1] * 1e3:.1f} "
        f"+ download {steps[2] * 1e3:.1f}), host isfinite {t_fin * 1e3:.1f} ms, CuPy round "
        f"trip {t_rt * 1e3:.1f} ms, host NumPy "
        + ("-" if t_host is None else f"{t_host * 1e3:.1f} ms"))
    return io


# ----------------------------------------------------------------------------- table

def _table(report):
    lines = []
    lines.append(f"ozaki_backend bench  {report['date']}  {report['device']} "
                 f"(sm_{report['compute_capability']}), CuPy {report['cupy']}")
    phis = report["phis"]
    head = (f"{'shape ' + SHAPE_HEADER:>22s} {'config':>22s} {'TFLOPS':>7s} {'xnat':>5s} "
            + " ".join(f"{'err phi=' + str(p):>12s}" for p in phis)
            + f" {'scal':>6s} {'res':>6s} {'gemm':>7s} {'crt':>6s} (ms) {'share':>5s}"
            + "  cold calls 1, 2 (x steady)")
    lines.append(head)
    for r in report["results"]:
        m, k, n = r["shape"]
        shp = format_shape(m, n, k)
        nat = r["native"]
        lines.append(f"{shp:>22s} {'native DGEMM':>22s} {nat['tflops']:7.1f} {1.0:5.2f} "
                     + " ".join(f"{nat['max_rel_err'][str(p)]:12.1e}" for p in phis))
        for e in r["emulated"]:
            ph = e["phases_s"]
            lines.append(f"{'':>22s} {e['label']:>22s} {e['tflops']:7.1f} {e['speedup']:5.2f} "
                         + " ".join(f"{e['max_rel_err'][str(p)]:12.1e}" for p in phis)
                         + f" {ph['scaling'] * 1e3:6.2f} {ph['residues'] * 1e3:6.2f} "
                         f"{ph['gemms'] * 1e3:7.2f} {ph['crt'] * 1e3:6.2f}      "
                         f"{e.get('gemm_share', 0.0):5.0%}"
                         + ("  " + ", ".join(f"{c / e['seconds']:.2f}"
                                             for c in e["cold_s"][:2])
                            if e.get("cold_s") else ""))
        gs = r.get("gemm_strategies") or {}
        if gs:
            lines.append(f"{'':>22s} GEMM issue (fp64 accurate): " + ", ".join(
                f"{k} {v * 1e3:.2f} ms" for k, v in gs.items()))
        io = r.get("numpy_io")
        if io:
            host = "-" if io["numpy_host_s"] is None else f"{io['numpy_host_s'] * 1e3:.0f} ms"
            lines.append(f"{'':>22s} NumPy in/out ({io['plan']}): matmul() "
                         f"{io['api_s'] * 1e3:.1f} ms, engine {io['emulated_s'] * 1e3:.1f} ms"
                         f" (up {io['upload_s'] * 1e3:.1f} / product "
                         f"{io['compute_s'] * 1e3:.1f} / down {io['download_s'] * 1e3:.1f})"
                         f" | host NumPy {host} | CuPy round trip "
                         f"{io['cupy_roundtrip_s'] * 1e3:.1f} ms")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- JSON

SCHEMA = "ozaki_backend-bench/1"


def to_records(report, *, reps=3, err_rows=32):
    """The flat ``records`` of docs/data/README.md from the nested per-shape report."""
    phis = report["phis"]
    seed_of = lambda m, k, n: m * 31 + k * 7 + n  # noqa: E731  (see _bench_shape)
    out = []
    for r in report["results"]:
        m, k, n = r["shape"]
        shape = {"m": m, "n": n, "k": k}
        flops = 2.0 * m * n * k

        def acc(impl, errs, **extra):
            for phi in phis:
                out.append({"kind": "accuracy", "impl": impl, **shape, **extra,
                            "phi": float(phi), "seed": seed_of(m, k, n), "rng": "cupy",
                            "reference": "double-double", "rows": min(m, err_rows),
                            "max_rel_err": errs[str(phi)]})

        nat = r["native"]
        out.append({"kind": "time", "impl": "cupy", **shape, "seconds": nat["seconds"],
                    "repeats": reps, "io": "device", "tflops": nat["tflops"]})
        acc("cupy", nat["max_rel_err"])
        for e in r["emulated"]:
            label = e["label"]
            how = {"precision": "fp64" if label.endswith("(fp64)") else None,
                   "bits": 34 if label.endswith("(bits=34)") else None}
            ident = {"engine": "cuda", "scheme": "ozaki2", "mode": e["mode"],
                     "moduli": e["moduli"], **how}
            out.append({"kind": "time", "impl": "ozaki_backend", **shape, **ident,
                        "seconds": e["seconds"], "repeats": reps, "io": "device",
                        "tflops": e["tflops"], "speedup": e["speedup"],
                        "native_s_beside": e.get("native_s_beside"), "label": label,
                        "phases_s": e["phases_s"], "gemm_strategy": e.get("gemm_strategy"),
                        "graph_replays": e.get("graph_replays"), "rule": e.get("rule")})
            acc("ozaki_backend", e["max_rel_err"], **ident, label=label)
        fp64 = next((e for e in r["emulated"]
                     if e["mode"] == "accurate" and e["label"].endswith("(fp64)")), None)
        for strategy, t in (r.get("gemm_strategies") or {}).items():
            out.append({"kind": "gemm-issue", "impl": "ozaki_backend", **shape,
                        "engine": "cuda", "scheme": "ozaki2", "mode": "accurate",
                        "moduli": fp64["moduli"] if fp64 else None, "precision": "fp64",
                        "strategy": strategy, "seconds": t, "repeats": max(1, reps - 1),
                        "io": "device", "tflops": flops / t / 1e12,
                        "bitwise_equal": r.get("gemm_strategies_bitwise_equal")})
        io = r.get("numpy_io")
        if io:
            mode, moduli = io["plan"].split("-")
            out.append({"kind": "time", "impl": "ozaki_backend", **shape, "engine": "cuda",
                        "scheme": "ozaki2", "mode": mode, "moduli": int(moduli),
                        "precision": "fp64", "bits": None, "seconds": io["api_s"],
                        "repeats": reps, "io": "host", "tflops": flops / io["api_s"] / 1e12,
                        "steps_s": {"engine": io["emulated_s"], **{s: io[f"{s}_s"] for s in (
                            "upload", "compute", "download", "host_isfinite")}}})
            out.append({"kind": "time", "impl": "cupy", **shape,
                        "seconds": io["cupy_roundtrip_s"], "repeats": reps, "io": "host",
                        "tflops": flops / io["cupy_roundtrip_s"] / 1e12})
            if io.get("numpy_host_s") is not None:
                out.append({"kind": "time", "impl": "numpy", **shape,
                            "seconds": io["numpy_host_s"], "repeats": 1, "io": "host",
                            "tflops": flops / io["numpy_host_s"] / 1e12})
    return out


def to_document(report, machine, command, *, reps=3, err_rows=32, commit=None):
    """The whole ``ozaki_backend-bench/1`` file for a nested report."""
    from ._version import __version__

    return {
        "schema": SCHEMA, "machine": machine, "date": report["date"][:10],
        "command": command,
        "ozaki_backend": {"version": __version__, "commit": commit},
        "bench": {"started": report["date"], "compute_capability":
                  report["compute_capability"], "quick": report["quick"],
                  "phis": report["phis"], "reps": reps, "err_rows": err_rows},
        "records": to_records(report, reps=reps, err_rows=err_rows),
        "phase22": report.get("phase22") or [],
        "complex": report.get("complex") or [],
    }


def _write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(argv=None) -> int:
    """Run the benchmark; print the table last; optionally write JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--host" in argv:  # NumPy operands through every entry point: bench_host.py
        from .bench_host import main as host_main

        return host_main([a for a in argv if a != "--host"])
    if "--gpu-arrays" in argv:  # CuPy and PyTorch loops: bench_gpu_arrays.py
        from .bench_gpu_arrays import main as arrays_main

        return arrays_main([a for a in argv if a != "--gpu-arrays"])
    return run(_parse(argv), argv)


#: The peer side by side, a development tool of the source checkout (not installed).
PEER_SCRIPT = "scripts/gemmul8-side-by-side.sh"
_ROOT = provenance._ROOT        # the source checkout's root, where this is one


def peer_command(args):
    """The command that runs GEMMul8 side by side with cuBLAS and ours on the bench's
    square sizes and ``(m, k, n)`` shapes and its phis (``bench --gemmul8``), or None
    where the checkout's script or the GEMMul8 build is missing."""
    script = os.path.join(_ROOT, PEER_SCRIPT)
    if not (os.path.isfile(script) and os.path.isdir(os.path.join(_ROOT, ".gemmul8"))):
        return None
    shapes = [f"{m}x{k}x{n}" for m, k, n in _bench_shapes(args)]
    return ["bash", script, "--shapes", ",".join(shapes), f"--phis={args.phis}"]


def run(args, argv=()) -> int:
    """Run ``bench`` with parsed arguments (``argv``: as given, for the JSON's command)."""
    args = _finish(args) if not getattr(args, "_finished", False) else args
    args._finished = True
    peer = None
    if args.gemmul8:   # checked before any GPU work: the peer runs after the bench
        peer = peer_command(args)
        if peer is None:
            print(f"ozaki_backend bench: error: --gemmul8 needs a source checkout (its "
                  f"{PEER_SCRIPT}) and a GEMMul8 build in .gemmul8/ "
                  f"(docs/development.md)", file=sys.stderr)
            return 2
    from .cuda import availability

    ok, why = availability()
    if not ok:
        print(f"ozaki_backend bench: error: needs a GPU: {why}", file=sys.stderr)
        return 1
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    report = {  # the nested in-memory form (the table's); the file is to_document's
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": name, "compute_capability": cp.cuda.Device().compute_capability,
        "cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "quick": bool(args.quick), "phis": [float(x) for x in args.phis.split(",")],
        "results": [],
    }
    machine = provenance.gpu_machine(args.machine_name) if args.json else None
    command = "python -m ozaki_backend bench " + shlex.join(argv)
    commit = provenance.commit() if args.json else None
    shapes = _bench_shapes(args)

    report["phase22"] = []
    report["complex"] = []
    if args.complex_only:
        shapes = []
        args.phase22_sizes = ""
    complex_sizes = [int(x) for x in args.complex.split(",") if x]
    phase22_sizes = [int(x) for x in args.phase22_sizes.split(",") if x]
    # A status line with the time left (stderr, terminals only), each measurement
    # weighed by its flops: a complex product is four real ones.
    progress = Progress("bench", [8.0 * n ** 3 for n in complex_sizes]
                        + [2.0 * m * n * k for m, k, n in shapes]
                        + [2.0 * n ** 3 for n in phase22_sizes]).start()

    def log(msg):
        progress.clear()
        print(msg, flush=True)

    def done_one():
        """After each measurement: free the pool, and keep the partial results in the
        JSON file if a later measurement dies."""
        progress.step()
        cp.get_default_memory_pool().free_all_blocks()
        if args.json:
            _write(args.json, to_document(report, machine, command, reps=args.reps,
                                          err_rows=args.err_rows, commit=commit))

    for n in complex_sizes:
        log(f"complex128 n = {n}")
        report["complex"].append(_bench_complex(cp, n, args, log))
        done_one()
    for (m, k, n) in shapes:
        log(f"shape {SHAPE_HEADER} = {format_shape(m, n, k)}")
        report["results"].append(_bench_shape(cp, m, k, n, args, log))
        done_one()
    for n in phase22_sizes:
        log(f"phase22 n = {n}")
        report["phase22"].append(_bench_phase22(cp, n, args, log))
        done_one()
    progress.close()
    print()
    if shapes:
        print(_table(report))
    for r in report["complex"]:
        print(_complex_line(r))
    for r in report["phase22"]:
        print(f"phase22 n={r['n']}: {r['seconds'] * 1e3:.2f} ms ({r['tflops']:.1f} TFLOPS), "
              f"28 bare cuBLAS INT8 GEMMs {r['int8_28_seconds'] * 1e3:.2f} ms -> "
              f"x{r['ratio_to_28_gemms']:.2f}; native DGEMM {r['native_seconds'] * 1e3:.2f} ms; "
              f"max abs err U(-1,1) {r['max_abs_err']:.2e} (native {r['native_max_abs_err']:.2e})")
    if peer is None:
        return 0
    print(f"\nGEMMul8 side by side: {shlex.join(peer)}", flush=True)
    return subprocess.run(peer, cwd=_ROOT).returncode


def _bench_phase22(cp, n, args, log):
    """The seed scheme at n^3 on U(-1,1) against 28 bare cuBLAS INT8 GEMMs of its shape
    (4 hi/lo passes x 7 primes, k in chunks of 4096: the same INT8 work) and native."""
    from .cuda import modgemm
    from .plan import Plan

    rng = cp.random.default_rng(n)
    A = rng.random((n, n)) * 2 - 1
    B = rng.random((n, n)) * 2 - 1
    plan = Plan(n, n, n, scheme="phase22")
    t = median_device_time(lambda: plan.matmul(A, B), args.reps)
    rows = cp.linspace(0, n - 1, min(n, args.err_rows)).astype(cp.int64)
    hi, lo = sampled_rows_reference(A[rows], B)
    C = plan.matmul(A, B)
    err = float(cp.abs((C[rows] - hi) - lo).max())
    Cn = A @ B
    t_nat = median_device_time(lambda: cp.matmul(A, B, out=Cn), args.reps)
    err_nat = float(cp.abs((Cn[rows] - hi) - lo).max())
    R = rng.integers(0, 127, size=(2, n, n), dtype=np.int8)
    C32 = cp.empty((n, n), dtype=cp.int32)
    h = modgemm.handle()

    def gemms():
        for _ in range(28):
            modgemm.gemm_tn(R[0].data.ptr, R[1].data.ptr, C32.data.ptr, n, n, n, n, n, n, h=h)

    t28 = median_device_time(gemms, args.reps)
    log(f"  phase22 {t * 1e3:.2f} ms, 28 INT8 GEMMs {t28 * 1e3:.2f} ms (x{t / t28:.2f}), "
        f"native {t_nat * 1e3:.2f} ms, err {err:.2e} / native {err_nat:.2e}")
    return {"n": n, "seconds": t, "tflops": 2.0 * n ** 3 / t / 1e12, "int8_28_seconds": t28,
            "ratio_to_28_gemms": t / t28, "native_seconds": t_nat, "max_abs_err": err,
            "native_max_abs_err": err_nat}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


# ----------------------------------------------------------------------------- complex128

def _bench_complex(cp, n, args, log):
    """complex128 n x n x n: cuBLAS ZGEMM (CuPy matmul) against the emulation on device
    operands (fp64 plan; the moduli count quoted), accuracy on sampled rows (real and
    imaginary parts against double-double references of the real embedding), and NumPy
    in/out: ``matmul(engine="cuda")`` and ``@`` inside ``enabled(engine="cuda")`` next to
    host NumPy."""
    import ozaki_backend
    from .cuda import complex as ccx
    from .plan import Plan

    phi = float(args.phis.split(",")[0])
    rng = cp.random.default_rng(n * 17 + 3)
    A = _matrix(cp, rng, (n, n), phi) + 1j * _matrix(cp, rng, (n, n), phi)
    B = _matrix(cp, rng, (n, n), phi) + 1j * _matrix(cp, rng, (n, n), phi)
    plan = Plan(n, n, n)
    N = ccx.moduli_for(A, B, plan)
    t_z = median_device_time(lambda: cp.matmul(A, B), args.reps)
    t_e = median_device_time(lambda: ozaki_backend.matmul(A, B, engine="cuda"), args.reps)
    rows = cp.linspace(0, n - 1, min(n, args.err_rows)).astype(cp.int64)
    Ar, Ai, Br, Bi = A.real[rows], A.imag[rows], B.real, B.imag
    ref_re = sampled_rows_reference(cp.concatenate([Ar, -Ai], 1), cp.concatenate([Br, Bi], 0))
    ref_im = sampled_rows_reference(cp.concatenate([Ar, Ai], 1), cp.concatenate([Bi, Br], 0))

    def err(C):
        C = C[rows]
        return max(sampled_rows_error(cp.ascontiguousarray(C.real), ref_re),
                   sampled_rows_error(cp.ascontiguousarray(C.imag), ref_im))

    from .cuda.pipeline import Phases
    ph = Phases()
    ccx.product_2d(A, B, plan, phases=ph)
    phases = ph.totals()
    flops = 8.0 * n ** 3      # real flops of a complex product
    # 2N modular GEMMs (m x k x n) and the bound GEMM of the embedding (m x 2k x 2n).
    res = {"n": n, "phi": phi, "moduli": N, "int8_gemms": 2 * N + 1, "phases_s": phases,
           "zgemm_s": t_z, "zgemm_tflops": flops / t_z / 1e12, "zgemm_err": err(cp.matmul(A, B)),
           "emulated_s": t_e, "emulated_tflops": flops / t_e / 1e12,
           "speedup": t_z / t_e, "emulated_err": err(ozaki_backend.matmul(A, B, engine="cuda"))}
    log(f"  ZGEMM {t_z * 1e3:.2f} ms ({res['zgemm_tflops']:.1f} TFLOPS), emulated "
        f"{t_e * 1e3:.2f} ms with {N} moduli ({2 * N} + 1 INT8 GEMMs) -> x{res['speedup']:.2f}; "
        f"max rel err (parts, sampled rows) {res['emulated_err']:.1e} vs ZGEMM "
        f"{res['zgemm_err']:.1e}")
    log("  phases (one product, CUDA events): "
        + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in phases.items()))
    res["numpy_io"] = None
    if n * n <= args.numpy_max:
        a_h, b_h = cp.asnumpy(A), cp.asnumpy(B)
        t_api = median_wall_time(lambda: ozaki_backend.matmul(a_h, b_h, engine="cuda"),
                                 args.reps)

        def scoped():
            with ozaki_backend.enabled(engine="cuda", min_size=0):
                return a_h @ b_h

        t_scope = median_wall_time(scoped, args.reps)
        t_host = median_wall_time(lambda: a_h @ b_h, 1) if n * n <= args.host_numpy_max \
            else None
        res["numpy_io"] = {"api_s": t_api, "enabled_s": t_scope, "numpy_host_s": t_host}
        log(f"  NumPy in/out: matmul(engine='cuda') {t_api * 1e3:.1f} ms, @ in enabled() "
            f"{t_scope * 1e3:.1f} ms, host NumPy "
            + ("-" if t_host is None else f"{t_host * 1e3:.1f} ms"))
    return res


def _complex_line(r):
    io = r.get("numpy_io") or {}
    host = io.get("numpy_host_s")
    text = (f"complex128 n={r['n']}: ZGEMM {r['zgemm_s'] * 1e3:.2f} ms "
            f"({r['zgemm_tflops']:.1f} TFLOPS, err {r['zgemm_err']:.1e}); emulated "
            f"{r['emulated_s'] * 1e3:.2f} ms, {r['moduli']} moduli ({r['int8_gemms']} INT8 "
            f"GEMMs), x{r['speedup']:.2f}, err {r['emulated_err']:.1e}")
    if r.get("phases_s"):
        text += " [" + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r["phases_s"].items()) \
            + " ms]"
    if io:
        text += (f"; NumPy in/out matmul() {io['api_s'] * 1e3:.0f} ms, @ in enabled() "
                 f"{io['enabled_s'] * 1e3:.0f} ms, host NumPy "
                 + ("-" if host is None else f"{host * 1e3:.0f} ms"))
    return text
