"""The seeds' examples that need only the core, run as written and checked against the
values (and, where the seed shows it, the printed text) the seeds give.

Seeds (``shared/seeds/``): 000 = the eager-execution announcement, 001 = the eager
guide, 002 = the contrib/eager README, 003 = the CS 20 lecture, 004 = "TensorFlow
Eager Mode" (hypersurface). Layers, optimizers, datasets, checkpoints, metrics and
summaries belong to a later issue and are not here.

Every test uses ``import tapeflow as tf; tfe = tf`` exactly as the seeds use
``tensorflow`` and ``tf.contrib.eager``. Where two seeds disagree the later one wins
(the third derivative of ``square`` is ``[None]`` in the guide, seed 001). Printed
floats follow NumPy 2 formatting (``[3.]``, not the seeds' old ``[ 3.]``).
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest

import tapeflow as tf

tfe = tf


def _set_seed(seed):
    """tf.random.set_seed (TF2 name) or tf.set_random_seed (the seeds' TF1 name)."""
    if hasattr(tf, "random") and hasattr(tf.random, "set_seed"):
        tf.random.set_seed(seed)
    else:
        tf.set_random_seed(seed)


def _random_normal(shape):
    """The seeds' tf.random_normal (TF1), also reachable as tf.random.normal."""
    return tf.random_normal(shape)


# --- seed 000: announcement ------------------------------------------------------------

def test_000_matmul_prints_1x1_matrix(capsys):
    tfe.enable_eager_execution()
    x = [[2.]]
    m = tf.matmul(x, x)
    print(m)
    assert capsys.readouterr().out == "tf.Tensor([[4.]], shape=(1, 1), dtype=float32)\n"
    assert isinstance(m, tf.Tensor)
    np.testing.assert_array_equal(m.numpy(), np.array([[4.]], np.float32))


def _collatz(start, out):
    a = tf.constant(start)
    while not tf.equal(a, 1):
        if tf.equal(a % 2, 0):
            a = a / 2
        else:
            a = 3 * a + 1
        out.append(a)
        print(a)
    return a


def test_000_collatz_prints_tensors(capsys):
    values = []
    last = _collatz(12, values)
    lines = capsys.readouterr().out.splitlines()
    assert all(isinstance(v, tf.Tensor) for v in values)
    assert [float(v) for v in values] == [6, 3, 10, 5, 16, 8, 4, 2, 1]
    assert float(last) == 1.0
    # "all return values will be tensors": every line is a printed scalar tensor. The
    # first `a / 2` of an int32 is a true division, which gives float64 as in TF.
    pattern = re.compile(r"tf\.Tensor\(([-0-9.]+), shape=\(\), dtype=float64\)")
    parsed = [pattern.fullmatch(line) for line in lines]
    assert all(parsed), lines
    assert [float(p.group(1)) for p in parsed] == [6, 3, 10, 5, 16, 8, 4, 2, 1]
    assert lines[0] == "tf.Tensor(6.0, shape=(), dtype=float64)"


def _square(x):
    return tf.multiply(x, x)


def test_000_square_and_its_gradient(capsys):
    grad = tfe.gradients_function(_square)
    print(_square(3.))  # [9.]
    assert capsys.readouterr().out == "tf.Tensor(9.0, shape=(), dtype=float32)\n"
    g = grad(3.)
    assert isinstance(g, list) and len(g) == 1
    assert float(g[0]) == 6.0
    print(grad(3.))  # [6.]
    out = capsys.readouterr().out
    assert out.startswith("[") and out.endswith("]\n") and "6.0" in out and "float32" in out


def test_000_001_gradients_of_every_order():
    grad = tfe.gradients_function(_square)
    gradgrad = tfe.gradients_function(lambda x: grad(x)[0])
    gradgradgrad = tfe.gradients_function(lambda x: gradgrad(x)[0])
    assert _square(3.).numpy() == 9.0
    assert grad(3.)[0].numpy() == 6.0
    assert gradgrad(3.)[0].numpy() == 2.0
    # The guide (seed 001): "The third-order derivative is None".
    assert gradgradgrad(3.) == [None]


def _abs(x):
    return x if x > 0. else -x


def test_000_001_abs_gradient_through_control_flow():
    grad = tfe.gradients_function(_abs)
    assert grad(2.0)[0].numpy() == 1.0
    assert grad(-2.0)[0].numpy() == -1.0
    assert grad(3.)[0].numpy() == 1.0
    assert grad(-3.)[0].numpy() == -1.0
    assert grad(2.0)[0].shape == ()
    assert grad(2.0)[0].dtype == tf.float32


def test_000_001_002_log1pexp_without_custom_gradient_is_nan_at_100():
    def log1pexp(x):
        return tf.log(1 + tf.exp(x))

    grad_log1pexp = tfe.gradients_function(log1pexp)
    assert float(grad_log1pexp(0.)[0]) == 0.5
    assert grad_log1pexp(0.0)[0].numpy() == 0.5
    assert math.isnan(float(grad_log1pexp(100.)[0]))
    # The function's value itself is fine (inf would show the forward pass broke).
    assert float(log1pexp(0.)) == pytest.approx(math.log(2.0))


def test_000_001_002_log1pexp_with_custom_gradient():
    @tfe.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))

        return tf.log(1 + e), grad

    grad_log1pexp = tfe.gradients_function(log1pexp)
    assert 0.5 == float(grad_log1pexp(0.)[0])
    assert 1.0 == float(grad_log1pexp(100.)[0])
    assert grad_log1pexp(100.0)[0].numpy() == 1.0
    assert float(log1pexp(0.)) == pytest.approx(math.log(2.0))


