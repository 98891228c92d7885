"""Draw the documentation's plots from the committed benchmark files.

    python scripts/make_plots.py            # reads docs/data/*.json, writes docs/img/*.png

Inputs are benchmark files in the formats of docs/data/README.md, as written by
``scripts/measure.py``, ``python -m ozaki_backend bench --json FILE`` and
``python -m ozaki_backend bench --host --json FILE``. A plot whose data is absent is not
drawn (and the script says so); the docs build (``docs/hooks/plots.py``) runs this
script, so the site's plots always match ``docs/data/``.

Plots, one question each:
  gpu_tflops_vs_size.png   against native DGEMM on the GPU: TFLOPS (2n^3 / time) vs n,
                           operands and result on the GPU (bench)
  end_to_end_vs_numpy.png  against NumPy on the host: NumPy operands in, NumPy result
                           out, seconds vs n inside enabled() and plainly (bench --host)
  cpu_time_vs_size.png     the CPU engine against NumPy: seconds per product vs n
  accuracy_vs_moduli.png   max relative error vs moduli count, one line per phi

**Each plot is drawn from one run**: the newest file that holds its data (on a tie of
dates, the one with the most records). A plot never mixes runs of different dates or
commits, so a change of the rules shows as soon as its measurements are committed, and
every legend entry was measured side by side with the others. The footer names the
machine, the date and the file. ``LEGENDS`` and ``SOURCES`` keep every plot's legend
texts and file for the tests.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHEMA = "ozaki_backend-bench/1"
HOST_SCHEMA = "ozaki_backend-bench-host/1"
EXACT_FLOOR = 1e-17  # where an error of exactly zero is drawn on log axes
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGENDS: dict[str, list[str]] = {}  # file name -> legend texts of the last drawing
SOURCES: dict[str, str] = {}        # file name -> the data file it was drawn from


def load(data_dir, schemas=(SCHEMA, HOST_SCHEMA)):
    """The benchmark files in ``data_dir`` of the given schemas: (document, path)."""
    docs = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") in schemas:
            docs.append((doc, path))
    return docs


def where(doc):
    """'machine, date' for footers."""
    m = doc["machine"]
    name = m.get("name") or m.get("cpu") or "unknown machine"
    return f"{name}, {str(doc['date'])[:10]}"


def _run_letter(path):
    """The letter of a later run of the same day (``...-2026-12-02-b.json``), else ''."""
    m = re.search(r"\d{4}-\d{2}-\d{2}-([a-z])\.json$", path)
    return m.group(1) if m else ""


def newest(docs, has):
    """The one (document, path) to draw from: the newest of those for which
    ``has(document)`` is true (its date, then the later run of the day by the file's
    letter, ``-b`` after none), then the one with the most records."""
    found = [(d, p) for d, p in docs if has(d)]
    if not found:
        return None
    return max(found, key=lambda dp: (str(dp[0]["date"]), _run_letter(dp[1]),
                                      len(dp[0].get("records", ()))))


def records(doc, **match):
    """The records of ``doc`` with every ``key == value`` of ``match``."""
    return [r for r in doc.get("records", ()) if all(r.get(k) == v for k, v in match.items())]


def _cube(r):
    return r["m"] == r["n"] == r["k"]


def _moduli_note(rs):
    """' (15 moduli)' or ' (15-16 moduli)' for the ozaki_backend records of a series."""
    ns = sorted({r["moduli"] for r in rs if r.get("moduli")})
    if not ns:
        return ""
    return f" ({ns[0]} moduli)" if len(ns) == 1 else f" ({ns[0]}-{ns[-1]} moduli)"


def _by(rs, key):
    groups = defaultdict(list)
    for r in rs:
        groups[key(r)].append(r)
    return dict(groups)


def _size_axis(ax, xs, label):
    ax.set_xlabel(label)
    xs = sorted(set(xs))
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()


def _finish(fig, ax, title, src, path):
    doc, data_path = src
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    legend = ax.legend(fontsize=7.5, loc="best")
    name = os.path.basename(path)
    LEGENDS[name] = [t.get_text() for t in legend.get_texts()]
    SOURCES[name] = os.path.basename(data_path)
    fig.text(0.01, 0.005, f"Measured on: {where(doc)} ({os.path.basename(data_path)})",
             fontsize=7, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {os.path.relpath(path, ROOT)} from {os.path.basename(data_path)}",
          flush=True)


def _accuracy_records(doc):
    # One line per phi needs one shape: the cube (the accuracy file holds other k
    # buckets) and one reference: the exact product (the GPU bench's sampled
    # double-double errors are in its own tables).
    return [r for r in records(doc, kind="accuracy", impl="ozaki_backend", scheme="ozaki2",
                               mode="accurate", precision=None, reference="exact")
            if _cube(r) and not r.get("bits")]


def plot_accuracy(docs, out):
    src = newest(docs, _accuracy_records)
    if src is None:
        return False
    doc = src[0]
    rs = _accuracy_records(doc)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    exact_seen = False
    for i, (phi, group) in enumerate(sorted(_by(rs, lambda r: r["phi"]).items())):
        c = colors[i % len(colors)]
        pts = sorted((r["moduli"], r["max_rel_err"]) for r in group)
        xs, ys = zip(*pts)
        # An error of exactly 0 (every element correctly rounded) has no place on a log
        # axis: draw it on the floor line, with an open marker.
        ax.semilogy(xs, [y if y > 0 else EXACT_FLOOR for y in ys], "o-", color=c, ms=3.5,
                    label=f"phi = {phi:g}")
        zx = [x for x, y in zip(xs, ys) if y == 0]
        if zx:
            exact_seen = True
            ax.plot(zx, [EXACT_FLOOR] * len(zx), "o", mfc="white", mec=c, ms=5)
        native = [r["max_rel_err"] for r in records(doc, kind="accuracy", impl="numpy",
                                                     phi=phi) if _cube(r)]
        if native:
            ax.axhline(native[0], color=c, ls=":", lw=1)
    ax.plot([], [], "k:", lw=1, label="NumPy float64 (same phi)")
    if exact_seen:
        ax.plot([], [], "o", mfc="white", mec="k", ms=5,
                label=f"error 0 (drawn at {EXACT_FLOOR:g})")
    ax.set_xlabel("number of moduli N (accurate mode)")
    ax.set_ylabel("max relative error vs exact product")
    ax.set_xticks(sorted({r["moduli"] for r in rs}))
    _finish(fig, ax, f"Accuracy vs moduli count, m = n = k = {rs[0]['n']}", src, out)
    return True


def _cpu_records(doc):
    if doc.get("schema") != SCHEMA or doc["machine"].get("gpu"):
        return []
    return [r for r in records(doc, kind="time", io="host")
            if r["impl"] == "numpy" or r.get("engine") == "cpu"]


def plot_cpu_time(docs, out):
    src = newest(docs, _cpu_records)
    if src is None:
        return False
    rs = _cpu_records(src[0])
    fig, ax = plt.subplots(figsize=(7.5, 4.6))

    def what(r):
        if r["impl"] == "numpy":
            return "NumPy float64 (" + (src[0]["machine"].get("blas") or "BLAS") + ")"
        if r.get("scheme") == "phase22":
            return "CPU engine, the seed scheme"
        return f"CPU engine, {r.get('mode')} mode, precision=fp64"

    for label, group in sorted(_by(rs, what).items()):
        pts = sorted((r["n"], r["seconds"]) for r in group)
        xs, ys = zip(*pts)
        note = _moduli_note(group) if group[0]["impl"] != "numpy" else ""
        ax.loglog(xs, ys, "o-", ms=3.5, label=label + note)
    ax.set_ylabel("seconds per product (median)")
    _size_axis(ax, [r["n"] for r in rs], "n (square n x n products)")
    _finish(fig, ax, "CPU engine vs NumPy, time per product", src, out)
    return True


def _how(r):
    """How an ozaki_backend record's moduli count was chosen, for labels."""
    if r.get("precision") == "fp64":
        return "precision=fp64"
    if r.get("bits"):
        return f"bits={r['bits']}"
    return f"moduli={r['moduli']}"


