"""``tf.SparseTensor`` and ``tf.sparse``: a tensor stored as the coordinates and values
of its non-zero entries (docs/sparse.md).

A :class:`SparseTensor` is a composite tensor (:mod:`tapeflow.ops.composite`) of three
dense tensors: ``indices`` (int64, ``[N, rank]``), ``values`` (``[N]``) and
``dense_shape`` (int64, ``[rank]``). The functions here work out the new coordinates on
the host (NumPy, as TensorFlow's sparse kernels run on the CPU) and move the values
with tapeflow ops (``gather``, ``scatter_nd``, ``concat``...), so gradients flow to
``values`` on every backend. ``sparse_dense_matmul`` is one op,
``SparseTensorDenseMatMul``, with a kernel per backend.

Long file: it is one TensorFlow namespace, ``tf.sparse``, whose functions share the
class, its coordinate helpers and its elementwise dispatch.

>>> import tapeflow as tf
>>> st = tf.sparse.SparseTensor(indices=[[0, 1], [2, 3]], values=[10, 20],
...                             dense_shape=[3, 4])
>>> print(tf.sparse.to_dense(st))
tf.Tensor(
[[ 0 10  0  0]
 [ 0  0  0  0]
 [ 0  0  0 20]], shape=(3, 4), dtype=int32)
>>> print(tf.sparse.sparse_dense_matmul(st, tf.ones([4, 1], tf.int32)))
tf.Tensor(
[[10]
 [ 0]
 [20]], shape=(3, 1), dtype=int32)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, TapeflowError
from ..runtime.dispatch import constant, convert_to_tensor, execute
from ..runtime.tensor import Tensor, TensorShape
from . import array_gather as _g
from . import array_shape as _s
from . import array_values as _v
from . import math as _m
from . import reductions as _r
from .composite import CompositeTensor, TypeSpec
from .composite import dispatch_for_binary_elementwise_apis as _for_binary
from .composite import dispatch_for_unary_elementwise_apis as _for_unary
from .library import LIB, defop, rerun

__all__ = ["SparseTensor", "SparseTensorSpec", "from_dense", "to_dense", "reorder", "reshape",
           "add", "concat", "slice", "retain", "fill_empty_rows", "reduce_sum", "reduce_max",
           "sparse_dense_matmul", "map_values", "mask", "transpose", "expand_dims", "maximum",
           "minimum"]

_I64 = _dt.int64


def _host(t):
    """A tensor's value as a NumPy array (the coordinates are worked out on the host)."""
    return t.numpy()


def _i64(value, what, fn):
    """``value`` as an int64 tensor (int32 tensors are widened); floats are refused."""
    if isinstance(value, Tensor):
        if not value.dtype.is_integer:
            raise InvalidTypeError(f"{fn}: {what} must be integers (int64), got a "
                                   f"{value.dtype.name} tensor")
        return value if value.dtype is _I64 else _m.cast(value, _I64)
    a = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        raise InvalidTypeError(f"{fn}: {what} must be integers (int64), got {a.dtype} "
                               f"values {value!r:.60}")
    return constant(a.astype(np.int64), _I64)


def _static_shape(dense_shape, rank):
    """The static shape a SparseTensor reports: dense_shape's value where it can be read
    (not while tf.function traces it as an argument), else unknown dimensions."""
    try:
        return TensorShape(int(d) for d in _host(dense_shape))
    except TapeflowError:
        return TensorShape((None,) * rank)


# --- SparseTensor and its spec --------------------------------------------------------------

class SparseTensorSpec(TypeSpec):
    """The type of a :class:`SparseTensor`: its (possibly partly unknown) dense shape and
    its dtype.

    >>> import tapeflow as tf
    >>> tf.SparseTensorSpec([3, None], tf.float32)
    SparseTensorSpec(TensorShape([3, None]), tf.float32)
    """

    def __init__(self, shape=None, dtype=_dt.float32):
        self._shape = None if shape is None else tuple(
            None if d is None else int(d) for d in shape)
        self._dtype = _dt.as_dtype(dtype)

    value_type = property(lambda self: SparseTensor)
    dtype = property(lambda self: self._dtype)

    @property
    def shape(self):
        return self._shape if self._shape is None else TensorShape(self._shape)

    def component_specs(self):
        rank = None if self._shape is None else len(self._shape)
        return (((None, rank), _I64), ((None,), self._dtype), ((rank,), _I64))

    def to_components(self, value):
        return (value.indices, value.values, value.dense_shape)

    def placeholder_components(self):
        """No entries (indices ``[0, rank]``), the spec's dense shape (unknown sizes 1)."""
        dims = [1 if d is None else d for d in (self._shape or ())]
        values = np.full((0,), b"", object) if self._dtype.name == "string" else np.zeros(
            (0,), self._dtype.np)
        return (constant(np.zeros((0, len(dims)), np.int64)), constant(values),
                constant(np.array(dims, np.int64)))

    def from_components(self, components):
        indices, values, dense_shape = components
        shape = _static_shape(dense_shape, int(indices.shape[1]))
        if self._shape is not None:
            shape = TensorShape(s if s is not None else d for s, d in zip(shape, self._shape))
        return SparseTensor._from_parts(indices, values, dense_shape, shape)

    def _serialize(self):
        return (self._shape, self._dtype)

    def is_compatible_with(self, spec_or_value):
        """Whether ``spec_or_value`` (a SparseTensorSpec or a SparseTensor) has this dtype
        and a dense shape that fits this one (None: any size)."""
        other = spec_or_value if isinstance(spec_or_value, SparseTensorSpec) else (
            SparseTensorSpec.from_value(spec_or_value)
            if isinstance(spec_or_value, SparseTensor) else None)
        if other is None or other._dtype != self._dtype:
            return False
        if self._shape is None or other._shape is None:
            return True
        return len(self._shape) == len(other._shape) and all(
            a is None or b is None or a == b for a, b in zip(self._shape, other._shape))

    @classmethod
    def from_value(cls, value):
        return value._type_spec

    def __repr__(self):
        shape = "None" if self._shape is None else repr(list(self._shape))
        return f"SparseTensorSpec(TensorShape({shape}), {self._dtype!r})"


