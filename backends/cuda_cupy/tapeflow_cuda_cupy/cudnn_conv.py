"""``Conv2D`` and its two gradients through NVIDIA's cuDNN frontend, on CuPy arrays.

CuPy 14 has no cuDNN module, so this uses NVIDIA's Python frontend (``import cudnn``,
distribution ``nvidia-cudnn-frontend``, with the ``nvidia-cudnn-cu12`` runtime wheel: the
optional extra ``tapeflow-cuda-cupy[cudnn]``). On by default where the frontend is
installed (``tf.config.experimental.cudnn_convolutions_enabled()``; ``TAPEFLOW_CUDNN=0``
or ``enable_cudnn_convolutions(False)`` keeps im2col): it passed the conformance suite on
an H100 (docs/gpu-runs/2026-11-26-h100) at 1.01x PyTorch's forward+backward time.

Selection, per call (:meth:`Convolutions.plan_for`), else the shared im2col kernel runs:

1. the switch is on;
2. ``cudnn`` imports (:func:`frontend`);
3. the case maps onto a cuDNN convolution (:func:`spec_of`: float16/float32/float64,
   NHWC or NCHW, non-empty, padding non-negative);
4. a graph builds for it (validate, heuristics A + FALLBACK, ``check_support``,
   ``build_plans``) — with TF32 off, float32 graphs exclude tensor-core engines
   (:func:`.precision.excluded_notes`), so a case with no strict engine falls back.

Graphs are built once per key — the :class:`Spec` (op, shapes, dtype, layout, strides
of every tensor, pre/post padding, strides, dilations) plus the TF32 flag and the device
— and kept in a bounded LRU (:class:`GraphCache`); a failed build is cached too, as its
reason. Each new key logs one debug line on the ``tapeflow.cuda`` logger saying which
path it takes and why; ``python -m tapeflow info`` shows :func:`describe`.

``_FusedConv2D`` (Conv2D + bias + activation, :mod:`tapeflow.ops.fused`) is one
graph: ``conv_fprop`` -> ``bias`` (a ``[1, K, 1, 1]`` tensor) -> the frontend's
pointwise ``relu`` (Relu; Relu6 as ``lower_clip=0, upper_clip=6``), ``leaky_relu``
(alpha in [0, 1]), ``elu``, ``gelu`` or ``gelu_approx_tanh``; the epilogue is part of
the graph key. Written against the frontend's pybind API and checked with the
stand-ins of tests/test_fused_conv.py; **never run on a GPU yet** (a case cuDNN
refuses -- float64 runtime fusion, typically -- runs the shared kernel).

Layouts: cuDNN dims are always NCHW (image) and KCRS (filter); the memory layout is in
the strides. NHWC images use NHWC strides and the HWIO filter is copied to KRSC
("NHWC" filters, what the NHWC engines take); NCHW images use NCHW strides and a KCRS
copy of the filter. The filter gradient comes back in that layout and is transposed to
HWIO. Work runs on CuPy's current stream (``cudnn.set_stream``), the workspace comes
from CuPy's memory pool (``cupy.cuda.alloc``).
"""

from __future__ import annotations

import collections
import importlib.util
import logging
import sys
import threading
from typing import NamedTuple

import numpy as np

import tapeflow
from tapeflow.kernels.nn import window_geometry
from tapeflow.plugins import KernelSpec

from . import precision

OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
#: the fused convolution (Conv2D + bias + activation, issue 34): one cuDNN graph
#: (conv_fprop -> bias -> activation) where the cuDNN path is on
FUSED_OP = "_FusedConv2D"
ENV = "TAPEFLOW_CUDNN"
INSTALL_HINT = "pip install -e 'backends/cuda_cupy[cudnn]'"
HOW_TO_ENABLE = f"{ENV}=1 or tf.config.experimental.enable_cudnn_convolutions(True)"
#: graphs kept per process (each holds built execution plans: a few hundred KiB)
CACHE_SIZE = 256
#: tapeflow dtype -> cuDNN io data type name
IO_TYPES = {"float16": "HALF", "float32": "FLOAT", "float64": "DOUBLE"}

log = logging.getLogger("tapeflow.cuda")


# --- the frontend, imported on first use ------------------------------------------------

_frontend: tuple | None = None      # (module or None, reason or None)


