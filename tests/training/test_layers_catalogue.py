"""The Keras layer catalogue of issue 45 (item 2): LayerNormalization (its fused
``LayerNorm`` op against the composite), GroupNormalization, MultiHeadAttention,
Attention, AdditiveAttention, the reshaping, merging, activation and noise layers.

Every layer against a NumPy reference (MultiHeadAttention and LayerNormalization also
against PyTorch with copied weights), masks, gradients (tape against central finite
differences in float64), shapes, weight names, get_config round trips, tf.function
against eager, opencl:0, and the errors for bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.layers.base import get_mask, set_mask
from tapeflow.ops import nn as nn_ops
from tapeflow.runtime.registry import get_op
from tapeflow.testing import conformance
from tapeflow.tracing import vectorize as vz

L = tf.keras.layers
#: the ``LayerNorm`` op's composite (ordinary ops): the fused kernel's slow twin
LN_COMPOSITE = get_op("LayerNorm").composite


@pytest.fixture(autouse=True)
def _fresh_names():
    tf.keras.backend.clear_session()
    yield


def _rng(seed=0):
    return np.random.default_rng(seed)


def _np(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _ref_ln(x, axes, eps, gamma=None, beta=None):
    x = x.astype(np.float64)
    m = x.mean(axis=axes, keepdims=True)
    v = x.var(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    bshape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if gamma is not None:
        y = y * gamma.reshape(bshape)
    if beta is not None:
        y = y + beta.reshape(bshape)
    return y


def _directional_check(layer, x, n_dirs=3, eps=1e-6, rtol=1e-5, atol=1e-7, call=None):
    """The tape's gradient of ``sum(w * layer(x))`` w.r.t. ``x`` and the trainable
    weights against central finite differences along random directions (float64)."""
    call = call or (lambda v: layer(v))
    rng = _rng(7)
    xv = tf.Variable(np.asarray(x, np.float64))
    call(xv.read_value())
    ws = [xv] + list(layer.trainable_variables)
    out_shape = call(xv.read_value()).shape
    w = tf.constant(rng.standard_normal(list(out_shape)))

    def loss():
        return tf.reduce_sum(call(xv.read_value()) * w)

    with tf.GradientTape() as tape:
        val = loss()
    grads = tape.gradient(val, ws)
    base = [v.numpy() for v in ws]
    for _ in range(n_dirs):
        dirs = [rng.standard_normal(b.shape) for b in base]
        want = sum(float(np.sum(_np(g) * d)) for g, d in zip(grads, dirs) if g is not None)
        vals = []
        for sgn in (1, -1):
            for v, b, d in zip(ws, base, dirs):
                v.assign(b + sgn * eps * d)
            vals.append(float(loss()))
        for v, b in zip(ws, base):
            v.assign(b)
        got = (vals[0] - vals[1]) / (2 * eps)
        assert abs(got - want) <= atol + rtol * abs(want) * 100, (got, want)


def _roundtrip(layer):
    cfg = layer.get_config()
    again = type(layer).from_config(cfg)
    assert again.get_config() == cfg
    return cfg


# --- the fused LayerNorm op against its composite --------------------------------------------

def _random_case(seed, dtype):
    rng = _rng(seed)
    nd = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.integers(1, 6, nd)]
    k = int(rng.integers(1, nd + 1))
    axes = tuple(sorted(rng.choice(nd, size=k, replace=False).tolist()))
    pshape = [shape[a] for a in axes]
    x = rng.standard_normal(shape).astype(dtype) * 3 + 1
    g = rng.standard_normal(pshape).astype(dtype)
    b = rng.standard_normal(pshape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return x, g, b, dy, axes


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(8))
def test_fused_layer_norm_matches_composite_values_and_gradients(dtype, seed):
    x, g, b, dy, axes = _random_case(seed, dtype)
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-11)
    xs, gs, bs, dys = (tf.constant(a) for a in (x, g, b, dy))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([xs, gs, bs])
        fused = nn_ops.layer_norm(xs, gs, bs, axis=list(axes), epsilon=1e-3)
        comp = LN_COMPOSITE(xs, gs, bs, axes, 1e-3)
        lf, lc = tf.reduce_sum(fused * dys), tf.reduce_sum(comp * dys)
    np.testing.assert_allclose(fused.numpy(), comp.numpy(), **tol)
    np.testing.assert_allclose(fused.numpy(), _ref_ln(x, axes, 1e-3, g, b), **tol)
    for a, c in zip(tape.gradient(lf, [xs, gs, bs]), tape.gradient(lc, [xs, gs, bs])):
        np.testing.assert_allclose(a.numpy(), c.numpy(), **tol)


@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_second_order_matches_composite(seed):
    """The backward op's own gradient (w.r.t. dy, x and gamma) against the composite's."""
    x, g, b, dy, axes = _random_case(seed + 10, "float64")
    xs, gs, bs, dys = (tf.constant(a) for a in (x, g, b, dy))
    rng = _rng(seed)
    wx, wg, wb = (tf.constant(rng.standard_normal(s)) for s in (x.shape, g.shape, b.shape))

    def second(fn):
        with tf.GradientTape() as outer:
            outer.watch([xs, gs, bs, dys])
            with tf.GradientTape() as inner:
                inner.watch([xs, gs, bs])
                y = fn(xs, gs, bs)
                loss = tf.reduce_sum(y * dys)
            gx, gg, gb = inner.gradient(loss, [xs, gs, bs])
            s = tf.reduce_sum(gx * wx) + tf.reduce_sum(gg * wg) + tf.reduce_sum(gb * wb)
        return outer.gradient(s, [xs, gs, bs, dys])

    got = second(lambda a, c, d: nn_ops.layer_norm(a, c, d, axis=list(axes)))
    want = second(lambda a, c, d: LN_COMPOSITE(a, c, d, axes, 1e-3))
    for a, c in zip(got, want):
        if c is None:
            assert a is None or np.allclose(a.numpy(), 0)
            continue
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_layer_norm_grad_op_forward_mode_matches_finite_differences(seed):
    """The backward op's own JVP rule (``tf.autodiff.ForwardAccumulator``)."""
    x, g, _, dy, axes = _random_case(seed + 20, "float64")
    rng = _rng(seed)
    tangents = [rng.standard_normal(a.shape) for a in (dy, x, g)]
    op = get_op("LayerNormGrad")

    def f(a, b, c):
        return op(tf.constant(a), tf.constant(b), tf.constant(c), axes=axes, epsilon=1e-3)

    prim = [tf.constant(a) for a in (dy, x, g)]
    with tf.autodiff.ForwardAccumulator(prim, [tf.constant(t_) for t_ in tangents]) as acc:
        outs = op(*prim, axes=axes, epsilon=1e-3)
    eps = 1e-6
    plus = f(*(a + eps * t_ for a, t_ in zip((dy, x, g), tangents)))
    minus = f(*(a - eps * t_ for a, t_ in zip((dy, x, g), tangents)))
    for o, p, m in zip(outs, plus, minus):
        np.testing.assert_allclose(acc.jvp(o).numpy(), (p.numpy() - m.numpy()) / (2 * eps),
                                   rtol=1e-5, atol=1e-7)