def _check_ranks(indices, values, dense_shape):
    for t, want, what in ((indices, 2, "indices"), (values, 1, "values"),
                          (dense_shape, 1, "dense_shape")):
        if len(t.shape) != want:
            raise InvalidArgumentError(
                f"SparseTensor: {what} must have rank {want}, got shape "
                f"{tuple(t.shape)}: indices is [N, rank], values [N], dense_shape [rank]")
    if indices.shape[0] != values.shape[0]:
        raise InvalidArgumentError(
            f"SparseTensor: {indices.shape[0]} index rows but {values.shape[0]} values: "
            "indices is [N, rank] and values [N]")
    if indices.shape[1] != dense_shape.shape[0]:
        raise InvalidArgumentError(
            f"SparseTensor: indices have {indices.shape[1]} coordinates but dense_shape has "
            f"{dense_shape.shape[0]} dimensions")


class SparseTensor(CompositeTensor):
    """A sparse tensor: ``values[i]`` at coordinates ``indices[i]`` of a tensor of shape
    ``dense_shape``, zeros elsewhere.

    >>> import tapeflow as tf
    >>> st = tf.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [2, 3])
    >>> st.shape, st.dtype
    (TensorShape([2, 3]), tf.float32)
    >>> print(st * 10.0)
    SparseTensor(indices=tf.Tensor(
    [[0 0]
     [1 2]], shape=(2, 2), dtype=int64), values=tf.Tensor([10. 20.], shape=(2,), dtype=float32), dense_shape=tf.Tensor([2 3], shape=(2,), dtype=int64))
    """

    def __init__(self, indices, values, dense_shape):
        fn = "tf.SparseTensor"
        indices = _i64(indices, "indices", fn)
        values = values.read_value() if hasattr(values, "read_value") else values
        values = values if isinstance(values, Tensor) else convert_to_tensor(values)
        dense_shape = _i64(dense_shape, "dense_shape", fn)
        if len(indices.shape) == 2 and indices.shape[0] == 0 and len(dense_shape.shape) == 1:
            indices = _s.reshape(indices, (0, dense_shape.shape[0]))   # ([] -> [0, rank])
        _check_ranks(indices, values, dense_shape)
        self._indices, self._values, self._dense_shape = indices, values, dense_shape
        self._shape = _static_shape(dense_shape, indices.shape[1])

    @classmethod
    def _from_parts(cls, indices, values, dense_shape, shape=None):
        st = object.__new__(cls)
        st._indices, st._values, st._dense_shape = indices, values, dense_shape
        st._shape = _static_shape(dense_shape, indices.shape[1]) if shape is None else shape
        return st

    @classmethod
    def from_value(cls, sparse_tensor_value):
        """A SparseTensor from a SparseTensor (a copy) or anything with ``indices``,
        ``values`` and ``dense_shape``."""
        v = sparse_tensor_value
        return cls(v.indices, v.values, v.dense_shape)

    indices = property(lambda self: self._indices, doc="int64 ``[N, rank]`` coordinates")
    values = property(lambda self: self._values, doc="``[N]`` values")
    dense_shape = property(lambda self: self._dense_shape, doc="int64 ``[rank]`` shape")
    dtype = property(lambda self: self._values.dtype)
    shape = property(lambda self: self._shape)

    def get_shape(self):
        return self._shape

    @property
    def _type_spec(self):
        return SparseTensorSpec(self._shape, self.dtype)

    def with_values(self, new_values):
        """This SparseTensor with ``new_values`` (same length) in place of its values."""
        new_values = convert_to_tensor(new_values)
        if tuple(new_values.shape) != tuple(self._values.shape):
            raise InvalidArgumentError(
                f"SparseTensor.with_values: new values have shape {tuple(new_values.shape)}, "
                f"the values {tuple(self._values.shape)}")
        return SparseTensor._from_parts(self._indices, new_values, self._dense_shape, self._shape)

    def __repr__(self):
        return (f"SparseTensor(indices={self._indices!s}, values={self._values!s}, "
                f"dense_shape={self._dense_shape!s})")

    __str__ = __repr__

    def __mul__(self, other):
        return _m.multiply(self, other)

    def __truediv__(self, other):
        return _m.divide(self, other)

    __div__ = __truediv__

    @classmethod
    def _dispatch_op(cls, op, inputs, attrs):
        return NotImplemented


def _check_sparse(x, fn, what="sp_input"):
    if not isinstance(x, SparseTensor):
        raise InvalidTypeError(f"{fn}: {what} must be a SparseTensor, got {type(x).__name__}")
    return x


def _new(indices_np, values, dense_shape_np, like=None):
    ind = np.asarray(indices_np, np.int64)
    rank = len(dense_shape_np)
    ind = ind.reshape(-1, rank) if rank else ind.reshape(len(ind) if ind.ndim else 0, 0)
    return SparseTensor._from_parts(
        constant(ind, _I64),
        values, constant(np.asarray(dense_shape_np, np.int64), _I64))


def _take(values, order):
    """values[order] (a gather: the gradient reaches the values)."""
    return _g.gather(values, constant(np.asarray(order, np.int64), _I64))


def _row_major(ind, shape):
    """A stable row-major order of the coordinates ``ind``."""
    if ind.shape[0] == 0 or ind.shape[1] == 0:
        return np.arange(ind.shape[0])
    return np.lexsort(ind.T[::-1])


# --- to_dense and from_dense ----------------------------------------------------------------

