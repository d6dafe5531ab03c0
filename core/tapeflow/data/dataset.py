"""``tf.data.Dataset``: a pure-Python input pipeline with TensorFlow's semantics.

An element is a nested structure (tuples, namedtuples, dicts) of tensors. Inside the
pipeline the components are host NumPy arrays; they become tapeflow Tensors on
``cpu:0`` when a ``map``/``filter`` function sees them and when the element leaves
the pipeline (``tfe.Iterator`` created inside ``with tf.device(...)`` places them on
that device instead). ``tf.data`` never puts anything on an accelerator by itself,
and the functions given to ``map``/``filter`` run on ``cpu:0`` with no tape
recording them, as TensorFlow runs dataset functions (tensors they capture must be
on the host too, or copied there with ``.cpu()``).

An element's structure follows :mod:`tapeflow.nest` in its ``tf.data`` mode
(``lists_as_leaves=True``): a list is one component -- a value to convert to one
tensor -- as in TensorFlow, so ``from_tensor_slices([[1, 2], [3, 4]])`` slices one 2x2
tensor (the element helpers, ``map_element``, ``to_host``..., come first below). A
component may also be a ``tf.RaggedTensor`` or ``tf.SparseTensor`` (its components on the
host), sliced, batched and unbatched by rows, and every dataset has an ``element_spec``
(docs/data-text.md).

Long file: the Dataset's transformations share its element helpers and its iterator;
each transformation is a few lines, and TensorFlow's users find them in one class.

>>> import tapeflow as tf
>>> ds = tf.data.Dataset.from_tensor_slices([1, 2, 3, 4, 5, 6]).map(tf.square).batch(4)
>>> for x in ds:
...     print(x)
tf.Tensor([ 1  4  9 16], shape=(4,), dtype=int32)
tf.Tensor([25 36], shape=(2,), dtype=int32)
"""

from __future__ import annotations

import glob as _glob
import itertools
import os
import queue
import threading

import numpy as np

from ..runtime import devices as _devs
from .. import nest
from ..dtypes import as_dtype
from ..errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from ..runtime.dispatch import constant
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..ops import random as _random_mod
from ..ops.composite import is_composite
from ..ops.ragged import RaggedTensor, RaggedTensorSpec
from ..ops.sparse import SparseTensor, SparseTensorSpec
from ..tracing.signatures import TensorSpec
from ..runtime import context as _ctx
from ..tracing.control_flow import host_next

__all__ = ["Dataset", "Iterator", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]


# --- elements: their structure, and their components as host arrays or Tensors ----

__all__ = ["is_flat_tuple", "map_element", "to_host", "to_tensor", "call",
           "normalize_output"]


def is_flat_tuple(s) -> bool:
    """A plain tuple of components (the common ``(images, labels)`` element): the fast
    paths of batching and mapping."""
    return type(s) is tuple and not any(nest.is_nested(x, lists_as_leaves=True) for x in s)


def map_element(fn, element):
    """``fn`` applied to each component of ``element`` (``tf.data``'s structure rules)."""
    if type(element) is tuple and is_flat_tuple(element):
        return tuple([fn(x) for x in element])
    return nest.map_structure(fn, element, lists_as_leaves=True)


def to_host(value, what="dataset element") -> np.ndarray:
    """A host NumPy array holding ``value`` (tapeflow's dtype rules for Python values:
    floats -> float32, ints -> int32). Tensors are immutable, so a host Tensor's
    buffer is shared, not copied. A composite tensor (RaggedTensor, SparseTensor) stays
    one, its components on the host."""
    if is_composite(value):
        return composite_to_host(value, what)
    if isinstance(value, Dataset):
        return value
    if isinstance(value, Tensor):
        return np.asarray(value) if value._device.is_host else value.numpy()
    if isinstance(value, Variable):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.kind == "f" and a.dtype.itemsize > 8:
            a = a.astype(np.float64)
        try:
            as_dtype(a.dtype)
        except TypeError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
        return a
    return np.asarray(constant(value, device="cpu:0"))


def to_tensor(a: np.ndarray, dev):
    """A component as a Tensor on ``dev`` (a composite tensor as it is: on the host; a
    dataset, ``window``'s, as it is)."""
    if type(a) is not np.ndarray and (is_composite(a) or isinstance(a, Dataset)):
        return a
    return constant(a, device=dev)


class _HostFunctionScope:
    """Run a dataset function as TensorFlow does: ops on ``cpu:0``, recorded on no tape."""

    def __init__(self):
        self._dev = _devs.device("cpu:0")
        self._no_tape = _ctx.stop_all_recording()

    def __enter__(self):
        self._dev.__enter__()
        self._no_tape.__enter__()

    def __exit__(self, *exc):
        try:
            self._no_tape.__exit__(*exc)
        finally:
            self._dev.__exit__(*exc)


def _to_numpy(a):
    if is_composite(a):
        return a
    return a[()] if a.ndim == 0 else np.array(a)


def _to_cpu_tensor(a):
    return to_tensor(a, "cpu:0")


def call(fn, element):
    """``fn(*element)`` for a plain tuple element, else ``fn(element)``; components as
    Tensors on cpu:0."""
    args = map_element(_to_cpu_tensor, element)
    with _HostFunctionScope():
        if isinstance(args, tuple) and not hasattr(type(args), "_fields"):
            return fn(*args)
        return fn(args)


def _result_to_host(value):
    return to_host(value, "map function result")


def normalize_output(value):
    """A function's result as an element: a list it returns is a tuple (TensorFlow's
    rule for dataset functions, which only applies at the top: a list inside is one
    component); components as host arrays."""
    if isinstance(value, list):
        value = tuple(value)
    return map_element(_result_to_host, value)


# --- composite components (RaggedTensor, SparseTensor) and element specs -----------------

def _host_const(a):
    return constant(a, device="cpu:0")


def composite_to_host(value, what="dataset element"):
    """A RaggedTensor or SparseTensor with its components on the host (``cpu:0``)."""
    if isinstance(value, RaggedTensor):
        flat, splits = ragged_parts(value)
        if not splits:
            return flat
        return RaggedTensor.from_nested_row_splits(_host_const(flat),
                                                   [_host_const(s) for s in splits],
                                                   validate=False)
    if isinstance(value, SparseTensor):
        return SparseTensor(*(_host_const(to_host(t)) for t in
                              (value.indices, value.values, value.dense_shape)))
    raise InvalidTypeError(f"{what}: tf.data takes Tensors, RaggedTensors and SparseTensors; "
                           f"got a {type(value).__name__} (convert it to dense tensors first)")


def ragged_parts(rt):
    """``(flat values, [row splits per ragged dimension])`` of a RaggedTensor, as host
    arrays (a dense array: itself and no splits)."""
    if not isinstance(rt, RaggedTensor):
        return rt, []
    return to_host(rt.flat_values), [to_host(s) for s in rt.nested_row_splits]


