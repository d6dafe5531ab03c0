"""Recurrent networks: cells (one time step) and layers (a whole sequence).

Long file: the recurrent family in one place -- TF 1's ``tf.nn.rnn_cell`` cells and
``dynamic_rnn``/``static_rnn``, Keras's cells and layers (``RNN``, ``LSTM``, ``GRU``,
``SimpleRNN``, ``Bidirectional``, ``TimeDistributed``) and the time loop they all share
(eager, unrolled or a ``tf.while_loop``); the sections depend on each other's cells.

**Cells** compute one step: ``output, new_state = cell(inputs, state)``.

* TF 1 (``tf.nn.rnn_cell``): :class:`BasicRNNCell`, :class:`BasicLSTMCell`,
  ``LSTMCell`` (:class:`LSTMCellV1`: peepholes, ``cell_clip``, ``num_proj``),
  ``GRUCell`` (:class:`GRUCellV1`), :class:`MultiRNNCell`, :class:`DropoutWrapper`, with
  ``state_size``, ``output_size`` and ``zero_state(batch_size, dtype)``; an LSTM's state is
  an :class:`LSTMStateTuple` ``(c, h)``.
* Keras (``tf.keras.layers``): :class:`LSTMCell`, :class:`GRUCell`,
  :class:`SimpleRNNCell`, :class:`StackedRNNCells`; their state is a list (``[h, c]``
  for the LSTM).

**Layers** run a cell over ``[batch, time, features]``: :class:`RNN` (any cell),
:class:`LSTM`, :class:`GRU`, :class:`SimpleRNN`, :class:`Bidirectional`,
:class:`TimeDistributed`; and TF 1's functions ``dynamic_rnn``, ``static_rnn``,
``bidirectional_dynamic_rnn``.

Where the math is the fused ops' (:mod:`tapeflow.ops.fused`: ``lstm_cell``,
``lstm_sequence``, ``gru_cell``, ``gru_sequence``), they are used: an LSTM or GRU cell
step is one op, and an ``LSTM``/``GRU`` layer called without a mask and without
recurrent dropout is one op for the whole sequence (as is ``dynamic_rnn`` over a plain
LSTM cell). Everything else (peepholes, projections, TF 1's GRU, ``reset_after=False``,
other activations, masks) is composed from ordinary ops, step by step. Inside
``tf.function`` the step loop is traced as a ``tf.while_loop`` (``unroll=True``:
unrolled). docs/recurrent.md tells the whole story.

>>> import tapeflow as tf
>>> tf.keras.backend.clear_session()
>>> lstm = tf.keras.layers.LSTM(4, return_sequences=True, return_state=True)
>>> seq, h, c = lstm(tf.ones([2, 3, 5]))
>>> seq.shape, h.shape, c.shape
(TensorShape([2, 3, 4]), TensorShape([2, 4]), TensorShape([2, 4]))
>>> [v.name for v in lstm.variables]
['lstm/lstm_cell/kernel:0', 'lstm/lstm_cell/recurrent_kernel:0', 'lstm/lstm_cell/bias:0']
>>> cell = tf.nn.rnn_cell.BasicLSTMCell(3)
>>> state = cell.zero_state(2, tf.float32)
>>> out, state = cell(tf.ones([2, 4]), state)
>>> out.shape, type(state).__name__
(TensorShape([2, 3]), 'LSTMStateTuple')
"""

from __future__ import annotations

import collections
import inspect

import numpy as np

from .. import dtypes as _dt
from .. import nest
from .. import ops as _a
from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops import fused as _fused
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops import random as _r
from ..ops.linalg import matmul as _matmul
from ..runtime import context as _rctx
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..ops.ragged import RaggedTensor
from ..tracing import init_scope
from ..tracing.control_flow import while_loop
from . import activations as _act
from . import core as _core_layers
from . import initializers as _init
from .base import Layer, _takes_training, unique_layer_name, weight_scope

__all__ = ["LSTMStateTuple", "RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCellV1",
           "GRUCellV1", "MultiRNNCell", "DropoutWrapper", "LSTMBlockCell",
           "SimpleRNNCell", "LSTMCell", "GRUCell", "StackedRNNCells", "RNN", "SimpleRNN",
           "LSTM", "GRU", "Bidirectional", "TimeDistributed", "dynamic_rnn", "static_rnn",
           "bidirectional_dynamic_rnn", "rnn_cell", "contrib_rnn", "orthogonal"]


# --- helpers ---------------------------------------------------------------------------------

def _tracing():
    """Whether this thread is tracing a ``tf.function`` (the loop becomes a while_loop)."""
    return _rctx.thread_tracer.tracer is not None


def _t(x, dtype=None):
    if isinstance(x, Variable):
        x = x.read_value()
    t = x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=dtype)
    if dtype is not None and t.dtype != _dt.as_dtype(dtype):
        t = _m.cast(t, dtype)
    return t


def _desc(x):
    return f"shape {list(x.shape)}, dtype {x.dtype.name}, on {x.device}"


def _flat_sizes(size):
    """The state sizes of ``state_size`` as a flat list of ints."""
    if isinstance(size, (list, tuple)):
        out = []
        for s in size:
            out.extend(_flat_sizes(s))
        return out
    return [int(size)]


def _zeros(batch, size, dtype):
    return _a.zeros([int(batch), int(size)], dtype=dtype)


class _ShapeOnly:
    """What ``Layer._build_on_call`` reads: an input's ``shape``."""

    def __init__(self, shape):
        self.shape = tuple(shape)


def _build(layer, shape):
    if not layer.built:
        layer._build_on_call(_ShapeOnly(shape))


def _init_get(identifier):
    """An initializer: tapeflow's (names, callables), plus ``"orthogonal"``."""
    if isinstance(identifier, str) and identifier.lower() == "orthogonal":
        try:
            return _init.get(identifier)
        except InvalidArgumentError:
            return orthogonal
    return _init.get(identifier)


def orthogonal(shape, dtype=None, gain=1.0):
    """The ``"orthogonal"`` initializer (Keras's default for recurrent kernels): a
    random matrix with orthonormal rows or columns, scaled by ``gain``.

    >>> import numpy as np
    >>> w = orthogonal([4, 4]).numpy()
    >>> bool(np.allclose(w @ w.T, np.eye(4), atol=1e-5))
    True
    """
    shape = tuple(int(s) for s in shape)
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    cols = shape[-1]
    with init_scope():          # (made once, eagerly, even inside a traced function)
        a = _r.random_normal([max(rows, cols), min(rows, cols)], dtype=_dt.float32).numpy()
    q, r = np.linalg.qr(a.astype(np.float64))
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    q = (gain * q[:rows, :cols]).reshape(shape)
    return convert_to_tensor(q.astype(np.float32), dtype=dtype or _dt.float32)


def _serialize_init(init):
    if init is None or isinstance(init, str):
        return init
    get_config = getattr(init, "get_config", None)
    if get_config is not None:
        return _init.serialize(init)
    return init


def _deserialize_init(init):
    if isinstance(init, dict) and "class_name" in init:
        from_config = getattr(_init, init["class_name"], None)
        if from_config is None:
            raise InvalidArgumentError(f"Unknown initializer config {init!r}")
        return from_config(**init.get("config", {}))
    return init


def _check_no_constraints(**cs):
    bad = [k for k, v in cs.items() if v is not None]
    if bad:
        raise NotImplementedError(f"weight constraints are not supported ({', '.join(bad)})")


def _is(fn, name):
    """Whether activation ``fn`` is the one called ``name`` (tanh, sigmoid)."""
    return fn is not None and getattr(fn, "__name__", None) == name


# --- TF 1 cells (tf.nn.rnn_cell) ------------------------------------------------------------

class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """The state of TF 1's LSTM cells: ``(c, h)`` -- the cell state, then the output."""

    __slots__ = ()

    @property
    def dtype(self):
        return self.c.dtype


