"""``python -m ozaki_backend bench --host``: NumPy operands in, NumPy result out, inside
``enabled()``, for every entry point, next to plain NumPy on the host.

Rows (each the median of ``--reps`` wall times after a warm-up, plain NumPy timed the
same way outside any scope):

* at ``n = --n`` (default 8192): ``A @ B``, ``np.dot(A, B)``,
  ``scipy.linalg.blas.dgemm(1.0, A, B)`` with Fortran-ordered operands; then the same
  product through every other entry point inside ``enabled()`` only, each against the
  routed ``A @ B`` (the target: within 1.1x of it): ``A.dot(B)`` and a ``dot`` held from
  before installation (the BLAS call-site hook), ``np.inner``, ``np.linalg.multi_dot``,
  ``np.einsum``, ``np.tensordot``;
* ``X.T @ X`` for X ``--gram`` (default 60000 x 4096, C order): exactly symmetric or
  not, and its time against a general product of the same shape (``X.T @ Y``);
* ``sklearn.linear_model.Ridge(solver="cholesky").fit(X, y)`` natively and inside
  ``enabled()`` (skipped when scikit-learn is not installed);
* the grid (``--grid``): for each shape, plain NumPy against the same call inside
  ``enabled()`` with the cost model deciding (``min_size="auto"``), timed alternately
  (one call each way in turn, so that a drift of the machine's speed cannot pass for a
  cost of the scope; as many times as make each side run ``GRID_MIN_SECONDS``, so
  that a 0.1 ms product is not judged on three calls), their
  ratio, the decision and where it was made (``decided_in``: in the C hook below the
  floor, or by the Python router); the target is a ratio of at most
  1.03 everywhere, and the worst ratio of a declined shape is reported on its own
  (``worst_declined``: a product the backend keeps native must cost nothing);
* the host path's steps for ``A @ B`` at ``n`` (upload, engine, download, each
  synchronised; and the engine's device phases) when the CUDA engine runs it;
* the GPU memory high-water mark of each routed row (CuPy's memory pool, through a
  tracking allocator) and the device's free memory (``cudaMemGetInfo``).

With ``--engine cpu`` it runs on a machine without a GPU (the CPU engine is slow: use
small ``--n``, ``--gram`` and ``--grid``), which is how its tests run.
``--json FILE`` writes everything (schema ``ozaki_backend-bench-host/1``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import time

import numpy as np

from ._cli import Parser, Progress, int_at_least
from .shapes import HELP as SHAPES_HELP
from .shapes import format_shape, parse_shape

SCHEMA = "ozaki_backend-bench-host/1"
DEFAULT_GRID = ("256;512;1024;2048;4096;8192;16384;100000,100000,64;64,64,100000;"
                "16384,16384,256")
#: Largest ratio routed / plain NumPy the grid may show (issue 17).
TARGET_RATIO = 1.03


#: The defaults of ``--n``, ``--gram`` and ``--grid`` for the engine that will run: the
#: GPU's are the sizes where routing matters; the CPU engine's finish in about a minute
#: on a small machine (it is a reference, far slower than BLAS).
ENGINE_DEFAULTS = {
    "cuda": {"n": 8192, "gram": "60000x4096", "grid": DEFAULT_GRID},
    "cpu": {"n": 256, "gram": "4000x128", "grid": "64;128;256;512"},
}


def _gram(text):
    """``--gram``: ``ROWSxCOLS`` with both >= 1, or ``''`` (argparse type)."""
    if not text.strip():
        return ""
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        rows = cols = 0
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(
            f"must be ROWSxCOLS with both >= 1 (e.g. 60000x4096), or '' to skip; "
            f"got {text!r}")
    return text


def _grid(text):
    """``--grid``: shapes separated by ';', each checked (argparse type)."""
    for part in text.split(";"):
        if part.strip():
            parse_shape(part)
    return text


def _parse(argv):
    ap = Parser(prog="python -m ozaki_backend bench --host",
                description="NumPy operands in, NumPy result out, inside enabled(), for "
                            "every entry point, next to plain NumPy on the host.")
    cpu, gpu = ENGINE_DEFAULTS["cpu"], ENGINE_DEFAULTS["cuda"]
    ap.add_argument("--n", type=int_at_least(0), default=None,
                    help=f"size of the entry-point rows, 0 skips them (default "
                         f"{gpu['n']} on the GPU, {cpu['n']} on the CPU engine)")
    ap.add_argument("--gram", default=None, type=_gram,
                    help=f"X's shape ROWSxCOLS for X.T @ X and Ridge, '' skips both "
                         f"(default {gpu['gram']} on the GPU, {cpu['gram']} on the CPU "
                         f"engine)")
    ap.add_argument("--grid", default=None, type=_grid,
                    help=f"product shapes separated by ';', '' skips the grid (default: "
                         f"{len(gpu['grid'].split(';'))} shapes from 256 to 100000 on the "
                         f"GPU, {cpu['grid']} on the CPU engine): " + SHAPES_HELP)
    ap.add_argument("--reps", type=int_at_least(1), default=5,
                    help="timed runs per row, median (default 5)")
    ap.add_argument("--grid-reps", type=int_at_least(1), default=3,
                    help="timed runs per grid shape, median (default 3)")
    ap.add_argument("--engine", type=str.lower, choices=("auto", "cpu", "cuda"),
                    default="auto", help="engine of the routed calls (default auto)")
    ap.add_argument("--no-ridge", action="store_true", help="skip scikit-learn's Ridge")
    ap.add_argument("--no-scipy", action="store_true", help="skip SciPy's dgemm")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    if None in (args.n, args.gram, args.grid):
        from . import registry

        defaults = ENGINE_DEFAULTS[registry.resolve_name(args.engine)[0]]
        for key in ("n", "gram", "grid"):
            if getattr(args, key) is None:
                setattr(args, key, defaults[key])
    args.grid_shapes = [parse_shape(s) for s in args.grid.split(";") if s.strip()]
    args.gram_shape = tuple(int(v) for v in args.gram.lower().split("x")) if args.gram else None
    if not (args.n or args.gram_shape or args.grid_shapes):
        ap.error("nothing to measure: --n 0, --gram '' and --grid '' skip every row")
    return args


def _row_weights(args):
    """The flops of each row :func:`run` will log, in order (the progress line's
    weights)."""
    import importlib.util

    n = args.n
    w = [2.0 * n ** 3] * ((2 + (not args.no_scipy)) if n else 0)
    w += [2.0 * n ** 3 * 0.1] * (len(OTHER_ENTRIES) if n else 0)   # routed side only
    if args.gram_shape:
        rows, k = args.gram_shape
        ridge = not args.no_ridge and importlib.util.find_spec("sklearn") is not None
        w += [2.0 * rows * k * k] * (2 + ridge)
    w += [2.0 * m * nn * k for m, nn, k in args.grid_shapes]
    return w


# ----------------------------------------------------------------------------- timing

def median_time(fn, reps, *, keep=True, slow_s=2.0):
    """``(median seconds, result of the last call or None)`` of ``reps`` calls of
    ``fn`` after a warm-up call.

    The warm-up call is kept as a sample when it took over ``slow_s`` (large native
    products: a second identical run adds nothing but time). Each result is dropped
    before the next call (results of the grid's outer product take 80 GB)."""
    times = []
    t0 = time.perf_counter()
    res = fn()
    first = time.perf_counter() - t0
    if first > slow_s:
        times.append(first)
    while len(times) < max(1, reps):
        res = None
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (res if keep else None)


#: Each side of a grid row runs at least this long (seconds): a 256^3 product takes
#: ~0.1 ms on a 16-core host, where three or five calls measured the machine's jitter
#: (1.28x at 256^3 on the H100 host with three calls each way, below the floor, where
#: the scope adds one comparison in C).
GRID_MIN_SECONDS = 0.25
#: At most this many calls each way, whatever ``min_seconds`` asks.
MAX_REPS = 2001


def alternating_times(fn, reps, scope, min_seconds=0.0):
    """``(native median, scoped median)`` seconds of ``fn`` called alternately outside
    any scope and inside ``scope()``, after one warm-up call each way, ``reps`` times
    each or more: as many as make each side run ``min_seconds`` (at most
    :data:`MAX_REPS`). Alternating pairs keep a drift of the machine's speed (turbo,
    other load) out of the ratio, which timing one side after the other does not."""
    nat, inside = [], []
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    with scope():
        fn()
    if min_seconds > 0 and first > 0:
        reps = max(reps, min(MAX_REPS, int(min_seconds / first) + 1))
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        nat.append(time.perf_counter() - t0)
        with scope():
            t0 = time.perf_counter()
            fn()
            inside.append(time.perf_counter() - t0)
    return statistics.median(nat), statistics.median(inside)


def declined_ratios(shapes, reps, scope, *, entry="@/np.matmul"):
    """For each ``(m, n, k)`` of ``shapes`` that ``scope``'s configuration declines (the
    cost model keeps it native), the ratio of ``a @ b`` inside the scope to plain
    NumPy (:func:`alternating_times`). Returns ``{(m, n, k): ratio}``; the routed shapes
    are left out."""
    from .dispatch import routing

    cfg = _scope_config(scope)
    out = {}
    for (m, n, k) in shapes:
        if routing.decide(cfg, m, n, k, entry=entry):
            continue
        rng = np.random.default_rng(m + n + k)
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        t_nat, t_in = alternating_times(lambda: a @ b, reps, scope,
                                        min_seconds=GRID_MIN_SECONDS)
        out[(m, n, k)] = t_in / t_nat
    return out


class DeviceMemory:
    """High-water mark of CuPy's default memory pool while active (a tracking
    allocator in front of the pool), and ``cudaMemGetInfo``; inert without CuPy."""

    def __init__(self):
        self.cupy = sys.modules.get("cupy")
        self.peak = None

    def __enter__(self):
        cp = self.cupy
        if cp is None:
            return self
        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        self.base = pool.used_bytes()
        self.peak = self.base

        def alloc(size):
            mem = pool.malloc(size)
            used = pool.used_bytes()
            if used > self.peak:
                self.peak = used
            return mem

        cp.cuda.set_allocator(alloc)
        return self

    def __exit__(self, *exc):
        if self.cupy is not None:
            self.cupy.cuda.set_allocator(self.cupy.get_default_memory_pool().malloc)
        return False

    def report(self):
        """``{"pool_peak_bytes", "pool_base_bytes", "device_free_bytes",
        "device_total_bytes"}`` or None without CuPy."""
        cp = self.cupy
        if cp is None or self.peak is None:
            return None
        free, total = cp.cuda.runtime.memGetInfo()
        return {"pool_peak_bytes": int(self.peak), "pool_base_bytes": int(self.base),
                "device_free_bytes": int(free), "device_total_bytes": int(total)}


def _counts():
    import ozaki_backend as ob

    s = ob.stats()
    return s["routed"], s["fallback"]


def _rel_diff(x, ref):
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(x - ref))) / scale


