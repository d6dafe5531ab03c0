"""String tensors (dtype ``tf.string``) and ``tf.strings``: text held as ``bytes`` on
the host, printed as TensorFlow prints it, refused by numeric ops and by devices that
cannot hold it (docs/dtypes.md, "Strings")."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, UnimplementedError
from tapeflow.runtime.registry import OPS


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


# --- issue 47: the rest of tf.strings -------------------------------------------------------
# (expected values checked against TensorFlow 2.21)

def _ragged(rows):
    """A RaggedTensor of rows of strings or ints, built from its components."""
    flat = [v for r in rows for v in r]
    splits = np.cumsum([0] + [len(r) for r in rows])
    return tf.RaggedTensor.from_row_splits(flat if flat else tf.constant([], tf.string), splits)


def _rows(rt):
    return rt.to_list()


def test_split_gives_a_dense_tensor_for_a_scalar_and_ragged_rows_otherwise():
    got = tf.strings.split("Gray  wolf ")
    assert got.shape == (2,) and got.numpy().tolist() == [b"Gray", b"wolf"]
    assert tf.strings.split("Gray  wolf ", sep=" ").numpy().tolist() == [
        b"Gray", b"", b"wolf", b""]
    assert tf.strings.split("a,b,c,d", sep=",", maxsplit=2).numpy().tolist() == [
        b"a", b"b", b"c,d"]
    assert tf.strings.split("a<>b<>", sep="<>").numpy().tolist() == [b"a", b"b", b""]
    rt = tf.strings.split(["a b", "", "c"])
    assert _rows(rt) == [[b"a", b"b"], [], [b"c"]] and rt.shape.as_list() == [3, None]
    assert _rows(tf.strings.split(["", " "], sep=" ")) == [[b""], [b"", b""]]
    rt2 = tf.strings.split([["a b", "c"], ["d e f", ""]])
    assert rt2.ragged_rank == 2 and _rows(rt2) == [[[b"a", b"b"], [b"c"]],
                                                   [[b"d", b"e", b"f"], []]]
    assert _rows(tf.strings.split(_ragged([["a b"], ["c", "d e"]]))) == [
        [[b"a", b"b"]], [[b"c"], [b"d", b"e"]]]
    assert str(tf.strings.split(tf.constant(["x y", "z"]))) == \
        "<tf.RaggedTensor [[b'x', b'y'], [b'z']]>"


def test_bytes_split_and_unicode_split():
    assert tf.strings.bytes_split("Duck").numpy().tolist() == [b"D", b"u", b"c", b"k"]
    assert _rows(tf.strings.bytes_split(["ab", "", "é"])) == [[b"a", b"b"], [], [b"\xc3",
                                                                                  b"\xa9"]]
    got = tf.strings.unicode_split("アヒ 🦆", "UTF-8")
    assert got.numpy().tolist() == ["ア".encode(), "ヒ".encode(), b" ", "🦆".encode()]
    assert _rows(tf.strings.unicode_split(["ab", "é"], "UTF-8")) == [[b"a", b"b"], [b"\xc3\xa9"]]
    assert _rows(tf.strings.unicode_split([b"a\xff"], "UTF-8")) == [[b"a", b"\xef\xbf\xbd"]]
    chars, starts = tf.strings.unicode_split_with_offsets("aé!", "UTF-8")
    assert chars.numpy().tolist() == [b"a", b"\xc3\xa9", b"!"]
    assert starts.numpy().tolist() == [0, 1, 3]


def test_unicode_decode_handles_bad_bytes_as_asked():
    got = tf.strings.unicode_decode("アヒル 🦆", "UTF-8")
    assert got.dtype is tf.int32 and got.numpy().tolist() == [12450, 12498, 12523, 32, 129414]
    assert _rows(tf.strings.unicode_decode(["ab", "é", ""], "UTF-8")) == [[97, 98], [233], []]
    assert _rows(tf.strings.unicode_decode([b"a\xffb"], "UTF-8")) == [[97, 65533, 98]]
    assert _rows(tf.strings.unicode_decode([b"a\xffb"], "UTF-8", errors="ignore")) == [[97, 98]]
    assert _rows(tf.strings.unicode_decode([b"a\xff\xfeb\xe3\x82"], "UTF-8",
                                           replacement_char=63)) == [[97, 63, 63, 98, 63]]
    assert _rows(tf.strings.unicode_decode([b"\xed\xa0\x80"], "UTF-8")) == [[65533] * 3]
    assert _rows(tf.strings.unicode_decode([b"\x00a\xd8\x3d\xde\x00"], "UTF-16-BE")) == [
        [97, 128512]]
    assert _rows(tf.strings.unicode_decode([b"\x00\x00\x00a"], "UTF-32-BE")) == [[97]]
    assert _rows(tf.strings.unicode_decode(["a\x01"], "UTF-8",
                                           replace_control_characters=True)) == [[97, 65533]]
    with pytest.raises(InvalidArgumentError, match="Invalid formatting on input string"):
        tf.strings.unicode_decode([b"a\xff"], "UTF-8", errors="strict")
    with pytest.raises(InvalidArgumentError, match="encoding: NO-SUCH"):
        tf.strings.unicode_decode("a", "NO-SUCH")
    with pytest.raises(InvalidArgumentError, match="errors"):
        tf.strings.unicode_decode("a", "UTF-8", errors="loud")
    points, starts = tf.strings.unicode_decode_with_offsets(["aé", "b"], "UTF-8")
    assert _rows(points) == [[97, 233], [98]] and _rows(starts) == [[0, 1], [0]]
    assert starts.dtype is tf.int64
    rt = tf.strings.unicode_decode(_ragged([["ab"], ["c", "d"]]), "UTF-8")
    assert _rows(rt) == [[[97, 98]], [[99], [100]]]


def test_unicode_encode_and_transcode():
    assert tf.strings.unicode_encode([97, 233, 128512], "UTF-8").numpy() == "aé😀".encode()
    got = tf.strings.unicode_encode([[97, 98], [99, 100]], "UTF-8")
    assert got.shape == (2,) and got.numpy().tolist() == [b"ab", b"cd"]
    assert tf.strings.unicode_encode(_ragged([[97, 98], [99]]), "UTF-8").numpy().tolist() == [
        b"ab", b"c"]
    assert tf.strings.unicode_encode([97, 128512], "UTF-16-BE").numpy() == b"\x00a\xd8=\xde\x00"
    assert tf.strings.unicode_encode([97, -1, 0x110000, 0xD800], "UTF-8").numpy() == \
        b"a" + "\ufffd".encode() * 3
    assert tf.strings.unicode_encode([97, -1], "UTF-8", errors="ignore").numpy() == b"a"
    assert tf.strings.unicode_encode(tf.zeros([0], tf.int32), "UTF-8").numpy() == b""
    with pytest.raises(InvalidArgumentError, match="out of range for Unicode"):
        tf.strings.unicode_encode([-1], "UTF-8", errors="strict")
    with pytest.raises(InvalidArgumentError, match="rank must be at least 1"):
        tf.strings.unicode_encode(97, "UTF-8")
    got = tf.strings.unicode_transcode([b"a\xc3\xa9", b"\xff"], "UTF-8", "UTF-16-BE")
    assert got.numpy().tolist() == [b"\x00a\x00\xe9", b"\xff\xfd"]


def test_substr_counts_bytes_or_characters():
    assert tf.strings.substr(["hello", "hi"], 1, 3).numpy().tolist() == [b"ell", b"i"]
    assert tf.strings.substr(["hello", "hi"], [0, 1], [2, 1]).numpy().tolist() == [b"he", b"i"]
    assert tf.strings.substr("hello", -3, 2).numpy() == b"ll"
    assert tf.strings.substr("hello", 1, -1).numpy() == b"ello"
    assert tf.strings.substr("héllo", 1, 2, unit="UTF8_CHAR").numpy() == "él".encode()
    assert _rows(tf.strings.substr(_ragged([["hello"], ["abc", "de"]]), 0, 2)) == [
        [b"he"], [b"ab", b"de"]]
    with pytest.raises(InvalidArgumentError, match=r"pos 3 out of range for string b'hi' at "
                                                   r"index 1 \[Op:Substr\]"):
        tf.strings.substr(["hello", "hi"], 3, 2)
    with pytest.raises(InvalidArgumentError, match="pos and len should have the same shape"):
        tf.strings.substr(["a", "b"], [0, 1], 2)


def test_strip_reduce_join_and_join_of_ragged():
    assert tf.strings.strip(["  a b \n", "\t\x0bc\r\f"]).numpy().tolist() == [b"a b", b"c"]
    x = tf.constant([["a", "b"], ["c", "d"]])
    assert tf.strings.reduce_join(x).numpy() == b"abcd"
    assert tf.strings.reduce_join(x, axis=1, separator="-").numpy().tolist() == [b"a-b", b"c-d"]
    assert tf.strings.reduce_join(x, axis=-1).numpy().tolist() == [b"ab", b"cd"]
    kept = tf.strings.reduce_join(x, axis=0, keepdims=True)
    assert kept.shape == (1, 2) and kept.numpy().tolist() == [[b"ac", b"bd"]]
    assert tf.strings.reduce_join(x, axis=[0, 1]).numpy() == b"acbd"    # last axis slowest
    assert tf.strings.reduce_join(x, axis=[1, 0]).numpy() == b"abcd"
    assert tf.strings.reduce_join(tf.constant([], tf.string)).numpy() == b""
    with pytest.raises(tf.errors.OutOfRangeError, match="Invalid reduction dimension 2"):
        tf.strings.reduce_join(x, axis=2)
    got = tf.strings.join([_ragged([["ab"], ["c", ""]]), "!"])
    assert _rows(got) == [[b"ab!"], [b"c!", b"!"]]
    assert _rows(tf.strings.length(_ragged([["ab"], ["c", ""]]))) == [[2], [1, 0]]
    assert _rows(tf.strings.upper(_ragged([["ab"], ["c"]]))) == [[b"AB"], [b"C"]]


def test_regular_expressions_follow_re2():
    assert tf.strings.regex_replace(["aaa bb", "x"], "a+", r"<\0>").numpy().tolist() == [
        b"<aaa> bb", b"x"]
    assert tf.strings.regex_replace("key=val", r"(\w+)=(\w+)", r"\2=\1").numpy() == b"val=key"
    assert tf.strings.regex_replace("aXbXc", "X", "-", replace_global=False).numpy() == b"a-bXc"
    assert tf.strings.regex_replace("abc", "", "-").numpy() == b"-a-b-c-"
    assert tf.strings.regex_replace("aaa", "a*", "x").numpy() == b"x"     # RE2, not re.sub
    assert tf.strings.regex_replace("abc", "b", "$1").numpy() == b"a$1c"
    assert tf.strings.regex_replace("é", ".", "x").numpy() == b"x"        # a UTF-8 character
    assert tf.strings.regex_replace("abc", "b", "\\\\").numpy() == b"a\\c"
    with pytest.raises(InvalidArgumentError, match=r"Invalid pattern: \("):
        tf.strings.regex_replace("abc", "(", "-")
    with pytest.raises(InvalidArgumentError, match="Invalid rewrite pattern"):
        tf.strings.regex_replace("abc", "b", r"\q")
    assert tf.strings.regex_full_match(["abc", "abcd", "x"], "a.c").numpy().tolist() == [
        True, False, False]
    assert tf.strings.regex_full_match("é1", r"\w\d").numpy() == False   # noqa: E712 (ASCII \w)
    assert _rows(tf.strings.regex_full_match(_ragged([["abc"], ["x"]]), "a.*")) == [[True],
                                                                                   [False]]


def test_to_number_parses_as_tensorflow_does():
    got = tf.strings.to_number(["1", "1.5", " 2", "1e3", "inf", "-nan", "0x10", "1e40"])
    assert got.dtype is tf.float32
    assert str(got.numpy().tolist()) == "[1.0, 1.5, 2.0, 1000.0, inf, nan, 16.0, inf]"
    assert tf.strings.to_number(["1", "-7", " 7 "], out_type=tf.int32).numpy().tolist() == [
        1, -7, 7]
    assert tf.strings.to_number(["12345678901"], tf.int64).numpy().tolist() == [12345678901]
    assert tf.strings.to_number("0.1", tf.float64).numpy() == 0.1
    assert tf.strings.string_to_number is tf.strings.to_number
    for bad, out_type in (("1.5", tf.int32), ("abc", tf.float32), ("", tf.float32),
                          ("99999999999", tf.int32), ("1_0", tf.int32), ("٣", tf.float32)):
        with pytest.raises(InvalidArgumentError, match="could not correctly convert string"):
            tf.strings.to_number([bad], out_type)
    with pytest.raises(InvalidArgumentError, match="'out_type' of uint8 is not in the list"):
        tf.strings.to_number(["1"], tf.uint8)
    assert _rows(tf.strings.to_number(_ragged([["1"], ["2", "3"]]))) == [[1.0], [2.0, 3.0]]


def test_as_string_formats_as_printf():
    def text(*a, **k):
        return [b.decode() for b in tf.strings.as_string(*a, **k).numpy().tolist()]
    assert text([1.5, 3.14159265, -0.0]) == ["1.500000", "3.141593", "-0.000000"]
    assert text([1.5, 3.14159265], precision=2) == ["1.50", "3.14"]
    assert text([1.5, 31415.9265], scientific=True) == ["1.500000e+00", "3.141593e+04"]
    assert text([1.5, 31415.9265, 1e-7], shortest=True) == ["1.5", "31415.9", "1e-07"]
    assert text([1, 23], width=5) == ["    1", "   23"]
    assert text([1, -23], width=5, fill="0") == ["00001", "-0023"]
    assert text([1.5], width=12, fill="-") == ["1.500000    "]
    assert text([True, False]) == ["true", "false"]
    assert text(tf.constant([200], tf.uint8)) == ["200"]
    assert text(tf.constant([0.1], tf.float16)) == ["0.099976"]
    assert text(tf.constant([1 + 2j], tf.complex64)) == ["(1.000000,2.000000)"]
    for kw, what in (({"fill": "x", "width": 3}, "Fill argument not supported"),
                     ({"precision": 2}, "precision not supported for datatype int32"),
                     ({"scientific": True, "shortest": True}, "both scientific and shortest")):
        with pytest.raises(InvalidArgumentError, match=what):
            tf.strings.as_string(tf.constant([1] if "precision" in kw else [1.0]), **kw)


def test_format_prints_tensors_as_tensorflow():
    def fmt(*a, **k):
        return tf.strings.format(*a, **k).numpy()
    assert fmt("x={} y={}", (tf.constant([1, 2]), tf.constant("s"))) == b'x=[1 2] y="s"'
    assert fmt("{}", tf.range(20)) == b"[0 1 2 ... 17 18 19]"
    assert fmt("{}", tf.range(7)) == b"[0 1 2 ... 4 5 6]"
    assert fmt("{}", tf.range(20), summarize=-1).count(b" ") == 19
    assert fmt("{}", tf.reshape(tf.range(100), [10, 10]), summarize=2) == (
        b"[[0 1 ... 8 9]\n [10 11 ... 18 19]\n ...\n [80 81 ... 88 89]\n [90 91 ... 98 99]]")
    assert fmt("{}", tf.reshape(tf.range(8), [2, 2, 2])) == (
        b"[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]")
    assert fmt("{}", tf.constant([[0.1, 2.25], [3.0, 4.0]])) == b"[[0.1 2.25]\n [3 4]]"
    assert fmt("{}", tf.constant([1 / 3, 1e10, 1e-5])) == b"[0.333333343 1e+10 1e-05]"
    assert fmt("{}", tf.constant([1 / 3], tf.float64)) == b"[0.33333333333333331]"
    assert fmt("{}", tf.constant([True, False])) == b"[1 0]"
    assert fmt("{}", tf.constant([b"\xc3\xa9", b'a"b\n'])) == b'["\xc3\xa9" "a\\"b\\n"]'
    assert fmt("<>", [1], placeholder="<>") == b"1" and fmt("plain", []) == b"plain"
    with pytest.raises(InvalidArgumentError, match="expects 2 tensors"):
        tf.strings.format("{} {}", [1])


def test_hash_buckets_are_tensorflows():
    # FarmHash Fingerprint64 and SipHash-2-4: TensorFlow's buckets for every length class
    words = ["", "a", "abcd", "abcdefgh", "abcdefghijklmnopq", "y" * 33, "w" * 65, "r" * 129]
    fast = tf.strings.to_hash_bucket_fast(words, 2 ** 62).numpy().tolist()
    assert fast == [1936946117179621455, 3694432073954588131, 1897425971756105985,
                    4533385575889643785, 2171023947900359592, 3999049019338133246,
                    3272011567211491968, 4233010728707922025]
    strong = tf.strings.to_hash_bucket_strong(words, 2 ** 62, key=[1, 2]).numpy().tolist()
    assert strong == [443797209252341627, 546566331822570742, 4277338952175910099,
                      2649018002260510108, 2589293315738655589, 202190614605344851,
                      3260008274609568768, 2420786139198134007]
    got = tf.strings.to_hash_bucket_fast(_ragged([["a"], ["b", "c"]]), 10)
    assert got.dtype is tf.int64 and _rows(got) == [[9], [2, 2]]
    with pytest.raises(InvalidArgumentError, match="num_buckets must be at least 1"):
        tf.strings.to_hash_bucket_fast("a", 0)
    with pytest.raises(InvalidArgumentError, match="key must be a list of two ints"):
        tf.strings.to_hash_bucket_strong("a", 3, key=5)


def test_ngrams():
    assert tf.strings.ngrams(["a", "b", "c", "d"], 2).numpy().tolist() == [b"a b", b"b c",
                                                                          b"c d"]
    assert tf.strings.ngrams(["a", "b", "c"], 2, pad_values=("<", ">"),
                             separator="_").numpy().tolist() == [b"<_a", b"a_b", b"b_c", b"c_>"]
    assert tf.strings.ngrams(["a", "b", "c"], (1, 2)).numpy().tolist() == [
        b"a", b"b", b"c", b"a b", b"b c"]
    assert tf.strings.ngrams(["a"], 3).shape == (0,)
    assert tf.strings.ngrams(["a", "b"], 3, pad_values="#", padding_width=1).numpy().tolist() \
        == [b"# a b", b"a b #"]
    assert tf.strings.ngrams(["a"], 3, pad_values="#", padding_width=1,
                             preserve_short_sequences=True).numpy().tolist() == [b"# a #"]
    got = tf.strings.ngrams([["a", "b", "c"], ["d", "e", "f"]], 2)
    assert got.shape == (2, 2) and got.numpy().tolist() == [[b"a b", b"b c"], [b"d e", b"e f"]]
    assert _rows(tf.strings.ngrams(_ragged([["a", "b", "c"], ["d"]]), 2)) == [
        [b"a b", b"b c"], []]


def test_decode_raw():
    assert tf.io.decode_raw(tf.constant("Duck"), tf.uint8).numpy().tolist() == [68, 117, 99,
                                                                                107]
    got = tf.io.decode_raw(tf.constant(["abcd", "efgh"]), tf.int16)
    assert got.dtype is tf.int16 and got.numpy().tolist() == [[25185, 25699], [26213, 26727]]
    assert tf.io.decode_raw(["abcd"], tf.int16, little_endian=False).numpy().tolist() == [
        [24930, 25444]]
    assert tf.io.decode_raw(["ab", "abcd"], tf.uint8, fixed_length=3).numpy().tolist() == [
        [97, 98, 0], [97, 98, 99]]
    assert tf.io.decode_raw("\x00\x01", tf.bool).numpy().tolist() == [False, True]
    assert tf.io.decode_raw(b"\x00<", tf.float16).numpy().tolist() == [1.0]
    assert tf.io.decode_raw(b"\x00\x00\x80?", tf.float32).numpy().tolist() == [1.0]
    assert tf.io.decode_raw([["ab"], ["cd"]], tf.uint8).shape == (2, 1, 2)
    assert tf.io.decode_raw(tf.constant([], tf.string), tf.int32).shape == (0, 0)
    with pytest.raises(InvalidArgumentError, match="length 3 that is not a multiple of 2"):
        tf.io.decode_raw(["abc"], tf.int16)
    with pytest.raises(InvalidArgumentError, match="all be the same size"):
        tf.io.decode_raw(["ab", "abcd"], tf.uint8)
    with pytest.raises(InvalidArgumentError, match="'out_type' of string is not in the list"):
        tf.io.decode_raw("ab", tf.string)


def test_string_ops_in_tf_function_and_vectorized_map():
    @tf.function
    def words(s):
        clean = tf.strings.lower(tf.strings.strip(s))
        return (tf.strings.to_hash_bucket_fast(clean, 10),
                tf.strings.reduce_join(clean, 0, separator="|"),
                tf.strings.unicode_decode(clean[0], "UTF-8"))

    h, j, d = words(tf.constant([" A ", "b"]))
    assert j.numpy() == b"a|b" and d.numpy().tolist() == [97]
    h2, j2, _ = words(tf.constant(["c", " B"]))
    assert j2.numpy() == b"c|b" and h2.numpy()[1] == h.numpy()[1]
    got = tf.vectorized_map(tf.strings.length, tf.constant(["a", "bb"]))
    assert got.numpy().tolist() == [1, 2]
    got = tf.vectorized_map(lambda x: tf.strings.reduce_join(x, axis=0),
                            tf.constant([["a", "b"], ["c", "d"]]))
    assert got.numpy().tolist() == [b"ab", b"cd"]


def test_new_string_ops_refuse_numbers_and_stay_on_the_host():
    with pytest.raises(InvalidArgumentError, match=r"attr 'T' of int32.*\[Op:StringSplit\]"):
        tf.strings.split(tf.constant([1]))
    with pytest.raises(InvalidArgumentError, match=r"\[Op:StringToHashBucketFast\]"):
        tf.strings.to_hash_bucket_fast(tf.constant([1.0]), 3)
    dev = _opencl()
    s = tf.constant(["a b"])
    with tf.device(dev):
        with pytest.raises(InvalidArgumentError, match=rf"cpu:0.*\[Op:StringSplit\] on {dev}"):
            tf.strings.split(s)
        with pytest.raises(InvalidArgumentError, match=rf"\[Op:Substr\] on {dev}"):
            tf.strings.substr(s, 0, 1)


@pytest.mark.parametrize("call, what", [
    (lambda s: OPS["StringToHashBucketFast"](s, num_buckets=0), "num_buckets must be at least 1"),
    (lambda s: OPS["StringToHashBucketStrong"](s, num_buckets=3, key=(1, 2, 3)), "key must be"),
    (lambda s: OPS["ReduceJoin"](s, axis=(0, 0)), "axis must be distinct dimensions"),
    (lambda s: OPS["StringNGrams"](s, tf.constant([0, 5], tf.int64)), "data_splits must be"),
    (lambda s: OPS["StringNGrams"](s, tf.constant([0, 2], tf.int64), ngram_widths=(0,)),
     "ngram_widths must be positive"),
    (lambda s: OPS["UnicodeEncode"](tf.constant([97]), tf.constant([0, 5], tf.int64)),
     "input_splits must be"),
    (lambda s: OPS["UnicodeDecodeWithOffsets"](s, replacement_char=-5), "not a Unicode code"),
    (lambda s: OPS["Substr"](s, 1.5, 1), "pos and len must be integers"),
    (lambda s: OPS["DecodeRaw"](s, fixed_length=-3), "fixed_length must be at least 0"),
    (lambda s: tf.strings.as_string([1.0], width=10 ** 9), "over 65536 characters"),
])
def test_string_ops_called_directly_check_their_attrs(call, what):
    with pytest.raises(InvalidArgumentError, match=what):
        call(tf.constant(["ab", "cd"]))


def test_tf1_string_split_gives_a_sparse_tensor_split_at_each_delimiter_character():
    st = tf.string_split(["a,b;;c", "", "d"], ",;")
    assert st.values.numpy().tolist() == [b"a", b"b", b"c", b"d"]
    assert st.indices.numpy().tolist() == [[0, 0], [0, 1], [0, 2], [2, 0]]
    assert st.dense_shape.numpy().tolist() == [3, 3]
    kept = tf.string_split(["a,,b"], ",", skip_empty=False, result_type="RaggedTensor")
    assert kept.to_list() == [[b"a", b"", b"b"]]
    assert tf.string_split(["ab"], "").values.numpy().tolist() == [b"a", b"b"]
    # rnn_colorbot's parse: tf.string_to_number and tf.decode_raw are the TF 1 names
    assert tf.string_to_number(["2.5"]).numpy().tolist() == [2.5]
    assert tf.decode_raw(tf.constant("AB"), tf.uint8).numpy().tolist() == [65, 66]
    with pytest.raises(tf.errors.InvalidArgumentError, match="1-D string tensor"):
        tf.string_split("a b")
    with pytest.raises(tf.errors.InvalidArgumentError, match="result_type"):
        tf.string_split(["a"], result_type="dense")
