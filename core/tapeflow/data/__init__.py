"""``tf.data``: input pipelines (``Dataset``) and the seeds' ``tfe.Iterator``.

>>> import tapeflow as tf
>>> tfe = tf
>>> ds = tf.data.Dataset.from_tensor_slices(([1., 2., 3.], [0, 1, 0])).batch(2)
>>> for x, y in tfe.Iterator(ds):
...     print(x.numpy(), y.numpy())
[1. 2.] [0 1]
[3.] [0]
"""

from __future__ import annotations

import types as _types

from .dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset, Iterator
from .text import CsvDataset, TextLineDataset, make_csv_dataset
from .example import TFRecordDataset


def _cardinality(dataset):
    return dataset.cardinality()


def _dense_to_ragged_batch(batch_size, drop_remainder=False, row_splits_dtype="int64"):
    """``dataset.apply(tf.data.experimental.dense_to_ragged_batch(n))``: ``ragged_batch``."""
    return lambda dataset: dataset.ragged_batch(batch_size, drop_remainder, row_splits_dtype)


#: ``tf.data.experimental.AUTOTUNE`` / ``cardinality`` (TF 1.x/2.x names)
experimental = _types.SimpleNamespace(AUTOTUNE=AUTOTUNE, cardinality=_cardinality,
                                      CsvDataset=CsvDataset, make_csv_dataset=make_csv_dataset,
                                      dense_to_ragged_batch=_dense_to_ragged_batch,
                                      INFINITE_CARDINALITY=INFINITE_CARDINALITY,
                                      UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY)

__all__ = ["Dataset", "Iterator", "TextLineDataset", "AUTOTUNE", "INFINITE_CARDINALITY",
           "UNKNOWN_CARDINALITY", "experimental", "TFRecordDataset"]
