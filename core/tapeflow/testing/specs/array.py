"""Conformance specs of the ops that make tensors and change their shape
(``tapeflow.array``): the creation ops (``fill``, ``zeros``, ``ones``, ``zeros_like``,
``ones_like``, ``range``, ``eye``, ``linspace``, ``one_hot``), the random draws
(``random_normal``, ``truncated_normal``, ``random_uniform``, ``random_shuffle``) and
the shape ops: reshaping, joining and splitting, tiling and padding, slicing
(``slice``, ``strided_slice``, ``[]``), ``shape``/``size``/``rank``, ``identity`` and
``stop_gradient``. Selection, gather/scatter, sorting and scans are in
``specs/selection.py``.

Each creation op gets a typical sample, a 0-d or size-0 one where it applies, and
every dtype its kernel declares (the ``dtype`` argument follows the case dtype); they
have no gradient (``grad_order=0``). Random ops are validated by ``check``: shape,
dtype, range and moments of each draw, and that seeded draws reproduce (the op-level
seed and the global seed), on the device the draw was made on. Every shape op gets a
typical sample, a 0-d one where the op accepts scalars, a size-0 one and negative
axes; gradients (float64) are checked to second order w.r.t. the float arguments,
index arguments are never differentiated. Error samples pin the TensorFlow-style
messages (``Requires delta != 0``, ``slice index 5 of dimension 0 out of bounds``...).
"""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.kernels.random import RandomKernels, philox4x32   # (stateless refs)

from . import _F32, ErrorSample, OpSpec, Sample, _err, _i32, _npd, _scalar_of, _vals


# --- creation -----------------------------------------------------------------------------

