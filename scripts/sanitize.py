"""Small products for compute-sanitizer: the fused kernel, the fused CUDA path end to
end, and the seed scheme's GPU path, each checked against the CPU reference.

    compute-sanitizer --tool memcheck  python3 scripts/sanitize.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize.py
"""
import cupy
import numpy as np

from ozaki_backend.cuda import modprod
from ozaki_backend.cuda.phase22 import matmul_2d
from ozaki_backend.cuda.pipeline import product_into
from ozaki_backend.plan import Plan
from ozaki_backend.reference.engine import product_2d as ref_2d

rng = np.random.default_rng(0)
rows, cols, k = 200, 300, 700
kpad = -(-k // 16) * 16
RA = np.zeros((3, rows, kpad), np.int8)
RB = np.zeros((3, cols, kpad), np.int8)
RA[:, :, :k] = rng.integers(-128, 128, (3, rows, k))
RB[:, :, :k] = rng.integers(-128, 128, (3, cols, k))
items = [(0, 0, 256, 0), (1, 1, 251, 1), (2, 2, 173, 2)]
out = cupy.zeros((3, rows, 304), np.uint8)
for bn in (128, 256):
    modprod.mod_products(cupy.asarray(RA), cupy.asarray(RB), items, out, rows, cols,
                         backend="wgmma", bn=bn)
    got = cupy.asnumpy(out)[:, :rows, :cols]
    for q, (a, b, p, _) in enumerate(items):
        want = np.mod(RA[a, :, :k].astype(np.int64) @ RB[b, :, :k].astype(np.int64).T, p)
        assert np.array_equal(got[q], want), (bn, q)

A = rng.standard_normal((130, 260))
B = rng.standard_normal((260, 70))
for mode in ("fast", "accurate"):
    plan = Plan(130, 70, 260, moduli=15, mode=mode)
    C = cupy.empty((130, 70))
    product_into(cupy.asarray(A), cupy.asarray(B), plan, C, strategy="wgmma")
    assert np.array_equal(cupy.asnumpy(C).view(np.int64), ref_2d(A, B, plan).view(np.int64))

from ozaki_backend.reference import phase22 as r22

plan = Plan(130, 70, 260, scheme="phase22")
A = rng.uniform(-1, 1, (130, 260))
B = rng.uniform(-1, 1, (260, 70))
C = matmul_2d(cupy.asarray(A), cupy.asarray(B), plan)
assert np.array_equal(cupy.asnumpy(C).view(np.int64), r22.matmul_2d(A, B, plan).view(np.int64))
cupy.cuda.Device().synchronize()
print("sanitize.py: all results bitwise equal to the CPU reference")