class _Rows:
    """The rows (slices along dimension 0) of one component: a host array, a RaggedTensor
    (a row of ragged rank 1 is a dense array) or a SparseTensor."""

    def __init__(self, value, what):
        self.value = value
        if isinstance(value, RaggedTensor):
            self.flat, self.splits = ragged_parts(value)
            self.n = len(self.splits[0]) - 1
        elif isinstance(value, SparseTensor):
            self.idx, self.vals = to_host(value.indices), to_host(value.values)
            self.shape = to_host(value.dense_shape)
            if len(self.shape) == 0:
                raise InvalidArgumentError(f"{what}: a SparseTensor component needs a first "
                                           "dimension to slice")
            self.n = int(self.shape[0])
        else:
            if value.ndim == 0:
                raise InvalidArgumentError(f"{what}: a scalar component has no dimension 0 "
                                           "to slice")
            self.n = value.shape[0]

    def __len__(self):
        return self.n

    def __iter__(self):
        return (self[i] for i in range(self.n))

    def __getitem__(self, i):
        v = self.value
        if isinstance(v, RaggedTensor):
            lo, hi = self.splits[0][i], self.splits[0][i + 1]
            inner = []
            for s in self.splits[1:]:
                seg = s[lo:hi + 1]
                inner.append(seg - seg[0])
                lo, hi = seg[0], seg[-1]
            values = self.flat[lo:hi]
            if not inner:
                return values
            return RaggedTensor.from_nested_row_splits(
                _host_const(values), [_host_const(s) for s in inner], validate=False)
        if isinstance(v, SparseTensor):
            m = self.idx[:, 0] == i
            return SparseTensor(_host_const(self.idx[m][:, 1:]), _host_const(self.vals[m]),
                                _host_const(self.shape[1:]))
        return v[i]


def int_arg(v, what, where, default=None, required=False):
    """``v`` (a Python or NumPy int, or an int scalar tensor) as an int; None: ``default``
    (an InvalidTypeError when ``required``)."""
    if v is None and not required:
        return default
    if isinstance(v, (Tensor, np.ndarray)):
        a = np.asarray(to_host(v, where))
        v = a.reshape(()).item() if a.size == 1 and a.dtype.kind in "iu" else v
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidTypeError(f"{where}: {what} must be an int, got {type(v).__name__} "
                               f"{v!r}"[:200])
    return int(v)


def _check_callable(fn, what):
    if not callable(fn):
        raise InvalidTypeError(f"{what} must be a function, got {type(fn).__name__} "
                               f"{fn!r}"[:200])
    return fn


def _dense_as_ragged(a, ragged_rank):
    """A dense array as ``(flat, [splits])`` with ``ragged_rank`` uniform ragged
    dimensions after the first."""
    splits, rows = [], a.shape[0]
    for k in range(1, ragged_rank + 1):
        m = a.shape[k]
        splits.append(np.arange(0, rows * m + 1, max(m, 1), dtype=np.int64)[:rows + 1]
                      if m else np.zeros(rows + 1, np.int64))
        rows *= m
    return a.reshape((rows,) + a.shape[ragged_rank + 1:]), splits


def stack_ragged(col, what, ragged_rank=0, splits_dtype=None):
    """The RaggedTensor whose rows are the items of ``col`` (RaggedTensors, or dense
    arrays of rank >= 1 made ragged in their first ``ragged_rank`` inner dimensions)."""
    outer, levels, flats = [0], None, []
    dtype = np.int64 if splits_dtype is None else as_dtype(splits_dtype).as_numpy_dtype
    for i, item in enumerate(col):
        if isinstance(item, RaggedTensor):
            flat, splits = ragged_parts(item)
            dtype = splits[0].dtype if splits_dtype is None else dtype
            n = len(splits[0]) - 1
        else:
            if np.ndim(item) == 0:
                raise InvalidArgumentError(f"{what}: cannot make a ragged batch of scalars "
                                           f"(element {i})")
            flat, splits = _dense_as_ragged(item, ragged_rank)
            n = item.shape[0]
        if levels is None:
            levels = [[np.zeros(1, s.dtype)] for s in splits]
        if len(splits) != len(levels) or (flats and flat.shape[1:] != flats[0].shape[1:]):
            raise InvalidArgumentError(
                f"{what}: cannot batch element {i} with the first one: ragged rank "
                f"{len(splits)} vs {len(levels)}, inner shape {list(flat.shape[1:])} vs "
                f"{list(flats[0].shape[1:]) if flats else '?'}")
        outer.append(outer[-1] + n)
        for level, s in zip(levels, splits):
            level.append(s[1:] - s[0] + level[-1][-1])
        flats.append(flat)
    splits = [np.asarray(outer, dtype)] + [np.concatenate(lv).astype(dtype) for lv in levels]
    return RaggedTensor.from_nested_row_splits(
        _host_const(np.concatenate(flats)), [_host_const(s) for s in splits], validate=False)


def stack_sparse(col, what):
    """The SparseTensor whose rows are the SparseTensors of ``col`` (its dense shape the
    largest of theirs in each dimension)."""
    parts = [(to_host(s.indices), to_host(s.values), to_host(s.dense_shape)) for s in col]
    ranks = {len(p[2]) for p in parts}
    if len(ranks) != 1:
        raise InvalidArgumentError(f"{what}: cannot batch SparseTensors of different ranks "
                                   f"({sorted(ranks)})")
    idx = np.concatenate([np.concatenate([np.full((len(p[0]), 1), i, np.int64), p[0]], 1)
                          for i, p in enumerate(parts)])
    shape = np.concatenate([[len(parts)], np.max([p[2] for p in parts], axis=0)])
    return SparseTensor(_host_const(idx.astype(np.int64)),
                        _host_const(np.concatenate([p[1] for p in parts])),
                        _host_const(shape.astype(np.int64)))


def spec_of(a):
    """The spec of one internal component: a host array's TensorSpec, a RaggedTensor's
    RaggedTensorSpec, a SparseTensor's SparseTensorSpec."""
    if isinstance(a, RaggedTensor):
        return RaggedTensorSpec.from_value(a)
    if isinstance(a, SparseTensor):
        return SparseTensorSpec.from_value(a)
    if isinstance(a, Dataset):
        return DatasetSpec(a.element_spec)
    return TensorSpec(np.shape(a), as_dtype(np.asarray(a).dtype))


def _dims(spec):
    shape = spec.shape
    if shape is None or getattr(shape, "rank", 0) is None:
        return None
    return tuple(None if d is None else int(d) for d in shape)


def batched_spec(spec, n):
    """``spec`` with a leading dimension ``n`` (None: unknown), as ``batch`` makes it."""
    dims = _dims(spec)
    shape = None if dims is None else (n,) + dims
    if isinstance(spec, RaggedTensorSpec):
        return RaggedTensorSpec(shape, spec.dtype, spec.ragged_rank + 1, spec.row_splits_dtype)
    if isinstance(spec, SparseTensorSpec):
        return SparseTensorSpec(shape, spec.dtype)
    return TensorSpec(shape, spec.dtype)


def unbatched_spec(spec):
    """``spec`` without its leading dimension (an element of ``unbatch``)."""
    dims = _dims(spec)
    shape = None if dims is None else dims[1:]
    if isinstance(spec, RaggedTensorSpec):
        return RaggedTensorSpec(shape, spec.dtype, max(spec.ragged_rank - 1, 0),
                                spec.row_splits_dtype)
    if isinstance(spec, SparseTensorSpec):
        return SparseTensorSpec(shape, spec.dtype)
    return TensorSpec(shape, spec.dtype)