def _gpu_records(doc):
    if doc.get("schema") != SCHEMA or not doc["machine"].get("gpu"):
        return []
    rs = [r for r in records(doc, kind="time", io="device") if _cube(r)]
    return rs if any(r["impl"] == "ozaki_backend" for r in rs) else []


def plot_gpu_tflops(docs, out):
    src = newest(docs, _gpu_records)
    if src is None:
        return False
    doc = src[0]
    rs = _gpu_records(doc)
    fig, ax = plt.subplots(figsize=(8, 5))
    tflops = lambda r: r.get("tflops") or 2.0 * r["m"] * r["n"] * r["k"] / r["seconds"] / 1e12  # noqa: E731
    native = sorted((r["n"], tflops(r)) for r in rs if r["impl"] == "cupy")
    if native:
        ax.plot(*zip(*native), "k-", lw=2.2, marker="o", ms=4,
                label="native DGEMM (cuBLAS via CuPy)")
    emu = [r for r in rs if r["impl"] == "ozaki_backend"]
    styles = iter(["o-", "o--", "s-", "^-", "D-", "v-", "x-"])
    for (mode, how), group in sorted(_by(emu, lambda r: (r.get("mode"), _how(r))).items(),
                                     key=lambda kv: (kv[0][1] != "precision=fp64", kv[0])):
        pts = sorted((r["n"], tflops(r)) for r in group)
        ax.plot(*zip(*pts), next(styles), ms=4,
                label=f"emulation, {mode}, {how}{_moduli_note(group)}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TFLOPS (2n^3 / time), higher is better")
    _size_axis(ax, [r["n"] for r in emu],
               "n (square n x n x n products, operands and result on the GPU)")
    _finish(fig, ax, f"Emulated vs native float64 GEMM, {doc['machine']['gpu']}", src, out)
    return True


