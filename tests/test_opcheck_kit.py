"""The plugin author's test kit (``tapeflow.testing.opcheck``) tests what breaks kernels.

Each test plants one bug in an op registered in-process (a ``Library``, as a plugin
declares it) and checks that ``opcheck`` catches it and says where:

* non-contiguous inputs in three named layouts: an offset view (a kernel that reads
  its buffer from the start, on the CPU and on OpenCL), transposed (a kernel that reads
  memory order) and broadcast with stride 0 (a kernel that writes into its input);
* 0-d and empty inputs derived from the first sample, for elementwise ops;
* the integer and bool dtypes a kernel declares, with sample values cast to them;

and that it stops failing correct ops for what authors had to guess: a float64
reference for a float32 op, a ``samples`` function that hands the tapeflow DType to
NumPy, and ``ErrorSample.match`` as a regular expression.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import Library, register
from tapeflow.testing import ErrorSample, Sample, conformance, opcheck

FWD = ("forward", "noncontiguous")
#: the layouts, by the names failure messages give them
LAYOUTS = ("offset view", "transposed", "broadcast (stride 0)")
M = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
VEC = np.linspace(-1.0, 3.0, 7)

lib = Library("opkit")
#: what the recording kernels received: (shape, dtype name, host copy)
SEEN: list = []


def _record(x):
    SEEN.append((x.shape, x.dtype.name, np.array(x)))


# --- ops ------------------------------------------------------------------------------------

@lib.op()
def square(x, name=None):
    """x * x, with correct kernels."""


@lib.op()
def square_ignores_offset(x, name=None):
    """x * x, read from the start of x's buffer (the view's offset ignored)."""


@lib.op()
def square_memory_order(x, name=None):
    """x * x, read in memory order (right only when that is index order)."""


@lib.op()
def square_in_place(x, name=None):
    """x * x, written into x's own buffer."""


@lib.op()
def square_to_float16(x, name=None):
    """x * x, returned as float16 whatever the input dtype."""


@lib.op()
def checked_sqrt(x, name=None):
    """sqrt(x); InvalidArgumentError for negative x."""


@lib.op(elementwise=True)
def ew_square(x, name=None):
    """x * x, elementwise (recording the inputs)."""


@lib.op(elementwise=True)
def ew_add(x, y, name=None):
    """x + y, elementwise with broadcasting (recording the inputs)."""


@lib.op()
def plain_square(x, name=None):
    """x * x, not declared elementwise (recording the inputs)."""


@lib.op(elementwise=True)
def ew_square_by_max(x, name=None):
    """x * x, via x.max() (which an empty input does not have)."""


@lib.op(elementwise=True)
def ew_square_rows(x, name=None):
    """x * x, on x seen as rows (len(x): a 0-d input has none)."""


@lib.op()
def any_square(x, name=None):
    """x * x for floats, ints and bools (recording the inputs)."""


FLOATS = ("float32", "float64")


#: (device type, byte strides, byte offset) of every input the correct kernels received
LAYOUTS_SEEN: list = []


@lib.kernel(square, "cpu", dtypes=FLOATS)
def _square(x):
    LAYOUTS_SEEN.append(("cpu",) + conformance.samples._native_layout(x))
    return x * x


def _root(x):
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


@lib.kernel(square_ignores_offset, "cpu", dtypes=FLOATS)
def _square_ignores_offset(x):
    # The bug: the strides are honoured, but the data is taken from the start of the
    # allocation (as a C kernel handed the buffer without the view's offset would).
    v = np.lib.stride_tricks.as_strided(_root(x), shape=x.shape, strides=x.strides)
    return v * v


@lib.kernel(square_memory_order, "cpu", dtypes=FLOATS)
def _square_memory_order(x):
    flat = np.ravel(x, order="K")
    return (flat * flat).reshape(x.shape)


