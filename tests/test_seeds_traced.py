"""The seeds' eager examples wrapped in ``tapeflow.function`` give the results they give
eagerly (issue 8, "Done when").

Each example runs twice, eagerly and traced, from the same starting state, and the
results are compared (exactly where the same kernels run in the same order, to 1e-6
otherwise). Examples whose Python control flow depends on tensor values (the seeds'
Collatz loop, ``abs`` with ``if x > 0``, FizzBuzz) raise a TracingError when traced as
written; they are rewritten with ``tf.while_loop`` / ``tf.cond`` / ``tf.print``, as the
error message suggests. Every traced function is called several times so that replays,
not only the trace, are checked.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import tracing

tfe = tf


def _close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# --- seed 000 -----------------------------------------------------------------------------

def test_000_matmul():
    f = tf.function(lambda x: tf.matmul(x, x))
    for v in ([[2.]], [[3.]], [[1., 2.], [3., 4.]]):
        np.testing.assert_array_equal(f(tf.constant(v)).numpy(), tf.matmul(v, v).numpy())


def _collatz_python(a):
    while not tf.equal(a, 1):
        if tf.equal(a % 2, 0):
            a = a / 2
        else:
            a = 3 * a + 1
        print(a)
    return a


def _collatz_graph(a):
    """The seed's loop with tf.while_loop / tf.cond / tf.print (float64 throughout: the
    seed's first ``a / 2`` of an int32 is a float64, and loop variables keep a dtype)."""
    def body(a):
        a = tf.cond(tf.equal(a % 2, 0), lambda: a / 2, lambda: 3 * a + 1)
        tf.print(a)
        return a
    return tf.while_loop(lambda a: tf.logical_not(tf.equal(a, 1)), body, a)


def test_000_collatz_as_written_is_a_clear_error_when_traced():
    with pytest.raises(tracing.TracingError) as info:
        tf.function(_collatz_python, autograph=False)(tf.constant(12))
    msg = str(info.value)
    assert "test_seeds_traced.py" in msg and "tf.while_loop" in msg and "tf.cond" in msg


def test_000_collatz_with_while_loop_and_cond(capsys):
    f = tf.function(_collatz_graph)
    for start in (12, 27, 7, 12):
        eager = _collatz_graph(tf.constant(start, dtype=tf.float64))
        out_eager = capsys.readouterr().err       # (tf.print: standard error, as TF)
        traced = f(tf.constant(start, dtype=tf.float64))
        out_traced = capsys.readouterr().err
        assert float(eager) == float(traced) == 1.0
        assert out_traced == out_eager
    assert out_eager.split() == ["6", "3", "10", "5", "16", "8", "4", "2", "1"]
    assert f.experimental_get_tracing_count() == 1


def _square(x):
    return tf.multiply(x, x)


@pytest.mark.parametrize("x", [3., -1.5, 0.25])
def test_000_001_002_gradients_of_every_order(x):
    sq = tf.function(_square)
    for fn in (_square, sq):        # (the first traced call traces, the others replay)
        grad = tfe.gradients_function(fn)
        gradgrad = tfe.gradients_function(lambda x, grad=grad: grad(x)[0])
        gradgradgrad = tfe.gradients_function(lambda x, gradgrad=gradgrad: gradgrad(x)[0])
        for _ in range(2):
            assert float(fn(x)) == x * x
            assert float(grad(x)[0]) == 2 * x
            assert float(gradgrad(x)[0]) == 2.0
            third = gradgradgrad(x)
            assert third == [None] or float(third[0]) == 0.0


def test_000_001_traced_gradient_functions():
    grad = tf.function(tfe.gradients_function(_square))
    gradgrad = tf.function(tfe.gradients_function(lambda x: tfe.gradients_function(
        _square)(x)[0]))
    for x in (3., 4., -2.):
        assert float(grad(tf.constant(x))[0]) == 2 * x
        assert float(gradgrad(tf.constant(x))[0]) == 2.0


def _abs_python(x):
    return x if x > 0. else -x


def _abs_graph(x):
    return tf.cond(x > 0., lambda: x, lambda: -x)


