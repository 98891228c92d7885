"""``python -m ozaki_backend bench --gpu-arrays``: CuPy and PyTorch loops inside
``enabled()`` next to the same loops without it.

For each library (CuPy arrays, torch CUDA tensors) and shape, one float64 ``a @ b``
loop as unmodified code writes it, timed plain (cuBLAS DGEMM) and inside
``ozaki_backend.enabled()`` (the default cost model decides: routed where the
emulation is faster on this GPU, native otherwise), with the decision, the products
routed and the ratio plain / enabled (> 1: faster inside the scope). Square shapes
(``--sizes``) and short-k ones (``m x --short-k x n``: the model should leave those
native, at no cost). Last, the dispatch cost of a product the hooks leave alone: a
small float32 product, per call, inside a scope and without.

Timing: ``--warmup`` calls, then ``--reps`` calls back to back (as a loop issues them)
with one device synchronisation at the end, ``--rounds`` such loops, the plain and the
enabled loops alternating; ms per product, the median over the rounds (a best-of-3
moved native rows by 3 %: the GPU's clocks drift between loops of a few products).
Needs a GPU and CuPy (PyTorch rows skip without a CUDA build of torch).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from ._cli import Parser, choice_list, int_at_least, int_list

DEFAULT_SIZES = "4096,8192,16384"
LIBRARIES = ("cupy", "torch")


def _parse(argv):
    ap = Parser(prog="python -m ozaki_backend bench --gpu-arrays",
                description="CuPy and PyTorch float64 loops inside enabled() and without")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, type=int_list(2),
                    help=f"square sizes n (n x n x n), comma-separated (default "
                         f"{DEFAULT_SIZES})")
    ap.add_argument("--short-k", type=int_at_least(0), default=1024,
                    help="also n x K x n for each n (0: none; default 1024)")
    ap.add_argument("--libs", default=",".join(LIBRARIES), type=choice_list(LIBRARIES),
                    help="cupy, torch or both (default)")
    ap.add_argument("--reps", type=int_at_least(1), default=5,
                    help="products per timed loop (default 5)")
    ap.add_argument("--rounds", type=int_at_least(1), default=7,
                    help="timed loops of each side, the median kept (default 7)")
    ap.add_argument("--warmup", type=int_at_least(0), default=3,
                    help="untimed calls first (default 3)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    return ap.parse_args(argv)


class _Lib:
    """What the loop needs from one array library: operands, a product, a sync."""

    def __init__(self, name):
        self.name = name
        if name == "cupy":
            import cupy

            self.xp = cupy
            self.sync = lambda: cupy.cuda.Device().synchronize()
        else:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("PyTorch has no CUDA device here")
            self.xp = torch
            self.sync = torch.cuda.synchronize

    def operands(self, m, k, n, dtype="float64", seed=0):
        if self.name == "cupy":
            rng = self.xp.random.default_rng(seed)
            return (rng.standard_normal((m, k), dtype=dtype),
                    rng.standard_normal((k, n), dtype=dtype))
        g = self.xp.Generator(device="cuda").manual_seed(seed)
        dt = getattr(self.xp, dtype)
        return (self.xp.randn(m, k, dtype=dt, device="cuda", generator=g),
                self.xp.randn(k, n, dtype=dt, device="cuda", generator=g))

    def free(self):
        if self.name == "cupy":
            self.xp.get_default_memory_pool().free_all_blocks()
        else:
            self.xp.cuda.empty_cache()


def _loop_s(lib, a, b, reps):
    """Seconds per product of ``reps`` back-to-back ``a @ b`` (one sync at the end)."""
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    lib.sync()
    return (time.perf_counter() - t0) / reps


def _row(ob, lib, m, k, n, args):
    a, b = lib.operands(m, k, n)
    ob.reset_stats()
    with ob.enabled():
        d = ob.explain(a, b)
    plain, inside = [], []
    # Plain and enabled loops alternate, so that a drift of the GPU's clocks over the
    # row cannot favour one side; the median of each.
    for r in range(args.rounds + 1):
        reps = args.warmup if r == 0 else args.reps
        if not reps:
            continue
        t = _loop_s(lib, a, b, reps)
        with ob.enabled():
            u = _loop_s(lib, a, b, reps)
        if r:
            plain.append(t * 1e3)
            inside.append(u * 1e3)
    plain, inside = statistics.median(plain), statistics.median(inside)
    s = ob.stats()
    calls = args.warmup + args.reps * args.rounds
    del a, b
    lib.free()
    return {"library": lib.name, "m": m, "k": k, "n": n, "routed": bool(d),
            "decision": str(d.reason), "plain_ms": plain, "enabled_ms": inside,
            "ratio": plain / inside, "routed_products": s["routed"],
            "products": calls, "fallbacks": s["fallback"]}


def _overhead_us(ob, lib, n=128, calls=2000):
    """Host time per call (µs) of a float32 ``n^3`` product the hooks leave alone:
    without a scope, and inside one."""
    a, b = lib.operands(n, n, n, dtype="float32")

    def per_call():
        a @ b
        lib.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            a @ b
        lib.sync()
        return (time.perf_counter() - t0) / calls * 1e6

    plain = min(per_call() for _ in range(3))
    with ob.enabled():
        inside = min(per_call() for _ in range(3))
    return {"library": lib.name, "n": n, "plain_us": plain, "enabled_us": inside}


def run(args) -> int:
    """Measure every row; print the table last; write JSON when asked."""
    from .cuda import availability

    ok, why = availability()
    if not ok:
        print(f"ozaki_backend bench --gpu-arrays: error: needs a GPU: {why}",
              file=sys.stderr)
        return 1
    import ozaki_backend as ob

    shapes = []
    for n in (int(x) for x in args.sizes.split(",") if x):
        shapes.append((n, n, n))
        if args.short_k:
            shapes.append((n, args.short_k, n))
    rows, overheads, skipped = [], [], []
    for name in args.libs.split(","):
        try:
            lib = _Lib(name)
        except (ImportError, RuntimeError) as exc:
            skipped.append(f"{name}: {exc}")
            continue
        for m, k, n in shapes:
            rows.append(_row(ob, lib, m, k, n, args))
            r = rows[-1]
            print(f"{name} {m}x{k}x{n}: plain {r['plain_ms']:.2f} ms, enabled "
                  f"{r['enabled_ms']:.2f} ms ({r['ratio']:.2f}x), routed "
                  f"{r['routed_products']}/{r['products']}", file=sys.stderr, flush=True)
        overheads.append(_overhead_us(ob, lib))
    print(format_table(rows, overheads, skipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "overhead": overheads, "skipped": skipped}, f,
                      indent=1)
            f.write("\n")
    return 0


def format_table(rows, overheads, skipped=()) -> str:
    """The rows as the table ``bench --gpu-arrays`` prints."""
    lines = ["library  shape (m x k x n)      decision  plain ms  enabled ms  ratio  routed",
             "-------  ---------------------  --------  --------  ----------  -----  ------"]
    for r in rows:
        shape = f"{r['m']} x {r['k']} x {r['n']}"
        lines.append(f"{r['library']:7s}  {shape:21s}  {'routed' if r['routed'] else 'native':8s}"
                     f"  {r['plain_ms']:8.2f}  {r['enabled_ms']:10.2f}  {r['ratio']:5.2f}"
                     f"  {r['routed_products']:>3d}/{r['products']:<3d}")
    for o in overheads:
        lines.append(f"{o['library']}: a float32 {o['n']}^3 product left alone costs "
                     f"{o['plain_us']:.1f} us per call plain, {o['enabled_us']:.1f} us "
                     "inside enabled()")
    lines.extend(f"skipped {s}" for s in skipped)
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m ozaki_backend bench --gpu-arrays [options]``."""
    return run(_parse(list(sys.argv[1:] if argv is None else argv)))
