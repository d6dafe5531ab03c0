"""Elementwise fusion (``tapeflow.tracing.graph_fusion``, the ``"fuse"`` graph pass).

Each check runs a function through ``tf.function`` with and without the pass and
compares: exactly for arithmetic, within a few ulps where a math-library function
(exp, tanh) is compiled into a different kernel. On ``cpu:0`` and ``opencl:0`` (skipped
with the reason when absent); the CUDA kernel's source is generated without a GPU and,
where a C++ compiler exists, its operation is compiled for the host and run.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.tracing.graph_fusion import ElementwiseSpec, Step

DEVICES = ["cpu:0", "opencl:0"]
FUSED = ("dce", "fuse")
PLAIN = ("dce",)


@pytest.fixture(params=DEVICES)
def device(request):
    d = request.param
    if d not in tf.config.list_devices():
        from tapeflow.runtime import devices as _devs
        reason = None
        try:
            _devs.get_device(d)
        except Exception as e:
            reason = str(e)
        pytest.skip(f"{d} is not available: {reason}")
    return d


def _both(fn, *args):
    """(fused results, unfused results, the fused graph) of ``fn(*args)``."""
    fused = tf.function(fn, passes=FUSED)
    plain = tf.function(fn, passes=PLAIN)
    fused(*args)                 # the trace (runs eagerly)
    a = fused(*args)             # the replay of the fused graph
    b = plain(*args)
    plain(*args)
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return ([x.numpy() for x in a], [x.numpy() for x in b],
            fused.get_concrete_function(*args).graph)


def _const(device, value, dtype=np.float32):
    with tf.device(device):
        return tf.constant(np.asarray(value, dtype=dtype))


def _fused_nodes(graph):
    return [n for n in graph.nodes if n.kind == "fused"]


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_arithmetic_chain_is_one_kernel_and_exact(device):
    x = _const(device, _rand((64, 33)))

    def f(x):
        y = x * 1.5 + 0.5
        y = y * y - 0.25
        y = -tf.nn.relu(y)
        return tf.abs(tf.minimum(y * 0.9 + 0.1, 1.0))
    got, want, g = _both(f, x)
    assert g.ops() == ["Fused[Mul,Add,Mul,Sub,Relu,Neg,Mul,Add,Minimum,Abs]"]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], f(x).numpy())       # and the eager function's


def test_transcendental_chain(device):
    x = _const(device, _rand((1000,)))

    def f(x):
        return tf.exp(-tf.nn.relu(tf.tanh(x * 1.5 + 0.5) ** 2 - 0.25)) * 0.9 + 0.1
    got, want, g = _both(f, x)
    assert len(_fused_nodes(g)) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=4e-7, atol=0)


def test_graph_dump_shows_the_fused_node(device):
    x = _const(device, [1.0, 2.0])
    f = tf.function(lambda x: tf.sqrt(x * x + 1.0), passes=FUSED)
    text = str(f.get_concrete_function(x).graph)
    assert "= Fused[Mul,Add,Sqrt](%0, %" in text
    assert "_nodes" not in text
    plain = tf.function(lambda x: tf.sqrt(x * x + 1.0), passes=PLAIN)
    assert "Fused" not in str(plain.get_concrete_function(x).graph)


def test_broadcasting_and_strided_inputs(device):
    x = _const(device, _rand((6, 5)))
    col = _const(device, _rand((6, 1), 1))
    row = _const(device, _rand((5,), 2))
    xt = tf.transpose(_const(device, _rand((5, 6), 3)))     # a strided view

    def f(x, col, row, xt):
        return (x * col + row) * xt - 2.0
    got, want, g = _both(f, x, col, row, xt)
    assert len(_fused_nodes(g)) == 1
    np.testing.assert_array_equal(got[0], want[0])
    ref = (x.numpy() * col.numpy() + row.numpy()) * xt.numpy() - np.float32(2.0)
    np.testing.assert_array_equal(got[0], ref)


def test_intermediates_of_another_shape_stay_outside(device):
    a = _const(device, _rand((5,)))
    b = _const(device, _rand((4, 5), 1))

    def f(a, b):
        return (tf.exp(a) + 1.0) * b + b     # exp(a)+1 has shape [5], the rest [4, 5]
    got, want, g = _both(f, a, b)
    for n in _fused_nodes(g):
        assert len({tuple(g.meta[o][0]) for o in n.outputs}) == 1
    assert [n.op.name for n in _fused_nodes(g)[-1].attrs["_nodes"]] == ["Mul", "Add"]
    np.testing.assert_allclose(got[0], want[0], rtol=4e-7)


def test_cast_comparisons_and_select(device):
    i = _const(device, np.arange(-6, 6).reshape(3, 4), np.int32)
    y = _const(device, _rand((3, 4)))

    def f(i, y):
        xf = tf.cast(i, tf.float32) * 0.5
        keep = tf.logical_and(xf > -1.0, tf.logical_not(tf.equal(i, 2)))
        out = tf.where(keep, xf + y, -y)
        return out, keep, tf.cast(out * 10.0, tf.int32) + i
    got, want, g = _both(f, i, y)
    assert len(_fused_nodes(g)) == 1
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert got[1].dtype == np.bool_ and got[2].dtype == np.int32


def test_integer_dtypes_wrap_like_the_unfused_kernels(device):
    a = _const(device, np.arange(-100, 100, 7), np.int8)

    def f(a):
        return (a * a + a) * 3 - a          # int8 wraps around at every step
    got, want, g = _both(f, a)
    assert len(_fused_nodes(g)) == 1
    np.testing.assert_array_equal(got[0], want[0])


def test_a_diamond_with_several_live_values(device):
    x = _const(device, _rand((7, 9)))

    def f(x):
        a = x * 2.0
        b = a + 1.0
        c = a * b                         # a and b live together
        return tf.sqrt(tf.abs(c - a)) + b * c
    got, want, g = _both(f, x)
    assert len(_fused_nodes(g)) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=2e-7)
    np.testing.assert_array_equal(got[0], f(x).numpy())


def test_a_select_of_bools_whose_condition_dies_there(device):
    x = _const(device, _rand((50,)))

    def f(x):
        a, b = x > 1.0, x < -1.0
        c = x > 0.0                       # the last computed: its buffer is reused first
        return tf.where(c, a, b)
    got, want, g = _both(f, x)
    assert len(_fused_nodes(g)) == 1 and got[0].dtype == np.bool_
    np.testing.assert_array_equal(got[0], want[0])


def test_intermediates_used_outside_become_outputs(device):
    x = _const(device, _rand((8,)))
    y = _const(device, _rand((8,), 1))

    def f(x, y):
        t = x * y                        # used by the group and by a reduction
        u = t + 1.0
        s = tf.reduce_sum(t)
        return u * 2.0, s, t             # t is also returned
    got, want, g = _both(f, x, y)
    (node,) = _fused_nodes(g)
    assert len(node.outputs) == 2 and g.ops()[0].startswith("Fused[")
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_an_outside_consumer_between_members_blocks_the_merge(device):
    x = _const(device, _rand((8,)))

    def f(x):
        a = x * 2.0 + 1.0
        s = tf.reduce_sum(a)             # needs a before the second half runs
        return (a - s) * 3.0 + 1.0
    got, want, g = _both(f, x)
    ops = g.ops()
    assert ops.index("Sum") < ops.index([o for o in ops if o.startswith("Fused[Sub")][0])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_gradients_through_a_fused_function(device):
    x = _const(device, _rand((16,)))
    w = _const(device, _rand((16,), 1))

    def f(x, w):
        return tf.reduce_sum(tf.tanh(x * w + 0.5) * x)
    fused = tf.function(f, passes=FUSED)
    fused(x, w)
    assert _fused_nodes(fused.get_concrete_function(x, w).graph)
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = fused(x, w)
    gx, gw = tape.gradient(y, [x, w])
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y2 = f(x, w)
    ex, ew = tape.gradient(y2, [x, w])
    np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), ex.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), ew.numpy(), rtol=1e-6)


def test_training_step_gradients_inside_are_fused_and_equal(device):
    x = _const(device, _rand((4, 3)))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.nn.relu(x * 2.0 - 0.5) * x)
        return tape.gradient(y, x)
    got, want, g = _both(step, x)
    assert _fused_nodes(g)
    np.testing.assert_array_equal(got[0], want[0])


def test_a_chain_with_an_op_the_backend_does_not_fuse(device):
    a = _const(device, np.arange(1, 9), np.int32)

    def f(a):
        return (a * 3 + 1) // 2 * 5 - a     # FloorDiv of ints checks its divisor
    got, want, g = _both(f, a)
    assert "FloorDiv" in g.ops()
    np.testing.assert_array_equal(got[0], want[0])


# --- the pass itself ----------------------------------------------------------------------

def test_the_fused_node_keeps_the_original_nodes():
    x = tf.constant([1.0, 2.0])
    f = tf.function(lambda x: tf.exp(x) * 2.0, passes=FUSED)
    (node,) = _fused_nodes(f.get_concrete_function(x).graph)
    assert node.op is None and node.device is x._device and node.kind == "fused"
    assert [n.op.name for n in node.attrs["_nodes"]] == ["Exp", "Mul"]
    assert node.outputs == node.attrs["_nodes"][-1].outputs


# --- CUDA: source generation without a GPU -------------------------------------------------

def _cuda_fusion():
    return pytest.importorskip("tapeflow_cuda_cupy.fusion")


def test_cuda_kernel_definition():
    fusion = _cuda_fusion()
    f32, i32, b = np.dtype("float32"), np.dtype("int32"), np.dtype("bool")
    spec = ElementwiseSpec(
        [((4, 3), f32), ((3,), f32), ((4, 3), i32)],
        [Step("Mul", (0, 1), {}, f32, (4, 3)),                       # v3
         Step("Greater", (3, 1), {}, b, (4, 3)),                     # v4
         Step("Cast", (2,), {"dtype": tf.float32}, f32, (4, 3)),     # v5
         Step("SelectV2", (4, 3, 5), {}, f32, (4, 3)),               # v6
         Step("Relu", (6,), {}, f32, (4, 3))], [6, 7], (4, 3))       # v7
    ins, outs, op, name = fusion.kernel_definition(spec)
    assert ins == "float32 x0, float32 x1, int32 x2"
    assert outs == "float32 out0, float32 out1"
    assert op.splitlines() == [
        "const float v3 = (float)(x0 * x1);  // Mul",
        "const bool v4 = (bool)(v3 > x1);  // Greater",
        "const float v5 = (float)(x2);  // Cast",
        "const float v6 = (float)(v4 ? v3 : v5);  // SelectV2",
        "const float v7 = (float)((isnan(v6) || v6 > (float)0) ? v6 : (float)0);  // Relu",
        "out0 = v6;", "out1 = v7;"]
    assert name.startswith("tapeflow_fused_")
    bad = ElementwiseSpec([((2,), np.dtype("int32"))] * 2,
                          [Step("FloorDiv", (0, 1), {}, np.dtype("int32"), (2,))], [2], (2,))
    assert fusion.kernel_definition(bad) is None


_HOST_PRELUDE = """
#include <cmath>
using namespace std;
"""


def _host_run(fusion, spec, arrays):
    """Compile the CUDA operation for the host (one loop over contiguous, pre-broadcast
    inputs) and run it: what the kernel computes per element, without a GPU."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler to run the CUDA operation on the host")
    ins, outs, op, _ = fusion.kernel_definition(spec)
    ctype = fusion.CTYPES
    params, refs = [], []
    for j, (_, d) in enumerate(spec.inputs):
        params.append(f"const {ctype[np.dtype(d).name]}* p{j}")
        refs.append(f"const {ctype[np.dtype(d).name]}& x{j} = p{j}[i];")
    for j, o in enumerate(spec.outputs):
        params.append(f"{ctype[spec.value_dtype(o).name]}* q{j}")
        refs.append(f"{ctype[spec.value_dtype(o).name]}& out{j} = q{j}[i];")
    src = (_HOST_PRELUDE + f'extern "C" void run(long n, {", ".join(params)}) {{\n'
           "  for (long i = 0; i < n; i++) {\n    " + "\n    ".join(refs) + "\n    "
           + op.replace("\n", "\n    ") + "\n  }\n}\n")
    import tempfile
    d = tempfile.mkdtemp()
    so = os.path.join(d, "k.so")
    with open(os.path.join(d, "k.cpp"), "w") as fh:
        fh.write(src)
    subprocess.run([cxx, "-O1", "-shared", "-fPIC", "-o", so, os.path.join(d, "k.cpp")],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(so)
    shape = tuple(spec.shape)
    n = int(np.prod(shape))
    ins = [np.ascontiguousarray(np.broadcast_to(np.asarray(a), shape)) for a in arrays]
    outs = [np.empty(shape, spec.value_dtype(o)) for o in spec.outputs]
    lib.run(ctypes.c_long(n), *[a.ctypes.data_as(ctypes.c_void_p) for a in ins + outs])
    return outs


def test_cuda_operation_computes_the_unfused_results_on_the_host():
    """The CUDA fused kernel's C++ body, compiled for the host, against the traced
    function's results; traced on cpu:0 (the fusion spec is the same on every device;
    the host run needs host values, whatever the default device)."""
    fusion = _cuda_fusion()
    x = tf.constant(_rand((50,)), device="cpu:0")
    i = tf.constant(np.arange(-25, 25, dtype=np.int32), device="cpu:0")

    def f(x, i):
        y = tf.maximum(x * 1.5 + 0.5, tf.cast(i, tf.float32) * 0.1)
        keep = tf.logical_or(y > 0.2, tf.equal(i, 3))
        z = tf.where(keep, tf.nn.relu(y - 0.25), -y)
        return z * z - 1.0, keep, tf.cast(z * 8.0, tf.int32) * i
    ff = tf.function(f, passes=FUSED)
    want = [t.numpy() for t in ff(x, i)]
    g = ff.get_concrete_function(x, i).graph
    (node,) = _fused_nodes(g)
    spec = node.attrs["_spec"]
    env = {g.args[0]: x.numpy(), g.args[1]: i.numpy()}
    for n in g.nodes:
        if n.kind == "const":      # (a device array on a GPU: fetched, never np.asarray)
            env[n.outputs[0]] = n.device.backend.to_host(n.value, n.device)
    got = _host_run(fusion, spec, [env[v] for v in node.inputs])
    for a, o in zip(got, node.outputs):
        np.testing.assert_array_equal(a, want[g.outputs.index(o)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_signed_zero_and_abs(device, dtype):
    vals = np.array([np.nan, -np.nan, -0.0, 0.0, -1.5, 2.0, np.inf, -np.inf], dtype)
    x = _const(device, vals, dtype)
    y = _const(device, vals[::-1].copy(), dtype)

    def f(x, y):
        m = tf.maximum(x * 1.0, y) - tf.minimum(y, x)
        return tf.abs(-x * 1.0), tf.math.is_nan(m + 0.0), tf.sign(-y * 1.0)
    got, want, g = _both(f, x, y)
    assert _fused_nodes(g)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()        # bit for bit: NaN payloads, -0.0
