"""``apply_gradients`` is all or nothing (issue 43, part 3), for every optimizer and
option, on every path: the fused kernels, the op-by-op update (``opt.fused = False``)
and float16 variables (no fused kernel: the op-by-op update under the fused default).

Before issue 43 a learning rate of shape ``(1,)`` passed validation: the fused path
reshaped it, and the op-by-op path raised part-way, after earlier variables and slots
had changed. Every hyperparameter and every (gradient, variable) pair is now checked
before anything is created or written, and the update is computed for every variable
before the first write. Here:

* a learning rate of shape ``(1,)``: refused naming the optimizer, the hyperparameter,
  its shape and what to pass; every Variable, slot and counter bitwise unchanged;
* a seeded fuzzer of invalid inputs (hyperparameters of other shapes and kinds, given
  directly, through a callable or the ``learning_rate`` setter; a bad gradient in the
  LAST pair so that the earlier ones would have been applied; a gradient on another
  device; non-Variables, empty lists, malformed pairs, a bad ``global_step``);
* a failure while the update is computed (a kernel raising) changes nothing;
* a differential test: seeded random gradients, every step, fused against op-by-op,
  bitwise, with hyperparameters in every accepted form and a Variable listed twice
  (``tests/test_fused_optimizers.py`` has the deterministic one over devices).

Everything is placed on ``cpu:0`` (bitwise equality is the CPU kernels' promise).
"""

from __future__ import annotations


import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError
from tapeflow.train import fused_update
from tapeflow.train import optimizers as O

CPU = "cpu:0"
#: another device for "a gradient elsewhere" (opencl:0 where present)
OTHER = next((d.name for d in tf.list_devices() if d.name != CPU), None)

#: (id, class, hyperparameters, options): every optimizer and option. The
#: hyperparameters are the keyword arguments each class validates at every step.
SPECS = [
    ("gd", O.GradientDescentOptimizer, {"learning_rate": 0.1}, {}),
    ("momentum", O.MomentumOptimizer, {"learning_rate": 0.1, "momentum": 0.9}, {}),
    ("nesterov", O.MomentumOptimizer, {"learning_rate": 0.1, "momentum": 0.9},
     {"use_nesterov": True}),
    ("adam", O.AdamOptimizer,
     {"learning_rate": 0.05, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}, {}),
    ("rmsprop", O.RMSPropOptimizer,
     {"learning_rate": 0.05, "decay": 0.9, "momentum": 0.0, "epsilon": 1e-10}, {}),
    ("rmsprop_momentum", O.RMSPropOptimizer,
     {"learning_rate": 0.05, "decay": 0.9, "momentum": 0.5, "epsilon": 1e-10}, {}),
    ("rmsprop_centered", O.RMSPropOptimizer,
     {"learning_rate": 0.05, "decay": 0.9, "momentum": 0.5, "epsilon": 1e-10},
     {"centered": True}),
    ("rmsprop_centered_nomom", O.RMSPropOptimizer,
     {"learning_rate": 0.05, "decay": 0.8, "momentum": 0.0, "epsilon": 1e-10},
     {"centered": True}),
    ("adagrad", O.AdagradOptimizer, {"learning_rate": 0.1}, {}),
    ("keras_sgd", O.SGD, {"learning_rate": 0.1}, {}),
    ("keras_sgd_momentum", O.SGD, {"learning_rate": 0.1, "momentum": 0.9}, {}),
    ("keras_sgd_nesterov", O.SGD, {"learning_rate": 0.1, "momentum": 0.9},
     {"nesterov": True}),
    ("keras_adam", O.Adam,
     {"learning_rate": 0.05, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}, {}),
    ("keras_rmsprop", O.RMSprop,
     {"learning_rate": 0.05, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7}, {}),
    ("keras_rmsprop_centered", O.RMSprop,
     {"learning_rate": 0.05, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7},
     {"centered": True}),
    ("keras_rmsprop_momentum", O.RMSprop,
     {"learning_rate": 0.05, "rho": 0.9, "momentum": 0.3, "epsilon": 1e-7}, {}),
    ("keras_adagrad", O.Adagrad, {"learning_rate": 0.1}, {}),
]
IDS = [s[0] for s in SPECS]
#: (id, fused, variable dtype): the fused kernels, the op-by-op update, float16 (the
#: op-by-op update although fused is on: no float16 kernel)
PATHS = [("fused", True, "float32"), ("op-by-op", False, "float32"),
         ("float16", True, "float16")]
