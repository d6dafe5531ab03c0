"""The CUDA backend's cuDNN convolution path (``tapeflow_cuda_cupy.cudnn_conv``) and the
TF32 switch (``tf.config.experimental.enable_tensor_float_32_execution``).

Without a GPU (everywhere):

* the switches in ``tf.config.experimental`` and the TF32 observer;
* the geometry: tapeflow's conv attrs (SAME/VALID/explicit padding, strides, dilations,
  NHWC/NCHW, HWIO filters) turned into cuDNN dims/strides/pre- and post-padding, checked
  against the im2col kernel's padding rule and the CPU's output shapes;
* graph keys, the LRU cache, the selection and its fallbacks (with the log line),
  the TF32 engine filter, CuPy's cuBLAS compute type, the ``info`` line.

Those run the real ``Convolutions`` class against two stand-ins defined here:
``FakeCp`` (NumPy arrays that have ``.data.ptr``, as CuPy's do) and ``FakeCudnn``, a
recording stand-in for NVIDIA's ``cudnn`` frontend module whose methods take the real
API's keyword names (from the frontend's pybind definitions) and whose ``execute`` reads
and writes the buffers at the given addresses with the dims and strides the graph
declared, computing the convolution with NumPy as cuDNN defines it (NCHW/KCRS dims,
cross-correlation, pre/post padding). They check **our calls and our layout mapping**,
not cuDNN: a wrong stride or a filter in the wrong layout gives wrong numbers here.

With a GPU and the frontend installed: forward and both gradients through cuDNN in
strict float32 against the CPU for several geometries (skipped elsewhere, with the reason).
The conformance suite (tests/conformance, ``--tapeflow-device cuda:0``) covers every
Conv2D spec through cuDNN when run with ``TAPEFLOW_CUDNN=1``.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.kernels import nn as k_nn

cudnn_conv = pytest.importorskip("tapeflow_cuda_cupy.cudnn_conv",
                                 reason="tapeflow-cuda-cupy is not installed")
from tapeflow_cuda_cupy import backend as cuda_backend  # noqa: E402
from tapeflow_cuda_cupy import precision  # noqa: E402

OPS = cudnn_conv.OPS


# --- stand-ins ------------------------------------------------------------------------------

class DevArray(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr`` (the address of its first element)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


class FakeCp:
    """The few CuPy calls cudnn_conv makes, on NumPy memory."""

    def __init__(self):
        self.stream = 1111
        self.allocs = []
        self.compute_types = {}
        me = self

        class _Core:
            class _routines_linalg:  # noqa: N801  (CuPy's module name)
                COMPUTE_TYPE_DEFAULT = 1
                COMPUTE_TYPE_TF32 = 7

            @staticmethod
            def set_compute_type(dtype, value):
                me.compute_types[np.dtype(dtype).name] = value

        self._core = _Core
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: 0),
            get_current_stream=lambda: types.SimpleNamespace(ptr=me.stream),
            alloc=self._alloc)

    def _alloc(self, nbytes):
        buf = np.zeros(nbytes, np.uint8)
        self.allocs.append(buf)
        return types.SimpleNamespace(ptr=buf.__array_interface__["data"][0])

    @staticmethod
    def ascontiguousarray(a):
        return np.ascontiguousarray(a).view(DevArray)

    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, np.nan, dtype).view(DevArray)   # NaN: unwritten shows


_NP = {"HALF": np.float16, "FLOAT": np.float32, "DOUBLE": np.float64}


class FakeTensor:
    def __init__(self, name, dim=None, stride=None, data_type=None):
        self.name, self.dim, self.stride, self.data_type = name, dim, stride, data_type
        self.output = False

    def set_output(self, v):
        self.output = v
        return self

    def set_dim(self, d):
        self.dim = list(d)
        return self

    def set_stride(self, s):
        self.stride = list(s)
        return self

    def set_data_type(self, t):
        self.data_type = t
        return self


def _view(ptr, dims, strides, dtype):
    """The array cuDNN would see at ``ptr`` with these dims and element strides."""
    dtype = np.dtype(dtype)
    span = (sum((d - 1) * s for d, s in zip(dims, strides)) + 1) * dtype.itemsize
    base = np.frombuffer((ctypes.c_char * span).from_address(ptr), dtype=dtype)
    return np.lib.stride_tricks.as_strided(base, shape=dims,
                                           strides=[s * dtype.itemsize for s in strides])


def _windows(shape_in, r_, s_, pre, post, stride, dil):
    ho = (shape_in[2] + pre[0] + post[0] - ((r_ - 1) * dil[0] + 1)) // stride[0] + 1
    wo = (shape_in[3] + pre[1] + post[1] - ((s_ - 1) * dil[1] + 1)) // stride[1] + 1
    for r, s in itertools.product(range(r_), range(s_)):
        yield r, s, (slice(r * dil[0], r * dil[0] + stride[0] * (ho - 1) + 1, stride[0]),
                     slice(s * dil[1], s * dil[1] + stride[1] * (wo - 1) + 1, stride[1]))


def _pad(x, pre, post):
    return np.pad(x, ((0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])))


def cudnn_reference(kind, a, b, out_dims, conv):
    """cuDNN's definitions, in float64 on NCHW/KCRS dims."""
    pre, post, st, dl = conv["pre_padding"], conv["post_padding"], conv["stride"], conv["dilation"]
    if kind == "fprop":
        x, w = a, b
        xp = _pad(x, pre, post)
        y = np.zeros(out_dims)
        for r, s, (sh, sw) in _windows(x.shape, w.shape[2], w.shape[3], pre, post, st, dl):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, sh, sw], w[:, :, r, s])
        return y
    if kind == "dgrad":
        dy, w = a, b
        n, c, h, wd = out_dims
        dxp = np.zeros((n, c, h + pre[0] + post[0], wd + pre[1] + post[1]))
        for r, s, (sh, sw) in _windows(out_dims, w.shape[2], w.shape[3], pre, post, st, dl):
            dxp[:, :, sh, sw] += np.einsum("nkhw,kc->nchw", dy, w[:, :, r, s])
        return dxp[:, :, pre[0]:pre[0] + h, pre[1]:pre[1] + wd]
    x, dy = a, b
    xp = _pad(x, pre, post)
    dw = np.zeros(out_dims)
    for r, s, (sh, sw) in _windows(x.shape, out_dims[2], out_dims[3], pre, post, st, dl):
        dw[:, :, r, s] = np.einsum("nchw,nkhw->kc", xp[:, :, sh, sw], dy)
    return dw


