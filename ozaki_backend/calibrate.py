"""``python -m ozaki_backend calibrate``: measure the ``precision="fp64"`` moduli table.

``precision="fp64"`` picks the moduli count per product from the reduction length k
and the operands' *exponent spread* (:func:`ozaki_backend.reference.scaling.exponent_spread`,
``docs/spec.md`` §1): the table has one row per k bucket and one column per spread
bucket. For each scaling mode and k bucket, the CPU engine multiplies the test
operands of every family and seed with every moduli count of a window (from the top
down, until the count first fails), compares each result with the exact product
(:func:`ozaki_backend.testing.exact_matmul`) and with native float64 (``np.matmul``),
and sorts the operand pairs into spread buckets by their measured spread. The
emulated results are bitwise identical on every engine (``docs/spec.md``), so a CPU
calibration holds for the GPU; only the native reference is this machine's BLAS.

Families (:func:`case_operands`): the φ test matrices
(:func:`ozaki_backend.testing.phi_matrix`, φ in {-1, 0, 0.5, 1, 2, 4}) and *outliers*:
standard normal operands in which every row of A and every column of B has
``OUTLIERS_PER_ROW`` entries scaled by ``2**f`` (f in {8, 14, 20}) — rows whose
maximum sits far above everything else, the case a spread statistic must not miss.

Rules that make the table conservative:

* A moduli count *passes* an operand pair when the emulated product's max relative
  error is no worse than native's on the same matrices. A cell's count is the fewest
  from which every larger count of the window passes every pair of the cell.
* A pass is *borderline* when some pair has ``error > native * MARGIN``
  (``MARGIN = 1/2``); then one more modulus is taken.
* A cell no pair fell into takes the smallest count measured in a cell of larger (or
  equal) k and spread — the largest value that keeps the table monotone — or the top
  of the window when there is none; spreads beyond the last bucket edge always get
  the top of the window (``beyond``).
* The table is made non-decreasing in k and in spread.
* Each bucket's count must also pass at an interior k (the geometric midpoint of the
  bucket), else the cell of the failing pair is raised until it does.

Outputs: ``ozaki_backend/_data/fp64_moduli.json`` (the table :func:`ozaki_backend.plan`
reads) and, when run from a source checkout, ``docs/data/accuracy_cpu.json``: every
measured error as ``kind="accuracy"`` records of the docs' benchmark schema
``ozaki_backend-bench/1`` (``docs/data/README.md``), plus a top-level ``calibration``
object (see :func:`main`). The printed report shows, per mode and k, each spread
bucket's pairs, their worst error at the chosen count next to native float64's, and
the count.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from . import provenance

PHIS = (-1.0, 0.0, 0.5, 1.0, 2.0, 4.0)
OUTLIERS = (8, 14, 20)
OUTLIERS_PER_ROW = 2
K_BUCKETS = (64, 256, 1024, 4096, 16384)
SPREAD_EDGES = (4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40)
SEEDS = (0, 1, 2, 3)
MARGIN = 0.5

_PKG = Path(__file__).resolve().parent
_FP64_JSON = _PKG / "_data" / "fp64_moduli.json"
_DOCS_JSON = _PKG.parent / "docs" / "data" / "accuracy_cpu.json"


def operands(m, n, k, phi, seed):
    """The φ-family operands of one case: ``(A, B)``.

    ``rng = numpy.random.default_rng([seed, k, phi_code])`` with
    ``phi_code = round(10 * phi) + 10``; A (m×k) is drawn first, then B (k×n), both by
    :func:`ozaki_backend.testing.phi_matrix`. Anyone can regenerate them.
    """
    from .testing import phi_matrix

    rng = np.random.default_rng([int(seed), int(k), int(round(10 * phi)) + 10])
    A = phi_matrix((m, k), phi, rng)
    B = phi_matrix((k, n), phi, rng)
    return A, B


def outlier_operands(m, n, k, f, seed, per_row=OUTLIERS_PER_ROW):
    """The outlier-family operands of one case: ``(A, B)``.

    ``rng = numpy.random.default_rng([seed, k, 1000 + f])``; A (m×k) and B (k×n)
    standard normal (A first), then in every row of A ``per_row`` distinct entries
    (the first ``per_row`` of ``argsort(rng.random((m, k)), axis=1)``) are multiplied
    by ``2**f``, then likewise in every column of B (``argsort(rng.random((n, k)))``).
    """
    rng = np.random.default_rng([int(seed), int(k), 1000 + int(f)])
    A = rng.standard_normal((m, k))
    B = rng.standard_normal((k, n))
    c = min(int(per_row), k)
    if c and m:
        idx = np.argsort(rng.random((m, k)), axis=1)[:, :c]
        np.put_along_axis(A, idx, np.take_along_axis(A, idx, axis=1) * 2.0 ** f, axis=1)
    if c and n:
        Bt = B.T
        idx = np.argsort(rng.random((n, k)), axis=1)[:, :c]
        np.put_along_axis(Bt, idx, np.take_along_axis(Bt, idx, axis=1) * 2.0 ** f, axis=1)
    return A, B


def case_operands(m, n, k, family, param, seed):
    """``(A, B)`` of one calibration case: ``family`` is ``"phi"`` (``param`` = φ) or
    ``"outliers"`` (``param`` = log2 of the outlier factor)."""
    if family == "phi":
        return operands(m, n, k, param, seed)
    if family == "outliers":
        return outlier_operands(m, n, k, param, seed)
    raise ValueError(f"unknown calibration family {family!r}")


def family_label(family, param) -> str:
    return f"phi={param:g}" if family == "phi" else f"outliers 2^{param:g}"


def spread_bucket(spread: int, edges) -> int:
    """Index of the first edge ``>= spread``; ``len(edges)`` beyond the last edge."""
    for b, edge in enumerate(edges):
        if spread <= edge:
            return b
    return len(edges)


def _errors(C, E):
    """``(max, median)`` relative error of ``C`` against the exact ``E``."""
    from .testing import relative_errors

    r = relative_errors(C, E)
    return float(r.max()), float(np.median(r))


class _Case:
    """Operands, exact and native results and the spread of one (k, family, seed)."""

    def __init__(self, m, n, k, family, param, seed):
        from .reference.scaling import exponent_spread
        from .testing import exact_matmul

        self.k, self.family, self.param, self.seed = k, family, param, seed
        self.A, self.B = case_operands(m, n, k, family, param, seed)
        self.E = exact_matmul(self.A, self.B)
        self.native, self.native_median = _errors(np.matmul(self.A, self.B), self.E)
        self.spread = exponent_spread(self.A, self.B)

    @property
    def label(self):
        return f"{family_label(self.family, self.param)} s{self.seed}"


def _ozaki_errors(case, mode, N):
    from .plan import Plan
    from .reference.engine import product_2d as matmul_2d

    m, k = case.A.shape
    n = case.B.shape[1]
    p = Plan(m, n, k, moduli=N, mode=mode, engine="cpu")
    return _errors(matmul_2d(case.A, case.B, p), case.E)


def _scan(case, mode, window, record):
    """Errors from the top of the window down, until a count first fails.

    Returns ``(n0, errs)``: ``n0`` is the fewest count from which every larger count
    of the window passes (no worse than native), None when the top fails too;
    ``errs[N]`` the max relative error of every count measured.
    """
    errs, n0 = {}, None
    for N in reversed(window):
        mx, med = _ozaki_errors(case, mode, N)
        record(case, "ozaki_backend", mx, med, engine="cpu", scheme="ozaki2", mode=mode,
               moduli=N, precision=None)
        errs[N] = mx
        if mx > case.native:
            break
        n0 = N
    return n0, errs


def _choose(scans, natives, window):
    """A cell's count from its pairs' scans (``_scan`` results) and native errors.

    The fewest count from which every larger count passes every pair; one more when
    some pair is within a factor ``1/MARGIN`` of native there.
    """
    top = window[-1]
    if any(n0 is None for n0, _ in scans):
        return top, f"some pair fails even at {top}: took {top}"
    N0 = max(n0 for n0, _ in scans)
    if N0 < top and any(errs[N0] > nat * MARGIN for (_, errs), nat in zip(scans, natives)):
        return N0 + 1, (f"{N0} passes, but within a factor {1 / MARGIN:g} of native on "
                        f"some pair: took {N0 + 1}")
    return N0, f"{N0} passes"


def fill_and_close(raw, top):
    """The table from the measured cells ``raw[k_bucket][spread_bucket]`` (None where no
    pair fell): empty cells take the smallest measured count at larger-or-equal k and
    spread (``top`` when there is none), then every cell the largest count at
    smaller-or-equal k and spread (non-decreasing in both)."""
    nk, ns = len(raw), len(raw[0]) if raw else 0
    filled = [[raw[i][b] if raw[i][b] is not None else
               min([raw[i2][b2] for i2 in range(i, nk) for b2 in range(b, ns)
                    if raw[i2][b2] is not None], default=top)
               for b in range(ns)] for i in range(nk)]
    return close(filled)


def close(table):
    """Make ``table[k_bucket][spread_bucket]`` non-decreasing in both indices."""
    out = [list(row) for row in table]
    for i in range(len(out)):
        for b in range(len(out[i])):
            if i:
                out[i][b] = max(out[i][b], out[i - 1][b])
            if b:
                out[i][b] = max(out[i][b], out[i][b - 1])
    return out


def _table_json(data):
    """``fp64_moduli.json`` text: one ``[k_max, [N per spread bucket]]`` row per line."""
    lines = ["{", f'  "source": {json.dumps(data["source"])},',
             f'  "statistic": {json.dumps(data["statistic"])},',
             f'  "spread_edges": {json.dumps(list(data["spread_edges"]))},',
             f'  "beyond": {int(data["beyond"])},']
    modes = [mode for mode in ("fast", "accurate") if mode in data]
    for i, mode in enumerate(modes):
        rows = (",\n" + " " * 4).join(f"[{k}, {json.dumps(list(Ns))}]" for k, Ns in data[mode])
        lines.append(f'  "{mode}": [\n    {rows}\n  ]' + ("," if i < len(modes) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


STATISTIC = ("spread = max over the non-zero rows of A and columns of B of "
             "E - floor(sum(e) / count(e)), e the frexp exponents of the non-zero "
             "entries and E their maximum (docs/spec.md section 1)")


def _doc_json(doc):
    """Indented JSON with one line per record / case / check (the files stay
    diff-friendly and a fraction of the fully indented size)."""
    def lines(key, items):
        body = ",\n".join("  " + json.dumps(it, separators=(",", ":")) for it in items)
        return f'"{key}": [\n{body}\n ]'

    top = {k: v for k, v in doc.items() if k != "records"}
    cal = dict(top.pop("calibration"))
    lists = {key: cal.pop(key) for key in ("cases", "checks") if key in cal}
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in top.items()]
    parts.append(lines("records", doc["records"]))
    cal_parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in cal.items()]
    cal_parts += [lines(key, items).replace("\n", "\n ") for key, items in lists.items()]
    parts.append('"calibration": {\n  ' + ",\n  ".join(cal_parts) + "\n }")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def _edge_label(b, edges):
    return f"spread <= {edges[b]:2d}" if b < len(edges) else f"spread >  {edges[-1]:2d}"


def _print_cells(mode, k, edges, cases, scans, raw, why, out):
    """Per spread bucket: the pairs in it, and the worst ratio of our error to native's
    at the bucket's count."""
    print(f"\n[{mode}] k = {k}", file=out)
    for b in range(len(edges) + 1):
        members = [c for c in cases if spread_bucket(c.spread, edges) == b]
        if not members:
            continue
        N = raw[b] if b < len(edges) else None
        fams = {}
        for c in members:
            fams.setdefault(family_label(c.family, c.param), []).append(c.spread)
        desc = ", ".join(f"{f} x{len(v)} ({min(v)}-{max(v)})" if min(v) != max(v)
                         else f"{f} x{len(v)} ({v[0]})" for f, v in fams.items())
        n0s = [scans[id(c)][0] for c in members]
        if N is not None:
            worst = max(scans[id(c)][1].get(N, math.inf) / c.native if c.native else
                        (0.0 if scans[id(c)][1].get(N, math.inf) == 0 else math.inf)
                        for c in members)
            print(f"  {_edge_label(b, edges)}: {N:2d} moduli (worst error/native at {N}: "
                  f"{worst:.2g}; {why[b]})  pairs: {desc}", file=out)
        else:
            print(f"  {_edge_label(b, edges)}: beyond the table; counts passing per pair: "
                  f"{sorted(n0 if n0 is not None else 'none' for n0 in n0s)}  pairs: {desc}",
                  file=out)
    out.flush()


