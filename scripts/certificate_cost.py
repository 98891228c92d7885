"""Cost of equilibration and of the certificate on the GPU, stage by stage.

    python scripts/certificate_cost.py [n ...]         (default: 4096 8192)

For N(0,1) and phi = 1 operands of n x n x n (CuPy, on the device): the equilibration
pass (exponent ranges along k and S), the row statistics, the bound GEMM with the bits
kept per count, the certificate's count (the kept bits of every count, and of the window of counts
the product computes), and the whole ``precision="fp64"`` product
next to cuBLAS DGEMM; CUDA events, median of 5 after a warm-up. The stages are timed by
calling them the way ``ozaki_backend.cuda.pipeline.Prepared`` does.
"""

import sys

import cupy
import numpy as np

import ozaki_backend as ob
from ozaki_backend.cuda import certificate, pipeline, scaling
from ozaki_backend.cuda._common import REAL_TABLE
from ozaki_backend.spec.certificate import count_window
from ozaki_backend.provenance import median_device_time


def stages(A, B, mode="accurate"):
    Bt = B.T
    st = cupy.zeros(4, dtype=np.int32)
    out = {}
    out["equilibration"] = median_device_time(lambda: scaling.equilibration(A, Bt), 5)
    S = scaling.equilibration(A, Bt)[0]

    def sides():
        return (scaling.side_statistics(A, S, -1, mode, gmax=st[:1]),
                scaling.side_statistics(Bt, S, +1, mode, gmax=st[:1]))

    out["statistics"] = median_device_time(sides, 5)
    a, b = sides()
    m, n, k = A.shape[0], B.shape[1], A.shape[1]
    kpad = pipeline.round_up(k, pipeline.KPAD)
    tiles = [(0, m, 0, n)]

    def bound():
        bm = scaling.BoundMatrix(a, b, S, kpad, m, n)
        bm._summed = {("a", (0, m)), ("b", (0, n))}   # sums once, as in the pipeline
        scaling.kept_bits(a, b, bm, tiles, mode)
        return bm

    out["bound GEMM + kept bits (every count)"] = median_device_time(bound, 5)
    bm = bound()
    # its parts
    out["  quantise A and B"] = median_device_time(lambda: (
        scaling.quantize_down_into(a, S, (0, m), bm.QA, sums=False),
        scaling.quantize_down_into(b, S, (0, n), bm.QB, sums=False)), 5)
    out["  bound GEMM"] = median_device_time(
        lambda: scaling.bound_tile_into(bm.QA, bm.QB, m, n, kpad, bm.P, bm.P32), 5)
    out["  kept bits, every count"] = median_device_time(
        lambda: scaling.kept_bits(a, b, bm, tiles, mode), 5)
    window = count_window(len(REAL_TABLE.counts), certificate.start_index(k, m * n))
    out["  kept bits, the window"] = median_device_time(
        lambda: scaling.kept_bits(a, b, bm, tiles, mode, window=window), 5)
    out["certificate count (window)"] = median_device_time(
        lambda: certificate.counts_into(a, b, bm, tiles, k, st, window=window), 5)
    return out


def counts(rng):
    """The moduli counts the certificate picks (issue table: k = 1024, 8192, 65536 on
    N(0,1) and phi = 1 data), for a small (128 x 128) and a large (2048 x 2048) output,
    both modes."""
    print("moduli chosen (fast / accurate)")
    for mn in (128, 2048):
        for k in (1024, 8192, 65536):
            row = []
            for label in ("N(0,1)", "phi=1"):
                if label == "N(0,1)":
                    A, B = rng.standard_normal((mn, k)), rng.standard_normal((k, mn))
                else:
                    A, B = ((rng.random(sh) - 0.5) * cupy.exp(rng.standard_normal(sh))
                            for sh in ((mn, k), (k, mn)))
                got = [ob.plan(mn, mn, k, mode=mode).moduli_for(A, B)
                       for mode in ("fast", "accurate")]
                row.append(f"{label} {got[0]}/{got[1]}")
            print(f"  {mn} x {k} x {mn}: " + ", ".join(row))
            sys.stdout.flush()


def main(argv):
    sizes = [int(x) for x in argv] or [4096, 8192]
    rng = cupy.random.default_rng(0)
    counts(rng)
    for n in sizes:
        for label, (A, B) in (
                ("N(0,1)", (rng.standard_normal((n, n)), rng.standard_normal((n, n)))),
                ("phi=1", tuple((rng.random((n, n)) - 0.5) * cupy.exp(rng.standard_normal((n, n)))
                                for _ in range(2)))):
            C = cupy.empty((n, n))
            t_nat = median_device_time(lambda: cupy.matmul(A, B, out=C), 5)
            t_emu = median_device_time(lambda: ob.matmul(A, B, out=C), 5)
            N = ob.plan(n, n, n).moduli_for(A, B)
            print(f"n={n} {label}: native {t_nat * 1e3:.2f} ms, fp64 accurate {t_emu * 1e3:.2f} ms "
                  f"(x{t_nat / t_emu:.2f}, {N} moduli)")
            for name, t in stages(A, B).items():
                print(f"    {name:24s} {t * 1e3:7.3f} ms  ({100 * t / t_emu:4.1f} % of the product)")
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
