"""Routing of products whose operands already live on a GPU (CuPy arrays, torch CUDA
tensors): the device-side cost model, the decision, and the one helper that computes a
routed device product.

The GPU-array hooks (``cupy_hook``: CuPy's cuBLAS entry points; ``torch_hook``: the
PyTorch dispatcher) find a float64 or complex128 product inside a scope and hand it
here. Unlike a NumPy product, nothing moves between host and device: the question is
only whether the emulated product beats this GPU's own cuBLAS DGEMM (ZGEMM) for that
shape.

* :class:`DeviceCostModel` estimates both times from the GPU's rates: its FP64 rate
  (a measured figure where one is known, else its compute capability, SM count and
  clock), its INT8 tensor-core rate and memory bandwidth (the rate table of
  ``python -m ozaki_backend tune`` where it has this GPU, else the same kind of
  estimate) and a fixed cost per emulated product; where the GEMM tuning table
  (``ozaki_backend/_data/gemm_tuning.json``) has products measured on this GPU, the
  estimate of the nearest one is scaled to its measured time.
* :func:`decide` applies the scope's configuration as the NumPy path does
  (``min_size`` given: a size threshold; ``engine="cpu"``: every eligible product) and
  otherwise routes where the emulated estimate beats native by the cost model's margin
  (:data:`~ozaki_backend.dispatch.costmodel.MARGIN`).
* :func:`route_product` computes a routed product through ``ozaki_backend._api.product``
  (so the bits are those of ``ozaki_backend.matmul`` on the same operands), with
  interception suspended, counts it, and turns any failure into a counted fallback
  (the hook then calls the library's own function).

:func:`emulation_pays_off` is the one place that asks "is the emulation faster here": it
asks the CUDA engine's own device cost model (``ozaki_backend.cuda.costs``, which
``precision="fp64"`` uses to run cuBLAS where it is faster), so that the routing layer
and the engine cannot disagree; :class:`DeviceCostModel` supplies the FP64/INT8 rates of
GPUs that model has no record of, and the whole estimate where the engine has none.

Layer: above ``route`` (scope, counts, fallbacks) and ``routing`` (:class:`Decision`),
below the hooks that call it. It never imports CuPy or torch at module level: the GPU
is queried only for a product a scope hands it (its operands are already there).
"""

from __future__ import annotations

import json
import math
import sys
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import NamedTuple

from .. import _api, _native, _stats
from ..spec.rules import CERT_SMALL
from . import costmodel, routing
from .log import count_entry, decision, fallback
from .route import NON_FINITE

#: The margin the emulated estimate must beat native by (the host model's).
MARGIN = costmodel.MARGIN

#: Fixed cost of one emulated device product beyond its GEMMs and memory passes: on the
#: H200 the tuning table's 1024^3-4096^3 products take 0.74-0.77 ms more than their
#: INT8 GEMMs and memory traffic at the measured rates (planning, launches, the
#: certificate's read-back of its count).
FIXED_COST_S = 0.75e-3

#: Sustained cuBLAS DGEMM rates (TFLOP/s) measured on GPUs of this name (DESIGN.md's
#: anchors: 57.6 / 55.3 / 52.2 at n = 4096 / 8192 / 16384 on the H200). Others are
#: estimated from their compute capability (:data:`FP64_FLOPS_PER_CLOCK`).
MEASURED_DGEMM_TFLOPS = {"NVIDIA H200": 55.3}

