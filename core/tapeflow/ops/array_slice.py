"""Padding and slicing: ``pad``, ``slice``, ``strided_slice``, and Python indexing of
tensors (``x[key]`` and the array API's ``x[key] = value``; Tensor's ``__getitem__`` and
``__setitem__`` are :mod:`tapeflow.ops`). Top-level names, and names of
:mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> x = tf.constant([[1., 2., 3.], [4., 5., 6.]])
>>> print(x[:, ::-1][0])
tf.Tensor([3. 2. 1.], shape=(3,), dtype=float32)
"""

from __future__ import annotations

import builtins

import numpy as np

from ..runtime import context as _ctx
from .. import dtypes as _dt
from ..runtime import devices as _devs
from ..runtime import shapes as _shapes
from ..runtime.dispatch import constant, convert_to_tensor, execute
from ..errors import (FailedPreconditionError, InvalidArgumentError, InvalidTypeError,
                              ResourceExhaustedError)
from ..runtime.registry import Linear, REQUIRED
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .composite import COMPOSITE_TYPES, dispatch
from . import math as _m
from .library import defop, rerun
from .array_creation import (_check_fill_values, _fill_value, _FULL, _here, _range, _shape_tuple,
                             _slice, _tensor)
from .array_shape import _TRANSPOSE, expand_dims, reshape
from .reductions import broadcast_to
from .array_values import where
from .array_gather import (_axis_list, boolean_mask, gather, gather_nd, scatter_nd, stack,
                           unsorted_segment_sum)

__all__ = ['pad', 'slice', 'strided_slice', 'reverse']

# --- padding and slicing -----------------------------------------------------------------

def _pad_grad(ctx, dy):
    spec = tuple(_slice(b, b + n) for (b, _), n in zip(ctx.attrs["paddings"],
                                                       ctx.inputs[0]._data.shape))
    return execute(_STRIDED_SLICE, (dy,), {"spec": spec + (Ellipsis,)})


def _pad_batch(ctx, x):
    """(tf.vectorized_map) PadV2's and MirrorPad's: the batch is not padded."""
    return rerun(ctx, (x,), paddings=((0, 0),) + tuple(tuple(p) for p in ctx.attrs["paddings"]))


def _check_pad(op, tensors, attrs, device):
    """PadV2's ``constant_values`` fits the input's dtype (the result's)."""
    _check_fill_values(op, tensors, attrs, device, tensors[0].dtype)


# (the tangent of a pad pads with zeros)
_PAD = defop("PadV2", inputs=("x",), attrs={"paddings": None, "constant_values": 0},
             dtype_rule="none", grad=_pad_grad, check=_check_pad,
             jvp=Linear((0,), constant_values=0), batch=_pad_batch)


def _mirror_indices(n, before, after, mode):
    """Indices into a dimension of size n that MirrorPad reads, in output order."""
    o = 0 if mode == "SYMMETRIC" else 1
    left = np.arange(before - 1 + o, o - 1, -1)
    right = np.arange(n - 1 - o, n - 1 - o - after, -1)
    return np.concatenate([left, np.arange(n), right]).astype(np.int32)


def _mirror_pad_grad(ctx, dy):
    x = ctx.inputs[0]
    mode = ctx.attrs["mode"]
    g = dy
    for axis, ((b, a), n) in enumerate(zip(ctx.attrs["paddings"], x._data.shape)):
        if b or a:
            ids = constant(_mirror_indices(n, b, a, mode), device=g._device)
            g = _segment_sum_along(g, ids, n, axis)
    return g


def _segment_sum_along(g, ids, n, axis):
    """unsorted_segment_sum along ``axis`` (ids index that axis)."""
    if axis == 0:
        return unsorted_segment_sum(g, ids, n)
    nd = g.ndim
    perm = (axis,) + tuple(_range(axis)) + tuple(_range(axis + 1, nd))
    s = unsorted_segment_sum(execute(_TRANSPOSE, (g,), {"perm": perm}), ids, n)
    inv = tuple(_range(1, axis + 1)) + (0,) + tuple(_range(axis + 1, nd))
    return execute(_TRANSPOSE, (s,), {"perm": inv})


