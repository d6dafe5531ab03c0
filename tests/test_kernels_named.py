"""The array-module-generic kernels are named, module-level code (issue 35).

Each module of ``tapeflow.kernels`` holds one class (``MathKernels``, ``ReduceKernels``,
...) built around the array module ``xp``, with one documented method per kernel; its
``table()`` maps op names to KernelSpecs of those bound methods or of the array module's
own functions (``xp.add``), and ``build(ctx)`` is that table. So a kernel has a name in
tracebacks and profiles (``NNKernels.relu``, not ``build.<locals>.relu``) and can be
unit-tested alone.
"""

import numpy as np
import pytest

from tapeflow import dtypes, kernels
from tapeflow.errors import InvalidArgumentError
from tapeflow.kernels.array import ArrayKernels
from tapeflow.kernels.linalg import LinalgKernels
from tapeflow.kernels.math import MathKernels
from tapeflow.kernels.nn import NNKernels
from tapeflow.kernels.nn_fused import FusedNNKernels
from tapeflow.kernels.optim import OptimKernels
from tapeflow.kernels.random import RandomKernels
from tapeflow.kernels.reduce import ReduceKernels
from tapeflow.plugins import BuildContext, KernelSpec, get_op

CTX = BuildContext(np, "cpu")
CLASSES = {"math": MathKernels, "reduce": ReduceKernels, "linalg": LinalgKernels,
           "array": ArrayKernels, "nn": NNKernels, "random": RandomKernels,
           "optim": OptimKernels, "nn_fused": FusedNNKernels}


def _table_fns(name):
    """``[(op, key, fn)]``: every callable of module ``name``'s table built for NumPy
    (``fn`` and its variants)."""
    out = []
    for op, spec in kernels.module(name).build(CTX).items():
        assert isinstance(spec, KernelSpec), (op, spec)
        out.append((op, "fn", spec.fn))
        out.extend((op, str(d), f) for d, f in (spec.variants or {}).items())
    return out


def test_every_kernel_module_has_its_class():
    assert set(CLASSES) == set(kernels.MODULES)
    for name, cls in CLASSES.items():
        assert getattr(kernels.module(name), cls.__name__) is cls


@pytest.mark.parametrize("name", kernels.MODULES)
def test_every_kernel_is_a_named_documented_method_or_an_xp_function(name):
    cls = CLASSES[name]
    bad = []
    for op, key, fn in _table_fns(name):
        if isinstance(fn, np.ufunc) or getattr(np, getattr(fn, "__name__", ""), None) is fn:
            continue                    # the array module's own function, used as it is
        func = getattr(fn, "__func__", None)
        if getattr(fn, "__self__", None).__class__ is not cls or func is None:
            bad.append(f"{op}[{key}]: {fn!r} is not a method of {cls.__name__}")
            continue
        qual = func.__qualname__
        if "<locals>" in qual or qual != f"{cls.__name__}.{func.__name__}":
            bad.append(f"{op}[{key}]: qualname {qual}")
        if func.__code__.co_qualname != qual:
            bad.append(f"{op}[{key}]: code qualname {func.__code__.co_qualname}")
        doc = (func.__doc__ or "").strip()
        if not doc:
            bad.append(f"{op}[{key}]: {qual} has no docstring")
        if getattr(cls, func.__name__) is not func:
            bad.append(f"{op}[{key}]: {qual} is not importable as a class attribute")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", kernels.MODULES)
def test_build_is_the_class_table(name):
    cls = CLASSES[name]
    built = kernels.module(name).build(CTX)
    table = cls(np).table()
    assert list(built) == list(table)
    for op, spec in built.items():
        other = table[op]
        assert getattr(spec.fn, "__qualname__", None) == \
            getattr(other.fn, "__qualname__", None), op
        for k in ("dtypes", "needs_device", "fresh", "out", "layouts"):
            assert getattr(spec, k) == getattr(other, k), (op, k)


def test_the_cpu_backend_registers_the_named_kernels():
    assert get_op("Relu").kernels["cpu"].fn.__qualname__ == "NNKernels.relu"
    assert get_op("Sum").kernels["cpu"].fn.__qualname__ == "ReduceKernels.sum"
    assert get_op("Add").kernels["cpu"].fn is np.add           # no wrapper on the hot path
    assert get_op("GatherV2").kernels["cpu"].fn.__qualname__ == "ArrayKernels.gather"


def test_relu_alone():
    k = NNKernels(np)
    x = np.array([-2.0, -0.0, 0.5, 3.0], np.float32)
    out = k.relu(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(k.relu_grad(np.ones(4, np.float32), x), [0, 0, 1, 1])


def test_floordiv_on_infinities_alone():
    k = MathKernels(np)
    x = np.array([np.inf, -np.inf, -1.0, 1.0, np.inf, 5.0])
    y = np.array([2.0, 2.0, np.inf, -np.inf, np.inf, 2.0])
    with np.errstate(invalid="ignore"):
        out = k.floordiv(x, y)
    np.testing.assert_array_equal(out[:3], [np.inf, -np.inf, -0.0])
    assert np.signbit(out[2]) and np.signbit(out[3]) and out[3] == 0
    assert np.isnan(out[4]) and out[5] == 2.0


def test_integer_division_by_zero_alone():
    with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
        MathKernels(np).floordiv(np.array([4, 5]), np.array([2, 0]))
    with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
        MathKernels(np).floormod(np.array([4]), np.array(0))


def test_a_reduction_alone():
    k = ReduceKernels(np)
    x = np.arange(2 * 20 * 3, dtype=np.float32).reshape(2, 20, 3)
    np.testing.assert_allclose(k.sum(x, axis=(1,), keepdims=False), x.sum(axis=1))  # BLAS path
    np.testing.assert_array_equal(k.mean(np.array([-3, -4, 5]), axis=None, keepdims=False),
                                  np.array(0))        # integer mean truncates toward zero
    with pytest.raises(InvalidArgumentError, match="max of zero elements"):
        k.max(np.zeros((0, 3)), axis=(0,), keepdims=False)


def test_a_scan_and_a_matmul_alone():
    a = ArrayKernels(np)
    np.testing.assert_array_equal(a.cumsum(np.array([1, 2, 3]), 0, True, False), [0, 1, 3])
    np.testing.assert_array_equal(a.cumprod(np.array([1, 2, 3]), 0, True, True), [6, 3, 1])
    m = LinalgKernels(np)
    np.testing.assert_array_equal(m.matmul(np.eye(2), np.ones((3, 2)), False, True),
                                  np.ones((2, 3)))
    with pytest.raises(ValueError, match="rank >= 2"):
        m.matmul(np.ones(2), np.ones((2, 2)), False, False)


def test_random_kernels_take_their_bit_source():
    calls = []

    def raw64(n, key, counter):
        calls.append((n, key, counter))
        return random_module_host(n, key, counter)

    random_module_host = kernels.module("random").host_raw64
    mine = RandomKernels(np, raw64).random_normal((5,), dtypes.float64, 7, 3, 0.0, 1.0)
    ref = kernels.module("random").build(CTX)["RandomStandardNormal"].fn(
        (5,), dtypes.float64, 7, 3, 0.0, 1.0)
    np.testing.assert_array_equal(mine, ref)
    assert calls == [(6, 7, 3)]
