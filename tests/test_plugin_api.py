"""The decorator form of the plugin API (tapeflow.plugins.Library) end to end: ops,
kernels, gradients (overrides, conflicts, non-differentiable ops), dispatch through
the same path as a built-in, errors, tapeflow.ops namespaces, ``python -m tapeflow
info``, and Libraries shipped as real distributions found through entry points."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import (InvalidArgumentError, NotDifferentiableError, NotFoundError,
                             PluginConflictError)
from tapeflow.plugins import REQUIRED, Library, register
from tapeflow.testing import Sample, check_grads, opcheck


@pytest.fixture(autouse=True)
def _on_cpu(request):
    """The libraries defined here have CPU kernels only: every test runs on cpu:0,
    whatever the default device (a GPU, or TAPEFLOW_DEFAULT_DEVICE=opencl:0); the
    fast-path test places its tensors itself (a device scope takes the slow path)."""
    if request.function.__name__ == "test_the_op_function_dispatches_exactly_like_a_builtin":
        yield
        return
    with tf.device("cpu:0"):
        yield

FLOATS = ("float32", "float64")


def _cube_library(ns):
    lib = Library(ns)

    @lib.op()
    def cube(x, scale=1.0, name=None):
        """scale * x ** 3"""

    @lib.kernel(cube, "cpu", dtypes=FLOATS)
    def _cube_cpu(x, scale):
        return (x * x * x * scale).astype(x.dtype)

    @lib.gradient(cube)
    def _cube_grad(ctx, dy):
        x = ctx.inputs[0]
        return dy * (3.0 * ctx.attrs["scale"]) * x * x

    return lib, cube


def test_library_end_to_end():
    lib, cube = _cube_library("api_e2e")
    assert cube.op.name == "api_e2e::cube" and cube.op.attrs == {"scale": 1.0}
    assert cube.__name__ == "cube" and cube.__doc__ == "scale * x ** 3"
    assert cube.__module__ == __name__
    info = register(lib)
    assert info.status == "loaded" and info.ops == ["api_e2e::cube"]
    assert ("api_e2e::cube", "cpu") in info.kernels
    x = tf.constant([2.0, -1.0])
    assert cube(x).numpy().tolist() == [8.0, -1.0]
    assert cube(x, 2.0).numpy().tolist() == [16.0, -2.0]
    assert cube(x, scale=0.5, name="c").numpy().tolist() == [4.0, -0.5]
    # the op's namespace, and the very same function
    assert tf.ops.api_e2e.cube is cube and "cube" in dir(tf.ops.api_e2e)
    assert "api_e2e" in dir(tf.ops)
    # GradientTape, persistent, to second order
    v = tf.constant(np.array([2.0, -1.0]))
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(v)
        with tf.GradientTape() as inner:
            inner.watch(v)
            y = tf.reduce_sum(cube(v, scale=2.0))
        g = inner.gradient(y, v)
    assert g.numpy().tolist() == [24.0, 6.0]                 # 6 x^2
    assert outer.gradient(g, v).numpy().tolist() == [24.0, -12.0]   # 12 x
    # gradients_function, nested: third derivative of x^3 is 6
    d = tf.gradients_function
    d3 = d(lambda t: d(lambda u: d(lambda w: cube(w))(u)[0])(t)[0])(tf.constant(5.0, tf.float64))
    assert d3[0].numpy() == 6.0
    check_grads(lambda t: cube(t, scale=1.5), (np.array([0.3, -2.0]),), order=2)
    # the author's kit on the decorated op
    # (this library has a CPU kernel only: on another device opcheck would report the
    # missing kernel as a failure, as it should)
    report = opcheck(cube, [Sample((np.array([[1.0, -2.0], [0.5, 3.0]]),))],
                     ref=lambda x: x ** 3, op=cube.op.name, devices=["cpu:0"])
    assert "gradients[cube-cpu:0]" in report["passed"]


def _calls(fn):
    """Python-level function calls made by ``fn()`` (frames: wrappers would show), and
    calls of tapeflow's C core (``execute``, ``binary`` in C when it is built; in Python
    they are ``_execute_py``/``_binary_py``, and ``wrap`` makes the result Tensor)."""
    seen = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name != "wrap":
            name = frame.f_code.co_name
            seen.append(name[1:-3] if name in ("_execute_py", "_binary_py") else name)
        elif event == "c_call" and getattr(arg, "__module__", None) == "tapeflow.runtime._speedups":
            seen.append(arg.__name__)
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_the_op_function_dispatches_exactly_like_a_builtin():
    lib = Library("api_fast")

    @lib.op()
    def tanh(x, name=None):
        """np.tanh as a plugin op"""

    @lib.op()
    def add(x, y, name=None):
        """np.add as a plugin op"""

    lib.kernel(tanh, "cpu", dtypes=FLOATS)(np.tanh)
    lib.kernel(add, "cpu")(np.add)
    register(lib)
    x = tf.constant([0.5], device="cpu:0")
    tanh(x), tf.tanh(x), add(x, x), tf.add(x, x)           # warm caches
    # one frame for the public function, then the dispatcher, nothing in between
    assert _calls(lambda: tanh(x)) == ["<lambda>", "tanh", "execute"]
    assert _calls(lambda: tf.tanh(x)) == ["<lambda>", "tanh", "execute"]
    assert _calls(lambda: add(x, x)) == ["<lambda>", "add", "binary"]
    assert _calls(lambda: tf.add(x, x)) == ["<lambda>", "add", "binary"]
    # and the same semantics: weak Python scalars, promotion, conversion
    assert add(x, 2.0).dtype == tf.float32 and add(2, x).numpy().tolist() == [2.5]
    with tf.device("cpu:0"):            # (host values go to the default device)
        assert add([1.0], np.array([2.0])).numpy().tolist() == [3.0]


def test_signature_forms():
    lib = Library("api_sig")

    @lib.op("api_sig::pick", inputs=("a", "b"), attrs={"axis": REQUIRED, "keep": False})
    def pick(a, b, *, axis, keep=False):
        """explicit inputs and attrs"""

    @lib.op
    def stack(*values, axis=0):
        """a variadic input (bare decorator, name from the function)"""

    @lib.op("norm")                                    # short names get the namespace
    def norm(x, *, ord, name=None):
        """a required keyword-only attribute"""

    assert pick.op.inputs == ("a", "b") and pick.op.attrs == {"axis": REQUIRED, "keep": False}
    assert stack.op.name == "api_sig::stack" and stack.op.inputs == ("*values",)
    assert stack.op.variadic and stack.op.attrs == {"axis": 0}
    assert norm.op.name == "api_sig::norm" and norm.op.attrs == {"ord": REQUIRED}
    import inspect
    assert str(inspect.signature(pick)) == "(a, b, keep=False, *, axis, name=None)"
    assert str(inspect.signature(stack)) == "(*values, axis=0, name=None)"
    assert str(inspect.signature(norm)) == "(x, *, ord, name=None)"
    lib.kernel(stack, "cpu")(lambda *vs, axis: np.stack(vs, axis))
    lib.kernel(norm, "cpu")(lambda x, ord: np.asarray(np.linalg.norm(x, ord), x.dtype))
    register(lib)
    a, b = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
    assert stack(a, b).shape == (2, 2) and stack([a, b], axis=1).numpy().tolist() == [[1, 3],
                                                                                       [2, 4]]
    assert norm(b, ord=1).numpy() == 7.0
    with pytest.raises(TypeError, match="ord"):
        norm(b)

    with pytest.raises(ValueError, match="outside this Library's namespace 'api_sig'"):
        lib.op("other::f")(lambda x: None)
    with pytest.raises(TypeError, match="never runs"):
        @lib.op()
        def busy(x):
            return x * 2
    with pytest.raises(TypeError, match=r"\*\*kw"):
        @lib.op()
        def kw(x, **kw):
            """"""
    with pytest.raises(ValueError, match="identifier"):
        Library("not a name")


def test_gradient_override_of_a_builtin_and_the_conflict_without_it():
    tanh_op = tf.plugins.get_op("Tanh")
    original = tanh_op.grad
    lib = Library("api_override")
    lib.gradient("Tanh")(lambda ctx, dy: dy * 0.0)
    with pytest.raises(PluginConflictError) as e:
        register(lib)
    msg = str(e.value)
    assert "Tanh already has a gradient" in msg and "'tapeflow'" in msg
    assert "api_override" in msg and "override=True" in msg
    assert tanh_op.grad is original                    # nothing half-registered

    lib2 = Library("api_override2")

    @lib2.gradient("Tanh", override=True)
    def _straight_through(ctx, dy):                   # e.g. a straight-through estimator
        return dy
    try:
        register(lib2)
        g = tf.gradients_function(tf.tanh)(tf.constant(3.0))[0]
        assert g.numpy() == 1.0
    finally:
        tanh_op.grad = original
    assert abs(tf.gradients_function(tf.tanh)(tf.constant(3.0))[0].numpy() - 0.0098660) < 1e-6


def test_a_failed_plugin_leaves_existing_ops_untouched():
    from tapeflow.runtime import registry
    tanh_op = tf.plugins.get_op("Tanh")
    saved = tanh_op.kernels["cpu"]
    lib = Library("api_rollback")
    lib.kernel("Tanh", "cpu", override=True)(lambda x: x * 0)
    lib.gradient("Tanh")(lambda ctx, dy: dy)          # conflicts: the plugin fails
    try:
        with pytest.raises(PluginConflictError):
            register(lib)
        assert tanh_op.kernels["cpu"] is saved
    finally:
        tanh_op.kernels["cpu"] = saved
        registry.refresh_fast(tanh_op, "cpu")
    assert tf.tanh(tf.constant([1.0])).numpy()[0] != 0


def test_non_differentiable_and_missing_gradients():
    lib = Library("api_nodiff")

    @lib.op()
    def bucket(x):
        """floor(x): declared non-differentiable"""

    @lib.op()
    def wobble(x):
        """differentiable, but nobody wrote its gradient"""

    lib.kernel(bucket, "cpu", dtypes=FLOATS)(np.floor)
    lib.kernel(wobble, "cpu", dtypes=FLOATS)(np.sin)
    lib.non_differentiable(bucket)
    register(lib)
    assert bucket.op.differentiable is False
    x = tf.constant([1.5, 2.5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = bucket(x) * x
    assert tape.gradient(y, x).numpy().tolist() == [1.0, 2.0]     # only through `* x`
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = bucket(x)
    assert tape.gradient(y, x) is None
    with pytest.raises(NotDifferentiableError, match="No gradient is defined for op "
                                                     "api_nodiff::wobble"):
        tf.gradients_function(wobble)(x)


def test_missing_device_kernel_lists_devices_and_dtypes():
    lib = Library("api_gpuonly")

    @lib.op()
    def fused(x, y):
        """kernels for accelerators only"""

    lib.kernel(fused, ("cuda", "opencl"), dtypes=("float16", "float32"))(lambda x, y: x)
    register(lib)
    with pytest.raises(NotFoundError) as e:
        fused(tf.constant([1.0]), tf.constant([2.0]))
    msg = str(e.value)
    assert "No kernel for op api_gpuonly::fused on device type 'cpu' with dtype float32" in msg
    assert "device='cuda'; dtype in [float16, float32]" in msg
    assert "device='opencl'; dtype in [float16, float32]" in msg
    assert msg.endswith("[Op:api_gpuonly::fused] on cpu:0")
    lib.kernel(fused, "cpu", dtypes=("float64",))(np.add)   # registered: takes effect now
    with pytest.raises(NotFoundError, match=r"with dtype float32\. Registered kernels: "
                                            r"device='cuda'.*device='cpu'; dtype in \[float64\]"):
        fused(tf.constant([1.0]), tf.constant([2.0]))
    assert fused(tf.constant([1.0], tf.float64), 2.0).numpy().tolist() == [3.0]


@pytest.mark.parametrize("bad,match", [
    (lambda ctx, dy: (dy, dy), r"returned 2 gradient\(s\) but the op has 1 input"),
    (lambda ctx, dy: tf.reduce_sum(dy),
     r"gradient of shape \(\) for input 0 \('x'\) of shape \(3,\)"),
    (lambda ctx, dy: tf.cast(dy, tf.float32),
     r"returned a float32 gradient for input 0 \('x'\) of dtype float64"),
    (lambda ctx, dy: "a string", r"returned str 'a string' for input 0 \('x'\)"),
    (lambda ctx, dy: {"x": dy}, r"returned dict .* for input 0 \('x'\)"),
    (lambda ctx, dy: object(), r"returned object .* for input 0 \('x'\), which is not "
                               r"convertible to a float64 tensor"),
    (lambda ctx, dy: b"raw", r"returned bytes b'raw' for input 0"),
])
def test_a_wrong_gradient_is_an_error_naming_the_op(bad, match):
    ns = f"api_badgrad{abs(hash(match)) % 10**6}"
    lib = Library(ns)

    @lib.op()
    def f(x):
        """identity with a broken gradient"""

    lib.kernel(f, "cpu")(lambda x: x)
    lib.gradient(f)(bad)
    register(lib)
    with pytest.raises(InvalidArgumentError, match=match) as e:
        tf.gradients_function(f)(tf.constant([1.0, 2.0, 3.0], tf.float64))
    # names the op, the plugin that registered it and the function
    assert f"The gradient function of op '{ns}::f' (registered by '<in-process {ns}>'" \
        in str(e.value)
    assert "test_plugin_api." in str(e.value)


def test_infer_explains_bad_input():
    lib = Library("api_infer")

    @lib.op()
    def dot(a, b):
        """inner product of two vectors"""

    lib.kernel(dot, "cpu")(np.dot)

    @lib.infer(dot)
    def _dot_infer(shapes, dtypes, attrs):
        if shapes[0] != shapes[1]:
            raise InvalidArgumentError(f"dot needs vectors of one length, got {shapes[0]} "
                                       f"and {shapes[1]}")
        return [((), dtypes[0])]

    register(lib)
    with pytest.raises(InvalidArgumentError, match=r"dot needs vectors of one length, got "
                                                   r"\(2,\) and \(3,\).*\[Op:api_infer::dot\]"):
        dot(tf.constant([1.0, 2.0]), tf.constant([1.0, 2.0, 3.0]))


def test_namespaces_report_what_is_missing():
    with pytest.raises(AttributeError, match="tapeflow.ops has no namespace 'api_nothing'"):
        tf.ops.api_nothing
    lib, cube = _cube_library("api_ns")
    register(lib)
    with pytest.raises(AttributeError, match="tapeflow.ops.api_ns has no op 'cub'"):
        tf.ops.api_ns.cub
    assert "api_ns" in repr(tf.ops.api_ns) and "cube" in repr(tf.ops.api_ns)


def test_plugin_op_in_python_m_tapeflow_info():
    # the example plugin (plugins/gelu), installed by the test command
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    r = subprocess.run([sys.executable, "-m", "tapeflow", "info", "--no-smoke", "--ops", "gelu::*",
                        "--all-device-types"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    rows = {ln.split()[1]: ln.split() for ln in r.stdout.splitlines()
            if ln.startswith("  loaded ")}
    assert rows["gelu"][2:5] == ["tapeflow-gelu", "0.1.0", "2"], r.stdout
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Kernel coverage"))
    # columns for every device type (--all-device-types), "cuda (unavailable)" without CuPy
    header = [h for h in lines[head + 1].split() if not h.startswith("(")]
    table = {ln.split()[0]: ln.split() for ln in lines[head + 3:] if ln.startswith("  gelu::")}
    assert set(table) == {"gelu::gelu", "gelu::gelu_grad"}
    for dev in ("cpu", "cuda", "opencl"):
        assert table["gelu::gelu"][header.index(dev)] == "f16,f32,f64", r.stdout


# --- Libraries as real distributions, found through entry points --------------------------

def _make_dist(root, name, module_src, entry_point, version="1.0"):
    (root / f"{name}.py").write_text(textwrap.dedent(module_src))
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[tapeflow]\n{name} = {entry_point}\n")


LIB_SRC = """
import numpy as np
from tapeflow.plugins import Library
lib = Library("{ns}")