def test_000_enable_eager_execution_is_a_no_op():
    assert tfe.enable_eager_execution() is None
    assert tf.enable_eager_execution() is None
    assert tf.executing_eagerly() is True
    # `tfe = tf.contrib.eager` also works (seed 001, seed 004).
    assert tf.contrib.eager.executing_eagerly() is True
    assert tf.contrib.eager.gradients_function is tf.gradients_function


def test_000_blank_batch_shape(capsys):
    batch = tf.zeros([1, 1, 784])
    print(batch.shape)
    assert capsys.readouterr().out == "(1, 1, 784)\n"
    assert batch.dtype == tf.float32
    assert not np.any(batch.numpy())


# --- seed 001: the guide ---------------------------------------------------------------

def test_001_executing_eagerly():
    tf.enable_eager_execution()
    assert tf.executing_eagerly() is True


def test_001_hello_format(capsys):
    x = [[2.]]
    m = tf.matmul(x, x)
    print("hello, {}".format(m))
    assert capsys.readouterr().out == "hello, [[4.]]\n"


def test_001_numpy_interop_and_printing(capsys):
    a = tf.constant([[1, 2],
                     [3, 4]])
    print(a)
    assert capsys.readouterr().out == (
        "tf.Tensor(\n[[1 2]\n [3 4]], shape=(2, 2), dtype=int32)\n")

    # Broadcasting support
    b = tf.add(a, 1)
    print(b)
    assert capsys.readouterr().out == (
        "tf.Tensor(\n[[2 3]\n [4 5]], shape=(2, 2), dtype=int32)\n")

    # Operator overloading is supported
    print(a * b)
    assert capsys.readouterr().out == (
        "tf.Tensor(\n[[ 2  6]\n [12 20]], shape=(2, 2), dtype=int32)\n")

    # Use NumPy values
    c = np.multiply(a, b)
    assert type(c) is np.ndarray
    print(c)
    assert capsys.readouterr().out == "[[ 2  6]\n [12 20]]\n"
    np.testing.assert_array_equal(c, [[2, 6], [12, 20]])

    # Obtain numpy value from a tensor:
    print(a.numpy())
    assert capsys.readouterr().out == "[[1 2]\n [3 4]]\n"
    assert type(a.numpy()) is np.ndarray
    assert a.numpy().dtype == np.int32


