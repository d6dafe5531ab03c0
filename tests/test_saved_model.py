"""tf.saved_model.save / tf.saved_model.load (issue 46, item 3; docs/saved_model.md).

The round trips save from one subprocess, which imports the module defining the classes
(written to ``tmp_path``), and load in another that cannot import it: the restored
objects are rebuilt from the directory alone. They run on cpu:0 and, where there is
one, on opencl:0. The other tests run in-process: signatures, several concrete
functions per tf.function, shared Variables, gradients through restored functions,
and the errors (unsavable graphs, bad arguments, crafted directories are in
tests/test_crafted_files.py).
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors

DEVICES = ["cpu:0"] + (["opencl:0"] if "opencl:0" in [str(d) for d in
                                                      tf.config.list_devices()] else [])

DEFINING = '''
import tapeflow as tf


class Dense:
    def __init__(self, n_in, n_out, seed):
        rng = __import__("numpy").random.default_rng(seed)
        self.w = tf.Variable(rng.normal(size=(n_in, n_out)).astype("float32"), name="w")
        self.b = tf.Variable(tf.zeros([n_out]), name="b")

    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w) + self.b)


class Net:
    def __init__(self):
        self.layers = [Dense(3, 4, 0), Dense(4, 2, 1)]
        self.first_w = self.layers[0].w          # shared: saved once
        self.steps = tf.Variable(0, trainable=False, dtype=tf.int64)
        self.config = {"scale": tf.Variable(2.0)}

    @tf.function
    def __call__(self, x, double=False):
        y = self.layers[1](self.layers[0](x))
        return y * (2.0 if double else 1.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def score(self, x):
        y = self(x)
        s = tf.cond(tf.reduce_sum(y) > 1.0, lambda: tf.reduce_sum(y) * self.config["scale"],
                    lambda: tf.reduce_sum(y) - 1.0)
        i, acc = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + s),
                               [tf.constant(0), tf.constant(0.0)])
        return {"score": acc, "rows": tf.shape(x)[0]}

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
    def bump(self, n):
        self.steps.assign_add(n)
        return self.steps.read_value()
'''

SAVE = '''
import json, sys
import numpy as np
sys.path.insert(0, {moddir!r})
import tapeflow as tf
import defining_h4

net = defining_h4.Net()
x1 = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 5.0)
x2 = tf.constant(np.ones((1, 3), np.float32))
out = {{"a": net(x1).numpy().tolist(), "b": net(x2, double=True).numpy().tolist(),
        "score": float(net.score(x1)["score"])}}
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(net(x1))
g = tape.gradient(loss, [net.layers[0].w, net.layers[1].b])
out["grads"] = [t.numpy().tolist() for t in g]
tf.saved_model.save(net, {path!r}, signatures={{"serving_default": net.score}})
json.dump(out, open({expected!r}, "w"))
'''

LOAD = '''
import importlib.util, json, sys
import numpy as np
import tapeflow as tf
assert importlib.util.find_spec("defining_h4") is None, "the defining module is importable"
exp = json.load(open({expected!r}))
with tf.device({device!r}):
    net = tf.saved_model.load({path!r})
assert type(net).__name__ != "Net"
assert net.layers[0].w.device == {device!r}, net.layers[0].w.device
assert net.first_w is net.layers[0].w
x1 = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 5.0)
x2 = tf.constant(np.ones((1, 3), np.float32))
a = net(x1)
assert a.device == {device!r}, a.device
np.testing.assert_allclose(a.numpy(), exp["a"], rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(net(x2, double=True).numpy(), exp["b"], rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(float(net.score(x1)["score"]), exp["score"], rtol=1e-5)
# the signature: keyword arguments in, a dict out, any batch size
sig = net.signatures["serving_default"]
res = sig(x=tf.constant(np.ones((5, 3), np.float32)))
assert sorted(res) == ["rows", "score"] and int(res["rows"]) == 5, res
# gradients reach the restored (trainable) Variables
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(net(x1))
g = tape.gradient(loss, [net.layers[0].w, net.layers[1].b])
for got, want in zip(g, exp["grads"]):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
assert net.layers[0].w.trainable and not net.steps.trainable
assert int(net.bump(tf.constant(3, tf.int64))) == 3 and int(net.steps.numpy()) == 3
assert len(net.trainable_variables) == 5, [v.name for v in net.trainable_variables]
print("OK")
'''


def _run(code, cwd):
    env = dict(os.environ, TAPEFLOW_DEFAULT_DEVICE="cpu:0", PYTHONPATH="")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300, cwd=str(cwd), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def saved_net(tmp_path_factory):
    """A SavedModel written by a process that imported the defining module."""
    root = tmp_path_factory.mktemp("h4")
    moddir = root / "mod"
    moddir.mkdir()
    (moddir / "defining_h4.py").write_text(DEFINING)
    path, expected = str(root / "net"), str(root / "expected.json")
    _run(SAVE.format(moddir=str(moddir), path=path, expected=expected), root)
    return root, path, expected


@pytest.mark.parametrize("device", DEVICES)
def test_round_trip_in_a_process_without_the_class(saved_net, device):
    root, path, expected = saved_net
    elsewhere = root / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    out = _run(LOAD.format(path=path, expected=expected, device=device), elsewhere)
    assert out.strip().endswith("OK")


def test_the_directory_is_self_describing(saved_net):
    _, path, _ = saved_net
    assert sorted(os.listdir(path)) == ["constants.bin", "saved_model.json", "variables"]
    m = json.load(open(os.path.join(path, "saved_model.json")))
    assert m["format"] == "tapeflow-saved-model" and m["version"] == 1
    kinds = [o["kind"] for o in m["objects"]]
    assert kinds.count("variable") == 6            # the shared one once
    ops = {n.get("op") for f in m["functions"].values() for n in f["graph"]["nodes"]}
    assert "MatMul" in ops
    names = tf.train.list_variables(os.path.join(path, "variables", "variables"))
    assert len(names) == 6


# --- in-process ---------------------------------------------------------------------------

class Scale:
    def __init__(self):
        self.v = tf.Variable(1.0)

    @tf.function
    def __call__(self, x):
        return x * self.v

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def mutate(self, new_v):
        self.v.assign(new_v)


def test_several_concrete_functions_and_training(tmp_path):
    m = Scale()
    m(tf.constant(0.0))
    m(tf.constant([1.0, 2.0]))
    tf.saved_model.save(m, str(tmp_path / "s"))
    r = tf.saved_model.load(str(tmp_path / "s"))
    assert len(r.__call__.concrete_functions) == 2 and len(r.signatures) == 0
    assert float(r(tf.constant(3.0))) == 3.0
    np.testing.assert_allclose(r(tf.constant([1.0, 2.0])).numpy(), [1.0, 2.0])
    r.mutate(tf.constant(2.0))
    assert float(r(tf.constant(3.0))) == 6.0
    opt = tf.keras.optimizers.SGD(0.05)
    for _ in range(30):
        with tf.GradientTape() as tape:
            loss = (10.0 - r(tf.constant(2.0))) ** 2
        vs = tape.watched_variables()
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
    assert abs(float(r.v.numpy()) - 5.0) < 0.05
    with pytest.raises(errors.InvalidArgumentError, match="no saved concrete function"):
        r(tf.constant([[1.0]]))


def test_signatures_and_structured_outputs(tmp_path):
    m = Scale()
    call = m.__call__.get_concrete_function(tf.TensorSpec(None, tf.float32))
    vec = m.__call__.get_concrete_function(tf.TensorSpec([None], tf.float32))
    tf.saved_model.save(m, str(tmp_path / "s"), signatures={"serving_default": call,
                                                             "array_input": vec})
    r = tf.saved_model.load(str(tmp_path / "s"))
    assert list(r.signatures) == ["serving_default", "array_input"]
    out = r.signatures["array_input"](x=tf.constant([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out["output_0"].numpy(), [1.0, 2.0, 3.0])
    spec = r.signatures["serving_default"].structured_outputs["output_0"]
    assert spec.dtype == tf.float32 and spec.name == "output_0"
    with pytest.raises(errors.InvalidArgumentError, match="unexpected"):
        r.signatures["serving_default"](y=tf.constant(1.0))


def test_named_outputs_and_the_default_signature(tmp_path):
    class Named:
        def __init__(self):
            self.v = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
        def __call__(self, x):
            return {"custom_output_name": x * self.v}
    tf.saved_model.save(Named(), str(tmp_path / "n"))
    r = tf.saved_model.load(str(tmp_path / "n"))
    sig = r.signatures["serving_default"]
    assert list(sig.structured_outputs) == ["custom_output_name"]
    assert float(sig(tf.constant(2.0))["custom_output_name"]) == 6.0
    assert float(r(2.0)["custom_output_name"]) == 6.0         # a Python float converts


def test_a_python_function_node_is_refused_at_save_time(tmp_path):
    class P:
        @tf.function
        def f(self, x):
            return tf.py_function(lambda t: t * 2.0, [x], tf.float32)
    p = P()
    p.f(tf.constant(1.0))
    with pytest.raises(errors.InvalidArgumentError, match="runs Python.*py_function"):
        tf.saved_model.save(p, str(tmp_path / "p"))


def test_bad_arguments_are_tapeflow_errors(tmp_path):
    with pytest.raises(errors.InvalidTypeError):
        tf.saved_model.save(Scale(), 42)
    with pytest.raises(errors.InvalidTypeError):
        tf.saved_model.save(3, str(tmp_path / "x"))
    with pytest.raises(errors.InvalidTypeError):
        tf.saved_model.save(Scale(), str(tmp_path / "x"), signatures=[1])
    with pytest.raises(errors.InvalidTypeError):
        tf.saved_model.load(None)
    with pytest.raises(errors.NotFoundError, match="does not exist"):
        tf.saved_model.load(str(tmp_path / "missing"))
    with pytest.raises(errors.NotFoundError, match="not a SavedModel"):
        tf.saved_model.load(str(tmp_path))
    tf.saved_model.save(Scale(), str(tmp_path / "ok"), options=tf.saved_model.SaveOptions())
    tf.saved_model.load(str(tmp_path / "ok"), options=tf.saved_model.LoadOptions())
    assert tf.saved_model.contains_saved_model(str(tmp_path / "ok"))


def test_a_tf_function_can_be_the_root(tmp_path):
    v = tf.Variable([1.0, 2.0])

    @tf.function
    def f(x):
        return tf.reduce_sum(x * v)
    f(tf.constant([3.0, 4.0]))
    tf.saved_model.save(f, str(tmp_path / "f"))
    r = tf.saved_model.load(str(tmp_path / "f"))
    assert float(r(tf.constant([3.0, 4.0]))) == 11.0


def test_a_keras_model_saves_its_call_and_a_serving_signature(tmp_path):
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    x = tf.constant(np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5))
    want = model(x).numpy()
    tf.saved_model.save(model, str(tmp_path / "k"))
    r = tf.saved_model.load(str(tmp_path / "k"))
    np.testing.assert_allclose(r(x).numpy(), want, rtol=1e-5, atol=1e-6)
    sig = r.signatures["serving_default"]
    (name, spec), = sig.structured_outputs.items()
    assert spec.shape == (None, 2)                       # any batch size
    bigger = tf.constant(np.ones((7, 5), np.float32))
    np.testing.assert_allclose(sig(bigger)[name].numpy(), model(bigger).numpy(), rtol=1e-5)
    assert len(r.trainable_variables) == 4


def test_a_module_with_print_and_unknown_shapes(tmp_path, capfd):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
        def __call__(self, x):
            tf.print("got", x, output_stream=sys.stdout)
            return {"out": x * self.v}
    tf.saved_model.save(M(), str(tmp_path / "m"))
    r = tf.saved_model.load(str(tmp_path / "m"))
    assert not isinstance(r, M)
    capfd.readouterr()
    np.testing.assert_allclose(r(tf.constant([1.0, 2.0]))["out"].numpy(), [2.0, 4.0])
    assert "got [1 2]" in capfd.readouterr().out
    spec = r.signatures["serving_default"].structured_outputs["out"]
    assert "shape=<unknown>" in repr(spec)               # TensorSpec(None): any rank
    assert [v.name for v in r.trainable_variables] == [r.v.name]


# --- the loader under random damage: tapeflow errors only, never another exception ------------

def _mutations(m, rng):
    """Yield the manifest's JSON paths (containers and the key/index in them)."""
    stack = [m]
    while stack:
        x = stack.pop()
        items = x.items() if isinstance(x, dict) else enumerate(x)
        for k, v in list(items):
            yield x, k
            if isinstance(v, (dict, list)):
                stack.append(v)


