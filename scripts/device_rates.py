"""Measurements behind the device cost model and the certificate's native scale (on the
GPU; ``ozaki_backend/cuda/costs.py``, ``docs/precision.md``).

    python scripts/device_rates.py timings [--json rows.json]
        cuBLAS DGEMM and the emulation (emulation="eager", fixed counts) per shape,
        next to the model's predictions, then the rates fitted to them against the
        H200's rows (costs.fit) and the model's error with them; --json writes the
        rows, the device's name and compute capability
    python scripts/device_rates.py fit rows.json [--write] [--reference ROWS]
        the same fit of rows written by `timings --json` (on any machine); --write adds
        the rates to ozaki_backend/_data/device_rates.json under the device's name
        (keeping the pass costs a `passes --write` measured there)
    python scripts/device_rates.py passes [--cases 8192:2,16384:1] [--write]
        the certificate's data-dependent passes of eager products on phi data, kernel
        by kernel under the PyTorch profiler: the a-posteriori test per output element
        (post_per_element), the gathers' lower bounds and the second count per output
        element (gathers_per_element), the top entries and codes per operand entry
        (gathers_per_entry), the median over the cases; --write sets them in this
        device's record of ozaki_backend/_data/device_rates.json
    python scripts/device_rates.py native-errors
        cuBLAS DGEMM's error relative to g(k) ||t||_2 u (the certificate's native scale)
        over k, on N(0,1) and phi = 2 data
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys

import numpy as np

from ozaki_backend.cuda import costs

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = ROOT / "ozaki_backend/_data/device_rates.json"
#: The rows measured on the H200 whose rates are costs.H200: the fit's reference.
REFERENCE = ROOT / "docs/data/device-rates-h200-2026-12-03.json"

SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 16384, 16384), (8192, 512, 8192), (8192, 2048, 8192), (16384, 1024, 16384),
          (8192, 8192, 512), (512, 8192, 8192), (8191, 8191, 8191), (10000, 10000, 10000))


def _time(f, reps=7):
    from ozaki_backend.provenance import median_device_time

    return median_device_time(f, reps, warmup=3)


def _shape_rows(rng, m, k, n, r):
    import cupy

    import ozaki_backend as ob

    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = cupy.empty((m, n))
    t_nat = _time(lambda: cupy.matmul(A, B, out=out))
    rows = []
    for N in (14, 16):
        t_em = _time(lambda: ob.matmul(A, B, moduli=N, out=out, engine="cuda",
                                       emulation="eager"))
        rows.append({"shape": [m, k, n], "N": N, "native": t_nat, "emulation": t_em,
                     "model_native": costs.native_seconds(m, n, k, r),
                     "model_emulation": costs.emulation_seconds(m, n, k, N, False, r)})
    return rows


def timings(args):
    import cupy

    rng = cupy.random.default_rng(0)
    rows = []
    r = costs.rates()
    for (m, k, n) in SHAPES:
        for x in _shape_rows(rng, m, k, n, r):
            rows.append(x)
            print(f"{m}x{k}x{n} N={x['N']}: DGEMM {1e3 * x['native']:8.3f} ms (model "
                  f"{1e3 * x['model_native']:8.3f})  emulation {1e3 * x['emulation']:8.3f} "
                  f"ms (model {1e3 * x['model_emulation']:8.3f})", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    measured = {"device": name.decode() if isinstance(name, bytes) else name,
                "compute_capability": cupy.cuda.Device(0).compute_capability,
                "date": datetime.date.today().isoformat(), "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(measured, f, indent=1)
    _report_fit(measured, REFERENCE)
    return 0


def _report_fit(measured, reference):
    """Print the rates fitted to ``measured`` (against the rows in file ``reference``)
    and the model's error per row with them and with the H200's; returns them."""
    rows = measured["rows"]
    fitted = costs.fit(rows, json.loads(pathlib.Path(reference).read_text())["rows"])
    print(f"fitted rates for {measured['device']} (cc {measured['compute_capability']}):")
    for key, v in fitted.items():
        print(f"  {key:20s} {v:.4g}   (H200 {costs.H200[key]:.4g})")
    print("shape                N  DGEMM ms  model(fit)  emulation ms  model(fit)  model(H200)")
    for x in rows:
        m, k, n = x["shape"]
        N = x["N"]
        print(f"{m:5d}x{k:5d}x{n:5d} {N:3d} {1e3 * x['native']:9.3f} "
              f"{1e3 * costs.native_seconds(m, n, k, fitted):10.3f} "
              f"{1e3 * x['emulation']:13.3f} "
              f"{1e3 * costs.emulation_seconds(m, n, k, N, False, fitted):10.3f} "
              f"{1e3 * costs.emulation_seconds(m, n, k, N, False, costs.H200):11.3f}")
    return fitted


#: The rates `passes --write` measures; a later `fit --write` keeps them (its fit only
#: scales the H200's by the bandwidths' ratio, a guess where a measurement exists).
PASS_RATES = ("post_per_element", "gathers_per_element", "gathers_per_entry")


def merged_record(old, new):
    """``new``, a device's record from :func:`fit`, keeping the pass costs that ``old``
    (its record in the table, or None) holds from ``passes --write`` (and that note)."""
    if not old or not old.get("passes"):
        return new
    kept = {key: old["rates"][key] for key in PASS_RATES if key in old.get("rates", {})}
    return {**new, "rates": {**new["rates"], **kept}, "passes": old["passes"]}


def fit(args):
    with open(args.rows) as f:
        measured = json.load(f)
    # rows written before the record carried them
    measured.setdefault("compute_capability", args.cc)
    measured.setdefault("date", args.date)
    if not measured["compute_capability"]:
        sys.exit("the rows do not name the compute capability: pass --cc (e.g. 90)")
    fitted = _report_fit(measured, args.reference)
    if args.write:
        table = json.loads(TABLE.read_text()) if TABLE.exists() else {"devices": {}}
        # the H200 listed by name: another GPU of its compute capability in the table
        # would otherwise give it that GPU's rates (costs.rates_of)
        table["devices"].setdefault("NVIDIA H200", {
            "compute_capability": "90", "measured": "2026-12-03",
            "command": "python scripts/device_rates.py timings (costs.H200)", "rates": {}})
        rates = {key: float(f"{v:.4g}") for key, v in fitted.items()
                 if f"{v:.4g}" != f"{costs.H200[key]:.4g}"}
        table["devices"][measured["device"]] = merged_record(
            table["devices"].get(measured["device"]), {
                "compute_capability": measured["compute_capability"],
                "measured": measured.get("date", ""),
                "command": "python scripts/device_rates.py timings --json rows.json; "
                           "python scripts/device_rates.py fit rows.json --write",
                "rates": rates})
        TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"written to {TABLE}")
    return 0


def _pass_seconds(n, phi):
    """``(post, gathers per element, gathers per entry)`` seconds of one eager
    ``n^3`` product of phi data (``(rand - 0.5) exp(phi randn)``), from its kernels."""
    import cupy
    from kernel_timeline import _kernels  # scripts/ is on sys.path
    from torch.profiler import ProfilerActivity, profile

    import ozaki_backend as ob
    from ozaki_backend.testing import phi_matrix

    rng = cupy.random.default_rng(0)
    A, B = phi_matrix((n, n), phi, rng), phi_matrix((n, n), phi, rng)
    C = cupy.empty((n, n))
    for _ in range(3):
        ob.matmul(A, B, out=C, emulation="eager")
    cupy.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        ob.matmul(A, B, out=C, emulation="eager")
        cupy.cuda.Device().synchronize()
    ks = _kernels(prof)
    first_gather = min((a for name, a, _ in ks if name == "oz_gather"), default=None)
    us = 1e-6
    post = sum(d for name, _, d in ks if name.startswith("oz_post_")) * us
    gather = sum(d for name, a, d in ks if name == "oz_gather" or (
        name.startswith("oz_cert_counts") and first_gather is not None
        and a > first_gather)) * us
    entry = sum(d for name, _, d in ks if name in ("oz_top_entries", "oz_codes_t")) * us
    if first_gather is None:
        print(f"  {n}^3 phi = {phi:g}: no gathers ran", flush=True)
    return post / (n * n), gather / (n * n), entry / (2 * n * n)


def passes(args):
    import cupy

    from ozaki_backend.cuda.tuning import device_name

    dev = cupy.cuda.runtime.getDevice()
    name = device_name(dev)
    got = []
    for case in args.cases.split(","):
        n, phi = case.split(":")
        got.append(_pass_seconds(int(n), float(phi)))
        print(f"{name}, {n}^3 phi = {phi}: a-posteriori {got[-1][0] * 1e12:.1f} ps per "
              f"element, gathers {got[-1][1] * 1e12:.1f} ps per element, top entries and "
              f"codes {got[-1][2] * 1e12:.2f} ps per entry", flush=True)
    med = np.median(np.array(got), axis=0)
    old = costs.rates()
    new = {"post_per_element": float(f"{med[0]:.4g}"),
           "gathers_per_element": float(f"{med[1]:.4g}"),
           "gathers_per_entry": float(f"{med[2]:.4g}")}
    for key, v in new.items():
        print(f"  {key}: {v:.4g} (was {old[key]:.4g})")
    if args.write:
        table = json.loads(TABLE.read_text()) if TABLE.exists() else {"devices": {}}
        rec = table["devices"].setdefault(name, {
            "compute_capability": cupy.cuda.Device(dev).compute_capability,
            "measured": str(datetime.date.today()), "command": "", "rates": {}})
        rec["rates"].update(new)
        rec["passes"] = (f"python scripts/device_rates.py passes --cases {args.cases} "
                         f"--write ({datetime.date.today()})")
        TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        costs._table.cache_clear()
        costs._rates_for.cache_clear()
        print(f"written to {TABLE}")
    return 0


def native_errors(args):
    import cupy

    from ozaki_backend.spec.rules import native_growth
    from ozaki_backend.testing import sampled_rows_reference

    rng = cupy.random.default_rng(1)
    u = 2.0 ** -53
    for phi in (-1.0, 2.0):
        for k in (256, 1024, 4096, 16384, 65536):
            m = n = 512
            draw = ((lambda s: rng.standard_normal(s)) if phi == -1 else
                    (lambda s: (rng.random(s) - 0.5) * cupy.exp(phi * rng.standard_normal(s))))
            A, B = draw((m, k)), draw((k, n))
            rows = cupy.arange(0, m, m // 16)
            hi, lo = sampled_rows_reference(A[rows], B)
            C = cupy.matmul(A, B)[rows]
            t2 = cupy.sqrt(cupy.matmul(A[rows] ** 2, B ** 2))
            ratio = (cupy.abs((C - hi) - lo) / (u * native_growth(k) * t2)).get().ravel()
            print(f"phi {phi:4.1f} k {k:6d}: cuBLAS error / (u g(k) ||t||_2) median "
                  f"{np.median(ratio):.3f} p99 {np.quantile(ratio, 0.99):.3f} max "
                  f"{ratio.max():.3f}", flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("timings", "native-errors", "fit", "passes"))
    ap.add_argument("rows", nargs="?", help="fit: the rows written by timings --json")
    ap.add_argument("--json")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--reference", default=str(REFERENCE),
                    help="fit: the rows measured on the GPU of costs.H200")
    ap.add_argument("--cases", default="8192:2,16384:1",
                    help="passes: n:phi cases, comma-separated")
    ap.add_argument("--cc", help="fit: the compute capability, for rows that lack it")
    ap.add_argument("--date", default="", help="fit: the date measured, for rows that "
                    "lack it")
    args = ap.parse_args(argv)
    if args.what == "fit" and not args.rows:
        ap.error("fit needs the rows file written by timings --json")
    return {"timings": timings, "native-errors": native_errors, "fit": fit,
            "passes": passes}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
