"""Layers, models and the tf.keras namespace: the seeds' layer and model examples run as
written (``import tapeflow as tf; tfe = tf``) with the seeds' values, then each layer's
shapes, dtypes, devices, initializers and gradients, attribute tracking and
``_trackable_children``, training with a GradientTape loop, and Keras's
``compile``/``fit``/``evaluate``/``predict``.

Seeds (``shared/seeds/``): 000 = the eager-execution announcement (``tfe.Network``
MNISTModel), 001 = the eager guide (MySimpleLayer, tf.keras.Sequential, the MNIST CNN
and its training loop, the ``tf.keras.Model`` regression), 002 = the contrib/eager
README (``tf.layers`` MNISTModel in both data formats, TwoLayerNet/ThreeLayerNet).

Optimizers, losses and datasets belong to other parts of the training stack; where a
test needs them and they are missing it falls back to ``v.assign_sub(lr * g)`` or
skips, saying so.
"""

from __future__ import annotations

import importlib
import re
import sys

import numpy as np
import pytest

import tapeflow as tf

tfe = tf


def _has(module):
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


HAS_TRAIN = _has("tapeflow.train")
HAS_LOSSES = _has("tapeflow.losses")
HAS_DATA = _has("tapeflow.data")
needs_train = pytest.mark.skipif(not HAS_TRAIN, reason="tapeflow.train (optimizers) is not "
                                 "available yet")
needs_gpu = pytest.mark.skipif(tf.num_gpus() == 0, reason="no GPU device")


def _apply(grads, variables, lr, optimizer=None):
    """optimizer.apply_gradients when there is one, else plain gradient descent."""
    if optimizer is not None:
        optimizer.apply_gradients(zip(grads, variables))
        return
    for g, v in zip(grads, variables):
        v.assign_sub(lr * g)


def _sgd(lr):
    return tf.train.GradientDescentOptimizer(learning_rate=lr) if HAS_TRAIN else None


def _sparse_xent(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))


class _StubSGD:
    """A minimal optimizer (apply_gradients only): fit() needs nothing more."""

    def __init__(self, lr):
        self.lr = lr
        self.calls = 0

    def apply_gradients(self, grads_and_vars, global_step=None):
        self.calls += 1
        for g, v in grads_and_vars:
            v.assign_sub(self.lr * g)


def _paths(obj, prefix=""):
    """Every Variable reachable through _trackable_children, by path (as a checkpoint)."""
    out = {}
    for key, child in obj._trackable_children().items():
        path = f"{prefix}/{key}" if prefix else key
        if isinstance(child, tf.Variable):
            out[path] = child
        else:
            out.update(_paths(child, path))
    return out


# --- seed 000: tfe.Network --------------------------------------------------------------------

class MNISTModel000(tfe.Network):
    def __init__(self):
        super(MNISTModel000, self).__init__()
        self.layer1 = self.track_layer(tf.layers.Dense(units=10))
        self.layer2 = self.track_layer(tf.layers.Dense(units=10))

    def call(self, input):
        """Actually runs the model."""
        result = self.layer1(input)
        result = self.layer2(result)
        return result


def test_000_network_blank_batch_prints(capsys):
    model = MNISTModel000()
    batch = tf.zeros([1, 1, 784])
    print(batch.shape)  # (1, 1, 784)
    result = model(batch)
    print(result)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "(1, 1, 784)"
    # the seed: tf.Tensor([[[ 0. 0., ...., 0.]]], shape=(1, 1, 10), dtype=float32)
    assert out[1] == ("tf.Tensor([[[0. 0. 0. 0. 0. 0. 0. 0. 0. 0.]]], shape=(1, 1, 10), "
                      "dtype=float32)")
    assert result.shape == (1, 1, 10) and result.dtype == tf.float32
    assert [v.shape.as_list() for v in model.variables] == [[784, 10], [10], [10, 10], [10]]
    assert model.layers == [model.layer1, model.layer2]


def test_000_network_trains_with_implicit_gradients():
    """The announcement's loop: implicit_gradients(loss_function) + apply_gradients."""
    tf.random.set_seed(0)
    model = MNISTModel000()

    def loss_function(model, x, y):
        y_ = model(x)
        return tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=y_)

    x = tf.random_normal([8, 784])
    y = tf.one_hot(tf.constant([0, 1, 2, 3, 4, 5, 6, 7]), 10)
    opt = _sgd(0.01)
    first = float(tf.reduce_mean(loss_function(model, x, y)))
    for _ in range(30):
        grads = tfe.implicit_gradients(lambda m, a, b: tf.reduce_mean(loss_function(m, a, b)))(
            model, x, y)
        assert len(grads) == 4 and {id(v) for _, v in grads} == {id(v) for v in model.variables}
        if opt is not None:
            opt.apply_gradients(grads)
        else:
            _apply([g for g, _ in grads], [v for _, v in grads], 0.01)
    assert float(tf.reduce_mean(loss_function(model, x, y))) < first * 0.5


# --- seed 002: TwoLayerNet / ThreeLayerNet ----------------------------------------------------

class TwoLayerNet(tfe.Network):
    def __init__(self):
        super(TwoLayerNet, self).__init__()
        self.layer1 = self.track_layer(
            tf.layers.Dense(2, activation=tf.nn.relu, use_bias=False))
        self.layer2 = self.track_layer(tf.layers.Dense(3, use_bias=False))

    def call(self, x):
        return self.layer2(self.layer1(x))


class ThreeLayerNet(tfe.Network):
    def __init__(self):
        super(ThreeLayerNet, self).__init__()
        self.a = self.track_layer(TwoLayerNet())
        self.b = self.track_layer(tf.layers.Dense(4, use_bias=False))

    def call(self, x):
        return self.b(self.a(x))


def test_002_two_layer_net_asserts():
    net = TwoLayerNet()

    # No variables created yet
    assert 0 == len(net.variables)

    # They are created on first input:
    inp = tf.constant([[1.]])

    assert [1, 3] == net(inp).shape.as_list()  # Invoke net; get output shape.
    assert 1 == len(net.layer1.variables)
    assert 1 == len(net.layer2.variables)
    assert 2 == len(net.variables)  # weights for each layer.
    assert [1, 2] == net.variables[0].shape.as_list()  # weights of layer1.
    assert [2, 3] == net.variables[1].shape.as_list()  # weights of layer2.