_MIRROR_PAD = defop("MirrorPad", inputs=("x",), attrs={"paddings": None, "mode": "REFLECT"},
                    dtype_rule="none", grad=_mirror_pad_grad, jvp=Linear(), batch=_pad_batch)


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad ``tensor``: ``paddings[i] = [before, after]`` for dimension ``i``;
    ``mode`` is ``"CONSTANT"``, ``"REFLECT"`` or ``"SYMMETRIC"``.

    >>> import tapeflow as tf
    >>> print(tf.pad([1, 2, 3], [[1, 2]]))
    tf.Tensor([0 1 2 3 0 0], shape=(6,), dtype=int32)
    >>> print(tf.pad([1, 2, 3], [[2, 2]], "REFLECT"))
    tf.Tensor([3 2 1 2 3 2 1], shape=(7,), dtype=int32)
    """
    x = _tensor(tensor)
    dev = x._device
    s = x._data.shape
    m = str(mode).upper()
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise InvalidArgumentError(
            f"pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}",
            op="MirrorPad" if m != "CONSTANT" else "PadV2", device=dev)
    op = "PadV2" if m == "CONSTANT" else "MirrorPad"
    try:
        p = np.asarray(paddings.numpy() if isinstance(paddings, (Tensor, Variable))
                       else paddings)
    except (ValueError, TypeError):         # ragged: [[1, 2], [1]]
        raise InvalidArgumentError(
            f"pad: paddings must be an integer array of shape [{len(s)}, 2] (one [before, "
            f"after] pair per dimension of the input of shape {list(s)}), got "
            f"{_shapes.short_repr(paddings)}", op=op, device=dev) from None
    if p.size == 0 and len(s) == 0:
        p = p.reshape(0, 2)
    if p.shape != (len(s), 2) or (p.size and p.dtype.kind not in "iu"):
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs: paddings must be an "
            f"integer array of shape [{len(s)}, 2], got {p.tolist()}", op=op, device=dev)
    pp = tuple((int(b), int(a)) for b, a in p.tolist())
    for i, (b, a) in enumerate(pp):
        if b < 0 or a < 0:
            raise InvalidArgumentError(f"Paddings must be non-negative: {b} {a}", op=op,
                                       device=dev)
        if m == "REFLECT" and (b or a) and (b >= s[i] or a >= s[i]):
            raise InvalidArgumentError(
                f"paddings must be less than the dimension size: {b}, {a} not less than {s[i]}",
                op=op, device=dev)
        if m == "SYMMETRIC" and (b > s[i] or a > s[i]):
            raise InvalidArgumentError(
                f"paddings must be no greater than the dimension size: {b}, {a} greater than "
                f"{s[i]}", op=op, device=dev)
    if m == "CONSTANT":
        cv = _fill_value(constant_values, x.dtype, "pad: constant_values", "PadV2", x)[0]
        return execute(_PAD, (x,), {"paddings": pp, "constant_values": cv})
    return execute(_MIRROR_PAD, (x,), {"paddings": pp, "mode": m})


def _slice_grad(ctx, dy):
    pads = tuple((b, n - b - z) for b, z, n in zip(ctx.attrs["begin"], ctx.attrs["size"],
                                                   ctx.inputs[0]._data.shape))
    return execute(_PAD, (dy,), {"paddings": pads, "constant_values": 0})


_SLICE = defop("Slice", inputs=("x",), attrs={"begin": None, "size": None}, dtype_rule="none",
               grad=_slice_grad, jvp=Linear())


@_SLICE.def_batch
def _slice_batch(ctx, x):
    return rerun(ctx, (x,), begin=(0,) + tuple(ctx.attrs["begin"]),
                 size=(ctx.size,) + tuple(ctx.attrs["size"]))


def slice(input_, begin, size, name=None):  # noqa: A001
    """The block starting at ``begin`` of shape ``size`` (``-1``: to the end).

    >>> import tapeflow as tf
    >>> print(tf.slice([[1, 2, 3], [4, 5, 6]], [0, 1], [2, -1]))
    tf.Tensor(
    [[2 3]
     [5 6]], shape=(2, 2), dtype=int32)
    """
    x = _tensor(input_)
    s = x._data.shape
    b = _shape_tuple(begin, "Slice")
    z = list(_shape_tuple(size, "Slice"))
    if len(b) != len(s) or len(z) != len(s):
        raise InvalidArgumentError(
            f"Expected begin and size arguments to be 1-D tensors of size {len(s)}, but got "
            f"shapes [{len(b)}] and [{len(z)}] instead.", op="Slice", device=x._device)
    for i, n in enumerate(s):
        if not 0 <= b[i] <= n:
            raise InvalidArgumentError(f"Expected begin[{i}] in [0, {n}], but got {b[i]}",
                                       op="Slice", device=x._device)
        if z[i] == -1:
            z[i] = n - b[i]
        if not 0 <= z[i] <= n - b[i]:
            raise InvalidArgumentError(
                f"Expected size[{i}] in [0, {n - b[i]}], but got {z[i]}", op="Slice",
                device=x._device)
    return execute(_SLICE, (x,), {"begin": b, "size": tuple(z)})


# StridedSlice's attr `spec` is a normalised NumPy basic index: a tuple of
# non-negative ints, slices (start/stop/step already clipped to the dimension, or
# slice(None) for a whole dimension) and None (new axes), always ending with
# Ellipsis (so a fully indexed tensor stays a 0-d array). Kernels return x[spec].

def _strided_slice_grad(ctx, dy):
    return execute(_STRIDED_SLICE_GRAD, (dy,), {"shape": ctx.inputs[0]._data.shape,
                                                "spec": ctx.attrs["spec"]})


def _strided_slice_grad_grad(ctx, ddy):
    return execute(_STRIDED_SLICE, (ddy,), {"spec": ctx.attrs["spec"]})


_STRIDED_SLICE = defop("StridedSlice", inputs=("x",), attrs={"spec": REQUIRED},
                       dtype_rule="none", grad=_strided_slice_grad, jvp=Linear())


@_STRIDED_SLICE.def_batch
def _strided_slice_batch(ctx, x):
    return rerun(ctx, (x,), spec=(_FULL,) + tuple(ctx.attrs["spec"]))
_STRIDED_SLICE_GRAD = defop("StridedSliceGrad", inputs=("dy",),
                            attrs={"shape": REQUIRED, "spec": REQUIRED}, dtype_rule="none",
                            grad=_strided_slice_grad_grad, jvp=Linear())


@_STRIDED_SLICE_GRAD.def_batch
def _strided_slice_grad_batch(ctx, dy):
    return rerun(ctx, (dy,), spec=(_FULL,) + tuple(ctx.attrs["spec"]),
                 shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


def _bad_index(msg, x):
    return InvalidArgumentError(msg, op="StridedSlice", device=x._device)


def _index_spec(x, key):
    """Normalise a ``__getitem__`` key for ``x``: (spec, advanced) where ``advanced``
    is None or (output axes, integer indices, to_front) for the gather after the basic
    slice (one axis per integer array); ``to_front``: NumPy puts the gathered
    dimensions first because the advanced indices (ints and arrays) are separated by a
    slice, a new axis or an ellipsis."""
    shape = x._data.shape
    nd = len(shape)
    consumed = 0
    for k in key:
        if k is not None and k is not Ellipsis:
            consumed += 1
    if consumed > nd:
        raise _bad_index(f"Index out of range using input dim {nd}; input has only {nd} dims "
                         f"(index {key!r})", x)
    spec = []
    adv = None
    ell = False
    d = 0   # input dimension
    o = 0   # output dimension
    kinds = []   # per entry: "i" int, "a" array, "s" slice, "n" new axis
    for k in key:
        tk = type(k)
        if tk is int or (tk is not builtins.bool and isinstance(k, np.integer)):
            n = shape[d]
            i = int(k)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise _bad_index(f"slice index {int(k)} of dimension {d} out of bounds.", x)
            spec.append(i)
            kinds.append("i")
            d += 1
        elif tk is _slice:
            n = shape[d]
            try:
                start, stop, step = k.indices(n)
            except (TypeError, ValueError) as e:
                raise _bad_index(f"invalid slice {k!r} for dimension {d}: {e}", x) from None
            if step == 1 and start == 0 and stop >= n:
                spec.append(_FULL)
            elif len(_range(start, stop, step)) == 0:
                spec.append(_slice(0, 0, 1))    # (slice(-1, None, -2) would not be empty)
            else:
                spec.append(_slice(start, None if stop < 0 else stop, step))
            kinds.append("s")
            d += 1
            o += 1
        elif k is None:
            spec.append(None)
            kinds.append("n")
            o += 1
        elif k is Ellipsis:
            if ell:
                raise _bad_index("an index can only have a single ellipsis ('...')", x)
            ell = True
            m = nd - consumed
            spec.extend([_FULL] * m)
            kinds.extend("s" * m)
            d += m
            o += m
        else:
            if isinstance(k, Variable):
                k = k._host()
            if isinstance(k, Tensor):
                kd = k.dtype
                if not kd.is_integer:
                    raise _bad_index(
                        "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) "
                        f"and integer or boolean tensors are valid indices, got a {kd.name} "
                        "tensor", x)
                idx = k
            else:
                try:
                    a = np.asarray(k)
                except (ValueError, TypeError) as e:     # ragged: [[0, 1], [0]]
                    raise _list_index_error(k, d, x, e) from None
                if a.dtype.kind == "b" or a.dtype.kind not in "iu" and a.size:
                    raise _bad_index(
                        "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) "
                        f"and integer or boolean tensors are valid indices, got {k!r}", x)
                n = shape[d]
                if a.size > _shapes.SMALL:
                    _check_index_array(x, key, a, d, n)
                try:
                    a = a.astype(np.int64)
                    bad = (a < -n) | (a >= n)
                    if bad.any():
                        v = int(a.reshape(-1)[np.argmax(bad.reshape(-1))])
                        raise _bad_index(f"slice index {v} of dimension {d} out of bounds.", x)
                    a = np.where(a < 0, a + n, a)
                    a = a.astype(np.int32 if n < 2**31 else np.int64)
                except MemoryError as e:
                    raise _index_array_exhausted(x, key, a, d, str(e)) from None
                idx = constant(a, device=x._device)
            adv = ([], []) if adv is None else adv
            adv[0].append(o)
            adv[1].append(idx)
            spec.append(_FULL)
            kinds.append("a")
            d += 1
            o += 1
    spec.append(Ellipsis)
    if adv is not None:
        pos = [j for j, c in enumerate(kinds) if c in "ia"]
        front = any(c not in "ia" for c in kinds[pos[0]:pos[-1] + 1])
        adv = (adv[0], adv[1], front and adv[0][0] > 0)
    return tuple(spec), adv


def _gather_op(key):
    """The op that gathers for the integer arrays of ``key``: GatherV2 for one, GatherNd
    for several (for errors)."""
    arrays = [k for k in key if not (type(k) in (int, _slice) or k is None or k is Ellipsis
                                     or isinstance(k, np.integer))]
    return "GatherV2" if len(arrays) <= 1 else "GatherNd"


def _described(x):
    return f"a {x.dtype.name} tensor of shape {list(x._data.shape)}"


def _list_index_error(k, d, x, e):
    """An index list NumPy cannot make an array of (ragged: rows of different lengths)."""
    what = ("is a ragged list (nested lists of different lengths), not a rectangular "
            "integer array" if isinstance(e, ValueError) else f"is not an integer array ({e})")
    return _bad_index(
        f"x[key]: the index {_shapes.short_repr(k)} for dimension {d} of {_described(x)} {what}. "
        "Give integer-array indices as rectangular lists, arrays or tensors (every row the "
        "same length), or index with each row separately and join the results (tf.concat, "
        "tf.stack)", x)


def _index_array_exhausted(x, key, a, d, detail):
    return ResourceExhaustedError(
        f"Out of memory: x[key]: the integer-array index of shape {list(a.shape)} for "
        f"dimension {d} of {_described(x)} {detail}. Index fewer elements at a time (split the "
        "index array), or compute on the small array and let tf.gather broadcast it",
        op=_gather_op(key), device=x._device)


def _check_index_array(x, key, a, d, n):
    """ResourceExhaustedError before the copies of a huge index array are made: its int64
    positions on the host (the bounds check), then its index tensor on ``x``'s device."""
    host = _devs.get_device("cpu:0")
    for dev, need, what in ((host, a.size * 8, "as int64 positions"),
                            (x._device, a.size * (4 if n < 2**31 else 8), "as an index tensor")):
        limit = _shapes.device_memory_limit(dev)
        if limit is not None and need > limit:
            raise _index_array_exhausted(
                x, key, a, d, f"needs {_shapes.format_bytes(need)} ({need} bytes) {what}, more "
                f"than {dev} can hold in one buffer ({_shapes.format_bytes(limit)})")


