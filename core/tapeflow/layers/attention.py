"""Attention layers: MultiHeadAttention (the Transformer's), Attention (dot-product,
Luong style) and AdditiveAttention (Bahdanau style).

``MultiHeadAttention(num_heads, key_dim)`` projects the query, key and value with one
``[features, num_heads, key_dim]`` kernel each (``query/kernel``, ``key/kernel``,
``value/kernel``, with ``[num_heads, key_dim]`` biases), attends over the sequence
axis with a softmax of the scaled dot products and projects the heads back with
``attention_output/kernel`` (``[num_heads, value_dim, output features]``). Called as
``mha(query, value, key=None, attention_mask=None, return_attention_scores=False,
training=None, use_causal_mask=False)``; ``key`` defaults to ``value``.

>>> import tapeflow as tf
>>> tf.keras.backend.clear_session()    # automatic names start again
>>> mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
>>> x = tf.ones([3, 5, 8])
>>> y, scores = mha(x, x, return_attention_scores=True)
>>> y.shape, scores.shape
(TensorShape([3, 5, 8]), TensorShape([3, 2, 5, 5]))
>>> [v.name for v in mha.variables][:2]
['multi_head_attention/query/kernel:0', 'multi_head_attention/query/bias:0']

``Attention`` and ``AdditiveAttention`` take ``[query, value]`` or ``[query, value,
key]`` (``[batch, Tq, dim]``, ``[batch, Tv, dim]``) and ``mask=[query_mask,
value_mask]`` (booleans, ``[batch, Tq]`` and ``[batch, Tv]``):

>>> att = tf.keras.layers.Attention()
>>> q, v = tf.ones([2, 3, 4]), tf.ones([2, 6, 4])
>>> out, w = att([q, v], return_attention_scores=True)
>>> out.shape, w.shape, round(float(w[0, 0, 0]), 4)
(TensorShape([2, 3, 4]), TensorShape([2, 3, 6]), 0.1667)
"""

from __future__ import annotations

import math as _pymath

import numpy as np

from ..errors import InvalidArgumentError
from .. import ops as _a
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops import reductions as _red
from ..ops.linalg import matmul as _matmul
from ..runtime import dispatch as _dispatch_mod
from ..runtime import tensor as _tensor_mod
from .base import Layer, get_mask
from .core import ConfigMixin, check_constraints, large_negative

__all__ = ["MultiHeadAttention", "Attention", "AdditiveAttention"]


def _shape_of(x):
    return None if x is None else list(x.shape)


def _tensor(x, like=None):
    if x is None or type(x) is _tensor_mod.Tensor:
        return x
    if hasattr(x, "read_value"):
        return x.read_value()
    return _dispatch_mod.convert_to_tensor(x)


def _as_bool_mask(mask, who):
    mask = _tensor(mask)
    if mask is None:
        return None
    if mask.dtype.name != "bool":
        mask = _m.not_equal(mask, 0)
    return mask


def _causal(tq, tv):
    """The ``[tq, tv]`` lower-triangular mask (position i attends to j <= i)."""
    return _dispatch_mod.convert_to_tensor(np.tril(np.ones((tq, tv), dtype=bool)))


def _masked_softmax(scores, mask):
    """``softmax(scores)`` over the last axis with ``scores`` where ``mask`` is False
    pushed to a large negative value (a fully masked row: uniform weights)."""
    if mask is not None:
        scores = _a.where(mask, scores, _m.cast(large_negative(scores.dtype), scores.dtype))
    return _nn.softmax(scores, axis=-1)


