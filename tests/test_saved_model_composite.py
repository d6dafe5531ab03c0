"""SavedModels whose functions take and return composite tensors (RaggedTensor,
SparseTensor): the manifest names their TypeSpec (a registered class and its arguments),
the restored function takes the composite value and returns composites; a manifest that
names an unknown type is refused without importing or calling anything."""

import json
import os

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.ops.composite import TypeSpec
from tapeflow.saved_model import writer


class _Grow(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(100.0)

    @tf.function
    def grow(self, x):
        return x * self.v


@pytest.fixture
def ragged_dir(tmp_path):
    m = _Grow()
    m.grow.get_concrete_function(tf.RaggedTensorSpec(shape=[None, None], dtype=tf.float32))
    tf.saved_model.save(m, str(tmp_path))
    return str(tmp_path)


def test_ragged_in_ragged_out(ragged_dir):
    loaded = tf.saved_model.load(ragged_dir)
    out = loaded.grow(tf.ragged.constant([[1.0, 4.0, 3.0], [2.0]]))
    assert isinstance(out, tf.RaggedTensor)
    assert out.to_list() == [[100.0, 400.0, 300.0], [200.0]]
    out = loaded.grow(tf.ragged.constant([[1.0], [], [2.0, 3.0]]))      # other row lengths
    assert out.to_list() == [[100.0], [], [200.0, 300.0]]
    (spec,), _ = loaded.grow.concrete_functions[0].structured_input_signature
    assert spec == tf.RaggedTensorSpec(shape=[None, None], dtype=tf.float32)
    with open(os.path.join(ragged_dir, "saved_model.json")) as f:
        assert '"$typespec"' in f.read()
    with pytest.raises(tf.errors.InvalidArgumentError, match="no saved concrete function"):
        loaded.grow(tf.ragged.constant([[1, 2]]))                  # int32: not saved


def test_sparse_in_sparse_and_dense_out(tmp_path):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[1.0], [2.0], [3.0]])

        @tf.function(input_signature=[tf.SparseTensorSpec([2, 3], tf.float32)])
        def f(self, st):
            return {"scaled": st.with_values(st.values * 2.0),
                    "product": tf.sparse.sparse_dense_matmul(st, self.w)}

    tf.saved_model.save(M(), str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    st = tf.sparse.SparseTensor([[0, 1], [1, 2]], [1.0, 5.0], [2, 3])
    out = loaded.f(st)
    assert isinstance(out["scaled"], tf.SparseTensor)
    np.testing.assert_array_equal(tf.sparse.to_dense(out["scaled"]).numpy(),
                                  [[0, 2, 0], [0, 0, 10]])
    np.testing.assert_array_equal(out["product"].numpy(), [[2.0], [15.0]])
    with pytest.raises(tf.errors.InvalidArgumentError):
        loaded.f(tf.sparse.SparseTensor([[0, 1]], [1.0], [2, 4]))        # 4 columns


def _edit_specs(export_dir, fn):
    """Rewrites each ``$typespec`` entry of the manifest with ``fn``."""
    path = os.path.join(export_dir, "saved_model.json")
    with open(path) as f:
        m = json.load(f)

    def walk(x):
        if isinstance(x, dict):
            if "$typespec" in x:
                x["$typespec"] = fn(x["$typespec"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(m)
    with open(path, "w") as f:
        json.dump(m, f)


def test_unknown_type_spec_is_refused_not_imported(ragged_dir):
    _edit_specs(ragged_dir, lambda e: ["os.system", e[1]])
    with pytest.raises(tf.errors.DataLossError, match="unknown composite type 'os.system'"):
        tf.saved_model.load(ragged_dir)


def test_bad_type_spec_arguments_are_refused(ragged_dir):
    _edit_specs(ragged_dir, lambda e: [e[0], {"$tuple": ["not a shape", {"$dtype": "float32"},
                                                        "x", 1]}])
    with pytest.raises(tf.errors.DataLossError, match="bad RaggedTensorSpec arguments"):
        tf.saved_model.load(ragged_dir)


def test_unregistered_type_spec_cannot_be_saved():
    class OtherSpec(TypeSpec):
        def _serialize(self):
            return ()

    with pytest.raises(tf.errors.InvalidArgumentError, match="register_type_spec"):
        writer.encode_value(OtherSpec(), "an argument")
    with pytest.raises(tf.errors.InvalidTypeError):
        writer.register_type_spec(int, lambda s: ())


def test_returned_composite_without_its_spec_is_refused(ragged_dir):
    path = os.path.join(ragged_dir, "saved_model.json")
    with open(path) as f:
        m = json.load(f)
    for fn in m["functions"].values():
        for o in fn["outputs"]:
            if "value" in o:
                o["value"] = 3                          # a number where the TypeSpec goes
    with open(path, "w") as f:
        json.dump(m, f)
    with pytest.raises(tf.errors.DataLossError, match="without its TypeSpec"):
        tf.saved_model.load(ragged_dir)


def test_huge_ragged_rank_in_a_manifest_is_refused_quickly(ragged_dir):
    _edit_specs(ragged_dir, lambda e: [e[0], {"$tuple": [None, {"$dtype": "float32"},
                                                        10 ** 7, {"$dtype": "int64"}]}])
    with pytest.raises(tf.errors.DataLossError, match="at most 64"):
        tf.saved_model.load(ragged_dir)


class _RowSums(tf.Module):
    @tf.function(input_signature=[tf.RaggedTensorSpec(shape=[None, None], dtype=tf.float32)])
    def f(self, x):
        return tf.reduce_sum(x, axis=1)


def test_ragged_spec_signature_traces_a_valid_placeholder(tmp_path):
    m = _RowSums()
    cf = m.f.get_concrete_function()
    rt = tf.ragged.constant([[1.0, 2.0], [3.0]])
    np.testing.assert_allclose(cf(rt).numpy(), [3.0, 3.0])
    tf.saved_model.save(m, str(tmp_path), signatures=m.f)
    loaded = tf.saved_model.load(str(tmp_path))
    assert "serving_default" in loaded.signatures


def test_sparse_spec_placeholder_is_empty_and_valid():
    spec = tf.SparseTensorSpec([None, 3], tf.float32)
    indices, values, dense_shape = spec.placeholder_components()
    assert tuple(indices.shape) == (0, 2) and tuple(values.shape) == (0,)
    assert dense_shape.numpy().tolist() == [1, 3]
    f = tf.function(lambda s: s.values * 2.0,
                    input_signature=[tf.SparseTensorSpec([None, 3], tf.float32)])
    st = tf.sparse.SparseTensor([[0, 1], [1, 2]], [1.0, 2.0], [2, 3])
    np.testing.assert_allclose(f.get_concrete_function()(st).numpy(), [2.0, 4.0])
