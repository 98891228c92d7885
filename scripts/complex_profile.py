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
import numpy as np

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
t_emb = median_device_time(lambda: ccx.embedding(A.real, A.imag, B.real, B.imag), reps)
t_prep = median_device_time(lambda: ccx.prepare(A.real, A.imag, B.real, B.imag, "accurate"),
                            reps)
Ah, Bh, prep = ccx.prepare(A.real, A.imag, B.real, B.imag, "accurate")
from ozaki_backend.cuda import scaling
from ozaki_backend.cuda.scaling import BoundMatrix
f4 = cp.zeros(4, dtype=cp.int32)
t_flags = median_device_time(lambda: (ccx.flags_into(A, f4[:2]), ccx.flags_into(B, f4[2:])), reps)
t_eq = median_device_time(lambda: scaling.equilibration((A.real, A.imag), (B.real.T, B.imag.T)),
                          reps)
t_sa = median_device_time(lambda: scaling.side_statistics(Ah, None, -1, "accurate"), reps)
t_sb = median_device_time(lambda: scaling.side_statistics(Bh, None, 1, "accurate"), reps)
a_, b_ = scaling.side_statistics(Ah, None, -1, "accurate"), scaling.side_statistics(Bh, None, 1,
                                                                                    "accurate")
kp = Ah.shape[1]


def bound():
    bm = BoundMatrix(a_, b_, None, kp, n, 2 * n)
    bm.tile(0, n, 0, 2 * n)
    return bm


t_bm = median_device_time(bound, reps)
bm = bound()
t_kept = median_device_time(lambda: scaling.kept_bits(a_, b_, bm, [(0, n, 0, 2 * n)],
                                                      "accurate"), reps)
t_status = median_device_time(lambda: prep.status(True), reps)
print(f"flags {t_flags * 1e3:.2f} ms, equilibration {t_eq * 1e3:.2f}, side stats A "
      f"{t_sa * 1e3:.2f} B {t_sb * 1e3:.2f}, bound GEMM (quantize + GEMM) {t_bm * 1e3:.2f}, "
      f"kept bits {t_kept * 1e3:.2f}, certificate count {t_status * 1e3:.2f} ms")
del bm
s, t = prep.shifts(16)
Ar, Ain, BrT, BiT = ccx.halves(Ah, Bh)
t_res = median_device_time(lambda: ccx.residue_planes(Ar, Ain, s, 16, True), reps)
UA, VA = ccx.residue_planes(Ar, Ain, s, 16, True)
UB, VB = ccx.residue_planes(BrT, BiT, t[:n], 16)
C1 = ccx.products(UA, UB, 16, n, n, UA.shape[2])
C2 = ccx.products(VA, VB, 16, n, n, UA.shape[2])
out = cp.empty((n, n), dtype=cp.complex128)
s32, t32 = s.astype(cp.int32), t[:n].astype(cp.int32)
t_rec = median_device_time(lambda: ccx.recombine_crt_into(C1, C2, 16, n, n, s32, t32, out),
                           reps)
print(f"embedding {t_emb * 1e3:.2f} ms, prepare (incl. embedding) {t_prep * 1e3:.2f} ms, "
      f"residues of A (16 moduli) {t_res * 1e3:.2f} ms, recombine + CRT {t_rec * 1e3:.2f} ms")
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
