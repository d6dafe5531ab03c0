"""Threads and fork() (issue 13, "Concurrency"; docs/concurrency.md).

* Variable updates are atomic per Variable: threads hammering ``assign_add`` lose no
  update, and readers never see a half-written buffer (the in-place update of buffer
  donation runs under the Variable's lock, and readers take the value under it).
* No silent coercion into a Variable: the error names the Variable, both dtypes and
  says the Variable was left unchanged.
* ``apply_gradients`` is all or nothing: a bad third pair leaves the first two
  Variables, the slots, the iteration counter and ``global_step`` as they were.
* fork(): a forked child computes on ``cpu:0`` after the parent used ``opencl:0``, and
  its first OpenCL call raises FailedPreconditionError instead of hanging. Those tests
  run in a subprocess with a timeout, so a regression fails instead of hanging pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _opencl_reason():
    try:
        from tapeflow_opencl import plugin
    except ImportError as e:
        return f"tapeflow-opencl is not installed ({e})"
    reason = plugin.unavailable_reason()
    if reason:
        return f"opencl:0 unavailable: {reason}"
    return None


OPENCL_REASON = _opencl_reason()
needs_opencl = pytest.mark.skipif(OPENCL_REASON is not None, reason=str(OPENCL_REASON))
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


@pytest.fixture
def switch_often():
    """Thread switches every microsecond: interleavings that a 5 ms interval would
    make rare happen on every run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run_threads(target, n, *args):
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait()
            target(i, *args)
        except BaseException as e:          # reported by the test, not lost in the thread
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


# --- Variables: atomic updates, untorn reads -----------------------------------------------

@pytest.mark.parametrize("dtype, one", [(tf.float32, 1.0), (tf.int64, 1)])
def test_threads_hammering_assign_add_lose_no_update(switch_often, dtype, one):
    # before: 2 threads x 2000 assign_add(1) ended at 2809; 4 x 2000 at about 3500
    v = tf.Variable(0, dtype=dtype)
    n, k = 4, 2000

    def work(i):
        for _ in range(k):
            v.assign_add(one)

    _run_threads(work, n)
    assert v.numpy() == n * k


def test_assign_add_and_assign_sub_interleave_atomically(switch_often):
    v = tf.Variable(np.zeros(3, np.float32))
    ones = tf.constant(np.ones(3, np.float32))

    def work(i):
        for _ in range(1500):
            if i % 2:
                v.assign_add(ones)
                v.assign_add(ones)
            else:
                v.assign_sub(ones)

    _run_threads(work, 4)
    np.testing.assert_array_equal(v.numpy(), [3000.0] * 3)   # 2 * 2 * 1500 - 2 * 1500