def _fizzbuzz(max_num):
    counter = tf.constant(0)
    max_num = tf.convert_to_tensor(max_num)
    for num in range(1, max_num.numpy() + 1):
        num = tf.constant(num)
        if int(num % 3) == 0 and int(num % 5) == 0:
            print('FizzBuzz')
        elif int(num % 3) == 0:
            print('Fizz')
        elif int(num % 5) == 0:
            print('Buzz')
        else:
            print(num.numpy())
        counter += 1
    return counter


def test_001_fizzbuzz(capsys):
    counter = _fizzbuzz(15)
    assert capsys.readouterr().out.split("\n") == [
        "1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11", "Fizz", "13",
        "14", "FizzBuzz", ""]
    assert isinstance(counter, tf.Tensor) and int(counter) == 15


def test_001_gradient_tape_with_variable(capsys):
    w = tf.Variable([[1.0]])
    with tf.GradientTape() as tape:
        loss = w * w

    grad = tape.gradient(loss, w)
    print(grad)  # => tf.Tensor([[ 2.]], shape=(1, 1), dtype=float32)
    assert capsys.readouterr().out == "tf.Tensor([[2.]], shape=(1, 1), dtype=float32)\n"

    # "A particular tf.GradientTape can only compute one gradient; subsequent calls
    # throw a runtime error."
    with pytest.raises(RuntimeError, match=r"persistent=True"):
        tape.gradient(loss, w)


def _line_search_step(fn, init_x, rate=1.0):
    with tf.GradientTape() as tape:
        # Variables are automatically recorded, but manually watch a tensor
        tape.watch(init_x)
        value = fn(init_x)
    grad = tape.gradient(value, init_x)
    grad_norm = tf.reduce_sum(grad * grad)
    init_value = value
    while value > init_value - rate * grad_norm:
        x = init_x - rate * grad
        value = fn(x)
        rate /= 2.0
    return x, value


def test_001_line_search_step():
    def fn(x):
        return tf.reduce_sum(x * x)

    init_x = tf.constant([1.0, 2.0])
    x, value = _line_search_step(fn, init_x)
    # f = 5 at init_x, gradient (2, 4): rate 1 overshoots to (-1, -2) (f = 5 again),
    # rate 1/2 lands on the minimum.
    assert float(value) < float(fn(init_x))
    assert float(value) == 0.0
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.0])
    assert x.dtype == tf.float32


def test_001_clip_gradient_by_norm_custom_gradient():
    @tf.custom_gradient
    def clip_gradient_by_norm(x, norm):
        y = tf.identity(x)

        def grad_fn(dresult):
            return [tf.clip_by_norm(dresult, norm), None]

        return y, grad_fn

    x = tf.constant([1.0, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = clip_gradient_by_norm(x, 1.0)
        # the upstream gradient is (3, 4): norm 5, clipped to norm 1 -> (0.6, 0.8)
        loss = tf.reduce_sum(y * tf.constant([3.0, 4.0]))
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert float(loss) == 7.0
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [0.6, 0.8], rtol=1e-6)

    # A gradient whose norm is already small is passed through unchanged.
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(clip_gradient_by_norm(x, 10.0) * tf.constant([3.0, 4.0]))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [3.0, 4.0], rtol=1e-6)


def test_001_gradients_function_values():
    grad = tfe.gradients_function(_square)
    assert _square(3.).numpy() == 9.0
    assert grad(3.)[0].numpy() == 6.0


def _measure_001(x, steps):
    # TensorFlow initializes a GPU the first time it's used, exclude from timing.
    tf.matmul(x, x)
    start = time.time()
    for i in range(steps):
        x = tf.matmul(x, x)
    # The x.numpy() call below will ensure that all enqueued operations
    # have completed (and will also copy the result to host memory).
    _ = x.numpy()
    end = time.time()
    return end - start