#: FP64 flops per clock and SM (tensor-core DMMA where the GPU has it). The data-centre
#: parts (6.0, 7.0, 8.0, 9.0, 10.0) have full-rate FP64; every other architecture,
#: Blackwell Ultra (10.3) included, keeps 2 FP64 units per SM: 4 flops per clock.
FP64_FLOPS_PER_CLOCK = {(6, 0): 64, (7, 0): 64, (8, 0): 128, (9, 0): 256, (10, 0): 128}
FP64_OTHER = 4
#: Dense INT8 tensor-core operations per clock and SM (publicly specified peak rates
#: divided by SMs and boost clock); GPUs without INT8 tensor cores (before 7.2) use dp4a.
INT8_OPS_PER_CLOCK = {(7, 2): 2048, (7, 5): 2048, (8, 0): 4096, (8, 6): 2048,
                      (8, 7): 2048, (8, 9): 2048, (9, 0): 8192, (10, 0): 16384,
                      (10, 3): 16384, (12, 0): 2048, (12, 1): 2048}
INT8_OTHER = 512
#: Fractions of the peak rates sustained by large GEMMs (H200: DGEMM 55.3 of 66.9,
#: INT8 1513 of 2141 TOPS).
FP64_EFFICIENCY = 0.85
INT8_EFFICIENCY = 0.7
#: Device memory rate (GB/s) assumed when neither the rate table nor the device says.
DEFAULT_DEVICE_GBPS = 1000.0
#: Slow-down of an emulated product whose sizes are off the INT8 GEMMs' tiles. The
#: engine pads the INT8 GEMMs' m and n to multiples of 128 (``cuda.modgemm.GEMM_PAD``)
#: and k to whole 128-byte rows (``cuda._common.GEMM_KPAD``); measured on the H200
#: (kernel timelines, 15 moduli): 8191^3 17.8 ms against 17.9 at 8192^3, 10000^3
#: 30.7-31.8 ms against 32.0-32.2 at 10240^3 (1.04x per flop). Kept a little above 1
#: for the padding's extra work on sizes just above a multiple of 128.
OFF_TILE_FACTOR = 1.05


def alignment_factor(m, n, k) -> float:
    """The emulation's slow-down for sizes off the INT8 GEMMs' tiles (see
    :data:`OFF_TILE_FACTOR`)."""
    if m % 256 or n % 256 or k % 256:
        return OFF_TILE_FACTOR
    return 1.0


class DeviceRates(NamedTuple):
    """The rates the device cost model uses for one GPU.

    Attributes
    ----------
    name : str
        The GPU's name.
    compute_capability : tuple of int
    fp64_tflops, int8_tops, device_gbps : float
        Sustained native DGEMM, INT8 GEMM and memory rates.
    fixed_s : float
        Fixed cost of one emulated product (seconds).
    source : str
        Where the rates come from (measured table, estimate from the device).
    calibration : tuple
        ``(m, n, k, n_gemms, n_moduli, seconds)`` of the products measured on this GPU
        by ``tune`` (the GEMM tuning table), empty when it has none.
    """

    name: str
    compute_capability: tuple
    fp64_tflops: float
    int8_tops: float
    device_gbps: float
    fixed_s: float
    source: str
    calibration: tuple = ()


class Estimate(NamedTuple):
    """Estimated seconds of one device product, native and emulated.

    Attributes
    ----------
    native_s, emulated_s : float
    routes : bool
        Whether the emulation beats native by :data:`MARGIN`.
    """

    native_s: float
    emulated_s: float
    routes: bool


