"""Helpers for the batching rules of ``tf.vectorized_map`` (the batch is dimension 0):
give every input the batch, fold it into an op's own batch dimension and back, align
leading dimensions. The rules of the array, linalg and nn modules use them;
``batch_coords`` (it concatenates) is in :mod:`tapeflow.ops.array_join`. Re-exported by
:mod:`tapeflow.ops.array`.
"""

from __future__ import annotations

import numpy as np

from .array_shape import reshape
from .reductions import broadcast_to

# --- batching helpers (tf.vectorized_map): the batch is dimension 0 ---------------------
# (here because they reshape and broadcast: the rules of linalg and nn use them too)

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