def test_001_performance_measure_snippet(capsys):
    # The seed's shape (1000, 1000) x 200 steps is a benchmark, not a test: same code,
    # smaller numbers. No assertion on time, only that it runs and prints.
    shape = (64, 64)
    steps = 3
    print("Time to multiply a {} matrix by itself {} times:".format(shape, steps))

    # Run on CPU:
    with tf.device("/cpu:0"):
        print("CPU: {} secs".format(_measure_001(_random_normal(shape), steps)))

    # Run on GPU, if available:
    if tfe.num_gpus() > 0:
        with tf.device("/gpu:0"):
            print("GPU: {} secs".format(_measure_001(_random_normal(shape), steps)))
    else:
        print("GPU: not found")

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Time to multiply a (64, 64) matrix by itself 3 times:"
    assert re.fullmatch(r"CPU: [0-9.e-]+ secs", lines[1]), lines[1]
    if tfe.num_gpus() > 0:
        assert re.fullmatch(r"GPU: [0-9.e-]+ secs", lines[2]), lines[2]
    else:
        assert lines[2] == "GPU: not found"
    assert len(lines) == 3


def test_001_copy_to_gpu_when_available():
    # The guide's guarded snippet: on a machine without a GPU the bodies do not run.
    ran = []
    if tf.test.is_gpu_available():
        x = _random_normal([10, 10])

        x_gpu0 = x.gpu()
        x_cpu = x.cpu()

        _ = tf.matmul(x_cpu, x_cpu)    # Runs on CPU
        _ = tf.matmul(x_gpu0, x_gpu0)  # Runs on GPU:0
        np.testing.assert_allclose(tf.matmul(x_gpu0, x_gpu0).numpy(),
                                   tf.matmul(x_cpu, x_cpu).numpy(), rtol=1e-4, atol=1e-4)
        ran.append("gpu0")

        if tfe.num_gpus() > 1:
            x_gpu1 = x.gpu(1)
            _ = tf.matmul(x_gpu1, x_gpu1)  # Runs on GPU:1
            ran.append("gpu1")
    assert len(ran) == min(tfe.num_gpus(), 2)

    if tf.test.is_gpu_available():
        with tf.device("gpu:0"):
            v = tf.Variable(_random_normal([1000, 1000]))
            assert v.shape == (1000, 1000)
            v = None  # v no longer takes up GPU memory


# --- seed 002: the contrib/eager README ------------------------------------------------

def test_002_matmul_add_random_uniform(capsys):
    # Multiply two 2x2 matrices
    x = tf.matmul([[1, 2],
                   [3, 4]],
                  [[4, 5],
                   [6, 7]])
    # Add one to each element
    # (tf.add supports broadcasting)
    y = tf.add(x, 1)

    # Create a random random 5x3 matrix
    z = tf.random_uniform([5, 3])

    print(x)
    print(y)
    out = capsys.readouterr().out
    assert out == ("tf.Tensor(\n[[16 19]\n [36 43]], shape=(2, 2), dtype=int32)\n"
                   "tf.Tensor(\n[[17 20]\n [37 44]], shape=(2, 2), dtype=int32)\n")
    assert z.shape == (5, 3)
    assert z.dtype == tf.float32
    zn = z.numpy()
    assert np.all((zn >= 0.0) & (zn < 1.0))
    assert len(np.unique(zn)) > 1
    print(z)
    out = capsys.readouterr().out
    assert out.startswith("tf.Tensor(\n[[") and out.endswith(
        "]], shape=(5, 3), dtype=float32)\n")


def test_002_operator_overloading(capsys):
    x = (tf.ones([1], dtype=tf.float32) + 1) * 2 - 1
    print(x)
    assert capsys.readouterr().out == "tf.Tensor([3.], shape=(1,), dtype=float32)\n"


def test_002_converting_to_and_from_numpy(capsys):
    x = tf.add(1, 1)                     # tf.Tensor with a value of 2
    y = tf.add(np.array(1), np.array(1))  # tf.Tensor with a value of 2
    z = np.multiply(x, y)                # numpy.int64 with a value of 4
    assert isinstance(x, tf.Tensor) and int(x) == 2
    assert isinstance(y, tf.Tensor) and int(y) == 2
    assert not isinstance(z, tf.Tensor)
    assert isinstance(z, (np.integer, np.ndarray))
    assert z == 4
    assert np.asarray(z).dtype == np.int64

    np_x = np.array(2., dtype=np.float32)
    x = tf.constant(np_x)

    py_y = 3.
    y = tf.constant(py_y)

    z = x + y + 1

    print(z)
    print(z.numpy())
    assert capsys.readouterr().out == "tf.Tensor(6.0, shape=(), dtype=float32)\n6.0\n"