def _device_facts(device_id: int):
    """``(name, (major, minor), SMs, clock GHz)`` of CUDA device ``device_id`` (CuPy
    is loaded: a device product is being decided)."""
    import cupy

    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(device_id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    cc = (int(props["major"]), int(props["minor"]))
    sms = int(props["multiProcessorCount"])
    try:   # CUDA 13 dropped clockRate from the properties; the attribute remains
        khz = rt.deviceGetAttribute(rt.cudaDevAttrClockRate, device_id)
    except Exception:  # noqa: BLE001 - an older or newer runtime without it
        khz = props.get("clockRate", 1_500_000)
    return name, cc, sms, max(float(khz), 1.0) / 1e6


def _calibration(name: str) -> tuple:
    """The products ``tune`` measured on GPUs called ``name`` (``gemm_tuning.json``,
    read as text: this never imports the CUDA engine)."""
    from ..cuda.tuning_files import table_text

    text = table_text()
    rec = (json.loads(text) if text else {}).get("devices", {}).get(name) or {}
    out = []
    for e in rec.get("entries", ()):
        try:
            secs = float(e["seconds"][e["choice_key"]])
            n_mod = int(e["n_moduli"])
            # accurate mode adds the bound's INT8 GEMM to the moduli's
            gemms = n_mod + (1 if e.get("mode") == "accurate" else 0)
            out.append((int(e["m"]), int(e["n"]), int(e["k"]), gemms, n_mod, secs))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(out)


def rates_for(name, cc, sms, clock_ghz, measured=None) -> DeviceRates:
    """The :class:`DeviceRates` of a GPU from its facts (pure: the tests call it with
    made-up GPUs).

    Parameters
    ----------
    name : str
    cc : tuple of int
        Compute capability ``(major, minor)``.
    sms : int
    clock_ghz : float
        Boost clock.
    measured : dict, optional
        The GPU's record in the cost model's rate table (``int8_tops``,
        ``device_gbps``; a ``dgemm_tflops`` if ``tune`` wrote one).

    Returns
    -------
    DeviceRates
    """
    measured = measured or {}
    src = []
    fp64 = measured.get("dgemm_tflops") or MEASURED_DGEMM_TFLOPS.get(name)
    if fp64:
        src.append("DGEMM measured")
    else:
        per = FP64_FLOPS_PER_CLOCK.get(tuple(cc), FP64_OTHER)
        fp64 = sms * clock_ghz * per * FP64_EFFICIENCY / 1e3
        src.append(f"DGEMM estimated (cc {cc[0]}.{cc[1]}, {per} flops/clock/SM)")
    int8 = measured.get("int8_tops")
    if int8:
        src.append("INT8 measured")
    else:
        per = INT8_OPS_PER_CLOCK.get(tuple(cc), INT8_OTHER)
        int8 = sms * clock_ghz * per * INT8_EFFICIENCY / 1e3
        src.append("INT8 estimated")
    gbps = measured.get("device_gbps") or DEFAULT_DEVICE_GBPS
    return DeviceRates(name, tuple(cc), float(fp64), float(int8), float(gbps),
                       FIXED_COST_S, ", ".join(src), _calibration(name))


@lru_cache(maxsize=None)
def device_rates(device_id: int) -> DeviceRates:
    """The :class:`DeviceRates` of CUDA device ``device_id`` (cached per process)."""
    name, cc, sms, ghz = _device_facts(device_id)
    measured = costmodel.machine_rates(gpu=name)["device"]
    return rates_for(name, cc, sms, ghz, measured)


class DeviceCostModel:
    """Native cuBLAS DGEMM time against the emulated product's, both on the device.

    Parameters
    ----------
    rates : DeviceRates
        The GPU's rates (:func:`device_rates`).
    margin : float
        See :data:`MARGIN`.
    """

    def __init__(self, rates: DeviceRates, margin: float = MARGIN):
        self.rates = rates
        self.margin = float(margin)

    def native_seconds(self, m, n, k, batch=1, complex_=False) -> float:
        """cuBLAS DGEMM (ZGEMM: four real products' flops) time of ``batch`` products
        ``(m, k) @ (k, n)``."""
        flops = 2.0 * m * n * k * batch * (4 if complex_ else 1)
        return flops / (self.rates.fp64_tflops * 1e12)

    def _model(self, m, n, k, n_gemms, n_moduli) -> float:
        """The rates' estimate of one real emulated product: fixed cost, the INT8
        GEMMs, and the memory passes (scaling and residues over the operands, the CRT
        over the int32 products: the host model's traffic without the transfers)."""
        r = self.rates
        gemm = n_gemms * 2.0 * m * n * k / (r.int8_tops * 1e12)
        mem = (8.0 + n_moduli) * (m * k + k * n) + (4.0 * n_moduli + 8.0) * m * n
        return r.fixed_s + gemm + mem / (r.device_gbps * 1e9)

    def emulated_seconds(self, m, n, k, batch=1, n_gemms=16, n_moduli=15,
                         complex_=False) -> float:
        """Emulated time of ``batch`` products; scaled by the measured/estimated ratio
        of the nearest product the GEMM tuning table has for this GPU (in log m*n and
        log k), when it has one, and by :func:`alignment_factor`. A complex product is
        two real ones per modulus."""
        t = self._model(m, n, k, n_gemms, n_moduli) * alignment_factor(m, n, k)
        cal = self.rates.calibration
        if cal:
            def dist(e):
                return (abs(math.log2(max(e[0] * e[1], 1)) - math.log2(max(m * n, 1)))
                        + abs(math.log2(max(e[2], 1)) - math.log2(max(k, 1))))

            e = min(cal, key=dist)
            factor = e[5] / self._model(e[0], e[1], e[2], e[3], e[4])
            t *= min(max(factor, 0.5), 2.0)   # a stray measurement must not rule
        return batch * t * (2 if complex_ else 1)

    def estimate(self, m, n, k, batch=1, n_gemms=16, n_moduli=15,
                 complex_=False) -> Estimate:
        """Both estimates and whether the emulation wins by the margin."""
        t_nat = self.native_seconds(m, n, k, batch, complex_)
        t_emu = self.emulated_seconds(m, n, k, batch, n_gemms, n_moduli, complex_)
        return Estimate(t_nat, t_emu, t_emu * (1.0 + self.margin) < t_nat)

    def __repr__(self):
        r = self.rates
        return (f"DeviceCostModel({r.name}, cc {r.compute_capability[0]}."
                f"{r.compute_capability[1]}: DGEMM {r.fp64_tflops:.1f} TFLOP/s, INT8 "
                f"{r.int8_tops:.0f} TOPS, memory {r.device_gbps:.0f} GB/s, fixed "
                f"{r.fixed_s * 1e3:.2f} ms per product, {len(r.calibration)} measured "
                f"products; {r.source})")


_models: dict = {}
_models_lock = threading.Lock()


def device_cost_model(device_id: int | None = None) -> DeviceCostModel:
    """The process-wide :class:`DeviceCostModel` of a CUDA device (default: CuPy's
    current device). Its ``margin`` and ``rates`` may be replaced."""
    if device_id is None:
        import cupy

        device_id = cupy.cuda.runtime.getDevice()
    model = _models.get(device_id)
    if model is None:
        with _models_lock:
            model = _models.get(device_id)
            if model is None:
                model = _models[device_id] = DeviceCostModel(device_rates(device_id))
    return model


def _engine_costs():
    """The CUDA engine's own device cost model (``ozaki_backend.cuda.costs``: what
    ``precision="fp64"`` uses to run cuBLAS where it is faster), or None where this
    engine has none or CuPy cannot be imported."""
    try:
        import cupy  # noqa: F401  (costs.rates() reads the current GPU through it)

        from ..cuda import costs
    except ImportError:
        return None
    ok = all(hasattr(costs, f) for f in ("rates", "native_seconds", "emulation_seconds"))
    return costs if ok else None


def _engine_rates(costs, own: DeviceRates) -> dict:
    """The engine's rates for the current GPU; where it knows only the H200's (its
    default for any GPU) and this is not an H200-class part, the FP64 and INT8 rates
    of this GPU's architecture (:func:`rates_for`): a weak-FP64 GPU must not be
    modelled with an H200's DGEMM."""
    r = dict(costs.rates())
    if r == dict(getattr(costs, "H200", {})) and tuple(own.compute_capability) != (9, 0):
        r["fp64"], r["int8"] = own.fp64_tflops * 1e12, own.int8_tops * 1e12
    return r


def emulation_pays_off(m, n, k, batch, opts, *, complex_=False,
                       device_id=None) -> Estimate:
    """Whether the emulated product of ``batch`` products ``(m, k) @ (k, n)`` with
    numerical options ``opts`` is faster than this GPU's native GEMM.

    The engine's own device cost model decides (``ozaki_backend.cuda.costs``, with its
    margin: the routing layer and the engine cannot disagree), at the plan's expected
    moduli count; :class:`DeviceCostModel` (with its margin) where the engine has none.
    A complex product is modelled as two real ones per modulus against ZGEMM's four
    real products' flops.

    Returns
    -------
    Estimate
    """
    numeric = tuple(sorted((o, v) for o, v in opts.items() if o != "workspace"))
    # The plan's expected count (ordinary data), as the host model assumes.
    n_gemms, n_mod = routing._plan_counts(k, min(m * n, CERT_SMALL), numeric)
    model = device_cost_model(device_id)
    costs = _engine_costs()
    if costs is None:
        return model.estimate(m, n, k, batch, n_gemms, n_mod, complex_)
    r = _engine_rates(costs, model.rates)
    if _adaptive(numeric):
        # the engine's own first gate (pipeline._native_at_any_count): one modulus below
        # the expected count; the engine then reads the data and runs DGEMM itself
        # where their count is not faster (a toss-up at 8192^3 with 16 moduli)
        n_mod = max(2, n_mod - 1)
    nat = costs.native_seconds(m, n, k, r) * batch * (4 if complex_ else 1)
    emu = costs.emulation_seconds(m, n, k, n_mod, False, r) * batch * (2 if complex_ else 1)
    # the engine's rule: native where native is faster by its margin
    return Estimate(nat, emu, not nat * r.get("margin", 1.0) < emu)


@lru_cache(maxsize=64)
def _adaptive(numeric) -> bool:
    """Whether the numerical options ``numeric`` (sorted pairs) choose the count per
    product (``precision="fp64"``), not a fixed one (once per options: every routed
    device product asks)."""
    from ..plan import Plan

    return Plan(1, 1, 1, **dict(numeric)).adaptive


# --------------------------------------------------------------------------- decision
def decide(config, m, n, k, batch=1, entry="", *, complex_=False,
           device_id=None) -> routing.Decision:
    """The decision for ``batch`` device products ``(m, k) @ (k, n)`` under ``config``.

    The order of the NumPy path's :func:`ozaki_backend.dispatch.routing.decide`: shape,
    an explicit ``min_size``, ``engine="cpu"`` (everything eligible, through host
    copies: the user asked for the reference engine's results), then the device cost
    model (:func:`emulation_pays_off`). Its estimates are in the reason's parenthesis
    (``stats()`` counts the text before it).
    """
    where = (entry, m, n, k, batch)
    if m < 2 or n < 2:
        return routing._made(False, "matrix-vector shaped (m or n < 2): left to cuBLAS",
                             None, *where)
    if k < 1 or batch < 1:
        return routing._made(False, "empty product", None, *where)
    if config.min_size is not None:
        if m * n * k < config.min_size:
            return routing._made(False, f"below min_size (m*n*k < {config.min_size})",
                                 None, *where)
        eng = "cpu" if config.engine == "cpu" else "cuda"
        return routing._made(True, f"min_size={config.min_size}", eng, *where)
    if config.engine == "cpu":
        return routing._made(True, "engine='cpu', min_size='auto' routes all eligible",
                             "cpu", *where)
    est = emulation_pays_off(m, n, k, batch, config.opts, complex_=complex_,
                             device_id=device_id)
    times = (f"(est. cuBLAS {'ZGEMM' if complex_ else 'DGEMM'} "
             f"{est.native_s * 1e3:.3g} ms, emulated {est.emulated_s * 1e3:.3g} ms)")
    if est.routes:
        return routing._made(True, f"device cost model: emulated faster {times}", "cuda",
                             *where)
    return routing._made(False, f"device cost model: cuBLAS faster {times}", None, *where)


def native(d: routing.Decision, library: str) -> None:
    """Count and keep (for ``explain()``) a native decision about a ``library``
    product; its reason is counted under ``"<library>: <reason>"``."""
    d = d.replace(reason=f"{library}: {d.reason}")
    routing.recent.append(d)
    _stats.record("native", d.reason)
    decision(d)


def native_reason(reason: str, entry: str, library: str, **shape) -> None:
    """:func:`native` for a product declined before (or instead of) :func:`decide`."""
    native(routing.Decision(False, reason, entry=entry, **shape), library)


# --------------------------------------------------------------------------- routing
def route_product(cfg, d, x, y, out, *, alpha=1.0, beta=0.0, c=None) -> bool:
    """Compute ``out = alpha * (x @ y) + beta * c`` for a routed decision ``d``.

    Parameters
    ----------
    cfg : Config
        The scope's configuration (its numerical options).
    d : Decision
        A routed decision (its entry point labels the counts).
    x, y : cupy.ndarray
        ``(..., m, k)`` and ``(..., k, n)`` operands (views of the caller's buffers).
    out : cupy.ndarray
        ``(..., m, n)``, receives the result (written by the engine, or with one copy
        when it is not C-contiguous); it may be ``c`` itself (BLAS's ``C``): ``c`` is
        then read into a copy first.
    alpha, beta, c
        BLAS scaling (``c`` unread when ``beta == 0``).

    Returns
    -------
    bool
        True when ``out`` holds the routed result. False when the engine declined (an
        operand holds NaN or infinity: counted as native) or failed (counted as a
        fallback, warned): the caller then runs the library's own function, and
        ``out`` may have been written (BLAS's ``C`` is never the only copy of ``c``:
        a ``beta != 0`` product computes into a fresh array first).
    """
    entry = d.entry
    if beta != 0 and c is not None:
        c = c.copy()          # the engine must not read C while it writes it
    else:
        c, beta = None, 0.0
    # With beta != 0 a declined or failed product must leave C as it was: the library
    # then computes from it.
    target = out if beta == 0 else None
    try:
        with _native.suspended():
            res = _api.product(x, y, dict(cfg.opts, engine=d.engine), out=target,
                               alpha=alpha, beta=beta, c=c, fp_name=None,
                               declined=_api.DECLINED)
    except Warning:
        routing.recent.append(d)
        raise
    except Exception as exc:  # noqa: BLE001 - any failure: the library computes it
        routing.recent.append(d)
        fallback(entry, exc)
        return False
    if res is _api.DECLINED:
        routing.recent.append(d.replace(routed=False, reason=NON_FINITE, engine=None))
        return False
    if target is None:
        out[...] = res
    routing.recent.append(d)
    count_entry(entry)
    decision(d)
    rec = _recorder
    if rec is not None:
        rec.append(Recorded(entry, x.copy(), y.copy(), out.copy(), alpha, beta, c))
    return True


# --------------------------------------------------------------------------- checking
class Recorded(NamedTuple):
    """One routed device product as :func:`recording` keeps it (copies)."""

    entry: str
    x: object
    y: object
    result: object
    alpha: object
    beta: object
    c: object


#: The list :func:`recording` fills, or None.
_recorder = None


@contextmanager
def recording():
    """``with recording() as calls:`` keeps a copy of the operands and result of every
    device product routed while it is open (a list of :class:`Recorded`), so that a test
    of unmodified code can check each against ``ozaki_backend.matmul`` bit for bit.

    For tests and debugging: every routed product is copied (device memory and time).
    Process-wide, so that the products PyTorch's autograd engine computes in its own
    device threads are kept too.
    """
    global _recorder
    calls: list = []
    prev, _recorder = _recorder, calls
    try:
        yield calls
    finally:
        _recorder = prev


# --------------------------------------------------------------------------- explain
def explain_pair(a, b, entry, node):
    """The decision ``explain(a, b)`` reports for CuPy arrays or torch tensors (None for
    other operands: the NumPy path explains those).

    Parameters
    ----------
    a, b : array
    entry : str
    node
        The calling context's scope node (``enabled``, ``config``).
    """
    lib = _library(a, b)
    if lib is None:
        return None
    shape = {}
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sa) >= 2 and len(sb) >= 2 and sa[-1] == sb[-2]:
        batch = math.prod(sa[:-2]) if len(sa) >= len(sb) else math.prod(sb[:-2])
        shape = {"m": sa[-2], "n": sb[-1], "k": sa[-1], "batch": batch}

    def no(reason):
        return routing.Decision(False, f"{lib}: {reason}", entry=entry, **shape)

    if not node.enabled:
        return no("no enabled scope in this context and enable() not in force")
    if hook_state(lib.split()[0]) == "not installed":
        return no("the hook for this library is not installed (the first enabled() "
                  "installs it, or the library's import once enabled)")
    dt = str(a.dtype).removeprefix("torch.")
    if dt != str(b.dtype).removeprefix("torch.") or dt not in ("float64", "complex128"):
        return no(f"dtypes {a.dtype}, {b.dtype}: only float64 or complex128 products "
                  "of one dtype are routed")
    if not shape:
        return no("not a matrix product (a 1-d operand, or shapes that do not match)")
    if lib == "torch (CPU)":   # the NumPy host path's rules
        d = routing.decide(node.config, shape["m"], shape["n"], shape["k"],
                           shape["batch"], entry)
    else:
        d = decide(node.config, shape["m"], shape["n"], shape["k"], shape["batch"],
                   entry, complex_=dt == "complex128")
    return d.replace(reason=f"{lib}: {d.reason}")


