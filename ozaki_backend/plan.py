"""The plan: one printable object that fixes every choice deciding the output bits.

A plan is a pure function of the problem shape and the options (``docs/spec.md`` §1),
never of the data, so the CPU and CUDA engines given the same plan produce the same
bits. For ``precision="fp64"`` (no ``bits=``/``moduli=``) the plan holds a *rule*: the
moduli count of each product is read from a table by the operands' exponent spread, an
exact integer both engines compute identically (:meth:`Plan.resolve`,
:meth:`Plan.moduli_for`). Build one with :func:`ozaki_backend.plan`; reuse it for many
products of the same shape (``plan.matmul(a, b)``).
"""

from __future__ import annotations

import json
import math
import sys
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


def spread_bucket(spread: int, edges) -> int:
    """Index of the first spread bucket edge ``>= spread`` (``len(edges)``: beyond)."""
    for b, edge in enumerate(edges):
        if spread <= edge:
            return b
    return len(edges)


def _fp64_row(k: int, mode: str):
    """``(counts, note)``: the table's counts for this ``k``, one per spread bucket plus
    one for spreads beyond the last edge, and where they came from."""
    table = _fp64_table()
    beyond = int(table["beyond"])
    rows = table[mode]  # list of [k_max, [N per spread bucket]]
    for k_max, Ns in rows:
        if k <= k_max:
            return list(Ns) + [beyond], f"k <= {k_max}"
    # Beyond the largest calibrated k, each count grows like the bits the longer
    # reduction needs (log2 k / 2 bits more).
    k_max, Ns = rows[-1]
    extra_bits = math.ceil(max(0.0, math.log2(k / k_max)) / 2)
    out = []
    for N in Ns:
        need = guaranteed_bits(N, k_max) + extra_bits
        out.append(min(MAX_MODULI, max(N, moduli_for_bits(need, k))))
    for b in range(1, len(out)):
        out[b] = max(out[b], out[b - 1])
    return out + [max(beyond, out[-1])], f"extrapolated beyond k = {k_max} (+{extra_bits} bits)"


def moduli_for_fp64(k: int, mode: str, spread: int) -> tuple[int, str]:
    """Moduli count for ``precision="fp64"`` at reduction length ``k`` and exponent
    spread ``spread`` (:func:`ozaki_backend.reference.scaling.exponent_spread`), and the
    rule that chose it.

    The table ``_data/fp64_moduli.json`` was measured by
    ``python -m ozaki_backend calibrate``: for each k bucket and spread bucket, the
    fewest moduli whose max relative error on the calibration operands of that spread
    is no worse than native float64's; non-decreasing in k and in spread. Beyond the
    largest calibrated k, the count grows like the bits needed for the longer reduction
    (``log2 k / 2`` bits more); beyond the last spread edge it is the table's
    ``beyond`` (the most moduli).
    """
    edges = _fp64_table()["spread_edges"]
    counts, note = _fp64_row(max(int(k), 1), mode)
    b = spread_bucket(int(spread), edges)
    where = f"spread <= {edges[b]}" if b < len(edges) else f"spread > {edges[-1]}"
    return counts[b], f"fp64 table ({mode}, {note}, {where}): {counts[b]} moduli"