def test_readers_never_see_a_torn_value_during_in_place_updates(switch_often):
    # A large Variable updated in place (buffer donation): NumPy releases the GIL in
    # the ufunc, and before the fix a reader could copy the buffer half-way through
    # (element 0 already k+1, the last element still k).
    n = 400_000
    v = tf.Variable(np.zeros(n, np.float64))
    ones = tf.constant(np.ones(n, np.float64))
    done = threading.Event()
    torn = []

    def writer():
        try:
            for k in range(150):
                if k % 25 == 24:
                    v.assign(np.full(n, float(k + 1)))     # a whole new value
                else:
                    v.assign_add(ones)
        finally:
            done.set()

    def reader(how):
        while not done.is_set():
            if how == "numpy":
                a = v.numpy()
            elif how == "read_value":
                a = v.read_value().numpy()
            else:                                          # as an op input
                a = (v + 0.0).numpy()
            if a[0] != a[-1] or a[n // 2] != a[0]:
                torn.append((how, a[0], a[n // 2], a[-1]))
            del a

    ts = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(how,)) for how in ("numpy", "read_value", "op")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not torn, torn[:5]
    assert v.numpy()[0] == v.numpy()[-1] == 150.0


def test_the_lock_keeps_buffer_donation():
    # the single-thread fast path still updates in place when nobody else holds the value
    v = tf.Variable(np.zeros(256, np.float32))
    d = tf.constant(np.ones(256, np.float32))
    before = weakref.ref(v._value._data)
    v.assign_add(d)
    v.assign_sub(d)
    v.assign_add(d)
    assert v._value._data is before()
    held = v.read_value()                      # a reader holds it: no in-place update
    v.assign_add(d)
    assert held.numpy()[0] == 1.0 and v.numpy()[0] == 2.0


def test_variables_still_pickle_and_deepcopy():
    import copy
    import pickle
    v = tf.Variable([1.0, 2.0], name="w")
    for c in (pickle.loads(pickle.dumps(v)), copy.deepcopy(v)):
        c.assign_add([1.0, 1.0])
        assert c.numpy().tolist() == [2.0, 3.0]
    assert v.numpy().tolist() == [1.0, 2.0]


def test_device_scopes_and_tapes_are_per_thread():
    from tapeflow.runtime import devices as _devs
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait()
        seen["scope"] = _devs.current_device()            # not the main thread's scope
        x = tf.Variable(3.0)
        seen["y"] = x * x                                 # not on the main thread's tape
        release.set()

    t = threading.Thread(target=other)
    t.start()
    w = tf.Variable(2.0)
    with tf.device("cpu:0"), tf.GradientTape() as tape:
        assert _devs.current_device() is not None
        y = w * w
        inside.set()
        release.wait()
    t.join()
    assert seen["scope"] is None and float(seen["y"]) == 9.0
    assert len(tape._records) == 1                        # w * w only
    assert [float(g) for g in tape.gradient(y, [w])] == [4.0]


# --- no silent coercion into Variables ------------------------------------------------------

COERCIONS = [
    # (initial value, assigned value, op, the source dtype the message names)
    (7, 1.5, "assign", "float32"),
    (7, 2.0, "assign_add", "float32"),
    (7, np.float64(1.5), "assign_sub", "float64"),
    ([7, 8], np.array([1.5, 2.5]), "assign", "float64"),
    ([7, 8], [1.5, 2.5], "assign", "float64"),
    ([7, 8], tf.constant([1.5, 2.5]), "assign_add", "float32"),
    (7.0, "nope", "assign", "string"),
    (7.0, b"nope", "assign_add", "string"),
    (7.0, None, "assign", "NoneType"),
    (7.0, 1 + 2j, "assign", "complex128"),
    ([7.0], np.array([1j]), "assign_add", "complex128"),
    (7.0, tf.constant(1.0, dtype=tf.float64), "assign", "float64"),
    (True, 1, "assign", "int"),
    (True, 0.5, "assign", "float32"),
]


@pytest.mark.parametrize("init, value, op, src", COERCIONS,
                         ids=[f"{type(c[0]).__name__}-{c[2]}-{c[3]}-{i}"
                              for i, c in enumerate(COERCIONS)])
def test_no_silent_coercion_into_a_variable(init, value, op, src):
    v = tf.Variable(init, name="counter")
    before = v.numpy().copy()
    with pytest.raises(InvalidArgumentError) as info:
        getattr(v, op)(value)
    msg = str(info.value)
    assert "counter:0" in msg and v.dtype.name in msg and src in msg, msg
    assert "The variable was left unchanged" in msg, msg
    assert f"[Op:{op}]" in msg
    np.testing.assert_array_equal(v.numpy(), before)
    assert v.numpy().dtype == before.dtype


def test_what_stays_allowed_into_variables():
    f = tf.Variable(1.0)
    f.assign(3)                                  # Python ints are weak scalars
    f.assign_add(np.int64(2))
    assert float(f) == 5.0
    b = tf.Variable(True)
    b.assign(False)
    assert not bool(b)
    i = tf.Variable(7)
    i.assign_add(3)
    i.assign(np.int32(4))
    assert int(i) == 4


# --- apply_gradients: all or nothing ----------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.train.MomentumOptimizer(0.1, momentum=0.9),
    "adam": lambda: tf.train.AdamOptimizer(0.1),
    "keras-sgd-momentum": lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    "keras-adam": lambda: tf.keras.optimizers.Adam(0.1),
}

BAD_THIRD = {
    "wrong shape": lambda c: (tf.constant([1.0, 1.0, 1.0]), c),
    "broadcastable shape": lambda c: (tf.constant([1.0]), c),
    "wrong dtype": lambda c: (tf.constant([1.0, 1.0], dtype=tf.float64), c),
    "a string": lambda c: ("oops", c),
    "None inside": lambda c: ([1.0, None], c),
    "integer variable": lambda c: (tf.constant([1, 1]), tf.Variable([1, 2], name="int_c")),
}


def _state(opt, variables, gs):
    out = [v.numpy().copy() for v in variables]
    out += [s.numpy().copy() for s in opt.variables()]
    out.append(int(gs))
    return out


@pytest.mark.parametrize("bad", sorted(BAD_THIRD))
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_apply_gradients_is_all_or_nothing(name, bad):
    opt = OPTIMIZERS[name]()
    a = tf.Variable([1.0, 2.0], name="a")
    b = tf.Variable([[3.0]], name="b")
    c = tf.Variable([5.0, 6.0], name="c")
    gs = tf.Variable(0, dtype=tf.int64, name="my_step")
    good = [(tf.constant([0.5, 0.5]), a), (tf.constant([[0.5]]), b)]
    opt.apply_gradients(good + [(tf.constant([0.5, 0.5]), c)], global_step=gs)  # slots exist
    before = _state(opt, (a, b, c), gs)
    g3, v3 = BAD_THIRD[bad](c)
    with pytest.raises(Exception) as info:
        opt.apply_gradients(good + [(g3, v3)], global_step=gs)
    # nothing changed: the first two variables, every slot, the beta powers, the
    # iteration counter and global_step (before: a, b and their slots were updated)
    after = _state(opt, (a, b, c), gs)
    assert len(after) == len(before)
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)
    assert int(gs) == 1
    if hasattr(opt, "iterations"):
        assert int(opt.iterations) == 1
    assert isinstance(info.value, InvalidArgumentError), repr(info.value)
    msg = str(info.value)
    assert v3.name in msg and "No variable was updated" in msg, msg
    opt.apply_gradients(good + [(tf.constant([0.5, 0.5]), c)], global_step=gs)  # still usable
    assert int(gs) == 2


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_a_bad_learning_rate_changes_nothing(name):
    opt = {"sgd": lambda: tf.train.GradientDescentOptimizer("fast"),
           "momentum": lambda: tf.train.MomentumOptimizer("fast", momentum=0.9),
           "adam": lambda: tf.train.AdamOptimizer("fast")}[name]()
    a = tf.Variable([1.0, 2.0], name="a")
    with pytest.raises(InvalidArgumentError, match="learning rate"):
        opt.apply_gradients([(tf.constant([0.5, 0.5]), a)])
    assert a.numpy().tolist() == [1.0, 2.0]
    assert all(not s.numpy().any() or s.name.startswith(("beta", "iter"))
               for s in opt.variables())        # slots still at their zero start


def test_a_bad_global_step_is_refused_before_any_update():
    a = tf.Variable([1.0, 2.0], name="a")
    opt = tf.train.GradientDescentOptimizer(0.1)
    with pytest.raises(TypeError, match="global_step"):
        opt.apply_gradients([(tf.constant([0.5, 0.5]), a)], global_step=tf.constant(0))
    assert a.numpy().tolist() == [1.0, 2.0]


def test_threads_sharing_an_optimizer_lose_no_step(switch_often):
    w = tf.Variable(np.zeros(4, np.float32))
    opt = tf.train.GradientDescentOptimizer(1.0)
    g = tf.constant(np.ones(4, np.float32))
    gs = tf.Variable(0, dtype=tf.int64)

    def work(i):
        for _ in range(300):
            opt.apply_gradients([(g, w)], global_step=gs)

    _run_threads(work, 3)
    np.testing.assert_array_equal(w.numpy(), [-900.0] * 4)
    assert int(gs) == 900


# --- tf.function replays write Variables under the Variable's lock (issue 30) ----------------

def _traced_adder(v, k):
    @tf.function
    def add_k():
        for _ in range(k):           # unrolled: k reads, adds and assigns in the graph
            v.assign_add(1.0)
        return v.read_value()
    add_k()                          # trace (and run) once, before the threads start
    return add_k


def test_threads_replaying_a_traced_update_lose_no_update(switch_often):
    # before: the replay read, added and wrote back without the lock (2 x 1000 x 3 ended
    # near 4,000 instead of 6,000)
    v = tf.Variable(0.0)
    k, calls = 3, 1000
    add_k = _traced_adder(v, k)
    v.assign(0.0)

    def work(i):
        for _ in range(calls):
            add_k()

    _run_threads(work, 2)
    assert add_k.experimental_get_tracing_count() == 1
    assert float(v) == 2 * calls * k


def test_traced_updates_and_eager_updates_mix_without_loss(switch_often):
    v = tf.Variable(0.0)
    k, calls = 2, 1000
    add_k = _traced_adder(v, k)
    v.assign(0.0)

    def work(i):
        for _ in range(calls):
            if i == 0:
                add_k()
            else:
                v.assign_add(1.0)

    _run_threads(work, 2)
    assert float(v) == calls * k + calls


def test_traced_update_of_a_variable_argument_is_atomic(switch_often):
    # the Variable is an argument (read and written through its position), and two
    # Variables are updated by one function: locks taken in one order, no deadlock
    a, b = tf.Variable(0.0), tf.Variable(0.0)

    @tf.function
    def step(x, y):
        x.assign_add(1.0)
        y.assign_add(2.0)

    step(a, b)
    step(b, a)
    a.assign(0.0)
    b.assign(0.0)

    def work(i):
        for _ in range(800):
            if i == 0:
                step(a, b)
            elif i == 1:
                step(b, a)
            else:
                a.assign_add(1.0)

    _run_threads(work, 3)
    assert (float(a), float(b)) == (800 * 3 + 800, 800 * 3)


def test_traced_update_under_a_tape_is_atomic(switch_often):
    # with a GradientTape recording, a function that assigns replays op by op
    v = tf.Variable(0.0)
    add_k = _traced_adder(v, 2)
    v.assign(0.0)

    def work(i):
        with tf.GradientTape():
            for _ in range(400):
                add_k()

    _run_threads(work, 2)
    assert float(v) == 2 * 400 * 2


def test_traced_update_inside_a_while_loop_is_atomic(switch_often):
    # the assignment is in a tf.while_loop body (a sub-graph): its Variable is locked too
    v = tf.Variable(0.0)

    @tf.function
    def add_n(n):
        def body(i):
            v.assign_add(1.0)
            return (i + 1,)
        tf.while_loop(lambda i: i < n, body, (tf.constant(0),))

    n = tf.constant(3)
    add_n(n)
    v.assign(0.0)

    def work(i):
        for _ in range(300):
            add_n(n)

    _run_threads(work, 2)
    assert float(v) == 2 * 300 * 3


# --- fork() -----------------------------------------------------------------------------------

_FORK_SCRIPT = textwrap.dedent(r"""
    import os, sys, time
    import numpy as np
    import tapeflow as tf
    from tapeflow.errors import FailedPreconditionError

    use_opencl = sys.argv[1] == "opencl"
    if use_opencl:
        with tf.device("opencl:0"):
            x = tf.constant([1.0, 2.0]) * 2.0
        assert x.numpy().tolist() == [2.0, 4.0]
    with tf.device("cpu:0"):
        base = tf.reduce_sum(tf.constant([1.0, 2.0]) * 3.0)

    def child():
        with tf.device("cpu:0"):                     # the CPU backend works after fork
            y = tf.matmul(tf.ones([4, 4]), tf.ones([4, 4]))
            v = tf.Variable([1.0, 2.0])
            v.assign_add([1.0, 1.0])
        assert float(tf.reduce_sum(y)) == 64.0 and v.numpy().tolist() == [2.0, 3.0]
        print("child-cpu-ok", flush=True)
        if use_opencl:
            for attempt in ("new tensor", "inherited tensor", "kernel on inherited"):
                try:
                    if attempt == "new tensor":
                        with tf.device("opencl:0"):
                            tf.constant([1.0, 2.0]).numpy()
                    elif attempt == "inherited tensor":
                        x.numpy()
                    else:
                        (x * 2.0)
                    print("child-opencl-NO-ERROR", attempt, flush=True)
                except FailedPreconditionError as e:
                    msg = str(e)
                    assert "fork()" in msg and f"pid {os.getppid()}" in msg, msg
                    assert "spawn" in msg, msg
                    print("child-opencl-refused", attempt, flush=True)

    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child()
        except BaseException as e:
            print("child-failed", type(e).__name__, e, flush=True)
            code = 1
        os._exit(code)
    deadline = time.monotonic() + float(sys.argv[2])
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child-HUNG", flush=True)
            sys.exit(3)
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0, status
    # the parent is unaffected
    if use_opencl:
        with tf.device("opencl:0"):
            assert (x * 2.0).numpy().tolist() == [4.0, 8.0]
    print("parent-ok", flush=True)
""")

_POOL_SCRIPT = textwrap.dedent(r"""
    import multiprocessing as mp, sys
    import numpy as np
    import tapeflow as tf

    def batch(i):                                  # a DataLoader-style worker on cpu:0
        with tf.device("cpu:0"):
            x = tf.constant(np.full((8, 3), float(i), np.float32))
            return float(tf.reduce_sum(tf.nn.relu(x - 1.0)))

    if __name__ == "__main__":
        if sys.argv[1] == "opencl":
            with tf.device("opencl:0"):
                tf.reduce_sum(tf.constant([1.0, 2.0])).numpy()
        with mp.get_context("fork").Pool(2) as pool:
            out = pool.map_async(batch, range(6)).get(timeout=float(sys.argv[2]))
        assert out == [max(i - 1.0, 0.0) * 24 for i in range(6)], out
        print("pool-ok", flush=True)
""")


def _run_script(source, *args, timeout=240):
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    try:
        r = subprocess.run([sys.executable, "-c", source, *args], capture_output=True,
                           text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the fork test hung for {timeout} s: {e.stdout!r} {e.stderr!r}")
    return r


@needs_fork
def test_forked_child_computes_on_cpu():
    r = _run_script(_FORK_SCRIPT, "cpu", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child-cpu-ok" in r.stdout and "parent-ok" in r.stdout, r.stdout + r.stderr


@needs_fork
@needs_opencl
def test_forked_child_after_opencl_computes_on_cpu_and_gets_a_clear_opencl_error():
    # before: the child hung forever in its first OpenCL copy
    r = _run_script(_FORK_SCRIPT, "opencl", "60")
    out = r.stdout + r.stderr
    assert "child-HUNG" not in out, out
    assert r.returncode == 0, out
    assert "child-cpu-ok" in r.stdout, out
    for attempt in ("new tensor", "inherited tensor", "kernel on inherited"):
        assert f"child-opencl-refused {attempt}" in r.stdout, out
    assert "parent-ok" in r.stdout, out


@needs_fork
@pytest.mark.parametrize("parent_used", [
    "cpu", pytest.param("opencl", marks=needs_opencl)])
def test_fork_pool_workers_compute_on_cpu(parent_used):
    r = _run_script(_POOL_SCRIPT, parent_used, "60")
    assert r.returncode == 0 and "pool-ok" in r.stdout, r.stdout + r.stderr
