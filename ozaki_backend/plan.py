"""The plan: one printable object that fixes every choice deciding the output bits.

A plan is a pure function of the problem shape and the options (``docs/spec.md`` §1),
never of the data, so the CPU and CUDA engines given the same plan produce the same
bits. For ``precision="fp64"`` (no ``bits=``/``moduli=``) the plan holds a *rule*: each
product uses the fewest moduli whose error certificate meets the native-level target
(``docs/spec.md`` §10), a decision made from exact integers that both engines compute
identically (:meth:`Plan.resolve`, :meth:`Plan.moduli_for`). Build one with :func:`plan` (this module is callable:
``ozaki_backend.plan(m, n, k)``); reuse it for many products of the same shape
(``p.matmul(a, b)``).

The plan imports no engine: the two methods that need data or an engine
(:meth:`Plan.resolve` and :meth:`Plan.matmul`) call functions the API layer installs
with :func:`bind` when the package is imported.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _options
from .spec.moduli import KSPLIT, MAX_MODULI, MIN_MODULI, MODULI
from .spec.rules import (KAPPA, NATIVE_K, expected_moduli, guaranteed_bits,
                         moduli_for_bits)
from .spec.seed import K_CHUNK_MAX as PHASE22_KCHUNK
from .spec.seed import PRIMES as PHASE22_PRIMES

#: What the layer above provides (``ozaki_backend._api`` calls :func:`bind`).
_bound = {"execute": None, "moduli_for": None}


def bind(*, execute: Callable[..., Any], moduli_for: Callable[[Any, Any, Plan], int]) -> None:
    """Install the functions :meth:`Plan.matmul` and :meth:`Plan.resolve` call.

    Parameters
    ----------
    execute : callable
        ``execute(plan, a, b, engine=, out=, alpha=, beta=, c=)``: the product with a
        given plan (``ozaki_backend._api``).
    moduli_for : callable
        ``moduli_for(a, b, plan)``: the moduli count the certificate chooses for the
        operands, computed where they live (``ozaki_backend.registry``).
    """
    _bound["execute"] = execute
    _bound["moduli_for"] = moduli_for


def plan(m: int, n: int, k: int, *, precision: str = "fp64", bits: int | None = None,
         moduli: int | None = None, mode: str = "accurate", scheme: str = "ozaki2",
         engine: str = "auto", residual: bool = False,
         emulation: str | None = None) -> Plan:
    """The plan for an ``(m, k) @ (k, n)`` product.

    Parameters
    ----------
    m, n, k : int
        Problem shape.
    precision, bits, moduli, mode, scheme, engine, residual, emulation
        As for :func:`ozaki_backend.matmul`.

    Returns
    -------
    Plan
        Printable; ``plan.matmul(a, b)`` multiplies with it.
    """
    return Plan(m, n, k, precision=precision, bits=bits, moduli=moduli, mode=mode,
                scheme=scheme, engine=engine, residual=residual, emulation=emulation)


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
        True for ``precision="fp64"`` without ``bits=`` or ``moduli=`` (``ozaki2``): each
        product uses the fewest moduli whose certificate meets the native-level target
        (``docs/spec.md`` §10); the plan itself stays a function of the shape and
        options only.
    moduli_range : tuple of int
        ``(fewest, most)`` moduli a product with this plan may use (equal when fixed).
    expected_moduli : int
        The count ordinary data (no large exponent spread) certifies with; the cost
        model's estimate (equal to the count when fixed).
    bits : int
        Bits kept of each row's / column's largest element, guaranteed for any data
        (adaptive plans: with the expected count).
    n_gemms : int
        Integer GEMMs per product, the bound GEMM included (adaptive plans: with the
        most moduli of the range).
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
                 "adaptive", "moduli_range", "expected_moduli", "_resolved")

    def __init__(self, m: int, n: int, k: int, *, precision: str = "fp64",
                 bits: int | None = None, moduli: int | None = None, mode: str = "accurate",
                 scheme: str = "ozaki2", engine: str = "auto", residual: bool = False,
                 emulation: str | None = None) -> None:
        opts = _options.normalize(precision=precision, bits=bits, moduli=moduli, mode=mode,
                                  scheme=scheme, engine=engine, residual=residual,
                                  emulation=emulation)
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
            self.expected_moduli = len(PHASE22_PRIMES)
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
            if guaranteed_bits(N, kk) < opts["bits"]:
                raise ValueError(
                    f"bits={opts['bits']} cannot be guaranteed at k = {kk}: {MAX_MODULI} "
                    f"moduli, the most there are, guarantee {guaranteed_bits(N, kk)} bits "
                    f"of each row's and column's largest element")
            rule = (f"bits={opts['bits']}: fewest moduli with H >= k * 4**bits "
                    f"at k = {kk} -> {N}")
        else:
            N = MAX_MODULI
            self.adaptive = True
            rule = (f"precision='fp64': per call the fewest moduli ({MIN_MODULI}-{N}) at "
                    f"which every element's truncation error is at most native DGEMM's: "
                    f"size <= {KAPPA:g} u g(k_ij) ||t_ij||_2 (native's typical error, "
                    f"g = sqrt(min(k_ij, {NATIVE_K})/2)) and rigorous bound <= "
                    f"(k_ij-1) u (|A||B|)_ij, k_ij the element's terms; at most 1/16 of "
                    f"the elements may instead pass an a-posteriori test (at most half, "
                    f"one modulus fewer, for outputs of 2^16 elements or more), a few "
                    f"may be recomputed as compensated dot products; else more moduli, "
                    f"the residual pass or the native GEMM (docs/spec.md section 10)")
        self.moduli = MODULI[:N]
        self.moduli_range = (MIN_MODULI, N) if self.adaptive else (N, N)
        self.expected_moduli = expected_moduli(kk, m * n) if self.adaptive else N
        self.bits = guaranteed_bits(self.expected_moduli, kk)
        self.rule = rule
        self.k_chunk = min(KSPLIT, kk)
        self.k_split = max(1, -(-k // KSPLIT))
        self.n_gemms = N * self.k_split + 1
        # int8 residue planes of both operands, int32 products of one modulus at a
        # time for all moduli, the bound GEMM's operands and product, statistics.
        self.workspace_bytes = (N * k * (m + n) + 4 * N * m * n
                                + k * (m + n) + 4 * m * n + 32 * (m + n))

    @property
    def n_moduli(self) -> int:
        """Moduli count; for an adaptive plan the most it may use (see
        :meth:`moduli_for` for the count of a given product)."""
        return len(self.moduli)

    @property
    def log2_M(self) -> float:
        return math.log2(math.prod(self.moduli))

    def for_count(self, n_moduli: int) -> Plan:
        """The fixed-count plan an adaptive plan uses when its certificate chooses
        ``n_moduli``; a fixed-count plan returns itself."""
        if not self.adaptive:
            return self
        p = self._resolved.get(n_moduli)
        if p is None:
            opts = dict(self.options)
            opts["moduli"] = int(n_moduli)
            p = Plan(self.m, self.n, self.k, **opts)
            p.rule = (f"precision='fp64': {n_moduli} moduli, the fewest whose certificate "
                      "meets the native-level target for these operands")
            self._resolved[n_moduli] = p
        return p

    def moduli_for(self, a: Any, b: Any) -> int:
        """The number of moduli a product of finite ``a (m, k)``, ``b (k, n)`` uses with
        this plan: its own count when fixed; for ``precision="fp64"`` the fewest whose
        certificate meets the target a priori (computed where the operands live,
        exactly as the engines do), or 20 when some element passes at no count (the
        product is then computed with 20 moduli and tested a posteriori, and may take
        the residual pass or the native GEMM, ``docs/spec.md`` §10.3–10.4)."""
        if not self.adaptive and not (np.iscomplexobj(a) or np.iscomplexobj(b)):
            return self.n_moduli   # complex products count on their own table (§11)
        return _bound["moduli_for"](a, b, self)

    def resolve(self, a: Any, b: Any) -> Plan:
        """The fixed-count plan a product of ``a (m, k)`` and ``b (k, n)`` uses:
        ``resolve(a, b).matmul(a, b)`` gives the same bits as ``matmul(a, b)`` whenever
        the product is certified a priori or a posteriori (not when it takes the
        residual pass or the native GEMM). A fixed-count plan returns itself."""
        if not self.adaptive:
            return self
        return self.for_count(self.moduli_for(a, b))

    def matmul(self, a: Any, b: Any, *, engine: str | None = None, out: Any = None,
               alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> Any:
        """Multiply with this plan (shapes must match the plan's m, n, k); the result is
        an array of the operands' library, as :func:`ozaki_backend.matmul` returns."""
        return _bound["execute"](self, a, b, engine=engine or self.options["engine"],
                                 out=out, alpha=alpha, beta=beta, c=c)

    def key(self) -> tuple[object, ...]:
        """Hashable identity: equal keys give bitwise equal results."""
        return (self.scheme, self.mode, self.moduli, self.m, self.n, self.k, self.residual,
                self.adaptive, self.options["emulation"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.key() == other.key()

    def __hash__(self) -> int:
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
            ex = self.expected_moduli
            lines = head + [
                f"  moduli         : {lo}-{hi}, the fewest that certify, per call (ordinary "
                f"data: {ex}; the first N of {list(self.moduli)})",
                f"  log2(M)        : {math.log2(math.prod(MODULI[:ex])):.2f} ({ex}) - "
                f"{self.log2_M:.2f} ({hi})",
                f"  bits / operand : {self.bits} ({ex}) - {guaranteed_bits(hi, kk)} ({hi}) "
                f"(guaranteed, largest element of each row/column)",
                f"  integer GEMMs  : {ex * self.k_split + 1} ({ex}) - {self.n_gemms} ({hi}), "
                f"the bound GEMM included",
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
        return "\n".join(lines)


class _CallableModule(types.ModuleType):
    """``ozaki_backend.plan`` is this module *and* the :func:`plan` factory: calling the
    module calls :func:`plan`, so ``ozaki_backend.plan(m, n, k)`` and
    ``import ozaki_backend.plan`` both work.

    Type checkers see ``ozaki_backend.plan`` as the :func:`plan` function (the
    package's ``__init__`` imports it so under ``TYPE_CHECKING``): a module is not
    callable to them, and the factory is what the name is for.
    """

    def __call__(self, m: int, n: int, k: int, **options: Any) -> Plan:
        return plan(m, n, k, **options)


sys.modules[__name__].__class__ = _CallableModule