def test_002_three_layer_net_asserts_and_nesting():
    inp = tf.constant([[1.]])
    net = ThreeLayerNet()

    assert [1, 4] == net(inp).shape.as_list()
    assert 3 == len(net.variables)
    assert [1, 2] == net.variables[0].shape.as_list()
    assert [2, 3] == net.variables[1].shape.as_list()
    assert [3, 4] == net.variables[2].shape.as_list()
    # the nested object graph a checkpoint walks
    paths = _paths(net)
    assert sorted(paths) == ["a/layer1/kernel", "a/layer2/kernel", "b/kernel"]
    assert paths["a/layer1/kernel"] is net.a.layer1.kernel
    assert net.trainable_variables == net.variables and net.non_trainable_variables == []


def test_002_three_layer_net_trains_to_the_objective():
    """The README's loop: minimize |net(inp) - objective| (Adam when tf.train exists)."""
    tf.random.set_seed(3)
    inp = tf.constant([[1.]])
    objective = tf.constant([[2., 3., 4., 5.]])
    net = ThreeLayerNet()
    opt = tf.train.AdamOptimizer(0.01) if HAS_TRAIN else None
    for _ in range(300):
        if opt is not None:
            opt.minimize(lambda: tf.norm(net(inp) - objective))
        else:
            with tf.GradientTape() as tape:
                loss = tf.norm(net(inp) - objective)
            _apply(tape.gradient(loss, net.variables), net.variables, 0.01)
    assert float(tf.norm(net(inp) - objective)) < 0.5


# --- seed 001: custom layer, Sequential, Model ------------------------------------------------

class MySimpleLayer(tf.keras.layers.Layer):
    def __init__(self, output_units):
        super(MySimpleLayer, self).__init__()
        self.output_units = output_units

    def build(self, input_shape):
        # The build method gets called the first time your layer is used.
        # Creating variables on build() allows you to make their shape depend
        # on the input shape and hence removes the need for the user to specify
        # full shapes. It is possible to create variables during __init__() if
        # you already know their full shapes.
        self.kernel = self.add_variable(
            "kernel", [input_shape[-1], self.output_units])

    def call(self, input):
        # Override call() instead of __call__ so we can perform some bookkeeping.
        return tf.matmul(input, self.kernel)


def test_001_my_simple_layer():
    layer = MySimpleLayer(4)
    assert layer.variables == [] and not layer.built
    x = tf.random_normal([3, 5])
    y = layer(x)
    assert layer.built and y.shape == (3, 4)
    assert len(layer.variables) == 1 and layer.kernel.shape == (5, 4)
    assert re.fullmatch(r"my_simple_layer(_\d+)?/kernel:0", layer.kernel.name)
    np.testing.assert_allclose(y.numpy(), x.numpy() @ layer.kernel.numpy(), rtol=1e-5)
    # build ran once: the second call reuses the kernel
    k = layer.kernel
    layer(x)
    assert layer.kernel is k and len(layer.variables) == 1
    # default initializer: glorot_uniform, within its bound
    assert np.abs(k.numpy()).max() <= np.sqrt(6 / (5 + 4))
    with tf.GradientTape() as tape:
        s = tf.reduce_sum(layer(x))
    g = tape.gradient(s, layer.kernel)
    np.testing.assert_allclose(g.numpy(), np.repeat(x.numpy().sum(0)[:, None], 4, 1),
                               rtol=1e-5)


def test_001_sequential_with_input_shape_is_built_at_once():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(10, input_shape=(784,)),  # must declare input shape
        tf.keras.layers.Dense(10)
    ])
    assert model.built
    assert [v.shape.as_list() for v in model.variables] == [[784, 10], [10], [10, 10], [10]]
    y = model(tf.ones([2, 784]))
    assert y.shape == (2, 10)
    w1, b1, w2, b2 = [v.numpy() for v in model.variables]
    np.testing.assert_allclose(y.numpy(), (np.ones([2, 784]) @ w1 + b1) @ w2 + b2, rtol=1e-4,
                               atol=1e-5)
    assert list(model._trackable_children()) == ["layer-0", "layer-1"]
    assert sorted(_paths(model)) == ["layer-0/bias", "layer-0/kernel", "layer-1/bias",
                                     "layer-1/kernel"]


def test_001_keras_model_subclass_reuses_dense2():
    class MNISTModel(tf.keras.Model):
        def __init__(self):
            super(MNISTModel, self).__init__()
            self.dense1 = tf.keras.layers.Dense(units=10)
            self.dense2 = tf.keras.layers.Dense(units=10)

        def call(self, input):
            """Run the model."""
            result = self.dense1(input)
            result = self.dense2(result)
            result = self.dense2(result)  # reuse variables from dense2 layer
            return result

    model = MNISTModel()
    assert model.variables == []
    assert model(tf.ones([2, 7])).shape == (2, 10)
    assert [v.shape.as_list() for v in model.variables] == [[7, 10], [10], [10, 10], [10]]
    assert model.layers == [model.dense1, model.dense2]


def _guide_cnn():
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10)
    ])


