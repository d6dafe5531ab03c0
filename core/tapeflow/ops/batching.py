"""Batching rules of the built-in ops, for ``tf.vectorized_map`` (``OpDef.batch``):
what they are, and which ops have none.

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
:class:`~tapeflow.runtime.registry.Broadcasting` from ``defop``); the helpers that
reshape and broadcast are :mod:`tapeflow.ops.array`'s ``batch_*`` functions. An op
without a rule runs once per example in a loop; :data:`NO_RULE` lists the built-in ops
that have none, and why. A rule that covers only some cases returns ``NotImplemented``
for the others, which then loop the same way (:data:`PARTIAL_RULE` lists those ops and
the cases).

>>> from tapeflow.runtime.registry import OPS, Broadcasting
>>> isinstance(OPS["Add"].batch, Broadcasting), OPS["Sum"].batch.__name__
(True, '_batch_reduce')
"""

from __future__ import annotations

__all__ = ["NO_RULE", "PARTIAL_RULE"]

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
