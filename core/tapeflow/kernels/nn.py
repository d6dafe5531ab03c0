"""Neural-network kernels, written once against an array module ``xp``.

Convolution is im2col: a strided *view* of the padded input with shape
``(N, Ho, Wo, kh, kw, C)`` (``as_strided``, the mechanism behind
``sliding_window_view``, with strides and dilations folded in), copied a block of
images at a time into a cache-sized buffer (``COLS_BYTES``) and multiplied by the HWIO
filter reshaped to ``(kh*kw*C, O)`` (free: it is contiguous); the filter gradient is
the transposed GEMM on the same columns. The input gradient is, for stride 1, the
same blocked convolution of the padded output gradient with the filter flipped and
transposed; for larger strides (col2im) ``kh*kw`` small GEMMs added into strided views.
On the host, 3x3 stride-1 float32 convolutions with many channels (and their filter
gradients) go through Winograd F(4x4, 3x3) instead (:mod:`.winograd`, its cost rule
and accuracy in docs/winograd.md).
The 3-d convolution is the same im2col over ``(kd, kh, kw, C)`` (its input gradient
col2im, one GEMM per filter tap); the depthwise convolution one broadcast multiply-add
per filter tap (its filter gradient one ``einsum`` per tap).
Pooling loops over the ``kh*kw`` window offsets with whole-array ufuncs (float32 on the
host: the native library's ``max_pool``/``max_pool_grad``/``avg_pool``/``avg_pool_grad``
first, the same results). NCHW (NCDHW) is handled by transposed views.

A backend may give the kernels a native library as the build service ``native``
(the CPU backend passes ``tapeflow_cpu_numpy.native``, its C kernels: docs/cpu-kernels.md):
then the float32 2-d convolution, its stride-1 input gradient (the same convolution) and
its filter gradient call it first, at call time while its ``available()`` is true, and
take the path above where it returns None (:meth:`NNKernels.conv_nhwc`, the one
convolution every 2-d convolution kernel goes through, is the extension point).

Long file: the neural-network kernels of one array module are one class,
:class:`NNKernels`, whose convolution paths (native, Winograd, im2col) share its window
geometry and blocking.

Attributes arrive normalised by ``tapeflow.nn``: ``strides``/``dilations``/``ksize``
as ``(h, w)``, ``padding`` ``"SAME"``/``"VALID"``/``((t, b), (l, r))``.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import InvalidArgumentError
from ..plugins import KernelSpec
from . import winograd

FLOATS = ("float16", "float32", "float64")
_F32 = np.dtype(np.float32)


def window_geometry(size, k, s, d, padding, i):
    """(output size, pad before, pad after) of one spatial dimension of a window op
    (convolution, pooling): input ``size``, window ``k``, stride ``s``, dilation ``d``,
    ``padding`` "SAME", "VALID" or explicit ``[(before, after), ...]`` (``i``: which).
    Backends that run convolutions another way (cuDNN) use it to agree with this one.

    >>> window_geometry(7, 3, 2, 1, "SAME", 0)
    (4, 1, 1)
    """
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max((out - 1) * s + eff - size, 0)
        return out, total // 2, total - total // 2
    if padding == "VALID":
        return max((size - eff) // s + 1, 0), 0, 0
    pb, pa = padding[i]
    return max((size + pb + pa - eff) // s + 1, 0), pb, pa


#: On the CPU the im2col columns are built and multiplied a block of images at a time,
#: in a reused buffer of about this many bytes, so that each block is still in cache
#: when the GEMM reads it (the seeds' CNN: conv2d 3.7 -> 1.7 ms, its filter gradient
#: 3.0 -> 1.8 ms). On a GPU one big GEMM beats many launches: the batch is one block.
COLS_BYTES = 2 << 20


def nhwc(x, fmt):
    """``x`` (of ``data_format`` ``fmt``) as NHWC (a transposed view for NCHW)."""
    return x if fmt == "NHWC" else x.transpose(0, 2, 3, 1)


def back(y, fmt):
    """The NHWC ``y`` back in ``data_format`` ``fmt``."""
    return y if fmt == "NHWC" else y.transpose(0, 3, 1, 2)


def ndhwc(x, fmt):
    """``x`` (of ``data_format`` ``fmt``, NDHWC or NCDHW) as NDHWC (a view)."""
    return x if fmt == "NDHWC" else x.transpose(0, 2, 3, 4, 1)


def back3(y, fmt):
    """The NDHWC ``y`` back in ``data_format`` ``fmt``."""
    return y if fmt == "NDHWC" else y.transpose(0, 4, 1, 2, 3)


def shape_ndhwc(shape, fmt):
    """A 5-d ``shape`` of ``data_format`` ``fmt`` in NDHWC order."""
    return tuple(shape) if fmt == "NDHWC" else tuple(shape[i] for i in (0, 2, 3, 4, 1))


def shape_nhwc(shape, fmt):
    """A 4-d ``shape`` of ``data_format`` ``fmt`` in NHWC order."""
    n, a, b, c = shape
    return (n, a, b, c) if fmt == "NHWC" else (n, b, c, a)


def compute_dtype(dt):
    """The dtype a GEMM of ``dt`` runs in: float16 has no BLAS path in NumPy, float32."""
    return np.float32 if dt == np.float16 else dt


def _offsets(ho, wo, ksize, strides):
    """The index of each window offset: ``x[sl]`` is that offset of every window."""
    kh, kw = ksize
    sh, sw = strides
    return [(slice(None), slice(i, i + sh * (ho - 1) + 1, sh),
             slice(j, j + sw * (wo - 1) + 1, sw), slice(None))
            for i in range(kh) for j in range(kw)]


def _pool_geom(shape, ksize, strides, padding):
    """``(ho, wo, (pad top, bottom, left, right))`` of a pooling of an NHWC ``shape``."""
    n, h, w, c = shape
    ho, pt, pb = window_geometry(h, ksize[0], strides[0], 1, padding, 0)
    wo, pl, pr = window_geometry(w, ksize[1], strides[1], 1, padding, 1)
    return ho, wo, (pt, pb, pl, pr)


def _lowest(dt):
    """The lowest value of ``dt`` (-inf for floats): max pooling's padding."""
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


