"""String tensors (dtype ``tf.string``) and ``tf.strings``: text held as ``bytes`` on
the host, printed as TensorFlow prints it, refused by numeric ops and by devices that
cannot hold it (docs/dtypes.md, "Strings")."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, UnimplementedError


def _opencl():
    names = [d.name for d in tf.list_devices()]
    if "opencl:0" not in names:
        pytest.skip("no opencl:0 device")
    return "opencl:0"


# --- the dtype ------------------------------------------------------------------------------

def test_the_string_dtype_is_text_not_a_number():
    s = tf.string
    assert s.name == "string" and repr(s) == "tf.string"
    assert tf.as_dtype("string") is s and tf.as_dtype(np.object_) is s
    assert tf.as_dtype(np.dtype(object)) is s and tf.dtypes.string is s
    assert s.as_numpy_dtype is np.object_
    assert not (s.is_floating or s.is_integer or s.is_bool or s.is_complex or s.is_inexact)
    assert s not in tf.dtypes.ALL_DTYPES and s not in tf.dtypes.NUMERIC_DTYPES
    assert pickle.loads(pickle.dumps(s)) is s
    assert tf.dtypes.result_type(s, s) is s
    with pytest.raises(TypeError, match="no promotion"):
        tf.dtypes.result_type(s, tf.int32)


# --- conversion and printing --------------------------------------------------------------

def test_python_text_becomes_utf8_bytes():
    assert tf.constant("Gray wolf").numpy() == b"Gray wolf"
    assert tf.constant(b"x").numpy() == b"x"
    assert tf.constant("é").numpy() == b"\xc3\xa9"           # str is encoded in UTF-8
    assert tf.constant(b"a\x00").numpy() == b"a\x00"         # (NumPy's S dtype would drop it)
    v = tf.constant(["a", b"bc"])
    assert v.dtype is tf.string and v.shape == (2,)
    got = v.numpy()
    assert got.dtype == object and got.tolist() == [b"a", b"bc"]
    assert all(type(b) is bytes for b in got)
    m = tf.constant([["a", "b"], ["c", "d"]])
    assert m.shape == (2, 2) and m.numpy()[1, 0] == b"c"
    assert tf.convert_to_tensor("x").dtype is tf.string
    assert tf.constant(np.array(["u", "v"])).numpy().tolist() == [b"u", b"v"]
    assert tf.constant(np.array([b"u", b"v"])).numpy().tolist() == [b"u", b"v"]
    assert tf.constant("a", dtype=tf.string).numpy() == b"a"
    assert tf.constant("ab", shape=[2, 1]).numpy().tolist() == [[b"ab"], [b"ab"]]
    assert tf.constant([], dtype=tf.string).shape == (0,)


def test_a_string_tensor_prints_as_tensorflow_prints_it():
    assert str(tf.constant("aa")) == "tf.Tensor(b'aa', shape=(), dtype=string)"
    assert str(tf.constant(["a", "b"])) == "tf.Tensor([b'a' b'b'], shape=(2,), dtype=string)"
    assert str(tf.constant([["a", "bc"], ["d", "e"]])) == (
        "tf.Tensor(\n[[b'a' b'bc']\n [b'd' b'e']], shape=(2, 2), dtype=string)")
    assert repr(tf.constant("x")).endswith("numpy=b'x'>")
    assert "numpy=array([b'a', b'b'], dtype=object)" in repr(tf.constant(["a", "b"]))
    assert str(tf.constant("x").dtype) == "<dtype: 'string'>"


def test_a_string_tensor_pickles():
    for t in (tf.constant("x"), tf.constant([["a"], ["b"]])):
        back = pickle.loads(pickle.dumps(t))
        assert back.dtype is tf.string and back.shape == t.shape
        assert np.array_equal(back.numpy(), t.numpy())


@pytest.mark.parametrize("value, dtype, what", [
    (1, tf.string, "holds int 1"),
    ([1, "a"], None, "holds int 1"),
    ([None], None, "holds NoneType"),
    (np.array([1.5, "a"], dtype=object), None, "holds float"),
    ("a", tf.int32, "string values"),
    ([["a"], ["b", "c"]], None, "Cannot convert"),
])
def test_what_is_not_text_is_refused(value, dtype, what):
    with pytest.raises(InvalidArgumentError, match=what):
        tf.constant(value, dtype=dtype)


# --- ops --------------------------------------------------------------------------------------

def test_plus_concatenates_and_broadcasts():
    a = tf.constant("a")
    assert (a + a).numpy() == b"aa" and tf.add(a, "b").numpy() == b"ab"
    assert ("x" + a).numpy() == b"xa" and (a + "x").numpy() == b"ax"
    got = tf.add(tf.constant(["a", "b"]), tf.constant([["x"], ["y"]]))
    assert got.numpy().tolist() == [[b"ax", b"bx"], [b"ay", b"by"]]
    with pytest.raises(InvalidArgumentError, match="promote"):
        a + 1
    with pytest.raises(InvalidArgumentError, match="Incompatible shapes|broadcast"):
        tf.constant(["a", "b"]) + tf.constant(["a", "b", "c"])


def test_equality():
    v = tf.constant(["a", "b"])
    assert (v == "a").numpy().tolist() == [True, False]
    assert (v != tf.constant(["a", "c"])).numpy().tolist() == [False, True]
    assert tf.equal(v, v).numpy().tolist() == [True, True]
    assert tf.not_equal("b", v).numpy().tolist() == [True, False]
    assert (v == v).dtype is tf.bool


def test_elements_move_as_any_dtype():
    v = tf.constant(["a", "b", "c"])
    assert tf.identity(v).numpy().tolist() == [b"a", b"b", b"c"]
    assert tf.reshape(v, [3, 1]).shape == (3, 1)
    assert tf.stack([v, v]).shape == (2, 3)
    assert tf.concat([v, v], 0).numpy().tolist()[3:] == [b"a", b"b", b"c"]
    assert tf.gather(v, [2, 0]).numpy().tolist() == [b"c", b"a"]
    assert v[1].numpy() == b"b" and v[1].dtype is tf.string and v[1].shape == ()
    assert v[1:].numpy().tolist() == [b"b", b"c"]
    assert [t.numpy() for t in tf.unstack(v)] == [b"a", b"b", b"c"]
    assert tf.transpose(tf.reshape(v, [1, 3])).shape == (3, 1)
    assert tf.zeros_like(v).numpy().tolist() == [b"", b"", b""]
    assert tf.zeros([2], tf.string).numpy().tolist() == [b"", b""]
    assert tf.pad(v, [[1, 0]]).numpy().tolist() == [b"", b"a", b"b", b"c"]
    assert tf.shape(v).numpy().tolist() == [3] and tf.size(v).numpy() == 3


def test_tf_strings():
    s = tf.constant(["Gray wolf", "é"])
    assert tf.strings.length(s).numpy().tolist() == [9, 2]
    assert tf.strings.length(s).dtype is tf.int32
    assert tf.strings.length(s, unit="UTF8_CHAR").numpy().tolist() == [9, 1]
    assert tf.strings.length("abc").numpy() == 3 and tf.strings.length("").shape == ()
    assert tf.strings.upper(s).numpy().tolist() == [b"GRAY WOLF", "é".encode()]   # ASCII only
    assert tf.strings.upper("é", encoding="utf-8").numpy() == "É".encode()
    assert tf.strings.lower("Gray WOLF").numpy() == b"gray wolf"
    assert tf.strings.lower("É", encoding="utf-8").numpy() == "é".encode()
    got = tf.strings.join([s, "!", tf.constant([["x"], ["y"]])], separator="-")
    assert got.numpy().tolist() == [[b"Gray wolf-!-x", "é-!-x".encode()],
                                    [b"Gray wolf-!-y", "é-!-y".encode()]]
    assert tf.strings.join(["a"]).numpy() == b"a"
    assert tf.strings.join(["a", "b"]).numpy() == b"ab"
    assert tf.math.add is tf.add


def test_tf_strings_refuse_what_they_cannot_take():
    with pytest.raises(InvalidArgumentError, match=r"attr 'T' of int32.*\[Op:StringLength\]"):
        tf.strings.length(5)
    with pytest.raises(InvalidArgumentError, match="unit"):
        tf.strings.length("a", unit="WORD")
    with pytest.raises(InvalidArgumentError, match="encoding"):
        tf.strings.upper("a", encoding="latin-1")
    with pytest.raises(InvalidArgumentError, match="separator"):
        tf.strings.join(["a"], separator=1)
    with pytest.raises(InvalidArgumentError, match="empty"):
        tf.strings.join([])
    with pytest.raises(InvalidArgumentError, match="promote"):
        tf.strings.join(["a", tf.constant(1)])


@pytest.mark.parametrize("fn, op", [
    (tf.exp, "Exp"), (tf.reduce_sum, "Sum"), (tf.negative, "Neg"),
    (lambda s: s < s, "Less"), (lambda s: s * s, "Mul"), (tf.ones_like, "OnesLike"),
])
def test_numeric_ops_refuse_strings_naming_the_op(fn, op):
    s = tf.constant(["a"])
    with pytest.raises(InvalidArgumentError,
                       match=rf"Value for attr 'T' of string is not in the list .*\[Op:{op}\]"):
        fn(s)


def test_strings_and_numbers_do_not_cast():
    with pytest.raises(UnimplementedError, match="Cast string to float32"):
        tf.cast(tf.constant("1.5"), tf.float32)
    with pytest.raises(UnimplementedError, match="Cast int32 to string"):
        tf.cast(tf.constant(1), tf.string)
    s = tf.constant("a")
    assert tf.cast(s, tf.string) is s


def test_strings_are_not_differentiable_and_do_not_disturb_a_tape():
    x = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        s = tf.constant("a") + "b"
        y = x * x
    assert s.numpy() == b"ab" and tape.gradient(y, x).numpy() == 4.0


# --- devices ----------------------------------------------------------------------------------

def test_strings_live_on_the_host():
    dev = _opencl()
    s = tf.constant(["a", "b"])
    with pytest.raises(InvalidArgumentError, match=rf"strings live on the host.*cpu:0.*"
                                                   rf"\[Op:Copy\] on {dev}"):
        s.to(dev)
    with pytest.raises(InvalidArgumentError, match=rf"\[Op:Const\] on {dev}"):
        tf.constant("a", device=dev)
    with tf.device(dev):
        with pytest.raises(InvalidArgumentError, match=rf"cpu:0.*\[Op:StringLength\] on {dev}"):
            tf.strings.length(s)
        with pytest.raises(InvalidArgumentError, match=rf"\[Op:Add\] on {dev}"):
            s + s
        with pytest.raises(InvalidArgumentError, match=rf"\[Op:StringUpper\] on {dev}"):
            tf.strings.upper("abc")
    with tf.device("cpu:0"):                        # (what to do instead)
        n = tf.strings.length(s)
    assert n.to(dev).numpy().tolist() == [1, 1]


def test_strings_stay_on_the_host_when_the_default_device_is_not():
    dev = _opencl()
    old = tf.config.get_default_device()
    tf.config.set_default_device(dev)
    try:
        assert tf.constant(1.0).device == dev
        assert tf.constant("a").device == "cpu:0"
        assert tf.strings.length("abc").device == "cpu:0"
        assert tf.add("a", "b").numpy() == b"ab"
    finally:
        tf.config.set_default_device(old)


# --- tf.function ---------------------------------------------------------------------------

def test_strings_are_arguments_and_results_of_tf_function():
    traces = []

    @tf.function
    def double(a):
        traces.append(a.dtype)
        return a + a

    assert str(double(tf.constant(1))) == "tf.Tensor(2, shape=(), dtype=int32)"
    assert str(double(tf.constant("a"))) == "tf.Tensor(b'aa', shape=(), dtype=string)"
    assert str(double(tf.constant("b"))) == "tf.Tensor(b'bb', shape=(), dtype=string)"
    assert traces == [tf.int32, tf.string]          # the dtype is in the trace key
    assert double(tf.constant(["x", "y"])).numpy().tolist() == [b"xx", b"yy"]

    @tf.function
    def describe(s):
        return tf.strings.length(tf.strings.upper(s) + "!"), s == "wolf"

    n, eq = describe(tf.constant(["wolf", "lynx"]))
    assert n.numpy().tolist() == [5, 5] and eq.numpy().tolist() == [True, False]
    n, eq = describe(tf.constant(["owl", "wolf"]))
    assert n.numpy().tolist() == [4, 5] and eq.numpy().tolist() == [False, True]


def test_a_concrete_function_of_strings():
    @tf.function
    def double(a):
        return a + a

    cf = double.get_concrete_function(tf.constant("a"))
    assert cf(tf.constant("b")).numpy() == b"bb"
    with pytest.raises(TypeError):
        cf(tf.constant(1))


def test_a_concrete_function_from_a_string_spec():
    @tf.function
    def shout(a):
        return tf.strings.upper(a) + "!"

    cf = shout.get_concrete_function(tf.TensorSpec(shape=[None], dtype=tf.string))
    assert cf(tf.constant(["a", "b"])).numpy().tolist() == [b"A!", b"B!"]
    assert "dtype=tf.string" in str(cf.structured_outputs)


def test_string_variables_hold_text():
    v = tf.Variable("a")
    assert v.dtype is tf.string and v.numpy() == b"a"
    v.assign("b")
    assert v.numpy() == b"b"
    with pytest.raises(InvalidArgumentError, match="holds int 1"):
        v.assign(1)
    with pytest.raises(InvalidArgumentError, match="never converted to numbers"):
        tf.Variable(1.0).assign("x")
    assert v.numpy() == b"b"


def test_the_fuzzer_counts_text_as_a_value_only_where_ops_take_strings():
    from tapeflow.testing import fuzz
    assert fuzz.takes_text("tf.identity") and fuzz.takes_text("op:ZerosLike")
    assert fuzz.takes_text("tf.strings.length") and fuzz.takes_text("op:StringJoin")
    assert not fuzz.takes_text("tf.exp") and not fuzz.takes_text("op:Sum")
    assert not fuzz.takes_text("tf.math.trunc") and not fuzz.takes_text("tf.math.conj")
    for target, arg in (("tf.math.trunc", "x"), ("tf.math.conj", "x"), ("tf.math.real", "input")):
        call = fuzz.Call(target, [], {arg: "a string"}, bad=arg, poison=True, text_in=True)
        assert fuzz.run_call(call).kind == "error", target      # never returned silently