def test_002_measure_snippet(capsys):
    def measure(x):
        # The very first time a GPU is used by TensorFlow, it is initialized.
        # So exclude the first run from timing.
        tf.matmul(x, x)

        start = time.time()
        for i in range(10):
            tf.matmul(x, x)
        end = time.time()

        return "Took %s seconds to multiply a %s matrix by itself 10 times" % (
            end - start, x.shape)

    # Run on CPU (the seed's 1000x1000 made smaller: this is a test, not a benchmark):
    with tf.device("/cpu:0"):
        print("CPU: %s" % measure(_random_normal([100, 100])))

    # If a GPU is available, run on GPU:
    if tfe.num_gpus() > 0:
        with tf.device("/gpu:0"):
            print("GPU: %s" % measure(_random_normal([100, 100])))

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == (2 if tfe.num_gpus() > 0 else 1)
    for line in lines:
        assert re.fullmatch(r"(CPU|GPU): Took [0-9.e-]+ seconds to multiply a \(100, 100\) "
                            r"matrix by itself 10 times", line), line


def test_002_derivatives_with_asserts():
    def f(x):
        return tf.multiply(x, x)  # Or x * x
    assert 9 == f(3.).numpy()

    df = tfe.gradients_function(f)
    assert 6 == df(3.)[0].numpy()

    # Second order deriviative.
    d2f = tfe.gradients_function(lambda x: df(x)[0])
    assert 2 == d2f(3.)[0].numpy()

    # Third order derivative: this seed asserts 0; the later guide (seed 001) says
    # None, which is what tapeflow returns (the second derivative is a constant).
    d3f = tfe.gradients_function(lambda x: d2f(x)[0])
    assert d3f(3.) == [None]


def test_002_linear_regression_with_gradients_function(capsys):
    _set_seed(1234)

    def prediction(input, weight, bias):
        return input * weight + bias

    # A toy dataset of points around 3 * x + 2
    NUM_EXAMPLES = 1000
    training_inputs = tf.random_normal([NUM_EXAMPLES])
    noise = tf.random_normal([NUM_EXAMPLES])
    training_outputs = training_inputs * 3 + 2 + noise

    # A loss function: Mean-squared error
    def loss(weight, bias):
        error = prediction(training_inputs, weight, bias) - training_outputs
        return tf.reduce_mean(tf.square(error))

    # Function that returns the the derivative of loss with respect to
    # weight and bias
    grad = tfe.gradients_function(loss)

    # Train for 200 steps (starting from some random choice for W and B, on the same
    # batch of data).
    W = 5.
    B = 10.
    learning_rate = 0.01
    initial_loss = loss(W, B).numpy()
    print("Initial loss: %f" % initial_loss)
    history = []
    for i in range(200):
        (dW, dB) = grad(W, B)
        W -= dW * learning_rate
        B -= dB * learning_rate
        if i % 20 == 0:
            history.append(loss(W, B).numpy())
            print("Loss at step %d: %f" % (i, history[-1]))
    final_loss = loss(W, B).numpy()
    print("Final loss: %f" % final_loss)
    print("W, B = %f, %f" % (W.numpy(), B.numpy()))

    # Expected loss at the start: E[(2x + 8 - noise)^2] = 4 + 64 + 1 = 69.
    assert 50.0 < initial_loss < 90.0
    assert all(b < a for a, b in zip(history, history[1:]))
    assert final_loss < 1.5
    assert abs(float(W) - 3.0) < 0.3
    assert abs(float(B) - 2.0) < 0.3
    assert isinstance(W, tf.Tensor) and W.dtype == tf.float32
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Initial loss: ")
    assert out[1].startswith("Loss at step 0: ")
    assert out[-2].startswith("Final loss: ")
    assert re.fullmatch(r"W, B = [0-9.]+, [0-9.]+", out[-1])
    assert len(out) == 1 + 10 + 2


