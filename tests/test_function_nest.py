"""tf.function, tf.cond and tf.vectorized_map walk arguments and results with
tapeflow.nest (tf.nest's rules): a namedtuple of tensors is a structure
(its tensors are graph inputs and outputs, not Python values frozen at trace time),
dicts go in key order, None leaves stay None."""

import collections

import numpy as np
import pytest

import tapeflow as tf

P = collections.namedtuple("P", "a b")


def test_namedtuple_argument_tensors_are_inputs_not_constants():
    traces = []

    @tf.function
    def f(p):
        traces.append(1)
        return p.a * p.b

    assert float(f(P(tf.constant(2.0), tf.constant(3.0)))) == 6.0
    assert float(f(P(tf.constant(4.0), tf.constant(5.0)))) == 20.0      # same signature
    assert len(traces) == 1
    assert len(f.graph.args) == 2


def test_namedtuple_result_is_packed_from_this_calls_values():
    @tf.function
    def f(x):
        return P(a=x + 1.0, b={"z": x * 2.0, "y": None})

    f(tf.constant(1.0))
    out = f(tf.constant(5.0))
    assert type(out) is P and float(out.a) == 6.0 and float(out.b["z"]) == 10.0
    assert out.b["y"] is None and list(out.b) == ["z", "y"]      # the dict's own key order


def test_kwargs_dict_and_none_leaves():
    @tf.function
    def f(x, opts=None, extra=None):
        return x * opts["scale"] + (0.0 if extra is None else extra)

    x = tf.constant([1.0, 2.0])
    np.testing.assert_allclose(f(x, opts={"scale": tf.constant(3.0)}).numpy(), [3.0, 6.0])
    np.testing.assert_allclose(f(x, opts={"scale": tf.constant(2.0)}).numpy(), [2.0, 4.0])
    assert f.experimental_get_tracing_count() == 1


def test_retrace_warning_names_a_namedtuple_field():
    @tf.function
    def f(p):
        return p.a * p.b

    with pytest.warns(RuntimeWarning, match=r"p\['b'\]"):
        for k in range(6):
            f(P(tf.constant(1.0), float(k)))


def test_dict_with_unsortable_keys_is_a_clear_error():
    @tf.function
    def f(d):
        return d[1]

    with pytest.raises(tf.errors.InvalidArgumentError, match="sortable keys"):
        f({1: tf.constant(1.0), "a": tf.constant(2.0)})


def test_cond_returns_a_namedtuple_inside_function():
    @tf.function
    def f(x):
        return tf.cond(x > 0.0, lambda: P(x, x * 2.0), lambda: P(-x, x))

    out = f(tf.constant(3.0))
    assert type(out) is P and (float(out.a), float(out.b)) == (3.0, 6.0)
    out = f(tf.constant(-1.0))
    assert type(out) is P and (float(out.a), float(out.b)) == (1.0, -1.0)


def test_cond_branches_of_different_structure_are_an_error():
    @tf.function
    def f(x):
        return tf.cond(x > 0.0, lambda: [x, x], lambda: (x, x))

    with pytest.raises(tf.errors.InvalidArgumentError, match="same structure"):
        f(tf.constant(1.0))


def test_vectorized_map_over_a_namedtuple():
    elems = P(a=tf.constant([1.0, 2.0]), b={"k": tf.constant([10.0, 20.0])})
    out = tf.vectorized_map(lambda e: P(a=e.a * e.b["k"], b=None), elems)
    assert type(out) is P and out.b is None
    np.testing.assert_allclose(out.a.numpy(), [10.0, 40.0])


def test_tf_nest_is_the_nest_module():
    from tapeflow import nest
    assert tf.nest is nest
    assert tf.nest.flatten({"b": P(1, None), "a": [2]}) == [2, 1, None]
