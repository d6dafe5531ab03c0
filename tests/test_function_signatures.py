"""tf.function as TensorFlow 2 programs write it: TensorSpec, input_signature,
reduce_retracing, get_concrete_function and what a concrete function tells about
itself, Python values in results, run_functions_eagerly, tensors leaked out of a trace,
Variables created on a later trace, and methods (one cache per instance).

Every relaxed trace (one graph for many shapes) is checked against the eager result of
the same Python function, through both ways it is specialised to a call's shapes (its
ops replayed, or -- with Python nodes -- the function traced again)."""

import gc
import weakref

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors


# --- TensorSpec -------------------------------------------------------------------------

def test_tensor_spec_repr_and_attributes():
    s = tf.TensorSpec([None, 3], tf.int32, name="x")
    assert repr(s) == "TensorSpec(shape=(None, 3), dtype=tf.int32, name='x')"
    assert s.shape == (None, 3) and s.shape.rank == 2 and not s.shape.is_fully_defined()
    assert s.dtype == tf.int32 and s.name == "x"
    u = tf.TensorSpec(None)
    assert repr(u) == "TensorSpec(shape=<unknown>, dtype=tf.float32, name=None)"
    assert u.shape.rank is None and str(u.shape) == "<unknown>"
    assert repr(tf.TensorSpec([])) == "TensorSpec(shape=(), dtype=tf.float32, name=None)"
    assert tf.TensorSpec(4).shape == (4,)


def test_tensor_spec_from_tensor_from_spec_equality_hash():
    t = tf.constant([[1.0, 2.0]])
    s = tf.TensorSpec.from_tensor(t)
    assert s == tf.TensorSpec([1, 2], tf.float32) and s != tf.TensorSpec([1, 2], tf.float64)
    assert hash(s) == hash(tf.TensorSpec((1, 2)))
    assert tf.TensorSpec.from_spec(s, name="n").name == "n"
    assert tf.TensorSpec.from_tensor(tf.Variable([1, 2])).dtype == tf.int32
    assert len({tf.TensorSpec([None]), tf.TensorSpec([None]), tf.TensorSpec(None)}) == 2


def test_tensor_spec_is_compatible_with():
    s = tf.TensorSpec([None, 3])
    assert s.is_compatible_with(tf.zeros([7, 3]))
    assert not s.is_compatible_with(tf.zeros([7, 2]))
    assert not s.is_compatible_with(tf.zeros([7, 3], tf.float64))
    assert s.is_compatible_with(tf.TensorSpec([2, 3])) and s.is_compatible_with(np.zeros(
        (1, 3), np.float32))
    assert tf.TensorSpec(None, tf.int32).is_compatible_with([[1, 2], [3, 4]])
    assert not tf.TensorSpec([2], tf.int32).is_compatible_with(object())


def test_most_specific_common_supertype():
    a, b = tf.TensorSpec([2, 3]), tf.TensorSpec([4, 3])
    assert a.most_specific_common_supertype([b]) == tf.TensorSpec([None, 3])
    assert a.most_specific_common_supertype([tf.TensorSpec([4])]) == tf.TensorSpec(None)
    assert a.most_specific_common_supertype([tf.TensorSpec([2, 3], tf.int32)]) is None
    assert a.is_subtype_of(tf.TensorSpec([None, 3])) and not tf.TensorSpec(
        [None, 3]).is_subtype_of(a)


@pytest.mark.parametrize("bad", [dict(shape="ab"), dict(shape=[1.5]), dict(shape=[-1]),
                                 dict(shape=[2], dtype="nonsense"), dict(shape=[2], name=3)])
def test_tensor_spec_bad_arguments_raise_tapeflow_errors(bad):
    with pytest.raises(errors.InvalidTypeError, match="TensorSpec"):
        tf.TensorSpec(**bad)


def test_tf_types_trace_type_custom_tracing_type_shares_a_trace():
    traces = []

    class Kind(tf.types.experimental.TraceType):
        def __init__(self, obj):
            self.cls = type(obj)

        def __eq__(self, other):
            return type(other) is Kind and other.cls is self.cls

        def __hash__(self):
            return hash(self.cls)

    class Box:
        scale = tf.constant(3.0)

        def __tf_tracing_type__(self, context):
            return Kind(self)

    @tf.function
    def f(box, x):
        traces.append(1)
        return box.scale * x

    assert float(f(Box(), tf.constant(2.0))) == 6.0
    assert float(f(Box(), tf.constant(5.0))) == 15.0          # a new Box: the same trace
    assert len(traces) == 1


