"""``tf.RaggedTensor``: a tensor whose rows have different lengths, made of dense tensors.

A ragged tensor of ragged rank ``k`` is its *flat values* (a dense tensor on any device)
and ``k`` *row partitions*, each a 1-D ``row_splits`` tensor (int64 by default, int32
allowed): row ``i`` of a level is ``values[row_splits[i]:row_splits[i + 1]]`` of the
level below. Everything it does is tapeflow ops on those dense tensors, so it works on
every backend, and a ``tf.GradientTape`` sees through it to the flat values. Its shape
is a :class:`~tapeflow.TensorShape` with ``None`` for the ragged dimensions.

Long file: the class, its indexing, its dense conversions, its TypeSpec and
``tf.ragged.constant`` are one concept (TensorFlow's ragged_tensor module), and each
needs the others' helpers.

>>> import tapeflow as tf
>>> rt = tf.RaggedTensor.from_row_splits([3, 1, 4, 1, 5, 9, 2], row_splits=[0, 4, 4, 6, 7])
>>> print(rt)
<tf.RaggedTensor [[3, 1, 4, 1], [], [5, 9], [2]]>
>>> rt.shape, rt.ragged_rank
(TensorShape([4, None]), 1)
>>> print(rt[2], rt.row_lengths())
tf.Tensor([5 9], shape=(2,), dtype=int32) tf.Tensor([4 0 2 1], shape=(4,), dtype=int64)
>>> print(rt * 2 + 1)
<tf.RaggedTensor [[7, 3, 9, 3], [], [11, 19], [5]]>

The elementwise ops (``tf.add``, ``tf.math.sin``, ``tf.cast``, comparisons ...) take
ragged tensors through the composite dispatch (:mod:`tapeflow.ops.composite`): they run
on the flat values. docs/ragged.md is the guide, and lists every difference from
TensorFlow.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime import context as _ctx
from ..runtime.dispatch import constant as _constant, convert_to_tensor as _convert
from ..runtime.tensor import Tensor, TensorShape
from ..runtime.variable import Variable
from . import math as _m
from .array_creation import range as _range
from .array_gather import concat as _concat, gather as _gather, stack as _stack
from .array_sort import cumsum as _cumsum, searchsorted as _searchsorted
from .reductions import reduce_max as _reduce_max
from .array_shape import reshape as _reshape, shape as _shape
from .sparse import SparseTensor
from .composite import (CompositeTensor, TypeSpec, dispatch_for_binary_elementwise_apis,
                        dispatch_for_unary_elementwise_apis)

__all__ = ["RaggedTensor", "RaggedTensorSpec", "constant"]

_SPLIT_DTYPES = (_dt.int32, _dt.int64)
#: the deepest ragged nesting a RaggedTensorSpec accepts (a spec read from a file
#: cannot make component_specs() allocate without bound)
_MAX_RAGGED_RANK = 64
#: ops that act value by value but are not declared elementwise (no derived JVP)
_SHAPE_KEEPING = frozenset({"Real", "Imag", "Conj", "Invert", "Identity"})
_VALUE_BY_VALUE = frozenset({"FloorDiv", "FloorMod", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
                             "LeftShift", "RightShift", "Complex"})


class ConditionError(InvalidArgumentError):
    """A failed run-time check of TensorFlow's (``Condition x == y did not hold.`` ...):
    printed as TensorFlow prints it, without the function name tapeflow adds."""

    def __str__(self):
        return self.message


# --- the row partitions ------------------------------------------------------------------

def _dense(x, what, dtype=None):
    """``x`` as a dense Tensor (a Variable is read)."""
    if isinstance(x, RaggedTensor):
        raise InvalidTypeError(f"{what} must be a dense tensor, got a RaggedTensor")
    if isinstance(x, Variable):
        x = x.read_value()
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype == dtype else _m.cast(x, dtype)
    return _convert(x, dtype=dtype)


def _as_values(values, fn):
    if isinstance(values, RaggedTensor):
        return values
    v = _dense(values, f"{fn}: values")
    if len(v.shape) == 0:
        raise InvalidArgumentError(f"{fn}: values must have rank >= 1, got a scalar "
                                   f"{v.dtype.name} tensor")
    return v


def _as_index(x, what, fn, dtype=None, rank=1):
    """A 1-D (or 0-D) int32/int64 partition tensor: Python lists become ``dtype``
    (int64 unless the values' partitions say otherwise)."""
    if isinstance(x, Variable):
        x = x.read_value()
    if isinstance(x, Tensor):
        if x.dtype not in _SPLIT_DTYPES:
            raise InvalidTypeError(f"{fn}: {what} must have dtype int32 or int64, got "
                                   f"{x.dtype.name}")
        t = x
    else:
        if hasattr(x, "numpy") and not isinstance(x, (list, tuple, np.ndarray)):
            raise InvalidTypeError(f"{fn}: {what} must be a 1-D int tensor or list, got "
                                   f"{type(x).__name__}")
        t = _constant(_int_array(x, what, fn), dtype=dtype or _dt.int64)
    if len(t.shape) != rank:
        raise InvalidArgumentError(f"{fn}: {what} must have rank {rank}, got shape "
                                   f"{tuple(t.shape)}")
    return t


def _int_arg(x, what, fn):
    """A Python int from an int, a NumPy integer or a 0-d integer tensor."""
    if isinstance(x, (Tensor, Variable)) and len(x.shape) == 0 and x.dtype.is_integer:
        x = x.numpy()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise InvalidTypeError(f"{fn}: {what} must be an int, got {type(x).__name__} {x!r}")
    if not -2 ** 62 < int(x) < 2 ** 62:
        raise InvalidArgumentError(f"{fn}: {what}={x} is out of range")
    return int(x)


def _int_array(x, what, fn):
    """``x`` (a list, array or tensor of ints) as an int64 NumPy array."""
    try:
        a = np.asarray(x.numpy() if isinstance(x, (Tensor, Variable)) else x)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"{fn}: {what} must be a list of ints, got {x!r} "
                                   f"({e})") from None
    if a.size and a.dtype.kind not in "iu":
        raise InvalidTypeError(f"{fn}: {what} must hold integers (dtype int32 or int64), "
                               f"got {a.dtype} values {_short(a)}")
    if a.size and a.dtype.kind == "u" and a.max() >= 2 ** 63:
        raise InvalidArgumentError(f"{fn}: {what} has values out of the int64 range")
    return a.astype(np.int64)


def _short(a):
    text = repr(a.tolist()) if isinstance(a, np.ndarray) else repr(a)
    return text if len(text) < 80 else text[:77] + "..."


def _validate(splits, values, fn):
    """Check (now, or at every call of a traced function) that ``splits`` partitions
    ``values``."""
    run_check(lambda sp, nv: _check_splits(sp.astype(np.int64), int(nv), fn),
              [splits, _nvals_tensor(values)], f"{fn}_check")


def _nvals_tensor(values):
    """The number of rows of ``values`` as a 0-d int64 tensor (symbolic while tracing)."""
    if isinstance(values, RaggedTensor):
        return _shape(values._row_splits, out_type=_dt.int64)[0] - 1
    return _shape(values, out_type=_dt.int64)[0]


def _nvals(values):
    return values.nrows_int() if isinstance(values, RaggedTensor) else values.shape[0]


def _cmp_message(x, y):
    """TensorFlow's text for a failed ``assert_equal(x, y)`` of two int vectors."""
    lines = ["Condition x == y did not hold."]
    if x.shape == y.shape and x.ndim == 1 and x.size > 1:
        diff = np.nonzero(x != y)[0]
        lines += [f"Indices of first {min(len(diff), 3)} different values:",
                  str(diff[:3].reshape(-1, 1)), "Corresponding x values:", str(x[diff[:3]]),
                  "Corresponding y values:", str(y[diff[:3]])]
    n = min(3, x.size, max(y.size, 1))
    lines += [f"First {n} elements of x:", str(np.ravel(x)[:n]),
              f"First {n} elements of y:", str(np.ravel(y)[:n])]
    return "\n".join(lines)


def _tracing():
    """Whether tf.function traces now: component values are symbolic, checks that read
    them are skipped (as TensorFlow's run-time asserts: they run in the graph)."""
    return bool(_ctx.tracing[0])


