"""``tf.summary.trace_on`` / ``trace_export``: the graphs of the functions traced in between,
written as a GraphDef event that TensorBoard's graph dashboard reads."""

import pytest

import tapeflow as tf

pytest.importorskip("tensorboardX")


class Dense(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones([3, 2]), name="w")

    @tf.function
    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w))


def _graphs(logdir):
    from tensorboardX.proto import graph_pb2
    out = []
    for e in tf.summary.events_from_logdir(logdir):
        if e.graph_def:
            g = graph_pb2.GraphDef()
            g.ParseFromString(e.graph_def)
            out.append((e.step, g))
    return out


def test_the_functions_traced_between_on_and_export_are_written(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    tf.summary.trace_on(graph=True)
    y = Dense()(tf.constant([[1.0, 2.0, 3.0]]))
    with writer.as_default():
        assert tf.summary.trace_export(name="my_func_trace", step=3) is True
    writer.flush()
    assert y.numpy().tolist() == [[6.0, 6.0]]
    [(step, g)] = _graphs(tmp_path)
    assert step == 3
    names = {n.name: n for n in g.node}
    assert all(n.startswith("my_func_trace/") for n in names)
    ops = {n.op for n in g.node}
    assert "Placeholder" in ops and "Identity" in ops
    for n in g.node:                       # every input names a node of the graph
        for i in n.input:
            assert i.split(":")[0] in names, (n.name, i)


def test_nothing_is_collected_after_export_or_off_and_a_retrace_is_needed(tmp_path):
    f = tf.function(lambda x: x * 2.0)
    f(tf.constant(1.0))                    # traced before trace_on: not collected
    tf.summary.trace_on(graph=True)
    f(tf.constant(2.0))                    # the same trace: nothing new
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        tf.summary.trace_export("t", step=0)
    writer.flush()
    assert [len(g.node) for _, g in _graphs(tmp_path)] in ([], [0])      # an empty graph
    tf.summary.trace_on(graph=True)
    tf.summary.trace_off()
    tf.function(lambda x: x + 1.0)(tf.constant(1.0))
    assert tf.summary.trace_export("t2", step=1) is False     # no default writer either


def test_tensorboard_reads_the_graph(tmp_path):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    writer = tf.summary.create_file_writer(str(tmp_path))
    tf.summary.trace_on(graph=True)
    Dense()(tf.constant([[1.0, 2.0, 3.0]]))
    with writer.as_default():
        tf.summary.trace_export(name="dense", step=0)
    writer.close()
    acc = ea_mod.EventAccumulator(str(tmp_path))
    acc.Reload()
    graph = acc.Graph()
    assert any(n.op == "MatMul" for n in graph.node)
