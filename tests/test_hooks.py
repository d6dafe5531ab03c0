"""The one hooks object of tapeflow.runtime.context: what the layers above install,
refusal of a second, different install, variable observers and their suspension."""

import importlib
import threading

import pytest

import tapeflow as tf
from tapeflow.runtime import context as ctx
from tapeflow.autodiff import tape
from tapeflow.runtime import dispatch, registry, tensor, variable
from tapeflow.errors import PluginConflictError, TapeflowError


def test_layers_installed_their_hooks():
    import tapeflow.tracing as trace
    from tapeflow.tracing import vectorize
    h = ctx.HOOKS
    assert isinstance(h.tracer, trace._ContextTracer)
    assert h.vectorize_jacobian is vectorize._jacobian_rows
    assert h.array_namespace(None) is tf.numpy
    assert trace._on_variable_created in h.variable_observers


def test_old_spellings_are_gone():
    # the six ways to call up are one: nothing else holds a hook
    assert not hasattr(tensor, "dispatch_hooks")
    assert not hasattr(tensor, "array_namespace")
    assert not hasattr(ctx, "set_tracer")
    assert not hasattr(ctx, "tracer")
    assert not hasattr(registry, "dispatcher")
    assert not hasattr(variable, "_creation_hooks")
    assert "VECTORIZE" not in vars(tape)
    # no hook inside one package (issue 44): the runtime's own calls are plain calls
    assert not any(hasattr(ctx.HOOKS, n) for n in ("execute", "copy_to_device", "constant"))
    assert not any(hasattr(ctx, f"install_{n}") for n in ("execute", "copy_to_device",
                                                             "constant"))


def test_the_dispatcher_defines_the_methods_that_run_it():
    """Calling an OpDef, Tensor.to and unpickling a Tensor are the dispatcher's methods,
    bound to the classes below it: one frame, no hook."""
    import pickle
    assert registry.OpDef.__call__ is dispatch._call_op
    assert tensor.Tensor.to is dispatch._tensor_to
    t = tf.constant([1.0, 2.0])
    assert registry.get_op("Neg")(t).numpy().tolist() == [-1.0, -2.0]
    assert t.to("cpu:0") is t and t.cpu() is t
    back = pickle.loads(pickle.dumps(t))
    assert back.numpy().tolist() == [1.0, 2.0] and back.dtype == tf.float32


@pytest.mark.parametrize("name", ["vectorize_jacobian", "array_namespace"])
def test_second_install_of_another_function_is_refused(name):
    installed = getattr(ctx.HOOKS, name)

    def other(*args, **kwargs):
        return None

    with pytest.raises(PluginConflictError) as e:
        getattr(ctx, f"install_{name}")(other)
    msg = str(e.value)
    assert f"HOOKS.{name}" in msg and "other" in msg and installed.__name__ in msg
    assert isinstance(e.value, TapeflowError)
    assert getattr(ctx.HOOKS, name) is installed       # unchanged


def test_second_tracer_is_refused_and_tracing_still_works():
    class MyTracer(ctx.Tracer):
        pass

    installed = ctx.HOOKS.tracer
    with pytest.raises(PluginConflictError, match="HOOKS.tracer.*MyTracer"):
        ctx.install_tracer(MyTracer())
    assert ctx.HOOKS.tracer is installed
    with pytest.raises(TypeError, match="install_tracer"):
        ctx.install_tracer(object())
    assert float(tf.function(lambda a: a * 3.0)(tf.constant(2.0))) == 6.0


def test_installing_the_same_function_again_is_a_no_op():
    jac = ctx.HOOKS.vectorize_jacobian
    ctx.install_vectorize_jacobian(jac)
    ctx.install_tracer(ctx.HOOKS.tracer)
    assert ctx.HOOKS.vectorize_jacobian is jac