def _fill_samples(dtype, rng):
    v = _scalar_of(dtype)
    out = [Sample(((2, 3), v), {"dtype": dtype}, name="typical"),
           Sample(((), v), {"dtype": dtype}, name="scalar"),
           Sample(((0, 4), v), {"dtype": dtype}, name="empty")]
    if dtype is tf.int32:
        out.append(Sample(((2,), 7), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample(((2, 1), 2.5), name="inferred_float32"))
    return out


def _fill_ref(dims, value, dtype=None):
    if dtype is None:
        dtype = np.float32 if isinstance(value, float) else np.int32
    return np.full(dims, value, dtype=_npd(dtype))


def _const_samples(dtype, rng):
    return [Sample(((2, 3),), {"dtype": dtype}, name="typical"),
            Sample(((),), {"dtype": dtype}, name="scalar"),
            Sample(([0, 4],), {"dtype": dtype}, name="empty")]


def _like_samples(dtype, rng):
    out = [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
           Sample((_vals(rng, (), dtype),), name="scalar"),
           Sample((_vals(rng, (0, 3), dtype),), name="empty")]
    if dtype is not tf.float64:
        out.append(Sample((_vals(rng, (2,), dtype),), {"dtype": tf.float64}, name="cast_dtype"))
    return out


def _like_ref(fill):
    def ref(x, dtype=None):
        return np.full(x.shape, fill, dtype=x.dtype if dtype is None else _npd(dtype))
    return ref


def _range_samples(dtype, rng):
    out = [Sample((0, 10, 3), {"dtype": dtype}, name="typical"),
           Sample((5, -2, -2), {"dtype": dtype}, name="negative_delta"),
           Sample((3, 3, 1), {"dtype": dtype}, name="empty"),
           Sample((7,), {"dtype": dtype}, name="limit_only")]
    if dtype.is_floating:
        out.append(Sample((0.5, 2.0, 0.25), {"dtype": dtype}, name="fractional"))
    if dtype is tf.int32:
        out.append(Sample((5,), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample((1, 2, 0.25), name="inferred_float32"))
    return out


def _range_ref(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        dtype = np.float32 if any(isinstance(v, float) for v in (start, limit, delta)) \
            else np.int32
    return np.arange(start, limit, delta, dtype=_npd(dtype))


def _eye_samples(dtype, rng):
    return [Sample((3,), {"dtype": dtype}, name="square"),
            Sample((2, 4), {"dtype": dtype}, name="wide"),
            Sample((3, 2, [2]), {"dtype": dtype}, name="batch"),
            Sample((0,), {"dtype": dtype}, name="empty")]


def _eye_ref(num_rows, num_columns=None, batch_shape=None, dtype=tf.float32):
    e = np.eye(num_rows, num_columns, dtype=_npd(dtype))
    return np.broadcast_to(e, tuple(batch_shape or ()) + e.shape)


def _linspace_samples(dtype, rng):
    d = _npd(dtype)
    return [Sample((np.asarray(0.0, d), 1.0, 5), name="typical"),
            Sample((np.asarray(2.0, d), -1.0, 4), name="decreasing"),
            Sample((np.asarray(1.5, d), 3.0, 1), name="one"),
            Sample((np.asarray(0.0, d), 1.0, 0), name="empty")]


def _linspace_ref(start, stop, num):
    return np.linspace(start, stop, num, dtype=start.dtype)


def _one_hot_samples(dtype, rng):
    d = _npd(dtype)
    on, off = ((True, False) if d.kind == "b" else (2.5, -1.0) if d.kind == "f" else (3, 1))
    ind = _i32([0, 2, -1, 5, 1])
    return [Sample((ind, 3), {"dtype": dtype}, name="typical"),
            Sample((ind.reshape(5, 1), 4), {"dtype": dtype, "on_value": on, "off_value": off,
                                            "axis": 0}, name="axis0"),
            Sample((ind.reshape(1, 5).astype(np.int64), 3),
                   {"dtype": dtype, "axis": 1}, name="axis1_int64"),
            Sample((np.array(1, np.int32), 3), {"dtype": dtype}, name="scalar"),
            Sample((np.zeros((0,), np.int32), 3), {"dtype": dtype}, name="empty")]


def _one_hot_ref(indices, depth, on_value=None, off_value=None, axis=None, dtype=None):
    d = _npd(dtype or np.float32)
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on).astype(d), np.asarray(off).astype(d)).astype(d)
    if axis not in (None, -1):
        out = np.moveaxis(out, -1, axis)
    return out


_CREATION_SPECS = [
    OpSpec(name="fill", fn=tf.fill, ref=_fill_ref, op="Fill", samples=_fill_samples,
           grad_order=0,
           errors=[_err(((2,), [1, 2]), "fill value must be a scalar", name="non_scalar")]),
    OpSpec(name="zeros", fn=tf.zeros, ref=lambda shape, dtype: np.zeros(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0,
           errors=[_err(((2, None),), "shape must be", name="bad_shape")]),
    OpSpec(name="ones", fn=tf.ones, ref=lambda shape, dtype: np.ones(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0),
    OpSpec(name="zeros_like", fn=tf.zeros_like, ref=_like_ref(0), op="ZerosLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="ones_like", fn=tf.ones_like, ref=_like_ref(1), op="OnesLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="range", fn=tf.range, ref=_range_ref, op="Range", samples=_range_samples,
           grad_order=0,
           errors=[_err((0, 5, 0), "Requires delta != 0", name="zero_delta"),
                   _err((5, 0, 1), "Requires start <= limit when delta > 0", name="direction")]),
    OpSpec(name="eye", fn=tf.eye, ref=_eye_ref, op="Eye", samples=_eye_samples, grad_order=0,
           errors=[_err((-1,), "non-negative", name="negative")]),
    OpSpec(name="linspace", fn=tf.linspace, ref=_linspace_ref, op="LinSpace",
           samples=_linspace_samples, grad_order=0,
           errors=[_err((0.0, 1.0, -1), "Requires num >= 0", name="negative_num")]),
    OpSpec(name="one_hot", fn=tf.one_hot, ref=_one_hot_ref, op="OneHot",
           samples=_one_hot_samples, grad_order=0,
           errors=[_err((_i32([0, 1]), 3), "axis 3 is out of range", {"axis": 3},
                        name="bad_axis")]),
]


# --- random draws -------------------------------------------------------------------------

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


_RANDOM_SPECS = [
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



# --- TensorFlow 2's stateless random ops: every backend gives the NumPy kernel's numbers ----

def _philox_state(seed):
    """The Philox state of a stateless op's seed, in NumPy (TensorFlow's scrambling)."""
    s = np.asarray(seed).astype(np.int64).view(np.uint64)
    key = np.array(tf.random.SEED_SCRAMBLE_KEY, np.uint64)
    w = [int(x) for x in philox4x32(np, s[0], s[1], key)]
    return np.array([0, w[2] | w[3] << 32, w[0] | w[1] << 32], np.uint64).view(np.int64)


def _stateless_ref(kind):
    def ref(shape, seed, minval=0, maxval=None, mean=0.0, stddev=1.0, dtype=tf.float32):
        k, st, dt = RandomKernels(np), _philox_state(seed), tf.as_dtype(dtype)
        shape = tuple(shape)
        if kind == "int":
            return k.stateless_uniform_int(st, shape, dt, minval, maxval)
        if kind == "full":
            return k.stateless_uniform_full_int(st, shape, dt)
        z = {"uniform": k.stateless_uniform, "normal": k.stateless_normal,
             "truncated": k.stateless_truncated_normal}[kind](st, shape, dt).astype(np.float64)
        if kind == "uniform":
            return z * ((1.0 if maxval is None else maxval) - minval) + minval
        return z * stddev + mean
    return ref


def _stateless_samples(kind):
    def samples(dt, rng):
        seed = np.array([int(rng.integers(-2**31, 2**31)), 7], np.int64)
        kw = {"dtype": dt}
        if kind == "int":
            kw.update(minval=-5, maxval=1000)
        elif kind == "full":
            kw.update(minval=None, maxval=None)
        out = [Sample(([5, 3], seed), dict(kw), name="odd"),
               Sample(([], np.array([1, 2], np.int32)), dict(kw), name="scalar"),
               Sample(([0, 2], seed), dict(kw), name="empty")]
        if kind in ("uniform", "normal", "truncated"):
            extra = {"minval": -2.0, "maxval": 3.0} if kind == "uniform" else \
                {"mean": 1.0, "stddev": 0.5}
            out.append(Sample(([9], seed), dict(kw, **extra), name="affine"))
        return out
    return samples


def _stateless_spec(kind, fn, op, **kw):
    return OpSpec(f"random.stateless_{kind}", fn, _stateless_ref(kind),
                  _stateless_samples(kind), op=op, grad_order=0,
                  # log/sin/cos are the device's: the last bits of normals may differ
                  tol={"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-12)}, **kw)


_STATELESS_SPECS = [
    _stateless_spec("uniform", tf.random.stateless_uniform, "StatelessRandomUniformV2",
                    errors=[_err(([2], np.array([1, 2, 3])), "seed must be",
                                 name="seed_shape")]),
    _stateless_spec("normal", tf.random.stateless_normal, "StatelessRandomNormalV2"),
    _stateless_spec("truncated", tf.random.stateless_truncated_normal,
                    "StatelessTruncatedNormalV2"),
    _stateless_spec("int", tf.random.stateless_uniform, "StatelessRandomUniformIntV2"),
    _stateless_spec("full", tf.random.stateless_uniform, "StatelessRandomUniformFullIntV2"),
]

# --- shapes -------------------------------------------------------------------------------

def _reshape_samples(dtype, rng):
    x = _vals(rng, (2, 3, 4), dtype)
    return [Sample((x, (6, 4)), name="merge"),
            Sample((x, [4, -1]), name="infer"),
            Sample((x[:1, :1, :1], ()), name="to_scalar"),
            Sample((_vals(rng, (), dtype), (1, 1)), name="from_scalar"),
            Sample((x[:0], (0, 5)), name="empty")]


def _transpose_samples(dtype, rng):
    x = _vals(rng, (2, 3, 4), dtype)
    return [Sample((x,), name="reverse"),
            Sample((x, (1, 0, 2)), name="perm"),
            Sample((x, [-1, 0, 1]), name="negative_perm"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3), dtype), (1, 0)), name="empty")]


def _transpose_ref(a, perm=None):
    return np.transpose(a, perm)


def _expand_dims_samples(dtype, rng):
    x = _vals(rng, (2, 3), dtype)
    return [Sample((x, 0), name="front"), Sample((x, -1), name="back"),
            Sample((x, 1), name="middle"), Sample((_vals(rng, (), dtype), 0), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype), -2), name="empty")]


def _squeeze_samples(dtype, rng):
    x = _vals(rng, (1, 3, 1, 2), dtype)
    return [Sample((x,), name="all"), Sample((x, 2), name="one"),
            Sample((x, [0, -2]), name="list_negative"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 1), dtype), 1), name="empty")]