def _check_result(x, out_shape, op, what, coords=None):
    """ResourceExhaustedError before an integer-array index of ``x`` gathers a result of
    ``out_shape`` -- and, for several arrays, the coordinates of its points, ``coords``
    ``(shape, dtype)`` -- that cannot fit on ``x``'s device."""
    dev = x._device
    out = _shapes.num_elements(out_shape) * np.dtype(x.dtype.np).itemsize
    need = out
    also = ""
    if coords is not None:
        cb = _shapes.num_elements(coords[0]) * np.dtype(coords[1].np).itemsize
        need = max(out, cb)
        also = (f" and the {coords[1].name} coordinates of the points it picks (shape "
                f"{coords[0]}) {_shapes.format_bytes(cb)} ({cb} bytes)")
    limit = _shapes.device_memory_limit(dev)
    if limit is None or need <= limit:
        return
    raise ResourceExhaustedError(
        f"Out of memory: x[key]: {what}: the result, a {x.dtype.name} tensor of shape "
        f"{out_shape}, needs {_shapes.format_bytes(out)} ({out} bytes){also}, more than {dev} "
        f"can hold in one buffer ({_shapes.format_bytes(limit)}); the input is "
        f"{_described(x)}. Index fewer points at a time (split the index arrays), or gather "
        "along one axis at a time (tf.gather)", op=op, device=dev)


