"""The higher-order functions ``tf.map_fn``, ``tf.scan``, ``tf.foldl`` and ``tf.foldr``:
a Python function applied along the first axis of tensors (a nested structure of them).

Each runs the function once per element -- eagerly a loop, inside ``tf.function`` the
same loop unrolled while tracing (tapeflow traces with the arguments' values, so the
number of elements is known) -- and stacks the results with ``tf.stack``: the ops run
are ordinary ops, recorded by ``GradientTape`` and differentiable to any order.

Deliberate differences from TensorFlow 2.21: without ``fn_output_signature`` the
results' structure and dtypes are those ``fn`` returns (TensorFlow requires them to be
``elems``'s); results of different lengths need ``fn_output_signature=
tf.RaggedTensorSpec(...)`` (or ragged ``elems``) and become a ``tf.RaggedTensor``; the
loop is unrolled in a traced function (no ``while`` node: ``parallel_iterations``,
``swap_memory`` and ``back_prop`` change nothing; a new number of elements retraces).

>>> import tapeflow as tf
>>> print(tf.map_fn(lambda x: x * x, tf.constant([1, 2, 3])))
tf.Tensor([1 4 9], shape=(3,), dtype=int32)
>>> print(tf.scan(lambda a, x: a + x, tf.constant([1, 2, 3, 4])))
tf.Tensor([ 1  3  6 10], shape=(4,), dtype=int32)
>>> print(tf.foldr(lambda a, x: a * 10 + x, tf.constant([1, 2, 3]), initializer=0))
tf.Tensor(321, shape=(), dtype=int32)
"""

from __future__ import annotations

from .. import dtypes as _dt
from .. import nest as _nest
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .array_creation import zeros
from .array_gather import concat, stack, unstack
from .ragged import RaggedTensor

__all__ = ["map_fn", "scan", "foldl", "foldr"]


def _check_fn(fn, what):
    if not callable(fn):
        raise InvalidTypeError(f"tf.{what}: fn must be callable, got {type(fn).__name__}")


def _leaf(x, what):
    """A leaf of ``elems`` as a tensor (a composite tensor -- ragged -- as it is)."""
    if isinstance(x, Variable):
        return x.read_value()
    if isinstance(x, Tensor) or hasattr(type(x), "__tapeflow_dispatch__"):
        return x
    try:
        return convert_to_tensor(x)
    except (TypeError, ValueError) as e:
        raise InvalidTypeError(f"tf.{what}: elems must be tensors (or a nested structure of "
                               f"them), got {type(x).__name__}: {e}") from None


def _rows(leaves, what):
    """The number of elements along axis 0 (the same for every leaf)."""
    if not leaves:
        raise InvalidArgumentError(f"tf.{what}: elems is an empty structure; pass at least "
                                   "one tensor")
    ns = []
    for x in leaves:
        shape = x.shape
        if shape.rank == 0:
            raise InvalidArgumentError(
                f"tf.{what}: the elements of elems must be at least 1-D (they are unstacked "
                f"along axis 0), got a scalar of dtype {x.dtype.name}")
        n = shape[0]
        ns.append(int(n) if n is not None else int(x.nrows()))
    if any(n != ns[0] for n in ns):
        raise InvalidArgumentError(
            f"tf.{what}: the tensors of elems must have the same size along axis 0, got "
            f"{ns} (shapes {[tuple(x.shape) for x in leaves]})")
    return ns[0]


def _split(elems, what):
    """``elems`` as a list of per-element structures, and its length."""
    leaves = [_leaf(x, what) for x in _nest.flatten(elems)]
    n = _rows(leaves, what)
    cols = [unstack(x, num=n) if isinstance(x, Tensor) else [x[i] for i in range(n)]
            for x in leaves]
    return [_nest.pack_sequence_as(elems, [c[i] for c in cols]) for i in range(n)], n


def _is_spec(s):
    return not isinstance(s, (Tensor, _dt.DType)) and hasattr(s, "dtype") and \
        hasattr(s, "shape")


def _sig_leaves(sig):
    """The leaves of an output signature: DTypes, ``TensorSpec``/``RaggedTensorSpec``."""
    if isinstance(sig, (str, _dt.DType)) or _is_spec(sig):
        return [sig], None
    return _nest.flatten(sig), sig


