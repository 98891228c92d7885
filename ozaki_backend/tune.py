"""``python -m ozaki_backend tune``: measure which GEMM path is fastest on this GPU.

Times the whole CUDA product per shape along the cuBLAS path and the fused Hopper
kernel (both tile widths), checks that all give the same bits, and writes the winners
into the tuning table the engine reads (:mod:`ozaki_backend.cuda.tuning`): the
package's ``_data/gemm_tuning.json`` by default, or ``--output FILE``.
"""

from __future__ import annotations

import argparse


def _shape(text):
    parts = [int(v) for v in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"shape must be N or MxKxN, got {text!r}")
    return tuple(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend tune", description=__doc__)
    ap.add_argument("--shapes", type=_shape, nargs="+", default=None,
                    help="products to time, N or MxKxN (default: 1024 ... 16384, two "
                         "skinny shapes)")
    ap.add_argument("--moduli", type=int, default=15, help="moduli count (default 15)")
    ap.add_argument("--mode", choices=("fast", "accurate"), default="fast")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--output", default=None,
                    help="table file to merge into (default: the package's table)")
    ap.add_argument("--dry-run", action="store_true", help="measure and print only")
    args = ap.parse_args(argv)
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable GPU
        print(f"tune needs a CUDA GPU through CuPy: {exc}")
        return 2
    from .cuda import tuning

    kw = {} if args.shapes is None else {"shapes": args.shapes}
    name, record = tuning.measure(n_moduli=args.moduli, mode=args.mode,
                                  repeats=args.repeats, **kw)
    if args.dry_run:
        return 0
    path = tuning.write_table(name, record, args.output)
    print(f"wrote {len(record['entries'])} entries for {name} to {path}")
    return 0