def _pos(row):
    return "[" + ",".join(str(int(v)) for v in row) + "]"


def _check_bounds(ind, shape):
    """TensorFlow's out-of-bounds error for the first row of ``ind`` outside ``shape``."""
    if not ind.size:
        return
    bad = np.any((ind < 0) | (ind >= shape), axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArgumentError(
            f"indices[{i}] = {_pos(ind[i])} is out of bounds: need 0 <= index < "
            f"[{','.join(str(int(d)) for d in shape)}]", op="SparseToDense")


def _validate(ind, shape, fn):
    """TensorFlow's SparseToDense checks: in bounds, in row-major order, no repeats
    (vectorized; the first bad row is reported, its bounds checked before its order)."""
    if ind.shape[0] < 2:
        return _check_bounds(ind, shape)
    # lexicographic comparison of each row with the one before it
    diff = ind[1:] != ind[:-1]
    first = np.argmax(diff, axis=1) if ind.shape[1] else np.zeros(len(diff), np.int64)
    rows = np.arange(diff.shape[0])
    same = ~diff[rows, first] if ind.shape[1] else np.ones(len(diff), bool)
    less = ind[1:, :][rows, first] < ind[:-1][rows, first] if ind.shape[1] else ~same
    bad = np.r_[False, same | less]
    out = np.any((ind < 0) | (ind >= shape), axis=1)
    i = int(np.argmax(bad | out)) if (bad | out).any() else -1
    if i >= 0 and out[i]:
        _check_bounds(ind[:i + 1], shape)
    if i >= 0:
        if same[i - 1]:
            raise InvalidArgumentError(f"indices[{i}] = {_pos(ind[i])} is repeated",
                                       op="SparseToDense")
        raise InvalidArgumentError(
            f"indices[{i}] = {_pos(ind[i])} is out of order. Many sparse ops require sorted "
            "indices.\n    Use `tf.sparse.reorder` to create a correctly ordered "
            "copy.\n\n", op="SparseToDense")


def to_dense(sp_input, default_value=None, validate_indices=True, name=None):
    """The dense tensor of ``sp_input``: its values at its indices, ``default_value``
    (zero by default) elsewhere. With ``validate_indices`` the indices must be in
    bounds, in row-major order and distinct (``tf.sparse.reorder`` sorts them).

    >>> import tapeflow as tf
    >>> st = tf.SparseTensor([[0, 1]], [5.0], [2, 2])
    >>> print(tf.sparse.to_dense(st, default_value=-1.0))
    tf.Tensor(
    [[-1.  5.]
     [-1. -1.]], shape=(2, 2), dtype=float32)
    """
    sp = _check_sparse(sp_input, "tf.sparse.to_dense")
    ind, shape = _host(sp.indices), _host(sp.dense_shape)
    if validate_indices:
        _validate(ind, shape, "tf.sparse.to_dense")
    else:
        _check_bounds(ind, shape)
    shape_t = tuple(int(d) for d in shape)
    if sp.dtype is _dt.string or sp.dtype.is_bool:
        out = np.full(shape_t, b"" if sp.dtype is _dt.string else False, object
                      if sp.dtype is _dt.string else bool)
        if default_value is not None:
            out[...] = default_value.encode() if isinstance(default_value, str) else default_value
        out[tuple(ind.T)] = _host(sp.values)
        return constant(out, sp.dtype)
    dense = _g.scatter_nd(sp.indices, sp.values, shape_t)
    if default_value is not None:
        mask = np.zeros(shape_t, bool)
        mask[tuple(ind.T)] = True
        fill = _m.cast(convert_to_tensor(default_value), sp.dtype)
        dense = _v.where(constant(mask), dense, fill)
    return dense


def from_dense(tensor, name=None):
    """The SparseTensor of the non-zero (non-empty, for strings) entries of ``tensor``.

    >>> import tapeflow as tf
    >>> st = tf.sparse.from_dense([[0, 3], [4, 0]])
    >>> print(st.indices.numpy().tolist(), st.values.numpy().tolist())
    [[0, 1], [1, 0]] [3, 4]
    """
    if isinstance(tensor, SparseTensor):
        raise InvalidTypeError("tf.sparse.from_dense: tensor is already a SparseTensor; pass "
                               "a dense tensor")
    try:
        t = tensor if isinstance(tensor, Tensor) else convert_to_tensor(tensor)
    except TapeflowError as e:
        raise InvalidTypeError(f"tf.sparse.from_dense: cannot make a dense tensor of "
                               f"{type(tensor).__name__}: {str(e).splitlines()[0]}") from None
    a = np.asarray(_host(t))   # (a 0-d string tensor reads as bytes)
    nz = np.argwhere(a != (b"" if t.dtype is _dt.string else 0)).astype(np.int64)
    ind = constant(nz.reshape(nz.shape[0], a.ndim), _I64)
    values = _g.gather_nd(t, ind) if a.ndim else _s.reshape(t, (-1,))[:nz.shape[0]]
    return SparseTensor._from_parts(ind, values, constant(np.asarray(a.shape, np.int64), _I64))


# --- reorder, reshape, transpose, expand_dims -----------------------------------------------

def reorder(sp_input, name=None):
    """``sp_input`` with its entries in row-major (canonical) order."""
    sp = _check_sparse(sp_input, "tf.sparse.reorder")
    ind = _host(sp.indices)
    order = _row_major(ind, None)
    return _new(ind[order], _take(sp.values, order), _host(sp.dense_shape))


def reshape(sp_input, shape, name=None):
    """``sp_input`` reshaped to ``shape`` (one ``-1`` allowed), as ``tf.reshape`` on its
    dense form; the entries keep their order."""
    sp = _check_sparse(sp_input, "tf.sparse.reshape")
    ind, old = _host(sp.indices), _host(sp.dense_shape)
    new = np.asarray(_host(shape) if isinstance(shape, Tensor) else shape, np.int64).reshape(-1)
    n = int(np.prod(old))
    if (new == -1).sum() > 1:
        raise InvalidArgumentError(f"only one output dimension may be -1, not both in "
                                   f"{new.tolist()}", op="SparseReshape")
    if (new == -1).any():
        known = int(np.prod(new[new != -1]))
        if known == 0 or n % known:
            raise InvalidArgumentError(
                f"Input to reshape is a tensor with {n} dense values, but the requested "
                f"shape requires a multiple of {known}. input_shape=[{','.join(map(str, old))}]"
                f" output_shape=[{','.join(map(str, new))}]", op="SparseReshape")
        new[new == -1] = n // known
    if int(np.prod(new)) != n:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor with {n} dense values, but the requested shape has "
            f"{int(np.prod(new))}. input_shape=[{','.join(map(str, old))}] output_shape="
            f"[{','.join(map(str, new))}]", op="SparseReshape")
    flat = np.ravel_multi_index(tuple(ind.T), tuple(old)) if ind.size else np.zeros(
        ind.shape[0], np.int64)
    out = np.stack(np.unravel_index(flat, tuple(new)), 1) if len(new) else np.zeros(
        (ind.shape[0], 0), np.int64)
    return _new(out, sp.values, new)