def test_002_random_normal_seeded_is_reproducible():
    _set_seed(7)
    a = tf.random_normal([1000]).numpy()
    _set_seed(7)
    b = tf.random_normal([1000]).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32
    assert abs(float(a.mean())) < 0.15 and 0.85 < float(a.std()) < 1.15


# --- seed 003: the CS 20 lecture -------------------------------------------------------

def test_003_boilerplate_matmul(capsys):
    x = [[2.]]  # No need for placeholders!
    m = tf.matmul(x, x)
    print(m)  # No sessions!
    assert capsys.readouterr().out == "tf.Tensor([[4.]], shape=(1, 1), dtype=float32)\n"


def test_003_i_could_do_this_all_day(capsys):
    i = tf.constant(0)
    while i < 1000:
        i = tf.add(i, 1)
        print("I could do this all day! %d" % i)
    assert isinstance(i, tf.Tensor)
    assert int(i) == 1000
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1000
    assert lines[0] == "I could do this all day! 1"
    assert lines[-1] == "I could do this all day! 1000"


def test_003_lazy_loading_is_gone(capsys):
    x = tf.random_uniform([2, 2])
    seen = []
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            print(x[i, j])
            seen.append(float(x[i, j]))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert all(re.fullmatch(r"tf\.Tensor\([0-9.e-]+, shape=\(\), dtype=float32\)", ln)
               for ln in lines), lines
    np.testing.assert_array_equal(np.array(seen, np.float32).reshape(2, 2), x.numpy())


def test_003_tensors_act_like_numpy_arrays(capsys):
    x = tf.constant([1.0, 2.0, 3.0])

    # Tensors are backed by NumPy arrays
    assert type(x.numpy()) == np.ndarray

    squared = np.square(x)  # Tensors are compatible with NumPy functions
    assert isinstance(squared, np.ndarray)
    np.testing.assert_array_equal(squared, [1.0, 4.0, 9.0])
    assert squared.dtype == np.float32

    # Tensors are iterable!
    for i in x:
        print(i)
    assert capsys.readouterr().out == (
        "tf.Tensor(1.0, shape=(), dtype=float32)\n"
        "tf.Tensor(2.0, shape=(), dtype=float32)\n"
        "tf.Tensor(3.0, shape=(), dtype=float32)\n")

    # "Caveat: use tf.equal to compare Tensors, not =="
    np.testing.assert_array_equal(tf.equal(x, [1.0, 0.0, 3.0]).numpy(), [True, False, True])


def test_003_square_with_pow(capsys):
    def square(x):
        return x ** 2

    grad = tfe.gradients_function(square)

    # The slide prints square(3.) as a tensor, but `3. ** 2` of a Python float is
    # Python's own 9.0 (in TensorFlow too); called on a tensor it is a tensor.
    assert square(3.) == 9.0
    print(square(tf.constant(3.)))    # tf.Tensor(9., shape=(), dtype=float32)
    assert capsys.readouterr().out == "tf.Tensor(9.0, shape=(), dtype=float32)\n"
    g = grad(3.)         # [tf.Tensor(6., shape=(), dtype=float32)]
    assert len(g) == 1 and float(g[0]) == 6.0 and g[0].dtype == tf.float32
    print(g)
    out = capsys.readouterr().out
    assert out.startswith("[") and "6.0" in out and "float32" in out


def test_003_implicit_gradients_with_variable(capsys):
    x = tfe.Variable(2.0)

    def loss(y):
        return (y - x ** 2) ** 2

    grad = tfe.implicit_gradients(loss)

    print(loss(7.))  # tf.Tensor(9., shape=(), dtype=float32)
    assert capsys.readouterr().out == "tf.Tensor(9.0, shape=(), dtype=float32)\n"

    result = grad(7.)
    # [(<tf.Tensor: -24.0, shape=(), dtype=float32>,
    #   <tf.Variable 'Variable:0' shape=() dtype=float32, numpy=2.0>)]
    assert len(result) == 1
    g, v = result[0]
    assert v is x
    assert float(g) == -24.0
    assert g.dtype == tf.float32 and g.shape == ()
    assert repr(v) == "<tf.Variable 'Variable:0' shape=() dtype=float32, numpy=2.0>"


