"""One kernel contract (issue 44, docs/backends.md section 3): every backend's kernel
modules expose ``build(ctx) -> {op name: KernelSpec | function}`` and every plugin
registers the table with ``registry.add_kernels(device_type, table)``.

Checked here: the ``build`` signature of the core's kernel modules and of the CPU,
CUDA and OpenCL backends' (and the gelu plugin's) by introspection; that the core's
tables hold KernelSpecs and that the core imports no backend's library;
``add_kernels``' semantics; KernelSpec's validation errors; lazy kernel specs (resolved
once, the entry rebound); the deprecated ``rebind_kernel``; and a third-party backend
written as docs/backends.md teaches.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import kernels
from tapeflow.errors import (InvalidArgumentError, InvalidTypeError, NotFoundError,
                             PluginConflictError, UnimplementedError)
from tapeflow.plugins import BuildContext, KernelSpec, Library, get_op, hookimpl, register
from tapeflow.runtime.registry import LazyKernel

ROOT = pathlib.Path(__file__).resolve().parents[1]


# --- one build(ctx) signature ---------------------------------------------------------------

def _kernel_modules():
    """``[(module name, why it may be absent)]`` of every kernel module with a table."""
    mods = [f"tapeflow.kernels.{m}" for m in kernels.MODULES]
    mods += ["tapeflow_cuda_cupy.kernels", "tapeflow_cuda_cupy.k_cuda",
             "tapeflow_cuda_cupy.cudnn_conv", "tapeflow_cuda_cupy.capture_gemm"]
    mods += sorted(f"tapeflow_opencl.{p.stem}" for p in
                   (ROOT / "backends/opencl/tapeflow_opencl").glob("k_*.py"))
    mods += [f"tapeflow_gelu.{m}" for m in ("k_cpu", "k_cuda", "k_opencl")]
    return mods


@pytest.mark.parametrize("name", _kernel_modules())
def test_every_kernel_module_has_one_build_signature(name):
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{name} is not installed here: {e}")
    params = list(inspect.signature(mod.build).parameters.values())
    assert [p.name for p in params] == ["ctx"], (name, params)
    assert params[0].default is inspect.Parameter.empty


def test_the_cpu_backend_registers_one_table():
    from tapeflow_cpu_numpy import plugin
    ctx = plugin.build_context()
    assert isinstance(ctx, BuildContext) and ctx.xp is np and ctx.device_type == "cpu"
    src = inspect.getsource(plugin.tapeflow_register_kernels)
    assert src.count("add_kernels(") == 1 and "add_kernel(" not in src


def test_the_cuda_backend_registers_lazy_specs_in_one_call():
    try:
        from tapeflow_cuda_cupy import kernels as cuda_kernels
        from tapeflow_cuda_cupy import plugin
    except ImportError as e:
        pytest.skip(f"tapeflow-cuda-cupy is not installed: {e}")
    src = inspect.getsource(plugin.tapeflow_register_kernels)
    assert src.count("add_kernels(") == 1 and "add_kernel(" not in src
    table = cuda_kernels.lazy_table()
    assert table and all(type(s.fn) is LazyKernel for s in table.values())
    assert table["Add"].dtypes == get_op("Add").kernels["cpu"].dtypes


@pytest.mark.parametrize("name", kernels.MODULES)
def test_the_core_tables_hold_kernel_specs(name):
    table = kernels.module(name).build(BuildContext(np, "cpu"))
    bad = {op: s for op, s in table.items() if not isinstance(s, KernelSpec)}
    assert not bad, bad


def test_build_all_adds_the_bfloat16_variant_only_when_asked():
    plain = kernels.build_all(BuildContext(np, "cpu"))
    assert "bfloat16" not in [d.name for d in plain["Exp"].dtypes]
    bf = kernels.build_all(BuildContext(np, "cpu", bfloat16_variant=kernels.compute_in_float32))
    exp = bf["Exp"]
    assert exp.dtypes[0].name == "bfloat16" and exp.fn is np.exp
    assert exp.variants[tf.bfloat16.np].__wrapped__ is np.exp
    assert bf["Reshape"].variants is None            # BF16_NATIVE: no round trip


def test_the_core_imports_no_backend_library():
    """cupyx (and cupy) come from the CUDA backend's services, not from the core."""
    bad = []
    for p in sorted((ROOT / "core/tapeflow/kernels").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{p.name}: {n}" for n in names if n.split(".")[0] in ("cupy", "cupyx",
                                                                          "pyopencl")]
    assert not bad, bad