def _squeeze_ref(x, axis=None):
    return np.squeeze(x, axis=tuple(axis) if isinstance(axis, list) else axis)


def _concat_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(2, 3), v(2, 1), v(2, 2)), {"axis": 1}, name="three"),
            Sample((v(1, 3), v(2, 3)), {"axis": -2}, name="negative_axis"),
            Sample((v(0, 3), v(2, 3)), {"axis": 0}, name="empty_piece"),
            Sample((v(4), v(2)), {"axis": 0}, name="vectors"),
            Sample((v(2, 2),), {"axis": 1}, name="single")]


def _concat_fn(*xs, axis):
    return tf.concat(list(xs), axis=axis)


def _concat_ref(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _stack_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(2, 3), v(2, 3), v(2, 3)), {"axis": 0}, name="axis0"),
            Sample((v(2, 3), v(2, 3)), {"axis": -1}, name="last"),
            Sample((v(), v(), v()), {"axis": 0}, name="scalars"),
            Sample((v(0, 3), v(0, 3)), {"axis": 1}, name="empty")]


def _stack_fn(*xs, axis=0):
    return tf.stack(list(xs), axis=axis)


def _stack_ref(*xs, axis=0):
    return np.stack(xs, axis=axis)


def _unstack_samples(dtype, rng):
    return [Sample((_vals(rng, (3, 2), dtype),), name="axis0"),
            Sample((_vals(rng, (2, 3, 2), dtype),), {"axis": -1}, name="last"),
            Sample((_vals(rng, (4,), dtype),), name="to_scalars"),
            Sample((_vals(rng, (2, 0, 3), dtype),), {"axis": 1}, grad_argnums=(), name="empty")]