#: the variables of every test: the scalar LAST, so that a broadcasting value fails
#: there, after the others would have been updated
SHAPES = [(3, 4), (5,), ()]


def _make(spec, fused, **hyper):
    _, cls, defaults, options = spec
    opt = cls(**dict(defaults, **hyper), **options)
    opt.fused = fused
    return opt


def _variables(dtype, rng):
    with tf.device(CPU):
        return [tf.Variable(rng.standard_normal(s).astype(dtype), name=f"w{i}")
                for i, s in enumerate(SHAPES)]


def _gradients(dtype, rng, shapes=SHAPES):
    with tf.device(CPU):
        return [tf.constant(rng.standard_normal(s).astype(dtype)) for s in shapes]


def _bits(v):
    a = np.asarray(v.numpy())
    return a.dtype.str, a.shape, a.tobytes()


def _snapshot(opt, ws, global_step=None):
    """Every bit the step could change: the variables, each optimizer Variable (slots,
    beta powers, the Keras ``iterations``) by name, ``global_step``."""
    # (first: ``iterations`` makes its Variable when read before the first step)
    its = [("iterations", None, int(opt.iterations))] if isinstance(opt, O._KerasMixin) else []
    out = [("var", w.name, _bits(w)) for w in ws]
    out += [("opt", v.name, _bits(v)) for v in opt.variables()]
    out += its
    if global_step is not None:
        out.append(("global_step", None, _bits(global_step)))
    return out


def _assert_unchanged(before, after, what):
    assert len(after) == len(before), (what, [b[:2] for b in before], [a[:2] for a in after])
    for b, a in zip(before, after):
        assert b == a, f"{what}: {b[:2]} changed"


def _assert_same_bits(a, b, what):
    assert [x[:2] for x in a] == [x[:2] for x in b], what
    for x, y in zip(a, b):
        assert x[2] == y[2], (what, x[:2])


# --- (a) the reported bug: a learning rate of shape (1,) ---------------------------------

@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_a_learning_rate_of_shape_1_is_refused_and_nothing_changes(spec, path):
    """The reported bug: refused (it was reshaped by the fused update, and failed on the
    scalar variable after the others had changed on the op-by-op one), every bit as it
    was, and the next good step is what an optimizer that never saw it does."""
    _, fused, dtype = path
    rng = np.random.default_rng(43)
    ws = _variables(dtype, rng)
    opt = _make(spec, fused)
    opt.apply_gradients(list(zip(_gradients(dtype, rng), ws)))    # slots exist, not zero
    before = _snapshot(opt, ws)
    opt.learning_rate = tf.constant([0.1])
    with pytest.raises(InvalidArgumentError) as info:
        opt.apply_gradients(list(zip(_gradients(dtype, rng), ws)))
    _assert_unchanged(before, _snapshot(opt, ws), spec[0])
    msg = str(info.value)
    for part in (type(opt).__name__, "learning_rate", "(1,)", "float32",
                 "Pass a Python float or a 0-d tensor", "No variable was updated"):
        assert part in msg, (part, msg)
    # the same optimizer still trains, exactly as one that never saw the bad step
    twin = _make(spec, fused)
    rng2 = np.random.default_rng(43)
    ws2 = _variables(dtype, rng2)
    twin.apply_gradients(list(zip(_gradients(dtype, rng2), ws2)))
    _gradients(dtype, rng2)
    opt.learning_rate = spec[2]["learning_rate"]
    g = _gradients(dtype, rng)
    opt.apply_gradients(list(zip(g, ws)))
    twin.apply_gradients(list(zip(g, ws2)))
    _assert_same_bits(_snapshot(opt, ws), _snapshot(twin, ws2), spec[0])


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_a_first_step_with_a_bad_learning_rate_creates_nothing(spec):
    """Refused before the slots (and Adam's beta powers) are created."""
    ws = _variables("float32", np.random.default_rng(0))
    opt = _make(spec, True, learning_rate=np.full((1, 1), 0.1, np.float32))
    with pytest.raises(InvalidArgumentError, match=r"learning_rate.*shape \(1, 1\)"):
        opt.apply_gradients([(tf.ones_like(w), w) for w in ws])
    assert opt.variables() == []
    assert all(opt.get_slot(w, s) is None for w in ws for s in opt.get_slot_names())


