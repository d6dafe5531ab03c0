"""tf.Module and tf.name_scope: names, the attribute walk (lists, tuples, dicts, nesting,
order, duplicates, cycles), name scopes, Keras layers and models as Modules."""

from __future__ import annotations

import collections
import threading

import pytest

import tapeflow as tf
from tapeflow.module import DictWrapper, ListWrapper


def _names(vs):
    return [v.name for v in vs]


class Leafy(tf.Module):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.z = tf.Variable(1.0, name="z")
        self.a = tf.Variable(2.0, name="a", trainable=False)
        self.items = [tf.Variable(3.0, name="l0"), (tf.Variable(4.0, name="t0"),)]
        self.table = {"y": tf.Variable(5.0, name="dy"), "b": tf.Variable(6.0, name="db")}


class Tree(tf.Module):
    def __init__(self):
        super().__init__()
        self.second = Leafy()
        self.first = Leafy(name="named")
        self.more = [Leafy(name="in_list"), {"k": Leafy(name="in_dict")}]
        self.again = self.first            # reached twice: once in the walk
        self.own = tf.Variable(0.0, name="own")


# --- names ------------------------------------------------------------------------------------

def test_default_name_is_the_class_name_in_snake_case():
    class MyModule(tf.Module):
        pass

    class HTTPServer2(tf.Module):
        pass
    assert MyModule().name == "my_module"
    assert HTTPServer2().name == "http_server2"
    assert tf.Module().name == "module"
    assert tf.Module(name="_ok").name == "_ok"


@pytest.mark.parametrize("bad", ["1abc", "a b", "", "a/b", "a-b", "x.y"])
def test_invalid_names_raise_naming_the_rule(bad):
    with pytest.raises(ValueError, match="not a valid module name.*identifiers") as e:
        tf.Module(name=bad)
    assert isinstance(e.value, tf.errors.InvalidArgumentError)


def test_non_string_name_is_a_type_error():
    with pytest.raises(TypeError, match="must be a string"):
        tf.Module(name=3)


# --- the walk -----------------------------------------------------------------------------------

def test_variables_in_walk_order_own_leaves_first_then_submodules_depth_first():
    t = Tree()
    leafy = ["a:0", "l0:0", "t0:0", "db:0", "dy:0", "z:0"]     # a, items, table, z
    assert _names(t.variables) == ["own:0"] + leafy * 4
    # attributes again (-> named), first, more (-> in_list, in_dict), own, second (-> leafy)
    assert [m.name for m in t.submodules] == ["named", "in_list", "in_dict", "leafy"]
    assert isinstance(t.variables, tuple) and isinstance(t.submodules, tuple)


def test_trainable_and_non_trainable_variables():
    t = Tree()
    assert _names(t.non_trainable_variables) == ["a:0"] * 4
    assert len(t.trainable_variables) == 1 + 5 * 4
    assert all(v.trainable for v in t.trainable_variables)


def test_shared_variable_and_module_are_listed_once():
    v = tf.Variable(1.0)
    m = tf.Module()
    m.x, m.y, m.z = v, [v, v], {"v": v}
    sub = tf.Module()
    m.s1, m.s2 = sub, [sub]
    assert len(m.variables) == 1 and len(m.submodules) == 1


def test_cycles_are_safe():
    m = tf.Module()
    m.me = m
    m.loop = [m]
    child = tf.Module()
    child.parent = m
    m.child = child
    lst = []
    lst.append(lst)
    m.__dict__["selfish"] = lst            # a list inside itself
    assert m.submodules == (child,)
    assert m.variables == ()
    assert len(list(m._flatten(with_path=True))) > 0


def test_flatten_with_path_and_predicate():
    t = Tree()
    paths = [p for p, _ in t._flatten(predicate=lambda x: isinstance(x, tf.Variable),
                                      with_path=True)]
    assert paths[0] == ("own",)
    assert ("first", "table", "b") in paths and ("more", 1, "k", "items", 1, 0) in paths
    # with paths, an object reached twice comes twice
    assert ("again", "z") in paths and ("first", "z") in paths
    flat = list(t._flatten(recursive=False, predicate=lambda x: isinstance(x, tf.Module)))
    assert [m.name for m in flat] == ["named", "in_list", "in_dict", "leafy"]
    with pytest.raises(TypeError, match="predicate must be callable"):
        list(t._flatten(predicate=3))


def test_namedtuple_fields_name_the_path():
    Pair = collections.namedtuple("Pair", "left right")
    m = tf.Module()
    m.pair = Pair(tf.Variable(1.0, name="l"), tf.Variable(2.0, name="r"))
    got = list(m._flatten(predicate=lambda x: isinstance(x, tf.Variable), with_path=True))
    assert [p for p, _ in got] == [("pair", "left"), ("pair", "right")]


def test_init_without_super_still_walks_and_names():
    class NoInit(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0)
            self.sub = Leafy()
    n = NoInit()
    assert len(n.variables) == 7 and [m.name for m in n.submodules] == ["leafy"]
    assert n.name == "no_init"
    with n.name_scope:
        assert tf.Variable(0.0).name == "no_init/Variable:0"


def test_lists_and_dicts_become_wrappers_that_stay_tracked():
    m = tf.Module()
    m.lst = []
    m.dct = {}
    assert type(m.lst) is ListWrapper and repr(m.lst) == "ListWrapper([])"
    assert type(m.dct) is DictWrapper and repr(m.dct) == "DictWrapper({})"
    m.lst.append(tf.Variable(1.0))
    m.dct["k"] = tf.Variable(2.0)
    m.lst.append({"inner": tf.Variable(3.0)})
    assert type(m.lst[1]) is DictWrapper
    assert len(m.variables) == 3
    assert m.lst == [m.lst[0], {"inner": m.lst[1]["inner"]}]    # still a list


