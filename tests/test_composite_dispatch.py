"""The composite-tensor protocol (ops/composite.py): an op whose input's type defines
``__tapeflow_dispatch__`` hands the op to it (elementwise ops to the registered elementwise
handlers), and dispatch-enabled functions run the handlers registered for their argument
types -- what RaggedTensor and SparseTensor are built on, and what a plugin uses for its own
types. Tested here with a type of the test's own (a value with a scale), so the protocol is
checked apart from the composites built on it."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.ops import composite


class Scaled(composite.CompositeTensor):
    """``value * scale``, kept apart (a toy composite: two dense tensors)."""

    def __init__(self, value, scale):
        self.value = tf.convert_to_tensor(value)
        self.scale = tf.convert_to_tensor(scale, dtype=self.value.dtype)

    def dense(self):
        return self.value * self.scale


@pytest.fixture
def handlers():
    """Register elementwise handlers for Scaled; unregister them after the test."""
    @composite.dispatch_for_unary_elementwise_apis(Scaled)
    def unary(api_func, x):
        return Scaled(api_func(x.dense()), 1)

    @composite.dispatch_for_binary_elementwise_apis(Scaled, object)
    def binary_left(api_func, x, y):
        return Scaled(api_func(x.dense(), y), 1)

    @composite.dispatch_for_binary_elementwise_apis(object, Scaled)
    def binary_right(api_func, x, y):
        return Scaled(api_func(x, y.dense()), 1)

    yield
    for h in (unary, binary_left, binary_right):
        composite.unregister_dispatch_for(h)


def test_elementwise_ops_reach_the_handlers(handlers):
    s = Scaled([1.0, -2.0], 3.0)
    np.testing.assert_allclose(tf.abs(s).dense().numpy(), [3.0, 6.0])
    np.testing.assert_allclose(tf.add(s, 1.0).dense().numpy(), [4.0, -5.0])
    np.testing.assert_allclose(tf.multiply(2.0, s).dense().numpy(), [6.0, -12.0])
    # a Tensor operator with the composite on the right goes through the runtime too
    t = tf.constant([1.0, 1.0])
    np.testing.assert_allclose((t - s).dense().numpy(), [-2.0, 7.0])
    # an op with attrs keeps them
    assert tf.cast(s, tf.int32).dense().dtype == tf.int32


def test_gradients_flow_through_the_components(handlers):
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.square(Scaled(x, 2.0)).dense()
        loss = tf.reduce_sum(y)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [8.0, 16.0])


def test_an_op_without_a_handler_is_a_clear_error():
    s = Scaled([1.0], 2.0)
    with pytest.raises(tf.errors.InvalidTypeError, match=r"Scaled.*dispatch_for_api"):
        tf.abs(s)
    with pytest.raises(tf.errors.InvalidTypeError, match="MatMul"):
        tf.linalg.matmul(s, tf.ones([1, 1]))


def test_dispatch_for_api_and_unregister():
    api = tf.reduce_sum

    @composite.dispatch_for_api(api, {"input_tensor": Scaled})
    def scaled_sum(input_tensor, axis=None, keepdims=False, name=None):
        return tf.reduce_sum(input_tensor.dense(), axis, keepdims)

    try:
        assert composite.maybe_dispatch(api, (Scaled([1.0, 2.0], 2.0),), {}).numpy() == 6.0
        assert composite.dispatch(api, Scaled([1.0, 2.0], 2.0), axis=0).numpy() == 6.0
        # arguments of other types: no handler
        assert composite.maybe_dispatch(api, (tf.constant([1.0]),), {}) is NotImplemented
    finally:
        composite.unregister_dispatch_for(scaled_sum)
    with pytest.raises(tf.errors.InvalidTypeError, match="reduce_sum does not take"):
        composite.dispatch(api, Scaled([1.0], 1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not registered"):
        composite.unregister_dispatch_for(scaled_sum)


def test_dispatch_for_api_checks_its_signatures():
    with pytest.raises(tf.errors.InvalidArgumentError, match="has no parameter 'tensor'"):
        composite.dispatch_for_api(tf.reduce_sum, {"tensor": Scaled})
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-empty dict"):
        composite.dispatch_for_api(tf.reduce_sum, {})
    with pytest.raises(tf.errors.InvalidTypeError, match="api must be"):
        composite.dispatch_for_api(3, {"x": Scaled})


def test_any_composite_sees_lists():
    s = Scaled([1.0], 1.0)
    assert composite.any_composite(s) and composite.any_composite([tf.constant(1), s])
    assert not composite.any_composite(tf.constant(1.0), [1, 2], None)
    assert composite.is_composite(s) and not composite.is_composite(tf.constant(1))


def test_type_spec_equality_and_compatibility():
    class Spec(composite.TypeSpec):
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

        def component_specs(self):
            return ((self.shape, self.dtype),)

        def _serialize(self):
            return (self.shape, self.dtype)

    a, b = Spec((None, 3), tf.float32), Spec((2, 3), tf.float32)
    assert a != b and a == Spec((None, 3), tf.float32)
    assert hash(a) == hash(Spec((None, 3), tf.float32))
    assert a.is_compatible_with(b) and b.is_compatible_with(a)
    assert not a.is_compatible_with(Spec((2, 4), tf.float32))
    assert not a.is_compatible_with(Spec((2, 3), tf.int32))
    assert not a.is_compatible_with(tf.constant(1.0))


def test_a_signature_naming_tf_tensor_beside_a_composite_leaves_dense_calls_alone():
    # (tf.Tensor became a "composite type": every tf.function and dense reduce_sum failed)
    @composite.dispatch_for_api(tf.reduce_sum, {"input_tensor": (Scaled, tf.Tensor)})
    def scaled_sum(input_tensor, axis=None, keepdims=False, name=None):
        return tf.reduce_sum(input_tensor.dense(), axis, keepdims)

    try:
        assert tf.reduce_sum(tf.constant([1.0, 2.0])).numpy() == 3.0
        assert tf.function(lambda x: x * 2)(tf.constant([1.0])).numpy().tolist() == [2.0]
        assert tf.reduce_sum(Scaled([1.0, 2.0], 2.0)).numpy() == 6.0
        assert not composite.is_composite(tf.constant(1.0))
    finally:
        composite.unregister_dispatch_for(scaled_sum)
    with pytest.raises(tf.errors.InvalidArgumentError, match="names no type to dispatch on"):
        composite.dispatch_for_api(tf.reduce_sum, {"input_tensor": tf.Tensor})
    with pytest.raises(tf.errors.InvalidArgumentError, match="dense type"):
        composite.dispatch_for_unary_elementwise_apis(object)


def test_an_elementwise_handler_that_declines_passes_to_the_next(handlers):
    @composite.dispatch_for_unary_elementwise_apis(Scaled)
    def declines(api_func, x):
        return NotImplemented

    try:    # (the latest registered is asked first; it declines, the fixture's answers)
        np.testing.assert_allclose(tf.abs(Scaled([-1.0], 2.0)).dense().numpy(), [2.0])
    finally:
        composite.unregister_dispatch_for(declines)


def test_type_specs_with_different_numbers_of_components_are_not_compatible():
    class Spec(composite.TypeSpec):
        def __init__(self, n):
            self.n = n

        def component_specs(self):
            return (((None,), tf.int64),) * self.n

        def _serialize(self):
            return (self.n,)

    assert not Spec(2).is_compatible_with(Spec(3)) and Spec(2).is_compatible_with(Spec(2))


def test_type_spec_from_value():
    st = tf.sparse.from_dense([[0, 1]])
    assert tf.type_spec_from_value(st) == tf.SparseTensorSpec([1, 2], tf.int32)
    with pytest.raises(tf.errors.InvalidTypeError, match="not a composite tensor"):
        tf.type_spec_from_value(tf.constant(1))