class FakeGraph:
    def __init__(self, module, *, name="test_graph", io_data_type=None,
                 intermediate_data_type=None, compute_data_type=None, handle=None):
        self.module = module
        self.kw = {"io_data_type": io_data_type, "intermediate_data_type": intermediate_data_type,
                   "compute_data_type": compute_data_type, "handle": handle}
        self.calls = []
        self.tensors = []
        self.node = None
        self.deselected = []
        module.graphs.append(self)

    def tensor(self, *, name="", dim, stride, data_type=None):
        t = FakeTensor(name, list(dim), list(stride), data_type)
        self.tensors.append(t)
        return t

    def _conv(self, kind, a, b, pre_padding, post_padding, stride, dilation, compute_data_type):
        self.node = (kind, a, b, {"pre_padding": list(pre_padding),
                                  "post_padding": list(post_padding), "stride": list(stride),
                                  "dilation": list(dilation)}, compute_data_type)
        out = FakeTensor(kind + "_out")
        self.tensors.append(out)
        return out

    def conv_fprop(self, *, image, weight, pre_padding=(), post_padding=(), stride=(),
                   dilation=(), convolution_mode=None, compute_data_type=None, name=""):
        return self._conv("fprop", image, weight, pre_padding, post_padding, stride, dilation,
                          compute_data_type)

    def conv_dgrad(self, *, loss, filter, pre_padding=(), post_padding=(), stride=(),
                   dilation=(), convolution_mode=None, compute_data_type=None, name=""):
        return self._conv("dgrad", loss, filter, pre_padding, post_padding, stride, dilation,
                          compute_data_type)

    def conv_wgrad(self, *, image, loss, pre_padding=(), post_padding=(), stride=(),
                   dilation=(), convolution_mode=None, compute_data_type=None, name=""):
        return self._conv("wgrad", image, loss, pre_padding, post_padding, stride, dilation,
                          compute_data_type)

    def validate(self):
        self.calls.append("validate")
        for t in self.tensors:
            assert t.dim and t.stride and len(t.dim) == len(t.stride) == 4, t.name

    def build_operation_graph(self):
        self.calls.append("build_operation_graph")

    def create_execution_plans(self, modes):
        self.calls.append(("create_execution_plans", tuple(modes)))

    def deselect_numeric_notes(self, notes):
        assert self.calls[-1][0] == "create_execution_plans"   # filters the created plans
        self.deselected = list(notes)

    def check_support(self):
        self.calls.append("check_support")
        why = self.module.unsupported(self)
        if why:
            raise self.module.cudnnGraphNotSupportedError(why)

    def build_plans(self, policy):
        self.calls.append(("build_plans", policy))

    def get_workspace_size(self):
        return self.module.workspace

    def get_plan_name_at_index(self, i):
        return "fake_engine_" + ("tc" if not self.deselected else "strict")

    def execute(self, buffers, workspace, handle=None):
        m = self.module
        m.executions.append((self, handle, m.streams.get(handle)))
        assert handle is self.kw["handle"]
        if m.workspace:
            assert workspace != 0
        kind, a, b, conv, _ = self.node
        out = next(t for t in self.tensors if t.output)
        assert set(buffers) == {a, b, out}, "every graph tensor gets a buffer"
        arr = {t: _view(p, t.dim, t.stride, _NP[t.data_type]) for t, p in buffers.items()}
        res = cudnn_reference(kind, arr[a].astype(np.float64), arr[b].astype(np.float64),
                              out.dim, conv)
        arr[out][...] = res


class FakeCudnn(types.ModuleType):
    """A recording stand-in for NVIDIA's ``cudnn`` module (see the module doc)."""

    class cudnnGraphNotSupportedError(RuntimeError):  # noqa: N801
        pass

    data_type = types.SimpleNamespace(HALF="HALF", FLOAT="FLOAT", DOUBLE="DOUBLE")
    heur_mode = types.SimpleNamespace(A="A", B="B", FALLBACK="FALLBACK")
    build_plan_policy = types.SimpleNamespace(HEURISTICS_CHOICE="HEURISTICS_CHOICE", ALL="ALL")
    numerical_note = types.SimpleNamespace(TENSOR_CORE="TENSOR_CORE",
                                           DOWN_CONVERT_INPUTS="DOWN_CONVERT_INPUTS",
                                           FFT="FFT", WINOGRAD="WINOGRAD")
    __version__ = "0.0-fake"

    def __init__(self):
        super().__init__("cudnn")
        self.graphs = []
        self.executions = []
        self.streams = {}
        self.handles = []
        self.workspace = 256
        self.unsupported = lambda graph: None
        me = self

        def pygraph(**kw):
            return FakeGraph(me, **kw)

        self.pygraph = pygraph

    def create_handle(self):
        h = object()
        self.handles.append(h)
        return h

    def set_stream(self, *, handle, stream):
        self.streams[handle] = stream

    @staticmethod
    def backend_version_string():
        return "9.99-fake"


