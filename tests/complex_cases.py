"""Complex products whose real embedding has elements of one or two terms (``docs/spec.md``
§11.4); shared by the CPU engine's and the CUDA engine's complex tests."""

import numpy as np

from ozaki_backend.testing import phi_matrix

#: The keys of :func:`direct_cases`.
DIRECT_CASES = ("diagonal", "permutation", "lagged", "diagonal rows", "mixed")


def direct_cases(rng, n=40):
    """``{name: (A, B)}``: a diagonal scaling with ``d`` over ten decades (every element
    ``x d``: two real terms per part), a scaled permutation, a difference operator
    (Sterbenz: native is exact), the diagonal on the left, and a factor whose first
    columns are diagonal while the rest are dense (direct elements next to an integer
    product)."""
    def cmat(shape):
        return phi_matrix(shape, -1.0, rng) + 1j * phi_matrix(shape, -1.0, rng)
    X = cmat((n, n))
    d = 10.0 ** rng.uniform(-5, 5, n) * np.exp(2j * np.pi * rng.random(n))
    P = np.zeros((n, n), dtype=complex)
    P[rng.permutation(n), np.arange(n)] = d
    W = np.cumsum(X, axis=1)
    D = np.eye(n, k=1) - np.eye(n) + 0j
    M = cmat((n, n))
    M[:, :10] = np.diag(d)[:, :10]
    return {"diagonal": (X, np.diag(d)), "permutation": (X, P), "lagged": (W, D),
            "diagonal rows": (np.diag(d), X), "mixed": (X, M)}
