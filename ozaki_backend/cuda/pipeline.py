"""Ozaki scheme II on device operands, end to end, with its certificate: the driver.

Mirrors :mod:`ozaki_backend.reference.pipeline`. :func:`product_into` is the driver
both array worlds use (``engine.py`` moves NumPy operands in and out around it); its
stages are modules of their own:

1. equilibration and statistics (:mod:`.prepared`, on ``scaling.py``): one pass over A
   and B for the exponents ``S``, one for the row statistics;
2. the bound GEMM and the bits kept per moduli count (:mod:`.prepared`; tile by tile
   when ``P`` does not fit); for ``precision="fp64"`` the certificate's count
   (``certificate.py``), read back with the Inf/NaN flag in one small transfer — the
   only synchronisation of the usual path;
3. per output tile: residue planes of A's row block and B's column block, the N INT8
   GEMMs, and the fused CRT / rounding / alpha-beta pass into the output tile
   (:mod:`.integer_product`);
4. only when some element passed no a-priori test (or a bound is asked for): the
   a-posteriori test and bound (``oz_certify``), then the residual pass, then the native
   GEMM (``docs/spec.md`` §10.4).

Here: the decisions between those stages — the count read back or guessed
(:mod:`.shape_memory`: the deferred read-back, the per-shape memory), stages 0–2
replayed as a CUDA graph (``graphs.py``), native DGEMM where this GPU runs it faster
(``costs.py``), the elements computed directly, the escalation, the native fallback —
within the workspace budget and its out-of-memory retries (:mod:`.workspace`).

Everything runs on the current CuPy stream.
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import _stats
from .._warnings import warn_native
from ..semantics import apply_alpha_beta, transpose_pair
from ..spec import certificate as spec
from ..spec.moduli import MAX_MODULI
from . import certificate, costs, direct, graphs
from ._common import KPAD, one_memory_query, round_up  # noqa: F401  (KPAD, round_up)
from .integer_product import integer_product_into, residual_pass
from .prepared import Prepared
from .shape_memory import (GUESSES, _early_guess, _guess, _last_count, _native_again,
                           _note_native, _performant, _ReadBack, _remember, _shape_memory,
                           _WrongGuess)
from .workspace import _nothing, _note_workspace, with_retries
# Re-exported for the modules and tools that reach them as ``pipeline.X`` (``complex.py``,
# ``outofcore.py``, the benchmarks, ``scripts/``, ``docs/configuration.md``). Module state
# that tests patch (``TILE_OVERRIDE``) is not: it lives in, and is read by, ``workspace``.
from .workspace import (_MIN_TILE, Phases, _tile_list, last_workspace_peak,  # noqa: F401
                        tile_extra, tiles_for, workspace_budget)

#: Outcomes of one 2-D product (the reference pipeline's, ``stats()["certificate"]``).
CERTIFIED = "certified"
UNCERTIFIED = "uncertified"
RESIDUAL = "residual pass"
NATIVE = "native fallback"
#: Computed by cuBLAS's DGEMM because this GPU runs it faster than the emulation
#: (``costs.py``; ``emulation="eager"`` turns it off).
NATIVE_FASTER = "native (faster)"


def product_into(A, B, plan, out, *, alpha=1.0, beta=0.0, C0=None, phases=None,
                 strategy=None, check_finite=False, bound=None):
    """``out = alpha * (A @ B) + beta * C0`` with Ozaki scheme II (``plan``), on device.

    A symmetric product (``B`` is ``A.T`` as a view of the same buffer:
    :func:`~ozaki_backend.semantics.transpose_pair`) computes one triangle and mirrors
    it (:mod:`.symmetric`). The workspace stays within :func:`.workspace.workspace_budget`;
    an out-of-memory error retries with half the budget
    (:data:`.workspace.OOM_RETRIES` times, :func:`.workspace.with_retries`), then the
    product is computed natively with a :class:`NativeFallbackWarning` (declined, for
    the caller's native path, when ``check_finite``).

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
    if plan.adaptive and bound is None and _native_unread(plan, m, n, k, key):
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
            got = _cheapest_count(plan, m, n, k, _read_count(prep, host, plan, check_finite),
                                  prep, widen=False)
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
                _note_native(key, False)    # emulated: a shape read again is forgotten
            _stats.record_moduli(guess)
            got = read_back[0]
            outcome = CERTIFIED if plan.adaptive or not (got.failing or got.direct) else \
                UNCERTIFIED
            _stats.record_certificate(outcome)
            return outcome
    elif read:
        got = _cheapest_count(plan, m, n, k, _read_count(prep, st.get(), plan, check_finite),
                              prep)
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
            if unsettled and spec.repairable(unsettled, prep.k, near_overflow > 0, m * n):
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


def _cheapest_count(plan, m, n, k, dec, prep, widen=True):
    """``dec``, or with ``emulation="performant"`` the count every element passes a
    priori where this GPU's model computes the product faster there than at ``dec``'s
    count with the a-posteriori test (``docs/spec.md`` §10.4: that test is two passes
    over the output, ~29 ps an element on an H100, more than one or two more INT8
    GEMMs cost at k below ~10^4). Both are certified, the bits those of that count;
    ``emulation="eager"`` (and the CPU engine) keep ``dec``. ``widen``: the windowed
    search may be widened to find the count (another count pass); without it only a
    count the window settled is taken."""
    if (dec is None or dec is NATIVE_FASTER or not plan.adaptive or not dec.failing
            or dec.direct_only or not _performant(plan)):
        return dec
    gathers = prep.gathers is not None
    r = costs.rates()
    tested = costs.emulation_seconds(m, n, k, dec.n_moduli, True, r, gathers)
    # one count up is the least the raise can cost: widen only where that could pay
    if costs.emulation_seconds(m, n, k, dec.n_moduli + 1, False, r, gathers) >= tested:
        return dec
    up = prep.all_pass(dec) if widen else dec.all_pass
    if up is None or costs.emulation_seconds(m, n, k, up, False, r, gathers) >= tested:
        return dec
    return dec._replace(n_moduli=up, failing=0, all_pass=up, safe=None)


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


def _native_unread(plan, m, n, k, key) -> bool:
    """Whether the product goes to DGEMM before its operands are read: DGEMM faster
    even at the fewest moduli ordinary data could take, or shape ``key`` went native
    for its count and is not due for a probe (this counts the call,
    :func:`_native_again`)."""
    return _native_at_any_count(plan, m, n, k) or _native_again(plan, key)


def native_shortcut(plan, m, n, k):
    """``f(A, B, out=None)`` computing an (m, k) @ (k, n) product natively while
    :func:`_product_once` would (its first branch: no statistics, no count), or None.

    ``f`` re-evaluates that branch on every call (:func:`_native_unread`: the cost
    model, and for a shape that went native for its count the per-thread probe counter)
    and returns None when the full path is due (the caller forgets ``f``); otherwise it
    records the outcome as the full path does and returns ``cupy.matmul(A, B, out=out)``,
    the cuBLAS call ``_native_into`` makes (``out``: a C-ordered float64 (m, n) array;
    None is returned when it overlaps an operand). For callers that skip the rest of
    the host path (``_api``): on the H200 that path cost ~0.2 ms a call, 4-8 % of a
    4096^3 DGEMM.
    """
    if not plan.adaptive or not _performant(plan) or min(m, n, k) == 0:
        return None
    key = (m, n, k, plan.mode)
    if not (_native_at_any_count(plan, m, n, k) or key in _shape_memory("native")):
        return None

    def native(A, B, out=None):
        if out is not None and (cupy.may_share_memory(out, A) or
                                cupy.may_share_memory(out, B)):
            return None             # the full path computes it into a copy first
        if not _native_unread(plan, m, n, k, key):
            return None
        C = cupy.matmul(A, B, out=out)
        _stats.record_certificate(NATIVE_FASTER)
        return C

    return native


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


def _leave_graph(gkey, prep, failed=None):
    """The call left the ordinary path with a replayed ``prep`` (another count, a
    widened window, a smaller budget): drop the plan; this call goes on with ``prep``
    eagerly. ``failed``: the key the plan was captured for, when the plan could not be
    used at all (counted as a failed capture, :func:`graphs.drop`)."""
    graphs.drop(gkey, failed=failed)
    prep.keep_bound = False


def _escalate(A0, B0, plan, prep, dec, C, bound):
    """Too many elements the a-posteriori test leaves unsettled: as the reference's
    ``_adaptive``, the 1/16 rule's count when the product took one below it
    (``dec.safe``), the count every element passes a priori, then the most moduli (each
    tested again), then the residual pass, then native DGEMM — with
    ``emulation="performant"`` (the default) native as soon as this GPU's DGEMM is
    measured faster than the next step (``docs/spec.md`` §10.4). Writes the result into
    ``C`` (and ``bound``) and returns the outcome."""
    eager = not _performant(plan)
    m, n = C.shape
    tried = {dec.n_moduli}
    level = 0.0
    for N in _escalation(prep, dec):
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
        if spec.repairable(unsettled, prep.k, near_overflow > 0, m * n):
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


def _escalation(prep, dec):
    """The counts :func:`_escalate` tries, in order (``spec.next_count``'s; ``all_pass``
    read only when reached: it may widen the search)."""
    yield dec.safe
    yield prep.all_pass(dec)
    yield MAX_MODULI


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
    if dec.direct_only:
        return 0
    # emulation="performant" may take the count every element passes a priori
    m, k = A.shape
    return _cheapest_count(plan, m, B.shape[1], k, dec, prep).n_moduli