# --- fixtures -----------------------------------------------------------------------------

@pytest.fixture
def switches(monkeypatch):
    """Leave tf.config's TF32 and cuDNN switches (and TAPEFLOW_CUDNN) as they were."""
    monkeypatch.delenv("TAPEFLOW_CUDNN", raising=False)
    tf32, cudnn_on = tf.config.experimental.tensor_float_32_execution_enabled(), \
        tf.config._cudnn[0]
    observers = list(tf.config._tf32_observers)
    yield
    tf.config._tf32_observers[:] = observers
    tf.config.enable_tensor_float_32_execution(tf32)
    tf.config.enable_cudnn_convolutions(cudnn_on)


@pytest.fixture
def fake(switches, monkeypatch):
    """cudnn_conv with FakeCudnn importable as ``cudnn``, enabled, on FakeCp, with the
    CPU's im2col kernels as the fallback."""
    mod = FakeCudnn()
    monkeypatch.setitem(sys.modules, "cudnn", mod)
    monkeypatch.setattr(cudnn_conv, "_frontend", None)
    monkeypatch.setattr(cudnn_conv, "ACTIVE", [None])
    tf.config.experimental.enable_cudnn_convolutions(True)
    cp = FakeCp()
    shared = {op: s.fn for op, s in k_nn.build(tf.plugins.BuildContext(np, "cpu")).items()
              if op in OPS}
    fns = cudnn_conv.build(tf.plugins.BuildContext(np, "cuda", cp=cp, shared=shared))
    conv = cudnn_conv.ACTIVE[0]
    yield types.SimpleNamespace(cudnn=mod, cp=cp, conv=conv, fns=fns, shared=shared)
    cudnn_conv.reset_for_tests()


def _dev(a):
    return np.ascontiguousarray(a).view(DevArray)


def _attrs(strides=(1, 1), padding="SAME", fmt="NHWC", dilations=(1, 1)):
    return {"strides": tuple(strides), "padding": padding, "data_format": fmt,
            "dilations": tuple(dilations)}


def _case(rng, n, h, w, c, k, r, s, fmt, dtype=np.float32, **kw):
    a = _attrs(fmt=fmt, **kw)
    x = rng.uniform(-1, 1, (n, h, w, c)).astype(dtype)
    if fmt == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    wt = rng.uniform(-1, 1, (r, s, c, k)).astype(dtype)
    return _dev(x), _dev(wt), a


GEOMETRIES = [
    # n, h, w, c, k, r, s, fmt, strides, padding, dilations
    (2, 7, 6, 3, 4, 3, 3, "NHWC", (1, 1), "SAME", (1, 1)),
    (2, 7, 6, 3, 4, 3, 3, "NCHW", (1, 1), "SAME", (1, 1)),
    (1, 8, 8, 2, 5, 2, 2, "NHWC", (2, 2), "SAME", (1, 1)),        # asymmetric SAME pads
    (2, 9, 7, 3, 2, 3, 2, "NHWC", (2, 3), "VALID", (1, 1)),       # uncovered last rows
    (1, 9, 9, 2, 3, 3, 3, "NCHW", (1, 2), "VALID", (2, 1)),
    (2, 6, 5, 4, 3, 3, 3, "NHWC", (1, 1), ((1, 2), (0, 3)), (1, 1)),   # explicit pads
    (1, 10, 8, 2, 2, 3, 2, "NCHW", (3, 2), ((2, 0), (1, 1)), (2, 2)),
    (3, 5, 5, 1, 1, 1, 1, "NHWC", (1, 1), "SAME", (1, 1)),        # 1x1
    (1, 11, 6, 3, 2, 3, 3, "NHWC", (2, 1), "SAME", (2, 3)),
]


# --- switches -----------------------------------------------------------------------------

def test_switches_default_off_and_follow_env_and_config(switches, monkeypatch):
    exp = tf.config.experimental
    assert exp.tensor_float_32_execution_enabled() is False     # strict float32 by default
    tf.config.enable_cudnn_convolutions(None)
    monkeypatch.delenv("TAPEFLOW_CUDNN", raising=False)
    assert exp.cudnn_convolutions_enabled() is True             # on where installed
    for value, want in (("1", True), ("0", False), ("yes", True), ("off", False), ("no", False)):
        monkeypatch.setenv("TAPEFLOW_CUDNN", value)
        assert exp.cudnn_convolutions_enabled() is want, value
    monkeypatch.setenv("TAPEFLOW_CUDNN", "1")
    exp.enable_cudnn_convolutions(False)                        # the call wins over the env
    assert exp.cudnn_convolutions_enabled() is False
    exp.enable_cudnn_convolutions(None)
    assert exp.cudnn_convolutions_enabled() is True
    exp.enable_tensor_float_32_execution(True)
    assert exp.tensor_float_32_execution_enabled() is True
    assert tf.config.tensor_float_32_execution_enabled() is True