def _is_mask(k):
    tk = type(k)
    if tk is int or tk is _slice or k is None or k is Ellipsis:
        return False
    if tk is builtins.bool or tk is np.bool_:       # a 0-d mask, as in NumPy
        return True
    if isinstance(k, (Tensor, Variable)):
        return k.dtype.is_bool
    if isinstance(k, np.ndarray):
        return k.dtype.kind == "b"
    if isinstance(k, list) and k:
        try:
            a = np.asarray(k)
        except (ValueError, TypeError):     # ragged: _index_spec says so
            return False
        return a.dtype.kind == "b"
    return False


def _scalar_index(k):
    """0-d integer tensors and arrays index like Python ints."""
    if type(k) is int or type(k) is _slice or k is None or k is Ellipsis:
        return k
    if isinstance(k, Variable):
        k = k._host()
    if isinstance(k, Tensor):
        if k.ndim == 0 and k.dtype.is_integer:
            tr = _ctx.thread_tracer.tracer if _ctx.tracing[0] else None
            if tr is not None and tr.symbolic(k) is not None:
                return k        # x[i], i from the arguments: a gather in the trace
            return int(k)
    elif isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu":
        return int(k)
    return k


def _getitem_slow(x, key):
    if type(key) is not tuple:
        if _is_mask(key):
            if np.ndim(key) == 0:       # x[True] is x[None], x[False] x[None][:0]
                return boolean_mask(expand_dims(x, 0), reshape(key, [1]))
            return boolean_mask(x, key)
        key = (key,)
    elif any(_is_mask(k) for k in key):
        raise _bad_index("a boolean mask must be the only index; use tf.boolean_mask", x)
    spec, adv = _index_spec(x, tuple(map(_scalar_index, key)))
    for e in spec:
        if e is not _FULL and e is not Ellipsis:
            y = execute(_STRIDED_SLICE, (x,), {"spec": spec})
            break
    else:
        y = x   # x[...], x[:], x[()]: the same immutable value
    if adv is not None:
        y = _advanced(x, y, *adv)
    return y


