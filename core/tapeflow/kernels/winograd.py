"""Winograd minimal-filtering convolutions for 3x3, stride-1, dilation-1 filters.

Lavin & Gray's F(m x m, 3 x 3): the output is cut into m x m tiles; each reads an
``a x a`` input tile (``a = m + 2``, neighbouring tiles overlap by 2). With the
transforms ``V = B^T d B`` (input tile), ``U = G g G^T`` (filter) and
``Y = A^T M A`` (output), the convolution of a batch is, for each of the ``a*a``
tile positions ``xi``, one GEMM over the channels::

    M[xi] = V[xi] @ U[xi]        (tiles x C) @ (C x O)

``a*a / (9 m*m)`` of im2col's multiplications (F(2,3): 16/36 = 0.44,
F(4,3): 36/144 = 0.25), plus the transforms: GEMMs with the small ``a x a`` matrices
over the whole tile buffer (memory-bound passes; for 64 channels they cost about as
much as the tile GEMMs, which is why the rule below wants many channels). Tiles are
processed a block of images at a time (:data:`TILE_BYTES`) so that the transformed
tiles are still in cache when the GEMMs read them. The default is F(4x4, 3x3):
F(2x2, 3x3) is as accurate as im2col but was never faster than it here.

The filter gradient ``dW[p, q] = sum_{y, x} x[y + p, x + q] dy[y, x]`` is the same
trilinear form with the roles of the filter and the output swapped, F(3 x 3, m x m):
the same input tiles and the same ``B^T``, the output-gradient tiles transformed with
``A`` (``A dy A^T``), one GEMM per tile position summing over the tiles,
``(C x tiles) @ (tiles x O)``, and the 3x3 result read back with ``G^T M G``.

Which convolutions go this way is :func:`use_winograd`'s rule (measured on the
development machine; see docs/winograd.md); accuracy is in the same document.
"""

from __future__ import annotations

import numpy as np

#: F(2x2, 3x3): interpolation points 0, 1, -1, infinity (Lavin & Gray 2016).
F2 = {
    "m": 2,
    "BT": np.array([[1, 0, -1, 0],
                    [0, 1, 1, 0],
                    [0, -1, 1, 0],
                    [0, 1, 0, -1]], dtype=np.float64),
    "G": np.array([[1, 0, 0],
                   [0.5, 0.5, 0.5],
                   [0.5, -0.5, 0.5],
                   [0, 0, 1]], dtype=np.float64),
    "AT": np.array([[1, 1, 1, 0],
                    [0, 1, -1, -1]], dtype=np.float64),
}

#: F(4x4, 3x3): points 0, 1, -1, 2, -2, infinity.
F4 = {
    "m": 4,
    "BT": np.array([[4, 0, -5, 0, 1, 0],
                    [0, -4, -4, 1, 1, 0],
                    [0, 4, -4, -1, 1, 0],
                    [0, -2, -1, 2, 1, 0],
                    [0, 2, -1, -2, 1, 0],
                    [0, 4, 0, -5, 0, 1]], dtype=np.float64),
    "G": np.array([[1 / 4, 0, 0],
                   [-1 / 6, -1 / 6, -1 / 6],
                   [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6],
                   [1 / 24, -1 / 12, 1 / 6],
                   [0, 0, 1]], dtype=np.float64),
    "AT": np.array([[1, 1, 1, 1, 1, 0],
                    [0, 1, -1, 2, -2, 0],
                    [0, 1, 1, 4, 4, 0],
                    [0, 1, -1, 8, -8, 1]], dtype=np.float64),
}

#: The transformed input tiles of one block of images take about this many bytes
#: (256 KiB to 4 MiB measured the same, within noise, on the 2-core dev machine).
TILE_BYTES = 1 << 20

#: ``"auto"``: :func:`use_winograd`'s measured rule; ``"always"``: every eligible
#: convolution (3x3, stride 1, dilation 1, float32 compute, host); ``"never"``: im2col
#: only (bit-for-bit the results of earlier releases).
MODE = "auto"

