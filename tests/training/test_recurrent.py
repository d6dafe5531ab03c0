"""Recurrent cells and layers (tapeflow.layers.recurrent): every cell and layer against a
NumPy reference of its equations (and PyTorch's nn.LSTM / nn.GRU with copied weights
where the math is the same), the fused paths against the step loop and the composite
ops (values and gradients), the Keras options (return_sequences, return_state,
go_backwards, stateful, masks, Bidirectional's merge modes, TimeDistributed), traced
against eager, weight names, get_config, checkpoints, opencl:0, and the errors for bad
input; TF 1's cells and dynamic_rnn / static_rnn / bidirectional_dynamic_rnn likewise.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.layers import base as layer_base
from tapeflow.layers.base import get_mask
from tapeflow.layers import recurrent as rec
from tapeflow.testing import conformance

RTOL, ATOL = 1e-4, 1e-5


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float64)


# --- NumPy references -------------------------------------------------------------------

def np_lstm(x, h, c, k, r, b, order="ifco", forget_bias=0.0, reverse=False):
    """x [B, T, I] batch-major; returns (outputs [B, T, H] in processing order, h, c)."""
    x = _np(x)
    hidden = h.shape[-1]
    outs = []
    steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
    for t in steps:
        z = x[:, t] @ k + h @ r + (0 if b is None else b)
        blocks = {g: z[:, i * hidden:(i + 1) * hidden] for i, g in enumerate(order)}
        c = _sig(blocks["f"] + forget_bias) * c + _sig(blocks["i"]) * np.tanh(blocks["c"])
        h = _sig(blocks["o"]) * np.tanh(c)
        outs.append(h)
    return np.stack(outs, 1), h, c


def np_gru(x, h, k, r, bx, bh, reset_after=True, reverse=False):
    x = _np(x)
    n = h.shape[-1]
    outs = []
    steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
    for t in steps:
        xz = x[:, t] @ k + bx
        if reset_after:
            hz = h @ r + bh
            z = _sig(xz[:, :n] + hz[:, :n])
            rr = _sig(xz[:, n:2 * n] + hz[:, n:2 * n])
            hh = np.tanh(xz[:, 2 * n:] + rr * hz[:, 2 * n:])
        else:
            z = _sig(xz[:, :n] + h @ r[:, :n])
            rr = _sig(xz[:, n:2 * n] + h @ r[:, n:2 * n])
            hh = np.tanh(xz[:, 2 * n:] + (rr * h) @ r[:, 2 * n:])
        h = z * h + (1 - z) * hh
        outs.append(h)
    return np.stack(outs, 1), h


def np_simple(x, h, k, r, b):
    x = _np(x)
    outs = []
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ k + h @ r + b)
        outs.append(h)
    return np.stack(outs, 1), h


def _w(layer_or_cell):
    return [_np(v) for v in layer_or_cell.variables]


def _x(b=3, t=5, i=4, seed=0):
    return np.random.default_rng(seed).standard_normal((b, t, i)).astype(np.float32)


def _close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)


@pytest.fixture(autouse=True)
def _fresh_names():
    tf.keras.backend.clear_session()
    yield


# --- Keras layers against NumPy ---------------------------------------------------------

def test_lstm_layer_matches_numpy_sequences_and_states():
    x = _x()
    layer = tf.keras.layers.LSTM(6, return_sequences=True, return_state=True)
    seq, h, c = layer(x)
    k, r, b = _w(layer)
    assert k.shape == (4, 24) and r.shape == (6, 24) and b.shape == (24,)
    np.testing.assert_array_equal(b[6:12], 1.0)          # unit_forget_bias
    z = np.zeros((3, 6))
    rs, rh, rc = np_lstm(x, z, z, k, r, b)
    _close(seq, rs)
    _close(h, rh)
    _close(c, rc)
    assert [v.name for v in layer.variables] == [
        "lstm/lstm_cell/kernel:0", "lstm/lstm_cell/recurrent_kernel:0", "lstm/lstm_cell/bias:0"]


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_layer_matches_numpy(reset_after):
    x = _x()
    layer = tf.keras.layers.GRU(5, return_sequences=True, reset_after=reset_after,
                                bias_initializer="glorot_uniform")
    seq = layer(x)
    k, r, b = _w(layer)
    if reset_after:
        assert b.shape == (2, 15)
        bx, bh = b[0], b[1]
    else:
        assert b.shape == (15,)
        bx, bh = b, None
    rs, _ = np_gru(x, np.zeros((3, 5)), k, r, bx, bh, reset_after)
    _close(seq, rs)


def test_simple_rnn_layer_matches_numpy_and_go_backwards():
    x = _x()
    layer = tf.keras.layers.SimpleRNN(4, return_sequences=True, go_backwards=True)
    seq = layer(x)
    k, r, b = _w(layer)
    rs, _ = np_simple(x[:, ::-1], np.zeros((3, 4)), k, r, b)
    _close(seq, rs)                       # processing order, as Keras returns it


def test_lstm_go_backwards_and_initial_state():
    x = _x()
    h0 = np.full((3, 4), 0.3, np.float32)
    c0 = np.full((3, 4), -0.2, np.float32)
    layer = tf.keras.layers.LSTM(4, go_backwards=True, return_sequences=True)
    seq = layer(x, initial_state=[h0, c0])
    k, r, b = _w(layer)
    rs, _, _ = np_lstm(x, h0, c0, k, r, b, reverse=True)
    _close(seq, rs)


# --- PyTorch with copied weights ------------------------------------------------------------

def test_lstm_and_gru_match_pytorch():
    torch = pytest.importorskip("torch")
    x = _x(2, 6, 3)
    lstm = tf.keras.layers.LSTM(5, return_sequences=True)
    y = lstm(x)
    k, r, b = _w(lstm)
    t = torch.nn.LSTM(3, 5, batch_first=True)
    with torch.no_grad():
        t.weight_ih_l0.copy_(torch.tensor(k.T))
        t.weight_hh_l0.copy_(torch.tensor(r.T))
        t.bias_ih_l0.copy_(torch.tensor(b))
        t.bias_hh_l0.zero_()
        ty, _ = t(torch.tensor(x))
    _close(y, ty.numpy())

    gru = tf.keras.layers.GRU(5, return_sequences=True, bias_initializer="glorot_uniform")
    y = gru(x)
    k, r, b = _w(gru)

    def rzn(m):                 # Keras z, r, h blocks -> PyTorch r, z, n
        z, rr, h = np.split(m, 3, axis=-1)
        return np.concatenate([rr, z, h], -1)
    g = torch.nn.GRU(3, 5, batch_first=True)
    with torch.no_grad():
        g.weight_ih_l0.copy_(torch.tensor(rzn(k).T))
        g.weight_hh_l0.copy_(torch.tensor(rzn(r).T))
        g.bias_ih_l0.copy_(torch.tensor(rzn(b[0])))
        g.bias_hh_l0.copy_(torch.tensor(rzn(b[1])))
        gy, _ = g(torch.tensor(x))
    _close(y, gy.numpy())


# --- fused paths against their slow twins ------------------------------------------------

def _grads(layer, x, **kw):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt, **kw)
        y = y[0] if isinstance(y, list) else y
        loss = tf.reduce_sum(y * y)
    gs = tape.gradient(loss, [xt] + layer.trainable_variables)
    return y, gs


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fused_sequence_equals_cell_loop_and_composite(kind, monkeypatch):
    """One fused sequence op, the step loop of fused cell ops (an all-True mask), and
    the composite ops (fused ops made unavailable) agree in values and gradients."""
    x = _x(2, 4, 3)
    cls = tf.keras.layers.LSTM if kind == "lstm" else tf.keras.layers.GRU
    layer = cls(4, return_sequences=True, bias_initializer="glorot_uniform")
    calls = []
    seq_name = f"{kind}_sequence"
    real = getattr(tf.ops.fused, seq_name)
    monkeypatch.setattr(tf.ops.fused, seq_name,
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    y1, g1 = _grads(layer, x)
    assert calls == [1]                            # one op for the whole sequence
    y2, g2 = _grads(layer, x, mask=np.ones((2, 4), bool))
    assert calls == [1]                            # the masked path steps the cell
    monkeypatch.setattr(layer.cell, "fusable", lambda *a: False)
    y3, g3 = _grads(layer, x)
    for y in (y2, y3):
        _close(y, y1)
    for gs in (g2, g3):
        for a, b in zip(gs, g1):
            _close(a, b, rtol=1e-4, atol=1e-5)


def test_lstm_uses_composite_ops_for_other_activations():
    x = _x(2, 3, 3)
    layer = tf.keras.layers.LSTM(3, recurrent_activation="hard_sigmoid", return_sequences=True)
    y = layer(x)
    k, r, b = _w(layer)

    def hs(v):
        return np.clip(0.2 * v + 0.5, 0, 1)
    h = c = np.zeros((2, 3))
    outs = []
    for t in range(3):
        z = x[:, t] @ k + h @ r + b
        i, f, cc, o = np.split(z, 4, -1)
        c = hs(f) * c + hs(i) * np.tanh(cc)
        h = hs(o) * np.tanh(c)
        outs.append(h)
    _close(y, np.stack(outs, 1), rtol=1e-3, atol=1e-3)


# --- masks ------------------------------------------------------------------------------------

def _np_masked(step, x, mask, h0, zero_output=False):
    h, prev, outs = h0, np.zeros_like(h0), []
    for t in range(x.shape[1]):
        hn = step(x[:, t], h)
        m = mask[:, t:t + 1]
        h = np.where(m, hn, h)
        out = np.where(m, hn, 0 if zero_output else prev)
        outs.append(out)
        prev = out
    return np.stack(outs, 1), h


def test_mask_argument_keeps_state_and_output():
    x = _x(3, 5, 2)
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    for zero in (False, True):
        layer = tf.keras.layers.SimpleRNN(3, return_sequences=True, return_state=True,
                                          zero_output_for_mask=zero)
        seq, h = layer(x, mask=mask)
        k, r, b = _w(layer)
        ref, rh = _np_masked(lambda xt, h: np.tanh(xt @ k + h @ r + b), x, mask,
                             np.zeros((3, 3)), zero)
        _close(seq, ref)
        _close(h, rh)


def test_embedding_mask_zero_reaches_the_lstm_in_sequential():
    ids = np.array([[4, 2, 0, 0], [1, 3, 5, 0]])
    emb = tf.keras.layers.Embedding(8, 3, mask_zero=True)
    lstm = tf.keras.layers.LSTM(2, return_sequences=True)
    model = tf.keras.Sequential([emb, lstm])
    y = model(ids)
    e = emb(ids)
    assert get_mask(e).numpy().tolist() == (ids != 0).tolist()
    k, r, b = _w(lstm)

    def step(xt, hc):
        h, c = hc[:, :2], hc[:, 2:]
        _, h2, c2 = np_lstm(xt[:, None], h, c, k, r, b)
        return np.concatenate([h2, c2], 1)
    ref, _ = _np_masked(step, _np(e), ids != 0, np.zeros((2, 4)))
    _close(y, ref[..., :2])
    assert get_mask(y).numpy().tolist() == (ids != 0).tolist()   # return_sequences: passed on


def test_masking_layer_and_mask_table_is_weak():
    x = _x(2, 4, 3)
    x[0, 2:] = 0.0
    masked = tf.keras.layers.Masking(0.0)(x)
    assert get_mask(masked).numpy().tolist() == [[True, True, False, False], [True] * 4]
    last = tf.keras.layers.LSTM(3)(masked)
    assert get_mask(last) is None                       # no sequence: no mask
    n = len(layer_base._MASKS)
    del masked
    gc.collect()
    assert len(layer_base._MASKS) < n                   # the entry went with the tensor


def test_bad_mask_shape_names_the_layer():
    layer = tf.keras.layers.GRU(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gru.*mask must have shape"):
        layer(_x(2, 3, 2), mask=np.ones((2, 4), bool))


# --- stateful, Bidirectional, TimeDistributed, StackedRNNCells -----------------------------

def test_stateful_layer_carries_state_between_calls():
    x = _x(2, 6, 3)
    layer = tf.keras.layers.GRU(4, stateful=True)
    layer(x[:, :3])
    second = layer(x[:, 3:])
    whole = tf.keras.layers.GRU(4)
    whole(x)
    whole.set_weights(layer.get_weights())
    _close(second, whole(x))
    layer.reset_states()
    _close(layer(x[:, :3]), whole(x[:, :3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch size"):
        layer(x[:1, :3])


@pytest.mark.parametrize("mode", ["concat", "sum", "mul", "ave", None])
def test_bidirectional_merge_modes(mode):
    x = _x(2, 4, 3)
    bi = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(3, return_sequences=True),
                                       merge_mode=mode)
    y = bi(x)
    kf, rf, bf, kb, rb, bb = _w(bi)
    z = np.zeros((2, 3))
    f, _, _ = np_lstm(x, z, z, kf, rf, bf)
    bw, _, _ = np_lstm(x, z, z, kb, rb, bb, reverse=True)
    bw = bw[:, ::-1]                                     # back in input order
    ref = {"concat": np.concatenate([f, bw], -1), "sum": f + bw, "mul": f * bw,
           "ave": (f + bw) / 2, None: [f, bw]}[mode]
    if mode is None:
        _close(y[0], ref[0])
        _close(y[1], ref[1])
    else:
        _close(y, ref)
    assert bi.variables[0].name == "bidirectional/forward_lstm/lstm_cell/kernel:0"
    assert bi.variables[3].name == "bidirectional/backward_lstm/lstm_cell/kernel:0"


def test_bidirectional_return_state_and_gradients():
    bi = tf.keras.layers.Bidirectional(tf.keras.layers.GRU(2, return_state=True))
    out = bi(_x(2, 3, 2))
    assert len(out) == 3 and out[0].shape == (2, 4) and out[1].shape == (2, 2)
    _, gs = _grads(bi, _x(2, 3, 2))
    assert all(g is not None and np.isfinite(_np(g)).all() for g in gs)


def test_time_distributed_dense():
    x = _x(2, 3, 4)
    td = tf.keras.layers.TimeDistributed(tf.keras.layers.Dense(5))
    y = td(x)
    k, b = _w(td)
    _close(y, x @ k + b)
    inner = tf.keras.layers.SimpleRNN(2)
    cfg = tf.keras.layers.TimeDistributed(inner).get_config()
    again = tf.keras.layers.TimeDistributed.from_config(cfg)
    assert again.layer.units == 2 and again.layer.name == inner.name


def test_stacked_cells_equal_two_layers():
    x = _x(2, 4, 3)
    rnn = tf.keras.layers.RNN([tf.keras.layers.LSTMCell(3), tf.keras.layers.GRUCell(2)],
                              return_state=True)
    out, h1, c1, h2 = rnn(x)
    assert out.shape == (2, 2) and c1.shape == (2, 3)
    k1, r1, b1, k2, r2, b2 = _w(rnn)
    z3, z2 = np.zeros((2, 3)), np.zeros((2, 2))
    s1, _, _ = np_lstm(x, z3, z3, k1, r1, b1)
    _, ref = np_gru(s1, z2, k2, r2, b2[0], b2[1])
    _close(out, ref)


# --- custom cells, tracing ----------------------------------------------------------------

class MinimalRNNCell(tf.keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight("kernel", [input_shape[-1], self.units])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", [self.units, self.units])

    def call(self, inputs, states):
        h = tf.matmul(inputs, self.kernel) + tf.matmul(states[0], self.recurrent_kernel)
        return h, [h]


@pytest.mark.parametrize("unroll", [False, True])
def test_custom_cell_traced_equals_eager(unroll):
    x = tf.constant(_x(2, 5, 3))
    layer = tf.keras.layers.RNN(MinimalRNNCell(4), return_sequences=True, unroll=unroll)
    eager = layer(x)
    mask = tf.constant(np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]], bool))

    @tf.function
    def f(x, mask):
        with tf.GradientTape() as tape:
            y = layer(x, mask=mask)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, layer.trainable_variables)
    with tf.GradientTape() as tape:
        ye = layer(x, mask=mask)
        loss = tf.reduce_sum(ye * ye)
    ge = tape.gradient(loss, layer.trainable_variables)
    yt, gt = f(x, mask)
    _close(yt, ye)
    for a, b in zip(gt, ge):
        _close(a, b)
    assert not np.allclose(_np(eager), _np(ye))


def test_lstm_traced_equals_eager():
    x = tf.constant(_x(2, 4, 3))
    layer = tf.keras.layers.LSTM(3, return_state=True)
    ref = layer(x)
    f = tf.function(lambda x: layer(x))
    for a, b in zip(f(x), ref):
        _close(a, b)


def test_recurrent_dropout_falls_back_to_the_loop_and_eval_is_deterministic():
    x = _x(2, 4, 3)
    layer = tf.keras.layers.LSTM(3, dropout=0.3, recurrent_dropout=0.3)
    y_eval = layer(x)
    y_train = layer(x, training=True)
    assert y_train.shape == (2, 3)
    plain = tf.keras.layers.LSTM(3)
    plain(x)
    plain.set_weights(layer.get_weights())
    _close(y_eval, plain(x))
    _, gs = _grads(layer, x, training=True)
    assert all(g is not None for g in gs)


# --- config, checkpoint -------------------------------------------------------------------

@pytest.mark.parametrize("cls", ["LSTM", "GRU", "SimpleRNN"])
def test_get_config_round_trip(cls):
    layer = getattr(tf.keras.layers, cls)(3, return_sequences=True, go_backwards=True,
                                          dropout=0.1, name="mine")
    cfg = layer.get_config()
    assert cfg["units"] == 3 and cfg["return_sequences"] and cfg["name"] == "mine"
    again = type(layer).from_config(cfg)
    assert again.get_config() == cfg
    rnn = tf.keras.layers.RNN(tf.keras.layers.GRUCell(2, reset_after=False), stateful=True)
    cfg = rnn.get_config()
    assert cfg["cell"]["class_name"] == "GRUCell"
    assert tf.keras.layers.RNN.from_config(cfg).get_config() == cfg
    bi = tf.keras.layers.Bidirectional(layer, merge_mode="sum")
    assert tf.keras.layers.Bidirectional.from_config(bi.get_config()).merge_mode == "sum"


def test_checkpoint_restores_an_lstm_model(tmp_path):
    x = _x(2, 4, 3)
    model = tf.keras.Sequential([tf.keras.layers.LSTM(4, return_sequences=True),
                                 tf.keras.layers.LSTM(2)])
    y = model(x)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    fresh = tf.keras.Sequential([tf.keras.layers.LSTM(4, return_sequences=True),
                                 tf.keras.layers.LSTM(2)])
    tf.train.Checkpoint(model=fresh).restore(path)
    _close(fresh(x), y)


# --- TF 1 cells and functions ---------------------------------------------------------------

def test_basic_lstm_cell_tf1_order_and_forget_bias():
    cell = tf.nn.rnn_cell.BasicLSTMCell(3, forget_bias=1.0)
    x = _x(2, 1, 4)[:, 0]
    state = tf.nn.rnn_cell.LSTMStateTuple(tf.fill([2, 3], 0.5), tf.fill([2, 3], -0.1))
    h, new = cell(x, state)
    assert isinstance(new, tf.nn.rnn_cell.LSTMStateTuple)
    k, b = _w(cell)
    assert [v.name for v in cell.variables] == ["basic_lstm_cell/kernel:0",
                                                "basic_lstm_cell/bias:0"]
    _, rh, rc = np_lstm(x[:, None], np.full((2, 3), -0.1), np.full((2, 3), 0.5), k[:4], k[4:],
                        b, order="icfo", forget_bias=1.0)
    _close(h, rh)
    _close(new.c, rc)
    assert cell.state_size == (3, 3) and cell.output_size == 3


def test_lstm_cell_v1_peepholes_projection_clip():
    cell = tf.nn.rnn_cell.LSTMCell(4, use_peepholes=True, cell_clip=0.2, num_proj=2,
                                   proj_clip=0.1, forget_bias=0.5)
    x = _x(3, 1, 3)[:, 0]
    state = cell.zero_state(3, tf.float32)
    assert state.c.shape == (3, 4) and state.h.shape == (3, 2)
    m, new = cell(x, state)
    names = [v.name for v in cell.variables]
    assert names == ["lstm_cell/kernel:0", "lstm_cell/bias:0", "lstm_cell/w_f_diag:0",
                     "lstm_cell/w_i_diag:0", "lstm_cell/w_o_diag:0",
                     "lstm_cell/projection/kernel:0"]
    k, b, wf, wi, wo, p = _w(cell)
    c0, h0 = np.zeros((3, 4)), np.zeros((3, 2))
    z = np.concatenate([x, h0], 1) @ k + b
    i, j, f, o = np.split(z, 4, 1)
    c = _sig(f + 0.5 + wf * c0) * c0 + _sig(i + wi * c0) * np.tanh(j)
    c = np.clip(c, -0.2, 0.2)
    mm = np.clip((_sig(o + wo * c) * np.tanh(c)) @ p, -0.1, 0.1)
    _close(m, mm)
    _close(new.c, c)


def test_gru_cell_v1_and_basic_rnn_cell():
    x = _x(2, 1, 3)[:, 0]
    h0 = np.full((2, 4), 0.2, np.float32)
    cell = tf.nn.rnn_cell.GRUCell(4)
    out, h = cell(x, h0)
    gk, gb, ck, cb = _w(cell)
    np.testing.assert_array_equal(gb, 1.0)
    g = _sig(np.concatenate([x, h0], 1) @ gk + gb)
    r, u = g[:, :4], g[:, 4:]
    c = np.tanh(np.concatenate([x, r * h0], 1) @ ck + cb)
    _close(out, u * h0 + (1 - u) * c)
    assert cell.variables[0].name == "gru_cell/gates/kernel:0"
    basic = tf.nn.rnn_cell.BasicRNNCell(4)
    out, _ = basic(x, h0)
    k, b = _w(basic)
    _close(out, np.tanh(np.concatenate([x, h0], 1) @ k + b))


def test_dynamic_rnn_fused_equals_loop_and_sequence_length():
    x = _x(3, 5, 2)
    cell = tf.nn.rnn_cell.BasicLSTMCell(3)
    out, st = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)            # one fused op
    assert cell.variables[0].name == "rnn/basic_lstm_cell/kernel:0"
    full, st2 = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=[5, 5, 5])
    _close(out, full)
    _close(st.h, st2.h)
    lens = [5, 2, 3]
    part, st3 = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=lens)
    for bi, n in enumerate(lens):
        one, s1 = tf.nn.dynamic_rnn(cell, x[bi:bi + 1, :n], dtype=tf.float32)
        _close(part[bi:bi + 1, :n], one)
        _close(st3.c[bi:bi + 1], s1.c)
        np.testing.assert_array_equal(_np(part[bi, n:]), 0.0)


def test_multi_rnn_cell_dropout_wrapper_static_rnn():
    x = _x(2, 3, 2)
    cell = tf.nn.rnn_cell.MultiRNNCell([
        tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.BasicLSTMCell(3), output_keep_prob=1.0),
        tf.nn.rnn_cell.GRUCell(2)])
    outs, state = tf.nn.static_rnn(cell, tf.unstack(tf.constant(x), axis=1), dtype=tf.float32)
    assert len(outs) == 3 and outs[0].shape == (2, 2) and len(state) == 2
    assert [v.name for v in cell.variables][:1] == [
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel:0"]
    seq, state2 = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
    _close(seq[:, -1], outs[-1])
    drop = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(2), input_keep_prob=0.5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_keep_prob"):
        tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(2), input_keep_prob=0.0)
    assert drop.state_size == 2


def test_bidirectional_dynamic_rnn_reverses_within_length():
    x = _x(2, 4, 2)
    fw, bw = tf.nn.rnn_cell.GRUCell(3), tf.nn.rnn_cell.GRUCell(3)
    (of, ob), (sf, sb) = tf.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=[4, 2],
                                                         dtype=tf.float32)
    assert fw.variables[0].name == "bidirectional_rnn/fw/gru_cell/gates/kernel:0"
    # the second sequence, length 2: the backward cell sees x[1, 1], then x[1, 0]
    rev = tf.constant(x[1:2, 1::-1])
    ref, refs = tf.nn.dynamic_rnn(bw, rev, dtype=tf.float32)
    _close(ob[1:2, :2], ref[:, ::-1])
    _close(sb[1:2], refs)
    np.testing.assert_array_equal(_np(ob[1, 2:]), 0.0)


# --- devices --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_layers_on_opencl_match_cpu(kind):
    reason = conformance.unavailable_devices().get("opencl:0")
    if reason:
        pytest.skip(reason)
    x = _x(2, 4, 3)
    with tf.device("cpu:0"):
        cpu = getattr(tf.keras.layers, kind)(3, return_sequences=True)
        y_cpu, g_cpu = _grads(cpu, x)
    with tf.device("opencl:0"):
        ocl = getattr(tf.keras.layers, kind)(3, return_sequences=True)
        ocl(x)
        ocl.set_weights(cpu.get_weights())
        y_ocl, g_ocl = _grads(ocl, x)
        y_mask = ocl(x, mask=np.ones((2, 4), bool))
    assert ocl.variables[0].device == "opencl:0"
    _close(y_ocl, y_cpu, rtol=1e-3, atol=1e-4)
    _close(y_mask, y_cpu, rtol=1e-3, atol=1e-4)
    for a, b in zip(g_ocl, g_cpu):
        _close(a, b, rtol=1e-3, atol=1e-4)


# --- errors ---------------------------------------------------------------------------------

def test_errors_for_bad_input():
    err = tf.errors.InvalidArgumentError
    with pytest.raises(err, match=r"lstm.*rank 3.*\[batch, time, features\].*\[2, 3\]"):
        tf.keras.layers.LSTM(2)(np.ones((2, 3), np.float32))
    layer = tf.keras.layers.LSTM(2)
    layer(_x(2, 3, 4))
    with pytest.raises(err, match="built for 4 features"):
        layer(_x(2, 3, 5))
    with pytest.raises(err, match=r"initial_state\[1\] must have shape \[2, 2\]"):
        layer(_x(2, 3, 4), initial_state=[np.zeros((2, 2), np.float32),
                                          np.zeros((2, 3), np.float32)])
    with pytest.raises(err, match="initial_state has 1 tensor"):
        layer(_x(2, 3, 4), initial_state=[np.zeros((2, 2), np.float32)])
    cell = tf.nn.rnn_cell.BasicLSTMCell(3)
    with pytest.raises(err, match=r"state.c must have shape \[2, 3\]"):
        cell(np.ones((2, 4), np.float32),
             tf.nn.rnn_cell.LSTMStateTuple(tf.zeros([2, 5]), tf.zeros([2, 3])))
    with pytest.raises(err, match="LSTMStateTuple"):
        cell(np.ones((2, 4), np.float32), tf.zeros([2, 3]))
    with pytest.raises(err, match="cell.zero_state"):
        tf.nn.rnn_cell.GRUCell(2)(np.ones((2, 4), np.float32))
    with pytest.raises(err, match="rank 3"):
        tf.nn.dynamic_rnn(cell, np.ones((2, 4), np.float32), dtype=tf.float32)
    with pytest.raises(err, match="merge_mode"):
        tf.keras.layers.Bidirectional(tf.keras.layers.GRU(2), merge_mode="max")
    with pytest.raises(err, match="units must be a positive"):
        tf.keras.layers.GRU(0)


def test_namespaces():
    assert tf.nn.rnn_cell.LSTMCell is rec.LSTMCellV1
    assert tf.nn.dynamic_rnn is rec.dynamic_rnn
    assert tf.contrib.rnn.LSTMBlockCell(2).state_size == (2, 2)
    assert tf.keras.layers.LSTMCell is rec.LSTMCell
    with pytest.raises(AttributeError):
        tf.nn.no_such_thing


def _graph(fn, *args):
    return tf.function(fn).get_concrete_function(*args).graph


def test_traced_cell_loop_is_one_while_node_and_sequence_ops_one_node():
    kinds = {}
    for unroll in (False, True):
        for steps in (3, 6):
            layer = tf.keras.layers.RNN(MinimalRNNCell(2), unroll=unroll)
            g = _graph(lambda x: layer(x), tf.ones([2, steps, 3]))
            kinds[unroll, steps] = [n.kind for n in g.nodes]
    assert kinds[False, 3] == kinds[False, 6] and kinds[False, 3].count("while") == 1
    assert len(kinds[True, 6]) > len(kinds[True, 3]) and "while" not in kinds[True, 6]
    lstm = tf.keras.layers.LSTM(3)
    lstm(tf.ones([2, 6, 3]))
    g = _graph(lambda x: lstm(x), tf.ones([2, 6, 3]))
    names = [getattr(getattr(n, "op", None), "name", None) for n in g.nodes]
    assert names.count("FusedLSTM") == 1 and "while" not in [n.kind for n in g.nodes]


def test_masking_layer_equals_an_explicit_mask():
    x = _x(2, 5, 3)
    x[0, 3:] = 0.0
    x[1, 1] = 0.0
    lstm = tf.keras.layers.LSTM(4, return_sequences=True)
    implicit = lstm(tf.keras.layers.Masking()(x))
    mask = np.abs(x).sum(-1) > 0
    _close(implicit, lstm(x, mask=mask))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gru.*rank 3.*float32, on "):
        tf.keras.layers.GRU(2)(tf.constant(np.ones((2, 3), np.float32)))


def test_mask_plumbing_in_the_layer_base():
    x = tf.ones([2, 3])
    dense = tf.keras.layers.Dense(2)
    assert dense(x, mask=None).shape == (2, 2)             # explicit None: ignored
    emb = tf.keras.layers.Embedding(5, 3, mask_zero=True)
    e = emb(tf.constant([[1, 0]]))
    y = dense(e)                                            # Dense passes it on (Keras)
    np.testing.assert_array_equal(get_mask(y).numpy(), [[True, False]])
    assert get_mask(tf.keras.layers.Flatten()(y)) is None   # Flatten drops it
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.keras.layers.LSTM(2)(tf.ones([2, 3]), mask=np.ones((2, 3), bool))
    notes = getattr(info.value, "__notes__", [])
    assert len([n for n in notes if "'lstm" in n]) <= 1    # the layer named once


def test_time_major_and_explicit_backward_layer():
    x = _x(2, 4, 3)
    bm = tf.keras.layers.LSTM(3, return_sequences=True)
    y = bm(x)
    tm = tf.keras.layers.LSTM(3, return_sequences=True, time_major=True)
    tm(np.swapaxes(x, 0, 1))
    tm.set_weights(bm.get_weights())
    _close(tm(np.swapaxes(x, 0, 1)), np.swapaxes(_np(y), 0, 1))
    fw = tf.keras.layers.GRU(2, return_sequences=True)
    bw = tf.keras.layers.SimpleRNN(3, return_sequences=True, go_backwards=True)
    bi = tf.keras.layers.Bidirectional(fw, backward_layer=bw)
    assert bi(x).shape == (2, 4, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="go_backwards"):
        tf.keras.layers.Bidirectional(fw, backward_layer=tf.keras.layers.GRU(2))