# --- input_signature -----------------------------------------------------------------------

def _collatz(x):
    return tf.where(x % 2 == 0, x // 2, 3 * x + 1)


def test_input_signature_one_trace_for_every_shape_matches_eager():
    traces = []

    @tf.function(input_signature=(tf.TensorSpec([None], tf.int32),))
    def f(x):
        traces.append(1)
        return _collatz(x)

    for n in (2, 5, 1, 5, 9):
        x = tf.constant(np.arange(1, n + 1, dtype=np.int32))
        np.testing.assert_array_equal(f(x).numpy(), _collatz(x).numpy())
    # one trace (as TensorFlow counts), the Python run again once per new shape (a
    # graph replayed for another shape would keep values computed from the first one's)
    assert len(traces) == 4 and f.experimental_get_tracing_count() == 1
    assert f.input_signature == (tf.TensorSpec([None], tf.int32),)
    # lists and NumPy arrays are converted to the spec's dtype
    np.testing.assert_array_equal(f([3, 4]).numpy(), [10, 2])
    np.testing.assert_array_equal(f(np.array([3, 4])).numpy(), [10, 2])
    assert len(traces) == 4                                      # (shape (2,) was seen)


def test_a_relaxed_trace_never_keeps_python_values_from_the_first_shape():
    """``x.shape[0]`` is a Python int while tracing: a relaxed trace is traced again for
    each new shape, so it is that shape's (it was replayed with the first one's)."""
    @tf.function(input_signature=[tf.TensorSpec([None])])
    def mean(x):
        return tf.reduce_sum(x) / x.shape[0]

    @tf.function(reduce_retracing=True)
    def mean2(x):
        return tf.reduce_sum(x) / x.shape[0]

    for n in (3, 6, 2, 5):
        for f in (mean, mean2):
            assert float(f(tf.ones([n]))) == 1.0


def test_input_signature_calls_checked_with_clear_type_errors():
    @tf.function(input_signature=(tf.TensorSpec([None], tf.int32),))
    def next_collatz(x):
        return _collatz(x)

    with pytest.raises(TypeError, match=r"next_collatz.*'x'.*shape \(2, 2\)"):
        next_collatz(tf.constant([[1, 2], [3, 4]]))
    with pytest.raises(errors.InvalidTypeError, match="float32 tensor"):
        next_collatz(tf.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="cannot convert"):
        next_collatz([1.5, 2.0])
    with pytest.raises(TypeError, match="input_signature of 1 argument"):
        next_collatz(tf.constant([1]), tf.constant([2]))


def test_input_signature_must_hold_tensor_specs():
    with pytest.raises(errors.InvalidTypeError, match="input_signature"):
        tf.function(lambda x: x, input_signature=tf.TensorSpec([2]))
    with pytest.raises(errors.InvalidTypeError, match="input_signature"):
        tf.function(lambda x: x, input_signature=[3])


def test_input_signature_nested_specs():
    @tf.function(input_signature=[(tf.TensorSpec([None]), tf.TensorSpec([]))])
    def f(pair):
        a, b = pair
        return a * b

    np.testing.assert_allclose(f((tf.constant([1.0, 2.0]), tf.constant(3.0))).numpy(), [3, 6])
    np.testing.assert_allclose(f(([1.0, 2.0, 4.0], 0.5)).numpy(), [0.5, 1, 2])
    assert f.experimental_get_tracing_count() == 1
    with pytest.raises(TypeError, match="structure"):
        f(tf.constant([1.0]))


def test_relaxed_trace_specialised_by_replay_matches_eager_for_shape_ops():
    def body(x):
        flat = tf.reshape(x, [-1])
        return tf.reduce_sum(flat * 2.0) + tf.cast(tf.size(x), tf.float32), tf.shape(x)

    f = tf.function(body, input_signature=[tf.TensorSpec([None, None])])
    for shape in ((2, 3), (4, 1), (1, 7), (2, 3)):
        x = tf.constant(np.random.RandomState(0).rand(*shape).astype(np.float32))
        got, want = f(x), body(x)
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert f.experimental_get_tracing_count() == 1


def test_relaxed_trace_with_control_flow_traced_again_matches_eager():
    def body(x):
        return tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: -x)

    f = tf.function(body, input_signature=[tf.TensorSpec([None])])
    for vals in ([1.0, 2.0], [-1.0, -2.0, -3.0], [5.0], [-4.0, 1.0, 0.0, 0.5]):
        x = tf.constant(vals)
        np.testing.assert_allclose(f(x).numpy(), body(x).numpy())
    assert f.experimental_get_tracing_count() == 1