# --- (b) the fuzzer ---------------------------------------------------------------------

def _bad_hyperparameter(rng, name):
    """(description, value): a value no hyperparameter accepts (``name``: the learning
    rate also refuses a 0-d integer tensor; the others read it as a number)."""
    shape = [(1,), (2,), (1, 1), (2, 3)][rng.integers(4)]
    kinds = [
        ("tensor of shape %s" % (shape,), lambda: tf.constant(np.full(shape, 0.1, np.float32))),
        ("NumPy array of shape %s" % (shape,), lambda: np.full(shape, 0.1)),
        ("Variable of shape %s" % (shape,), lambda: tf.Variable(np.full(shape, 0.1, np.float32))),
        ("a string", lambda: "0.1"),
        ("None", lambda: None),
        ("a complex number", lambda: 0.1 + 1j),
        ("a complex tensor", lambda: tf.constant(0.1 + 0j, dtype=tf.complex64)),
        ("a bool", lambda: True),
        ("a list", lambda: [0.1]),
        ("a dict", lambda: {"value": 0.1}),
        ("an object", lambda: object()),
    ]
    if name == "learning_rate":
        kinds.append(("a 0-d integer tensor", lambda: tf.constant(1)))
    desc, make = kinds[rng.integers(len(kinds))]
    with tf.device(CPU):
        return desc, make()


def _bad_pairs(rng, ws, gs, dtype):
    """(description, grads_and_vars, global_step): good pairs for every variable but the
    last, then something wrong -- or a wrong list as a whole."""
    last = ws[-1]
    good = list(zip(gs[:-1], ws[:-1]))
    other = "float64" if dtype != "float64" else "float32"
    with tf.device(CPU):
        wrong_shape = [s for s in [(2,), (1,), (3, 4), (5,), (2, 2)]
                       if s != tuple(last.shape)][rng.integers(4)]
        cases = [
            ("a gradient of shape %s for a scalar" % (wrong_shape,),
             lambda: good + [(tf.constant(np.ones(wrong_shape, dtype)), last)], None),
            ("a %s gradient" % other,
             lambda: good + [(tf.constant(np.ones((), other)), last)], None),
            ("an int32 gradient", lambda: good + [(tf.constant(1), last)], None),
            ("a complex gradient",
             lambda: good + [(tf.constant(1 + 1j, dtype=tf.complex64), last)], None),
            ("a string gradient", lambda: good + [("oops", last)], None),
            ("a list with None", lambda: good + [([1.0, None], last)], None),
            ("a gradient Variable of another shape",
             lambda: good + [(tf.Variable(np.ones((2,), dtype)), last)], None),
            ("a Tensor where the variable goes",
             lambda: good + [(gs[-1], tf.constant(1.0))], None),
            ("the pair reversed", lambda: good + [(last, gs[-1])], None),
            ("an integer Variable",
             lambda: good + [(tf.constant(1), tf.Variable(1, name="int_var"))], None),
            ("a triple", lambda: good + [(gs[-1], last, 1.0)], None),
            ("a bare gradient", lambda: good + [gs[-1]], None),
            ("an empty list", lambda: [], None),
            ("only None gradients", lambda: [(None, w) for w in ws], None),
            ("not a list", lambda: None, None),
            ("a Tensor global_step", lambda: good + [(gs[-1], last)], tf.constant(0)),
            ("a bool global_step", lambda: good + [(gs[-1], last)], tf.Variable(False)),
        ]
        if OTHER is not None:
            def elsewhere():
                with tf.device(OTHER):
                    g = tf.constant(np.ones(wrong_shape, dtype))
                return good + [(g, last)]
            cases.append((f"a gradient of shape {wrong_shape} on {OTHER}", elsewhere, None))
        desc, make, step = cases[rng.integers(len(cases))]
        return desc, make(), step