def test_layer_norm_op_checks_gradients_numerically():
    x, g, b, _, axes = _random_case(3, "float64")
    tf.testing.check_grads(lambda a, c, d: nn_ops.layer_norm(a, c, d, axis=list(axes)),
                           (x, g, b), order=2, rtol=1e-4, atol=1e-5)


def test_layer_norm_vectorized_map_and_jacobian_use_the_batching_rules():
    rng = _rng(1)
    x = rng.standard_normal((4, 3, 5))
    g = rng.standard_normal((4, 5))
    xs, gs = tf.constant(x), tf.constant(g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", vz.VectorizationWarning)     # no per-example loop
        out = tf.vectorized_map(
            lambda a: nn_ops.layer_norm(a[0], a[1], tf.zeros([5], "float64")), (xs, gs))
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = nn_ops.layer_norm(xs[0], gs[0], tf.zeros([5], "float64"))
        jac = tape.jacobian(y, xs)
    want = np.stack([_ref_ln(x[i], (1,), 1e-3, g[i], np.zeros(5)) for i in range(4)])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10)
    assert list(jac.shape) == [3, 5, 4, 3, 5]
    eps = 1e-6
    d = np.zeros_like(x)
    d[0, 1, 2] = eps
    fd = (_ref_ln(x[0] + d[0], (1,), 1e-3, g[0]) - _ref_ln(x[0] - d[0], (1,), 1e-3, g[0])) / (
        2 * eps)
    np.testing.assert_allclose(jac.numpy()[:, :, 0, 1, 2], fd, rtol=1e-6, atol=1e-8)


def test_layer_norm_float16_is_computed_in_float32():
    x = _rng(2).standard_normal((3, 16)).astype(np.float16) * 100
    y = nn_ops.layer_norm(tf.constant(x))
    assert y.dtype == tf.float16
    np.testing.assert_allclose(y.numpy().astype(np.float64),
                               _ref_ln(x.astype(np.float64), (1,), 1e-3), atol=1e-2)


def test_layer_norm_traced_matches_eager():
    x, g, b, dy, axes = _random_case(5, "float32")

    def f(a, c, d):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = nn_ops.layer_norm(a, c, d, axis=list(axes))
        return y, tape.gradient(y, a)

    eager = f(*(tf.constant(v) for v in (x, g, b)))
    traced = tf.function(f)(*(tf.constant(v) for v in (x, g, b)))
    for a, c in zip(eager, traced):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6, atol=1e-6)


def test_layer_norm_op_errors_name_the_op_and_what_to_do():
    with pytest.raises(InvalidArgumentError, match=r"gamma must have shape \[3\].*\[Op:LayerNorm"):
        nn_ops.layer_norm(tf.zeros([2, 3]), tf.ones([4]))
    with pytest.raises(InvalidArgumentError, match="not a valid axis"):
        nn_ops.layer_norm(tf.zeros([2, 3]), axis=5)
    with pytest.raises(InvalidArgumentError, match="floating-point.*tf.cast"):
        nn_ops.layer_norm(tf.zeros([2, 3], "int32"))
    with pytest.raises(InvalidArgumentError, match="names an axis twice"):
        nn_ops.layer_norm(tf.zeros([2, 3]), axis=[1, -1])
    with pytest.raises(InvalidArgumentError, match="layer_normalization.*names an axis twice"):
        L.LayerNormalization(axis=[1, 1])(tf.zeros([2, 3]))


# --- the fused DotProductAttention op against its composite ----------------------------------

DPA_COMPOSITE = get_op("DotProductAttention").composite


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(6))
def test_fused_attention_matches_composite_values_and_gradients(dtype, seed):
    """The one-kernel forward and backward ops against the ordinary ops (random shapes,
    masks that broadcast, fully masked rows, cross attention)."""
    rng = _rng(seed)
    b, t, s, h, k, v = (int(n) for n in rng.integers(1, 5, 6))
    q, kk, vv, dout = (tf.constant(rng.standard_normal(sh).astype(dtype))
                       for sh in ((b, t, h, k), (b, s, h, k), (b, s, h, v), (b, t, h, v)))
    mshape = [d if rng.random() < 0.5 else 1 for d in (b, h, t, s)][4 - int(rng.integers(0, 5)):]
    mask = tf.constant(rng.random(mshape) > 0.3) if mshape or seed % 2 else tf.constant(True)
    scale = float(rng.uniform(0.2, 1.0))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([q, kk, vv])
        fused = tf.nn.dot_product_attention(q, kk, vv, mask, scale=scale)
        comp = DPA_COMPOSITE(q, kk, vv, mask, scale=scale)
        lf = tf.reduce_sum(fused[0] * dout)
        lc = tf.reduce_sum(comp[0] * dout)
        if seed % 3 == 0:                  # the weights' gradient too
            dw = tf.constant(rng.standard_normal((b, h, t, s)).astype(dtype))
            lf = lf + tf.reduce_sum(fused[1] * dw)
            lc = lc + tf.reduce_sum(comp[1] * dw)
    for a, c in zip(fused, comp):
        np.testing.assert_allclose(a.numpy(), c.numpy(), **tol)
    # (outside the tape: the fused backward op; the composite's ops for the reference)
    for a, c in zip(tape.gradient(lf, [q, kk, vv]), tape.gradient(lc, [q, kk, vv])):
        np.testing.assert_allclose(a.numpy(), c.numpy(), **tol)