def _merge_spec(a, b):
    """The spec that fits both ``a`` and ``b`` (dimensions that differ: None)."""
    if type(a) is not type(b) or a.dtype != b.dtype or a == b:
        return a
    da, db = _dims(a), _dims(b)
    dims = None if da is None or db is None or len(da) != len(db) else tuple(
        x if x == y else None for x, y in zip(da, db))
    if isinstance(a, RaggedTensorSpec):
        return a if a.ragged_rank != b.ragged_rank or dims is None else RaggedTensorSpec(
            dims, a.dtype, a.ragged_rank, a.row_splits_dtype)
    return type(a)(dims, a.dtype) if type(a) in (TensorSpec, SparseTensorSpec) else a


class DatasetSpec:
    """The spec of a dataset that is an element (``window``'s)."""

    def __init__(self, element_spec):
        self.element_spec = element_spec

    def __repr__(self):
        return f"DatasetSpec({self.element_spec!r}, TensorShape([]))"


def interleave(inputs, make, cycle_length, block_length=1):
    """TensorFlow's interleave: ``make(x)`` for the inputs ``x``, ``cycle_length`` (0:
    all) of those iterators open at once, ``block_length`` elements from each in turn; a
    slot whose iterator ends takes the next input when its turn comes again."""
    inputs = iter(inputs)
    slots, k, done, n_open = [], 0, False, 0
    if cycle_length == 0:
        slots = [iter(make(x)) for x in inputs]
        done, n_open = True, len(slots)
    else:
        slots = [None] * cycle_length
    while n_open or not done:
        if not slots:
            return
        it = slots[k]
        if it is None and not done:
            x = next(inputs, _NOTHING)
            if x is _NOTHING:
                done = True
            else:
                slots[k], n_open = iter(make(x)), n_open + 1
                continue
        if it is not None:
            for _ in range(block_length):
                el = next(it, _NOTHING)
                if el is _NOTHING:
                    slots[k], n_open = None, n_open - 1
                    break
                yield el
        k = (k + 1) % len(slots)


_NOTHING = object()


AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2
_AUTOTUNE_PREFETCH = 2       # buffer size prefetch(AUTOTUNE) uses


# --- Dataset ---------------------------------------------------------------------------------

class Dataset:
    """A sequence of elements, transformed lazily and iterated with ``for`` (or
    ``tfe.Iterator``). Build one with :meth:`from_tensor_slices`,
    :meth:`from_tensors`, :meth:`from_generator`, :meth:`range` or :meth:`zip`."""

    # subclasses implement _elements() -> iterator of internal elements (host arrays)
    # and _cardinality() -> int (INFINITE_CARDINALITY / UNKNOWN_CARDINALITY allowed)

    def _elements(self):                     # pragma: no cover - abstract
        raise NotImplementedError

    def _cardinality(self) -> int:
        return UNKNOWN_CARDINALITY

    # --- iteration ------------------------------------------------------------------------------
    def __iter__(self):
        return Iterator(self, device="cpu:0")

    def __len__(self):
        n = self._cardinality()
        if n == INFINITE_CARDINALITY:
            raise InvalidTypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise InvalidTypeError("The dataset length is unknown.")
        return n

    def cardinality(self):
        """Number of elements as an int64 scalar tensor; -1 (infinite) or -2 (unknown)."""
        return constant(self._cardinality(), dtype="int64", device="cpu:0")

    def make_one_shot_iterator(self):
        """An :class:`Iterator` over the dataset (TF 1.x spelling)."""
        return Iterator(self)

    def as_numpy_iterator(self):
        """Iterate the elements as NumPy arrays (a scalar as a NumPy scalar, a string
        scalar as ``bytes``, as TensorFlow gives them; composite tensors as they are)."""
        for el in self._elements():
            yield map_element(_to_numpy, el)

    def __repr__(self):
        name = type(self).__dict__.get("_tf_name") or f"_{type(self).__name__.strip('_')}Dataset"
        try:
            return f"<{name} element_spec={self.element_spec!r}>"
        except Exception:            # an element_spec that needs an element that fails
            return f"<{name}>"

    @property
    def element_spec(self):
        """The type of each element: a structure (as the elements') of ``tf.TensorSpec``,
        ``tf.RaggedTensorSpec`` and ``tf.SparseTensorSpec``; ``None`` for a dimension
        that varies. Known without reading the data where TensorFlow knows it; after a
        ``map``/``flat_map`` (which tapeflow does not trace) it is read from the first two
        elements (their differing dimensions None)."""
        spec = self._element_spec()
        return self._peek_spec() if spec is None else spec

    def _element_spec(self):
        """The element spec known without reading elements, else None."""
        return None

    def _peek_spec(self):
        els = list(itertools.islice(self._elements(), 2))
        if not els:
            raise InvalidArgumentError(f"{type(self).__name__}.element_spec: the dataset "
                                       "is empty, so its element type is unknown")
        specs = [map_element(spec_of, el) for el in els]
        if len(specs) == 1:
            return specs[0]
        return nest.map_structure(_merge_spec, specs[0], specs[1], lists_as_leaves=True)

    # --- sources ---------------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors):
        """Elements are the slices of ``tensors`` along their first dimension; a tuple
        or dict of tensors gives tuple or dict elements (all must have the same first
        dimension). A list is one tensor, as in TensorFlow."""
        return _TensorSlices(tensors)

    @staticmethod
    def from_tensors(tensors):
        """A dataset of one element: ``tensors``."""
        return _Tensors(tensors)

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None):
        """Elements from ``generator()`` (called again for each iteration; with
        ``args`` as its arguments), converted to ``output_types`` (a dtype or a
        structure of dtypes matching each element) and checked against
        ``output_shapes`` (``None`` dimensions match anything)."""
        if output_types is None:
            raise InvalidTypeError("from_generator needs output_types (a dtype or a structure of "
                            "dtypes, one per component of an element)")
        return _Generator(generator, output_types, output_shapes, args)

    @staticmethod
    def range(*args, output_type="int64", dtype=None):
        """``range(stop)``, ``range(start, stop[, step])`` as int64 scalars."""
        return _Range(*args, dtype=dtype or output_type)

    @staticmethod
    def zip(datasets):
        """Elements are structures (the structure of ``datasets``) of the elements of
        each dataset; ends with the shortest."""
        if isinstance(datasets, Dataset):
            raise InvalidTypeError("Dataset.zip takes a tuple (or dict) of datasets, e.g. "
                            "Dataset.zip((a, b))")
        return _Zip(datasets)

    # --- transformations ----------------------------------------------------------------------
    def map(self, map_func, num_parallel_calls=None, deterministic=None):
        """Apply ``map_func`` to each element (``map_func(*element)`` for tuples)."""
        return _Map(self, map_func)

    def filter(self, predicate):
        """Keep the elements for which ``predicate`` returns a true scalar."""
        return _Filter(self, predicate)

    def flat_map(self, map_func):
        """Map each element to a Dataset and chain their elements."""
        return _FlatMap(self, map_func)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        """Shuffle with a buffer of ``buffer_size`` elements, as TensorFlow does: fill
        the buffer, then emit a uniformly chosen buffered element and put the next
        input element in its place. ``seed`` (or the global seed,
        ``tf.random.set_seed``) makes the orders reproducible; each iteration gets a
        new order unless ``reshuffle_each_iteration=False``."""
        return _Shuffle(self, buffer_size, seed, reshuffle_each_iteration)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None,
              deterministic=None):
        """Stack ``batch_size`` consecutive elements (component by component); the last
        batch may be smaller unless ``drop_remainder``."""
        return _Batch(self, batch_size, drop_remainder)

    def unbatch(self):
        """Split each element along its first dimension (the inverse of ``batch``)."""
        return _Unbatch(self)

    def repeat(self, count=None):
        """Repeat the dataset ``count`` times (``None`` or -1: forever)."""
        return _Repeat(self, count)

    def take(self, count):
        """The first ``count`` elements (-1: all)."""
        return _Take(self, count)

    def skip(self, count):
        """All but the first ``count`` elements (-1: none)."""
        return _Skip(self, count)

    def shard(self, num_shards, index):
        """Every ``num_shards``-th element, starting at element ``index``: what one of
        ``num_shards`` workers should read, as in TensorFlow. Shard before shuffling
        and batching, so that the workers see disjoint data::

            ds.shard(tf.distributed.size(), tf.distributed.rank()).shuffle(1000).batch(32)

        >>> import tapeflow as tf
        >>> [int(v) for v in tf.data.Dataset.range(10).shard(3, 1)]
        [1, 4, 7]
        """
        return _Shard(self, num_shards, index)

    def concatenate(self, dataset):
        """This dataset's elements, then ``dataset``'s."""
        return _Concatenate(self, dataset)

    def enumerate(self, start=0):
        """Elements ``(index, element)``, the index an int64 scalar."""
        return Dataset.zip((Dataset.range(start, np.iinfo(np.int64).max), self))

    def prefetch(self, buffer_size):
        """Produce up to ``buffer_size`` elements ahead in a background thread
        (``AUTOTUNE``: a small buffer). The thread ends with the iteration."""
        return _Prefetch(self, buffer_size)

    def cache(self, filename=""):
        """Keep the elements in memory after the first full iteration (in memory only)."""
        if filename:
            raise NotImplementedError("Dataset.cache(filename): only the in-memory cache "
                                      "(filename='') is implemented")
        return _Cache(self)

    def apply(self, transformation_func):
        """``transformation_func(self)`` (``tf.data.experimental.dense_to_ragged_batch``
        ...)."""
        return transformation_func(self)

    def reduce(self, initial_state, reduce_func):
        """``reduce_func(state, element)`` folded over the elements from
        ``initial_state``; the final state (a structure of Tensors)."""
        _check_callable(reduce_func, "Dataset.reduce: reduce_func")
        state = map_element(to_host, initial_state)
        for el in self._elements():
            s, e = map_element(_to_cpu_tensor, state), map_element(_to_cpu_tensor, el)
            with _HostFunctionScope():
                state = normalize_output(reduce_func(s, e))
        return map_element(_to_cpu_tensor, state)

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None,
                     drop_remainder=False, name=None):
        """Batch elements of different shapes, each padded (at the end of each dimension)
        to ``padded_shapes`` (a shape per component; ``None`` dimensions, or no
        ``padded_shapes``: the largest in the batch) with ``padding_values`` (a scalar
        per component; default 0, or ``b""`` for strings)."""
        return _PaddedBatch(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def ragged_batch(self, batch_size, drop_remainder=False, row_splits_dtype="int64",
                     name=None):
        """Batch elements of different shapes: a component whose shape varies (a
        dimension of its ``element_spec`` is None) becomes a ``tf.RaggedTensor`` (ragged
        up to its last varying dimension); fixed shapes batch as ``batch`` does."""
        return _Batch(self, batch_size, drop_remainder, ragged=as_dtype(row_splits_dtype))

    def window(self, size, shift=None, stride=1, drop_remainder=False, name=None):
        """Windows of ``size`` elements (every ``stride``-th), one starting every ``shift``
        (default ``size``) elements; each window a structure (the elements') of datasets.
        The last windows may be shorter unless ``drop_remainder``."""
        return _Window(self, size, shift, stride, drop_remainder)

    def interleave(self, map_func, cycle_length=None, block_length=None,
                   num_parallel_calls=None, deterministic=None, name=None):
        """The elements of the datasets ``map_func`` makes of each element, ``cycle_length``
        (default: all) of them at a time, ``block_length`` (default 1) elements from each
        in turn."""
        return _Interleave(self, map_func, cycle_length, block_length)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None, name=None):
        """The local paths matching ``file_pattern`` (a glob, or a list of globs) as string
        scalars: sorted, then shuffled unless ``shuffle=False`` (``seed``: a repeatable
        order). No match is a NotFoundError naming the pattern."""
        patterns = file_pattern if isinstance(file_pattern, (list, tuple)) else [file_pattern]
        files = []
        for p in patterns:
            p = to_host(p, "Dataset.list_files") if isinstance(p, (Tensor, np.ndarray)) else p
            p = p.reshape(()).item() if getattr(p, "size", 0) == 1 else p
            if not isinstance(p, (str, bytes, os.PathLike)):
                raise InvalidTypeError(f"Dataset.list_files: file_pattern must be a glob (a "
                                       f"str) or a list of them, got {file_pattern!r}"[:200])
            files.extend(sorted(_glob.glob(os.fsdecode(p))))
        if not files:
            raise NotFoundError(f"Dataset.list_files: no files match {file_pattern!r}")
        ds = Dataset.from_tensor_slices(np.array([os.fsencode(f) for f in files], object))
        return ds.shuffle(len(files), seed) if shuffle is None or shuffle else ds