@lib.kernel(square_in_place, "cpu", dtypes=FLOATS)
def _square_in_place(x):
    np.multiply(x, x, out=x)      # saves an allocation: fails on a read-only broadcast view
    return x


@lib.kernel(square_to_float16, "cpu", dtypes=FLOATS)
def _square_to_float16(x):
    return (x * x).astype(np.float16)


@lib.kernel(checked_sqrt, "cpu", dtypes=FLOATS)
def _checked_sqrt(x):
    if np.any(x < 0):
        raise InvalidArgumentError(f"x must be non-negative, got {float(np.min(x))}")
    return np.sqrt(x)


@lib.kernel(ew_square, "cpu", dtypes=FLOATS)
def _ew_square(x):
    _record(x)
    return x * x


@lib.kernel(ew_add, "cpu", dtypes=FLOATS)
def _ew_add(x, y):
    _record(x)
    _record(y)
    return x + y


@lib.kernel(plain_square, "cpu", dtypes=FLOATS)
def _plain_square(x):
    _record(x)
    return x * x


@lib.kernel(ew_square_by_max, "cpu", dtypes=FLOATS)
def _ew_square_by_max(x):
    return x * x + 0 * np.max(x)        # ValueError on a size-0 input


@lib.kernel(ew_square_rows, "cpu", dtypes=FLOATS)
def _ew_square_rows(x):
    rows = x.reshape(len(x), -1)        # TypeError on a 0-d input
    return (rows * rows).reshape(x.shape)


@lib.kernel(any_square, "cpu", dtypes=FLOATS + ("int32", "bool"))
def _any_square(x):
    _record(x)
    return x * x


@lib.gradient(any_square)
def _any_square_grad(ctx, dy):
    return dy * 2.0 * ctx.inputs[0]


try:    # OpenCL kernels where that backend is installed: a correct one and the offset bug
    from tapeflow_opencl import runtime as _rt
except ImportError:
    _rt = None
else:
    @lib.kernel(square, "opencl", dtypes=FLOATS)
    def _square_cl(x):
        LAYOUTS_SEEN.append(("opencl", tuple(x.strides), x.offset))
        return _rt.elementwise("x0 * x0", x.dtype, x)

    @lib.kernel(square_ignores_offset, "opencl", dtypes=FLOATS)
    def _square_ignores_offset_cl(x):
        # The bug: x's strides, but offset 0 into x.base_data instead of x.offset.
        st, _ = _rt.layout(x)
        return _rt.elementwise("x0 * x0", x.dtype, _rt.view(x, x.shape, st, offset=0))

register(lib)


def _samples():
    return [Sample((M,), name="matrix"), Sample((VEC,), name="vector")]


def _fails(fn, samples, ref=np.square, devices=("cpu:0",), **kw):
    """The AssertionError message opcheck raises (it must raise)."""
    kw.setdefault("kinds", FWD)
    with pytest.raises(AssertionError) as ei:
        opcheck(fn, samples, ref=ref, devices=list(devices), **kw)
    return str(ei.value)


def _skip_without_kernel(fn, device):
    if device.split(":")[0] not in fn.op.kernels:
        pytest.skip(f"{fn.op.name} has no kernel for {device}")


# --- non-contiguous layouts -----------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_noncontiguous_tensor_builds_each_layout_on_the_device(tf_device, layout):
    assert conformance.LAYOUTS == LAYOUTS
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    if layout == "broadcast (stride 0)":
        x = conformance.broadcast_values(x)
    t = conformance.noncontiguous_tensor(x, tf_device, layout=layout)
    np.testing.assert_array_equal(t.numpy(), x)
    assert t.device == tf_device and t.dtype == tf.float32 and t.shape == (3, 4)
    strides, offset = conformance.samples._native_layout(t._data)
    if layout == "offset view":
        assert offset > 0                        # on OpenCL: pyopencl's Array.offset
    elif layout == "transposed":
        assert strides[0] < strides[1]           # memory order is not index order
    else:
        assert strides[0] == 0