def transpose(sp_input, perm=None, name=None):
    """``sp_input`` with its dimensions permuted by ``perm`` (reversed by default); the
    result is in row-major order."""
    sp = _check_sparse(sp_input, "tf.sparse.transpose")
    ind, shape = _host(sp.indices), _host(sp.dense_shape)
    p = list(range(len(shape)))[::-1] if perm is None else [int(i) for i in (
        _host(perm) if isinstance(perm, Tensor) else perm)]
    if sorted(p) != list(range(len(shape))):
        raise InvalidArgumentError(f"tf.sparse.transpose: perm {p} is not a permutation of "
                                   f"the {len(shape)} dimensions", op="SparseTranspose")
    ind, shape = ind[:, p], shape[p]
    order = _row_major(ind, None)
    return _new(ind[order], _take(sp.values, order), shape)


def expand_dims(sp_input, axis=None, name=None):
    """``sp_input`` with a dimension of size 1 inserted at ``axis``."""
    sp = _check_sparse(sp_input, "tf.sparse.expand_dims")
    ind, shape = _host(sp.indices), _host(sp.dense_shape)
    r = len(shape)
    a = -1 if axis is None else int(axis)
    if not -r - 1 <= a <= r:
        raise InvalidArgumentError(f"tf.sparse.expand_dims: axis {a} is out of range for a "
                                   f"rank-{r} SparseTensor: [-{r + 1}, {r}]")
    a = a % (r + 1)
    return _new(np.insert(ind, a, 0, axis=1), sp.values, np.insert(shape, a, 1))


# --- combining: add, concat, maximum/minimum ------------------------------------------------

def _union(a, b, fn):
    """Coordinates of the union of ``a``'s and ``b``'s entries (row-major), and for each
    input entry the position of its coordinates there."""
    ia, ib = _host(a.indices), _host(b.indices)
    sa, sb = _host(a.dense_shape), _host(b.dense_shape)
    if sa.shape != sb.shape or np.any(sa != sb):
        raise InvalidArgumentError(f"{fn}: the operands' shapes differ: {sa.tolist()} and "
                                   f"{sb.tolist()}")
    both = np.concatenate([ia, ib]).reshape(-1, len(sa))
    uniq, inv = np.unique(both, axis=0, return_inverse=True)
    return uniq.reshape(-1, len(sa)), inv.reshape(-1), sa


def add(a, b, threshold=0, name=None):
    """``a + b``: two SparseTensors give a SparseTensor (entries present in both are
    summed, and those sums dropped where their magnitude is below ``threshold``); a
    SparseTensor and a dense tensor give a dense tensor.

    >>> import tapeflow as tf
    >>> a = tf.SparseTensor([[0, 0]], [1.0], [2, 2])
    >>> b = tf.SparseTensor([[0, 0], [1, 1]], [2.0, 3.0], [2, 2])
    >>> print(tf.sparse.to_dense(tf.sparse.add(a, b)).numpy())
    [[3. 0.]
     [0. 3.]]
    """
    sa, sb = isinstance(a, SparseTensor), isinstance(b, SparseTensor)
    if not (sa or sb):
        raise InvalidTypeError("tf.sparse.add: at least one operand must be a SparseTensor")
    if not (sa and sb):
        sp, dense = (a, b) if sa else (b, a)
        dense = convert_to_tensor(dense, dtype=sp.dtype)
        return _m.add(to_dense(sp, validate_indices=False), dense)
    if a.dtype is not b.dtype:
        raise InvalidArgumentError(f"tf.sparse.add: the operands' dtypes differ: "
                                   f"{a.dtype.name} and {b.dtype.name}", op="SparseAdd")
    uniq, inv, shape = _union(a, b, "tf.sparse.add")
    n = uniq.shape[0]
    sums = _g.unsorted_segment_sum(_g.concat([a.values, b.values], 0),
                                   constant(inv.astype(np.int64), _I64), n)
    counts = np.bincount(inv, minlength=n)
    thresh = float(threshold.numpy() if isinstance(threshold, Tensor) else threshold)
    if thresh > 0 and (counts > 1).any():
        mags = np.abs(_host(sums))
        keep = np.nonzero((counts < 2) | (mags >= thresh))[0]
        if keep.size < n:
            return _new(uniq[keep], _take(sums, keep), shape)
    return _new(uniq, sums, shape)


