"""Stages 3–4 of an Ozaki-II product on the device, and the residual pass.

Mirrors the reference's :func:`~ozaki_backend.reference.pipeline.integer_product` and
:func:`~ozaki_backend.reference.pipeline.residual_pass`.
:func:`integer_product_into`: per output tile, the residue planes of A's row block and
B's column block (``docs/spec.md`` §3–4), the N INT8 GEMMs (§5: cuBLAS, ``modgemm.py``,
or the fused Hopper kernel, ``modprod.py``; k split into chunks when even the smallest
tile's planes exceed the budget) and the fused CRT / rounding / alpha-beta pass into the
output tile (§6–7); a symmetric product computes one triangle (``symmetric.py``).
:func:`residual_pass`: the exact residual pass of §10.4, two further integer products
of the truncation's remainders.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..spec import certificate as spec
from ..spec.moduli import MAX_MODULI, MODULI
from . import crt, modgemm, modprod, overlap, residues, scaling, symmetric, tuning
from ._common import block_view, span
from .errors import WorkspaceTooSmall
from .prepared import Prepared
from .workspace import (_host_tiles, _k_tiles, _note_workspace, _nothing, _product_layout,
                        _tile_list, choose_tiles, workspace_budget)


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
