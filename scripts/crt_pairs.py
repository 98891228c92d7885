"""The CRT pass with one column per thread (``oz_crt``) against two (``oz_crt2``).

    python scripts/crt_pairs.py [n ...]        (default: 4096 8192)

For N = 15 int32 product planes of n x n (random values in the cuBLAS path's range) the
two kernels' outputs are compared bit for bit, then each is timed (CUDA events, median
of 7 after a warm-up) with the bytes it reads per second.
"""

import sys

import cupy
import numpy as np

from ozaki_backend.cuda import crt
from ozaki_backend.provenance import median_device_time


def main(argv):
    N = 15
    rng = cupy.random.default_rng(1)
    for n in [int(x) for x in argv] or [4096, 8192]:
        ldc = -(-n // 16) * 16
        C = rng.integers(-(1 << 30), 1 << 30, size=(N, n, ldc), dtype=np.int32)
        s = rng.integers(-40, 40, size=n, dtype=np.int32)
        t = rng.integers(-40, 40, size=n, dtype=np.int32)
        outs = {}
        for pairs in (False, True):
            crt.PAIRS = pairs
            out = cupy.empty((n, n))
            crt.crt_into(C, N, n, n, s, t, out)
            outs[pairs] = out
            sec = median_device_time(lambda: crt.crt_into(C, N, n, n, s, t, out), 7)
            print(f"n={n} {'oz_crt2' if pairs else 'oz_crt '}: {sec * 1e3:.3f} ms, "
                  f"{(N * 4 + 8) * n * n / sec / 1e12:.2f} TB/s")
        crt.PAIRS = True
        same = bool((outs[False].view(np.int64) == outs[True].view(np.int64)).all())
        print(f"n={n}: same bits: {same}")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