def test_relaxed_trace_with_variables_and_gradients():
    v = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None])])
    def f(x):
        v.assign_add(1.0)
        return tf.reduce_sum(x * v)

    assert float(f(tf.constant([1.0, 1.0]))) == 6.0          # v = 3
    assert float(f(tf.constant([1.0, 1.0, 1.0]))) == 12.0    # v = 4: a new shape, replayed
    assert float(v) == 4.0
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)                                              # v = 5
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [5.0] * 4)


# --- reduce_retracing -------------------------------------------------------------------------

def test_reduce_retracing_generalises_after_a_second_shape():
    traces = []

    @tf.function(reduce_retracing=True)
    def g(x):
        traces.append(tuple(x.shape))
        return x * 2

    for n in (3, 5, 7, 9, 2):
        x = tf.constant(list(range(n)))
        np.testing.assert_array_equal(g(x).numpy(), np.arange(n) * 2)
    # before: one trace per shape (reduce_retracing was ignored)
    assert g.experimental_get_tracing_count() == 2 and traces[:2] == [(3,), (5,)]
    text = g.pretty_printed_concrete_signatures()
    assert "TensorSpec(shape=(3,), dtype=tf.int32" in text
    assert "TensorSpec(shape=(None,), dtype=tf.int32" in text


def test_reduce_retracing_rank_change_gives_unknown_rank_and_keeps_dtypes_apart():
    @tf.function(reduce_retracing=True)
    def g(x):
        return x + 1

    g(tf.constant([1.0]))
    g(tf.constant([[1.0, 2.0]]))
    g(tf.constant([[[3.0]]]))
    assert g.experimental_get_tracing_count() == 2
    assert "shape=<unknown>" in g.pretty_printed_concrete_signatures()
    np.testing.assert_allclose(g(tf.constant([[[3.0]]])).numpy(), [[[4.0]]])
    g(tf.constant([1, 2]))                    # another dtype: a trace of its own
    assert g.experimental_get_tracing_count() == 3


def test_reduce_retracing_python_arguments_still_retrace():
    @tf.function(reduce_retracing=True)
    def g(x, k):
        return x * k

    assert float(g(tf.constant(2.0), 3)) == 6.0
    assert float(g(tf.constant(2.0), 4)) == 8.0
    assert g.experimental_get_tracing_count() == 2


# --- get_concrete_function and ConcreteFunction ------------------------------------------

def test_get_concrete_function_from_specs_and_python_values():
    @tf.function
    def power(a, b):
        return a ** b

    square = power.get_concrete_function(a=tf.TensorSpec(None, tf.float32), b=2)
    assert float(square(tf.constant(10.0))) == 100.0
    np.testing.assert_allclose(square(tf.constant([1.0, 3.0])).numpy(), [1.0, 9.0])
    np.testing.assert_allclose(square(a=tf.constant([[2.0]])).numpy(), [[4.0]])
    assert float(square(tf.constant(3.0), 2)) == 9.0
    with pytest.raises(TypeError, match=r"can not cast 3 to Literal\[2\]"):
        square(tf.constant(10.0), b=3)
    with pytest.raises(errors.InvalidArgumentError, match="float32"):
        square(tf.constant(1))
    assert str(square) == (
        "ConcreteFunction Input Parameters:\n"
        "  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=<unknown>, dtype=tf.float32, name=None)\n"
        "  b (POSITIONAL_OR_KEYWORD): Literal[2]\n"
        "Output Type:\n"
        "  TensorSpec(shape=<unknown>, dtype=tf.float32, name=None)\n"
        "Captures:\n"
        "  None")
    assert str(square.function_type) == (
        "(a: TensorSpec(shape=<unknown>, dtype=tf.float32, name=None), b: Literal[2]) -> "
        "TensorSpec(shape=<unknown>, dtype=tf.float32, name=None)")
    assert square.structured_input_signature == ((tf.TensorSpec(None), 2), {})


