"""Shape, creation and indexing kernels, written once against an array module ``xp``.

Kernels return views where NumPy can (reshape, transpose, slices, split) and
never write into their inputs. Index checks raise InvalidArgumentError in
TensorFlow's words; the dispatcher appends ``[Op:<name>] on <device>``.
"""

from __future__ import annotations

import numpy as np

from ..runtime.errors import InvalidArgumentError

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS
COMPLEX = ("complex64", "complex128")


def _pos(flat, shape):
    """TF's SliceDebugString: '' for scalars, '[3]' or '[1,2]'."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(int(flat), shape)) + "]"


def build(xp):
    def _int_indices(indices, what="indices"):
        if indices.dtype.kind not in "iu":
            raise InvalidArgumentError(f"{what} must be int32 or int64, got {indices.dtype}")

    def _check_range(indices, n, what="indices", fmt="{what}{pos} = {v} is not in [0, {n})"):
        """Every index in [0, n), else TF's message for the first bad one."""
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

    def _check_nd(indices, bound, what):
        """Index vectors (last dim of indices) inside ``bound`` (a shape)."""
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

    def _add_at(out, idx, vals):
        at = getattr(xp.add, "at", None)
        if at is not None:
            at(out, idx, vals)
        else:   # CuPy before ufunc.at
            import cupyx
            cupyx.scatter_add(out, idx, vals)

    # --- creation -----------------------------------------------------------------
    def fill(shape, value, dtype, device=None):
        return xp.full(shape, value, dtype=dtype.np)

    def zeros_like(x, dtype):
        return xp.zeros(x.shape, dtype=x.dtype if dtype is None else dtype.np)

    def ones_like(x, dtype):
        return xp.ones(x.shape, dtype=x.dtype if dtype is None else dtype.np)

    def range_(start, limit, delta, dtype, device=None):
        return xp.arange(start, limit, delta, dtype=dtype.np)

    def eye(num_rows, num_columns, batch_shape, dtype, device=None):
        e = xp.eye(num_rows, num_columns, dtype=dtype.np)
        if batch_shape:
            e = xp.broadcast_to(e, tuple(batch_shape) + e.shape)
        return e

    def linspace(start, stop, num, dtype, device=None):
        if num == 1:        # TensorFlow's (and the OpenCL kernel's): [start], even for stop=nan
            return xp.full((1,), start, dtype=dtype.np)
        return xp.linspace(start, stop, num, dtype=dtype.np)

    def one_hot(indices, depth, on_value, off_value, axis, dtype):
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

    # --- shapes -------------------------------------------------------------------
    def reshape(x, shape):
        return xp.reshape(x, shape)

    def broadcast_to(x, shape):
        # xp.broadcast_to costs ~5 us of Python for a free view; a small result is
        # cheaper to materialise (the reduction gradients broadcast scalars)
        if x.shape == shape:
            return x
        n = 1
        for d in shape:
            n *= d
        if n <= 4096:
            out = xp.empty(shape, dtype=x.dtype)
            out[...] = x
            return out
        return xp.broadcast_to(x, shape)

    def transpose(x, perm):
        return xp.transpose(x, perm)

    def expand_dims(x, axis):
        s = x.shape
        return x.reshape(s[:axis] + (1,) + s[axis:])

    def squeeze(x, axis):
        return xp.squeeze(x, axis)

    def concat(*xs, axis):
        return xp.concatenate(xs, axis=axis)

    def pack(*xs, axis):
        return xp.stack(xs, axis=axis)

    def unpack(x, num, axis):
        pre = (slice(None),) * axis
        return tuple(x[pre + (i, Ellipsis)] for i in range(num))

    def split_v(x, size_splits, axis):
        pre = (slice(None),) * axis
        out = []
        start = 0
        for s in size_splits:
            out.append(x[pre + (slice(start, start + s), Ellipsis)])
            start += s
        return tuple(out)

    def tile(x, multiples):
        if len(multiples) != x.ndim:
            raise InvalidArgumentError(
                f"Expected multiples argument to be a vector of length {x.ndim} but got length "
                f"{len(multiples)}")
        return xp.tile(x, multiples)

    def pad(x, paddings, constant_values):
        shape = tuple(b + n + a for (b, a), n in zip(paddings, x.shape))
        out = xp.full(shape, constant_values, dtype=x.dtype)
        out[tuple(slice(b, b + n) for (b, _), n in zip(paddings, x.shape))] = x
        return out

    def mirror_pad(x, paddings, mode):
        if not len(paddings):          # a 0-d x: NumPy refuses an empty pad_width
            return x.copy()
        return xp.pad(x, paddings, mode="reflect" if mode == "REFLECT" else "symmetric")

    def slice_(x, begin, size):
        return x[tuple(slice(b, b + s) for b, s in zip(begin, size)) + (Ellipsis,)]

    def strided_slice(x, spec):
        return x[spec]

    def strided_slice_grad(dy, shape, spec):
        out = xp.zeros(shape, dtype=dy.dtype)
        out[spec] = dy
        return out

    def shape(x, out_type):
        return xp.asarray(x.shape, dtype=out_type.np)

    def size(x, out_type):
        return xp.asarray(x.size, dtype=out_type.np)

    def rank(x):
        return xp.asarray(x.ndim, dtype=np.int32)

    # --- selection ----------------------------------------------------------------
    def select(c, x, y):
        return xp.where(c, x, y)

    def where(c):
        return xp.argwhere(c).astype(np.int64, copy=False)

    def identity(x):
        return x

    def clip(t, lo, hi):
        return xp.minimum(xp.maximum(t, lo), hi)

    # --- gather / scatter ---------------------------------------------------------
    def gather(params, indices, axis, batch_dims):
        _int_indices(indices)
        n = params.shape[axis]
        _check_range(indices, n)
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

    def gather_nd(params, indices):
        _int_indices(indices)
        if indices.ndim == 0:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        if k > params.ndim:
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= params rank; saw: {k} vs. "
                f"{params.ndim}")
        if k == 0:
            return xp.broadcast_to(params, indices.shape[:-1] + params.shape)
        _check_nd(indices, params.shape[:k], "param shape")
        return params[tuple(indices[..., i] for i in range(k)) + (Ellipsis,)]

    def scatter_nd(indices, updates, shape):
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
        _check_nd(indices, tuple(shape[:k]), "shape")
        _add_at(out, tuple(indices[..., i] for i in range(k)), updates)
        return out

    def unsorted_segment_sum(data, segment_ids, num_segments):
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
        _add_at(out, ids, vals)
        return out

    def _shift(out, axis, fill):
        """``out`` shifted one place forward along ``axis``, ``fill`` first."""
        idx = [slice(None)] * out.ndim
        idx[axis] = slice(0, out.shape[axis] - 1)
        first = xp.full(out.shape[:axis] + (1,) + out.shape[axis + 1:], fill, dtype=out.dtype)
        return xp.concatenate([first, out[tuple(idx)]], axis=axis)

    def scan(fn, fill):
        def k(x, axis, exclusive, reverse):
            if reverse:
                x = xp.flip(x, axis)
            dt = x.dtype
            acc = np.float32 if dt == np.float16 else dt    # float16 adds up in float32
            out = fn(x, axis=axis, dtype=acc)
            if exclusive and out.shape[axis]:
                out = _shift(out, axis, fill)
            out = out.astype(dt, copy=False)
            return xp.flip(out, axis) if reverse else out
        return k

    def argsort(x, axis, descending):
        if not descending:
            return xp.argsort(x, axis=axis, kind="stable").astype(np.int64)
        # stable descending: sort the reversed array ascending, reverse, map back
        i = xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, kind="stable"), axis)
        return (x.shape[axis] - 1 - i).astype(np.int64)

    def searchsorted(a, v, side):
        return xp.searchsorted(a, v, side=side).astype(np.int64)

    def unique_all(x):
        flat = x.reshape(-1)
        try:
            vals, idx, inv, counts = xp.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
        except TypeError:                       # an xp without equal_nan
            vals, idx, inv, counts = xp.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True)
        return (vals, idx.astype(np.int64), inv.reshape(x.shape).astype(np.int64),
                counts.astype(np.int64))

    def nonzero(x):
        return xp.argwhere(x).astype(np.int64)

    return {
        "SearchSorted": {"fn": searchsorted, "dtypes": NUMERIC},
        "UniqueAll": {"fn": unique_all, "dtypes": NUMERIC + ("bool",)},
        "NonZero": {"fn": nonzero, "dtypes": NUMERIC + ("bool",)},
        "Cumsum": {"fn": scan(xp.cumsum, 0), "dtypes": NUMERIC + COMPLEX},
        "Cumprod": {"fn": scan(xp.cumprod, 1), "dtypes": NUMERIC + COMPLEX},
        "ArgSort": {"fn": argsort, "dtypes": NUMERIC},
        "Fill": {"fn": fill, "needs_device": True},
        "ZerosLike": zeros_like,
        "OnesLike": ones_like,
        "Range": {"fn": range_, "needs_device": True,
                  "dtypes": ("float16", "float32", "float64", "int32", "int64")},
        "Eye": {"fn": eye, "needs_device": True},
        "LinSpace": {"fn": linspace, "needs_device": True, "dtypes": FLOATS},
        "OneHot": one_hot,
        "Reshape": reshape,
        "BroadcastTo": broadcast_to,
        "Transpose": transpose,
        "ExpandDims": expand_dims,
        "Squeeze": squeeze,
        "ConcatV2": concat,
        "Pack": pack,
        "Unpack": unpack,
        "SplitV": split_v,
        "Tile": tile,
        "PadV2": pad,
        "MirrorPad": mirror_pad,
        "Slice": slice_,
        "StridedSlice": strided_slice,
        "StridedSliceGrad": strided_slice_grad,
        "Shape": shape,
        "Size": size,
        "Rank": rank,
        "SelectV2": select,
        "Where": where,
        "Identity": identity,
        "StopGradient": identity,
        "ClipByValue": {"fn": clip, "dtypes": NUMERIC},
        "GatherV2": gather,
        "GatherNd": gather_nd,
        "ScatterNd": {"fn": scatter_nd, "dtypes": NUMERIC + COMPLEX},
        "UnsortedSegmentSum": {"fn": unsorted_segment_sum, "dtypes": NUMERIC + COMPLEX},
    }
