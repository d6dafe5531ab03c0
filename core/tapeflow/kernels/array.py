"""Shape, creation and indexing kernels, written once against an array module ``xp``.

Kernels return views where NumPy can (reshape, transpose, slices, split) and
never write into their inputs. Index checks raise InvalidArgumentError in
TensorFlow's words; the dispatcher appends ``[Op:<name>] on <device>``.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..plugins import KernelSpec

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS
COMPLEX = ("complex64", "complex128")


def _pos(flat, shape):
    """TF's SliceDebugString: '' for scalars, '[3]' or '[1,2]'."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(int(flat), shape)) + "]"


def _int_indices(indices, what="indices"):
    """InvalidArgumentError unless ``indices`` has an integer dtype."""
    if indices.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be int32 or int64, got {indices.dtype}")


def _text_fill(value):
    """The element of a string array (an object array of ``bytes``) standing for the fill
    ``value``: 0 is the empty string (``tf.zeros``, ``tf.pad``'s default, as in
    TensorFlow), text is itself (``str`` in UTF-8); any other number has no string value."""
    if isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    if type(value) is not bool and not isinstance(value, (list, tuple)) and value == 0:
        return b""
    raise InvalidArgumentError(f"Value for attr 'T' of string is not in the list of allowed "
                               f"values: strings have no number {value!r} (0 is the empty "
                               "string); fill with text")