def _fuzz_case(rng, case):
    spec = SPECS[rng.integers(len(SPECS))]
    path_id, fused, dtype = PATHS[rng.integers(len(PATHS))]
    kind = ["hyperparameter", "pairs"][rng.integers(2)]
    where = f"case {case}: {spec[0]}, {path_id}"
    ws = _variables(dtype, rng)
    with tf.device(CPU):
        global_step = tf.Variable(0, dtype=tf.int64, name="step")
    hyper = dict(spec[2])
    # every hyperparameter through a callable reading `hyper`: the fuzzer changes one
    # after a good step (the slots exist and are not at their start)
    opt = _make(spec, fused, **{k: (lambda k=k: hyper[k]) for k in hyper})
    opt.apply_gradients(list(zip(_gradients(dtype, rng), ws)), global_step=global_step)
    gs = _gradients(dtype, rng)
    step = global_step
    if kind == "hyperparameter":
        name = list(hyper)[rng.integers(len(hyper))]
        desc, bad = _bad_hyperparameter(rng, name)
        hows = ["callable", "constructor"] + (["learning_rate setter"]
                                              if name == "learning_rate" else [])
        how = hows[rng.integers(len(hows))]
        where += f", {name} = {desc} ({how})"
        if how == "callable":
            hyper[name] = bad
        elif how == "learning_rate setter":
            opt.learning_rate = bad
        else:        # a fresh optimizer given the bad value: its first step is refused
            try:
                opt = _make(spec, fused, **{name: bad})
            except InvalidArgumentError as e:         # (or the constructor refuses it)
                assert type(opt).__name__ in str(e) and name in str(e), (where, str(e))
                return spec[0], path_id, kind
        pairs = list(zip(gs, ws))
        expect = [name]
    else:
        desc, pairs, bad_step = _bad_pairs(rng, ws, gs, dtype)
        step = bad_step if bad_step is not None else global_step
        where += f", {desc}"
        expect = []
    before = _snapshot(opt, ws, global_step)
    with pytest.raises(InvalidArgumentError) as info:
        opt.apply_gradients(pairs, global_step=step)
    _assert_unchanged(before, _snapshot(opt, ws, global_step), where)
    msg = str(info.value)
    assert type(opt).__name__ in msg or "No gradients provided" in msg, (where, msg)
    for part in expect:
        assert part in msg, (where, part, msg)
    if isinstance(info.value, InvalidTypeError):
        assert isinstance(info.value, TypeError)
    return spec[0], path_id, kind


@pytest.mark.filterwarnings("ignore:.*the gradient of Variable .* is None")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # (float16 Adam: epsilon is 0)
@pytest.mark.parametrize("seed", range(4))
def test_fuzz_invalid_input_changes_nothing(seed):
    """120 seeded random cases per seed over SPECS x PATHS x invalid inputs: the error
    is raised and every Variable, slot and counter is bitwise what it was. A failure
    names the case (``seed`` and the case number replay it)."""
    rng = np.random.default_rng(seed)
    seen = {_fuzz_case(rng, i) for i in range(120)}
    # the sample covers every optimizer, every path and both kinds of bad input
    assert {s for s, _, _ in seen} == set(IDS)
    assert {p for _, p, _ in seen} == {p[0] for p in PATHS}
    assert {k for _, _, k in seen} == {"hyperparameter", "pairs"}


@pytest.mark.parametrize("how", ["direct", "callable", "Variable"])
@pytest.mark.parametrize("spec", [s for s in SPECS if len(s[2]) > 1], ids=lambda s: s[0])
def test_every_hyperparameter_of_shape_1_is_refused_by_name(spec, how):
    """Each hyperparameter besides the learning rate (momentum, the betas, epsilon,
    decay/rho), given directly, through a callable or as a Variable, with shape (1,)."""
    for name, good in spec[2].items():
        if name == "learning_rate":
            continue
        ws = _variables("float32", np.random.default_rng(1))
        with tf.device(CPU):
            bad = tf.constant([float(good)])
            if how == "Variable":
                bad = tf.Variable(bad)
        opt = _make(spec, False, **{name: (lambda b=bad: b) if how == "callable" else bad})
        before = _snapshot(opt, ws)
        with pytest.raises(InvalidArgumentError) as info:
            opt.apply_gradients([(tf.ones_like(w), w) for w in ws])
        _assert_unchanged(before, _snapshot(opt, ws), f"{spec[0]} {name}")
        msg = str(info.value)
        assert f"{type(opt).__name__}: the hyperparameter {name} " in msg, msg
        assert "(1,)" in msg and "Pass a Python float or a 0-d tensor" in msg, msg