def _advanced(x, y, axes, indices, front):
    """The integer-array part of ``x[key]`` on ``y`` (the basic slice): one array is a
    gather along its axis; several are broadcast together and pick points (NumPy's,
    the array API standard's): a gather_nd over those axes moved to the front. The
    broadcast dimensions go where the first array was, or first (``front``)."""
    if len(axes) == 1:
        o, idx = axes[0], indices[0]
        ys = y._data.shape
        if idx._data.size > ys[o] and idx._data.size > _shapes.SMALL // 4:
            _check_result(x, list(ys[:o]) + list(idx.shape) + list(ys[o + 1:]), "GatherV2",
                          f"the integer-array index of shape {list(idx.shape)} for dimension {o}")
        y = gather(y, idx, axis=o)
        if front:   # NumPy's rule for separated advanced indices
            k = idx.ndim
            perm = (tuple(_range(o, o + k)) + tuple(_range(o)) + tuple(_range(o + k, y.ndim)))
            y = execute(_TRANSPOSE, (y,), {"perm": perm})
        return y
    try:
        shape = np.broadcast_shapes(*(tuple(i.shape) for i in indices))
    except ValueError:
        raise _bad_index("shape mismatch: the integer-array indices cannot be broadcast "
                         f"together: shapes {[list(i.shape) for i in indices]}", x) from None
    wide = _dt.int64 if any(i.dtype == _dt.int64 for i in indices) else _dt.int32
    rest = [d for d in _range(y.ndim) if d not in axes]
    if _shapes.num_elements(shape) > _shapes.SMALL // 4:
        _check_result(x, list(shape) + [y._data.shape[d] for d in rest], "GatherNd",
                      f"the integer-array indices of shapes {[list(i.shape) for i in indices]} "
                      f"broadcast to shape {list(shape)}", (list(shape) + [len(indices)], wide))
    coords = stack([broadcast_to(_m.cast(i, wide), list(shape)) for i in indices], axis=-1)
    if axes != list(_range(len(axes))):
        y = execute(_TRANSPOSE, (y,), {"perm": tuple(axes) + tuple(rest)})
    y = gather_nd(y, coords)
    o, k = axes[0], len(shape)
    if not front and o > 0:     # the broadcast dimensions where the first array was
        perm = (tuple(_range(k, k + o)) + tuple(_range(k)) + tuple(_range(k + o, y.ndim)))
        y = execute(_TRANSPOSE, (y,), {"perm": perm})
    return y