def timed_pair(name, call, reps, scope, *, check=True):
    """One row: ``call()`` natively and inside ``scope`` (a fresh ``enabled()``)."""
    import ozaki_backend as ob

    t_nat, ref = median_time(call, reps, keep=check)
    routed0, fallback0 = _counts()
    with DeviceMemory() as mem:
        with scope():
            t_rt, res = median_time(call, reps, keep=check)
    routed1, fallback1 = _counts()
    row = {"name": name, "native_s": t_nat, "routed_s": t_rt, "ratio": t_rt / t_nat,
           "routed": routed1 > routed0, "fallbacks": fallback1 - fallback0,
           "memory": mem.report()}
    if check and isinstance(res, np.ndarray):
        row["max_rel_diff_vs_numpy"] = _rel_diff(res, ref)
        row["result_order"] = "C" if res.flags.c_contiguous else (
            "F" if res.flags.f_contiguous else "other")
    del ref, res
    ob.reset_stats()
    return row


# ----------------------------------------------------------------------------- rows

def entry_rows(args, scope, log):
    """``A @ B``, ``np.dot``, SciPy's ``dgemm`` (Fortran operands) at ``n``."""
    n = args.n
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n))
    B = rng.standard_normal((n, n))
    rows = [timed_pair("A @ B", lambda: A @ B, args.reps, scope),
            timed_pair("np.dot(A, B)", lambda: np.dot(A, B), args.reps, scope)]
    Af = Bf = None
    if not args.no_scipy:
        try:
            from scipy.linalg import blas
        except ImportError:
            log("scipy not installed: dgemm row skipped")
        else:
            Af, Bf = np.asfortranarray(A), np.asfortranarray(B)
            del A, B
            rows.append(timed_pair("dgemm(1.0, A, B) Fortran", lambda: blas.dgemm(1.0, Af, Bf),
                                   args.reps, scope))
    for r in rows:
        r["shape"] = [n, n, n]
        log(_row_line(r))
    if Af is not None:   # A and B were dropped for their Fortran copies
        A, B = np.ascontiguousarray(Af), np.ascontiguousarray(Bf)
        Af = Bf = None
    t_matmul = rows[0]["routed_s"]
    for name, make in OTHER_ENTRIES:
        call = make(A, B)
        with scope():
            t, _ = median_time(call, args.reps, keep=False)
        r = {"name": name, "routed_s": t, "shape": [n, n, n], "vs_matmul": t / t_matmul,
             "ok": t / t_matmul <= ENTRY_TARGET}
        log(f"{name:>28s}: routed {t * 1e3:9.1f} ms  vs A @ B x{r['vs_matmul']:.3f} "
            f"({'ok' if r['ok'] else 'SLOWER than'} {ENTRY_TARGET:.2f}x)")
        rows.append(r)
    return rows