def _unstack_fn(x, axis=0):
    return tf.unstack(x, axis=axis)


def _unstack_ref(x, axis=0):
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _split_samples(dtype, rng):
    x = _vals(rng, (6, 4), dtype)
    return [Sample((x, 3), name="even"),
            Sample((x, [1, -1, 2]), name="sizes_infer"),
            Sample((x, [1, 3]), {"axis": -1}, name="negative_axis"),
            Sample((x, [0, 6]), name="empty_piece"),
            Sample((_vals(rng, (0, 4), dtype), 2, 1), name="empty")]


def _split_ref(x, n, axis=0):
    if isinstance(n, int):
        return list(np.split(x, n, axis))
    sizes = list(n)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return list(np.split(x, np.cumsum(sizes)[:-1], axis))


def _tile_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype), [2, 1]), name="typical"),
            Sample((_vals(rng, (2, 1, 2), dtype), (1, 3, 2)), name="rank3"),
            Sample((_vals(rng, (), dtype), []), name="scalar"),
            Sample((_vals(rng, (2, 3), dtype), [1, 0]), name="empty")]


def _broadcast_to_samples(dtype, rng):
    return [Sample((_vals(rng, (3, 1), dtype), (2, 3, 4)), name="typical"),
            Sample((_vals(rng, (), dtype), [2, 2]), name="scalar"),
            Sample((_vals(rng, (1, 3), dtype), (0, 3)), name="empty")]


def _pad_samples(dtype, rng):
    cv = _scalar_of(dtype)
    return [Sample((_vals(rng, (2, 3), dtype), [[1, 0], [2, 1]]), name="typical"),
            Sample((_vals(rng, (2, 3), dtype), [[0, 1], [1, 1]]), {"constant_values": cv},
                   name="constant_values"),
            Sample((_vals(rng, (), dtype), np.zeros((0, 2), np.int32)), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype), [[1, 1], [0, 2]]), name="empty")]


def _pad_ref(x, paddings, mode="CONSTANT", constant_values=0):
    p = np.asarray(paddings).reshape(-1, 2)
    if x.ndim == 0:
        return x.copy()
    if mode.upper() == "CONSTANT":
        return np.pad(x, p, mode="constant", constant_values=constant_values)
    return np.pad(x, p, mode=mode.lower())