def _extreme(a, b, fn, pick):
    uniq, inv, shape = _union(a, b, fn)
    n, na = uniq.shape[0], _host(a.indices).shape[0]
    da = _g.scatter_nd(constant(inv[:na, None].astype(np.int64), _I64), a.values, (n,))
    db = _g.scatter_nd(constant(inv[na:, None].astype(np.int64), _I64), b.values, (n,))
    return _new(uniq, pick(da, db), shape)


def maximum(sp_a, sp_b, name=None):
    """The element-wise maximum of two SparseTensors of one shape (missing entries are
    zeros); the result holds the union of their entries."""
    return _extreme(_check_sparse(sp_a, "tf.sparse.maximum", "sp_a"),
                    _check_sparse(sp_b, "tf.sparse.maximum", "sp_b"), "tf.sparse.maximum",
                    _m.maximum)


def minimum(sp_a, sp_b, name=None):
    """The element-wise minimum of two SparseTensors (see :func:`maximum`)."""
    return _extreme(_check_sparse(sp_a, "tf.sparse.minimum", "sp_a"),
                    _check_sparse(sp_b, "tf.sparse.minimum", "sp_b"), "tf.sparse.minimum",
                    _m.minimum)


def concat(axis, sp_inputs, name=None, expand_nonconcat_dim=False, concat_dim=None,
           expand_nonconcat_dims=None):
    """The SparseTensors ``sp_inputs`` joined along ``axis``; with
    ``expand_nonconcat_dims`` the other dimensions grow to the largest input's."""
    fn = "tf.sparse.concat"
    if concat_dim is not None:
        axis = concat_dim
    expand = bool(expand_nonconcat_dims if expand_nonconcat_dims is not None
                  else expand_nonconcat_dim)
    if not isinstance(sp_inputs, (list, tuple)) or not sp_inputs:
        raise InvalidArgumentError(f"{fn}: sp_inputs must be a non-empty list of SparseTensors")
    for s in sp_inputs:
        _check_sparse(s, fn, "each of sp_inputs")
    shapes = [_host(s.dense_shape) for s in sp_inputs]
    r = len(shapes[0])
    ax = int(axis)
    if not -r <= ax < r:
        raise InvalidArgumentError(f"{fn}: axis {ax} is out of range for rank {r}",
                                   op="SparseConcat")
    ax %= r
    out_shape = shapes[0].copy()
    if expand:
        out_shape = np.max(np.stack(shapes), 0)
    for k, s in enumerate(shapes):
        if len(s) != r:
            raise InvalidArgumentError(f"{fn}: input {k} has rank {len(s)}, input 0 rank {r}",
                                       op="SparseConcat")
        for d in range(r):
            if d != ax and not expand and s[d] != out_shape[d]:
                raise InvalidArgumentError(
                    f"Input shapes must match: expected {out_shape[d]} for dimension {d} but "
                    f"got {s[d]} at position {k}", op="SparseConcat")
    pieces, off = [], 0
    for s, shp in zip(sp_inputs, shapes):
        ind = _host(s.indices).copy()
        ind[:, ax] += off
        off += int(shp[ax])
        pieces.append(ind)
    out_shape[ax] = off
    ind = np.concatenate(pieces).reshape(-1, r)
    order = _row_major(ind, None)
    values = _g.concat([s.values for s in sp_inputs], 0)
    return _new(ind[order], _take(values, order), out_shape)


# --- selecting: slice, retain, fill_empty_rows, mask ----------------------------------------

def slice(sp_input, start, size, name=None):  # noqa: A001 - tf.sparse.slice
    """The entries of ``sp_input`` in the box ``start`` .. ``start + size`` (clipped to
    its shape), with coordinates relative to ``start``."""
    sp = _check_sparse(sp_input, "tf.sparse.slice")
    ind, shape = _host(sp.indices), _host(sp.dense_shape)
    start = np.asarray(_host(start) if isinstance(start, Tensor) else start, np.int64)
    size = np.asarray(_host(size) if isinstance(size, Tensor) else size, np.int64)
    if start.shape != shape.shape or size.shape != shape.shape:
        raise InvalidArgumentError(
            f"tf.sparse.slice: start {start.tolist()} and size {size.tolist()} must have one "
            f"entry per dimension of the shape {shape.tolist()}", op="SparseSlice")
    end = np.minimum(start + size, shape)
    keep = np.nonzero(np.all((ind >= start) & (ind < end), axis=1))[0] if ind.size else \
        np.arange(ind.shape[0])
    return _new(ind[keep] - start, _take(sp.values, keep), np.maximum(end - start, 0))


def retain(sp_input, to_retain):
    """The entries of ``sp_input`` where the bool vector ``to_retain`` is True."""
    sp = _check_sparse(sp_input, "tf.sparse.retain")
    keep = np.asarray(_host(to_retain) if isinstance(to_retain, Tensor) else to_retain)
    n = _host(sp.indices).shape[0]
    if keep.dtype != bool or keep.shape != (n,):
        raise InvalidArgumentError(f"tf.sparse.retain: to_retain must be a bool vector of "
                                   f"length {n} (one per entry), got {keep.dtype} of shape "
                                   f"{keep.shape}")
    idx = np.nonzero(keep)[0]
    return _new(_host(sp.indices)[idx], _take(sp.values, idx), _host(sp.dense_shape))


def fill_empty_rows(sp_input, default_value, name=None):
    """``(filled, empty_row_indicator)``: ``sp_input`` with ``default_value`` at
    ``[row, 0, ...]`` of each row that has no entry, and a bool vector of those rows."""
    sp = _check_sparse(sp_input, "tf.sparse.fill_empty_rows")
    ind, shape = _host(sp.indices), _host(sp.dense_shape)
    empty = np.ones(int(shape[0]), bool)
    empty[ind[:, 0]] = False
    rows = np.nonzero(empty)[0]
    extra = np.zeros((rows.size, len(shape)), np.int64)
    extra[:, 0] = rows
    fill = _m.cast(convert_to_tensor(default_value), sp.dtype)
    values = _g.concat([sp.values, _r.broadcast_to(fill, (rows.size,))], 0)
    allind = np.concatenate([ind, extra])
    order = np.argsort(allind[:, 0], kind="stable")
    return _new(allind[order], _take(values, order), shape), constant(empty)


