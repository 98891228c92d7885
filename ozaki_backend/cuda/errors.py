"""The one exception the CUDA engine raises, and the translation of CuPy's errors into it.

Device out-of-memory, CUDA runtime/driver errors, cuBLAS errors and kernel compile
errors all surface as :class:`CudaEngineError` (with the original exception chained),
so that callers of ``matmul(engine="cuda")`` catch one type. Nothing is cached from a
failed call (workspaces are released, failed modules are not kept), so the engine stays
usable for the next call unless the CUDA context itself is broken (a sticky error such
as an illegal address, which no library can recover from).
"""

from __future__ import annotations

from contextlib import contextmanager


class CudaEngineError(RuntimeError):
    """A failure inside the CUDA engine: out of memory, CUDA/cuBLAS error, compile error."""


class WorkspaceTooSmall(CudaEngineError):
    """Even the smallest tile of a product needs more device memory than its workspace
    budget allows (the product is then computed natively, with a warning)."""


def _cupy_error_types():
    """The CuPy exception classes that mean "the device path failed" (never imported
    at module import: CuPy may be absent)."""
    import cupy
    from cupy.cuda import compiler, driver, runtime

    types = [cupy.cuda.memory.OutOfMemoryError, runtime.CUDARuntimeError,
             driver.CUDADriverError, compiler.CompileException]
    try:
        from cupy_backends.cuda.libs import cublas

        types.append(cublas.CUBLASError)
    except Exception:  # pragma: no cover - older layouts
        pass
    return tuple(types)


@contextmanager
def translating(what: str = "CUDA engine"):
    """Re-raise CuPy's device errors as :class:`CudaEngineError` naming ``what``."""
    try:
        yield
    except CudaEngineError:
        raise
    except Exception as exc:
        try:
            types = _cupy_error_types()
        except Exception:  # pragma: no cover - CuPy broken mid-call
            raise exc
        if isinstance(exc, types):
            import cupy

            kind = ("device out of memory"
                    if isinstance(exc, cupy.cuda.memory.OutOfMemoryError)
                    else type(exc).__name__)
            raise CudaEngineError(f"{what} failed: {kind}: {exc}") from exc
        raise
