"""The one interface every engine implements.

An engine computes stacks of 2-D float64 products with a :class:`~ozaki_backend.plan.Plan`
and nothing else: NumPy's call semantics (shapes, broadcasting, dtypes, ``out=``) are
settled before it is called (:mod:`ozaki_backend.semantics`), and which engine runs a
call is decided by :mod:`ozaki_backend.registry`. Each engine chooses the scheme's
pipeline itself (``plan.scheme``), and declines a call it cannot compute exactly (an
operand holding NaN or infinity) by returning False, after which the caller computes
the product natively — like a :mod:`scipy.fft` backend handing a call back.

Implementations: :class:`ozaki_backend.reference.engine.CpuEngine` (NumPy, the exact
reference) and :class:`ozaki_backend.cuda.engine.CudaEngine` (CuPy + NVRTC kernels).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

#: :meth:`Engine.product` outcomes: declined (an operand holds NaN/Inf; nothing useful
#: was written), done, done with some element overflowing to ±inf (finite operands:
#: the caller reports it as NumPy's floating-point error state says).
DECLINED, DONE, OVERFLOW = 0, 1, 2


class Engine:
    """Interface of an engine (subclass and override every method).

    Attributes
    ----------
    name : str
        ``"cpu"`` or ``"cuda"``: the value of the ``engine=`` option that selects it.
    array_types : tuple of str
        The array libraries whose arrays :meth:`product` takes directly (``"numpy"``,
        ``"cupy"``); the registry copies other operands through the host.
    """

    name = ""
    array_types: tuple = ()

    def availability(self) -> tuple[bool, str]:
        """``(usable, reason)`` in this process (never raises)."""
        raise NotImplementedError

    def product(self, a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None,
                bound3=None) -> bool:
        """``out3[i] = alpha * (a3[i] @ b3[i]) + beta * c3[i]`` for every stack index.

        Parameters
        ----------
        a3 : array (batch, m, k), b3 : array (batch, k, n)
            float64 operands of one of :attr:`array_types` (broadcast views allowed);
            for a complex product (``out3`` complex128, ``docs/spec.md`` §11) complex128
            operands, or one complex128 and one float64.
        plan : Plan
            For ``(m, k) @ (k, n)``; its scheme and options decide the bits.
        out3 : array (batch, m, n)
            float64 (complex128 for a complex product), same array type; every
            element is written when True is returned.
        alpha, beta : float
            BLAS scaling (``docs/spec.md`` §7); ``c3`` is read only when ``beta != 0``.
        c3 : array (batch, m, n) or None
        bound3 : array (batch, m, n) or None
            When given (``scheme="ozaki2"``, ``alpha == 1``, ``beta == 0``): receives a
            rigorous bound on ``|out3 - a3 @ b3|`` per element (``docs/spec.md`` §10;
            float64 for complex products too).

        Returns
        -------
        int
            :data:`DECLINED` (falsy) when an operand holds NaN or infinity: nothing
            useful was written and the caller computes the product natively;
            :data:`DONE`; :data:`OVERFLOW` when a product element overflowed to ±inf
            (only reported for NumPy results).
        """
        raise NotImplementedError

    def moduli_for(self, A, B, plan):
        """The moduli count ``plan`` uses for the 2-D product ``A @ B`` of this engine's
        array types: the plan's own count, or for ``precision="fp64"`` the fewest whose
        certificate meets the target a priori (``docs/spec.md`` §10.3); 20 when some
        element passes at no count (the product is then tested a posteriori)."""
        raise NotImplementedError

    def native_shortcut(self, plan, a, b, out=None):
        """A function ``f(a, b, out)`` that computes products of operands like ``a``,
        ``b`` (same types, shapes, strides, device; ``out`` None or of the same layout
        as the given one) natively *without reading them*, or None.

        Where this engine decides from the shape alone (or from what it remembers of
        the shape) that its native GEMM computes the product, the caller may keep
        ``f`` and call it directly next time, skipping the semantics, the plan and the
        engine's driver. ``f`` records what the engine records for such a product and
        returns the result (``out`` when given), or None when the decision is due to
        be made again or ``out`` overlaps an operand (the caller then forgets ``f`` and
        takes the full path). Default: None.
        """
        return None

    def describe(self, plan) -> str:
        """One line on how this engine would compute ``plan`` here (e.g. which GEMM
        path on this GPU); empty when there is nothing to say."""
        return ""

    def __repr__(self) -> str:
        ok, why = self.availability()
        return f"<{type(self).__name__} {self.name!r}: {'available' if ok else 'unavailable'} ({why})>"


# --------------------------------------------------------------------------- workspace

_WORKSPACE: ContextVar = ContextVar("ozaki_backend_workspace", default=None)


@contextmanager
def workspace_limit(nbytes):
    """Within the block, engines keep their device workspace within ``nbytes`` (an int;
    None: the engine's default budget). Speed only: results are bitwise the same."""
    token = _WORKSPACE.set(None if nbytes is None else int(nbytes))
    try:
        yield
    finally:
        _WORKSPACE.reset(token)


def requested_workspace():
    """The workspace budget in bytes asked for by the caller (``workspace=``), or None."""
    return _WORKSPACE.get()
