"""Probe the fused product kernel against cuBLAS on one GPU: bits first, then time.

    python3 scripts/modprod_probe.py [--sizes 4096 8192] [--moduli 15]

For each n: N INT8 products of n x n x n residue planes reduced mod p, three ways —
the fused kernel at both tile widths (one byte out per element and modulus) and
cuBLAS (int32 out, the GEMMs alone, no reduction) — checked bitwise against each other
(the cuBLAS int32 planes reduced on the host for a 256 x 256 corner), then timed with
CUDA events (median of repeats after a warm-up). Prints TOPS and the share of the
H200's 1979 dense INT8 TOPS.
"""

import argparse
import os

import cupy
import numpy as np

from ozaki_backend.cuda import modgemm, modprod
from ozaki_backend.provenance import median_device_time
from ozaki_backend.spec.moduli import MODULI

PEAK = 1979e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--moduli", type=int, default=15)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--configs", nargs="+", default=["256x1x128", "256x1x64", "128x1x64"],
                    type=lambda v: tuple(int(x) for x in v.split("x")),
                    help="fused-kernel variants WIDTHxCLUSTERxBK")
    args = ap.parse_args()
    N = args.moduli
    rng = cupy.random.default_rng(0)
    print(f"{'n':>6} {'path':>12} {'ms':>9} {'TOPS':>7} {'% peak':>7}")
    for n in args.sizes:
        RA = rng.integers(-128, 128, size=(N, n, n), dtype=np.int8)
        RB = rng.integers(-128, 128, size=(N, n, n), dtype=np.int8)
        items = [(l, l, p, l) for l, p in enumerate(MODULI[:N])]
        out = cupy.empty((N, n, n), dtype=np.uint8)
        C = cupy.empty((N, n, n), dtype=np.int32)
        ops = 2.0 * N * n ** 3
        res = {}
        for bn, cl, bk in args.configs:
            os.environ["OZAKI_BACKEND_CUDA_BK"] = str(bk)
            f = lambda RA=RA, RB=RB, out=out, bn=bn, cl=cl: modprod.mod_products(
                RA, RB, items, out, n, n, backend="wgmma", bn=bn, cluster=cl)
            f()
            res[bn, cl, bk] = out[:, :256, :256].copy()
            t = median_device_time(f, args.reps)
            print(f"{n:>6} {f'w{bn}x{cl}k{bk}':>12} {t * 1e3:9.3f} {ops / t / 1e12:7.1f} "
                  f"{100 * ops / t / PEAK:6.1f}%", flush=True)
        os.environ.pop("OZAKI_BACKEND_CUDA_BK", None)
        f = lambda RA=RA, RB=RB, C=C: modgemm.products_into(RA, RB, C, N, n, n, n,
                                                             strategy="loop")
        f()
        ref = cupy.asnumpy(C[:, :256, :256]).astype(np.int64)
        ref = np.stack([np.mod(ref[l], p) for l, p in enumerate(MODULI[:N])]).astype(np.uint8)
        for key, r in res.items():
            same = np.array_equal(cupy.asnumpy(r), ref)
            print(f"{n:>6} {'bits %dx%dk%d' % key:>12} {'equal' if same else 'DIFFER':>9}")
        t = median_device_time(f, args.reps)
        print(f"{n:>6} {'cublas int32':>12} {t * 1e3:9.3f} {ops / t / 1e12:7.1f} "
              f"{100 * ops / t / PEAK:6.1f}%", flush=True)
        del RA, RB, out, C, f  # f holds the planes too (its default arguments)
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