def test_000_001_abs_gradient_through_control_flow():
    with pytest.raises(tracing.TracingError, match="tf.cond"):
        tfe.gradients_function(tf.function(_abs_python, autograph=False))(tf.constant(2.0))
    f = tf.function(_abs_graph)
    grad = tfe.gradients_function(f)
    for x, g in ((2.0, 1.0), (-2.0, -1.0), (3.0, 1.0), (-3.0, -1.0)):
        assert float(f(tf.constant(x))) == abs(x)
        assert float(grad(tf.constant(x))[0]) == g
        assert float(tfe.gradients_function(_abs_python)(x)[0]) == g
    traced_grad = tf.function(tfe.gradients_function(_abs_graph))
    for x, g in ((2.0, 1.0), (-2.0, -1.0), (5.0, 1.0)):
        assert float(traced_grad(tf.constant(x))[0]) == g


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_000_001_002_log1pexp_without_custom_gradient_is_nan_at_100():
    f = tf.function(lambda x: tf.log(1 + tf.exp(x)))
    grad = tfe.gradients_function(f)
    assert float(grad(0.)[0]) == 0.5
    assert np.isnan(float(grad(100.)[0]))
    assert float(grad(tf.constant(0.))[0]) == 0.5


def _log1pexp_custom():
    @tfe.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tf.log(1 + e), grad
    return log1pexp


def test_000_001_002_log1pexp_with_custom_gradient():
    f = tf.function(_log1pexp_custom())
    grad = tfe.gradients_function(f)
    for _ in range(3):
        assert float(grad(tf.constant(0.))[0]) == 0.5
        assert float(grad(tf.constant(100.))[0]) == 1.0
    traced_grad = tf.function(tfe.gradients_function(_log1pexp_custom()))
    for _ in range(3):
        assert float(traced_grad(tf.constant(100.))[0]) == 1.0


# --- seed 001 -----------------------------------------------------------------------------

def _fizzbuzz_graph(max_num):
    def body(num, counter):
        num = num + 1
        fizz = tf.equal(num % 3, 0)
        buzz = tf.equal(num % 5, 0)

        def say(text):
            def branch():
                tf.print(text)
                return tf.constant(0)
            return branch

        def number():
            tf.print(num)
            return tf.constant(0)
        tf.cond(tf.logical_and(fizz, buzz), say("FizzBuzz"),
                lambda: tf.cond(fizz, say("Fizz"),
                                lambda: tf.cond(buzz, say("Buzz"), number)))
        return num, counter + 1
    return tf.while_loop(lambda num, counter: num < max_num, body,
                         [tf.constant(0), tf.constant(0)])[1]


def test_001_fizzbuzz_with_while_loop_cond_and_print(capsys):
    want = ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11", "Fizz",
            "13", "14", "FizzBuzz", ""]
    assert int(_fizzbuzz_graph(tf.constant(15))) == 15
    assert capsys.readouterr().err.split("\n") == want
    f = tf.function(_fizzbuzz_graph)
    for n in (15, 15, 5):
        assert int(f(tf.constant(n))) == n
        assert capsys.readouterr().err.split("\n") == want[:n] + [""]


def test_001_gradient_tape_with_variable():
    w = tf.Variable([[1.0]])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = w * w
        return tape.gradient(loss, w)
    for _ in range(2):
        np.testing.assert_array_equal(step().numpy(), [[2.0]])
    w.assign([[3.0]])
    np.testing.assert_array_equal(step().numpy(), [[6.0]])


def test_001_clip_gradient_by_norm_custom_gradient():
    @tf.custom_gradient
    def clip_gradient_by_norm(x, norm):
        y = tf.identity(x)

        def grad_fn(dresult):
            return [tf.clip_by_norm(dresult, norm), None]
        return y, grad_fn

    @tf.function
    def loss_and_grad(x, weights):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(clip_gradient_by_norm(x, 1.0) * weights)
        return loss, tape.gradient(loss, x)
    x = tf.constant([1.0, 1.0])
    for w, g in (([3.0, 4.0], [0.6, 0.8]), ([0.3, 0.4], [0.3, 0.4]), ([3.0, 4.0], [0.6, 0.8])):
        loss, grad = loss_and_grad(x, tf.constant(w))
        _close(loss, sum(w))
        _close(grad, g)


def test_001_line_search_as_written_is_a_clear_error_when_traced():
    def step(init_x):
        with tf.GradientTape() as tape:
            tape.watch(init_x)
            value = tf.reduce_sum(init_x * init_x)
        grad = tape.gradient(value, init_x)
        if value > tf.reduce_sum(grad):
            return init_x
        return grad
    with pytest.raises(tracing.TracingError, match=r"test_seeds_traced\.py:\d+"):
        tf.function(step, autograph=False)(tf.constant([1.0, 2.0]))


