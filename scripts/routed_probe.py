"""One routed product inside enabled() on the CUDA engine, with its stats and log
(a diagnostic for the device check: why a product was not routed)."""
import logging
import sys

import numpy as np

import ozaki_backend as ob

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)
rng = np.random.default_rng(1)
a, b = rng.standard_normal((37, 53)), rng.standard_normal((53, 29))
with ob.enabled(engine="cuda", min_size=0):
    c = a @ b
s = ob.stats()
print(s)
print({k: s[k] for k in ("reasons", "certificate", "c_fast_path")})
print(getattr(s, "details", None))
