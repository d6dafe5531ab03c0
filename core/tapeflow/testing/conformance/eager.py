"""The conformance suite: every :class:`~tapeflow.testing.opinfo.OpSpec` on every device.

Five kinds of checks, each a plain function raising ``AssertionError`` (usable
without pytest), and each also a *case* the pytest suite turns into one test item:

``forward`` (spec x dtype x device)
    every sample of that dtype, on the device, against ``spec.ref`` on the host
    (NumPy); result dtype, shape, device and values (tolerances per dtype,
    :data:`DEFAULT_TOL`, overridden by ``spec.tol``). Random ops are validated by
    ``spec.check(out, *args, **kwargs)`` instead: ``out`` is the host copy (NumPy
    arrays, a tuple for several outputs), and ``check`` runs inside
    ``tf.device(<device under test>)``; it raises AssertionError or returns False
    to fail.
``noncontiguous`` (spec x dtype x device)
    the same, once per layout of :data:`LAYOUTS` for samples with an array argument
    it applies to, every such argument given as a view in that layout: an
    ``"offset view"`` (rank >= 1: the data starts past its buffer's first element),
    ``"transposed"`` (rank >= 2: transposed and strided) and ``"broadcast (stride
    0)"`` (axis 0 of length >= 2 has stride 0; values: the first slice repeated, for
    the reference too). A failure names the layout; a layout a device cannot hold
    (its view ops copy) is skipped there.
``gradients`` (spec x device)
    every float64 sample through :func:`~tapeflow.testing.check_grads` to
    ``spec.grad_order``, w.r.t. ``sample.grad_argnums`` (default: float arrays).
``errors`` (spec x device)
    every :class:`ErrorSample` raises ``error`` with a message containing
    ``[Op:`` and the device name, in which the regular expression ``match`` is
    found (``re.search``).
``traced`` (spec x one dtype x device; :data:`TRACED_DTYPES`)
    ``spec.fn`` with the sample's kwargs bound, wrapped in :func:`tapeflow.function`
    and called three times: the tracing call, a replay with the same arguments
    (the Python function must not run again) and a replay with other values of the
    same signature (a second draw of the samples); each result compared like
    ``forward``, and the earlier results and the inputs must be unchanged at the
    end. Specs that cannot be traced are listed in :data:`UNTRACEABLE` with the
    reason (skipped, never silently). One dtype per spec (float32 when tested):
    the traced kind tests the function machinery, ``forward`` every dtype's kernel.
    A traced case costs about what a forward case costs, so all dtypes would double
    the forward time (measured on 2 cores, cpu:0 + opencl:0: forward 113 s, traced
    with every dtype 118 s, with one dtype 28 s, finding the same failures).

Which dtypes: the dtypes the op's kernel on that device type declares
(``spec.op``), or ``spec.dtypes`` (intersected with the kernel's when both
exist); a kernel declaring "any dtype" means every tapeflow dtype the samples
provide (``samples(dtype, rng)`` returning ``[]`` means "not for this dtype").

Run it for one spec without pytest::

    from tapeflow.testing import conformance
    conformance.check_spec(spec, devices=["cpu:0"])   # AssertionError on failure

or as a pytest suite in a third-party package (the file tapeflow uses itself)::

    from tapeflow.testing import conformance
    SPECS = conformance.collect_specs() + MY_SPECS
    def pytest_generate_tests(metafunc):
        conformance.parametrize(metafunc, SPECS)
    def test_forward(conformance_case): conformance_case.run()
    def test_forward_noncontiguous(conformance_case): conformance_case.run()
    def test_gradients(conformance_case): conformance_case.run()
    def test_errors(conformance_case): conformance_case.run()
    def test_traced(conformance_case): conformance_case.run()
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zlib

import ml_dtypes
import numpy as np

from ..gradcheck import check_grads
from ..opinfo import ErrorSample, OpSpec, Sample

__all__ = ["KNOWN_DEVICE_TYPES", "unavailable_devices", "DEFAULT_TOL", "Case", "SkipCase",
           "tolerance", "dtypes_under_test", "samples_for", "noncontiguous_tensor",
           "check_sample", "check_forward", "check_gradients", "check_errors", "check_spec",
           "check_batched",
           "cases", "collect_specs", "parametrize", "gap_matches", "KINDS", "opcheck",
           "check_traced", "check_traced_sample", "UNTRACEABLE", "TRACED_DTYPES",
           "untraceable_reason", "LAYOUTS", "layout_candidate", "broadcast_values",
           "reference_as_result", "edge_samples"]

#: (rtol, atol) per result dtype when the spec gives none; integers and bools compare exactly
DEFAULT_TOL = {
    # bfloat16 keeps 8 significant bits: one rounding is 2**-9 ~ 2e-3 relative, and an op
    # computed in float32 from rounded inputs and rounded again is off by a few of those
    "bfloat16": (2e-2, 2e-2),
    "float16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-7, 1e-7),
}

#: pytest test-function name -> kind of case
KINDS = {
    "test_forward": "forward",
    "test_forward_noncontiguous": "noncontiguous",
    "test_gradients": "gradients",
    "test_errors": "errors",
    "test_traced": "traced",
}


#: device types any tapeflow installation may know of, and the distribution that
#: provides each; when absent they are reported (and their tests skipped) with the reason
KNOWN_DEVICE_TYPES = {"cuda": "tapeflow-cuda-cupy", "opencl": "tapeflow-opencl"}


class SkipCase(Exception):
    """Raised by a check that cannot run here; the pytest layer turns it into a skip."""


def _tf():
    import tapeflow
    return tapeflow


def unavailable_devices() -> dict:
    """``{device name: reason}`` for devices this installation knows of but cannot use:
    devices of backends that report themselves unavailable, and the well-known
    device types (:data:`KNOWN_DEVICE_TYPES`) no loaded backend provides."""
    import tapeflow.plugins
    from ...runtime.devices import _table
    have = {d.type for d in _table.by_name.values()}
    out = {}
    for be in _table.backends:
        reason = _table.unavailable.get(be.name)
        if reason and be.device_type not in have:
            out.setdefault(f"{be.device_type}:0", f"backend {be.name!r} is unavailable: {reason}")
    report = tapeflow.plugins.plugin_report()
    for typ, dist in KNOWN_DEVICE_TYPES.items():
        name = f"{typ}:0"
        if typ in have or name in out:
            continue
        bad = [p for p in report if p.distribution == dist and p.status != "loaded"]
        if bad:
            p = bad[0]
            out[name] = f"plugin {p.name!r} ({p.distribution} {p.version}) {p.status}: {p.reason}"
        else:
            out[name] = (f"no installed backend provides device type '{typ}' "
                         f"(pip install {dist})")
    return out


# --- dtypes, samples, tolerances -----------------------------------------------------

def _op_kernel(spec, device_type):
    """(OpDef or None, KernelEntry or None); SkipCase when spec.op is not registered."""
    if not spec.op:
        return None, None
    from ...runtime.registry import OPS
    op = OPS.get(spec.op)
    if op is None:
        raise SkipCase(f"op {spec.op!r} is not registered (is the plugin that defines it "
                       "loaded? see python -m tapeflow info)")
    return op, op.kernels.get(device_type)


def dtypes_under_test(spec, device_type):
    """``(dtypes, explicit, excluded)`` for ``spec`` on ``device_type``.

    ``explicit``: the dtypes were declared (by the kernel or the spec), so a dtype
    without samples is a gap worth showing; ``excluded``: ``{dtype name: reason}``
    for spec dtypes the kernel does not declare.
    """
    tf = _tf()
    op, entry = _op_kernel(spec, device_type)
    kdt = entry.dtypes if entry is not None else None
    excluded = {}
    if spec.dtypes is not None:
        sd = [tf.as_dtype(d) for d in spec.dtypes]
        if kdt is not None:
            for d in sd:
                if d not in kdt:
                    excluded[d.name] = (f"the {spec.op} kernel on '{device_type}' does not declare "
                                        f"{d.name}")
            sd = [d for d in sd if d in kdt]
        return sd, True, excluded
    # complex dtypes are tested by the specs that name them (samples with imaginary
    # parts and complex references: specs/complex.py), not by casting real samples
    if kdt is not None:
        return [d for d in kdt if not d.is_complex], True, excluded
    return [d for d in tf.dtypes.ALL_DTYPES if not d.is_complex], False, excluded


def _seed(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _kind(np_dtype):
    """NumPy's dtype kind, with ml_dtypes' bfloat16 (kind "V") a float ("f")."""
    return "f" if np_dtype == _BF16 else np_dtype.kind


def _bf16_to_f32(a):
    """A bfloat16 array as float32 (exactly), for references: NumPy has bfloat16 loops
    for elementwise ufuncs only, and reductions there accumulate in bfloat16."""
    return a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == _BF16 else a


def samples_for(spec, dtype):
    """``spec.samples(dtype, rng)`` with a deterministic rng per (spec, dtype).

    ``dtype`` is given to the samples function as a tapeflow ``DType`` (``tf.float32``:
    ``.name``, ``.np`` its NumPy dtype, ``.is_floating``, ``.is_integer``,
    ``.is_bool``; it compares equal to its name and NumPy dtype, and ``dtype is
    tf.float32`` holds), which NumPy accepts as a dtype there: ``np.ones(3, dtype)``,
    ``x.astype(dtype)`` (``DType.dtype`` is its NumPy dtype)."""
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    rng = np.random.default_rng(_seed(spec.name, dtype.name))
    if dtype is tf.bfloat16:
        # specs write samples with NumPy's float kinds ("f"); bfloat16 is kind "V": the
        # float32 samples, rounded to bfloat16 (a ``dtype`` kwarg float32 becomes bfloat16)
        return [_to_bf16(s, tf) for s in _draw(spec, tf.float32, rng)]
    return _draw(spec, dtype, rng)


def _to_bf16(sample, tf):
    def conv(a):
        if isinstance(a, np.ndarray) and a.dtype == np.float32:
            return a.astype(_BF16)
        return tf.bfloat16 if a is tf.float32 else a
    kw = {k: conv(v) for k, v in sample.kwargs.items()}
    ref_kw = (None if sample.ref_kwargs is None else
              {k: conv(v) for k, v in sample.ref_kwargs.items()})
    return dataclasses.replace(sample, args=tuple(conv(a) for a in sample.args), kwargs=kw,
                               ref_kwargs=ref_kw)


def _draw(spec, dtype, rng):
    return list(spec.samples(dtype, rng) or [])


def tolerance(spec, case_dtype, out_dtype):
    """(rtol, atol) for a result of ``out_dtype`` in a case of ``case_dtype``, or
    ``None`` for an exact comparison.

    Float results use the tolerance of the case dtype when that is a float dtype
    (float16 inputs compare loosely even if the op returns float32), else of the
    result dtype; ``spec.tol`` overrides :data:`DEFAULT_TOL`. Integer and bool
    results compare exactly unless ``spec.tol`` names their dtype.
    """
    od = np.dtype(out_dtype)
    odn = "bool" if od.kind == "b" else od.name
    if _kind(od) == "f":
        cd = getattr(case_dtype, "name", case_dtype)
        key = cd if cd in DEFAULT_TOL else odn
        return spec.tol.get(key) or DEFAULT_TOL.get(key, (1e-5, 1e-5))
    return spec.tol.get(odn)


def _grad_argnums(sample):
    if sample.grad_argnums is not None:
        return tuple(sample.grad_argnums)
    return tuple(i for i, a in enumerate(sample.args)
                 if isinstance(a, np.ndarray) and a.dtype.kind == "f")


# --- tensors on the device under test: non-contiguous layouts ----------------------------

#: the layouts the ``noncontiguous`` checks feed a kernel, by the names failure messages
#: use: each runs the sample once with every eligible array argument in that layout
#: (see :func:`noncontiguous_tensor` and :func:`layout_candidate`)
OFFSET, TRANSPOSED, BROADCAST = "offset view", "transposed", "broadcast (stride 0)"
LAYOUTS = (OFFSET, TRANSPOSED, BROADCAST)


def layout_candidate(a, layout) -> bool:
    """Whether the sample argument ``a`` is given in ``layout`` by the non-contiguous checks:
    a non-empty NumPy array of rank >= 1 (``"offset view"``), rank >= 2
    (``"transposed"``), or whose first axis is at least 2 long (``"broadcast (stride 0)"``:
    that axis gets stride 0)."""
    if not isinstance(a, np.ndarray) or a.ndim == 0 or a.size == 0:
        return False
    if layout == TRANSPOSED:
        return a.ndim >= 2
    if layout == BROADCAST:
        return a.shape[0] >= 2
    if layout == OFFSET:
        return True
    raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")


def _nc_candidate(a):
    return any(layout_candidate(a, lay) for lay in LAYOUTS)


def _has_nc(sample):
    return any(_nc_candidate(a) for a in sample.args)


def broadcast_values(x):
    """``x``'s first slice along axis 0 repeated along that axis: the values a stride-0
    view of ``x``'s shape can hold (what the ``"broadcast (stride 0)"`` layout feeds,
    and what the reference then gets)."""
    return np.broadcast_to(x[:1], x.shape)


def _filler(dtype):
    """What fills the part of an offset view's buffer before the view: a value that makes
    a kernel reading it (ignoring the offset) visibly wrong."""
    if _kind(dtype) in "fc":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _native_layout(a):
    """``(byte strides, byte offset into its buffer)`` of a backend-native array, each
    None where it cannot be read: NumPy and CuPy arrays, ``pyopencl.array.Array``."""
    strides = getattr(a, "strides", None)
    strides = tuple(int(s) for s in strides) if strides is not None else None
    offset = None
    if isinstance(a, np.ndarray):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    elif hasattr(a, "base_data") and hasattr(a, "offset"):        # pyopencl.array.Array
        offset = int(a.offset)
    elif hasattr(getattr(a, "data", None), "mem"):                # cupy.ndarray
        offset = int(a.data.ptr) - int(a.data.mem.ptr)
    return strides, offset


def _lacks_layout(data, shape, itemsize, layout):
    """Why the native array ``data`` (of ``shape``) is not in ``layout``, or None
    (None too where its layout cannot be read)."""
    strides, offset = _native_layout(data)
    if layout == OFFSET and offset is not None and offset <= 0:
        return "the view starts at element 0 of its buffer (slicing made a copy?)"
    if layout == BROADCAST and strides is not None and strides[0] != 0:
        return f"axis 0 has stride {strides[0]}, not 0 (broadcast_to made a copy?)"
    if layout == TRANSPOSED and strides is not None:
        c = [itemsize] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            c[k] = c[k + 1] * shape[k + 1]
        if all(s == cs or n == 1 for s, cs, n in zip(strides, c, shape)):
            return "the result is C-contiguous (transpose made a copy?)"
    return None


def noncontiguous_tensor(x, device, via_ops=None, layout=TRANSPOSED):
    """A tensor equal to ``x`` whose data is a view in ``layout`` (:data:`LAYOUTS`):

    ``"transposed"`` (rank >= 2)
        memory order differs from index order (the last two axes swapped) and strided
        (every other element of a buffer twice as long);
    ``"offset view"`` (rank >= 1)
        C-contiguous, starting at element ``prod(x.shape[1:])`` of a buffer one row
        longer (``buf[1:]``; on OpenCL the ``pyopencl.array.Array`` has a non-zero
        ``offset``, on CUDA the pointer is past the allocation's start); the row
        before holds NaN (floats) or the dtype's maximum, so a kernel that reads the
        buffer from its start gets wrong values;
    ``"broadcast (stride 0)"`` (rank >= 1)
        ``x[:1]`` broadcast along axis 0 (stride 0): ``x`` must be
        :func:`broadcast_values` of something (equal along axis 0).

    On the host the view is wrapped directly (``np.broadcast_to`` for stride 0); on
    other devices (or with ``via_ops=True``) it is built with tapeflow ops on the
    device (slicing, ``tf.transpose``, ``tf.broadcast_to``) and its values are
    checked. Raises SkipCase when the device's ops return a copy instead of a view
    of that layout (the backend cannot hold it, so its kernels never see it).
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    x = np.asarray(x)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    if x.ndim < (2 if layout == TRANSPOSED else 1):
        raise ValueError(f"a {layout} needs an array of rank >= "
                         f"{2 if layout == TRANSPOSED else 1}, got shape {x.shape}")
    if layout == BROADCAST and not np.array_equal(x, broadcast_values(x),
                                                  equal_nan=_kind(x.dtype) in "fc"):
        raise ValueError("a stride-0 view holds its first slice along axis 0 repeated: "
                         "pass broadcast_values(x)")
    if via_ops is None:
        via_ops = not dev.is_host
    if layout == TRANSPOSED:
        xs = np.swapaxes(x, -1, -2)
        host = np.zeros(xs.shape[:-1] + (2 * xs.shape[-1],), dtype=x.dtype)
        host[..., ::2] = xs
    elif layout == OFFSET:
        host = np.full((x.shape[0] + 1,) + x.shape[1:], _filler(x.dtype), dtype=x.dtype)
        host[1:] = x
    else:
        host = np.ascontiguousarray(x[:1])
    if not via_ops:
        from ...runtime.tensor import _wrap
        if layout == TRANSPOSED:
            view = np.swapaxes(host[..., ::2], -1, -2)
        elif layout == OFFSET:
            view = host[1:]
        else:
            view = np.broadcast_to(host, x.shape)
        return _wrap(view, dev)
    transpose = getattr(tf, "transpose", None)
    broadcast_to = getattr(tf, "broadcast_to", None)
    if transpose is None or broadcast_to is None or not hasattr(tf.Tensor, "__getitem__"):
        raise SkipCase(f"cannot build non-contiguous tensors on {dev}: needs tf.transpose, "
                       "tf.broadcast_to and Tensor slicing")
    with tf.device(dev):
        base = tf.constant(host, device=dev)
        if layout == TRANSPOSED:
            perm = list(range(x.ndim))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            t = transpose(base[..., ::2], perm)
        elif layout == OFFSET:
            t = base[1:]
        else:
            t = broadcast_to(base, x.shape)
    got = t.numpy()
    if got.shape != x.shape or not np.array_equal(got, x, equal_nan=_kind(x.dtype) in "fc"):
        raise AssertionError(f"building a non-contiguous tensor ({layout}) on {dev} with "
                             f"tapeflow ops gave wrong values (shape {got.shape}, expected "
                             f"{x.shape}); see the slicing/transpose/broadcast_to conformance "
                             "tests")
    why = _lacks_layout(t._data, x.shape, x.dtype.itemsize, layout)
    if why:
        # The backend's view ops copy, so none of its tensors has this layout and its
        # kernels never receive one: nothing to test.
        raise SkipCase(f"{dev} cannot hold a {layout} tensor: {why}")
    return t


def _to_device(args, dev, layout=None):
    """The sample's NumPy arrays as tensors on ``dev`` (other arguments unchanged); with
    a ``layout``, every argument eligible for it (:func:`layout_candidate`) in that
    layout (:func:`noncontiguous_tensor`)."""
    tf = _tf()
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            if layout and layout_candidate(a, layout):
                out.append(noncontiguous_tensor(a, dev, layout=layout))
            else:
                out.append(tf.constant(a, device=dev))
        else:
            out.append(a)
    return out


# --- comparing -----------------------------------------------------------------------

def _describe_args(args, kwargs=None):
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{'bool' if a.dtype == np.bool_ else a.dtype.name}{list(a.shape)}")
        else:
            r = repr(a)
            parts.append(r if len(r) <= 40 else r[:37] + "...")
    s = "(" + ", ".join(parts) + ")"
    if kwargs:
        s += " " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return s


def _fmt(a):
    s = np.array2string(np.asarray(a), precision=6, threshold=40, edgeitems=3, max_line_width=100)
    s = s.replace("\n", "\n              ")
    return s if len(s) <= 800 else s[:800] + " ..."


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _np_case_dtype(case_dtype):
    """The NumPy dtype of a case dtype (a DType, a NumPy dtype or name), or None."""
    if case_dtype is None:
        return None
    try:
        return np.dtype(getattr(case_dtype, "np", case_dtype))
    except TypeError:
        return None


def reference_as_result(expected, result_dtype, case_dtype=None):
    """The reference's output ``expected`` as a NumPy array to compare with a result of
    ``result_dtype`` in a case of ``case_dtype``: references may be written in any
    precision and return Python values.

    * a Python value (``float``, ``int``, ``bool``, a list) has no dtype of its own: it
      takes the result's dtype when that is of the same or a wider kind (bool < int <
      float), as a Python scalar does in NumPy 2;
    * a float array (or NumPy scalar) more precise than the result, when the result has
      the dtype of the case (a float64 reference for a float32 op), is rounded to it;
    * anything else keeps its dtype, so a result of the wrong dtype or kind is reported.
    """
    rd = np.dtype(result_dtype)
    weak = not isinstance(expected, (np.ndarray, np.generic))
    exp = np.asarray(expected)
    ek, rk = _kind(exp.dtype), _kind(rd)
    if exp.dtype == rd or ek not in _KIND_ORDER or rk not in _KIND_ORDER:
        return exp
    if weak and _KIND_ORDER[ek] <= _KIND_ORDER[rk]:
        with np.errstate(all="ignore"):
            return exp.astype(rd)
    cd = _np_case_dtype(case_dtype)
    if (ek == "f" and rk == "f" and rd == cd
            and exp.dtype.itemsize > rd.itemsize):
        with np.errstate(all="ignore"):     # (beyond the dtype's range: inf, as the op)
            return exp.astype(rd)
    return exp


def _compare_one(actual, expected, spec, case_dtype, dev, what):
    """Compare one output tensor with the reference's: device, shape, dtype (after
    :func:`reference_as_result`), values within :func:`tolerance` of the case dtype."""
    tf = _tf()
    if isinstance(actual, tf.Variable):
        actual = actual.read_value()
    if not isinstance(actual, tf.Tensor):
        raise AssertionError(f"{what}: returned a {type(actual).__name__}, expected a tf.Tensor")
    if actual.device != dev.name:
        raise AssertionError(f"{what}: the result is on {actual.device}, expected {dev.name}")
    got = actual.numpy()
    if case_dtype is None:
        case_dtype = got.dtype
    exp = reference_as_result(expected, got.dtype, case_dtype)
    if got.shape != exp.shape:
        raise AssertionError(f"{what}: result shape {got.shape} != reference shape {exp.shape}")
    if spec.check_dtype and got.dtype != exp.dtype:
        raise AssertionError(f"{what}: result dtype {tf.dtypes.from_numpy(got.dtype).name} != "
                             f"reference dtype {exp.dtype.name} (a more precise float reference "
                             "is rounded to the case dtype, Python values take the result's; "
                             "set check_dtype=False in the spec only if the reference cannot "
                             "produce the right dtype)")
    if spec.signed_zeros and _kind(exp.dtype) == "f":
        zero = (exp == 0) & (got.astype(exp.dtype) == 0)
        bad = zero & (np.signbit(got) != np.signbit(exp))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            raise AssertionError(
                f"{what}: the sign of a zero result differs from the NumPy reference "
                f"({int(bad.sum())} element(s), first at index {first})\n"
                f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")
    tol = tolerance(spec, case_dtype, got.dtype)
    if tol is None:
        if _kind(exp.dtype) in "fc":
            ok = np.array_equal(got.astype(exp.dtype), exp, equal_nan=True)
        else:
            ok = np.array_equal(got, exp)
        if ok:
            return
        bad = got != exp if got.shape else np.array(got != exp)
        idx = np.argwhere(bad)
        first = tuple(int(i) for i in idx[0]) if idx.size else ()
        raise AssertionError(
            f"{what}: result differs from the NumPy reference (exact comparison)\n"
            f"  mismatched elements: {int(np.sum(bad))} / {bad.size}, first at index {first}\n"
            f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")
    rtol, atol = tol
    g64 = got.astype(np.float64)
    e64 = exp.astype(np.float64)
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g64 - e64)
        diff = np.where(close, 0.0, np.where(np.isnan(diff), np.inf, diff))
        rel = diff / np.maximum(np.abs(e64), np.finfo(np.float64).tiny)
    ia = np.unravel_index(np.argmax(diff), diff.shape) if diff.ndim else ()
    ir = np.unravel_index(np.argmax(rel), rel.shape) if rel.ndim else ()
    raise AssertionError(
        f"{what}: result differs from the NumPy reference\n"
        f"  mismatched elements: {int(np.sum(~close))} / {close.size}; "
        f"max abs err {float(diff[ia]):.4g} at index {tuple(int(i) for i in ia)}, "
        f"max rel err {float(rel[ir]):.4g} at index {tuple(int(i) for i in ir)} "
        f"(rtol={rtol:g}, atol={atol:g})\n"
        f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")


def _sample_label(spec, sample, dev, dtype, index):
    label = f"sample {index}" if index is not None else "sample"
    if sample.name:
        label += f" {sample.name!r}"
    dname = getattr(dtype, "name", dtype)
    return f"{spec.name}{f' [{dname}]' if dname else ''} on {dev.name}, {label}"


def check_sample(spec, sample, device, dtype=None, noncontiguous=False, index=None):
    """Run one sample forward on ``device`` and compare with ``spec.ref`` (or
    validate with ``spec.check``). Raises AssertionError on a mismatch.

    ``noncontiguous``: ``False`` (contiguous inputs), ``True`` (once per layout of
    :data:`LAYOUTS` that applies to some array argument) or one layout name. Each
    layout run gives every eligible argument (:func:`layout_candidate`) that layout;
    for ``"broadcast (stride 0)"`` their values are :func:`broadcast_values` (the first
    slice along axis 0 repeated) and the reference gets the same values (the layout
    is skipped for a sample whose reference raises on them, e.g. a singular matrix,
    and for random ops validated by ``spec.check``, which need distinct values).
    Every failing layout is reported, each named (``non-contiguous inputs: offset
    view``), so the message says which layout the kernel gets wrong. Returns the number
    of runs (layouts a device cannot hold are skipped, see :func:`noncontiguous_tensor`).
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    if not noncontiguous:
        _run_sample(spec, sample, dev, dtype, index, None)
        return 1
    layouts = LAYOUTS if noncontiguous is True else (noncontiguous,)
    failures, ran = [], 0
    for layout in layouts:
        if not any(layout_candidate(a, layout) for a in sample.args):
            continue
        if layout == BROADCAST and spec.check is not None:
            # A random op's check needs the sample's distinct values (a shuffle of
            # equal rows cannot be told from no shuffle): no repeated-value layout.
            continue
        try:
            ran += _run_sample(spec, sample, dev, dtype, index, layout)
        except SkipCase:
            continue
        except AssertionError as e:
            failures.append(e)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise AssertionError(f"{len(failures)} non-contiguous layouts fail:\n"
                             + "\n".join(f"- {e}" for e in failures)) from failures[0]
    return ran


def _run_sample(spec, sample, dev, dtype, index, layout):
    """One forward run of ``sample`` with contiguous inputs (``layout=None``) or with its
    eligible array arguments in ``layout``; returns 1, or 0 when skipped."""
    tf = _tf()
    variant = ""
    if layout is not None:
        which = [str(i) for i, a in enumerate(sample.args) if layout_candidate(a, layout)]
        variant = (f" (non-contiguous inputs: {layout}; argument{'s' if len(which) > 1 else ''} "
                   f"{', '.join(which)}")
        if layout == BROADCAST:
            args = tuple(broadcast_values(a) if layout_candidate(a, layout) else a
                         for a in sample.args)
            sample = dataclasses.replace(sample, args=args)
            variant += ": the first slice along axis 0 repeated"
            if spec.check is None and not _reference_runs(spec, sample):
                return 0
        variant += ")"
    what = (f"{_sample_label(spec, sample, dev, dtype, index)}{variant} "
            f"{_describe_args(sample.args, sample.kwargs)}")
    # Edge samples (inf, nan, 0) make NumPy warn by design, in kernels and references.
    with tf.device(dev), np.errstate(all="ignore"):
        targs = _to_device(sample.args, dev, layout)
        try:
            out = spec.fn(*targs, **sample.kwargs)
        except Exception as e:
            if layout is None:
                e.add_note(f"conformance: raised by {what}")
                raise
            raise AssertionError(f"{what}: raised {type(e).__name__}: {e}") from e
    _verify(spec, sample, out, dev, dtype, what)
    return 1


def _reference_runs(spec, sample):
    """Whether ``spec.ref`` accepts ``sample`` (values made for a layout may be outside
    the op's domain, e.g. a singular matrix, where the reference raises)."""
    np_args = [_bf16_to_f32(a.copy()) if isinstance(a, np.ndarray) else a
               for a in sample.args]
    ref_kwargs = sample.kwargs if sample.ref_kwargs is None else sample.ref_kwargs
    try:
        with np.errstate(all="ignore"):
            spec.ref(*np_args, **ref_kwargs)
    except Exception:
        return False
    return True


def _verify(spec, sample, out, dev, dtype, what):
    """Compare ``out`` (what ``spec.fn`` returned for ``sample`` on ``dev``) with
    ``spec.ref``, or validate it with ``spec.check`` for random ops.

    The reference may return one array-like for one output (a NumPy array of any
    dtype, a Python scalar or list: see :func:`reference_as_result`), or a list/tuple
    with one entry per output when the op returns several."""
    tf = _tf()
    np_args = [a.copy() if isinstance(a, np.ndarray) else a for a in sample.args]
    if spec.check is not None:
        outs = _as_list(out)
        for k, o in enumerate(outs):
            if not isinstance(o, (tf.Tensor, tf.Variable)):
                raise AssertionError(f"{what}: output {k} is a {type(o).__name__}, expected "
                                     "a tf.Tensor")
            if o.device != dev.name:
                raise AssertionError(f"{what}: output {k} is on {o.device}, expected {dev.name}")
        host = tuple(o.numpy() for o in outs) if isinstance(out, (list, tuple)) else out.numpy()
        try:
            with tf.device(dev), np.errstate(all="ignore"):   # its own draws: same device
                ok = spec.check(host, *np_args, **sample.kwargs)
        except AssertionError as e:
            raise AssertionError(f"{what}: spec.check failed: {e}") from None
        if ok is False:
            raise AssertionError(f"{what}: spec.check returned False for {_fmt(host)}")
        return
    ref_kwargs = sample.kwargs if sample.ref_kwargs is None else sample.ref_kwargs
    with np.errstate(all="ignore"):
        expected = spec.ref(*[_bf16_to_f32(a) for a in np_args], **ref_kwargs)
    multi = isinstance(out, (list, tuple))
    if not multi and isinstance(expected, (list, tuple)) and _one_array(expected):
        expected = np.asarray(expected)        # a list for one output: its values
    outs, exps = _as_list(out), _as_list(expected)
    if multi != isinstance(expected, (list, tuple)) or len(outs) != len(exps):
        raise AssertionError(f"{what}: returned {len(outs)} output(s) "
                             f"({type(out).__name__}); the reference returned {len(exps)} "
                             f"({type(expected).__name__})")
    for k, (o, e) in enumerate(zip(outs, exps)):
        _compare_one(o, e, spec, dtype, dev, what + (f" output {k}" if multi else ""))


def _one_array(values):
    """Whether a list/tuple the reference returned holds the values of one output:
    Python numbers (or lists of them) making a numeric, not ragged, array. A tuple of
    NumPy arrays stands for several outputs."""
    if any(isinstance(v, np.ndarray) for v in values):
        return False
    try:
        a = np.asarray(values)
    except ValueError:
        return False
    return a.dtype.kind in _KIND_ORDER


def check_forward(spec, device, dtype, noncontiguous=False):
    """Every sample of ``dtype`` forward on ``device`` (see :func:`check_sample`; with
    ``noncontiguous``, the samples with an array argument some layout of
    :data:`LAYOUTS` applies to). Returns the number of samples run; raises SkipCase
    when there is nothing to run."""
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    ran = 0
    for i, s in enumerate(samples):
        if noncontiguous and not _has_nc(s):
            continue
        if check_sample(spec, s, device, dtype, noncontiguous, index=i):
            ran += 1
    if not ran:
        raise SkipCase(f"spec {spec.name} has no {dtype.name} sample with a non-empty array "
                       "argument of rank >= 1 whose non-contiguous layouts the device can hold "
                       "(nothing to make non-contiguous)")
    return ran


# --- traced: every op through tapeflow.function ------------------------------------------

#: Specs whose ``fn`` cannot run inside :func:`tapeflow.function`, by spec-name glob:
#: ``{pattern: reason}``. The traced case of a listed spec still runs every sample: the
#: samples that trace must pass; when some raise ``TracingError`` the case is skipped
#: with this reason, naming them; a listed spec whose samples all trace fails, so the
#: list cannot go stale. (A third-party suite can also skip the kind for a spec with
#: ``OpSpec.skip = {"traced": reason}``.)
UNTRACEABLE: dict = {
    "linspace": "tf.linspace reads start, stop and num on the host (tensor arguments are "
                "converted with .numpy()): the output length is a Python value",
    "pad": "tf.pad reads tensor paddings on the host (.numpy()): they decide the output "
           "shape; Python/NumPy paddings trace",
    "__getitem__tensor_index": "a 0-d integer tensor used as an index is converted to a "
                               "Python int (int(k)) by Tensor.__getitem__",
}

#: Which dtypes the ``traced`` kind runs per (spec, device): ``"one"`` (float32 when
#: tested, else the first dtype under test that has samples) or ``"all"`` (every dtype
#: ``forward`` runs). Tracing exercises the function machinery, not the kernels (the
#: forward cases cover every dtype), so one dtype per spec keeps the suite's time down;
#: the environment variable ``TAPEFLOW_TRACED_DTYPES=all`` runs every dtype.
TRACED_DTYPES = "one"


def _traced_dtypes_mode():
    import os
    mode = os.environ.get("TAPEFLOW_TRACED_DTYPES", "").strip().lower() or TRACED_DTYPES
    if mode not in ("one", "all"):
        raise ValueError(f"TAPEFLOW_TRACED_DTYPES must be 'one' or 'all', not {mode!r}")
    return mode


def untraceable_reason(spec):
    """Why ``spec`` cannot be traced (:data:`UNTRACEABLE`), or None."""
    for pat, reason in UNTRACEABLE.items():
        if _glob(pat).fullmatch(spec.name):
            return reason
    return None


def _signature(x):
    """Arrays by shape and dtype, everything else by value (for matching samples)."""
    if isinstance(x, np.ndarray):
        return ("A", x.shape, x.dtype.str)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_signature(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), _signature(v)) for k, v in x.items())))
    return ("P", type(x).__name__, repr(x))


