"""CPU reference engine: the spec (``docs/spec.md``) stage by stage, exact, in NumPy.

Stages, one module each, mirrored by ``ozaki_backend/cuda/``:
``equilibrate`` -> ``scaling`` (statistics, bound GEMM, exponents) -> ``certificate``
(the moduli count) -> ``residues`` -> ``modgemm`` -> ``crt`` (reconstruction, the one
rounding, alpha/beta), assembled by ``pipeline`` (with the a-posteriori test, the
residual pass and the native fallback); ``phase22`` is the seed scheme.
"""
