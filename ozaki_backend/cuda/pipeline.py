"""Ozaki scheme II on device operands, end to end, with its certificate.

Mirrors :mod:`ozaki_backend.reference.pipeline`. :func:`product_into` is the driver
both array worlds use (``engine.py`` moves NumPy operands in and out around it):

1. equilibration and statistics (``scaling.py``): one pass over A and B for the
   exponents ``S``, one for the row statistics;
2. the bound GEMM and the bits kept per moduli count (tile by tile when ``P`` does not
   fit); for ``precision="fp64"`` the certificate's count (``certificate.py``), read back
   with the Inf/NaN flag in one small transfer — the only synchronisation of the usual
   path;
3. per output tile: residue planes of A's row block and B's column block, the N INT8
   GEMMs, and the fused CRT / rounding / alpha-beta pass into the output tile;
4. only when some element passed no a-priori test (or a bound is asked for): the
   a-posteriori test and bound (``oz_certify``), then the residual pass, then the native
   GEMM (``docs/spec.md`` §10.4).

Everything runs on the current CuPy stream.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from functools import lru_cache

import cupy
import numpy as np

from .. import _stats
from .._warnings import warn_native
from ..engine import requested_workspace
from ..semantics import apply_alpha_beta, transpose_pair
from ..spec import certificate as spec
from ..spec import tiling
from ..spec.moduli import MAX_MODULI, MODULI
from . import (certificate, costs, crt, direct, graphs, modgemm, modprod, overlap, residues,
               scaling, symmetric, tuning)
from ._common import (KPAD, REAL_TABLE, Workspace, block_view, free_device_bytes,
                      one_memory_query, round_up, span)
from .errors import CudaEngineError, WorkspaceTooSmall
from .scaling import BoundMatrix

#: Outcomes of one 2-D product (the reference pipeline's, ``stats()["certificate"]``).
CERTIFIED = "certified"
UNCERTIFIED = "uncertified"
RESIDUAL = "residual pass"
NATIVE = "native fallback"
#: Computed by cuBLAS's DGEMM because this GPU runs it faster than the emulation
#: (``costs.py``; ``emulation="eager"`` turns it off).
NATIVE_FASTER = "native (faster)"

#: Tests may force small tiles: ``(tm, tn)``; ``OZAKI_BACKEND_CUDA_TILE="tm,tn"`` too.
TILE_OVERRIDE = None
#: Fraction of the free device memory the workspace may take (cuBLAS and the caller's
#: own allocations need some headroom); the default budget is also capped
#: (:data:`ozaki_backend.spec.tiling.DEFAULT_CAP`).
MEMORY_FRACTION = tiling.DEFAULT_FRACTION
_MIN_TILE = tiling.MIN_TILE
#: Out-of-memory retries, each with half the previous budget, before the product is
#: computed natively (with a warning).
OOM_RETRIES = 3

_local = threading.local()      # this thread's retry budget and high-water mark


def workspace_budget(free=None) -> int:
    """Bytes the current product's workspace may take: ``workspace=`` (or
    ``OZAKI_BACKEND_WORKSPACE``), else :func:`~ozaki_backend.spec.tiling.default_budget`;
    never more than ``MEMORY_FRACTION`` of the free memory (``free``, default: measured
    now), nor more than an out-of-memory retry's reduced budget."""
    if free is None:
        free = free_device_bytes()
    requested = requested_workspace()
    if requested is None:
        requested = tiling.parse_bytes(os.environ.get("OZAKI_BACKEND_WORKSPACE", ""),
                                       "OZAKI_BACKEND_WORKSPACE")
    budget = tiling.effective_budget(requested, free)
    retry = getattr(_local, "retry_budget", None)
    return budget if retry is None else min(budget, retry)


def _note_workspace():
    """Record the memory pool's use above the product's starting point (the workspace
    high-water mark: everything the product allocated, its result buffers excepted)."""
    base = getattr(_local, "base", None)
    if base is not None:
        used = cupy.get_default_memory_pool().used_bytes() - base
        _local.peak = max(getattr(_local, "peak", 0), used)


@contextmanager
def tile_extra(extra):
    """Within the block, tile choices also count ``extra(tm, tn)`` bytes per tile (the
    out-of-core driver's operand blocks and result tile)."""
    prev = getattr(_local, "extra", None)
    _local.extra = extra
    try:
        yield
    finally:
        _local.extra = prev


def last_workspace_peak():
    """Device bytes of this thread's most recent Ozaki-II product's workspace at its
    high-water mark (CuPy pool use above the start of the product, sampled after each
    workspace allocation), or None."""
    return getattr(_local, "last_peak", None)


class Phases:
    """Optional per-phase timing with CUDA events (for the benchmark's breakdown)."""

    NAMES = ("scaling", "residues", "gemms", "crt")

    def __init__(self):
        self._pairs = []
        #: Workspace high-water mark of the last product timed (bytes).
        self.workspace_peak = None

    @contextmanager
    def __call__(self, name):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        try:
            yield
        finally:
            stop.record()
            self._pairs.append((name, start, stop))

    def totals(self):
        """Seconds per phase (synchronises)."""
        out = dict.fromkeys(self.NAMES, 0.0)
        for name, start, stop in self._pairs:
            stop.synchronize()
            out[name] = out.get(name, 0.0) + cupy.cuda.get_elapsed_time(start, stop) / 1e3
        return out


@contextmanager
def _nothing(_name):
    yield


def _host_tiles(ph, tm, tn):
    """``(tm, tn)`` capped by the host path's ``ph.tile_cap`` (``(rows, cols)``, set by
    ``engine.matmul_numpy`` so that finished output tiles download while the next ones
    compute); tiles only partition the output, so the bits do not change."""
    cap = getattr(ph, "tile_cap", None)
    if cap is None:
        return tm, tn
    return max(1, min(tm, cap[0])), max(1, min(tn, cap[1]))


@lru_cache(maxsize=512)
def _product_layout(tm, tn, kpad, N, path="cublas"):
    """Workspace of the integer product for ``(tm, tn)`` tiles: the residue planes and
    the N products (int32 planes on the cuBLAS path, residue bytes on the fused one).
    Cached (a layout is never changed after it is made; the tile search and every
    product of a shape ask again)."""
    prod = Workspace()
    # The cuBLAS path's planes hold rows up to a multiple of GEMM_PAD: its GEMMs then run
    # on aligned sizes (modgemm.products_into), the extra rows never read back.
    pm, pn = (tm, tn) if path == "wgmma" else (round_up(tm, modgemm.GEMM_PAD),
                                               round_up(tn, modgemm.GEMM_PAD))
    prod.need("RA", (N, pm, kpad), np.int8)
    prod.need("RB", (N, pn, kpad), np.int8)
    prod.need("C", (N, pm, round_up(pn, 16)), np.uint8 if path == "wgmma" else np.int32)
    return prod


