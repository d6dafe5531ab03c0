"""tapeflow.nest: one set of pytree rules (TensorFlow's tf.nest), and the users
of it -- GradientTape, ForwardAccumulator, tf.function and tf.data -- keeping
namedtuples, dicts (in sorted key order) and None leaves."""

import collections

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import nest
from tapeflow.errors import InvalidArgumentError, InvalidTypeError

P = collections.namedtuple("P", "a b")


# --- the module itself ---------------------------------------------------------------------

def test_flatten_orders_dicts_by_key_at_every_depth():
    s = {"b": 1, "a": {"z": 2, "y": [3, (4, 5)]}, "c": None}
    assert nest.flatten(s) == [3, 4, 5, 2, 1, None]


def test_ordered_dict_flattens_by_key_and_packs_back_in_its_own_order():
    s = collections.OrderedDict([("b", 1), ("a", 2)])
    assert nest.flatten(s) == [2, 1]
    out = nest.pack_sequence_as(s, ["A", "B"])
    assert type(out) is collections.OrderedDict
    assert list(out.items()) == [("b", "B"), ("a", "A")]


def test_pack_is_flatten_inverse_and_keeps_types():
    d = collections.defaultdict(list, {"k": P(a=[1, 2], b=(3,))})
    s = [d, (None, 4), P(a=5, b={"x": 6})]
    flat = nest.flatten(s)
    assert flat == [1, 2, 3, None, 4, 5, 6]
    out = nest.pack_sequence_as(s, [x if x is None else x * 10 for x in flat])
    assert type(out) is list and type(out[1]) is tuple and type(out[2]) is P
    assert type(out[0]) is collections.defaultdict and out[0].default_factory is list
    assert out == [{"k": P(a=[10, 20], b=(30,))}, (None, 40), P(a=50, b={"x": 60})]


def test_leaves():
    t = tf.constant([1.0, 2.0])
    v = tf.Variable(1.0)
    a = np.ones(3)
    for leaf in (t, v, a, 3, 2.5, "str", b"b", None):
        assert not nest.is_nested(leaf)
        assert nest.flatten(leaf)[0] is leaf and len(nest.flatten(leaf)) == 1
    assert nest.pack_sequence_as(None, [t]) is t


def test_lists_as_leaves_mode():
    s = {"x": [1, 2], "y": ([3], 4)}
    assert nest.flatten(s, lists_as_leaves=True) == [[1, 2], [3], 4]
    assert not nest.is_nested([1], lists_as_leaves=True)
    out = nest.map_structure(len, {"x": [1, 2], "y": ([3],)}, lists_as_leaves=True)
    assert out == {"x": 2, "y": (1,)}


def test_map_structure_several_structures():
    out = nest.map_structure(lambda x, y: x + y, P(a=1, b=[2]), P(a=10, b=[20]))
    assert out == P(a=11, b=[22]) and type(out) is P


def test_flatten_with_paths():
    s = {"b": P(a=1, b=[2]), "a": 3}
    assert nest.flatten_with_paths(s) == [(("a",), 3), (("b", "a"), 1), (("b", "b", 0), 2)]


def test_flatten_up_to():
    assert nest.flatten_up_to(P(a=0, b=0), P(a=(1, 2), b=[3])) == [(1, 2), [3]]
    assert nest.flatten_up_to({"x": 0}, {"x": [1], "y": 2}) == [[1]]
    with pytest.raises(InvalidArgumentError, match="leaf at path"):
        nest.flatten_up_to((0, (0, 0)), (1, 2))


def test_mismatch_errors_name_both_structures_and_the_path():
    with pytest.raises(InvalidTypeError, match=r"list and tuple.*\[1, 2\].*\(3, 4\)"):
        nest.assert_same_structure([1, 2], (3, 4))
    nest.assert_same_structure([1, 2], (3, 4), check_types=False)
    with pytest.raises(InvalidArgumentError, match=r"different keys at path \['k'\]") as e:
        nest.assert_same_structure({"k": {"a": 1}}, {"k": {"b": 1}})
    assert not isinstance(e.value, TypeError)
    with pytest.raises(InvalidArgumentError, match=r"different lengths at path \[1\]: 2 and 3"):
        nest.map_structure(lambda a, b: a, (1, (2, 3)), (1, (2, 3, 4)))
    with pytest.raises(InvalidArgumentError, match="not nested the same way"):
        nest.assert_same_structure([1, [2]], [1, 2])
    with pytest.raises(InvalidArgumentError, match=r"Cannot pack 1 value\(s\).*of 2 leaves"):
        nest.pack_sequence_as([0, 0], [1])
    with pytest.raises(InvalidArgumentError, match="too many values"):
        nest.pack_sequence_as({"a": 0}, [1, 2])
    with pytest.raises(InvalidTypeError, match="sortable keys"):
        nest.flatten({1: "x", "a": "y"})