def _host_rows(doc):
    """The square grid rows of a ``bench --host`` file."""
    if doc.get("schema") != HOST_SCHEMA:
        return []
    return [r for r in doc.get("grid", ()) if len(set(r["shape"])) == 1]


def plot_end_to_end(docs, out):
    src = newest(docs, _host_rows)
    if src is None:
        return False
    doc = src[0]
    rows = sorted(_host_rows(doc), key=lambda r: r["shape"][0])
    fig, ax = plt.subplots(figsize=(8, 5))
    n = [r["shape"][0] for r in rows]
    cores = doc["machine"].get("cpu_count")
    ax.loglog(n, [r["native_s"] for r in rows], "k-", lw=2, marker="o", ms=4,
              label="plain NumPy on the host CPU" + (f" ({cores} cores)" if cores else ""))
    ax.loglog(n, [r["routed_s"] for r in rows], "-", color="C1", lw=1.5,
              label="inside enabled(): the cost model decides")
    routed = [(x, r["routed_s"]) for x, r in zip(n, rows) if r["routed"]]
    kept = [(x, r["routed_s"]) for x, r in zip(n, rows) if not r["routed"]]
    if routed:
        ax.plot(*zip(*routed), "o", color="C1", ms=6, label="routed to the GPU")
    if kept:
        ax.plot(*zip(*kept), "o", mfc="white", mec="C1", ms=6, label="left to NumPy")
    ax.set_ylabel("seconds per A @ B (median), lower is better")
    _size_axis(ax, n, "n (A @ B with n x n NumPy arrays: transfers included)")
    _finish(fig, ax, f"NumPy operands in, NumPy result out, {doc['machine'].get('gpu')}",
            src, out)
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
