"""Operands of other array-API libraries (array-api-strict, PyTorch, JAX): the result
comes back in the operands' own library, bitwise equal to the NumPy result, or a
TypeError names the type and the supported libraries. Never a silent NumPy array."""

import numpy as np
import pytest

import ozaki_backend as ob
from bits import assert_same_bits

try:
    import array_api_strict as xp
except ImportError:   # the GPU machine may not have it: only its tests skip
    xp = None
needs_strict = pytest.mark.skipif(xp is None, reason="array-api-strict is not installed "
                                  "(the test extra has it)")

rng = np.random.default_rng(13)


def M(*shape):
    return rng.standard_normal(shape)


def to_numpy(x):
    return np.from_dlpack(x)


@needs_strict
@pytest.mark.parametrize("sa, sb", [((30, 40), (40, 20)), ((3, 8, 5), (5, 7)),
                                    ((40,), (40, 6)), ((9, 40), (40,)), ((40,), (40,))])
def test_array_api_strict_operands_give_array_api_strict_results(sa, sb):
    A, B = M(*sa), M(*sb)
    want = ob.matmul(A, B, engine="cpu")
    got = ob.matmul(xp.asarray(A), xp.asarray(B), engine="cpu")
    assert type(got) is type(xp.asarray(A)) and got.dtype == xp.float64
    assert tuple(got.shape) == np.shape(want)
    assert_same_bits(to_numpy(got), np.asarray(want))


@needs_strict
def test_result_stays_on_the_operands_device_and_out_is_filled():
    dev = xp.Device("device1")
    A, B = M(12, 30), M(30, 8)
    want = ob.matmul(A, B, engine="cpu")
    a, b = xp.asarray(A, device=dev), xp.asarray(B, device=dev)
    got = ob.matmul(a, b, engine="cpu")
    assert got.device == dev
    assert_same_bits(to_numpy(got), want)
    out = xp.zeros((12, 8), device=dev)
    assert ob.matmul(a, b, out=out, engine="cpu") is out
    assert_same_bits(to_numpy(out), want)


@needs_strict
def test_bound_comes_back_in_the_operands_library():
    A, B = M(12, 30), M(30, 8)
    want, want_bound = ob.matmul(A, B, engine="cpu", return_bound=True)
    got, bound = ob.matmul(xp.asarray(A), xp.asarray(B), engine="cpu", return_bound=True)
    assert type(bound) is type(got) is type(xp.asarray(A))
    assert_same_bits(to_numpy(got), want)
    assert_same_bits(to_numpy(bound), want_bound)
    A[0, 0] = np.nan   # computed natively: no certificate, an infinite bound
    got, bound = ob.matmul(xp.asarray(A), xp.asarray(B), return_bound=True)
    assert type(bound) is type(got) and np.isinf(to_numpy(bound)).all()


@needs_strict
def test_a_foreign_operand_with_a_numpy_one_gives_the_foreign_type():
    A, B = M(12, 30), M(30, 8)
    got = ob.matmul(xp.asarray(A), B, engine="cpu")
    assert type(got) is type(xp.asarray(A))
    assert_same_bits(to_numpy(got), ob.matmul(A, B, engine="cpu"))


@needs_strict
def test_float32_operands_are_computed_as_numpy_would_and_stay_foreign():
    A, B = M(12, 30).astype(np.float32), M(30, 8).astype(np.float32)
    got = ob.matmul(xp.asarray(A), xp.asarray(B))
    assert got.dtype == xp.float32
    assert_same_bits(to_numpy(got), A @ B)


class _DLPackOnly:
    """An array type with DLPack but no array-API namespace."""

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, **kw):
        return self._x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


def test_unsupported_array_types_raise_type_error_naming_them():
    A, B = M(4, 5), M(5, 3)
    with pytest.raises(TypeError, match=r"_DLPackOnly.*supported: NumPy \(CPU\) and CuPy"):
        ob.matmul(_DLPackOnly(A), B)