def _library(a, b):
    """``"CuPy"``, ``"torch"`` (CUDA tensors) or ``"torch (CPU)"`` for two operands of
    that kind, else None (never imports either library)."""
    mods = {type(x).__module__.split(".")[0] for x in (a, b)}
    if mods == {"cupy"} and "cupy" in sys.modules:
        return "CuPy"
    if mods == {"torch"} and "torch" in sys.modules:
        cuda = {bool(getattr(x, "is_cuda", False)) for x in (a, b)}
        if cuda == {True}:
            return "torch"
        if cuda == {False} and all(x.device.type == "cpu" for x in (a, b)):
            return "torch (CPU)"
    return None


#: Filled by the hooks: library name -> function returning the hook's state.
_STATES: dict = {}


def register_hook(library: str, state) -> None:
    """Let :func:`explain_pair` and :func:`describe` ask for the state of ``library``'s
    hook (the hook modules sit above this one and register themselves).

    Parameters
    ----------
    library : str
    state : callable
        Returns ``"installed"``, ``"waiting for its import"`` (installed as soon as the
        library's module is imported) or ``"not installed"``.
    """
    _STATES[library] = state


def hook_state(library: str) -> str:
    """The state of the hook of ``library`` (``"CuPy"``, ``"torch"``), see
    :func:`register_hook`."""
    state = _STATES.get(library)
    return state() if state is not None else "not installed"


def describe() -> str:
    """One line for ``explain()``'s report: the GPU-array hooks and their state."""
    parts = [f"{lib} {hook_state(lib)}" for lib in sorted(_STATES)]
    return "GPU-array hooks: " + (", ".join(parts) or "none registered")


# --------------------------------------------------------------------------- installing
def fully_imported(name: str):
    """The module ``name`` if it is imported and done initialising, else None."""
    mod = sys.modules.get(name)
    if mod is None or getattr(getattr(mod, "__spec__", None), "_initializing", False):
        return None
    return mod