def _held_dot():
    """NumPy's own ``dot`` as code that imported it before the backend was installed
    holds it (the wrapper's original: only the BLAS call-site hook sees its products)."""
    return getattr(np.dot, "_ozaki_backend_original", np.dot)


#: The entry points timed inside ``enabled()`` only, against the routed ``A @ B`` of
#: the same operands: (row name, ``f(A, B) -> call``).
OTHER_ENTRIES = (
    ("A.dot(B)", lambda A, B: (lambda: A.dot(B))),
    ("held dot(A, B)", lambda A, B: (lambda d=_held_dot(): d(A, B))),
    ("np.inner(A, B.T)", lambda A, B: (lambda Bt=np.ascontiguousarray(B.T):
                                       np.inner(A, Bt))),
    ("multi_dot([A, B])", lambda A, B: (lambda: np.linalg.multi_dot([A, B]))),
    ("einsum('ij,jk->ik')", lambda A, B: (lambda: np.einsum("ij,jk->ik", A, B))),
    ("tensordot(A, B, 1)", lambda A, B: (lambda: np.tensordot(A, B, 1))),
)
#: Largest time of another entry point over the routed ``A @ B`` (issue 29).
ENTRY_TARGET = 1.1


def gram_rows(args, scope, log):
    """``X.T @ X`` (symmetry, time against ``X.T @ Y`` of the same shape) and Ridge."""
    rows, k = args.gram_shape
    rng = np.random.default_rng(1)
    X = rng.standard_normal((rows, k))
    Y = rng.standard_normal((rows, k))
    gram = timed_pair("X.T @ X", lambda: X.T @ X, args.reps, scope)
    with scope():
        G = X.T @ X
    gram["exactly_symmetric"] = bool(np.array_equal(G, G.T))
    gram["native_exactly_symmetric"] = bool(np.array_equal(X.T @ X, (X.T @ X).T))
    del G
    general = timed_pair("X.T @ Y", lambda: X.T @ Y, args.reps, scope)
    gram["general_routed_s"] = general["routed_s"]
    gram["vs_general"] = gram["routed_s"] / general["routed_s"]
    out = [gram, general]
    for r in out:
        r["shape"] = [k, k, rows]     # m, n, k (shapes.py): (k x rows) @ (rows x k)
    if not args.no_ridge:
        try:
            from sklearn.linear_model import Ridge
        except ImportError:
            log("scikit-learn not installed: Ridge row skipped")
        else:
            y = rng.standard_normal(rows)
            r = timed_pair("Ridge(cholesky).fit", lambda: Ridge(solver="cholesky").fit(X, y),
                           args.reps, scope, check=False)
            r["shape"] = [rows, k]
            r["speedup"] = r["native_s"] / r["routed_s"]
            out.append(r)
    for r in out:
        log(_row_line(r))
    return out