def _fake_mnist(n, seed=0):
    """MNIST-shaped data a conv net + global pooling can learn: the class is the texture
    (horizontal stripes, vertical stripes, a checkerboard, or plain noise)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n).astype(np.int64)
    r, c = np.meshgrid(np.arange(28), np.arange(28), indexing="ij")
    patterns = np.stack([(r % 2 == 0), (c % 2 == 0), ((r + c) % 2 == 0),
                         np.zeros((28, 28), bool)]).astype(np.float32)
    images = rng.random((n, 28, 28)).astype(np.float32) * 0.3 + 0.7 * patterns[labels]
    return images[..., None], labels


def test_001_mnist_cnn_logits_before_training(capsys):
    tf.random.set_seed(1)
    mnist_model = _guide_cnn()
    images = tf.constant(_fake_mnist(4)[0])
    print("Logits: ", mnist_model(images[0:1]).numpy())
    out = capsys.readouterr().out
    assert out.startswith("Logits:  [[")
    logits = mnist_model(images[0:1])
    assert logits.shape == (1, 10) and logits.dtype == tf.float32
    # like the seed's [[ 0.04128483 -0.02680352 ...]]: small, finite, not all equal
    a = logits.numpy()
    assert np.isfinite(a).all() and np.abs(a).max() < 1.0 and a.std() > 0
    assert [v.shape.as_list() for v in mnist_model.trainable_variables] == [
        [3, 3, 1, 16], [16], [3, 3, 16, 16], [16], [16, 10], [10]]


def test_001_mnist_cnn_training_loop():
    """The guide's custom loop: logits = mnist_model(images, training=True); gradients of
    mnist_model.trainable_variables; Adam (when tf.train exists) with the global step."""
    tf.random.set_seed(2)
    images_np, labels_np = _fake_mnist(96, seed=1)
    mnist_model = _guide_cnn()
    if HAS_TRAIN:
        tf.train.reset_global_step()
        optimizer = tf.train.AdamOptimizer(learning_rate=0.01)
    loss_history = []
    for epoch in range(5):
        for batch in range(3):
            images = tf.constant(images_np[batch * 32:(batch + 1) * 32])
            labels = tf.constant(labels_np[batch * 32:(batch + 1) * 32])
            with tf.GradientTape() as tape:
                logits = mnist_model(images, training=True)
                if HAS_LOSSES:
                    loss_value = tf.losses.sparse_softmax_cross_entropy(labels, logits)
                else:
                    loss_value = _sparse_xent(labels, logits)
            loss_history.append(loss_value.numpy())
            grads = tape.gradient(loss_value, mnist_model.trainable_variables)
            assert all(g is not None for g in grads)
            if HAS_TRAIN:
                optimizer.apply_gradients(zip(grads, mnist_model.trainable_variables),
                                          global_step=tf.train.get_or_create_global_step())
            else:
                _apply(grads, mnist_model.trainable_variables, 0.5)
    assert np.mean(loss_history[-3:]) < 0.7 * np.mean(loss_history[:3])
    if HAS_TRAIN:
        assert int(tf.train.get_or_create_global_step()) == 15


@pytest.mark.skipif(not (HAS_TRAIN and HAS_LOSSES and HAS_DATA),
                    reason="needs tapeflow.train, tapeflow.losses and tapeflow.data")
def test_001_mnist_training_loop_as_written(capsys):
    """The guide's MNIST section verbatim (tf.data, tf.train.AdamOptimizer, tf.losses),
    on MNIST-shaped synthetic uint8 images instead of the download."""
    tf.random.set_seed(3)
    tf.train.reset_global_step()
    images_np, labels_np = _fake_mnist(320, seed=3)
    mnist_images = (images_np[..., 0] * 255).astype(np.uint8)
    mnist_labels = labels_np.astype(np.uint8)

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255, tf.float32),
         tf.cast(mnist_labels, tf.int64)))
    dataset = dataset.shuffle(1000).batch(32)

    # Build the model
    mnist_model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10)
    ])

    for images, labels in dataset.take(1):
        print("Logits: ", mnist_model(images[0:1]).numpy())

    optimizer = tf.train.AdamOptimizer(learning_rate=0.01)   # the seed: AdamOptimizer()

    loss_history = []

    for _ in range(3):
        for (batch, (images, labels)) in enumerate(dataset.take(400)):
            if batch % 10 == 0:
                print('.', end='')
            with tf.GradientTape() as tape:
                logits = mnist_model(images, training=True)
                loss_value = tf.losses.sparse_softmax_cross_entropy(labels, logits)

            loss_history.append(loss_value.numpy())
            grads = tape.gradient(loss_value, mnist_model.trainable_variables)
            optimizer.apply_gradients(zip(grads, mnist_model.trainable_variables),
                                      global_step=tf.train.get_or_create_global_step())
    out = capsys.readouterr().out
    assert out.startswith("Logits:  [[") and out.endswith("...")
    assert len(loss_history) == 30 and int(tf.train.get_or_create_global_step()) == 30
    assert np.mean(loss_history[-5:]) < 0.6 * np.mean(loss_history[:5])


def test_001_keras_model_with_variables_regression():
    """The guide's `class Model(tf.keras.Model)` with tf.Variable attributes."""
    tf.random.set_seed(4)

    class Model(tf.keras.Model):
        def __init__(self):
            super(Model, self).__init__()
            self.W = tf.Variable(5., name='weight')
            self.B = tf.Variable(10., name='bias')

        def call(self, inputs):
            return inputs * self.W + self.B

    # A toy dataset of points around 3 * x + 2
    NUM_EXAMPLES = 2000
    training_inputs = tf.random_normal([NUM_EXAMPLES])
    noise = tf.random_normal([NUM_EXAMPLES])
    training_outputs = training_inputs * 3 + 2 + noise

    def loss(model, inputs, targets):
        error = model(inputs) - targets
        return tf.reduce_mean(tf.square(error))

    def grad(model, inputs, targets):
        with tf.GradientTape() as tape:
            loss_value = loss(model, inputs, targets)
        return tape.gradient(loss_value, [model.W, model.B])

    model = Model()
    assert model.variables == [model.W, model.B]
    assert [v.name for v in model.trainable_variables] == ["weight:0", "bias:0"]
    assert set(model._trackable_children()) == {"W", "B"}
    optimizer = _sgd(0.01)
    initial = float(loss(model, training_inputs, training_outputs))
    for i in range(300):
        grads = grad(model, training_inputs, training_outputs)
        _apply(grads, [model.W, model.B], 0.01, optimizer)
    final = float(loss(model, training_inputs, training_outputs))
    assert 50 < initial < 90 and final < 1.3          # seed: 67.300 ... 0.947
    assert abs(float(model.W) - 3) < 0.2 and abs(float(model.B) - 2) < 0.2


# --- seed 002: the tf.layers MNISTModel in both data formats ----------------------------------

