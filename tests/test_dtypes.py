"""dtypes, and promotion: one lattice with two modes ("tf": JAX's, never widening to 64
bits unasked; "array_api": tapeflow.numpy's), weak Python scalars, and the table of
docs/dtypes.md checked against the implementation."""

import pathlib

import numpy as np
import pytest

import tapeflow as tf
import tapeflow.numpy as tnp


def test_python_scalars_take_seed_defaults():
    assert tf.constant(3.0).dtype == tf.float32
    assert tf.constant(3).dtype == tf.int32
    assert tf.constant(True).dtype == tf.bool
    assert tf.constant(2**40).dtype == tf.int64
    assert tf.constant([1.5, 2]).dtype == tf.float32


def test_numpy_values_keep_their_dtype():
    assert tf.constant(np.array([1.0])).dtype == tf.float64
    assert tf.constant(np.int64(3)).dtype == tf.int64
    assert tf.constant(np.float16(1)).dtype == tf.float16


def test_weak_scalars_do_not_promote():
    x = tf.constant([1.0, 2.0], dtype=tf.float16)
    assert (x * 2.0).dtype == tf.float16
    assert (2 * x).dtype == tf.float16
    i = tf.constant([1, 2], dtype=tf.int8)
    assert (i + 1).dtype == tf.int8


def test_strong_promotion_never_widens_to_64_bits_unasked():
    a = tf.constant(np.ones(2, np.float32))
    b = tf.constant(np.ones(2, np.float64))
    assert (a + b).dtype == tf.float64          # a strong float64: the user asked for it
    i = tf.constant([1, 2])
    assert (i + a).dtype == tf.float32          # was float64 (NumPy's table)
    assert (i + 2.5).dtype == tf.float32        # a weak float: the default float
    assert (i * 2.5).numpy().tolist() == [2.5, 5.0]
    assert tf.matmul(tf.constant([[1, 2]]), tf.constant([[1.0], [2.0]])).dtype == tf.float32
    assert (tf.constant([1], tf.int64) + a[:1]).dtype == tf.float32    # the float's width
    assert (tf.constant([1], tf.int8) + tf.constant([1.0], tf.float16)).dtype == tf.float16
    assert (i / 2).dtype == tf.float64          # truediv of int32: TensorFlow's op rule


def test_an_int_tensor_with_a_float_keeps_its_gradient_dtype():
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(x * tf.constant([3, 4]))
    assert y.dtype == tf.float32 and tape.gradient(y, x).numpy().tolist() == [3.0, 4.0]


def test_a_weak_value_that_does_not_fit_raises():
    i = tf.constant([1], dtype=tf.int8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="1000 out of bounds for int8"):
        i + 1000
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of bounds for uint8"):
        tf.constant([1], dtype=tf.uint8) - (-1)


R = tf.dtypes.result_type
D = tf.as_dtype


@pytest.mark.parametrize("args, want", [
    # strong with strong (issue 36's list)
    (("int32", "float32"), "float32"), (("int64", "float32"), "float32"),
    (("int8", "float16"), "float16"), (("int64", "float16"), "float16"),
    (("bfloat16", "float16"), "float32"), (("float32", "float64"), "float64"),
    (("uint8", "int8"), "int16"), (("uint16", "int16"), "int32"),
    (("uint32", "int32"), "int64"), (("uint64", "int64"), "float64"),
    (("uint64", "float32"), "float32"), (("bool", "int8"), "int8"),
    (("bool", "float16"), "float16"), (("bool", "complex64"), "complex64"),
    (("int32", "complex64"), "complex64"), (("float64", "complex64"), "complex128"),
    # weak Python scalars
    (("int32", 2.5), "float32"), (("float16", 2.0), "float16"), (("int8", 1), "int8"),
    (("uint8", 1), "uint8"), (("float32", 1j), "complex64"), (("float64", 1j), "complex128"),
    (("int32", 1j), "complex64"), (("bool", 1), "int32"), (("bool", 2.5), "float32"),
    (("bool", True), "bool"), (("bfloat16", 1), "bfloat16"), (("int64", 2.5), "float32"),
    (("uint64", "int64", 2.5), "float64"),
    # Python scalars alone: the seeds' (TensorFlow's) defaults
    ((1,), "int32"), ((2.5,), "float32"), ((1j,), "complex128"), ((True,), "bool"),
    ((1, 2.5), "float32"),
])
def test_tf_lattice(args, want):
    strong = [D(a) if isinstance(a, str) else a for a in args]
    assert R(*strong) is D(want)
    assert R(*reversed(strong)) is D(want)