def grid_rows(args, scope, log):
    """Plain NumPy against the routed call (the cost model deciding) per shape, each
    way for at least :data:`GRID_MIN_SECONDS` (a routed shape's first calls are its
    cold ones: three of them measured those)."""
    from .dispatch import loophook, routing

    import ozaki_backend as ob

    out = []
    for (m, n, k) in args.grid_shapes:
        rng = np.random.default_rng(m + k + n)
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n))
        d = routing.decide(_scope_config(scope), m, n, k, entry="@/np.matmul")
        routed0, fallback0 = _counts()
        hook0 = loophook.counters()
        t_nat, t_rt = alternating_times(lambda: a @ b, args.grid_reps, scope,
                                        min_seconds=GRID_MIN_SECONDS)
        routed1, fallback1 = _counts()
        hook1 = loophook.counters()
        r = {"name": format_shape(m, n, k), "native_s": t_nat, "routed_s": t_rt,
             "ratio": t_rt / t_nat, "routed": routed1 > routed0,
             "fallbacks": fallback1 - fallback0, "memory": None, "shape": [m, n, k],
             "decision": "routed" if d else "native", "decision_text": str(d),
             "reason": d.reason, "est_host_s": d.est_host_s,
             "est_emulated_s": d.est_emulated_s, "ok": t_rt / t_nat <= TARGET_RATIO,
             "decided_in": _decided_in(hook0, hook1)}
        ob.reset_stats()
        a = b = None
        where = "" if d else f" (decided in {r['decided_in']})"
        log(_row_line(r) + f" | {'ok' if r['ok'] else 'SLOWER'}: {d.reason}{where}")
        out.append(r)
    return out


