"""Cost model layer: host BLAS time against transfer + GPU time, and routing floors.

Sits above ``log`` and below ``config``: it knows configurations only by their
``engine`` and ``min_size`` attributes and imports nothing of the dispatch layer. The
engine that ``engine="auto"`` means comes from ``ozaki_backend.registry``; the moduli
counts of a product from ``ozaki_backend.plan`` (in ``routing``).

The floor of a configuration (:func:`floor`) is the smallest ``m*n*k`` it may route;
the C loop hook skips every smaller product without calling Python. The floor of a
config with ``min_size="auto"`` and the CUDA engine depends on the model's parameters,
so a change of them is pushed to the listeners registered with
:meth:`CostModel.subscribe` (``config`` registers one that refreshes the floor of
``enable()``'s default) instead of this module calling upwards.
"""

from __future__ import annotations

import math
import os
import threading
import time

from .. import registry

#: A floor no product reaches (also the C hook's "never route").
NEVER = 2**63 - 1


def _positive(text):
    """``float(text)`` when it is a finite number > 0, else None."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


#: The rate table's format (``ozaki_backend/_data/host_rates.json``).
RATES_SCHEMA = "ozaki_backend-rates/1"
#: The rate table shipped with the package: the machines measured by the maintainers,
#: keyed by CPU model (and CPU count) and GPU name.
RATES_FILE = "_data/host_rates.json"
#: The user's rate table (in the user cache, :func:`user_rates_path`), which ``tune``
#: writes by default: its machines take precedence over the package's.
USER_RATES_FILE = "host_rates.json"
#: Environment variable naming another rate table to read instead of both (and
#: ``tune`` to write).
RATES_ENV = "OZAKI_BACKEND_RATES"

#: GFLOP/s per CPU of the host estimate used where no table knows the host
#: (:func:`estimate_host_gflops`): about an AVX-512 core's DGEMM rate, above what most
#: hosts reach per core (the H200 machine's 16 CPUs: 34-39), so that an unmeasured
#: host is overrated rather than underrated and borderline products stay native.
ESTIMATE_GFLOPS_PER_CPU = 64.0

#: The GPU-side parameters used before ``python -m ozaki_backend tune`` has measured this
#: machine: deliberately on the slow side (the H200 host moves 55 GB/s pinned; the
#: staged NumPy path reaches less), so that an unmeasured machine keeps borderline
#: products native rather than routing them at a loss. The fixed cost is the one ``tune``
#: calibrated on the H200 (12.8 ms: staging, certificate, launches and synchronisation
#: of a whole NumPy-operand product beyond its transfers and GEMMs), rounded up.
DEFAULTS = {"h2d_gbps": 10.0, "d2h_gbps": 10.0, "int8_tops": 800.0,
            "device_gbps": 3000.0, "overhead_s": 15e-3, "device_mem_gb": 80.0,
            "pageable_gbps": 2.4}

#: A product whose operands and result (float64) plus the workspace (at most this
#: much, the engine's default cap) exceed this fraction of the device memory runs out of
#: core (the CUDA engine's rule): operands re-read per tile, result tiles copied out
#: through pageable memory.
OUT_OF_CORE_FRACTION = 0.85
WORKSPACE_CAP_BYTES = 16 << 30

#: Routing needs the emulated estimate to beat the host estimate by this fraction
#: (the estimates' error: a product routed at the margin is at worst about this much
#: slower than native).
MARGIN = 0.1


class CostModel:
    """Host BLAS time against transfer + GPU time for one float64 product.

    The rates come from the rate tables (:func:`read_table`: the user's cache, which
    ``python -m ozaki_backend tune`` writes, over the table shipped with the package;
    :func:`ozaki_backend.tune.measure_rates` measures them): the host's DGEMM GFLOP/s
    per shape class and, per GPU, the staged host<->device rates, the INT8 GEMM rate,
    the device memory rate and the fixed cost of a call. A machine the tables do not
    know uses :data:`DEFAULTS` for the GPU side and, for the host, a fixed estimate
    from its CPU count (:func:`estimate_host_gflops`; ``OZAKI_BACKEND_HOST_GFLOPS``
    gives a rate instead). Nothing is measured in the process itself: a timing taken
    there varies with the machine's load (1.4 to 87 GFLOP/s in five runs on a loaded
    host), and with it every routing decision; the same rates give the same decisions
    in every run.

    Parameters
    ----------
    host_gflops : float, optional
        One host rate for every shape (overrides the table's per-shape rates).
    h2d_gbps, d2h_gbps, int8_tops, device_gbps, overhead_s, device_mem_gb, pageable_gbps
        Override the table / :data:`DEFAULTS` (floats, optional).
    rates : dict or None or "auto"
        A rate record ``{"host": {...}, "device": {...}}`` as :func:`machine_rates`
        returns it; ``"auto"`` (the process-wide model) reads this machine's from the
        table on first use; None uses nothing but the arguments and defaults.
    margin : float
        See :data:`MARGIN`.

    Attributes
    ----------
    h2d_gbps, d2h_gbps : float
        Host->device / device->host rate (GB/s) of the staged path (pinned buffers
        filled by several threads), as a routed call sees it.
    int8_tops : float
        Sustained INT8 GEMM rate (TOPS) of one modular product.
    device_gbps : float
        Device memory bandwidth (GB/s) for scaling, residues and CRT.
    overhead_s : float
        Fixed cost per routed call: planning, workspace, launches, synchronisation.
    device_mem_gb : float
        Device memory (GB): products that do not fit run out of core.
    pageable_gbps : float
        Device->host rate of a plain (pageable) copy: out-of-core result tiles.
    host_table : tuple of (m, n, k, gflops)
        The host DGEMM rates measured per shape (empty: one rate, :attr:`host_gflops`).
    """

    #: The adjustable parameters besides ``host_gflops``.
    PARAMS = ("h2d_gbps", "d2h_gbps", "int8_tops", "device_gbps", "overhead_s",
              "device_mem_gb", "pageable_gbps")

    def __init__(self, host_gflops=None, h2d_gbps=None, d2h_gbps=None, int8_tops=None,
                 device_gbps=None, overhead_s=None, *, device_mem_gb=None,
                 pageable_gbps=None, rates=None, margin=MARGIN):
        set_ = object.__setattr__
        # Bumped by every change of a parameter (and every rate record applied), so
        # that a memo of decisions made with this model (routing.decide) knows when
        # they are stale.
        set_(self, "version", 0)
        set_(self, "_host_gflops", None if host_gflops is None else float(host_gflops))
        set_(self, "host_source", "given" if host_gflops is not None else None)
        set_(self, "_lock", threading.RLock())
        set_(self, "_listeners", [])
        set_(self, "margin", float(margin))
        set_(self, "_given", {k: float(v) for k, v in zip(
            self.PARAMS, (h2d_gbps, d2h_gbps, int8_tops, device_gbps, overhead_s,
                          device_mem_gb, pageable_gbps))
            if v is not None})
        set_(self, "_rates", rates)
        set_(self, "_loaded", rates != "auto")
        set_(self, "rates_source", None)
        self._apply(rates if isinstance(rates, dict) else None)

    # ---------------------------------------------------------------- rates
    def _apply(self, rates):
        """Take the parameters from a rate record (given values win, then the record,
        then :data:`DEFAULTS`)."""
        dev = (rates or {}).get("device") or {}
        host = (rates or {}).get("host") or {}
        for name in self.PARAMS:
            v = self._given.get(name, dev.get(name, DEFAULTS[name]))
            object.__setattr__(self, "_p_" + name, float(v))
        table = tuple((int(e["m"]), int(e["n"]), int(e["k"]), float(e["gflops"]))
                      for e in host.get("dgemm", ()) if float(e["gflops"]) > 0)
        object.__setattr__(self, "host_table", table)
        if rates:
            object.__setattr__(self, "rates_source", rates.get("source", "given"))
        object.__setattr__(self, "version", self.version + 1)

    def _ensure(self):
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    rates = machine_rates()
                    self._apply(rates)
                    object.__setattr__(self, "_loaded", True)

    def reload(self) -> None:
        """Read this machine's rates from the table again (after ``tune``)."""
        if self._rates == "auto":
            object.__setattr__(self, "_loaded", False)
            if self.host_source not in ("given", "set"):
                # derived from the old table (or the estimate): derive it again
                object.__setattr__(self, "_host_gflops", None)
                object.__setattr__(self, "host_source", None)
            self._ensure()
            self._changed()

    def __getattr__(self, name):
        if name in CostModel.PARAMS:
            self._ensure()
            return object.__getattribute__(self, "_p_" + name)
        raise AttributeError(f"CostModel has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in ("host_gflops", "h2d_gbps", "d2h_gbps", "int8_tops", "device_gbps") \
                and _positive(value) is None:
            raise ValueError(f"CostModel.{name} must be a finite number > 0; got {value!r}")
        if name == "host_gflops":
            object.__setattr__(self, "_host_gflops", float(value))
            object.__setattr__(self, "host_source", "set")
        elif name in self.PARAMS:
            self._ensure()
            self._given[name] = float(value)
            object.__setattr__(self, "_p_" + name, float(value))
        else:
            raise AttributeError(f"CostModel has no parameter {name!r}")
        self._changed()

    def _changed(self):
        object.__setattr__(self, "version", self.version + 1)
        # The C hook's floor of enable()'s default depends on these parameters; the
        # layer that holds that floor listens (this module must not import it).
        for listener in list(self._listeners):
            listener()

    def subscribe(self, listener) -> None:
        """Call ``listener()`` after every change of a parameter (in the changing thread).

        Parameters
        ----------
        listener : callable
            Takes no arguments. ``config`` registers one that recomputes the floor of
            ``enable()``'s default.
        """
        self._listeners.append(listener)

    # ---------------------------------------------------------------- host side
    @property
    def host_gflops(self) -> float:
        """The host's best native float64 GEMM rate (GFLOP/s): the given one, else
        ``OZAKI_BACKEND_HOST_GFLOPS``, else the table's best, else the estimate from the
        CPU count (:func:`estimate_host_gflops`); never measured here (the floor uses
        it)."""
        if self._host_gflops is None:
            self._ensure()
            with self._lock:
                if self._host_gflops is None:
                    env = os.environ.get("OZAKI_BACKEND_HOST_GFLOPS", "").strip()
                    rate = _positive(env)
                    if rate is not None:
                        src = "OZAKI_BACKEND_HOST_GFLOPS"
                    elif self.host_table and not env:
                        rate = max(e[3] for e in self.host_table)
                        src = f"rate table ({self.rates_source})"
                    else:
                        if env:  # a typo must not stop the program: warn, estimate
                            from .._warnings import warn_config

                            warn_config(f"OZAKI_BACKEND_HOST_GFLOPS={env!r} must be a "
                                        "positive number of GFLOP/s; the host rate is "
                                        "estimated from the CPU count instead")
                        rate = estimate_host_gflops()
                        src = (f"estimated: {usable_cpus()} CPUs x "
                               f"{ESTIMATE_GFLOPS_PER_CPU:g} GFLOP/s, not measured (`python "
                               "-m ozaki_backend tune --rates-only` measures this host "
                               "once and caches it)")
                    object.__setattr__(self, "host_source", src)
                    object.__setattr__(self, "_host_gflops", rate)
        return self._host_gflops

    def host_rate(self, m, n, k) -> float:
        """The host DGEMM rate (GFLOP/s) expected for ``(m, k) @ (k, n)``: the table's
        nearest measured shape (log distance per dimension) unless one rate was given."""
        self._ensure()
        if self.host_source in ("given", "set", "OZAKI_BACKEND_HOST_GFLOPS") \
                or not self.host_table:
            return self.host_gflops
        return nearest_rate(self.host_table, m, n, k)

    def slowest_host_rate(self) -> float:
        """The smallest rate :meth:`host_rate` can return (GFLOP/s)."""
        self._ensure()
        if self.host_source in ("given", "set", "OZAKI_BACKEND_HOST_GFLOPS") \
                or not self.host_table:
            return self.host_gflops
        return min(e[3] for e in self.host_table)

    def host_seconds(self, m, n, k, batch=1) -> float:
        """Estimated native BLAS time of ``batch`` products ``(m, k) @ (k, n)``."""
        return 2.0 * m * n * k * batch / (self.host_rate(m, n, k) * 1e9)

    # ---------------------------------------------------------------- GPU side
    def out_of_core(self, m, n, k) -> bool:
        """Whether the engine would run ``(m, k) @ (k, n)`` out of core (see
        :data:`OUT_OF_CORE_FRACTION`)."""
        usable = OUT_OF_CORE_FRACTION * self.device_mem_gb * 1e9
        return 8.0 * (m * k + k * n + m * n) + min(WORKSPACE_CAP_BYTES, usable) > usable

    def emulated_seconds(self, m, n, k, batch=1, n_gemms=16, n_moduli=15) -> float:
        """Transfers + modular GEMMs + memory-bound stages + fixed overhead.

        Out of core (:meth:`out_of_core`), the operands are counted once per pass over
        half the device memory and the result at the pageable rate."""
        ops, res = 8.0 * (m * k + k * n), 8.0 * m * n
        if self.out_of_core(m, n, k):
            passes = math.ceil((ops + res) / (0.5 * self.device_mem_gb * 1e9))
            xfer = passes * ops / (self.h2d_gbps * 1e9) + res / (self.pageable_gbps * 1e9)
        else:
            xfer = ops / (self.h2d_gbps * 1e9) + res / (self.d2h_gbps * 1e9)
        gemm = n_gemms * 2.0 * m * n * k / (self.int8_tops * 1e12)
        mem = (8.0 + n_moduli) * (m * k + k * n) + (4.0 * n_moduli + 8.0) * m * n
        return self.overhead_s + batch * (xfer + gemm + mem / (self.device_gbps * 1e9))

    def routes(self, t_host, t_emulated) -> bool:
        """Whether an estimate ``t_emulated`` beats ``t_host`` by the margin."""
        return t_emulated * (1.0 + self.margin) < t_host

    def floor(self) -> int:
        """A lower bound of ``m*n*k`` below which routing can never pay off.

        The larger of two bounds, both taken at the slowest host rate ``R`` any shape
        is given (the host estimate is then the shortest): the emulated time is at
        least ``overhead_s`` (host time ``2 s / R``), and at least the transfers, which
        for ``s = m*n*k`` are smallest for a cube: ``8 (mk + kn + mn) >= 24 s^(2/3)``
        bytes, so routing needs ``2 s / R > 24 s^(2/3) / X`` (``X`` the slower transfer
        rate), i.e. ``s > (12 R / X)^3``. The C hook uses this to skip smaller products
        in C.
        """
        R = self.slowest_host_rate() * 1e9
        X = min(self.h2d_gbps, self.d2h_gbps) * 1e9
        return int(max(self.overhead_s * R / 2.0, (12.0 * R / X) ** 3))

    def __repr__(self):
        host = (f"{self._host_gflops:.1f} GFLOP/s ({self.host_source})"
                if self._host_gflops is not None else "not measured yet")
        if self.host_table:
            host += f", {len(self.host_table)} measured shapes"
        return (f"CostModel(host BLAS {host}; H2D {self.h2d_gbps:g} GB/s, D2H "
                f"{self.d2h_gbps:g} GB/s, INT8 {self.int8_tops:g} TOPS, device "
                f"{self.device_gbps:g} GB/s, overhead {self.overhead_s * 1e6:.0f} us; "
                f"rates: {self.rates_source or 'defaults'})")


def nearest_rate(table, m, n, k) -> float:
    """The rate of the entry of ``table`` (``(m, n, k, gflops)`` tuples) nearest to
    ``(m, n, k)`` in ``|log m - log m'| + |log n - log n'| + |log k - log k'|``; ties go
    to the faster entry (the host side is then overrated: the product stays native)."""
    lm, ln, lk = (math.log(max(v, 1)) for v in (m, n, k))

    def key(e):
        d = abs(lm - math.log(e[0])) + abs(ln - math.log(e[1])) + abs(lk - math.log(e[2]))
        return (round(d, 9), -e[3])

    return min(table, key=key)[3]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def estimate_host_gflops() -> float:
    """The host DGEMM rate assumed where no rate table knows the host (GFLOP/s):
    :data:`ESTIMATE_GFLOPS_PER_CPU` per usable CPU. A function of the machine only, so
    every process on it decides alike; ``tune --rates-only`` replaces it with rates
    measured once."""
    return ESTIMATE_GFLOPS_PER_CPU * usable_cpus()


def measure_host_gflops(max_n: int = 2048, target_s: float = 0.02, repeats: int = 3) -> float:
    """Native float64 GEMM rate of this host (GFLOP/s); never routed. The cost model
    never calls it (see :class:`CostModel`); a quick probe for tools.

    Times square products from n = 256 upwards, doubling n while one product takes
    less than ``target_s`` (small products underrate a many-core BLAS: on the H200 host
    512^3 ran at 93 GFLOP/s, 4096^3 at 600), up to ``max_n``; returns the best rate
    seen, each size the best of ``repeats``. About 0.1 s on a 16-core host, less on a
    small one (it stops at the size that takes ``target_s``).
    """
    best_rate, n = 0.0, 256
    while True:
        best = time_host_dgemm(n, n, n, repeats)
        best_rate = max(best_rate, 2.0 * n ** 3 / best / 1e9)
        if best >= target_s or n >= max_n:
            return best_rate
        n *= 2


def time_host_dgemm(m, n, k, repeats=3, seed=0) -> float:
    """Best of ``repeats`` wall times (s) of NumPy's own ``(m, k) @ (k, n)`` float64
    product (never routed), after one warm-up run (thread pool start, page faults)."""
    import numpy as np

    from .._native import suspended

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = np.empty((m, n))
    best = math.inf
    with suspended():
        np.matmul(a, b, out=out)
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
    return best


# --------------------------------------------------------------------------- the table
def package_rates_path() -> str:
    """The rate table shipped with the package (``ozaki_backend/_data/host_rates.json``;
    ``tune --install`` writes it)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        RATES_FILE)


def user_rates_path() -> str:
    """The user's rate table: ``$XDG_CACHE_HOME/ozaki_backend/host_rates.json``
    (``~/.cache`` when ``XDG_CACHE_HOME`` is unset or empty), beside the GEMM tuning
    table."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ozaki_backend", USER_RATES_FILE)


def rates_path() -> str:
    """The rate table ``tune`` writes by default: ``$OZAKI_BACKEND_RATES`` when set,
    else the user's (:func:`user_rates_path`)."""
    env = os.environ.get(RATES_ENV, "").strip()
    return env or user_rates_path()


def read_paths() -> list:
    """The rate tables :func:`read_table` reads by default, lowest precedence first:
    ``[$OZAKI_BACKEND_RATES]`` when set, else the package's and the user's."""
    env = os.environ.get(RATES_ENV, "").strip()
    return [env] if env else [package_rates_path(), user_rates_path()]


def host_key() -> str:
    """This host's key in the table: the CPU model and the number of CPUs."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if not model:
        import platform

        model = platform.processor() or platform.machine() or "unknown CPU"
    return f"{model} x{os.cpu_count()}"


def gpu_key():
    """The current GPU's name (the table's device key), or None when CuPy is not
    loaded or no device answers (this never imports CuPy)."""
    import sys

    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    except Exception:  # noqa: BLE001 - no device: no key
        return None
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else name


def _read_one(path) -> dict:
    import json

    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError):
        table = {}
    if not isinstance(table, dict) or table.get("schema") != RATES_SCHEMA:
        table = {}
    return {"schema": RATES_SCHEMA, "hosts": dict(table.get("hosts") or {}),
            "devices": dict(table.get("devices") or {})}


def read_table(path=None) -> dict:
    """The rate table at ``path``; by default the tables of :func:`read_paths` merged
    (a machine in a later one replaces its record in an earlier one). A missing or
    unreadable file counts as empty."""
    paths = [path] if path else read_paths()
    merged = {"schema": RATES_SCHEMA, "hosts": {}, "devices": {}, "_from": {}}
    for p in paths:
        t = _read_one(p)
        for part in ("hosts", "devices"):
            for key, rec in t[part].items():
                merged[part][key] = rec
                merged["_from"][(part, key)] = p
    return merged


def machine_rates(path=None, host=None, gpu=None) -> dict:
    """This machine's record ``{"host": ..., "device": ..., "source": ...}`` from the
    tables (:func:`read_table`; ``host``/``gpu`` default to :func:`host_key` /
    :func:`gpu_key`); the parts they do not know are empty (the model then uses its
    defaults and the host estimate). ``source`` names the file each part came from."""
    table = read_table(path)
    host = host_key() if host is None else host
    gpu = gpu_key() if gpu is None else gpu
    h = table["hosts"].get(host) or {}
    d = table["devices"].get(gpu) or {} if gpu else {}
    where = {}
    for what, part, key, rec in (("host", "hosts", host, h), ("device", "devices", gpu, d)):
        if rec:
            where.setdefault(table["_from"][(part, key)], []).append(what)
    src = "; ".join(f"{p} ({', '.join(w)})" for p, w in where.items()) or None
    return {"host": h, "device": d, "source": src}


def write_rates(path, host=None, device=None, *, host_name=None, gpu_name=None) -> str:
    """Merge this machine's measured ``host`` and ``device`` records into the table at
    ``path`` (created if missing) and, when the process-wide model reads that table,
    make it read again.

    Returns
    -------
    str
        The path written.
    """
    import json

    table = _read_one(path)
    if host:
        table["hosts"][host_name or host_key()] = host
    if device:
        table["devices"][gpu_name or gpu_key() or "unknown GPU"] = device
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    if os.path.abspath(path) in {os.path.abspath(p) for p in read_paths()}:
        _model.reload()
    return path


_model = CostModel(rates="auto")


def cost_model() -> CostModel:
    """The process-wide :class:`CostModel` (its attributes may be adjusted).

    Returns
    -------
    CostModel
        The one instance every routing decision and floor uses.
    """
    return _model


def floor(config) -> int:
    """Smallest ``m*n*k`` that ``config`` may route (:data:`NEVER` if it routes nothing).

    Parameters
    ----------
    config : Config
        Read for its ``engine`` and ``min_size``.

    Returns
    -------
    int
        An explicit ``min_size`` as given; with ``min_size="auto"``: 0 for
        ``engine="cpu"`` (every eligible product), :data:`NEVER` for ``engine="auto"``
        without a GPU, else the cost model's floor.
    """
    eng, _ = registry.resolve_name(config.engine)
    if config.min_size is not None:
        return config.min_size
    if eng == "cpu":
        return 0 if config.engine == "cpu" else NEVER
    return _model.floor()
