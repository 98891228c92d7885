"""CPU reference engine: the spec (``docs/spec.md``) stage by stage, exact, in NumPy.

Stages, one module each, mirrored by ``ozaki_backend/cuda/``:
``scaling`` -> ``residues`` -> ``modgemm`` -> ``crt`` (reconstruction, the one
rounding, alpha/beta), assembled by ``pipeline``; ``phase22`` is the seed scheme.
"""