class MNISTModel002(object):
    def __init__(self, data_format):
        # 'channels_first' is typically faster on GPUs
        # while 'channels_last' is typically faster on CPUs.
        if data_format == 'channels_first':
            self._input_shape = [-1, 1, 28, 28]
        else:
            self._input_shape = [-1, 28, 28, 1]
        self.conv1 = tf.layers.Conv2D(32, 5,
                                      padding='same',
                                      activation=tf.nn.relu,
                                      data_format=data_format)
        self.max_pool2d = tf.layers.MaxPooling2D(
            (2, 2), (2, 2), padding='same', data_format=data_format)
        self.conv2 = tf.layers.Conv2D(64, 5,
                                      padding='same',
                                      activation=tf.nn.relu,
                                      data_format=data_format)
        self.dense1 = tf.layers.Dense(1024, activation=tf.nn.relu)
        self.dropout = tf.layers.Dropout(0.5)
        self.dense2 = tf.layers.Dense(10)

    def predict(self, inputs):
        x = tf.reshape(inputs, self._input_shape)
        x = self.max_pool2d(self.conv1(x))
        x = self.max_pool2d(self.conv2(x))
        x = tf.layers.flatten(x)
        x = self.dropout(self.dense1(x))
        return self.dense2(x)


def loss002(model, inputs, targets):
    return tf.reduce_mean(
        tf.nn.softmax_cross_entropy_with_logits(
            logits=model.predict(inputs), labels=targets))


def test_002_mnist_model_channels_first_matches_channels_last():
    tf.random.set_seed(5)
    inputs = np.random.default_rng(0).random((3, 784)).astype(np.float32)
    last = MNISTModel002('channels_last')
    out_last = last.predict(inputs)
    first = MNISTModel002('channels_first')
    first.predict(inputs)
    assert out_last.shape == (3, 10)
    assert first.conv1.kernel.shape == (5, 5, 1, 32) and first.conv2.kernel.shape == (5, 5, 32, 64)
    assert last.dense1.kernel.shape == first.dense1.kernel.shape == (7 * 7 * 64, 1024)
    # same weights (dense1's rows follow the flatten order: h, w, c vs c, h, w)
    for name in ("conv1", "conv2", "dense2"):
        for a, b in zip(getattr(first, name).variables, getattr(last, name).variables):
            a.assign(b)
    k = last.dense1.kernel.numpy().reshape(7, 7, 64, 1024).transpose(2, 0, 1, 3)
    first.dense1.kernel.assign(k.reshape(-1, 1024))
    first.dense1.bias.assign(last.dense1.bias)
    np.testing.assert_allclose(first.predict(inputs).numpy(), out_last.numpy(), rtol=1e-4,
                               atol=1e-5)


def test_002_mnist_model_trains_with_implicit_gradients():
    tf.random.set_seed(6)
    images, labels = _fake_mnist(16, seed=2)
    inputs = images.reshape(16, 784)
    targets = np.eye(10, dtype=np.float32)[labels]
    model = MNISTModel002('channels_last')
    grad = tfe.implicit_gradients(loss002)
    optimizer = tf.train.AdamOptimizer(learning_rate=1e-3) if HAS_TRAIN else None
    before = float(loss002(model, inputs, targets))
    for i in range(6):
        gv = grad(model, inputs, targets)
        assert len(gv) == 8
        if optimizer is not None:
            optimizer.apply_gradients(gv)
        else:
            _apply([g for g, _ in gv], [v for _, v in gv], 0.05)
    assert float(loss002(model, inputs, targets)) < before


def test_002_dense_on_a_rank_1_batch_says_how_to_fix_it():
    layer = tf.layers.Dense(1)
    with pytest.raises(ValueError, match=r"rank >= 2.*tf\.reshape\(x, \[-1, 1\]\)"):
        layer(tf.random_normal([10]))
    assert not layer.built and layer.variables == []
    assert layer(tf.random_normal([10, 1])).shape == (10, 1)


def test_functional_layers_that_need_variables_point_to_the_classes():
    with pytest.raises(RuntimeError, match="tf.layers.Dense class"):
        tf.layers.dense(tf.ones([1, 2]), 3)
    with pytest.raises(RuntimeError, match="tf.layers.Conv2D class"):
        tf.layers.conv2d(tf.ones([1, 4, 4, 1]), 3, 3)
    x = tf.reshape(tf.range(16.), [1, 4, 4, 1])
    assert tf.layers.max_pooling2d(x, 2, 2).numpy().ravel().tolist() == [5., 7., 13., 15.]
    assert tf.layers.average_pooling2d(x, 2, 2).numpy().ravel().tolist() == [2.5, 4.5, 10.5,
                                                                              12.5]
    assert tf.layers.dropout(x, 0.5) is x


# --- naming, initializers, dtypes, devices ----------------------------------------------------

def test_unique_layer_and_variable_names():
    tf.keras.backend.clear_session()
    a, b, c = tf.layers.Dense(2), tf.layers.Dense(2), tf.keras.layers.Conv2D(1, 1)
    assert (a.name, b.name, c.name) == ("dense", "dense_1", "conv2d")
    assert tf.keras.layers.BatchNormalization().name == "batch_normalization"
    assert tf.keras.layers.GlobalAveragePooling2D().name == "global_average_pooling2d"
    assert tf.layers.MaxPooling2D(2, 2).name == "max_pooling2d"
    b(tf.ones([1, 3]))
    assert [v.name for v in b.variables] == ["dense_1/kernel:0", "dense_1/bias:0"]
    assert tf.layers.Dense(1, name="out").name == "out"
    assert TwoLayerNet().name == "two_layer_net"
    tf.keras.backend.clear_session()
    assert tf.layers.Dense(2).name == "dense"


