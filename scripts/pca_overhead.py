"""A whole program whose products the cost model keeps native (issue 29): scikit-learn's
``PCA(n_components=64, svd_solver="randomized")`` on a 20000 x 8192 N(0, 1) matrix,
plain and inside ``ozaki_backend.enabled()``, alternating, three rounds after a warm-up
of each; prints the medians, their ratio and the last scoped run's routing counts.

    python scripts/pca_overhead.py [rows cols]
"""

import statistics
import sys
import time

import numpy as np
from sklearn.decomposition import PCA

import ozaki_backend as ob


def main(rows=20000, cols=8192):
    X = np.random.default_rng(0).standard_normal((rows, cols))

    def run():
        t0 = time.perf_counter()
        PCA(n_components=64, svd_solver="randomized", random_state=0).fit(X)
        return time.perf_counter() - t0

    run()
    with ob.enabled():
        run()
    plain, scoped = [], []
    for _ in range(3):
        plain.append(run())
        with ob.enabled():
            ob.reset_stats()
            scoped.append(run())
            s = ob.stats()
    p, q = statistics.median(plain), statistics.median(scoped)
    print(f"PCA randomized {rows}x{cols}: plain {p:.2f} s, enabled() {q:.2f} s, "
          f"ratio {q / p:.3f}; routed {s['routed']} native {s['native']} "
          f"fallback {s['fallback']}")
    print("plain", [round(t, 2) for t in plain], "scoped", [round(t, 2) for t in scoped])


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