def frontend():
    """``(cudnn module, None)`` or ``(None, why not)``; imported once."""
    global _frontend
    if _frontend is None:
        _frontend = _import_frontend()
    return _frontend


def _import_frontend():
    try:
        import cudnn
    except ImportError as e:
        if (e.name or "").split(".")[0] == "cudnn":
            return None, f"the cuDNN frontend is not installed ({INSTALL_HINT})"
        return None, (f"the cuDNN frontend failed to import ({type(e).__name__}: {e}); "
                      f"reinstall it ({INSTALL_HINT})")
    except Exception as e:  # a broken install (missing libcudnn) must not break tapeflow
        return None, f"the cuDNN frontend failed to import ({type(e).__name__}: {e})"
    if not hasattr(cudnn, "pygraph"):
        return None, ("the module 'cudnn' is not NVIDIA's cuDNN frontend (it has no "
                      f"pygraph); {INSTALL_HINT}")
    return cudnn, None


def _installed() -> bool:
    """Whether ``import cudnn`` would find a module (without importing it: the import
    loads libcudnn)."""
    if sys.modules.get("cudnn") is not None:
        return True
    try:
        return importlib.util.find_spec("cudnn") is not None
    except (ImportError, ValueError):
        return False


def versions(cudnn) -> str:
    fe = getattr(cudnn, "__version__", "?")
    try:
        be = cudnn.backend_version_string()
    except Exception:
        try:
            be = str(cudnn.backend_version())
        except Exception as e:
            be = f"unknown ({type(e).__name__})"
    return f"cuDNN frontend {fe}, cuDNN {be}"


# --- geometry: tapeflow attrs -> a cuDNN convolution ---------------------------------------

def layout_strides(n, c, h, w, fmt):
    """Element strides, in NCHW dim order, of a packed NHWC or NCHW tensor."""
    if fmt == "NHWC":
        return [h * w * c, 1, w * c, c]
    return [c * h * w, h * w, w, 1]


class Spec(NamedTuple):
    """One convolution as cuDNN sees it (hashable: the core of a graph key)."""

    op: str
    fmt: str                 # "NHWC" | "NCHW": the memory layout of images and filter
    dtype: str
    n: int
    c: int
    h: int
    w: int
    k: int                   # output channels
    r: int                   # filter height
    s: int                   # filter width
    ho: int
    wo: int
    pre: tuple               # (top, left)
    post: tuple              # (bottom, right)
    stride: tuple
    dilation: tuple

    def image(self):
        """(dims NCHW, strides) of the input image (and of the input gradient)."""
        return [self.n, self.c, self.h, self.w], layout_strides(self.n, self.c, self.h,
                                                                self.w, self.fmt)

    def filter(self):
        """(dims KCRS, strides): KRSC memory for NHWC, KCRS for NCHW."""
        return [self.k, self.c, self.r, self.s], layout_strides(self.k, self.c, self.r,
                                                                self.s, self.fmt)

    def output(self):
        """(dims NKPQ, strides) of the output (and of the output gradient)."""
        return [self.n, self.k, self.ho, self.wo], layout_strides(self.n, self.k, self.ho,
                                                                  self.wo, self.fmt)

    def memory_shape(self, which):
        """The CuPy array shape of ``"image"``, ``"filter"`` or ``"output"`` in memory."""
        dims = getattr(self, which)()[0]
        if self.fmt == "NHWC":
            return (dims[0], dims[2], dims[3], dims[1])
        return tuple(dims)