def test_reloaded_module_reinstalls_its_hooks():
    import tapeflow.tracing.vectorize as vec
    before = ctx.HOOKS.vectorize_jacobian
    try:
        importlib.reload(vec)            # a new _jacobian_rows object, same definition
        assert ctx.HOOKS.vectorize_jacobian is vec._jacobian_rows
        assert ctx.HOOKS.vectorize_jacobian is not before
    finally:
        ctx.HOOKS.vectorize_jacobian = before


def test_install_refuses_a_non_callable():
    with pytest.raises(TypeError, match="install_vectorize_jacobian"):
        ctx.install_vectorize_jacobian(None)
    with pytest.raises(TypeError, match="add_variable_observer"):
        ctx.add_variable_observer(3)


def test_several_variable_observers_and_removal():
    seen_a, seen_b = [], []

    def a(v):
        seen_a.append(v.name)

    def b(v):
        seen_b.append(v.name)

    before = ctx.HOOKS.variable_observers
    ctx.add_variable_observer(a)
    ctx.add_variable_observer(b)
    ctx.add_variable_observer(a)          # already there: no second call
    try:
        assert ctx.HOOKS.variable_observers == before + (a, b)
        tf.Variable(1.0, name="obs1")
        assert seen_a == ["obs1:0"] and seen_b == ["obs1:0"]
    finally:
        ctx.remove_variable_observer(a)
        ctx.remove_variable_observer(b)
    ctx.remove_variable_observer(a)       # not there: no-op
    assert ctx.HOOKS.variable_observers == before
    tf.Variable(1.0, name="obs2")
    assert seen_a == ["obs1:0"]


def test_closures_with_one_qualified_name_are_distinct_observers():
    seen = []

    def make(tag):
        def obs(v):
            seen.append(tag)
        return obs

    o1, o2 = make(1), make(2)
    ctx.add_variable_observer(o1)
    ctx.add_variable_observer(o2)
    try:
        tf.Variable(0.0)
        assert sorted(seen) == [1, 2]
    finally:
        ctx.remove_variable_observer(o1)
        ctx.remove_variable_observer(o2)


def test_suspend_variable_observers_is_per_thread_and_nests():
    seen = []

    def obs(v):
        seen.append((threading.current_thread().name, v.name))

    ctx.add_variable_observer(obs)
    try:
        with ctx.suspend_variable_observers():
            with ctx.suspend_variable_observers():
                tf.Variable(1.0, name="s1")
            tf.Variable(1.0, name="s2")
            t = threading.Thread(target=lambda: tf.Variable(1.0, name="other"),
                                 name="worker")
            t.start()
            t.join()
        tf.Variable(1.0, name="s3")
    finally:
        ctx.remove_variable_observer(obs)
    assert seen == [("worker", "other:0"), (threading.current_thread().name, "s3:0")]


def test_observer_error_propagates_from_variable_creation():
    def obs(v):
        raise tf.errors.NotFoundError(f"no {v.name} here")

    ctx.add_variable_observer(obs)
    try:
        with pytest.raises(tf.errors.NotFoundError, match="no boom:0 here"):
            tf.Variable(1.0, name="boom")
    finally:
        ctx.remove_variable_observer(obs)


def test_a_lambda_is_never_the_same_as_another_lambda():
    # two lambdas share a qualified name ("<lambda>"): only identity makes them the same
    before = ctx.HOOKS.array_namespace
    first = lambda v: tf.numpy  # noqa: E731
    ctx.HOOKS.array_namespace = first          # (as if a lambda had been installed)
    try:
        ctx.install_array_namespace(first)     # itself: fine
        with pytest.raises(PluginConflictError, match="HOOKS.array_namespace"):
            ctx.install_array_namespace(lambda v: tf.numpy)
        assert ctx.HOOKS.array_namespace is first
    finally:
        ctx.HOOKS.array_namespace = before


def test_bad_install_arguments_are_tapeflow_type_errors():
    with pytest.raises(tf.errors.InvalidTypeError,
                       match="install_array_namespace: expected a callable"):
        ctx.install_array_namespace(42)