class RNNCell(Layer):
    """TF 1's cell base (``tf.nn.rnn_cell.RNNCell``): ``call(inputs, state)`` returns
    ``(output, new_state)``; ``state_size`` and ``output_size`` describe them, and
    ``zero_state(batch_size, dtype)`` makes an all-zero state of the right structure."""

    _default_name = "rnn_cell"

    def __init__(self, trainable=True, name=None, dtype=None, reuse=None, **kwargs):
        super().__init__(trainable=trainable,
                         name=name or unique_layer_name(self._default_name), dtype=dtype,
                         **kwargs)

    @property
    def state_size(self):
        raise NotImplementedError(f"{type(self).__name__} does not define state_size")

    @property
    def output_size(self):
        raise NotImplementedError(f"{type(self).__name__} does not define output_size")

    def zero_state(self, batch_size, dtype=None):
        """Zeros in the structure of ``state_size``, each ``[batch_size, size]``."""
        dtype = _dt.as_dtype(dtype or self.dtype)
        return nest.map_structure(lambda s: _zeros(batch_size, s, dtype), self.state_size)

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        if inputs is not None:
            batch_size, dtype = inputs.shape[0], dtype or inputs.dtype
        return self.zero_state(batch_size, dtype)

    def __call__(self, inputs, state=None, scope=None, **kwargs):
        if state is None:
            raise InvalidArgumentError(f"{self.name}: a cell is called as cell(inputs, state); "
                                       "make a first state with cell.zero_state(batch, dtype)")
        return super().__call__(inputs, state, **kwargs)

    def _input_depth(self, input_shape, what="inputs"):
        if input_shape is None or len(input_shape) != 2 or input_shape[-1] is None:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} takes {what} of shape [batch, depth] "
                f"(one time step), got shape {None if input_shape is None else list(input_shape)}")
        return int(input_shape[-1])

    def _check_input(self, x):
        if len(x.shape) != 2 or x.shape[-1] != self._depth:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} was built for inputs [batch, "
                f"{self._depth}], got {_desc(x)}")

    def _check_state(self, s, size, batch, what="state"):
        s = _t(s)
        if tuple(s.shape) != (batch, size):
            raise InvalidArgumentError(
                f"{self.name}: {what} must have shape [{batch}, {size}] (batch, state size), "
                f"got {_desc(s)}; make one with cell.zero_state(batch_size, dtype)")
        return s


class BasicRNNCell(RNNCell):
    """``h = activation([x, h] @ kernel + bias)`` (``tf.nn.rnn_cell.BasicRNNCell``)."""

    _default_name = "basic_rnn_cell"

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self._num_units = int(num_units)
        self._activation = _act.get(activation) or _m.tanh

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, input_shape):
        self._depth = self._input_depth(input_shape)
        n = self._num_units
        self.kernel = self.add_weight("kernel", [self._depth + n, n])
        self.bias = self.add_weight("bias", [n], initializer="zeros")
        self.built = True

    def call(self, inputs, state):
        self._check_input(inputs)
        h = self._check_state(state, self._num_units, inputs.shape[0])
        z = _matmul(_a.concat([inputs, h], 1), self._read(self.kernel)) + self._read(self.bias)
        out = self._activation(z)
        return out, out


class BasicLSTMCell(RNNCell):
    """TF 1's LSTM cell (``tf.nn.rnn_cell.BasicLSTMCell``): one ``kernel``
    ``[depth + num_units, 4 * num_units]`` (gates in TF's order i, j, f, o) and a
    ``bias``; ``forget_bias`` is added to the forget gate. The state is an
    :class:`LSTMStateTuple` ``(c, h)`` (or ``[c, h]`` concatenated with
    ``state_is_tuple=False``). A step is one fused ``lstm_cell`` op."""

    _default_name = "basic_lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None,
                 reuse=None, name=None, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self._num_units = int(num_units)
        self._forget_bias = float(forget_bias)
        self._state_is_tuple = bool(state_is_tuple)
        self._activation = _act.get(activation) or _m.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    @property
    def output_size(self):
        return self._num_units

    def build(self, input_shape):
        self._depth = self._input_depth(input_shape)
        n = self._num_units
        self.kernel = self.add_weight("kernel", [self._depth + n, 4 * n])
        self.bias = self.add_weight("bias", [4 * n], initializer="zeros")
        self.built = True

    def _split_state(self, state, batch):
        n = self._num_units
        if self._state_is_tuple:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise InvalidArgumentError(
                    f"{self.name}: the state must be an LSTMStateTuple (c, h), got "
                    f"{type(state).__name__}; make one with cell.zero_state(batch, dtype)")
            return (self._check_state(state[0], n, batch, "state.c"),
                    self._check_state(state[1], n, batch, "state.h"))
        s = self._check_state(state, 2 * n, batch)
        return s[:, :n], s[:, n:]

    def _pack(self, c, h):
        return LSTMStateTuple(c, h) if self._state_is_tuple else _a.concat([c, h], 1)

    def _fusable(self):
        return _is(self._activation, "tanh")

    def _kernels(self):
        k = self._read(self.kernel)
        return k[:self._depth], k[self._depth:]

    def call(self, inputs, state):
        self._check_input(inputs)
        c, h = self._split_state(state, inputs.shape[0])
        if self._fusable():
            kx, kh = self._kernels()
            h2, c2 = _fused.lstm_cell(inputs, h, c, kx, kh, self._read(self.bias),
                                            forget_bias=self._forget_bias, gate_order="icfo")
            return h2, self._pack(c2, h2)
        z = _matmul(_a.concat([inputs, h], 1), self._read(self.kernel)) + self._read(self.bias)
        i, j, f, o = _a.split(z, 4, axis=1)
        act = self._activation
        c2 = _m.sigmoid(f + self._forget_bias) * c + _m.sigmoid(i) * act(j)
        h2 = _m.sigmoid(o) * act(c2)
        return h2, self._pack(c2, h2)


class LSTMCellV1(BasicLSTMCell):
    """TF 1's full LSTM cell (``tf.nn.rnn_cell.LSTMCell``): :class:`BasicLSTMCell`
    plus peepholes (``use_peepholes``: ``w_f_diag``, ``w_i_diag``, ``w_o_diag``),
    ``cell_clip`` (clip ``c``), a projection of the output (``num_proj``, ``proj_clip``)
    and ``initializer`` (of the kernels). Without those it is one fused op per step;
    with them the step is composed from ops. The state is ``(c, h)`` with ``h`` of size
    ``num_proj`` when projecting."""

    _default_name = "lstm_cell"

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None,
                 num_proj=None, proj_clip=None, num_unit_shards=None, num_proj_shards=None,
                 forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None, **kwargs):
        super().__init__(num_units, forget_bias=forget_bias, state_is_tuple=state_is_tuple,
                         activation=activation, name=name, dtype=dtype, **kwargs)
        if num_unit_shards is not None or num_proj_shards is not None:
            raise NotImplementedError("LSTMCell: sharded kernels (num_unit_shards, "
                                      "num_proj_shards) are not supported")
        self._use_peepholes = bool(use_peepholes)
        self._cell_clip = None if cell_clip is None else float(cell_clip)
        self._initializer = initializer
        self._num_proj = None if num_proj is None else int(num_proj)
        self._proj_clip = None if proj_clip is None else float(proj_clip)

    @property
    def state_size(self):
        n, p = self._num_units, self._num_proj or self._num_units
        return LSTMStateTuple(n, p) if self._state_is_tuple else n + p

    @property
    def output_size(self):
        return self._num_proj or self._num_units

    def build(self, input_shape):
        self._depth = self._input_depth(input_shape)
        n, p = self._num_units, self._num_proj or self._num_units
        init = self._initializer
        self.kernel = self.add_weight("kernel", [self._depth + p, 4 * n], initializer=init)
        self.bias = self.add_weight("bias", [4 * n], initializer="zeros")
        if self._use_peepholes:
            self.w_f_diag = self.add_weight("w_f_diag", [n], initializer=init)
            self.w_i_diag = self.add_weight("w_i_diag", [n], initializer=init)
            self.w_o_diag = self.add_weight("w_o_diag", [n], initializer=init)
        if self._num_proj is not None:
            self.proj_kernel = self.add_weight("projection/kernel", [n, self._num_proj],
                                               initializer=init)
        self.built = True

    def _split_state(self, state, batch):
        n, p = self._num_units, self._num_proj or self._num_units
        if self._state_is_tuple:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise InvalidArgumentError(
                    f"{self.name}: the state must be an LSTMStateTuple (c, h), got "
                    f"{type(state).__name__}; make one with cell.zero_state(batch, dtype)")
            return (self._check_state(state[0], n, batch, "state.c"),
                    self._check_state(state[1], p, batch, "state.h"))
        s = self._check_state(state, n + p, batch)
        return s[:, :n], s[:, n:]

    def _fusable(self):
        return (_is(self._activation, "tanh") and not self._use_peepholes
                and self._cell_clip is None and self._num_proj is None)

    def call(self, inputs, state):
        if self._fusable():
            return super().call(inputs, state)
        self._check_input(inputs)
        c, h = self._split_state(state, inputs.shape[0])
        z = _matmul(_a.concat([inputs, h], 1), self._read(self.kernel)) + self._read(self.bias)
        i, j, f, o = _a.split(z, 4, axis=1)
        act, fb = self._activation, self._forget_bias
        if self._use_peepholes:
            wf, wi, wo = (self._read(w) for w in (self.w_f_diag, self.w_i_diag, self.w_o_diag))
            c2 = _m.sigmoid(f + fb + wf * c) * c + _m.sigmoid(i + wi * c) * act(j)
        else:
            c2 = _m.sigmoid(f + fb) * c + _m.sigmoid(i) * act(j)
        if self._cell_clip is not None:
            c2 = _a.clip_by_value(c2, -self._cell_clip, self._cell_clip)
        if self._use_peepholes:
            m = _m.sigmoid(o + wo * c2) * act(c2)
        else:
            m = _m.sigmoid(o) * act(c2)
        if self._num_proj is not None:
            m = _matmul(m, self._read(self.proj_kernel))
            if self._proj_clip is not None:
                m = _a.clip_by_value(m, -self._proj_clip, self._proj_clip)
        return m, self._pack(c2, m)


