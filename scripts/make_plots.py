"""Draw the documentation's plots from the committed benchmark files.

    python scripts/make_plots.py            # reads docs/data/*.json, writes docs/img/*.png

Inputs are benchmark files in the format of docs/data/README.md, as written by
``scripts/measure.py`` or ``python -m ozaki_backend bench --json FILE``. Every series
is labelled with the machine and the date it was measured on. A plot whose data is
absent is not drawn (and the script says so); rerun the script whenever a new file
lands in docs/data/, e.g. the first GPU figures.

Plots:
  accuracy_vs_moduli.png   max relative error vs moduli count, one line per phi
  cpu_time_vs_size.png     CPU engine and NumPy: seconds per product vs n
  gpu_tflops_vs_size.png   GPU: TFLOPS (2n^3 / time) vs n, device-resident operands:
                           native DGEMM and the emulation (precision="fp64", 16 and 15
                           moduli, bits=34)
  end_to_end_vs_numpy.png  NumPy in -> NumPy out: seconds vs n, ozaki_backend.matmul
                           against NumPy on the host and a plain CuPy round trip

A series measured in more than one file for the same GPU is drawn once, from the newest
file (then the one with the most emulation records; see ``_one_source``), so that a
rule change (the certified ``precision="fp64"`` of 2026-12-01) shows on the plots as
soon as its measurements are committed. Legends carry the moduli counts the drawn
records used, and the date where a plot mixes runs of different dates; ``LEGENDS``
keeps every plot's legend texts for the tests. The docs build
(``docs/hooks/plots.py``) runs this script, so the site's plots always match
``docs/data/``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHEMA = "ozaki_backend-bench/1"
EXACT_FLOOR = 1e-17  # where an error of exactly zero is drawn on log axes
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGENDS: dict[str, list[str]] = {}  # file name -> legend texts of the last drawing


def load(data_dir):
    """All benchmark files in ``data_dir``: a list of (document, path)."""
    docs = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            print(f"skip {path}: schema {doc.get('schema')!r} is not {SCHEMA!r}",
                  file=sys.stderr)
            continue
        docs.append((doc, path))
    return docs


def where(doc):
    """'machine, date' for legends and titles."""
    m = doc["machine"]
    name = m.get("name") or m.get("cpu") or "unknown machine"
    return f"{name}, {doc['date']}"


def records(docs, **match):
    """(doc, record) pairs whose record has every ``key == value`` of ``match``."""
    out = []
    for doc, _ in docs:
        for r in doc["records"]:
            if all(r.get(k) == v for k, v in match.items()):
                out.append((doc, r))
    return out


def _series(pairs, x, y, key):
    """Group (doc, record) pairs into {label: sorted [(x, y)]}; ``key(doc, r)`` labels."""
    groups = defaultdict(dict)
    for doc, r in pairs:
        groups[key(doc, r)][r[x]] = r[y] if not callable(y) else y(r)
    return {k: sorted(v.items()) for k, v in groups.items()}


def _moduli_note(pairs):
    """' (15 moduli)' or ' (15-16 moduli)' for the ozaki_backend records of a series."""
    ns = sorted({r["moduli"] for _, r in pairs if r.get("moduli")})
    if not ns:
        return ""
    return f" ({ns[0]} moduli)" if len(ns) == 1 else f" ({ns[0]}-{ns[-1]} moduli)"


def _draw(ax, pairs, x, y, what, plot, rename=lambda w: w):
    """One line per (what(doc, record), machine/date); returns the set of sources.

    Labels of ozaki_backend series end with the moduli counts their records used.
    """
    key = lambda d, r: (what(d, r), where(d))  # noqa: E731
    series = _series(pairs, x, y, key)
    sources = {src for _, src in series}
    for (w, src), pts in sorted(series.items()):
        xs, ys = zip(*pts)
        note = _moduli_note([(d, r) for d, r in pairs if key(d, r) == (w, src)])
        lab = rename(w) + note + (f" [{src}]" if len(sources) > 1 else "")
        plot(xs, ys, "o-", ms=3.5, label=lab)
    return sources


def _size_axis(ax, pairs, label):
    ax.set_xlabel(label)
    xs = sorted({r["n"] for _, r in pairs})
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()


def _finish(fig, ax, title, sources, path):
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    legend = ax.legend(fontsize=7.5, loc="best")
    LEGENDS[os.path.basename(path)] = [t.get_text() for t in legend.get_texts()]
    fig.text(0.01, 0.005, "Measured on: " + "; ".join(sorted(sources)), fontsize=7,
             color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {os.path.relpath(path, ROOT)}", flush=True)


def plot_accuracy(docs, out):
    # One line per phi needs one shape: the cube m = n = k (the accuracy file holds
    # other k buckets, which are not drawn here), and one reference: the exact product
    # (the GPU bench's sampled double-double errors are in its own table instead).
    def cube(r):
        return r["m"] == r["n"] == r["k"]

    pairs = [(d, r) for d, r in records(docs, kind="accuracy", impl="ozaki_backend",
                                        scheme="ozaki2", mode="accurate", precision=None,
                                        reference="exact")
             if cube(r) and not r.get("bits")]
    if not pairs:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by_phi = _series(pairs, "moduli", "max_rel_err", lambda d, r: (r["phi"], where(d)))
    sources = set()
    exact_seen = False
    for i, ((phi, src), pts) in enumerate(sorted(by_phi.items())):
        c = colors[i % len(colors)]
        xs, ys = zip(*pts)
        # An error of exactly 0 (every element correctly rounded) has no place on a log
        # axis: draw it on the floor line, with an open marker.
        ys_plot = [y if y > 0 else EXACT_FLOOR for y in ys]
        ax.semilogy(xs, ys_plot, "o-", color=c, ms=3.5, label=f"phi = {phi:g}")
        zx = [x for x, y in zip(xs, ys) if y == 0]
        if zx:
            exact_seen = True
            ax.plot(zx, [EXACT_FLOOR] * len(zx), "o", mfc="white", mec=c, ms=5)
        sources.add(src)
        native = [r["max_rel_err"] for d, r in records(docs, kind="accuracy", impl="numpy",
                                                        phi=phi)
                  if where(d) == src and cube(r)]
        if native:
            ax.axhline(native[0], color=c, ls=":", lw=1)
    ax.plot([], [], "k:", lw=1, label="NumPy float64 (same phi)")
    if exact_seen:
        ax.plot([], [], "o", mfc="white", mec="k", ms=5,
                label=f"error 0 (drawn at {EXACT_FLOOR:g})")
    n = pairs[0][1]["n"]
    ax.set_xlabel("number of moduli N (accurate mode)")
    ax.set_ylabel("max relative error vs exact product")
    ax.set_xticks(sorted({r["moduli"] for _, r in pairs}))
    _finish(fig, ax, f"Accuracy vs moduli count, m = n = k = {n}", sources, out)
    return True


def plot_cpu_time(docs, out):
    pairs = [(d, r) for d, r in records(docs, kind="time", io="host")
             if r["impl"] == "numpy" or r.get("engine") == "cpu"]
    pairs = [(d, r) for d, r in pairs if not d["machine"].get("gpu")]
    if not pairs:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.6))

    def what(d, r):
        if r["impl"] == "numpy":
            return "NumPy float64 (OpenBLAS)"
        if r.get("scheme") == "phase22":
            return "CPU engine, phase22"
        return f"CPU engine, ozaki2 {r.get('mode')}, precision=fp64"

    sources = _draw(ax, pairs, "n", "seconds", what, ax.loglog)
    ax.set_ylabel("seconds per product (median)")
    _size_axis(ax, pairs, "n (square n x n products)")
    _finish(fig, ax, "CPU engine vs NumPy, time per product", sources, out)
    return True


GPU_LABELS = {
    "cupy": "native DGEMM (cuBLAS via CuPy)",
    "int8-gemm": "one INT8 GEMM (cuBLAS, TOPS)",
}


def _cube(r):
    return r["m"] == r["n"] == r["k"]


def _how(r):
    """How an ozaki_backend record's moduli count was chosen, for labels."""
    if r.get("precision") == "fp64":
        return "precision=fp64"
    if r.get("bits"):
        return f"bits={r['bits']}"
    return f"moduli={r['moduli']}"


