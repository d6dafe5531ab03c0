"""Conformance specs of random ops: ``check`` validates shape, dtype, range and
moments of each draw and that seeded draws reproduce (the op-level seed and the
global seed), on the device the draw was made on."""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.testing.opinfo import ErrorSample, OpSpec, Sample

_MOMENT_SAMPLES = 4000


def _host(out):
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out)


def _device_of(out):
    """The device of ``out`` when it is a tensor; the harness hands ``check`` host
    arrays, and then the reproducibility draws run on the default device."""
    # (NumPy 2 arrays have .device == "cpu" too: only a Tensor's device counts)
    return out.device if isinstance(out, tf.Tensor) else None


def _reproducible(fn, args, kwargs, device):
    """Same global seed -> same sequence; same op seed -> same sequence; and two
    consecutive draws differ."""
    import contextlib
    saved = tf.random.STATE.global_seed
    try:
        with tf.device(device) if device else contextlib.nullcontext():
            tf.random.set_seed(1234)
            a1, a2 = _host(fn(*args, **kwargs)), _host(fn(*args, **kwargs))
            tf.random.set_seed(1234)
            b1, b2 = _host(fn(*args, **kwargs)), _host(fn(*args, **kwargs))
            tf.random.set_seed(None)
            kw = dict(kwargs, seed=99)
            c1, c2 = _host(fn(*args, **kw)), _host(fn(*args, **kw))
            tf.random.set_seed(None)
            d1, d2 = _host(fn(*args, **kw)), _host(fn(*args, **kw))
    finally:
        tf.random.set_seed(saved)
    assert np.array_equal(a1, b1) and np.array_equal(a2, b2), "global seed does not reproduce"
    assert np.array_equal(c1, d1) and np.array_equal(c2, d2), "op seed does not reproduce"
    if a1.size >= 8 and np.unique(a1).size > 1:
        assert not np.array_equal(a1, a2), "consecutive seeded draws must differ"
        assert not np.array_equal(c1, c2), "consecutive draws with one op seed must differ"


def _shape_dtype(out, shape, dtype):
    o = _host(out)
    want = tuple([shape] if isinstance(shape, int) else shape)
    assert o.shape == want, f"shape {o.shape}, expected {want}"
    dt = tf.as_dtype(dtype)
    assert o.dtype == dt.np, f"dtype {o.dtype}, expected {dt.name}"
    return o.astype(np.float64)


def _moments(o, mean, std):
    n = o.size
    assert abs(o.mean() - mean) < 6 * std / np.sqrt(n) + 1e-3 * abs(mean), \
        f"mean {o.mean()} vs {mean}"
    assert abs(o.std() - std) < 0.08 * std + 1e-3, f"std {o.std()} vs {std}"


def check_normal(out, shape, mean=0.0, stddev=1.0, dtype=tf.float32, seed=None):
    o = _shape_dtype(out, shape, dtype)
    assert np.isfinite(o).all()
    if o.size >= 1000:
        _moments(o, mean, stddev)
    _reproducible(tf.random.normal, (shape,),
                  {"mean": mean, "stddev": stddev, "dtype": dtype}, _device_of(out))
    return True


def check_truncated(out, shape, mean=0.0, stddev=1.0, dtype=tf.float32, seed=None):
    o = _shape_dtype(out, shape, dtype)
    tol = 2e-3 * abs(stddev) + 1e-3 * abs(mean)
    assert (np.abs(o - mean) <= 2 * stddev + tol).all(), "values beyond 2 stddev"
    if o.size >= 1000:
        _moments(o, mean, 0.87962566 * stddev)   # std of N(0,1) truncated to [-2, 2]
    _reproducible(tf.random.truncated_normal, (shape,),
                  {"mean": mean, "stddev": stddev, "dtype": dtype}, _device_of(out))
    return True


