"""One matrix in every memory layout the host path must take without a host copy;
shared by the dispatch (CPU engine) and CUDA host-path tests."""

import numpy as np

#: The keys of :func:`layouts`.
LAYOUTS = ("C", "F", "T", "strided", "rows", "cols")


def layouts(x):
    """``x`` as C-ordered, Fortran-ordered, a transposed view, a strided view, and
    views whose rows (columns) are contiguous but spaced apart."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]))
    wide[:, ::2] = x
    padded = np.zeros((x.shape[0] + 5, x.shape[1] + 7))
    padded[:x.shape[0], :x.shape[1]] = x
    padded_t = np.zeros((x.shape[1] + 7, x.shape[0] + 5))
    padded_t[:x.shape[1], :x.shape[0]] = x.T
    return {"C": np.ascontiguousarray(x), "F": np.asfortranarray(x),
            "T": np.ascontiguousarray(x.T).T, "strided": wide[:, ::2],
            # contiguous rows (columns) spaced apart: packed straight into pinned chunks
            "rows": padded[:x.shape[0], :x.shape[1]],
            "cols": padded_t[:x.shape[1], :x.shape[0]].T}