def _mirror_pad_samples(dtype, rng):
    out = []
    for mode in ("REFLECT", "SYMMETRIC"):
        out += [Sample((_vals(rng, (3, 4), dtype), [[1, 2], [3, 0]], mode), name=mode.lower()),
                Sample((_vals(rng, (2, 3, 4), dtype), [[0, 0], [2, 1], [1, 3]], mode.lower()),
                       name=mode.lower() + "_rank3"),
                Sample((_vals(rng, (0, 3), dtype), [[0, 0], [1, 1]], mode),
                       name=mode.lower() + "_empty")]
    return out


def _mirror_pad_fn(x, paddings, mode):
    return tf.pad(x, paddings, mode)


def _slice_samples(dtype, rng):
    x = _vals(rng, (3, 4), dtype)
    return [Sample((x, [1, 0], [2, -1]), name="typical"),
            Sample((x, (0, 3), (3, 1)), name="column"),
            Sample((_vals(rng, (), dtype), [], []), name="scalar"),
            Sample((x, [0, 0], [0, 4]), name="empty")]


def _slice_ref(x, begin, size):
    return x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]


def _strided_slice_samples(dtype, rng):
    x = _vals(rng, (3, 4, 5), dtype)
    s = slice
    return [
        Sample((x, [0, 1, 0], [2, 4, 5], [1, 2, 1]), ref_kwargs={"key": (s(0, 2), s(1, 4, 2))},
               name="steps"),
        Sample((x, [-1, 0, 4], [0, 0, 0], [-1, 1, -2]), {"begin_mask": 2, "end_mask": 2},
               ref_kwargs={"key": (s(-1, 0, -1), s(None), s(4, 0, -2))}, name="masks_negative"),
        Sample((x, [1, 0], [2, 0], [1, 1]), {"shrink_axis_mask": 1, "new_axis_mask": 2},
               ref_kwargs={"key": (1, None)}, name="shrink_newaxis"),
        Sample((x, [0, 2], [0, 3], [1, 1]), {"ellipsis_mask": 1},
               ref_kwargs={"key": (Ellipsis, s(2, 3))}, name="ellipsis"),
        Sample((x, [2], [2], [1]), ref_kwargs={"key": (s(2, 2),)}, name="empty"),
    ]


def _strided_slice_ref(x, begin, end, strides, key):
    return x[key]


def _getitem_fn(x, key):
    return x[key]


def _getitem_ref(x, key):
    return np.asarray(x[key])


def _getitem_samples(dtype, rng):
    x = _vals(rng, (3, 4, 5), dtype)
    s = slice
    keys = [("int", 1), ("negative_int", -1), ("ints", (2, -3)), ("scalar_element", (0, 1, 2)),
            ("slice", s(1, 3)), ("steps", (s(None, None, 2), s(3, 0, -2))),
            ("reverse", s(None, None, -1)), ("ellipsis", (Ellipsis, 1)),
            ("newaxis", (None, 0, None, s(1, 3))), ("mixed", (1, Ellipsis, s(0, 5, 3))),
            ("list", [2, 0, 2]), ("array_axis1", (s(None), np.array([[3, 0], [1, 1]]))),
            ("int_then_array", (0, [1, -1])), ("int_slice_array", (1, s(None), [4, 0])),
            ("bool_mask", np.array([True, False, True])),
            ("empty_slice", s(2, 2)), ("out_of_range_slice", s(1, 100))]
    out = [Sample((x, k), name=n) for n, k in keys]
    out.append(Sample((_vals(rng, (), dtype), ()), name="scalar_all"))
    out.append(Sample((_vals(rng, (0, 3), dtype), (s(None), 1)), name="empty"))
    return out


def _getitem_tensor_samples(dtype, rng):
    x = _vals(rng, (4, 3), dtype)
    return [Sample((x, np.array([3, 0, 3], np.int32)), name="int32"),
            Sample((x, np.array([[1], [2]], np.int64)), name="int64_2d"),
            Sample((x, np.array(2, np.int32)), name="scalar_tensor"),
            Sample((x, np.array([True, False, False, True])), name="bool_mask"),
            Sample((x, np.zeros((0,), np.int32)), name="empty")]


def _ssg_fn(dy, shape, spec):
    return tf.ops.array_slice._STRIDED_SLICE_GRAD(dy, shape=shape, spec=spec)