def fp64_rule(k: int, mode: str) -> tuple[int, int, str]:
    """``(fewest, most, text)``: the range of counts ``precision="fp64"`` may pick at
    this ``k`` and the rule, spread bucket by spread bucket."""
    edges = _fp64_table()["spread_edges"]
    counts, note = _fp64_row(max(int(k), 1), mode)
    parts, b = [], 0
    while b < len(edges):
        e = b
        while e + 1 < len(edges) and counts[e + 1] == counts[b]:
            e += 1
        parts.append(f"<= {edges[e]}: {counts[b]}")
        b = e + 1
    parts.append(f"> {edges[-1]}: {counts[-1]}")
    text = (f"fp64 table ({mode}, {note}), per call from the operands' exponent spread: "
            + ", ".join(parts))
    return min(counts), max(counts), text


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
        The moduli (``ozaki2``) or primes (``phase22``) used; for an adaptive plan the
        most it may use (a product uses the first :meth:`moduli_for` of them).
    adaptive : bool
        True for ``precision="fp64"`` without ``bits=`` or ``moduli=`` (``ozaki2``): the
        moduli count is chosen per product from the operands' exponent spread
        (``docs/spec.md`` §1) by the rule in ``rule``; the plan itself stays a function of
        the shape and options only.
    moduli_range : tuple of int
        ``(fewest, most)`` moduli a product with this plan may use (equal when fixed).
    bits : int
        Bits kept of each row's / column's largest element, guaranteed for any data
        (adaptive plans: with the fewest moduli of the range).
    n_gemms : int
        Integer GEMMs per product (for ``accurate``, one of them is the bound GEMM;
        adaptive plans: with the most moduli of the range).
    k_split : int
        Number of k chunks (reductions longer than the exact INT32 range are split).
    k_chunk : int
        Length of each chunk.
    workspace_bytes : int
        Device workspace the CUDA engine needs (int8 residues, int32 products, exponents;
        adaptive plans: with the most moduli of the range).
    rule : str
        Human-readable account of how the moduli count was chosen.
    """

    __slots__ = ("m", "n", "k", "scheme", "mode", "moduli", "bits", "n_gemms",
                 "k_split", "k_chunk", "workspace_bytes", "rule", "residual", "options",
                 "adaptive", "moduli_range", "_resolved")

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
        self.adaptive = False
        self._resolved = {}
        if self.scheme == "phase22":
            self.moduli = PHASE22_PRIMES
            self.bits = 34
            self.k_chunk = PHASE22_KCHUNK
            self.k_split = max(1, -(-k // PHASE22_KCHUNK))
            self.n_gemms = 4 * len(PHASE22_PRIMES)
            self.moduli_range = (len(PHASE22_PRIMES), len(PHASE22_PRIMES))
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
            lo, N, rule = fp64_rule(kk, self.mode)
            self.adaptive = True
        self.moduli = MODULI[:N]
        self.moduli_range = (lo, N) if self.adaptive else (N, N)
        self.bits = guaranteed_bits(self.moduli_range[0], kk)
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
        """Moduli count; for an adaptive plan the most it may use (see
        :meth:`moduli_for` for the count of a given product)."""
        return len(self.moduli)

    @property
    def log2_M(self) -> float:
        return math.log2(math.prod(self.moduli))

    def moduli_for_spread(self, spread: int) -> int:
        """The moduli count a product whose operands have exponent spread ``spread``
        (``docs/spec.md`` §1) uses with this plan."""
        return self.for_spread(spread).n_moduli

    def for_spread(self, spread: int) -> "Plan":
        """The fixed-count plan an adaptive plan uses for operands of exponent spread
        ``spread``; a fixed-count plan returns itself. Both engines call this with the
        same integer, so they use the same count."""
        if not self.adaptive:
            return self
        edges = _fp64_table()["spread_edges"]
        b = spread_bucket(int(spread), edges)
        p = self._resolved.get(b)
        if p is None:
            N, why = moduli_for_fp64(max(self.k, 1), self.mode, int(spread))
            opts = dict(self.options)
            opts["moduli"] = N
            p = Plan(self.m, self.n, self.k, **opts)
            p.rule = f"precision='fp64', chosen per call from the exponent spread: {why}"
            self._resolved[b] = p
        return p

    def resolve(self, a, b) -> "Plan":
        """The fixed-count plan a product of ``a (m, k)`` and ``b (k, n)`` uses.

        For an adaptive (``precision="fp64"``) plan, the moduli count is chosen from the
        operands' exponent spread (``docs/spec.md`` §1; computed on the GPU for CuPy
        operands, exactly as the CUDA engine does); ``resolve(a, b).matmul(a, b)`` gives
        the same bits as ``matmul(a, b)``. A fixed-count plan returns itself.
        """
        if not self.adaptive:
            return self
        return self.for_spread(exponent_spread(a, b, self))

    def moduli_for(self, a, b) -> int:
        """The number of moduli a product of finite ``a (m, k)``, ``b (k, n)`` uses with
        this plan (the plan's own count when it is fixed)."""
        return self.resolve(a, b).n_moduli

    def matmul(self, a, b, *, engine=None, out=None, alpha=1.0, beta=0.0, c=None):
        """Multiply with this plan (shapes must match the plan's m, n, k)."""
        from ._api import _matmul_with_plan

        return _matmul_with_plan(self, a, b, engine=engine or self.options["engine"],
                                 out=out, alpha=alpha, beta=beta, c=c)

    def key(self):
        """Hashable identity: equal keys give bitwise equal results."""
        return (self.scheme, self.mode, self.moduli, self.m, self.n, self.k, self.residual,
                self.adaptive)

    def __eq__(self, other):
        return isinstance(other, Plan) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self) -> str:
        head = [f"ozaki_backend.Plan  ({self.m} x {self.k}) @ ({self.k} x {self.n})",
                f"  scheme         : {self.scheme}"
                + (f"  (residual={self.residual})" if self.scheme == "phase22"
                   else f", mode={self.mode}")]
        tail = [f"  k split        : {self.k_split} chunk(s) of <= {self.k_chunk}"]
        if self.adaptive:
            lo, hi = self.moduli_range
            kk = max(self.k, 1)
            lines = head + [
                f"  moduli         : {lo}-{hi}, chosen per call from the operands' exponent "
                f"spread (the first N of {list(self.moduli)})",
                f"  log2(M)        : {math.log2(math.prod(MODULI[:lo])):.2f}-{self.log2_M:.2f}",
                f"  bits / operand : {self.bits}-{guaranteed_bits(hi, kk)} (guaranteed, "
                f"largest element of each row/column)",
                f"  integer GEMMs  : {self.n_gemms - (hi - lo) * self.k_split}-{self.n_gemms}",
            ] + tail + [
                f"  workspace      : up to {self.workspace_bytes / 2**20:.1f} MiB",
            ]
        else:
            lines = head + [
                f"  moduli         : {self.n_moduli}  {list(self.moduli)}",
                f"  log2(M)        : {self.log2_M:.2f}",
                f"  bits / operand : {self.bits} (guaranteed, largest element of each "
                f"row/column)",
                f"  integer GEMMs  : {self.n_gemms}",
            ] + tail + [
                f"  workspace      : {self.workspace_bytes / 2**20:.1f} MiB",
            ]
        lines.append(f"  rule           : {self.rule}")
        if "cupy" in sys.modules:  # never import CuPy just to print a plan
            lines.append(f"  GEMM path (GPU): {self.gemm_path()}")
        return "\n".join(lines)

    def gemm_path(self) -> str:
        """How the CUDA engine would compute this plan's modular products on the current
        GPU, and why: the cuBLAS path or the fused Hopper kernel, from the tuning table
        measured by ``python -m ozaki_backend tune`` (``docs/gpu-kernels.md``).

        Returns a sentence; imports CuPy. Without a usable GPU it says so.
        """
        from .cuda import availability

        ok, why = availability()
        if not ok:
            return f"none (no usable GPU: {why})"
        from .cuda.tuning import choice, modprod_choice

        if self.scheme == "phase22":
            # The seed scheme needs the residues themselves, which the fused kernel
            # writes directly; the cuBLAS backend adds a reduction pass per product.
            backend, width = modprod_choice(self.m, self.n, self.k_chunk, 28)
            return (f"fused (128 x {width} tiles)" if backend == "wgmma" else
                    "cuBLAS INT8 GEMMs, then a reduction pass per product")
        path, width, reason = choice(self.m, self.n, self.k, self.moduli_range[1]
                                     if self.adaptive else self.n_moduli)
        label = f"fused (128 x {width} tiles)" if path == "wgmma" else "cuBLAS INT8 GEMMs"
        return f"{label}; {reason}"