def test_adagrad_initial_accumulator_value_is_checked_when_built():
    for bad in ("0.1", None, np.array([0.1, 0.2]), tf.constant([0.1])):
        with pytest.raises(InvalidArgumentError, match="initial_accumulator_value"):
            O.AdagradOptimizer(0.1, initial_accumulator_value=bad)
    with pytest.raises(InvalidArgumentError, match="must be positive"):
        O.Adagrad(initial_accumulator_value=0.0)
    assert O.AdagradOptimizer(0.1, initial_accumulator_value=tf.constant(0.5)) \
        ._slot_specs == (("accumulator", 0.5),)


@pytest.mark.parametrize("arg", ["clipnorm", "clipvalue", "global_clipnorm", "decay"])
def test_keras_unsupported_arguments_are_refused_when_built(arg):
    for bad in (1.0, np.array([1.0, 2.0]), tf.constant([1.0]), "x"):
        with pytest.raises(NotImplementedError, match=arg):
            O.Adam(0.1, **{arg: bad})
    O.Adam(0.1, **{arg: None})
    O.Adam(0.1, **{arg: 0})


@pytest.mark.skipif(OTHER is None, reason="no device besides cpu:0")
@pytest.mark.parametrize("fused", [True, False])
def test_a_gradient_on_another_device_is_copied_only_for_a_valid_step(fused):
    """A gradient on another device is copied to its variable's (as TensorFlow does);
    with a bad learning rate the step is refused first and nothing changes."""
    rng = np.random.default_rng(5)
    grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    runs = []
    for elsewhere in (True, False):
        ws = _variables("float32", np.random.default_rng(6))
        opt = O.Adam(tf.constant([0.1]))
        opt.fused = fused
        with tf.device(OTHER if elsewhere else CPU):
            last = tf.constant(grads[-1])
        with tf.device(CPU):
            pairs = [(tf.constant(g), w) for g, w in zip(grads[:-1], ws[:-1])]
        pairs.append((last, ws[-1]))
        before = _snapshot(opt, ws)
        with pytest.raises(InvalidArgumentError, match=r"learning_rate.*\(1,\)"):
            opt.apply_gradients(pairs)
        _assert_unchanged(before, _snapshot(opt, ws), f"elsewhere={elsewhere}")
        opt.learning_rate = 0.1
        opt.apply_gradients(pairs)
        assert all(w.device == CPU for w in ws)
        runs.append(_snapshot(opt, ws))
    _assert_same_bits(runs[0], runs[1], "elsewhere")


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_float32_and_float16_variables_in_one_step(spec):
    """One step updating float32 variables with the fused kernels and float16 ones op
    by op: a bad pair among the float16 ones, or a learning rate of shape (1,), is
    refused as a whole; the next good step is what an optimizer that never saw the bad
    calls does."""
    def setup():
        rng = np.random.default_rng(11)
        ws = _variables("float32", rng) + _variables("float16", rng)
        gs = _gradients("float32", rng) + _gradients("float16", rng)
        opt = _make(spec, True)
        opt.apply_gradients(list(zip(gs, ws)))
        return ws, gs, opt
    ws, gs, opt = setup()
    before = _snapshot(opt, ws)
    bad = list(zip(gs, ws))[:-1] + [(tf.constant([1.0, 2.0], tf.float16), ws[-1])]
    with pytest.raises(InvalidArgumentError, match=r"pair 5 .*shape \(2,\)"):
        opt.apply_gradients(bad)
    _assert_unchanged(before, _snapshot(opt, ws), spec[0])
    opt.learning_rate = tf.constant([0.1])
    with pytest.raises(InvalidArgumentError, match=r"learning_rate.*\(1,\)"):
        opt.apply_gradients(list(zip(gs, ws)))
    _assert_unchanged(before, _snapshot(opt, ws), spec[0])
    opt.learning_rate = spec[2]["learning_rate"]
    opt.apply_gradients(list(zip(gs, ws)))
    ws2, gs2, twin = setup()
    twin.apply_gradients(list(zip(gs2, ws2)))
    _assert_same_bits(_snapshot(opt, ws), _snapshot(twin, ws2), spec[0])