#: The rule (docs/winograd.md has the measurements behind it): Winograd F(4x4, 3x3)
#: when both channel counts are at least ``MIN_CHANNELS`` on an output of at least
#: ``MIN_IMAGE`` pixels, or at least ``MIN_CHANNELS_LARGE`` on one of at least
#: ``LARGE_IMAGE``, and the 4x4 tiles cover the output with at most 15% overhang
#: (``MIN_TILE_USE``: 14x14 is 77% used, 26x26 86%). im2col is a copy and one GEMM
#: of BLAS efficiency; Winograd's 4x fewer multiplications have to pay for its
#: memory-bound transforms and copies, which use one core while the GEMMs use all:
#: in CPU time (one thread) it was 1.1-1.6x faster from 64 channels on 16x16 images
#: up, a tie at 32 channels or 14x14, and 0.2-0.8x slower on the seeds' CNN (C=1, 16);
#: with two BLAS threads the GEMMs halve and the copies do not, so the rule keeps a
#: margin: 128 channels from 16x16, 64 from 48x48.
MIN_CHANNELS = 128
MIN_IMAGE = 16 * 16
MIN_CHANNELS_LARGE = 64
LARGE_IMAGE = 48 * 48
MIN_TILE_USE = 0.85


def tile_use(ho, wo, m=4):
    """The fraction of the ``m x m`` output tiles covering ``ho x wo`` that is output."""
    return ho * wo / ((-(-ho // m) * m) * (-(-wo // m) * m))


def use_winograd(n, ho, wo, c, o, dtype):
    """Whether a 3x3 stride-1 convolution of ``n`` images to ``ho x wo`` outputs with
    ``c`` input and ``o`` output channels (GEMM ``(tiles x c) @ (c x o)``), computed in
    ``dtype``, goes the Winograd way on the host (:data:`MODE` and the rule above).

    >>> use_winograd(32, 32, 32, 128, 128, "float32"), use_winograd(32, 26, 26, 16, 16, "float32")
    (True, False)
    """
    if MODE == "never" or np.dtype(dtype) != np.float32 or min(n, ho, wo, c, o) <= 0:
        return False
    if MODE == "always":
        return True
    k, pixels = min(c, o), ho * wo
    if tile_use(ho, wo) < MIN_TILE_USE:
        return False
    return ((k >= MIN_CHANNELS and pixels >= MIN_IMAGE)
            or (k >= MIN_CHANNELS_LARGE and pixels >= LARGE_IMAGE))


def _two_sided(xp, mat, t):
    """``mat @ t[:, :, k] @ mat.T`` for every trailing index ``k`` of ``t``
    (shape ``(q, q, ...)``), as two GEMMs: result ``(p, p, ...)`` (the filter's)."""
    p, q = mat.shape
    rest = t.shape[2:]
    tmp = xp.matmul(mat, t.reshape(q, -1)).reshape(p, q, -1)
    return xp.matmul(mat, tmp).reshape((p, p) + rest)


def _kron(xp, mat, dt):
    """``mat (x) mat``: the two-sided transform of a flattened tile as one GEMM."""
    return xp.asarray(np.kron(mat, mat), dtype=dt)


class _Tiler:
    """The tile geometry of one convolution and a zero-bordered buffer holding one
    block of padded images, from which the overlapping ``a x a`` tiles are read."""

    def __init__(self, xp, x, pads, out_hw, m, chans):
        self.xp, self.x, self.m, self.a = xp, x, m, m + 2
        n, h, w, c = x.shape
        ho, wo = out_hw
        self.th, self.tw = -(-ho // m), -(-wo // m)
        self.out_hw = out_hw
        hp, wp = self.th * m + 2, self.tw * m + 2
        per_image = self.a * self.a * self.th * self.tw * max(chans, 1) * x.itemsize
        self.block = max(1, min(n, TILE_BYTES // max(per_image, 1)))
        pt, pl = pads[0], pads[2]
        # the part of x the tiles see, and where it goes in the padded buffer
        self.src = (slice(0, max(min(h, hp - pt), 0)), slice(0, max(min(w, wp - pl), 0)))
        self.dst = (slice(pt, pt + self.src[0].stop), slice(pl, pl + self.src[1].stop))
        self.padded = xp.zeros((self.block, hp, wp, c), dtype=x.dtype)
        self.full = None
        self.bufs = {}

    def transformed(self, i, k, bt, v):
        """``B^T d B`` of every input tile of images ``i:i+k``, into ``v`` (shape
        ``(a*a, k*th*tw, C)``). ``B^T`` is applied to the rows of the padded images
        before they are cut into overlapping column tiles (1.5x the input, not
        2.25x), then along the columns: two passes of ``a x a`` GEMMs, 45 flops per
        input element instead of the 162 of one ``(B^T (x) B^T)`` GEMM on the tiles
        (25-30% off the transform, which costs as much as the tile GEMMs at C=64)."""
        xp, a, m, th, tw = self.xp, self.a, self.m, self.th, self.tw
        xpd = self.padded[:k]
        xpd[:, self.dst[0], self.dst[1]] = self.x[i:i + k, self.src[0], self.src[1]]
        _, hp, wp, c = xpd.shape
        s0, s1, _, s3 = xpd.strides
        rows = xp.lib.stride_tricks.as_strided(xpd, (a, k, th, wp * c), (s1, s0, s1 * m, s3))
        t1 = self._scratch("t1", (a, k, th, wp, c), k)
        xp.matmul(bt, rows.reshape(a, -1), out=t1.reshape(a, -1))
        q0, q1, q2, q3, q4 = t1.strides
        d = self._scratch("d", (a, a, k, th, tw, c), k)
        d[...] = xp.lib.stride_tricks.as_strided(t1, d.shape, (q0, q3, q1, q2, q3 * m, q4))
        xp.matmul(bt, d.reshape(a, a, -1), out=v.reshape(a, a, -1))

    def _scratch(self, name, shape, k):
        """A contiguous ``shape`` (for ``k`` images) view of a flat buffer sized for a
        full block."""
        size = int(np.prod(shape))
        if name not in self.bufs:
            self.bufs[name] = self.xp.empty(size // k * self.block, dtype=self.x.dtype)
        return self.bufs[name][:size].reshape(shape)

    def _full(self, o):
        """A zero-bordered (block, th*m, tw*m, o) buffer for outputs that overhang."""
        if self.full is None:
            m = self.m
            self.full = self.xp.zeros((self.block, self.th * m, self.tw * m, o),
                                      dtype=self.x.dtype)
        return self.full

    def scatter(self, y, dst):
        """Write the (m, m, k, th, tw, O) output tiles ``y`` into NHWC ``dst``: one
        transposing copy (3x faster than m*m strided ones), through a whole-tile
        buffer when the tiles overhang the output."""
        m, th, tw = self.m, self.th, self.tw
        ho, wo = self.out_hw
        k, o = y.shape[2], y.shape[5]
        tiled = y.transpose(2, 3, 0, 4, 1, 5)
        if ho == th * m and wo == tw * m:
            dst.reshape(k, th, m, tw, m, o)[...] = tiled
            return
        full = self._full(o)[:k]
        full.reshape(k, th, m, tw, m, o)[...] = tiled
        dst[...] = full[:, :ho, :wo]

    def gather(self, src, e):
        """The inverse of :meth:`scatter`: NHWC ``src`` into (m, m, k, th, tw, O) ``e``
        whose overhang (beyond the output) is zero."""
        m, th, tw = self.m, self.th, self.tw
        ho, wo = self.out_hw
        k, o = e.shape[2], e.shape[5]
        if ho != th * m or wo != tw * m:
            full = self._full(o)[:k]
            full[:, :ho, :wo] = src
            src = full
        e.transpose(2, 3, 0, 4, 1, 5)[...] = src.reshape(k, th, m, tw, m, o)


class _Buffers:
    """Flat scratch buffers sized for a full block; :meth:`get` views the first
    elements as the (contiguous) array a block of ``k`` images needs, so that the
    shorter last block still reshapes without a copy (``out=`` must be a view)."""

    def __init__(self, xp, dt, **shapes):
        self.bufs = {name: xp.empty(int(np.prod(shape)), dtype=dt)
                     for name, shape in shapes.items()}

    def get(self, name, shape):
        return self.bufs[name][:int(np.prod(shape))].reshape(shape)


def conv3x3(xp, x, w, pads, out_hw, f=F4, epilogue=None):
    """Stride-1 3x3 convolution (cross-correlation) of the NHWC ``x`` with the HWIO
    ``w`` (both in the compute dtype), zero-padded by ``pads`` (top, bottom, left,
    right), output ``(N, *out_hw, O)``; ``epilogue(block)`` as in
    ``NNKernels._conv_nhwc``, on each batch block of the output."""
    m = f["m"]
    a = m + 2
    n, c, o, dt = x.shape[0], x.shape[3], w.shape[3], x.dtype
    out = xp.empty((n, *out_hw, o), dtype=dt)
    if out.size == 0 or x.size == 0:
        out[...] = 0
        return out
    u = _two_sided(xp, xp.asarray(f["G"], dtype=dt), w).reshape(a * a, c, o)
    bt, ka = xp.asarray(f["BT"], dtype=dt), _kron(xp, f["AT"], dt)
    tl = _Tiler(xp, x, pads, out_hw, m, max(c, o))
    b, th, tw = tl.block, tl.th, tl.tw
    bufs = _Buffers(xp, dt, v=(a * a, b * th * tw, c), mm=(a * a, b * th * tw, o),
                    y=(m, m, b, th, tw, o))
    for i in range(0, n, b):
        k = min(b, n - i)
        r = k * th * tw
        v, mm = bufs.get("v", (a * a, r, c)), bufs.get("mm", (a * a, r, o))
        y = bufs.get("y", (m, m, k, th, tw, o))
        tl.transformed(i, k, bt, v)                                        # B^T d B
        xp.matmul(v, u, out=mm)                                            # per position
        xp.matmul(ka, mm.reshape(a * a, -1), out=y.reshape(m * m, -1))     # A^T M A
        blk = out[i:i + k]
        tl.scatter(y, blk)
        if epilogue is not None:
            epilogue(blk)
    return out


def filter_grad3x3(xp, x, dy, pads, f=F4):
    """The 3x3 filter gradient (HWIO) of a stride-1 convolution of the NHWC ``x``
    padded by ``pads``, given its NHWC output gradient ``dy`` (compute dtype)."""
    m = f["m"]
    a = m + 2
    n, c, dt = x.shape[0], x.shape[3], x.dtype
    _, ho, wo, o = dy.shape
    if x.size == 0 or dy.size == 0:
        return xp.zeros((3, 3, c, o), dtype=dt)
    bt, kz = xp.asarray(f["BT"], dtype=dt), _kron(xp, f["AT"].T, dt)
    tl = _Tiler(xp, x, pads, (ho, wo), m, max(c, o))
    b, th, tw = tl.block, tl.th, tl.tw
    bufs = _Buffers(xp, dt, v=(a * a, b * th * tw, c), e=(m, m, b, th, tw, o),
                    z=(a * a, b * th * tw, o))
    acc = xp.zeros((a * a, c, o), dtype=dt)
    part = xp.empty((a * a, c, o), dtype=dt)
    for i in range(0, n, b):
        k = min(b, n - i)
        r = k * th * tw
        v = bufs.get("v", (a * a, r, c))
        e, z = bufs.get("e", (m, m, k, th, tw, o)), bufs.get("z", (a * a, r, o))
        tl.transformed(i, k, bt, v)                                        # B^T d B
        tl.gather(dy[i:i + k], e)
        xp.matmul(kz, e.reshape(m * m, -1), out=z.reshape(a * a, -1))      # A dy A^T
        xp.matmul(v.transpose(0, 2, 1), z, out=part)     # (C x tiles) @ (tiles x O)
        acc += part
    return _two_sided(xp, xp.asarray(f["G"].T, dtype=dt), acc.reshape(a, a, c, o))
