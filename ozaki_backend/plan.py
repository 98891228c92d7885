"""The plan: one printable object that fixes every choice deciding the output bits.

A plan is a pure function of the problem shape and the options (``docs/spec.md`` §1),
never of the data, so the CPU and CUDA engines given the same plan produce the same
bits. Build one with :func:`ozaki_backend.plan`; reuse it for many products of the
same shape (``plan.matmul(a, b)``).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

import numpy as np

from . import _options
from .moduli import KSPLIT, MAX_MODULI, MIN_MODULI, MODULI, crt_constants

PHASE22_PRIMES = (127, 113, 109, 107, 103, 101, 97)
PHASE22_KCHUNK = 4096


def guaranteed_bits(n_moduli: int, k: int) -> int:
    """Bits kept of each row's (column's) largest element, guaranteed for any data.

    Both scaling modes give ``s_i + E_i >= floor((log2 H - log2 k) / 2)``
    (``docs/spec.md`` §2), i.e. the largest integer ``b`` with ``H >= k * 4**b``.
    """
    H = crt_constants(n_moduli).H
    k = max(int(k), 1)
    b = (H // k).bit_length() - 1  # floor(log2(H // k)) == floor(log2(H / k))
    return b // 2


def moduli_for_bits(bits: int, k: int) -> int:
    """Fewest moduli whose :func:`guaranteed_bits` reach ``bits`` at this ``k``."""
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        if guaranteed_bits(n, k) >= bits:
            return n
    return MAX_MODULI


@lru_cache(maxsize=None)
def _fp64_table():
    text = resources.files("ozaki_backend").joinpath("_data/fp64_moduli.json").read_text()
    return json.loads(text)


def moduli_for_fp64(k: int, mode: str) -> tuple[int, str]:
    """Moduli count for ``precision="fp64"`` and the rule that chose it.

    The table ``_data/fp64_moduli.json`` was measured by
    ``python -m ozaki_backend calibrate``: for each k bucket, the fewest moduli whose
    max relative error on the phi test matrices is no worse than native float64's.
    Beyond the largest calibrated k, the count grows like the bits needed for the
    longer reduction (``log2 k / 2`` bits more).
    """
    table = _fp64_table()
    rows = table[mode]  # list of [k_max, n]
    for k_max, n in rows:
        if k <= k_max:
            return n, f"fp64 table ({mode}, k <= {k_max}: {n} moduli; {table['source']})"
    k_max, n = rows[-1]
    extra_bits = math.ceil(max(0.0, math.log2(k / k_max)) / 2)
    need = guaranteed_bits(n, k_max) + extra_bits
    n2 = max(n, moduli_for_bits(need, k))
    return n2, (f"fp64 table ({mode}) extrapolated beyond k = {k_max}: "
                f"{need} guaranteed bits -> {n2} moduli")


class Plan:
    """Everything that decides the output bits of one product shape.

    Attributes
    ----------
    m, n, k : int
        Shape of the product ``(m, k) @ (k, n)``.
    scheme : {"ozaki2", "phase22"}
    mode : {"fast", "accurate"}
        Scaling rule (``ozaki2`` only).
    moduli : tuple of int
        The moduli (``ozaki2``) or primes (``phase22``) used.
    bits : int
        Bits kept of each row's / column's largest element, guaranteed for any data.
    n_gemms : int
        Integer GEMMs per product (for ``accurate``, one of them is the bound GEMM).
    k_split : int
        Number of k chunks (reductions longer than the exact INT32 range are split).
    k_chunk : int
        Length of each chunk.
    workspace_bytes : int
        Device workspace the CUDA engine needs (int8 residues, int32 products, exponents).
    rule : str
        Human-readable account of how the moduli count was chosen.
    """

    __slots__ = ("m", "n", "k", "scheme", "mode", "moduli", "bits", "n_gemms",
                 "k_split", "k_chunk", "workspace_bytes", "rule", "residual", "options")

    def __init__(self, m, n, k, *, precision="fp64", bits=None, moduli=None,
                 mode="accurate", scheme="ozaki2", engine="auto", residual=False):
        opts = _options.normalize(precision=precision, bits=bits, moduli=moduli, mode=mode,
                                  scheme=scheme, engine=engine, residual=residual)
        dims = []
        for name, v in (("m", m), ("n", n), ("k", k)):
            if isinstance(v, np.integer) and not isinstance(v, np.bool_):
                v = int(v)  # e.g. taken from a NumPy shape computation
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative int; got {v!r}")
            dims.append(v)
        m, n, k = dims
        self.m, self.n, self.k = m, n, k
        self.scheme = opts["scheme"]
        self.mode = opts["mode"]
        self.residual = opts["residual"]
        self.options = opts
        if self.scheme == "phase22":
            self.moduli = PHASE22_PRIMES
            self.bits = 34
            self.k_chunk = PHASE22_KCHUNK
            self.k_split = max(1, -(-k // PHASE22_KCHUNK))
            self.n_gemms = 4 * len(PHASE22_PRIMES)
            self.rule = ("phase22: the seed's 7 primes < 128, hi/lo 17-bit split "
                         "(4 passes x 7 INT8 GEMMs), k chunks of 4096, adaptive nl per "
                         "128x64 tile")
            nres = 2 * len(PHASE22_PRIMES)
            self.workspace_bytes = nres * k * (m + n) + 4 * len(PHASE22_PRIMES) * m * n \
                + 8 * m * n + 8 * (m + n)
            return
        kk = max(k, 1)
        if opts["moduli"] is not None:
            N = opts["moduli"]
            rule = f"moduli={N} given"
        elif opts["bits"] is not None:
            N = moduli_for_bits(opts["bits"], kk)
            rule = (f"bits={opts['bits']}: fewest moduli with H >= k * 4**bits "
                    f"at k = {kk} -> {N}")
        else:
            N, rule = moduli_for_fp64(kk, self.mode)
        self.moduli = MODULI[:N]
        self.bits = guaranteed_bits(N, kk)
        self.rule = rule
        self.k_chunk = min(KSPLIT, kk)
        self.k_split = max(1, -(-k // KSPLIT))
        self.n_gemms = N * self.k_split + (1 if self.mode == "accurate" else 0)
        # int8 residue planes of both operands, int32 products of one modulus at a
        # time for all moduli, the bound matrix in accurate mode, exponents.
        self.workspace_bytes = (N * k * (m + n) + 4 * N * m * n
                                + (k * (m + n) + 4 * m * n if self.mode == "accurate" else 0)
                                + 8 * (m + n))

    @property
    def n_moduli(self) -> int:
        return len(self.moduli)

    @property
    def log2_M(self) -> float:
        return math.log2(math.prod(self.moduli))

    def matmul(self, a, b, *, engine=None, out=None, alpha=1.0, beta=0.0, c=None):
        """Multiply with this plan (shapes must match the plan's m, n, k)."""
        from ._api import _matmul_with_plan

        return _matmul_with_plan(self, a, b, engine=engine or self.options["engine"],
                                 out=out, alpha=alpha, beta=beta, c=c)

    def key(self):
        """Hashable identity: equal keys give bitwise equal results."""
        return (self.scheme, self.mode, self.moduli, self.m, self.n, self.k, self.residual)

    def __eq__(self, other):
        return isinstance(other, Plan) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self) -> str:
        lines = [
            f"ozaki_backend.Plan  ({self.m} x {self.k}) @ ({self.k} x {self.n})",
            f"  scheme         : {self.scheme}"
            + (f"  (residual={self.residual})" if self.scheme == "phase22" else f", mode={self.mode}"),
            f"  moduli         : {self.n_moduli}  {list(self.moduli)}",
            f"  log2(M)        : {self.log2_M:.2f}",
            f"  bits / operand : {self.bits} (guaranteed, largest element of each row/column)",
            f"  integer GEMMs  : {self.n_gemms}",
            f"  k split        : {self.k_split} chunk(s) of <= {self.k_chunk}",
            f"  workspace      : {self.workspace_bytes / 2**20:.1f} MiB",
            f"  rule           : {self.rule}",
        ]
        return "\n".join(lines)