def _gpu_what(d, r):
    if r["impl"] == "ozaki_backend":
        return f"emulation, {r.get('mode')}, {_how(r)}"
    if r["impl"] == "numpy":
        cores = d["machine"].get("cpu_count")
        return "NumPy on the host CPU" + (f" ({cores} cores)" if cores else "")
    return GPU_LABELS.get(r["impl"], r["impl"])


def _series_id(d, r):
    """What a record measures, independent of the labels (which name the machine)."""
    how = _how(r) if r["impl"] == "ozaki_backend" else None
    return (r["impl"], r.get("io"), r.get("mode"), how, d["machine"].get("gpu"))


def _one_source(pairs, out):
    """Keep each series (same ``what`` label, same GPU) from one file only.

    A series (same impl, io, mode and moduli choice, same GPU) measured in several
    files (native DGEMM, say, timed both by ``scripts/measure.py gpu`` and by
    ``python -m ozaki_backend bench``) is drawn from the newest file, and among files of
    the same date from the one holding the most ozaki_backend records: the run whose
    baselines were timed next to the emulation they are compared with. The newest file
    wins because a rule change (how ``precision="fp64"`` picks its moduli) makes older
    measurements of the same configuration out of date. The others are dropped, with a
    note.
    """
    def weight(d):
        return (d["date"], sum(r["impl"] == "ozaki_backend" for r in d["records"]))

    best = {}
    for d, r in pairs:
        key = _series_id(d, r)
        if key not in best or weight(d) > weight(best[key]):
            best[key] = d
    kept, dropped = [], set()
    for d, r in pairs:
        if best[_series_id(d, r)] is d:
            kept.append((d, r))
        else:
            dropped.add((_gpu_what(d, r), where(d)))
    for w, src in sorted(dropped):
        print(f"  {os.path.basename(out)}: '{w}' [{src}] not drawn: the same series is "
              "in the file with the emulation's records", file=sys.stderr)
    return kept


