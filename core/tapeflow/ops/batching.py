"""Batching rules of the built-in ops, for ``tf.vectorized_map`` (``OpDef.batch``).

A rule ``rule(ctx, *inputs)`` (:class:`~tapeflow.runtime.registry.BatchContext`)
receives the op's inputs, the batched ones (``ctx.batched[i]``) with the batch of
``ctx.size`` examples as dimension 0, and returns the outputs for the whole batch, the
batch as dimension 0. Elementwise and broadcasting ops, and ops that map over leading
dimensions (the linear algebra of the last two, softmax over the last axis), take
:class:`~tapeflow.runtime.registry.Broadcasting`; the others below rewrite the op:
shift its axes past the batch, prepend the batch to a shape attribute, fold the batch
into the op's own batch dimension (convolutions, pooling, losses of a batch), or index
with the batch (gathers, scatters, segment sums).

Rules live in one module (rather than next to each gradient) because they use ops of
every op module: here all of them are defined. An op without a rule runs once per
example in a loop; :data:`NO_RULE` lists the built-in ops that have none, and why. A
rule that covers only some cases returns ``NotImplemented`` for the others, which then
loop the same way (:data:`PARTIAL_RULE` lists those ops and the cases).

>>> from tapeflow.runtime.registry import OPS, Broadcasting
>>> isinstance(OPS["Add"].batch, Broadcasting), OPS["Sum"].batch.__name__
(True, '_reduce')
"""

from __future__ import annotations

import numpy as np

from ..runtime.dispatch import constant, execute
from ..runtime.registry import Broadcasting
from . import array as _a
from . import math as _m
from ._library import LIB

__all__ = ["NO_RULE", "PARTIAL_RULE"]

_OPS = {op.name: op for op in LIB.ops}

#: the built-in ops without a batching rule, and why (they run once per example)
NO_RULE = {
    "Where": "its output's shape depends on the values (ragged across examples)",
    "NonZero": "its output's shape depends on the values (ragged across examples)",
    "UniqueAll": "its outputs' shapes depend on the values (ragged across examples)",
    "RandomShuffle": "each example needs its own permutation",
    "Conv2DBackpropFilter": ("a per-example filter gradient is a grouped convolution, which "
                             "tapeflow has no kernel for"),
}


#: the built-in ops whose rule covers only some cases; the others return NotImplemented
#: and run once per example
PARTIAL_RULE = {
    "Conv2D": "a filter per example: a grouped convolution, which tapeflow has no kernel for",
    "Conv2DBackpropInput": "a filter per example (as Conv2D)",
    "SearchSorted": "a sorted sequence per example: the kernels take one 1-D sequence",
}


def _rule(*names):
    def deco(fn):
        for n in names:
            _OPS[n].batch = fn
        return fn
    return deco


def _all_batched(ctx, inputs):
    """Every input with the batch in front (unbatched ones broadcast to it)."""
    return tuple(x if b else _a.broadcast_to(x, (ctx.size,) + tuple(x.shape))
                 for x, b in zip(inputs, ctx.batched))


def _axis(a, rank):
    """Axis ``a`` of an example of rank ``rank``, in the batched tensor."""
    return (a % rank if rank else 0) + 1


def _run(ctx, inputs, **changes):
    return execute(ctx.op, inputs, {**ctx.attrs, **changes})


def _fold(x):
    """(B, N, ...) -> (B*N, ...)."""
    s = tuple(x.shape)
    return _a.reshape(x, (s[0] * s[1],) + s[2:])