@lib.op("{ns}::twice", override={override})
def twice(x):
    '''2 x'''

@lib.kernel(twice, "cpu", override={override})
def _twice_cpu(x):
    return x * {factor}
"""

CHECK = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import tapeflow as tf
for p in tf.plugins.plugin_report():
    if p.name.startswith("lib"):
        print("STATUS", p.name, p.distribution, p.version, p.status, "|", p.reason)
for x in w:
    print("WARN", str(x.message).splitlines()[0])
twice = tf.ops.shared.twice
print("TWICE", twice(tf.constant([3.0])).numpy().tolist(), twice.__module__)
"""


def _run(root, code=CHECK):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env["TAPEFLOW_DEFAULT_DEVICE"] = "cpu:0"      # the libraries have CPU kernels only
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_library_entry_point_conflict_names_both_distributions(tmp_path):
    _make_dist(tmp_path, "liba", LIB_SRC.format(ns="shared", override=False, factor=2),
               "liba:lib", version="1.2")
    _make_dist(tmp_path, "libb", LIB_SRC.format(ns="shared", override=False, factor=3),
               "libb:lib", version="0.9")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "STATUS liba liba 1.2 loaded" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("STATUS libb"))
    assert "libb 0.9 failed | PluginConflictError: Op 'shared::twice' is defined by both " \
           "'liba' and 'libb'" in line
    assert "WARN tapeflow plugin 'libb' (libb 0.9) failed and was skipped" in r.stdout
    assert "TWICE [6.0] liba" in r.stdout               # liba's op and function, untouched


