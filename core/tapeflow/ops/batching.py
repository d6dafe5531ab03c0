"""Batching rules of the built-in ops, for ``tf.vectorized_map`` (``OpDef.batch``):
what they are, the helpers they share, and which ops have none.

A rule ``rule(ctx, *inputs)`` (:class:`~tapeflow.runtime.registry.BatchContext`)
receives the op's inputs, the batched ones (``ctx.batched[i]``) with the batch of
``ctx.size`` examples as dimension 0, and returns the outputs for the whole batch, the
batch as dimension 0. Elementwise and broadcasting ops, and ops that map over leading
dimensions (the linear algebra of the last two, softmax over the last axis), take
:class:`~tapeflow.runtime.registry.Broadcasting`; the others rewrite the op: shift its
axes past the batch, prepend the batch to a shape attribute, fold the batch into the
op's own batch dimension (convolutions, pooling, losses of a batch), or index with the
batch (gathers, scatters, segment sums).

Each rule is declared with its op, right under the op's ``defop`` in the op's module
(``batch=`` or ``@OP.def_batch``; an op declared ``elementwise`` or ``broadcast`` gets
:class:`~tapeflow.runtime.registry.Broadcasting` from ``OpDef``); the helpers that
reshape and broadcast are this module's ``batch_*`` functions (``batch_coords``, which
concatenates, is in :mod:`tapeflow.ops.array_gather`). An op
without a rule runs once per example in a loop; :data:`NO_RULE` lists the built-in ops
that have none, and why. A rule that covers only some cases returns ``NotImplemented``
for the others, which then loop the same way (:data:`PARTIAL_RULE` lists those ops and
the cases).

>>> from tapeflow.runtime.registry import OPS, Broadcasting
>>> isinstance(OPS["Add"].batch, Broadcasting), OPS["Sum"].batch.__name__
(True, '_batch_reduce')
"""

from __future__ import annotations

import numpy as np

from .array_shape import reshape
from .reductions import broadcast_to

__all__ = ["NO_RULE", "PARTIAL_RULE", "batch_all", "batch_fold", "batch_unfold", "batch_leading"]

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
    "_FusedConv2D": "a filter or bias per example: a grouped convolution, which tapeflow has "
                    "no kernel for",
    "SearchSorted": "a sorted sequence per example: the kernels take one 1-D sequence",
}


# --- the helpers of the rules: the batch is dimension 0 ----------------------------------

def batch_all(ctx, inputs):
    """Every input with the batch in front (unbatched ones broadcast to it)."""
    return tuple(x if b else broadcast_to(x, (ctx.size,) + tuple(x.shape))
                 for x, b in zip(inputs, ctx.batched))


def batch_fold(x):
    """(B, N, ...) -> (B*N, ...): the batch joins an op's own batch dimension."""
    s = tuple(x.shape)
    return reshape(x, (s[0] * s[1],) + s[2:])


def batch_unfold(y, b):
    """(B*N, ...) -> (B, N, ...)."""
    s = tuple(y.shape)
    return reshape(y, (b, s[0] // b if b else 0) + s[1:])


def batch_leading(ctx, inputs, core):
    """Inputs with identical leading (batch) dimensions, the batch first, for ops that
    need them equal: each keeps its last ``core`` dimensions."""
    inputs = batch_all(ctx, inputs)
    lead = np.broadcast_shapes(*[tuple(x.shape[1:len(x.shape) - core]) for x in inputs])
    out = []
    for x in inputs:
        s = tuple(x.shape)
        want = (s[0],) + tuple(lead) + s[len(s) - core:]
        if s != want:
            pad = len(want) - len(s)
            x = broadcast_to(reshape(x, s[:1] + (1,) * pad + s[1:]), want)
        out.append(x)
    return tuple(out)