def test_concrete_function_from_tensors_checks_dtype_and_shape():
    @tf.function
    def double(a):
        return a + a

    cf = double.get_concrete_function(tf.constant(1.5))
    assert float(cf(tf.constant(2.0))) == 4.0 and float(cf(a=tf.constant(3.0))) == 6.0
    with pytest.raises(errors.InvalidArgumentError, match="int32"):
        cf(tf.constant(1))
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \(2,\)"):
        cf(tf.constant([1.0, 2.0]))        # the exact-shape trace: not for this shape
    with pytest.raises(TypeError, match="do not match"):
        cf(tf.constant(1.0), tf.constant(2.0))
    assert cf.inference_fn(tf.constant(0.5)).numpy() == 1.0
    assert double.get_concrete_function(tf.constant(7.0)) is cf       # cached
    assert double.experimental_get_tracing_count() == 1


def test_concrete_function_attributes():
    @tf.function
    def h(x, y=2):
        """Doc of h."""
        return x * y, [x]

    cf = h.get_concrete_function(tf.TensorSpec([None, 3], tf.float32, name="xx"))
    assert cf.structured_input_signature == ((tf.TensorSpec([None, 3], name="xx"), 2), {})
    out = cf.structured_outputs
    assert out[0] == tf.TensorSpec([None, 3]) and out[1] == [tf.TensorSpec([None, 3])]
    assert cf.inputs == [tf.TensorSpec([None, 3], name="xx")]
    assert cf.outputs == [tf.TensorSpec([None, 3])] * 2
    assert "x (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(None, 3), dtype=tf.float32, " \
        "name='xx')" in cf.pretty_printed_signature()
    assert "Tuple[TensorSpec(shape=(None, 3)" in str(cf.function_type)
    assert repr(cf).startswith("<ConcreteFunction (x: TensorSpec")
    assert h.__name__ == "h" and h.__doc__ == "Doc of h." and h.python_function.__name__ == "h"
    assert h.function_spec.input_signature is None
    got = cf(tf.ones([4, 3]))
    np.testing.assert_allclose(got[0].numpy(), np.full((4, 3), 2.0))


def test_concrete_function_python_argument_left_out():
    class Model:
        weight, bias = 2.0, 1.0

    def evaluate(model, x):
        return model.weight * x + model.bias

    cf = tf.function(evaluate).get_concrete_function(Model(), tf.constant(1.0))
    assert float(cf(tf.constant(10.0))) == 21.0          # the model was baked in


def test_graph_def_view():
    @tf.function
    def double(a):
        return a + a

    nodes = double.get_concrete_function(tf.constant(1.0)).graph.as_graph_def().node
    assert [(n.input, n.op) for n in nodes][0] == ([], "Placeholder")
    assert nodes[0].name == "a" and nodes[1].input == ["a", "a"]
    assert nodes[-1].op == "Identity" and nodes[-1].input == [nodes[1].name]


def test_pretty_printed_concrete_signatures_lists_every_trace():
    @tf.function
    def my_relu(x):
        return tf.maximum(0.0, x)

    my_relu(tf.constant(5.5))
    my_relu([1, -1])
    my_relu(tf.constant([3.0, -3.0]))
    text = my_relu.pretty_printed_concrete_signatures()
    blocks = text.split("\n\n")
    assert len(blocks) == 3
    assert blocks[1].splitlines()[1] == \
        "  x (POSITIONAL_OR_KEYWORD): List[Literal[1], Literal[-1]]"
    assert blocks[2].splitlines()[3] == "  TensorSpec(shape=(2,), dtype=tf.float32, name=None)"
    v = tf.Variable(1.0)
    cap = tf.function(lambda x: x * v).get_concrete_function(tf.constant(1.0))
    assert "dtype=tf.resource" in cap.pretty_printed_signature()