@pytest.mark.parametrize("mask_kind", ["none", "per_example", "shared"])
def test_fused_attention_benchmark_sized_inputs(mask_kind):
    """Inputs of the benchmark's size (float32): the same values and gradients as the
    composite."""
    rng = _rng(42)
    q, k, v, dout = (tf.constant(rng.standard_normal(s).astype(np.float32))
                     for s in ((5, 64, 4, 16), (5, 64, 4, 16), (5, 64, 4, 8), (5, 64, 4, 8)))
    shape = {"none": (), "per_example": (5, 1, 64, 64), "shared": (1, 4, 64, 64)}[mask_kind]
    mask = tf.constant(rng.random(shape) > 0.2 if shape else True)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([q, k, v])
        fused = tf.nn.dot_product_attention(q, k, v, mask)
        comp = DPA_COMPOSITE(q, k, v, mask, scale=0.25)
        lf, lc = tf.reduce_sum(fused[0] * dout), tf.reduce_sum(comp[0] * dout)
    for a, c in zip(fused, comp):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-4, atol=1e-5)
    for a, c in zip(tape.gradient(lf, [q, k, v]), tape.gradient(lc, [q, k, v])):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-4, atol=1e-5)


def test_fused_attention_against_numpy_and_second_order():
    rng = _rng(40)
    q, k, v = (rng.standard_normal(s) for s in ((2, 3, 2, 4), (2, 5, 2, 4), (2, 5, 2, 3)))
    mask = rng.random((2, 1, 3, 5)) > 0.3
    mask[..., 0] = True
    mask[1, 0, 2] = False                        # a fully masked row: uniform weights
    out, w = tf.nn.dot_product_attention(q, k, v, mask)
    s = np.einsum("bthk,bshk->bhts", q, k) / 2.0
    p = _softmax(np.where(mask, s, -1e9))
    np.testing.assert_allclose(w.numpy(), p, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), np.einsum("bhts,bshv->bthv", p, v), rtol=1e-10)
    tf.testing.check_grads(lambda a, b, c: tf.nn.dot_product_attention(a, b, c, mask),
                           (q, k, v), order=2, rtol=1e-4, atol=1e-6)


def test_fused_attention_vectorized_map_and_errors():
    rng = _rng(41)
    q, k, v = (rng.standard_normal(s) for s in ((3, 2, 4, 2, 3), (3, 2, 5, 2, 3),
                                                (3, 2, 5, 2, 4)))
    mask = rng.random((1, 1, 4, 5)) > 0.3                  # broadcast over batch and heads
    with warnings.catch_warnings():
        warnings.simplefilter("error", vz.VectorizationWarning)
        out = tf.vectorized_map(
            lambda a: tf.nn.dot_product_attention(a[0], a[1], a[2], mask)[0],
            tuple(tf.constant(x) for x in (q, k, v)))
    want = np.stack([tf.nn.dot_product_attention(q[i], k[i], v[i], mask)[0].numpy()
                     for i in range(3)])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    with pytest.raises(InvalidArgumentError, match=r"do not fit.*\[Op:DotProductAttention"):
        tf.nn.dot_product_attention(tf.zeros([1, 2, 2, 3]), tf.zeros([1, 2, 3, 3]),
                                    tf.zeros([1, 2, 3, 3]))
    with pytest.raises(InvalidArgumentError, match="must be boolean and broadcast"):
        tf.nn.dot_product_attention(tf.zeros([1, 2, 2, 3]), tf.zeros([1, 2, 2, 3]),
                                    tf.zeros([1, 2, 2, 3]), mask=np.ones((1, 1, 2, 3), bool))


# --- LayerNormalization, GroupNormalization, UnitNormalization -------------------------------

@pytest.mark.parametrize("axis", [-1, [1, 2], 1])
def test_layer_normalization_matches_numpy(axis):
    x = _rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    ln = L.LayerNormalization(axis=axis, epsilon=1e-3, gamma_initializer="random_normal",
                              beta_initializer="random_normal")
    y = ln(x)
    axes = tuple(sorted(a % 3 for a in ([axis] if isinstance(axis, int) else axis)))
    g, b = (v.numpy() for v in ln.variables)
    np.testing.assert_allclose(y.numpy(), _ref_ln(x, axes, 1e-3, g, b), rtol=1e-4, atol=1e-5)
    assert [v.name for v in ln.variables] == ["layer_normalization/gamma:0",
                                             "layer_normalization/beta:0"]
    assert list(ln.variables[0].shape) == [x.shape[a] for a in axes]
    cfg = _roundtrip(ln)
    assert cfg["epsilon"] == 1e-3 and cfg["axis"] == axis


def test_layer_normalization_without_center_or_scale_has_no_weights():
    ln = L.LayerNormalization(center=False, scale=False, epsilon=0.0)
    x = np.array([[1.0, 2.0, 3.0, 6.0]], np.float32)
    np.testing.assert_allclose(ln(x).numpy(), _ref_ln(x, (1,), 0.0), rtol=1e-5)
    assert ln.variables == []


def test_layer_normalization_matches_torch():
    torch = pytest.importorskip("torch")
    x = _rng(4).standard_normal((3, 5, 8))
    ln = L.LayerNormalization(epsilon=1e-5, dtype="float64", gamma_initializer="random_normal",
                              beta_initializer="random_normal")
    xs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = ln(xs)
        loss = tf.reduce_sum(y * y)
    grads = tape.gradient(loss, [xs] + ln.trainable_variables)
    tx = torch.tensor(x, requires_grad=True)
    tg = torch.tensor(ln.gamma.numpy(), requires_grad=True)
    tb = torch.tensor(ln.beta.numpy(), requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx, [8], tg, tb, eps=1e-5)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10)
    for a, t in zip(grads, (tx, tg, tb)):
        np.testing.assert_allclose(a.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-10)


def test_layer_normalization_gradients_numerically():
    ln = L.LayerNormalization(axis=[1, 2], dtype="float64", gamma_initializer="random_normal",
                              beta_initializer="random_normal")
    _directional_check(ln, _rng(5).standard_normal((2, 3, 4)))


def test_layer_normalization_float16_and_mixed_policy():
    x = _rng(6).standard_normal((2, 8)).astype(np.float16)
    for policy in ("float16", "mixed_float16"):
        y = L.LayerNormalization(dtype=policy)(tf.constant(x))
        assert y.dtype == tf.float16
        np.testing.assert_allclose(y.numpy().astype(float),
                                   _ref_ln(x.astype(float), (1,), 1e-3), atol=2e-2)