def test_namedtuples_of_one_name_and_fields_match_mappings_match():
    def make(a, b):
        return collections.namedtuple("Same", "a b")(a, b)
    nest.assert_same_structure(make(1, 2), make(3, 4))
    with pytest.raises(InvalidTypeError):
        nest.assert_same_structure(P(1, 2), collections.namedtuple("Q", "a b")(1, 2))
    nest.assert_same_structure({"a": 1}, collections.OrderedDict(a=2))


# --- GradientTape ------------------------------------------------------------------------

def test_gradient_of_a_namedtuple_of_variables_is_that_namedtuple():
    v1, v2 = tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = v1 * v2
    g = tape.gradient(y, P(a=v1, b=v2))
    assert type(g) is P                      # (a plain tuple before tapeflow.nest)
    assert (float(g.a), float(g.b)) == (3.0, 2.0)


def test_gradient_of_nested_dicts_keeps_keys_types_and_order():
    x, y, z = tf.constant(1.0), tf.constant(2.0), tf.constant(5.0)
    src = collections.OrderedDict([("z", {"y": y, "x": x}), ("a", [z])])
    with tf.GradientTape() as tape:
        tape.watch(src)
        out = 1.0 * x + 10.0 * y + 100.0 * z
    g = tape.gradient(out, src)
    assert type(g) is collections.OrderedDict and list(g) == ["z", "a"]
    assert list(g["z"]) == ["y", "x"]
    assert (float(g["z"]["x"]), float(g["z"]["y"]), float(g["a"][0])) == (1.0, 10.0, 100.0)


def test_gradient_none_where_unconnected_in_the_sources_structure():
    x, u = tf.constant(3.0), tf.constant(4.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, u])
        y = x * x
    g = tape.gradient(y, {"used": x, "unused": (u, [u])})
    assert float(g["used"]) == 6.0 and g["unused"] == (None, [None])
    g0 = tape.gradient(y, {"unused": (u,)}, unconnected_gradients="zero")
    assert float(g0["unused"][0]) == 0.0


def test_gradient_targets_and_output_gradients_as_structures():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        ys = {"b": x * 2.0, "a": x * x}
    g = tape.gradient(ys, x, output_gradients={"a": tf.constant([1.0, 0.0]),
                                               "b": tf.constant([0.0, 1.0])})
    assert g.numpy().tolist() == [2.0, 2.0]