def test_calls_bound_to_the_python_signature_share_a_trace():
    traces = []

    @tf.function
    def f(x, k=2):
        traces.append(1)
        return x * k

    x = tf.constant(3.0)
    assert float(f(x)) == float(f(x, 2)) == float(f(x, k=2)) == float(f(k=2, x=x)) == 6.0
    assert len(traces) == 1


# --- Python values in results -----------------------------------------------------------

def test_python_numbers_in_results_become_tensors_none_stays_none():
    @tf.function
    def f(x):
        return {"n": 1, "f": 2.5, "none": None, "list": [3, x], "arr": np.ones(2)}

    for _ in range(2):                          # the trace's own call and a replay
        out = f(tf.constant(1.0))
        assert isinstance(out["n"], tf.Tensor) and out["n"].dtype == tf.int32
        assert isinstance(out["f"], tf.Tensor) and out["f"].dtype == tf.float32
        assert out["none"] is None
        assert isinstance(out["list"][0], tf.Tensor) and int(out["list"][0]) == 3
        assert out["arr"].dtype == tf.float64
    # before: the Python value itself (TensorFlow returns a tensor)
    one = tf.function(lambda: 1)
    assert isinstance(one(), tf.Tensor) and isinstance(one(), tf.Tensor)
    assert tf.function(lambda: None)() is None


# --- run_functions_eagerly ------------------------------------------------------------------

def test_run_functions_eagerly(capsys):
    @tf.function
    def f(x):
        print("python")
        return x * 2

    f(tf.constant(1))
    assert tf.config.functions_run_eagerly() is False
    tf.config.run_functions_eagerly(True)
    try:
        assert tf.config.functions_run_eagerly() is True
        assert int(f(tf.constant(1))) == 2 and int(f(tf.constant(2))) == 4
    finally:
        tf.config.run_functions_eagerly(False)
    f(tf.constant(3))
    assert capsys.readouterr().out.split() == ["python"] * 3
    with pytest.raises(errors.InvalidTypeError):
        tf.config.run_functions_eagerly("yes")


# --- leaked tensors, Variables created on a later trace ---------------------------------

def test_a_tensor_leaked_from_a_trace_cannot_be_captured_by_another():
    leaked = []

    @tf.function
    def leaky(a):
        x = a + 1
        leaked.append(x)
        return x

    result = leaky(tf.constant(1))
    assert int(result) == 2

    @tf.function
    def uses_leak(b):
        return b + leaked[0]

    with pytest.raises(TypeError, match="leaked"):
        uses_leak(tf.constant(2))

    @tf.function
    def uses_result(b):
        return b + result                   # a returned value: fine

    assert int(uses_result(tf.constant(2))) == 4


def test_result_of_a_traced_call_under_a_tape_stays_usable():
    v = tf.Variable(3.0)
    sq = tf.function(lambda a: a * a)
    with tf.GradientTape() as tape:
        r = sq(v)
    assert float(tape.gradient(r, v)) == 6.0
    assert float(tf.function(lambda: r * 2)()) == 18.0


def test_variables_only_on_the_first_trace():
    class Count(tf.Module):
        def __init__(self):
            self.count = None

        @tf.function
        def __call__(self):
            if self.count is None:
                self.count = tf.Variable(0)
            return self.count.assign_add(1)

    c = Count()
    # the first trace created the Variable; the check that a second trace creates none
    # ran the function again and put its assign_add back
    assert int(c()) == 1 and int(c()) == 2 and int(c.count) == 2

    @tf.function
    def make(x):
        w = tf.Variable(1.0)                        # a new Variable at every call
        return w + x

    with pytest.raises(ValueError, match="first call"):
        make(1.0)


def test_variable_check_puts_back_random_streams():
    tf.random.set_seed(7)
    holder = []

    @tf.function
    def f():
        if not holder:
            holder.append(tf.Variable(tf.random.uniform([3])))
        return holder[0] + tf.random.uniform([3])

    got = f().numpy()
    after = tf.random.uniform([3]).numpy()      # the stream goes on as if traced once
    tf.random.set_seed(7)
    init = tf.random.uniform([3]).numpy()
    np.testing.assert_allclose(holder[0].numpy(), init)
    np.testing.assert_allclose(got - init, tf.random.uniform([3]).numpy(), rtol=1e-6)
    np.testing.assert_allclose(after, tf.random.uniform([3]).numpy())


