"""Values a traced function writes in place (the ``reuse`` pass, buffer plans) are never
values someone else still reads: the backward pass of a traced call under an outer
tape, the caller holding a returned result, another thread (issue 43, findings 1-2).

Each test here failed before its fix; the random programs of
``tests/test_trace_differential.py`` look for the same family at large.
"""

import threading

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.tracing import ConcreteFunction, graph_passes
from tapeflow.tracing.concrete import plan


def _eager_and_traced(fn, *args):
    return fn(*args), tf.function(fn)(*args)


@pytest.mark.parametrize("traced_backward", [True, False])
def test_a_residual_block_under_an_outer_tape_gives_eager_gradients_at_every_call(
        traced_backward, monkeypatch):
    # h is read by a MatMul (whose gradient needs it) and last by an Add that the reuse
    # pass lets write in place: the forward program kept for the backward pass must not
    monkeypatch.setattr(ConcreteFunction, "traced_backward", traced_backward)
    W = tf.Variable(np.eye(2, dtype=np.float32) + 0.25)
    x = tf.constant([[1.0, 2.0]])

    def block(x):
        h = tf.tanh(tf.matmul(x, W))
        return h + tf.matmul(h, W)

    with tf.GradientTape() as t:
        t.watch(x)
        loss = tf.reduce_sum(block(x))
    want = t.gradient(loss, [W, x])
    traced = tf.function(block)
    for _ in range(4):
        with tf.GradientTape() as t:
            t.watch(x)
            loss = tf.reduce_sum(traced(x))
        got = t.gradient(loss, [W, x])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def test_the_saved_forward_program_runs_no_kernel_that_writes_in_place():
    W = tf.constant(np.eye(3, dtype=np.float32))

    @tf.function
    def f(x):
        h = tf.exp(tf.tanh(x))
        return h * 2.0 + tf.matmul(h, W)

    x = tf.constant(np.ones((3, 3), np.float32))
    f(x)
    cf = f.get_concrete_function(x)
    assert any(graph_passes.written_input(n) is not None for n in cf.graph.nodes)
    _, _, nodes = cf._saved_program()
    assert all(graph_passes.written_input(n) is None for n in nodes)
    # and the graph itself keeps its in-place kernels for the plain replay
    assert any(graph_passes.written_input(n) is not None for n in cf.graph.nodes)


@pytest.mark.parametrize("passes", [("reuse",), ("simplify", "cse", "dce", "reuse"), None])
def test_returned_values_never_change_after_later_calls(passes):
    # h is returned: the in-place chain that makes it may not write into a buffer the
    # plan keeps for the next call
    w = tf.constant(np.eye(2, dtype=np.float32))

    @tf.function(passes=passes)
    def f(x):
        h = tf.exp(tf.abs(x) + 1.0) * 2.0
        return h, tf.matmul(w, h)

    outs, want = [], []
    for k in range(5):
        x = tf.constant(np.full((2, 2), float(k % 3), np.float32))
        h, m = f(x)
        outs.append((h, m))
        e = np.exp(np.abs(x.numpy()) + 1.0) * 2.0
        want.append((e, np.eye(2, dtype=np.float32) @ e))
    for (h, m), (eh, em) in zip(outs, want):
        np.testing.assert_allclose(h.numpy(), eh, rtol=1e-6)
        np.testing.assert_allclose(m.numpy(), em, rtol=1e-6)


def test_a_value_written_in_place_by_an_unplanned_node_gets_no_slot():
    @tf.function
    def f(x):
        h = tf.exp(tf.abs(x) + 1.0) * 2.0      # a chain of in-place kernels, returned
        return h, tf.reduce_sum(h)

    x = tf.constant(np.ones((4, 4), np.float32))
    f(x)
    g = f.get_concrete_function(x).graph
    p = plan(g)
    if p is not None:
        slotted = {o for i in p.node_slot for o in g.nodes[i].outputs}
        for n in g.nodes:
            pos = graph_passes.written_input(n)
            if pos is not None and g.nodes.index(n) not in p.node_slot:
                assert n.inputs[pos] not in slotted, n


def test_results_of_two_threads_are_their_own():
    w = tf.constant(np.eye(8, dtype=np.float32) * 0.5)

    @tf.function(passes=("reuse",))
    def f(x):
        h = tf.exp(tf.tanh(x) + 1.0) * 2.0
        return h, tf.matmul(w, h)

    f(tf.constant(np.zeros((8, 8), np.float32)))
    errors = []

    def worker(k):
        rows = []
        for i in range(200):
            v = np.full((8, 8), (k * 200 + i) % 7 * 0.1, np.float32)
            rows.append((v, f(tf.constant(v))))
        for v, (h, m) in rows:
            e = np.exp(np.tanh(v) + 1.0) * 2.0
            if not (np.allclose(h.numpy(), e, rtol=1e-5)
                    and np.allclose(m.numpy(), 0.5 * e, rtol=1e-5)):
                errors.append((k, v[0, 0]))
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]


def test_an_in_place_kernel_declines_a_buffer_another_local_still_holds():
    # the run-time check counts the references of the replay's one local: a second
    # holder (here the caller of the kernel) makes it allocate
    k = graph_passes._inplace_ufunc(np.add, 0, 2, graph_passes._BUDGET)
    a = np.ones(3)
    keep = a                                  # noqa: F841 -- a second reference
    out = k(a, np.ones(3))
    assert out is not a and a.tolist() == [1.0, 1.0, 1.0]