def _decided_in(before, after):
    """Where the scoped calls of a grid row were decided, from the loop hook's counts
    (``loophook.counters()`` before and after): ``"C"`` when every one stayed in the
    C hook (below the floor: NumPy's loop with one comparison added), ``"Python"`` when
    every one called the Python router (the cost model's decision, ~15-50 us), else
    ``"mixed"`` (or ``"unknown"`` without the extension)."""
    below = after["below_floor"] - before["below_floor"]
    py = after["python_calls"] - before["python_calls"]
    if below and not py:
        return "C"
    if py and not below:
        return "Python"
    return "mixed" if below or py else "unknown"


def worst_declined(grid):
    """``(ratio, shape)`` of the grid's declined row with the largest ratio, or None."""
    declined = [(r["ratio"], r["shape"]) for r in grid if r.get("decision") == "native"]
    return max(declined) if declined else None


def _scope_config(scope):
    from .dispatch import config

    with scope():
        return config.current().config


def phase_breakdown(args, log):
    """Upload / engine / download of ``A @ B`` at ``n`` through the CUDA engine (each
    step synchronised), the engine's device phases, and the memory high-water mark."""
    from .cuda import engine, pipeline
    from .plan import Plan

    n = args.n
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n))
    B = rng.standard_normal((n, n))
    plan = Plan(n, n, n)
    engine.matmul_numpy(A, B, plan)  # warm-up: kernels, staging buffers
    runs = []
    with DeviceMemory() as mem:
        for _ in range(max(1, args.reps)):
            steps = {}
            t0 = time.perf_counter()
            engine.matmul_numpy(A, B, plan, steps=steps, check_finite=True)
            steps["total"] = time.perf_counter() - t0
            runs.append(steps)
        ph = pipeline.Phases()
        engine.matmul_numpy(A, B, plan, phases=ph, check_finite=True)
        phases = ph.totals()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    # The engine alone as a routed call runs it (overlapped, nothing synchronised in
    # between): the entry rows minus this is the dispatch layer's and the API's share.
    t_engine, _ = median_time(lambda: engine.matmul_numpy(A, B, plan, check_finite=True),
                              args.reps, keep=False)
    nbytes = 3 * 8 * n * n
    res = {"shape": [n, n, n], "steps_s": med, "device_phases_s": phases,
           "engine_overlapped_s": t_engine,
           "h2d_gbps": 2 * 8 * n * n / med["upload"] / 1e9,
           "d2h_gbps": 8 * n * n / med["download"] / 1e9,
           "transfer_bytes": nbytes, "memory": mem.report()}
    log(f"host path A @ B n={n} (steps synchronised): upload {med['upload'] * 1e3:.1f} ms "
        f"({res['h2d_gbps']:.1f} GB/s), engine {med['engine'] * 1e3:.1f} ms, download "
        f"{med['download'] * 1e3:.1f} ms ({res['d2h_gbps']:.1f} GB/s), total "
        f"{med['total'] * 1e3:.1f} ms; overlapped engine call {t_engine * 1e3:.1f} ms; "
        "device phases " + ", ".join(
            f"{k} {v * 1e3:.1f}" for k, v in phases.items()) + " ms")
    return res