def spec_of(op, a_shape, b_shape, dtype, attrs):
    """The :class:`Spec` of one call (``a``, ``b``: the op's two array inputs), or a
    string saying why cuDNN cannot take it."""
    dt = np.dtype(dtype).name
    if dt not in IO_TYPES:
        return f"dtype {dt} (cuDNN path: float16, float32, float64)"
    fmt = attrs.get("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        return f"data_format {fmt!r}"

    def nhwc(shape):
        n, a, b, c = shape
        return (n, a, b, c) if fmt == "NHWC" else (n, b, c, a)

    if op in ("Conv2D", FUSED_OP):
        x, wt, dy = nhwc(a_shape), tuple(b_shape), None
    elif op == "Conv2DBackpropInput":
        x, wt, dy = nhwc(tuple(attrs["input_sizes"])), tuple(a_shape), nhwc(b_shape)
    elif op == "Conv2DBackpropFilter":
        x, wt, dy = nhwc(a_shape), tuple(attrs["filter_sizes"]), nhwc(b_shape)
    else:
        return f"op {op} has no cuDNN path"
    if len(x) != 4 or len(wt) != 4:
        return "not a 2-D convolution of 4-D tensors"
    n, h, w, c = (int(v) for v in x)
    r, s, ci, k = (int(v) for v in wt)
    if ci != c:
        return f"filter in_channels {ci} != input channels {c} (grouped convolution)"
    if min(n, h, w, c, r, s, k) <= 0:
        return "an empty tensor"
    strides = tuple(int(v) for v in attrs.get("strides", (1, 1)))
    dils = tuple(int(v) for v in attrs.get("dilations", (1, 1)))
    padding = attrs.get("padding", "VALID")
    ho, pt, pb = window_geometry(h, r, strides[0], dils[0], padding, 0)
    wo, pl, pr = window_geometry(w, s, strides[1], dils[1], padding, 1)
    if min(pt, pb, pl, pr) < 0:
        return f"negative padding {((pt, pb), (pl, pr))}"
    if ho <= 0 or wo <= 0:
        return "an empty output"
    if dy is not None and tuple(int(v) for v in dy) != (n, ho, wo, k):
        return f"output gradient shape {tuple(dy)} is not the convolution's {(n, ho, wo, k)}"
    return Spec(op, fmt, dt, n, c, h, w, k, r, s, ho, wo, (pt, pl), (pb, pr), strides, dils)


def filter_to_cudnn(xp, w, fmt):
    """HWIO -> KRSC (NHWC) or KCRS (NCHW), contiguous."""
    return xp.ascontiguousarray(w.transpose(3, 0, 1, 2) if fmt == "NHWC"
                                else w.transpose(3, 2, 0, 1))


def filter_from_cudnn(xp, dw, fmt):
    """KRSC (NHWC) or KCRS (NCHW) -> HWIO, contiguous."""
    return xp.ascontiguousarray(dw.transpose(1, 2, 3, 0) if fmt == "NHWC"
                                else dw.transpose(2, 3, 1, 0))


# --- graphs -------------------------------------------------------------------------------

class Plan:
    """A built cuDNN graph for one key, and what it needs to run."""

    __slots__ = ("spec", "graph", "tensors", "workspace", "engine", "precision")

    def __init__(self, spec, graph, tensors, workspace, engine, precision_):
        self.spec = spec
        self.graph = graph
        self.tensors = tensors          # (inputs in op order..., output)
        self.workspace = workspace      # bytes
        self.engine = engine
        self.precision = precision_

    def __repr__(self):
        return (f"<cuDNN plan {self.spec.op} {self.spec.fmt} {self.spec.dtype} "
                f"engine={self.engine} {self.precision} workspace={self.workspace}>")


def epilogue_of(attrs):
    """``(activation or None, leakyrelu_alpha)`` of a ``_FusedConv2D``'s attrs when the
    cuDNN graph can express its epilogue, else a string saying why not."""
    ops = tuple(attrs.get("fused_ops", ()))
    act = ops[1] if len(ops) > 1 else None
    alpha = float(attrs.get("leakyrelu_alpha", 0.2))
    if act not in _EPILOGUES:
        return f"activation {act!r} has no cuDNN pointwise form"
    if act == "LeakyRelu" and not 0.0 <= alpha <= 1.0:
        return f"LeakyRelu alpha {alpha} outside [0, 1] (cuDNN's lower-clip slope)"
    return act, alpha if act == "LeakyRelu" else 0.0


def _epilogue(g, z, act, alpha):
    """The activation ``act`` of the cuDNN tensor ``z`` (the frontend's pointwise ops)."""
    if act == "Relu":
        return g.relu(input=z, name="act")
    if act == "Relu6":
        return g.relu(input=z, lower_clip=0.0, upper_clip=6.0, name="act")
    if act == "LeakyRelu":
        return g.leaky_relu(input=z, negative_slope=alpha, name="act")
    if act == "Elu":
        return g.elu(input=z, name="act")
    if act == "GeluExact":
        return g.gelu(input=z, name="act")
    return g.gelu_approx_tanh(input=z, name="act")


#: the activations the fused graph takes (None: bias only)
_EPILOGUES = (None, "Relu", "Relu6", "LeakyRelu", "Elu", "GeluExact", "GeluApproximate")


def _fused_graph(g, spec, dt, conv, epilogue):
    """``act(conv_fprop(X, W) + B)`` in graph ``g``; returns (X, W, B, Y)."""
    (xd, xs), (wd, ws), (yd, ys) = spec.image(), spec.filter(), spec.output()
    x = g.tensor(name="X", dim=xd, stride=xs, data_type=dt)
    w = g.tensor(name="W", dim=wd, stride=ws, data_type=dt)
    b = g.tensor(name="B", dim=[1, spec.k, 1, 1], stride=[spec.k, 1, spec.k, spec.k],
                 data_type=dt)
    z = g.bias(input=g.conv_fprop(image=x, weight=w, **conv), bias=b, name="bias")
    act, alpha = epilogue
    out = z if act is None else _epilogue(g, z, act, alpha)
    out.set_output(True).set_dim(yd).set_stride(ys).set_data_type(dt)
    return x, w, b, out


def build_plan(cudnn, handle, spec: Spec, tf32: bool, epilogue=None) -> Plan:
    """Build and check the cuDNN graph of ``spec``; raises when cuDNN cannot run it.
    ``epilogue``: ``(activation, alpha)`` of a ``_FusedConv2D`` (:func:`epilogue_of`)."""
    dt = getattr(cudnn.data_type, IO_TYPES[spec.dtype])
    acc = cudnn.data_type.DOUBLE if spec.dtype == "float64" else cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=dt, intermediate_data_type=acc, compute_data_type=acc,
                      handle=handle)
    (xd, xs), (wd, ws), (yd, ys) = spec.image(), spec.filter(), spec.output()
    conv = {"pre_padding": list(spec.pre), "post_padding": list(spec.post),
            "stride": list(spec.stride), "dilation": list(spec.dilation),
            "compute_data_type": acc}
    if spec.op == FUSED_OP:
        tensors = _fused_graph(g, spec, dt, conv, epilogue)
    elif spec.op == "Conv2D":
        x = g.tensor(name="X", dim=xd, stride=xs, data_type=dt)
        w = g.tensor(name="W", dim=wd, stride=ws, data_type=dt)
        out = g.conv_fprop(image=x, weight=w, **conv)
        out.set_output(True).set_dim(yd).set_stride(ys).set_data_type(dt)
        tensors = (x, w, out)
    elif spec.op == "Conv2DBackpropInput":
        w = g.tensor(name="W", dim=wd, stride=ws, data_type=dt)
        dy = g.tensor(name="DY", dim=yd, stride=ys, data_type=dt)
        out = g.conv_dgrad(loss=dy, filter=w, **conv)
        out.set_output(True).set_dim(xd).set_stride(xs).set_data_type(dt)
        tensors = (w, dy, out)
    else:
        x = g.tensor(name="X", dim=xd, stride=xs, data_type=dt)
        dy = g.tensor(name="DY", dim=yd, stride=ys, data_type=dt)
        out = g.conv_wgrad(image=x, loss=dy, **conv)
        out.set_output(True).set_dim(wd).set_stride(ws).set_data_type(dt)
        tensors = (x, dy, out)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    notes = precision.excluded_notes(cudnn, spec.dtype, tf32)
    if notes:
        g.deselect_numeric_notes(notes)
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
    try:
        engine = str(g.get_plan_name_at_index(0))
    except Exception:
        engine = "?"
    return Plan(spec, g, tensors, int(g.get_workspace_size()), engine,
                precision.label(spec.dtype, tf32))