# The emulation configurations drawn on the GPU throughput plot: (mode, how) -> style.
GPU_CONFIGS = {
    ("fast", "precision=fp64"): ("o-", "C1"),
    ("accurate", "precision=fp64"): ("o--", "C1"),
    ("fast", "moduli=16"): ("s-", "C2"),
    ("fast", "moduli=15"): ("^-", "C3"),
    ("fast", "bits=34"): ("D-", "C4"),
}


def plot_gpu_tflops(docs, out):
    pairs = [(d, r) for d, r in records(docs, kind="time", io="device")
             if d["machine"].get("gpu") and _cube(r)]
    pairs = [(d, r) for d, r in pairs if r["impl"] != "ozaki_backend"
             or (r.get("mode"), _how(r)) in GPU_CONFIGS]
    pairs = _one_source(pairs, out)
    emu = [(d, r) for d, r in pairs if r["impl"] == "ozaki_backend"]
    if not emu:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    tflops = lambda r: r.get("tflops") or 2.0 * r["m"] * r["n"] * r["k"] / r["seconds"] / 1e12  # noqa: E731
    sources = set()
    dates = {d["date"] for d, r in pairs if r["impl"] in ("ozaki_backend", "cupy")}
    native = _series([p for p in pairs if p[1]["impl"] == "cupy"], "n", tflops,
                     lambda d, r: where(d))
    for src, pts in native.items():
        xs, ys = zip(*pts)
        when = f" [{src.rsplit(', ', 1)[-1]}]" if len(dates) > 1 else ""
        ax.plot(xs, ys, "k-", lw=2.2, marker="o", ms=4, label=GPU_LABELS["cupy"] + when)
        sources.add(src)
    for (mode, how), (style, color) in GPU_CONFIGS.items():
        sel = [(d, r) for d, r in emu if (r["mode"], _how(r)) == (mode, how)]
        for src, pts in _series(sel, "n", tflops, lambda d, r: where(d)).items():
            xs, ys = zip(*pts)
            when = f" [{src.rsplit(', ', 1)[-1]}]" if len(dates) > 1 else ""
            ax.plot(xs, ys, style, color=color, ms=4,
                    label=f"emulation, {mode}, {how}{_moduli_note(sel)}{when}")
            sources.add(src)
    # Derived, not measured: if the emulation cost nothing but its INT8 GEMMs (one per
    # modulus in fast mode), precision="fp64" with N moduli would run at the INT8 rate
    # divided by the N its fast records used at that size.
    fp64_fast = {r["n"]: r["moduli"] for _, r in emu
                 if (r["mode"], _how(r)) == ("fast", "precision=fp64") and r.get("moduli")}
    int8 = _series([p for p in pairs if p[1]["impl"] == "int8-gemm"], "n", tflops,
                   lambda d, r: where(d))
    for src, pts in int8.items():
        pts = [(n, t / fp64_fast[n]) for n, t in pts if n in fp64_fast]
        if not pts:
            continue
        counts = sorted(set(fp64_fast.values()))
        span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        ax.plot([n for n, _ in pts], [t for _, t in pts], ":", color="0.45",
                label=f"INT8 GEMM rate / N: N = {span} moduli of fp64 fast, GEMMs only "
                      "(derived)")
        sources.add(src)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TFLOPS (2n^3 / time), higher is better")
    xs = sorted({r["n"] for _, r in emu})
    ax.set_xlabel("n (square n x n x n products, operands and result on the GPU)")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    gpus = sorted({d["machine"]["gpu"] for d, _ in emu})
    _finish(fig, ax, f"Emulated vs native float64 GEMM, {', '.join(gpus)}", sources, out)
    return True


