"""One launch of the fused kernel (128 x 256 tiles) and of one cuBLAS INT8 GEMM at
n = 8192 (15 moduli), for Nsight Compute.

    ncu --metrics ... python3 scripts/modprod_ncu.py
"""
import cupy
import numpy as np

from ozaki_backend.cuda import modgemm, modprod
from ozaki_backend.spec.moduli import MODULI

n, N = 4096, 15
rng = cupy.random.default_rng(0)
RA = rng.integers(-128, 128, size=(N, n, n), dtype=np.int8)
RB = rng.integers(-128, 128, size=(N, n, n), dtype=np.int8)
items = [(l, l, p, l) for l, p in enumerate(MODULI[:N])]
out = cupy.empty((N, n, n), dtype=np.uint8)
for bn, cl in ((256, 1), (256, 2)):
    modprod.mod_products(RA, RB, items, out, n, n, backend="wgmma", bn=bn, cluster=cl)
C = cupy.empty((1, n, n), dtype=np.int32)
modgemm.products_into(RA, RB, C, 1, n, n, n, strategy="loop")
cupy.cuda.Device().synchronize()