def run_check(check, tensors, label="ragged_check"):
    """``check(*arrays)`` on the values of ``tensors`` now, or -- while tf.function traces
    -- as a node of the trace that runs it at every call (TensorFlow's run-time asserts:
    a check is never skipped because the values are not known yet)."""
    if not _tracing():
        check(*[np.asarray(t.numpy()) for t in tensors])
        return

    def node(*ts):
        check(*[np.asarray(t.numpy()) for t in ts])
        return []
    node.__name__ = node.__qualname__ = label
    _ctx.HOOKS.tracer.opaque_call(node, list(tensors))


def _check_splits(splits, nvals, fn, prefix="RaggedTensor"):
    """Raise as TensorFlow does for splits that are not a valid row partition."""
    head = f"Arguments to {fn} do not form a valid {prefix}"
    if splits.size == 0:
        raise InvalidArgumentError(f"{fn}: row_splits may not be empty (it holds nrows + 1 "
                                   "offsets, starting with 0)")
    if splits[0] != 0:
        raise ConditionError(head + ":zero\n" + _cmp_message(splits[:1], np.zeros((), np.int64)))
    d = np.diff(splits)
    if (d < 0).any():
        raise ConditionError(
            f"{head}:monotonic.  \nCondition x >= 0 did not hold element-wise:\nx (shape="
            f"{d.shape} dtype=int64) = \n{[str(v) for v in d[:3].tolist()]}")
    if splits[-1] != nvals:
        raise ConditionError("Arguments to _from_row_partition do not form a valid "
                             "RaggedTensor\n" + _cmp_message(splits[-1:], np.array(nvals)))


# --- the class --------------------------------------------------------------------------