def test_a_correct_op_passes_every_layout_and_its_kernel_receives_them(tf_device):
    _skip_without_kernel(square, tf_device)
    LAYOUTS_SEEN.clear()
    report = opcheck(square, _samples(), ref=np.square, devices=[tf_device], kinds=FWD)
    assert f"noncontiguous[square-float32-{tf_device}]" in report["passed"]
    typ = tf_device.split(":")[0]
    seen = [(st, off) for t, st, off in LAYOUTS_SEEN if t == typ]
    assert any(off > 0 for _, off in seen)                         # offset view
    assert any(len(st) == 2 and 0 < st[0] < st[1] for st, _ in seen)  # transposed
    assert any(st[0] == 0 for st, _ in seen)                       # broadcast (stride 0)


def test_offset_view_catches_a_kernel_that_ignores_the_offset(tf_device):
    _skip_without_kernel(square_ignores_offset, tf_device)
    opcheck(square_ignores_offset, _samples(), ref=np.square, devices=[tf_device],
            kinds=("forward",))                  # contiguous inputs: right
    msg = _fails(square_ignores_offset, _samples(), devices=[tf_device])
    assert "sample 0 'matrix' (non-contiguous inputs: offset view; argument 0)" in msg
    assert "non-contiguous inputs: transposed" not in msg
    assert "non-contiguous inputs: broadcast" not in msg
    msg = _fails(square_ignores_offset, [Sample((VEC,), name="vector")], devices=[tf_device])
    assert "sample 0 'vector' (non-contiguous inputs: offset view; argument 0)" in msg


def test_transposed_layout_catches_a_kernel_that_reads_memory_order():
    opcheck(square_memory_order, _samples(), ref=np.square, devices=["cpu:0"],
            kinds=("forward",))
    msg = _fails(square_memory_order, _samples())
    assert "(non-contiguous inputs: transposed; argument 0)" in msg
    assert "non-contiguous inputs: offset view" not in msg
    assert "non-contiguous inputs: broadcast" not in msg


def test_broadcast_layout_catches_a_kernel_that_writes_into_its_input():
    opcheck(square_in_place, _samples(), ref=np.square, devices=["cpu:0"], kinds=("forward",))
    msg = _fails(square_in_place, _samples())
    assert ("(non-contiguous inputs: broadcast (stride 0); argument 0: the first slice along "
            "axis 0 repeated)") in msg
    assert "output array is read-only" in msg
    assert "non-contiguous inputs: offset view" not in msg
    assert "non-contiguous inputs: transposed" not in msg


def test_every_failing_layout_is_listed():
    bad = Library("opkit_all")

    @bad.op()
    def raw(x, name=None):
        """x * x from a contiguous copy of the whole allocation: wrong for every view."""

    @bad.kernel(raw, "cpu", dtypes=FLOATS)
    def _raw(x):
        flat = np.ascontiguousarray(_root(x)).reshape(-1)[:x.size]
        return (flat * flat).reshape(x.shape)

    register(bad)
    msg = _fails(raw, [Sample((M,), name="matrix")])
    assert "3 non-contiguous layouts fail" in msg
    for layout in LAYOUTS:
        assert f"non-contiguous inputs: {layout}" in msg


# --- 0-d and empty inputs ------------------------------------------------------------------

def _shapes_seen():
    return {shape for shape, _, _ in SEEN}


def test_edge_cases_run_for_an_elementwise_op():
    SEEN.clear()
    report = opcheck(ew_square, [Sample((M,), name="matrix")], ref=np.square,
                     devices=["cpu:0"], kinds=("forward", "traced"))
    assert "forward[ew_square-float32-cpu:0]" in report["passed"]
    assert {(3, 4), (), (0, 4)} <= _shapes_seen()