def _getitem(self, key):
    """``x[key]``: ints, slices (any step), ``...``, ``None``/``tf.newaxis``, negative
    indices, integer lists/arrays/tensors (one: a gather along its axis; several: the
    points they pick, broadcast together, as in NumPy) and boolean masks.

    >>> import tapeflow as tf
    >>> x = tf.reshape(tf.range(12), [3, 4])
    >>> print(x[1, ::2])
    tf.Tensor([4 6], shape=(2,), dtype=int32)
    >>> print(x[-1, [0, 3]])
    tf.Tensor([ 8 11], shape=(2,), dtype=int32)
    """
    x = self if type(self) is Tensor else self.read_value()
    tk = type(key)
    if tk is int:
        s = x._data.shape
        if s:
            n = s[0]
            i = key + n if key < 0 else key
            if 0 <= i < n:
                return execute(_STRIDED_SLICE, (x,), {"spec": (i, Ellipsis)})
    elif tk is tuple:
        # x[i, j]: all Python ints in range
        s = x._data.shape
        if len(key) <= len(s):
            spec = []
            for k, n in zip(key, s):
                if type(k) is not int:
                    break
                i = k + n if k < 0 else k
                if not 0 <= i < n:
                    break
                spec.append(i)
            else:
                spec.append(Ellipsis)
                return execute(_STRIDED_SLICE, (x,), {"spec": tuple(spec)})
    elif tk is _slice:
        # x[a:b:c] on the first dimension
        s = x._data.shape
        if s and (key.step is None or key.step == 1):
            n = s[0]
            start, stop, _ = key.indices(n)
            if start == 0 and stop >= n:
                return x
            return execute(_STRIDED_SLICE, (x,), {"spec": (_slice(start, stop, 1), Ellipsis)})
    return _getitem_slow(x, key)


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, var=None, name=None):
    """TensorFlow's strided slice: ``input_[begin:end:strides]`` per dimension, with
    bit masks (``begin_mask``: ignore begin[i], ``shrink_axis_mask``: index, ...).

    >>> import tapeflow as tf
    >>> print(tf.strided_slice([[1, 2, 3], [4, 5, 6]], [0, 2], [2, 0], [1, -1]))
    tf.Tensor(
    [[3 2]
     [6 5]], shape=(2, 2), dtype=int32)
    """
    x = _tensor(input_)
    b = _shape_tuple(begin, "StridedSlice")
    e = _shape_tuple(end, "StridedSlice")
    st = (1,) * len(b) if strides is None else _shape_tuple(strides, "StridedSlice")
    begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask = (
        _shapes.as_index(m, f"strided_slice: {w}", "StridedSlice", _here(x)) for w, m in (
            ("begin_mask", begin_mask), ("end_mask", end_mask),
            ("ellipsis_mask", ellipsis_mask), ("new_axis_mask", new_axis_mask),
            ("shrink_axis_mask", shrink_axis_mask)))
    if not len(b) == len(e) == len(st):
        raise _bad_index("begin, end and strides must have the same length", x)
    key = []
    for i in _range(len(b)):
        bit = 1 << i
        if ellipsis_mask & bit:
            key.append(Ellipsis)
        elif new_axis_mask & bit:
            key.append(None)
        elif shrink_axis_mask & bit:
            key.append(b[i])
        else:
            if st[i] == 0:
                raise _bad_index(f"strides[{i}] must be non-zero", x)
            key.append(_slice(None if begin_mask & bit else b[i], None if end_mask & bit else e[i],
                              st[i]))
    return _getitem_slow(x, tuple(key))