class GraphCache:
    """A bounded LRU ``{key: Plan or reason string}``."""

    def __init__(self, maxsize=CACHE_SIZE):
        self.maxsize = maxsize
        self._d: collections.OrderedDict = collections.OrderedDict()
        self.builds = 0
        self.hits = 0

    def get(self, key):
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
            self.hits += 1
        return v

    def put(self, key, value):
        self._d[key] = value
        self._d.move_to_end(key)
        self.builds += 1
        while len(self._d) > self.maxsize:
            self._d.popitem(last=False)

    def mark_failed(self, plan, why):
        """Replace ``plan`` by the reason it failed (its key then runs im2col)."""
        for key, v in list(self._d.items()):
            if v is plan:
                self._d[key] = why

    def values(self):
        return list(self._d.values())

    def __len__(self):
        return len(self._d)

    def __contains__(self, key):
        return key in self._d

    def clear(self):
        self._d.clear()


# --- the kernels ---------------------------------------------------------------------------

class Convolutions:
    """The three conv kernels of one CuPy module: cuDNN when selected, else ``shared``."""

    def __init__(self, cp, shared):
        self.cp = cp
        self.shared = shared                    # {op: the im2col kernel}
        self.cache = GraphCache()
        self.handles: dict = {}                 # device id -> [cuDNN handle, stream ptr]
        self.lock = threading.RLock()
        self.logged: set = set()
        self.counts = collections.Counter()     # (op, "cudnn" | "im2col") -> calls
        self.last: dict = {}                    # op -> ("cudnn", engine) | ("im2col", why)

    # selection ------------------------------------------------------------------------
    def _note(self, key, msg):
        if key not in self.logged:
            self.logged.add(key)
            log.debug(msg)

    def plan_for(self, op, a, b, attrs):
        """The :class:`Plan` to run, or ``(None, why the im2col kernel runs)``."""
        if not tapeflow.config.cudnn_convolutions_enabled():
            why = f"cuDNN path off (opt in with {HOW_TO_ENABLE})"
            self._note(("off",), f"convolutions on cuda use im2col: {why}")
            return None, why
        cudnn, why = frontend()
        if cudnn is None:
            self._note(("frontend",), f"convolutions on cuda use im2col: {why}")
            return None, why
        spec = spec_of(op, a.shape, b.shape, a.dtype, attrs)
        if isinstance(spec, str):
            self._note(("spec", op, a.shape, b.shape, str(a.dtype), repr(sorted(attrs.items()))),
                       f"{op} on cuda uses im2col for {self._case(a, b, attrs)}: "
                       f"cuDNN cannot take {spec}")
            return None, spec
        tf32 = precision.enabled()
        dev = int(self.cp.cuda.runtime.getDevice())
        key = (spec, tf32, dev)
        if op == FUSED_OP:
            ep = epilogue_of(attrs)
            if isinstance(ep, str):
                return None, ep
            key = (spec, tf32, dev, ep)
        with self.lock:
            hit = self.cache.get(key)
            if hit is None:
                hit = self._build(cudnn, key)
                self.cache.put(key, hit)
        if isinstance(hit, str):
            return None, hit
        return hit, None

    def _build(self, cudnn, key):
        spec, tf32, dev = key[:3]
        epilogue = key[3] if len(key) > 3 else None
        what = (f"{spec.op} on cuda:{dev}, {spec.fmt} {spec.dtype} input "
                f"{list(spec.memory_shape('image'))}, filter {[spec.r, spec.s, spec.c, spec.k]},"
                f" strides {list(spec.stride)}, padding pre {list(spec.pre)} post "
                f"{list(spec.post)}, dilations {list(spec.dilation)}, "
                f"{precision.label(spec.dtype, tf32)}")
        try:
            plan = build_plan(cudnn, self._handle(cudnn, dev)[0], spec, tf32, epilogue)
        except Exception as e:  # unsupported here: the im2col kernel runs it
            why = f"cuDNN has no engine for it ({type(e).__name__}: {e})"
            log.debug("%s: im2col (%s)", what, why)
            return why
        log.debug("%s: cuDNN engine %s, workspace %d bytes", what, plan.engine, plan.workspace)
        return plan

    @staticmethod
    def _case(a, b, attrs):
        return (f"inputs {list(a.shape)} and {list(b.shape)} {a.dtype}, "
                + ", ".join(f"{k}={v}" for k, v in sorted(attrs.items())))

    # execution ------------------------------------------------------------------------
    def _handle(self, cudnn, dev):
        h = self.handles.get(dev)
        if h is None:
            h = self.handles[dev] = [cudnn.create_handle(), None]
        return h

    def run(self, plan, a, b, bias=None):
        """Execute ``plan`` on the op's two inputs (and the fused op's ``bias``);
        returns the op's output array."""
        cp = self.cp
        spec = plan.spec
        cudnn = frontend()[0]
        if spec.op == FUSED_OP:
            a = cp.ascontiguousarray(a)
            b = filter_to_cudnn(cp, b, spec.fmt)
            bias = cp.ascontiguousarray(bias)
            out = cp.empty(spec.memory_shape("output"), dtype=a.dtype)
        elif spec.op == "Conv2D":
            a = cp.ascontiguousarray(a)
            b = filter_to_cudnn(cp, b, spec.fmt)
            out = cp.empty(spec.memory_shape("output"), dtype=a.dtype)
        elif spec.op == "Conv2DBackpropInput":
            a = filter_to_cudnn(cp, a, spec.fmt)
            b = cp.ascontiguousarray(b)
            out = cp.empty(spec.memory_shape("image"), dtype=b.dtype)
        else:
            a = cp.ascontiguousarray(a)
            b = cp.ascontiguousarray(b)
            out = cp.empty(spec.memory_shape("filter"), dtype=a.dtype)
        ws = cp.cuda.alloc(plan.workspace) if plan.workspace else None
        dev = int(cp.cuda.runtime.getDevice())
        stream = cp.cuda.get_current_stream().ptr
        buffers = dict(zip(plan.tensors, [x.data.ptr for x in (a, b, bias, out)
                                          if x is not None]))
        with self.lock:
            h = self._handle(cudnn, dev)
            if h[1] != stream:
                cudnn.set_stream(handle=h[0], stream=stream)
                h[1] = stream
            plan.graph.execute(buffers, ws.ptr if ws is not None else 0, handle=h[0])
        if spec.op == "Conv2DBackpropFilter":
            out = filter_from_cudnn(cp, out, spec.fmt)
        return out

    def kernel(self, op):
        shared = self.shared[op]

        def k(a, b, *bias, **attrs):
            plan, why = self.plan_for(op, a, b, attrs)
            if plan is not None:
                try:
                    out = self.run(plan, a, b, *bias)
                except Exception as e:  # cuDNN refused at run time: never again for this key
                    why = f"cuDNN failed to run it ({type(e).__name__}: {e})"
                    log.warning("%s on cuda: %s; using im2col for this case from now on",
                                op, why)
                    with self.lock:
                        self.cache.mark_failed(plan, why)
                else:
                    self.counts[(op, "cudnn")] += 1
                    self.last[op] = ("cudnn", plan.engine, plan.precision)
                    return out
            self.counts[(op, "im2col")] += 1
            self.last[op] = ("im2col", why)
            return shared(a, b, *bias, **attrs)

        k.__name__ = f"cudnn_or_im2col_{op}"
        k.__wrapped__ = shared
        return k


