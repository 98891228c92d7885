"""Routing: whether one product goes to the backend, which engine, and why.

The decision layer, above ``config`` and ``costmodel``: :func:`decide` looks at a
configuration and a shape (never at data) and returns a finished, immutable
:class:`Decision`. It imports no config state (a config is passed in), and nothing
that installs or observes.

Order of the checks (each native outcome names its reason, see :class:`Decision`):

1. Shape: only matrix-matrix products are eligible (``m >= 2``, ``n >= 2``, ``k >= 1``);
   matrix-vector shapes are memory bound and stay with BLAS.
2. Engine: ``engine="cpu"`` / ``"cuda"`` as configured; ``"auto"`` picks the GPU when
   CuPy and a device are usable, else the CPU reference engine.
3. Size: an explicit ``min_size`` routes every product with ``m*n*k >= min_size``.
   With ``min_size="auto"``: ``engine="cpu"`` routes everything eligible (the user
   asked for the reference engine's results); ``engine="auto"`` without a GPU routes
   nothing (emulation on the host is always slower than native BLAS); with the CUDA
   engine the :class:`CostModel` compares the host BLAS time with transfer + GPU time,
   both from rates measured on the machine (``python -m ozaki_backend tune``), and
   routes only a product estimated faster by the model's margin. Explicit
   ``ozaki_backend.matmul`` calls never come here: they always emulate.
4. Operands with NaN or infinity are found by the engine, which declines them (they
   take the native path, so the result is exactly NumPy's; ``route.py`` replaces the
   decision).
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from operator import itemgetter

from .. import registry
from ..spec.rules import CERT_SMALL
from .costmodel import cost_model


class Decision(tuple):
    """The routing decision for one product (immutable); truthy when routed.

    Attributes
    ----------
    routed : bool
    reason : str
        Why (also the key it is counted under in ``stats()``).
    engine : str or None
        ``"cpu"`` or ``"cuda"`` when routed.
    entry : str
        The entry point (``"@/matmul"``, ``"np.dot"``, ``"scipy dgemm"`` ...).
    m, n, k, batch : int
        Core shape ``(m, k) @ (k, n)`` and the number of such products.
    est_host_s, est_emulated_s : float or None
        The cost model's estimates, when it was consulted.

    Notes
    -----
    A check made after :func:`decide` (non-finite operands) that changes the outcome
    makes a new decision with :meth:`replace`; a decision once handed out (to
    ``explain()``, or kept in :data:`recent`) never changes.
    """

    # A tuple underneath, like a named tuple: immutable, built in one step and read
    # in C. Python makes a decision for every product a scope hands it, so its cost is
    # part of the dispatch overhead.
    __slots__ = ()

    #: The attributes, in the order of the tuple.
    FIELDS = ("routed", "reason", "engine", "entry", "m", "n", "k", "batch",
              "est_host_s", "est_emulated_s")
    routed = property(itemgetter(0), doc="Whether the product goes to the backend.")
    reason = property(itemgetter(1), doc="Why (the key it is counted under in stats()).")
    engine = property(itemgetter(2), doc="'cpu' or 'cuda' when routed.")
    entry = property(itemgetter(3), doc="The entry point ('@/np.matmul', 'np.dot' ...).")
    m = property(itemgetter(4), doc="Rows of the core product.")
    n = property(itemgetter(5), doc="Columns of the core product.")
    k = property(itemgetter(6), doc="Inner dimension of the core product.")
    batch = property(itemgetter(7), doc="Number of core products.")
    est_host_s = property(itemgetter(8), doc="The cost model's host BLAS estimate (s).")
    est_emulated_s = property(itemgetter(9), doc="The cost model's emulated estimate (s).")

    def __new__(cls, routed, reason, *, engine=None, entry="", m=0, n=0, k=0, batch=1,
                est_host_s=None, est_emulated_s=None):
        return tuple.__new__(cls, (routed, reason, engine, entry, m, n, k, batch,
                                   est_host_s, est_emulated_s))

    def replace(self, **changes) -> "Decision":
        """A new decision with ``changes`` applied to this one's attributes.

        Parameters
        ----------
        **changes
            Attribute names and their new values (``routed=False, reason=...``).

        Returns
        -------
        Decision
        """
        unknown = [k for k in changes if k not in self.FIELDS]
        if unknown:
            raise TypeError(f"Decision has no attribute {unknown[0]!r}")
        fields = dict(zip(self.FIELDS, self), **changes)
        return Decision(fields.pop("routed"), fields.pop("reason"), **fields)

    def __reduce__(self):  # pickle and copy: the constructor takes keywords
        return (_made, tuple(self))

    def __bool__(self):
        return self.routed

    def __repr__(self):
        what = f"routed to engine={self.engine}" if self.routed else "native"
        shape = f"({self.m} x {self.k}) @ ({self.k} x {self.n}) "
        if self.batch != 1:
            shape = f"{self.batch} x {shape}"
        if not (self.m or self.n or self.k):  # no matrix product (explain() of vectors)
            shape = ""
        est = ""
        if self.est_host_s is not None:
            est = (f" [est. host BLAS {self.est_host_s * 1e3:.3g} ms, emulated "
                   f"{self.est_emulated_s * 1e3:.3g} ms]")
        entry = f"{self.entry}: " if self.entry else ""
        return f"{entry}{shape}{what}: {self.reason}{est}"

    __str__ = __repr__


def _made(routed, reason, engine, entry, m, n, k, batch, est_host_s=None,
          est_emulated_s=None) -> Decision:
    """``Decision(...)`` with positional arguments, at half the cost (see :func:`decide`)."""
    return tuple.__new__(Decision, (routed, reason, engine, entry, m, n, k, batch,
                                    est_host_s, est_emulated_s))


# --------------------------------------------------------------------------- engine
def resolve_engine(config) -> tuple[str, str]:
    """``(engine, why)``: the engine a routed product of this config would use."""
    return registry.resolve_name(config.engine)


@lru_cache(maxsize=256)
def _plan_counts(k: int, mn: int, opts_key: tuple) -> tuple[int, int]:
    from ..plan import Plan

    p = Plan(1, mn, k, **dict(opts_key))
    # precision="fp64" picks its count per product (the certificate's): the estimate
    # assumes ordinary data, i.e. the plan's expected count.
    N = p.expected_moduli
    return p.n_gemms - (p.n_moduli - N) * p.k_split, N


#: Decisions made with the process-wide cost model, by (the config's key, shape, batch,
#: entry, the model's identity and version): a declined product that reaches Python
#: (above the C hook's floor) is decided again on every call, and evaluating the cost
#: model was most of the ~16-25 us that costs. A decision depends on nothing else (not
#: the data), and the model's version changes with every parameter.
_MEMO: dict = {}
#: Decisions kept before the memo starts over.
MEMO_KEPT = 4096


def decide(config, m: int, n: int, k: int, batch: int = 1, entry: str = "",
           cost=None) -> Decision:
    """The decision for ``batch`` products ``(m, k) @ (k, n)`` under ``config``.

    Does not look at the data (see the module docstring for the non-finite check).
    ``cost`` is the :class:`CostModel` to consult (default: the process-wide one, whose
    decisions are remembered until one of its parameters changes).
    """
    if cost is not None or getattr(config, "key", None) is None:
        return _decide(config, m, n, k, batch, entry, cost)
    model = cost_model()
    key = (config.key, m, n, k, batch, entry, id(model), model.version)
    d = _MEMO.get(key)
    if d is None:
        d = _decide(config, m, n, k, batch, entry, model)
        if len(_MEMO) >= MEMO_KEPT:
            _MEMO.clear()
        _MEMO[key] = d
    return d


def _decide(config, m, n, k, batch, entry, cost) -> Decision:
    """:func:`decide` without the memo (``cost``: the model to consult, None for the
    process-wide one)."""
    # Built positionally: a decision per product a scope hands to Python (the C hook
    # and the wrappers' callers pay for it).
    where = (entry, m, n, k, batch)
    if m < 2 or n < 2:
        return _made(False, "matrix-vector shaped (m or n < 2): left to BLAS", None, *where)
    if k < 1 or batch < 1:
        return _made(False, "empty product", None, *where)
    size = m * n * k
    if config.min_size is not None and size < config.min_size:
        # Before the engine is resolved: the common case of a small product in a scope.
        return _made(False, f"below min_size (m*n*k < {config.min_size})", None, *where)
    eng, why = resolve_engine(config)
    if config.min_size is not None:
        return _made(True, f"min_size={config.min_size}", eng, *where)
    if eng == "cpu":
        if config.engine == "cpu":
            return _made(True, "engine='cpu', min_size='auto' routes all eligible", "cpu",
                         *where)
        return _made(False, f"engine='auto' with {why} and min_size='auto': emulation "
                     "on the host is slower than BLAS; set min_size to route anyway", None,
                     *where)
    # The estimate depends on the output size only through the certificate's factor,
    # which has two regimes (below and above CERT_SMALL elements).
    numeric = tuple(sorted((o, v) for o, v in config.opts.items() if o != "workspace"))
    n_gemms, n_mod = _plan_counts(k, min(m * n, CERT_SMALL), numeric)
    model = cost_model()
    if cost is not None:
        model = cost
    t_host = model.host_seconds(m, n, k, batch)
    t_emu = model.emulated_seconds(m, n, k, batch, n_gemms, n_mod)
    if model.routes(t_host, t_emu):
        return _made(True, "cost model: emulated faster", eng, *where, t_host, t_emu)
    return _made(False, "cost model: host BLAS faster", None, *where, t_host, t_emu)


# --------------------------------------------------------------------------- history
#: The most recent decisions made in Python (``explain()`` shows them). Products the
#: C hook skipped without calling Python are not in it (they are counted in stats()).
recent: deque = deque(maxlen=32)