class RaggedTensor(CompositeTensor):
    """A tensor with one or more ragged dimensions (rows of different lengths); see the
    module doc. Made with :func:`tf.ragged.constant <constant>` or the ``from_*``
    classmethods (the constructor is private, as in TensorFlow)."""

    __array_priority__ = 100         # (NumPy arrays defer to our reflected operators)

    def __init__(self, values, row_splits, uniform_row_length=None, internal=False):
        if internal is not True:
            raise InvalidArgumentError(
                "RaggedTensor constructor is private; please use one of the factory "
                "methods instead (e.g., RaggedTensor.from_row_lengths())")
        self._values = values
        self._row_splits = row_splits
        self._uniform = uniform_row_length
        self._splits_np = None

    @classmethod
    def _make(cls, values, row_splits, uniform_row_length=None):
        return cls(values, row_splits, uniform_row_length, internal=True)

    # --- constructors ---------------------------------------------------------------------

    @classmethod
    def from_row_splits(cls, values, row_splits, name=None, validate=True):
        """Rows ``values[row_splits[i]:row_splits[i + 1]]``.

        >>> import tapeflow as tf
        >>> print(tf.RaggedTensor.from_row_splits([1, 2, 3], [0, 2, 2, 3]))
        <tf.RaggedTensor [[1, 2], [], [3]]>
        """
        fn = "from_row_splits"
        values = _as_values(values, fn)
        splits = _as_index(row_splits, "row_splits", fn, _hint(values))
        splits = _match_dtype(values, splits, fn)
        if validate:
            _validate(splits, values, fn)
        return cls._make(values, splits)

    @classmethod
    def from_row_lengths(cls, values, row_lengths, name=None, validate=True):
        """Rows of lengths ``row_lengths`` taken in order from ``values``."""
        fn = "from_row_lengths"
        values = _as_values(values, fn)
        lengths = _as_index(row_lengths, "row_lengths", fn, _hint(values))
        lengths = _match_dtype(values, lengths, fn)
        dt = lengths.dtype
        splits = _concat([_constant([0], dtype=dt), _cumsum(lengths)], 0)
        if validate:
            def check(ln, nvals):
                ln = ln.astype(np.int64)
                if (ln < 0).any():
                    raise ConditionError(
                        f"Arguments to {fn} do not form a valid RowPartition.  \nCondition x "
                        f">= 0 did not hold element-wise:\nx (shape={ln.shape} dtype=int64) "
                        f"= \n{[str(v) for v in ln[:3].tolist()]}")
                _check_splits(np.concatenate([[0], np.cumsum(ln)]), int(nvals), fn)
            run_check(check, [lengths, _nvals_tensor(values)], "from_row_lengths_check")
        return cls._make(values, splits)

    @classmethod
    def from_value_rowids(cls, values, value_rowids, nrows=None, name=None, validate=True):
        """Value ``i`` goes to row ``value_rowids[i]`` (non-decreasing); ``nrows``
        (default: the last id + 1) adds empty rows at the end."""
        fn = "from_value_rowids"
        values = _as_values(values, fn)
        ids_t = _as_index(value_rowids, "value_rowids", fn, _hint(values))
        ids = ids_t.numpy().astype(np.int64)
        if validate:
            d = np.diff(ids)
            bad = d if (d < 0).any() else (ids[:1] if ids.size and ids[0] < 0 else None)
            if bad is not None:
                raise ConditionError(
                    f"Arguments to {fn} do not form a valid RowPartition.  \nCondition x "
                    f">= 0 did not hold element-wise:\nx (shape={bad.shape} dtype=int64) = "
                    f"\n{[str(v) for v in bad[:3].tolist()]}")
            if ids.size != _nvals(values):
                raise InvalidArgumentError(
                    f"{fn}: value_rowids has {ids.size} entries but values has "
                    f"{_nvals(values)} rows: give one row id per value")
        last = int(ids[-1]) + 1 if ids.size else 0
        n = last if nrows is None else _int_arg(nrows, "nrows", fn)
        if n < last:
            raise InvalidArgumentError(f"Expected nrows >= value_rowids[-1] + 1; got "
                                       f"nrows={n}, value_rowids[-1]={last - 1}")
        splits = np.searchsorted(ids, np.arange(n + 1), side="left").astype(np.int64)
        return cls._make(values, _constant(splits, dtype=ids_t.dtype))

    @classmethod
    def from_row_starts(cls, values, row_starts, name=None, validate=True):
        """Row ``i`` starts at ``row_starts[i]`` (and ends where the next one starts)."""
        fn = "from_row_starts"
        values = _as_values(values, fn)
        starts = _match_dtype(values, _as_index(row_starts, "row_starts", fn, _hint(values)),
                              fn)
        splits = _concat([starts, _m.cast(_reshape(_nvals_tensor(values), [1]), starts.dtype)],
                         0)
        if validate:
            _validate(splits, values, fn)
        return cls._make(values, splits)

    @classmethod
    def from_row_limits(cls, values, row_limits, name=None, validate=True):
        """Row ``i`` ends at ``row_limits[i]`` (and starts where the previous one ends)."""
        fn = "from_row_limits"
        values = _as_values(values, fn)
        limits = _match_dtype(values, _as_index(row_limits, "row_limits", fn, _hint(values)),
                              fn)
        splits = _concat([_constant([0], dtype=limits.dtype), limits], 0)
        if validate:
            _validate(splits, values, fn)
        return cls._make(values, splits)

    @classmethod
    def from_uniform_row_length(cls, values, uniform_row_length, nrows=None, validate=True,
                                name=None):
        """Rows of ``uniform_row_length`` values each: a uniform (not ragged) dimension
        of a ragged tensor (its size shows in :attr:`shape`)."""
        fn = "from_uniform_row_length"
        values = _as_values(values, fn)
        k = _int_arg(uniform_row_length, "uniform_row_length", fn)
        nv = _nvals(values)
        if k < 0 or (k and nv % k) or (k == 0 and nrows is None):
            raise InvalidArgumentError(
                f"{fn}: {nv} values do not split into rows of {k} (uniform_row_length "
                "must be >= 0 and divide the number of values; give nrows when it is 0)")
        n = nv // k if k else _int_arg(nrows, "nrows", fn)
        if n * k != nv:
            raise InvalidArgumentError(
                f"{fn}: uniform_row_length={k} times nrows={n} must equal nvals={nv}")
        splits = np.arange(n + 1, dtype=np.int64) * k
        return cls._make(values, _constant(splits, dtype=_hint(values) or _dt.int64), k)

    @classmethod
    def from_nested_row_splits(cls, flat_values, nested_row_splits, name=None, validate=True):
        """``from_row_splits`` applied for each splits tensor, innermost last.

        >>> import tapeflow as tf
        >>> print(tf.RaggedTensor.from_nested_row_splits([1, 2, 3], ([0, 2, 2], [0, 2, 3])))
        <tf.RaggedTensor [[[1, 2], [3]], []]>
        """
        if isinstance(nested_row_splits, (Tensor, np.ndarray)) or not isinstance(
                nested_row_splits, (list, tuple)):
            raise InvalidTypeError("from_nested_row_splits: nested_row_splits must be a list "
                                   f"of 1-D tensors, got {type(nested_row_splits).__name__}")
        result = flat_values
        for splits in reversed(nested_row_splits):
            result = cls.from_row_splits(result, splits, validate=validate)
        return result

    @classmethod
    def from_nested_row_lengths(cls, flat_values, nested_row_lengths, name=None,
                                validate=True):
        """``from_row_lengths`` applied for each lengths tensor, innermost last."""
        if not isinstance(nested_row_lengths, (list, tuple)):
            raise InvalidTypeError("from_nested_row_lengths: nested_row_lengths must be a "
                                   f"list of 1-D tensors, got {type(nested_row_lengths).__name__}")
        result = flat_values
        for lengths in reversed(list(nested_row_lengths)):
            result = cls.from_row_lengths(result, lengths, validate=validate)
        return result

    @classmethod
    def from_nested_value_rowids(cls, flat_values, nested_value_rowids, nested_nrows=None,
                                 name=None, validate=True):
        """``from_value_rowids`` applied for each row-ids tensor, innermost last."""
        ids = list(nested_value_rowids)
        nrows = list(nested_nrows) if nested_nrows is not None else [None] * len(ids)
        result = flat_values
        for rowids, n in zip(reversed(ids), reversed(nrows)):
            result = cls.from_value_rowids(result, rowids, n, validate=validate)
        return result

    @classmethod
    def from_tensor(cls, tensor, lengths=None, padding=None, ragged_rank=1, name=None,
                    row_splits_dtype=_dt.int64):
        """The rows of a dense ``tensor``, cut at ``lengths`` (one per row, or a list per
        ragged level) or before the trailing ``padding`` values.

        >>> import tapeflow as tf
        >>> print(tf.RaggedTensor.from_tensor([[1, 0, 0], [2, 3, 0]], padding=0))
        <tf.RaggedTensor [[1], [2, 3]]>
        """
        return _from_tensor(cls, tensor, lengths, padding, ragged_rank,
                            _dt.as_dtype(row_splits_dtype))

    # --- components -----------------------------------------------------------------------

    @property
    def values(self):
        """The concatenated rows (a Tensor, or a RaggedTensor for ragged_rank > 1)."""
        return self._values

    @property
    def row_splits(self):
        """Where each row starts in :attr:`values` (``nrows + 1`` offsets)."""
        return self._row_splits

    @property
    def flat_values(self):
        """The dense tensor of all the values (its first dimension the ragged one)."""
        v = self._values
        while isinstance(v, RaggedTensor):
            v = v._values
        return v

    @property
    def nested_row_splits(self):
        """The row splits of each ragged level, outermost first (a tuple)."""
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt._row_splits)
            rt = rt._values
        return tuple(out)

    @property
    def ragged_rank(self):
        """The number of partitioned dimensions."""
        v = self._values
        return 1 + (v.ragged_rank if isinstance(v, RaggedTensor) else 0)

    @property
    def dtype(self):
        """The dtype of the values."""
        return self.flat_values.dtype

    @property
    def uniform_row_length(self):
        """The length of every row (an int64 scalar tensor) where this dimension is
        uniform (:meth:`from_uniform_row_length`), else None."""
        return None if self._uniform is None else _constant(self._uniform,
                                                            dtype=self._row_splits.dtype)

    @property
    def shape(self):
        """A :class:`~tapeflow.TensorShape` with ``None`` for the ragged dimensions."""
        return TensorShape((self.nrows_int(),) + self._inner_shape())

    def _inner_shape(self):
        """The dimensions after the rows: this level's (None where ragged), then the
        values' own."""
        v = self._values
        below = v._inner_shape() if isinstance(v, RaggedTensor) else tuple(
            int(d) for d in v.shape[1:])
        return (self._uniform,) + below

    def get_shape(self):
        return self.shape

    @property
    def device(self):
        """The device of the flat values (tapeflow's addition: TensorFlow has none)."""
        return self.flat_values.device

    @property
    def _type_spec(self):
        return RaggedTensorSpec.from_value(self)

    @classmethod
    def _dispatch_op(cls, op, inputs, attrs):
        """The ops that act value by value without being declared ``elementwise`` (no
        derived JVP: ``FloorDiv``, the bitwise ops, ``Real`` ...) map over the flat values
        too; any other op refuses a ragged tensor (the caller says what to do)."""
        def call(*xs):
            return op(*xs, **attrs)
        if len(inputs) == 2 and op.name in _VALUE_BY_VALUE:
            return _binary_ragged(call, *inputs)
        if len(inputs) == 1 and op.name in _SHAPE_KEEPING:
            return _unary(call, inputs[0])
        if op.name == "ClipByValue" and isinstance(inputs[0], RaggedTensor) and all(
                not isinstance(b, CompositeTensor) and np.size(b) == 1 for b in inputs[1:]):
            return inputs[0].with_flat_values(call(inputs[0].flat_values, *inputs[1:]))
        if op.name == "AddN" and all(isinstance(x, RaggedTensor) for x in inputs):
            for x in inputs[1:]:
                _same_partitions(inputs[0], x)
            return inputs[0].with_flat_values(call(*[x.flat_values for x in inputs]))
        return NotImplemented

    def splits_numpy(self):
        """The row splits as an int64 NumPy array (cached: read once from the device)."""
        if self._splits_np is None:
            self._splits_np = np.asarray(self._row_splits.numpy(), dtype=np.int64)
        return self._splits_np

    def nrows_int(self):
        """The number of rows as a Python int."""
        return int(self._row_splits.shape[0]) - 1

    # --- the row partition, other encodings -----------------------------------------------

    def nrows(self, out_type=None, name=None):
        """The number of rows, a scalar tensor (of the splits' dtype)."""
        return _constant(self.nrows_int(), dtype=out_type or self._row_splits.dtype)

    def row_lengths(self, axis=1, name=None):
        """The length of each row (``axis=1``), or of each row of a deeper level."""
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
            raise InvalidTypeError(f"row_lengths: axis must be an int, got {axis!r}")
        rank = len(self.shape)
        axis = axis + rank if axis < 0 else axis
        if axis == 0 or not 0 < axis < rank:
            raise InvalidArgumentError(f"row_lengths: axis={axis} out of range [1, {rank}) "
                                       "for a ragged tensor of this rank")
        if axis == 1:
            return self._row_splits[1:] - self._row_splits[:-1]
        if isinstance(self._values, RaggedTensor):
            return self.with_values(self._values.row_lengths(axis - 1))
        n = self.shape[axis]
        return self.with_flat_values(_m.cast(_constant(np.full(
            self.flat_values.shape[:axis - 1], n, np.int64)), self._row_splits.dtype))

    def value_rowids(self, name=None):
        """The row of each value (``values.shape[0]`` ids, non-decreasing)."""
        dt = self._row_splits.dtype
        return _m.cast(_searchsorted(self._row_splits[1:], _range(_nvals(self._values),
                                                                  dtype=dt), side="right"), dt)

    def row_starts(self, name=None):
        """Where each row starts in :attr:`values` (``row_splits[:-1]``)."""
        return self._row_splits[:-1]

    def row_limits(self, name=None):
        """Where each row ends in :attr:`values` (``row_splits[1:]``)."""
        return self._row_splits[1:]

    def nested_row_lengths(self, name=None):
        """:meth:`row_lengths` of each ragged level, outermost first (a tuple)."""
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt.row_lengths())
            rt = rt._values
        return tuple(out)

    def nested_value_rowids(self, name=None):
        """:meth:`value_rowids` of each ragged level, outermost first (a tuple)."""
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt.value_rowids())
            rt = rt._values
        return tuple(out)

    def bounding_shape(self, axis=None, name=None, out_type=None):
        """The smallest dense shape that holds this tensor (its longest rows), an int64
        vector (``axis``: only those entries)."""
        dt = out_type or self._row_splits.dtype
        dims = [_constant(self.nrows_int(), dtype=dt)]
        rt = self
        while isinstance(rt, RaggedTensor):          # (ops: it runs while tracing too)
            dims.append(_m.cast(_reduce_max(rt.row_lengths()), dt) if rt.nrows_int()
                        else _constant(0, dtype=dt))
            rt = rt._values
        dims += [_constant(int(d), dtype=dt) for d in rt.shape[1:]]
        out = _stack(dims)
        if axis is not None:
            if isinstance(axis, (list, tuple)):
                axis = [_int_arg(a, "axis", "bounding_shape") for a in axis]
            else:
                axis = _int_arg(axis, "axis", "bounding_shape")
            for a in (axis if isinstance(axis, list) else [axis]):
                if not -len(dims) <= a < len(dims):
                    raise InvalidArgumentError(f"bounding_shape: axis {a} out of range for "
                                               f"rank {len(dims)}")
            out = _gather(out, axis) if isinstance(axis, list) else out[axis]
        return out

    # --- new ragged tensors from this one -------------------------------------------------

    def with_values(self, new_values):
        """This row partition with other ``values`` (same number of rows)."""
        new_values = _as_values(new_values, "with_values")
        if _nvals(new_values) != _nvals(self._values):
            raise InvalidArgumentError(
                f"with_values: new values have {_nvals(new_values)} rows, the partition "
                f"needs {_nvals(self._values)}")
        splits = _match_dtype(new_values, self._row_splits, "with_values")
        return RaggedTensor._make(new_values, splits, self._uniform)

    def with_flat_values(self, new_values):
        """This ragged structure with other flat values (same first dimension)."""
        v = self._values
        if isinstance(v, RaggedTensor):
            return RaggedTensor._make(v.with_flat_values(new_values), self._row_splits,
                                      self._uniform)
        return self.with_values(new_values)

    def with_row_splits_dtype(self, dtype):
        """This tensor with its row partitions as ``dtype`` (tf.int32 or tf.int64)."""
        dtype = _dt.as_dtype(dtype)
        if dtype not in _SPLIT_DTYPES:
            raise InvalidTypeError(f"with_row_splits_dtype: dtype must be int32 or int64, "
                                   f"got {dtype.name}")
        if dtype == self._row_splits.dtype:
            return self
        v = self._values
        if isinstance(v, RaggedTensor):
            v = v.with_row_splits_dtype(dtype)
        return RaggedTensor._make(v, _m.cast(self._row_splits, dtype), self._uniform)

    def merge_dims(self, outer_axis, inner_axis):
        """Dimensions ``outer_axis`` .. ``inner_axis`` merged into one."""
        return _merge_dims(self, outer_axis, inner_axis)

    def to_tensor(self, default_value=None, name=None, shape=None):
        """A dense tensor: each row padded with ``default_value`` (0, False or b'') to
        the longest row, or cut/padded to ``shape`` (``None`` entries: the longest).

        >>> import tapeflow as tf
        >>> print(tf.ragged.constant([[1, 2], [3]]).to_tensor(-1))
        tf.Tensor(
        [[ 1  2]
         [ 3 -1]], shape=(2, 2), dtype=int32)
        """
        return _to_tensor(self, default_value, shape)

    def to_list(self):
        """The values as nested Python lists.

        >>> import tapeflow as tf
        >>> tf.ragged.constant([[1, 2], [], [3]]).to_list()
        [[1, 2], [], [3]]
        """
        s = self.splits_numpy().tolist()
        v = self._values
        inner = v.to_list() if isinstance(v, RaggedTensor) else v.numpy().tolist()
        return [inner[s[i]:s[i + 1]] for i in range(len(s) - 1)]

    def numpy(self):
        """A NumPy array: an object array of the rows where their lengths differ, else
        an array of the rows' dtype (as TensorFlow)."""
        v = self._values
        vals = v.numpy() if isinstance(v, RaggedTensor) else np.asarray(v.numpy())
        s = self.splits_numpy()
        rows = [vals[s[i]:s[i + 1]] for i in range(len(s) - 1)]
        if not rows:
            return np.zeros((0, 0) + vals.shape[1:], dtype=vals.dtype)
        ragged = any(len(r) != len(rows[0]) for r in rows)
        if ragged:
            out = np.empty(len(rows), dtype=object)
            for i, r in enumerate(rows):
                out[i] = r
            return out
        return np.array(rows)

    def to_sparse(self, name=None):
        """This tensor as a ``tf.SparseTensor``: each value at its coordinates, the
        bounding shape as the dense shape.

        >>> import tapeflow as tf
        >>> print(tf.ragged.constant([[1], [2, 3]]).to_sparse().indices.numpy().tolist())
        [[0, 0], [1, 0], [1, 1]]
        """
        return _to_sparse(self)

    @classmethod
    def from_sparse(cls, st_input, name=None, row_splits_dtype=_dt.int64):
        """The rows of a 2-D ``tf.SparseTensor`` whose values are packed at the start of
        each row, in order ("ragged-right", as ``to_sparse`` makes them)."""
        return _from_sparse(cls, st_input, _dt.as_dtype(row_splits_dtype))

    # --- printing -------------------------------------------------------------------------

    def __repr__(self):
        try:
            value = self.numpy()
        except Exception:  # noqa: BLE001 - symbolic (tf.function tracing): the components
            return f"tf.RaggedTensor(values={self._values}, row_splits={self._row_splits})"
        with np.printoptions(formatter={"all": _format_value}):
            text = _format_value(value)
        return f"<tf.RaggedTensor {text}>"

    __str__ = __repr__

    # --- Python protocols -----------------------------------------------------------------

    def __bool__(self):
        raise InvalidTypeError("RaggedTensor may not be used as a boolean.")

    def __len__(self):
        raise InvalidTypeError("object of type 'RaggedTensor' has no len()")

    def __iter__(self):
        for i in range(self.nrows_int()):
            yield self[i]

    def __getitem__(self, key):
        return _getitem(self, key)

    __hash__ = None

    def __array__(self, dtype=None, copy=None):
        # (TensorFlow's np.asarray(rt) is a 0-d object array holding rt: useless, and it
        # makes tf.constant(rt) fail far from the cause; this names the cause)
        raise InvalidTypeError(
            "a RaggedTensor is not a dense array: convert it with .to_tensor() (rows "
            "padded), .numpy() (an object array of its rows) or .to_list()")