class MultiHeadAttention(ConfigMixin, Layer):
    """Multi-head attention (the Transformer's): ``num_heads`` heads of ``key_dim``
    features each for the query and key (``value_dim``, default ``key_dim``, for the
    value), ``dropout`` on the attention weights in training, ``use_bias``,
    ``output_shape`` (default: the query's last dimension), ``attention_axes`` (default:
    every axis but the batch and the features), ``kernel_initializer``
    (glorot_uniform), ``bias_initializer`` (zeros) and the regularizers.

    ``attention_mask``: booleans ``[batch, T, S]`` (True: the query position may
    attend to that key position; broadcast over the heads); ``use_causal_mask``: each
    position attends to itself and the positions before it only.
    """

    _config_keys = ("num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape",
                    "attention_axes", "kernel_initializer", "bias_initializer",
                    "kernel_regularizer", "bias_regularizer")

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
                 output_shape=None, attention_axes=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 seed=None, name=None, **kwargs):
        super().__init__(name=name, activity_regularizer=activity_regularizer, **kwargs)
        check_constraints(kernel_constraint, bias_constraint)
        for what, v in (("num_heads", num_heads), ("key_dim", key_dim),
                        ("value_dim", key_dim if value_dim is None else value_dim)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise InvalidArgumentError(
                    f"MultiHeadAttention: {what} must be a positive integer, got {v!r}")
        rate = float(dropout)
        if not 0.0 <= rate < 1.0:
            raise InvalidArgumentError(f"MultiHeadAttention: dropout must be in [0, 1), got "
                                       f"{dropout!r}")
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.value_dim = int(key_dim if value_dim is None else value_dim)
        self.dropout = rate
        self.use_bias = bool(use_bias)
        self.output_shape = output_shape
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        self.attention_axes = None if attention_axes is None else tuple(attention_axes)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.seed = seed

    supports_masking = True

    def _config_extra(self):
        return {"value_dim": self.value_dim}

    def _dense(self, prefix, shape, bias_shape):
        kernel = self.add_weight(f"{prefix}/kernel", shape, initializer=self.kernel_initializer,
                                 regularizer=self.kernel_regularizer)
        bias = None
        if self.use_bias:
            bias = self.add_weight(f"{prefix}/bias", bias_shape,
                                   initializer=self.bias_initializer,
                                   regularizer=self.bias_regularizer)
        return kernel, bias

    def build(self, input_shape):
        """Built on the first call from the query's, value's and key's shapes."""
        self.built = True           # (the weights need all three shapes: see _build)

    def _build(self, q_shape, v_shape, k_shape):
        d = self.__dict__
        h, kd, vd = self.num_heads, self.key_dim, self.value_dim
        out = self.output_shape
        if out is None:
            out_shape = [int(q_shape[-1])]
        elif isinstance(out, (int, np.integer)):
            out_shape = [int(out)]
        else:
            out_shape = [int(s) for s in out]
        self.query_kernel, self.query_bias = self._dense("query", [q_shape[-1], h, kd], [h, kd])
        self.key_kernel, self.key_bias = self._dense("key", [k_shape[-1], h, kd], [h, kd])
        self.value_kernel, self.value_bias = self._dense("value", [v_shape[-1], h, vd], [h, vd])
        self.output_kernel, self.output_bias = self._dense(
            "attention_output", [h, vd] + out_shape, out_shape)
        d["_out_shape"] = out_shape
        d["_built_shapes"] = (q_shape[-1], v_shape[-1], k_shape[-1])
        d["_input_device"] = self._own_device()

    def _check_inputs(self, query, value, key):
        for what, t in (("query", query), ("value", value), ("key", key)):
            if t is None or len(t.shape) < 3:
                raise InvalidArgumentError(
                    f"{self.name}: MultiHeadAttention needs a {what} of rank >= 3 ([batch, "
                    f"sequence..., features]), got shape {_shape_of(t)}; add a sequence axis "
                    "with tf.expand_dims(x, 1)")
        if len(value.shape) != len(query.shape) or key.shape[:-1] != value.shape[:-1]:
            raise InvalidArgumentError(
                f"{self.name}: query {_shape_of(query)}, value {_shape_of(value)} and key "
                f"{_shape_of(key)} must have one rank, and key and value the same shape but "
                "for the features (the last axis)")
        if query.shape[0] != value.shape[0]:
            raise InvalidArgumentError(
                f"{self.name}: query {_shape_of(query)} and value {_shape_of(value)} must have "
                "the same batch size (the first axis)")
        if query.dtype != value.dtype or key.dtype != value.dtype:
            raise InvalidArgumentError(
                f"{self.name}: query, value and key must share one dtype, got "
                f"{query.dtype.name}, {value.dtype.name}, {key.dtype.name}")
        built = self.__dict__.get("_built_shapes")
        if built is not None and built != (query.shape[-1], value.shape[-1], key.shape[-1]):
            raise InvalidArgumentError(
                f"{self.name}: the layer was built for features (query, value, key) "
                f"{list(built)}, got {[query.shape[-1], value.shape[-1], key.shape[-1]]}; "
                "use a new layer for inputs of another width")

    def _flat_params(self, kernel, bias, scale=None):
        """``kernel`` as ``[features, heads * dim]`` and ``bias`` as ``[heads * dim]``
        (None without), both times ``scale`` where given (the query's ``1/sqrt(key_dim)``
        folded into its projection: a small weight scaled, not the projected batch)."""
        k = self._read(kernel)
        ks = k.shape
        k = _a.reshape(k, [ks[0], ks[1] * ks[2]])
        b = None if bias is None else _a.reshape(self._read(bias), [-1])
        if scale is not None:
            k = _m.multiply(k, scale)
            b = None if b is None else _m.multiply(b, scale)
        return k, b

    def _heads(self, y, s, dim):
        """``[batch * seq, heads * dim]`` -> ``[batch, seq, heads, dim]`` (a view)."""
        return _a.reshape(y, [s[0], s[1], self.num_heads, dim])

    def _project(self, x, kernel, bias, scale=None):
        """``x @ kernel + bias`` as ``[batch, seq, heads, dim]`` (one matmul of the rows of
        ``x`` and the kernel flattened to ``[features, heads * dim]``)."""
        k, b = self._flat_params(kernel, bias, scale)
        s = x.shape
        y = _matmul(_a.reshape(x, [-1, s[-1]]), k)
        if b is not None:
            y = y + b
        return self._heads(y, s, kernel.shape[2])

    def _project_self(self, x, scale):
        """Self-attention (query, key and value one tensor): the three projections as one
        matmul with the kernels side by side, split after (as one GEMM backwards too)."""
        pairs = [self._flat_params(self.query_kernel, self.query_bias, scale),
                 self._flat_params(self.key_kernel, self.key_bias),
                 self._flat_params(self.value_kernel, self.value_bias)]
        s = x.shape
        y = _matmul(_a.reshape(x, [-1, s[-1]]), _a.concat([k for k, _ in pairs], axis=1))
        if self.use_bias:
            y = y + _a.concat([b for _, b in pairs], axis=0)
        hk, hv = self.num_heads * self.key_dim, self.num_heads * self.value_dim
        q, k, v = _a.split(y, [hk, hk, hv], axis=1)
        return (self._heads(q, s, self.key_dim), self._heads(k, s, self.key_dim),
                self._heads(v, s, self.value_dim))

    def _flatten_axes(self, x):
        """``x`` ``[batch, d1, ..., dn, features]`` as ``[batch', seq, features]``: the
        attention axes become one sequence axis, the others join the batch. Returns
        ``(x', undo)``: undo maps a ``[batch', seq, f]`` result back."""
        nd = len(x.shape)
        inner = list(range(1, nd - 1))
        att = (inner if self.attention_axes is None
               else sorted(a % nd for a in self.attention_axes))
        if any(a not in inner for a in att):
            raise InvalidArgumentError(
                f"{self.name}: attention_axes {list(self.attention_axes)} must name axes "
                f"between the batch and the features of an input of rank {nd}")
        if nd == 3 and att == [1]:
            return x, None
        others = [a for a in inner if a not in att]
        perm = [0] + others + att + [nd - 1]
        xt = _a.transpose(x, perm)
        ts = list(xt.shape)
        nb = int(np.prod(ts[:1 + len(others)]))
        return _a.reshape(xt, [nb, -1, ts[-1]]), (perm, ts)

    def _unflatten(self, y, info):
        perm, ts = info
        y = _a.reshape(y, ts[:-1] + [y.shape[-1]])
        return _a.transpose(y, list(np.argsort(perm)))

    def call(self, query, value, key=None, attention_mask=None, return_attention_scores=False,
             training=None, use_causal_mask=False):
        implicit = (get_mask(query), get_mask(value), get_mask(value if key is None else key))
        same = value is query
        query = _tensor(query)
        value = query if same else self._autocast(_tensor(value))
        key = value if key is None else self._autocast(_tensor(key))
        self._check_inputs(query, value, key)
        attention_mask = self._implicit_mask(attention_mask, *implicit)
        if "_built_shapes" not in self.__dict__:
            self._build(query.shape, value.shape, key.shape)
        info = None
        if len(query.shape) != 3 or self.attention_axes not in (None, (1,), (-2,)):
            if attention_mask is not None or use_causal_mask:
                raise InvalidArgumentError(
                    f"{self.name}: attention_mask and use_causal_mask need inputs of rank 3 "
                    f"attending over axis 1; got query {_shape_of(query)}, attention_axes "
                    f"{self.attention_axes}")
            query, info = self._flatten_axes(query)
            value, _ = self._flatten_axes(value)
            key, _ = self._flatten_axes(key)
        scale = 1.0 / _pymath.sqrt(self.key_dim)
        if query is value and key is value:
            q, k, v = self._project_self(query, scale)
        else:
            q = self._project(query, self.query_kernel, self.query_bias, scale)
            k = self._project(key, self.key_kernel, self.key_bias)
            v = self._project(value, self.value_kernel, self.value_bias)
        sshape = [q.shape[0], self.num_heads, q.shape[1], k.shape[1]]   # [B, H, T, S]
        mask = self._mask(attention_mask, use_causal_mask, sshape)
        if training and self.dropout > 0.0:
            ctx, weights = self._attend_with_dropout(q, k, v, mask)
        else:       # one op each way (the scale is in the query's projection already)
            ctx, weights = _nn.dot_product_attention(q, k, v, mask, scale=1.0)
        s = ctx.shape                                          # [batch, T, heads, dv]
        ctx = _a.reshape(ctx, [s[0] * s[1], s[2] * s[3]])
        wo = self._read(self.output_kernel)
        out_shape = self._out_shape
        n_out = int(np.prod(out_shape))
        out = _matmul(ctx, _a.reshape(wo, [s[2] * s[3], n_out]))
        if self.output_bias is not None:
            out = out + _a.reshape(self._read(self.output_bias), [-1])
        out = _a.reshape(out, [s[0], s[1]] + out_shape)
        if info is not None:
            out = self._unflatten(out, info)
        if return_attention_scores:
            return out, weights
        return out

    def _attend_with_dropout(self, q, k, v, mask):
        """Attention with dropout on its weights (training): ``(context [batch, T,
        heads, dv], weights before dropout)``, with ordinary ops."""
        qt, kt, vt = (_a.transpose(x, [0, 2, 1, 3]) for x in (q, k, v))
        weights = _masked_softmax(_matmul(qt, kt, transpose_b=True), mask)
        probs = _nn.dropout(weights, rate=self.dropout, seed=self.seed)
        return _a.transpose(_matmul(probs, vt), [0, 2, 1, 3]), weights

    @staticmethod
    def _implicit_mask(attention_mask, q_mask, v_mask, k_mask):
        """``attention_mask`` and Keras's implicit masks (``Embedding(mask_zero=True)``,
        ``Masking``) of the query (``[batch, T]``), value and key (``[batch, S]``)."""
        if q_mask is None and v_mask is None and k_mask is None:
            return attention_mask
        mask = None if attention_mask is None else _as_bool_mask(attention_mask, "")
        for m, axis in ((q_mask, -1), (v_mask, -2), (k_mask, -2)):
            if m is not None:
                m = _a.expand_dims(_as_bool_mask(m, ""), axis)
                mask = m if mask is None else _m.logical_and(mask, m)
        return mask

    def _mask(self, attention_mask, use_causal_mask, sshape):
        b, _, t, s = sshape
        mask = None
        if attention_mask is not None:
            mask = _as_bool_mask(attention_mask, self.name)
            ms = list(mask.shape)
            if len(ms) == 2:
                ms = [1] + ms
                mask = _a.reshape(mask, ms)
            if len(ms) != 3 or ms[0] not in (1, b) or ms[1] not in (1, t) or ms[2] not in (1, s):
                raise InvalidArgumentError(
                    f"{self.name}: attention_mask must have shape [batch, T, S] = "
                    f"{[b, t, s]} (or broadcast to it), got {list(mask.shape)}")
            mask = _a.expand_dims(mask, 1)                    # the heads
        if use_causal_mask:
            c = _causal(t, s)
            mask = c if mask is None else _m.logical_and(mask, c)
        return mask


# --- Attention, AdditiveAttention ---------------------------------------------------------

class _BaseDenseAttention(ConfigMixin, Layer):
    """``[query, value(, key)]`` -> ``softmax(scores(query, key)) @ value``."""

    _config_keys = ("dropout",)

    def _convert_input(self, x):
        """A list's items one by one (NumPy arrays of one shape are not stacked)."""
        if isinstance(x, (list, tuple)):
            return [self._autocast(e) if isinstance(e, _tensor_mod.Tensor)
                    else Layer._convert_input(self, e) for e in x]
        return Layer._convert_input(self, x)

    def __init__(self, dropout=0.0, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        rate = float(dropout)
        if not 0.0 <= rate < 1.0:
            raise InvalidArgumentError(f"{type(self).__name__}: dropout must be in [0, 1), "
                                       f"got {dropout!r}")
        self.dropout = rate
        self.seed = seed

    def _split(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) not in (2, 3):
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} takes a list [query, value] or [query, "
                f"value, key], got {type(inputs).__name__}")
        q, v = _tensor(inputs[0]), _tensor(inputs[1])
        k = v if len(inputs) == 2 else _tensor(inputs[2])
        for what, t in (("query", q), ("value", v), ("key", k)):
            if len(t.shape) != 3:
                raise InvalidArgumentError(
                    f"{self.name}: the {what} must have rank 3 ([batch, steps, dim]), got "
                    f"shape {_shape_of(t)}")
        if k.shape[:2] != v.shape[:2] or q.shape[0] != v.shape[0]:
            raise InvalidArgumentError(
                f"{self.name}: query {_shape_of(q)}, value {_shape_of(v)} and key "
                f"{_shape_of(k)}: the batch sizes must match, and key and value the steps")
        return q, v, k

    def build(self, input_shape):
        self.built = True

    supports_masking = True

    def compute_mask(self, inputs, mask=None):
        """The output's mask is the query's (Keras)."""
        if isinstance(mask, (list, tuple)):
            return mask[0] if mask else None
        return None

    def call(self, inputs, mask=None, training=None, return_attention_scores=False,
             use_causal_mask=False):
        q, v, k = self._split(inputs)
        if not self._params_built:
            self._build_params(q.shape, k.shape)
        scores = self._scores(q, k)                           # [batch, Tq, Tv]
        q_mask = v_mask = None
        if mask is not None:
            if not isinstance(mask, (list, tuple)) or len(mask) not in (1, 2, 3):
                raise InvalidArgumentError(
                    f"{self.name}: mask must be a list [query_mask, value_mask], got "
                    f"{type(mask).__name__}")
            q_mask = _as_bool_mask(mask[0], self.name)
            v_mask = _as_bool_mask(mask[1], self.name) if len(mask) > 1 else None
        full = None
        if v_mask is not None:
            if list(v_mask.shape) != [v.shape[0], v.shape[1]]:
                raise InvalidArgumentError(
                    f"{self.name}: the value mask must have shape [batch, Tv] = "
                    f"{[v.shape[0], v.shape[1]]}, got {_shape_of(v_mask)}")
            full = _a.expand_dims(v_mask, 1)
        if use_causal_mask:
            c = _causal(q.shape[1], v.shape[1])
            full = c if full is None else _m.logical_and(full, c)
        weights = _masked_softmax(scores, full)
        probs = weights
        if training and self.dropout > 0.0:
            probs = _nn.dropout(weights, rate=self.dropout, seed=self.seed)
        out = _matmul(probs, v)
        if q_mask is not None:
            if list(q_mask.shape) != [q.shape[0], q.shape[1]]:
                raise InvalidArgumentError(
                    f"{self.name}: the query mask must have shape [batch, Tq] = "
                    f"{[q.shape[0], q.shape[1]]}, got {_shape_of(q_mask)}")
            out = _m.multiply(out, _m.cast(_a.expand_dims(q_mask, -1), out.dtype))
        if return_attention_scores:
            return out, weights
        return out

    _params_built = False


class Attention(_BaseDenseAttention):
    """Dot-product attention: ``scores = query @ key^T`` (times a trainable scalar
    ``scale``, initially 1, with ``use_scale=True``); ``score_mode="concat"``:
    ``scores = concat_score_weight * sum(tanh(query_i + key_j))`` (``scale`` inside the
    tanh with ``use_scale``). ``dropout`` on the weights in training."""

    _config_keys = ("use_scale", "score_mode", "dropout")

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, name=None,
                 **kwargs):
        super().__init__(dropout=dropout, seed=seed, name=name, **kwargs)
        if score_mode not in ("dot", "concat"):
            raise InvalidArgumentError(f"Attention: score_mode must be 'dot' or 'concat', got "
                                       f"{score_mode!r}")
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        self.scale = self.concat_score_weight = None

    def _build_params(self, q_shape, k_shape):
        if self.use_scale:
            self.scale = self.add_weight("scale", [], initializer="ones")
        if self.score_mode == "concat":
            self.concat_score_weight = self.add_weight("concat_score_weight", [],
                                                       initializer="ones")
        self.__dict__["_params_built"] = True
        self.__dict__["_input_device"] = self._own_device()

    def _scores(self, q, k):
        if self.score_mode == "dot":
            s = _matmul(q, k, transpose_b=True)
            return s if self.scale is None else _m.multiply(s, self._read(self.scale))
        z = _m.add(_a.expand_dims(q, 2), _a.expand_dims(k, 1))
        if self.scale is not None:
            z = _m.multiply(z, self._read(self.scale))
        return _m.multiply(_red.reduce_sum(_m.tanh(z), axis=-1),
                           self._read(self.concat_score_weight))


