"""An ordinary NumPy/SciPy script that knows nothing about ozaki_backend.

Run it as is, or with the backend switched on from the environment:

    OZAKI_BACKEND=1 OZAKI_BACKEND_STATS=1 python examples/unmodified_script.py
    OZAKI_BACKEND=1 OZAKI_BACKEND_ENGINE=cpu OZAKI_BACKEND_MIN_SIZE=0 \
        OZAKI_BACKEND_STATS=1 python examples/unmodified_script.py   # no GPU needed

``OZAKI_BACKEND_STATS=1`` prints ``ozaki_backend.stats()`` at exit.
"""

import numpy as np
import scipy.linalg
from scipy.linalg import blas

rng = np.random.default_rng(0)
A = rng.standard_normal((96, 64))
B = rng.standard_normal((64, 80))
C = rng.standard_normal((80, 48))

P = A @ B                                   # the matmul loop hook
Q = np.matmul(P, C)
G = np.dot(A.T, A)                          # module-level wrapper
E = np.einsum("ij,jk->ik", A, B)
M = np.linalg.multi_dot([A, B, C])
D = blas.dgemm(2.0, A, B)                   # SciPy BLAS wrapper
gemm = scipy.linalg.get_blas_funcs("gemm", (A, B))
F = gemm(1.0, A, B, beta=0.0)
T = np.tensordot(A, B, axes=1)
x = scipy.linalg.solve(G + 64 * np.eye(64), A.T @ np.ones(96))   # LAPACK: never routed

print("checksum", float(P.sum() + Q.sum() + G.sum() + E.sum() + M.sum() + D.sum()
                        + F.sum() + T.sum() + x.sum()))