# --- x[key] = value (the array API's __setitem__) -------------------------------------------

def _host_key(key):
    """``key`` with tensors and Variables as host NumPy arrays (positions are metadata)."""
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    if isinstance(key, Variable):
        key = key.read_value()
    if isinstance(key, Tensor):
        return key.numpy()
    return key


def _scalar_value(value, x):
    """A Python scalar stored into ``x``: converted straight to ``x``'s dtype (weakly
    typed, as the array API says), so 0 fits a uint8 tensor and a float keeps float64's
    precision (through float32, 1/3 would lose it). A kind that does not fit (a float
    into an integer tensor, a complex into a real one) keeps the default conversion,
    and the dtype check below refuses it."""
    kinds = {builtins.bool: "b", int: "biufc", float: "fc", complex: "c"}[type(value)]
    if x.dtype.np.kind not in kinds:
        return convert_to_tensor(value)
    if type(value) is int and x.dtype.is_integer:
        info = np.iinfo(x.dtype.np)
        if not info.min <= value <= info.max:
            raise InvalidArgumentError(
                f"x[key] = value: {value} does not fit a {x.dtype.name} tensor of shape "
                f"{list(x.shape)} (its range is [{info.min}, {info.max}]); use a wider "
                "dtype", device=x.device)
    return constant(value, dtype=x.dtype)