def _check_output(out, sig, what):
    """``out`` (fn's value, flattened) against the signature's leaves ``sig``."""
    if len(out) != len(sig):
        raise InvalidArgumentError(
            f"tf.{what}: fn returned {len(out)} tensor(s), the output signature has "
            f"{len(sig)}; pass fn_output_signature matching fn's output")
    checked = []
    for o, s in zip(out, sig):
        want = _dt.as_dtype(s.dtype if _is_spec(s) else s)
        if hasattr(s, "ragged_rank") or hasattr(type(o), "__tapeflow_dispatch__"):
            checked.append(o)
            continue
        o = convert_to_tensor(o, dtype=want) if not isinstance(o, Tensor) else o
        if o.dtype is not want:
            raise InvalidArgumentError(
                f"tf.{what}: fn returned a {o.dtype.name} tensor where the output signature "
                f"says {want.name}; cast it in fn or change fn_output_signature")
        checked.append(o)
    return checked


def _stack_column(col, spec, what):
    if hasattr(spec, "ragged_rank") or any(hasattr(type(c), "__tapeflow_dispatch__")
                                           for c in col):
        return _ragged_stack(col, what)
    shapes = {tuple(c.shape) for c in col}
    if len(shapes) > 1:
        raise InvalidArgumentError(
            f"tf.{what}: fn returned tensors of different shapes {sorted(shapes)}; stacking "
            "them needs one shape (return a RaggedTensor and pass fn_output_signature="
            "tf.RaggedTensorSpec(...) for ragged results)")
    return stack(col)


def _ragged_stack(col, what):
    """The results of ``fn`` (tensors of rank >= 1 of different lengths, or ragged
    tensors) as the rows of one ``tf.RaggedTensor``."""
    if any(c.shape.rank == 0 for c in col if isinstance(c, Tensor)):
        raise InvalidArgumentError(f"tf.{what}: a ragged result needs fn to return tensors "
                                   "of rank >= 1, got a scalar")
    lengths = [[int(c.shape[0]) if isinstance(c, Tensor) else c.nrows_int() for c in col]]
    parts = [c.nested_row_lengths() if isinstance(c, RaggedTensor) else () for c in col]
    depth = {len(p) for p in parts}
    if len(depth) > 1:
        raise InvalidArgumentError(f"tf.{what}: fn returned ragged tensors of different "
                                   "ragged ranks")
    for k in range(depth.pop()):
        lengths.append(concat([p[k] for p in parts], 0))
    flat = concat([c.flat_values if isinstance(c, RaggedTensor) else c for c in col], 0)
    return RaggedTensor.from_nested_row_lengths(
        flat, [convert_to_tensor(lengths[0], dtype=_dt.int64)] + lengths[1:])


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True,
           swap_memory=False, infer_shape=True, name=None, fn_output_signature=None):
    """``fn`` applied to each element of ``elems`` along axis 0, the results stacked.

    ``elems``: a tensor or a nested structure of tensors of one length along axis 0;
    ``fn`` gets one element of each (in the same structure). ``fn_output_signature``
    (``dtype``, its old name): the dtype or ``tf.TensorSpec`` of ``fn``'s result, or a
    structure of them, needed when ``fn``'s result differs from ``elems`` in structure or
    dtype under TensorFlow (tapeflow infers it from the results, and checks it when given).

    >>> import tapeflow as tf
    >>> x = tf.constant([[1., 2.], [3., 4.]])
    >>> s, p = tf.map_fn(lambda r: (tf.reduce_sum(r), tf.reduce_prod(r)), x,
    ...                  fn_output_signature=(tf.float32, tf.float32))
    >>> print(s, p)
    tf.Tensor([3. 7.], shape=(2,), dtype=float32) tf.Tensor([ 2. 12.], shape=(2,), dtype=float32)
    """
    _check_fn(fn, "map_fn")
    sig = fn_output_signature if fn_output_signature is not None else dtype
    items, n = _split(elems, "map_fn")
    if n == 0:
        return _empty(elems, sig)
    outs = [fn(item) for item in items]
    flat = [_nest.flatten(o) for o in outs]
    if sig is not None:
        leaves, structure = _sig_leaves(sig)
        flat = [_check_output(f, leaves, "map_fn") for f in flat]
    else:
        leaves, structure = [None] * len(flat[0]), outs[0]
        ins = _nest.flatten(elems)
        if len(ins) == len(leaves):     # (TensorFlow's default signature: elems', ragged too)
            leaves = [x if isinstance(x, RaggedTensor) else None for x in ins]
        if any(len(f) != len(flat[0]) for f in flat):
            raise InvalidArgumentError("tf.map_fn: fn returned structures of different sizes")
        flat = [[o if isinstance(o, Tensor) or hasattr(type(o), "__tapeflow_dispatch__")
                 else convert_to_tensor(o) for o in f] for f in flat]
    cols = [_stack_column([f[k] for f in flat], leaves[k], "map_fn")
            for k in range(len(leaves))]
    if structure is None:
        return cols[0]
    return _nest.pack_sequence_as(structure, cols)