@pytest.mark.parametrize("args, want", [
    (("int32", "float32"), "float64"), (("int8", "float16"), "float16"),
    (("uint64", "int64"), "float64"), (("uint8", "int8"), "int16"),
    (("int32", 2.5), "float64"), (("bool", 2.5), "float32"), (("bool", 1), "bool"),
    (("int8", 1), "int8"), (("float32", 1j), "complex64"), (("int32", 1j), "complex128"),
    ((1,), "int64"), ((2.5,), "float32"), ((1j,), "complex64"), ((True,), "bool"),
])
def test_array_api_mode(args, want):
    strong = [D(a) if isinstance(a, str) else a for a in args]
    assert R(*strong, mode="array_api") is D(want)
    assert tnp.result_type(*strong) is D(want)


def test_array_api_mode_keeps_bool_apart_and_the_two_modes_share_one_implementation():
    with pytest.raises(TypeError, match="bool mixes with bool only"):
        R(tf.bool, tf.int8, mode="array_api")
    with pytest.raises(tf.errors.InvalidArgumentError, match="unknown promotion mode 'jax'"):
        R(tf.int8, tf.float32, mode="jax")
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least one"):
        R()
    assert not hasattr(tnp, "_promote2")


NODES = list(tf.dtypes.ALL_DTYPES) + [tf.dtypes.WEAK_INT, tf.dtypes.WEAK_FLOAT,
                                      tf.dtypes.WEAK_COMPLEX]


def _join(a, b, mode):
    try:
        return tf.dtypes.join(a, b, mode)
    except TypeError:
        return None


def test_tf_join_is_a_lattice():
    """Commutative, associative and idempotent, defined for every pair: promotion does
    not depend on the order of the operands (NumPy's mixed-kind table is not associative:
    ``(int8 + uint8) + float16`` is float32, ``int8 + (uint8 + float16)`` float16)."""
    for a in NODES:
        assert _join(a, a, "tf") is a
        for b in NODES:
            ab = _join(a, b, "tf")
            assert ab is not None and ab is _join(b, a, "tf"), (a, b)
            for c in NODES:
                assert _join(ab, c, "tf") is _join(a, _join(b, c, "tf"), "tf"), (a, b, c)


def _kind(d):
    return "bool" if d.is_bool else "int" if d.is_integer else "inexact"


def test_array_api_mode_is_the_lattice_within_a_kind():
    """The standard specifies promotion within a kind (and floats with complex): there the
    two modes agree; bool meets bool only; integers meet floats as in NumPy."""
    dts = tf.dtypes.ALL_DTYPES
    for a in dts:
        for b in dts:
            got = _join(a, b, "array_api")
            assert got is _join(b, a, "array_api")
            if _kind(a) == _kind(b):
                assert got is _join(a, b, "tf"), (a, b)
            elif "bool" in (_kind(a), _kind(b)):
                assert got is None, (a, b)
            elif tf.bfloat16 not in (a, b):
                assert got.np == np.promote_types(a.np, b.np), (a, b)


def test_tf_mode_never_gives_a_64_bit_float_from_narrower_inputs():
    """float64 or complex128 only where an input has 64 bits (integers may widen to int64:
    uint32 with a signed integer needs it to hold both)."""
    for a in tf.dtypes.ALL_DTYPES:
        for b in tf.dtypes.ALL_DTYPES + (1, 2.5, 1j, True):
            out = R(a, b)
            if out in (tf.float64, tf.complex128):
                assert max(a.size, b.size if isinstance(b, tf.dtypes.DType) else 0) >= 8, \
                    (a, b, out)
            if out is tf.complex128:
                assert tf.complex128 in (a, b) or tf.float64 in (a, b), (a, b)


def test_dtype_objects():
    assert tf.as_dtype("float32") is tf.float32
    assert tf.as_dtype(np.float64) is tf.float64
    assert tf.float32 == "float32" and tf.float32 == np.float32
    assert tf.float32 != tf.float64
    assert tf.float32.is_floating and tf.int32.is_integer and tf.bool.is_bool
    assert repr(tf.int64) == "tf.int64"
    assert tf.as_dtype("complex64") is tf.complex64 and tf.complex64.is_complex
    assert tf.complex128.real_dtype is tf.float64 and not tf.complex64.is_floating
    with pytest.raises(TypeError, match="supported"):
        tf.as_dtype("float8")


def test_unsupported_values_are_clear():
    # (text is a tensor since issue 46: dtype tf.string, tests/test_strings.py)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Cannot convert"):
        tf.constant([None, object()])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.constant([[1, 2], [3]])