def _unfold(y, b):
    s = tuple(y.shape)
    return _a.reshape(y, (b, s[0] // b if b else 0) + s[1:])


# --- elementwise, broadcasting, leading-dimension ops ---------------------------------

_BROADCASTING = Broadcasting()
for _op in LIB.ops:
    if _op.elementwise or _op.broadcast:
        _op.batch = _BROADCASTING
for _name in ("Identity", "StopGradient", "ZerosLike", "OnesLike", "Conj", "Real", "Imag",
              "Invert", "Cholesky", "MatrixInverse", "MatrixDeterminant", "LogMatrixDeterminant",
              "SelfAdjointEigV2", "Svd", "SvdValues", "Qr", "SigmoidCrossEntropyWithLogits"):
    _OPS[_name].batch = _BROADCASTING


@_rule("LeakyReluGrad")
def _leaky_relu_grad(ctx, dy, x):
    # the kernels give the result the features' shape (cpu:0 multiplies in place), so a
    # batch of gradients against one features tensor (GradientTape.jacobian) gives both
    # the batch first
    return execute(ctx.op, _all_batched(ctx, (dy, x)), ctx.attrs)


@_rule("MatMul")
def _matmul(ctx, a, b):
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    if ctx.batched[0] and not ctx.batched[1] and len(a.shape) == 3 and len(b.shape) == 2 \
            and not ta:
        # (B, m, k) @ (k, n): one GEMM of (B*m, k)
        y = execute(ctx.op, (_fold(a), b), ctx.attrs)
        return _unfold(y, ctx.size)
    if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[1 if ta else 2] == 1:
        # a batch of outer products (per-example weight gradients: x^T @ dy of one row):
        # one broadcast multiply instead of B matrix products with k = 1
        sa, sb = tuple(a.shape), tuple(b.shape)
        a = _a.reshape(a, (sa[0], sa[2] if ta else sa[1], 1))
        b = _a.reshape(b, (sb[0], 1, sb[1] if tb else sb[2]))
        return _m.multiply(a, b)
    a, b = _leading(ctx, (a, b), 2)
    return execute(ctx.op, (a, b), ctx.attrs)


def _leading(ctx, inputs, core):
    """Inputs with identical leading (batch) dimensions, the batch first, for ops that
    need them equal: each keeps its last ``core`` dimensions."""
    inputs = _all_batched(ctx, inputs)
    lead = np.broadcast_shapes(*[tuple(x.shape[1:len(x.shape) - core]) for x in inputs])
    out = []
    for x in inputs:
        s = tuple(x.shape)
        want = (s[0],) + tuple(lead) + s[len(s) - core:]
        if s != want:
            pad = len(want) - len(s)
            x = _a.broadcast_to(_a.reshape(x, s[:1] + (1,) * pad + s[1:]), want)
        out.append(x)
    return tuple(out)


@_rule("MatrixSolve")
def _solve(ctx, a, rhs):
    return execute(ctx.op, _leading(ctx, (a, rhs), 2), ctx.attrs)


@_rule("Einsum")
def _einsum(ctx, *xs):
    eq = ctx.attrs["equation"]
    ins, out = eq.split("->")
    used = set(eq)
    z = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used)
    subs = [z + s if b else s for s, b in zip(ins.split(","), ctx.batched)]
    return _run(ctx, xs, equation=",".join(subs) + "->" + z + out)


@_rule("AddN")
def _addn(ctx, *xs):
    return execute(ctx.op, _all_batched(ctx, xs), ctx.attrs)


@_rule("BiasAdd")
def _bias_add(ctx, value, bias):
    if not ctx.batched[1]:
        if ctx.attrs["data_format"] == "NHWC":
            return execute(ctx.op, (value, bias), ctx.attrs)     # bias on the last axis
        return _unfold(execute(ctx.op, (_fold(value), bias), ctx.attrs), ctx.size)
    value = _all_batched(ctx, (value,))[0]
    r = len(value.shape) - 1
    c = int(bias.shape[1])
    shape = ((ctx.size,) + (1,) * (r - 1) + (c,) if ctx.attrs["data_format"] == "NHWC"
             else (ctx.size, 1, c) + (1,) * (r - 2))
    return _m.add(value, _a.reshape(bias, shape))


# --- axes ------------------------------------------------------------------------------

@_rule("Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ReduceLogSumExp", "EuclideanNorm")
def _reduce(ctx, x):
    r = len(x.shape) - 1
    axis = ctx.attrs["axis"]
    axes = tuple(range(1, r + 1)) if axis is None else tuple(sorted(_axis(a, r) for a in axis))
    return _run(ctx, (x,), axis=axes)


@_rule("ArgMax", "ArgMin", "Cumsum", "Cumprod", "ArgSort", "Softmax", "LogSoftmax")
def _one_axis(ctx, x):
    return _run(ctx, (x,), axis=_axis(ctx.attrs["axis"], len(x.shape) - 1))


@_rule("SoftmaxCrossEntropyWithLogits")
def _softmax_xent(ctx, logits, labels):
    logits, labels = _leading(ctx, (logits, labels), 0)
    return _run(ctx, (logits, labels), axis=_axis(ctx.attrs["axis"], len(logits.shape) - 1))


@_rule("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent(ctx, logits, labels):
    logits, labels = _all_batched(ctx, (logits, labels))
    if len(labels.shape) == 1:                      # one example: (C,) logits, () label
        return execute(ctx.op, (logits, labels), ctx.attrs)
    return _unfold(execute(ctx.op, (_fold(logits), _fold(labels)), ctx.attrs), ctx.size)


@_rule("L2Loss")
def _l2loss(ctx, x):
    r = len(x.shape) - 1
    return _m.multiply(_m.reduce_sum(_m.square(x), axis=tuple(range(1, r + 1))), 0.5)


@_rule("FFT", "RFFT", "IRFFT")
def _fft(ctx, x):
    r = len(x.shape) - 1
    return _run(ctx, (x,), axes=tuple(a - r if a >= 0 else a for a in ctx.attrs["axes"]))


@_rule("ConcatV2")
def _concat(ctx, *xs):
    return _run(ctx, _all_batched(ctx, xs), axis=_axis(ctx.attrs["axis"], len(xs[0].shape)
                                                       - ctx.batched[0]))


@_rule("Pack")
def _pack(ctx, *xs):
    r = len(xs[0].shape) - ctx.batched[0]
    return _run(ctx, _all_batched(ctx, xs), axis=_axis(ctx.attrs["axis"], r + 1))


@_rule("Unpack", "SplitV")
def _unpack(ctx, x):
    return _run(ctx, (x,), axis=_axis(ctx.attrs["axis"], len(x.shape) - 1))


@_rule("ExpandDims")
def _expand_dims(ctx, x):
    return _run(ctx, (x,), axis=_axis(ctx.attrs["axis"], len(x.shape)))


@_rule("Squeeze")
def _squeeze(ctx, x):
    axis = ctx.attrs["axis"]
    r = len(x.shape) - 1
    if axis is None:
        axis = tuple(i for i, d in enumerate(x.shape[1:]) if d == 1)
    return _run(ctx, (x,), axis=tuple(_axis(a, r) for a in axis))


@_rule("Transpose")
def _transpose(ctx, x):
    perm = ctx.attrs["perm"]
    r = len(x.shape) - 1
    perm = tuple(range(r))[::-1] if perm is None else perm
    return _run(ctx, (x,), perm=(0,) + tuple(p + 1 for p in perm))


@_rule("OneHot")
def _one_hot(ctx, x):
    r = len(x.shape) - 1
    a = ctx.attrs["axis"]
    return _run(ctx, (x,), axis=-1 if a == -1 else _axis(a, r + 1))


@_rule("GatherV2")
def _gather(ctx, params, indices):
    axis, bd = ctx.attrs["axis"], ctx.attrs["batch_dims"]
    if ctx.batched[0] and not ctx.batched[1] and bd == 0:
        return _run(ctx, (params, indices), axis=axis + 1)
    if ctx.batched[1] and not ctx.batched[0] and bd == 0:
        # the batch of indices lands at dimension `axis`: move it to the front
        y = _run(ctx, (params, indices))
        if axis == 0:
            return y
        r = len(y.shape)
        return _a.transpose(y, (axis,) + tuple(i for i in range(r) if i != axis))
    params, indices = _all_batched(ctx, (params, indices))
    return _run(ctx, (params, indices), axis=axis + 1, batch_dims=bd + 1)


def _batch_coords(ctx, indices):
    """``indices`` (B, ..., K) with the example's index prepended: (B, ..., K+1)."""
    s = tuple(indices.shape)
    ids = np.arange(ctx.size, dtype=indices.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1))
    ids = constant(np.broadcast_to(ids, s[:-1] + (1,)).copy(), device=indices._device)
    return _a.concat([ids, indices], axis=-1)


@_rule("GatherNd")
def _gather_nd(ctx, params, indices):
    if not ctx.batched[0]:
        return execute(ctx.op, (params, indices), ctx.attrs)    # (B, ..., K) indices
    if not ctx.batched[1]:
        indices = _a.broadcast_to(indices, (ctx.size,) + tuple(indices.shape))
    return execute(ctx.op, (params, _batch_coords(ctx, indices)), ctx.attrs)


@_rule("ScatterNd")
def _scatter_nd(ctx, indices, updates):
    indices, updates = _all_batched(ctx, (indices, updates))
    return _run(ctx, (_batch_coords(ctx, indices), updates),
                shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


@_rule("UnsortedSegmentSum")
def _segment_sum(ctx, data, ids):
    data, ids = _all_batched(ctx, (data, ids))
    k = ctx.attrs["num_segments"]
    s = tuple(ids.shape)
    off = np.arange(ctx.size, dtype=ids.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1)) * k
    off = constant(np.broadcast_to(off, s).copy(), device=ids._device)
    # a negative id drops its row: keep it negative
    ids = _a.where(_m.less(ids, 0), ids, _m.add(ids, off))
    y = _run(ctx, (data, ids), num_segments=ctx.size * k)
    return _a.reshape(y, (ctx.size, k) + tuple(y.shape[1:]))


@_rule("SearchSorted")
def _searchsorted(ctx, seq, values):
    if ctx.batched[0]:          # the kernel takes one 1-D sequence: one per example
        return NotImplemented
    return execute(ctx.op, (seq, values), ctx.attrs)      # values of any shape


# --- shapes -----------------------------------------------------------------------------

@_rule("Reshape")
def _reshape(ctx, x):
    return _run(ctx, (x,), shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


@_rule("BroadcastTo")
def _broadcast_to(ctx, x):
    shape = tuple(ctx.attrs["shape"])
    s = tuple(x.shape)
    x = _a.reshape(x, s[:1] + (1,) * (len(shape) - len(s) + 1) + s[1:])
    return _run(ctx, (x,), shape=(ctx.size,) + shape)


@_rule("Tile")
def _tile(ctx, x):
    return _run(ctx, (x,), multiples=(1,) + tuple(ctx.attrs["multiples"]))


@_rule("PadV2", "MirrorPad")
def _pad(ctx, x):
    return _run(ctx, (x,), paddings=((0, 0),) + tuple(tuple(p) for p in ctx.attrs["paddings"]))


@_rule("Slice")
def _slice(ctx, x):
    return _run(ctx, (x,), begin=(0,) + tuple(ctx.attrs["begin"]),
                size=(ctx.size,) + tuple(ctx.attrs["size"]))


@_rule("StridedSlice")
def _strided_slice(ctx, x):
    return _run(ctx, (x,), spec=(slice(None),) + tuple(ctx.attrs["spec"]))


@_rule("StridedSliceGrad")
def _strided_slice_grad(ctx, dy):
    return _run(ctx, (dy,), spec=(slice(None),) + tuple(ctx.attrs["spec"]),
                shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


@_rule("Shape", "Size", "Rank")
def _shape(ctx, x):
    ctx.out_batched = (False,)
    return execute(ctx.op, (x[0] if ctx.size else _a.zeros(tuple(x.shape[1:]), x.dtype),),
                   ctx.attrs)


# --- random ops: a draw per example -----------------------------------------------------

@_rule("RandomStandardNormal", "RandomUniform", "RandomUniformInt", "TruncatedNormal")
def _random(ctx):
    return _run(ctx, (), shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


# --- convolutions and pooling: the batch joins the op's own batch dimension -------------

@_rule("Conv2D", "MaxPool", "AvgPool", "MaxPoolGrad", "MaxPoolGradGrad")
def _fold_first(ctx, *xs):
    if len(xs) == 2 and ctx.batched[1]:             # Conv2D with a filter per example
        return NotImplemented
    if len(xs) == 2:
        y = execute(ctx.op, (_fold(xs[0]), xs[1]), ctx.attrs)
    else:
        y = execute(ctx.op, tuple(_fold(x) for x in _all_batched(ctx, xs)), ctx.attrs)
    return _unfold(y, ctx.size)


@_rule("AvgPoolGrad")
def _avg_pool_grad(ctx, dy):
    shape = tuple(ctx.attrs["orig_input_shape"])
    y = _run(ctx, (_fold(dy),), orig_input_shape=(ctx.size * shape[0],) + shape[1:])
    return _unfold(y, ctx.size)


@_rule("Conv2DBackpropInput")
def _conv_backprop_input(ctx, filt, dy):
    if ctx.batched[0]:
        return NotImplemented
    shape = tuple(ctx.attrs["input_sizes"])
    y = _run(ctx, (filt, _fold(dy)), input_sizes=(ctx.size * shape[0],) + shape[1:])
    return _unfold(y, ctx.size)

