"""Bandwidth of the passes over the operands, kernel by kernel (issue 18).

For an operand read row-wise (``rows_fast=0``: A, m x k row-major) and column-wise
(``rows_fast=1``: B^T of a row-major k x n B), times each kernel alone with CUDA events
(median of 5 after a warm-up) and prints the bytes it moves per second:
  oz_quantize_down  the bound GEMM's operand: one tile along k per block (tiles=1, the
                    old schedule) and the schedule the engine chooses (quantize_tiles);
  oz_residues       one modulus: the same tile loads and int8 stores (a reference);
  oz_col_exponents  the equilibration's column exponents;
  oz_row_stats      the row statistics.
Usage: python scripts/operand_passes.py [rows,cols ...]   (default 4096,65536 8192,8192)
"""

from __future__ import annotations

import sys

import cupy
import numpy as np

from ozaki_backend.cuda import loader
from ozaki_backend.cuda._common import as_rows
from ozaki_backend.cuda.scaling import _reduce_grid, quantize_tiles
from ozaki_backend.provenance import median_device_time


def _ms(fn):
    return median_device_time(fn, 5) * 1e3


def passes(rows, cols, fast):
    X = (cupy.random.standard_normal((cols, rows)).T if fast
         else cupy.random.standard_normal((rows, cols)))
    Xp, rs, cs, rf = as_rows(X)
    i32 = np.int32
    kpad = cols                     # a multiple of 64 here: no padding
    E, SA, shift = (cupy.zeros(rows, np.int32) for _ in range(3))
    Q = cupy.empty((rows, kpad), np.int8)
    kt, rt = kpad // 64, -(-rows // 32)
    head = (Xp, rs, cs, i32(rows), i32(cols), rf, None, i32(0), i32(kpad))
    quant = loader.get_function("scaling.cu", "oz_quantize_down")
    res = loader.get_function("residues.cu", "oz_residues")
    colx = loader.get_function("scaling.cu", "oz_col_exponents")
    stats = loader.get_function("scaling.cu", "oz_row_stats")
    tiles = quantize_tiles(kt, rt)
    t = {
        "quantize tiles=1": _ms(lambda: quant((kt, rt), (256,), head + (E, Q, SA, i32(1)))),
        f"quantize tiles={tiles}": _ms(lambda: quant((-(-kt // tiles), rt), (256,),
                                                     head + (E, Q, SA, i32(tiles)))),
        "residues N=1": _ms(lambda: res((kt, rt), (256,),
                                        head + (shift, Q, np.int64(Q.size), i32(1)))),
    }
    cmax, cmin = cupy.zeros(cols, np.int32), cupy.zeros(cols, np.int32)
    t["col_exponents"] = _ms(lambda: colx((kt, max(1, -(-rows // 256))), (256,),
                                          (Xp, rs, cs, i32(rows), i32(cols), rf, cmax, cmin)))
    st = [cupy.zeros(rows, np.int32) for _ in range(5)] + [cupy.zeros(1, np.int32)]
    t["row_stats"] = _ms(lambda: stats(_reduce_grid(rows, cols, rf), (32, 8),
                                       (Xp, rs, cs, i32(rows), i32(cols), rf, None, i32(0),
                                        *st)))
    gb = X.nbytes / 1e9
    for name, ms in t.items():
        moved = gb * (1.125 if name.startswith(("quantize", "residues")) else 1.0)
        print(f"{rows:>6} x {cols:<6} rows_fast={int(rf)}  {name:20s} {ms:7.3f} ms "
              f"{moved / ms:5.2f} TB/s")


def main(argv):
    for spec in argv or ["4096,65536", "8192,8192"]:
        rows, cols = (int(x) for x in spec.split(","))
        for fast in (0, 1):
            passes(rows, cols, fast)


if __name__ == "__main__":
    main(sys.argv[1:])