# --- sources -------------------------------------------------------------------------------------

class _TensorSlices(Dataset):
    _tf_name = "_TensorSliceDataset"

    def _element_spec(self):
        return map_element(lambda a: unbatched_spec(spec_of(a)), self._structure)

    def __init__(self, tensors):
        if isinstance(tensors, list) and any(isinstance(x, (Tensor, Variable)) for x in tensors):
            tensors = np.stack([to_host(x) for x in tensors])
        self._structure = map_element(to_host, tensors)
        leaves = [_Rows(a, f"from_tensor_slices: component {i}") if is_composite(a) else a
                  for i, a in enumerate(nest.flatten(self._structure, lists_as_leaves=True))]
        if not leaves:
            raise InvalidArgumentError("from_tensor_slices needs at least one tensor")
        for i, a in enumerate(leaves):
            if type(a) is not _Rows and a.ndim == 0:
                raise InvalidArgumentError(
                    f"from_tensor_slices: component {i} is a scalar; slicing needs at least "
                    "one dimension (use from_tensors for a single element)")
        sizes = [len(a) for a in leaves]
        if len(set(sizes)) > 1:
            raise InvalidArgumentError(
                "from_tensor_slices: all components must have the same size in dimension 0, "
                "got " + ", ".join(f"{n} (component {i})" for i, n in enumerate(sizes)))
        self._leaves, self._n = leaves, sizes[0]

    def _cardinality(self):
        return self._n

    def _elements(self):
        leaves, template = self._leaves, self._structure
        if len(leaves) == 1 and not isinstance(template, (tuple, dict)):
            yield from leaves[0]             # iterating an array yields its slices
            return
        if is_flat_tuple(template):
            yield from zip(*leaves)
            return
        for i in range(self._n):
            yield nest.pack_sequence_as(template, [a[i] for a in leaves], lists_as_leaves=True)


class _Tensors(Dataset):
    _tf_name = "_TensorDataset"

    def __init__(self, tensors):
        self._element = map_element(to_host, tensors)

    def _element_spec(self):
        return map_element(spec_of, self._element)

    def _cardinality(self):
        return 1

    def _elements(self):
        yield self._element