# --- printing ------------------------------------------------------------------------------

def _format_value(x):
    """One element (or the whole value) as TensorFlow prints a ragged tensor: NumPy's
    text with ", " between elements, recursively for the rows of an object array."""
    if isinstance(x, np.ndarray):
        if x.size:
            return np.array2string(x, separator=", ")
        return repr(x.tolist())
    return str(x)


# --- operators --------------------------------------------------------------------------

def _binary(fn):
    return (lambda self, other: fn(self, other)), (lambda self, other: fn(other, self))


for _name, _fn in (("add", _m.add), ("sub", _m.subtract), ("mul", _m.multiply),
                   ("truediv", _m.divide), ("floordiv", _m.floordiv), ("mod", _m.mod),
                   ("pow", _m.pow)):
    _f, _r = _binary(_fn)
    setattr(RaggedTensor, f"__{_name}__", _f)
    setattr(RaggedTensor, f"__r{_name}__", _r)
for _name, _fn in (("lt", _m.less), ("le", _m.less_equal), ("gt", _m.greater),
                   ("ge", _m.greater_equal)):
    setattr(RaggedTensor, f"__{_name}__", _binary(_fn)[0])


def _logical(kind):
    ops = {"and": (_m.logical_and, _m.bitwise_and), "or": (_m.logical_or, _m.bitwise_or),
           "xor": (_m.logical_xor, _m.bitwise_xor)}[kind]

    def pick(a, b):
        return ops[0](a, b) if _dtype_of(a) == _dt.bool_ else ops[1](a, b)
    return (lambda self, other: pick(self, other)), (lambda self, other: pick(other, self))


def _dtype_of(x):
    return getattr(x, "dtype", None)


for _name in ("and", "or", "xor"):
    _f, _r = _logical(_name)
    setattr(RaggedTensor, f"__{_name}__", _f)
    setattr(RaggedTensor, f"__r{_name}__", _r)


def _eq(self, other):
    if other is None:
        return False
    return _m.equal(self, other)


def _ne(self, other):
    if other is None:
        return True
    return _m.not_equal(self, other)


