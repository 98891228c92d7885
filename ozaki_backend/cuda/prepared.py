"""Stages 0–2 of an Ozaki-II product on the device: :class:`Prepared`.

Mirrors the reference's ``equilibrate.py`` and ``scaling.py`` with the certificate's
count (``certificate.py``): the equilibration exponents ``S`` (``docs/spec.md`` §2.1),
the row and column statistics (§2.2), the bound GEMM (tile by tile when ``P`` does not
fit the budget, :mod:`.workspace`) and the bits kept per moduli count, then the
certificate's count read back with the Inf/NaN flag in one small status array (§10.3,
§10.7) — everything the shifts, the certificate and the integer product
(:mod:`.integer_product`) need. :func:`count_window` is the window of counts whose kept
bits are computed first.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec import certificate as spec
from . import certificate, scaling
from ._common import GEMM_KPAD, KPAD, REAL_TABLE, round_up
from .scaling import BoundMatrix
from .workspace import _bound_layout, _note_workspace, _nothing, _tile_list, tiles_for


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
        self.kpad = kpad = round_up(self.k, GEMM_KPAD)
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
                                    gathers=self.gathers, fac=self.factors())
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
        dec = certificate.decide(host, self.searched, m * n, self.table, fixed,
                                 self.repairs)
        if dec is None:
            self.widen()
            dec = certificate.decide(self._again(), None, m * n, self.table, fixed,
                                     self.repairs)
        return dec

    @property
    def repairs(self) -> int:
        """The unsettled elements this product repairs (0 for a table that does not)."""
        m, n = self.a.E.shape[0], self.b.E.shape[0]
        return spec.repair_cap(self.k, m * n) if self.table.repairs else 0

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
