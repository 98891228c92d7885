"""``python -m ozaki_backend calibrate``: measure the ``precision="fp64"`` moduli table.

For each scaling mode and each k bucket, the CPU engine multiplies the φ test matrices
(:func:`ozaki_backend.testing.phi_matrix`, φ in {-1, 0, 0.5, 1, 2, 4}, several seeds)
with every moduli count of a window, compares each result with the exact product
(:func:`ozaki_backend.testing.exact_matmul`) and with native float64 (``np.matmul``),
and picks the fewest moduli whose max relative error is no worse than native's on the
same matrices. The emulated results are bitwise identical on every engine
(``docs/spec.md``), so a CPU calibration holds for the GPU; only the native reference
is this machine's BLAS.

Rules that make the table conservative:

* The criterion is per operand pair (φ, seed): the emulated product's max relative
  error must not exceed native's on the same matrices, for every pair.
* A pass is *borderline* when some pair has ``error > native * MARGIN``
  (``MARGIN = 1/2``); then one more modulus is taken.
* The chosen count must also pass at two interior k of the bucket (its first k and
  its geometric midpoint), else it is raised until it does.
* The table is made non-decreasing in k.

Outputs: ``ozaki_backend/_data/fp64_moduli.json`` (the table :func:`ozaki_backend.plan`
reads) and, when run from a source checkout, ``docs/data/accuracy_cpu.json``: every
measured error as ``kind="accuracy"`` records of the docs' benchmark schema
``ozaki_backend-bench/1`` (``docs/data/README.md``), plus a top-level ``calibration``
object (see :func:`main`). The printed table shows, per mode and k, the max relative
error (over seeds) per φ and moduli count next to native float64's.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PHIS = (-1.0, 0.0, 0.5, 1.0, 2.0, 4.0)
K_BUCKETS = (64, 256, 1024, 4096, 16384)
SEEDS = (0, 1, 2, 3)
MARGIN = 0.5

_PKG = Path(__file__).resolve().parent
_FP64_JSON = _PKG / "_data" / "fp64_moduli.json"
_DOCS_JSON = _PKG.parent / "docs" / "data" / "accuracy_cpu.json"


def operands(m, n, k, phi, seed):
    """The calibration operands for one case: ``(A, B)``.

    ``rng = numpy.random.default_rng([seed, k, phi_code])`` with
    ``phi_code = round(10 * phi) + 10``; A (m×k) is drawn first, then B (k×n), both by
    :func:`ozaki_backend.testing.phi_matrix`. Anyone can regenerate them.
    """
    from .testing import phi_matrix

    rng = np.random.default_rng([int(seed), int(k), int(round(10 * phi)) + 10])
    A = phi_matrix((m, k), phi, rng)
    B = phi_matrix((k, n), phi, rng)
    return A, B


def _errors(C, E):
    """``(max, median)`` relative error of ``C`` against the exact ``E``."""
    from .testing import relative_errors

    r = relative_errors(C, E)
    return float(r.max()), float(np.median(r))


class _Case:
    """Operands, exact and native results of one (k, φ, seed), computed once."""

    def __init__(self, m, n, k, phi, seed):
        from .testing import exact_matmul

        self.k, self.phi, self.seed = k, phi, seed
        self.A, self.B = operands(m, n, k, phi, seed)
        self.E = exact_matmul(self.A, self.B)
        self.native, self.native_median = _errors(np.matmul(self.A, self.B), self.E)


def _ozaki_errors(case, mode, N):
    from .plan import Plan
    from .reference.pipeline import matmul_2d

    m, k = case.A.shape
    n = case.B.shape[1]
    p = Plan(m, n, k, moduli=N, mode=mode, engine="cpu")
    return _errors(matmul_2d(case.A, case.B, p), case.E)


def _choose(errs, native, window):
    """Fewest moduli passing with margin, such that every larger count passes too.

    ``errs[(N, case)]`` and ``native[case]`` are the max relative errors of the
    emulated and the native product of one operand pair ``case = (phi, seed)``: a count
    passes when it is no worse than native on every pair.
    """
    def ok(N, margin):
        return all(errs[(N, c)] <= native[c] * margin for c in native)

    if not any(ok(N, 1.0) for N in window):
        return None, "no moduli count in the window reaches native accuracy"
    # Smallest N from which every count up to the window's top passes.
    N0 = window[-1]
    for N in reversed(window):
        if not ok(N, 1.0):
            break
        N0 = N
    if not ok(N0, MARGIN) and N0 < window[-1]:
        return N0 + 1, (f"{N0} passes, but within a factor {1 / MARGIN:g} of native on "
                        f"some pair: took {N0 + 1}")
    return N0, f"{N0} passes"


def _table_json(data):
    """``fp64_moduli.json`` text: one ``[k_max, N]`` row list per mode on one line."""
    lines = ["{", f'  "source": {json.dumps(data["source"])},']
    modes = [mode for mode in ("fast", "accurate") if mode in data]
    for i, mode in enumerate(modes):
        rows = ", ".join(f"[{k}, {N}]" for k, N in data[mode])
        lines.append(f'  "{mode}": [{rows}]' + ("," if i < len(modes) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


def _doc_json(doc):
    """Indented JSON with one line per record / check (the files stay diff-friendly
    and a fraction of the fully indented size)."""
    def lines(key, items):
        body = ",\n".join("  " + json.dumps(it, separators=(",", ":")) for it in items)
        return f'"{key}": [\n{body}\n ]'

    top = {k: v for k, v in doc.items() if k != "records"}
    cal = dict(top.pop("calibration"))
    checks = cal.pop("checks")
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in top.items()]
    parts.append(lines("records", doc["records"]))
    cal_parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in cal.items()]
    cal_parts.append(lines("checks", checks).replace("\n", "\n "))
    parts.append('"calibration": {\n  ' + ",\n  ".join(cal_parts) + "\n }")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def _fmt(x):
    return "       inf" if math.isinf(x) else f"{x:10.2e}"


def _print_table(mode, k, window, errs, native, chosen, out):
    phis = list(native)
    print(f"\n[{mode}] k = {k}: max relative error (max over seeds)", file=out)
    print("  moduli " + "".join(f"  phi={phi:<5g}" for phi in phis), file=out)
    print("  native " + "".join(f"{_fmt(native[phi])} " for phi in phis), file=out)
    for N in window:
        mark = " <- fp64" if N == chosen else ""
        print(f"  {N:6d} " + "".join(f"{_fmt(errs[(N, phi)])} " for phi in phis) + mark,
              file=out)
    out.flush()


def _machine(name):
    """The ``machine`` object of the benchmark schema, for this host (no GPU used)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:  # pragma: no cover - not Linux
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # pragma: no cover - informational only
        blas = "unknown"
    ncpu = os.cpu_count()
    return {"name": name or f"{ncpu}-core {cpu}", "cpu": cpu, "cpu_count": ncpu,
            "gpu": None, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "numpy": np.__version__, "blas": blas,
            "cupy": None}