def test_gradient_output_gradients_count_mismatch_is_an_error():
    x = tf.constant(1.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    with pytest.raises(InvalidArgumentError, match=r"2 output gradient\(s\) for 1 target"):
        tape.gradient(y, x, output_gradients=[tf.constant(1.0), tf.constant(1.0)])


def test_jacobian_of_a_namedtuple_is_that_namedtuple():
    a, b = tf.constant([1.0, 2.0]), tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        y = a * b
    j = tape.jacobian(y, P(a=a, b=b))
    assert type(j) is P
    assert j.a.numpy().tolist() == [[3.0, 0.0], [0.0, 3.0]] and j.b.numpy().tolist() == [1.0, 2.0]


def test_jacobian_vectorized_path_goes_through_the_hooks_object():
    import tapeflow.tracing  # noqa: F401  (installs HOOKS.vectorize_jacobian)
    from tapeflow.runtime import context as ctx
    real = ctx.HOOKS.vectorize_jacobian
    assert real is not None
    calls = []

    def counting(*args):
        calls.append(1)
        return real(*args)

    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    ctx.HOOKS.vectorize_jacobian = counting
    try:
        fast = tape.jacobian(y, x)
    finally:
        ctx.HOOKS.vectorize_jacobian = real
    loop = tape.jacobian(y, x, experimental_use_pfor=False)
    assert calls == [1]
    np.testing.assert_array_equal(fast.numpy(), loop.numpy())
    np.testing.assert_array_equal(loop.numpy(), np.diag([2.0, 4.0, 6.0]))


def test_tape_records_are_laid_out_as_tape_record():
    from tapeflow.autodiff.tape import TapeRecord
    x = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    (rec,) = [TapeRecord._make(r) for r in tape._records]
    assert rec.op.name == "Mul" and rec.inputs == (x, x) and rec.outputs[0] is y
    assert rec.grad_fn is None and isinstance(rec.attrs, dict)


def test_not_differentiable_error_points_at_library_gradient():
    from tapeflow.plugins import Library, register
    lib = Library("nest_nograd")

    @lib.op()
    def wiggle(x):
        """differentiable, but nobody wrote its gradient"""

    lib.kernel(wiggle, "cpu", dtypes=("float32", "float64"))(np.sin)
    register(lib)
    x = tf.constant([1.0], device="cpu:0")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = wiggle(x)
    with pytest.raises(tf.errors.NotDifferentiableError,
                       match="nest_nograd::wiggle.*Library.gradient.*docs/plugins.md"):
        tape.gradient(y, x)


# --- ForwardAccumulator --------------------------------------------------------------------

def test_forward_accumulator_structures():
    a, b = tf.constant(2.0), tf.constant([1.0, 3.0])
    primals = P(a=a, b={"w": b})
    tangents = P(a=tf.constant(1.0), b={"w": tf.constant([0.0, 1.0])})
    with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
        y = a * b
        z = a * a
    out = acc.jvp({"z": z, "pair": P(a=y, b=None)})
    assert set(out) == {"z", "pair"} and type(out["pair"]) is P
    assert float(out["z"]) == 4.0
    assert out["pair"].a.numpy().tolist() == [1.0, 5.0] and out["pair"].b is None


# --- tf.function ---------------------------------------------------------------------------
# (passed before tapeflow.nest too, through tracing's own walk; tracing now uses tapeflow.nest)

def test_function_with_namedtuples_and_dicts():
    @tf.function
    def f(p, d):
        return P(a=p.a + d["y"], b={"s": p.b * d["x"]})

    out = f(P(a=tf.constant(1.0), b=tf.constant(2.0)), {"y": tf.constant(10.0),
                                                         "x": tf.constant(3.0)})
    assert type(out) is P and float(out.a) == 11.0 and float(out.b["s"]) == 6.0
    again = f(P(a=tf.constant(2.0), b=tf.constant(4.0)), {"y": tf.constant(20.0),
                                                           "x": tf.constant(5.0)})
    assert float(again.a) == 22.0 and float(again.b["s"]) == 20.0


# --- tf.data -------------------------------------------------------------------------------

def test_dataset_map_batch_of_namedtuples_and_dicts():
    ds = tf.data.Dataset.from_tensor_slices(P(a=[1, 2, 3, 4], b={"y": [5, 6, 7, 8], "x": [0] * 4}))
    ds = ds.map(lambda e: P(a=e.a * 2, b={"y": e.b["y"], "x": e.b["x"]})).batch(2)
    els = list(ds)
    assert len(els) == 2 and all(type(e) is P for e in els)
    assert list(els[0].b) == ["y", "x"]
    assert els[1].a.numpy().tolist() == [6, 8] and els[1].b["y"].numpy().tolist() == [7, 8]


def test_dataset_zip_of_a_dict_and_a_namedtuple():
    a = tf.data.Dataset.range(3)
    b = tf.data.Dataset.from_tensor_slices(P(a=[1.0, 2.0, 3.0], b=[4, 5, 6]))
    els = list(tf.data.Dataset.zip({"n": a, "p": b}).batch(3))
    (el,) = els
    assert type(el["p"]) is P and el["n"].numpy().tolist() == [0, 1, 2]
    assert el["p"].b.numpy().tolist() == [4, 5, 6]


def test_dataset_lists_are_one_component():
    ds = tf.data.Dataset.from_tensor_slices([[1, 2], [3, 4]])
    assert [x.numpy().tolist() for x in ds] == [[1, 2], [3, 4]]
    # a map function's list result is a tuple at the top only (TensorFlow's rule): a list
    # inside it is one component
    out = next(iter(tf.data.Dataset.range(1).map(lambda x: (x, [x, x + 1]))))
    assert type(out) is tuple and len(out) == 2
    assert out[1].numpy().tolist() == [0, 1]


def test_custom_gradient_keeps_its_result_structure():
    @tf.custom_gradient
    def f(x):
        def grad(da, ds):                 # one gradient per leaf of the result
            return da * 2.0 + ds * 3.0
        return P(a=x * 2.0, b={"s": x * 3.0}), grad

    x = tf.constant(1.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = f(x)
        y = out.a + out.b["s"]
    assert type(out) is P and float(out.b["s"]) == 3.0   # (a plain tuple before)
    assert float(tape.gradient(y, x)) == 5.0


def test_nest_errors_name_the_public_function():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[in tf\.nest\.assert_same_structure\]"):
        nest.assert_same_structure([1], [1, 2])