def test_set_seed_makes_models_reproducible():
    def weights(seed):
        tf.random.set_seed(seed)
        m = _guide_cnn()
        m(tf.zeros([1, 8, 8, 1]))
        return [v.numpy() for v in m.variables]

    a, b, c = weights(7), weights(7), weights(8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    np.testing.assert_array_equal(a[1], np.zeros(16, np.float32))     # biases: zeros


def test_initializers_by_name_and_callable():
    d = tf.layers.Dense(3, kernel_initializer="ones",
                        bias_initializer=tf.keras.initializers.Constant(2.))
    y = d(tf.constant([[1., 2.]]))
    np.testing.assert_array_equal(y.numpy(), [[5., 5., 5.]])
    d2 = tf.layers.Dense(2, kernel_initializer=lambda shape, dtype=None: tf.fill(shape, 0.5),
                         bias_initializer="zeros")
    np.testing.assert_array_equal(d2(tf.constant([[2.]])).numpy(), [[1., 1.]])
    tf.random.set_seed(0)
    big = tf.keras.initializers.get("GlorotUniform")([200, 300]).numpy()
    limit = np.sqrt(6 / 500)
    assert np.abs(big).max() <= limit and np.abs(big).max() > 0.95 * limit
    assert abs(big.std() - limit / np.sqrt(3)) < 0.01 * limit
    he = tf.keras.initializers.he_normal()([400, 100]).numpy()
    assert abs(he.std() - np.sqrt(2 / 400)) < 0.1 * np.sqrt(2 / 400)
    with pytest.raises(ValueError, match="Unknown initializer"):
        tf.layers.Dense(2, kernel_initializer="nope")(tf.ones([1, 1]))


def test_float64_layers_and_input_casting():
    d = tf.layers.Dense(2, dtype="float64")
    y = d(np.ones((1, 3)))
    assert d.kernel.dtype == tf.float64 and y.dtype == tf.float64
    d32 = tf.layers.Dense(2)
    y = d32(np.ones((1, 3)))                   # NumPy float64 input: cast to the layer's dtype
    assert d32.kernel.dtype == tf.float32 and y.dtype == tf.float32
    assert d32([[1., 2., 3.]]).shape == (1, 2)    # Python lists convert too


def test_variables_on_the_current_device():
    with tf.device("/cpu:0"):
        d = tf.layers.Dense(2)
        d(tf.ones([1, 3]))
    assert all(v.device == "cpu:0" for v in d.variables)
    # outside a scope the op runs where its inputs live
    assert d(tf.ones([1, 3]).cpu()).device == "cpu:0"


@needs_gpu
def test_layers_on_a_gpu_take_host_inputs():
    with tf.device("/gpu:0"):
        model = _guide_cnn()
        model(tf.zeros([1, 8, 8, 1]))
    assert all(v.device != "cpu:0" for v in model.variables)   # (an accelerator)
    dev = model.variables[0].device
    host = tf.zeros([4, 28, 28, 1]).cpu()
    out = model(host)                        # host data follows the model (like a scope)
    assert out.device == dev and out.shape == (4, 10)


# --- layers one by one ------------------------------------------------------------------------

def test_dense_activation_names_and_functions():
    x = tf.constant([[-1., 2.]])
    for act in ("relu", tf.nn.relu, tf.keras.activations.relu):
        d = tf.layers.Dense(2, activation=act,
                            kernel_initializer=tf.keras.initializers.Constant(np.eye(2)))
        np.testing.assert_array_equal(d(x).numpy(), [[0., 2.]])
    d = tf.layers.Dense(2, activation="softmax", use_bias=False)
    np.testing.assert_allclose(tf.reduce_sum(d(x), axis=-1).numpy(), [1.], rtol=1e-6)
    assert len(d.variables) == 1
    assert tf.layers.Dense(2, activation="linear").activation is None
    with pytest.raises(ValueError, match="Unknown activation"):
        tf.layers.Dense(2, activation="nope")


def test_dense_on_rank_3_applies_to_last_axis_and_its_gradient():
    d = tf.layers.Dense(4)
    x = tf.random_normal([2, 3, 5])
    with tf.GradientTape() as tape:
        y = d(x)
        s = tf.reduce_sum(y * y)
    gk, gb = tape.gradient(s, [d.kernel, d.bias])
    xn, k, b = x.numpy(), d.kernel.numpy(), d.bias.numpy()
    yn = xn @ k + b
    np.testing.assert_allclose(y.numpy(), yn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gk.numpy(), np.einsum("bti,btj->ij", xn, 2 * yn), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), (2 * yn).sum((0, 1)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding,strides,shape", [
    ("valid", 1, (2, 6, 6, 4)), ("same", 1, (2, 8, 8, 4)), ("SAME", 2, (2, 4, 4, 4)),
    ("valid", (2, 1), (2, 3, 6, 4))])
def test_conv2d_shapes_and_values(padding, strides, shape):
    conv = tf.keras.layers.Conv2D(4, 3, strides=strides, padding=padding,
                                  bias_initializer="ones")
    x = tf.random_normal([2, 8, 8, 3])
    y = conv(x)
    assert y.shape == shape
    ref = tf.nn.conv2d(x, conv.kernel, strides=strides, padding=padding.upper()) + 1.0
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_conv2d_channels_first_matches_channels_last():
    x = tf.random_normal([2, 7, 7, 3])
    a = tf.layers.Conv2D(5, 3, padding="same", activation="relu", bias_initializer="ones")
    b = tf.layers.Conv2D(5, 3, padding="same", activation="relu", bias_initializer="ones",
                         data_format="channels_first")
    ya = a(x)
    yb = b(tf.transpose(x, [0, 3, 1, 2]))
    assert b.kernel.shape == (3, 3, 3, 5) and yb.shape == (2, 5, 7, 7)
    b.kernel.assign(a.kernel)
    yb = b(tf.transpose(x, [0, 3, 1, 2]))
    np.testing.assert_allclose(tf.transpose(yb, [0, 2, 3, 1]).numpy(), ya.numpy(), rtol=1e-5,
                               atol=1e-5)


def test_pooling_layers():
    x = tf.reshape(tf.range(32.), [1, 4, 4, 2])
    mp = tf.keras.layers.MaxPooling2D()              # pool 2x2, strides = pool
    np.testing.assert_array_equal(mp(x).numpy()[0, :, :, 0], [[10., 14.], [26., 30.]])
    ap = tf.keras.layers.AveragePooling2D(2, strides=2)
    np.testing.assert_array_equal(ap(x).numpy()[0, :, :, 1], [[6., 10.], [22., 26.]])
    gap = tf.keras.layers.GlobalAveragePooling2D()
    np.testing.assert_array_equal(gap(x).numpy(), [[15., 16.]])
    gmp = tf.keras.layers.GlobalMaxPooling2D()
    np.testing.assert_array_equal(gmp(x).numpy(), [[30., 31.]])
    xc = tf.transpose(x, [0, 3, 1, 2])
    np.testing.assert_array_equal(
        tf.keras.layers.GlobalAveragePooling2D(data_format="channels_first")(xc).numpy(),
        [[15., 16.]])
    np.testing.assert_array_equal(
        tf.layers.MaxPooling2D(2, 2, data_format="channels_first")(xc).numpy(),
        tf.transpose(mp(x), [0, 3, 1, 2]).numpy())
    assert tf.layers.MaxPooling2D((2, 2), (2, 2), padding="same")(tf.zeros([1, 5, 5, 1])).shape \
        == (1, 3, 3, 1)