@needs_strict
def test_operands_of_two_foreign_libraries_raise_type_error():
    class Other(_DLPackOnly):
        def __array_namespace__(self, api_version=None):
            return xp

    with pytest.raises(TypeError, match="different array libraries"):
        ob.matmul(xp.asarray(M(4, 5)), Other(M(5, 3)))


@needs_strict
def test_operands_on_an_unsupported_device_raise_type_error():
    class Elsewhere(_DLPackOnly):
        def __array_namespace__(self, api_version=None):
            return xp

        def __dlpack_device__(self):
            return (14, 0)   # kDLOneAPI

    with pytest.raises(TypeError, match="DLPack type 14"):
        ob.matmul(Elsewhere(M(4, 5)), Elsewhere(M(5, 3)))


def test_torch_cpu_tensors_give_torch_tensors():
    torch = pytest.importorskip("torch")
    A, B = M(20, 30), M(30, 10)
    got = ob.matmul(torch.from_numpy(A), torch.from_numpy(B), engine="cpu")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert_same_bits(got.numpy(), ob.matmul(A, B, engine="cpu"))


def test_jax_cpu_arrays_give_jax_arrays():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    A, B = M(20, 30), M(30, 10)
    got = ob.matmul(jnp.asarray(A), jnp.asarray(B), engine="cpu")
    assert isinstance(got, jax.Array) and got.dtype == jnp.float64
    assert_same_bits(np.asarray(got), ob.matmul(A, B, engine="cpu"))


@pytest.mark.gpu
def test_torch_cuda_tensors_are_computed_on_the_gpu_and_stay_there():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    A, B = M(200, 300), M(300, 100)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    got = ob.matmul(a, b)
    assert isinstance(got, torch.Tensor) and got.is_cuda and got.device == a.device
    assert_same_bits(got.cpu().numpy(), ob.matmul(A, B, engine="cpu"))


class _Namespace:
    """A minimal array-API namespace for :class:`_Wrapped` (what the result needs)."""

    @staticmethod
    def from_dlpack(x, device=None):
        return _Wrapped(x)

    @staticmethod
    def asarray(x, device=None):
        return _Wrapped(x)


class _Wrapped(_DLPackOnly):
    """A foreign array type around a NumPy or CuPy array, with DLPack and a namespace."""

    device = None

    def __array_namespace__(self, api_version=None):
        return _Namespace


def test_cuda_operands_without_cupy_say_how_to_install():
    from ozaki_backend.cuda import availability

    if availability()[0]:
        pytest.skip("CuPy and a GPU are usable here")

    class OnCuda(_Wrapped):
        def __dlpack_device__(self):
            return (2, 0)   # kDLCUDA

    with pytest.raises(ob.EngineUnavailableError, match=r"ozaki_backend\[cuda13\]"):
        ob.matmul(OnCuda(M(4, 5)), OnCuda(M(5, 3)))


def test_a_foreign_namespace_gets_its_result_through_its_from_dlpack():
    A, B = M(12, 30), M(30, 8)
    got = ob.matmul(_Wrapped(A), _Wrapped(B), engine="cpu")
    assert type(got) is _Wrapped and isinstance(got._x, np.ndarray)
    assert_same_bits(got._x, ob.matmul(A, B, engine="cpu"))


@pytest.mark.gpu
def test_cuda_operands_of_a_foreign_library_are_computed_on_their_gpu():
    cupy = pytest.importorskip("cupy")
    A, B = M(300, 200), M(200, 100)
    got = ob.matmul(_Wrapped(cupy.asarray(A)), _Wrapped(cupy.asarray(B)))
    assert type(got) is _Wrapped and isinstance(got._x, cupy.ndarray)
    assert_same_bits(cupy.asnumpy(got._x), ob.matmul(A, B, engine="cpu"))