def test_003_gather_error_is_immediate_and_readable():
    params = tf.zeros([128])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.gather(params, [3081])
    msg = str(info.value)
    assert "indices[0] = 3081 is not in [0, 128)" in msg
    assert "[Op:GatherV2]" in msg
    # An InvalidArgumentError is also a ValueError (docs/errors.md).
    assert isinstance(info.value, ValueError)
    # In range it works.
    assert float(tf.gather(params, [127])[0]) == 0.0


# --- seed 004: hypersurface ------------------------------------------------------------

def f4(abcd):
    """Hyperbox-hypersurface-area."""
    return 2.0 * sum(abcd[i] * abcd[j] * abcd[k]
                     for (i, j, k) in [(0, 1, 2), (0, 1, 3),
                                       (0, 2, 3), (1, 2, 3)])


def test_004_f4_on_python_numpy_and_tensors(capsys):
    print('TF Eager Execution is:',
          'Enabled' if tf.executing_eagerly() else 'Disabled')
    assert capsys.readouterr().out == "TF Eager Execution is: Enabled\n"

    # Thanks to Python-overloading, our implementation of f4
    # does not even actually care what sort of sequence we feed it.
    assert f4([1.0, 2.0, 3.0, 4.0]) == 100.0
    assert f4(np.array([2.0, 3.0, 4.0, 5.0])) == 2.0 * (24 + 30 + 40 + 60)

    xs = tfe.Variable([3.0, 4.0, 5.0, 6.0])
    assert repr(xs) == ("<tf.Variable 'Variable:0' shape=(4,) dtype=float32, "
                        "numpy=array([3., 4., 5., 6.], dtype=float32)>")
    assert repr(xs.numpy()) == "array([3., 4., 5., 6.], dtype=float32)"

    print(f4(xs))
    assert capsys.readouterr().out == "tf.Tensor(684.0, shape=(), dtype=float32)\n"
    print(f4(xs).numpy())
    assert capsys.readouterr().out == "684.0\n"

    # In most ways, tf-eager tensors behave equivalent to numpy arrays.
    print(2 * xs)
    assert capsys.readouterr().out == "tf.Tensor([ 6.  8. 10. 12.], shape=(4,), dtype=float32)\n"


def test_004_gradient_of_hypersurface():
    # Let us use the point for which we know the gradient well:
    p0 = tfe.Variable([1.0, 2.0, 3.0, 4.0])

    with tf.GradientTape() as tape:
        hypersurface = f4(p0)

    # (=="sensitivities") for all the tensors listed in the 2nd argument
    grad = tape.gradient(hypersurface, [p0])
    assert float(hypersurface.numpy()) == 100.0
    assert isinstance(grad, list) and len(grad) == 1
    np.testing.assert_array_equal(grad[0].numpy(), [52.0, 38.0, 28.0, 22.0])
    assert grad[0].dtype == tf.float32

    # "trying to execute the line above right here will fail,
    # as every recorded tape can only be used once(!)"
    with pytest.raises(RuntimeError, match="persistent"):
        tape.gradient(hypersurface, p0)


def test_004_total_hypersurface():
    p0 = tfe.Variable([1.0, 2.0, 3.0, 4.0])
    tape2 = tf.GradientTape()
    with tape2:
        hypersurface1 = f4(p0)
        hypersurface2 = f4(2 * p0)
        total_hypersurface = hypersurface1 + hypersurface2

    # Showing the single-tensor-as-2nd-arg form of tape.gradient here.
    g = tape2.gradient(total_hypersurface, p0)
    # f4 is homogeneous of degree 3: f4(2p) = 8 f4(p), so the total is 9 f4(p0) and its
    # gradient 9 * (52, 38, 28, 22).
    assert float(total_hypersurface.numpy()) == 900.0
    assert isinstance(g, tf.Tensor)
    np.testing.assert_array_equal(g.numpy(), [468.0, 342.0, 252.0, 198.0])