#: the instance the built kernel table uses (None until the table is built)
ACTIVE: list = [None]


def build(ctx) -> dict:
    """``{op: kernel}`` for the conv ops present in ``ctx.shared`` (the table built so
    far, ``{op: KernelSpec or fn}``: the im2col kernels), the fused convolution
    ``_FusedConv2D`` included (the shared kernel: im2col with the bias and activation
    applied in place afterwards, when cuDNN does not take it); ``ctx.cp``: CuPy."""
    fns = ctx.shared
    conv = Convolutions(ctx.cp, {op: KernelSpec.of(fns[op]).fn for op in (*OPS, FUSED_OP)
                                 if op in fns})
    ACTIVE[0] = conv
    return {op: conv.kernel(op) for op in conv.shared}


def describe() -> str:
    """One line for ``python -m tapeflow info``: which conv path is active on cuda."""
    prec = f"float32 precision: {precision.label()}"
    if not tapeflow.config.cudnn_convolutions_enabled():
        found = _installed()
        return (f"convolutions: im2col + cuBLAS GEMM; cuDNN path switched off "
                f"({'frontend installed' if found else INSTALL_HINT}; enable "
                f"with {HOW_TO_ENABLE}); {prec}")
    cudnn, why = frontend()
    if cudnn is None:
        return f"convolutions: im2col + cuBLAS GEMM (cuDNN path enabled but {why}); {prec}"
    text = f"convolutions: cuDNN ({versions(cudnn)}) where it supports the case, else im2col"
    conv = ACTIVE[0]
    if conv is not None:
        n_ok = sum(1 for v in conv.cache.values() if not isinstance(v, str))
        text += (f"; {n_ok} graphs built, {len(conv.cache) - n_ok} cases on im2col; calls: "
                 + (", ".join(f"{op} {path} {n}" for (op, path), n in sorted(conv.counts.items()))
                    or "none yet"))
    return f"{text}; {prec}"


def reset_for_tests():
    """Forget the imported frontend and the active instance's graphs and logs."""
    global _frontend
    _frontend = None
    conv = ACTIVE[0]
    if conv is not None:
        conv.cache.clear()
        conv.logged.clear()
        conv.counts.clear()
        conv.last.clear()