def test_the_services_reach_the_kernels():
    calls = []

    class Special:
        @staticmethod
        def erf(x):
            calls.append("erf")
            return x

    def special(op):
        calls.append(op)
        return Special

    def scatter_add(out, idx, vals):
        calls.append("scatter_add")
        np.add.at(out, idx, vals)

    ctx = BuildContext(np, "cpu", special=special, scatter_add=scatter_add)
    table = kernels.build_all(ctx, ("math", "array"))
    assert table["Erf"].fn(np.array([0.5])) == 0.5
    out = table["UnsortedSegmentSum"].fn(np.array([1.0, 2.0, 3.0]), np.array([0, 0, 1]),
                                         num_segments=2)
    np.testing.assert_array_equal(out, [3.0, 3.0])
    assert calls == ["Erf", "erf", "scatter_add"]


# --- KernelSpec --------------------------------------------------------------------------------

def test_kernel_spec_validation_errors():
    with pytest.raises(InvalidTypeError, match="must be callable"):
        KernelSpec("np.add")
    with pytest.raises(InvalidArgumentError, match="layouts"):
        KernelSpec(np.add, layouts="tiled")
    with pytest.raises(InvalidArgumentError, match="not one of its dtypes"):
        KernelSpec(np.add, ("float32",), variants={"float64": np.add})
    with pytest.raises(InvalidTypeError, match="is not callable"):
        KernelSpec(np.add, ("float32",), variants={"float32": None})
    with pytest.raises(InvalidTypeError, match="resolve must be callable"):
        KernelSpec.lazy(None)
    with pytest.raises(Exception):
        KernelSpec(np.add, ("float99",))
    s = KernelSpec(np.add, ("float32", "float64"), variants={"float64": np.subtract},
                   out=True, layouts="contiguous")
    assert s.variants == {np.dtype(np.float64): np.subtract}
    assert (s.out, s.fresh, s.layouts, s.needs_device) == (True, False, "contiguous", False)
    assert KernelSpec.of(s) is s and KernelSpec.of(np.add).fn is np.add


# --- add_kernels ---------------------------------------------------------------------------------

_counter = [0]


def _lib(*ops):
    """A Library with one elementwise op per name (``x`` -> ``x``), a fresh namespace."""
    _counter[0] += 1
    lib = Library(f"kcontract{_counter[0]}")
    for name in ops:
        lib.op(name=name, elementwise=True)(_identity_signature)
    return lib


def _identity_signature(x, name=None):
    """x"""


def _twice(x):
    return x * 2


class _TablePlugin:
    def __init__(self, device_type, table, **kwargs):
        self.device_type, self.table, self.kwargs, self.skipped = device_type, table, kwargs, None

    @hookimpl
    def tapeflow_register_kernels(self, registry):
        self.skipped = registry.add_kernels(self.device_type, self.table, **self.kwargs)


def test_add_kernels_registers_a_table():
    lib = _lib("a", "b")
    register(lib)
    ns = lib.namespace
    plugin = _TablePlugin("cpu", {f"{ns}::a": _twice,
                                  f"{ns}::b": KernelSpec(_twice, ("float64",), fresh=True)})
    register(plugin, name=f"{ns}-kernels")
    a, b = get_op(f"{ns}::a").kernels["cpu"], get_op(f"{ns}::b").kernels["cpu"]
    assert a.fn is _twice and a.dtypes is None and a.device_type == "cpu"
    assert b.fresh and [d.name for d in b.dtypes] == ["float64"]
    assert a.source == b.source == f"<in-process {ns}-kernels>"
    np.testing.assert_array_equal(get_op(f"{ns}::a")(tf.constant([1.0, 2.0])).numpy(), [2, 4])
    assert plugin.skipped == []