def test_flatten_layer_and_function():
    x = tf.reshape(tf.range(24.), [2, 3, 2, 2])
    assert tf.keras.layers.Flatten()(x).shape == (2, 12)
    np.testing.assert_array_equal(tf.layers.flatten(x).numpy(), x.numpy().reshape(2, 12))
    # channels_first: channels are moved last before flattening (format-independent order)
    cf = tf.keras.layers.Flatten(data_format="channels_first")(x)
    np.testing.assert_array_equal(cf.numpy(), x.numpy().transpose(0, 2, 3, 1).reshape(2, 12))


def test_dropout_training_and_inference():
    tf.random.set_seed(0)
    drop = tf.layers.Dropout(0.5)
    x = tf.ones([100, 100])
    assert drop(x) is x                                # inference: identity
    assert drop(x, training=False) is x
    y = drop(x, training=True).numpy()
    assert set(np.unique(y)) == {0.0, 2.0}
    assert 0.45 < (y == 0).mean() < 0.55
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = drop(x, training=True)
    g = tape.gradient(out, x).numpy()
    np.testing.assert_array_equal(g, out.numpy())      # the same scaled mask


def test_training_flag_reaches_nested_layers():
    """`model(x, training=True)` reaches a Dropout inside a subclassed model that calls
    it without `training` (Keras's call context); the flag is passed to call() only
    when call() takes it."""
    seen = []

    class NoTraining(tf.keras.layers.Layer):
        def call(self, inputs):
            seen.append("no-arg")
            return inputs

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.drop = tf.keras.layers.Dropout(0.9)
            self.plain = NoTraining()

        def call(self, x):
            return self.plain(self.drop(x))

    net = Net()
    x = tf.ones([50, 50])
    np.testing.assert_array_equal(net(x).numpy(), x.numpy())
    assert (net(x, training=True).numpy() == 0).mean() > 0.8
    np.testing.assert_array_equal(net(x).numpy(), x.numpy())   # the context is restored
    seq = tf.keras.Sequential([tf.keras.layers.Dropout(0.9), NoTraining()])
    assert (seq(x, training=True).numpy() == 0).mean() > 0.8
    assert seen.count("no-arg") == 4


def test_batch_normalization_training_and_inference():
    bn = tf.keras.layers.BatchNormalization(momentum=0.5, epsilon=1e-3)
    xn = np.random.default_rng(0).normal(3.0, 2.0, (64, 5, 5, 3)).astype(np.float32)
    x = tf.constant(xn)
    with tf.GradientTape() as tape:
        y = bn(x, training=True)
        s = tf.reduce_sum(y * tf.constant(np.arange(3, dtype=np.float32)))
    mean, var = xn.mean((0, 1, 2)), xn.var((0, 1, 2))
    np.testing.assert_allclose(y.numpy(), (xn - mean) / np.sqrt(var + 1e-3), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.5 + 0.5 * var, rtol=1e-5)
    assert [v.name.split("/")[-1] for v in bn.trainable_variables] == ["gamma:0", "beta:0"]
    assert [v.name.split("/")[-1] for v in bn.non_trainable_variables] == [
        "moving_mean:0", "moving_variance:0"]
    ggamma, gbeta = tape.gradient(s, bn.trainable_variables)
    np.testing.assert_allclose(gbeta.numpy(), 64 * 25 * np.arange(3), rtol=1e-5)
    assert ggamma.shape == (3,)
    # inference: the moving statistics
    y_inf = bn(x)
    np.testing.assert_allclose(
        y_inf.numpy(), (xn - bn.moving_mean.numpy()) / np.sqrt(bn.moving_variance.numpy() + 1e-3),
        rtol=1e-4, atol=1e-4)
    mm = bn.moving_mean.numpy()
    bn(x, training=False)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mm)
    # a frozen layer runs in inference mode and has no trainable variables
    bn.trainable = False
    np.testing.assert_allclose(bn(x, training=True).numpy(), y_inf.numpy(), rtol=1e-6)
    assert bn.trainable_variables == [] and len(bn.non_trainable_variables) == 4


