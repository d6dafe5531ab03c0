"""tapeflow.runtime.nest: one set of pytree rules (TensorFlow's tf.nest), and the users
of it -- GradientTape, ForwardAccumulator, tf.function and tf.data -- keeping
namedtuples, dicts (in sorted key order) and None leaves."""

import collections

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.runtime import nest
from tapeflow.runtime.errors import InvalidArgumentError, InvalidTypeError

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