def test_add_kernels_missing_ops():
    lib = _lib("a")
    register(lib)
    ns = lib.namespace
    plugin = _TablePlugin("cpu", {f"{ns}::a": _twice, f"{ns}::absent": _twice},
                          missing="skip")
    register(plugin, name=f"{ns}-skip")
    assert plugin.skipped == [f"{ns}::absent"]
    assert get_op(f"{ns}::a").kernels["cpu"].fn is _twice
    with pytest.raises(NotFoundError, match="absent"):
        register(_TablePlugin("cpu", {f"{ns}::absent": _twice}), name=f"{ns}-error")
    with pytest.raises(InvalidTypeError, match="missing"):
        register(_TablePlugin("cpu", {f"{ns}::a": _twice}, missing="ignore"),
                 name=f"{ns}-bad")


def test_add_kernels_skip_keeps_the_ops_the_plugin_declares():
    _counter[0] += 1
    ns = f"kcontract{_counter[0]}"

    class Both:
        skipped = None

        @hookimpl
        def tapeflow_register_ops(self, registry):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)   # (Library's way)
                registry.add_op(tf.plugins.OpDef(f"{ns}::mine", elementwise=True))

        @hookimpl
        def tapeflow_register_kernels(self, registry):
            Both.skipped = registry.add_kernels("cpu", {f"{ns}::mine": _twice},
                                                missing="skip")

    register(Both(), name=ns)
    assert Both.skipped == [] and get_op(f"{ns}::mine").kernels["cpu"].fn is _twice


def test_add_kernels_errors_and_overrides():
    lib = _lib("a")
    register(lib)
    ns = lib.namespace
    with pytest.raises(InvalidTypeError, match="kernel for .*::a on cpu"):
        register(_TablePlugin("cpu", {f"{ns}::a": "not a function"}), name=f"{ns}-nf")
    register(_TablePlugin("cpu", {f"{ns}::a": _twice}), name=f"{ns}-first")
    with pytest.raises(PluginConflictError, match="override=True"):
        register(_TablePlugin("cpu", {f"{ns}::a": np.negative}), name=f"{ns}-second")
    assert get_op(f"{ns}::a").kernels["cpu"].fn is _twice        # nothing half-registered
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                            # (PluginOverrideWarning)
        register(_TablePlugin("cpu", {f"{ns}::a": np.negative}, override=True),
                 name=f"{ns}-third")
    assert get_op(f"{ns}::a").kernels["cpu"].fn is np.negative


# --- lazy kernels --------------------------------------------------------------------------------

def _f64_kernel(x):
    return x + 64


def test_a_lazy_spec_resolves_once_and_rebinds_its_entry():
    lib = _lib("lazy")
    register(lib)
    ns = lib.namespace
    op = get_op(f"{ns}::lazy")
    made = []

    def resolve():
        made.append(1)
        return KernelSpec(_twice, variants={"float64": _f64_kernel})

    spec = KernelSpec.lazy(resolve, ("float32", "float64"))
    register(_TablePlugin("cpu", {op.name: spec}), name=f"{ns}-lazy")
    entry = op.kernels["cpu"]
    assert type(entry.fn) is LazyKernel and made == []          # nothing made yet
    assert "None" in repr(entry.fn)          # (unresolved)
    # the first call runs the variant of its dtype (float64), through the stand-in
    np.testing.assert_array_equal(op(tf.constant([1.0], tf.float64)).numpy(), [65.0])
    assert made == [1] and entry.fn is _twice                   # rebound: no stand-in
    assert entry.variants == {np.dtype(np.float64): _f64_kernel}
    assert op.fast["cpu"][np.dtype(np.float32)] is _twice
    np.testing.assert_array_equal(op(tf.constant([1.0], tf.float32)).numpy(), [2.0])
    np.testing.assert_array_equal(op(tf.constant([1.0], tf.float64)).numpy(), [65.0])
    assert made == [1]
    with pytest.raises(NotFoundError):
        op(tf.constant([1], tf.int32))                           # declared up front


def test_a_lazy_spec_that_fails_raises_and_retries():
    lib = _lib("fails")
    register(lib)
    ns = lib.namespace
    op = get_op(f"{ns}::fails")
    state = {"ok": False, "tries": 0}

    def resolve():
        state["tries"] += 1
        if not state["ok"]:
            raise UnimplementedError("the library is not installed")
        return _twice

    register(_TablePlugin("cpu", {op.name: KernelSpec.lazy(resolve)}), name=f"{ns}-fails")
    with pytest.raises(UnimplementedError, match="not installed"):
        op(tf.constant([1.0]))
    assert type(op.kernels["cpu"].fn) is LazyKernel
    state["ok"] = True
    tries = state["tries"]       # (the C core's fast path retries a failing call in Python)
    np.testing.assert_array_equal(op(tf.constant([1.0])).numpy(), [2.0])
    np.testing.assert_array_equal(op(tf.constant([1.0])).numpy(), [2.0])
    assert state["tries"] == tries + 1 and op.kernels["cpu"].fn is _twice


