"""AutoGraph (tapeflow.tracing.autograph): Python control flow on traced tensors inside
tf.function becomes cond / while_loop; the same function run eagerly (plain Python) is
the reference for every traced result."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, UnimplementedError
from tapeflow.tracing import TracingError

RNG = np.random.default_rng(46)


def _same(f, *argsets, **kw):
    """tf.function(f) agrees with f run eagerly on every argument set."""
    tff = tf.function(f)
    for args in argsets:
        want = f(*args)
        got = tff(*args)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, **kw)
    return tff


def _scalars(n=6, dtype="float32"):
    return [(tf.constant(np.asarray(RNG.normal() * 3, dtype)),) for _ in range(n)]


# --- if --------------------------------------------------------------------------------

def _relu_like(x):
    if x > 0:
        y = x * 2.0
    elif x > -1:
        y = x + 10.0
    else:
        y = -x
    return y


def test_if_elif_else_agrees_with_eager():
    tff = _same(_relu_like, *_scalars(8), (tf.constant(0.5),), (tf.constant(-0.5),),
                (tf.constant(-3.0),))
    assert tff.experimental_get_tracing_count() == 1      # one trace serves every branch


def _early_return(x):
    if x > 0:
        return x * 3.0
    y = x - 1.0
    if y < -2:
        return y * y
    return y


def test_return_inside_if_agrees_with_eager():
    _same(_early_return, *_scalars(8), (tf.constant(-0.5),), (tf.constant(2.0),))


def test_if_without_else_keeps_value_defined_before():
    def f(x):
        y = x
        if tf.reduce_sum(x) > 0:
            y = x * 2.0
        return y
    _same(f, (tf.constant([1.0, 2.0]),), (tf.constant([-1.0, -2.0]),))


def test_if_python_condition_stays_python():
    calls = []

    def f(x, flag):
        if flag:
            calls.append("t")
            return x + 1.0
        return x - 1.0
    tff = tf.function(f)
    assert float(tff(tf.constant(1.0), True)) == 2.0
    assert float(tff(tf.constant(1.0), False)) == 0.0
    assert calls == ["t"]          # only the taken Python branch ran


def test_if_branches_with_different_dtypes_name_the_variable():
    @tf.function
    def f(x):
        if x > 0:
            y = tf.constant(1.0)
        else:
            y = tf.constant(1)
        return y
    with pytest.raises(InvalidArgumentError, match=r"'y'.*float32.*int32"):
        f(tf.constant(1.0))


def test_if_branches_with_different_structures_name_the_variable():
    @tf.function
    def f(x):
        if x > 0:
            y = (x, x)
        else:
            y = x
        return y
    with pytest.raises(InvalidArgumentError, match=r"'y'.*tuple.*true branch.*false branch"):
        f(tf.constant(1.0))


def test_variable_defined_in_one_branch_only_is_an_error_when_used():
    @tf.function
    def f(x):
        if x > 0:
            y = x
        return y + 1.0
    with pytest.raises(InvalidArgumentError, match="'y' is assigned in only one branch"):
        f(tf.constant(1.0))

    @tf.function
    def g(x):                 # a temporary of one branch, unused after: fine
        if x > 0:
            t = x * 2.0
            x = t + 1.0
        return x
    assert float(g(tf.constant(1.0))) == 3.0 and float(g(tf.constant(-1.0))) == -1.0


def test_if_on_tensor_prints_each_branch_once_while_tracing(capsys):
    @tf.function
    def f(x):
        if x > 0:
            print("tracing true")
            x = x + 1
        else:
            print("tracing false")
            x = x - 1
        return x
    assert int(f(tf.constant(1))) == 2 and int(f(tf.constant(-1))) == -2
    out = capsys.readouterr().out
    assert out.count("tracing true") == 1 and out.count("tracing false") == 1


# --- while ---------------------------------------------------------------------------------

def _collatz(a):
    n = tf.constant(0)
    while a != 1:
        if a % 2 == 0:
            a = a // 2
        else:
            a = 3 * a + 1
        n += 1
    return n


def test_while_with_nested_if_agrees_with_eager():
    _same(_collatz, *[(tf.constant(int(v)),) for v in RNG.integers(1, 60, 6)])


def test_while_python_int_counter_becomes_a_tensor():
    def f(x):
        i = 0
        while x < 10.0:
            x = x + 1.5
            i += 1
        return i
    _same(f, (tf.constant(1.0),), (tf.constant(9.5),), (tf.constant(20.0),))


def test_while_loop_variables_in_tuples_lists_and_dicts():
    def f(x):
        state = {"a": x, "b": (x * 0.0, [x + 1.0])}
        while state["a"] < 5.0:
            state = {"a": state["a"] + 1.0,
                     "b": (state["b"][0] + state["a"], [state["b"][1][0] * 1.5])}
        return state["b"][0] + state["b"][1][0]
    _same(f, (tf.constant(0.0),), (tf.constant(3.5),), (tf.constant(7.0),))


def test_while_break_continue_and_else():
    def f(n):
        i = tf.constant(0)
        s = tf.constant(0)
        hit = tf.constant(0)
        while i < n:
            i += 1
            if i % 3 == 0:
                continue
            if s > 20:
                break
            s += i
        else:
            hit = tf.constant(1)
        return s * 10 + hit
    _same(f, *[(tf.constant(int(v)),) for v in (0, 1, 5, 9, 30)])


def test_while_shape_change_is_an_error_naming_the_variable():
    @tf.function
    def f(x):
        while tf.reduce_sum(x) < 10.0:
            x = tf.concat([x, x], 0)
        return x
    with pytest.raises(InvalidArgumentError, match=r"'x' has shape \[1\] before.*\[2\]"):
        f(tf.constant([1.0]))


def test_while_dtype_change_is_an_error_naming_the_variable():
    @tf.function
    def f(x):
        s = 0
        while x < 3.0:
            s = s + x
            x = x + 1.0
        return s
    with pytest.raises(InvalidArgumentError, match="'s' has dtype int32 before"):
        f(tf.constant(0.0))


def test_while_eagerly_is_python():
    def f(x):
        n = 0
        while tf.reduce_sum(x) > 1:
            x = x / 2
            n += 1
        return n
    g = tf.autograph.to_graph(f)
    assert g(tf.constant([4.0])) == 2 and isinstance(g(tf.constant([4.0])), int)


# --- for -------------------------------------------------------------------------------------

def test_for_over_tf_range_with_tensor_bound():
    def f(n):
        s = tf.constant(0)
        for i in tf.range(n):
            s += i * i
        return s
    tff = _same(f, *[(tf.constant(int(v)),) for v in (0, 1, 4, 11)])
    assert tff.experimental_get_tracing_count() == 1


def test_for_over_python_range_of_tensor_and_start_delta():
    def f(n):
        s = tf.constant(0)
        for i in range(2, n, 3):
            s += i
        t = tf.constant(0.0)
        for j in tf.range(5.0, 0.0, -1.5):
            t += j
        return s * 100 + tf.cast(t, tf.int32)
    _same(f, *[(tf.constant(int(v)),) for v in (0, 3, 10)])


def test_for_over_constant_range_is_one_traced_loop(capsys):
    @tf.function
    def f(x):
        for _ in tf.range(1000):
            print("tracing body")
            x = x + 1.0
        return x
    assert float(f(tf.constant(0.0))) == 1000.0
    assert capsys.readouterr().out.count("tracing body") == 1
    assert len(f.graph.nodes) < 10            # not 1000 unrolled additions


def test_for_over_tensor_rows_and_python_list():
    def f(x):
        s = tf.zeros([3])
        for row in x:
            s = s + row * row
        for k in [1.0, 2.0]:           # a Python iterable: unrolled, as Python
            s = s * k
        return s
    _same(f, (tf.constant(RNG.normal(size=(4, 3)).astype("float32")),))


def test_for_break_continue_else_and_nested_loops():
    def f(n, m):
        total = tf.constant(0)
        found = tf.constant(-1)
        for i in tf.range(n):
            if i == 7:
                found = i
                break
            if i % 2 == 1:
                continue
            j = tf.constant(0)
            while j < m:
                total += i * j
                j += 1
        else:
            found = tf.constant(100)
        return total * 1000 + found
    _same(f, *[(tf.constant(int(a)), tf.constant(int(b))) for a, b in
               ((0, 2), (5, 3), (10, 4), (8, 0))])


def test_return_inside_traced_loop_is_unimplemented():
    @tf.function
    def f(n):
        for i in tf.range(n):
            if i > 2:
                return i
        return tf.constant(-1)
    with pytest.raises(UnimplementedError, match="return"):
        f(tf.constant(5))


def test_variable_undefined_before_loop():
    @tf.function
    def f(n):
        for i in tf.range(n):
            y = y + i            # noqa: F821
        return n
    with pytest.raises(InvalidArgumentError, match="'y' must be defined before the for loop"):
        f(tf.constant(3))

    @tf.function
    def g(n):
        for i in tf.range(n):
            t = i * 2            # a temporary of the body: fine
            n = n + 0 * t
        return n
    assert int(g(tf.constant(3))) == 3


def test_non_tensor_loop_variable():
    @tf.function
    def f(n):
        msg = "a"
        for i in tf.range(n):
            msg = "b"
        return n, msg
    with pytest.raises(InvalidArgumentError, match="'msg' is str"):
        f(tf.constant(2))

    @tf.function
    def g(n):
        state = None             # not used after the loop: not a loop variable
        for i in tf.range(n):
            state = i
            n = n + state * 0
        return n
    assert int(g(tf.constant(2))) == 2


# --- expressions, assert -----------------------------------------------------------------

def test_and_or_not_and_conditional_expression():
    def f(x):
        a = (x > 0) and (x < 5)
        b = (x < -3) or (x > 3)
        c = not (x > 0)
        d = x * 2.0 if a else x - 1.0
        return tf.cast(a, tf.float32) + 2 * tf.cast(b, tf.float32) + 4 * tf.cast(c, tf.float32) + d
    _same(f, *_scalars(8), (tf.constant(2.0),))


def test_python_and_or_keep_python_values():
    @tf.function
    def f(x, k):
        return x * (k or 3) + (k and 10)
    assert float(f(tf.constant(1.0), 0)) == 3.0
    assert float(f(tf.constant(1.0), 2)) == 12.0


def test_assert_on_traced_tensor_checks_every_call():
    @tf.function
    def f(x):
        assert x > 0, "x must be positive"
        return x * 2.0
    assert float(f(tf.constant(1.0))) == 2.0
    with pytest.raises(InvalidArgumentError, match="x must be positive"):
        f(tf.constant(-1.0))            # the same trace, a failing value
    with pytest.raises(AssertionError):
        tf.autograph.to_graph(f.python_function)(tf.constant(-1.0))     # eagerly: Python


# --- gradients ------------------------------------------------------------------------

def test_gradients_through_converted_if_and_while():
    @tf.function
    def f(x):
        if tf.reduce_sum(x) > 0:
            y = x * x
        else:
            y = -3.0 * x
        i = tf.constant(0)
        while i < 2:
            y = y * x
            i += 1
        return tf.reduce_sum(y)
    for v in ([1.0, 2.0], [-1.0, -0.5]):
        x = tf.constant(v)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = f(x)
        g = tape.gradient(out, x)
        a = np.asarray(v)
        want = 4 * a ** 3 if a.sum() > 0 else -9.0 * a ** 2
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5)


# --- which functions are converted, and how -----------------------------------------------

def test_conversion_is_cached():
    def f(x):
        if x > 0:
            return x
        return -x
    g = tf.autograph.to_graph(f)
    assert g is not f and tf.autograph.to_graph(f) is g
    tff = tf.function(f)
    tff(tf.constant(1.0))
    tff(tf.constant(1.0, tf.float64))      # a second trace: the same converted function
    assert tff._target() is g


def test_called_user_functions_are_converted():
    def helper(x):
        if x > 0:
            return x * 10.0
        return x

    def f(x):
        return helper(x) + 1.0
    _same(f, *_scalars(4))


def test_methods_closures_defaults_and_nested_functions():
    scale = [2.0]

    class Model:
        def __init__(self):
            self.__offset = 1.0          # (a mangled private name)

        @tf.function
        def __call__(self, x, k=3.0):
            def inner(v):
                if v > 0:
                    return v * scale[0]
                return v * k
            return inner(x) + self.__offset

    class Sub(Model):
        def __call__(self, x):
            return super().__call__(x) * 10.0

    m = Model()
    assert float(m(tf.constant(2.0))) == 5.0
    assert float(m(tf.constant(-2.0))) == -5.0
    scale[0] = 4.0                              # the closure is the original's
    assert float(Model()(tf.constant(2.0))) == 9.0
    s = tf.function(Sub().__call__)
    assert float(s(tf.constant(-1.0))) == -20.0


def test_lambda_and_do_not_convert_are_left_alone():
    lam = tf.function(lambda x: x * 2.0)
    assert float(lam(tf.constant(2.0))) == 4.0

    @tf.autograph.experimental.do_not_convert
    def f(x):
        if x > 0:
            return x
        return -x
    assert tf.autograph.to_graph(f) is f
    with pytest.raises(TracingError):
        tf.function(f)(tf.constant(1.0))
    with pytest.raises(TracingError):
        tf.function(_relu_like, autograph=False)(tf.constant(1.0))


def test_source_unavailable_warns_once_and_runs_unconverted():
    ns = {}
    exec("def f(x):\n    return x + 1.0\n", ns)         # no source file
    tff = tf.function(ns["f"])
    with pytest.warns(RuntimeWarning, match="could not convert"):
        assert float(tff(tf.constant(1.0))) == 2.0
    assert tf.autograph.to_graph(ns["f"]) is ns["f"]


def test_to_code_and_namespace():
    code = tf.autograph.to_code(_collatz)
    assert code.startswith("def _collatz(a):")
    assert "ag__.while_stmt" in code and "ag__.if_stmt" in code
    compile(code, "<to_code>", "exec")            # valid Python
    tf.autograph.set_verbosity(0)
    assert tf.autograph.experimental.do_not_convert is tf.autograph.do_not_convert
    with pytest.raises(InvalidArgumentError):
        tf.autograph.to_code(3)


def test_function_without_tensor_control_flow_is_unchanged():
    def f(x):
        return x * 2.0 + 1.0
    assert tf.autograph.to_graph(f) is f        # nothing to convert: the function itself


def test_variable_first_assigned_in_loop_and_used_after_starts_as_zeros():
    @tf.function
    def f(n):
        for i in tf.range(n):
            y = (i * 2, [tf.cast(i, tf.float32)])
        return y[0] + tf.cast(y[1][0], tf.int32)
    assert int(f(tf.constant(5))) == 12 and int(f(tf.constant(0))) == 0


def test_while_whose_condition_becomes_a_tensor_midway():
    def f(x):
        v = 1.0                   # a Python float: the first test is Python's
        n = 0
        while v < 100.0:
            v = v * x             # ... then a tensor: the loop continues traced
            n += 1
        return v + n
    _same(f, (tf.constant(2.0),), (tf.constant(7.0),), (tf.constant(200.0),))


def test_generators_and_python_loops_with_jumps_are_python():
    def gen(k):
        for j in range(k):
            yield j

    def f(x):
        s = x
        for j in gen(5):             # a generator: called, not converted
            if j == 1:
                continue
            if j == 3:
                break
            s = s + j
        return s
    _same(f, (tf.constant(1.0),))


def test_condition_must_be_a_scalar():
    @tf.function
    def f(x):
        if x > 0:
            x = x + 1.0
        return x
    with pytest.raises(InvalidArgumentError, match=r"shape \[2\].*scalar"):
        f(tf.constant([1.0, 2.0]))


def test_for_over_dataset_reads_every_element_at_every_call(capsys):
    @tf.function
    def total(ds):
        s = tf.constant(0, tf.int64)
        for x in ds:
            print("tracing body")
            s += x
        return s
    ds = tf.data.Dataset.range(5)
    assert int(total(ds)) == 10 and int(total(ds)) == 10      # from the start each call
    assert capsys.readouterr().out.count("tracing body") == 1

    @tf.function
    def pairs(ds):
        loss = tf.constant(0)
        for x, y in ds:
            loss += tf.abs(y - x)
        return loss
    assert int(pairs(tf.data.Dataset.from_tensor_slices(([1, 2, 5], [3, 3, 3])))) == 5


def test_for_over_iterator_continues_where_it_is_and_break_keeps_the_next():
    it = iter(tf.data.Dataset.from_tensor_slices([1, 2, 3, 4, 5, 6]).batch(2))

    @tf.function
    def first_sum(it):
        s = tf.constant(0)
        for b in it:
            s += tf.reduce_sum(b)
            if s > 3:
                break
        return s
    assert [int(first_sum(it)) for _ in range(3)] == [10, 11, 0]


@pytest.mark.skipif(not hasattr(tf, "TensorArray"), reason="tf.TensorArray not built yet")
def test_tensor_array_and_traced_index_in_a_converted_loop():
    @tf.function
    def cumulative(x):
        out = tf.TensorArray(tf.float32, size=x.shape[0])
        s = tf.zeros(x.shape[1:])
        for i in tf.range(x.shape[0]):
            s = s + x[i]
            out = out.write(i, s)
        return out.stack()
    x = RNG.normal(size=(5, 3)).astype("float32")
    np.testing.assert_allclose(cumulative(tf.constant(x)).numpy(), np.cumsum(x, axis=0),
                               rtol=1e-5)