def test_private_attributes_are_walked_and_plain_values_ignored():
    class P(tf.Module):
        def __init__(self):
            super().__init__()
            self._hidden = Leafy()
            self.values = (1, 2, "x")
    assert len(P().submodules) == 1 and len(P().variables) == 6


# --- name scopes ----------------------------------------------------------------------------------

def test_name_scope_prefixes_new_variables_and_nests():
    with tf.name_scope("x") as outer:
        with tf.name_scope("y") as inner:
            a = tf.Variable(1.0, name="q")
        b = tf.Variable(1.0)
    c = tf.Variable(1.0)
    assert (outer, inner) == ("x/", "x/y/")
    assert (a.name, b.name, c.name) == ("x/y/q:0", "x/Variable:0", "Variable:0")
    with tf.name_scope("x"):
        with tf.name_scope("abs/") as s:
            assert s == "abs/" and tf.Variable(1.0).name == "abs/Variable:0"
        with tf.name_scope("") as root:
            assert root == "" and tf.Variable(1.0).name == "Variable:0"


def test_name_scope_rejects_non_strings():
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a string"):
        tf.name_scope(None)


def test_module_name_scope_is_fixed_at_construction():
    with tf.name_scope("outer"):
        m = tf.Module(name="mm")
    assert m.name_scope.name == "outer/mm/"
    with tf.name_scope("elsewhere"):
        with m.name_scope:
            assert tf.Variable(1.0, name="z").name == "outer/mm/z:0"


def test_with_name_scope_decorator():
    class W(tf.Module):
        @tf.Module.with_name_scope
        def make(self, x):
            """Makes a Variable."""
            self.v = tf.Variable(x, name="q")
            return self.v
    w = W()
    assert w.make(1.0).name == "w/q:0"
    assert W.make.__name__ == "make" and W.make.__doc__ == "Makes a Variable."


def test_name_scope_is_per_thread():
    seen = {}

    def other():
        seen["name"] = tf.Variable(1.0).name
    with tf.name_scope("main_thread"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["name"] == "Variable:0"


def test_name_scope_inside_tf_function():
    @tf.function
    def f(x):
        with tf.name_scope("inside"):
            return x + 1.0
    assert float(f(tf.constant(1.0))) == 2.0


def test_scope_object_can_be_reentered_and_recursed():
    s = tf.name_scope("r")
    with s:
        with s:
            assert tf.Variable(1.0).name == "r/r/Variable:0"
    with s:
        assert tf.Variable(1.0).name == "r/Variable:0"


# --- Keras layers and models are Modules ------------------------------------------------------

def test_layers_and_models_are_modules():
    assert issubclass(tf.keras.layers.Layer, tf.Module)
    assert issubclass(tf.keras.Model, tf.Module)
    d = tf.keras.layers.Dense(2, name="d")
    d(tf.ones((1, 3)))
    assert isinstance(d, tf.Module) and d.name_scope.name == "d/"
    assert _names(d.variables) == ["d/kernel:0", "d/bias:0"]      # (creation order, as before)
    got = [p for p, _ in d._flatten(predicate=lambda x: isinstance(x, tf.Variable),
                                    with_path=True)]
    assert got == [("bias",), ("kernel",)]


def test_layer_weights_inside_a_name_scope():
    with tf.name_scope("block"):
        d = tf.keras.layers.Dense(1, name="inner")
        d(tf.ones((1, 2)))
    assert d.kernel.name == "block/inner/kernel:0"


def test_module_holding_layers_and_layer_holding_a_module():
    class Holder(tf.Module):
        def __init__(self):
            super().__init__()
            self.layers = [tf.keras.layers.Dense(2), tf.keras.layers.Dense(1)]

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    h = Holder()
    h(tf.ones((1, 3)))
    assert len(h.variables) == 4 and len(h.submodules) == 2
    h.layers[1].trainable = False
    assert len(h.trainable_variables) == 2 and len(h.non_trainable_variables) == 2

    class Wrap(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.inner = Leafy()

        def call(self, x):
            return x * self.inner.z
    w = Wrap()
    assert float(w(tf.constant(2.0))) == 2.0
    assert len(w.variables) == 6 and w.inner in w.submodules
    assert len(w.trainable_variables) == 5


def test_keras_model_submodules_and_variables():
    class Two(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.a = tf.keras.layers.Dense(2)
            self.b = tf.keras.layers.Dense(1)

        def call(self, x):
            return self.b(self.a(x))
    m = Two()
    m(tf.ones((1, 3)))
    assert len(m.variables) == 4 and len(m.submodules) == 2
    assert isinstance(m, tf.Module) and len(list(m._flatten(
        predicate=lambda x: isinstance(x, tf.Variable)))) == 4


def test_a_plain_modules_trainable_attribute_freezes_nothing():
    m = tf.Module()
    m.trainable = False                  # (an attribute like any other on a tf.Module)
    m.v = tf.Variable(1.0)
    outer = tf.Module()
    outer.inner = m
    assert len(outer.trainable_variables) == 1


def test_tf_function_method_on_a_module():
    class Scale(tf.Module):
        def __init__(self):
            super().__init__()
            self.k = tf.Variable(3.0)

        @tf.function
        def __call__(self, x):
            return x * self.k
    s = Scale()
    assert float(s(tf.constant(2.0))) == 6.0
    assert s.variables == (s.k,)