def test_edge_cases_keep_broadcasting_inputs_compatible():
    SEEN.clear()
    opcheck(ew_add, [Sample((M, M[0]), name="row")], ref=np.add, devices=["cpu:0"],
            kinds=("forward",))
    assert {(), (0, 4), (4,)} <= _shapes_seen()
    zero_d, empty = conformance.edge_samples(Sample((M, M[0]), name="row"))
    assert [a.shape for a in zero_d.args] == [(), ()] and zero_d.args[0] == M[0, 0]
    assert [a.shape for a in empty.args] == [(0, 4), (4,)] and empty.grad_argnums == ()
    assert empty.name == "empty, from sample 0 'row'"


def test_edge_cases_catch_a_kernel_that_fails_on_empty_input():
    opcheck(ew_square_by_max, [Sample((M,), name="matrix")], ref=np.square,
            devices=["cpu:0"], kinds=FWD, edge_cases=False)
    msg = _fails(ew_square_by_max, [Sample((M,), name="matrix")])
    assert "empty, from sample 0 'matrix'" in msg and "ValueError" in msg


def test_edge_cases_catch_a_kernel_that_fails_on_0d_input():
    msg = _fails(ew_square_rows, [Sample((M,), name="matrix")])
    assert "0-d, from sample 0 'matrix'" in msg and "TypeError" in msg


def test_edge_cases_only_for_elementwise_ops_unless_asked():
    SEEN.clear()
    opcheck(plain_square, [Sample((M,))], ref=np.square, devices=["cpu:0"], kinds=("forward",))
    assert () not in _shapes_seen() and (0, 4) not in _shapes_seen()
    opcheck(plain_square, [Sample((M,))], ref=np.square, devices=["cpu:0"], kinds=("forward",),
            edge_cases=True)
    assert {(), (0, 4)} <= _shapes_seen()


# --- integer and bool dtypes ---------------------------------------------------------------

def test_declared_int_and_bool_dtypes_run_with_cast_values():
    SEEN.clear()
    x = np.array([[-1.6, -0.4, 0.0], [0.4, 1.5, 2.6]])
    report = opcheck(any_square, [Sample((x,), name="m")], ref=lambda a: a * a,
                     devices=["cpu:0"], kinds=("forward", "noncontiguous", "gradients"))
    for dt in ("float32", "float64", "int32", "bool"):
        assert f"forward[any_square-{dt}-cpu:0]" in report["passed"], report
        assert f"noncontiguous[any_square-{dt}-cpu:0]" in report["passed"], report
    assert "gradients[any_square-cpu:0]" in report["passed"]
    by_dtype = {}
    for _, dt, a in SEEN:
        by_dtype.setdefault(dt, []).append(a)
    np.testing.assert_array_equal(by_dtype["int32"][0], [[-2, 0, 0], [0, 2, 3]])
    np.testing.assert_array_equal(by_dtype["bool"][0], x > 0)
    # gradients are checked in float64 only: no integer or bool input beyond the forward
    # and non-contiguous runs (1 + 3 layouts each)
    assert len(by_dtype["int32"]) == len(by_dtype["bool"]) == 4
    # dtypes no kernel declares are not made up
    report = opcheck(square, [Sample((M,))], ref=np.square, devices=["cpu:0"],
                     kinds=("forward",))
    assert [p for p in report["passed"] if "int" in p or "bool" in p] == []
    report = opcheck(square, [Sample((M,))], ref=np.square, devices=["cpu:0"],
                     kinds=("forward",), dtypes=("float32", "int32"))
    assert report["skipped"] == [("forward[square-int32-cpu:0]",
                                  "the opkit::square kernel on 'cpu' does not declare int32")]


# --- references of any dtype -------------------------------------------------------------

def test_a_float64_reference_for_a_float32_op_passes():
    def ref64(x):
        return np.square(x.astype(np.float64))

    report = opcheck(square, _samples(), ref=ref64, devices=["cpu:0"], kinds=FWD)
    assert "forward[square-float32-cpu:0]" in report["passed"]
    # ... while a result of the wrong dtype is still reported
    msg = _fails(square_to_float16, [Sample((M,))], ref=ref64, kinds=("forward",))
    assert "result dtype float16 != reference dtype float64" in msg