class LSTMBlockCell(LSTMCellV1):
    """``tf.contrib.rnn.LSTMBlockCell``: :class:`LSTMCellV1` with its argument names
    (``use_peephole``)."""

    _default_name = "lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, cell_clip=None, use_peephole=False,
                 reuse=None, dtype=None, name=None, **kwargs):
        super().__init__(num_units, use_peepholes=use_peephole, cell_clip=cell_clip,
                         forget_bias=forget_bias, name=name, dtype=dtype, **kwargs)


class GRUCellV1(RNNCell):
    """TF 1's GRU cell (``tf.nn.rnn_cell.GRUCell``): ``gates/kernel`` ``[depth + n, 2n]``
    (reset, update; ``gates/bias`` starts at 1), ``candidate/kernel`` ``[depth + n, n]``;
    ``r, u = sigmoid([x, h] @ Wg + bg)``, ``c = act([x, r * h] @ Wc + bc)``,
    ``h' = u * h + (1 - u) * c`` (composed from ops: the reset gate is applied before
    the candidate's matmul, unlike the fused GRU op)."""

    _default_name = "gru_cell"

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None,
                 bias_initializer=None, name=None, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self._num_units = int(num_units)
        self._activation = _act.get(activation) or _m.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, input_shape):
        self._depth = self._input_depth(input_shape)
        n, d = self._num_units, self._depth
        ki, bi = self._kernel_initializer, self._bias_initializer
        self.gate_kernel = self.add_weight("gates/kernel", [d + n, 2 * n], initializer=ki)
        self.gate_bias = self.add_weight("gates/bias", [2 * n],
                                         initializer=1.0 if bi is None else bi)
        self.candidate_kernel = self.add_weight("candidate/kernel", [d + n, n], initializer=ki)
        self.candidate_bias = self.add_weight("candidate/bias", [n],
                                              initializer="zeros" if bi is None else bi)
        self.built = True

    def call(self, inputs, state):
        self._check_input(inputs)
        h = self._check_state(state, self._num_units, inputs.shape[0])
        g = _m.sigmoid(_matmul(_a.concat([inputs, h], 1), self._read(self.gate_kernel))
                       + self._read(self.gate_bias))
        r, u = _a.split(g, 2, axis=1)
        c = self._activation(_matmul(_a.concat([inputs, r * h], 1),
                                     self._read(self.candidate_kernel))
                             + self._read(self.candidate_bias))
        h2 = u * h + (1.0 - u) * c
        return h2, h2


