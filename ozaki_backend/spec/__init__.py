"""The spec floor: every constant and rule of ``docs/spec.md`` that decides an output bit.

Both engines (``reference/`` and ``cuda/``, and the CUDA sources generated from Python)
read them from here and nowhere else, so that the two cannot drift apart. Nothing in
this package imports anything of the project above it, NumPy is imported only where a
rule works on arrays, and CuPy only when :mod:`certificate` is handed CuPy arrays (its
formulas are array-library generic).

Modules
-------
moduli
    The Ozaki-II moduli table, exact CRT constants, ``lambda``, ``KSPLIT``.
rules
    Quantisation widths of the scaling modes, guaranteed bits, the ``bits=`` and
    ``precision="fp64"`` rules.
remainders
    The fused kernel's exact remainder constants (multiply-high ``mod p``), with proofs.
seed
    The seed scheme ``scheme="phase22"``: primes, CRT tables, hi/lo split, tiles, limits.
certificate
    The error certificate's formulas (``docs/spec.md`` §10), element-wise, for NumPy or
    CuPy arrays: truncation bound, target test, result bound, a-posteriori test.
"""