def test_empty_lists_take_any_dtype_and_strings_mix_str_with_any_bytes():
    # (both were refused: [] "held floating-point values"; non-ASCII bytes beside a str
    # failed NumPy's ASCII decoding)
    for dt in (tf.int32, tf.int64, tf.bool, tf.uint8):
        t = tf.constant([], dt)
        assert t.dtype == dt and t.shape == (0,)
    assert tf.constant([[]], tf.int64).shape == (1, 0)
    s = tf.constant(["a", b"\xff"])
    assert s.dtype == tf.string and list(s.numpy()) == [b"a", b"\xff"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="floating-point"):
        tf.constant([1.5], tf.int32)
    # a list of 0-d string tensors packs as a list of numeric ones does
    packed = tf.convert_to_tensor([tf.constant("a"), tf.constant(b"b")])
    assert packed.numpy().tolist() == [b"a", b"b"]


def test_cast():
    x = tf.cast([1.7, -1.7], tf.int32)
    assert x.dtype == tf.int32 and x.numpy().tolist() == [1, -1]
    y = tf.constant([1.0])
    assert tf.cast(y, tf.float32) is y


# --- bfloat16 (ml_dtypes storage) ---------------------------------------------------------

import ml_dtypes  # noqa: E402


@pytest.mark.parametrize("a, b, want", [
    ("bfloat16", "float16", "float32"),      # JAX / TF-numpy: neither holds the other
    ("bfloat16", "float32", "float32"),
    ("bfloat16", "float64", "float64"),
    ("bfloat16", "bfloat16", "bfloat16"),
    ("bfloat16", "int32", "bfloat16"),
    ("bfloat16", "uint8", "bfloat16"),
    ("bfloat16", "bool", "bfloat16"),
    ("bfloat16", "complex64", "complex64"),
])
def test_bfloat16_promotion_table(a, b, want):
    A, B = tf.as_dtype(a), tf.as_dtype(b)
    assert tf.dtypes.result_type(A, B) is tf.as_dtype(want)
    assert tf.dtypes.result_type(B, A) is tf.as_dtype(want)
    x = tf.ones([2], A) + tf.ones([2], B)
    assert x.dtype is tf.as_dtype(want)


def test_bfloat16_with_weak_python_scalars_stays_bfloat16():
    x = tf.constant([1.0, 2.0], dtype=tf.bfloat16)
    assert (x * 2.5).dtype is tf.bfloat16
    assert (x + 1).dtype is tf.bfloat16
    assert tf.dtypes.result_type(tf.bfloat16, 1.5) is tf.bfloat16
    assert tf.dtypes.result_type(tf.bfloat16, 1j) is tf.complex64


def test_bfloat16_dtype_properties():
    d = tf.bfloat16
    assert d.name == "bfloat16" and repr(d) == "tf.bfloat16"
    assert d.is_floating and d.is_inexact and not d.is_integer and d.size == 2
    assert d in tf.dtypes.FLOAT_DTYPES and d in tf.dtypes.ALL_DTYPES
    assert tf.as_dtype("bfloat16") is d and tf.as_dtype(ml_dtypes.bfloat16) is d
    assert d == "bfloat16" and d == np.dtype(ml_dtypes.bfloat16) and d != tf.float16
    assert float(d.max) == pytest.approx(3.3895e38, rel=1e-3)
    assert float(d.min) == -float(d.max)
    import pickle
    assert pickle.loads(pickle.dumps(d)) is d


def test_bfloat16_constant_numpy_and_rounding():
    x = tf.constant([1.0, 3.14159, 1 / 3], dtype=tf.bfloat16)
    a = x.numpy()
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)       # an ml_dtypes array, as in TF/JAX
    # 8 significant bits: round to nearest even
    np.testing.assert_array_equal(a.astype(np.float32), [1.0, 3.140625, 0.333984375])
    assert tf.constant(np.ones(3, ml_dtypes.bfloat16)).dtype is tf.bfloat16
    assert "dtype=bfloat16" in repr(x) and "3.14" in str(x)


def test_bfloat16_cast_round_trip_and_arithmetic():
    f = tf.constant([0.1, -2.5, 1e30, 65504.0 * 4], tf.float32)
    b = tf.cast(f, tf.bfloat16)
    assert b.dtype is tf.bfloat16
    back = tf.cast(b, tf.float32).numpy()
    np.testing.assert_allclose(back, f.numpy(), rtol=2 ** -8)
    assert np.isfinite(back).all()                 # float32's range: no overflow at 2.6e5
    assert not np.isfinite(tf.cast(f, tf.float16).numpy()[2])
    # accumulation in float32: a sum of 1000 ones is 1000 (bfloat16 steps are 4 there)
    assert float(tf.reduce_sum(tf.ones([1000], tf.bfloat16))) == 1000.0
    m = tf.matmul(tf.ones([2, 3], tf.bfloat16), tf.ones([3, 4], tf.bfloat16))
    assert m.dtype is tf.bfloat16 and float(m[0, 0]) == 3.0