# --- seed 002 -----------------------------------------------------------------------------

def test_002_linear_regression_with_gradients_function():
    tf.random.set_seed(1234)
    training_inputs = tf.random_normal([1000])
    noise = tf.random_normal([1000])
    training_outputs = training_inputs * 3 + 2 + noise

    def loss(weight, bias):
        error = training_inputs * weight + bias - training_outputs
        return tf.reduce_mean(tf.square(error))
    results = []
    for grad in (tfe.gradients_function(loss), tf.function(tfe.gradients_function(loss))):
        W, B = tf.constant(5.), tf.constant(10.)
        history = []
        for i in range(60):
            (dW, dB) = grad(W, B)
            W -= dW * 0.01
            B -= dB * 0.01
            history.append(float(loss(W, B)))
        results.append((history, float(W), float(B)))
    _close(results[0][0], results[1][0])
    assert results[0][1:] == results[1][1:]
    assert results[1][0][-1] < results[1][0][0] / 2


def test_002_implicit_gradients_linear_regression_step():
    """Seed 002's `optimizer.apply_gradients(grad(model, inputs, targets))`, traced."""
    tf.random.set_seed(0)
    training_inputs = tf.random_normal([1000])
    training_outputs = training_inputs * 3 + 2 + tf.random_normal([1000])

    class Model(object):
        def __init__(self):
            self.W = tfe.Variable(5., name='weight')
            self.B = tfe.Variable(10., name='bias')

        def predict(self, inputs):
            return inputs * self.W + self.B

    def loss(model, inputs, targets):
        error = model.predict(inputs) - targets
        return tf.reduce_mean(tf.square(error))
    results = []
    for traced in (False, True):
        model = Model()
        grad = tfe.implicit_gradients(loss)
        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.01)

        def step(inputs, targets, model=model, grad=grad, optimizer=optimizer):
            optimizer.apply_gradients(grad(model, inputs, targets))
            return loss(model, inputs, targets)
        fn = tf.function(step) if traced else step
        history = [float(fn(training_inputs, training_outputs)) for _ in range(50)]
        results.append((history, float(model.W), float(model.B)))
    _close(results[0][0], results[1][0])
    assert results[0][1:] == results[1][1:]


def test_002_derivatives_of_a_traced_function():
    f = tf.function(lambda x: tf.multiply(x, x))
    assert 9 == f(3.).numpy()
    df = tfe.gradients_function(f)
    d2f = tfe.gradients_function(lambda x: df(x)[0])
    for _ in range(2):
        assert 6 == df(3.)[0].numpy()
        assert 2 == d2f(3.)[0].numpy()


# --- seed 003 -----------------------------------------------------------------------------

def test_003_implicit_gradients_with_variable():
    x = tfe.Variable(2.0)
    loss = tf.function(lambda y: (y - x ** 2) ** 2)
    grad = tfe.implicit_gradients(loss)
    for _ in range(3):
        assert float(loss(7.)) == 9.0
        (g, v), = grad(7.)
        assert v is x and float(g) == -24.0
    x.assign(3.0)
    (g, v), = grad(7.)
    assert float(g) == -2 * (7.0 - 9.0) * 2 * 3.0


def test_003_gather_error_in_a_replay_is_immediate_and_readable():
    f = tf.function(lambda params, i: tf.gather(params, i))
    params = tf.zeros([128])
    assert float(f(params, tf.constant([127]))[0]) == 0.0
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(params, tf.constant([3081]))
    msg = str(info.value)
    assert "indices[0] = 3081 is not in [0, 128)" in msg and "[Op:GatherV2]" in msg
    assert isinstance(info.value, ValueError)


# --- seed 004 -----------------------------------------------------------------------------

def f4(abcd):
    """Hyperbox-hypersurface-area."""
    return 2.0 * sum(abcd[i] * abcd[j] * abcd[k]
                     for (i, j, k) in [(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)])


def test_004_hypersurface_and_its_gradient():
    traced = tf.function(f4)
    p0 = tfe.Variable([1.0, 2.0, 3.0, 4.0])
    for _ in range(3):
        assert float(traced(p0)) == 100.0
        with tf.GradientTape() as tape:
            hypersurface = traced(p0)
        np.testing.assert_array_equal(tape.gradient(hypersurface, [p0])[0].numpy(),
                                      [52.0, 38.0, 28.0, 22.0])
    with tf.GradientTape() as tape2:
        total = traced(p0) + traced(2 * p0)
    assert float(total) == 900.0
    np.testing.assert_array_equal(tape2.gradient(total, p0).numpy(),
                                  [468.0, 342.0, 252.0, 198.0])