def _arrays(x):
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _arrays(v)]
    if isinstance(x, dict):
        return [a for v in x.values() for a in _arrays(v)]
    return []


def _same_values(a, b):
    return all(np.array_equal(x, y, equal_nan=_kind(x.dtype) in "fc")
               for x, y in zip(_arrays(a.args), _arrays(b.args)))


def _other_values(sample, index, first, second):
    """A sample with ``sample``'s signature (shapes, dtypes, Python arguments, kwargs)
    but other array values: from a second draw of the spec's samples (another rng
    seed; the one at the same index preferred), else another sample of the first
    draw; ``None`` when the spec has none (fixed values, empty arrays)."""
    key = (_signature(sample.args), _signature(sample.kwargs))
    ordered = ([second[index]] if index < len(second) else []) + list(second) + list(first)
    for cand in ordered:
        if cand is sample or (_signature(cand.args), _signature(cand.kwargs)) != key:
            continue
        if not _same_values(cand, sample):
            return cand
    return None


def _fmt_values(sample):
    return "; ".join(_fmt(a).replace("\n", " ") for a in _arrays(sample.args))[:300]


def _host_copies(out):
    tf = _tf()
    return [o.numpy() if isinstance(o, (tf.Tensor, tf.Variable)) else None
            for o in _as_list(out)]