def test_a_replaced_lazy_entry_is_not_rebound():
    lib = _lib("replaced")
    register(lib)
    ns = lib.namespace
    op = get_op(f"{ns}::replaced")
    spec = KernelSpec.lazy(lambda: _twice)
    register(_TablePlugin("cpu", {op.name: spec}), name=f"{ns}-1")
    stand_in = op.kernels["cpu"].fn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register(_TablePlugin("cpu", {op.name: np.negative}, override=True), name=f"{ns}-2")
    np.testing.assert_array_equal(stand_in(np.array([3.0])), [6.0])   # still callable
    assert op.kernels["cpu"].fn is np.negative


def test_rebind_kernel_is_deprecated_and_still_works():
    lib = _lib("rebind")
    register(lib)
    ns = lib.namespace
    register(_TablePlugin("cpu", {f"{ns}::rebind": _twice}), name=f"{ns}-k")
    with pytest.warns(DeprecationWarning, match="KernelSpec.lazy"):
        assert tf.plugins.rebind_kernel(f"{ns}::rebind", "cpu", _twice, np.negative)
    assert get_op(f"{ns}::rebind").kernels["cpu"].fn is np.negative
    with pytest.warns(DeprecationWarning):
        assert not tf.plugins.rebind_kernel(f"{ns}::rebind", "cpu", _twice, np.positive)


# --- a third-party backend, as docs/backends.md teaches ------------------------------------------

THIRD_PARTY = '''
import numpy as np
import tapeflow as tf
from tapeflow.plugins import Backend, BuildContext, KernelSpec, hookimpl, register


class Box:
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    size = property(lambda self: self.a.size)
    ndim = property(lambda self: self.a.ndim)


class BoxBackend(Backend):
    name = "box"
    device_type = "box"

    def list_devices(self):
        return [{"index": 0, "is_gpu": False, "description": "boxed NumPy"}]

    def to_host(self, array, device):
        return np.array(array.a)

    def from_host(self, array, device):
        return Box(np.array(array))


class BoxKernels:
    def __init__(self, xp, scale):
        self.xp, self.scale = xp, scale

    def mul(self, x, y):
        return Box(self.xp.multiply(x.a, y.a) * self.scale)

    def fill(self, shape, value, dtype, device=None):
        return Box(self.xp.full(shape, value, dtype.np))

    def sqrt(self):                  # a lazy kernel's resolve
        print("compiled sqrt")
        return KernelSpec(self.sqrt_kernel)

    def sqrt_kernel(self, x):
        return Box(self.xp.sqrt(x.a))


def build(ctx):
    k = BoxKernels(ctx.xp, ctx.get("scale", 1.0))
    return {"Mul": KernelSpec(k.mul, ("float32",)),
            "Fill": KernelSpec(k.fill, needs_device=True),
            "Sqrt": KernelSpec.lazy(k.sqrt, ("float32",)),
            "BoxOnlyOp": k.mul}


class Plugin:
    @hookimpl
    def tapeflow_register_backends(self, registry):
        registry.add_backend(BoxBackend())

    @hookimpl
    def tapeflow_register_kernels(self, registry):
        print("skipped", registry.add_kernels("box", build(BuildContext(np, "box")),
                                              missing="skip"))


register(Plugin())
with tf.device("box:0"):
    x = tf.fill([2], 4.0)
    print(x.device, (x * x).numpy(), tf.sqrt(x).numpy(), tf.sqrt(x).numpy())
'''


def test_a_third_party_backend_registers_and_runs_ops():
    r = subprocess.run([sys.executable, "-c", THIRD_PARTY], capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:3] == [
        "skipped ['BoxOnlyOp']", "compiled sqrt",
        "/job:localhost/replica:0/task:0/device:BOX:0 [16. 16.] [2. 2.] [2. 2.]"], r.stdout
