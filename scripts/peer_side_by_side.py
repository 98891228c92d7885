"""Side by side with the peer library: cuBLAS DGEMM, ours and GEMMul8, one process.

Times and checks, on the same CuPy operands in one Python process on one GPU:

* cuBLAS's DGEMM (``cupy.matmul(a, b, out=c)``),
* ours, ``ozaki_backend.matmul(a, b, out=c)`` at the default precision (with the moduli
  count it chose and the certificate's outcome, from ``ozaki_backend.stats()``),
* GEMMul8 3.0.5 (the INT8 Ozaki-II library of Uchino, Ozaki and Imamura) in its
  accurate mode, its stock fast mode and a "3.5-style" fast mode (GEMMul8 3.5.0's
  scale-invariant fast shift ported into the 3.0.5 build), at each count of
  ``--moduli``.

Nothing of GEMMul8 is in this repository. The untracked folder ``.gemmul8/`` holds its
sources, the patch and a small ``extern "C"`` shim built into two shared libraries,
``.gemmul8/lib/libg8sbs_305.so`` and ``.gemmul8/lib/libg8sbs_35fast.so``
(``.gemmul8/BUILD.txt``, ``.gemmul8/build.sh``); they are loaded here with ctypes. Run
it on the GPU machine through ``bash scripts/gemmul8-side-by-side.sh [options]``, which
sets the path up, relinks the libraries there if the prebuilt ones do not load, and
says what to carry.

Usage
-----
::

    python scripts/peer_side_by_side.py [--quick] [--shapes 4096,8192x2048x8192,...]
        [--phis -1,1,2] [--moduli 13-18] [--warmup 5] [--reps 7] [--rounds 2] [--seed 1]
        [--budget-s 420] [--lib-dir .gemmul8/lib]

Shapes are ``n`` (a cube) or ``m x k x n`` (``A`` is m-by-k, ``B`` k-by-n). Data: ``phi
= -1`` is N(0,1), else ``(rand - 0.5) exp(phi randn)`` (:func:`ozaki_backend.testing.
phi_matrix`, drawn on the device in the same order: uniforms, then normals).

Measurement (``/work/shared/notes/peer-side-by-side-facts.md``)
-------------------------------------------------------------------
* Warm: ``--warmup`` calls, then the median of ``--reps`` calls timed with CUDA events
  on the current stream; cuBLAS and ours in ``--rounds`` alternating rounds, the median
  of the rounds' medians (the GPU's clock drifts between seconds). GEMMul8 synchronises
  the host inside every call; the events bracket the whole call either way.
* Cold, at the first ``phi`` of each shape (a shape new to the process; a 512^3 prelude
  has already paid the process-wide first-use costs): calls 1-4 of ours (call 1 apart:
  it is the one that meets the shape first), of GEMMul8's accurate and 3.5-style fast
  mode at ours' count, and of cuBLAS, each timed by wall clock to the device's idle.
* Errors against the exact product (:func:`ozaki_backend.testing.exact_matmul`) on
  sampled elements, the same for every method: 3 rows x up to 2048 columns per shape;
  ``max |C - E| / |E|`` and ``max |C - E| / (|A||B|)``. The exact products are computed
  after all GPU work (on the host, in parallel processes), so they cannot disturb the
  timings.
* "Matched": the fastest GEMMul8 setting whose sampled max relative error is at most
  cuBLAS's. The issue's target: ours at most 0.95 x that setting's time.

Output: progress and detail tables, then the compact table LAST on stdout; the full
results as JSON in ``$OUT/peer-side-by-side.json`` when ``OUT`` is set. Exit status 2
when CuPy or the GPU is missing, 3 when the GEMMul8 libraries are missing or do not
load (``scripts/gemmul8-side-by-side.sh`` then relinks them here).

Notes
-----
Defaults (5 shapes x 3 data families x 20 methods) are about 3-4 minutes on an H200;
every shape keeps 5 warm-up and 7 timed calls (the 16384^3 shape is ~1.5 minutes of
that). ``--budget-s`` stops starting new (shape, phi) cases once that many seconds have
passed, so a slow machine still prints a table.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SHAPES = "4096,8192,16384,10000,8191"
QUICK_SHAPES = "4096,8191"
LIBS = {"305": "libg8sbs_305.so", "35fast": "libg8sbs_35fast.so"}
N_ROWS, N_COLS = 3, 2048          # sampled elements: rows x columns per shape
COL_CHUNK = 128                   # columns per exact-product task


class Unavailable(RuntimeError):
    """Something the benchmark needs is missing (exit status 2)."""
    status = 2


class LibraryUnavailable(Unavailable):
    """The GEMMul8 libraries are missing or do not load here (exit status 3: the shell
    entry then relinks the carried objects with this machine's nvcc)."""
    status = 3


# --------------------------------------------------------------------------- arguments

def _shape(text):
    text = text.strip().lower()
    parts = [int(p) for p in text.split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"a shape is n or m x k x n; got {text!r}")
    return tuple(parts)


def _shapes(text):
    return [_shape(t) for t in text.split(",") if t.strip()]


def _moduli(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-"))
            out.extend(range(lo, hi + 1))
        elif part.strip():
            out.append(int(part))
    if not out or min(out) < 2 or max(out) > 20:
        raise argparse.ArgumentTypeError(f"moduli counts are 2..20; got {text!r}")
    return sorted(set(out))


def _phis(text):
    return [float(p) for p in text.split(",") if p.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="cuBLAS DGEMM vs ozaki_backend vs GEMMul8 3.0.5 (accurate, fast, "
                    "3.5-style fast) on the same CuPy operands, one process.")
    p.add_argument("--shapes", type=_shapes, default=None,
                   help=f"comma-separated n or MxKxN (default {DEFAULT_SHAPES})")
    p.add_argument("--phis", type=_phis, default=None,
                   help="data families: -1 is N(0,1), else phi (default -1,1,2)")
    p.add_argument("--moduli", type=_moduli, default=None,
                   help="GEMMul8 moduli counts, e.g. 13-18 (default)")
    p.add_argument("--quick", action="store_true",
                   help=f"first check: shapes {QUICK_SHAPES}, phi -1, moduli 14-16")
    p.add_argument("--warmup", type=int, default=5, help="warm-up calls (default 5)")
    p.add_argument("--reps", type=int, default=7, help="timed calls (default 7)")
    p.add_argument("--rounds", type=int, default=2,
                   help="alternating rounds of cuBLAS and ours, each --reps calls; their "
                        "times are the median of the rounds' medians (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="start no new (shape, phi) case after this many seconds")
    p.add_argument("--lib-dir", default=os.path.join(ROOT, ".gemmul8", "lib"),
                   help="where libg8sbs_305.so and libg8sbs_35fast.so are")
    p.add_argument("--workers", type=int, default=0,
                   help="processes for the exact products (default: CPU count, max 16)")
    p.add_argument("--check-libs", action="store_true",
                   help="only load the two libraries (with cuBLAS) and exit: 0 if they load")
    p.add_argument("--print-cublas-dir", action="store_true",
                   help="only print the directory of the cuBLAS 13 this process would use")
    argv = list(sys.argv[1:] if argv is None else argv)
    for i in range(len(argv) - 1):          # "--phis -1,2": argparse takes -1,2 for an option
        if argv[i] in ("--phis", "--shapes", "--moduli") and argv[i + 1].startswith("-"):
            argv[i:i + 2] = [f"{argv[i]}={argv[i + 1]}", ""]
    a = p.parse_args([x for x in argv if x != ""])
    if a.quick:
        a.shapes = a.shapes or _shapes(QUICK_SHAPES)
        a.phis = a.phis or [-1.0]
        a.moduli = a.moduli or list(range(14, 17))
    a.shapes = a.shapes or _shapes(DEFAULT_SHAPES)
    a.phis = a.phis or [-1.0, 1.0, 2.0]
    a.moduli = a.moduli or list(range(13, 19))
    if a.warmup < 0 or a.reps < 1:
        p.error("--warmup >= 0 and --reps >= 1")
    return a


# --------------------------------------------------------------------------- loading

def _cublas_dirs():
    """Directories that may hold libcublas.so.13: the one CuPy already loaded first
    (so that GEMMul8 and CuPy share one cuBLAS), then Python's nvidia-* wheels, then
    the CUDA toolkit."""
    dirs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if "/" in line else ""
                if os.path.basename(path).startswith("libcublas.so."):
                    dirs.append(os.path.dirname(path))
    except OSError:
        pass
    import site
    sites = list(sys.path)
    try:
        sites += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:                  # some virtualenvs lack getsitepackages
        pass
    try:
        import cupy
        sites.append(os.path.dirname(os.path.dirname(cupy.__file__)))
    except ImportError:
        pass
    for s in sites:
        if s and os.path.isdir(s):
            dirs += [os.path.join(s, "nvidia", "cu13", "lib"),
                     os.path.join(s, "nvidia", "cublas", "lib")]
    dirs += os.environ.get("LD_LIBRARY_PATH", "").split(":")
    dirs += ["/usr/local/cuda/lib64", *sorted(glob.glob("/usr/local/cuda-13*/lib64")),
             "/usr/lib/x86_64-linux-gnu"]
    seen, out = set(), []
    for d in dirs:
        d = os.path.realpath(d) if d else ""
        if d and d not in seen and os.path.exists(os.path.join(d, "libcublas.so.13")):
            seen.add(d)
            out.append(d)
    return out


def load_peer(lib_dir):
    """The two shim libraries as ctypes handles ``{"305": ..., "35fast": ...}``.

    The shims need ``libcublas.so.13`` and ``libcublasLt.so.13`` by soname and carry no
    search path: they are loaded here first, with RTLD_GLOBAL, from the directory where
    CuPy's own cuBLAS is (else the first that has both), so the dynamic loader finds them
    already in the process. The shims themselves are loaded RTLD_LOCAL (and were linked
    -Bsymbolic, exporting only ``g8_*``): the two copies of GEMMul8 cannot mix."""
    missing = [n for n in LIBS.values() if not os.path.isfile(os.path.join(lib_dir, n))]
    if missing:
        raise LibraryUnavailable(f"{', '.join(missing)} not in {lib_dir}: build them with "
                          "`bash .gemmul8/build.sh` on a machine with nvcc, and carry "
                          "them to the GPU machine (run(carry=[\".gemmul8/lib\"]))")
    import cupy
    cupy.cuda.device.get_cublas_handle()   # CuPy loads its cuBLAS now, if it has not
    dirs = [d for d in _cublas_dirs() if os.path.exists(os.path.join(d, "libcublasLt.so.13"))]
    loaded_from = None
    for d in dirs:
        try:
            ctypes.CDLL(os.path.join(d, "libcublasLt.so.13"), mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(os.path.join(d, "libcublas.so.13"), mode=ctypes.RTLD_GLOBAL)
            loaded_from = d
            break
        except OSError:
            continue
    if loaded_from is None:                  # last resort: the loader's own search
        try:
            ctypes.CDLL("libcublasLt.so.13", mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL("libcublas.so.13", mode=ctypes.RTLD_GLOBAL)
            loaded_from = "(dynamic loader search path)"
        except OSError as exc:
            raise LibraryUnavailable(f"cannot load libcublas.so.13/libcublasLt.so.13 ({exc}); "
                              f"searched {dirs or 'no directory with both'}") from exc
    libs = {}
    for key, name in LIBS.items():
        try:
            lib = ctypes.CDLL(os.path.join(lib_dir, name), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise LibraryUnavailable(f"cannot load {name}: {exc}") from exc
        lib.g8_version.restype = ctypes.c_int
        lib.g8_fast_shift_variant.restype = ctypes.c_int
        lib.g8_worksize.restype = ctypes.c_size_t
        lib.g8_worksize.argtypes = [ctypes.c_size_t] * 3 + [ctypes.c_int]
        lib.g8_dgemm.restype = ctypes.c_int
        lib.g8_dgemm.argtypes = ([ctypes.c_int] * 3
                                 + [ctypes.c_void_p, ctypes.c_int] * 3
                                 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                    ctypes.c_void_p])
        lib.g8_last_error.restype = ctypes.c_char_p
        lib.g8_last_times.argtypes = [ctypes.POINTER(ctypes.c_double)]
        want = 305 if key == "305" else 350
        if lib.g8_version() != 30005 or lib.g8_fast_shift_variant() != want:
            raise LibraryUnavailable(f"{name} is GEMMul8 code {lib.g8_version()} with fast shift "
                              f"{lib.g8_fast_shift_variant()}, expected 30005 and {want}")
        libs[key] = lib
    return libs, loaded_from


# --------------------------------------------------------------------------- methods

def peer_settings(moduli):
    """``[(name, library key, fastmode, count)]``: accurate mode once (the two builds
    differ only in the fast-mode shift), then both fast modes, at each count."""
    out = [(f"g8-accu-{n}", "305", 0, n) for n in moduli]
    out += [(f"g8-fast305-{n}", "305", 1, n) for n in moduli]
    out += [(f"g8-fast35-{n}", "35fast", 1, n) for n in moduli]
    return out


def peer_call(lib, A, B, C, n_moduli, fast, work):
    """``C = A @ B`` (row-major CuPy arrays) by GEMMul8: the column-major product
    ``C^T = B^T A^T`` with no copies, on CuPy's current stream."""
    import cupy
    m, k = A.shape
    n = B.shape[1]
    stream = cupy.cuda.get_current_stream().ptr
    rc = lib.g8_dgemm(n, m, k, B.data.ptr, n, A.data.ptr, k, C.data.ptr, n,
                      n_moduli, fast, work.data.ptr, stream)
    if rc != 0:
        raise RuntimeError(f"GEMMul8 failed ({rc}): {lib.g8_last_error().decode()}")


def peer_worksize(lib, m, k, n, n_moduli):
    return int(lib.g8_worksize(n, m, k, n_moduli))   # its (m, n, k) is our (n, m, k)


# --------------------------------------------------------------------------- timing

def cold_times(fn, calls=4):
    """Wall seconds of each of the first ``calls`` calls, each to the device's idle
    (a cold call's host work is most of what makes it slow)."""
    from ozaki_backend.provenance import wall_times
    import cupy
    return wall_times(fn, calls, sync=cupy.cuda.Device().synchronize)


# --------------------------------------------------------------------------- data

def _case_seed(seed, shape, phi, which):
    m, k, n = shape
    return (seed * 1_000_003 + m * 7919 + k * 104729 + n * 1299709
            + int(round((phi + 2) * 100)) * 15485863 + which) % (2 ** 31)


# --------------------------------------------------------------------------- exact

def _exact_task(path_a, path_b, j0, j1):
    # Worker: exact product of the sampled rows with columns j0:j1 (memory-mapped).
    from ozaki_backend.testing import exact_matmul
    A = np.load(path_a, mmap_mode="r")
    B = np.load(path_b, mmap_mode="r")
    return j0, exact_matmul(np.array(A), np.ascontiguousarray(B[:, j0:j1]))


def exact_all(cases, workers):
    """Fill ``case["exact"]`` (the exact sampled product) for every case: one task per
    chunk of columns, in a pool of spawned processes (none touches the GPU); in this
    process if the pool cannot start."""
    tasks = []
    for ci, c in enumerate(cases):
        c["exact"] = np.empty((c["sample_a_shape"][0], c["sample_b_shape"][1]))
        for j0 in range(0, c["sample_b_shape"][1], COL_CHUNK):
            j1 = min(j0 + COL_CHUNK, c["sample_b_shape"][1])
            tasks.append((ci, c["path_a"], c["path_b"], j0, j1))
    t0 = time.perf_counter()
    done = False
    if workers > 1 and len(tasks) > 1:
        try:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(max_workers=workers,
                                     mp_context=mp.get_context("spawn")) as ex:
                futs = [(ci, ex.submit(_exact_task, pa, pb, j0, j1))
                        for ci, pa, pb, j0, j1 in tasks]
                for ci, f in futs:
                    j0, E = f.result()
                    cases[ci]["exact"][:, j0:j0 + E.shape[1]] = E
            done = True
        except Exception as exc:            # noqa: BLE001 - fall back, say why
            print(f"  (exact products: process pool failed: {exc!r}; computing here)",
                  flush=True)
    if not done:
        for ci, pa, pb, j0, j1 in tasks:
            _, E = _exact_task(pa, pb, j0, j1)
            cases[ci]["exact"][:, j0:j1] = E
    return time.perf_counter() - t0


def errors(sample, exact, absab):
    """``(max |C-E|/|E|, max |C-E|/(|A||B|))`` over the sampled elements (elements with
    E = 0 or |A||B| = 0 skipped; a non-finite C gives inf)."""
    if sample is None:
        return None, None
    d = np.abs(sample - exact)
    if not np.isfinite(d).all():
        return float("inf"), float("inf")
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(exact != 0, d / np.abs(exact), 0.0)
        ab = np.where(absab != 0, d / absab, 0.0)
    return float(rel.max()), float(ab.max())


# --------------------------------------------------------------------------- one case

def run_case(args, libs, shape, phi, first_of_shape, rows, cols, tmpdir, log):
    import cupy
    import ozaki_backend as ob
    from ozaki_backend.provenance import device_times
    from ozaki_backend.testing import phi_matrix

    m, k, n = shape

    def rng(which):
        return cupy.random.default_rng(_case_seed(args.seed, shape, phi, which))

    # drawn on the device: host generation of 16384^2 operands would take longer than
    # timing them
    A, B = phi_matrix((m, k), phi, rng(1)), phi_matrix((k, n), phi, rng(2))
    C = cupy.empty((m, n))
    case = {"shape": list(shape), "phi": phi, "methods": {}, "cold": {}}
    # Sampled operands to the host now (the exact products come after all GPU work);
    # |A||B| on the same elements here.
    rows_d, cols_d = cupy.asarray(rows), cupy.asarray(cols)
    As = cupy.asnumpy(A[rows_d])
    Bs = cupy.asnumpy(B[:, cols_d])
    case["absab"] = cupy.asnumpy(cupy.abs(A[rows_d]) @ cupy.abs(B[:, cols_d]))
    tag = f"{m}x{k}x{n}_phi{phi:g}"
    case["path_a"] = os.path.join(tmpdir, f"{tag}_A.npy")
    case["path_b"] = os.path.join(tmpdir, f"{tag}_B.npy")
    np.save(case["path_a"], As)
    np.save(case["path_b"], Bs)
    case["sample_a_shape"], case["sample_b_shape"] = As.shape, Bs.shape
    del As, Bs
    idx = (rows_d[:, None], cols_d[None, :])

    def sample():
        return cupy.asnumpy(C[idx])

    work_bytes = max(peer_worksize(libs[key], m, k, n, nm)
                     for _, key, _, nm in peer_settings(args.moduli))
    work = cupy.empty(work_bytes, dtype=cupy.uint8)
    case["peer_work_bytes"] = work_bytes

    def ours():
        ob.matmul(A, B, out=C)

    def native():
        cupy.matmul(A, B, out=C)

    def peer(key, fast, nm):
        return lambda: peer_call(libs[key], A, B, C, nm, fast, work)

    # ---- cold: the shape is new to this process (only at its first phi)
    chosen = None
    if first_of_shape:
        ob.reset_stats()
        c1 = cold_times(ours, 1)
        chosen = ob.stats().get("last_moduli")
        c24 = cold_times(ours, 3)
        case["cold"]["ours"] = {"call1_s": c1[0], "calls2_4_s": c24}
        nc = chosen if chosen in args.moduli else args.moduli[len(args.moduli) // 2]
        for name, key, fast in ((f"g8-accu-{nc}", "305", 0), (f"g8-fast35-{nc}", "35fast", 1)):
            try:
                case["cold"][name] = {"calls1_4_s": cold_times(peer(key, fast, nc), 4)}
            except RuntimeError as exc:
                case["cold"][name] = {"error": str(exc)}
        case["cold"]["cublas"] = {"calls1_4_s": cold_times(native, 4)}

    # ---- warm: every method, C poisoned first so a method that writes nothing shows;
    # cuBLAS and ours in --rounds alternating rounds first (the GPU's clock drifts by
    # several per cent between seconds: the same DGEMM read 4.48 and 5.14 ms at
    # 8192 x 2048 x 8192 in one run, 2026-12-07), each round a median of --reps, the
    # method's time the median of its rounds
    methods = [("cublas", native), ("ours", ours)] * max(1, args.rounds)
    methods += [(name, peer(key, fast, nm)) for name, key, fast, nm in peer_settings(args.moduli)]
    for name, fn in methods:
        C.fill(np.nan)
        rec = case["methods"].get(name, {})
        try:
            if name == "ours":
                ob.reset_stats()
            ts = device_times(fn, args.reps, args.warmup)
            rounds = rec.get("rounds_ms", []) + [1e3 * float(np.median(ts))]
            rec.update(ms=float(np.median(rounds)), rounds_ms=rounds,
                       samples_ms=rec.get("samples_ms", []) + [1e3 * t for t in ts])
            if name == "ours":
                s = ob.stats()
                rec["moduli"] = s.get("last_moduli")
                rec["moduli_counts"] = {str(kk): v for kk, v in (s.get("moduli") or {}).items()}
                rec["outcome"] = ",".join(sorted(s.get("certificate") or {})) or "-"
            rec["sample"] = sample()
            if name == "ours":
                # the count the plan gives these operands, as scripts/accuracy_families.py
                # reads it (the same as stats()'s unless the product left the plan)
                rec["plan_moduli"] = ob.plan(m, n, k).moduli_for(A, B)
        except Exception as exc:            # noqa: BLE001 - one setting failing is a result
            rec.update(ms=None, error=f"{type(exc).__name__}: {exc}", sample=None)
        case["methods"][name] = rec
    o = case["methods"]["ours"]
    if chosen is not None:
        o["moduli_cold_call"] = chosen
    log(f"  {tag}: cuBLAS {_f(case['methods']['cublas'].get('ms'))} ms, ours "
        f"{_f(o.get('ms'))} ms ({o.get('moduli')}, {o.get('outcome')}), peer "
        f"{min((r['ms'] for nm, r in case['methods'].items() if nm.startswith('g8') and r.get('ms')), default=float('nan')):.2f} ms (fastest setting)")
    A = B = C = work = idx = None          # the closures above hold them too
    return case


# --------------------------------------------------------------------------- report

def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _e(x):
    return "-" if x is None else f"{x:.1e}"


def summarize(case, moduli):
    """Errors for every method, then the matched settings and the ratios."""
    E, absab = case["exact"], case["absab"]
    for rec in case["methods"].values():
        rec["err_rel"], rec["err_ab"] = errors(rec.pop("sample", None), E, absab)
    nat = case["methods"]["cublas"]
    ours = case["methods"]["ours"]
    s = {"cublas_ms": nat.get("ms"), "cublas_err": nat["err_rel"],
         "ours_ms": ours.get("ms"), "ours_err": ours["err_rel"],
         "ours_moduli": ours.get("moduli") or ours.get("plan_moduli"),
         "ours_outcome": ours.get("outcome"),
         "ours_matched": (ours["err_rel"] is not None and nat["err_rel"] is not None
                          and ours["err_rel"] <= nat["err_rel"])}
    s["cublas_over_ours"] = (s["cublas_ms"] / s["ours_ms"]
                             if s["cublas_ms"] and s["ours_ms"] else None)

    def fastest(prefix):
        ok = [(r["ms"], nm) for nm, r in case["methods"].items()
              if nm.startswith(prefix) and r.get("ms") and r["err_rel"] is not None
              and nat["err_rel"] is not None and r["err_rel"] <= nat["err_rel"]]
        return min(ok) if ok else (None, None)

    for label, prefix in (("accu", "g8-accu-"), ("fast305", "g8-fast305-"),
                          ("fast35", "g8-fast35-"), ("peer", "g8-")):
        ms, nm = fastest(prefix)
        s[f"{label}_matched"] = nm
        s[f"{label}_matched_ms"] = ms
    pm = s["peer_matched_ms"]
    s["ours_over_peer"] = s["ours_ms"] / pm if (pm and s["ours_ms"]) else None
    s["target_met"] = (s["ours_over_peer"] is not None and s["ours_over_peer"] <= 0.95)
    case["summary"] = s
    return s


def print_details(cases, moduli):
    print("\n==== every setting: warm median ms / sampled max |C-E|/|E| / max |C-E|/(|A||B|)")
    for c in cases:
        m, k, n = c["shape"]
        print(f"-- {m}x{k}x{n} phi={c['phi']:g}  (GEMMul8 workspace "
              f"{c['peer_work_bytes'] / 2**30:.2f} GiB)")
        for nm, r in c["methods"].items():
            extra = ""
            if nm == "ours":
                extra = f"  moduli {r.get('moduli')} outcome {r.get('outcome')}"
            if r.get("error"):
                extra += f"  ERROR {r['error']}"
            print(f"   {nm:16s} {_f(r.get('ms')):>9s} ms  {_e(r.get('err_rel')):>8s}  "
                  f"{_e(r.get('err_ab')):>8s}{extra}")
    cold = [c for c in cases if c["cold"]]
    if cold:
        print("\n==== cold (first phi of each shape): wall ms of calls 1 | 2 3 4")
        for c in cold:
            m, k, n = c["shape"]
            for nm, r in c["cold"].items():
                if "error" in r:
                    print(f"   {m}x{k}x{n} {nm:16s} ERROR {r['error']}")
                    continue
                ts = [r["call1_s"], *r["calls2_4_s"]] if nm == "ours" else r["calls1_4_s"]
                print(f"   {m}x{k}x{n:<6d} {nm:16s} {1e3 * ts[0]:9.2f} | "
                      + " ".join(f"{1e3 * t:8.2f}" for t in ts[1:]))
    print("\n==== fastest setting of each GEMMul8 mode whose max rel. error <= cuBLAS's")
    for c in cases:
        s = c["summary"]
        m, k, n = c["shape"]
        parts = [f"{lbl} {s[lbl + '_matched'] or 'none'} ({_f(s[lbl + '_matched_ms'])} ms)"
                 for lbl in ("accu", "fast305", "fast35")]
        print(f"   {m}x{k}x{n} phi={c['phi']:<4g} " + "; ".join(parts))


def print_compact(cases, skipped, meta):
    print(f"\n==== side by side on {meta['gpu']} (warm medians, ms; err: sampled max "
          "|C-E|/|E|; peer: GEMMul8 3.0.5 / ported 3.5 fast shift; target ours/peer <= 0.95)")
    hdr = (f"{'shape':>17s} {'phi':>4s} {'cuBLAS':>8s} {'err':>7s} {'ours':>8s} "
           f"{'N':>3s} {'outcome':<14s} {'err':>7s} {'cuB/ours':>8s} "
           f"{'matched peer':<16s} {'ms':>8s} {'err':>7s} {'ours/peer':>9s} target")
    print(hdr)
    for c in cases:
        s = c["summary"]
        m, k, n = c["shape"]
        pm = s["peer_matched"]
        perr = c["methods"][pm]["err_rel"] if pm else None
        print(f"{m:>5d}x{k:>5d}x{n:>5d} {c['phi']:>4g} {_f(s['cublas_ms']):>8s} "
              f"{_e(s['cublas_err']):>7s} {_f(s['ours_ms']):>8s} "
              f"{str(s['ours_moduli'] or '-'):>3s} {str(s['ours_outcome'])[:14]:<14s} "
              f"{_e(s['ours_err']):>7s} {_f(s['cublas_over_ours'], '{:.3f}'):>8s} "
              f"{pm or 'none':<16s} {_f(s['peer_matched_ms']):>8s} {_e(perr):>7s} "
              f"{_f(s['ours_over_peer'], '{:.3f}'):>9s} "
              f"{'yes' if s['target_met'] else 'NO'}")
    for sk in skipped:
        print(f"  skipped (time budget): {sk}")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items() if k not in ("exact", "absab")}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


# --------------------------------------------------------------------------- main

def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    # Fail early and clearly (status 2) on a missing piece, before any GPU work.
    missing = [n for n in LIBS.values()
               if not os.path.isfile(os.path.join(args.lib_dir, n))]
    if missing and not args.print_cublas_dir:
        raise LibraryUnavailable(f"{', '.join(missing)} not found in {args.lib_dir}: build with "
                          "`bash .gemmul8/build.sh` (a machine with nvcc) and carry "
                          ".gemmul8/lib to the GPU machine")
    try:
        import cupy
    except Exception as exc:                # noqa: BLE001 - any import failure
        raise Unavailable(f"CuPy is not importable: {exc}") from exc
    try:
        ndev = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:                # noqa: BLE001 - no driver, no device
        raise Unavailable(f"no CUDA device: {exc}") from exc
    if ndev < 1:
        raise Unavailable("no CUDA device")
    if args.print_cublas_dir:
        cupy.cuda.device.get_cublas_handle()
        dirs = [d for d in _cublas_dirs()
                if os.path.exists(os.path.join(d, "libcublasLt.so.13"))]
        if not dirs:
            raise Unavailable("no directory with libcublas.so.13 and libcublasLt.so.13")
        print(dirs[0])
        return 0
    libs, cublas_from = load_peer(args.lib_dir)
    if args.check_libs:
        print(f"loaded {', '.join(LIBS.values())} from {args.lib_dir} "
              f"(cuBLAS from {cublas_from})")
        return 0
    sys.path.insert(0, ROOT)                # run from a checkout: this tree's package
    import ozaki_backend as ob

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    meta = {"gpu": gpu, "cupy": cupy.__version__, "ozaki_backend": ob.__version__,
            "cublas_version": _cublas_version(), "cublas_loaded_from": cublas_from,
            "gemmul8": "3.0.5 (UCHINO-Yuki/GEMMul8 f9b626b); 35fast: 3.5.0 fast shift ported",
            "shapes": [list(s) for s in args.shapes], "phis": args.phis,
            "moduli": args.moduli, "warmup": args.warmup, "reps": args.reps, "rounds": args.rounds,
            "seed": args.seed, "sample": [N_ROWS, N_COLS]}
    log(f"GPU {gpu}; CuPy {cupy.__version__}; ozaki_backend {ob.__version__}; cuBLAS "
        f"{meta['cublas_version']} from {cublas_from}")

    # Prelude: every method once at 512^3, so that "cold" below means a new shape,
    # not a new process (CUDA modules, handles, first allocations).
    a = cupy.random.default_rng(0).standard_normal((512, 512))
    c = cupy.empty((512, 512))
    w = cupy.empty(max(peer_worksize(lib, 512, 512, 512, max(args.moduli))
                       for lib in libs.values()), dtype=cupy.uint8)
    pre = {"ours": cold_times(lambda: ob.matmul(a, a, out=c), 1)[0],
           "cublas": cold_times(lambda: cupy.matmul(a, a, out=c), 1)[0]}
    for key, lib in libs.items():
        for fast in (0, 1):
            try:
                pre[f"g8-{key}-fast{fast}"] = cold_times(
                    lambda: peer_call(lib, a, a, c, max(args.moduli), fast, w), 1)[0]
            except RuntimeError as exc:     # nothing would run below: say so, status 2
                raise Unavailable(f"GEMMul8 ({LIBS[key]}) does not run here: {exc}") from exc
    meta["prelude_first_call_s"] = pre
    a = c = w = None
    log("prelude (first call in the process, 512^3): "
        + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in pre.items()))

    tmpdir = tempfile.mkdtemp(prefix="peer-sbs-", dir=_sample_dir())
    cases, skipped = [], []
    try:
        for shape in args.shapes:
            m, k, n = shape
            rs = np.random.default_rng([args.seed, m, k, n])
            rows = np.sort(rs.choice(m, size=min(N_ROWS, m), replace=False))
            cols = np.sort(rs.choice(n, size=min(N_COLS, n), replace=False))
            for i, phi in enumerate(args.phis):
                if time.perf_counter() - t_start > args.budget_s:
                    skipped.append(f"{m}x{k}x{n} phi={phi:g}")
                    continue
                log(f"{m}x{k}x{n} phi={phi:g}")
                cases.append(run_case(args, libs, shape, phi, i == 0, rows, cols,
                                      tmpdir, log))
            _free_device()
        workers = args.workers or min(16, os.cpu_count() or 1)
        log(f"exact products of the sampled elements ({workers} processes)")
        t_exact = exact_all(cases, workers)
        log(f"exact products done in {t_exact:.1f} s")
    finally:
        for f in glob.glob(os.path.join(tmpdir, "*.npy")):
            os.remove(f)
        os.rmdir(tmpdir)
    for case in cases:
        summarize(case, args.moduli)
    meta["elapsed_s"] = time.perf_counter() - t_start
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = os.path.join(out_dir, "peer-side-by-side.json")
        with open(path, "w") as f:
            json.dump(_jsonable({"meta": meta, "cases": cases, "skipped": skipped}), f,
                      indent=1)
        log(f"wrote {path}")
    print_details(cases, args.moduli)
    print_compact(cases, skipped, meta)
    return 0


def _sample_dir():
    """/dev/shm when it has room for the sampled operands (up to ~3 GB at the defaults;
    a container's /dev/shm is often 64 MB), else the default temporary directory."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 8 * 2 ** 30:
            return "/dev/shm"
    except OSError:
        pass
    return None


def _cublas_version():
    try:
        import cupy
        return cupy.cuda.cublas.getVersion(cupy.cuda.device.get_cublas_handle())
    except Exception:                       # noqa: BLE001 - informative only
        return None


def _free_device():
    """Give the finished shape's memory back: our replayed CUDA-graph plans hold their
    buffers (and operands' addresses), then CuPy's pool keeps the freed blocks."""
    import cupy
    try:
        from ozaki_backend.cuda import graphs
        graphs.clear()
    except Exception:                       # noqa: BLE001 - an older tree: nothing to drop
        pass
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Unavailable as exc:
        print(f"peer_side_by_side: ERROR: {exc}", file=sys.stderr)
        sys.exit(exc.status)