_JUNK = [None, True, -1, 0, 1, 2 ** 40, 1.5, float("nan"), "", "x", "float32", [], {},
         [None], {"$tuple": 1}, {"$dtype": "nope"}, {"$array": ["float32", [2], [1]]},
         [[0]], {"kind": "op"}, "../../etc/passwd"]


def test_random_damage_to_a_manifest_raises_only_tapeflow_errors(tmp_path):
    m0 = Scale()
    m0(tf.constant([1.0, 2.0]))
    path = str(tmp_path / "s")
    tf.saved_model.save(m0, path)
    mpath = os.path.join(path, "saved_model.json")
    base = json.load(open(mpath))
    rng = random.Random(46)
    sites = len(list(_mutations(base, rng)))
    for trial in range(250):
        m = copy.deepcopy(base)
        target = rng.randrange(sites)
        for i, (container, key) in enumerate(_mutations(m, rng)):
            if i == target:
                if isinstance(container, dict) and rng.random() < 0.2:
                    del container[key]
                else:
                    container[key] = rng.choice(_JUNK)
                break
        with open(mpath, "w") as f:
            json.dump(m, f)
        try:
            r = tf.saved_model.load(path)
            r(tf.constant([1.0, 2.0]))
        except errors.TapeflowError:
            pass
        except Exception as e:        # pragma: no cover (the failure message)
            raise AssertionError(f"trial {trial}: {type(e).__name__}: {e}\n"
                                 + traceback.format_exc()) from e