def _shape_ok(shape, expected):
    if expected is None:
        return True
    expected = list(expected)
    return len(shape) == len(expected) and all(
        e is None or int(e) == s for s, e in zip(shape, expected))


class _Generator(Dataset):
    _tf_name = "_FlatMapDataset"

    def __init__(self, generator, output_types, output_shapes, args):
        self._gen, self._args = generator, tuple(args or ())
        self._types = output_types
        self._shapes = output_shapes

    def _element_spec(self):
        types = self._types
        if not nest.is_nested(types, lists_as_leaves=True):
            return TensorSpec(self._shapes, types)
        shapes = [None] * len(nest.flatten(types, lists_as_leaves=True)) \
            if self._shapes is None else nest.flatten_up_to(
                types, self._shapes, check_types=False, lists_as_leaves=True)
        return nest.pack_sequence_as(types, [TensorSpec(s, t) for s, t in zip(
            shapes, nest.flatten(types, lists_as_leaves=True))], lists_as_leaves=True)

    def _elements(self):
        types = self._types
        types_leaves = nest.flatten(types, lists_as_leaves=True)
        nested = nest.is_nested(types, lists_as_leaves=True)
        shapes = self._shapes
        shape_leaves = None if shapes is None else nest.flatten_up_to(
            types, shapes, check_types=False, lists_as_leaves=True)
        for value in self._gen(*self._args):
            if isinstance(value, list) and isinstance(types, tuple):
                value = tuple(value)
            # as deep as output_types goes: a tuple of labels where output_types has one
            # dtype is one component (TensorFlow's flatten_up_to), not one per label
            try:
                leaves = nest.flatten_up_to(types, value, check_types=False,
                                            lists_as_leaves=True) if nested else [value]
            except (InvalidArgumentError, InvalidTypeError) as e:
                raise InvalidArgumentError(
                    f"from_generator: the generator yielded an element whose structure does "
                    f"not match output_types {types!r}: {e}") from None
            if len(leaves) != len(types_leaves):
                raise InvalidArgumentError(
                    f"from_generator: the generator yielded an element with {len(leaves)} "
                    f"components where output_types {types!r} has {len(types_leaves)}")
            out = []
            for i, (v, dt) in enumerate(zip(leaves, types_leaves)):
                a = np.asarray(to_host(v) if isinstance(v, (Tensor, Variable)) else v,
                               dtype=as_dtype(dt).as_numpy_dtype)
                if shape_leaves is not None and not _shape_ok(a.shape, shape_leaves[i]):
                    raise InvalidArgumentError(
                        f"from_generator: the generator yielded an element of shape "
                        f"{a.shape} where an element of shape {tuple(shape_leaves[i])} "
                        f"was expected (component {i})")
                out.append(a)
            yield nest.pack_sequence_as(types, out, lists_as_leaves=True) if nested else out[0]


class _Range(Dataset):
    def __init__(self, *args, dtype):
        if not 1 <= len(args) <= 3:
            raise InvalidTypeError("Dataset.range takes 1 to 3 arguments: (stop), (start, stop) or "
                            "(start, stop, step)")
        r = range(*(int(a) for a in args))
        if r.step == 0:
            raise InvalidArgumentError("Dataset.range: step must not be 0")
        self._range = r
        self._np = as_dtype(dtype).as_numpy_dtype

    def _cardinality(self):
        return len(self._range)

    def _element_spec(self):
        return TensorSpec((), as_dtype(self._np))

    def _elements(self):
        t = self._np
        for i in self._range:
            yield np.array(i, t)


class _Zip(Dataset):
    def __init__(self, datasets):
        self._structure = datasets
        self._datasets = nest.flatten(datasets, lists_as_leaves=True)
        for d in self._datasets:
            if not isinstance(d, Dataset):
                raise InvalidTypeError(f"Dataset.zip: {d!r} is not a Dataset")

    def _element_spec(self):
        specs = [d._element_spec() for d in self._datasets]
        if any(sp is None for sp in specs):
            return None
        return nest.pack_sequence_as(self._structure, specs, lists_as_leaves=True)

    def _cardinality(self):
        ns = [d._cardinality() for d in self._datasets]
        finite = [n for n in ns if n >= 0]
        if finite:
            return min(finite) if UNKNOWN_CARDINALITY not in ns or min(finite) == 0 \
                else UNKNOWN_CARDINALITY
        return UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in ns else INFINITE_CARDINALITY

    def _elements(self):
        its = [d._elements() for d in self._datasets]
        try:
            for els in zip(*its):
                yield nest.pack_sequence_as(self._structure, els, lists_as_leaves=True)
        finally:
            for it in its:
                close = getattr(it, "close", None)
                if close is not None:
                    close()


# --- transformations ---------------------------------------------------------------------------

class _Unary(Dataset):
    def __init__(self, input_dataset):
        if not isinstance(input_dataset, Dataset):
            raise InvalidTypeError(f"{input_dataset!r} is not a Dataset")
        self._input = input_dataset

    def _cardinality(self):
        return self._input._cardinality()

    def _element_spec(self):
        return self._input._element_spec()

    def _peek_spec(self):
        return self._input.element_spec


class _Map(_Unary):
    def __init__(self, input_dataset, fn):
        super().__init__(input_dataset)
        self._fn = fn

    def _element_spec(self):
        return None                  # the function is not traced: read from elements

    _peek_spec = Dataset._peek_spec

    def _elements(self):
        fn = self._fn
        for el in self._input._elements():
            yield normalize_output(call(fn, el))


class _Filter(_Unary):
    def __init__(self, input_dataset, predicate):
        super().__init__(input_dataset)
        self._pred = predicate

    def _cardinality(self):
        n = self._input._cardinality()
        return n if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def _elements(self):
        pred = self._pred
        for el in self._input._elements():
            keep = np.asarray(call(pred, el))
            if keep.size != 1 or keep.dtype != np.bool_:
                raise InvalidArgumentError(
                    "filter: the predicate must return a scalar boolean, got "
                    f"{keep.dtype} with shape {keep.shape}")
            if keep.reshape(()):
                yield el


class _FlatMap(_Unary):
    def __init__(self, input_dataset, fn):
        super().__init__(input_dataset)
        self._fn = fn

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        return None

    _peek_spec = Dataset._peek_spec

    def _elements(self):
        for el in self._input._elements():
            ds = call(self._fn, el)
            if not isinstance(ds, Dataset):
                raise InvalidTypeError(f"flat_map: the function must return a Dataset, got {ds!r}")
            yield from ds._elements()


def _seed_parts(seed):
    """Seed material for a shuffle made now: TF's (global seed, op seed) when either
    is set, else fresh entropy (drawn once, so reshuffle_each_iteration=False repeats)."""
    get_seed = _random_mod.get_seed
    g, s = get_seed(seed)
    if g is None and s is None:
        return [int.from_bytes(os.urandom(8), "little")]
    return [int(g) & 0xFFFFFFFFFFFFFFFF, int(s) & 0xFFFFFFFFFFFFFFFF]