def _ssg_ref(dy, shape, spec):
    out = np.zeros(shape, dy.dtype)
    out[spec] = dy
    return out


def _ssg_samples(dtype, rng):
    s = slice
    return [Sample((_vals(rng, (2, 2), dtype), (3, 4), (s(0, 3, 2), s(3, 0, -2), Ellipsis)),
                   name="steps"),
            Sample((_vals(rng, (4,), dtype), (3, 4), (1, Ellipsis)), name="row"),
            Sample((_vals(rng, (), dtype), (2, 3), (1, 2, Ellipsis)), name="element"),
            Sample((_vals(rng, (0, 4), dtype), (3, 4), (s(1, 1), Ellipsis)), name="empty")]


def _shape_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3, 1), dtype),), {"out_type": tf.int64}, name="empty_int64")]


def _shape_ref(x, out_type=tf.int32):
    return np.array(x.shape, dtype=_npd(out_type))


def _size_ref(x, out_type=tf.int32):
    return np.array(x.size, dtype=_npd(out_type))


def _rank_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3, 1), dtype),), name="empty")]


def _rank_ref(x):
    return np.array(x.ndim, dtype=np.int32)


def _identity_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype),), name="empty")]


_SHAPE_SPECS = [
    OpSpec(name="reshape", fn=tf.reshape, ref=np.reshape, op="Reshape",
           samples=_reshape_samples,
           errors=[_err((np.zeros((2, 3), _F32), (4, 2)),
                        "Input to reshape is a tensor of shape (2, 3) with 6 values, but the "
                        "requested shape (4, 2) has 8", name="size_mismatch"),
                   _err((np.zeros((2, 3), _F32), (-1, 4)), "needs a multiple of 4",
                        name="infer_mismatch"),
                   _err((np.zeros((2, 3), _F32), (-1, -1)), "at most one dimension may be -1",
                        name="two_unknowns")]),
    OpSpec(name="transpose", fn=tf.transpose, ref=_transpose_ref, op="Transpose",
           samples=_transpose_samples,
           errors=[_err((np.zeros((2, 3), _F32), [0, 0]), "is not a permutation",
                        name="bad_perm")]),
    OpSpec(name="expand_dims", fn=tf.expand_dims, ref=np.expand_dims, op="ExpandDims",
           samples=_expand_dims_samples,
           errors=[_err((np.zeros((2, 3), _F32), 3), "axis 3 is out of range",
                        name="bad_axis")]),
    OpSpec(name="squeeze", fn=tf.squeeze, ref=_squeeze_ref, op="Squeeze",
           samples=_squeeze_samples,
           errors=[_err((np.zeros((1, 3), _F32), 1),
                        "Can not squeeze dim[1], expected a dimension of 1, got 3",
                        name="not_one")]),
    OpSpec(name="concat", fn=_concat_fn, ref=_concat_ref, op="ConcatV2",
           samples=_concat_samples,
           errors=[_err((np.zeros((2, 3), _F32), np.zeros((2,), _F32)),
                        "ConcatOp : Ranks of all input tensors should match: shape[0] = [2, 3] "
                        "vs. shape[1] = [2]", {"axis": 0}, name="rank_mismatch"),
                   _err((np.zeros((2, 3), _F32), np.zeros((3, 3), _F32)),
                        "Dimension 0 in both shapes must be equal", {"axis": 1},
                        name="dim_mismatch")]),
    OpSpec(name="stack", fn=_stack_fn, ref=_stack_ref, op="Pack", samples=_stack_samples,
           errors=[_err((np.zeros((2,), _F32), np.zeros((3,), _F32)),
                        "Shapes of all inputs must match", name="shape_mismatch")]),
    OpSpec(name="unstack", fn=_unstack_fn, ref=_unstack_ref, op="Unpack",
           samples=_unstack_samples,
           errors=[_err((np.zeros((), _F32),), "out of range", name="scalar")]),
    OpSpec(name="split", fn=tf.split, ref=_split_ref, op="SplitV", samples=_split_samples,
           errors=[_err((np.zeros((5, 2), _F32), 2), "should evenly divide the split dimension",
                        name="uneven"),
                   _err((np.zeros((5, 2), _F32), [2, 2]), "Got: 4 vs. 5", name="sizes")]),
    OpSpec(name="tile", fn=tf.tile, ref=np.tile, op="Tile", samples=_tile_samples,
           errors=[_err((np.zeros((2, 3), _F32), [2]),
                        "Expected multiples argument to be a vector of length 2 but got length 1",
                        name="length")]),
    OpSpec(name="broadcast_to", fn=tf.broadcast_to, ref=np.broadcast_to, op="BroadcastTo",
           samples=_broadcast_to_samples,
           errors=[_err((np.zeros((2, 3), _F32), (3, 3)), "Unable to broadcast",
                        name="incompatible")]),
    OpSpec(name="pad", fn=tf.pad, ref=_pad_ref, op="PadV2", samples=_pad_samples,
           errors=[_err((np.zeros((2, 3), _F32), [[1, 1]]), "paddings must be an integer array "
                        "of shape [2, 2]", name="bad_paddings"),
                   _err((np.zeros((2,), _F32), [[1, 1]], "WRAP"), "mode must be",
                        name="bad_mode")]),
    OpSpec(name="pad_mirror", fn=_mirror_pad_fn, ref=_pad_ref, op="MirrorPad",
           samples=_mirror_pad_samples,
           errors=[_err((np.zeros((2, 3), _F32), [[2, 0], [0, 0]], "REFLECT"),
                        "paddings must be less than the dimension size: 2, 0 not less than 2",
                        name="too_wide")]),
    OpSpec(name="slice", fn=tf.slice, ref=_slice_ref, op="Slice", samples=_slice_samples,
           errors=[_err((np.zeros((3, 4), _F32), [1, 0], [3, 1]),
                        "Expected size[0] in [0, 2], but got 3", name="size")]),
    OpSpec(name="strided_slice", fn=tf.strided_slice, ref=_strided_slice_ref,
           op="StridedSlice", samples=_strided_slice_samples,
           errors=[_err((np.zeros((3,), _F32), [4], [5], [1]),
                        "slice index 4 of dimension 0 out of bounds", {"shrink_axis_mask": 1},
                        name="shrink_out_of_range")]),
    OpSpec(name="__getitem__", fn=_getitem_fn, ref=_getitem_ref, op="StridedSlice",
           samples=_getitem_samples,
           errors=[_err((np.zeros((3, 4), _F32), 5), "slice index 5 of dimension 0 out of bounds",
                        name="int"),
                   _err((np.zeros((3, 4), _F32), (0, -5)),
                        "slice index -5 of dimension 1 out of bounds", name="negative"),
                   _err((np.zeros((3, 4), _F32), (0, [1, 4])),
                        "slice index 4 of dimension 1 out of bounds", name="list"),
                   _err((np.zeros((3,), _F32), (0, 0)), "Index out of range", name="too_many"),
                   _err((np.zeros((3,), _F32), 1.5), "valid indices", name="float")]),
    OpSpec(name="__getitem__tensor_index", fn=_getitem_fn, ref=_getitem_ref, op="GatherV2",
           samples=_getitem_tensor_samples,
           errors=[_err((np.zeros((3, 4), _F32), np.array([0, 3], np.int32)),
                        "indices[1] = 3 is not in [0, 3)", name="out_of_range")]),
    OpSpec(name="strided_slice_grad", fn=_ssg_fn, ref=_ssg_ref, op="StridedSliceGrad",
           samples=_ssg_samples),
    OpSpec(name="shape", fn=tf.shape, ref=_shape_ref, op="Shape", samples=_shape_samples,
           grad_order=0),
    OpSpec(name="size", fn=tf.size, ref=_size_ref, op="Size", samples=_shape_samples,
           grad_order=0),
    OpSpec(name="rank", fn=tf.rank, ref=_rank_ref, op="Rank", samples=_rank_samples,
           grad_order=0),
    OpSpec(name="identity", fn=tf.identity, ref=np.copy, op="Identity",
           samples=_identity_samples),
    OpSpec(name="stop_gradient", fn=tf.stop_gradient, ref=np.copy, op="StopGradient",
           samples=_identity_samples, grad_order=0),
]


SPECS = _CREATION_SPECS + _RANDOM_SPECS + _STATELESS_SPECS + _SHAPE_SPECS