def _commit():
    """``git describe`` of the package's checkout, ``+uncommitted changes`` if dirty."""
    from . import __version__

    root = _PKG.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "ozaki_backend"], capture_output=True, text=True,
                               check=True).stdout.strip()
        commit = head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"version": __version__, "commit": commit}


def main(argv=None) -> int:
    """Run the calibration and write its two files; returns the exit status.

    ``docs/data/accuracy_cpu.json`` follows ``docs/data/README.md`` (schema
    ``ozaki_backend-bench/1``): ``machine``, ``date``, ``command``, ``ozaki_backend``
    and ``records``, one ``kind="accuracy"`` record per product measured, with
    ``impl`` ``"numpy"`` or ``"ozaki_backend"`` (``engine="cpu"``,
    ``scheme="ozaki2"``, ``mode``, ``moduli``, ``precision=None``), the shape, ``phi``,
    ``seed``, ``reference="exact"``, ``max_rel_err`` and ``median_rel_err``. The extra
    top-level ``calibration`` object holds ``criterion``, ``margin``, ``phis``,
    ``seeds``, ``k_buckets``, ``moduli_window``, ``generator`` (how ``operands``
    draws each case), ``checks`` (the interior-k validations: ``mode``, ``k``,
    ``moduli``, ``phi``, max over seeds of ours and native's, and ``pass`` over all
    seeds), ``table`` (exactly what went into ``fp64_moduli.json``) and ``seconds``.
    """
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend calibrate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=128, help="rows of A (= columns of B)")
    ap.add_argument("--k", default=",".join(map(str, K_BUCKETS)),
                    help="k bucket edges, comma-separated")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                    help="comma-separated seeds")
    ap.add_argument("--phis", default=",".join(f"{p:g}" for p in PHIS))
    ap.add_argument("--modes", default="fast,accurate")
    ap.add_argument("--min-moduli", type=int, default=10)
    ap.add_argument("--max-moduli", type=int, default=20)
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
    seeds = [int(v) for v in args.seeds.split(",")]
    phis = [float(v) for v in args.phis.split(",")]
    modes = args.modes.split(",")
    window = list(range(args.min_moduli, args.max_moduli + 1))
    out = sys.stdout
    t_start = time.perf_counter()
    print(f"calibrating precision='fp64' on the CPU engine: m = n = {m}, k buckets {ks}, "
          f"phi {phis}, seeds {seeds}, moduli {window[0]}..{window[-1]}", file=out)

    records, checks = [], []
    table = {mode: [] for mode in modes}

    def record(case, impl, mx, med, **extra):
        rec = {"kind": "accuracy", "impl": impl}
        rec.update(extra)
        rec.update({"m": m, "n": n, "k": case.k, "phi": case.phi, "seed": case.seed,
                    "reference": "exact", "max_rel_err": mx, "median_rel_err": med})
        records.append(rec)

    prev_k = 0
    for k in ks:
        cases = {(phi, s): _Case(m, n, k, phi, s) for phi in phis for s in seeds}
        native = {phi: max(cases[(phi, s)].native for s in seeds) for phi in phis}
        for c in cases.values():
            record(c, "numpy", c.native, c.native_median)
        # Interior points of the bucket (its first k and its geometric midpoint), for
        # validation only: the table's count is used for every k of the bucket.
        interior = sorted({prev_k + 1, max(prev_k + 1, round(math.sqrt(max(prev_k, 1) * k)))}
                          - {k})
        inner = {}
        for mode in modes:
            errs, pair = {}, {}
            for N in window:
                for phi in phis:
                    per = []
                    for s in seeds:
                        mx, med = _ozaki_errors(cases[(phi, s)], mode, N)
                        record(cases[(phi, s)], "ozaki_backend", mx, med, engine="cpu",
                               scheme="ozaki2", mode=mode, moduli=N, precision=None)
                        pair[(N, (phi, s))] = mx
                        per.append(mx)
                    errs[(N, phi)] = max(per)
            N, why = _choose(pair, {(phi, s): cases[(phi, s)].native for phi in phis
                                    for s in seeds}, window)
            if N is None:
                print(f"[{mode}] k = {k}: {why}; using {window[-1]}", file=out)
                N = window[-1]
            # Validate at the interior k; raise N until it passes there too.
            for ki in interior:
                if ki not in inner:
                    inner[ki] = {(phi, s): _Case(m, n, ki, phi, s) for phi in phis
                                 for s in seeds}
                cs = inner[ki]
                while True:
                    res = {c: (_ozaki_errors(cs[c], mode, N)[0], cs[c].native) for c in cs}
                    for phi in phis:
                        checks.append({
                            "mode": mode, "k": ki, "moduli": N, "phi": phi,
                            "max_rel_err": max(res[(phi, s)][0] for s in seeds),
                            "native_max_rel_err": max(res[(phi, s)][1] for s in seeds),
                            "pass": all(res[(phi, s)][0] <= res[(phi, s)][1] for s in seeds)})
                    if all(e <= nat for e, nat in res.values()) or N >= window[-1]:
                        break
                    why += f"; {N} fails at interior k = {ki}: {N + 1}"
                    N += 1
            _print_table(mode, k, window, errs, native, N, out)
            print(f"  chosen: {N} moduli ({why})", file=out)
            table[mode].append([k, N])
        prev_k = k

    # Non-decreasing in k.
    for mode in modes:
        run = 0
        for row in table[mode]:
            run = max(run, row[1])
            row[1] = run
    elapsed = time.perf_counter() - t_start
    now = _dt.datetime.now(_dt.timezone.utc)
    # The options that decide the measurement (output paths and names do not).
    command = " ".join(["python -m ozaki_backend calibrate"] + [
        f"--{key.replace('_', '-')} {val}" for key, val in vars(args).items()
        if key in ("m", "k", "seeds", "phis", "modes", "min_moduli", "max_moduli")
        and val != ap.get_default(key)])
    criterion = ("per k bucket the fewest moduli with max relative error <= native "
                 "np.matmul's on every (phi, seed) pair")
    source = (f"measured {now:%Y-%m-%dT%H:%M:%SZ} by `{command}` on the CPU engine: "
              f"m = n = {m}, phi in {phis}, seeds {seeds}, {criterion} (margin "
              f"{MARGIN:g}, validated at interior k, non-decreasing in k)")
    print("\nfp64 moduli table:", file=out)
    for mode in modes:
        print(f"  {mode:9s}: " + ", ".join(f"k <= {k}: {N}" for k, N in table[mode]),
              file=out)
    print(f"({elapsed:.0f} s)", file=out)

    if args.dry_run:
        return 0
    if set(modes) != {"fast", "accurate"}:
        print("not writing the moduli table: both modes are needed", file=out)
    else:
        data = {"source": source, "fast": table["fast"], "accurate": table["accurate"]}
        Path(args.table_json).write_text(_table_json(data))
        print(f"wrote {args.table_json}", file=out)
    acc_path = Path(args.accuracy_json) if args.accuracy_json else (
        _DOCS_JSON if _DOCS_JSON.parent.is_dir() else None)
    if acc_path is not None:
        doc = {
            "schema": "ozaki_backend-bench/1",
            "machine": _machine(args.machine),
            "date": f"{now:%Y-%m-%d}",
            "command": command,
            "ozaki_backend": _commit(),
            "records": records,
            "calibration": {
                "criterion": criterion, "margin": MARGIN, "phis": phis, "seeds": seeds,
                "k_buckets": ks, "moduli_window": [window[0], window[-1]],
                "generator": "ozaki_backend.calibrate.operands: rng = numpy.random."
                             "default_rng([seed, k, round(10*phi) + 10]); A = phi_matrix("
                             "(m, k), phi, rng); B = phi_matrix((k, n), phi, rng)",
                "checks": checks, "table": table, "seconds": round(elapsed, 1),
            },
        }
        acc_path.write_text(_doc_json(doc))
        print(f"wrote {acc_path}", file=out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