def mask(a, mask_indices, name=None):
    """The IndexedSlices-free form of TensorFlow's ``tf.sparse.mask``: the entries of the
    SparseTensor ``a`` whose first coordinate is not in ``mask_indices``."""
    sp = _check_sparse(a, "tf.sparse.mask", "a")
    drop = np.asarray(_host(mask_indices) if isinstance(mask_indices, Tensor) else mask_indices)
    return retain(sp, constant(~np.isin(_host(sp.indices)[:, 0], drop)))


def map_values(op, *args, **kwargs):
    """``op`` applied to the values of the SparseTensors among ``args`` (which must share
    their indices); other arguments are passed as they are.

    >>> import tapeflow as tf
    >>> st = tf.SparseTensor([[0, 0]], [2], [1, 2])
    >>> print(tf.sparse.map_values(tf.add, st, 5).values)
    tf.Tensor([7], shape=(1,), dtype=int32)
    """
    sps = [x for x in (*args, *kwargs.values()) if isinstance(x, SparseTensor)]
    if not sps:
        raise InvalidArgumentError("tf.sparse.map_values: no SparseTensor among the arguments")
    first = sps[0]
    ind0 = _host(first.indices)
    for s in sps[1:]:
        i = _host(s.indices)
        if i.shape != ind0.shape or np.any(i != ind0):
            raise InvalidArgumentError("tf.sparse.map_values: the SparseTensors' indices "
                                       "differ; they must match exactly")
    unwrap = [x.values if isinstance(x, SparseTensor) else x for x in args]
    kw = {k: v.values if isinstance(v, SparseTensor) else v for k, v in kwargs.items()}
    return SparseTensor._from_parts(first.indices, op(*unwrap, **kw), first.dense_shape,
                                    first.shape)


# --- reductions -----------------------------------------------------------------------------

def _axes(axis, rank, fn):
    if axis is None:
        return tuple(range(rank))
    ax = [int(a) for a in (np.atleast_1d(_host(axis) if isinstance(axis, Tensor) else axis))]
    for a in ax:
        if not -rank <= a < rank:
            raise InvalidArgumentError(f"{fn}: axis {a} is out of range for rank {rank}")
    return tuple(sorted({a % rank for a in ax}))