@lru_cache(maxsize=512)
def _bound_layout(tm, tn, kpad):
    bound = Workspace()
    BoundMatrix.need(bound, tm, tn, kpad)
    return bound


def workspace_bytes(tm, tn, kpad, N, mode=None, path="cublas") -> int:
    """Device bytes of the larger of the two stages' workspaces for ``(tm, tn)`` tiles
    (the bound GEMM's, then the integer product's; ``mode`` is accepted for callers that
    pass it and changes nothing: both modes compute the bound GEMM)."""
    return max(_bound_layout(tm, tn, kpad).nbytes,
               _product_layout(tm, tn, kpad, N, path).nbytes)


def tiles_for(m, n, nbytes, free=None):
    """``(tm, tn)``: the whole product when ``nbytes(tm, tn)`` fits, else the largest
    halving that does."""
    override = TILE_OVERRIDE
    env = os.environ.get("OZAKI_BACKEND_CUDA_TILE", "")
    if override is None and env:
        override = tuple(int(v) for v in env.split(","))
    if override is not None:
        return max(1, min(m, override[0])), max(1, min(n, override[1]))
    budget = workspace_budget(free)
    extra = getattr(_local, "extra", None)
    if extra is not None:           # out of core: operand blocks and the result tile too
        size = nbytes
        nbytes = lambda tm, tn: size(tm, tn) + extra(tm, tn)   # noqa: E731
    tiles = tiling.fit_tiles(m, n, nbytes, budget, _MIN_TILE)
    if tiles is None:
        t = min(m, _MIN_TILE), min(n, _MIN_TILE)
        raise WorkspaceTooSmall(
            f"device out of memory: the smallest tile ({t[0]} x {t[1]}) needs "
            f"{nbytes(*t)} bytes of workspace, {budget} are available")
    return tiles


def choose_tiles(m, n, kpad, N, mode=None, free=None, path="cublas"):
    """``(tm, tn)`` of the integer product with ``N`` moduli (see :func:`tiles_for`)."""
    return tiles_for(m, n, lambda tm, tn: _product_layout(tm, tn, kpad, N, path).nbytes,
                      free)


_tile_list = tiling.tile_list