class _Shuffle(_Unary):
    def __init__(self, input_dataset, buffer_size, seed, reshuffle_each_iteration):
        super().__init__(input_dataset)
        n = int(buffer_size)
        if n == AUTOTUNE or n < 1:
            raise InvalidArgumentError(f"shuffle: buffer_size must be >= 1, got {buffer_size}")
        self._n = n
        self._seed = _seed_parts(seed)
        self._reshuffle = bool(reshuffle_each_iteration)
        self._epochs = itertools.count()

    def _elements(self):
        parts = self._seed + ([next(self._epochs)] if self._reshuffle else [])
        rng = np.random.default_rng(np.random.SeedSequence(parts))
        it = self._input._elements()
        buf = list(itertools.islice(it, self._n))
        draws, k = rng.random(256), 0
        while buf:
            if k == 256:
                draws, k = rng.random(256), 0
            i = int(draws[k] * len(buf))
            k += 1
            el = buf[i]
            try:
                buf[i] = next(it)
            except StopIteration:
                buf[i] = buf[-1]
                buf.pop()
            yield el


class _Batch(_Unary):
    def __init__(self, input_dataset, batch_size, drop_remainder, ragged=None):
        super().__init__(input_dataset)
        self._size = int_arg(batch_size, "batch_size", "batch", required=True)
        if self._size < 1:
            raise InvalidArgumentError(f"batch: batch_size must be >= 1, got {batch_size}")
        self._drop = bool(drop_remainder)
        self._ragged = ragged        # ragged_batch: the row splits dtype

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._size if self._drop else -(-n // self._size)

    def _ragged_spec(self, spec):
        """``ragged_batch``'s element spec for a component: ragged up to its last
        varying dimension (TensorFlow's rule)."""
        dims = _dims(spec) if type(spec) is TensorSpec else None
        if self._ragged is None or not dims or None not in dims:
            return spec
        rr = max(i for i, d in enumerate(dims) if d is None)
        return RaggedTensorSpec(dims, spec.dtype, rr, self._ragged)

    def _element_spec(self):
        spec = self._input._element_spec()
        return None if spec is None else self._spec_from(spec)

    def _peek_spec(self):
        return self._spec_from(self._input.element_spec)

    def _spec_from(self, spec):
        n = self._size if self._drop else None
        return map_element(lambda sp: batched_spec(self._ragged_spec(sp), n), spec)

    def _stack(self, c, col, spec):
        first = col[0]
        if isinstance(spec, RaggedTensorSpec) or isinstance(first, RaggedTensor):
            rr = spec.ragged_rank if isinstance(spec, RaggedTensorSpec) else 0
            return stack_ragged(col, "batch", rr, self._ragged)
        if isinstance(first, SparseTensor):
            return stack_sparse(col, "batch")
        if spec is None and self._ragged is not None and np.ndim(first) >= 1:
            # after a map (not traced): ragged up to the last dimension that varies here
            shapes = np.array([np.shape(a) for a in col])
            varying = [i for i in range(shapes.shape[1]) if (shapes[:, i] != shapes[0, i]).any()]
            return stack_ragged(col, "ragged_batch", max(varying, default=0), self._ragged)
        try:
            return np.stack(col)
        except ValueError:
            shape = np.shape(col[0])
            j = next(j for j, a in enumerate(col) if np.shape(a) != shape)
            raise InvalidArgumentError(
                f"batch: cannot batch tensors with different shapes in component "
                f"{c}: the first element had shape {list(shape)} and element {j} "
                f"had shape {list(np.shape(col[j]))}; use ragged_batch or padded_batch "
                "for elements of different shapes") from None

    def _elements(self):
        it = self._input._elements()
        size = self._size
        spec = self._input._element_spec()
        if spec is None and self._ragged is not None:
            try:                     # ragged_batch after a map: the spec read from elements
                spec = self._input.element_spec
            except InvalidArgumentError:
                spec = None
        specs = None if spec is None else [self._ragged_spec(sp) for sp in nest.flatten(
            spec, lists_as_leaves=True)]
        while True:
            els = list(itertools.islice(it, size))
            if not els or (self._drop and len(els) < size):
                return
            template = els[0]
            flat = is_flat_tuple(template)
            columns = zip(*(els if flat else
                            [nest.flatten(e, lists_as_leaves=True) for e in els]))
            leaves = [self._stack(c, col, None if specs is None else specs[c])
                      for c, col in enumerate(columns)]
            yield tuple(leaves) if flat else nest.pack_sequence_as(template, leaves,
                                                                   lists_as_leaves=True)


class _PaddedBatch(_Batch):
    def __init__(self, input_dataset, batch_size, padded_shapes, padding_values,
                 drop_remainder):
        super().__init__(input_dataset, batch_size, drop_remainder)
        self._shapes, self._values = padded_shapes, padding_values

    def _per_component(self, arg, template, what):
        if arg is None:
            return [None] * len(nest.flatten(template, lists_as_leaves=True))
        if not nest.is_nested(template, lists_as_leaves=True):
            return [arg]
        try:
            return nest.flatten_up_to(template, arg, check_types=False, lists_as_leaves=True)
        except (InvalidArgumentError, InvalidTypeError) as e:
            raise InvalidArgumentError(f"padded_batch: {what} must have the structure of the "
                                       f"elements: {e}") from None

    def _spec_from(self, spec):
        n = self._size if self._drop else None
        shapes = self._per_component(self._shapes, spec, "padded_shapes")
        leaves = []
        for sp, shape in zip(nest.flatten(spec, lists_as_leaves=True), shapes):
            dims = _dims(sp) if shape is None else _padded_dims(shape)
            leaves.append(TensorSpec(None if dims is None else (n,) + tuple(dims), sp.dtype))
        return nest.pack_sequence_as(spec, leaves, lists_as_leaves=True)

    def _elements(self):
        it = self._input._elements()
        while True:
            els = list(itertools.islice(it, self._size))
            if not els or (self._drop and len(els) < self._size):
                return
            template = els[0]
            shapes = self._per_component(self._shapes, template, "padded_shapes")
            values = self._per_component(self._values, template, "padding_values")
            columns = zip(*[nest.flatten(e, lists_as_leaves=True) for e in els])
            leaves = [_pad_stack(c, col, shape, value) for c, (col, shape, value)
                      in enumerate(zip(columns, shapes, values))]
            yield nest.pack_sequence_as(template, leaves, lists_as_leaves=True)


def _padded_dims(shape):
    if isinstance(shape, (Tensor, np.ndarray)):
        shape = np.asarray(to_host(shape)).reshape(-1).tolist()
    if hasattr(shape, "as_list"):
        shape = shape.as_list()
    try:
        return [None if d is None or int(d) < 0 else int(d) for d in shape]
    except TypeError:
        raise InvalidArgumentError(f"padded_batch: a padded shape is a list of ints or None, "
                                   f"got {shape!r}") from None


def _pad_stack(c, col, shape, value):
    """The arrays of ``col`` padded at the end of each dimension to ``shape`` (its None
    dimensions: the batch's largest) with ``value``, stacked."""
    if any(is_composite(a) for a in col):
        raise InvalidArgumentError(f"padded_batch: component {c} is a composite tensor; "
                                   "padded_batch takes dense components (use ragged_batch)")
    ranks = {a.ndim for a in col}
    if len(ranks) != 1:
        raise InvalidArgumentError(f"padded_batch: component {c} has elements of different "
                                   f"ranks {sorted(ranks)}")
    biggest = np.max([a.shape for a in col], axis=0) if col[0].ndim else np.zeros(0, int)
    dims = [None] * col[0].ndim if shape is None else _padded_dims(shape)
    if len(dims) != col[0].ndim:
        raise InvalidArgumentError(f"padded_batch: padded shape {dims} of component {c} does "
                                   f"not have the elements' rank {col[0].ndim}")
    target = [int(b) if d is None else d for d, b in zip(dims, biggest)]
    if any(t < b for t, b in zip(target, biggest)):
        raise InvalidArgumentError(
            f"padded_batch: component {c} has an element of shape {list(biggest)} in some "
            f"dimension larger than the padded shape {dims}; attempted to pad to a smaller "
            "size than the input element")
    dtype = col[0].dtype
    if value is None:
        fill = b"" if dtype.kind == "O" else 0
    else:
        fill = to_host(value, "padded_batch: padding_values").reshape(()).item()
    out = np.full([len(col)] + target, fill, dtype=dtype)
    for i, a in enumerate(col):
        out[(i,) + tuple(slice(0, d) for d in a.shape)] = a
    return out


class _Unbatch(_Unary):
    def _cardinality(self):
        n = self._input._cardinality()
        return n if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def _element_spec(self):
        spec = self._input._element_spec()
        return None if spec is None else map_element(unbatched_spec, spec)

    def _peek_spec(self):
        return map_element(unbatched_spec, self._input.element_spec)

    def _elements(self):
        for el in self._input._elements():
            leaves = [_Rows(a, "unbatch") if is_composite(a) else a
                      for a in nest.flatten(el, lists_as_leaves=True)]
            if any(type(a) is not _Rows and a.ndim == 0 for a in leaves):
                raise InvalidArgumentError("unbatch: every component needs a first dimension")
            n = len(leaves[0])
            if any(len(a) != n for a in leaves):
                raise InvalidArgumentError("unbatch: components have different batch sizes")
            for i in range(n):
                yield nest.pack_sequence_as(el, [a[i] for a in leaves], lists_as_leaves=True)


class _Elements(Dataset):
    """A dataset of given internal elements (a window's)."""

    _tf_name = "_VariantDataset"

    def __init__(self, elements):
        self._list = elements

    def _cardinality(self):
        return len(self._list)

    def _element_spec(self):
        return spec_of(self._list[0]) if self._list else None

    def _elements(self):
        return iter(self._list)


class _Window(_Unary):
    def __init__(self, input_dataset, size, shift, stride, drop_remainder):
        super().__init__(input_dataset)
        self._size = int_arg(size, "size", "window", required=True)
        self._stride = int_arg(stride, "stride", "window", required=True)
        self._shift = int_arg(shift, "shift", "window", self._size)
        if min(self._size, self._shift, self._stride) < 1:
            raise InvalidArgumentError(f"window: size, shift and stride must be >= 1, got "
                                       f"{size}, {shift}, {stride}")
        self._drop = bool(drop_remainder)

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        spec = self._input._element_spec()
        return None if spec is None else map_element(DatasetSpec, spec)

    def _peek_spec(self):
        return map_element(DatasetSpec, self._input.element_spec)

    def _pack(self, items):
        template = items[0]
        cols = zip(*[nest.flatten(e, lists_as_leaves=True) for e in items])
        return nest.pack_sequence_as(template, [_Elements(list(c)) for c in cols],
                                     lists_as_leaves=True)

    def _elements(self):
        it = self._input._elements()
        buf, base, start, ended = [], 0, 0, False
        span = (self._size - 1) * self._stride + 1
        while True:
            drop = min(start - base, len(buf))
            del buf[:drop]
            base += drop
            while base < start:          # skip inputs before the window (shift > span)
                if next(it, _NOTHING) is _NOTHING:
                    return
                base += 1
            while len(buf) < span and not ended:
                el = next(it, _NOTHING)
                if el is _NOTHING:
                    ended = True
                else:
                    buf.append(el)
            items = buf[::self._stride][:self._size]
            if not items or (self._drop and len(items) < self._size):
                return
            yield self._pack(items)
            start += self._shift


class _Interleave(_Unary):
    def __init__(self, input_dataset, fn, cycle_length, block_length):
        super().__init__(input_dataset)
        self._fn = _check_callable(fn, "Dataset.interleave: map_func")
        self._cycle = int_arg(cycle_length, "cycle_length", "interleave", 0)
        self._block = int_arg(block_length, "block_length", "interleave", 1)
        self._cycle = 0 if self._cycle == AUTOTUNE else self._cycle
        self._block = 1 if self._block == AUTOTUNE else self._block
        if self._cycle < 0 or self._block < 1:
            raise InvalidArgumentError(f"interleave: cycle_length must be >= 1 and "
                                       f"block_length >= 1, got {cycle_length}, {block_length}")

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        return None

    _peek_spec = Dataset._peek_spec

    def _make(self, el):
        ds = call(self._fn, el)
        if not isinstance(ds, Dataset):
            raise InvalidTypeError(f"interleave: the function must return a Dataset, got "
                                   f"{type(ds).__name__}")
        return ds._elements()

    def _elements(self):
        return interleave(self._input._elements(), self._make, self._cycle, self._block)


class _Repeat(_Unary):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = -1 if count is None else int(count)

    def _cardinality(self):
        n = self._input._cardinality()
        if self._count == 0 or n == 0:
            return 0
        if self._count < 0:
            return INFINITE_CARDINALITY if n != UNKNOWN_CARDINALITY else UNKNOWN_CARDINALITY
        return n * self._count if n >= 0 else n

    def _elements(self):
        epochs = itertools.count() if self._count < 0 else range(self._count)
        for _ in epochs:
            empty = True
            for el in self._input._elements():
                empty = False
                yield el
            if empty:                # repeating an empty dataset ends, as in TF
                return


class _Take(_Unary):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = int(count)

    def _cardinality(self):
        n = self._input._cardinality()
        if self._count < 0:
            return n
        if n == INFINITE_CARDINALITY:
            return self._count
        return min(n, self._count) if n >= 0 else UNKNOWN_CARDINALITY

    def _elements(self):
        if self._count < 0:
            yield from self._input._elements()
            return
        if self._count == 0:
            return
        it = self._input._elements()
        try:
            for i, el in enumerate(it, 1):
                yield el
                if i >= self._count:
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()


class _Shard(_Unary):
    def __init__(self, input_dataset, num_shards, index):
        super().__init__(input_dataset)
        for what, v in (("num_shards", num_shards), ("index", index)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InvalidArgumentError(
                    f"Dataset.shard: {what} must be an int, got {type(v).__name__} {v!r}")
        if num_shards < 1:
            raise InvalidArgumentError(
                f"Dataset.shard: num_shards must be at least 1, got {num_shards}")
        if not 0 <= index < num_shards:
            raise InvalidArgumentError(
                f"Dataset.shard: index must be in [0, {num_shards}) for {num_shards} shards, "
                f"got {index} (pass tf.distributed.rank() as the index and "
                f"tf.distributed.size() as num_shards)")
        self._n, self._i = int(num_shards), int(index)

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._n + (1 if self._i < n % self._n else 0)

    def _elements(self):
        return itertools.islice(self._input._elements(), self._i, None, self._n)


class _Skip(_Unary):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = int(count)

    def _cardinality(self):
        n = self._input._cardinality()
        if self._count < 0:
            return 0
        return max(n - self._count, 0) if n >= 0 else n

    def _elements(self):
        if self._count < 0:
            return
        it = self._input._elements()
        for _ in itertools.islice(it, self._count):
            pass
        yield from it


class _Concatenate(Dataset):
    def __init__(self, first, second):
        self._first, self._second = first, second

    def _element_spec(self):
        a, b = self._first._element_spec(), self._second._element_spec()
        if a is None or b is None:
            return None
        return nest.map_structure(_merge_spec, a, b, lists_as_leaves=True)

    def _cardinality(self):
        a, b = self._first._cardinality(), self._second._cardinality()
        if INFINITE_CARDINALITY in (a, b):
            return INFINITE_CARDINALITY
        return a + b if a >= 0 and b >= 0 else UNKNOWN_CARDINALITY

    def _elements(self):
        yield from self._first._elements()
        yield from self._second._elements()


class _Cache(_Unary):
    def __init__(self, input_dataset):
        super().__init__(input_dataset)
        self._cache = None

    def _elements(self):
        if self._cache is not None:
            yield from self._cache
            return
        seen = []
        for el in self._input._elements():
            seen.append(el)
            yield el
        self._cache = seen


# --- prefetch: a producer thread --------------------------------------------------------------

_END, _ERROR, _ITEM = 0, 1, 2


def _prefetch_worker(dataset, q, stop):
    """Fill ``q`` with ``dataset``'s elements until it ends or ``stop`` is set. Holds no
    reference to the consumer, so a dropped iterator lets this thread end."""
    it = dataset._elements()
    try:
        for el in it:
            while not stop.is_set():
                try:
                    q.put((_ITEM, el), timeout=0.05)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        msg = (_END, None)
    except BaseException as e:       # handed to the consumer, raised there
        msg = (_ERROR, e)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    while not stop.is_set():
        try:
            q.put(msg, timeout=0.05)
            return
        except queue.Full:
            continue


class _Prefetch(_Unary):
    def __init__(self, input_dataset, buffer_size):
        super().__init__(input_dataset)
        n = int(buffer_size)
        if n == AUTOTUNE:
            n = _AUTOTUNE_PREFETCH
        if n < 0:
            raise InvalidArgumentError(f"prefetch: buffer_size must be >= 0 or AUTOTUNE, got "
                                       f"{buffer_size}")
        self._n = n

    def _elements(self):
        if self._n == 0:
            yield from self._input._elements()
            return
        q = queue.Queue(self._n)
        stop = threading.Event()
        t = threading.Thread(target=_prefetch_worker, args=(self._input, q, stop),
                             name="tapeflow-prefetch", daemon=True)
        t.start()
        try:
            while True:
                kind, value = q.get()
                if kind == _ITEM:
                    yield value
                elif kind == _END:
                    return
                else:
                    raise value
        finally:
            stop.set()
            try:                     # unblock a producer waiting on a full queue
                while True:
                    q.get_nowait()
            except queue.Empty:
                pass
            if t is not threading.current_thread():
                t.join(timeout=1.0)


# --- Iterator -------------------------------------------------------------------------------------

class Iterator:
    """Iterates a :class:`Dataset` (the seeds' ``tfe.Iterator``): ``for x in
    tfe.Iterator(dataset)``, or ``next(it)`` / ``it.get_next()``.

    Elements are Tensors on ``device``; by default the device of the enclosing
    ``with tf.device(...)`` block when the Iterator is created (TF's
    ``tfe.Iterator`` prefetches to the GPU it is created on), else ``cpu:0``.
    """

    def __init__(self, dataset, device=None):
        if not isinstance(dataset, Dataset):
            raise InvalidTypeError(
                f"Iterator needs a tf.data.Dataset, got {type(dataset).__name__}")
        if device is None:
            dev = _devs.current_device()
            device = dev if dev is not None else "cpu:0"
        self._device = _devs.get_device(device)
        self._dataset = dataset
        self._it = dataset._elements()
        # made while a tf.function traces: iterated at trace time (a Python loop unrolls)
        self._made_in_trace = bool(_ctx.tracing[0]) and _ctx.thread_tracer.tracer is not None

    def __iter__(self):
        return self

    def __next__(self):
        if _ctx.tracing[0] and not self._made_in_trace and _ctx.thread_tracer.tracer is not None:
            # next(iterator) inside tf.function: a node that takes the next element at
            # every call (the trace takes the first call's)
            return host_next(self._next_element, "IteratorGetNext", peek=self._peek)[1]
        return self._next_element()

    def next_with_flag(self):
        """``(has_more, element)``: a boolean tensor and the next element; inside
        tf.function a node that reads the iterator at every call and, at the end, gives
        ``has_more`` False and zeros shaped like the element (the hook of a loop over
        an iterator); eagerly ``element`` is None at the end."""
        return host_next(self._next_element, "IteratorGetNextAsOptional", strict=False,
                         peek=self._peek)

    def _peek(self):
        """The next element, left to the next ``next()`` (a trace that only records)."""
        el = self._next_element()
        self._consumed -= 1
        self._pending = [el]
        return el

    #: an element taken by _peek, given by the next _next_element
    _pending = ()

    def _next_element(self):
        if self._pending:
            el, = self._pending
            self._pending = ()
            self._consumed += 1
            return el
        if self._it is None:
            raise StopIteration
        try:
            el = next(self._it)
        except StopIteration:
            self._it = None
            raise
        self._consumed += 1
        dev = self._device
        return map_element(lambda a: to_tensor(a, dev), el)

    next = __next__

    def get_next(self, name=None):
        """The next element; ``tf.errors.OutOfRangeError``-like ``StopIteration`` at the end."""
        return self.__next__()

    @property
    def device(self) -> str:
        return self._device.name

    # --- tf.train.Checkpoint: the iterator's position ------------------------------------------
    #: elements taken so far (what a checkpoint saves)
    _consumed = 0

    def _serialize_to_tensors(self):
        """``{"ITERATOR_STATE": [elements taken, 1 if exhausted]}`` (int64): what
        ``tf.train.Checkpoint`` saves as ``<path>/.ATTRIBUTES/ITERATOR_STATE``."""
        return {"ITERATOR_STATE": np.array([self._consumed, int(self._it is None)], np.int64)}

    def _check_restore_tensors(self, tensors):
        """The saved state, checked (before a restore assigns anything): 2 non-negative
        int64 values, elements taken (below 2**40: skipping them must end) and exhausted."""
        state = np.asarray(tensors.get("ITERATOR_STATE"))
        if (state.shape != (2,) or state.dtype.kind not in "iu" or state[0] < 0
                or state[0] >= 2 ** 40):
            raise InvalidArgumentError(
                f"Iterator: a checkpoint's ITERATOR_STATE must be 2 non-negative int64 "
                f"values (elements taken, exhausted), got {state.dtype}{list(state.shape)} "
                f"{state.tolist() if state.size <= 4 else ''}; was it saved from a tf.data "
                "iterator by tapeflow?")
        return state

    def _restore_from_tensors(self, tensors):
        """Continue where the saved iterator was: the pipeline restarts and skips the
        elements the saved one had taken (a deterministic pipeline resumes exactly; a
        shuffle without a seed draws a new order)."""
        state = self._check_restore_tensors(tensors)
        self.close()
        it = self._dataset._elements()
        skipped = sum(1 for _ in itertools.islice(it, int(state[0])))
        self._it, self._consumed = (None if state[1] else it), skipped

    def close(self):
        """Stop the iteration now (ends a prefetch thread)."""
        it, self._it = self._it, None
        if it is not None:
            it.close()

    def __del__(self):
        try:
            self.close()
        except Exception:            # pragma: no cover - interpreter shutdown
            pass