def test_bfloat16_gradients_flow():
    x = tf.constant([1.0, 2.0, 3.0], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.exp(x) * x)
    g = tape.gradient(y, x)
    assert g.dtype is tf.bfloat16
    want = np.exp([1.0, 2.0, 3.0]) * (1 + np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g.numpy().astype(np.float32), want, rtol=3e-2)


def test_bfloat16_bad_input_errors():
    with pytest.raises(TypeError, match="bfloat16"):      # the message lists it
        tf.as_dtype("bfloat61")
    with pytest.raises(tf.errors.NotFoundError, match=r"BitwiseAnd.*bfloat16"):
        tf.math.bitwise_and(tf.ones([2], tf.bfloat16), tf.ones([2], tf.bfloat16))


# --- docs/dtypes.md: the one table, rendered from the implementation -----------------------

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "dtypes.md"
START, END = "<!-- promotion-table: start -->", "<!-- promotion-table: end -->"
#: rows of examples in the table (their results come from result_type)
EXAMPLES = [("int32", "float32"), ("int64", "float32"), ("int8", "float16"),
            ("bfloat16", "float16"), ("uint8", "int8"), ("uint32", "int32"),
            ("uint64", "int64"), ("float32", "float64"), ("bool", "int8"),
            ("int32", 2.5), ("int8", 1), ("float16", 2.0), ("float32", 1j), ("int32", 1j),
            ("bool", 1), ("bool", 2.5)]


def _name(x):
    return f"`{x.name}`" if isinstance(x, (tf.dtypes.DType, tf.dtypes.WeakType)) \
        else f"Python `{x.__name__}`" if isinstance(x, type) else f"`{x!r}`"


def _render_table():
    dt = tf.dtypes
    rows = ["| Rule | `tf.*` (mode `\"tf\"`) | `tapeflow.numpy` (mode `\"array_api\"`) |",
            "|---|---|---|"]
    covers = {}
    for node, up, mode in dt.LATTICE:
        for m in dt.MODES:
            if mode in (None, m):
                covers.setdefault(node, {m: [] for m in dt.MODES})[m].extend(up)
    for node, by_mode in covers.items():
        cells = [", ".join(_name(u) for u in by_mode[m]) or "nothing (meets itself only)"
                 for m in dt.MODES]
        rows.append(f"| lattice: just above {_name(node)} | " + " | ".join(cells) + " |")
    for i, f in dt.ARRAY_API_INT_TO_FLOAT.items():
        rows.append(f"| {_name(i)} meeting a float or complex dtype | the lattice "
                    f"(`float*`: the float wins) | becomes {_name(f)} first |")
    rows.append("| a Python `bool`, `int`, `float`, `complex` meeting tensors | `bool`, "
                "`int*`, `float*`, `complex*` on the lattice | the tensors' dtype where its "
                "kind is not higher; else the rows below |")
    for (kind, py), d in dt.ARRAY_API_WEAK.items():
        how = "is" if kind == "bool" else "joins as"
        rows.append(f"| Python `{py.__name__}` with `{kind}` tensors | the lattice | "
                    f"{how} {_name(d)} |")
    for use, says in (("alone", "alone (no tensor or dtype among the inputs)"),
                      ("joined", "as the result of a join with tensors")):
        for w in (dt.WEAK_INT, dt.WEAK_FLOAT, dt.WEAK_COMPLEX):
            cells = [_name(dt.DEFAULTS[m][use][w]) if use in dt.DEFAULTS[m] else "n/a"
                     for m in dt.MODES]
            rows.append(f"| {_name(w)} {says} | " + " | ".join(cells) + " |")
    rows.append("| a weak type joined from tensors alone (`uint64` with a signed integer) | "
                "`float64` | `float64` |")
    for ex in EXAMPLES:
        args = [D(a) if isinstance(a, str) else a for a in ex]
        cells = []
        for m in dt.MODES:
            try:
                cells.append(_name(R(*args, mode=m)))
            except TypeError:
                cells.append("raises")
        rows.append(f"| e.g. {' with '.join(_name(a) for a in args)} | " + " | ".join(cells)
                    + " |")
    return "\n".join(rows)


def test_docs_dtypes_table_is_the_implementation():
    text = DOC.read_text()
    assert START in text and END in text, f"{DOC} lost its table markers"
    table = text.split(START, 1)[1].split(END, 1)[0].strip()
    want = _render_table()
    assert table == want, ("docs/dtypes.md's promotion table differs from the "
                           "implementation; the table it should hold:\n" + want)