def test_batch_normalization_channels_first_axis_1():
    xn = np.random.default_rng(1).normal(1.0, 3.0, (8, 3, 4, 4)).astype(np.float32)
    bn = tf.layers.BatchNormalization(axis=1)
    y = bn(xn, training=True)
    assert bn.gamma.shape == (3,)
    m, v = xn.mean((0, 2, 3), keepdims=True), xn.var((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y.numpy(), (xn - m) / np.sqrt(v + 1e-3), rtol=1e-4, atol=1e-4)


def test_embedding_lookup_and_gradient():
    emb = tf.keras.layers.Embedding(10, 4)
    ids = tf.constant([[1, 2], [2, 9]])
    with tf.GradientTape() as tape:
        out = emb(ids)
        s = tf.reduce_sum(out)
    assert out.shape == (2, 2, 4) and emb.embeddings.shape == (10, 4)
    np.testing.assert_array_equal(out.numpy()[1, 0], emb.embeddings.numpy()[2])
    assert np.abs(emb.embeddings.numpy()).max() <= 0.05      # 'uniform': +-0.05
    g = tf.convert_to_tensor(tape.gradient(s, emb.embeddings)).numpy()
    np.testing.assert_array_equal(g[:, 0], [0, 1, 2, 0, 0, 0, 0, 0, 0, 1])


def test_activation_layer():
    np.testing.assert_array_equal(tf.keras.layers.Activation("relu")(
        tf.constant([-1., 1.])).numpy(), [0., 1.])
    np.testing.assert_allclose(tf.keras.layers.Activation(tf.nn.sigmoid)(
        tf.constant([0.])).numpy(), [0.5])


# --- tracking ---------------------------------------------------------------------------------

def test_attribute_tracking_lists_dicts_and_order():
    class Block(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.denses = [tf.layers.Dense(3), tf.layers.Dense(3)]
            self.extra = {"scale": tf.Variable(2.0, name="scale")}
            self.frozen = tf.Variable(1.0, trainable=False, name="frozen")

        def call(self, x):
            for d in self.denses:
                x = d(x)
            return x * self.extra["scale"] * self.frozen

    b = Block()
    b(tf.ones([1, 2]))
    assert len(b.variables) == 6
    names = [v.name for v in b.variables]
    assert names[:2] == ["scale:0", "frozen:0"]          # creation order
    assert [v.name for v in b.non_trainable_variables] == ["frozen:0"]
    assert len(b.trainable_variables) == 5
    assert sorted(_paths(b)) == ["denses/0/bias", "denses/0/kernel", "denses/1/bias",
                                 "denses/1/kernel", "extra/scale", "frozen"]
    # mutating a tracked list is seen
    b.denses.append(tf.layers.Dense(3))
    b(tf.ones([1, 2]))
    assert len(b.variables) == 8
    # freezing a layer moves its variables to non-trainable (the Variables stay trainable)
    b.denses[0].trainable = False
    assert len(b.trainable_variables) == 5 and len(b.non_trainable_variables) == 3
    # deleting an attribute untracks it
    del b.extra
    assert len(b.variables) == 7


def test_nested_models_and_trackable_children_keys():
    class Outer(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = ThreeLayerNet()
            self.head = tf.keras.Sequential([tf.keras.layers.Dense(2)])

        def call(self, x):
            return self.head(self.inner(x))

    m = Outer()
    m(tf.constant([[1.]]))
    assert sorted(_paths(m)) == ["head/layer-0/bias", "head/layer-0/kernel",
                                 "inner/a/layer1/kernel", "inner/a/layer2/kernel",
                                 "inner/b/kernel"]
    assert [v.shape.as_list() for v in m.variables] == [[1, 2], [2, 3], [3, 4], [4, 2], [2]]
    assert len(m.submodules) == 7


def test_assigning_layers_before_super_init_is_an_error():
    class Bad(tf.keras.Model):
        def __init__(self):
            self.d = tf.layers.Dense(1)
            super().__init__()

    with pytest.raises(RuntimeError, match=r"super\(\).__init__\(\)"):
        Bad()


def test_model_api_errors():
    with pytest.raises(TypeError, match="must be a symbolic tensor"):
        tf.keras.Model(inputs=1, outputs=2)      # the functional API: tests/training/test_functional.py
    with pytest.raises(NotImplementedError, match="must implement call"):
        tf.keras.Model()(tf.ones([1, 1]))
    with pytest.raises(TypeError, match="not understood: unitz"):
        tf.layers.Dense(2, unitz=3)
    with pytest.raises(RuntimeError, match="compile"):
        tf.keras.Sequential([tf.layers.Dense(1)]).fit(np.ones((2, 1)), np.ones((2, 1)))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_errors_name_the_layers_they_happened_in():
    m = tf.keras.Sequential([tf.layers.Dense(2, name="d")], name="seq")
    m(tf.ones([1, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[Op:MatMul\]") as info:
        m(tf.ones([1, 4]))
    assert info.value.__notes__ == ["(while calling layer 'd' of type Dense)",
                                    "(while calling layer 'seq' of type Sequential)"]
    assert [v.shape.as_list() for v in m.variables] == [[3, 2], [2]]     # untouched


def test_weights_helpers_and_summary(capsys):
    m = tf.keras.Sequential([tf.keras.layers.Dense(4, input_dim=3), tf.keras.layers.Dense(2)])
    assert m.count_params() == 3 * 4 + 4 + 4 * 2 + 2
    w = m.get_weights()
    m.set_weights([np.zeros_like(a) for a in w])
    assert all((a == 0).all() for a in m.get_weights())
    m.summary()
    out = capsys.readouterr().out
    assert "Total params: 26" in out and "(Dense)" in out
    m2 = tf.keras.Sequential([tf.keras.layers.Dense(4)])
    m2.build((None, 6))
    assert m2.variables[0].shape == (6, 4)
    m2.add(tf.keras.layers.Dense(1))
    assert len(m2.layers) == 2 and m2(tf.ones([1, 6])).shape == (1, 1)
    assert m2.pop() is not None and len(m2.layers) == 1


def test_variable_creator_scope_sees_layer_variables():
    made = []

    def creator(next_creator, **kwargs):
        made.append((kwargs["name"], tuple(kwargs["shape"])))
        return next_creator(**kwargs)

    with tf.layers.variable_creator_scope(creator):
        d = tf.layers.Dense(3, name="hooked")
        d(tf.ones([1, 2]))
    assert made == [("hooked/kernel", (2, 3)), ("hooked/bias", (3,))]


def test_regularization_losses():
    d = tf.layers.Dense(2, kernel_initializer="ones",
                        kernel_regularizer=tf.keras.regularizers.l2(0.1))
    m = tf.keras.Sequential([d])
    m(tf.ones([1, 3]))
    assert len(m.losses) == 1
    np.testing.assert_allclose(float(m.losses[0]), 0.1 * 6, rtol=1e-6)


# --- training ---------------------------------------------------------------------------------

def _toy_problem(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    y = ((x[:, 0] * x[:, 1]) > 0).astype(np.int64)       # XOR-like: needs the hidden layer
    return x, y


def test_sequential_trained_with_gradient_tape_reaches_low_loss():
    tf.random.set_seed(0)
    x, y = _toy_problem()
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    opt = tf.train.GradientDescentOptimizer(0.5) if HAS_TRAIN else None
    xs, ys = tf.constant(x), tf.constant(y)
    for step in range(400):
        with tf.GradientTape() as tape:
            loss = _sparse_xent(ys, model(xs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        _apply(grads, model.trainable_variables, 0.5, opt)
    assert float(loss) < 0.1
    acc = (np.argmax(model(xs).numpy(), 1) == y).mean()
    assert acc > 0.97


def test_fit_evaluate_predict_with_any_optimizer_object():
    tf.random.set_seed(1)
    x, y = _toy_problem(200, seed=1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    opt = _StubSGD(0.5)
    model.compile(optimizer=opt,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=20, epochs=40, verbose=0, validation_split=0.1)
    assert opt.calls == 40 * 9                              # 180 training samples / 20
    h = history.history
    assert set(h) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert len(h["loss"]) == 40 and history.epoch == list(range(40))
    assert h["loss"][-1] < 0.3 * h["loss"][0] and h["accuracy"][-1] > 0.9
    loss, acc = model.evaluate(x, y, batch_size=64, verbose=0)
    assert loss < 0.3 and acc > 0.9
    # evaluate's loss is the mean over examples
    logits = model(tf.constant(x))
    np.testing.assert_allclose(loss, float(_sparse_xent(tf.constant(y), logits)), rtol=1e-4)
    pred = model.predict(x, batch_size=64)
    assert isinstance(pred, tf.Tensor) and pred.shape == (200, 2)
    np.testing.assert_allclose(pred.numpy(), logits.numpy(), rtol=1e-5, atol=1e-6)
    assert model.evaluate(x, y, verbose=0, return_dict=True).keys() == {"loss", "accuracy"}
    assert model.metrics_names == ["loss", "accuracy"]


def test_fit_on_an_iterable_of_batches_prints_progress(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)          # the plain printer
    tf.random.set_seed(2)
    x, y = _toy_problem(64, seed=2)
    batches = [(tf.constant(x[i:i + 16]), tf.constant(y[i:i + 16])) for i in range(0, 64, 16)]

    class Batches:                      # anything iterable, like a tf.data.Dataset
        def __iter__(self):
            return iter(batches)

    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile(_StubSGD(0.2), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["sparse_categorical_accuracy"])
    hist = model.fit(Batches(), epochs=3, verbose=2, validation_data=Batches())
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[0].startswith("Epoch 1/3 4 steps")
    assert re.search(r"loss: \d\.\d{4} - sparse_categorical_accuracy: \d\.\d{4} - "
                     r"val_loss: \d\.\d{4}", out[-1])
    assert len(hist.history["val_loss"]) == 3
    model.fit(Batches(), epochs=1, verbose=1)
    assert "loss:" in capsys.readouterr().out


@pytest.mark.skipif(not _has("tqdm"), reason="tqdm is not installed")
def test_fit_progress_bar_with_tqdm(capsys):
    x, y = _toy_problem(64, seed=5)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model.compile(_StubSGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=16, epochs=2, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "4/4" in out
    assert re.search(r"loss=\d\.\d{4}, accuracy=\d\.\d{4}", out)


@pytest.mark.skipif(not HAS_DATA, reason="tapeflow.data is not available yet")
def test_fit_on_a_tf_data_dataset():
    tf.random.set_seed(3)
    x, y = _toy_problem(96, seed=3)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(96).batch(32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile(_StubSGD(0.3), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(ds, epochs=5, verbose=0)
    assert hist.params["steps"] == 3 and hist.history["loss"][-1] < hist.history["loss"][0]
    assert isinstance(model.evaluate(ds, verbose=0), float)
    assert model.predict(ds).shape == (96, 2)


@needs_train
def test_compile_with_names_uses_tf_train():
    tf.random.set_seed(4)
    x, _ = _toy_problem(128, seed=4)
    y = (x.sum(1) > 0).astype(np.int64)                  # linearly separable
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    assert type(model.optimizer).__name__ == "Adam"
    hist = model.fit(x, y, batch_size=16, epochs=30, verbose=0)
    assert hist.history["loss"][-1] < 0.5 * hist.history["loss"][0]
    assert hist.history["accuracy"][-1] > 0.85
    model.compile(tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    yy = np.eye(2, dtype=np.float32)[y]
    first = model.evaluate(x, yy, verbose=0)
    model.fit(x, yy, epochs=3, verbose=0)
    assert model.evaluate(x, yy, verbose=0) < first


def test_fit_callbacks_and_early_stopping():
    x, y = _toy_problem(40)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model.compile(_StubSGD(0.0), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = []
    cb = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: epochs.append(e))
    stop = tf.keras.callbacks.EarlyStopping(monitor="loss", patience=1)
    hist = model.fit(x, y, epochs=10, verbose=0, callbacks=[cb, stop])
    assert epochs == [0, 1, 2] and len(hist.history["loss"]) == 3    # lr 0: no improvement


# --- the keras namespace ----------------------------------------------------------------------

def test_keras_namespace():
    assert tf.keras.layers is tf.layers
    assert tf.keras.Model is tf.models.Model and tf.keras.Sequential is tf.models.Sequential
    assert tfe.Network is tf.models.Network and issubclass(tfe.Network, tf.keras.Model)
    assert issubclass(tf.keras.Model, tf.keras.layers.Layer)
    assert tf.keras.backend.floatx() == "float32"
    with pytest.raises(AttributeError):
        tf.keras.nothing_here
    if HAS_TRAIN:
        assert tf.keras.optimizers.SGD is tf.train.SGD
        assert type(tf.keras.optimizers.get("rmsprop")).__name__ == "RMSprop"
    if _has("tapeflow.datasets"):
        assert callable(tf.keras.datasets.mnist.load_data)


def test_keras_losses_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 4)).astype(np.float32)
    labels = rng.integers(0, 4, 5)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = -np.log(p[np.arange(5), labels])
    L = tf.keras.losses
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(labels, logits, from_logits=True)
                               .numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(labels, p).numpy(), want,
                               rtol=1e-4)
    onehot = np.eye(4, dtype=np.float32)[labels]
    np.testing.assert_allclose(L.categorical_crossentropy(onehot, p).numpy(), want, rtol=1e-4)
    np.testing.assert_allclose(float(L.CategoricalCrossentropy(from_logits=True)(onehot, logits)),
                               want.mean(), rtol=1e-5)
    z = np.array([[0.2], [0.9]], np.float32)
    t = np.array([0., 1.], np.float32)
    np.testing.assert_allclose(L.binary_crossentropy(t, z).numpy(),
                               [-np.log(0.8), -np.log(0.9)], rtol=1e-5)
    np.testing.assert_allclose(L.mse([[1., 2.]], [[3., 2.]]).numpy(), [2.])
    np.testing.assert_allclose(float(L.MeanAbsoluteError()([[1., 2.]], [[3., 2.]])), 1.)
    M = tf.keras.metrics
    np.testing.assert_array_equal(M.categorical_accuracy(onehot, p).numpy(),
                                  (p.argmax(1) == labels).astype(np.float32))
    np.testing.assert_array_equal(M.binary_accuracy(t, z).numpy(), [1., 1.])