def test_a_graph_that_holds_for_its_traced_shapes_only_is_refused_with_none_dimensions(tmp_path):
    """A TensorArray sized by ``tf.shape(x)[0]`` bakes the traced size into the graph: with
    a ``None`` dimension in the signature the saved function would compute with that size
    for every input (a silent wrong result), so saving refuses and says what to do; with
    fixed dimensions it saves and gives the right values."""
    def body(x):
        ta = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        for i in tf.range(tf.shape(x)[0]):
            ta = ta.write(i, x[i] * 2.0)
        return ta.stack()

    relaxed = tf.Module()
    relaxed.f = tf.function(body, input_signature=[tf.TensorSpec([None], tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="fixed dimensions"):
        tf.saved_model.save(relaxed, str(tmp_path / "relaxed"))
    fixed = tf.Module()
    fixed.f = tf.function(body, input_signature=[tf.TensorSpec([3], tf.float32)])
    tf.saved_model.save(fixed, str(tmp_path / "fixed"))
    again = tf.saved_model.load(str(tmp_path / "fixed"))
    np.testing.assert_array_equal(again.f(tf.constant([1.0, 5.0, 3.0])).numpy(), [2.0, 10.0, 6.0])


def test_an_autograph_loop_over_a_none_length_input_loops_over_each_inputs_length(tmp_path):
    """``for v in x`` with ``x`` of signature ``[None]``: the loop's length is read in the
    graph, so the loaded function (which replays the graph) sums every element of any
    length (it used to loop the placeholder's length, 1, silently)."""
    m = tf.Module()

    def total(x):
        s = tf.constant(0.0)
        for v in x:
            if v > 2.0:
                v = 2.0 * tf.ones_like(v)
            s += v
        return s

    m.f = tf.function(total, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(m, str(tmp_path / "m"))
    again = tf.saved_model.load(str(tmp_path / "m"))
    for xs in ([1.0, 5.0, 3.0], [0.5], [1.0, 1.0, 1.0, 9.0, 0.25]):
        want = sum(min(v, 2.0) for v in xs)
        assert float(again.f(tf.constant(xs))) == pytest.approx(want)
        assert float(m.f(tf.constant(xs))) == pytest.approx(want)


def test_a_tensorarray_unstacked_from_a_none_length_input_is_refused_at_save(tmp_path):
    """``unstack(x)`` sizes the TensorArray by x's traced length: under a ``None`` signature
    the saved graph would hold for that length only."""
    m = tf.Module()
    m.f = tf.function(lambda x: tf.TensorArray(tf.float32, size=0, dynamic_size=True)
                      .unstack(x).stack() * 2.0,
                      input_signature=[tf.TensorSpec([None], tf.float32)])
    np.testing.assert_array_equal(m.f(tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])).numpy(),
                                  [2.0, 4.0, 6.0, 8.0, 10.0])      # live: traced per length
    with pytest.raises(tf.errors.InvalidArgumentError, match="fixed dimensions"):
        tf.saved_model.save(m, str(tmp_path / "m"))