class MultiRNNCell(RNNCell):
    """Cells stacked: each cell's output is the next one's input; the state is the
    tuple of the cells' states. Weights are named ``multi_rnn_cell/cell_<i>/...``."""

    _default_name = "multi_rnn_cell"

    def __init__(self, cells, state_is_tuple=True, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        cells = list(cells)
        if not cells:
            raise InvalidArgumentError("MultiRNNCell needs at least one cell")
        if not state_is_tuple:
            raise NotImplementedError("MultiRNNCell(state_is_tuple=False) is not supported")
        self.cells = cells

    @property
    def state_size(self):
        return tuple(c.state_size for c in self.cells)

    @property
    def output_size(self):
        return self.cells[-1].output_size

    def zero_state(self, batch_size, dtype=None):
        return tuple(c.zero_state(batch_size, dtype or self.dtype) for c in self.cells)

    def call(self, inputs, state):
        if not isinstance(state, (tuple, list)) or len(state) != len(self.cells):
            raise InvalidArgumentError(
                f"{self.name}: the state must be a tuple of {len(self.cells)} cell states, "
                f"got {type(state).__name__}; make one with cell.zero_state(batch, dtype)")
        x, new = inputs, []
        for i, (cell, s) in enumerate(zip(self.cells, state)):
            with weight_scope(f"{self.name}/cell_{i}"):
                x, s2 = cell(x, s)
            new.append(s2)
        return x, tuple(new)


class DropoutWrapper(RNNCell):
    """Dropout around a cell (TF 1: applied at every call; pass keep probabilities of 1
    for evaluation): on its inputs (``input_keep_prob``), outputs
    (``output_keep_prob``) and new state (``state_keep_prob``; an LSTM's ``c`` is kept
    whole, as TF 1's default filter does)."""

    _default_name = "dropout_wrapper"

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None, name=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        if variational_recurrent or dropout_state_filter_visitor is not None:
            raise NotImplementedError("DropoutWrapper: variational_recurrent and "
                                      "dropout_state_filter_visitor are not supported")
        for what, p in (("input_keep_prob", input_keep_prob),
                        ("output_keep_prob", output_keep_prob),
                        ("state_keep_prob", state_keep_prob)):
            if not 0.0 < float(p) <= 1.0:
                raise InvalidArgumentError(f"DropoutWrapper: {what} must be in (0, 1], got {p}")
        self.cell = cell
        self._keep = (float(input_keep_prob), float(output_keep_prob), float(state_keep_prob))
        self._seed = seed

    @property
    def state_size(self):
        return self.cell.state_size

    @property
    def output_size(self):
        return self.cell.output_size

    def zero_state(self, batch_size, dtype=None):
        return self.cell.zero_state(batch_size, dtype)

    def _drop(self, x, keep):
        return x if keep >= 1.0 else _nn.dropout(x, rate=1.0 - keep, seed=self._seed)

    def call(self, inputs, state):
        ik, ok, sk = self._keep
        out, new = self.cell(self._drop(inputs, ik), state)
        if sk < 1.0:
            if isinstance(new, LSTMStateTuple):
                new = LSTMStateTuple(new.c, self._drop(new.h, sk))
            else:
                new = nest.map_structure(lambda s: self._drop(s, sk), new)
        return self._drop(out, ok), new


class _Namespace:
    """A namespace object (``tf.nn.rnn_cell``, ``tf.contrib.rnn``)."""

    def __init__(self, name, **items):
        self.__name__ = name
        self.__dict__.update(items)

    def __repr__(self):
        return f"<namespace {self.__name__}>"


# --- the time loop --------------------------------------------------------------------------

def _reverse_time(x, lengths=None):
    """``x`` ([time, batch, ...]) reversed along time; with ``lengths`` (host ints per
    batch entry) each sequence is reversed within its length (``tf.reverse_sequence``)."""
    if lengths is None:
        return x[::-1]
    steps, batch = x.shape[0], x.shape[1]
    t = np.arange(steps)[:, None]
    ln = np.asarray(lengths).reshape(1, batch)
    idx = np.where(t < ln, ln - 1 - t, t)
    b = np.broadcast_to(np.arange(batch)[None, :], (steps, batch))
    return _a.gather_nd(x, convert_to_tensor(np.stack([idx, b], -1).astype(np.int32)))


def _time_loop(step, x_tm, states, mask_tm=None, zero_output=False, use_while=False,
               out_size=None):
    """Run ``out, states = step(x_t, states)`` over ``x_tm`` ([time, batch, ...]; states
    a flat list of tensors). Where ``mask_tm`` ([time, batch], bool) is False the states
    are kept and the output is zeros (``zero_output``) or the previous output. Returns
    (outputs [time, batch, out], last output, final states). ``use_while``: as one
    ``tf.while_loop`` (what a traced function gets)."""
    steps = int(x_tm.shape[0])
    if steps == 0:
        raise InvalidArgumentError("recurrent layer: the input has no time steps (time "
                                   f"dimension 0 in shape {list(x_tm.shape)})")
    if use_while:
        return _while_time_loop(step, x_tm, states, mask_tm, zero_output, out_size)
    outs, prev = [], None
    for t in range(steps):
        out, new = step(x_tm[t], states)
        if mask_tm is not None:
            m = _a.expand_dims(mask_tm[t], -1)
            new = [_a.where(m, n, s) for n, s in zip(new, states)]
            if zero_output or prev is None:
                out = _a.where(m, out, _a.zeros_like(out))
            else:
                out = _a.where(m, out, prev)
        outs.append(out)
        prev, states = out, list(new)
    return _a.stack(outs, 0), outs[-1], states


def _while_time_loop(step, x_tm, states, mask_tm, zero_output, out_size):
    steps, batch = int(x_tm.shape[0]), int(x_tm.shape[1])
    dtype = x_tm.dtype
    if out_size is None:
        out_size = int(states[0].shape[-1])
    acc0 = _a.zeros([steps, batch, out_size], dtype=dtype)
    prev0 = _a.zeros([batch, out_size], dtype=dtype)

    masked = mask_tm is not None
    # the sequence (and mask) ride along as loop variables, so the loop is traced as one
    # while node whenever they depend on the traced function's arguments
    seqs = [x_tm, mask_tm] if masked else [x_tm]
    k = len(seqs)

    def cond(t, *_):
        return t < steps

    def body(t, acc, prev, *rest):
        xs, ss = rest[:k], list(rest[k:])
        out, new = step(_a.gather(xs[0], t), ss)
        if masked:
            m = _a.expand_dims(_a.gather(xs[1], t), -1)
            new = [_a.where(m, n, s) for n, s in zip(new, ss)]
            out = _a.where(m, out, _a.zeros_like(out) if zero_output else prev)
        sel = _a.reshape(_a.one_hot(t, steps, dtype=dtype), [steps, 1, 1])
        return (t + 1, acc + sel * _a.expand_dims(out, 0), out, *xs, *new)

    res = while_loop(cond, body, [convert_to_tensor(0), acc0, prev0, *seqs, *states])
    return res[1], res[2], list(res[3 + k:])


def _call_cell(cell, x, states, training):
    """A Keras-style cell's step: ``(output, [new states])``."""
    if _takes_training(type(cell)):
        out, new = cell.call(x, states, training=training)
    else:
        out, new = cell.call(x, states)
    if isinstance(new, (Tensor, Variable)):
        new = [new]
    return out, [_t(n) for n in nest.flatten(new)]


# --- Keras cells ------------------------------------------------------------------------------

class _KerasCell(Layer):
    """What the Keras cells share: regularizers, dropout masks (one per sequence, made
    at its first step, as Keras does), ``get_initial_state`` and ``get_config``."""

    _CONFIG = ()

    def _setup(self, units, activation, recurrent_activation, use_bias, kernel_initializer,
               recurrent_initializer, bias_initializer, kernel_regularizer,
               recurrent_regularizer, bias_regularizer, dropout, recurrent_dropout):
        units = int(units)
        if units <= 0:
            raise InvalidArgumentError(f"{type(self).__name__}: units must be a positive "
                                       f"integer, got {units}")
        self.units = units
        self.activation = _act.get(activation)
        self.recurrent_activation = _act.get(recurrent_activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _deserialize_init(kernel_initializer)
        self.recurrent_initializer = _deserialize_init(recurrent_initializer)
        self.bias_initializer = _deserialize_init(bias_initializer)
        self.kernel_regularizer = kernel_regularizer
        self.recurrent_regularizer = recurrent_regularizer
        self.bias_regularizer = bias_regularizer
        for what, p in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if not 0.0 <= float(p) < 1.0:
                raise InvalidArgumentError(f"{type(self).__name__}: {what} must be in [0, 1), "
                                           f"got {p}")
        self.dropout = float(dropout)
        self.recurrent_dropout = float(recurrent_dropout)
        self.__dict__["_masks"] = {}

    @property
    def output_size(self):
        return self.units

    def _weights(self, input_shape, gates, bias_shape, bias_init=None):
        if input_shape is None or input_shape[-1] is None:
            raise InvalidArgumentError(f"{self.name}: the inputs need a known last dimension, "
                                       f"got shape {input_shape}")
        self._depth = int(input_shape[-1])
        n = self.units
        self.kernel = self.add_weight("kernel", [self._depth, gates * n],
                                      initializer=_init_get(self.kernel_initializer),
                                      regularizer=self.kernel_regularizer)
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel", [n, gates * n], initializer=_init_get(self.recurrent_initializer),
            regularizer=self.recurrent_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", bias_shape,
                                        initializer=bias_init or _init_get(self.bias_initializer),
                                        regularizer=self.bias_regularizer)
        self.built = True

    def reset_dropout_mask(self):
        self._masks.clear()

    reset_recurrent_dropout_mask = reset_dropout_mask

    def _dropped(self, x, which, rate, training):
        """``x`` times this sequence's dropout mask (``which``: "x" or "h")."""
        if not training or rate == 0.0:
            return x
        m = self._masks.get(which)
        if m is None or tuple(m.shape) != tuple(x.shape):
            m = _nn.dropout(_a.ones_like(x), rate=rate)
            self._masks[which] = m
        return x * m

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        if inputs is not None:
            batch_size, dtype = inputs.shape[0], dtype or inputs.dtype
        dtype = _dt.as_dtype(dtype or self.dtype)
        sizes = _flat_sizes(self.state_size)
        states = [_zeros(batch_size, s, dtype) for s in sizes]
        return states if isinstance(self.state_size, (list, tuple)) else states[0]

    def _states(self, states, n):
        if isinstance(states, (Tensor, Variable)):
            states = [states]
        states = [_t(s) for s in nest.flatten(states)]
        if len(states) != n:
            raise InvalidArgumentError(f"{self.name}: expected {n} state tensor(s), got "
                                       f"{len(states)}")
        return states

    def _check_input(self, x):
        if len(x.shape) != 2 or x.shape[-1] != self._depth:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} was built for inputs [batch, "
                f"{self._depth}], got {_desc(x)}")

    def get_config(self):
        cfg = {**super().get_config(), "units": self.units,
               "activation": _act.serialize(self.activation),
               "use_bias": self.use_bias,
               "kernel_initializer": _serialize_init(self.kernel_initializer),
               "recurrent_initializer": _serialize_init(self.recurrent_initializer),
               "bias_initializer": _serialize_init(self.bias_initializer),
               "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout}
        if "recurrent_activation" in self._CONFIG:
            cfg["recurrent_activation"] = _act.serialize(self.recurrent_activation)
        for k in self._CONFIG:
            if k != "recurrent_activation":
                cfg[k] = getattr(self, k)
        return cfg


class SimpleRNNCell(_KerasCell):
    """``h = activation(x @ kernel + h @ recurrent_kernel + bias)``
    (``tf.keras.layers.SimpleRNNCell``)."""

    def __init__(self, units, activation="tanh", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        _check_no_constraints(kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint)
        self._setup(units, activation, None, use_bias, kernel_initializer,
                    recurrent_initializer, bias_initializer, kernel_regularizer,
                    recurrent_regularizer, bias_regularizer, dropout, recurrent_dropout)

    @property
    def state_size(self):
        return self.units

    def build(self, input_shape):
        self._weights(input_shape, 1, [self.units])

    def call(self, inputs, states, training=None):
        self._check_input(inputs)
        (h,) = self._states(states, 1)
        x = self._dropped(inputs, "x", self.dropout, training)
        hd = self._dropped(h, "h", self.recurrent_dropout, training)
        z = _matmul(x, self._read(self.kernel)) + _matmul(hd, self._read(self.recurrent_kernel))
        if self.bias is not None:
            z = z + self._read(self.bias)
        out = z if self.activation is None else self.activation(z)
        return out, [out]


class LSTMCell(_KerasCell):
    """Keras's LSTM cell (``tf.keras.layers.LSTMCell``): ``kernel`` ``[depth, 4 units]``,
    ``recurrent_kernel`` ``[units, 4 units]``, ``bias`` ``[4 units]``, gates in the order
    i, f, c, o; ``unit_forget_bias`` starts the forget gate's bias at 1. The state is
    ``[h, c]``. With the default activations (tanh, sigmoid) a step is one fused
    ``lstm_cell`` op, dropout included."""

    _CONFIG = ("recurrent_activation", "unit_forget_bias", "implementation")

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, implementation=2, **kwargs):
        super().__init__(**kwargs)
        _check_no_constraints(kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint)
        self._setup(units, activation, recurrent_activation, use_bias, kernel_initializer,
                    recurrent_initializer, bias_initializer, kernel_regularizer,
                    recurrent_regularizer, bias_regularizer, dropout, recurrent_dropout)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.implementation = int(implementation)

    @property
    def state_size(self):
        return [self.units, self.units]

    def _bias_init(self):
        if not self.unit_forget_bias:
            return None
        n, base = self.units, _init_get(self.bias_initializer)

        def init(shape, dtype=None):
            b = [_t(base([n], dtype=dtype)) for _ in range(3)]
            return _a.concat([b[0], _a.ones([n], dtype=b[0].dtype), b[1], b[2]], 0)
        return init

    def build(self, input_shape):
        self._weights(input_shape, 4, [4 * self.units], self._bias_init())

    def fusable(self):
        """Whether the fused ops compute this cell (the default activations)."""
        return _is(self.activation, "tanh") and _is(self.recurrent_activation, "sigmoid")

    def call(self, inputs, states, training=None):
        self._check_input(inputs)
        h, c = self._states(states, 2)
        x = self._dropped(inputs, "x", self.dropout, training)
        hd = self._dropped(h, "h", self.recurrent_dropout, training)
        k, r = self._read(self.kernel), self._read(self.recurrent_kernel)
        b = None if self.bias is None else self._read(self.bias)
        if self.fusable():
            h2, c2 = _fused.lstm_cell(x, hd, c, k, r, b, gate_order="ifco")
            return h2, [h2, c2]
        z = _matmul(x, k) + _matmul(hd, r)
        if b is not None:
            z = z + b
        i, f, cc, o = _a.split(z, 4, axis=1)
        act, ract = self.activation or _identity, self.recurrent_activation or _identity
        c2 = ract(f) * c + ract(i) * act(cc)
        h2 = ract(o) * act(c2)
        return h2, [h2, c2]


def _identity(x):
    return x


class GRUCell(_KerasCell):
    """Keras's GRU cell (``tf.keras.layers.GRUCell``): gates z, r, h in ``kernel``
    ``[depth, 3 units]`` and ``recurrent_kernel``; ``reset_after=True`` (TF 2's default,
    cuDNN's form: ``bias`` ``[2, 3 units]``, the reset gate applied after the recurrent
    matmul) is one fused ``gru_cell`` op per step; ``reset_after=False`` (``bias``
    ``[3 units]``, reset before the matmul) is composed from ops. The state is ``[h]``."""

    _CONFIG = ("recurrent_activation", "reset_after", "implementation")

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, implementation=2,
                 reset_after=True, **kwargs):
        super().__init__(**kwargs)
        _check_no_constraints(kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint)
        self._setup(units, activation, recurrent_activation, use_bias, kernel_initializer,
                    recurrent_initializer, bias_initializer, kernel_regularizer,
                    recurrent_regularizer, bias_regularizer, dropout, recurrent_dropout)
        self.reset_after = bool(reset_after)
        self.implementation = int(implementation)

    @property
    def state_size(self):
        return self.units

    def build(self, input_shape):
        n = self.units
        self._weights(input_shape, 3, [2, 3 * n] if self.reset_after else [3 * n])

    def fusable(self, training=None):
        """Whether the fused ops compute this cell (reset_after, default activations,
        no recurrent dropout in training)."""
        return (self.reset_after and _is(self.activation, "tanh")
                and _is(self.recurrent_activation, "sigmoid")
                and not (training and self.recurrent_dropout > 0.0))

    def _biases(self):
        if self.bias is None:
            return None, None
        b = self._read(self.bias)
        return (b[0], b[1]) if self.reset_after else (b, None)

    def call(self, inputs, states, training=None):
        self._check_input(inputs)
        (h,) = self._states(states, 1)
        x = self._dropped(inputs, "x", self.dropout, training)
        k, r = self._read(self.kernel), self._read(self.recurrent_kernel)
        bx, bh = self._biases()
        if self.fusable(training):
            h2 = _fused.gru_cell(x, h, k, r, bx, bh, gate_order="zrh")
            return h2, [h2]
        hd = self._dropped(h, "h", self.recurrent_dropout, training)
        act, ract = self.activation or _identity, self.recurrent_activation or _identity
        xz = _matmul(x, k)
        if bx is not None:
            xz = xz + bx
        xz_z, xz_r, xz_h = _a.split(xz, 3, axis=1)
        n = self.units
        if self.reset_after:
            hz = _matmul(hd, r)
            if bh is not None:
                hz = hz + bh
            hz_z, hz_r, hz_h = _a.split(hz, 3, axis=1)
            z, rr = ract(xz_z + hz_z), ract(xz_r + hz_r)
            hh = act(xz_h + rr * hz_h)
        else:
            hz = _matmul(hd, r[:, :2 * n])
            hz_z, hz_r = _a.split(hz, 2, axis=1)
            z, rr = ract(xz_z + hz_z), ract(xz_r + hz_r)
            hh = act(xz_h + _matmul(rr * hd, r[:, 2 * n:]))
        h2 = z * h + (1.0 - z) * hh
        return h2, [h2]