def test_tf32_observer_is_told_now_and_on_change(switches):
    seen = []
    tf.config.observe_tensor_float_32(seen.append)
    tf.config.experimental.enable_tensor_float_32_execution(True)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    assert seen == [False, True, False]


def test_tf32_switch_sets_cupy_cublas_compute_type(switches):
    cp = FakeCp()
    precision.install(cp)
    assert cp.compute_types == {"float32": 1}                   # COMPUTE_TYPE_DEFAULT
    tf.config.experimental.enable_tensor_float_32_execution(True)
    assert cp.compute_types == {"float32": 7}                   # COMPUTE_TYPE_TF32
    assert precision.applied["cupy"] == "TF32"
    tf.config.experimental.enable_tensor_float_32_execution(False)
    assert cp.compute_types == {"float32": 1}
    assert precision.applied["cupy"] == "strict float32"
    # a CuPy without the setter: reported, never raised
    assert "not applied" in precision.apply_to_cupy(types.SimpleNamespace(), True)


def test_tf32_engine_filter():
    m = FakeCudnn()
    assert precision.excluded_notes(m, "float32", tf32=False) == ["TENSOR_CORE",
                                                                  "DOWN_CONVERT_INPUTS"]
    assert precision.excluded_notes(m, "float32", tf32=True) == []
    assert precision.excluded_notes(m, "float16", tf32=False) == []   # fp16 tensor cores: fine
    assert precision.excluded_notes(m, "float64", tf32=False) == []


# --- geometry -----------------------------------------------------------------------------

def test_padding_and_output_size_are_the_im2col_kernels():
    # one geometry for both paths (the cuDNN spec's pads and sizes come from it)
    assert cudnn_conv.window_geometry is k_nn.window_geometry
    spec = cudnn_conv.spec_of("Conv2D", (2, 7, 8, 3), (3, 2, 3, 4), np.float32,
                              {"strides": (2, 3), "padding": "SAME", "dilations": (1, 2),
                               "data_format": "NHWC"})
    ho, pt, pb = k_nn.window_geometry(7, 3, 2, 1, "SAME", 0)
    wo, pl, pr = k_nn.window_geometry(8, 2, 3, 2, "SAME", 1)
    assert (spec.ho, spec.wo, spec.pre, spec.post) == (ho, wo, (pt, pl), (pb, pr))


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_spec_output_shape_matches_cpu_conv2d(fmt):
    rng = np.random.default_rng(0)
    checked = 0
    for (h, w), (r, s_), st, dl, pad in itertools.product(
            ((5, 5), (6, 9), (8, 3)), ((1, 1), (3, 3), (2, 3)), ((1, 1), (2, 2), (3, 1)),
            ((1, 1), (2, 1)), ("SAME", "VALID", ((1, 0), (2, 1)))):
        eff_h, eff_w = (r - 1) * dl[0] + 1, (s_ - 1) * dl[1] + 1
        if pad == "VALID" and (eff_h > h or eff_w > w):
            continue
        x, wt, a = _case(rng, 2, h, w, 3, 4, r, s_, fmt, strides=st, padding=pad, dilations=dl)
        spec = cudnn_conv.spec_of("Conv2D", x.shape, wt.shape, x.dtype, a)
        assert isinstance(spec, cudnn_conv.Spec), spec
        kw = dict(strides=list(st), padding=pad if isinstance(pad, str) else
                  [list(p) for p in pad], data_format=fmt, dilations=list(dl))
        with tf.device("cpu:0"):
            y = tf.nn.conv2d(np.asarray(x), np.asarray(wt), **kw)
        assert tuple(y.shape) == spec.memory_shape("output"), (h, w, r, s_, st, dl, pad)
        checked += 1
    assert checked > 100