class AdditiveAttention(_BaseDenseAttention):
    """Additive (Bahdanau) attention: ``scores = sum(scale * tanh(query_i + key_j))``
    with a trainable ``scale`` of ``[dim]`` (``use_scale=True``, glorot_uniform);
    ``dropout`` on the weights in training."""

    _config_keys = ("use_scale", "dropout")

    def __init__(self, use_scale=True, dropout=0.0, seed=None, name=None, **kwargs):
        super().__init__(dropout=dropout, seed=seed, name=name, **kwargs)
        self.use_scale = bool(use_scale)
        self.scale = None

    def _build_params(self, q_shape, k_shape):
        if q_shape[-1] != k_shape[-1]:
            raise InvalidArgumentError(
                f"{self.name}: query and key must have the same last dimension, got "
                f"{list(q_shape)} and {list(k_shape)}")
        if self.use_scale:
            self.scale = self.add_weight("scale", [int(q_shape[-1])],
                                         initializer="glorot_uniform")
        self.__dict__["_params_built"] = True
        self.__dict__["_input_device"] = self._own_device()

    def _scores(self, q, k):
        t = _m.tanh(_m.add(_a.expand_dims(q, 2), _a.expand_dims(k, 1)))
        if self.scale is not None:
            t = _m.multiply(t, self._read(self.scale))
        return _red.reduce_sum(t, axis=-1)