def plot_end_to_end(docs, out):
    pairs = [(d, r) for d, r in records(docs, kind="time", io="host")
             if d["machine"].get("gpu") and _cube(r)]
    pairs = _one_source(pairs, out)
    if not any(r["impl"] == "ozaki_backend" for _, r in pairs):
        return False
    fig, ax = plt.subplots(figsize=(8, 5))

    def rename(w):
        if w.startswith("native DGEMM"):
            return "CuPy round trip: asnumpy(asarray(a) @ asarray(b)), native DGEMM"
        if w.startswith("emulation"):
            return "ozaki_backend.matmul(a, b), NumPy in/out, " + w.split(", ", 1)[1]
        return w

    sources = _draw(ax, pairs, "n", "seconds", _gpu_what, ax.loglog, rename)
    ax.set_ylabel("seconds per product (median), lower is better")
    _size_axis(ax, pairs, "n (square n x n products, NumPy operands in, NumPy result out)")
    gpus = sorted({d["machine"]["gpu"] for d, _ in pairs})
    _finish(fig, ax, f"End to end from NumPy, transfers included, {', '.join(gpus)}",
            sources, out)
    return True


PLOTS = {
    "accuracy_vs_moduli.png": plot_accuracy,
    "cpu_time_vs_size.png": plot_cpu_time,
    "gpu_tflops_vs_size.png": plot_gpu_tflops,
    "end_to_end_vs_numpy.png": plot_end_to_end,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "docs", "data"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    args = ap.parse_args(argv)
    docs = load(args.data)
    os.makedirs(args.out, exist_ok=True)
    for name, fn in PLOTS.items():
        if not fn(docs, os.path.join(args.out, name)):
            print(f"no data for {name}: not drawn", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