class ArrayKernels:
    """The creation, shape and indexing kernels of one array module ``xp`` (NumPy or
    CuPy's namespace), one method per kernel; :meth:`table` maps op names to them.
    ``scatter_add(out, indices, values)``: ``out[indices] += values`` unbuffered (default
    ``xp.add.at``; a backend whose array module lacks ``ufunc.at`` passes its own).

    >>> import numpy as np
    >>> ArrayKernels(np).gather(np.arange(5.0), np.array([4, 0]), axis=0, batch_dims=0)
    array([4., 0.])
    """

    def __init__(self, xp, scatter_add=None):
        self.xp = xp
        self.scatter_add = scatter_add

    # --- index checks ---------------------------------------------------------------
    def _check_range(self, indices, n, what="indices",
                     fmt="{what}{pos} = {v} is not in [0, {n})"):
        """Every index in [0, n), else TF's message for the first bad one."""
        xp = self.xp
        size = indices.size
        if size == 0:
            return
        if size <= 32:   # two reductions cost more than a look at a few values
            vals = indices.ravel().tolist()
            if min(vals) >= 0 and max(vals) < n:
                return
        elif indices.min() >= 0 and indices.max() < n:
            return
        bad = xp.logical_or(indices < 0, indices >= n).reshape(-1)
        i = int(xp.argmax(bad))
        v = int(indices.reshape(-1)[i])
        raise InvalidArgumentError(fmt.format(what=what, pos=_pos(i, indices.shape), v=v, n=n))

    def _check_nd(self, indices, bound, what):
        """Index vectors (last dim of indices) inside ``bound`` (a shape)."""
        xp = self.xp
        k = len(bound)
        if indices.size == 0 or k == 0:
            return
        flat = indices.reshape(-1, k)
        lim = xp.asarray(bound, dtype=np.int64)
        bad = xp.logical_or(flat < 0, flat >= lim).any(axis=1)
        if bool(bad.any()):
            i = int(xp.argmax(bad))
            vec = ", ".join(str(int(v)) for v in flat[i])
            raise InvalidArgumentError(
                f"indices{_pos(i, indices.shape[:-1])} = [{vec}] does not index into {what} "
                f"[{','.join(str(b) for b in bound)}]")

    def _add_at(self, out, idx, vals):
        """``out[idx] += vals`` unbuffered (repeated indices add up): the service
        ``scatter_add``, else ``xp.add.at``."""
        add_at = self.scatter_add
        if add_at is None:
            add_at = self.scatter_add = self.xp.add.at
        add_at(out, idx, vals)

    # --- creation -------------------------------------------------------------------
    def fill(self, shape, value, dtype, device=None):
        """An array of ``shape`` filled with ``value``."""
        if dtype.np.kind == "O":
            value = _text_fill(value)
        return self.xp.full(shape, value, dtype=dtype.np)

    def zeros_like(self, x, dtype):
        """Zeros of ``x``'s shape (and dtype unless ``dtype`` is given); of strings, empty
        strings."""
        dt = x.dtype if dtype is None else dtype.np
        if dt.kind == "O":
            return self.xp.full(x.shape, b"", dtype=dt)
        return self.xp.zeros(x.shape, dtype=dt)

    def ones_like(self, x, dtype):
        """Ones of ``x``'s shape (and dtype unless ``dtype`` is given)."""
        dt = x.dtype if dtype is None else dtype.np
        return self.xp.ones(x.shape, dtype=dt) if dt.kind != "O" else _text_fill(1)

    def range(self, start, limit, delta, dtype, device=None):
        """``start, start + delta, ...`` up to ``limit`` (excluded)."""
        return self.xp.arange(start, limit, delta, dtype=dtype.np)

    def eye(self, num_rows, num_columns, batch_shape, dtype, device=None):
        """The identity matrix (ones on the diagonal), broadcast to ``batch_shape``."""
        xp = self.xp
        e = xp.eye(num_rows, num_columns, dtype=dtype.np)
        if batch_shape:
            e = xp.broadcast_to(e, tuple(batch_shape) + e.shape)
        return e

    def linspace(self, start, stop, num, dtype, device=None):
        """``num`` evenly spaced values from ``start`` to ``stop`` (both included)."""
        xp = self.xp
        if num == 1:        # TensorFlow's (and the OpenCL kernel's): [start], even for stop=nan
            return xp.full((1,), start, dtype=dtype.np)
        return xp.linspace(start, stop, num, dtype=dtype.np)

    def one_hot(self, indices, depth, on_value, off_value, axis, dtype):
        """``on_value`` where an index hits, ``off_value`` elsewhere, along a new ``axis``."""
        xp = self.xp
        _int_indices(indices)
        hot = indices[..., None] == xp.arange(depth, dtype=indices.dtype)
        if on_value == 1 and off_value == 0:
            out = hot.astype(dtype.np)
        else:
            out = xp.where(hot, xp.asarray(on_value, dtype=dtype.np),
                           xp.asarray(off_value, dtype=dtype.np))
        if axis != indices.ndim:
            out = xp.moveaxis(out, -1, axis)
        return out

    # --- shapes ---------------------------------------------------------------------
    def reshape(self, x, shape):
        """``x`` with a new ``shape`` (a view where possible)."""
        return x.reshape(shape)     # (the array's method: xp.reshape adds a Python call)

    def broadcast_to(self, x, shape):
        """``x`` broadcast to ``shape`` (small results materialised: cheaper than a view)."""
        # xp.broadcast_to costs ~5 us of Python for a free view; a small result is
        # cheaper to materialise (the reduction gradients broadcast scalars)
        if x.shape == shape:
            return x
        n = 1
        for d in shape:
            n *= d
        if n <= 4096:
            out = self.xp.empty(shape, dtype=x.dtype)
            out[...] = x
            return out
        return self.xp.broadcast_to(x, shape)

    def transpose(self, x, perm):
        """``x`` with its axes permuted by ``perm`` (a view)."""
        return self.xp.transpose(x, perm)

    def expand_dims(self, x, axis):
        """``x`` with a new axis of length 1 at ``axis``."""
        s = x.shape
        return x.reshape(s[:axis] + (1,) + s[axis:])

    def squeeze(self, x, axis):
        """``x`` without its length-1 axes ``axis``."""
        return self.xp.squeeze(x, axis)

    def concat(self, *xs, axis):
        """The arrays ``xs`` joined along ``axis``."""
        return self.xp.concatenate(xs, axis=axis)

    def pack(self, *xs, axis):
        """The arrays ``xs`` stacked along a new ``axis``."""
        return self.xp.stack(xs, axis=axis)

    def unpack(self, x, num, axis):
        """The ``num`` slices of ``x`` along ``axis`` (views)."""
        pre = (slice(None),) * axis
        return tuple(x[pre + (i, Ellipsis)] for i in range(num))

    def split_v(self, x, size_splits, axis):
        """``x`` cut along ``axis`` into pieces of ``size_splits`` (views)."""
        pre = (slice(None),) * axis
        out = []
        start = 0
        for s in size_splits:
            out.append(x[pre + (slice(start, start + s), Ellipsis)])
            start += s
        return tuple(out)

    def tile(self, x, multiples):
        """``x`` repeated ``multiples[i]`` times along each axis ``i``."""
        if len(multiples) != x.ndim:
            raise InvalidArgumentError(
                f"Expected multiples argument to be a vector of length {x.ndim} but got length "
                f"{len(multiples)}")
        return self.xp.tile(x, multiples)

    def pad(self, x, paddings, constant_values):
        """``x`` padded by ``paddings`` (``(before, after)`` per axis) of ``constant_values``."""
        shape = tuple(b + n + a for (b, a), n in zip(paddings, x.shape))
        if x.dtype.kind == "O":
            constant_values = _text_fill(constant_values)
        out = self.xp.full(shape, constant_values, dtype=x.dtype)
        out[tuple(slice(b, b + n) for (b, _), n in zip(paddings, x.shape))] = x
        return out

    def mirror_pad(self, x, paddings, mode):
        """``x`` padded by its reflection (``"REFLECT"``) or mirror (``"SYMMETRIC"``)."""
        if not len(paddings):          # a 0-d x: NumPy refuses an empty pad_width
            return x.copy()
        return self.xp.pad(x, paddings, mode="reflect" if mode == "REFLECT" else "symmetric")

    def slice(self, x, begin, size):
        """The block of ``x`` of ``size`` starting at ``begin`` (a view)."""
        return x[tuple(slice(b, b + s) for b, s in zip(begin, size)) + (Ellipsis,)]

    def strided_slice(self, x, spec):
        """``x[spec]`` (``spec``: the normalised index tuple)."""
        return x[spec]

    def strided_slice_grad(self, dy, shape, spec):
        """Zeros of ``shape`` with ``dy`` written at ``[spec]``."""
        out = self.xp.zeros(shape, dtype=dy.dtype)
        out[spec] = dy
        return out

    def shape(self, x, out_type):
        """The shape of ``x`` as a vector of ``out_type``."""
        return self.xp.asarray(x.shape, dtype=out_type.np)

    def size(self, x, out_type):
        """The number of elements of ``x`` as a scalar of ``out_type``."""
        return self.xp.asarray(x.size, dtype=out_type.np)

    def rank(self, x):
        """The number of axes of ``x`` as an int32 scalar."""
        return self.xp.asarray(x.ndim, dtype=np.int32)

    # --- selection ------------------------------------------------------------------
    def select(self, c, x, y):
        """``x`` where ``c`` is true, else ``y`` (broadcast)."""
        return self.xp.where(c, x, y)

    def where(self, c):
        """The coordinates of the true elements of ``c``, one row each (int64)."""
        if c.dtype.kind == "O":         # (text is neither true nor false, as in TensorFlow)
            raise InvalidArgumentError("Value for attr 'T' of string is not in the list of "
                                       "allowed values: the numbers and bool")
        return self.xp.argwhere(c).astype(np.int64, copy=False)

    def identity(self, x):
        """``x`` itself."""
        return x

    def clip(self, t, lo, hi):
        """``t`` clipped to ``[lo, hi]``."""
        xp = self.xp
        return xp.minimum(xp.maximum(t, lo), hi)

    # --- gather / scatter -----------------------------------------------------------
    def gather(self, params, indices, axis, batch_dims):
        """The slices of ``params`` along ``axis`` at ``indices`` (per batch when
        ``batch_dims``)."""
        xp = self.xp
        _int_indices(indices)
        n = params.shape[axis]
        self._check_range(indices, n)
        if batch_dims == 0:
            return xp.take(params, indices, axis=axis)
        b = batch_dims
        bshape = params.shape[:b]
        if indices.shape[:b] != bshape:
            raise InvalidArgumentError(
                f"params.shape[:{b}] = {list(bshape)} should equal indices.shape[:{b}] = "
                f"{list(indices.shape[:b])}")
        B = int(np.prod(bshape, dtype=np.int64))
        p = params.reshape((B,) + params.shape[b:])
        ind = indices.reshape((B,) + indices.shape[b:])
        pre = axis - b
        bidx = xp.arange(B).reshape((B,) + (1,) * (ind.ndim - 1))
        r = p[(bidx,) + (slice(None),) * pre + (ind, Ellipsis)]
        if pre:
            k = ind.ndim - 1
            perm = ((0,) + tuple(range(k + 1, k + 1 + pre)) + tuple(range(1, k + 1))
                    + tuple(range(k + 1 + pre, r.ndim)))
            r = r.transpose(perm)
        return r.reshape(bshape + r.shape[1:])

    def gather_nd(self, params, indices):
        """The slices of ``params`` at the index vectors of ``indices``' last axis."""
        _int_indices(indices)
        if indices.ndim == 0:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        if k > params.ndim:
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= params rank; saw: {k} vs. "
                f"{params.ndim}")
        if k == 0:
            return self.xp.broadcast_to(params, indices.shape[:-1] + params.shape)
        self._check_nd(indices, params.shape[:k], "param shape")
        return params[tuple(indices[..., i] for i in range(k)) + (Ellipsis,)]

    def scatter_nd(self, indices, updates, shape):
        """Zeros of ``shape`` with ``updates`` added at the index vectors of ``indices``."""
        xp = self.xp
        _int_indices(indices)
        if indices.ndim == 0:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        if k > len(shape):
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= output rank; saw: {k} vs. "
                f"{len(shape)}")
        want = indices.shape[:-1] + tuple(shape[k:])
        if updates.shape != want:
            raise InvalidArgumentError(
                f"updates must have shape indices.shape[:-1] + shape[indices.shape[-1]:] = "
                f"{list(want)}, got {list(updates.shape)}")
        out = xp.zeros(shape, dtype=updates.dtype)
        if updates.size == 0:
            return out
        if k == 0:
            n = int(np.prod(indices.shape[:-1], dtype=np.int64))
            return out + updates.reshape((n,) + tuple(shape)).sum(axis=0, dtype=updates.dtype)
        self._check_nd(indices, tuple(shape[:k]), "shape")
        self._add_at(out, tuple(indices[..., i] for i in range(k)), updates)
        return out

    def unsorted_segment_sum(self, data, segment_ids, num_segments):
        """The sums of the slices of ``data`` with the same segment id (negative ids
        dropped)."""
        xp = self.xp
        _int_indices(segment_ids, "segment_ids")
        k = segment_ids.ndim
        if data.shape[:k] != segment_ids.shape:
            raise InvalidArgumentError(
                f"data.shape = {list(data.shape)} does not start with segment_ids.shape = "
                f"{list(segment_ids.shape)}")
        inner = data.shape[k:]
        out = xp.zeros((num_segments,) + inner, dtype=data.dtype)
        ids = segment_ids.reshape(-1)
        if ids.size == 0:
            return out
        vals = data.reshape((ids.size,) + inner)
        if ids.max() >= num_segments:
            i = int(xp.argmax(ids >= num_segments))
            raise InvalidArgumentError(
                f"segment_ids{_pos(i, segment_ids.shape)} = {int(ids[i])} is out of range "
                f"[0, {num_segments})")
        if ids.min() < 0:
            keep = ids >= 0
            ids = ids[keep]
            vals = vals[keep]
        self._add_at(out, ids, vals)
        return out

    # --- scans and sorting ----------------------------------------------------------
    def _shift(self, out, axis, fill):
        """``out`` shifted one place forward along ``axis``, ``fill`` first."""
        xp = self.xp
        idx = [slice(None)] * out.ndim
        idx[axis] = slice(0, out.shape[axis] - 1)
        first = xp.full(out.shape[:axis] + (1,) + out.shape[axis + 1:], fill, dtype=out.dtype)
        return xp.concatenate([first, out[tuple(idx)]], axis=axis)

    def _scan(self, fn, fill, x, axis, exclusive, reverse):
        """The scan ``fn`` (``xp.cumsum``/``cumprod``, ``fill`` its identity) of ``x``."""
        xp = self.xp
        if reverse:
            x = xp.flip(x, axis)
        dt = x.dtype
        acc = np.float32 if dt == np.float16 else dt    # float16 adds up in float32
        out = fn(x, axis=axis, dtype=acc)
        if exclusive and out.shape[axis]:
            out = self._shift(out, axis, fill)
        out = out.astype(dt, copy=False)
        return xp.flip(out, axis) if reverse else out

    def cumsum(self, x, axis, exclusive, reverse):
        """The running sums of ``x`` along ``axis`` (exclusive: shifted, 0 first)."""
        return self._scan(self.xp.cumsum, 0, x, axis, exclusive, reverse)

    def cumprod(self, x, axis, exclusive, reverse):
        """The running products of ``x`` along ``axis`` (exclusive: shifted, 1 first)."""
        return self._scan(self.xp.cumprod, 1, x, axis, exclusive, reverse)

    def argsort(self, x, axis, descending):
        """The indices that sort ``x`` along ``axis``, stably (int64)."""
        xp = self.xp
        if not descending:
            return xp.argsort(x, axis=axis, kind="stable").astype(np.int64)
        # stable descending: sort the reversed array ascending, reverse, map back
        i = xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, kind="stable"), axis)
        return (x.shape[axis] - 1 - i).astype(np.int64)

    def searchsorted(self, a, v, side):
        """Where each of ``v`` goes in the sorted ``a`` (int64)."""
        return self.xp.searchsorted(a, v, side=side).astype(np.int64)

    def unique_all(self, x):
        """``(values, first indices, inverse, counts)`` of the distinct elements of ``x``."""
        xp = self.xp
        flat = x.reshape(-1)
        try:
            vals, idx, inv, counts = xp.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
        except TypeError:                       # an xp without equal_nan
            vals, idx, inv, counts = xp.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True)
        return (vals, idx.astype(np.int64), inv.reshape(x.shape).astype(np.int64),
                counts.astype(np.int64))

    def nonzero(self, x):
        """The coordinates of the non-zero elements of ``x``, one row each (int64)."""
        return self.xp.argwhere(x).astype(np.int64)

    def bitcast(self, x, dtype):
        """Bitcast: ``x``'s bytes as ``dtype`` (a tapeflow DType; the public function
        checked the shapes): a view of a contiguous ``x``."""
        to = np.dtype(dtype.np)
        x = self.xp.ascontiguousarray(x).reshape(x.shape)     # (0-d stays 0-d)
        a, b = x.dtype.itemsize, to.itemsize
        if a > b:
            return x.reshape(x.shape + (1,)).view(to)
        if a < b:
            return x.view(to).reshape(x.shape[:-1])
        return x.view(to)

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        return {
            "SearchSorted": KernelSpec(self.searchsorted, dtypes=NUMERIC),
            "UniqueAll": KernelSpec(self.unique_all, dtypes=NUMERIC + ("bool",)),
            "NonZero": KernelSpec(self.nonzero, dtypes=NUMERIC + ("bool",)),
            "Cumsum": KernelSpec(self.cumsum, dtypes=NUMERIC + COMPLEX),
            "Cumprod": KernelSpec(self.cumprod, dtypes=NUMERIC + COMPLEX),
            "ArgSort": KernelSpec(self.argsort, dtypes=NUMERIC),
            "Fill": KernelSpec(self.fill, needs_device=True),
            "ZerosLike": KernelSpec(self.zeros_like),
            "OnesLike": KernelSpec(self.ones_like),
            "Range": KernelSpec(self.range, needs_device=True,
                                dtypes=("float16", "float32", "float64", "int32", "int64")),
            "Eye": KernelSpec(self.eye, needs_device=True),
            "LinSpace": KernelSpec(self.linspace, needs_device=True, dtypes=FLOATS),
            "OneHot": KernelSpec(self.one_hot),
            "Reshape": KernelSpec(self.reshape),
            "BroadcastTo": KernelSpec(self.broadcast_to),
            "Transpose": KernelSpec(self.transpose),
            "ExpandDims": KernelSpec(self.expand_dims),
            "Squeeze": KernelSpec(self.squeeze),
            "ConcatV2": KernelSpec(self.concat),
            "Pack": KernelSpec(self.pack),
            "Unpack": KernelSpec(self.unpack),
            "SplitV": KernelSpec(self.split_v),
            "Tile": KernelSpec(self.tile),
            "PadV2": KernelSpec(self.pad),
            "MirrorPad": KernelSpec(self.mirror_pad),
            "Slice": KernelSpec(self.slice),
            "StridedSlice": KernelSpec(self.strided_slice),
            "StridedSliceGrad": KernelSpec(self.strided_slice_grad),
            "Shape": KernelSpec(self.shape),
            "Size": KernelSpec(self.size),
            "Rank": KernelSpec(self.rank),
            "SelectV2": KernelSpec(self.select),
            "Where": KernelSpec(self.where),
            "Identity": KernelSpec(self.identity),
            "StopGradient": KernelSpec(self.identity),
            "ClipByValue": KernelSpec(self.clip, dtypes=NUMERIC),
            "GatherV2": KernelSpec(self.gather),
            "GatherNd": KernelSpec(self.gather_nd),
            "ScatterNd": KernelSpec(self.scatter_nd, dtypes=NUMERIC + COMPLEX),
            "UnsortedSegmentSum": KernelSpec(self.unsorted_segment_sum,
                                             dtypes=NUMERIC + COMPLEX),
            "Bitcast": KernelSpec(self.bitcast, dtypes=NUMERIC + COMPLEX),
        }


def build(ctx):
    """The creation, shape and indexing kernels for ``ctx.xp`` (service ``scatter_add``,
    see :class:`ArrayKernels`): ``{op name: KernelSpec}``."""
    return ArrayKernels(ctx.xp, ctx.get("scatter_add")).table()