def test_spec_dims_and_strides_describe_the_memory():
    rng = np.random.default_rng(1)
    for fmt in ("NHWC", "NCHW"):
        x, wt, a = _case(rng, 2, 6, 5, 3, 4, 3, 2, fmt, strides=(2, 1), padding="SAME")
        spec = cudnn_conv.spec_of("Conv2D", x.shape, wt.shape, x.dtype, a)
        dims, strides = spec.image()
        assert dims == [2, 3, 6, 5]                              # always NCHW dims
        perm = (0, 3, 1, 2) if fmt == "NHWC" else (0, 1, 2, 3)   # NCHW dim -> memory axis
        assert strides == [x.strides[p] // x.itemsize for p in perm]
        assert tuple(x.shape[p] for p in perm) == tuple(dims)
        fd, fs = spec.filter()
        assert fd == [4, 3, 3, 2]                                # KCRS dims
        wc = cudnn_conv.filter_to_cudnn(np, np.asarray(wt), fmt)
        fperm = (0, 3, 1, 2) if fmt == "NHWC" else (0, 1, 2, 3)  # KRSC / KCRS memory
        assert fs == [wc.strides[p] // wc.itemsize for p in fperm]
        assert tuple(wc.shape[p] for p in fperm) == tuple(fd)
        if fmt == "NHWC":
            assert fs == [3 * 2 * 3, 1, 2 * 3, 3]                # KRSC
        # the HWIO filter round-trips through the cuDNN layout
        back = cudnn_conv.filter_from_cudnn(np, wc, fmt)
        np.testing.assert_array_equal(back, wt)
        assert spec.output()[0] == [2, 4, 3, 5]
        assert spec.pre == (0, 0) and spec.post == (1, 1)        # SAME, stride 2, h 6, r 3


def test_spec_explicit_padding_is_pre_and_post():
    a = _attrs(padding=((1, 2), (0, 3)))
    spec = cudnn_conv.spec_of("Conv2D", (1, 6, 5, 2), (3, 3, 2, 4), np.float32, a)
    assert (spec.pre, spec.post) == ((1, 0), (2, 3))
    assert (spec.ho, spec.wo) == (6 + 3 - 3 + 1, 5 + 3 - 3 + 1)


@pytest.mark.parametrize("args,why", [
    (("Conv2D", (1, 5, 5, 2), (3, 3, 2, 4), np.int32, _attrs()), "dtype int32"),
    (("Conv2D", (1, 5, 5, 2), (3, 3, 1, 4), np.float32, _attrs()), "grouped"),
    (("Conv2D", (0, 5, 5, 2), (3, 3, 2, 4), np.float32, _attrs()), "empty"),
    (("Conv2D", (1, 2, 2, 2), (3, 3, 2, 4), np.float32, _attrs(padding="VALID")), "empty output"),
    (("Conv2DBackpropInput", (3, 3, 2, 4), (1, 4, 4, 4), np.float32,
      {**_attrs(), "input_sizes": (1, 5, 5, 2)}), "output gradient shape"),
    (("Conv2D", (1, 5, 5, 2), (3, 3, 2, 4), np.float32, _attrs(fmt="NWHC")), "data_format"),
])
def test_spec_refuses_what_cudnn_cannot_take(args, why):
    spec = cudnn_conv.spec_of(*args)
    assert isinstance(spec, str) and why in spec


# --- the path, on the stand-ins -----------------------------------------------------------

def _run_all(fake, x, wt, a, rng):
    """Forward, input and filter gradient through the selected path and through im2col."""
    y = fake.fns["Conv2D"](x, wt, **a)
    y_ref = fake.shared["Conv2D"](np.asarray(x), np.asarray(wt), **a)
    dy = _dev(rng.uniform(-1, 1, y_ref.shape).astype(x.dtype))
    dx = fake.fns["Conv2DBackpropInput"](wt, dy, input_sizes=tuple(x.shape), **a)
    dx_ref = fake.shared["Conv2DBackpropInput"](np.asarray(wt), np.asarray(dy),
                                                input_sizes=tuple(x.shape), **a)
    dw = fake.fns["Conv2DBackpropFilter"](x, dy, filter_sizes=tuple(wt.shape), **a)
    dw_ref = fake.shared["Conv2DBackpropFilter"](np.asarray(x), np.asarray(dy),
                                                 filter_sizes=tuple(wt.shape), **a)
    return (y, y_ref), (dx, dx_ref), (dw, dw_ref)


@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_cudnn_path_layouts_agree_with_im2col(fake, geom):
    """Through FakeCudnn (cuDNN's semantics on the declared dims/strides): the same
    numbers as the CPU's im2col kernels, so dims, strides, pads and filter layouts agree."""
    rng = np.random.default_rng(2)
    n, h, w, c, k, r, s_, fmt, st, pad, dl = geom
    x, wt, a = _case(rng, n, h, w, c, k, r, s_, fmt, strides=st, padding=pad, dilations=dl)
    for got, want in _run_all(fake, x, wt, a, rng):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert {op: fake.conv.last[op][0] for op in OPS} == dict.fromkeys(OPS, "cudnn")
    assert len(fake.cudnn.executions) == 3
    kinds = [g.node[0] for g in fake.cudnn.graphs]
    assert kinds == ["fprop", "dgrad", "wgrad"]
    g = fake.cudnn.graphs[0]
    assert g.kw == {"io_data_type": "FLOAT", "intermediate_data_type": "FLOAT",
                    "compute_data_type": "FLOAT", "handle": fake.cudnn.handles[0]}
    assert g.calls == ["validate", "build_operation_graph",
                       ("create_execution_plans", ("A", "FALLBACK")), "check_support",
                       ("build_plans", "HEURISTICS_CHOICE")]


def test_float16_and_float64_graphs(fake):
    rng = np.random.default_rng(3)
    for dt, io, acc, tol in ((np.float16, "HALF", "FLOAT", 2e-2),
                             (np.float64, "DOUBLE", "DOUBLE", 1e-12)):
        x, wt, a = _case(rng, 2, 6, 6, 3, 2, 3, 3, "NHWC", dtype=dt)
        for got, want in _run_all(fake, x, wt, a, rng):
            assert got.dtype == dt
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=tol, atol=tol)
        g = fake.cudnn.graphs[-1]
        assert (g.kw["io_data_type"], g.kw["compute_data_type"]) == (io, acc)
        assert g.node[4] == acc and g.deselected == []
        assert all(t.data_type == io for t in g.tensors)


def test_graph_built_once_per_key_and_new_key_for_each_difference(fake):
    rng = np.random.default_rng(4)
    conv2d = fake.fns["Conv2D"]
    x, wt, a = _case(rng, 2, 6, 6, 3, 2, 3, 3, "NHWC")
    conv2d(x, wt, **a)
    conv2d(x, wt, **a)
    conv2d(_dev(np.asarray(x) + 1), wt, **a)                   # new values, same key
    assert len(fake.cudnn.graphs) == 1 and len(fake.conv.cache) == 1
    assert fake.conv.cache.hits == 2
    variants = [
        (x, wt, _attrs(strides=(2, 2))),
        (x, wt, _attrs(padding="VALID")),
        (x, wt, _attrs(padding=((1, 1), (1, 1)))),              # = SAME's pads here: same graph
        (x, wt, _attrs(dilations=(2, 1))),
        (_dev(np.asarray(x).astype(np.float64)), _dev(np.asarray(wt).astype(np.float64)), a),
        (_dev(np.asarray(x)[:1]), wt, a),
        (_dev(np.asarray(x).transpose(0, 3, 1, 2)), wt, _attrs(fmt="NCHW")),
    ]
    for xv, wv, av in variants:
        conv2d(xv, wv, **av)
    # SAME with a 3x3 filter at stride 1 pads (1, 1) on each side: explicit ((1,1),(1,1))
    # is the same convolution, so the same key
    assert len(fake.cudnn.graphs) == 1 + len(variants) - 1
    n = len(fake.cudnn.graphs)
    tf.config.experimental.enable_tensor_float_32_execution(True)
    conv2d(x, wt, **a)
    assert len(fake.cudnn.graphs) == n + 1                      # the precision is in the key
    assert fake.cudnn.graphs[-1].deselected == []
    assert fake.cudnn.graphs[0].deselected == ["TENSOR_CORE", "DOWN_CONVERT_INPUTS"]
    assert fake.conv.last["Conv2D"] == ("cudnn", "fake_engine_tc", "TF32")
    tf.config.experimental.enable_tensor_float_32_execution(False)
    conv2d(x, wt, **a)
    assert len(fake.cudnn.graphs) == n + 1                      # strict graph: cached
    assert fake.conv.last["Conv2D"] == ("cudnn", "fake_engine_strict", "strict float32")


def test_cache_is_a_bounded_lru():
    c = cudnn_conv.GraphCache(maxsize=3)
    for k in "abc":
        c.put(k, k.upper())
    assert c.get("a") == "A"                                    # a is now the newest
    c.put("d", "D")
    assert "b" not in c and all(k in c for k in "acd") and len(c) == 3
    c.put("e", "E")
    assert "c" not in c and len(c) == 3 and c.builds == 5 and c.hits == 1


def test_lru_bound_holds_in_the_kernels(fake):
    fake.conv.cache.maxsize = 2
    rng = np.random.default_rng(5)
    for h in (4, 5, 6, 4):
        x, wt, a = _case(rng, 1, h, 4, 2, 2, 3, 3, "NHWC")
        fake.fns["Conv2D"](x, wt, **a)
    assert len(fake.conv.cache) == 2
    assert len(fake.cudnn.graphs) == 4                          # h=4 was evicted, rebuilt


def test_disabled_runs_im2col_and_says_why(fake, caplog):
    tf.config.experimental.enable_cudnn_convolutions(False)
    rng = np.random.default_rng(6)
    x, wt, a = _case(rng, 1, 5, 5, 2, 2, 3, 3, "NHWC")
    with caplog.at_level(logging.DEBUG, logger="tapeflow.cuda"):
        y = fake.fns["Conv2D"](x, wt, **a)
        fake.fns["Conv2D"](x, wt, **a)
    np.testing.assert_allclose(y, fake.shared["Conv2D"](x, wt, **a))
    assert fake.cudnn.graphs == [] and fake.cudnn.executions == []
    path, why = fake.conv.last["Conv2D"]
    assert path == "im2col" and "off" in why and "TAPEFLOW_CUDNN=1" in why
    lines = [r.getMessage() for r in caplog.records if r.name == "tapeflow.cuda"]
    assert len(lines) == 1 and "im2col" in lines[0]             # once, not per call


def test_missing_frontend_runs_im2col_with_the_install_hint(fake, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "cudnn", None)             # import cudnn -> ImportError
    monkeypatch.setattr(cudnn_conv, "_frontend", None)
    rng = np.random.default_rng(7)
    x, wt, a = _case(rng, 1, 5, 5, 2, 2, 3, 3, "NHWC")
    with caplog.at_level(logging.DEBUG, logger="tapeflow.cuda"):
        y = fake.fns["Conv2D"](x, wt, **a)
    np.testing.assert_allclose(y, fake.shared["Conv2D"](x, wt, **a))
    path, why = fake.conv.last["Conv2D"]
    assert path == "im2col" and "not installed" in why and "[cudnn]" in why
    assert any("not installed" in r.getMessage() for r in caplog.records)
    assert "not installed" in cudnn_conv.describe()


def test_unsupported_case_runs_im2col_with_the_reason_once_per_key(fake, caplog):
    fake.cudnn.unsupported = lambda g: "no engine for dilation 2" \
        if g.node[3]["dilation"] == [2, 2] else None
    rng = np.random.default_rng(8)
    x, wt, a = _case(rng, 1, 7, 7, 2, 2, 3, 3, "NHWC", dilations=(2, 2))
    with caplog.at_level(logging.DEBUG, logger="tapeflow.cuda"):
        for _ in range(3):
            y = fake.fns["Conv2D"](x, wt, **a)
    np.testing.assert_allclose(y, fake.shared["Conv2D"](x, wt, **a))
    assert len(fake.cudnn.graphs) == 1                          # the failure is cached
    path, why = fake.conv.last["Conv2D"]
    assert path == "im2col" and "no engine for dilation 2" in why
    msgs = [r.getMessage() for r in caplog.records if "im2col" in r.getMessage()]
    assert len(msgs) == 1
    assert "Conv2D on cuda:0" in msgs[0] and "dilations [2, 2]" in msgs[0] \
        and "strict float32" in msgs[0] and "[1, 7, 7, 2]" in msgs[0]
    # a supported case next to it still takes cuDNN
    x2, wt2, a2 = _case(rng, 1, 7, 7, 2, 2, 3, 3, "NHWC")
    fake.fns["Conv2D"](x2, wt2, **a2)
    assert fake.conv.last["Conv2D"][0] == "cudnn"
    assert fake.conv.counts[("Conv2D", "im2col")] == 3
    assert fake.conv.counts[("Conv2D", "cudnn")] == 1
    # a case the spec refuses (float16 is fine, int is not a conv dtype: use groups)
    xg = _dev(rng.uniform(-1, 1, (1, 5, 5, 4)).astype(np.float32))
    why = cudnn_conv.spec_of("Conv2D", xg.shape, wt.shape, xg.dtype, a2)
    assert "grouped" in why


def test_failure_at_run_time_falls_back_and_sticks(fake, caplog):
    rng = np.random.default_rng(9)
    x, wt, a = _case(rng, 1, 5, 5, 2, 2, 3, 3, "NHWC")
    fake.fns["Conv2D"](x, wt, **a)
    g = fake.cudnn.graphs[0]

    def broken(*args, **kw):
        raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")

    g.execute = broken
    with caplog.at_level(logging.WARNING, logger="tapeflow.cuda"):
        y = fake.fns["Conv2D"](x, wt, **a)
    np.testing.assert_allclose(y, fake.shared["Conv2D"](x, wt, **a))
    assert fake.conv.last["Conv2D"][0] == "im2col"
    assert "EXECUTION_FAILED" in fake.conv.last["Conv2D"][1]
    assert any("EXECUTION_FAILED" in r.getMessage() for r in caplog.records)
    fake.fns["Conv2D"](x, wt, **a)
    assert len(fake.cudnn.graphs) == 1 and fake.conv.last["Conv2D"][0] == "im2col"


def test_runs_on_cupys_current_stream_with_a_pool_workspace(fake):
    rng = np.random.default_rng(10)
    x, wt, a = _case(rng, 1, 5, 5, 2, 2, 3, 3, "NHWC")
    fake.fns["Conv2D"](x, wt, **a)
    h = fake.cudnn.handles[0]
    assert fake.cudnn.executions[-1][1:] == (h, 1111)
    assert len(fake.cp.allocs) == 1 and fake.cp.allocs[0].nbytes == 256
    fake.cp.stream = 2222
    fake.fns["Conv2D"](x, wt, **a)
    assert fake.cudnn.executions[-1][1:] == (h, 2222)
    assert len(fake.cudnn.handles) == 1                         # one handle per device
    fake.cudnn.workspace = 0
    fake.conv.cache.clear()
    fake.fns["Conv2D"](x, wt, **a)
    assert len(fake.cp.allocs) == 2                             # no allocation for 0 bytes


# --- info -----------------------------------------------------------------------------------

def test_info_line_says_which_path(fake):
    tf.config.experimental.enable_cudnn_convolutions(False)
    off = cudnn_conv.describe()
    assert "im2col" in off and "switched off" in off and "TAPEFLOW_CUDNN=1" in off \
        and "strict float32" in off
    tf.config.experimental.enable_cudnn_convolutions(True)
    rng = np.random.default_rng(11)
    x, wt, a = _case(rng, 1, 5, 5, 2, 2, 3, 3, "NHWC")
    fake.fns["Conv2D"](x, wt, **a)
    tf.config.experimental.enable_tensor_float_32_execution(True)
    on = cudnn_conv.describe()
    assert "convolutions: cuDNN (cuDNN frontend 0.0-fake, cuDNN 9.99-fake)" in on
    assert "1 graphs built" in on and "Conv2D cudnn 1" in on and "float32 precision: TF32" in on
    notes = cuda_backend.BACKEND.info_notes()
    assert notes[0] == on and notes[1].startswith("matmul (cuBLAS through CuPy): ")


def test_python_m_tapeflow_info_prints_the_conv_path(switches):
    from tapeflow.__main__ import collect, render
    tf.config.experimental.enable_cudnn_convolutions(False)
    data = collect(smoke=False)
    cuda = [b for b in data["backends"] if b["device_type"] == "cuda"]
    assert cuda and cuda[0]["notes"][0].startswith("convolutions: im2col")
    text = render(data)
    assert "    convolutions: im2col + cuBLAS GEMM; cuDNN path switched off" in text


# --- docs/gpu.md ------------------------------------------------------------------------------

def test_gpu_doc_commands_match_the_extras_and_tests():
    """docs/gpu.md's install lines pair each CUDA extra with the cuDNN extra of the same
    CUDA major version (as declared in backends/cuda_cupy/pyproject.toml), and its GPU
    test command selects this file and the conformance suite's Conv2D specs."""
    import pathlib
    import re
    import shlex
    import tomllib
    root = pathlib.Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "gpu.md").read_text()
    blocks = re.findall(r"```sh tested-by=tests/backends/test_cudnn.py::"
                        r"test_gpu_doc_commands_match_the_extras_and_tests\n(.*?)```", doc, re.S)
    assert len(blocks) == 2, blocks
    extras = tomllib.loads((root / "backends" / "cuda_cupy" / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    pairs = re.findall(r"pip install -e 'backends/cuda_cupy\[(\w+),([\w-]+)\]'", blocks[0])
    assert sorted(pairs) == [("cuda12", "cudnn-cu12"), ("cuda13", "cudnn")]
    for cuda, cudnn in pairs:
        major = cuda[-2:]
        assert any(r.startswith(f"cupy-cuda{major}x") for r in extras[cuda])
        assert any(r.startswith(f"nvidia-cudnn-cu{major}") for r in extras[cudnn])
        assert any(r.startswith("nvidia-cudnn-frontend") for r in extras[cudnn])
    words = shlex.split(blocks[1])
    assert words[:4] == ["TAPEFLOW_CUDNN=1", "python", "-m", "pytest"]
    paths = [w for w in words if w.startswith("tests/")]
    assert "tests/backends/test_cudnn.py" in paths and all((root / p).is_file() for p in paths)
    k = words[words.index("-k") + 1]
    assert words[words.index("--tapeflow-device") + 1] == "cuda:0"
    # the same selection on cpu:0 (here) picks the conformance suite's conv specs
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", "tests/conformance/test_conformance.py",
                        "-k", k, "--tapeflow-device", "cpu:0"],
                       capture_output=True, text=True, timeout=300, cwd=root)
    for test in ("test_forward[nn.conv2d-", "test_gradients[nn.conv2d-",
                 "test_forward[nn.conv2d_backprop_input-",
                 "test_forward[nn.conv2d_backprop_filter-"):
        assert test in r.stdout, (test, r.stdout[-2000:] + r.stderr[-2000:])


