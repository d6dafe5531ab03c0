"""Keras's functional API: tf.keras.Input, symbolic tensors, Model(inputs, outputs),
Lambda and model.summary() (tapeflow.functional, docs/keras-models.md)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tapeflow as tf

L = tf.keras.layers


@pytest.fixture(autouse=True)
def _fresh_names():
    tf.keras.backend.clear_session()
    yield


def _rand(*shape, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=shape).astype("float32"))


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# --- symbolic tensors and Input --------------------------------------------------------------

def test_input_is_a_symbolic_tensor_with_a_none_batch_dimension():
    x = tf.keras.Input(shape=[3])
    assert x.shape == (None, 3) and x.dtype == tf.float32 and x.ndim == 2
    assert repr(x).startswith("<KerasTensor shape=(None, 3), dtype=float32")
    assert tf.keras.Input(shape=(None,), dtype="int32").shape == (None, None)
    assert tf.keras.Input(shape=(3,), batch_size=4).shape == (4, 3)
    assert tf.keras.Input(batch_shape=(None, 5)).shape == (None, 5)
    layer = x._keras_history.operation
    assert isinstance(layer, tf.keras.layers.InputLayer) and layer.name == "input_layer"
    assert tf.keras.layers.InputLayer(shape=(2,)).output.shape == (None, 2)


@pytest.mark.parametrize("kwargs, match", [({}, "pass `shape`"),
                                           ({"shape": (3, -1)}, "non-negative int"),
                                           ({"shape": ("a",)}, "non-negative int")])
def test_input_errors(kwargs, match):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        tf.keras.Input(**kwargs)


def test_build_sees_the_none_batch_dimension():
    seen = []

    class Probe(L.Layer):
        def build(self, input_shape):
            seen.append(input_shape.as_list())
            self.w = self.add_weight("w", [input_shape[-1], 2])

        def call(self, x):
            return tf.matmul(x, self.w)

    y = Probe()(tf.keras.Input(shape=(3,)))
    assert seen == [[None, 3]] and y.shape == (None, 2)


def test_a_symbolic_tensor_has_no_value():
    x = tf.keras.Input(shape=(3,))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Lambda"):
        tf.concat([x, x], axis=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="symbolic"):
        np.asarray(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="symbolic"):
        x.numpy()
    for fn in (bool, len, list):
        with pytest.raises(TypeError, match="symbolic KerasTensor"):
            fn(x)


def test_unknown_non_batch_dimensions_stay_unknown():
    x = tf.keras.Input(shape=(None, 4))
    assert L.Dense(2)(x).shape == (None, None, 2)
    assert L.GlobalAveragePooling1D()(x).shape == (None, 4)
    assert L.Flatten()(tf.keras.Input(shape=(2, 3))).shape == (None, 6)


# --- a functional model computes what the layers compute eagerly ---------------------------------

def _mlp():
    inp = tf.keras.Input(shape=(4,))
    d1, d2 = L.Dense(8, activation="relu"), L.Dense(1)
    return tf.keras.Model(inp, d2(d1(inp))), d1, d2


def test_same_outputs_and_gradients_as_the_layers_called_eagerly():
    model, d1, d2 = _mlp()
    x, y = _rand(16, 4), _rand(16, 1, seed=1)
    with tf.GradientTape() as t1:
        loss1 = tf.reduce_mean((model(x) - y) ** 2)
    with tf.GradientTape() as t2:
        loss2 = tf.reduce_mean((d2(d1(x)) - y) ** 2)
    assert len(model.trainable_variables) == 4
    for a, b in zip(t1.gradient(loss1, model.trainable_variables),
                    t2.gradient(loss2, model.trainable_variables)):
        _close(a, b)
    _close(loss1, loss2)


def test_under_tf_function():
    model, _, _ = _mlp()
    x = _rand(3, 4)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(model(x))
        return out, tape.gradient(out, model.trainable_variables)

    out, grads = step(x)
    _close(out, tf.reduce_sum(model(x)))
    assert [g.shape for g in grads] == [v.shape for v in model.trainable_variables]


def test_compile_fit_evaluate_predict():
    model, _, _ = _mlp()
    x = _rand(64, 4)
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 4
    assert model.evaluate(x, y, verbose=0) < history.history["loss"][0]
    assert model.predict(x, batch_size=10).shape == (64, 1)


def test_fit_with_several_inputs_and_outputs():
    a, b = tf.keras.Input(shape=(3,), name="a"), tf.keras.Input(shape=(2,), name="b")
    joined = L.Concatenate()([a, b])
    model = tf.keras.Model([a, b], [L.Dense(1)(joined), L.Dense(2)(joined)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    xa, xb = rng.random((40, 3), dtype="float32"), rng.random((40, 2), dtype="float32")
    ys = [xa.sum(1, keepdims=True), np.stack([xb[:, 0], xa[:, 0]], 1)]
    history = model.fit([xa, xb], ys, epochs=10, batch_size=8, verbose=0,
                        validation_split=0.25)
    assert sorted(history.history) == ["loss", "val_loss"]
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
    preds = model.predict([xa, xb], batch_size=16)
    assert [p.shape for p in preds] == [(40, 1), (40, 2)]
    want = sum(float(tf.reduce_mean((p - y) ** 2)) for p, y in zip(preds, ys))
    assert model.evaluate([xa, xb], ys, verbose=0) == pytest.approx(want, rel=1e-4)
    named = tf.keras.Model({"a": a, "b": b}, {"s": model.outputs[0], "t": model.outputs[1]})
    named.compile(optimizer="sgd", loss="mse")
    named.fit({"a": xa, "b": xb}, {"s": ys[0], "t": ys[1]}, epochs=1, batch_size=8, verbose=0)
    assert sorted(named.predict({"a": xa, "b": xb})) == ["s", "t"]
    ds = tf.data.Dataset.from_tensor_slices(((xa, xb), tuple(ys))).batch(8)
    assert len(model.fit(ds, epochs=2, verbose=0).history["loss"]) == 2


def test_training_flag_reaches_the_layers():
    inp = tf.keras.Input(shape=(100,))
    model = tf.keras.Model(inp, L.Dropout(0.5)(inp))
    x = tf.ones([2, 100])
    _close(model(x), x)
    _close(model(x, training=False), x)
    assert float(tf.reduce_min(model(x, training=True))) == 0.0


def test_python_operators_and_indexing_are_recorded():
    x, y = tf.keras.Input(shape=(3,)), tf.keras.Input(shape=(3,))
    outs = [x + 1, 1 - x, x * y, x / 2, -x, abs(x), x ** 2, x[:, 0], x[:, :2], x > y]
    model = tf.keras.Model([x, y], outs)
    a, b = _rand(2, 3), _rand(2, 3, seed=1)
    want = [a + 1, 1 - a, a * b, a / 2, -a, abs(a), a ** 2, a[:, 0], a[:, :2], a > b]
    got = model([a, b])
    assert [o.shape for o in outs] == [(None, 3)] * 7 + [(None,), (None, 2), (None, 3)]
    assert outs[-1].dtype == tf.bool
    for g, w in zip(got, want):
        _close(g, w)
    assert [l.name for l in model.layers] == ["input_layer", "input_layer_1"]   # (ops: not layers)


# --- several inputs and outputs, shared layers, nested models ------------------------------------

def test_lists_and_dicts_of_inputs_and_outputs():
    a, b = tf.keras.Input(shape=(3,), name="a"), tf.keras.Input(shape=(2,), name="b")
    joined = L.Concatenate()([a, b])
    o1, o2 = L.Dense(1, name="o1")(joined), L.Dense(2, name="o2")(joined)
    model = tf.keras.Model(inputs=[a, b], outputs=[o1, o2])
    assert model.input_shape == [(None, 3), (None, 2)]
    assert model.output_shape == [(None, 1), (None, 2)]
    assert model.input_names == ["a", "b"] and model.output_names == ["o1", "o2"]
    xa, xb = _rand(4, 3), _rand(4, 2, seed=1)
    y1, y2 = model([xa, xb])
    _close(y2, model.get_layer("o2")(tf.concat([xa, xb], axis=1)))
    _close(model({"a": xa, "b": xb})[0], y1)                # by input name
    by_name = tf.keras.Model(inputs={"a": a, "b": b}, outputs={"x": o1, "y": o2})
    assert by_name.input_shape == {"a": (None, 3), "b": (None, 2)}
    out = by_name({"b": xb, "a": xa})
    assert sorted(out) == ["x", "y"]
    _close(out["x"], y1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"missing data for input\(s\) \['b'\]"):
        by_name({"a": xa})


def test_wrong_inputs_at_call_are_clear_errors():
    a, b = tf.keras.Input(shape=(3,), name="a"), tf.keras.Input(shape=(2,), name="b")
    model = tf.keras.Model([a, b], L.Concatenate()([a, b]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"expects 2 input\(s\).*received 1 input tensor"):
        model(tf.ones([2, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"received 3 input tensor"):
        model([tf.ones([2, 3]), tf.ones([2, 2]), tf.ones([2, 2])])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Input 0 .*layer 'a'.*expected shape \(None, 3\), got shape \(2, 4\)"):
        model([tf.ones([2, 4]), tf.ones([2, 2])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"expected shape \(None, 2\)"):
        model([tf.ones([2, 3]), tf.ones([2, 2, 2])])
    # a trailing axis of size 1 is adjusted, as Keras does
    assert model([tf.ones([2, 3, 1]), tf.ones([2, 2])]).shape == (2, 5)


def test_a_disconnected_output_names_the_tensor_and_the_missing_input():
    x, y = tf.keras.Input(shape=(3,)), tf.keras.Input(shape=(3,), name="other")
    z = L.Dense(2, name="head")(y)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"output 0 .*made by Dense 'head'.* not connected.*'other'"):
        tf.keras.Model(x, z)
    with pytest.raises(TypeError, match="must be a symbolic tensor.*Tensor"):
        tf.keras.Model(x, tf.ones([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="`inputs` is empty"):
        tf.keras.Model([], z)


def test_a_shared_layer_has_one_set_of_weights():
    shared = L.Dense(2, name="shared")
    p, q = tf.keras.Input(shape=(3,)), tf.keras.Input(shape=(3,))
    model = tf.keras.Model([p, q], shared(p) + shared(q))
    assert [l.name for l in model.layers] == ["input_layer", "input_layer_1", "shared"]
    assert len(model.weights) == 2
    a, b = _rand(2, 3), _rand(2, 3, seed=1)
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(model([a, b]))
    gk = tape.gradient(out, shared.kernel)
    _close(gk, tf.matmul(tf.transpose(a + b), tf.ones([2, 2])))     # both uses add up


def test_nested_functional_and_sequential_models():
    shared = L.Dense(2, name="shared")
    p = tf.keras.Input(shape=(3,))
    inner = tf.keras.Model(p, shared(p), name="inner")
    seq = tf.keras.Sequential([L.Dense(4), L.Dense(2)], name="seq")
    r = tf.keras.Input(shape=(3,))
    head = L.Dense(1, name="head")
    outer = tf.keras.Model(r, head(inner(r) + seq(r)), name="outer")
    assert [l.name for l in outer.layers] == ["input_layer_1", "inner", "seq", "head"]
    assert outer.output_shape == (None, 1)
    assert len(outer.trainable_variables) == 2 + 4 + 2
    x = _rand(5, 3)
    _close(outer(x), head(shared(x) + seq(x)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(outer(x))
    assert all(g is not None for g in tape.gradient(loss, outer.trainable_variables))


def test_subclassing_with_inputs_and_outputs_makes_a_functional_model():
    class Twice(tf.keras.Model):
        def __init__(self):
            inp = tf.keras.Input(shape=(2,))
            super().__init__(inp, L.Dense(3)(inp) * 2.0, name="twice")

        def extra(self):
            return "mine"

    m = Twice()
    assert m.extra() == "mine" and isinstance(m, Twice) and m.name == "twice"
    assert m(tf.ones([4, 2])).shape == (4, 3) and m.output_shape == (None, 3)


def test_masks_travel_through_a_functional_model():
    tok = tf.keras.Input(shape=(None,), dtype="int32")
    emb = L.Embedding(10, 4, mask_zero=True)
    lstm = L.LSTM(3)
    model = tf.keras.Model(tok, lstm(emb(tok)))
    padded = tf.constant([[1, 2, 0, 0], [3, 0, 0, 0]])
    out = model(padded)
    _close(out, lstm(emb(padded)))
    _close(out, lstm(emb(tf.constant([[1, 2], [3, 0]]))))     # the padding is ignored


def test_sequential_takes_an_input_first():
    s = tf.keras.Sequential([tf.keras.Input(shape=(3,)), L.Dense(4), L.Dense(2)])
    assert [type(l).__name__ for l in s.layers] == ["Dense", "Dense"]
    assert s.variables[0].shape == (3, 4)                   # built at once
    ids = tf.keras.Sequential([L.InputLayer(shape=(5,), dtype="int32"), L.Embedding(9, 2)])
    assert ids(tf.constant([[1, 2, 3, 4, 5]])).shape == (1, 5, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="first layer"):
        s.add(tf.keras.Input(shape=(3,)))
    assert s.input_shape == (None, 3) and s.output_shape == (None, 2)
    assert s.inputs[0].shape == (None, 3) and s.outputs[0].shape == (None, 2)
    features = tf.keras.Model(s.input, L.Dense(1)(s.output))     # a Sequential's ends
    assert features(tf.ones([5, 3])).shape == (5, 1)
    lazy = tf.keras.Sequential([L.Dense(2)])
    assert not hasattr(lazy, "output_shape")                # (AttributeError: not known yet)
    lazy(tf.ones([4, 3]))
    assert lazy.input_shape == (4, 3) and lazy.output_shape == (4, 2)


# --- Lambda ---------------------------------------------------------------------------------------

def test_lambda_with_a_closure_output_shape_and_arguments():
    scale = tf.constant(3.0)
    times = L.Lambda(lambda x: x * scale)
    _close(times(tf.ones([2])), [3.0, 3.0])
    x = tf.keras.Input(shape=(4,))
    summed = L.Lambda(lambda t: tf.reduce_sum(t, axis=1, keepdims=True), output_shape=(1,))
    assert summed(x).shape == (None, 1)
    assert L.Lambda(lambda t: t, output_shape=lambda s: (s[0], 7)).compute_output_shape(
        (None, 4)) == (None, 7)
    power = L.Lambda(lambda t, p: t ** p, arguments={"p": 3})
    _close(power(tf.constant([2.0])), [8.0])
    stacked = L.Lambda(lambda t: tf.stack([t, -t], axis=1))(x)       # shape found by a run
    assert stacked.shape == (None, 2, 4)
    with pytest.raises(TypeError, match="callable"):
        L.Lambda(3)


def test_lambda_in_a_sequential_model_trains():
    x = tf.cast(tf.linspace(-2.0, 2.0, 101), tf.float32)
    y = x ** 2 + 2 * x
    model = tf.keras.Sequential([L.Lambda(lambda t: tf.stack([t, t ** 2], axis=1)),
                                 L.Dense(1, kernel_initializer="zeros")])
    model.compile(loss=tf.keras.losses.MSE, optimizer=tf.keras.optimizers.SGD(0.05))
    history = model.fit(x, y, epochs=40, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < 0.05 * history.history["loss"][0]


def test_lambda_config_keeps_anonymous_functions_as_text_only():
    layer = L.Lambda(lambda t: t + 1, output_shape=(2,), name="inc")
    cfg = layer.get_config()
    again = L.Lambda.from_config(cfg)                       # in memory: the function itself
    _close(again(tf.zeros([1, 2])), [[1.0, 1.0]])
    text = cfg["function"].get_config()
    assert set(text) == {"name", "source"} and text["name"].endswith("<lambda>")
    loaded = L.Lambda.from_config(dict(cfg, function=type(cfg["function"]).from_config(text)))
    with pytest.raises(tf.errors.FailedPreconditionError, match="never runs code read"):
        loaded(tf.zeros([1, 2]))


# --- summary ---------------------------------------------------------------------------------------

def _summary(model, **kw):
    lines = []
    model.summary(print_fn=lines.append, **kw)
    assert len(lines) == 1                                  # one call with the whole text
    return lines[0]


def test_summary_of_a_functional_model_counts_by_hand():
    inp = tf.keras.Input(shape=(3,))
    x = L.Dense(4, name="hidden")(inp)
    out = L.Dense(2, name="out")(x)
    bn = L.BatchNormalization(name="bn")
    model = tf.keras.Model(inp, bn(out))
    text = _summary(model, line_length=76)
    hidden, head, norm = 3 * 4 + 4, 4 * 2 + 2, 4 * 2
    lines = text.splitlines()
    assert lines[0] == 'Model: "functional"'
    assert lines[1] == "┏" + "━" * 33 + "┳" + "━" * 24 + "┳" + "━" * 15 + "┓"
    assert lines[2] == "┃ Layer (type)" + " " * 20 + "┃ Output Shape" + " " * 11 + "┃" + \
        " " * 7 + "Param # ┃"
    assert "│ input_layer (InputLayer)        │ (None, 3)              │             0 │" in lines
    assert f"│ hidden (Dense)                  │ (None, 4)              │ {hidden:>13} │" in lines
    assert "│ bn (BatchNormalization)         │ (None, 2)              │             8 │" in lines
    total = hidden + head + norm
    assert f" Total params: {total} ({total * 4:.2f} B)" in lines
    assert f" Trainable params: {total - 4} ({(total - 4) * 4:.2f} B)" in lines
    assert " Non-trainable params: 4 (16.00 B)" in lines
    assert lines[-4] == "└" + "─" * 33 + "┴" + "─" * 24 + "┴" + "─" * 15 + "┘"


def test_summary_of_a_graph_shows_connections_and_wraps_long_cells():
    x = tf.keras.Input(shape=(3,))
    d = L.Dense(2, name="d")
    model = tf.keras.Model(x, d(x) * 2.0 + x[:, :2])
    lines = _summary(model, line_length=104).splitlines()
    assert "Connected to" in lines[2]
    rows = [l for l in lines if l.startswith("│")]
    assert rows[0].startswith("│ input_layer") and re.search(r"│ - +│$", rows[0])
    assert any(re.match(r"│ d \(Dense\) +│ \(None, 2\) +│ +8 │ input_layer\[0\]\[0\] +│$", r)
               for r in rows)
    assert any("add (Add)" in r and "multiply[0][0]," in r for r in rows)
    assert any("get_item[0][0]" in r for r in rows)        # the wrapped second line
    narrow = _summary(model, line_length=60).splitlines()
    assert all(len(l) == 60 for l in narrow[1:-3])
    assert any("…" in l for l in narrow)                    # a long word is cut


def test_summary_of_sequential_and_subclassed_models():
    s = tf.keras.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2)], name="s")
    text = _summary(s, line_length=76)
    assert "│ dense (Dense)                   │ (None, 4)              │            16 │" in text
    assert "(None, 2)" in text and " Total params: 26 (104.00 B)" in text

    class Sub(tf.keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.d = L.Dense(3)

        def call(self, x):
            return self.d(x)

    m = Sub()
    assert "│ ?                      │   0 (unbuilt) │" in _summary(m, line_length=76)
    m(tf.ones([4, 5]))
    assert "│ (4, 3)                 │            18 │" in _summary(m, line_length=76)
    empty = _summary(tf.keras.Sequential(name="e"), line_length=76).splitlines()
    assert empty[3].startswith("┡") and empty[4].startswith("└")


def test_summary_options_and_stdout(capsys):
    p = tf.keras.Input(shape=(3,))
    inner = tf.keras.Model(p, L.Dense(2, name="shared")(p), name="inner")
    r = tf.keras.Input(shape=(3,))
    outer = tf.keras.Model(r, L.Dense(1, name="head")(inner(r)), name="outer")
    nested = _summary(outer, line_length=76, expand_nested=True)
    assert "│    └ shared (Dense)" in nested
    trainable = _summary(outer, line_length=100, show_trainable=True)
    assert "Traina…" in trainable.splitlines()[2] and "│    Y    │" in trainable
    ranged = _summary(outer, line_length=76, layer_range=["inner", "head"])
    assert "input_layer_1 (InputLayer)" not in ranged and "head (Dense)" in ranged
    with pytest.raises(tf.errors.InvalidArgumentError, match="matches no layer"):
        outer.summary(layer_range=["nope", "head"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="too short"):
        outer.summary(line_length=10)
    outer.summary(line_length=76)
    assert capsys.readouterr().out == _summary(outer, line_length=76)


# --- model attributes ----------------------------------------------------------------------------

def test_layers_inputs_outputs_and_get_layer():
    model, d1, d2 = _mlp()
    assert model.layers[1:] == [d1, d2] and model.get_layer(index=1) is d1
    assert model.get_layer(d2.name) is d2 and model.get_layer(index=-1) is d2
    assert model.inputs[0].shape == (None, 4) and model.outputs[0].shape == (None, 1)
    assert model.input is model.inputs[0] and model.output is model.outputs[0]
    assert model.input_shape == (None, 4) and model.output_shape == (None, 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="No such layer: 'nope'"):
        model.get_layer("nope")
    with pytest.raises(tf.errors.InvalidArgumentError, match="has 3 layers"):
        model.get_layer(index=7)
    with pytest.raises(tf.errors.InvalidArgumentError, match="name or an index"):
        model.get_layer()


def test_layer_input_and_output_keep_part_of_a_model():
    model, d1, _ = _mlp()
    features = tf.keras.Model(model.input, model.layers[1].output)
    assert d1.input is model.input and features.output_shape == (None, 8)
    x = _rand(2, 4)
    _close(features(x), d1(x))
    with pytest.raises(AttributeError, match="call it on a tf.keras.Input first"):
        L.Dense(1).output


def test_checkpoint_of_a_functional_model(tmp_path):
    model, _, _ = _mlp()
    x = _rand(2, 4)
    want = model(x)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    for v in model.variables:
        v.assign(tf.zeros_like(v))
    assert not np.allclose(model(x).numpy(), want.numpy())
    tf.train.Checkpoint(model=model).restore(path)
    _close(model(x), want)


# --- config ---------------------------------------------------------------------------------------

class Scale(L.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return dict(super().get_config(), factor=self.factor)


def test_get_config_from_config_round_trip():
    a, b = tf.keras.Input(shape=(3,), name="a"), tf.keras.Input(shape=(3,), name="b")
    shared = L.Dense(2, name="shared")
    out = Scale(3.0, name="scale")(shared(a) - shared(b)[:, :1])
    model = tf.keras.Model({"a": a, "b": b}, [out, shared(a)])
    cfg = json.loads(json.dumps(model.get_config()))           # JSON-able
    assert cfg["input_layers"] == {"a": ["a", 0, 0], "b": ["b", 0, 0]}
    by_name = {entry["name"]: entry for entry in cfg["layers"]}
    assert len(by_name["shared"]["inbound_nodes"]) == 3
    hist = by_name["subtract"]["inbound_nodes"][0]["args"][1]["config"]["keras_history"]
    assert hist == ["get_item", 0, 0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="custom_objects"):
        tf.keras.Model.from_config(cfg)
    again = tf.keras.Model.from_config(cfg, custom_objects={"Scale": Scale})
    assert [l.name for l in again.layers] == [l.name for l in model.layers]
    again.set_weights(model.get_weights())
    xa, xb = _rand(2, 3), _rand(2, 3, seed=1)
    for g, w in zip(again({"a": xa, "b": xb}), model({"a": xa, "b": xb})):
        _close(g, w)
    assert again.get_layer("scale").factor == 3.0