def _package():
    """The ``ozaki_backend`` object of the data file: version and commit.

    Only the Python sources count for "uncommitted changes": the calibration runs the
    CPU engine, which the kernel sources do not affect.
    """
    from ._version import __version__

    return {"version": __version__, "commit": provenance.commit(paths=("ozaki_backend",))}


def main(argv=None) -> int:
    """Run the calibration and write its two files; returns the exit status.

    ``docs/data/accuracy_cpu.json`` follows ``docs/data/README.md`` (schema
    ``ozaki_backend-bench/1``): ``machine``, ``date``, ``command``, ``ozaki_backend``
    and ``records``, one ``kind="accuracy"`` record per product measured, with
    ``impl`` ``"numpy"`` or ``"ozaki_backend"`` (``engine="cpu"``,
    ``scheme="ozaki2"``, ``mode``, ``moduli``, ``precision=None``), the shape,
    ``family`` (``"phi"`` or ``"outliers"``), ``phi`` (None for outliers),
    ``log2_outlier`` (outliers only), ``seed``, ``spread`` (the pair's exponent
    spread), ``reference="exact"``, ``max_rel_err`` and ``median_rel_err``. The extra
    top-level ``calibration`` object holds ``criterion``, ``margin``, ``phis``,
    ``outliers``, ``outliers_per_row``, ``seeds``, ``k_buckets``, ``spread_edges``,
    ``statistic``, ``moduli_window``, ``generator`` (how each family is drawn),
    ``cases`` (per mode, k and pair: its spread, bucket and the fewest passing count
    ``n0``, None if none), ``checks`` (the interior-k validations: ``mode``, ``k``,
    the pair, its spread, ``moduli``, our and native's max relative error and
    ``pass``), ``raw`` (per mode the measured cells, None where empty), ``table``
    (exactly what went into ``fp64_moduli.json``) and ``seconds``.
    """
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend calibrate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=128, help="rows of A (= columns of B)")
    ap.add_argument("--k", default=",".join(map(str, K_BUCKETS)),
                    help="k bucket edges, comma-separated")
    ap.add_argument("--spread-edges", default=",".join(map(str, SPREAD_EDGES)),
                    help="spread bucket edges, comma-separated")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                    help="comma-separated seeds")
    ap.add_argument("--phis", default=",".join(f"{p:g}" for p in PHIS))
    ap.add_argument("--outliers", default=",".join(map(str, OUTLIERS)),
                    help="log2 outlier factors of the outlier family (empty: none)")
    ap.add_argument("--modes", default="fast,accurate")
    ap.add_argument("--min-moduli", type=int, default=12)
    ap.add_argument("--max-moduli", type=int, default=20)
    ap.add_argument("--no-interior", action="store_true",
                    help="skip the interior-k validation")
    ap.add_argument("--machine", default=None, help="machine name for the data file")
    ap.add_argument("--dry-run", action="store_true",
                    help="print only; write neither JSON file")
    ap.add_argument("--table-json", default=str(_FP64_JSON),
                    help="where to write the moduli table (default: the package's)")
    ap.add_argument("--accuracy-json", default=None,
                    help="where to write every measured error (default: "
                         "docs/data/accuracy_cpu.json of a source checkout)")
    args = ap.parse_args(argv)

    m = n = args.m
    ks = [int(v) for v in args.k.split(",")]
    edges = [int(v) for v in args.spread_edges.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]
    phis = [float(v) for v in args.phis.split(",") if v]
    outl = [int(v) for v in args.outliers.split(",") if v]
    families = [("phi", p) for p in phis] + [("outliers", f) for f in outl]
    modes = args.modes.split(",")
    window = list(range(args.min_moduli, args.max_moduli + 1))
    top = window[-1]
    out = sys.stdout
    t_start = time.perf_counter()
    print(f"calibrating precision='fp64' on the CPU engine: m = n = {m}, k buckets {ks}, "
          f"spread edges {edges}, phi {phis}, outliers 2^{outl}, seeds {seeds}, "
          f"moduli {window[0]}..{top}", file=out, flush=True)

    records, checks, case_log = [], [], []
    raw = {mode: [] for mode in modes}

    def record(case, impl, mx, med, **extra):
        rec = {"kind": "accuracy", "impl": impl}
        rec.update(extra)
        rec.update({"m": m, "n": n, "k": case.k, "family": case.family,
                    "phi": case.param if case.family == "phi" else None})
        if case.family == "outliers":
            rec["log2_outlier"] = case.param
        rec.update({"seed": case.seed, "spread": case.spread, "reference": "exact",
                    "max_rel_err": mx, "median_rel_err": med})
        records.append(rec)

    def cases_at(k):
        cs = [_Case(m, n, k, fam, par, s) for fam, par in families for s in seeds]
        for c in cs:
            record(c, "numpy", c.native, c.native_median)
        return cs

    all_cases = {}
    for k in ks:
        cases = all_cases[k] = cases_at(k)
        for mode in modes:
            scans = {id(c): _scan(c, mode, window, record) for c in cases}
            row, why = [], {}
            for b in range(len(edges)):
                members = [c for c in cases if spread_bucket(c.spread, edges) == b]
                if not members:
                    row.append(None)
                    why[b] = "no pair"
                    continue
                N, why[b] = _choose([scans[id(c)] for c in members],
                                    [c.native for c in members], window)
                row.append(N)
            raw[mode].append(row)
            for c in cases:
                case_log.append({"mode": mode, "k": k, "family": c.family, "param": c.param,
                                 "seed": c.seed, "spread": c.spread,
                                 "bucket": spread_bucket(c.spread, edges),
                                 "n0": scans[id(c)][0], "native_max_rel_err": c.native})
            _print_cells(mode, k, edges, cases, scans, row, why, out)
            print(f"  ({time.perf_counter() - t_start:.0f} s)", file=out, flush=True)

    table = {mode: fill_and_close(raw[mode], top) for mode in modes}

    # Validate at the geometric midpoint of each k bucket; raise a cell until it passes.
    prev_k = 0
    for i, k in enumerate(ks):
        ki = max(prev_k + 1, round(math.sqrt(max(prev_k, 1) * k)))
        prev_k = k
        if args.no_interior or ki == k:
            continue
        cs = cases_at(ki)
        for mode in modes:
            for c in cs:
                b = spread_bucket(c.spread, edges)
                while True:
                    N = table[mode][i][b] if b < len(edges) else top
                    mx, med = _ozaki_errors(c, mode, N)
                    ok = mx <= c.native
                    checks.append({"mode": mode, "k": ki, "family": c.family,
                                   "param": c.param, "seed": c.seed, "spread": c.spread,
                                   "moduli": N, "max_rel_err": mx,
                                   "native_max_rel_err": c.native, "pass": ok})
                    if ok or N >= top or b >= len(edges):
                        break
                    print(f"[{mode}] interior k = {ki}: {c.label} (spread {c.spread}) fails "
                          f"at {N}: cell k <= {k}, {_edge_label(b, edges)} -> {N + 1}",
                          file=out, flush=True)
                    table[mode][i][b] = N + 1
                table[mode] = close(table[mode])
        print(f"interior k = {ki} checked ({time.perf_counter() - t_start:.0f} s)",
              file=out, flush=True)

    elapsed = time.perf_counter() - t_start
    now = _dt.datetime.now(_dt.timezone.utc)
    # The options that decide the measurement (output paths and names do not).
    command = " ".join(["python -m ozaki_backend calibrate"] + [
        f"--{key.replace('_', '-')} {val}" for key, val in vars(args).items()
        if key in ("m", "k", "spread_edges", "seeds", "phis", "outliers", "modes",
                   "min_moduli", "max_moduli")
        and val != ap.get_default(key)] + (["--no-interior"] if args.no_interior else []))
    criterion = ("per (k bucket, spread bucket) the fewest moduli from which every larger "
                 "count has max relative error <= native np.matmul's on every (family, "
                 "seed) pair of the cell")
    source = (f"measured {now:%Y-%m-%dT%H:%M:%SZ} by `{command}` on the CPU engine: "
              f"m = n = {m}, phi in {phis}, outliers 2^{outl} ({OUTLIERS_PER_ROW} per "
              f"row/column), seeds {seeds}, {criterion} (margin {MARGIN:g}; empty cells "
              f"from the cells above; non-decreasing in k and spread; validated at "
              f"interior k)")
    print("\nfp64 moduli table (rows: k buckets; columns: spread buckets "
          f"{', '.join(f'<={e}' for e in edges)}, >{edges[-1]}):", file=out)
    for mode in modes:
        print(f"  {mode}:", file=out)
        for k, row in zip(ks, table[mode]):
            print(f"    k <= {k:6d}: " + " ".join(f"{N:3d}" for N in row) + f" {top:3d}",
                  file=out)
    print(f"({elapsed:.0f} s)", file=out, flush=True)

    if args.dry_run:
        return 0
    if set(modes) != {"fast", "accurate"}:
        print("not writing the moduli table: both modes are needed", file=out)
    else:
        data = {"source": source, "statistic": STATISTIC, "spread_edges": edges,
                "beyond": top}
        for mode in ("fast", "accurate"):
            data[mode] = [[k, row] for k, row in zip(ks, table[mode])]
        Path(args.table_json).write_text(_table_json(data))
        print(f"wrote {args.table_json}", file=out)
    acc_path = Path(args.accuracy_json) if args.accuracy_json else (
        _DOCS_JSON if _DOCS_JSON.parent.is_dir() else None)
    if acc_path is not None:
        doc = {
            "schema": "ozaki_backend-bench/1",
            "machine": provenance.cpu_machine(args.machine),
            "date": f"{now:%Y-%m-%d}",
            "command": command,
            "ozaki_backend": _package(),
            "records": records,
            "calibration": {
                "criterion": criterion, "margin": MARGIN, "phis": phis, "outliers": outl,
                "outliers_per_row": OUTLIERS_PER_ROW, "seeds": seeds, "k_buckets": ks,
                "spread_edges": edges, "statistic": STATISTIC,
                "moduli_window": [window[0], top],
                "generator": "ozaki_backend.calibrate.case_operands: phi: rng = numpy."
                             "random.default_rng([seed, k, round(10*phi) + 10]); A = "
                             "phi_matrix((m, k), phi, rng); B = phi_matrix((k, n), phi, "
                             "rng). outliers (f): rng = default_rng([seed, k, 1000 + f]); "
                             "A, B standard normal, then per row of A and per column of B "
                             f"{OUTLIERS_PER_ROW} entries times 2**f (outlier_operands)",
                "raw": raw, "table": table, "seconds": round(elapsed, 1),
                "cases": case_log, "checks": checks,
            },
        }
        acc_path.write_text(_doc_json(doc))
        print(f"wrote {acc_path}", file=out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