def check_traced_sample(spec, sample, device, dtype=None, index=None, other=None):
    """``spec.fn`` (with ``sample.kwargs`` bound) wrapped in :func:`tapeflow.function`,
    called three times on ``device``: (1) the tracing call, (2) the same arguments
    again, which must replay the graph without running the Python function, and
    (3) ``other``'s arguments (same signature, other values; default: ``sample``'s
    again), which must replay too. Each result is compared with ``spec.ref`` (or
    validated by ``spec.check``) as :func:`check_sample` does; afterwards the results
    of calls 1 and 2 and the input tensors must still hold their values (a replay
    must not write into buffers it returned earlier or was given).

    Raises AssertionError on a mismatch; ``TracingError`` propagates (the op's Python
    needed a tensor's value, see :data:`UNTRACEABLE`).

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import conformance
    >>> from tapeflow.testing.opinfo import OpSpec, Sample
    >>> spec = OpSpec(name="square", fn=tf.square, ref=np.square, samples=None)
    >>> conformance.check_traced_sample(spec, Sample((np.arange(3.0),)), "cpu:0",
    ...                                 other=Sample((np.ones(3),)))
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    label = f"sample {index}" if index is not None else "sample"
    if sample.name:
        label += f" {sample.name!r}"
    dname = getattr(dtype, "name", dtype)
    what = (f"{spec.name}{f' [{dname}]' if dname else ''} on {dev.name}, {label} "
            f"{_describe_args(sample.args, sample.kwargs)}, in tf.function")
    traces = [0]
    kwargs = dict(sample.kwargs)

    def traced(*args):
        traces[0] += 1
        return spec.fn(*args, **kwargs)

    traced.__name__ = re.sub(r"\W", "_", spec.name)
    f = tf.function(traced)
    if other is None or other is sample:
        other, third = sample, "call 3 (replay; the spec has no other values of this signature)"
    else:
        third = "call 3 (replay, other values of the same signature)"
    steps = (("call 1 (tracing)", sample), ("call 2 (replay, same arguments)", sample),
             (third, other))
    kept = []
    with tf.device(dev), np.errstate(all="ignore"):
        for step, s in steps:
            targs = _to_device(s.args, dev)
            try:
                out = f(*targs)
            except Exception as e:
                e.add_note(f"conformance: raised by {what}, {step}")
                raise
            if traces[0] != 1:
                raise AssertionError(
                    f"{what}, {step}: the Python function ran again (trace {traces[0]}) for "
                    "arguments of a signature already traced; the call should replay the graph")
            _verify(spec, s, out, dev, dtype, f"{what}, {step}"
                    + (f", values {_fmt_values(s)}" if s is not sample else ""))
            kept.append((step, out, _host_copies(out), targs, s))
    for step, out, hosts, targs, s in kept:
        for j, (o, h) in enumerate(zip(_as_list(out), hosts)):
            if h is None:
                continue
            now = o.numpy()
            if not np.array_equal(now, h, equal_nan=_kind(h.dtype) in "fc"):
                raise AssertionError(
                    f"{what}: the result{f' {j}' if len(hosts) > 1 else ''} of {step} changed "
                    "after the later calls: a replay wrote into a buffer it had returned "
                    f"before\n  then: {_fmt(h)}\n  now:  {_fmt(now)}")
        for j, (t, a) in enumerate(zip(targs, s.args)):
            if isinstance(a, np.ndarray):
                now = t.numpy()
                if not np.array_equal(now, a, equal_nan=_kind(a.dtype) in "fc"):
                    raise AssertionError(
                        f"{what}: input {j} of {step} was modified by the traced function "
                        f"(an input buffer was reused)\n  given: {_fmt(a)}\n  now:   "
                        f"{_fmt(now)}")


def _where(e):
    """`` (in file.py:12 fn)``: the innermost frame of ``e``'s traceback outside the
    tracer and the tensor classes (where a tensor's value was asked for)."""
    import os
    skip = ("trace.py", "tensor.py", "context.py")
    where = ""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.basename(code.co_filename) not in skip:
            where = f" (in {os.path.basename(code.co_filename)}:{tb.tb_lineno} {code.co_name})"
        tb = tb.tb_next
    return where


def check_traced(spec, device, dtype):
    """Every sample of ``dtype`` through :func:`tapeflow.function` on ``device`` (see
    :func:`check_traced_sample`; the third call takes the values of a second draw of
    the samples, with another rng seed).

    An unlisted spec raising ``TracingError`` fails, naming :data:`UNTRACEABLE`. For a
    listed spec every sample still runs: those that trace must pass, and if some
    raise ``TracingError`` the case is skipped (SkipCase naming the reason, those
    samples and where the value was needed); if none does, it fails (stale entry).
    """
    tf = _tf()
    from ...tracing.trace import TracingError
    dtype = tf.as_dtype(dtype)
    missing = _missing_kernel(tf.runtime.registry.OPS.get(spec.op) if spec.op else None,
                              tf.runtime.devices.get_device(device))
    if missing:
        raise SkipCase(f"{missing}: not traced on {device}")
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    rng = np.random.default_rng(_seed(spec.name, dtype.name, "traced"))
    second = _draw(spec, dtype, rng)
    reason = untraceable_reason(spec)
    untraced = []
    for i, s in enumerate(samples):
        try:
            check_traced_sample(spec, s, device, dtype, index=i,
                                other=_other_values(s, i, samples, second))
        except TracingError as e:
            label = f"sample {i}{f' {s.name!r}' if s.name else ''}"
            if not reason:
                raise AssertionError(
                    f"{spec.name} [{dtype.name}] on {device}, {label}: cannot be traced by "
                    f"tf.function{_where(e)}: {e}\n(if that is by design, list the spec in "
                    "tapeflow.testing.conformance.UNTRACEABLE with the reason)") from None
            untraced.append(f"{label}{_where(e)}")
    if reason and not untraced:
        raise AssertionError(
            f"{spec.name} is listed in conformance.UNTRACEABLE ({reason}) but every sample "
            f"traced and replayed correctly on {device}: remove it from the list")
    if untraced:
        raise SkipCase(f"{spec.name} cannot be traced (conformance.UNTRACEABLE): {reason}; "
                       f"TracingError for {', '.join(untraced)}; the other "
                       f"{len(samples) - len(untraced)} sample(s) passed")
    return len(samples)

def check_batched(spec, device, dtype):
    """:func:`tapeflow.vectorized_map` against a loop, for every sample of ``dtype`` with
    an array argument, on ``device``: the batch is three examples (the sample, the
    values of a second draw of the same signature, the sample again), first with every
    array argument batched, then (for several) with only the first, then only the last
    batched (the others the sample's, shared by the examples). Results (values, dtype,
    shape) must equal ``stack([spec.fn(*example) for example in batch])``.

    Returns the set of what ran once per example instead of through a batching rule
    (``"op Where"``; ``"the function"`` when the op's Python needs tensor values),
    which the caller checks against the ops' declared rules. Random specs are skipped:
    each example draws its own numbers, which a loop cannot reproduce.

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import conformance
    >>> from tapeflow.testing.opinfo import OpSpec, Sample
    >>> spec = OpSpec(name="add", fn=tf.add, ref=np.add,
    ...               samples=lambda dt, rng: [Sample((np.arange(3.0), np.ones(3)))])
    >>> conformance.check_batched(spec, "cpu:0", tf.float64)
    set()
    """
    tf = _tf()
    from ...tracing.vectorize import recording_fallbacks
    dtype = tf.as_dtype(dtype)
    dev = tf.runtime.devices.get_device(device)
    if spec.check is not None:
        raise SkipCase(f"{spec.name} is random: each example draws its own numbers")
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    second = _draw(spec, dtype, np.random.default_rng(_seed(spec.name, dtype.name, "batch")))
    fell_back = set()
    ran = 0
    for i, s in enumerate(samples):
        pos = [j for j, a in enumerate(s.args) if isinstance(a, np.ndarray)]
        if not pos:
            continue
        other = _other_values(s, i, samples, second) or s
        modes = [tuple(pos)] + ([(pos[0],), (pos[-1],)] if len(pos) > 1 else [])
        for batched in modes:
            exs = [[(e.args[j] if j in batched else s.args[j]) for j in range(len(s.args))]
                   for e in (s, other, s)]
            what = (f"{spec.name} [{dtype.name}] on {dev.name}, sample {i}"
                    f"{f' {s.name!r}' if s.name else ''} {_describe_args(s.args, s.kwargs)}, "
                    f"tf.vectorized_map over argument(s) {list(batched)}")
            with tf.device(dev), np.errstate(all="ignore"):
                try:
                    expected = [_host_copies(spec.fn(*_to_device(a, dev), **s.kwargs))
                                for a in exs]
                except Exception:
                    continue                # the op refuses these values: an error sample
                ragged = any(len({getattr(e[k], "shape", None) for e in expected}) > 1
                             for k in range(len(expected[0])))
                fixed = _to_device(s.args, dev)
                elems = tuple(tf.constant(np.stack([a[j] for a in exs]), device=dev)
                              for j in batched)

                def fn(xs, fixed=fixed, batched=batched, kwargs=s.kwargs):
                    args = list(fixed)
                    for j, x in zip(batched, xs):
                        args[j] = x
                    return spec.fn(*args, **kwargs)
                with recording_fallbacks() as parts:
                    try:
                        out = tf.vectorized_map(fn, elems, warn=False)
                    except tf.errors.InvalidArgumentError as e:
                        if ragged and "different shapes" in str(e):
                            continue       # the examples' results differ in shape: refused
                        e.add_note(f"conformance: raised by {what}")
                        raise
                    except Exception as e:
                        e.add_note(f"conformance: raised by {what}")
                        raise
                fell_back |= parts
            if ragged:
                raise AssertionError(f"{what}: the examples' results differ in shape, but "
                                     "vectorized_map did not refuse them")
            got = _host_copies(out)
            if len(got) != len(expected[0]):
                raise AssertionError(f"{what}: {len(got)} output(s), the loop gives "
                                     f"{len(expected[0])}")
            for k, g in enumerate(got):
                want = np.stack([e[k] for e in expected])
                label = f"{what}, output {k}" if len(got) > 1 else what
                if g.dtype != want.dtype or g.shape != want.shape:
                    raise AssertionError(
                        f"{label}: {g.dtype}{list(g.shape)}, the loop gives "
                        f"{want.dtype}{list(want.shape)}")
                tol = tolerance(spec, dtype, g.dtype)
                ok = (np.array_equal(g, want, equal_nan=g.dtype.kind in "fc") if tol is None
                      else np.allclose(g, want, rtol=tol[0], atol=tol[1], equal_nan=True))
                if not ok:
                    raise AssertionError(f"{label}: values differ from the loop's\n  "
                                         f"vectorized: {_fmt(g)}\n  loop:       {_fmt(want)}")
            ran += 1
    if not ran:
        raise SkipCase(f"{spec.name} has no {dtype.name} sample with an array argument")
    return fell_back


def check_gradients(spec, device, order=None):
    """``check_grads`` (float64) on every float64 sample, to ``spec.grad_order``."""
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    order = spec.grad_order if order is None else order
    if order <= 0:
        raise SkipCase(f"{spec.name} is not differentiable (grad_order=0)")
    dts, _, excluded = dtypes_under_test(spec, dev.type)
    why = dev.backend.dtype_unsupported(dev, tf.float64)
    if why:
        raise SkipCase(f"gradients are checked in float64: {why}")
    if tf.float64 not in dts:
        raise SkipCase(excluded.get("float64") or
                       f"float64 is not among the dtypes tested for {spec.name} on {dev.type} "
                       "(gradients are checked in float64)")
    rtol, atol = spec.grad_tol
    ran = 0
    for i, s in enumerate(samples_for(spec, tf.float64)):
        argnums = _grad_argnums(s)
        if not argnums:
            continue
        f = functools.partial(spec.fn, **s.kwargs) if s.kwargs else spec.fn
        f = _named(f, spec.name)
        try:
            check_grads(f, s.args, order=order, rtol=rtol, atol=atol, device=dev,
                        argnums=argnums, seed=_seed(spec.name, i))
        except AssertionError as e:
            raise AssertionError(f"{spec.name} on {dev.name}, sample {i}"
                                 f"{f' {s.name!r}' if s.name else ''} "
                                 f"{_describe_args(s.args, s.kwargs)}:\n{e}") from None
        ran += 1
    if not ran:
        raise SkipCase(f"spec {spec.name} has no float64 sample with a float argument to "
                       "differentiate")
    return ran


def _named(f, name):
    def g(*a):
        return f(*a)
    g.__name__ = name
    return g


def check_errors(spec, device):
    """Every :class:`ErrorSample`: the right error type, with a message naming the op
    (``[Op:``) and the device, in which the regular expression ``match`` is found
    (``re.search``, as ``pytest.raises(match=)``; ``re.escape`` literal text)."""
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    if not spec.errors:
        raise SkipCase(f"spec {spec.name} has no error samples")
    for i, err in enumerate(spec.errors):
        what = (f"{spec.name} on {dev.name}, error sample {i}"
                f"{f' {err.name!r}' if err.name else ''} {_describe_args(err.args, err.kwargs)}")
        pattern = _match_pattern(err.match, what)
        try:
            with tf.device(dev):
                targs = _to_device(err.args, dev)
                spec.fn(*targs, **err.kwargs)
        except err.error as e:
            msg = str(e)
            missing = [m for m in ("[Op:", dev.name) if m not in msg]
            if pattern is not None and not pattern.search(msg):
                missing.append(err.match)
            if missing:
                hint = ""
                if err.match in missing and err.match in msg:
                    hint = (f"\n  (match is a regular expression, and {err.match!r} appears "
                            "literally: escape it, match=re.escape(...))")
                raise AssertionError(
                    f"{what}: raised {type(e).__name__} as expected, but the message lacks "
                    f"{missing}:\n  {msg}{hint}") from None
        except Exception as e:
            raise AssertionError(f"{what}: expected {err.error.__name__}, got "
                                 f"{type(e).__name__}: {e}") from e
        else:
            raise AssertionError(f"{what}: expected {err.error.__name__} "
                                 f"(matching {err.match!r}); nothing was raised")
    return len(spec.errors)


def _match_pattern(match, what):
    """``ErrorSample.match`` compiled (None when empty); AssertionError naming the
    sample when it is not a valid regular expression."""
    if not match:
        return None
    try:
        return re.compile(match)
    except re.error as e:
        raise AssertionError(f"{what}: match={match!r} is not a valid regular expression "
                             f"({e}); it is searched with re.search, so escape literal text: "
                             "match=re.escape(...)") from None


# --- cases ------------------------------------------------------------------------------

class Case:
    """One test item: ``kind`` of check for ``spec`` on ``device`` (and ``dtype``)."""

    __slots__ = ("kind", "spec", "device", "dtype", "skip", "fail")

    def __init__(self, kind, spec, device, dtype=None, skip=None, fail=None):
        self.kind = kind
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.skip = skip        # reason to skip, or None
        self.fail = fail        # a failure known at collection (no kernel), or None

    @property
    def id(self):
        parts = [] if self.spec is None else [self.spec.name]
        if self.dtype is not None:
            parts.append(getattr(self.dtype, "name", str(self.dtype)))
        parts.append(self.device)
        return "-".join(parts)

    def __repr__(self):
        return f"<Case {self.kind}[{self.id}]{' skip' if self.skip else ''}>"

    def check(self):
        """Run the check (AssertionError on failure, SkipCase when not applicable)."""
        if self.skip:
            raise SkipCase(self.skip)
        if self.fail:
            raise AssertionError(self.fail)
        if self.kind == "forward":
            return check_forward(self.spec, self.device, self.dtype)
        if self.kind == "noncontiguous":
            return check_forward(self.spec, self.device, self.dtype, noncontiguous=True)
        if self.kind == "gradients":
            return check_gradients(self.spec, self.device)
        if self.kind == "errors":
            return check_errors(self.spec, self.device)
        if self.kind == "traced":
            return check_traced(self.spec, self.device, self.dtype)
        raise ValueError(f"unknown case kind {self.kind!r}")

    def run(self):
        """pytest entry: :meth:`check`, with SkipCase turned into ``pytest.skip``."""
        import pytest
        try:
            return self.check()
        except SkipCase as e:
            pytest.skip(str(e))


def _spec_skip(spec, kind, dtype_name, device_type, case_id):
    for key, reason in (spec.skip or {}).items():
        if key in (kind, dtype_name, device_type) or _glob(key).fullmatch(case_id):
            return f"skipped by spec {spec.name}: {reason}"
    return None


def cases(specs, devices, kind, missing_kernels="fail"):
    """The cases of ``kind`` for ``specs`` on ``devices``.

    ``devices``: names of available devices, or ``(name, skip_reason)`` pairs
    (an unavailable device gets one skipped case per kind). ``missing_kernels``: what a
    device type with no kernel (and no composite) for the spec's op gets: ``"fail"``
    (one failing forward case: a backend's conformance) or ``"skip"`` (one skipped case
    naming the kernels there are: :func:`opcheck` on every available device, where a
    plugin's op need not run everywhere).
    """
    tf = _tf()
    out = []
    for d in devices:
        name, reason = (d, None) if isinstance(d, str) else d
        if reason is not None:
            out.append(Case(kind, None, name, skip=f"{name} unavailable: {reason}"))
            continue
        dev = tf.runtime.devices.get_device(name)
        for spec in specs:
            out.extend(_spec_cases(spec, dev, kind, missing_kernels))
    return out


def _missing_kernel(op, dev):
    """Why ``op`` cannot run on ``dev`` at all (no kernel for its device type and no
    composite), or None."""
    if op is None or dev.type in op.kernels or op.composite is not None:
        return None
    have = "; ".join(e.describe() for e in op.kernels.values()) or "none"
    return (f"no kernel for op {op.name} on device type '{dev.type}' and no composite "
            f"implementation (registered kernels: {have})")


def _spec_cases(spec, dev, kind, missing_kernels="fail"):
    tf = _tf()
    try:
        dts, explicit, excluded = dtypes_under_test(spec, dev.type)
    except SkipCase as e:
        return [Case(kind, spec, dev.name, skip=str(e))]
    res = []
    op = _tf().runtime.registry.OPS.get(spec.op) if spec.op else None
    missing = _missing_kernel(op, dev)
    if missing and missing_kernels == "skip":
        res.append(Case(kind, spec, dev.name, skip=f"{missing}: not tested on {dev.name}"))
    elif missing:
        # Nothing declared here: one failing case says so (a backend that lacks the
        # kernel on purpose declares a known gap, e.g. "*[exp-opencl:*]").
        if kind == "forward":
            res.append(Case(kind, spec, dev.name, fail=(
                f"{missing}; register one, or declare a known gap (tapeflow_known_gaps "
                "hook)")))
        elif kind in ("noncontiguous", "traced"):
            pass          # the forward case reports the missing kernel
        elif (kind == "gradients" and spec.grad_order > 0) or (kind == "errors" and spec.errors):
            res.append(Case(kind, spec, dev.name))
    elif kind in ("forward", "noncontiguous", "traced"):
        for name, why in excluded.items():
            if kind == "forward":
                res.append(Case(kind, spec, dev.name, tf.as_dtype(name), skip=why))
        for dt in dts:
            why = dev.backend.dtype_unsupported(dev, dt)
            if why:
                if kind == "forward":
                    res.append(Case(kind, spec, dev.name, dt, skip=why))
                continue
            try:
                smp = samples_for(spec, dt)
            except Exception:  # a broken spec fails its own test, not the collection
                res.append(Case(kind, spec, dev.name, dt))
                continue
            if not smp:
                if explicit and kind == "forward":
                    res.append(Case(kind, spec, dev.name, dt,
                                    skip=f"spec {spec.name} has no samples for {dt.name}, which "
                                         f"the {spec.op or 'spec'} kernel on '{dev.type}' "
                                         "declares"))
                continue
            if kind == "noncontiguous" and not any(_has_nc(s) for s in smp):
                continue
            res.append(Case(kind, spec, dev.name, dt))
    elif kind == "gradients":
        if spec.grad_order > 0:
            res.append(Case(kind, spec, dev.name))
    elif kind == "errors":
        if spec.errors:
            res.append(Case(kind, spec, dev.name))
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    for c in res:
        if c.skip is None:
            c.skip = _spec_skip(spec, kind, getattr(c.dtype, "name", None), dev.type, c.id)
    if kind == "traced" and len(res) > 1 and _traced_dtypes_mode() == "one":
        run = [c for c in res if c.skip is None] or res
        res = [next((c for c in run if c.dtype == tf.float32), run[0])]
    return res


def check_spec(spec, devices=None,
               kinds=("forward", "noncontiguous", "gradients", "errors", "traced")):
    """Run every case of ``spec`` on ``devices`` (default: every available device,
    skipping, with the reason, those whose device type has no kernel for the op; a
    device named in ``devices`` without one fails); collect all failures into one
    AssertionError. Returns ``{"passed": [...], "skipped": [(case id, reason)]}``
    otherwise."""
    tf = _tf()
    missing = "skip" if devices is None else "fail"
    devices = [d.name for d in tf.list_devices()] if devices is None else list(devices)
    passed, skipped, failed = [], [], []
    for kind in kinds:
        for c in cases([spec], devices, kind, missing):
            label = f"{kind}[{c.id}]"
            try:
                c.check()
            except SkipCase as e:
                skipped.append((label, str(e)))
            except AssertionError as e:
                failed.append(f"{label}: {e}")
            except Exception as e:
                notes = "".join(f"\n  {n}" for n in getattr(e, "__notes__", ()))
                failed.append(f"{label}: raised {type(e).__name__}: {e}{notes}")
            else:
                passed.append(label)
    if failed:
        raise AssertionError(f"{len(failed)} conformance check(s) of {spec.name} failed:\n\n"
                             + "\n\n".join(failed))
    return {"passed": passed, "skipped": skipped}


# --- pytest glue --------------------------------------------------------------------------

def collect_specs(extra=()):
    """``tapeflow.testing.specs.all_specs()`` plus ``extra`` specs whose names are
    not already among them. Spec names are test ids: duplicates are an error."""
    from ..specs import all_specs
    specs = list(all_specs())
    seen = {}
    for s in specs:
        if s.name in seen:
            raise ValueError(f"two conformance specs are named {s.name!r} (ops {seen[s.name]!r} "
                             f"and {s.op!r}); spec names must be unique, they are test ids")
        seen[s.name] = s.op
    return specs + [s for s in extra if s.name not in seen]


@functools.lru_cache(maxsize=512)
def _glob(pattern):
    """Glob with ``*`` and ``?`` only: brackets are literal, as in test ids."""
    rx = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.compile(rx)


def gap_matches(pattern, test_name):
    """Does a known-gap ``pattern`` match ``test_name`` (``test_forward[add-float16-cpu:0]``)?
    The pattern may also be given without the function name (``add-float16-*``)."""
    if _glob(pattern).fullmatch(test_name):
        return True
    if "[" in test_name and test_name.endswith("]"):
        return bool(_glob(pattern).fullmatch(test_name[test_name.index("[") + 1:-1]))
    return False


def parametrize(metafunc, specs, devices=None, known_gaps=None):
    """``pytest_generate_tests`` helper: parametrize ``conformance_case`` for the
    test functions named in :data:`KINDS`, over ``specs`` and the devices under test
    (``--tapeflow-device``, see :mod:`tapeflow.testing.pytest_plugin`). Known gaps
    become ``xfail(strict=True)``."""
    if "conformance_case" not in metafunc.fixturenames:
        return
    import pytest
    kind = KINDS.get(metafunc.function.__name__)
    if kind is None:
        raise ValueError(f"{metafunc.function.__name__}: conformance test functions must be "
                         f"named one of {sorted(KINDS)}")
    if devices is None:
        from ..pytest_plugin import devices_under_test
        devices = devices_under_test(metafunc.config)
    if known_gaps is None:
        import tapeflow.plugins
        known_gaps = tapeflow.plugins.known_gaps()
    params = []
    fname = metafunc.function.__name__
    for c in cases(specs, devices, kind):
        marks = [pytest.mark.tapeflow_conformance]
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        else:
            test_name = f"{fname}[{c.id}]"
            for pat, reason in known_gaps.items():
                if gap_matches(pat, test_name):
                    marks.append(pytest.mark.xfail(strict=True, reason=f"known gap: {reason}"))
                    break
        params.append(pytest.param(c, marks=marks, id=c.id))
    metafunc.parametrize("conformance_case", params)


# re-exported for spec authors who import everything from here
Sample = Sample
ErrorSample = ErrorSample
OpSpec = OpSpec


# --- opcheck: one call for plugin authors --------------------------------------------------

def _values_as(a, dtype):
    """Float sample values ``a`` as integer or bool values of ``dtype`` (a DType): bool
    from ``a > 0``; integers rounded (absolute values for unsigned dtypes), NaN as 0,
    clipped to the dtype's range."""
    if dtype.is_bool:
        return a > 0
    info = np.iinfo(dtype.np)
    lo, hi = float(info.min), float(info.max)
    if int(hi) > info.max:                      # (int64: the float rounds up past the max)
        hi = float(np.nextafter(hi, 0.0))
    with np.errstate(all="ignore"):
        v = np.nan_to_num(np.asarray(a, np.float64), nan=0.0, posinf=hi, neginf=lo)
        if dtype.is_unsigned:
            v = np.abs(v)
        return np.clip(np.round(v), lo, hi).astype(dtype.np)


def _fixed_samples(samples, declared=()):
    """A list of Samples (or argument tuples) -> ``samples(dtype, rng)``: float array
    arguments are cast to each float dtype, and to each integer and bool dtype in
    ``declared`` (declared by the op's kernels or by ``opcheck(dtypes=)``) with
    :func:`_values_as`; samples without float arrays run for the dtype of their first
    array. Gradients are checked in float64 only, so never for the integer and bool
    samples."""
    fixed = [s if isinstance(s, Sample) else Sample(tuple(s) if isinstance(s, (list, tuple))
                                                   else (s,)) for s in samples]
    declared = tuple(declared)

    def gen(dtype, rng):
        out = []
        for s in fixed:
            arrays = [a for a in s.args if isinstance(a, np.ndarray)]
            has_float = any(a.dtype.kind == "f" for a in arrays)
            if has_float and (dtype.is_floating or dtype in declared):
                cast = ((lambda a: a.astype(dtype.np)) if dtype.is_floating
                        else (lambda a: _values_as(a, dtype)))
                args = tuple(cast(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                             else a for a in s.args)
                out.append(dataclasses.replace(s, args=args, kwargs=dict(s.kwargs)))
            elif not has_float and arrays and arrays[0].dtype == dtype.np:
                out.append(s)
        return out

    return gen


def _declared_dtypes(op_name, dtypes):
    """The dtypes declared for the op: ``dtypes`` when given, else every dtype its
    kernels declare (those declaring "any dtype" add none)."""
    tf = _tf()
    if dtypes is not None:
        return {tf.as_dtype(d) for d in dtypes}
    from ...runtime.registry import OPS
    opdef = OPS.get(op_name) if op_name else None
    out = set()
    for entry in (opdef.kernels.values() if opdef is not None else ()):
        out.update(entry.dtypes or ())
    return out


def _empty_shapes(shapes):
    """Shapes of size 0, one per input shape, that still broadcast together: axis 0 of
    the broadcast shape becomes 0 (inputs of lower rank, or with a 1 there that is
    broadcast, keep theirs); 0-d inputs together become ``(0,)``."""
    try:
        b = np.broadcast_shapes(*shapes)
    except ValueError:                # not broadcastable: axis 0 of each
        return [(0,) + tuple(s[1:]) for s in shapes]
    if not b:
        return [(0,)] * len(shapes)
    return [(0,) + tuple(s[1:]) if len(s) == len(b) and (s[0] == b[0] or b[0] == 1)
            else tuple(s) for s in shapes]


def edge_samples(sample, index=0):
    """A 0-d and an empty (size-0) sample derived from ``sample`` (the ``index``-th):
    every NumPy array argument becomes its first element as a 0-d array, then an
    empty array (:func:`_empty_shapes`: the inputs still broadcast together); other
    arguments and the keywords are kept. The empty sample checks no gradients. For
    ops that compute each output element from the matching input elements (see
    :func:`opcheck`'s ``edge_cases``)."""
    arrays = [a for a in sample.args if isinstance(a, np.ndarray)]
    if not arrays:
        return []
    src = f"sample {index}{f' {sample.name!r}' if sample.name else ''}"
    out = []
    if all(a.size for a in arrays):
        args = tuple(np.array(a.reshape(-1)[0]) if isinstance(a, np.ndarray) else a
                     for a in sample.args)
        out.append(dataclasses.replace(sample, args=args, name=f"0-d, from {src}"))
    shapes = iter(_empty_shapes([a.shape for a in arrays]))
    args = tuple(np.zeros(next(shapes), a.dtype) if isinstance(a, np.ndarray) else a
                 for a in sample.args)
    out.append(dataclasses.replace(sample, args=args, grad_argnums=(),
                                   name=f"empty, from {src}"))
    return out


def _with_edge_cases(gen):
    """``samples(dtype, rng)`` plus :func:`edge_samples` of its first sample."""
    def samples(dtype, rng):
        base = list(gen(dtype, rng) or [])
        return base + edge_samples(base[0]) if base else base
    samples.__name__ = getattr(gen, "__name__", "samples")
    return samples


def opcheck(spec_or_fn, samples=None, *, ref=None, check=None, errors=(), op=None, name=None,
            dtypes=None, grad_order=2, tol=None, grad_tol=(1e-4, 1e-5), devices=None,
            check_dtype=True, edge_cases=None,
            kinds=("forward", "noncontiguous", "gradients", "errors", "traced")):
    """Check an op in one call, on every available device: forward against a NumPy
    reference for every dtype, non-contiguous inputs, gradients to ``grad_order``
    (float64, finite differences), the error contract, and the op inside
    :func:`tapeflow.function` (traced, replayed, replayed with other values).

    What runs:

    * **dtypes**: every dtype the op's kernel on the device declares (``op``), or
      ``dtypes``. A list of samples is cast to each: float arrays to the float dtypes,
      and, for integer and bool dtypes the kernels (or ``dtypes``) declare, to rounded
      integers (clipped to the dtype's range, absolute values for unsigned) and to
      ``x > 0`` for bool. A ``samples`` function decides for itself: it receives each
      dtype as a tapeflow ``DType`` (``dtype.np`` is its NumPy dtype, and NumPy accepts
      the DType itself: ``np.ones(3, dtype)``) and returns ``[]`` for dtypes it has no
      samples for. Gradients are checked in float64 only, never for integer or bool.
    * **non-contiguous inputs** (:data:`LAYOUTS`), each sample with an array argument
      of rank >= 1 once per layout: an ``"offset view"`` (the data does not start at
      its buffer's first element), ``"transposed"`` (rank >= 2: memory order is not
      index order, and strided) and ``"broadcast (stride 0)"`` (axis 0 has stride 0;
      the values are the sample's first slice along axis 0 repeated, and the
      reference gets the same; not for random ops, whose ``check`` needs distinct
      values). A failure names the layout; a layout a device cannot hold is skipped.
    * **edge cases**: a 0-d and an empty (size-0) sample derived from the first sample
      of each dtype (:func:`edge_samples`), when ``edge_cases`` is True, or when it is
      None (the default) and the op is declared ``elementwise=True`` (every output
      element computed from the matching, broadcast, input elements: such an op accepts
      any shape). Ops that are only ``broadcast=True`` (MatMul broadcasts its batch
      dimensions but needs rank 2) get none unless asked.
    * **references** may compute in any precision and return any array-like: a float
      reference more precise than the case dtype (float64 for a float32 op) is rounded
      to it, Python values take the result's dtype (:func:`reference_as_result`);
      tolerances are those of the case dtype (:data:`DEFAULT_TOL`, ``tol``).
    * **errors**: each :class:`ErrorSample` must raise its error type with ``[Op:``
      and the device name in the message, and ``match``, a regular expression, found
      in it (``re.search``, as ``pytest.raises(match=)``).

    Args:
        spec_or_fn: an :class:`OpSpec` (the other arguments are then ignored, except
            ``edge_cases=True``), an :class:`~tapeflow.plugins.OpDef` (called with its
            attrs as keywords), or a function built on tapeflow ops (an op's public
            function from ``@lib.op`` carries its OpDef).
        samples: ``samples(dtype, rng) -> [Sample]`` (``dtype``: a tapeflow DType,
            ``rng``: a seeded ``numpy.random.Generator``), or a list of Samples (or of
            argument tuples), whose float arrays are cast to each dtype tested.
        ref: NumPy reference ``ref(*numpy_args, **kwargs)``; or ``check(out, *args,
            **kwargs)`` validating the (host) output of a random op.
        errors: :class:`ErrorSample` s, each must raise with ``[Op:``, the device
            name and a match of the regular expression ``match`` in the message.
        op: the op name whose kernel dtypes decide which dtypes are tested
            (default: the OpDef's name, else every dtype the samples provide).
        dtypes: dtype names to test instead of the kernels' (intersected with them).
        devices: device names (default: every available device).
        edge_cases: add 0-d and empty samples (None: when the op is elementwise).

    Returns ``{"passed": [...], "skipped": [(check, reason)]}``; raises AssertionError
    listing every failed check.

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import opcheck, Sample
    >>> report = opcheck(tf.multiply, [Sample((np.ones((2, 3)), np.arange(3.0)))], ref=np.multiply)
    >>> "gradients[multiply-cpu:0]" in report["passed"]
    True
    """
    from ...runtime.registry import OPS, OpDef
    if isinstance(spec_or_fn, OpSpec):
        spec = spec_or_fn
        if edge_cases:
            spec = dataclasses.replace(spec, samples=_with_edge_cases(spec.samples))
    else:
        fn = spec_or_fn
        if isinstance(fn, OpDef):
            op = op or fn.name
        elif isinstance(getattr(fn, "op", None), OpDef):      # a Library op function
            op = op or fn.op.name
        if samples is None:
            raise TypeError("opcheck needs samples (a list of Samples or samples(dtype, rng))")
        gen = (samples if callable(samples)
               else _fixed_samples(samples, _declared_dtypes(op, dtypes)))
        if edge_cases is None:
            opdef = OPS.get(op) if op else None
            edge_cases = bool(opdef is not None and opdef.elementwise)
        if edge_cases:
            gen = _with_edge_cases(gen)
        if ref is None and check is None:
            kinds = tuple(k for k in kinds if k not in ("forward", "noncontiguous", "traced"))
        if name is None:
            name = fn.name if isinstance(fn, OpDef) else getattr(fn, "__name__", "op")
        spec = OpSpec(name=name, fn=fn, ref=ref, samples=gen, op=op or "", dtypes=dtypes,
                      grad_order=grad_order, errors=list(errors), tol=dict(tol or {}),
                      grad_tol=tuple(grad_tol), check=check, check_dtype=check_dtype)
    return check_spec(spec, devices=devices, kinds=kinds)
