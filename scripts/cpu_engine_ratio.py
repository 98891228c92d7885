"""CPU engine vs NumPy at n = 1024 (issue 2 benchmark figure): median of paired runs."""
import time, numpy as np, ozaki_backend as ob
rng = np.random.default_rng(0)
A = rng.standard_normal((1024, 1024)); B = rng.standard_normal((1024, 1024))
ob.matmul(A, B, engine="cpu")  # warm-up
ratios = []
for mode in ("accurate", "fast"):
    for _ in range(5):
        t = time.perf_counter(); A @ B; A @ B; A @ B; tn = (time.perf_counter() - t) / 3
        t = time.perf_counter(); ob.matmul(A, B, engine="cpu", mode=mode); te = time.perf_counter() - t
        ratios.append((mode, te, tn, te / tn))
for mode in ("accurate", "fast"):
    r = sorted(x for x in ratios if x[0] == mode)
    rs = sorted(x[3] for x in r)
    print(mode, "median ratio %.1f" % rs[len(rs)//2], "emu %.3f s" % sorted(x[1] for x in r)[2], "numpy %.4f s" % sorted(x[2] for x in r)[2])
print(ob.plan(1024, 1024, 1024).moduli_for(A, B), "moduli")