def _groups(sp, axes, keepdims):
    """The output groups of a reduction over ``axes``: the output shape, the sorted
    distinct output coordinates that have entries (``[G, out_rank]``), their raveled
    positions in the output, and each entry's group number."""
    ind = _host(sp.indices)
    shape = [int(d) for d in _host(sp.dense_shape)]
    keep = [d for d in range(len(shape)) if d not in axes]
    out_shape = [1 if d in axes else shape[d] for d in range(len(shape))] if keepdims \
        else [shape[d] for d in keep]
    coords = ind.copy()
    coords[:, list(axes)] = 0
    coords = coords if keepdims else coords[:, keep]
    _check_bounds(ind, np.asarray(shape, np.int64))
    if ind.shape[0] and coords.shape[1]:
        keys = np.ravel_multi_index(tuple(coords.T), out_shape)
    else:
        keys = np.zeros(ind.shape[0], np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    ucoords = (np.stack(np.unravel_index(uniq, out_shape), axis=1) if out_shape
               else np.zeros((uniq.size, 0), np.int64))
    return out_shape, ucoords.astype(np.int64), uniq.astype(np.int64), inv.reshape(-1)


def _reduced(group_values, groups, keepdims, output_is_sparse):
    """The per-group results as a SparseTensor, or as the dense output (zero where a
    group has no entries)."""
    out_shape, ucoords, uniq, _ = groups
    if output_is_sparse:
        return _new(ucoords, group_values, np.asarray(out_shape, np.int64))
    size = int(np.prod(out_shape, dtype=np.int64))
    flat = _g.unsorted_segment_sum(group_values, constant(uniq, _I64), size)
    return _s.reshape(flat, out_shape)


def reduce_sum(sp_input, axis=None, keepdims=None, output_is_sparse=False, name=None):
    """The sum of ``sp_input``'s entries along ``axis`` (all by default): a dense tensor,
    or with ``output_is_sparse`` a SparseTensor of the groups that have entries. It is
    worked out from the entries (a segment sum), never from the dense tensor.

    >>> import tapeflow as tf
    >>> st = tf.SparseTensor([[0, 0], [0, 2], [1, 1]], [1, 2, 3], [2, 3])
    >>> print(tf.sparse.reduce_sum(st, axis=1))
    tf.Tensor([3 3], shape=(2,), dtype=int32)
    """
    sp = _check_sparse(sp_input, "tf.sparse.reduce_sum")
    axes = _axes(axis, len(sp.shape), "tf.sparse.reduce_sum")
    groups = _groups(sp, axes, bool(keepdims))
    sums = _g.unsorted_segment_sum(sp.values, constant(groups[3], _I64), groups[2].size)
    return _reduced(sums, groups, bool(keepdims), output_is_sparse)


def _segment_max(values, inv, count):
    """The maximum of ``values`` per group ``inv`` (``count`` groups); for floats the
    gradient is shared equally among the entries equal to their group's maximum, as
    ``tf.reduce_max``'s."""
    v = _host(values)
    if v.size == 0:
        return _g.gather(values, constant(np.zeros(0, np.int64), _I64))
    order = np.lexsort((np.arange(v.size), inv))
    starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
    gmax = np.maximum.reduceat(v[order], starts)
    tie = v == gmax[inv]
    if v.dtype.kind in "fc":
        tie |= np.isnan(v) & np.isnan(gmax[inv])                 # a NaN is its group's max
    tie_first = np.where(tie, np.arange(v.size), v.size)
    first = np.full(count, v.size, np.int64)
    np.minimum.at(first, inv, tie_first)
    first = np.where(first == v.size, order[starts], first)  # NaN groups: any entry
    exact = _g.gather(values, constant(first, _I64))
    if not values.dtype.is_floating:
        return exact
    ties = np.bincount(inv[tie], minlength=count).astype(np.float64)
    fin = np.isfinite(gmax) & (ties > 0)
    weight = np.where(tie & fin[inv], 1.0 / np.maximum(ties, 1)[inv], 0.0)
    share = _m.multiply(_v.where(constant(weight > 0), values,
                                    constant(np.zeros(v.shape, v.dtype), values.dtype)),
                        constant(weight.astype(v.dtype), values.dtype))
    soft = _g.unsorted_segment_sum(share, constant(inv.astype(np.int64), _I64), count)
    smooth = _m.add(_v.stop_gradient(exact), _m.subtract(soft, _v.stop_gradient(soft)))
    return _v.where(constant(fin), smooth, exact)


def reduce_max(sp_input, axis=None, keepdims=None, output_is_sparse=False, name=None):
    """The maximum of ``sp_input``'s entries along ``axis``; the implicit zeros take no
    part (a group without entries gives 0). It is worked out from the entries.

    >>> import tapeflow as tf
    >>> print(tf.sparse.reduce_max(tf.sparse.from_dense([-5, 0, -3])))
    tf.Tensor(-3, shape=(), dtype=int32)
    """
    sp = _check_sparse(sp_input, "tf.sparse.reduce_max")
    axes = _axes(axis, len(sp.shape), "tf.sparse.reduce_max")
    groups = _groups(sp, axes, bool(keepdims))
    maxes = _segment_max(sp.values, groups[3], groups[2].size)
    return _reduced(maxes, groups, bool(keepdims), output_is_sparse)


# --- sparse_dense_matmul: the op SparseTensorDenseMatMul ------------------------------------

def _spmm_infer(shapes, dtypes, attrs):
    m, k = attrs["a_shape"]
    if attrs["adjoint_a"]:
        m, k = k, m
    sb = tuple(shapes[2])
    if len(sb) != 2:
        raise InvalidArgumentError(f"Tensor 'b' is not a matrix: shape {list(sb)}")
    kb, n = sb[::-1] if attrs["adjoint_b"] else sb
    if k != kb:
        raise InvalidArgumentError(
            f"Cannot multiply A and B because inner dimension does not match: {k} vs. {kb}.  "
            f"Did you forget a transpose?  Dimensions of A: [{attrs['a_shape'][0]}, "
            f"{attrs['a_shape'][1]}).  Dimensions of B: [{sb[0]},{sb[1]}]")
    return [((m, n), dtypes[1])]


def _spmm_grad(ctx, dy):
    """out = A' B' (A' = A or A^T, B' = B or B^T). dA' = dy B'^T, read at A's
    coordinates; dB' = A'^T dy (the op itself, so it differentiates again)."""
    ind, vals, b = ctx.inputs
    if not vals.dtype.is_inexact:
        return None, None, None
    aa, ab = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]
    rows = _g.gather(ind, constant(np.int64(1 if aa else 0), _I64), axis=1)
    cols = _g.gather(ind, constant(np.int64(0 if aa else 1), _I64), axis=1)
    gv = gb = None
    if ctx.needs[1]:
        bp = _g.gather(b, cols, axis=1) if ab else _s.transpose(_g.gather(b, cols))
        gv = _r.reduce_sum(_m.multiply(_s.transpose(_g.gather(dy, rows)), bp), (0,))
    if ctx.needs[2]:
        g = execute(_SPMM, (ind, vals, dy), {**ctx.attrs, "adjoint_a": not aa,
                                             "adjoint_b": False})
        gb = _s.transpose(g) if ab else g
    return None, gv, gb


_SPMM = defop("SparseTensorDenseMatMul", inputs=("a_indices", "a_values", "b"),
              attrs={"a_shape": None, "adjoint_a": False, "adjoint_b": False},
              attr_types={"a_shape": "shape", "adjoint_a": "bool", "adjoint_b": "bool"},
              dtype_rule="none", dtype_from=1, grad=_spmm_grad, infer=_spmm_infer)


@_SPMM.def_batch
def _spmm_batch(ctx, ind, vals, b):
    """One product per example (each example may have its own sparse operand)."""
    ind, vals, b = (x if bt else _r.broadcast_to(x, (ctx.size,) + tuple(x.shape))
                    for x, bt in zip((ind, vals, b), ctx.batched))
    return _g.stack([rerun(ctx, (ind[i], vals[i], b[i])) for i in range(ctx.size)])


#: the dtypes of the kernels (TensorFlow's: real floats and the common integers)
SPMM_DTYPES = ("float16", "float32", "float64", "int32", "int64")


@LIB.kernel(_SPMM, "cpu", dtypes=SPMM_DTYPES)
def _spmm_cpu(a_indices, a_values, b, a_shape, adjoint_a, adjoint_b):
    """NumPy: each entry's row of ``b`` scaled and added into its output row (``add.at``
    in entry order, the order every backend sums in)."""
    m, k = a_shape
    rows, cols = a_indices[:, 0], a_indices[:, 1]
    if adjoint_a:
        rows, cols, m, k = cols, rows, k, m
    bad = (rows < 0) | (rows >= m) | (cols < 0) | (cols >= k)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArgumentError(
            f"a_indices[{i}] = [{int(a_indices[i, 0])}, {int(a_indices[i, 1])}] is out of "
            f"bounds of A's shape [{a_shape[0]}, {a_shape[1]}]")
    bt = b.T if adjoint_b else b
    out = np.zeros((m, bt.shape[1]), a_values.dtype)
    if rows.size:
        np.add.at(out, rows, a_values[:, None] * bt[cols])
    return out