def _empty(elems, sig):
    """map_fn over no elements: empty tensors of the signature's dtypes (elems' without
    one), shaped ``[0] + spec.shape`` where a ``TensorSpec`` gives it."""
    if sig is None:
        return _nest.map_structure(lambda x: x, elems)
    leaves, structure = _sig_leaves(sig)
    out = []
    for s in leaves:
        shape = [0] + ([int(d) for d in s.shape] if _is_spec(s) and s.shape.rank is not None
                       and None not in list(s.shape) else [])
        out.append(zeros(shape, dtype=_dt.as_dtype(s.dtype if _is_spec(s) else s)))
    return out[0] if structure is None else _nest.pack_sequence_as(structure, out)


def _accumulate(fn, elems, initializer, reverse, what, keep):
    """The accumulators of ``a = fn(a, x)`` over ``elems`` (from the end when
    ``reverse``), all of them when ``keep`` (scan), else the last."""
    _check_fn(fn, what)
    items, n = _split(elems, what)
    if reverse:
        items = items[::-1]
    if initializer is None:
        if n == 0:
            raise InvalidArgumentError(
                f"tf.{what}: elems is empty and no initializer is given; pass initializer=")
        a, items = items[0], items[1:]
    else:
        a = _nest.map_structure(_leaf_of_init, initializer)
    kept = [a] if (keep and initializer is None) else []
    for x in items:
        new = fn(a, x)
        try:
            _nest.assert_same_structure(a, new, check_types=False)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"tf.{what}: fn(accumulator, element) must return the accumulator's "
                f"structure: {e}") from None
        a = _nest.map_structure(_leaf_of_init, new)
        if keep:
            kept.append(a)
    if not keep:
        return a
    if not kept:                # (empty elems, an initializer): no accumulator to stack
        return _nest.map_structure(lambda t: zeros([0] + list(t.shape), dtype=t.dtype), a)
    if reverse:
        kept = kept[::-1]
    return _nest.map_structure(lambda *xs: stack(list(xs)), *kept)


def _leaf_of_init(x):
    return x if isinstance(x, Tensor) else convert_to_tensor(x)


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
         swap_memory=False, infer_shape=True, reverse=False, name=None):
    """The accumulators of ``a = fn(a, x)`` for each element ``x`` of ``elems`` along
    axis 0, stacked (``a`` starts as ``initializer``, or the first element, which is
    then the first result). ``reverse``: from the last element to the first (the
    results still in ``elems``' order). ``a`` may be a nested structure.

    >>> import tapeflow as tf
    >>> print(tf.scan(lambda a, x: a * x, tf.constant([1., 2., 3.]), initializer=2.,
    ...               reverse=True))
    tf.Tensor([12. 12.  6.], shape=(3,), dtype=float32)
    """
    return _accumulate(fn, elems, initializer, reverse, "scan", True)


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """``a = fn(a, x)`` over the elements of ``elems`` along axis 0, first to last; the
    last ``a`` (``a`` starts as ``initializer``, or the first element).

    >>> import tapeflow as tf
    >>> print(tf.foldl(lambda a, x: a - x, tf.constant([1, 2, 3]), initializer=10))
    tf.Tensor(4, shape=(), dtype=int32)
    """
    return _accumulate(fn, elems, initializer, False, "foldl", False)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """``a = fn(a, x)`` over the elements of ``elems`` along axis 0, last to first; the
    last ``a`` (``a`` starts as ``initializer``, or the last element)."""
    return _accumulate(fn, elems, initializer, True, "foldr", False)