class StackedRNNCells(Layer):
    """Keras cells stacked into one cell (``tf.keras.layers.StackedRNNCells``; an
    ``RNN`` given a list of cells makes one). Its states are the cells' states in order,
    flattened."""

    def __init__(self, cells, **kwargs):
        super().__init__(**kwargs)
        cells = list(cells)
        if not cells:
            raise InvalidArgumentError("StackedRNNCells needs at least one cell")
        for c in cells:
            if not hasattr(c, "state_size") or not hasattr(c, "call"):
                raise InvalidTypeError(f"StackedRNNCells: {c!r} is not an RNN cell (it needs "
                                       "call(inputs, states) and state_size)")
        self.cells = cells

    @property
    def state_size(self):
        return tuple(c.state_size for c in self.cells)

    @property
    def output_size(self):
        last = self.cells[-1]
        return getattr(last, "output_size", None) or _flat_sizes(last.state_size)[0]

    def build(self, input_shape):
        shape = tuple(input_shape)
        for c in self.cells:
            _build(c, shape)
            out = getattr(c, "output_size", None) or _flat_sizes(c.state_size)[0]
            shape = shape[:-1] + (int(out),)
        self.built = True

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        out = []
        for c in self.cells:
            s = _initial_state(c, inputs, batch_size, dtype)
            out.extend(s)
        return out

    def reset_dropout_mask(self):
        for c in self.cells:
            if hasattr(c, "reset_dropout_mask"):
                c.reset_dropout_mask()

    def call(self, inputs, states, training=None):
        states = [_t(s) for s in nest.flatten(states)]
        x, new, i = inputs, [], 0
        for c in self.cells:
            k = len(_flat_sizes(c.state_size))
            x, s2 = _call_cell(c, x, states[i:i + k], training)
            new.extend(s2)
            i += k
        return x, new

    def get_config(self):
        return {**super().get_config(),
                "cells": [{"class_name": type(c).__name__, "config": c.get_config()}
                          for c in self.cells]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["cells"] = [_cell_from(c, custom_objects) for c in config["cells"]]
        return cls(**config)


def _initial_state(cell, inputs=None, batch_size=None, dtype=None):
    """A cell's zero state as a flat list."""
    get = getattr(cell, "get_initial_state", None)
    if get is not None:
        s = get(inputs=inputs, batch_size=batch_size, dtype=dtype)
    else:
        if inputs is not None:
            batch_size, dtype = inputs.shape[0], dtype or inputs.dtype
        s = [_zeros(batch_size, n, dtype) for n in _flat_sizes(cell.state_size)]
    return [_t(x) for x in nest.flatten(s)]


def _cell_from(cfg, custom_objects=None):
    if isinstance(cfg, Layer):
        return cfg
    name = cfg.get("class_name")
    cls = (custom_objects or {}).get(name) or _KERAS_CLASSES.get(name)
    if cls is None:
        raise InvalidArgumentError(f"from_config: unknown cell class {name!r}; pass it in "
                                   "custom_objects={name: class}")
    from_config = getattr(cls, "from_config", None)
    if from_config is not None and "custom_objects" in inspect.signature(from_config).parameters:
        return from_config(cfg["config"], custom_objects=custom_objects)
    return cls.from_config(cfg["config"])


# --- Keras layers --------------------------------------------------------------------------

_RNN_ARGS = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll",
             "time_major", "zero_output_for_mask")