# --- on a real GPU ----------------------------------------------------------------------------

if os.environ.get("TAPEFLOW_TEST_FAKE_CUDNN") == "1":
    # test_gpu_tests_on_stand_ins_for_cupy_and_cudnn runs this file with the fake CuPy
    # first on the path and FakeCudnn as `cudnn`: the GPU tests then go through the whole
    # stack (tf.nn.conv2d, the tape, the lazy kernel table, the wrappers) to FakeCudnn
    sys.modules["cudnn"] = FakeCudnn()


def _gpu_reason():
    from tapeflow_cuda_cupy import plugin
    why = plugin.unavailable_reason()
    if why:
        return f"cuda:0 unavailable: {why}"
    mod, why = cudnn_conv._import_frontend()
    return why


GPU_REASON = _gpu_reason()
needs_cudnn_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=str(GPU_REASON))


@needs_cudnn_gpu
@pytest.mark.parametrize("geom", GEOMETRIES[:7], ids=lambda g: "-".join(map(str, g)))
def test_gpu_cudnn_forward_and_gradients_match_the_cpu_in_strict_float32(switches, geom):
    from tapeflow_cuda_cupy import kernels
    tf.config.experimental.enable_cudnn_convolutions(True)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    rng = np.random.default_rng(12)
    n, h, w, c, k, r, s_, fmt, st, pad, dl = geom
    x, wt, a = _case(rng, n, h, w, c, k, r, s_, fmt, strides=st, padding=pad, dilations=dl)
    x, wt = np.asarray(x), np.asarray(wt)
    padding = pad if isinstance(pad, str) else [list(p) for p in pad]

    def run(dev):
        with tf.device(dev):
            xv, wv = tf.constant(x), tf.constant(wt)
            with tf.GradientTape() as tape:
                tape.watch([xv, wv])
                y = tf.nn.conv2d(xv, wv, strides=list(st), padding=padding, data_format=fmt,
                                 dilations=list(dl))
                loss = tf.reduce_sum(y * y)
            dx, dw = tape.gradient(loss, [xv, wv])
        return y.numpy(), dx.numpy(), dw.numpy()

    got, want = run("cuda:0"), run("cpu:0")
    kernels.table()
    conv = cudnn_conv.ACTIVE[0]
    for op in OPS:
        assert conv.last[op][0] == "cudnn", (op, conv.last[op])
        assert conv.last[op][2] == "strict float32"
    for g, wnt, name in zip(got, want, ("y", "dx", "dw")):
        np.testing.assert_allclose(g, wnt, rtol=2e-5, atol=2e-4, err_msg=name)


