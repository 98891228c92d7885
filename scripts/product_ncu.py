"""The real product's kernels under Nsight Compute (issue 18: what bounds each pass).

    ncu --clock-control none --section SpeedOfLight -k regex:oz_ python3 scripts/product_ncu.py [n | m,k,n]

One ``ob.matmul`` of N(0, 1) device operands (default 8192^3, the default precision)
after one warm-up product, so that the profiled launches are those of a product whose
kernels are compiled and whose count was read once (the steady state's kernels, in
the eager order). ``gpu-check.sh --ncu SHAPE`` runs it with the sections that say
whether a pass is bound by DRAM or by the SMs. ``TIMELINE_PHI=2`` (as
``kernel_timeline.py``): phi data ``(rand - 0.5) exp(phi randn)``, whose certificate
runs the gathers and the a-posteriori passes (with ``OZAKI_BACKEND_EMULATION=eager``).
"""

import sys

import cupy

import ozaki_backend as ob
from kernel_timeline import _operands, _shape      # scripts/ is on sys.path

m, k, n = _shape(sys.argv[1] if len(sys.argv) > 1 else "8192")
A, B = _operands(m, k, n)
C = cupy.empty((m, n))
ob.matmul(A, B, out=C)                       # compiles the kernels, reads the count
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.start()                   # ncu --profile-from-start off sees only this
ob.matmul(A, B, out=C)
cupy.cuda.Device().synchronize()
cupy.cuda.profiler.stop()
print(f"profiled one product {m}x{k}x{n}")