def test_layer_normalization_errors():
    ln = L.LayerNormalization(axis=3)
    with pytest.raises(InvalidArgumentError, match=r"layer_normalization.*axis 3 is out of range"):
        ln(tf.zeros([2, 3]))
    ln = L.LayerNormalization()
    ln(tf.zeros([2, 3]))
    with pytest.raises(InvalidArgumentError, match=r"built for inputs of rank 2.*\[2, 4\]"):
        ln(tf.zeros([2, 4]))


@pytest.mark.parametrize("groups", [1, 2, 4, -1])
def test_group_normalization_matches_numpy(groups):
    x = _rng(7).standard_normal((2, 3, 3, 4)).astype(np.float64)
    gn = L.GroupNormalization(groups=groups, dtype="float64", gamma_initializer="random_normal",
                              beta_initializer="random_normal")
    y = gn(x).numpy()
    g = 4 if groups == -1 else groups
    xg = x.reshape(2, 3, 3, g, 4 // g)
    want = _ref_ln(xg, (1, 2, 4), 1e-3).reshape(x.shape)
    want = want * gn.gamma.numpy() + gn.beta.numpy()
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    assert [v.name for v in gn.variables] == ["group_normalization/gamma:0",
                                             "group_normalization/beta:0"]
    _roundtrip(gn)


def test_group_normalization_channels_first_and_gradients():
    x = _rng(8).standard_normal((2, 4, 3))
    gn = L.GroupNormalization(groups=2, axis=1, dtype="float64",
                              gamma_initializer="random_normal")
    xg = x.reshape(2, 2, 2, 3)
    y = gn(x).numpy()
    want = _ref_ln(xg, (2, 3), 1e-3).reshape(x.shape) * gn.gamma.numpy().reshape(1, 4, 1)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    _directional_check(gn, x)


def test_group_normalization_errors():
    with pytest.raises(InvalidArgumentError, match=r"groups \(3\) must divide.*\(4"):
        L.GroupNormalization(groups=3)(tf.zeros([2, 4]))
    with pytest.raises(InvalidArgumentError, match="groups must be a positive integer"):
        L.GroupNormalization(groups=0)


def test_unit_normalization():
    x = _rng(9).standard_normal((3, 4)).astype(np.float32)
    y = L.UnitNormalization()(x).numpy()
    np.testing.assert_allclose(y, x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(L.UnitNormalization()(np.zeros((1, 3), np.float32)).numpy(), 0)
    _roundtrip(L.UnitNormalization(axis=[0, 1]))
    _directional_check(L.UnitNormalization(dtype="float64"), _rng(9).standard_normal((3, 4)))


# --- MultiHeadAttention -----------------------------------------------------------------------

def _ref_mha(q, v, k, weights, mask=None, causal=False):
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    Q = np.einsum("btd,dhk->bthk", q, wq) + bq
    K = np.einsum("bsd,dhk->bshk", k, wk) + bk
    V = np.einsum("bsd,dhk->bshk", v, wv) + bv
    s = np.einsum("bthk,bshk->bhts", Q, K) / np.sqrt(wq.shape[-1])
    full = np.ones(s.shape, bool)
    if mask is not None:
        full &= mask[:, None]
    if causal:
        full &= np.tril(np.ones(s.shape[-2:], bool))
    s = np.where(full, s, -1e9)
    p = _softmax(s)
    ctx = np.einsum("bhts,bshv->bthv", p, V)
    return np.einsum("bthv,hvo->bto", ctx, wo) + bo, p


def _mha(num_heads=2, key_dim=3, **kw):
    return L.MultiHeadAttention(num_heads, key_dim, dtype="float64",
                                bias_initializer="random_normal", **kw)


@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("masking", ["none", "mask", "causal", "both"])
def test_multi_head_attention_matches_numpy(self_attention, masking):
    rng = _rng(10)
    q = rng.standard_normal((2, 4, 5))
    v = q if self_attention else rng.standard_normal((2, 6, 7))
    k = None if self_attention else rng.standard_normal((2, 6, 3))
    mask = None
    if masking in ("mask", "both"):
        mask = rng.random((2, 4, v.shape[1])) > 0.3
        mask[:, :, 0] = True
    causal = masking in ("causal", "both")
    if causal and not self_attention:
        v, k = v[:, :4], k[:, :4]
        mask = None if mask is None else mask[:, :, :4]
    mha = _mha(value_dim=4)
    qt = tf.constant(q)
    vt = qt if self_attention else tf.constant(v)
    out, scores = mha(qt, vt, key=None if k is None else tf.constant(k), attention_mask=mask,
                      use_causal_mask=causal, return_attention_scores=True)
    want, p = _ref_mha(q, v, v if k is None else k, [w.numpy() for w in mha.variables], mask,
                       causal)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(scores.numpy(), p, rtol=1e-9, atol=1e-12)
    assert list(out.shape) == [2, 4, 5] and list(scores.shape) == [2, 2, 4, v.shape[1]]


def test_multi_head_attention_weights_names_and_config():
    mha = L.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, output_shape=6)
    mha(tf.zeros([1, 3, 8]), tf.zeros([1, 5, 7]))
    got = [(v.name, v.shape.as_list()) for v in mha.variables]
    assert got == [("multi_head_attention/query/kernel:0", [8, 2, 4]),
                   ("multi_head_attention/query/bias:0", [2, 4]),
                   ("multi_head_attention/key/kernel:0", [7, 2, 4]),
                   ("multi_head_attention/key/bias:0", [2, 4]),
                   ("multi_head_attention/value/kernel:0", [7, 2, 3]),
                   ("multi_head_attention/value/bias:0", [2, 3]),
                   ("multi_head_attention/attention_output/kernel:0", [2, 3, 6]),
                   ("multi_head_attention/attention_output/bias:0", [6])]
    cfg = _roundtrip(mha)
    assert (cfg["num_heads"], cfg["key_dim"], cfg["value_dim"], cfg["output_shape"]) == \
        (2, 4, 3, 6)
    no_bias = L.MultiHeadAttention(2, 4, use_bias=False)
    no_bias(tf.zeros([1, 3, 8]), tf.zeros([1, 3, 8]))
    assert len(no_bias.variables) == 4


def test_multi_head_attention_matches_torch():
    torch = pytest.importorskip("torch")
    rng = _rng(11)
    d, h = 8, 2
    x = rng.standard_normal((3, 5, d))
    mask = rng.random((3, 5, 5)) > 0.3
    mask[:, :, 0] = True
    mha = _mha(num_heads=h, key_dim=d // h)
    xs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = mha(xs, xs, attention_mask=mask)
        loss = tf.reduce_sum(y * y)
    grads = tape.gradient(loss, [xs] + mha.trainable_variables)
    wq, bq, wk, bk, wv, bv, wo, bo = [w.numpy() for w in mha.variables]
    att = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        att.in_proj_weight.copy_(torch.tensor(np.concatenate(
            [w.reshape(d, -1).T for w in (wq, wk, wv)])))
        att.in_proj_bias.copy_(torch.tensor(np.concatenate([b.reshape(-1) for b in (bq, bk, bv)])))
        att.out_proj.weight.copy_(torch.tensor(wo.reshape(-1, d).T))
        att.out_proj.bias.copy_(torch.tensor(bo))
    tx = torch.tensor(x, requires_grad=True)
    tmask = torch.tensor(~mask).repeat_interleave(h, dim=0)      # True: not allowed
    ty, _ = att(tx, tx, tx, attn_mask=tmask)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(grads[0].numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    tq = att.in_proj_weight.grad.numpy()[:d].T.reshape(d, h, d // h)
    np.testing.assert_allclose(grads[1].numpy(), tq, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(grads[-1].numpy(), att.out_proj.bias.grad.numpy(), rtol=1e-8)


def test_multi_head_attention_gradients_numerically():
    rng = _rng(12)
    mha = _mha()
    v = tf.constant(rng.standard_normal((2, 3, 4)))
    _directional_check(mha, rng.standard_normal((2, 4, 5)), call=lambda q: mha(q, v))
    self_att = _mha(num_heads=1, key_dim=2)
    _directional_check(self_att, rng.standard_normal((2, 3, 4)), call=lambda q: self_att(q, q))


def test_multi_head_attention_attention_axes_and_higher_rank():
    rng = _rng(13)
    x = rng.standard_normal((2, 3, 4, 5))
    mha = _mha(attention_axes=(2,))
    out, scores = mha(tf.constant(x), tf.constant(x), return_attention_scores=True)
    assert list(out.shape) == [2, 3, 4, 5]
    # attention over axis 2 only: axis 1 behaves as more batch
    w = [v.numpy() for v in mha.variables]
    for i in range(3):
        want, _ = _ref_mha(x[:, i], x[:, i], x[:, i], w)
        np.testing.assert_allclose(out.numpy()[:, i], want, rtol=1e-9, atol=1e-10)
    all_axes = _mha()
    assert list(all_axes(tf.constant(x), tf.constant(x)).shape) == [2, 3, 4, 5]


def test_multi_head_attention_dropout_only_in_training():
    x = tf.constant(_rng(14).standard_normal((2, 4, 6)))
    mha = _mha(dropout=0.5)
    a, b = mha(x, x), mha(x, x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    _, s = mha(x, x, training=True, return_attention_scores=True)
    np.testing.assert_allclose(s.numpy().sum(-1), 1.0)        # the weights before dropout
    assert not np.allclose(mha(x, x, training=True).numpy(), a.numpy())


def test_multi_head_attention_traced_matches_eager():
    x = tf.constant(_rng(15).standard_normal((2, 5, 8)).astype(np.float32))
    mha = L.MultiHeadAttention(2, 4)
    ln = L.LayerNormalization()

    def step(v):
        with tf.GradientTape() as tape:
            y = ln(v + mha(v, v, use_causal_mask=True))
            loss = tf.reduce_sum(y * y)
        return loss, tape.gradient(loss, mha.trainable_variables + ln.trainable_variables)

    eager = step(x)
    traced = tf.function(step)(x)
    np.testing.assert_allclose(float(eager[0]), float(traced[0]), rtol=1e-5)
    for a, b in zip(eager[1], traced[1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_attention_layers_under_mixed_float16():
    """float32 variables, float16 compute: every input is cast, masks use float16's
    large negative (no inf/NaN)."""
    rng = _rng(31)
    q = tf.constant(rng.standard_normal((2, 5, 8)).astype(np.float32))
    v = tf.constant(rng.standard_normal((2, 6, 8)).astype(np.float32))
    mha = L.MultiHeadAttention(2, 4, dtype="mixed_float16")
    for out in (mha(q, v), mha(q, q, use_causal_mask=True),
                L.Attention(dtype="mixed_float16")([q, v], mask=[None, np.ones((2, 6), bool)]),
                L.LayerNormalization(dtype="mixed_float16")(q)):
        assert out.dtype == tf.float16 and np.isfinite(out.numpy()).all()
    assert mha.variables[0].dtype == tf.float32
    ref = L.MultiHeadAttention(2, 4)
    ref(q, v)
    ref.set_weights(mha.get_weights())
    np.testing.assert_allclose(mha(q, v).numpy(), ref(q, v).numpy(), rtol=2e-2, atol=2e-2)


def test_multi_head_attention_errors():
    mha = L.MultiHeadAttention(2, 4)
    with pytest.raises(InvalidArgumentError, match=r"rank >= 3.*\[2, 8\].*expand_dims"):
        mha(tf.zeros([2, 8]), tf.zeros([2, 8]))
    with pytest.raises(InvalidArgumentError, match="same batch size"):
        mha(tf.zeros([2, 3, 8]), tf.zeros([3, 3, 8]))
    mha(tf.zeros([2, 3, 8]), tf.zeros([2, 3, 8]))
    with pytest.raises(InvalidArgumentError, match=r"attention_mask must have shape \[batch"):
        mha(tf.zeros([2, 3, 8]), tf.zeros([2, 3, 8]), attention_mask=np.ones((2, 4, 4), bool))
    with pytest.raises(InvalidArgumentError, match=r"built for features.*new layer"):
        mha(tf.zeros([2, 3, 6]), tf.zeros([2, 3, 6]))
    with pytest.raises(InvalidArgumentError, match="num_heads must be a positive integer"):
        L.MultiHeadAttention(0, 4)
    with pytest.raises(InvalidArgumentError, match=r"dropout must be in \[0, 1\)"):
        L.MultiHeadAttention(2, 4, dropout=1.5)


def test_attention_layers_use_and_pass_on_implicit_masks():
    """Keras's implicit masks (Embedding(mask_zero=True), Masking): MultiHeadAttention and
    Attention mask with the query's and value's masks and give the output the query's;
    the elementwise layers pass a mask on, the merging layers combine theirs."""
    rng = _rng(30)
    x = tf.constant(rng.standard_normal((2, 4, 6)))
    keep = np.array([[True, True, True, False], [True, False, False, False]])
    set_mask(x, tf.constant(keep))
    mha = _mha()
    out, scores = mha(x, x, return_attention_scores=True)
    want, p = _ref_mha(x.numpy(), x.numpy(), x.numpy(), [w.numpy() for w in mha.variables],
                       keep[:, :, None] & keep[:, None, :])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(scores.numpy(), p, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(get_mask(out).numpy(), keep)
    att_out = L.Attention(dtype="float64")([x, x])
    want2, _ = _ref_dense_attention(x.numpy(), x.numpy(), x.numpy(),
                                    x.numpy() @ x.numpy().transpose(0, 2, 1), keep, keep)
    np.testing.assert_allclose(att_out.numpy(), want2, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(get_mask(att_out).numpy(), keep)
    for layer in (L.LayerNormalization(dtype="float64"), L.ReLU(), L.UnitNormalization()):
        np.testing.assert_array_equal(get_mask(layer(x)).numpy(), keep)
    other = tf.constant(rng.standard_normal((2, 4, 6)))
    set_mask(other, tf.constant(np.ones((2, 4), bool) & ~np.eye(2, 4, dtype=bool)))
    both = get_mask(L.Add(dtype="float64")([x, other])).numpy()
    np.testing.assert_array_equal(both, keep & ~np.eye(2, 4, dtype=bool))


# --- Attention, AdditiveAttention --------------------------------------------------------------

def _ref_dense_attention(q, v, k, scores, q_mask=None, v_mask=None, causal=False):
    full = np.ones(scores.shape, bool)
    if v_mask is not None:
        full &= v_mask[:, None, :]
    if causal:
        full &= np.tril(np.ones(scores.shape[-2:], bool))
    w = _softmax(np.where(full, scores, -1e9))
    out = w @ v
    if q_mask is not None:
        out = out * q_mask[..., None]
    return out, w


@pytest.mark.parametrize("kind", ["dot", "dot_scaled", "concat", "concat_scaled", "additive",
                                  "additive_unscaled"])
@pytest.mark.parametrize("masked", [False, True])
def test_dense_attention_matches_numpy(kind, masked):
    rng = _rng(16)
    q, v, k = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 4)))
    if kind.startswith("additive"):
        layer = L.AdditiveAttention(use_scale=kind == "additive", dtype="float64")
    else:
        layer = L.Attention(use_scale=kind.endswith("scaled"),
                            score_mode="concat" if kind.startswith("concat") else "dot",
                            dtype="float64")
    q_mask = v_mask = None
    kwargs = {}
    if masked:
        q_mask = rng.random((2, 3)) > 0.4
        v_mask = rng.random((2, 5)) > 0.4
        v_mask[:, 0] = True
        kwargs["mask"] = [q_mask, v_mask]
    out, w = layer([q, v, k], return_attention_scores=True, **kwargs)
    params = {v_.name.split("/")[-1].split(":")[0]: v_.numpy() for v_ in layer.variables}
    if kind.startswith("dot"):
        s = q @ k.transpose(0, 2, 1) * params.get("scale", 1.0)
    elif kind.startswith("concat"):
        s = params["concat_score_weight"] * np.tanh(
            params.get("scale", 1.0) * (q[:, :, None] + k[:, None])).sum(-1)
    else:
        s = (params.get("scale", np.ones(4)) * np.tanh(q[:, :, None] + k[:, None])).sum(-1)
    want, ww = _ref_dense_attention(q, v, k, s, q_mask, v_mask)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), ww, rtol=1e-9, atol=1e-12)
    _roundtrip(layer)


def test_dense_attention_causal_names_and_gradients():
    rng = _rng(17)
    q, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3))
    att = L.Attention(use_scale=True, dtype="float64")
    out = att([q, v], use_causal_mask=True)
    want, _ = _ref_dense_attention(q, v, v, q @ v.transpose(0, 2, 1), causal=True)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9)
    assert [x.name for x in att.variables] == ["attention/scale:0"]
    add = L.AdditiveAttention(dtype="float64")
    add([q, v])
    assert [x.name for x in add.variables] == ["additive_attention/scale:0"]
    vt = tf.constant(v)
    _directional_check(add, q, call=lambda a: add([a, vt]))
    _directional_check(att, q, call=lambda a: att([a, vt], use_causal_mask=True))


def test_dense_attention_errors():
    with pytest.raises(InvalidArgumentError, match=r"list \[query, value\]"):
        L.Attention()(tf.zeros([2, 3, 4]))
    with pytest.raises(InvalidArgumentError, match=r"value mask must have shape \[batch, Tv\]"):
        L.Attention()([tf.zeros([2, 3, 4]), tf.zeros([2, 5, 4])], mask=[None, np.ones((2, 3))])
    with pytest.raises(InvalidArgumentError, match="score_mode must be 'dot' or 'concat'"):
        L.Attention(score_mode="general")
    with pytest.raises(InvalidArgumentError, match="rank 3"):
        L.AdditiveAttention()([tf.zeros([3, 4]), tf.zeros([3, 4])])


# --- reshaping and merging ---------------------------------------------------------------------

def test_reshape_permute_repeat_vector():
    x = _rng(18).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(L.Reshape((4, -1))(x).numpy(), x.reshape(2, 4, 3))
    np.testing.assert_array_equal(L.Permute((2, 1))(x).numpy(), x.transpose(0, 2, 1))
    x2 = x[:, 0]
    np.testing.assert_array_equal(L.RepeatVector(3)(x2).numpy(),
                                  np.repeat(x2[:, None], 3, axis=1))
    for layer in (L.Reshape((4, -1)), L.Permute((2, 1)), L.RepeatVector(3)):
        _roundtrip(layer)
    with pytest.raises(InvalidArgumentError, match=r"cannot reshape examples of shape \[3, 4\]"):
        L.Reshape((5, -1))(x)
    with pytest.raises(InvalidArgumentError, match="permutation of 1..2"):
        L.Permute((0, 1))
    with pytest.raises(InvalidArgumentError, match="rank 2"):
        L.RepeatVector(2)(x)


@pytest.mark.parametrize("name,ref", [
    ("Add", lambda xs: xs[0] + xs[1] + xs[2]), ("Multiply", lambda xs: xs[0] * xs[1] * xs[2]),
    ("Average", lambda xs: (xs[0] + xs[1] + xs[2]) / 3),
    ("Maximum", lambda xs: np.maximum(np.maximum(xs[0], xs[1]), xs[2])),
    ("Minimum", lambda xs: np.minimum(np.minimum(xs[0], xs[1]), xs[2])),
    ("Concatenate", lambda xs: np.concatenate(xs, axis=-1))])
def test_merge_layers_match_numpy(name, ref):
    xs = [_rng(i).standard_normal((2, 3)) for i in range(3)]
    layer = getattr(L, name)(dtype="float64")
    np.testing.assert_allclose(layer(xs).numpy(), ref(xs), rtol=1e-12)
    fn = getattr(L, name.lower())
    np.testing.assert_allclose(fn(xs).numpy(), ref(xs), rtol=1e-6, atol=1e-6)   # float32
    _roundtrip(layer)
    ts = [tf.constant(x) for x in xs]
    with tf.GradientTape() as tape:
        tape.watch(ts)
        y = layer(ts)
    grads = tape.gradient(y, ts)
    assert all(g is not None and list(g.shape) == [2, 3] for g in grads)


def test_subtract_dot_and_merge_errors():
    a, b = _rng(1).standard_normal((2, 3)), _rng(2).standard_normal((2, 3))
    np.testing.assert_allclose(L.Subtract(dtype="float64")([a, b]).numpy(), a - b)
    np.testing.assert_allclose(L.subtract([a, b]).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose(L.Dot(axes=1, dtype="float64")([a, b]).numpy(),
                               (a * b).sum(1, keepdims=True))
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    np.testing.assert_allclose(L.dot([a, b], axes=1, normalize=True).numpy(),
                               (an * bn).sum(1, keepdims=True), rtol=1e-5)
    x, y = _rng(3).standard_normal((2, 3, 4)), _rng(4).standard_normal((2, 5, 4))
    np.testing.assert_allclose(L.Dot(axes=(2, 2), dtype="float64")([x, y]).numpy(),
                               np.einsum("bik,bjk->bij", x, y), rtol=1e-12)
    np.testing.assert_allclose(L.Dot(axes=(1, 2), dtype="float64")([x.transpose(0, 2, 1), y])
                               .numpy(), np.einsum("bki,bjk->bij", x.transpose(0, 2, 1), y),
                               rtol=1e-12)
    _roundtrip(L.Dot(axes=(1, 2), normalize=True))
    with pytest.raises(InvalidArgumentError, match="exactly 2 tensors"):
        L.Subtract()([a, b, a])
    with pytest.raises(InvalidArgumentError, match=r"add.*at least 2 tensors"):
        L.Add()([a])
    with pytest.raises(InvalidArgumentError, match=r"shapes match except on the axis"):
        L.Concatenate(axis=1)([np.zeros((2, 3)), np.zeros((3, 3))])
    with pytest.raises(InvalidArgumentError, match=r"cannot merge inputs of shapes"):
        L.Add()([np.zeros((2, 3)), np.zeros((2, 4))])
    with pytest.raises(InvalidArgumentError, match="sizes on the axes match"):
        L.Dot(axes=1)([np.zeros((2, 3)), np.zeros((2, 4))])


# --- activation layers ------------------------------------------------------------------------

def _keras_relu(x, max_value=None, slope=0.0, threshold=0.0):
    y = np.where(x >= threshold, x, slope * (x - threshold))
    return y if max_value is None else np.minimum(y, max_value)


@pytest.mark.parametrize("layer,ref", [
    (lambda: L.ReLU(), lambda x: np.maximum(x, 0)),
    (lambda: L.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.3),
     lambda x: _keras_relu(x, 1.0, 0.1, 0.3)),
    (lambda: L.ReLU(max_value=0.5), lambda x: np.clip(x, 0, 0.5)),
    (lambda: L.LeakyReLU(), lambda x: np.where(x > 0, x, 0.3 * x)),
    (lambda: L.LeakyReLU(alpha=0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    (lambda: L.LeakyReLU(negative_slope=0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda: L.ELU(alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    (lambda: L.ThresholdedReLU(theta=0.5), lambda x: np.where(x > 0.5, x, 0)),
    (lambda: L.Softmax(), _softmax),
    (lambda: L.Softmax(axis=0), lambda x: _softmax(x, axis=0)),
    (lambda: L.Identity(), lambda x: x),
])
def test_activation_layers_match_numpy(layer, ref):
    x = _rng(19).uniform(-2, 2, (3, 4))
    x = np.where(np.abs(x) < 0.05, 0.1, x)              # away from the kinks
    lay = layer()
    np.testing.assert_allclose(lay(tf.constant(x)).numpy(), ref(x), rtol=1e-6, atol=1e-7)
    _roundtrip(lay)
    xs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = tf.reduce_sum(lay(xs) * xs)
    assert tape.gradient(y, xs) is not None


def test_softmax_layer_mask_and_several_axes():
    x = _rng(20).standard_normal((2, 3, 4))
    mask = _rng(21).random((2, 3, 4)) > 0.3
    mask[..., 0] = True
    y = L.Softmax()(tf.constant(x), mask=mask).numpy()
    np.testing.assert_allclose(y, _softmax(np.where(mask, x, -1e9)), rtol=1e-6, atol=1e-12)
    with pytest.raises(InvalidArgumentError, match=r"softmax.*mask \(shape \[2, 3\]\) must "
                                                    r"broadcast"):
        L.Softmax()(tf.constant(x), mask=mask[:, :, 0])
    y2 = L.Softmax(axis=[1, 2])(tf.constant(x)).numpy()
    e = np.exp(x - x.max(axis=(1, 2), keepdims=True))
    np.testing.assert_allclose(y2, e / e.sum(axis=(1, 2), keepdims=True), rtol=1e-6)


def test_prelu_matches_numpy_names_and_gradients():
    x = _rng(22).standard_normal((2, 3, 4))
    p = L.PReLU(alpha_initializer="random_normal", shared_axes=[1], dtype="float64")
    y = p(x).numpy()
    a = p.alpha.numpy()
    assert list(a.shape) == [1, 4] and p.alpha.name == "p_re_lu/alpha:0"
    np.testing.assert_allclose(y, np.where(x > 0, x, a * x), rtol=1e-12)
    _directional_check(p, x)
    _roundtrip(p)
    with pytest.raises(InvalidArgumentError, match=r"shared_axes \[3\] must be in 1..2"):
        L.PReLU(shared_axes=3)(tf.zeros([2, 3, 4]))


def test_activation_layer_errors():
    with pytest.raises(InvalidArgumentError, match="max_value must be >= 0"):
        L.ReLU(max_value=-1)
    with pytest.raises(InvalidArgumentError, match="negative_slope must be >= 0"):
        L.LeakyReLU(negative_slope=-0.1)
    with pytest.raises(InvalidArgumentError, match="alpha or negative_slope, not both"):
        L.LeakyReLU(alpha=0.1, negative_slope=0.1)


# --- noise and regularisation ----------------------------------------------------------------

@pytest.mark.parametrize("cls,shape,data_format", [
    ("SpatialDropout1D", (4, 50, 6), None), ("SpatialDropout2D", (4, 5, 5, 6), None),
    ("SpatialDropout2D", (4, 6, 5, 5), "channels_first"),
    ("SpatialDropout3D", (4, 3, 3, 3, 6), None)])
def test_spatial_dropout_drops_whole_channels(cls, shape, data_format):
    kw = {} if data_format is None else {"data_format": data_format}
    layer = getattr(L, cls)(0.5, **kw)
    x = np.ones(shape, np.float32)
    np.testing.assert_array_equal(layer(x).numpy(), x)           # inference: the identity
    y = layer(x, training=True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    chan_axis = 1 if data_format == "channels_first" else -1
    moved = np.moveaxis(y, chan_axis, -1).reshape(shape[0], -1, shape[chan_axis])
    assert (moved.min(axis=1) == moved.max(axis=1)).all()         # one decision per channel
    _roundtrip(layer)
    with pytest.raises(InvalidArgumentError, match=f"{cls}: rate must be in"):
        getattr(L, cls)(1.0)
    with pytest.raises(InvalidArgumentError, match=f"needs inputs of rank {len(shape)}"):
        layer(np.ones((2,) * (len(shape) + 1), np.float32), training=True)


def test_gaussian_noise_and_dropout_statistics():
    x = np.ones((200, 200), np.float32)
    noise = L.GaussianNoise(0.5)
    np.testing.assert_array_equal(noise(x).numpy(), x)
    y = noise(x, training=True).numpy() - 1
    assert abs(y.mean()) < 0.02 and abs(y.std() - 0.5) < 0.02
    drop = L.GaussianDropout(0.2)
    np.testing.assert_array_equal(drop(x).numpy(), x)
    z = drop(x, training=True).numpy()
    assert abs(z.mean() - 1) < 0.02 and abs(z.std() - np.sqrt(0.25)) < 0.02
    _roundtrip(noise)
    _roundtrip(drop)
    with pytest.raises(InvalidArgumentError, match="stddev must be >= 0"):
        L.GaussianNoise(-1)


def test_activity_regularization_adds_its_loss():
    x = np.array([[1.0, -2.0]], np.float32)
    layer = L.ActivityRegularization(l1=0.1, l2=0.01)
    assert [float(v) for v in layer.losses] == [0.0]
    np.testing.assert_array_equal(layer(x).numpy(), x)
    np.testing.assert_allclose([float(v) for v in layer.losses], [0.1 * 3 + 0.01 * 5],
                               rtol=1e-6)
    model = tf.keras.Sequential([L.Dense(2, kernel_initializer="ones"), layer])
    model(x)
    assert len(model.losses) == 1
    _roundtrip(layer)


# --- in a model, traced, on opencl:0 ---------------------------------------------------------

def test_transformer_block_trains_in_a_model():
    tf.random.set_seed(0)
    inputs = _rng(23).standard_normal((4, 6, 8)).astype(np.float32)
    target = _rng(24).standard_normal((4, 6, 8)).astype(np.float32)
    mha, ln1, ln2 = L.MultiHeadAttention(2, 4), L.LayerNormalization(), L.LayerNormalization()
    ff1, ff2 = L.Dense(16, activation="relu"), L.Dense(8)
    opt = tf.keras.optimizers.Adam(0.01)

    def step():
        with tf.GradientTape() as tape:
            h = ln1(L.add([inputs, mha(inputs, inputs)]))
            y = ln2(h + ff2(ff1(h)))
            loss = tf.reduce_mean(tf.square(y - target))
        params = (mha.trainable_variables + ln1.trainable_variables + ff1.trainable_variables
                  + ff2.trainable_variables + ln2.trainable_variables)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return float(loss)

    losses = [step() for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize("build", ["layer_norm", "mha", "attention", "group_norm"])
def test_layers_on_opencl_match_cpu(build):
    reason = conformance.unavailable_devices().get("opencl:0")
    if reason:
        pytest.skip(reason)
    x = _rng(25).standard_normal((2, 4, 8)).astype(np.float32)
    makers = {"layer_norm": lambda: L.LayerNormalization(gamma_initializer="random_normal"),
              "mha": lambda: L.MultiHeadAttention(2, 4),
              "attention": lambda: L.Attention(use_scale=True),
              "group_norm": lambda: L.GroupNormalization(groups=2)}
    call = {"mha": lambda layer, v: layer(v, v, use_causal_mask=True),
            "attention": lambda layer, v: layer([v, v])}.get(build, lambda layer, v: layer(v))

    def run(device, weights=None):
        with tf.device(device):
            layer = makers[build]()
            xs = tf.constant(x)
            call(layer, xs)
            if weights is not None:
                layer.set_weights(weights)
            with tf.GradientTape() as tape:
                tape.watch(xs)
                loss = tf.reduce_sum(tf.square(call(layer, xs)))
            grads = tape.gradient(loss, [xs] + layer.trainable_variables)
        return layer, [float(loss)] + [g.numpy() for g in grads]

    cpu, want = run("cpu:0")
    ocl, got = run("opencl:0", cpu.get_weights())
    assert all(v.device == "opencl:0" for v in ocl.variables)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