def test_gpu_tests_on_stand_ins_for_cupy_and_cudnn():
    """The GPU tests above, run in a subprocess on tests/backends/fake_cupy (NumPy as
    CuPy) with FakeCudnn as ``cudnn``: tf.nn.conv2d and its gradients on ``cuda:0`` reach
    the cuDNN path through the real kernel table, and agree with the CPU. Checks our
    plumbing, not CuPy or cuDNN."""
    from tapeflow_cuda_cupy import emulate
    why = emulate.available()
    if why:   # the kernel table's Philox needs the host build of the CUDA source
        pytest.skip(f"CUDA kernels cannot be emulated on the CPU here: {why}")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(here, "fake_cupy"), os.environ.get("PYTHONPATH", "")]),
        FAKE_CUPY_DEVICES="1", TAPEFLOW_CUDA_DISABLE="", TAPEFLOW_TEST_FAKE_CUDNN="1")
    env.pop("TAPEFLOW_DEFAULT_DEVICE", None)
    env.pop("TAPEFLOW_CUDNN", None)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         os.path.abspath(__file__), "-k", "test_gpu_cudnn"],
        capture_output=True, text=True, timeout=600, env=env, cwd=here)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert f"{len(GEOMETRIES[:7])} passed" in tail and "skipped" not in tail, tail
