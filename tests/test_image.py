"""tf.image (ops/image.py): values against TensorFlow 2.21's (recorded below from a real
TensorFlow on one small image), dtypes, 3-D and 4-D input, gradients, and the errors."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import (InvalidArgumentError, InvalidTypeError, NotDifferentiableError,
                             UnimplementedError)

#: the test image: (arange(12) ** 1.5).reshape(3, 4, 1) / 10, resized by TensorFlow 2.21's
#: tf.image.resize (antialias=False), rounded to 5 decimals
IMG = (np.arange(12, dtype=np.float32) ** 1.5).reshape(3, 4, 1) / 10
_TF_RESIZE = {
    ("bilinear", (2, 3)): [[0.22575, 0.46703, 0.80719], [1.96496, 2.52182, 3.12254]],
    ("bilinear", (5, 7)): [
        [0.0, 0.03571, 0.09286, 0.19142, 0.29976, 0.43505, 0.51962],
        [0.32, 0.38686, 0.49384, 0.6324, 0.77865, 0.94722, 1.05258],
        [0.8, 0.91358, 1.09532, 1.29386, 1.497, 1.71548, 1.85203],
        [1.67765, 1.81678, 2.03939, 2.27623, 2.517, 2.77102, 2.92978],
        [2.26274, 2.41891, 2.66877, 2.93114, 3.19699, 3.47471, 3.64829],
    ],
    ("nearest", (2, 3)): [[0.0, 0.28284, 0.51962], [2.26274, 3.16228, 3.64829]],
    ("nearest", (5, 7)): [
        [0.0, 0.0, 0.1, 0.28284, 0.28284, 0.51962, 0.51962],
        [0.0, 0.0, 0.1, 0.28284, 0.28284, 0.51962, 0.51962],
        [0.8, 0.8, 1.11803, 1.46969, 1.46969, 1.85203, 1.85203],
        [2.26274, 2.26274, 2.7, 3.16228, 3.16228, 3.64829, 3.64829],
        [2.26274, 2.26274, 2.7, 3.16228, 3.16228, 3.64829, 3.64829],
    ],
    ("area", (2, 3)): [[0.30984, 0.5589, 0.89243], [1.87454, 2.38538, 2.93667]],
    ("area", (5, 7)): [
        [0.0, 0.025, 0.1, 0.19142, 0.28284, 0.46042, 0.51962],
        [0.26667, 0.30984, 0.43934, 0.5589, 0.67846, 0.89243, 0.96375],
        [0.8, 0.87951, 1.11803, 1.29386, 1.46969, 1.75644, 1.85202],
        [1.77516, 1.87454, 2.17268, 2.38538, 2.59808, 2.93667, 3.04953],
        [2.26274, 2.37206, 2.7, 2.93114, 3.16228, 3.52679, 3.64828],
    ],
    ("bicubic", (2, 3)): [[0.13329, 0.35708, 0.70558], [2.04561, 2.64142, 3.2879]],
    ("bicubic", (5, 7)): [
        [-0.06704, -0.04166, 0.01412, 0.09927, 0.20862, 0.35722, 0.43687],
        [0.20181, 0.25808, 0.3716, 0.49819, 0.64384, 0.83044, 0.92946],
        [0.77481, 0.88272, 1.09289, 1.28985, 1.49775, 1.74986, 1.88231],
        [1.7528, 1.89093, 2.15854, 2.40237, 2.65487, 2.95574, 3.11331],
        [2.33786, 2.49016, 2.78489, 3.05182, 3.32685, 3.65262, 3.82307],
    ],
}


@pytest.mark.parametrize("key", sorted(_TF_RESIZE))
def test_resize_matches_tensorflow(key):
    method, size = key
    got = tf.image.resize(IMG, size, method=method)
    assert got.dtype is tf.float32 and got.shape == size + (1,)
    np.testing.assert_allclose(got.numpy()[..., 0], _TF_RESIZE[key], atol=2e-5)
    batch = tf.image.resize(np.stack([IMG, 2 * IMG]), size, method=method)     # NHWC
    np.testing.assert_allclose(batch.numpy()[1, ..., 0], 2 * np.array(_TF_RESIZE[key]),
                               atol=4e-5)


def test_resize_dtypes_and_options():
    u8 = tf.constant(np.arange(12, dtype=np.uint8).reshape(3, 4, 1))
    assert tf.image.resize(u8, [2, 2]).dtype is tf.float32
    assert tf.image.resize(u8, [2, 2], method="nearest").dtype is tf.uint8
    assert tf.image.resize(tf.zeros([1, 3, 4, 2], tf.float64), [5, 5]).dtype is tf.float32
    assert tf.image.resize(IMG, [9, 9], preserve_aspect_ratio=True).shape == (7, 9, 1)
    assert tf.image.resize(IMG, tf.constant([6, 8]), "bilinear").shape == (6, 8, 1)
    assert tf.image.resize(IMG, [3, 4]).numpy().tolist() == IMG.tolist()   # same size
    # TensorFlow pads at the offset of the unrounded size: here none above, two rows below
    np.testing.assert_array_equal(tf.image.resize_with_pad(tf.ones([3, 5, 1]), 4, 4)[..., 0],
                                  [[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    crop = tf.image.resize_with_crop_or_pad(tf.reshape(tf.range(12), [3, 4, 1]), 5, 2)
    assert crop[..., 0].numpy().tolist() == [[0, 0], [1, 2], [5, 6], [9, 10], [0, 0]]


def test_resize_is_differentiable():
    x = tf.Variable(IMG)
    for method in ("bilinear", "nearest", "area", "bicubic"):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.image.resize(x, [5, 7], method=method))
        g = tape.gradient(y, x)
        # each output pixel's weights sum to 1: the gradient of the sum spreads 35 units
        assert g.shape == (3, 4, 1) and abs(float(tf.reduce_sum(g)) - 35.0) < 1e-3, method


def test_flips_rotations_crops():
    x = np.arange(24).reshape(2, 3, 4, 1)
    for img in (x[0], x):                               # HWC and NHWC
        nd = img.ndim
        np.testing.assert_array_equal(tf.image.flip_left_right(img), np.flip(img, nd - 2))
        np.testing.assert_array_equal(tf.image.flip_up_down(img), np.flip(img, nd - 3))
        np.testing.assert_array_equal(tf.image.transpose(img), np.swapaxes(img, nd - 3, nd - 2))
        for k in range(-1, 5):
            np.testing.assert_array_equal(tf.image.rot90(img, k),
                                          np.rot90(img, k, axes=(nd - 3, nd - 2)))
    np.testing.assert_array_equal(tf.image.central_crop(x[0], 0.5), x[0, :, 1:3])
    np.testing.assert_array_equal(tf.image.crop_to_bounding_box(x, 1, 2, 2, 2), x[:, 1:, 2:])
    padded = tf.image.pad_to_bounding_box(x[0], 1, 0, 5, 5)
    assert padded.shape == (5, 5, 1) and padded.numpy()[1:4, :4].tolist() == x[0].tolist()


def test_random_flips_are_seeded():
    x = tf.reshape(tf.range(8.), [8, 1, 1, 1]) * tf.ones([8, 1, 2, 1])
    a = tf.image.random_flip_left_right(x + [[[[0.], [1.]]]], seed=5)
    tf.random.set_seed(1)
    b = tf.image.random_flip_left_right(x + [[[[0.], [1.]]]], seed=5)
    tf.random.set_seed(1)
    c = tf.image.random_flip_left_right(x + [[[[0.], [1.]]]], seed=5)
    assert b.numpy().tolist() == c.numpy().tolist() and a.shape == (8, 1, 2, 1)
    assert tf.image.random_flip_up_down(tf.ones([2, 3, 1]), seed=2).shape == (2, 3, 1)


def test_convert_image_dtype_matches_tensorflow():
    cid = tf.image.convert_image_dtype
    assert cid(tf.constant([0, 1, 127, 255], tf.uint8), tf.int16).numpy().tolist() == \
        [0, 128, 16256, 32640]
    assert cid(tf.constant([-1000, 0, 30000], tf.int16), tf.uint8).numpy().tolist() == \
        [248, 0, 234]
    assert cid([-0.5, 0.0, 0.5, 1.0, 1.5], tf.uint8, saturate=True).numpy().tolist() == \
        [0, 0, 127, 255, 255]
    assert cid(tf.constant([0, 1, 255], tf.uint8), tf.float16).numpy().tolist() == \
        [0.0, 0.0039215087890625, 1.0]
    x = tf.constant([0.25])
    assert cid(x, tf.float32) is x
    with pytest.raises(InvalidTypeError, match="integer or floating-point"):
        cid(tf.constant([True]), tf.float32)


def test_colour_adjustments_match_tensorflow():
    u8 = tf.constant([[[10], [20]], [[30], [250]]], tf.uint8)
    assert tf.image.adjust_contrast(u8, 2.0)[..., 0].numpy().tolist() == [[0, 0], [0, 255]]
    assert tf.image.adjust_brightness(tf.constant([[[10], [250]]], tf.uint8), 0.1)[..., 0] \
        .numpy().tolist() == [[35, 255]]
    np.testing.assert_allclose(tf.image.adjust_saturation([[[0.2, 0.4, 0.9]]], 0.5),
                               [[[0.55, 0.65, 0.9]]], atol=1e-6)
    assert tf.image.rgb_to_grayscale(tf.constant([[[10, 200, 30]]], tf.uint8)).numpy() \
        .tolist() == [[[124]]]
    assert tf.image.grayscale_to_rgb(tf.ones([2, 2, 1])).shape == (2, 2, 3)
    rgb = np.random.default_rng(0).random((4, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(rgb)), rgb, atol=1e-5)
    s = tf.image.per_image_standardization(tf.constant(np.arange(8).reshape(2, 2, 2), tf.uint8))
    assert s.dtype is tf.float32
    np.testing.assert_allclose([float(tf.reduce_mean(s)), float(tf.math.reduce_std(s))],
                               [0, 1], atol=1e-6)
    np.testing.assert_allclose(tf.image.adjust_gamma([[[0.25]]], 2, 2.0), [[[0.125]]])
    assert tf.image.random_brightness(tf.zeros([2, 2, 1]), 0.2, seed=1).shape == (2, 2, 1)
    assert tf.image.random_contrast(tf.ones([2, 2, 1]), 0.5, 0.9, seed=1).shape == (2, 2, 1)


def test_adjust_contrast_has_no_gradient_as_in_tensorflow():
    image, factor = tf.Variable([[[0.5, 0.0, 0.0]]]), tf.Variable(0.1)
    with tf.GradientTape() as tape:
        out = tf.image.adjust_contrast(image, factor)
    with pytest.raises(NotDifferentiableError, match="AdjustContrastv2") as e:
        tape.gradient(out, [image, factor])
    assert isinstance(e.value, LookupError)
    with tf.GradientTape() as tape:            # flips are differentiable
        y = tf.reduce_sum(tf.image.flip_left_right(image) * [1., 2., 3.])
    assert tape.gradient(y, image).numpy().tolist() == [[[1., 2., 3.]]]


def test_errors():
    with pytest.raises(InvalidArgumentError, match="must be 3-D"):
        tf.image.resize(tf.zeros([3, 3]), [2, 2])
    with pytest.raises(InvalidArgumentError, match="size must be positive"):
        tf.image.resize(IMG, [0, 2])
    with pytest.raises(InvalidArgumentError, match="method must be one of"):
        tf.image.resize(IMG, [2, 2], method="foo")
    with pytest.raises(UnimplementedError, match="lanczos3"):
        tf.image.resize(IMG, [2, 2], method="lanczos3")
    with pytest.raises(UnimplementedError, match="antialias"):
        tf.image.resize(IMG, [2, 2], antialias=True)
    with pytest.raises(InvalidArgumentError, match="must be 3-D"):
        tf.image.flip_left_right(tf.zeros([3, 3]))
    with pytest.raises(InvalidArgumentError, match="within"):
        tf.image.central_crop(IMG, 1.5)
    with pytest.raises(InvalidArgumentError, match="must lie inside"):
        tf.image.crop_to_bounding_box(IMG, 2, 0, 2, 2)
    with pytest.raises(InvalidArgumentError, match="must fit"):
        tf.image.pad_to_bounding_box(IMG, 1, 1, 3, 3)
    with pytest.raises(InvalidArgumentError, match="last dimension must be 1"):
        tf.image.grayscale_to_rgb(tf.zeros([2, 3, 2]))
    with pytest.raises(InvalidArgumentError, match="last dimension must be 3"):
        tf.image.rgb_to_grayscale(tf.zeros([2, 3, 2]))


@pytest.mark.parametrize("call", [
    lambda: tf.image.adjust_brightness(1.0, 1 + 1j),
    lambda: tf.image.adjust_gamma([[[0.5]]], 1 + 1j),
    lambda: tf.image.adjust_saturation(tf.ones([1, 1, 3]), tf.constant(1j)),
])
def test_adjustments_refuse_complex_factors(call):
    # the fuzzer (seed 0) found adjust_brightness dropping the imaginary part of its delta
    with pytest.raises(InvalidArgumentError, match="must be real, got a complex"):
        call()


def test_adjustments_cast_real_tensor_factors():
    np.testing.assert_allclose(
        tf.image.adjust_brightness([[[0.25]]], tf.constant(0.5, tf.float64)).numpy(), [[[0.75]]])
    np.testing.assert_allclose(tf.image.adjust_gamma([[[0.5]]], tf.constant(2)).numpy(),
                               [[[0.25]]])
