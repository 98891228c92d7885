"""The overlapped schedule (``cuda/overlap.py``) against the plain tile loop, side by
side with cuBLAS DGEMM in one process.

    python scripts/overlap_sweep.py [--shapes 4096,4096,4096;8192,8192,8192]
                                    [--sms 0,8,16,24] [--blocks 0,2048,4096]
                                    [--reps 5] [--json FILE]

For each shape ``m,k,n`` (device operands, N(0,1), precision="fp64", accurate): native
DGEMM, then the product for every SM count left to the side stream (``--sms``; 0 is the
plain tile loop), every block edge (``--blocks``; 0 is the default rule) and both
placements of the residue pass (``--side-residues 1,0``). Each
configuration's output is compared bit for bit with the plain loop's before it is timed
(CUDA events on the caller's stream, median of ``--reps`` after a warm-up).
"""

import argparse
import json
import os
import sys

import cupy
import numpy as np

from ozaki_backend.cuda import overlap
from ozaki_backend.plan import Plan
from ozaki_backend.provenance import median_device_time


def _configs(sms, blocks, sides):
    yield 0, 0, True
    for s in sms:
        if s > 0:
            for b in blocks:
                for r in sides:
                    yield s, b, r


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096,4096,4096;8192,8192,8192")
    ap.add_argument("--sms", default="0,8,16,24")
    ap.add_argument("--blocks", default="0")
    ap.add_argument("--side-residues", default="1",
                    help="1: residues beside the GEMMs; 0: all first (comma list)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    sms = [int(x) for x in args.sms.split(",")]
    blocks = [int(x) for x in args.blocks.split(",")]
    sides = [x.strip() == "1" for x in args.side_residues.split(",")]
    records = []
    for spec in args.shapes.split(";"):
        m, k, n = (int(x) for x in spec.split(","))
        rng = cupy.random.default_rng(m + 3 * k + 7 * n)
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        C = cupy.empty((m, n))
        t_nat = median_device_time(lambda: cupy.matmul(A, B, out=C), args.reps)
        print(f"{m}x{k}x{n}: native DGEMM {t_nat * 1e3:8.2f} ms")
        plan = Plan(m, n, k, mode="accurate", precision="fp64")
        ref = None
        for s, b, r in _configs(sms, blocks, sides):
            overlap.SIDE_RESIDUES = r
            os.environ["OZAKI_BACKEND_CUDA_SIDE_SMS"] = str(s)
            os.environ["OZAKI_BACKEND_CUDA_OVERLAP_BLOCK"] = str(b) if b else ""
            before = overlap.RUNS["overlapped"]
            out = plan.matmul(A, B)
            used = overlap.RUNS["overlapped"] > before
            if ref is None:
                ref = out
            same = bool((out.view(np.int64) == ref.view(np.int64)).all())
            t = median_device_time(lambda: plan.matmul(A, B, out=C), args.reps)
            blk = overlap.block_for(m, n) if used else None
            print(f"  side SMs {s:3d} block {blk or '-':>5} side residues {int(r)}: "
                  f"{t * 1e3:8.2f} ms "
                  f"x{t_nat / t:5.2f}  overlapped {used}  same bits {same}")
            sys.stdout.flush()
            records.append({"m": m, "k": k, "n": n, "side_sms": s, "block": blk,
                            "side_residues": r,
                            "overlapped": used, "same_bits": same, "seconds": t,
                            "native_seconds": t_nat, "speedup": t_nat / t})
            if not same:
                print("  BITS DIFFER from the plain tile loop")
        os.environ.pop("OZAKI_BACKEND_CUDA_SIDE_SMS", None)
        os.environ.pop("OZAKI_BACKEND_CUDA_OVERLAP_BLOCK", None)
        A = B = C = ref = None
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0 if all(r["same_bits"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