RaggedTensor.__eq__ = _eq
RaggedTensor.__ne__ = _ne
RaggedTensor.__neg__ = lambda self: _m.negative(self)
RaggedTensor.__pos__ = lambda self: self
RaggedTensor.__abs__ = lambda self: _m.abs(self)
RaggedTensor.__invert__ = lambda self: (_m.logical_not(self) if self.dtype == _dt.bool_
                                        else _m.invert(self))
del _name, _fn, _f, _r


def _hint(values):
    """The partition dtype a new level gets by default: the values' one if ragged."""
    return values._row_splits.dtype if isinstance(values, RaggedTensor) else None


def _match_dtype(values, splits, fn):
    if isinstance(values, RaggedTensor) and values._row_splits.dtype != splits.dtype:
        raise InvalidArgumentError(
            f"{fn}: dtype mismatch between row_splits ({splits.dtype.name}) and the values' "
            f"row partitions ({values._row_splits.dtype.name}): convert one with "
            "with_row_splits_dtype or tf.cast")
    return splits


# --- taking rows --------------------------------------------------------------------------

def _take(values, idx):
    """Rows ``idx`` (an int64 NumPy vector, or an index tensor) of ``values``, dense or
    ragged."""
    if isinstance(idx, Tensor):
        return _gather(values, idx)
    if isinstance(values, RaggedTensor):
        return _gather_rows(values, idx)
    return _gather(values, _constant(np.asarray(idx, np.int64), dtype=_dt.int64))


def _gather_rows(rt, idx):
    s = rt.splits_numpy()
    idx = np.asarray(idx, np.int64)
    starts = s[idx]
    lens = s[idx + 1] - starts
    splits = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    vidx = np.repeat(starts - splits[:-1], lens) + np.arange(splits[-1], dtype=np.int64)
    return RaggedTensor._make(_take(rt._values, vidx),
                              _constant(splits, dtype=rt._row_splits.dtype), rt._uniform)


def _rows_of(values, start, stop):
    if isinstance(values, RaggedTensor):
        return _gather_rows(values, np.arange(start, stop))
    return values[int(start):int(stop)]


# --- indexing -------------------------------------------------------------------------------

_BAD_KEY = ("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and scalar "
            "tf.int32/tf.int64 tensors are valid indices, got {!r}")


def _key_entry(k):
    if k is None or k is Ellipsis or isinstance(k, slice):
        return k
    if isinstance(k, (bool, np.bool_)):
        raise InvalidTypeError(_BAD_KEY.format(k))
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, (Tensor, Variable)) and k.dtype in _SPLIT_DTYPES and len(k.shape) == 0:
        return int(k.numpy())
    raise InvalidTypeError(_BAD_KEY.format(k))


def _getitem(rt, key):
    key = tuple(_key_entry(k) for k in (key if isinstance(key, tuple) else (key,)))
    if key.count(Ellipsis) > 1:
        raise InvalidArgumentError("RaggedTensor.__getitem__: an index can only have a "
                                   "single ellipsis ('...')")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        used = sum(k is not None for k in key) - 1
        key = key[:i] + (slice(None),) * (len(rt.shape) - used) + key[i + 1:]
    if not key:
        return rt
    if key[0] is None:
        inner = _getitem(rt, key[1:])
        n = _nvals(inner)
        return RaggedTensor._make(inner, _constant(np.array([0, n], np.int64),
                                                   dtype=rt._row_splits.dtype), n)
    return _getitem_outer(rt, key)


def _getitem_outer(rt, key):
    k, rest = key[0], key[1:]
    n = rt.nrows_int()
    s = rt.splits_numpy()
    if isinstance(k, int):
        if k >= n:
            raise _OutOfRange(f"Row key {k} out of bounds")
        if k < -n:
            raise InvalidArgumentError(f"slice index {k + n} of dimension 0 out of bounds.")
        k %= n
        row = _rows_of(rt._values, s[k], s[k + 1])
        if not rest:
            return row
        return _getitem_outer(row, rest) if isinstance(row, RaggedTensor) else row[rest]
    sub = rt if k == slice(None) else _gather_rows(rt, np.arange(n)[k])
    return _getitem_inner(sub, rest)


def _getitem_inner(rt, key):
    """``rt[:, key...]``: ``key`` indexes the dimensions after the rows."""
    if not key:
        return rt
    k, rest = key[0], key[1:]
    if k is None:
        inner = _getitem_inner(rt, rest)
        n = inner.nrows_int()
        return RaggedTensor._make(inner, _constant(np.arange(n + 1, dtype=np.int64),
                                                   dtype=rt._row_splits.dtype), 1)
    if isinstance(k, int):
        if rt._uniform is None:
            raise InvalidArgumentError("Cannot index into an inner ragged dimension.")
        if not -rt._uniform <= k < rt._uniform:
            raise _OutOfRange(f"RaggedTensor.__getitem__: index {k} is out of range for a "
                              f"uniform dimension of size {rt._uniform}")
        s = rt.splits_numpy()
        values = _take(rt._values, s[:-1] + (k % rt._uniform))
        if not rest:
            return values
        return (_getitem_inner(values, rest) if isinstance(values, RaggedTensor)
                else values[(slice(None),) + rest])
    s = rt.splits_numpy()
    if k == slice(None):
        values, splits, uniform = rt._values, rt._row_splits, rt._uniform
    else:
        lens = np.diff(s)
        picks = {}
        parts = []
        for i, ln in enumerate(lens.tolist()):
            if ln not in picks:
                picks[ln] = np.arange(ln, dtype=np.int64)[k]
            parts.append(picks[ln] + s[i])
        idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        new_lens = [len(picks[ln]) for ln in lens.tolist()]
        values = _take(rt._values, idx)
        splits = _constant(np.concatenate([[0], np.cumsum(new_lens)]).astype(np.int64),
                           dtype=rt._row_splits.dtype)
        uniform = new_lens[0] if rt._uniform is not None and new_lens else None
    if rest:
        values = (_getitem_inner(values, rest) if isinstance(values, RaggedTensor)
                  else values[(slice(None),) + rest])
    return RaggedTensor._make(values, splits, uniform)


class _OutOfRange(InvalidArgumentError, IndexError):
    """A row index past the end (an IndexError too, as TensorFlow's)."""


# --- dense <-> ragged -------------------------------------------------------------------

def _from_tensor(cls, tensor, lengths, padding, ragged_rank, splits_dtype):
    fn = "RaggedTensor.from_tensor"
    t = _dense(tensor, f"{fn}: tensor")
    rank = len(t.shape)
    if not isinstance(ragged_rank, (int, np.integer)) or not 0 < ragged_rank < rank:
        raise InvalidArgumentError(f"{fn}: ragged_rank must be an int in [1, rank) = "
                                   f"[1, {rank}), got {ragged_rank!r}")
    if lengths is not None and padding is not None:
        raise InvalidArgumentError(f"{fn}: give lengths or padding, not both")
    if splits_dtype not in _SPLIT_DTYPES:
        raise InvalidTypeError(f"{fn}: row_splits_dtype must be int32 or int64")
    dims = [int(d) for d in t.shape]
    outer = dims[:ragged_rank]
    m = dims[ragged_rank]
    flat2 = _reshape(t, (int(np.prod(outer)), m) + tuple(dims[ragged_rank + 1:])) \
        if ragged_rank > 1 else t
    if lengths is not None:
        ln = np.minimum(np.maximum(_int_array(lengths, "lengths", fn).reshape(-1), 0), m)
        if ln.size != flat2.shape[0]:
            raise InvalidArgumentError(f"{fn}: lengths has {ln.size} entries for "
                                       f"{flat2.shape[0]} rows")
    elif padding is not None:
        tn = np.asarray(flat2.numpy())
        try:
            pad = np.asarray(padding.numpy() if hasattr(padding, "numpy") else padding)
            if tn.dtype == object and pad.dtype.kind == "U":
                pad = np.char.encode(pad, "utf-8").astype(object)
            eq = tn == pad
        except (ValueError, TypeError):
            eq = None
        if not isinstance(eq, np.ndarray) or eq.shape[:2] != tn.shape[:2]:
            raise InvalidArgumentError(f"{fn}: padding must be a value of the tensor's dtype "
                                       f"and of its inner shape {list(tn.shape[2:])}, got "
                                       f"{padding!r}")
        if eq.ndim > 2:
            eq = eq.reshape(eq.shape[0], eq.shape[1], -1).all(axis=2)
        keep = ~eq
        last = np.where(keep.any(axis=1), m - np.argmax(keep[:, ::-1], axis=1), 0) if m \
            else np.zeros(keep.shape[0], np.int64)
        ln = last.astype(np.int64)
    else:
        ln = np.full(flat2.shape[0], m, np.int64)
    rows = flat2.shape[0]
    idx = (np.repeat(np.arange(rows, dtype=np.int64) * m, ln)
           + np.arange(int(ln.sum()), dtype=np.int64)
           - np.repeat(np.concatenate([[0], np.cumsum(ln)[:-1]]).astype(np.int64), ln))
    values = _gather(_reshape(flat2, (rows * m,) + tuple(dims[ragged_rank + 1:])),
                     _constant(idx, dtype=_dt.int64))
    # (as TensorFlow: a dimension no lengths or padding cut is uniform, its size known)
    uniform = m if lengths is None and padding is None else None
    result = cls._make(values, _constant(np.concatenate([[0], np.cumsum(ln)]).astype(np.int64),
                                         dtype=splits_dtype), uniform)
    for d in reversed(range(ragged_rank - 1)):
        count = int(np.prod(outer[:d + 1]))
        step = outer[d + 1]
        result = cls._make(result, _constant(np.arange(count + 1, dtype=np.int64) * step,
                                             dtype=splits_dtype), step)
    return result