def sparse_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """The matrix product of a SparseTensor and a dense matrix (or of a dense matrix and
    a SparseTensor): a dense tensor. ``adjoint_a`` / ``adjoint_b`` transpose an operand
    first. Gradients reach the sparse operand's values and the dense operand.

    >>> import tapeflow as tf
    >>> a = tf.SparseTensor([[0, 1], [1, 0]], [2.0, 3.0], [2, 2])
    >>> print(tf.sparse.sparse_dense_matmul(a, [[1.0], [10.0]]))
    tf.Tensor(
    [[20.]
     [ 3.]], shape=(2, 1), dtype=float32)
    """
    if not isinstance(sp_a, SparseTensor):
        if not isinstance(b, SparseTensor):
            raise InvalidTypeError("tf.sparse.sparse_dense_matmul: one operand must be a "
                                   f"SparseTensor, got {type(sp_a).__name__} and "
                                   f"{type(b).__name__}")
        # A' B' = (B'^T A'^T)^T
        return _s.transpose(sparse_dense_matmul(b, sp_a, not adjoint_b, not adjoint_a))
    shape = sp_a.shape
    if len(shape) != 2:
        raise InvalidArgumentError(f"tf.sparse.sparse_dense_matmul: the SparseTensor must be "
                                   f"a matrix, got shape {list(shape)}",
                                   op="SparseTensorDenseMatMul")
    if None in shape:
        shape = tuple(int(d) for d in _host(sp_a.dense_shape))
    b = b if isinstance(b, Tensor) else convert_to_tensor(b, dtype=sp_a.dtype)
    if b.dtype is not sp_a.dtype:
        raise InvalidArgumentError(
            f"tf.sparse.sparse_dense_matmul: b is a {b.dtype.name} tensor but the "
            f"SparseTensor's values are {sp_a.dtype.name}; cast one of them",
            op="SparseTensorDenseMatMul")
    attrs = {"a_shape": tuple(int(d) for d in shape), "adjoint_a": bool(adjoint_a),
             "adjoint_b": bool(adjoint_b)}
    try:
        _spmm_infer((sp_a.indices.shape, sp_a.values.shape, tuple(b.shape)),
                    (_I64, sp_a.dtype, b.dtype), attrs)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(str(e), op="SparseTensorDenseMatMul",
                                   device=b._device) from None
    return execute(_SPMM, (sp_a.indices, sp_a.values, b), attrs)


# --- elementwise ops on SparseTensors -------------------------------------------------------

@_for_unary(SparseTensor)
def _unary(api_func, x):
    """An elementwise op on the values, where it maps zero to zero (``tf.abs``,
    ``tf.math.sin``, ``tf.cast``, ``tf.negative``...); others (``tf.exp``) would fill the
    implicit zeros and are refused."""
    out = api_func(x.values)
    z = api_func(constant(np.zeros(1, x.dtype.np), x.dtype)).numpy()
    if z.size and np.any(z != 0):
        raise InvalidTypeError(
            f"{api_func.op.name} maps 0 to {z.reshape(-1)[0].item()!r}: on a SparseTensor it would "
            "change the implicit zeros; apply it to tf.sparse.to_dense(st), or to the values "
            "with tf.sparse.map_values", op=api_func.op.name)
    return SparseTensor._from_parts(x.indices, out, x.dense_shape, x.shape)


def _dense_at(sp, other):
    """The dense operand broadcast to ``sp``'s shape, read at its coordinates (a
    ``gather_nd`` at each entry's coordinate, taken mod 1 on the broadcast dimensions:
    the broadcast dense tensor is never built)."""
    d = other if isinstance(other, Tensor) else convert_to_tensor(other, dtype_hint=sp.dtype)
    shape = tuple(sp.shape)
    if None in shape:
        shape = tuple(int(s) for s in _host(sp.dense_shape))
    dshape = tuple(d.shape)
    if dshape == ():
        return d
    lead = len(shape) - len(dshape)
    if lead < 0 or any(a not in (b, 1) for a, b in zip(dshape, shape[lead:])):
        raise InvalidArgumentError(
            f"the dense operand of shape {list(dshape)} does not broadcast to the "
            f"SparseTensor's shape {list(shape)}; reshape or tile it to fit",
            op="SparseDenseCwise")
    ind = _host(sp.indices)[:, lead:] * (np.asarray(dshape, np.int64) != 1)
    return _g.gather_nd(d, constant(ind.reshape(-1, len(dshape)), _I64))


@_for_binary(SparseTensor, object)
def _binary_sparse_first(api_func, x, y):
    """``sp * dense`` and ``sp / dense`` (a SparseTensor: the dense operand broadcast to
    its shape and read at its entries). ``tf.add`` refuses a SparseTensor, as in
    TensorFlow: ``tf.sparse.add(sp, dense)`` is the dense sum."""
    name = api_func.op.name
    if isinstance(y, SparseTensor):
        return NotImplemented
    if name in ("Mul", "RealDiv", "Div", "TrueDiv", "FloorDiv"):
        return SparseTensor._from_parts(x.indices, api_func(x.values, _dense_at(x, y)),
                                        x.dense_shape, x.shape)
    return NotImplemented


@_for_binary(object, SparseTensor)
def _binary_sparse_second(api_func, x, y):
    """``tf.multiply(dense, sp)``: a SparseTensor, as ``sp * dense``."""
    name = api_func.op.name
    if isinstance(x, SparseTensor):
        return NotImplemented
    if name == "Mul":
        return SparseTensor._from_parts(y.indices, api_func(_dense_at(y, x), y.values),
                                        y.dense_shape, y.shape)
    return NotImplemented