def _row_line(r):
    extra = ""
    if "exactly_symmetric" in r:
        extra = (f" | symmetric {r['exactly_symmetric']} (NumPy "
                 f"{r['native_exactly_symmetric']}), x{r['vs_general']:.2f} of X.T @ Y")
    if "speedup" in r:
        extra = f" | speed-up x{r['speedup']:.2f}"
    mem = r.get("memory") or {}
    if mem:
        extra += f" | GPU pool peak {mem['pool_peak_bytes'] / 2**30:.2f} GiB"
    if r.get("fallbacks"):
        extra += f" | {r['fallbacks']} FALLBACKS (see the log)"
    return (f"{r['name']:>28s}: routed {r['routed_s'] * 1e3:9.1f} ms  NumPy "
            f"{r['native_s'] * 1e3:9.1f} ms  ratio {r['ratio']:6.3f}  "
            f"{'routed' if r['routed'] else 'native'}{extra}")


# ----------------------------------------------------------------------------- main

def run(args, log=print) -> dict:
    """All rows for parsed ``args``; returns the report (the JSON document's body)."""
    import ozaki_backend as ob

    def scope():
        return ob.enabled(engine=args.engine)

    from . import registry

    ob.dispatch.install()
    eng, why = registry.resolve_name(args.engine)
    report = {"schema": SCHEMA,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime(
                  "%Y-%m-%dT%H:%M:%SZ"),
              "engine": eng, "engine_why": why, "n": args.n, "reps": args.reps,
              "target_ratio": TARGET_RATIO}
    from .dispatch import costmodel

    report["cost_model"] = repr(costmodel.cost_model())
    log(f"engine {eng} ({why}); {report['cost_model']}")
    report["entries"] = entry_rows(args, scope, log) if args.n else []
    report["phases"] = phase_breakdown(args, log) if (eng == "cuda" and args.n) else None
    report["gram"] = gram_rows(args, scope, log) if args.gram_shape else []
    report["grid"] = grid_rows(args, scope, log) if args.grid_shapes else []
    report["grid_ok"] = all(r["ok"] for r in report["grid"])
    worst = worst_declined(report["grid"])
    report["worst_declined"] = (None if worst is None else
                                {"ratio": worst[0], "shape": worst[1]})
    return report


def table(report) -> str:
    """The printed summary: every row with plain NumPy next to it."""
    lines = [f"ozaki_backend bench --host  {report['date']}  engine {report['engine']}",
             f"{'':>28s}  {'routed':>12s}  {'NumPy':>12s}  ratio"]
    for r in report["entries"] + report["gram"] + report["grid"]:
        if "vs_matmul" in r:
            lines.append(f"{r['name']:>28s}: routed {r['routed_s'] * 1e3:9.1f} ms  "
                         f"vs A @ B x{r['vs_matmul']:.3f}")
        elif "decision" in r:
            lines.append(_row_line(r) + f" | decided {r['decision']}")
        else:
            lines.append(_row_line(r))
    ph = report.get("phases")
    if ph:
        s = ph["steps_s"]
        lines.append(f"host path n={ph['shape'][0]}: upload {s['upload'] * 1e3:.1f} / engine "
                     f"{s['engine'] * 1e3:.1f} / download {s['download'] * 1e3:.1f} ms "
                     f"synchronised; the engine call overlapped "
                     f"{ph['engine_overlapped_s'] * 1e3:.1f} ms (transfer floor "
                     f"{ph['transfer_bytes'] / 55e9 * 1e3:.0f} ms at 55 GB/s)")
    if report["grid"]:
        lines.append(f"grid: {'every' if report['grid_ok'] else 'NOT every'} call inside "
                     f"enabled() within {report['target_ratio']:.2f}x of plain NumPy")
        worst = report.get("worst_declined")
        lines.append("worst declined ratio: " + (
            "none declined" if worst is None else
            f"{worst['ratio']:.3f} at {format_shape(*worst['shape'])} (target <= "
            f"{report['target_ratio']:.2f})"))
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    # The status line (stderr, terminals only) counts the logged table rows.
    progress = Progress("bench --host", _row_weights(args)).start()
    try:
        report = run(args, log=progress.wrap(lambda s: print(s, flush=True),
                                             counts=lambda s: " NumPy " in s
                                             and " ratio " in s))
    finally:
        progress.close()
    report["command"] = "python -m ozaki_backend bench --host " + shlex.join(argv)
    print()
    print(table(report))
    if args.json:
        from . import provenance

        report["machine"] = (provenance.gpu_machine() if report["engine"] == "cuda"
                             else provenance.cpu_machine())
        report["commit"] = provenance.commit()
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