def exponent_spread(a, b, plan=None) -> int:
    """The exponent spread of the product ``a @ b`` (``docs/spec.md`` §1) that
    ``precision="fp64"`` chooses its moduli count from: the largest
    ``E_i - floor(mean exponent)`` over the rows of ``a`` and the columns of ``b``.

    NumPy operands: the CPU reference (:func:`ozaki_backend.reference.scaling.exponent_spread`);
    CuPy operands: the CUDA engine's kernels, bit for bit the same integer.
    ``plan``, when given, must match the operands' shape.
    """
    if type(a).__module__.split(".")[0] == "cupy" or type(b).__module__.split(".")[0] == "cupy":
        from .cuda.scaling import exponent_spread as spread
    else:
        from .reference.scaling import exponent_spread as spread
    sa, sb = tuple(np.shape(a)), tuple(np.shape(b))
    if len(sa) != 2 or len(sb) != 2 or sa[1] != sb[0]:
        raise ValueError(f"exponent_spread needs 2-D operands (m, k) @ (k, n); got {sa} "
                         f"and {sb}")
    if plan is not None and (sa[0], sb[1], sa[1]) != (plan.m, plan.n, plan.k):
        raise ValueError(f"plan is for ({plan.m} x {plan.k}) @ ({plan.k} x {plan.n}); "
                         f"operands are ({sa[0]} x {sa[1]}) @ ({sb[0]} x {sb[1]})")
    return int(spread(a, b))
