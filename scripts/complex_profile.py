"""Where the time of one device-resident complex128 product goes (H200 investigation
for issue 14): CUDA-event times of ``matmul(engine="cuda")``, of
``cuda.complex.product_2d`` alone and of its phases, then a cProfile of one call
(host time, including the waits of its synchronisations).

    python scripts/complex_profile.py [n] [reps]
"""

import cProfile
import pstats
import sys

import cupy as cp

import ozaki_backend as ob
from ozaki_backend.cuda import complex as ccx
from ozaki_backend.cuda.pipeline import Phases
from ozaki_backend.plan import Plan
from ozaki_backend.provenance import median_device_time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
rng = cp.random.default_rng(1)
A = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
B = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
plan = Plan(n, n, n)
t_z = median_device_time(lambda: cp.matmul(A, B), reps)
t_api = median_device_time(lambda: ob.matmul(A, B, engine="cuda"), reps)
t_2d = median_device_time(lambda: ccx.product_2d(A, B, plan), reps)
Ar, Ai, Br, Bi = A.real, A.imag, B.real, B.imag
t_parts = median_device_time(lambda: ccx.Parts.of(Ar, Ai, Br, Bi), reps)
t_prep = median_device_time(lambda: ccx.prepare(Ar, Ai, Br, Bi, "accurate"), reps)
parts, prep = ccx.prepare(Ar, Ai, Br, Bi, "accurate")
from ozaki_backend.cuda import scaling
f4 = cp.zeros(4, dtype=cp.int32)
t_flags = median_device_time(lambda: (ccx.flags_into(A, f4[:2]), ccx.flags_into(B, f4[2:])), reps)
nz, gmax = cp.zeros(2, dtype=cp.int32), cp.zeros(1, dtype=cp.int32)
t_sides = median_device_time(lambda: ccx._sides(parts, "accurate", gmax, nz), reps)
a_, b_ = ccx._sides(parts, "accurate", gmax, nz)
tm, tn, tiles = ccx.bound_tiles(n, n, n)


def bound():
    bm = ccx.EmbeddingBound(a_, b_, parts.S, n, tm, tn)
    for tile in tiles:
        bm.tile(*tile)
    return bm


t_bm = median_device_time(bound, reps)
bm = bound()
t_kept = median_device_time(lambda: scaling.kept_bits(a_, b_, bm, tiles, "accurate",
                                                      ccx.COMPLEX_TABLE, prep.window,
                                                      tied=True), reps)
t_kept_all = median_device_time(lambda: scaling.kept_bits(a_, b_, bm, tiles, "accurate",
                                                          ccx.COMPLEX_TABLE, tied=True), reps)
t_status = median_device_time(lambda: prep.status(True), reps)
print(f"flags (mixes only) {t_flags * 1e3:.2f} ms, equilibration {t_parts * 1e3:.2f}, "
      f"statistics of the embedding's rows {t_sides * 1e3:.2f}, bound GEMM (quantise + 2 "
      f"GEMMs + combine) {t_bm * 1e3:.2f}, kept bits {t_kept * 1e3:.2f} (all counts "
      f"{t_kept_all * 1e3:.2f}), certificate "
      f"count {t_status * 1e3:.2f} ms")
del bm
s, t = prep.shifts(16)
t_res = median_device_time(lambda: ccx.residue_planes(parts.Ar, parts.Ai, s, 16, S=parts.S,
                                                      ks=-1), reps)
UA, VA = ccx.residue_planes(parts.Ar, parts.Ai, s, 16, S=parts.S, ks=-1)
UB, VB = ccx.residue_planes(parts.BrT, parts.BiT, t[:n], 16, S=parts.S, ks=1)
C1 = ccx.products(UA, UB, 16, n, n, UA.shape[2])
C2 = ccx.products(VA, VB, 16, n, n, UA.shape[2])
out = cp.empty((n, n), dtype=cp.complex128)
s32, t32 = s.astype(cp.int32), t[:n].astype(cp.int32)
t_rec = median_device_time(lambda: ccx.recombine_crt_into(C1, C2, 16, n, n, s32, t32, out),
                           reps)
print(f"prepare (all of the above) {t_prep * 1e3:.2f} ms, residues of A (16 moduli) "
      f"{t_res * 1e3:.2f} ms, recombine + CRT {t_rec * 1e3:.2f} ms")
del C1, C2, UA, VA, UB, VB
ph = Phases()
ccx.product_2d(A, B, plan, phases=ph)
tot = ph.totals()
print(f"n={n}: ZGEMM {t_z * 1e3:.2f} ms; matmul {t_api * 1e3:.2f} ms; product_2d "
      f"{t_2d * 1e3:.2f} ms; phases " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in tot.items())
      + f" (sum {sum(tot.values()) * 1e3:.2f}) ms")
pr = cProfile.Profile()
cp.cuda.Device().synchronize()
pr.enable()
ob.matmul(A, B, engine="cuda")
cp.cuda.Device().synchronize()
pr.disable()
pstats.Stats(pr).sort_stats("cumulative").print_stats(28)
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
