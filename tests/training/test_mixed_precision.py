"""tf.keras.mixed_precision: policies, layers computing in 16 bits with float32
variables, and the LossScaleOptimizer's dynamic loss scaling."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.testing import conformance

mp = tf.keras.mixed_precision


def _needs_float16():
    """Skip where the default device cannot hold float16 (OpenCL without cl_khr_fp16:
    tests/backends/test_opencl.py runs this file with opencl:0 as the default)."""
    dev = tf.runtime.devices.get_device(tf.constant(0.0).device)
    why = dev.backend.dtype_unsupported(dev, tf.float16)
    if why:
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _reset_policy():
    yield
    mp.set_global_policy("float32")


def test_policy_names_and_errors():
    p = mp.Policy("mixed_bfloat16")
    assert (p.name, p.compute_dtype, p.variable_dtype) == ("mixed_bfloat16", "bfloat16", "float32")
    assert mp.Policy("mixed_float16").compute_dtype == "float16"
    assert mp.Policy("float64").variable_dtype == "float64"
    with pytest.raises(tf.errors.InvalidArgumentError, match="mixed_bfloat16.*float32"):
        mp.Policy("mixed_bf16")
    with pytest.raises(tf.errors.InvalidArgumentError, match="valid policies"):
        mp.set_global_policy("half")
    assert mp.global_policy().name == "float32"      # a bad name changed nothing
    with pytest.raises(TypeError):
        mp.Policy(16)


def test_global_policy_applies_to_new_layers_only():
    before = tf.keras.layers.Dense(2)
    mp.set_global_policy("mixed_bfloat16")
    assert mp.global_policy() == mp.Policy("mixed_bfloat16")
    after = tf.keras.layers.Dense(2)
    assert before.dtype_policy.name == "float32"
    assert after.dtype_policy.name == "mixed_bfloat16"
    assert after.compute_dtype is tf.bfloat16 and after.dtype is tf.float32
    y = after(tf.ones([3, 4]))
    assert y.dtype is tf.bfloat16
    assert after.kernel.dtype is tf.float32 and after.bias.dtype is tf.float32
    assert before(tf.ones([3, 4])).dtype is tf.float32


def test_layer_dtype_argument_takes_policy_names():
    _needs_float16()
    layer = tf.keras.layers.Dense(3, dtype="mixed_float16")
    assert layer(np.ones([2, 5], np.float32)).dtype is tf.float16
    assert layer.kernel.dtype is tf.float32
    out = tf.keras.layers.Dense(3, dtype="float32")(tf.ones([2, 5], tf.bfloat16))
    assert out.dtype is tf.float32          # a float32 layer casts 16-bit inputs up


def test_gradients_reach_float32_variables():
    layer = tf.keras.layers.Dense(4, dtype="mixed_bfloat16")
    x = tf.random.normal([8, 3])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x), tf.float32) ** 2)
    gk, gb = tape.gradient(loss, [layer.kernel, layer.bias])
    assert gk.dtype is tf.float32 and gb.dtype is tf.float32
    # the same in float32, up to bfloat16's rounding
    k, b = layer.kernel.numpy(), layer.bias.numpy()
    want = 2 * x.numpy().T @ (x.numpy() @ k + b)
    np.testing.assert_allclose(gk.numpy(), want, rtol=5e-2, atol=5e-2 * np.abs(want).max())


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_policy_model_trains(policy):
    if policy == "mixed_float16":
        _needs_float16()
    tf.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 10)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    mp.set_global_policy(policy)
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(10,)),
                                 tf.keras.layers.Dense(2, dtype="float32")])
    mp.set_global_policy("float32")
    opt = tf.keras.optimizers.Adam(0.01)
    if policy == "mixed_float16":
        opt = mp.LossScaleOptimizer(opt, initial_scale=2.0 ** 8)
    model.compile(optimizer=opt,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hidden = model.layers[0](tf.constant(x[:4]))
    assert hidden.dtype is tf.as_dtype(policy.split("_")[1])        # activations 16-bit
    first = float(model.test_on_batch(x, y))
    model.fit(x, y, batch_size=32, epochs=5, verbose=0)
    last = float(model.test_on_batch(x, y))
    assert last < 0.5 * first, (first, last)
    assert all(v.dtype is tf.float32 for v in model.trainable_variables)
    acc = np.mean(np.argmax(model.predict_on_batch(x).numpy(), 1) == y)
    assert acc > 0.9


def test_loss_scale_dynamics():
    opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=16.0,
                                dynamic_growth_steps=2)
    v = tf.Variable([1.0, 2.0])
    assert float(opt.loss_scale) == 16.0
    opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    assert float(opt.loss_scale) == 16.0 and int(opt.dynamic_counter) == 1
    opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    assert float(opt.loss_scale) == 32.0 and int(opt.dynamic_counter) == 0    # doubled
    np.testing.assert_allclose(v.numpy(), [0.0, 1.0])
    opt.apply_gradients([(tf.constant([np.nan, 1.0]), v)])                  # skipped
    np.testing.assert_allclose(v.numpy(), [0.0, 1.0])
    assert float(opt.loss_scale) == 16.0 and int(opt.dynamic_counter) == 0
    assert int(opt.iterations) == 2                     # the skipped step did not count
    opt.apply_gradients([(tf.constant([np.inf, 1.0]), v)])
    assert float(opt.loss_scale) == 8.0


def test_scaled_loss_and_unscaled_gradients():
    opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
    assert float(opt.loss_scale) == 2.0 ** 15
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        loss = x * x
        scaled = opt.get_scaled_loss(loss)
    assert float(scaled) == 9.0 * 2 ** 15
    (g,) = opt.get_unscaled_gradients(tape.gradient(scaled, [x]))
    assert float(g) == 6.0
    assert opt.get_unscaled_gradients([None]) == [None]
    # minimize scales and unscales itself
    opt.minimize(lambda: x * x, var_list=[x])
    assert float(x) == pytest.approx(3.0 - 0.1 * 6.0)


def test_float16_small_gradients_survive_only_with_loss_scaling():
    _needs_float16()
    w = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as tape:
        small = tf.constant(1e-4, tf.float16)
        loss16 = tf.cast(w, tf.float16) * small * small      # d/dw = 1e-8
        scaled = loss16 * tf.constant(2.0 ** 15, tf.float16)
    assert float(tape.gradient(loss16, w)) == 0.0          # 1e-8 flushes to 0 in float16
    g = float(tape.gradient(scaled, w)) / 2.0 ** 15
    assert g == pytest.approx(1e-8, rel=2e-2)


def test_loss_scale_optimizer_bad_arguments():
    with pytest.raises(TypeError, match="optimizer"):
        mp.LossScaleOptimizer("sgd")
    with pytest.raises(tf.errors.InvalidArgumentError, match="initial_scale"):
        mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), initial_scale=0.5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dynamic_growth_steps"):
        mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic_growth_steps=0)
    inner = mp.LossScaleOptimizer(tf.keras.optimizers.SGD())
    with pytest.raises(TypeError, match="already"):
        mp.LossScaleOptimizer(inner)


def test_fixed_scale_never_changes():
    opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), dynamic=False, initial_scale=4.0)
    v = tf.Variable(1.0)
    opt.apply_gradients([(tf.constant(np.inf, tf.float32), v)])
    assert float(v) == 1.0 and float(opt.loss_scale) == 4.0


def test_loss_scale_state_in_checkpoints(tmp_path):
    def make():
        v = tf.Variable([1.0, 2.0], name="v")
        opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(0.1), initial_scale=64.0,
                                    dynamic_growth_steps=3)
        return v, opt, tf.train.Checkpoint(v=v, optimizer=opt)
    v, opt, ckpt = make()
    opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    opt.apply_gradients([(tf.constant([np.nan, 1.0]), v)])     # scale 32, counter 0
    opt.apply_gradients([(tf.constant([1.0, -1.0]), v)])       # counter 1
    path = ckpt.save(str(tmp_path / "ckpt"))
    v2, opt2, ckpt2 = make()
    ckpt2.restore(path)
    opt2.apply_gradients([(tf.constant([0.5, 0.5]), v2)])       # the restore applies here
    assert float(opt2.loss_scale) == 32.0 and int(opt2.dynamic_counter) == 2
    opt.apply_gradients([(tf.constant([0.5, 0.5]), v)])
    np.testing.assert_allclose(v2.numpy(), v.numpy(), rtol=1e-6)   # Adam slots restored
    assert int(opt2.iterations) == int(opt.iterations) == 3


def _train_bf16_mlp(device, steps=4):
    """A mixed_bfloat16 Dense MLP (relu, softmax cross-entropy, Adam) trained on
    ``device`` from fixed weights; (losses, final weights, hidden activations)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 10)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    init = [rng.normal(scale=0.3, size=s).astype(np.float32)
            for s in [(10, 16), (16,), (16, 2), (2,)]]
    mp.set_global_policy("mixed_bfloat16")
    try:
        with tf.device(device):
            model = tf.keras.Sequential([
                tf.keras.layers.Dense(16, activation="relu", input_shape=(10,)),
                tf.keras.layers.Dense(2, dtype="float32")])
            model.build((None, 10))
            for v, w in zip(model.trainable_variables, init):
                v.assign(w)
            opt = tf.keras.optimizers.Adam(0.01)
            xt, yt = tf.constant(x), tf.constant(y)
            losses = []
            for _ in range(steps):
                with tf.GradientTape() as tape:
                    logits = model(xt)
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=yt, logits=logits))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                losses.append(float(loss))
            hidden = model.layers[0](xt)
            assert hidden.dtype is tf.bfloat16 and hidden.device == device
            assert all(g.dtype is tf.float32 for g in grads)
            return (np.array(losses), [v.numpy() for v in model.trainable_variables],
                    hidden.numpy().astype(np.float32))
    finally:
        mp.set_global_policy("float32")


def test_mixed_bfloat16_mlp_trains_on_opencl_like_on_cpu():
    """bfloat16 on OpenCL (16-bit storage, float32 compute): forward, backward and Adam
    steps of a mixed_bfloat16 MLP give cpu:0's numbers up to bfloat16 rounding."""
    reason = conformance.unavailable_devices().get("opencl:0")
    if reason:
        pytest.skip(reason)
    cpu = _train_bf16_mlp("cpu:0")
    ocl = _train_bf16_mlp("opencl:0")
    assert cpu[0][-1] < cpu[0][0]                       # it learns
    np.testing.assert_allclose(ocl[0], cpu[0], rtol=2e-2, atol=2e-2)
    for a, b in zip(ocl[1], cpu[1]):
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(ocl[2], cpu[2], rtol=2e-2, atol=2e-2)