class NNKernels:
    """The neural-network kernels of one array module ``xp`` (NumPy or CuPy's namespace),
    one method per kernel; :meth:`table` maps op names to them.

    ``native``: the optional service of that name (see the module's docstring), an
    object with ``available()``, ``conv2d(...)`` and ``conv2d_backprop_filter(...)`` as
    ``tapeflow_cpu_numpy.native`` has them (and, optionally, its ``max_pool``,
    ``max_pool_grad``, ``avg_pool``, ``avg_pool_grad``); None: the NumPy path only.

    >>> import numpy as np
    >>> NNKernels(np).relu(np.array([-1.0, 2.0]))
    array([0., 2.])
    """

    def __init__(self, xp, native=None):
        self.xp = xp
        self.native = native
        self._as_strided = xp.lib.stride_tricks.as_strided
        self._host = xp is np          # blocked im2col on the host, one GEMM on a GPU

    def _pad(self, x, pt, pb, pl, pr, value=0):
        """The NHWC ``x`` padded in space by ``value``."""
        if pt == pb == pl == pr == 0:
            return x
        return self.xp.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=value)

    # --- activations ----------------------------------------------------------------
    def relu(self, x, out=None):
        """``max(x, 0)`` (into ``out`` when given, which may be ``x``)."""
        return self.xp.maximum(x, 0, out=out)

    def relu_grad(self, dy, x, out=None):
        """``dy`` where ``x > 0``, else 0 (into ``out`` when given, which may be ``dy``
        or ``x``: the mask is computed first). float32 runs in one pass in the native
        library when there is one (NumPy's ``dy * (x > 0)`` casts the mask in a second
        loop: 2-3x the time), with the same numbers bit for bit."""
        if (out is None or out is dy) and dy.shape == x.shape:     # (batching broadcasts)
            r = self._native_pool("relu_grad", dy, x, out)
            if r is not None:
                return r
        return self.xp.multiply(dy, x > 0, out=out)

    def relu6(self, x):
        """``min(max(x, 0), 6)``."""
        xp = self.xp
        return xp.minimum(xp.maximum(x, 0), 6)

    def relu6_grad(self, dy, x):
        """``dy`` where ``0 < x < 6``, else 0."""
        return dy * ((x > 0) & (x < 6))

    # Branch-free forms: NumPy's `where` is ~15x slower than arithmetic on float32.
    def leaky_relu(self, x, alpha):
        """``x`` where ``x > 0``, else ``alpha * x``."""
        xp = self.xp
        if 0.0 <= alpha <= 1.0:
            return xp.maximum(x, x * alpha)
        if alpha > 1.0:
            return xp.minimum(x, x * alpha)
        return xp.where(x > 0, x, x * alpha)

    def leaky_relu_grad(self, dy, x, alpha):
        """``dy`` where ``x > 0``, else ``alpha * dy`` (in the features' shape)."""
        if dy.shape != x.shape:
            # the result has the features' shape on every backend (a 0-d x made s a
            # scalar that took dy's shape); what does not broadcast to x is refused on
            # every backend (CuPy's in-place multiply took a larger dy into a 0-d s)
            if np.broadcast_shapes(dy.shape, x.shape) != tuple(x.shape):
                raise ValueError(f"gradients of shape {list(dy.shape)} do not broadcast to "
                                 f"the features' shape {list(x.shape)}")
            dy = self.xp.broadcast_to(dy, x.shape)
        s = (x > 0).astype(dy.dtype)
        s *= 1.0 - alpha
        s += alpha
        s *= dy
        return s

    def elu(self, x):
        """``x`` where ``x > 0``, else ``exp(x) - 1``."""
        xp = self.xp
        return xp.maximum(x, 0) + xp.expm1(xp.minimum(x, 0))

    def elu_grad(self, dy, y):
        """The ELU's gradient from its output ``y``: ``dy * (y + 1)`` where ``y < 0``."""
        # dy * (y + 1) where y < 0, dy elsewhere (y >= -1 always)
        return dy * (self.xp.minimum(y, 0) + 1)

    # --- softmax family -------------------------------------------------------------
    def _log_softmax(self, x, axis):
        """``log(softmax(x))`` along ``axis``, shifted by the maximum."""
        s = x - x.max(axis=axis, keepdims=True)
        return s - self.xp.log(self.xp.exp(s).sum(axis=axis, keepdims=True))

    def softmax(self, x, axis):
        """``exp(x) / sum(exp(x))`` along ``axis`` (float16 computed in float32)."""
        dt = x.dtype
        if x.size == 0:             # an empty axis: an empty result (no max to subtract)
            return self.xp.empty_like(x)
        if dt == np.float16:
            x = x.astype(np.float32)
        e = self.xp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e.astype(dt, copy=False)

    def log_softmax(self, x, axis):
        """``log(softmax(x))`` along ``axis`` (float16 computed in float32)."""
        dt = x.dtype
        if x.size == 0:
            return self.xp.empty_like(x)
        if dt == np.float16:
            x = x.astype(np.float32)
        return self._log_softmax(x, axis).astype(dt, copy=False)

    def softmax_xent(self, logits, labels, axis):
        """The cross-entropy of the distributions ``labels`` and ``softmax(logits)``."""
        dt = logits.dtype
        if dt == np.float16:
            logits, labels = logits.astype(np.float32), labels.astype(np.float32)
        ls = self._log_softmax(logits, axis)
        return (-(labels * ls).sum(axis=axis)).astype(dt, copy=False)

    def sparse_xent(self, logits, labels):
        """The cross-entropy of class indices ``labels`` and ``softmax(logits)``."""
        nc = logits.shape[-1]
        if labels.size:
            lo, hi = int(labels.min()), int(labels.max())
            if lo < 0 or hi >= nc:
                bad = lo if lo < 0 else hi
                vals = labels.ravel()
                shown = " ".join(str(int(v)) for v in vals[:32]) + (" ..." if vals.size > 32
                                                                     else "")
                raise InvalidArgumentError(
                    f"Received a label value of {bad} which is outside the valid range of "
                    f"[0, {nc}).  Label values: {shown}")
        dt = logits.dtype
        if dt == np.float16:
            logits = logits.astype(np.float32)
        ls = self._log_softmax(logits, -1)
        picked = self.xp.take_along_axis(ls, labels[..., None].astype(np.intp),
                                         axis=-1)[..., 0]
        return (-picked).astype(dt, copy=False)

    def sigmoid_xent(self, x, z):
        """The cross-entropy of labels ``z`` and ``sigmoid(x)``, stably."""
        xp = self.xp
        return xp.maximum(x, 0) - x * z + xp.log1p(xp.exp(-xp.abs(x)))

    # --- bias_add, l2_loss ----------------------------------------------------------
    def bias_add(self, x, b, data_format, out=None):
        """``x + b`` with ``b`` along the channel axis (into ``out`` when given)."""
        if data_format == "NCHW" and x.ndim >= 3:
            b = b.reshape((-1,) + (1,) * (x.ndim - 2))
        return self.xp.add(x, b, out=out)

    def l2_loss(self, x):
        """``sum(x ** 2) / 2`` (float16 computed in float32)."""
        xp = self.xp
        dt = x.dtype
        y = x.astype(np.float32) if dt == np.float16 else x
        return xp.asarray(xp.vdot(y.ravel(), y.ravel()) / 2).astype(dt)

    # --- convolution ----------------------------------------------------------------
    def _windows(self, x, kh, kw, strides, padding, dilations):
        """Strided view (N, Ho, Wo, kh, kw, C) of the padded NHWC input (no copy)."""
        n, h, w, c = x.shape
        sh, sw = strides
        dh, dw = dilations
        ho, pt, pb = window_geometry(h, kh, sh, dh, padding, 0)
        wo, pl, pr = window_geometry(w, kw, sw, dw, padding, 1)
        xpd = self._pad(x, pt, pb, pl, pr)
        s0, s1, s2, s3 = xpd.strides
        # read-only use: every consumer copies out of it
        return self._as_strided(xpd, (n, ho, wo, kh, kw, c),
                                (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3))

    def _blocks(self, win):
        """Yield (batch slice, (rows, kh*kw*C) columns) covering ``win``: C-contiguous, or
        for fewer than 4 channels the transpose of C-contiguous ``(kh*kw*C, rows)``
        columns (BLAS takes either without a copy)."""
        n, ho, wo, kh, kw, c = win.shape
        per_image = ho * wo * kh * kw * c
        cols_bytes = COLS_BYTES if self._host else None
        if cols_bytes is None:
            yield slice(0, n), win.reshape(n * ho * wo, kh * kw * c)
            return
        b = max(1, cols_bytes // max(per_image * win.itemsize, 1))
        buf = self.xp.empty(min(b, n) * per_image, dtype=win.dtype)
        for i in range(0, n, b):
            m = min(b, n - i)
            if c < 4:
                # a few channels: one row of the transposed columns per (p, q, channel),
                # each a copy whose inner run is a whole output row (wo elements)
                # instead of c (the first layer of the seeds' CNN, C=1, one thread:
                # forward 900 -> 550 us, filter gradient 670 -> 380 us)
                cols_t = buf[:m * per_image].reshape(kh, kw, c, m, ho, wo)
                for p in range(kh):
                    for q in range(kw):
                        for ch in range(c):
                            cols_t[p, q, ch] = win[i:i + m, :, :, p, q, ch]
                yield slice(i, i + m), cols_t.reshape(kh * kw * c, m * ho * wo).T
            else:
                cols = buf[:m * per_image].reshape(m, ho, wo, kh, kw, c)
                cols[...] = win[i:i + m]
                yield slice(i, i + m), cols.reshape(m * ho * wo, kh * kw * c)

    def _winograd_geometry(self, x, w_shape, strides, padding, dilations, o):
        """``(pads, (Ho, Wo))`` when the convolution of the NHWC ``x`` with a filter of
        ``w_shape`` goes the Winograd way (:func:`.winograd.use_winograd`: host, 3x3,
        stride and dilation 1, float32, shapes where it measured faster), else None.
        ``o`` is the GEMMs' output width (``O`` forward, ``C`` for the filter gradient)."""
        kh, kw, c = w_shape[:3]
        if not (self._host and kh == kw == 3 and tuple(strides) == (1, 1)
                and tuple(dilations) == (1, 1)):
            return None
        n, h, wd = x.shape[:3]
        ho, pt, pb = window_geometry(h, 3, 1, 1, padding, 0)
        wo, pl, pr = window_geometry(wd, 3, 1, 1, padding, 1)
        if not winograd.use_winograd(n, ho, wo, c, o, x.dtype):
            return None
        return (pt, pb, pl, pr), (ho, wo)

    def _native_pads(self, x, kh, kw, strides, padding, dilations):
        """``(pt, pb, pl, pr)`` of a convolution of the NHWC ``x`` when the native
        library is to be tried (service set and ``available()``, float32, a non-empty
        output, not a convolution :data:`.winograd.MODE` ``"always"`` puts on
        Winograd), else None."""
        native = self.native
        if native is None or x.dtype != _F32 or not x.size or not native.available():
            return None
        if winograd.MODE == "always" and self._winograd_geometry(
                x, (kh, kw, x.shape[3]), strides, padding, dilations, 1) is not None:
            return None
        ho, pt, pb = window_geometry(x.shape[1], kh, strides[0], dilations[0], padding, 0)
        wo, pl, pr = window_geometry(x.shape[2], kw, strides[1], dilations[1], padding, 1)
        return (pt, pb, pl, pr) if ho > 0 and wo > 0 else None

    def conv_nhwc(self, x, w, strides, padding, dilations, epilogue=None):
        """The 2-d convolution of the NHWC ``x`` with the HWIO filter ``w``, both in the
        compute dtype: NHWC output (C-contiguous). Every 2-d convolution kernel of this
        class and of :class:`~.nn_fused.FusedNNKernels` goes through it.

        With the service ``native`` (float32, ``native.available()`` at the call) it is
        ``native.conv2d``; where that returns None (a case it does not handle) or there
        is no such service, :meth:`_conv_nhwc` (im2col GEMMs, Winograd).
        ``epilogue``, when given, is called on the output blocks in place, as
        :meth:`_conv_nhwc` says (the native path: once, on the whole output), unless it
        has the attribute ``fused_args = (bias, act, alpha)`` and the native library
        runs that bias and activation in its store itself (``act``: None, "Relu",
        "Relu6", "LeakyRelu" (``alpha``) or "Elu"; :class:`~.nn_fused.Epilogue`).

        >>> import numpy as np
        >>> y = NNKernels(np).conv_nhwc(np.ones((1, 3, 3, 1), np.float32),
        ...                             np.ones((2, 2, 1, 1), np.float32), (1, 1), "VALID", (1, 1))
        >>> y[0, :, :, 0]
        array([[4., 4.],
               [4., 4.]], dtype=float32)
        """
        kh, kw = w.shape[:2]
        pads = None if w.dtype != _F32 else self._native_pads(x, kh, kw, strides, padding,
                                                              dilations)
        if pads is not None:
            xp, native = self.xp, self.native
            x, w = xp.ascontiguousarray(x), xp.ascontiguousarray(w)
            fused = getattr(epilogue, "fused_args", None)
            if fused is not None:
                y = native.conv2d(x, w, tuple(strides), pads, tuple(dilations), *fused)
                if y is not None:
                    return y
            y = native.conv2d(x, w, tuple(strides), pads, tuple(dilations))
            if y is not None:
                if epilogue is not None:
                    epilogue(y)
                return y
        return self._conv_nhwc(x, w, strides, padding, dilations, epilogue)

    def _conv_nhwc(self, x, w, strides, padding, dilations, epilogue=None):
        """NHWC input, HWIO filter, both in the compute dtype: NHWC output, by NumPy
        (:meth:`conv_nhwc` without the native library).

        ``epilogue``, when given, is called as ``epilogue(block)`` on each contiguous
        NHWC output block (a batch slice, shape ``(m, Ho, Wo, O)``) right after its
        GEMM (or its Winograd output transform), while it is still in cache, and must
        update it in place (the fused convolution's bias/activation); its return
        value is ignored. 3x3 stride-1 float32 convolutions go through Winograd
        F(4x4, 3x3) on the host where :func:`.winograd.use_winograd` says so.
        """
        kh, kw, c, o = w.shape
        wino = self._winograd_geometry(x, w.shape, strides, padding, dilations, o)
        if wino is not None:
            return winograd.conv3x3(self.xp, x, w, *wino, epilogue=epilogue)
        win = self._windows(x, kh, kw, strides, padding, dilations)
        n, ho, wo = win.shape[:3]
        wm = w.reshape(kh * kw * c, o)
        out = self.xp.empty((n, ho, wo, o), dtype=x.dtype)
        for sl, cols in self._blocks(win):
            self.xp.matmul(cols, wm, out=out[sl].reshape(-1, o))
            if epilogue is not None:
                epilogue(out[sl])
        return out

    def conv2d(self, x, w, strides, padding, data_format, dilations):
        """The 2-d convolution (cross-correlation) of ``x`` with the HWIO filter ``w``."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        x = nhwc(x, data_format).astype(cdt, copy=False)
        out = self.conv_nhwc(x, w.astype(cdt, copy=False), strides, padding, dilations)
        return back(out.astype(dt, copy=False), data_format)

    def conv2d_backprop_input(self, w, dy, input_sizes, strides, padding, data_format,
                              dilations):
        """The gradient of :meth:`conv2d` with respect to its input."""
        xp = self.xp
        dt = dy.dtype
        cdt = compute_dtype(dt)
        n, h, wd, c = shape_nhwc(input_sizes, data_format)
        dy = nhwc(dy, data_format).astype(cdt, copy=False)
        w = w.astype(cdt, copy=False)
        kh, kw, _, o = w.shape
        _, ho, wo, _ = dy.shape
        sh, sw = strides
        dh, dw = dilations
        _, pt, pb = window_geometry(h, kh, sh, dh, padding, 0)
        _, pl, pr = window_geometry(wd, kw, sw, dw, padding, 1)
        if dy.size == 0 or w.size == 0:
            return back(xp.zeros((n, h, wd, c), dtype=dt), data_format)
        if sh == sw == 1:
            # stride 1: the input gradient is a correlation of dy, padded by the dilated
            # kernel extent less the forward pads (a negative pad crops), with the
            # filter flipped in space and transposed (O <-> C): the forward convolution
            a, b = (kh - 1) * dh - pt, (kh - 1) * dh - pb
            l, r = (kw - 1) * dw - pl, (kw - 1) * dw - pr
            dyc = dy[:, max(-a, 0):ho - max(-b, 0), max(-l, 0):wo - max(-r, 0)]
            wf = xp.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))
            pads = ((max(a, 0), max(b, 0)), (max(l, 0), max(r, 0)))
            dx = self.conv_nhwc(dyc, wf, (1, 1), pads, dilations)
            return back(dx.astype(dt, copy=False), data_format)
        # strided: col2im one window offset at a time, kh*kw small GEMMs (M, O) @ (O, C)
        # each added into a strided view of the padded gradient (no (M, kh*kw*C) buffer)
        dy2 = dy.reshape(n * ho * wo, o)
        dxp = xp.zeros((n, h + pt + pb, wd + pl + pr, c), dtype=cdt)
        for i in range(kh):
            hi = i * dh
            for j in range(kw):
                wj = j * dw
                dxp[:, hi:hi + sh * (ho - 1) + 1:sh, wj:wj + sw * (wo - 1) + 1:sw, :] += \
                    (dy2 @ w[i, j].T).reshape(n, ho, wo, c)
        dx = dxp[:, pt:pt + h, pl:pl + wd, :].astype(dt, copy=False)
        return back(dx, data_format)

    def conv2d_backprop_filter(self, x, dy, filter_sizes, strides, padding, data_format,
                               dilations):
        """The gradient of :meth:`conv2d` with respect to its filter."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        x = nhwc(x, data_format).astype(cdt, copy=False)
        dy = nhwc(dy, data_format).astype(cdt, copy=False)
        kh, kw, c, o = filter_sizes
        pads = self._native_pads(x, kh, kw, strides, padding, dilations)
        if pads is not None and dy.dtype == _F32:
            xp = self.xp
            dw = self.native.conv2d_backprop_filter(
                xp.ascontiguousarray(x), xp.ascontiguousarray(dy), (kh, kw), tuple(strides),
                pads, tuple(dilations))
            if dw is not None:
                return dw.astype(dt, copy=False)
        wino = self._winograd_geometry(x, filter_sizes, strides, padding, dilations, o)
        if wino is not None:
            return winograd.filter_grad3x3(self.xp, x, dy, wino[0]).astype(dt, copy=False)
        win = self._windows(x, kh, kw, strides, padding, dilations)
        dw = self.xp.zeros((kh * kw * c, o), dtype=cdt)
        for sl, cols in self._blocks(win):
            dw += cols.T @ dy[sl].reshape(-1, o)
        return dw.reshape(kh, kw, c, o).astype(dt, copy=False)

    # --- 3-d convolution: im2col over (kd, kh, kw, C), as the 2-d one ----------------
    def _windows_nd(self, x, ks, strides, padding, dilations):
        """Strided view ``(N, *out, *ks, C)`` of the padded channels-last ``x`` (no copy)."""
        sp = x.shape[1:-1]
        geo = [window_geometry(sp[i], ks[i], strides[i], dilations[i], padding, i)
               for i in range(len(sp))]
        pads = [(0, 0)] + [(g[1], g[2]) for g in geo] + [(0, 0)]
        if any(p != (0, 0) for p in pads):
            x = self.xp.pad(x, pads)
        st = x.strides
        shape = (x.shape[0],) + tuple(g[0] for g in geo) + tuple(ks) + (x.shape[-1],)
        steps = ((st[0],) + tuple(st[1 + i] * strides[i] for i in range(len(sp)))
                 + tuple(st[1 + i] * dilations[i] for i in range(len(sp))) + (st[-1],))
        return self._as_strided(x, shape, steps)

    def _cols_nd(self, win, nsp):
        """Yield (batch slice, (rows, prod(ks) * C) columns) of the window view ``win``
        (``nsp`` spatial dimensions), a cache-sized block of images at a time on the host."""
        n = win.shape[0]
        k = int(np.prod(win.shape[1 + nsp:]))
        if not self._host:
            yield slice(0, n), win.reshape(-1, k)
            return
        per_image = int(np.prod(win.shape[1:]))
        b = max(1, COLS_BYTES // max(per_image * win.itemsize, 1))
        buf = self.xp.empty(min(b, n) * per_image, dtype=win.dtype)
        for i in range(0, n, b):
            m = min(b, n - i)
            cols = buf[:m * per_image].reshape((m,) + win.shape[1:])
            cols[...] = win[i:i + m]
            yield slice(i, i + m), cols.reshape(-1, k)

    def conv3d(self, x, w, strides, padding, data_format, dilations):
        """The 3-d convolution of ``x`` with the DHWIO filter ``w``."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        x = ndhwc(x, data_format).astype(cdt, copy=False)
        w = w.astype(cdt, copy=False)
        o = w.shape[4]
        win = self._windows_nd(x, w.shape[:3], strides, padding, dilations)
        out = self.xp.empty(win.shape[:4] + (o,), dtype=cdt)
        wm = w.reshape(-1, o)
        for sl, cols in self._cols_nd(win, 3):
            self.xp.matmul(cols, wm, out=out[sl].reshape(-1, o))
        return back3(out.astype(dt, copy=False), data_format)

    def conv3d_backprop_input(self, w, dy, input_sizes, strides, padding, data_format,
                              dilations):
        """The gradient of :meth:`conv3d` w.r.t. its input: col2im, one small GEMM
        ``(M, O) @ (O, C)`` per filter tap added into a strided view."""
        xp = self.xp
        dt = dy.dtype
        cdt = compute_dtype(dt)
        sizes = shape_ndhwc(input_sizes, data_format)
        n, c = sizes[0], sizes[4]
        dy = ndhwc(dy, data_format).astype(cdt, copy=False)
        w = w.astype(cdt, copy=False)
        ks, o = w.shape[:3], w.shape[4]
        geo = [window_geometry(sizes[1 + i], ks[i], strides[i], dilations[i], padding, i)
               for i in range(3)]
        dxp = xp.zeros((n,) + tuple(sizes[1 + i] + g[1] + g[2] for i, g in enumerate(geo))
                       + (c,), dtype=cdt)
        if dy.size and w.size:
            outs = dy.shape[1:4]
            dy2 = dy.reshape(-1, o)
            for tap in itertools.product(*(range(k) for k in ks)):
                sl = (slice(None),) + tuple(
                    slice(t * d, t * d + s * (m - 1) + 1, s)
                    for t, d, s, m in zip(tap, dilations, strides, outs)) + (slice(None),)
                dxp[sl] += (dy2 @ w[tap].T).reshape(dy.shape[:4] + (c,))
        dx = dxp[(slice(None),) + tuple(slice(g[1], g[1] + sizes[1 + i])
                                        for i, g in enumerate(geo))]
        return back3(dx.astype(dt, copy=False), data_format)

    def conv3d_backprop_filter(self, x, dy, filter_sizes, strides, padding, data_format,
                               dilations):
        """The gradient of :meth:`conv3d` w.r.t. its filter: the transposed GEMM on the
        same columns."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        x = ndhwc(x, data_format).astype(cdt, copy=False)
        dy = ndhwc(dy, data_format).astype(cdt, copy=False)
        o = filter_sizes[4]
        win = self._windows_nd(x, filter_sizes[:3], strides, padding, dilations)
        dw = self.xp.zeros((int(np.prod(filter_sizes[:4])), o), dtype=cdt)
        for sl, cols in self._cols_nd(win, 3):
            dw += cols.T @ dy[sl].reshape(-1, o)
        return dw.reshape(tuple(filter_sizes)).astype(dt, copy=False)

    # --- depthwise convolution: one broadcast multiply-add per filter tap ------------
    def depthwise_conv2d(self, x, w, strides, padding, data_format, dilations):
        """Each channel ``c`` of ``x`` convolved with ``w[:, :, c, :]``: output channel
        ``c * M + m``."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        x = nhwc(x, data_format).astype(cdt, copy=False)
        w = w.astype(cdt, copy=False)
        kh, kw, c, m = w.shape
        win = self._windows(x, kh, kw, strides, padding, dilations)
        n, ho, wo = win.shape[:3]
        out = self.xp.zeros((n, ho, wo, c, m), dtype=cdt)
        for i in range(kh):
            for j in range(kw):
                out += win[:, :, :, i, j, :, None] * w[i, j]
        return back(out.reshape(n, ho, wo, c * m).astype(dt, copy=False), data_format)

    def depthwise_conv2d_backprop_input(self, w, dy, input_sizes, strides, padding,
                                        data_format, dilations):
        """The gradient of :meth:`depthwise_conv2d` w.r.t. its input."""
        xp = self.xp
        dt = dy.dtype
        cdt = compute_dtype(dt)
        n, h, wd, c = shape_nhwc(input_sizes, data_format)
        w = w.astype(cdt, copy=False)
        kh, kw, _, m = w.shape
        dy = nhwc(dy, data_format).astype(cdt, copy=False)
        ho, wo = dy.shape[1:3]
        _, pt, pb = window_geometry(h, kh, strides[0], dilations[0], padding, 0)
        _, pl, pr = window_geometry(wd, kw, strides[1], dilations[1], padding, 1)
        dy5 = dy.reshape(n, ho, wo, c, m)
        dxp = xp.zeros((n, h + pt + pb, wd + pl + pr, c), dtype=cdt)
        for i in range(kh):
            for j in range(kw):
                a, b = i * dilations[0], j * dilations[1]
                sl = (slice(None), slice(a, a + strides[0] * (ho - 1) + 1, strides[0]),
                      slice(b, b + strides[1] * (wo - 1) + 1, strides[1]), slice(None))
                dxp[sl] += xp.einsum("nhwcm,cm->nhwc", dy5, w[i, j])
        return back(dxp[:, pt:pt + h, pl:pl + wd].astype(dt, copy=False), data_format)

    def depthwise_conv2d_backprop_filter(self, x, dy, filter_sizes, strides, padding,
                                         data_format, dilations):
        """The gradient of :meth:`depthwise_conv2d` w.r.t. its filter."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        kh, kw, c, m = filter_sizes
        x = nhwc(x, data_format).astype(cdt, copy=False)
        win = self._windows(x, kh, kw, strides, padding, dilations)
        n, ho, wo = win.shape[:3]
        dy5 = nhwc(dy, data_format).astype(cdt, copy=False).reshape(n, ho, wo, c, m)
        dw = self.xp.empty((kh, kw, c, m), dtype=cdt)
        for i in range(kh):
            for j in range(kw):
                dw[i, j] = self.xp.einsum("nhwc,nhwcm->cm", win[:, :, :, i, j, :], dy5)
        return dw.astype(dt, copy=False)

    # --- pooling --------------------------------------------------------------------
    def _native_pool(self, name, a, *args):
        """The native library's pooling function ``name`` (``max_pool``, ...) on the
        NHWC float32 ``a`` and ``args`` when the service is set and available now: its
        result, or None (then the NumPy path below runs)."""
        native = self.native
        if native is None or a.dtype != _F32 or not native.available():
            return None
        fn = getattr(native, name, None)
        return None if fn is None else fn(a, *args)

    def max_pool(self, x, ksize, strides, padding, data_format):
        """The maximum of each window of ``x``."""
        x = nhwc(x, data_format)
        ho, wo, pads = _pool_geom(x.shape, ksize, strides, padding)
        out = self._native_pool("max_pool", x, tuple(ksize), tuple(strides), pads)
        if out is not None:
            return back(out, data_format)
        xpd = self._pad(x, *pads, value=_lowest(x.dtype))
        sls = _offsets(ho, wo, ksize, strides)
        out = xpd[sls[0]].copy()
        for sl in sls[1:]:
            self.xp.maximum(out, xpd[sl], out=out)
        return back(out, data_format)

    def _argmax_masks(self, x, y, ksize, strides, padding):
        """Yield (slice, mask) per window offset: the mask marks the windows whose
        first maximum (row-major scan order, as TF routes ties) is at that offset."""
        ho, wo, pads = _pool_geom(x.shape, ksize, strides, padding)
        xpd = self._pad(x, *pads, value=_lowest(x.dtype))
        sls = _offsets(ho, wo, ksize, strides)
        last = len(sls) - 1
        todo = None
        for k, sl in enumerate(sls):
            m = xpd[sl] == y
            if todo is None:
                if k < last:
                    todo = ~m
            else:
                m &= todo
                if k < last:
                    self.xp.logical_xor(todo, m, out=todo)    # todo & ~m, as m is in todo
            yield sl, m

    def max_pool_grad(self, x, y, dy, ksize, strides, padding, data_format):
        """The gradient of :meth:`max_pool`: ``dy`` routed to each window's first maximum."""
        xp = self.xp
        x, y, dy = nhwc(x, data_format), nhwc(y, data_format), nhwc(dy, data_format)
        n, h, w, c = x.shape
        ho, wo, (pt, pb, pl, pr) = _pool_geom(x.shape, ksize, strides, padding)
        if y.dtype == dy.dtype == x.dtype:
            dx = self._native_pool("max_pool_grad", x, y, dy, tuple(ksize), tuple(strides),
                                   (pt, pb, pl, pr))
            if dx is not None:
                return back(dx, data_format)
        if tuple(strides) == tuple(ksize) and pt == pb == pl == pr == 0:
            return back(self._max_pool_grad_tiled(x, y, dy, ksize, ho, wo), data_format)
        dxp = xp.zeros((n, h + pt + pb, w + pl + pr, c), dtype=dy.dtype)
        disjoint = strides[0] >= ksize[0] and strides[1] >= ksize[1]
        for sl, m in self._argmax_masks(x, y, ksize, strides, padding):
            if disjoint:          # each input position is in one window: write, no add
                xp.multiply(dy, m, out=dxp[sl])
            else:
                dxp[sl] += dy * m
        return back(dxp[:, pt:pt + h, pl:pl + w, :], data_format)

    def _max_pool_grad_tiled(self, x, y, dy, ksize, ho, wo):
        """:meth:`max_pool_grad` of windows that tile the NHWC ``x`` (stride = window, no
        padding) in two passes over the tiled view ``(N, Ho, kh, Wo, kw, C)`` instead of
        four per window offset; a window holding its maximum twice (a tie: ReLU's zeros)
        routes the gradient to the first one in row-major order, as the offset loop does;
        one whose maximum is NaN routes none. (The MNIST tutorial's 32x28x28x32 pool, one
        thread: 2.5 -> 1.5 ms.)"""
        xp = self.xp
        kh, kw = ksize
        n, h, w, c = x.shape
        x6 = x[:, :ho * kh, :wo * kw].reshape(n, ho, kh, wo, kw, c)
        m = x6 == y[:, :, None, :, None, :]
        if int(xp.count_nonzero(m)) != y.size:
            # a window with its maximum twice (ReLU's zeros) or none (NaN): keep only
            # the first match in row-major window order, as the offset loop does
            todo = None
            for i in range(kh):
                for j in range(kw):
                    mk = m[:, :, i, :, j, :]
                    if todo is None:
                        todo = ~mk
                        continue
                    mk &= todo
                    xp.logical_xor(todo, mk, out=todo)
        g = xp.empty(m.shape, dtype=dy.dtype)
        xp.copyto(g, m)                   # (bool -> float, then a float multiply: 2x
        g *= dy[:, :, None, :, None, :]   # faster than one mixed-dtype multiply)
        if ho * kh == h and wo * kw == w:
            return g.reshape(x.shape)
        dx = xp.zeros(x.shape, dtype=dy.dtype)
        dx[:, :ho * kh, :wo * kw] = g.reshape(n, ho * kh, wo * kw, c)
        return dx

    def max_pool_grad_grad(self, x, y, g, ksize, strides, padding, data_format):
        """The gradient of :meth:`max_pool_grad`: ``g`` at each window's first maximum."""
        x, y, g = nhwc(x, data_format), nhwc(y, data_format), nhwc(g, data_format)
        _, _, pads = _pool_geom(x.shape, ksize, strides, padding)
        gp = self._pad(g, *pads)
        out = self.xp.zeros(y.shape, dtype=g.dtype)
        for sl, m in self._argmax_masks(x, y, ksize, strides, padding):
            out += gp[sl] * m
        return back(out, data_format)

    def _pool_count(self, h, w, ho, wo, pads, ksize, strides, padding, dt):
        """How many input elements each window covers (padding excluded)."""
        if padding == "VALID":
            return dt.type(ksize[0] * ksize[1])
        pt, pb, pl, pr = pads
        xp = self.xp
        ones = xp.pad(xp.ones((h, w), dtype=dt), ((pt, pb), (pl, pr)))[None, :, :, None]
        cnt = None
        for sl in _offsets(ho, wo, ksize, strides):
            cnt = ones[sl].copy() if cnt is None else cnt + ones[sl]
        return cnt

    def avg_pool(self, x, ksize, strides, padding, data_format):
        """The mean of each window of ``x`` (padding excluded from the count)."""
        dt = x.dtype
        x = nhwc(x, data_format)
        cdt = np.dtype(compute_dtype(dt))
        n, h, w, c = x.shape
        ho, wo, pads = _pool_geom(x.shape, ksize, strides, padding)
        out = self._native_pool("avg_pool", x, tuple(ksize), tuple(strides), pads)
        if out is not None:
            return back(out, data_format)
        xpd = self._pad(x, *pads).astype(cdt, copy=False)
        sls = _offsets(ho, wo, ksize, strides)
        out = xpd[sls[0]].copy()
        for sl in sls[1:]:
            out += xpd[sl]
        out /= self._pool_count(h, w, ho, wo, pads, ksize, strides, padding, cdt)
        return back(out.astype(dt, copy=False), data_format)

    def avg_pool_grad(self, dy, orig_input_shape, ksize, strides, padding, data_format):
        """The gradient of :meth:`avg_pool`: ``dy`` spread evenly over each window."""
        dt = dy.dtype
        cdt = np.dtype(compute_dtype(dt))
        n, h, w, c = shape_nhwc(orig_input_shape, data_format)
        dy = nhwc(dy, data_format)
        ho, wo, pads = _pool_geom((n, h, w, c), ksize, strides, padding)
        pt, pb, pl, pr = pads
        dx = self._native_pool("avg_pool_grad", dy, (n, h, w, c), tuple(ksize),
                               tuple(strides), pads)
        if dx is not None:
            return back(dx, data_format)
        g = dy.astype(cdt) / self._pool_count(h, w, ho, wo, pads, ksize, strides, padding,
                                              cdt)
        dxp = self.xp.zeros((n, h + pt + pb, w + pl + pr, c), dtype=cdt)
        for sl in _offsets(ho, wo, ksize, strides):
            dxp[sl] += g
        return back(dxp[:, pt:pt + h, pl:pl + w, :].astype(dt, copy=False), data_format)

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        f = FLOATS
        return {
            "Relu": KernelSpec(self.relu, fresh=True, out=True,
                               dtypes=f + ("int32", "int64")),
            "ReluGrad": KernelSpec(self.relu_grad, fresh=True, out=True, dtypes=f),
            "Relu6": KernelSpec(self.relu6, dtypes=f),
            "Relu6Grad": KernelSpec(self.relu6_grad, dtypes=f),
            "LeakyRelu": KernelSpec(self.leaky_relu, dtypes=f),
            "LeakyReluGrad": KernelSpec(self.leaky_relu_grad, dtypes=f),
            "Elu": KernelSpec(self.elu, dtypes=f),
            "EluGrad": KernelSpec(self.elu_grad, dtypes=f),
            "Softmax": KernelSpec(self.softmax, fresh=True, dtypes=f),
            "LogSoftmax": KernelSpec(self.log_softmax, dtypes=f),
            "SoftmaxCrossEntropyWithLogits": KernelSpec(self.softmax_xent, dtypes=f),
            "SparseSoftmaxCrossEntropyWithLogits": KernelSpec(self.sparse_xent, dtypes=f),
            "SigmoidCrossEntropyWithLogits": KernelSpec(self.sigmoid_xent, dtypes=f),
            "BiasAdd": KernelSpec(self.bias_add, out=True, dtypes=f + ("int32", "int64")),
            "L2Loss": KernelSpec(self.l2_loss, dtypes=f),
            "Conv2D": KernelSpec(self.conv2d, dtypes=f),
            "Conv2DBackpropInput": KernelSpec(self.conv2d_backprop_input, dtypes=f),
            "Conv2DBackpropFilter": KernelSpec(self.conv2d_backprop_filter, dtypes=f),
            "Conv3D": KernelSpec(self.conv3d, dtypes=f),
            "Conv3DBackpropInputV2": KernelSpec(self.conv3d_backprop_input, dtypes=f),
            "Conv3DBackpropFilterV2": KernelSpec(self.conv3d_backprop_filter, dtypes=f),
            "DepthwiseConv2dNative": KernelSpec(self.depthwise_conv2d, dtypes=f),
            "DepthwiseConv2dNativeBackpropInput": KernelSpec(
                self.depthwise_conv2d_backprop_input, dtypes=f),
            "DepthwiseConv2dNativeBackpropFilter": KernelSpec(
                self.depthwise_conv2d_backprop_filter, dtypes=f),
            "MaxPool": KernelSpec(self.max_pool, dtypes=f + ("int32", "int64")),
            "MaxPoolGrad": KernelSpec(self.max_pool_grad, dtypes=f),
            "MaxPoolGradGrad": KernelSpec(self.max_pool_grad_grad, dtypes=f),
            "AvgPool": KernelSpec(self.avg_pool, dtypes=f),
            "AvgPoolGrad": KernelSpec(self.avg_pool_grad, dtypes=f),
        }


def build(ctx):
    """The neural-network kernels for ``ctx.xp`` (service ``native``, optional):
    ``{op name: KernelSpec}``."""
    return NNKernels(ctx.xp, ctx.get("native")).table()