def _to_sparse(rt):
    coords = np.stack(_outer_positions(rt), axis=1) if rt.flat_values.shape[0] else \
        np.zeros((0, rt.ragged_rank + 1), np.int64)
    flat = rt.flat_values
    inner = tuple(int(d) for d in flat.shape[1:])
    if inner:
        k = int(np.prod(inner))
        sub = np.indices(inner).reshape(len(inner), -1).T
        coords = np.concatenate([np.repeat(coords, k, axis=0),
                                 np.tile(sub, (coords.shape[0], 1))], axis=1)
        flat = _reshape(flat, (-1,))
    return SparseTensor(_constant(coords.astype(np.int64), dtype=_dt.int64), flat,
                        _m.cast(rt.bounding_shape(), _dt.int64))


def _from_sparse(cls, st, splits_dtype):
    fn = "RaggedTensor.from_sparse"
    if not isinstance(st, SparseTensor):
        raise InvalidTypeError(f"{fn}: st_input must be a tf.SparseTensor, got "
                               f"{type(st).__name__}")
    idx = np.asarray(st.indices.numpy(), np.int64)
    shape = np.asarray(st.dense_shape.numpy(), np.int64)
    if idx.shape[1] != 2:
        raise InvalidArgumentError(f"{fn}: only rank 2 SparseTensors are supported, got rank "
                                   f"{idx.shape[1]}")
    rows = idx[:, 0]
    first = np.concatenate([[True], rows[1:] != rows[:-1]]) if rows.size else rows.astype(bool)
    start = np.maximum.accumulate(np.where(first, np.arange(rows.size), 0)) if rows.size \
        else rows
    if ((np.diff(rows) < 0).any()) or (idx[:, 1] != np.arange(rows.size) - start).any():
        raise InvalidArgumentError(f"{fn}: SparseTensor is not right-ragged (its values "
                                   "must fill each row from column 0, in order); "
                                   "tf.sparse.reorder it, or build the rows another way")
    splits = np.searchsorted(rows, np.arange(int(shape[0]) + 1), side="left")
    return cls._make(st.values, _constant(splits.astype(np.int64), dtype=splits_dtype))


def _outer_positions(rt):
    """For each flat value: its index in each ragged dimension (row, column, ...)."""
    coords = [np.arange(rt.nrows_int(), dtype=np.int64)]
    level = rt
    while isinstance(level, RaggedTensor):
        s = level.splits_numpy()
        rowids = np.repeat(np.arange(len(s) - 1, dtype=np.int64), np.diff(s))
        coords = [c[rowids] for c in coords]
        coords.append(np.arange(s[-1], dtype=np.int64) - s[rowids])
        level = level._values
    return coords


def _to_tensor(rt, default_value, shape):
    fn = "RaggedTensor.to_tensor"
    flat = rt.flat_values
    rank = len(rt.shape)
    bound = rt.bounding_shape().numpy().astype(np.int64).tolist()
    if shape is not None:
        if isinstance(shape, (Tensor, Variable)):
            shape = shape.numpy().tolist()
        if not isinstance(shape, (list, tuple, TensorShape)) or not all(
                w is None or isinstance(w, (int, np.integer)) and not isinstance(w, bool)
                for w in shape):
            raise InvalidTypeError(f"{fn}: shape must be a list of ints or None, got {shape!r}")
        want = list(shape)
        if len(want) != rank:
            raise InvalidArgumentError(f"{fn}: shape {want} must have rank {rank}, the rank "
                                       "of the ragged tensor")
        target = [b if w is None or w == -1 else int(w) for w, b in zip(want, bound)]
    else:
        target = bound
    rr = rt.ragged_rank
    inner = tuple(int(d) for d in flat.shape[1:])
    if tuple(target[rr + 1:]) != inner:
        raise InvalidArgumentError(f"{fn}: shape {target} must keep the uniform inner "
                                   f"dimensions {list(inner)} of the values")
    coords = _outer_positions(rt)
    outer = target[:rr + 1]
    keep = np.ones(coords[0].shape, bool)
    for c, d in zip(coords, outer):
        keep &= c < d
    nflat = int(flat.shape[0])
    src = np.full(int(np.prod(outer)), nflat, np.int64)
    if keep.any():
        lin = np.ravel_multi_index(tuple(c[keep] for c in coords), outer)
        src[lin] = np.nonzero(keep)[0]
    if default_value is None:
        dv = np.zeros(inner, flat.dtype.as_numpy_dtype) if flat.dtype != _dt.string \
            else np.full(inner, b"", object)
        default = _constant(dv[None], dtype=flat.dtype)
    else:
        d = _dense(default_value, f"{fn}: default_value", flat.dtype)
        default = _reshape(_broadcast(d, inner), (1,) + inner)
    ext = _concat([flat, default], 0)
    return _reshape(_gather(ext, _constant(src, dtype=_dt.int64)), tuple(target))


def _broadcast(t, shape):
    """``t`` broadcast to ``shape`` (a gather: differentiable, on every backend)."""
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t
    if not shape:
        return _reshape(t, ())
    idx = np.broadcast_to(np.arange(int(np.prod(t.shape)), dtype=np.int64).reshape(
        tuple(t.shape)), shape).reshape(-1)
    return _reshape(_gather(_reshape(t, (-1,)), _constant(idx, dtype=_dt.int64)), shape)


def _merge_dims(rt, outer, inner):
    outer = _int_arg(outer, "outer_axis", "merge_dims")
    inner = _int_arg(inner, "inner_axis", "merge_dims")
    rank = len(rt.shape)
    o = outer + rank if outer < 0 else outer
    i = inner + rank if inner < 0 else inner
    if not 0 <= o <= i < rank:
        raise InvalidArgumentError(f"merge_dims: need 0 <= outer_axis <= inner_axis < rank "
                                   f"({rank}), got outer_axis={outer}, inner_axis={inner}")
    if o == i:
        return rt
    if o == 0:
        v = rt._values
        if i == 1:
            return v
        if isinstance(v, RaggedTensor):
            return _merge_dims(v, 0, i - 1)
        return _reshape(v, (-1,) + tuple(v.shape[i:]))
    v = rt._values
    if o >= 2:
        if isinstance(v, RaggedTensor):
            return rt.with_values(_merge_dims(v, o - 1, i - 1))
        return rt.with_values(_reshape(v, tuple(v.shape[:o - 1]) + (-1,)
                                       + tuple(v.shape[i:])))
    s = rt.splits_numpy()
    for _ in range(i - o):
        if isinstance(v, RaggedTensor):
            s = v.splits_numpy()[s]
            v = v._values
        else:
            s = s * int(v.shape[1])
            v = _reshape(v, (-1,) + tuple(v.shape[2:]))
    return RaggedTensor._make(v, _constant(s, dtype=rt._row_splits.dtype))


# --- the type spec --------------------------------------------------------------------------