def test_library_entry_point_explicit_override(tmp_path):
    _make_dist(tmp_path, "liba", LIB_SRC.format(ns="shared", override=False, factor=2),
               "liba:lib")
    _make_dist(tmp_path, "libb", LIB_SRC.format(ns="shared", override=True, factor=3),
               "libb:lib")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "STATUS liba liba 1.0 loaded" in r.stdout and "STATUS libb libb 1.0 loaded" in r.stdout
    # the replacement is not silent: one warning for the op, one for its kernel
    assert "WARN 'libb' replaced op 'shared::twice' registered by 'liba' (override=True)" \
        in r.stdout
    assert "WARN 'libb' replaced the kernel of op 'shared::twice' on device type 'cpu' " \
        "registered by 'liba'" in r.stdout
    assert r.stdout.count("WARN") == 2
    assert "TWICE [9.0] libb" in r.stdout               # libb replaced op and kernel


KERNEL_ONLY = """
import numpy as np
from tapeflow.plugins import Library
lib = Library("libk")
lib.kernel("shared::twice", "cpu", override={override})(lambda x: x * 10)
"""


@pytest.mark.parametrize("override", [False, True])
def test_library_kernel_conflict_names_both_distributions(tmp_path, override):
    _make_dist(tmp_path, "liba", LIB_SRC.format(ns="shared", override=False, factor=2),
               "liba:lib")
    _make_dist(tmp_path, "libk", KERNEL_ONLY.format(override=override), "libk:lib", "2.0")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    if override:
        assert "STATUS libk libk 2.0 loaded" in r.stdout and "TWICE [30.0] liba" in r.stdout
    else:
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("STATUS libk"))
        assert "failed | PluginConflictError: Kernel for (shared::twice, cpu) is registered " \
               "by both 'liba' and 'libk'" in line
        assert "TWICE [6.0] liba" in r.stdout