def _k_tiles(m, n, kpad, N):
    """``(tm, tn, kc)``: the smallest output tiles and the longest chunk of k (a
    multiple of ``KPAD``) whose integer-product workspace fits the budget."""
    budget = workspace_budget()
    extra = getattr(_local, "extra", None) or (lambda tm, tn: 0)
    tm, tn = min(m, _MIN_TILE), min(n, _MIN_TILE)
    kc = kpad
    while _product_layout(tm, tn, kc, N).nbytes + extra(tm, tn) > budget:
        if kc <= KPAD:
            raise WorkspaceTooSmall(
                f"device out of memory: a {tm} x {tn} tile with k in chunks of {KPAD} "
                f"needs more than the {budget} bytes available")
        kc = round_up(-(-kc // 2), KPAD)
    return tm, tn, kc


class Prepared:
    """Stages 0–2 of one product: equilibration, statistics, the bound GEMM, the bits
    kept per count — everything the certificate and the shifts need.

    Attributes
    ----------
    A, Bt : the operands read row-wise; S : the equilibration exponents;
    a, b : :class:`~.scaling.Side` of A's rows and B's columns;
    bm : :class:`~.scaling.BoundMatrix` and ``btiles`` its tiles; k, kpad, mode;
    table : the :class:`~._common.CountTable` the counts and kept bits are of;
    window : the counts whose kept bits are computed (:func:`count_window`: around the
    ``fixed`` count, else around ``near`` (the count this shape had last time) or where
    the certificate's search starts; None: every count) —
    :meth:`count` and :meth:`shifts` compute the others when they are needed;
    tied : B's two halves are a complex operand's parts (shifts tied).

    The constructor prepares a real product (:data:`~._common.REAL_TABLE`);
    :meth:`of_sides` takes the complex scheme's, whose statistics it computes itself.
    """

    #: The bound GEMM's buffers belong to a replayed graph (:mod:`.graphs`), which
    #: writes them on every replay: :meth:`release` keeps them.
    keep_bound = False

    def __init__(self, A, B, mode, ph=None, certify=True, sym=False, Bt=None, block=None,
                 fixed=None, near=None):
        ph = ph or _nothing
        self.table = REAL_TABLE
        self.tied = False
        self.A, self.Bt = A, (B.T if Bt is None else Bt)
        self.sym = sym
        m, self.k = A.shape
        n = self.Bt.shape[0]
        self.mode = mode
        self.kpad = kpad = round_up(self.k, KPAD)
        with ph("scaling"):
            # The certificate's status (certificate.py): the one small array the usual
            # path reads back.
            self.st = cupy.zeros(certificate.status_size(), dtype=np.int32)
            self.S = scaling.equilibration(self.A, self.Bt, block)[0]
            self.a = scaling.side_statistics(self.A, self.S, -1, mode, gmax=self.st[:1],
                                             block=block)
            self.b = scaling.side_statistics(self.Bt, self.S, +1, mode, gmax=self.st[:1],
                                             block=block)
            if block is not None:       # host operands: free the statistics' last blocks
                for X in (self.A, self.Bt):
                    X.release()
            tm, tn = tiles_for(m, n, lambda tm, tn: _bound_layout(tm, tn, kpad).nbytes)
            self.btiles = _tile_list(m, n, tm, tn)
            # Fast mode needs the bound GEMM only for the certificate.
            need = certify or mode == "accurate"
            self.bm = BoundMatrix(self.a, self.b, self.S, kpad, tm, tn) if need else None
            if self.bm is not None:
                self.bm.symmetric = sym and len(self.btiles) == 1
            self.window = count_window(self, fixed if fixed is not None else near)
            self._kept(self.btiles if need else [], self.bm)
        _note_workspace()

    def _kept(self, tiles, bm):
        scaling.kept_bits(self.a, self.b, bm, tiles, self.mode, self.table, self.window,
                          self.tied)
        if self.sym:
            # B = A.T: both sides take the row rule (t = s), as the reference's
            # scaling.shifts does for a symmetric product.
            self.b.kept = self.a.kept

    #: The gathers (:class:`~.certificate.Gathers`) once the gate asked for them.
    gathers = None
    _fac = None

    def factors(self):
        """The certificate's per-count factors of both sides (made once)."""
        if self._fac is None:
            self._fac = certificate.all_factors(self.a, self.b, self.table)
        return self._fac

    def status(self, certify, fixed=None):
        """Queue the certificate's count (with ``certify``; or the test of the ``fixed``
        count) and the gathers' gate into the small device status array
        (:mod:`.certificate`) and return it."""
        st = self.st
        if fixed is not None:
            self._cover(fixed)
        if certify:
            certificate.counts_into(self.a, self.b, self.bm, self.btiles, self.k, st,
                                    fixed=fixed, table=self.table, window=self.window,
                                    gathers=self.gathers, fac=self.factors(),
                                    with_direct=not self.tied)
            if fixed is None and self.gathers is None and self.a.Z is not None:
                certificate.gate_into(self.a, self.b, st)
            # The window this search visited: :meth:`count` judges the read-back by
            # it, even when the window was widened since (a guessed count's shifts).
            self.searched = self.window
        return st

    def _again(self):
        """Zero the status (the Inf/NaN flag kept), search again, read it back."""
        self.st[1:].fill(0)
        return self.status(True).get()

    def count(self, host, fixed=None):
        """The :class:`~.certificate.Decision` of the read-back ``host`` status
        (:meth:`status`). Data whose entries mostly fall below the bound GEMM's window
        (the gate) are searched again with the gathers; a window of counts that does
        not settle the count is widened to every count — each a further read-back,
        for data unlike ordinary data."""
        m, n = self.a.E.shape[0], self.b.E.shape[0]
        if fixed is None and self.gathers is None and int(host[4]):
            self.gathers = certificate.Gathers(self.a, self.b, self.S, self.k)
            host = self._again()
        dec = certificate.decide(host, self.searched, m * n, self.table, fixed)
        if dec is None:
            self.widen()
            dec = certificate.decide(self._again(), None, m * n, self.table, fixed)
        return dec

    def all_pass(self, dec):
        """``dec.all_pass``, the windowed search widened first when it left it open."""
        if dec.all_pass is not None or self.window is None:
            return dec.all_pass
        self.widen()
        m, n = self.a.E.shape[0], self.b.E.shape[0]
        return certificate.decide(self._again(), None, m * n, self.table).all_pass

    def widen(self):
        """Compute the kept bits of every count, not only the window's."""
        if self.window is not None:
            self.window = None
            self._fac = None            # the factors follow the kept bits
            self._kept(self.btiles, self.bound_matrix())

    def _cover(self, n_moduli):
        """Make sure the kept bits of ``n_moduli`` are computed (a count outside the
        window: every count's)."""
        if self.window is not None and n_moduli - self.table.counts[0] not in self.window[2]:
            self.widen()

    def shifts(self, n_moduli):
        """int32 ``(s, t)`` for ``n_moduli``."""
        self._cover(n_moduli)
        return scaling.shifts_for(self.a, n_moduli), scaling.shifts_for(self.b, n_moduli)

    def release(self):
        """Free the bound GEMM's workspace (it is recomputed if needed again); kept when
        a replayed graph owns it (``keep_bound``)."""
        if not self.keep_bound:
            self.bm = None

    @classmethod
    def of_sides(cls, a, b, S, k, mode, st, btiles, bm, fresh_bound, table, fixed=None):
        """Stages 0–1 computed by the caller (the complex scheme reads its embedding's
        rows from the parts in place): the sides ``a``, ``b``, the bound GEMM ``bm`` over
        ``btiles`` and ``fresh_bound()`` (a new one, its row sums already counted, for
        :meth:`bound_matrix`); ``k``: the rows' length; ``st``: the status array (four
        zeros, ``[0]`` raised by an Inf/NaN entry); ``fixed``: the count when the plan
        fixes it. Computes the kept bits, B's two halves tied (the complex columns)."""
        self = cls.__new__(cls)
        self.table, self.A, self.Bt, self.sym = table, a.X_op, b.X_op, False
        self.k, self.kpad, self.mode, self.st, self.S = k, round_up(k, KPAD), mode, st, S
        self.a, self.b, self.btiles, self.bm = a, b, btiles, bm
        self._fresh_bound = fresh_bound
        self.tied = True
        self.window = count_window(self, fixed)
        self._kept(btiles, bm)
        return self

    def _fresh_bound(self):
        (i0, i1, j0, j1) = self.btiles[0]
        bm = BoundMatrix(self.a, self.b, self.S, self.kpad, i1 - i0, j1 - j0)
        bm.symmetric = self.sym and len(self.btiles) == 1
        bm._summed = {("a", (r0, r1)) for (r0, r1, _, _) in self.btiles} | \
            {("b", (c0, c1)) for (_, _, c0, c1) in self.btiles}
        return bm

    def bound_matrix(self):
        """The bound GEMM, recomputed into fresh buffers after :meth:`release`."""
        if self.bm is None:
            self.bm = self._fresh_bound()
        return self.bm

    def data(self):
        """The certificate's view (:class:`~ozaki_backend.spec.certificate.CertData`)."""
        return certificate.data(self.a, self.b, self.bound_matrix(), self.btiles, self.k,
                                self.gathers)


def count_window(prep, fixed=None):
    """The counts whose kept bits ``prep`` computes in accurate mode
    (:func:`~ozaki_backend.spec.certificate.count_window`): around the ``fixed`` count,
    or where the
    certificate's search starts; None (every count) in fast mode, whose kept bits are
    cheap."""
    if prep.mode == "fast":
        return None
    m, n = prep.a.E.shape[0], prep.b.E.shape[0]
    t = prep.table
    start = (certificate.start_index(prep.k, m * n, t) if fixed is None
             else fixed - t.counts[0])
    return spec.count_window(len(t.counts), start)


def integer_product_into(prep: Prepared, n_moduli, s, t, out, *, alpha=1.0, beta=0.0,
                         C0=None, ph=None, strategy=None, before_output=None):
    """Stages 3–4: ``out = alpha RN(A'B' 2^(-s-t)) + beta C0`` through ``n_moduli``
    residues (the equilibration exponents applied on the fly).

    ``before_output``: called once, after the first tile's GEMMs are queued and before
    anything is written to ``out`` (the deferred read-back of the count checks there
    that the count it was started with is the product's; it raises to abandon)."""
    ph = ph or _nothing
    A, Bt, S = prep.A, prep.Bt, prep.S
    m, k = A.shape
    n = Bt.shape[0]
    N, kpad = n_moduli, prep.kpad
    host_out = isinstance(out, np.ndarray)      # out of core: tiles go to host memory
    if prep.sym and not host_out:
        if alpha != 1.0 or beta != 0.0:
            raise ValueError("the symmetric product is computed without alpha/beta")
        if before_output is not None:
            before_output()
        symmetric.product_into(A, S, s, N, kpad, out, workspace_budget(), ph=ph,
                               note=_note_workspace)
        return
    # `strategy` may force the path (a cuBLAS issue order implies the cuBLAS path);
    # otherwise the tuning table decides, and gives the fused kernel's tile width.
    path = {"batched": "cublas", "loop": "cublas", "cublas": "cublas"}.get(strategy)
    width = 0
    if path is None:
        chosen, width, _ = tuning.choice(m, n, k, N)
        path = "wgmma" if strategy == "wgmma" else chosen
    if strategy not in ("batched", "loop"):
        strategy = None
    kc = kpad
    try:
        tm, tn = choose_tiles(m, n, kpad, N, path=path)
    except WorkspaceTooSmall:
        # Even the smallest tile's planes are too large: split k too. Each chunk's
        # products accumulate onto the folded earlier ones: exact mod p, the same bits.
        path = "cublas"
        tm, tn, kc = _k_tiles(m, n, kpad, N)
    tm, tn = _host_tiles(ph, tm, tn)
    chunks = [(k0, min(k, k0 + kc)) for k0 in range(0, k, kc)]
    prod = _product_layout(tm, tn, kc, N, path)
    buf = cupy.empty(prod.nbytes, dtype=np.uint8)
    _note_workspace()
    v = prod.carve(buf)
    RA, RB, C = v["RA"], v["RB"], v["C"]
    tile = cupy.empty((tm, tn), dtype=np.float64) if host_out else None
    block = (overlap.block_for(tm, tn)
             if kc == kpad and path == "cublas" and strategy is None and ph is _nothing
             and not host_out and modgemm.gemm_strategy(tm, tn) == "loop" else None)
    if block is not None:
        # One chunk of k, nobody timing the stages: in each tile the residue and CRT
        # passes run beside the GEMMs (overlap.py; the same kernels on the same inputs;
        # the caller's stream waits for each tile before the next reuses the planes).
        for (i0, i1, j0, j1) in _tile_list(m, n, tm, tn):
            overlap.product_into(
                span(A, i0, i1), span(Bt, j0, j1), S, span(s, i0, i1), span(t, j0, j1),
                RA, RB, C, block_view(out, i0, i1, j0, j1), N, kpad, block,
                alpha=alpha, beta=beta, C0=block_view(C0, i0, i1, j0, j1),
                before_output=before_output)
            before_output = None
        del buf, v, RA, RB, C
        return
    items = [(l, l, p, l) for l, p in enumerate(MODULI[:N])]
    rows_key = cols_key = None
    for (i0, i1, j0, j1) in _tile_list(m, n, tm, tn):
        for c, (k0, k1) in enumerate(chunks):
            with ph("residues"):
                if rows_key != (i0, i1, k0):
                    Ar = A[i0:i1] if kc == kpad else A[i0:i1][:, k0:k1]
                    residues.residue_planes_into(Ar, span(s, i0, i1), RA, N,
                                                 S=span(S, k0, k1), ks=-1)
                    rows_key = (i0, i1, k0)
                if cols_key != (j0, j1, k0):
                    Bc = Bt[j0:j1] if kc == kpad else Bt[j0:j1][:, k0:k1]
                    residues.residue_planes_into(Bc, span(t, j0, j1), RB, N,
                                                 S=span(S, k0, k1), ks=+1)
                    cols_key = (j0, j1, k0)
            with ph("gemms"):
                if path == "wgmma":
                    modprod.mod_products(RA, RB, items, C, i1 - i0, j1 - j0,
                                         backend="wgmma", bn=width)
                else:
                    modgemm.products_into(RA, RB, C, N, i1 - i0, j1 - j0, kc,
                                          strategy=strategy, accumulate=c > 0)
        if before_output is not None:
            before_output()
            before_output = None
        with ph("crt"):
            dest = (tile[:i1 - i0, :j1 - j0] if host_out else
                    block_view(out, i0, i1, j0, j1))
            crt.crt_into(C, N, i1 - i0, j1 - j0, span(s, i0, i1), span(t, j0, j1), dest,
                         alpha=alpha, beta=beta, C0=block_view(C0, i0, i1, j0, j1))
            if host_out:
                out[i0:i1, j0:j1] = dest.get()
        done = getattr(ph, "tile_done", None)  # the host path downloads it meanwhile
        if done is not None:
            done(i0, i1, j0, j1)
    del buf, v, RA, RB, C, tile


def _fixed_product(A, B, n_moduli, mode):
    """``(run, T)`` of a product with a fixed count and its truncation bound (the
    residual pass's remainders): ``run()`` returns the rounded product."""
    prep = Prepared(A, B, mode, fixed=n_moduli)
    s, t = prep.shifts(n_moduli)
    T = spec.truncation_bound(prep.data(), s.astype(np.int64), t.astype(np.int64))

    def run():
        out = cupy.empty((A.shape[0], B.shape[1]), dtype=np.float64)
        integer_product_into(prep, n_moduli, s, t, out)
        return out

    return run, T


def residual_pass(prep: Prepared, n_moduli, d, C1, level):
    """The exact residual pass (``docs/spec.md`` §10.4) on the device, as the reference's
    :func:`~ozaki_backend.reference.pipeline.residual_pass`: ``(C, bound)`` or None."""
    s, t = (x.astype(np.int64) for x in prep.shifts(n_moduli))
    S = prep.S.astype(np.int32)
    A = cupy.ldexp(prep.A, -S[None, :])              # the equilibrated operands (exact)
    B = cupy.ldexp(prep.Bt.T, S[:, None])
    At = cupy.ldexp(scaling.truncate(A, s), -s[:, None].astype(np.int32))
    Bt = cupy.ldexp(scaling.truncate(B.T, t).T, -t[None, :].astype(np.int32))
    return spec.add_residuals(d, spec.prior(d), C1, level,
                              *_fixed_product(A - At, B, MAX_MODULI, prep.mode),
                              *_fixed_product(At, B - Bt, MAX_MODULI, prep.mode))


def product_into(A, B, plan, out, *, alpha=1.0, beta=0.0, C0=None, phases=None,
                 strategy=None, check_finite=False, bound=None):
    """``out = alpha * (A @ B) + beta * C0`` with Ozaki scheme II (``plan``), on device.

    A symmetric product (``B`` is ``A.T`` as a view of the same buffer:
    :func:`~ozaki_backend.semantics.transpose_pair`) computes one triangle and mirrors
    it (:mod:`.symmetric`). The workspace stays within :func:`workspace_budget`; an
    out-of-memory error retries with half the budget (:data:`OOM_RETRIES` times), then
    the product is computed natively with a :class:`NativeFallbackWarning` (declined,
    for the caller's native path, when ``check_finite``).

    Parameters
    ----------
    A : cupy float64 (m, k), B : cupy float64 (k, n)
        Finite operands, any strides (transposed and strided views are read in place).
    plan : Plan
        ``scheme="ozaki2"``; its moduli count (for ``precision="fp64"``: the certificate's,
        ``docs/spec.md`` §10.3) and mode decide the bits.
    out : cupy float64 (m, n), any strides
        Every element is written.
    C0 : cupy float64 (m, n) or None
        Read only when ``beta != 0``.
    phases : Phases or None
        Records per-phase CUDA events when given.
    check_finite : bool
        Return None (nothing computed) when an operand holds Inf/NaN: the caller takes
        the native path. The flag travels with the moduli count's read-back.
    bound : cupy float64 (m, n) or None
        Receives a rigorous bound on ``|C - AB|`` per element (``alpha == 1``,
        ``beta == 0``).

    Returns
    -------
    str or None
        The outcome (``"certified"``, ``"uncertified"``, ``"residual pass"``,
        ``"native fallback"``), or None for a non-finite operand (``check_finite``).
    """
    sym = transpose_pair(A, B)

    def once():
        return _product_once(A, B, plan, out, alpha=alpha, beta=beta, C0=C0,
                             phases=phases, strategy=strategy, check_finite=check_finite,
                             bound=bound, sym=sym)

    unsafe = beta != 0.0 and C0 is not None and cupy.may_share_memory(C0, out)
    with one_memory_query():        # the tile choices' free-memory queries: one driver call
        done, res = with_retries(once, phases, in_place=unsafe)
    if done:
        return res
    return _native_fallback(A, B, out, alpha, beta, C0, bound, check_finite, sym, res)


def with_retries(attempt, phases=None, in_place=False):
    """``(True, attempt())``, retried after an out-of-memory error with half the
    workspace budget (:data:`OOM_RETRIES` times), or ``(False, reason)`` when every
    attempt ran out of memory (or even the smallest tile exceeds the budget). Records the
    workspace high-water mark (:func:`last_workspace_peak`, ``phases.workspace_peak``).

    ``in_place``: the result overwrites an input (``C`` updated in place): a retry after
    a partial write would read a damaged input, so the error is raised instead.
    """
    pool = cupy.get_default_memory_pool()
    _local.base, _local.peak = pool.used_bytes(), 0
    _local.retry_budget = None
    reason = ""
    try:
        for n in range(OOM_RETRIES + 1):
            try:
                return True, attempt()
            except (cupy.cuda.memory.OutOfMemoryError, WorkspaceTooSmall) as exc:
                reason = f"device out of memory ({exc})"
                if isinstance(exc, WorkspaceTooSmall) or n == OOM_RETRIES:
                    break
                if in_place:
                    raise CudaEngineError(f"{reason} while updating C in place") from exc
                graphs.clear()          # the replayed plans' buffers too
                pool.free_all_blocks()
                _local.retry_budget = workspace_budget() // 2
        return False, reason
    finally:
        _local.last_peak = getattr(_local, "peak", None)
        if phases is not None:
            phases.workspace_peak = _local.last_peak
        _local.base = _local.retry_budget = None


def _symmetrize(C):
    """The strictly lower triangle replaced by the mirror of the upper one (as the
    reference's ``symmetric.symmetrize``), in place."""
    i = cupy.arange(C.shape[0])
    C[...] = cupy.where(i[:, None] > i[None, :], C.T, C)
    return C


def _native_fallback(A, B, out, alpha, beta, C0, bound, check_finite, sym, reason):
    """The product natively after repeated out-of-memory errors: declined (None) for the
    caller's own native path when ``check_finite`` (its operands were never checked),
    else cuBLAS's DGEMM here. Counted and warned either way."""
    warn_native(reason)
    _stats.record_certificate(NATIVE)
    if check_finite:
        return None
    _native_into(A, B, out, alpha, beta, C0, sym)
    if bound is not None:
        bound.fill(np.inf)     # no statistics to bound it with: the trivial bound
    return NATIVE


def _product_once(A, B, plan, out, *, alpha, beta, C0, phases, strategy, check_finite,
                  bound, sym):
    """One attempt of :func:`product_into` within the current budget."""
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        if m and n:
            out.fill(0.0)
            if alpha != 1.0 or beta != 0.0:
                out[...] = apply_alpha_beta(out, alpha, beta, C0)
        if bound is not None:
            bound.fill(0.0)
        return CERTIFIED
    ph = phases or _nothing
    key = (m, n, k, plan.mode)
    if plan.adaptive and bound is None and (_native_at_any_count(plan, m, n, k) or
                                            _native_again(plan, key)):
        # No statistics, no count: this GPU's DGEMM beats the emulation even at the
        # fewest moduli ordinary data could take (4096^3 and short reductions on the
        # H200), or this shape's last product went native for its count and the
        # statistics would only decide the same again (read again every NATIVE_PROBE
        # calls: a loop whose data turn ordinary goes back to the emulation).
        _native_into(A, B, out, alpha, beta, C0, sym)
        _stats.record_certificate(NATIVE_FASTER)
        return NATIVE_FASTER
    read = plan.adaptive or check_finite
    fixed = None if plan.adaptive else plan.n_moduli
    near = _last_count(key) if plan.adaptive else None
    # Stages 0-2 replayed as a CUDA graph where the host's launches bound the call
    # (graphs.py): only on the path that starts with a guessed count.
    replayed = gkey = base = None
    early = _early_guess(plan, key, bound, sym, phases) if read else None
    if early is not None and graphs.eligible(A, B):
        base = graphs.key_of(A, B, plan.mode, fixed, near, early)

        def build(As, Bs):
            p = Prepared(As, Bs, plan.mode, certify=True, fixed=fixed, near=near)
            p.status(True, fixed=fixed)
            return p, p.window, p.shifts(early)

        replayed = graphs.replay(base, A, B, build)
    if replayed is not None:
        (prep, window, (s, t)), gkey = replayed      # gkey: the plan used
        prep.keep_bound = True          # the graph writes its bound GEMM every replay
        st = prep.st
    else:
        prep = Prepared(A, B, plan.mode, ph, certify=read or bound is not None, sym=sym,
                        fixed=fixed, near=near)
        # The certificate's count (and the Inf/NaN flag): read back when the count
        # decides the product or the caller asks for the flag (the engine always does)
        # — the one synchronisation of the usual path. A fixed count computed without
        # the read (the benchmarks) records no certificate outcome.
        with ph("scaling"):
            st = prep.status(read, fixed=fixed)
    guess = _guess(plan, key, prep, bound) if read else None
    if replayed is not None and guess != early:
        # The budget cannot hold the bound GEMM beside the product: go on eagerly, and
        # count it against the key, so that a budget that stays too small does not
        # capture and drop a plan on every call.
        _leave_graph(gkey, prep, failed=base)
        replayed = None
    got = None
    if guess is not None:
        # Deferred read-back: the product starts with the count this shape had last
        # time (a fixed plan's count), the status travels back meanwhile, and the count
        # is checked before anything is written to `out`; a wrong guess (another count,
        # elements to test a posteriori or to compute directly, the gathers, the cost
        # model's preference for native) abandons the queued work, and the product
        # continues below with the count read.
        back = _ReadBack(st)
        read_back = []

        def check():
            host = back.wait()
            got = _read_count(prep, host, plan, check_finite)
            if got is None or got is NATIVE_FASTER or got.n_moduli != guess or \
                    prep.gathers is not None or (
                    plan.adaptive and (got.failing or got.direct or
                                       _native_faster(plan, m, n, k, got, prep))):
                raise _WrongGuess(got)
            read_back.append(got)
            prep.release()

        if replayed is None:
            s, t = prep.shifts(guess)
        try:
            integer_product_into(prep, guess, s, t, out, alpha=alpha, beta=beta, C0=C0,
                                 ph=ph, strategy=strategy, before_output=check)
        except _WrongGuess as wrong:
            if replayed is not None:
                _leave_graph(gkey, prep)
            GUESSES["wrong"] += 1
            got = wrong.got
            if plan.adaptive and got is not None and got is not NATIVE_FASTER:
                _remember(key, _plain_count(prep, got), guessed=guess)
        else:
            if replayed is not None and prep.window is not window:
                _leave_graph(gkey, prep)    # the check widened the plan's window
            GUESSES["right"] += 1
            if plan.adaptive:
                _remember(key, guess, guessed=guess)
            _stats.record_moduli(guess)
            got = read_back[0]
            outcome = CERTIFIED if plan.adaptive or not (got.failing or got.direct) else \
                UNCERTIFIED
            _stats.record_certificate(outcome)
            return outcome
    elif read:
        got = _read_count(prep, st.get(), plan, check_finite)
        if plan.adaptive and got is not None and got is not NATIVE_FASTER:
            _remember(key, _plain_count(prep, got))
    if read and got is None:
        return None                     # an Inf/NaN operand: the caller's native path
    if got is NATIVE_FASTER:
        # The data need the gathers, and with their cost the emulation is slower than
        # native DGEMM at any count they could give: not computed.
        _note_native(key, True)
        return _cheaper_native(A, B, prep, out, alpha, beta, C0, bound, sym)
    if read:
        dec = got
    else:
        dec = certificate.Decision(plan.n_moduli, 0, None, 0, m * n)
    if plan.adaptive and dec.direct_only:
        return _direct_product(A, B, prep, out, alpha, beta, C0, bound, sym)
    if plan.adaptive and _native_faster(plan, m, n, k, dec, prep):
        _note_native(key, True)
        return _cheaper_native(A, B, prep, out, alpha, beta, C0, bound, sym)
    if plan.adaptive:
        _note_native(key, False)
    return _emulated(A, B, plan, prep, dec, out, alpha, beta, C0, bound, sym, ph, strategy)


def _emulated(A, B, plan, prep, dec, out, alpha, beta, C0, bound, sym, ph, strategy):
    """The integer product at the decision's count, then what the certificate asks for:
    the a-posteriori test of the elements failing a priori (their repair, else the
    escalation), the direct elements (``docs/spec.md`` §10.3–10.5)."""
    m, n = out.shape
    N = dec.n_moduli
    failing = dec.failing if plan.adaptive else 0
    patch = plan.adaptive and (failing > 0 or dec.direct > 0)
    keep = patch or bound is not None
    if not keep:
        prep.release()
    s, t = prep.shifts(N)
    # The fused alpha/beta pass needs the raw product first when it may be tested or
    # replaced (and C0 may be out itself), and for a symmetric product (a C0 that is not
    # symmetric would make the result asymmetric before the mirror).
    plain = alpha == 1.0 and beta == 0.0
    raw = out if plain or not (keep or sym) else cupy.empty((m, n), dtype=np.float64)
    _note_workspace()
    fused = raw is out
    integer_product_into(prep, N, s, t, raw, alpha=alpha if fused else 1.0,
                         beta=beta if fused else 0.0, C0=C0 if fused else None, ph=ph,
                         strategy=strategy)
    _stats.record_moduli(N)
    outcome = CERTIFIED if plan.adaptive or not (dec.failing or dec.direct) else \
        UNCERTIFIED
    if keep:
        res, idx, _ = certificate.posterior_into(
            prep.a, prep.b, prep.bound_matrix(), prep.btiles, prep.k, N, raw, bound=bound,
            test=failing > 0, gathers=prep.gathers, fac=prep.factors(), table=prep.table)
        if failing:
            unsettled, near_overflow = (int(v) for v in res.get())
            if unsettled and spec.repairable(unsettled, prep.k, near_overflow > 0):
                direct.repair_into(prep.A, prep.Bt, prep.a, prep.b, prep.bound_matrix(),
                                   prep.btiles, idx, unsettled, raw, bound)
            elif unsettled:
                outcome = _escalate(A, B, plan, prep, dec, raw, bound)
        if plan.adaptive and dec.direct and outcome in (CERTIFIED, RESIDUAL):
            direct.direct_into(prep.A, prep.Bt, prep.a, prep.b, raw, bound)
        if sym and patch:
            _symmetrize(raw)
            if bound is not None:
                _symmetrize(bound)
        if patch and ph is not _nothing:
            ph.rewritten = True     # tiles already downloaded (the host path) are stale
    if not fused:
        out[...] = apply_alpha_beta(raw, alpha, beta, C0)
    _stats.record_certificate(outcome)
    return outcome


def _plain_count(prep, dec):
    """The count to remember for a shape: its count when the next call may start with
    it (nothing to test, patch or gather), else None (the next call reads first)."""
    if prep.gathers is not None or dec.failing or dec.direct:
        return None
    return dec.n_moduli


def _direct_product(A, B, prep, out, alpha, beta, C0, bound, sym):
    """Every element has at most two terms: no integer product (``docs/spec.md`` §10.5)."""
    m, n = out.shape
    raw = cupy.zeros((m, n), dtype=np.float64)
    if bound is not None:
        bound.fill(0.0)
    direct.direct_into(prep.A, prep.Bt, prep.a, prep.b, raw, bound)
    if sym:
        _symmetrize(raw)
        if bound is not None:
            _symmetrize(bound)
    out[...] = apply_alpha_beta(raw, alpha, beta, C0)
    _stats.record_certificate(CERTIFIED)
    return CERTIFIED


def _performant(plan) -> bool:
    """Whether ``plan`` lets native DGEMM replace the emulation where it is cheaper
    (``emulation="performant"``, the default; ``"eager"`` always emulates)."""
    return plan.options.get("emulation", "performant") == "performant"


def _native_faster(plan, m, n, k, dec, prep) -> bool:
    """Whether this GPU's native DGEMM is measured faster than the emulation at the
    decision's count, its a-posteriori test and gathers included (``costs.py``; never
    with ``emulation="eager"``)."""
    if not _performant(plan) or dec.direct_only:
        return False
    return costs.native_faster(m, n, k, dec.n_moduli, dec.failing > 0,
                               prep.gathers is not None)


def _native_before_gathers(plan, m, n, k) -> bool:
    """Whether native DGEMM is modelled faster than the emulation with the gathers even
    at one modulus fewer than ordinary data certify with (a lower estimate of the count
    the gathers could give; the a-posteriori test not counted)."""
    if not _performant(plan):
        return False
    return costs.native_faster(m, n, k, max(2, plan.expected_moduli - 1), False, True)


def _native_at_any_count(plan, m, n, k) -> bool:
    """Whether native DGEMM is modelled faster than the emulation at one modulus fewer
    than ordinary data certifies with (a lower estimate of any product's count)."""
    if not _performant(plan):
        return False
    return costs.native_faster(m, n, k, max(2, plan.expected_moduli - 1), False)


def _cheaper_native(A, B, prep, out, alpha, beta, C0, bound, sym):
    """cuBLAS's DGEMM where it is faster than the emulation for this product: native by
    definition (its bound is every DGEMM's), counted as ``native (faster)``."""
    if bound is not None:
        bound[...] = spec.native_bound(prep.data())
    _native_into(A, B, out, alpha, beta, C0, sym)
    _stats.record_certificate(NATIVE_FASTER)
    return NATIVE_FASTER


def _native_into(A, B, out, alpha, beta, C0, sym):
    """``out = alpha A B + beta C0`` by cuBLAS's DGEMM (straight into ``out`` when it
    can take it: no alpha/beta, not symmetric, C-contiguous)."""
    if alpha == 1.0 and beta == 0.0 and not sym and out.flags.c_contiguous:
        cupy.matmul(A, B, out=out)
        return
    C = cupy.matmul(A, B)
    if sym:
        _symmetrize(C)
    out[...] = apply_alpha_beta(C, alpha, beta, C0)


def _read_count(prep, host, plan, check_finite):
    """The :class:`~.certificate.Decision` from the read-back status ``host``; None
    when an operand holds Inf/NaN and the caller asked (``check_finite``);
    :data:`NATIVE_FASTER` when the data ask for the gathers (``host[4]``, the gate) and
    native DGEMM is faster than the emulation with them (:func:`_native_before_gathers`)."""
    if check_finite and host[0] > 1024:
        return None
    if plan.adaptive and prep.gathers is None and int(host[4]):
        m, n = prep.a.E.shape[0], prep.b.E.shape[0]
        if _native_before_gathers(plan, m, n, prep.k):
            return NATIVE_FASTER
    return prep.count(host, None if plan.adaptive else plan.n_moduli)


class _WrongGuess(Exception):
    """The deferred read-back found another count (or an Inf/NaN flag, or elements the
    count cannot certify) than the one the product was started with."""

    def __init__(self, got):
        super().__init__("the product's count differs from the guessed one")
        self.got = got


class _ReadBack:
    """The status array copied to pinned host memory on the current stream, without
    waiting; :meth:`wait` waits for that copy only (the work queued after it runs on)."""

    def __init__(self, st):
        self._host = _pinned_status(st.size)
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(self._host.ctypes.data, st.data.ptr, st.nbytes,
                                      _D2H, stream.ptr)
        self._done = cupy.cuda.Event(block=False, disable_timing=True)
        self._done.record(stream)

    def wait(self):
        self._done.synchronize()
        return self._host.copy()


_D2H = 2        # cudaMemcpyDeviceToHost


def _pinned_status(size):
    """This thread's pinned int32 buffer of ``size`` for the status read-back (allocated
    once per size)."""
    bufs = getattr(_local, "status_host", None)
    if bufs is None:
        bufs = _local.status_host = {}
    buf = bufs.get(size)
    if buf is None:
        mem = cupy.cuda.alloc_pinned_memory(4 * size)
        buf = bufs[size] = (np.frombuffer(mem, dtype=np.int32, count=size), mem)
    return buf[0]


#: Products started with a guessed count, by how the guess turned out (all threads).
GUESSES = {"right": 0, "wrong": 0}

#: A shape whose guessed count was wrong this many times in a row is computed with the
#: count read first, until it shows the same count twice in a row again.
GUESS_MISSES = 2


def _early_guess(plan, key, bound, sym, phases=None):
    """The count :func:`_guess` will start the product with, as far as it can be told
    before the operands are prepared (None: the product reads its count first); the
    part of its rule that needs no prepared operands. The graph of stages 0-2 is
    captured for it (``phases`` timed stage by stage: never)."""
    if bound is not None or sym or phases is not None:
        return None
    if getattr(_local, "retry_budget", None) is not None:
        return None
    if not plan.adaptive:
        return plan.n_moduli
    seen = _seen(key)
    return None if seen is None or seen[1] >= GUESS_MISSES else seen[0]


def _leave_graph(gkey, prep, failed=None):
    """The call left the ordinary path with a replayed ``prep`` (another count, a
    widened window, a smaller budget): drop the plan; this call goes on with ``prep``
    eagerly. ``failed``: the key the plan was captured for, when the plan could not be
    used at all (counted as a failed capture, :func:`graphs.drop`)."""
    graphs.drop(gkey, failed=failed)
    prep.keep_bound = False


def _guess(plan, key, prep, bound):
    """The count to start the product with before the status is read (None: read it
    first): a fixed plan's count, else the count of this thread's last product of the
    same shape and mode. Only for the plain path — no bound asked for, not the
    symmetric product (it writes its triangle tile by tile), one bound tile, no
    out-of-memory retry — and when the bound GEMM's workspace (kept until the check)
    fits the budget next to the whole product's."""
    if prep.bm is None or len(prep.btiles) != 1:
        return None
    N = _early_guess(plan, key, bound, prep.sym)
    if N is None:
        return None
    m, n = prep.a.E.shape[0], prep.b.E.shape[0]
    need = _bound_layout(m, n, prep.kpad).nbytes + \
        _product_layout(m, n, prep.kpad, N).nbytes
    return N if need <= workspace_budget() else None


#: A shape whose last product went native for its count (``native (faster)``) is
#: computed natively without statistics for this many calls, then read again.
NATIVE_PROBE = 16


#: Shapes a thread remembers (counts, native decisions) before it forgets them all.
SHAPES_REMEMBERED = 256


def _shape_memory(name):
    """This thread's per-shape table ``name`` (made on first use)."""
    table = getattr(_local, name, None)
    if table is None:
        table = {}
        setattr(_local, name, table)
    return table


def _keep(table, key, value):
    """``table[key] = value``, the table emptied first when it holds
    :data:`SHAPES_REMEMBERED` other shapes."""
    if len(table) >= SHAPES_REMEMBERED and key not in table:
        table.clear()
    table[key] = value


def _native_again(plan, key) -> bool:
    """Whether this thread's last product of shape ``key`` went native for its count
    and fewer than :data:`NATIVE_PROBE` calls have passed since its data were read
    (counts the call)."""
    if not _performant(plan):
        return False
    native = _shape_memory("native")
    if key not in native:
        return False
    native[key] += 1
    if native[key] >= NATIVE_PROBE:
        del native[key]             # this call reads the data again
        return False
    return True


def _note_native(key, went_native):
    """Record whether the product of shape ``key`` just went native for its count."""
    native = _shape_memory("native")
    if went_native:
        _keep(native, key, 0)
    else:
        native.pop(key, None)


def _seen(key):
    """``(count, wrong guesses in a row)`` of this thread's last product of shape
    ``key``, or None."""
    return _shape_memory("counts").get(key)


def _last_count(key):
    """The count of this thread's last product of shape ``key``, or None."""
    seen = _seen(key)
    return None if seen is None else seen[0]


def _remember(key, N, guessed=None):
    """Record ``N`` as the count of shape ``key``: after a guess (``guessed``), a right
    one clears the misses and a wrong one adds one; a count read before the product
    takes one miss off when it repeats the last count."""
    counts = _shape_memory("counts")
    last, misses = counts.get(key, (None, 0))
    if guessed is not None:
        misses = 0 if N == guessed else misses + 1
    elif N == last:
        misses = max(0, misses - 1)
    _keep(counts, key, (N, misses))


def _escalate(A0, B0, plan, prep, dec, C, bound):
    """Too many elements the a-posteriori test leaves unsettled: as the reference's
    ``_adaptive``, the count every element passes a priori, then the most moduli (each
    tested again), then the residual pass, then native DGEMM — with
    ``emulation="performant"`` (the default) native as soon as this GPU's DGEMM is
    measured faster than the next step (``docs/spec.md`` §10.4). Writes the result into
    ``C`` (and ``bound``) and returns the outcome."""
    eager = not _performant(plan)
    m, n = C.shape
    tried = {dec.n_moduli}
    level = 0.0
    for N in (prep.all_pass(dec), MAX_MODULI):
        if N is None or N in tried:
            continue
        tried.add(N)
        if not eager and costs.native_faster(m, n, prep.k, N, True,
                                             prep.gathers is not None):
            break
        s, t = prep.shifts(N)
        integer_product_into(prep, N, s, t, C)
        _stats.record_moduli(N)
        res, idx, level = certificate.posterior_into(
            prep.a, prep.b, prep.bound_matrix(), prep.btiles, prep.k, N, C, bound=bound,
            test=True, gathers=prep.gathers, fac=prep.factors(), table=prep.table)
        unsettled, near_overflow = (int(v) for v in res.get())
        if not unsettled:
            return CERTIFIED
        if spec.repairable(unsettled, prep.k, near_overflow > 0):
            direct.repair_into(prep.A, prep.Bt, prep.a, prep.b, prep.bound_matrix(),
                               prep.btiles, idx, unsettled, C, bound)
            return CERTIFIED
    else:
        if eager or costs.residual_faster(m, n, prep.k):
            d = prep.data()
            rp = residual_pass(prep, max(tried), d, C, level)
            if rp is not None:
                C[...] = rp[0]
                if bound is not None:
                    bound[...] = rp[1]
                if prep.sym:      # the remainders' products are not symmetric: mirror
                    _symmetrize(C)
                    if bound is not None:
                        _symmetrize(bound)
                return RESIDUAL
    warn_native("neither the certificate with up to 20 moduli nor the residual pass "
                "meets the native-level target")
    C[...] = cupy.matmul(A0, B0)
    if prep.sym:
        _symmetrize(C)
    if bound is not None:
        bound[...] = spec.native_bound(prep.data())
    return NATIVE


def moduli_for(A, B, plan):
    """The moduli count of the integer product ``plan`` computes for ``A @ B`` (mirrors
    the reference's :func:`~ozaki_backend.reference.pipeline.moduli_for`; 0 when every
    element is computed directly)."""
    if not plan.adaptive:
        return plan.n_moduli
    A = cupy.asarray(A, dtype=np.float64)
    B = cupy.asarray(B, dtype=np.float64)
    if 0 in A.shape or B.shape[1] == 0:
        return 2
    prep = Prepared(A, B, plan.mode, sym=transpose_pair(A, B))
    dec = prep.count(prep.status(True).get())
    return 0 if dec.direct_only else dec.n_moduli