class RaggedTensorSpec(TypeSpec):
    """The type of a RaggedTensor: its shape (``None`` for ragged or unknown
    dimensions), dtype, ragged rank and row-partition dtype, without its values.

    >>> import tapeflow as tf
    >>> tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)
    RaggedTensorSpec(TensorShape([None, None]), tf.int32, 1, tf.int64)
    """

    def __init__(self, shape=None, dtype=_dt.float32, ragged_rank=None,
                 row_splits_dtype=_dt.int64, flat_values_spec=None):
        if flat_values_spec is not None:
            if dtype not in (None, _dt.float32) and _dt.as_dtype(dtype) != flat_values_spec.dtype:
                raise InvalidArgumentError("dtype must be the same as flat_values_spec.dtype")
            dtype = flat_values_spec.dtype
        try:
            self._dtype = _dt.as_dtype(dtype)
            self._splits_dtype = _dt.as_dtype(row_splits_dtype)
        except (TypeError, ValueError, KeyError) as e:
            raise InvalidTypeError(f"tf.RaggedTensorSpec: not a dtype ({e})") from None
        if self._splits_dtype not in _SPLIT_DTYPES:
            raise InvalidTypeError("tf.RaggedTensorSpec: row_splits_dtype must be tf.int32 "
                                   f"or tf.int64, got {self._splits_dtype.name}")
        if shape is not None:
            if isinstance(shape, TensorShape) or isinstance(shape, (list, tuple)) and all(
                    d is None or isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                    for d in shape):
                shape = tuple(None if d is None or d == -1 else int(d) for d in shape)
            else:
                raise InvalidTypeError(f"tf.RaggedTensorSpec: shape must be a list of ints "
                                       f"or None, got {shape!r}")
        if ragged_rank is None:
            if shape is None:
                raise InvalidArgumentError("Must specify ragged_rank or a shape with a "
                                           "known rank.")
            ragged_rank = len(shape) - 1
        if not isinstance(ragged_rank, (int, np.integer)) or ragged_rank < 0 or (
                ragged_rank > _MAX_RAGGED_RANK) or (
                shape is not None and ragged_rank >= max(len(shape), 1)):
            raise InvalidArgumentError(f"tf.RaggedTensorSpec: ragged_rank must be an int in "
                                       f"[0, rank) and at most {_MAX_RAGGED_RANK}, got "
                                       f"{ragged_rank!r:.40}")
        self._shape = shape
        self._ragged_rank = int(ragged_rank)
        self._flat_values_spec = flat_values_spec

    value_type = property(lambda self: RaggedTensor if self._ragged_rank else Tensor)
    dtype = property(lambda self: self._dtype, doc="The dtype of the values.")
    ragged_rank = property(lambda self: self._ragged_rank)
    row_splits_dtype = property(lambda self: self._splits_dtype)
    flat_values_spec = property(lambda self: self._flat_values_spec)

    @property
    def shape(self):
        """A TensorShape (``None`` for the unknown dimensions), or None for an unknown
        rank (TensorFlow's ``TensorShape(None)``)."""
        return None if self._shape is None else TensorShape(self._shape)

    @classmethod
    def from_value(cls, value):
        """The spec of a RaggedTensor (its shape, dtype, ragged rank, splits dtype)."""
        if not isinstance(value, RaggedTensor):
            raise InvalidTypeError(f"RaggedTensorSpec.from_value: expected a RaggedTensor, "
                                   f"got {type(value).__name__}")
        return cls(tuple(value.shape), value.dtype, value.ragged_rank,
                   value.row_splits.dtype)

    def component_specs(self):
        rr = self._ragged_rank
        if self._shape is None:
            flat = None
        else:
            flat = (None,) + self._shape[rr + 1:]
        outer = self._shape[0] if self._shape else None
        first = ((outer + 1,) if outer is not None else (None,),)
        splits = (first + ((None,),) * (rr - 1)) if rr else ()
        return ((flat, self._dtype),) + tuple((s, self._splits_dtype) for s in splits)

    def placeholder_components(self):
        """A valid empty value: ``nrows`` (1 when unknown) empty rows, no flat values."""
        specs = self.component_specs()
        flat_shape, _ = specs[0]
        inner = () if flat_shape is None else tuple(1 if d is None else d
                                                    for d in flat_shape[1:])
        flat = (np.full((0,) + inner, b"", object) if self._dtype.name == "string"
                else np.zeros((0,) + inner, self._dtype.np))
        n = self._shape[0] if self._shape and self._shape[0] is not None else 1
        splits = [np.zeros(n + 1 if k == 0 else 1, self._splits_dtype.np)
                  for k in range(len(specs) - 1)]
        return tuple(_constant(a) for a in [flat] + splits)

    def to_components(self, value):
        if isinstance(value, RaggedTensor):
            return (value.flat_values,) + value.nested_row_splits
        return (value,)

    def from_components(self, components):
        components = tuple(components)
        if not self._ragged_rank:
            return components[0]
        result = components[0]
        for level in reversed(range(1, len(components))):     # (a known size: uniform rows)
            k = self._shape[level] if self._shape is not None else None
            result = RaggedTensor._make(result, components[level], k)
        return result

    def _serialize(self):
        return (self._shape, self._dtype, self._ragged_rank, self._splits_dtype)

    def is_compatible_with(self, spec_or_value):
        """Same dtype, ragged rank and row-splits dtype, and shapes that agree where
        both are known (the same rank)."""
        other = spec_or_value if isinstance(spec_or_value, TypeSpec) else getattr(
            spec_or_value, "_type_spec", None)
        if type(other) is not RaggedTensorSpec or (
                self._dtype, self._ragged_rank, self._splits_dtype) != (
                other._dtype, other._ragged_rank, other._splits_dtype):
            return False
        if self._shape is None or other._shape is None:
            return True
        return len(self._shape) == len(other._shape) and all(
            a is None or b is None or a == b for a, b in zip(self._shape, other._shape))

    def __repr__(self):
        shape = "None" if self._shape is None else repr(list(self._shape))
        return (f"RaggedTensorSpec(TensorShape({shape}), {self._dtype!r}, "
                f"{self._ragged_rank}, {self._splits_dtype!r})")


# --- elementwise ops: the composite dispatch ------------------------------------------------

@dispatch_for_unary_elementwise_apis(RaggedTensor)
def _unary(api, x):
    return x.with_flat_values(api(x.flat_values))


def _same_partitions(x, y):
    """Raise as TensorFlow does where ``x`` and ``y`` have different row partitions."""
    if x.ragged_rank != y.ragged_rank:
        raise InvalidArgumentError(
            f"ragged tensors of ragged_rank {x.ragged_rank} and {y.ragged_rank} do not "
            "broadcast together in tapeflow: give them the same ragged_rank "
            "(tf.ragged.constant(..., ragged_rank=k) or RaggedTensor.from_tensor)")
    for a, b in zip(x.nested_row_splits, y.nested_row_splits):
        if a is not b:
            run_check(_splits_equal, [a, b], "same_row_partitions")


def _splits_equal(an, bn):
    an, bn = an.astype(np.int64), bn.astype(np.int64)
    if an.shape != bn.shape:
        raise ConditionError(_cmp_message(np.array([an.shape[0] == bn.shape[0]]),
                                          np.array([True])))
    if (an != bn).any():
        raise ConditionError(_cmp_message(an, bn))


def _value_outer_rows(rt):
    """The outermost row of each flat value (a tensor: ops, so it runs while tracing)."""
    levels = []
    while isinstance(rt, RaggedTensor):
        levels.append(rt)
        rt = rt._values
    rows = levels[-1].value_rowids()
    for level in reversed(levels[:-1]):
        rows = _gather(level.value_rowids(), rows)
    return rows