# --- training loops (seeds 000-002) -------------------------------------------------------

def _keras_regression(traced):
    tf.random.set_seed(1)

    class Model(tf.keras.Model):
        def __init__(self):
            super(Model, self).__init__()
            self.W = tf.Variable(5., name='weight')
            self.B = tf.Variable(10., name='bias')

        def call(self, inputs):
            return inputs * self.W + self.B
    training_inputs = tf.random_normal([2000])
    training_outputs = training_inputs * 3 + 2 + tf.random_normal([2000])
    model = Model()
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.01)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)

    def step(inputs, targets):
        with tf.GradientTape() as tape:
            loss_value = tf.reduce_mean(tf.square(model(inputs) - targets))
        grads = tape.gradient(loss_value, [model.W, model.B])
        optimizer.apply_gradients(zip(grads, [model.W, model.B]), global_step=step_var)
        return loss_value
    fn = tf.function(step) if traced else step
    losses = [float(fn(training_inputs, training_outputs)) for _ in range(40)]
    return losses, float(model.W), float(model.B), int(step_var)


def test_001_keras_model_regression_step():
    eager, traced = _keras_regression(False), _keras_regression(True)
    _close(eager[0], traced[0])
    assert eager[1:] == traced[1:] and traced[3] == 40


def _adam_sparse_loop(traced):
    tf.random.set_seed(3)
    w = tf.Variable(tf.random_normal([8, 4]) * 0.1, name="kernel")
    b = tf.Variable(tf.zeros([4]), name="bias")
    x = tf.random_normal([32, 8])
    labels = tf.cast(tf.argmax(tf.matmul(x, tf.random_normal([8, 4])), 1), tf.int64)
    optimizer = tf.train.AdamOptimizer(learning_rate=0.01)

    def step(x, labels):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + b
            loss_value = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        grads = tape.gradient(loss_value, [w, b])
        optimizer.apply_gradients(zip(grads, [w, b]))
        return loss_value
    fn = tf.function(step) if traced else step
    losses = [float(fn(x, labels)) for _ in range(30)]
    return losses, w.numpy(), b.numpy()


def test_001_adam_loop_with_sparse_losses():
    eager, traced = _adam_sparse_loop(False), _adam_sparse_loop(True)
    _close(eager[0], traced[0])
    _close(eager[1], traced[1])
    _close(eager[2], traced[2])
    assert traced[0][-1] < 0.8 * traced[0][0]


def _guide_cnn_steps(traced):
    tf.random.set_seed(2)
    rng = np.random.default_rng(1)
    images = tf.constant(rng.random((8, 12, 12, 1)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 4, 8).astype(np.int64))
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(4, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(4, [3, 3], activation='relu'),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(4)
    ])
    optimizer = tf.train.AdamOptimizer(learning_rate=0.01)

    def step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss_value = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        grads = tape.gradient(loss_value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss_value
    fn = tf.function(step) if traced else step
    losses = [float(fn(images, labels)) for _ in range(4)]
    return losses, [v.numpy() for v in model.variables]


def test_001_mnist_cnn_training_step():
    eager, traced = _guide_cnn_steps(False), _guide_cnn_steps(True)
    _close(eager[0], traced[0], 1e-5)
    for a, b in zip(eager[1], traced[1]):
        _close(a, b, 1e-5)


def test_000_minimize_lambda_traced():
    """Seed 000: `optimizer.minimize(lambda: loss_function(...))`, inside a function."""
    def run(traced):
        tf.random.set_seed(2)
        w = tf.Variable(tf.random_normal([4, 3]) * 0.1, name="w")
        b = tf.Variable(tf.zeros([3]), name="b")

        def loss_function(x, y):
            y_ = tf.matmul(x, w) + b
            return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=y_))
        x = tf.random_normal([16, 4])
        y = tf.one_hot(tf.argmax(tf.matmul(x, tf.constant(np.eye(4, 3, dtype=np.float32))),
                                 1), 3)
        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.5)

        def step(x, y):
            optimizer.minimize(lambda: loss_function(x, y))
            return loss_function(x, y)
        fn = tf.function(step) if traced else step
        return [float(fn(x, y)) for _ in range(10)], w.numpy()
    eager, traced = run(False), run(True)
    _close(eager[0], traced[0])
    _close(eager[1], traced[1])
