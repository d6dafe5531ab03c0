"""Wrong results of issue 46 fixed, each tested against what TensorFlow 2.21 does:
``next(iterator)`` on a ``tf.data`` iterator inside ``tf.function`` takes the next
element at every call; ``tf.print`` prints once per call, to standard error, in
TensorFlow's format; ``tape.gradient(v, [v, w])`` with a Variable as the target;
``tf.py_function`` as a decorator.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors


# --- tf.data iterators inside tf.function ---------------------------------------------------

def test_next_of_an_iterator_advances_at_every_call(capsys):
    it = iter(tf.data.Dataset.from_tensor_slices([1, 2, 3]))

    @tf.function
    def consume(iterator):
        tf.print("Value:", next(iterator))
    for _ in range(3):
        consume(it)
    assert capsys.readouterr().err.splitlines() == ["Value: 1", "Value: 2", "Value: 3"]
    assert consume.experimental_get_tracing_count() == 1
    with pytest.raises(errors.OutOfRangeError, match="end of sequence"):
        consume(it)


def test_next_of_a_captured_iterator_with_structured_elements():
    it = iter(tf.data.Dataset.from_tensor_slices(({"a": [1.0, 2.0, 3.0]}, [4, 5, 6])))

    @tf.function
    def f():
        x, y = next(it)
        return x["a"] * 2.0, y
    got = [f() for _ in range(3)]
    assert [float(a) for a, _ in got] == [2.0, 4.0, 6.0]
    assert [int(b) for _, b in got] == [4, 5, 6]


def test_an_element_of_another_shape_is_a_clear_error():
    it = iter(tf.data.Dataset.from_tensor_slices([1, 2, 3]).batch(2))

    @tf.function
    def f():
        return next(it) + 1
    f()
    with pytest.raises(errors.InvalidArgumentError, match="drop_remainder"):
        f()


def test_a_dataset_iterated_inside_the_function_unrolls():
    ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])

    @tf.function
    def total(ds):
        s = tf.constant(0)
        for x in ds:
            s += x
        return s
    assert int(total(ds)) == 6 and int(total(ds)) == 6


def test_next_with_flag_is_the_loop_hook():
    it = iter(tf.data.Dataset.from_tensor_slices([7, 8]))

    @tf.function
    def f():
        more, x = it.next_with_flag()
        return more, x
    got = [f() for _ in range(3)]
    assert [bool(m) for m, _ in got] == [True, True, False]
    assert [int(x) for _, x in got] == [7, 8, 0]
    eager = iter(tf.data.Dataset.from_tensor_slices([1]))
    assert int(eager.next_with_flag()[1]) == 1
    more, x = eager.next_with_flag()
    assert not bool(more) and x is None


# --- tf.print --------------------------------------------------------------------------------

def test_tf_print_prints_once_per_call_to_stderr(capsys):
    @tf.function
    def f(x):
        tf.print("exec", x)
        return x + 1

    @tf.function
    def nothing_returned(x):
        tf.print("none", x)
    for k in range(3):
        f(tf.constant(k))
        nothing_returned(tf.constant(k))
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == ["exec 0", "none 0", "exec 1", "none 1", "exec 2", "none 2"]


def test_tf_print_once_per_call_in_loops_branches_and_under_a_tape(capsys):
    @tf.function
    def f(x, n):
        for i in range(2):                       # (a Python loop: unrolled)
            tf.print("py", i)
        def say(text):
            def branch():
                tf.print(text)
                return tf.constant(0)
            return branch
        tf.cond(x > 0, say("pos"), say("neg"))

        def body(i):
            tf.print("it", i)
            return i + 1
        tf.while_loop(lambda i: i < n, body, [0])
        return x * 2.0
    for v in (1.0, -1.0):
        x = tf.constant(v)
        with tf.GradientTape() as g:
            g.watch(x)
            y = f(x, tf.constant(2))
        assert float(g.gradient(y, x)) == 2.0
    want = ["py 0", "py 1", "pos", "it 0", "it 1", "py 0", "py 1", "neg", "it 0", "it 1"]
    assert capsys.readouterr().err.splitlines() == want


def test_tf_print_format_is_tensorflows():
    buf = io.StringIO()
    tf.print(tf.constant([1, 2, 3]), tf.constant(1.0), tf.constant(0.1), tf.constant(1 / 3),
             tf.constant(True), tf.constant("abc"), tf.constant([1.5, 2.25]), output_stream=buf)
    tf.print(tf.range(10), output_stream=buf)
    tf.print(tf.range(10), summarize=-1, output_stream=buf)
    tf.print(tf.range(5), summarize=1, output_stream=buf)
    tf.print(tf.reshape(tf.range(8), [2, 2, 2]), output_stream=buf)
    tf.print([tf.constant(1), "a"], {"b": tf.constant(2.5), "a": 1}, output_stream=buf)
    tf.print("a", "b", sep="-", end="!\n", output_stream=buf)
    tf.print(tf.Variable([1.0, 2.0]), tf.constant(1 / 3, tf.float64), output_stream=buf)
    assert buf.getvalue().splitlines() == [
        '[1 2 3] 1 0.1 0.333333343 1 "abc" [1.5 2.25]',
        "[0 1 2 ... 7 8 9]",
        "[0 1 2 3 4 5 6 7 8 9]",
        "[0 ... 4]",
        "[[[0 1]", "  [2 3]]", "", " [[4 5]", "  [6 7]]]",
        "[1, 'a'] {'a': 1, 'b': 2.5}",
        "a-b!",
        "[1 2] 0.33333333333333331",
    ]


def test_tf_print_streams(capsys, tmp_path):
    tf.print("to stdout", output_stream=sys.stdout)
    tf.print("to stderr")
    lines = []
    tf.print("to a logger", tf.constant(3), output_stream=lines.append)
    path = tmp_path / "log.txt"
    tf.print("to a file", output_stream=f"file://{path}")
    out = capsys.readouterr()
    assert out.out == "to stdout\n" and out.err == "to stderr\n"
    assert lines == ["to a logger 3"]
    assert path.read_text() == "to a file\n"
    with pytest.raises(errors.InvalidTypeError):
        tf.print("x", output_stream=3)
    with pytest.raises(errors.InvalidTypeError):
        tf.print("x", summarize="all")


def test_tf_print_of_a_variable_inside_a_function(capsys):
    v = tf.Variable(0)

    @tf.function
    def f():
        v.assign_add(1)
        tf.print("v", v)
    f()
    f()
    assert capsys.readouterr().err.splitlines() == ["v 1", "v 2"]


# --- a Variable as the target of tape.gradient ----------------------------------------------

def test_gradient_of_a_variable_with_respect_to_itself():
    v0, v1 = tf.Variable(2.0), tf.Variable(2.0)
    x = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        result = v0                    # never read inside the tape
    d0, d1 = tape.gradient(result, [v0, v1])
    assert float(d0) == 1.0 and d1 is None
    assert float(tape.gradient(x, x)) == 1.0
    with tf.GradientTape() as tape:
        y = v0 * 3.0
    assert float(tape.gradient([v0, y], v0)) == 4.0      # read inside: counted once
    with tf.GradientTape() as tape:
        pass
    assert float(tape.gradient(x, [x])[0]) == 1.0        # a target that is a source


# --- tf.py_function as a decorator ----------------------------------------------------------

def test_py_function_as_a_decorator(capsys):
    @tf.py_function(Tout=tf.float32)
    def py_plus(x, y):
        print("Executing eagerly.")
        return x + y

    @tf.function
    def wrapper(x, y):
        print("Tracing.")
        return py_plus(x, y)
    assert float(wrapper(tf.constant(1.0), tf.constant(2.0))) == 3.0
    assert float(wrapper(tf.constant(1.0), tf.constant(5.0))) == 6.0
    assert capsys.readouterr().out.splitlines() == [
        "Tracing.", "Executing eagerly.", "Executing eagerly."]
    assert py_plus.__name__ == "py_plus"
    assert float(tf.py_function(lambda a: a * 2, inp=tf.constant(2.0), Tout=tf.float32)) == 4.0


def test_py_function_bad_arguments():
    with pytest.raises(errors.InvalidTypeError):
        tf.py_function(3, [1.0], tf.float32)
    with pytest.raises(errors.InvalidArgumentError, match="Tout"):
        tf.py_function(lambda x: x, [1.0])


def test_gradient_through_a_decorated_py_function():
    @tf.py_function(Tout=tf.float32)
    def cube(x):
        return x * x * x
    x = tf.constant(2.0)
    with tf.GradientTape() as g:
        g.watch(x)
        y = cube(x)
    np.testing.assert_allclose(g.gradient(y, x).numpy(), 12.0)


def test_next_inside_a_traced_while_loop_body_takes_no_element_while_tracing():
    it = iter(tf.data.Dataset.range(10))

    @tf.function
    def total(n):
        def body(i, s):
            return i + 1, s + next(it)
        return tf.while_loop(lambda i, s: i < n, body, [0, tf.constant(0, tf.int64)])[1]
    assert int(total(tf.constant(3))) == 0 + 1 + 2
    assert int(total(tf.constant(2))) == 3 + 4
    assert int(next(it)) == 5