def _dense_operand(rt, y):
    """``y`` (a dense operand) broadcast against ragged ``rt``: an operand for the flat
    values, or a RaggedTensor with uniform rows (then partitions must match)."""
    if isinstance(y, (int, float, bool, complex, np.generic)) and not isinstance(y, np.ndarray):
        return y
    t = _dense(y, "operand", _pydtype(y, rt) if isinstance(y, (list, tuple)) else None)
    r = len(t.shape)
    rank = len(rt.shape)
    rr = rt.ragged_rank
    if r == 0:
        return t
    if r > rank:
        raise InvalidArgumentError(f"Incompatible shapes: {list(t.shape)} vs. ragged "
                                   f"{tuple(rt.shape)}")
    full = (1,) * (rank - r) + tuple(int(d) for d in t.shape)
    outer, inner = full[:rr + 1], full[rr + 1:]
    if all(d == 1 for d in outer):
        return _reshape(t, inner) if r > len(inner) else t
    if all(d == 1 for d in outer[1:]) and outer[0] == rt.nrows_int():
        rows = _reshape(t, (outer[0],) + inner)
        return _take(rows, _value_outer_rows(rt))
    if outer[0] not in (1, rt.nrows_int()):
        raise InvalidArgumentError(f"Incompatible shapes: {list(t.shape)} vs. ragged "
                                   f"{tuple(rt.shape)}")
    dense = _broadcast(_reshape(t, full), (rt.nrows_int(),) + full[1:])
    return RaggedTensor.from_tensor(dense, ragged_rank=rr,
                                    row_splits_dtype=rt.row_splits.dtype)


def _pydtype(y, rt):
    """The dtype a Python list operand takes next to ``rt``: the ragged tensor's where
    its kind fits (ints with ints, numbers with floats), as a Python scalar would."""
    try:
        a = np.asarray(y)
    except (ValueError, TypeError):
        return None                  # (the conversion names what is wrong with it)
    k, dt = a.dtype.kind, rt.dtype
    if (k in "iu" and (dt.is_integer or dt.is_floating)) or (k == "f" and dt.is_floating) \
            or (k == "b" and dt == _dt.bool_):
        return dt
    return None


def _binary_ragged(api, x, y):
    if isinstance(x, RaggedTensor) and isinstance(y, RaggedTensor):
        _same_partitions(x, y)
        return x.with_flat_values(api(x.flat_values, y.flat_values))
    if isinstance(x, RaggedTensor):
        if isinstance(y, CompositeTensor):
            return NotImplemented
        d = _dense_operand(x, y)
        if isinstance(d, RaggedTensor):
            _same_partitions(d, x)           # (TensorFlow's message names the dense one x)
            return x.with_flat_values(api(x.flat_values, d.flat_values))
        return x.with_flat_values(api(x.flat_values, d))
    if isinstance(x, CompositeTensor):
        return NotImplemented
    d = _dense_operand(y, x)
    if isinstance(d, RaggedTensor):
        _same_partitions(d, y)
        return y.with_flat_values(api(d.flat_values, y.flat_values))
    return y.with_flat_values(api(d, y.flat_values))


dispatch_for_binary_elementwise_apis(RaggedTensor, object)(_binary_ragged)
dispatch_for_binary_elementwise_apis(object, RaggedTensor)(_binary_ragged)


# --- tf.ragged.constant ---------------------------------------------------------------------

def _is_list(x):
    return isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.ndim > 0)


def _depths(x, depth, scalars, lists):
    """Collect the nesting depth of every scalar (and of the deepest list) of ``x``."""
    if _is_list(x):
        lists.add(depth + 1)
        for e in x:
            _depths(e, depth + 1, scalars, lists)
    else:
        scalars.add(depth)


def _uniform_shape(x):
    """The shape of a nested list with rows of one length, or None."""
    if not _is_list(x):
        return ()
    shapes = {_uniform_shape(e) for e in x}
    if None in shapes or len(shapes) > 1:
        return None
    return (len(x),) + (shapes.pop() if shapes else ())


def constant(pylist, dtype=None, ragged_rank=None, inner_shape=None, name=None,
             row_splits_dtype=_dt.int64):
    """A RaggedTensor of the nested Python lists ``pylist`` (``tf.ragged.constant``):
    ``ragged_rank`` ragged dimensions (default: all but the innermost scalars'),
    ``inner_shape`` the shape of the dense values below them.

    >>> import tapeflow as tf
    >>> rt = tf.ragged.constant([[1, 2], [], [3]])
    >>> print(rt, rt.shape, rt.dtype.name)
    <tf.RaggedTensor [[1, 2], [], [3]]> (3, None) int32
    >>> print(tf.ragged.constant([["a", "b"], ["c"]]))
    <tf.RaggedTensor [[b'a', b'b'], [b'c']]>
    """
    if isinstance(pylist, RaggedTensor):
        raise InvalidTypeError("tf.ragged.constant: pylist is already a RaggedTensor")
    splits_dtype = _dt.as_dtype(row_splits_dtype)
    if splits_dtype not in _SPLIT_DTYPES:
        raise InvalidTypeError("tf.ragged.constant: row_splits_dtype must be tf.int32 or "
                               f"tf.int64, got {splits_dtype.name}")
    if isinstance(pylist, np.ndarray) and pylist.dtype != object:
        # (rectangular already: converted as tf.constant converts it, which refuses a
        # broadcast view too large to copy, before its elements are walked as lists)
        pylist = _constant(pylist, dtype).numpy().tolist()
    scalars, lists = set(), set()
    _depths(pylist, 0, scalars, lists)
    if len(scalars) > 1:
        raise InvalidArgumentError("all scalar values must have the same nesting depth")
    if inner_shape is not None:
        inner_shape = tuple(_int_array(inner_shape, "inner_shape", "tf.ragged.constant")
                            .reshape(-1).tolist())
        if any(d < 0 for d in inner_shape):
            raise InvalidArgumentError(f"tf.ragged.constant: inner_shape {list(inner_shape)} "
                                       "has a negative dimension")
    if scalars:
        depth = scalars.pop()
    else:
        depth = max(lists, default=0) + len(inner_shape or ())
    if ragged_rank is None:
        ragged_rank = max(0, depth - 1 - (len(inner_shape) if inner_shape is not None else 0))
    if not isinstance(ragged_rank, (int, np.integer)) or ragged_rank < 0:
        raise InvalidArgumentError(f"tf.ragged.constant: ragged_rank must be a "
                                   f"non-negative int, got {ragged_rank!r}")
    if ragged_rank and depth <= ragged_rank:
        raise InvalidArgumentError(
            f"pylist has scalar values depth {depth}, but ragged_rank={ragged_rank} "
            f"requires scalar value depth greater than {ragged_rank}")
    if ragged_rank == 0:
        return _dense_values([pylist], dtype, inner_shape, depth)[0] if depth else \
            _dense_values([pylist], dtype, (), 0)[0]
    splits = []
    rows = list(pylist)
    for _ in range(ragged_rank):
        lens = []
        nxt = []
        for r in rows:
            if not _is_list(r):
                raise InvalidArgumentError("all scalar values must have the same nesting "
                                           "depth")
            lens.append(len(r))
            nxt.extend(r)
        splits.append(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
        rows = nxt
    values = _dense_values(rows, dtype, inner_shape, depth - ragged_rank - 1)
    result = values
    for s in reversed(splits[1:]):
        result = RaggedTensor._make(result, _constant(s, dtype=splits_dtype))
    return RaggedTensor._make(result, _constant(splits[0], dtype=splits_dtype))


def _dense_values(rows, dtype, inner_shape, inner_depth):
    """The flat values: ``rows`` (each of the inner shape) as one dense tensor."""
    if inner_shape is None:
        shapes = {_uniform_shape(r) for r in rows}
        if None in shapes or len(shapes) > 1:
            if len(rows) == 1:
                raise InvalidArgumentError("Can't convert non-rectangular Python sequence "
                                           "to Tensor.")
            raise InvalidArgumentError("inner values have inconsistent shape")
        inner_shape = shapes.pop() if shapes else (0,) * max(inner_depth, 0)
    else:
        for r in rows:
            if _uniform_shape(r) != inner_shape:
                raise InvalidArgumentError("Can't convert non-rectangular Python sequence "
                                           "to Tensor.")
    kinds = set()
    _kinds(rows, kinds)
    if len(kinds) > 1:
        raise InvalidArgumentError("Can't convert Python sequence with mixed types to Tensor.")
    if not rows:
        dt = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
        empty = np.zeros((0,) + tuple(inner_shape),
                         object if dt == _dt.string else dt.as_numpy_dtype)
        return _constant(empty, dtype=dt)
    if any(isinstance(r, (np.ndarray, np.generic)) for r in rows):
        return _constant(np.array(rows), dtype=dtype)        # (NumPy rows keep their dtype)
    return _constant(list(rows), dtype=dtype)


def _kinds(x, out):
    if _is_list(x):
        for e in x:
            _kinds(e, out)
    else:
        out.add("text" if isinstance(x, (str, bytes, np.str_, np.bytes_)) else "number")