def test_a_new_optimizer_on_a_retrace_raises_but_one_function_per_optimizer_works():
    w = tf.Variable(2.0)
    x, y = tf.constant([-1.0]), tf.constant([2.0])

    def step(w, x, y, opt):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(w * x - y))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))

    train = tf.function(step)
    train(w, x, y, tf.keras.optimizers.Adam(0.01))
    with pytest.raises(errors.InvalidArgumentError, match="tf.Variable"):
        train(w, x, y, tf.keras.optimizers.Adam(0.001))
    a, b = tf.function(step), tf.function(step)
    a(w, x, y, tf.keras.optimizers.Adam(0.01))
    b(w, x, y, tf.keras.optimizers.Adam(0.01))


# --- methods ------------------------------------------------------------------------------

def test_methods_keep_one_cache_per_instance_and_do_not_keep_it_alive():
    traces = []

    class Scale(tf.Module):
        def __init__(self, k):
            super().__init__()
            self.k = tf.Variable(k)

        @tf.function(input_signature=[tf.TensorSpec([None])])
        def __call__(self, x):
            traces.append(1)
            return x * self.k

    a, b = Scale(2.0), Scale(3.0)
    np.testing.assert_allclose(a(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(b(tf.constant([1.0])).numpy(), [3.0])
    np.testing.assert_allclose(a(tf.constant([1.0, 1.0, 1.0])).numpy(), [2.0] * 3)
    assert len(traces) == 3 and a.__call__ is a.__call__       # (a's second shape: again)
    assert a.__call__.experimental_get_tracing_count() == 1
    assert all(isinstance(k, str) for k in vars(a))        # nothing added to the instance
    assert len(a.trainable_variables) == 1
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None


def test_fast_path_serves_input_signature_calls_after_the_first():
    @tf.function(input_signature=[tf.TensorSpec([None])])
    def f(x):
        return x + 1.0

    x = tf.constant([1.0, 2.0])
    f(x)
    assert len(f._fast) == 1
    np.testing.assert_allclose(f(x).numpy(), [2.0, 3.0])


def test_fast_path_serves_calls_that_leave_python_defaults_out():
    traces = []

    @tf.function
    def f(x, training=False, scale=2.0):
        traces.append(1)
        return x * scale if not training else x

    x = tf.constant([1.0, 2.0])
    np.testing.assert_allclose(f(x).numpy(), [2.0, 4.0])
    assert len(f._fast) == 1                 # the defaults are not graph inputs
    np.testing.assert_allclose(f(tf.constant([3.0, 1.0])).numpy(), [6.0, 2.0])
    np.testing.assert_allclose(f(x, True).numpy(), [1.0, 2.0])
    assert len(traces) == 2


def test_tensor_spec_helpers_reject_wrong_kinds():
    with pytest.raises(errors.InvalidTypeError, match="from_tensor"):
        tf.TensorSpec.from_tensor("x")
    with pytest.raises(errors.InvalidTypeError, match="from_spec"):
        tf.TensorSpec.from_spec(tf.constant(1.0))
    assert tf.TensorSpec([2]).most_specific_common_supertype([3]) is None
    with pytest.raises(errors.InvalidTypeError):
        tf.function(lambda x: x).get_concrete_function(tf.TensorSpec([2], tf.int32))(
            "not a tensor")


def test_keras_layer_tf_function_method_per_instance():
    class Double(tf.keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        @tf.function
        def call(self, x):
            return x * self.w * 2.0

    a, b = Double(), Double()
    np.testing.assert_allclose(a(tf.ones([2, 3])).numpy(), np.full((2, 3), 2.0))
    np.testing.assert_allclose(b(tf.ones([1, 4])).numpy(), np.full((1, 4), 2.0))
    assert a.call is not b.call and a.call is a.call
    assert len(a.trainable_weights) == 1 and len(b.trainable_weights) == 1