def test_python_values_as_reference():
    report = opcheck(square, [Sample((VEC,)), Sample((np.array(1.5),), name="scalar")],
                     ref=lambda x: [float(v) ** 2 for v in x] if x.ndim else float(x) ** 2,
                     devices=["cpu:0"], kinds=("forward",))
    assert "forward[square-float32-cpu:0]" in report["passed"]


def test_reference_as_result_rules():
    f64 = np.array([1.0, 2.0])
    assert conformance.reference_as_result(f64, np.float32, tf.float32).dtype == np.float32
    # the result's dtype is not the case's: nothing is rounded, the mismatch shows
    assert conformance.reference_as_result(f64, np.float16, tf.float32).dtype == np.float64
    assert conformance.reference_as_result(2.5, np.float32).dtype == np.float32
    assert conformance.reference_as_result([1, 2], np.int32).dtype == np.int32
    assert conformance.reference_as_result(2.5, np.int32).dtype == np.float64   # not truncated
    assert conformance.reference_as_result(np.int64(3), np.int32, tf.int32).dtype == np.int64


# --- samples functions get a DType NumPy accepts ----------------------------------------

def test_a_samples_function_may_hand_the_dtype_to_numpy():
    got = []

    def samples(dtype, rng):
        assert dtype is tf.as_dtype(dtype.name) and dtype.np == np.dtype(dtype.name)
        got.append(dtype)
        return [Sample((np.ones(3, dtype=dtype) * np.arange(3, dtype=dtype),), name="ones"),
                Sample((rng.standard_normal((2, 3)).astype(dtype),), name="normal")]

    report = opcheck(square, samples, ref=np.square, devices=["cpu:0"], kinds=FWD)
    assert "forward[square-float32-cpu:0]" in report["passed"]
    assert tf.float32 in got and tf.float64 in got
    s = conformance.samples_for(conformance.OpSpec("s", square, np.square, samples),
                                tf.float32)
    assert [a.dtype for smp in s for a in smp.args] == [np.float32, np.float32]


# --- ErrorSample.match is a regular expression --------------------------------------------

NEG = np.array([-1.5, 2.0])


def _errors(*errs):
    return opcheck(checked_sqrt, [Sample((np.abs(M),))], ref=np.sqrt, devices=["cpu:0"],
                   errors=list(errs), kinds=("errors",))


def test_error_match_is_a_regular_expression():
    report = _errors(ErrorSample((NEG,), error=InvalidArgumentError,
                                 match=r"non-negative, got -\d+\.\d+"))
    assert report["passed"] == ["errors[checked_sqrt-cpu:0]"]
    _errors(ErrorSample((NEG,), error=InvalidArgumentError,
                        match=re.escape("got -1.5 [Op:opkit::checked_sqrt]")))


def test_error_match_meant_literally_is_reported_with_a_hint():
    with pytest.raises(AssertionError) as ei:
        _errors(ErrorSample((NEG,), error=InvalidArgumentError,
                            match="got -1.5 [Op:opkit::checked_sqrt]"))
    msg = str(ei.value)
    assert "the message lacks ['got -1.5 [Op:opkit::checked_sqrt]']" in msg
    assert "match is a regular expression" in msg and "re.escape" in msg


def test_an_invalid_error_match_is_reported():
    with pytest.raises(AssertionError, match=r"match='\(unbalanced' is not a valid regular "
                                             r"expression"):
        _errors(ErrorSample((NEG,), error=InvalidArgumentError, match="(unbalanced"))


def test_every_error_match_of_the_builtin_specs_compiles():
    for spec in conformance.collect_specs():
        for err in spec.errors:
            re.compile(err.match)
