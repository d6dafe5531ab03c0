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


def _cardinality(dataset):
    return dataset.cardinality()


#: ``tf.data.experimental.AUTOTUNE`` / ``cardinality`` (TF 1.x/2.x names)
experimental = _types.SimpleNamespace(AUTOTUNE=AUTOTUNE, cardinality=_cardinality,
                                      INFINITE_CARDINALITY=INFINITE_CARDINALITY,
                                      UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY)

__all__ = ["Dataset", "Iterator", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY",
           "experimental"]