def _key_repr(key):
    """A short description of an index key: arrays and tensors by shape and dtype."""
    if isinstance(key, tuple):
        return "(" + ", ".join(_key_repr(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, np.ndarray):
        return f"<array of shape {list(key.shape)}, {key.dtype}>"
    if isinstance(key, (Tensor, Variable)):
        return f"<{type(key).__name__} of shape {list(key.shape)}, {key.dtype.name}>"
    return _shapes.short_repr(key)


def _set_exhausted(x, key, detail):
    return ResourceExhaustedError(
        f"Out of memory: x[key] = value on {_described(x)} with the index {_key_repr(key)}: "
        f"{detail}; nothing was changed. Assign fewer elements at a time (split the index "
        "arrays)", device=x._device)


def _check_set_positions(x, key, hkey):
    """ResourceExhaustedError before the positions a huge integer-array key selects are
    computed on the host (int64, at least one per point its arrays broadcast to)."""
    arrays = []
    for k in (hkey if isinstance(hkey, tuple) else (hkey,)):
        if isinstance(k, (list, np.ndarray)):
            try:
                a = np.asarray(k) if isinstance(k, list) else k
            except (ValueError, TypeError):
                return                          # (ragged: the indexing says so)
            if a.dtype.kind != "b":
                arrays.append(a.shape)
    if not arrays:
        return
    try:
        shape = np.broadcast_shapes(*arrays)
    except ValueError:
        return                                  # (the indexing says so)
    points = _shapes.num_elements(shape)
    if points <= _shapes.SMALL:
        return
    host = _devs.get_device("cpu:0")
    need = points * 8
    limit = _shapes.device_memory_limit(host)
    if limit is not None and need > limit:
        raise _set_exhausted(
            x, key, f"its integer arrays broadcast to shape {list(shape)}, whose int64 "
            f"positions need {_shapes.format_bytes(need)} ({need} bytes), more than the host "
            f"({host}) can hold ({_shapes.format_bytes(limit)})")


def _set_index_error(x, key, hkey, e):
    """The error for a ``__setitem__`` key NumPy refused (``e``): a ragged list is named."""
    for d, k in enumerate(hkey if isinstance(hkey, tuple) else (hkey,)):
        if isinstance(k, list):
            try:
                np.asarray(k)
            except (ValueError, TypeError) as e2:
                what = ("a ragged list (nested lists of different lengths), not a rectangular "
                        "integer array" if isinstance(e2, ValueError) else str(e2))
                return InvalidArgumentError(
                    f"x[key] = value: the index {_shapes.short_repr(k)} (entry {d} of the key) is "
                    f"{what}, for {_described(x)}; nothing was changed. Give integer-array "
                    "indices as rectangular lists, arrays or tensors (every row the same "
                    "length), or assign row by row", device=x._device)
    return InvalidArgumentError(
        f"x[key] = value: index {_key_repr(key)} is not valid for shape {list(x._data.shape)} "
        f"(a {x.dtype.name} tensor): {e}; nothing was changed", device=x._device)


def _setitem(self, key, value):
    """``x[key] = value``: the elements ``x[key]`` selects (ints, slices, ``...``,
    ``None``, boolean masks, integer arrays; NumPy's rules, the last write wins) take
    ``value`` (broadcast, in ``x``'s dtype). A Variable is assigned; a tensor object is
    given a new buffer (other tensors, and earlier results that shared its memory, keep
    their values). Refused while this thread records a GradientTape or traces a
    tf.function: the recorded values would change under the tape.

    >>> import tapeflow as tf
    >>> x = tf.zeros([2, 3])
    >>> x[0, 1:] = 5.0
    >>> print(x)
    tf.Tensor(
    [[0. 5. 5.]
     [0. 0. 0.]], shape=(2, 3), dtype=float32)
    """
    from_var = isinstance(self, Variable)
    x = self.read_value() if from_var else self
    if not from_var and (_ctx.active_tapes() or _ctx.tracing[0]):
        raise FailedPreconditionError(
            "x[key] = value is not recorded by a GradientTape or traced by tf.function: "
            "assign to a tf.Variable (v[key] = value), or build the result with "
            "tf.where/tf.tensor_scatter_nd_update-style ops")
    shape = tuple(int(d) for d in x.shape)
    n = int(np.prod(shape, dtype=np.int64))
    hkey = _host_key(key)
    if n:
        _check_set_positions(x, key, hkey)
    try:
        pos = np.arange(n, dtype=np.int64).reshape(shape)[hkey]
    except (IndexError, TypeError, ValueError) as e:
        raise _set_index_error(x, key, hkey, e) from None
    except MemoryError as e:
        raise _set_exhausted(x, key, f"the positions it selects do not fit in host memory "
                             f"({e})") from None
    sel = tuple(int(d) for d in np.shape(pos))
    pos = np.asarray(pos).reshape(-1)
    v = _scalar_value(value, x) if type(value) in (builtins.bool, int, float, complex) \
        else convert_to_tensor(value)
    if v.dtype is not x.dtype:
        if not np.can_cast(v.dtype.np, x.dtype.np, casting="same_kind") and not (
                v.dtype.is_integer and x.dtype.is_floating):
            raise InvalidTypeError(f"x[key] = value: a {v.dtype.name} value does not fit a "
                                   f"{x.dtype.name} tensor; cast it first")
        v = _m.cast(v, x.dtype)
    if v.device != x.device:
        v = v.to(x.device)
    v = reshape(broadcast_to(v, sel), [-1])
    if pos.size and len(np.unique(pos)) != pos.size:       # duplicates: the last write wins
        last = pos.size - 1 - np.unique(pos[::-1], return_index=True)[1]
        last.sort()
        pos = pos[last]
        v = gather(v, constant(last, device=x.device))
    mask = np.zeros(n, np.bool_)
    mask[pos] = True
    dev = x.device
    flat = reshape(x, [-1])
    if x.dtype.is_bool:                 # ScatterNd has no bool kernels: scatter as uint8
        v = _m.cast(v, _dt.uint8)
    scattered = scatter_nd(constant(pos[:, None], device=dev), v, [n])
    if x.dtype.is_bool:
        scattered = _m.cast(scattered, x.dtype)
    new = where(constant(mask, device=dev), scattered, flat)
    new = reshape(new, list(shape))
    if from_var:
        self.assign(new)
    else:
        self._data = new._data


#: how errors name the functions Tensor and Variable install as methods (tapeflow.errors)
PUBLIC_NAMES = {"_getitem": "Tensor.__getitem__", "_setitem": "Tensor.__setitem__"}


# --- reverse (issue 47): a slice with step -1 along each axis ---------------------------

def reverse(tensor, axis, name=None):
    """``tensor`` with the order of its elements reversed along each axis of ``axis``
    (a 1-D list of distinct axes; negative ones count from the end). Differentiable.

    >>> import tapeflow as tf
    >>> print(tf.reverse([[1, 2, 3], [4, 5, 6]], [-1]))
    tf.Tensor(
    [[3 2 1]
     [6 5 4]], shape=(2, 3), dtype=int32)
    """
    if type(tensor) in COMPOSITE_TYPES:
        return dispatch(reverse, tensor, axis, name)
    x = _tensor(tensor)
    axes = _axis_list(axis, len(x.shape), "reverse", "ReverseV2", x)
    if not axes:
        return x
    return _getitem(x, tuple(_slice(None, None, -1) if i in axes else _FULL
                             for i in builtins.range(len(x.shape))))