def check_uniform(out, shape, minval=0, maxval=None, dtype=tf.float32, seed=None):
    o = _shape_dtype(out, shape, dtype)
    hi = 1.0 if maxval is None else maxval
    assert (o >= minval).all() and (o < hi).all(), f"values outside [{minval}, {hi})"
    if o.size >= 1000:
        if tf.as_dtype(dtype).is_integer:
            k = hi - minval
            counts = np.bincount((o - minval).astype(np.int64), minlength=k)
            assert counts.min() > 0.7 * o.size / k, counts
        else:
            _moments(o, (minval + hi) / 2, (hi - minval) / np.sqrt(12))
    _reproducible(tf.random.uniform, (shape,),
                  {"minval": minval, "maxval": maxval, "dtype": dtype}, _device_of(out))
    return True


def check_shuffle(out, value, seed=None):
    o = _host(out)
    v = np.asarray(value)
    assert o.shape == v.shape and o.dtype == v.dtype
    # a permutation of the rows
    key = lambda a: sorted(map(lambda r: np.asarray(r).tobytes(), a))  # noqa: E731
    assert key(o) == key(v), "shuffle must permute the rows"
    _reproducible(tf.random.shuffle, (tf.constant(value),), {}, _device_of(out))
    return True


def _normal_samples(dt, rng):
    return [Sample(([_MOMENT_SAMPLES],), {"dtype": dt}, name="standard"),
            Sample(([50, 80],), {"mean": 3.0, "stddev": 0.5, "dtype": dt, "seed": 5},
                   name="mean_std"),
            Sample(([0, 3],), {"dtype": dt}, name="empty"),
            Sample(([3],), {"dtype": dt, "seed": 1}, name="odd")]


def _uniform_samples(dt, rng):
    return [Sample(([_MOMENT_SAMPLES],), {"dtype": dt}, name="unit"),
            Sample(([40, 100],), {"minval": -2.0, "maxval": 3.0, "dtype": dt, "seed": 2},
                   name="range"),
            Sample(([],), {"dtype": dt}, name="scalar")]


def _uniform_int_samples(dt, rng):
    return [Sample(([_MOMENT_SAMPLES],), {"minval": -3, "maxval": 7, "dtype": dt},
                   name="range"),
            Sample(([5, 3],), {"maxval": 2, "dtype": dt, "seed": 4}, name="small")]


def _shuffle_samples(dt, rng):
    if dt.is_bool:
        v = rng.integers(0, 2, (12,)).astype(bool)
    else:
        v = np.arange(24).reshape(12, 2).astype(dt.np)
    return [Sample((v,), name="rows"), Sample((v[:1],), {"seed": 3}, name="one")]


SPECS = [
    OpSpec("random.normal", tf.random.normal, check_normal, _normal_samples,
           op="RandomStandardNormal", grad_order=0, check=check_normal,
           errors=[ErrorSample(([2],), {"dtype": tf.int32}, InvalidArgumentError,
                               "floating point", name="int_dtype")]),
    OpSpec("random.truncated_normal", tf.random.truncated_normal, check_truncated,
           _normal_samples, op="TruncatedNormal", grad_order=0, check=check_truncated),
    OpSpec("random.uniform", tf.random.uniform, check_uniform, _uniform_samples,
           op="RandomUniform", grad_order=0, check=check_uniform,
           errors=[ErrorSample(([2],), {"dtype": tf.int32}, InvalidArgumentError,
                               "maxval", name="int_needs_maxval"),
                   ErrorSample(([-1, 2],), {}, InvalidArgumentError, "non-negative",
                               name="negative_shape")]),
    OpSpec("random.uniform_int", tf.random.uniform, check_uniform, _uniform_int_samples,
           op="RandomUniformInt", grad_order=0, check=check_uniform),
    OpSpec("random.shuffle", tf.random.shuffle, check_shuffle, _shuffle_samples,
           op="RandomShuffle", grad_order=0, check=check_shuffle),
]