# --- a failure while the update is computed --------------------------------------------

class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_a_failure_computing_the_last_update_changes_nothing(spec, path, monkeypatch):
    """A kernel raising while the last variable's update is computed (here: made to
    raise): the updates are all computed (fused: the kernel and its coefficients made;
    op-by-op: the new values) before the first write, so nothing has changed."""
    _, fused, dtype = path
    rng = np.random.default_rng(7)
    ws = _variables(dtype, rng)
    with tf.device(CPU):
        step = tf.Variable(0, dtype=tf.int64)
    opt = _make(spec, fused)
    opt.apply_gradients(list(zip(_gradients(dtype, rng), ws)), global_step=step)
    before = _snapshot(opt, ws, step)
    last = ws[-1]
    real_dense = type(opt)._dense
    real_prepare = fused_update.prepare_fused
    calls = []

    def dense(self, grad, var, slots):
        calls.append("dense")
        if var is last:
            raise _Boom("a kernel failed")
        return real_dense(self, grad, var, slots)

    def prepare(op, var, *a, **k):
        calls.append("fused")
        if var is last:
            raise _Boom("a kernel failed")
        return real_prepare(op, var, *a, **k)
    monkeypatch.setattr(type(opt), "_dense", dense)
    monkeypatch.setattr(O, "prepare_fused", prepare)
    with pytest.raises(_Boom):
        opt.apply_gradients(list(zip(_gradients(dtype, rng), ws)), global_step=step)
    assert len(calls) == len(ws)
    assert set(calls) == {"fused" if fused and dtype == "float32" else "dense"}
    _assert_unchanged(before, _snapshot(opt, ws, step), spec[0])


# --- tf.function, LossScaleOptimizer, threads -------------------------------------------

@pytest.mark.parametrize("fused", [True, False])
def test_inside_tf_function_a_bad_learning_rate_is_refused_at_trace(fused):
    ws = _variables("float32", np.random.default_rng(3))
    opt = O.Adam(0.1)
    opt.fused = fused

    @tf.function
    def step(lr):
        opt.learning_rate = lr
        opt.apply_gradients([(tf.ones_like(w), w) for w in ws])
        return lr

    step(tf.constant(0.1))
    before = _snapshot(opt, ws)
    with pytest.raises(InvalidArgumentError, match=r"Adam: the learning rate.*shape \(1,\)"):
        step(tf.constant([0.1]))
    _assert_unchanged(before, _snapshot(opt, ws), "traced")
    step(tf.constant(0.1))
    assert int(opt.iterations) == int(before[-1][2]) + 1


def test_a_variable_hyperparameter_inside_tf_function_is_refused():
    """The fused kernels take momentum, the betas... as numbers: read at trace time, a
    Variable's later values would be ignored by every call. Eagerly it is read at
    every step."""
    w = tf.Variable([1.0, 2.0])
    mom = tf.Variable(0.5)
    opt = O.MomentumOptimizer(0.1, mom)

    @tf.function
    def step():
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
        return w.read_value()
    with pytest.raises(InvalidArgumentError, match="momentum is a tf.Variable"):
        step()
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    for fused in (True, False):       # eagerly: the Variable's value at each step
        w.assign([1.0, 2.0])
        opt = O.MomentumOptimizer(0.1, mom)
        opt.fused = fused
        mom.assign(0.5)
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
        mom.assign(0.0)
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
        np.testing.assert_allclose(w.numpy(), [0.8, 1.8], rtol=1e-6)


