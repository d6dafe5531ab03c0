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
tensor (the element helpers, ``map_element``, ``to_host``..., come first below).

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

import itertools
import os
import queue
import threading

import numpy as np

from ..runtime import devices as _devs
from .. import nest
from ..dtypes import as_dtype
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.dispatch import constant
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..ops import random as _random_mod
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
    buffer is shared, not copied."""
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
    """A component as a Tensor on ``dev``."""
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
        """Iterate the elements as NumPy arrays."""
        for el in self._elements():
            yield map_element(np.array, el)

    def __repr__(self):
        return f"<{type(self).__name__[1:] or 'Dataset'}Dataset>"

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
        return transformation_func(self)


# --- sources -------------------------------------------------------------------------------------

class _TensorSlices(Dataset):
    def __init__(self, tensors):
        if isinstance(tensors, list) and any(isinstance(x, (Tensor, Variable)) for x in tensors):
            tensors = np.stack([to_host(x) for x in tensors])
        self._structure = map_element(to_host, tensors)
        leaves = nest.flatten(self._structure, lists_as_leaves=True)
        if not leaves:
            raise InvalidArgumentError("from_tensor_slices needs at least one tensor")
        for i, a in enumerate(leaves):
            if a.ndim == 0:
                raise InvalidArgumentError(
                    f"from_tensor_slices: component {i} is a scalar; slicing needs at least "
                    "one dimension (use from_tensors for a single element)")
        sizes = [a.shape[0] for a in leaves]
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
    def __init__(self, tensors):
        self._element = map_element(to_host, tensors)

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
    def __init__(self, generator, output_types, output_shapes, args):
        self._gen, self._args = generator, tuple(args or ())
        self._types = output_types
        self._shapes = output_shapes

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


class _Map(_Unary):
    def __init__(self, input_dataset, fn):
        super().__init__(input_dataset)
        self._fn = fn

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
    def __init__(self, input_dataset, batch_size, drop_remainder):
        super().__init__(input_dataset)
        self._size = int(batch_size)
        if self._size < 1:
            raise InvalidArgumentError(f"batch: batch_size must be >= 1, got {batch_size}")
        self._drop = bool(drop_remainder)

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._size if self._drop else -(-n // self._size)

    def _elements(self):
        it = self._input._elements()
        size = self._size
        while True:
            els = list(itertools.islice(it, size))
            if not els or (self._drop and len(els) < size):
                return
            template = els[0]
            flat = is_flat_tuple(template)
            columns = zip(*(els if flat else
                            [nest.flatten(e, lists_as_leaves=True) for e in els]))
            leaves = []
            for c, col in enumerate(columns):
                try:
                    leaves.append(np.stack(col))
                except ValueError:
                    shape = np.shape(col[0])
                    j = next(j for j, a in enumerate(col) if np.shape(a) != shape)
                    raise InvalidArgumentError(
                        f"batch: cannot batch tensors with different shapes in component "
                        f"{c}: the first element had shape {list(shape)} and element {j} "
                        f"had shape {list(np.shape(col[j]))}") from None
            yield tuple(leaves) if flat else nest.pack_sequence_as(template, leaves,
                                                                   lists_as_leaves=True)


class _Unbatch(_Unary):
    def _cardinality(self):
        n = self._input._cardinality()
        return n if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def _elements(self):
        for el in self._input._elements():
            leaves = nest.flatten(el, lists_as_leaves=True)
            if any(a.ndim == 0 for a in leaves):
                raise InvalidArgumentError("unbatch: every component needs a first dimension")
            n = leaves[0].shape[0]
            if any(a.shape[0] != n for a in leaves):
                raise InvalidArgumentError("unbatch: components have different batch sizes")
            for i in range(n):
                yield nest.pack_sequence_as(el, [a[i] for a in leaves], lists_as_leaves=True)


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