class RNN(Layer):
    """A cell over a sequence (``tf.keras.layers.RNN``). ``cell``: a Keras cell or a
    list of them (stacked). Input ``[batch, time, features]`` (``time_major``: ``[time,
    batch, features]``). ``return_sequences``: every step's output, else the last;
    ``return_state``: also the final states (``[output, *states]``); ``go_backwards``:
    process the sequence in reverse (the returned sequence is in processing order);
    ``stateful``: each call starts from the previous call's final states
    (``reset_states()`` zeros them); ``unroll``: inside ``tf.function`` unroll the loop
    instead of a ``tf.while_loop``. Call with ``mask`` (``[batch, time]`` booleans, or
    the mask an ``Embedding(mask_zero=True)``/``Masking`` layer attached), ``training``
    and ``initial_state``. At a masked step the states are carried over and the output
    is the previous output (zeros with ``zero_output_for_mask=True``)."""

    supports_masking = True

    def __init__(self, cell, return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, unroll=False, time_major=False, zero_output_for_mask=False,
                 **kwargs):
        if isinstance(cell, (list, tuple)):
            cell = StackedRNNCells(cell)
        if not hasattr(cell, "call") or not hasattr(cell, "state_size"):
            raise InvalidTypeError(f"RNN: cell must have call(inputs, states) and state_size, "
                                   f"got {cell!r}")
        for k in ("input_length", "input_dim"):
            kwargs.pop(k, None)
        super().__init__(**kwargs)
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful = bool(stateful)
        self.unroll = bool(unroll)
        self.time_major = bool(time_major)
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self.__dict__["_state_vars"] = None

    # the cell's arguments, read through the layer (Keras's lstm.units ...)
    def __getattr__(self, name):
        d = self.__dict__
        cell = d.get("cell") or d.get("_tracked", {}).get("cell")
        if cell is not None and not name.startswith("_") and name in getattr(
                type(self), "_CELL_ARGS", ()):
            return getattr(cell, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __call__(self, *args, **kwargs):
        if args and isinstance(args[0], RaggedTensor) and not self.time_major:
            # ragged sequences (issue 47): padded to the longest, masked past each row's end
            x = args[0]
            if kwargs.get("mask") is None:
                kwargs["mask"] = RaggedTensor.from_row_splits(
                    _a.ones([int(x.values.shape[0])], _dt.bool_), x.row_splits,
                    validate=False).to_tensor(False)
            args = (x.to_tensor(),) + args[1:]
        return super().__call__(*args, **kwargs)

    def _check_input(self, shape):
        if shape is None or len(shape) != 3:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} takes inputs of rank 3 ("
                f"{'[time, batch, features]' if self.time_major else '[batch, time, features]'}"
                f"), got shape {None if shape is None else list(shape)}")

    def _build_on_call(self, inputs):
        if isinstance(inputs, Tensor) and len(inputs.shape) != 3:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} takes inputs of rank 3 ("
                f"{'[time, batch, features]' if self.time_major else '[batch, time, features]'}"
                f"), got {_desc(inputs)}")
        super()._build_on_call(inputs)

    def build(self, input_shape):
        self._check_input(input_shape)
        batch = input_shape[1] if self.time_major else input_shape[0]
        with weight_scope(self.name):
            _build(self.cell, (batch, input_shape[-1]))
        self.built = True

    @property
    def states(self):
        sv = self._state_vars
        return None if sv is None else [v.read_value() for v in sv]

    def reset_states(self, states=None):
        """Zero the states of a ``stateful`` layer (or set them to ``states``)."""
        if not self.stateful:
            raise InvalidArgumentError(f"{self.name}: reset_states() needs stateful=True")
        sv = self._state_vars
        if sv is None:
            return
        if states is None:
            for v in sv:
                v.assign(_a.zeros_like(v.read_value()))
            return
        states = [_t(s) for s in nest.flatten(states)]
        if len(states) != len(sv):
            raise InvalidArgumentError(f"{self.name}: reset_states got {len(states)} states "
                                       f"for {len(sv)}")
        for v, s in zip(sv, states):
            v.assign(s)

    def _initial(self, x, batch, initial_state):
        sizes = _flat_sizes(self.cell.state_size)
        if initial_state is not None:
            states = [_t(s, x.dtype) for s in nest.flatten(initial_state)]
            if len(states) != len(sizes):
                raise InvalidArgumentError(
                    f"{self.name}: initial_state has {len(states)} tensor(s), the cell has "
                    f"{len(sizes)} state(s) of sizes {sizes}")
            for i, (s, n) in enumerate(zip(states, sizes)):
                if tuple(s.shape) != (batch, n):
                    raise InvalidArgumentError(
                        f"{self.name}: initial_state[{i}] must have shape [{batch}, {n}] "
                        f"(batch, state size), got {_desc(s)}")
            return states
        if self.stateful:
            sv = self._state_vars
            if sv is None:
                sv = [Variable(_zeros(batch, n, x.dtype), trainable=False,
                               name=f"{self.name}/state_{i}") for i, n in enumerate(sizes)]
                self.__dict__["_state_vars"] = sv
            elif tuple(sv[0].shape)[0] != batch:
                raise InvalidArgumentError(
                    f"{self.name}: a stateful layer keeps its batch size ({sv[0].shape[0]}), "
                    f"got a batch of {batch}; call reset_states() on a new layer")
            return [v.read_value() for v in sv]
        return _initial_state(self.cell, batch_size=batch, dtype=x.dtype)

    def _mask_tm(self, mask, batch, steps):
        if mask is None:
            return None
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
            if mask is None:
                return None
        m = _t(mask)
        if m.dtype != _dt.bool_:
            m = _m.cast(m, _dt.bool_)
        if tuple(m.shape) != (batch, steps):
            raise InvalidArgumentError(
                f"{self.name}: mask must have shape [batch, time] = [{batch}, {steps}], got "
                f"{_desc(m)}")
        return _a.transpose(m, [1, 0])

    def _fused_sequence(self, x_tm, states, training):
        """The whole sequence as one op (LSTM, GRU); None: use the cell loop."""
        return None

    def call(self, inputs, mask=None, training=None, initial_state=None):
        x = inputs
        self._check_input(tuple(x.shape))
        steps, batch = (x.shape[0], x.shape[1]) if self.time_major else (x.shape[1], x.shape[0])
        depth = getattr(self.cell, "_depth", None)
        if depth is not None and x.shape[-1] != depth:
            raise InvalidArgumentError(f"{self.name}: built for {depth} features per step, got "
                                       f"inputs with {_desc(x)}")
        states = self._initial(x, batch, initial_state)
        if hasattr(self.cell, "reset_dropout_mask"):
            self.cell.reset_dropout_mask()
        x_tm = x if self.time_major else _a.transpose(x, [1, 0, 2])
        if training and isinstance(self.cell, _KerasCell):    # this call's masks, made once
            self.cell._dropped(x_tm[0], "x", self.cell.dropout, training)
            self.cell._dropped(states[0], "h", self.cell.recurrent_dropout, training)
        mask_tm = self._mask_tm(mask, batch, steps)
        res = None if mask_tm is not None else self._fused_sequence(x_tm, states, training)
        if res is None:
            if self.go_backwards:
                x_tm = x_tm[::-1]
                mask_tm = None if mask_tm is None else mask_tm[::-1]
            cell = self.cell
            res = _time_loop(lambda xt, ss: _call_cell(cell, xt, ss, training), x_tm, states,
                             mask_tm, self.zero_output_for_mask,
                             use_while=_tracing() and not self.unroll,
                             out_size=getattr(cell, "output_size", None))
        outputs, last, new_states = res
        if self.stateful:
            for v, s in zip(self._state_vars, new_states):
                v.assign(s)
        if self.return_sequences:
            out = outputs if self.time_major else _a.transpose(outputs, [1, 0, 2])
        else:
            out = last
        if self.return_state:
            return [out] + list(new_states)
        return out

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        return mask if self.return_sequences else None

    def get_config(self):
        cfg = super().get_config()
        cfg.update({k: getattr(self, k) for k in _RNN_ARGS})
        cfg["cell"] = {"class_name": type(self.cell).__name__, "config": self.cell.get_config()}
        return cfg

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["cell"] = _cell_from(config["cell"], custom_objects)
        return cls(**config)


class _GatedRNN(RNN):
    """What LSTM, GRU and SimpleRNN share: the cell made from the layer's arguments, and
    ``get_config`` as one flat dict (the cell's arguments and the layer's)."""

    _CELL = None
    _CELL_NAME = None
    _CELL_ARGS = ("units", "activation", "recurrent_activation", "use_bias",
                  "kernel_initializer", "recurrent_initializer", "bias_initializer",
                  "kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
                  "dropout", "recurrent_dropout", "unit_forget_bias", "reset_after",
                  "implementation")

    def __init__(self, cell_kwargs, rnn_kwargs):
        layer_kw = {k: rnn_kwargs.pop(k) for k in list(rnn_kwargs)
                    if k in ("name", "dtype", "trainable", "input_shape", "batch_input_shape",
                             "input_dim", "input_length")}
        if "input_dim" in layer_kw or "input_length" in layer_kw:
            layer_kw["input_shape"] = (layer_kw.pop("input_length", None),
                                       layer_kw.pop("input_dim", None))
        cell = self._CELL(name=self._CELL_NAME, dtype=layer_kw.get("dtype"),
                          trainable=layer_kw.get("trainable", True), **cell_kwargs)
        super().__init__(cell, **rnn_kwargs, **layer_kw)

    def get_config(self):
        cfg = super().get_config()
        cell_cfg = cfg.pop("cell")["config"]
        for k in ("name", "trainable", "dtype"):
            cell_cfg.pop(k, None)
        cfg.update(cell_cfg)
        return cfg

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)

    def _fusable_sequence(self, training):
        cell = self.cell
        return (cell.fusable() if isinstance(cell, LSTMCell) else cell.fusable(training)) and not (
            training and cell.recurrent_dropout > 0.0)