@pytest.mark.parametrize("bad", ["shape", "hyperparameter"])
def test_loss_scale_optimizer_refuses_bad_input_even_when_a_gradient_is_not_finite(bad):
    """Before: a non-finite gradient made it skip the step and halve the scale without
    looking at the rest. Now the inner optimizer's checks come first."""
    w = tf.Variable([1.0, 2.0])
    s = tf.Variable(3.0)
    inner = tf.keras.optimizers.Adam(0.1)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=8.0)
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant(1.0), s)])
    before = _snapshot(inner, [w, s]) + [("scale", None, float(opt.loss_scale))]
    if bad == "shape":
        pairs = [(tf.constant([np.inf, 1.0]), w), (tf.constant([1.0]), s)]
    else:
        inner.learning_rate = tf.constant([0.1])
        pairs = [(tf.constant([np.inf, 1.0]), w), (tf.constant(1.0), s)]
    with pytest.raises(InvalidArgumentError, match="No variable was updated"):
        opt.apply_gradients(pairs)
    after = _snapshot(inner, [w, s]) + [("scale", None, float(opt.loss_scale))]
    _assert_unchanged(before, after, bad)
    inner.learning_rate = 0.1
    opt.apply_gradients([([np.inf, 1.0], w), (np.float32(1.0), s)])   # host values: skipped
    assert float(opt.loss_scale) == 4.0


def test_a_nan_learning_rate_is_applied_as_tensorflow_does():
    """No NaN policy in the optimizers (TensorFlow has none: LossScaleOptimizer skips
    non-finite gradients): a NaN hyperparameter is a number, applied on both paths."""
    for fused in (True, False):
        w = tf.Variable([1.0, 2.0])
        opt = O.GradientDescentOptimizer(float("nan"))
        opt.fused = fused
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
        assert np.isnan(w.numpy()).all()


# --- (c) differential: fused against op-by-op, bitwise -----------------------------------

def _forms(value, rng):
    """``value`` in a random accepted form: a Python float, NumPy scalars and 0-d
    array, a 0-d Tensor, a 0-d Variable, a callable."""
    forms = [lambda: float(value), lambda: np.float64(value), lambda: np.array(value),
             lambda: tf.constant(value, dtype=tf.float64), lambda: tf.constant(value),
             lambda: tf.Variable(value), lambda: (lambda: value)]
    with tf.device(CPU):
        return forms[rng.integers(len(forms))]()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_fused_equals_op_by_op_bitwise_with_random_gradients(spec, dtype):
    """Five steps of seeded random gradients (one of them listing a variable twice),
    hyperparameters in random accepted forms (the same objects for both): every
    variable and slot bitwise equal after every step."""
    rng = np.random.default_rng(2 * IDS.index(spec[0]) + (dtype == "float64"))
    shapes = SHAPES + [(200, 190)]          # (blocks of the NumPy kernel)
    hyper = {k: _forms(v, rng) for k, v in spec[2].items()}
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    runs = {}
    for fused in (True, False):
        with tf.device(CPU):
            runs[fused] = ([tf.Variable(a.copy(), name=f"w{i}") for i, a in enumerate(init)],
                           _make(spec, fused, **hyper))
    for k in range(5):
        gs = [(rng.standard_normal(s) * 10.0 ** rng.integers(-3, 2)).astype(dtype)
              for s in shapes]
        for fused, (ws, opt) in runs.items():
            with tf.device(CPU):
                pairs = [(tf.constant(g), w) for g, w in zip(gs, ws)]
            if k == 2:                          # the same Variable twice: both applied
                pairs.append((pairs[1][0] * 0.5, ws[1]))
            opt.apply_gradients(pairs)
        (fw, fopt), (uw, uopt) = runs[True], runs[False]
        _assert_same_bits(_snapshot(fopt, fw), _snapshot(uopt, uw), (spec[0], dtype, k))
    assert _bits(runs[True][0][0]) != (init[0].dtype.str, init[0].shape, init[0].tobytes())


def test_a_variable_listed_twice_gets_both_updates_in_order():
    """Sequential semantics (TensorFlow applies each pair in turn): on both paths the
    second update sees the first's slots."""
    outs = []
    for fused in (True, False):
        w = tf.Variable([1.0, 2.0])
        opt = O.MomentumOptimizer(0.5, 0.5)
        opt.fused = fused
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([2.0, 2.0]), w)])
        outs.append((w.numpy(), opt.get_slot(w, "momentum").numpy()))
    # accum = 1; w -= 0.5 -> 0.5; accum = 0.5 + 2 = 2.5; w -= 1.25 -> -0.75
    for wv, acc in outs:
        np.testing.assert_array_equal(wv, [-0.75, 0.25])
        np.testing.assert_array_equal(acc, [2.5, 2.5])
