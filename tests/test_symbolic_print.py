"""Inside a traced function, ``print`` shows the tensors that depend on the arguments or
state as TensorFlow shows graph tensors (``Tensor("x:0", shape=(3,), dtype=int32)``), not
the values of the trace's first call, which would mislead: the trace serves later calls."""

import pytest

import tapeflow as tf


def test_arguments_and_results_print_symbolically_while_tracing(capsys):
    @tf.function
    def f(x, scale):
        print("args", x, scale)
        y = x * 2
        z = y + 1
        w = z + 1
        print("ops", y, z, w)
        print("repr", repr(w))
        return w

    out = f(tf.constant([1, 2, 3]), 2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == 'args Tensor("x:0", shape=(3,), dtype=int32) 2'    # Python values stay
    assert lines[1] == ('ops Tensor("mul:0", shape=(3,), dtype=int32) '
                        'Tensor("add:0", shape=(3,), dtype=int32) '
                        'Tensor("add_1:0", shape=(3,), dtype=int32)')
    assert lines[2] == "repr <tf.Tensor 'add_1:0' shape=(3,) dtype=int32>"
    assert out.numpy().tolist() == [4, 6, 8]                             # the values are right
    assert str(out) == "tf.Tensor([4 6 8], shape=(3,), dtype=int32)"    # and print normally after


def test_constants_inside_a_trace_keep_their_values(capsys):
    @tf.function
    def f(x):
        c = tf.constant([5.0, 6.0])                  # not from the arguments: a constant
        print(c)
        return x + c

    f(tf.constant([1.0, 2.0]))
    assert capsys.readouterr().out.strip() == "tf.Tensor([5. 6.], shape=(2,), dtype=float32)"


def test_a_scalar_argument_prints_an_empty_shape(capsys):
    @tf.function
    def f(a):
        print(a)
        return a

    f(tf.constant(1.5))
    assert capsys.readouterr().out.strip() == 'Tensor("a:0", shape=(), dtype=float32)'


@pytest.mark.parametrize("name, want", [("AddV2", "add_v2"), ("MatMul", "mat_mul"),
                                        ("Relu", "relu"), ("BiasAddGrad", "bias_add_grad")])
def test_node_names_are_snake_case(name, want):
    from tapeflow.tracing.tracer import _snake
    assert _snake(name) == want