class SimpleRNN(_GatedRNN):
    """A fully connected RNN layer (``tf.keras.layers.SimpleRNN``): :class:`SimpleRNNCell`
    over the sequence."""

    _CELL = SimpleRNNCell
    _CELL_NAME = "simple_rnn_cell"

    def __init__(self, units, activation="tanh", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, **kwargs):
        if activity_regularizer is not None:
            raise NotImplementedError("activity_regularizer is not supported")
        super().__init__(dict(units=units, activation=activation, use_bias=use_bias,
                              kernel_initializer=kernel_initializer,
                              recurrent_initializer=recurrent_initializer,
                              bias_initializer=bias_initializer,
                              kernel_regularizer=kernel_regularizer,
                              recurrent_regularizer=recurrent_regularizer,
                              bias_regularizer=bias_regularizer,
                              kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint, dropout=dropout,
                              recurrent_dropout=recurrent_dropout), kwargs)


class LSTM(_GatedRNN):
    """The LSTM layer (``tf.keras.layers.LSTM``): :class:`LSTMCell` over the sequence.
    Without a mask, with the default activations and no recurrent dropout in training,
    a call is one fused ``lstm_sequence`` op (the input transposed to time-major once);
    otherwise the cell runs step by step (each step one fused ``lstm_cell`` op when the
    activations allow). Weights: ``<name>/lstm_cell/kernel:0``, ``recurrent_kernel``,
    ``bias``."""

    _CELL = LSTMCell
    _CELL_NAME = "lstm_cell"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, implementation=2, **kwargs):
        if activity_regularizer is not None:
            raise NotImplementedError("activity_regularizer is not supported")
        super().__init__(dict(units=units, activation=activation,
                              recurrent_activation=recurrent_activation, use_bias=use_bias,
                              kernel_initializer=kernel_initializer,
                              recurrent_initializer=recurrent_initializer,
                              bias_initializer=bias_initializer,
                              unit_forget_bias=unit_forget_bias,
                              kernel_regularizer=kernel_regularizer,
                              recurrent_regularizer=recurrent_regularizer,
                              bias_regularizer=bias_regularizer,
                              kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint, dropout=dropout,
                              recurrent_dropout=recurrent_dropout,
                              implementation=implementation), kwargs)

    def _fused_sequence(self, x_tm, states, training):
        cell = self.cell
        if not self._fusable_sequence(training):
            return None
        h0, c0 = states
        if training and cell.dropout > 0.0:
            x_tm = x_tm * _a.expand_dims(_nn.dropout(_a.ones_like(x_tm[0]), rate=cell.dropout), 0)
        if self.go_backwards:
            x_tm = x_tm[::-1]
        k, r = cell._read(cell.kernel), cell._read(cell.recurrent_kernel)
        b = None if cell.bias is None else cell._read(cell.bias)
        outs, h, c = _fused.lstm_sequence(x_tm, h0, c0, k, r, b, gate_order="ifco")
        return outs, h, [h, c]


class GRU(_GatedRNN):
    """The GRU layer (``tf.keras.layers.GRU``): :class:`GRUCell` over the sequence. With
    ``reset_after=True`` (the default), the default activations, no mask and no
    recurrent dropout in training, a call is one fused ``gru_sequence`` op."""

    _CELL = GRUCell
    _CELL_NAME = "gru_cell"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, implementation=2, reset_after=True, **kwargs):
        if activity_regularizer is not None:
            raise NotImplementedError("activity_regularizer is not supported")
        super().__init__(dict(units=units, activation=activation,
                              recurrent_activation=recurrent_activation, use_bias=use_bias,
                              kernel_initializer=kernel_initializer,
                              recurrent_initializer=recurrent_initializer,
                              bias_initializer=bias_initializer,
                              kernel_regularizer=kernel_regularizer,
                              recurrent_regularizer=recurrent_regularizer,
                              bias_regularizer=bias_regularizer,
                              kernel_constraint=kernel_constraint,
                              recurrent_constraint=recurrent_constraint,
                              bias_constraint=bias_constraint, dropout=dropout,
                              recurrent_dropout=recurrent_dropout,
                              implementation=implementation, reset_after=reset_after), kwargs)

    def _fused_sequence(self, x_tm, states, training):
        cell = self.cell
        if not self._fusable_sequence(training):
            return None
        (h0,) = states
        if training and cell.dropout > 0.0:
            x_tm = x_tm * _a.expand_dims(_nn.dropout(_a.ones_like(x_tm[0]), rate=cell.dropout), 0)
        if self.go_backwards:
            x_tm = x_tm[::-1]
        k, r = cell._read(cell.kernel), cell._read(cell.recurrent_kernel)
        bx, bh = cell._biases()
        outs, h = _fused.gru_sequence(x_tm, h0, k, r, bx, bh, gate_order="zrh")
        return outs, h, [h]


_MERGE_MODES = ("concat", "sum", "mul", "ave", None)


class Bidirectional(Layer):
    """A recurrent layer run both ways (``tf.keras.layers.Bidirectional``): a copy of
    ``layer`` forwards (``forward_<name>``) and one with ``go_backwards`` flipped
    (``backward_<name>``, or ``backward_layer``), whose output sequence is reversed back
    to input order; ``merge_mode``: ``"concat"`` (default), ``"sum"``, ``"mul"``,
    ``"ave"`` or None (a list of both)."""

    supports_masking = True

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if not isinstance(layer, RNN):
            raise InvalidTypeError(f"Bidirectional needs a recurrent layer (RNN, LSTM, GRU, "
                                   f"SimpleRNN), got {layer!r}")
        if merge_mode not in _MERGE_MODES:
            raise InvalidArgumentError(f"Bidirectional: merge_mode must be one of "
                                       f"{list(_MERGE_MODES)}, got {merge_mode!r}")
        if weights is not None:
            raise NotImplementedError("Bidirectional(weights=...) is not supported; use "
                                      "set_weights after the first call")
        super().__init__(**kwargs)
        self.forward_layer = self._copy(layer, "forward_" + layer.name, layer.go_backwards)
        if backward_layer is None:
            backward_layer = self._copy(layer, "backward_" + layer.name, not layer.go_backwards)
        elif backward_layer.go_backwards == layer.go_backwards:
            raise InvalidArgumentError("Bidirectional: backward_layer must have go_backwards "
                                       f"different from the forward layer's ({layer.go_backwards})")
        self.backward_layer = backward_layer
        self.merge_mode = merge_mode
        self.return_sequences = layer.return_sequences
        self.return_state = layer.return_state

    @staticmethod
    def _copy(layer, name, go_backwards):
        cfg = layer.get_config()
        cfg["name"], cfg["go_backwards"] = name, go_backwards
        return type(layer).from_config(cfg)

    def build(self, input_shape):
        with weight_scope(self.name):
            _build(self.forward_layer, input_shape)
            _build(self.backward_layer, input_shape)
        self.built = True

    def call(self, inputs, mask=None, training=None, initial_state=None):
        fw_state = bw_state = None
        if initial_state is not None:
            flat = nest.flatten(initial_state)
            half = len(flat) // 2
            fw_state, bw_state = flat[:half], flat[half:]
        y_f = self.forward_layer(inputs, mask=mask, training=training, initial_state=fw_state)
        y_b = self.backward_layer(inputs, mask=mask, training=training, initial_state=bw_state)
        s_f = s_b = []
        if self.return_state:
            y_f, s_f = y_f[0], y_f[1:]
            y_b, s_b = y_b[0], y_b[1:]
        if self.return_sequences:
            y_b = y_b[::-1] if self.backward_layer.time_major else y_b[:, ::-1]
        mode = self.merge_mode
        if mode == "concat":
            y = _a.concat([y_f, y_b], -1)
        elif mode == "sum":
            y = y_f + y_b
        elif mode == "ave":
            y = (y_f + y_b) * 0.5
        elif mode == "mul":
            y = y_f * y_b
        else:
            y = [y_f, y_b]
        if self.return_state:
            return (y if isinstance(y, list) else [y]) + list(s_f) + list(s_b)
        return y

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        return mask if self.return_sequences else None

    def get_config(self):
        cfg = super().get_config()
        cfg["merge_mode"] = self.merge_mode
        lay = self.forward_layer
        lay_cfg = lay.get_config()      # (the wrapped layer's own name: the constructor
        lay_cfg["name"] = lay_cfg["name"].removeprefix("forward_")   # adds the prefix)
        cfg["layer"] = {"class_name": type(lay).__name__, "config": lay_cfg}
        bl = self.backward_layer
        cfg["backward_layer"] = {"class_name": type(bl).__name__, "config": bl.get_config()}
        return cfg

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["layer"] = _cell_from(config["layer"], custom_objects)
        if config.get("backward_layer") is not None:
            config["backward_layer"] = _cell_from(config["backward_layer"], custom_objects)
        return cls(**config)


