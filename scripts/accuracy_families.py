"""The certificate on the accuracy families (``docs/precision.md``): per family and
shape, the moduli count chosen, the outcome, and the max relative error of the
emulation and of NumPy's own float64 product against the exact product (CPU engine;
the CUDA engine gives the same bits).

    python scripts/accuracy_families.py [--seeds 4] [--shapes 24,20,600 256,256,1024]
                                        [--json docs/data/accuracy-families.json]

Prints a Markdown table (worst case over the seeds per family, shape and mode).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import warnings
from datetime import datetime, timezone

import numpy as np

import ozaki_backend as ob
from ozaki_backend.shapes import HELP as SHAPES_HELP
from ozaki_backend.shapes import format_shape, parse_shape
from ozaki_backend.testing import FAMILIES, exact_matmul, family_operands, relative_errors

SHAPES = ((24, 600, 20), (256, 1024, 256))


def measure(seeds, shapes=SHAPES):
    rows = []
    for (m, k, n) in shapes:
        for fam in FAMILIES:
            for mode in ("fast", "accurate"):
                worst = {"ratio": 0.0}
                counts, outcomes = set(), {}
                for seed in range(seeds):
                    A, B = family_operands(fam, m, k, n, np.random.default_rng(seed))
                    E = exact_matmul(A, B)
                    with np.errstate(all="ignore"):
                        nat = relative_errors(A @ B, E)
                        nat = float(nat[np.isfinite(nat)].max()) if nat.size else 0.0
                    ob.reset_stats()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ob.NativeFallbackWarning)
                        C = ob.matmul(A, B, engine="cpu", mode=mode)
                    st = ob.stats()
                    ours = float(relative_errors(C, E).max())
                    counts.update(int(c) for c in st["moduli"])
                    for o, c in st["certificate"].items():
                        outcomes[o] = outcomes.get(o, 0) + c
                    ratio = ours / (2 * nat + 2.0 ** -52)
                    if ratio >= worst["ratio"]:
                        worst = {"ratio": ratio, "ours": ours, "native": nat, "seed": seed}
                rows.append({"shape": [m, k, n], "family": fam, "mode": mode,
                             "moduli": sorted(counts), "outcomes": outcomes, **worst})
                print(f"{format_shape(m, n, k)} {fam:15s} {mode:8s} moduli {sorted(counts)} "
                      f"{outcomes} ours {worst['ours']:.2e} native {worst['native']:.2e} "
                      f"ours/(2 native + 2^-52) {worst['ratio']:.2f}", file=sys.stderr,
                      flush=True)
    return rows


def markdown(rows):
    out = ["| m,n,k | family | mode | moduli | outcome | ours | native | ours / (2 native + 2^-52) |",
           "| --- | --- | --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        N = r["moduli"]
        Ns = (f"{N[0]}" if len(N) == 1 else f"{N[0]}–{N[-1]}") if N else "—"
        oc = ", ".join(f"{o} {c}" for o, c in sorted(r["outcomes"].items()))
        m, k, n = r["shape"]
        out.append(f"| {format_shape(m, n, k)} | {r['family']} | {r['mode']} | {Ns} | "
                   f"{oc} | {r['ours']:.1e} | {r['native']:.1e} | {r['ratio']:.2f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--shapes", type=parse_shape, nargs="+",
                    default=[(m, n, k) for (m, k, n) in SHAPES], metavar="SHAPE",
                    help=SHAPES_HELP)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    shapes = [(m, k, n) for (m, n, k) in args.shapes]   # measure() takes operand order
    rows = measure(args.seeds, shapes)
    worst = max(r["ratio"] for r in rows)
    print(f"worst ours / (2 native + 2^-52): {worst:.2f}", file=sys.stderr)
    print(markdown(rows))
    if args.json:
        doc = {"schema": "ozaki_backend-accuracy-families/1",
               "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "command": "python scripts/accuracy_families.py " + " ".join(argv or sys.argv[1:]),
               "machine": {"python": platform.python_version(), "numpy": np.__version__,
                           "cpu": platform.processor() or platform.machine()},
               "ozaki_backend": ob.__version__, "engine": "cpu", "seeds": args.seeds,
               "rows": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
