"""``tf.saved_model``: save an object -- its Variables and the traced graphs of its
``tf.function`` s -- as a self-describing directory, and load it back in a fresh
process without the Python class that made it (the format: docs/saved_model.md).

* :func:`save` (``tapeflow.saved_model.writer``) writes ``saved_model.json`` (a
  versioned manifest: the object graph, every concrete function's inputs, outputs
  and graph, the signatures), ``constants.bin`` (the graphs' constants) and
  ``variables/`` (the Variables, in the checkpoint format);
* :func:`load` (``tapeflow.saved_model.loader``) validates all of it before building
  anything, then rebuilds the objects; restored functions run the saved graphs through
  ``tf.function`` (fast, differentiable, on the device of the ``tf.device`` scope
  around ``load``).

No pickle and no Python code in the format: a crafted directory gets a
``DataLossError``, never code execution.

>>> import os, tempfile
>>> import tapeflow as tf
>>> class Model:
...     def __init__(self):
...         self.w = tf.Variable([[1.0], [2.0]])
...     @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
...     def predict(self, x):
...         return tf.matmul(x, self.w)
>>> path = os.path.join(tempfile.mkdtemp(), "model")
>>> tf.saved_model.save(Model(), path)
>>> loaded = tf.saved_model.load(path)
>>> print(loaded.predict(tf.constant([[1.0, 1.0]])).numpy())
[[3.]]
>>> with tf.GradientTape() as tape:
...     y = tf.reduce_sum(loaded.predict(tf.constant([[1.0, 3.0]])))
>>> print(tape.gradient(y, loaded.w).numpy().ravel())
[1. 3.]
"""

import os

from .loader import LoadOptions, load
from .writer import SaveOptions, save

#: the tag of a serving graph (TensorFlow's; tapeflow writes one graph and ignores tags)
SERVING = "serve"
TRAINING = "train"
GPU = "gpu"
TPU = "tpu"
#: the key of the signature served by default
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"
#: the names TensorFlow's SignatureDefs use for a classifier, regressor and predictor
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
PREDICT_METHOD_NAME = "tensorflow/serving/predict"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"
#: the manifest's file name in a SavedModel directory
SAVED_MODEL_FILENAME_JSON = "saved_model.json"
VARIABLES_DIRECTORY = "variables"
ASSETS_DIRECTORY = "assets"


def contains_saved_model(export_dir):
    """Whether ``export_dir`` holds a SavedModel (a tapeflow manifest)."""
    return os.path.isfile(os.path.join(os.fspath(export_dir), SAVED_MODEL_FILENAME_JSON))


__all__ = ["save", "load", "SaveOptions", "LoadOptions", "contains_saved_model", "SERVING",
           "TRAINING", "GPU", "TPU", "DEFAULT_SERVING_SIGNATURE_DEF_KEY",
           "CLASSIFY_METHOD_NAME", "PREDICT_METHOD_NAME", "REGRESS_METHOD_NAME",
           "SAVED_MODEL_FILENAME_JSON", "VARIABLES_DIRECTORY", "ASSETS_DIRECTORY"]