class TimeDistributed(Layer):
    """Apply ``layer`` to every time step (``tf.keras.layers.TimeDistributed``): the
    input ``[batch, time, ...]`` is folded to ``[batch * time, ...]`` for one call of
    ``layer`` and unfolded after. A mask passes through."""

    supports_masking = True

    def __init__(self, layer, **kwargs):
        if not isinstance(layer, Layer):
            raise InvalidTypeError(f"TimeDistributed needs a Layer, got {layer!r}")
        super().__init__(**kwargs)
        self.layer = layer

    def build(self, input_shape):
        if input_shape is None or len(input_shape) < 3:
            raise InvalidArgumentError(
                f"{self.name}: TimeDistributed takes inputs of rank >= 3 ([batch, time, ...]), "
                f"got shape {None if input_shape is None else list(input_shape)}")
        self.built = True

    def call(self, inputs, training=None, mask=None):
        shape = list(inputs.shape)
        if len(shape) < 3:
            raise InvalidArgumentError(
                f"{self.name}: TimeDistributed takes inputs of rank >= 3 ([batch, time, ...]), "
                f"got {_desc(inputs)}")
        x = _a.reshape(inputs, [shape[0] * shape[1]] + shape[2:])
        y = self.layer(x) if training is None else self.layer(x, training=training)
        return _a.reshape(y, shape[:2] + list(y.shape[1:]))

    def get_config(self):
        return {**super().get_config(),
                "layer": {"class_name": type(self.layer).__name__,
                          "config": self.layer.get_config()}}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        lay = config["layer"]
        if isinstance(lay, dict):
            cls_ = (custom_objects or {}).get(lay["class_name"]) or _layer_class(lay["class_name"])
            config["layer"] = cls_.from_config(lay["config"])
        return cls(**config)


def _layer_class(name):
    cls = _KERAS_CLASSES.get(name)
    if cls is None:
        cls = getattr(_core_layers, name, None)
    if cls is None:
        raise InvalidArgumentError(f"from_config: unknown layer class {name!r}; pass it in "
                                   "custom_objects={name: class}")
    return cls


_KERAS_CLASSES = {c.__name__: c for c in (SimpleRNNCell, LSTMCell, GRUCell, StackedRNNCells,
                                          RNN, SimpleRNN, LSTM, GRU, Bidirectional,
                                          TimeDistributed)}


# --- TF 1's functions: dynamic_rnn, static_rnn, bidirectional_dynamic_rnn --------------------

def _host_lengths(sequence_length, batch):
    if sequence_length is None:
        return None
    ln = np.asarray(_t(sequence_length).numpy()).astype(np.int64).reshape(-1)
    if ln.shape != (batch,):
        raise InvalidArgumentError(f"dynamic_rnn: sequence_length must have one entry per "
                                   f"batch element ({batch}), got shape {list(ln.shape)}")
    return ln


def _fused_lstm_cell(cell):
    """Whether ``dynamic_rnn`` can run ``cell`` as one ``lstm_sequence`` op."""
    return (type(cell) in (BasicLSTMCell, LSTMCellV1, LSTMBlockCell) and cell._fusable()
            and cell._state_is_tuple)


def _dynamic_tm(cell, x_tm, state, lengths):
    """dynamic_rnn on time-major ``x_tm``: (outputs [time, batch, out], final state)."""
    steps, batch = int(x_tm.shape[0]), int(x_tm.shape[1])
    _build(cell, (batch, x_tm.shape[-1]))
    if lengths is None and _fused_lstm_cell(cell):
        c0, h0 = cell._split_state(state, batch)
        kx, kh = cell._kernels()
        outs, h, c = _fused.lstm_sequence(
            x_tm, h0, c0, kx, kh, cell._read(cell.bias), forget_bias=cell._forget_bias,
            gate_order="icfo")
        return outs, LSTMStateTuple(c, h)
    flat = [_t(s) for s in nest.flatten(state)]

    def step(xt, ss):
        out, new = cell(xt, nest.pack_sequence_as(state, ss))
        return out, [_t(s) for s in nest.flatten(new)]
    mask_tm = None
    if lengths is not None:
        mask_tm = convert_to_tensor(np.arange(steps)[:, None] < lengths[None, :])
    outs, _, final = _time_loop(step, x_tm, flat, mask_tm, zero_output=True,
                                use_while=_tracing(), out_size=_flat_sizes(cell.output_size)[0])
    return outs, nest.pack_sequence_as(state, final)


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """Run ``cell`` over ``inputs`` (``[batch, time, depth]``, or ``[time, batch, depth]``
    with ``time_major``); returns ``(outputs, final_state)``. ``sequence_length`` (one
    length per batch entry): steps past it output zeros and keep the state. Weights are
    created under ``scope`` (default ``"rnn"``). A plain LSTM cell without
    ``sequence_length`` runs as one fused ``lstm_sequence`` op.

    >>> import tapeflow as tf
    >>> cell = tf.nn.rnn_cell.GRUCell(3)
    >>> out, state = tf.nn.dynamic_rnn(cell, tf.ones([2, 4, 5]), dtype=tf.float32)
    >>> out.shape, state.shape
    (TensorShape([2, 4, 3]), TensorShape([2, 3]))
    """
    x = _t(inputs)
    if len(x.shape) != 3:
        raise InvalidArgumentError(f"dynamic_rnn: inputs must have rank 3 "
                                   f"([batch, time, depth]), got {_desc(x)}")
    x_tm = x if time_major else _a.transpose(x, [1, 0, 2])
    batch = int(x_tm.shape[1])
    if initial_state is None:
        if dtype is None and not x.dtype.is_floating:
            raise InvalidArgumentError("dynamic_rnn: give initial_state or dtype")
        initial_state = cell.zero_state(batch, dtype or x.dtype)
    lengths = _host_lengths(sequence_length, batch)
    with weight_scope(scope or "rnn"):
        outs, state = _dynamic_tm(cell, x_tm, initial_state, lengths)
    return (outs if time_major else _a.transpose(outs, [1, 0, 2])), state


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """``dynamic_rnn`` over a Python list of ``[batch, depth]`` inputs (one per step);
    returns ``(list of outputs, final_state)``."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise InvalidArgumentError("static_rnn: inputs must be a non-empty list of "
                                   "[batch, depth] tensors, one per time step")
    x_tm = _a.stack([_t(i) for i in inputs], 0)
    outs, state = dynamic_rnn(cell, x_tm, sequence_length=sequence_length,
                              initial_state=initial_state, dtype=dtype, time_major=True,
                              scope=scope)
    return _a.unstack(outs, axis=0), state


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None,
                              initial_state_fw=None, initial_state_bw=None, dtype=None,
                              parallel_iterations=None, swap_memory=False, time_major=False,
                              scope=None):
    """``cell_fw`` forwards and ``cell_bw`` over each sequence reversed (within its
    ``sequence_length``); returns ``((output_fw, output_bw), (state_fw, state_bw))``, both
    outputs in input order."""
    x = _t(inputs)
    if len(x.shape) != 3:
        raise InvalidArgumentError(f"bidirectional_dynamic_rnn: inputs must have rank 3, "
                                   f"got {_desc(x)}")
    x_tm = x if time_major else _a.transpose(x, [1, 0, 2])
    batch = int(x_tm.shape[1])
    lengths = _host_lengths(sequence_length, batch)
    dt = dtype or x.dtype
    s_fw = initial_state_fw if initial_state_fw is not None else cell_fw.zero_state(batch, dt)
    s_bw = initial_state_bw if initial_state_bw is not None else cell_bw.zero_state(batch, dt)
    base = scope or "bidirectional_rnn"
    with weight_scope(f"{base}/fw"):
        o_fw, st_fw = _dynamic_tm(cell_fw, x_tm, s_fw, lengths)
    with weight_scope(f"{base}/bw"):
        o_bw, st_bw = _dynamic_tm(cell_bw, _reverse_time(x_tm, lengths), s_bw, lengths)
    o_bw = _reverse_time(o_bw, lengths)
    if not time_major:
        o_fw, o_bw = _a.transpose(o_fw, [1, 0, 2]), _a.transpose(o_bw, [1, 0, 2])
    return (o_fw, o_bw), (st_fw, st_bw)


#: ``tf.nn.rnn_cell``
rnn_cell = _Namespace(
    "tf.nn.rnn_cell", RNNCell=RNNCell, BasicRNNCell=BasicRNNCell, BasicLSTMCell=BasicLSTMCell,
    LSTMCell=LSTMCellV1, GRUCell=GRUCellV1, MultiRNNCell=MultiRNNCell,
    DropoutWrapper=DropoutWrapper, LSTMStateTuple=LSTMStateTuple)

#: ``tf.contrib.rnn``
contrib_rnn = _Namespace(
    "tf.contrib.rnn", RNNCell=RNNCell, BasicRNNCell=BasicRNNCell, BasicLSTMCell=BasicLSTMCell,
    LSTMCell=LSTMCellV1, GRUCell=GRUCellV1, MultiRNNCell=MultiRNNCell,
    DropoutWrapper=DropoutWrapper, LSTMStateTuple=LSTMStateTuple, LSTMBlockCell=LSTMBlockCell,
    static_rnn=static_rnn)
