"""Shape, creation and selection kernels on OpenCL (:class:`ArrayKernels`).

Zero-copy views, like NumPy (``runtime.view``: element strides >= 0 and an offset
into the input's buffer): Reshape (when the layout allows, else one copy), BroadcastTo
(stride 0), Transpose, ExpandDims, Squeeze, Unpack, SplitV, Slice and StridedSlice
with positive steps. Identity and StopGradient return their input (tensors are
immutable).

Generated OpenCL C kernels (one source per dtype, rank and variant, compiled once):

* ``fill`` — ``out[i] = v`` with ``v`` a typed kernel argument (no upload):
  Fill, ZerosLike, OnesLike.
* ``arange``, ``eye``, ``linspace``, ``one_hot`` — the creation ops, one launch each.
* ``scopy`` — a strided copy between two arbitrary (signed) layouts, dimensions
  merged where both walk contiguously (a contiguous run becomes a device
  buffer-to-buffer copy): StridedSlice with negative steps, ConcatV2 and Pack (one
  copy per input into its slab of the output).
* ``imap`` — the output is contiguous; each output coordinate maps to an input
  coordinate per dimension (``tile``: ``c % n``; ``embed``: ``(c - start) / step``
  when it lands on the grid, else a constant; ``reflect``/``symmetric``: mirrored),
  one launch: Tile, PadV2, MirrorPad and StridedSliceGrad (no zero-fill pass).
* ``where_count`` / ``where_scan`` / ``where_write`` — Where's compaction: per-chunk
  counts in parallel, an exclusive scan of the chunk counts on the device, a single
  8-byte download of the total (the output's shape), then each chunk writes the
  coordinates of its true elements at its offset.

SelectV2 and ClipByValue are :func:`runtime.elementwise` expressions (broadcasting,
strided inputs). Shape, Size and Rank upload the few integers of the input's shape.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .runtime import FLOATS, NUMERIC

ALL = NUMERIC + ("bool",)

_NOCONTRACT = "#pragma OPENCL FP_CONTRACT OFF\n"

#: NumPy's maximum / minimum on floats (NaN wins)
_NAN_MINMAX = ("#define FMAXN(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))\n"
               "#define FMINN(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))\n")


def _argdt(dtype):
    """The scalar kernel-argument dtype that carries a value of ``dtype``."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint8) if dtype == np.bool_ else dtype


def _value(value, dtype):
    """``value`` converted to ``dtype`` as NumPy's ``full`` does (bool as uint8)."""
    v = np.asarray(value, dtype=np.dtype(dtype))
    return v.astype(_argdt(dtype))[()]


def _run(dev, src, name, sd, n, *args):
    """Compile (cached) and launch ``name`` over ``n`` work-items."""
    k = rt.kernel(dev, src, name, sd)
    rt.launch(dev, k, (int(n),), None, *args)


# --- fill -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _fill_src(ct):
    return (f"__kernel void fill(__global {ct} *out, {ct} v, long n) {{\n"
            "    long i = get_global_id(0);\n    if (i < n) out[i] = v;\n}\n")


def fill_array(dev, shape, value, dtype):
    """A new contiguous array of ``shape`` filled with ``value`` (one launch)."""
    dtype = np.dtype(dtype)
    out = rt.empty(dev, shape, dtype)
    n = out.size
    if n:
        _run(dev, _fill_src(rt.CTYPES[dtype]), "fill", [None, _argdt(dtype), np.int64], n,
             out.base_data, _value(value, dtype), n)
    return out


# --- strided copy ----------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _scopy_src(ct, nd):
    params = [f"__global {ct} *dst", "long o_dst", f"__global const {ct} *src", "long o_src",
              "long n"] + rt.strided_args_decl(nd, ["dst", "src"])
    return (f"__kernel void scopy({', '.join(params)}) {{\n"
            "    long i = get_global_id(0);\n    if (i >= n) return;\n"
            "    long off_dst = o_dst; long off_src = o_src;\n"
            f"    {rt.index_code(nd, ['dst', 'src'])}\n"
            "    dst[off_dst] = src[off_src];\n}\n")


def strided_copy(dev, dst, dst_off, dst_strides, src, src_off, src_strides, shape):
    """Copy the elements of ``shape`` from ``src``'s buffer (element offset and signed
    element strides) into ``dst``'s buffer (likewise): one kernel, or one device
    buffer copy when both sides are one contiguous run."""
    n = math.prod(shape)
    if n == 0:
        return
    mshape, (dst_st, src_st) = rt.merge_dims(tuple(shape), [list(dst_strides), list(src_strides)])
    nd = len(mshape)
    isz = dst.dtype.itemsize
    if nd == 0 or (nd == 1 and dst_st == [1] and src_st == [1]):
        rt.cl().enqueue_copy(dev.queue, dst.base_data, src.base_data, byte_count=n * isz,
                             src_offset=src_off * isz, dst_offset=dst_off * isz)
        return
    ct = rt.CTYPES[dst.dtype]
    sd = [None, np.int64, None, np.int64, np.int64] + [np.int64] * (3 * nd - 1)
    _run(dev, _scopy_src(ct, nd), "scopy", sd, n, dst.base_data, dst_off, rt.buf(dev, src),
         src_off, n, *mshape[1:], *dst_st, *src_st)


# --- index-mapping gather --------------------------------------------------------------

_MAP_CODE = {
    "tile": "off += (c % n{k}) * s{k};",
    "embed1": "{{ long q = c - a{k}; inside &= (q >= 0 && q < n{k}); off += q * s{k}; }}",
    "embed": ("{{ long q = c - a{k}; inside &= (q % b{k} == 0); q /= b{k}; "
              "inside &= (q >= 0 && q < n{k}); off += q * s{k}; }}"),
    "reflect": ("{{ long j = c - a{k}; if (j < 0) j = -j; if (j >= n{k}) j = 2 * n{k} - 2 - j; "
                "off += j * s{k}; }}"),
    "symmetric": ("{{ long j = c - a{k}; if (j < 0) j = -j - 1; if (j >= n{k}) "
                  "j = 2 * n{k} - 1 - j; off += j * s{k}; }}"),
}


@functools.lru_cache(maxsize=None)
def _imap_src(ct, nd, mode):
    params = [f"__global {ct} *out", f"__global const {ct} *x", "long ox", "long n", f"{ct} cval"]
    for k in range(nd):
        params += [f"long d{k}", f"long n{k}", f"long a{k}", f"long b{k}", f"long s{k}"]
    lines = ["long r = i; long off = ox; int inside = 1;"]
    for k in range(nd - 1, -1, -1):
        lines.append(f"{{ long c = r % d{k}; r /= d{k};" if k else "{ long c = r;")
        lines.append("  " + _MAP_CODE[mode].format(k=k) + " }")
    return (f"__kernel void imap({', '.join(params)}) {{\n"
            "    long i = get_global_id(0);\n    if (i >= n) return;\n    "
            + "\n    ".join(lines) + "\n    out[i] = inside ? x[off] : cval;\n}\n")


def index_map(x, out_shape, mode, starts, steps, counts, strides, offset, cval=0):
    """A new contiguous array of ``out_shape``: ``out[c] = x[sum_k j_k * strides[k] +
    offset]`` with ``j_k`` the input coordinate ``mode`` maps output coordinate ``c_k``
    to (per dimension: ``starts``, ``steps``, ``counts`` = input sizes), or ``cval``
    where ``mode='embed'`` lands outside the input's grid."""
    dev = rt.device_of(x)
    out = rt.empty(dev, out_shape, x.dtype)
    n = out.size
    if n == 0:
        return out
    nd = len(out_shape)
    if mode == "embed" and all(b == 1 for b in steps):
        mode = "embed1"
    args = []
    for k in range(nd):
        args += [out_shape[k], counts[k], starts[k], steps[k], strides[k]]
    sd = [None, None, np.int64, np.int64, _argdt(x.dtype)] + [np.int64] * (5 * nd)
    _run(dev, _imap_src(rt.CTYPES[x.dtype], nd, mode), "imap", sd, n, out.base_data,
         rt.buf(dev, x), offset, n, _value(cval, x.dtype), *args)
    return out


# --- spec (StridedSlice's normalised NumPy basic index) --------------------------------------

def _parse_spec(shape, spec):
    """``spec`` -> (entries, trailing): per entry ``("i", dim, index)``,
    ``("s", dim, start, step, count)`` or ``("n",)``, Ellipsis expanded to whole
    dimensions (and the dimensions after the spec appended)."""
    spec = tuple(spec)
    nd = len(shape)
    consumed = sum(1 for e in spec if e is not None and e is not Ellipsis)
    out = []
    d = 0
    for e in spec:
        if e is None:
            out.append(("n",))
        elif e is Ellipsis:
            for _ in range(nd - consumed):
                out.append(("s", d, 0, 1, shape[d]))
                d += 1
            consumed = nd
        elif isinstance(e, slice):
            start, stop, step = e.indices(shape[d])
            out.append(("s", d, start, step, len(range(start, stop, step))))
            d += 1
        else:
            i = int(e)
            if i < 0:
                i += shape[d]
            out.append(("i", d, i))
            d += 1
    while d < nd:
        out.append(("s", d, 0, 1, shape[d]))
        d += 1
    return out


# --- Where (one argument): compaction --------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _where_src(ct, nd):
    dims = "".join(f", long d{k}" for k in range(1, nd))
    unravel = ["long r = i;"]
    for k in range(nd - 1, 0, -1):
        unravel.append(f"o[{k}] = r % d{k}; r /= d{k};")
    if nd:
        unravel.append("o[0] = r;")
    return f"""
__kernel void where_count(__global const {ct} *x, long ox, long n, long chunk,
                          __global long *counts) {{
    long g = get_global_id(0);
    long lo = g * chunk, hi = min(lo + chunk, n), c = 0;
    for (long i = lo; i < hi; i++) c += (x[ox + i] != 0);
    counts[g] = c;
}}

__kernel void where_scan(__global long *counts, long G) {{
    long acc = 0;
    for (long g = 0; g < G; g++) {{ long c = counts[g]; counts[g] = acc; acc += c; }}
    counts[G] = acc;
}}

__kernel void where_write(__global const {ct} *x, long ox, long n, long chunk,
                          __global const long *offs, __global long *out{dims}) {{
    long g = get_global_id(0);
    long lo = g * chunk, hi = min(lo + chunk, n);
    long w = offs[g];
    for (long i = lo; i < hi; i++) {{
        if (x[ox + i] != 0) {{
            __global long *o = out + w * {nd};
            {' '.join(unravel)}
            w++;
        }}
    }}
}}
"""


# --- reshape without a copy --------------------------------------------------------------

def _nocopy_strides(old_shape, old_strides, new_shape):
    """Element strides that view a (non-empty) layout as ``new_shape`` without a copy,
    or None (NumPy's ``_attempt_nocopy_reshape``)."""
    old = [(n, s) for n, s in zip(old_shape, old_strides) if n != 1]
    new = list(new_shape)
    strides = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                return None
        strides[nj - 1] = old[oj - 1][1]
        for nk in range(nj - 1, ni, -1):
            strides[nk - 1] = strides[nk] * new[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    return strides


class ArrayKernels:
    """The shape, creation and selection kernels (one method each; :meth:`table` maps op
    names to them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    # --- creation ---------------------------------------------------------------------
    def fill(self, shape, value, dtype, device=None):
        """Fill: a new tensor of ``shape`` holding ``value`` (one ``fill`` launch)."""
        h = device.handle
        h.check_dtype(dtype.np)
        return fill_array(h, shape, value, dtype.np)

    def zeros_like(self, x, dtype):
        """ZerosLike: zeros of ``x``'s shape, in ``dtype`` or ``x``'s."""
        return fill_array(self.rt.device_of(x), x.shape, 0, x.dtype if dtype is None else dtype.np)

    def ones_like(self, x, dtype):
        """OnesLike: ones of ``x``'s shape, in ``dtype`` or ``x``'s."""
        return fill_array(self.rt.device_of(x), x.shape, 1, x.dtype if dtype is None else dtype.np)

    def range_(self, start, limit, delta, dtype, device=None):
        """Range: NumPy's ``arange`` in one generated ``arange`` kernel."""
        h = device.handle
        dt = np.dtype(dtype.np)
        h.check_dtype(dt)
        n = max(0, int(math.ceil((limit - start) / delta)))
        out = self.rt.empty(h, (n,), dt)
        if n == 0:
            return out
        ct = self.rt.CTYPES[dt]
        if dt.kind == "f":
            # NumPy's arange: start and (start + delta) - start rounded to dtype first
            s0 = dt.type(start)
            d0 = dt.type(dt.type(start + delta) - s0)
            src = (_NOCONTRACT + f"__kernel void arange(__global {ct} *out, {ct} s, {ct} d, "
                   "long n) {\n    long i = get_global_id(0);\n"
                   f"    if (i < n) out[i] = s + ({ct})i * d;\n}}\n")
            _run(h, src, "arange", [None, dt, dt, np.int64], n, out.base_data, s0, d0, n)
        else:
            src = (f"__kernel void arange(__global {ct} *out, long s, long d, long n) {{ "
                   f"long i = get_global_id(0); if (i < n) out[i] = ({ct})(s + i * d); }}\n")
            _run(h, src, "arange", [None, np.int64, np.int64, np.int64], n, out.base_data,
                 int(start), int(delta), n)
        return out

    def eye(self, num_rows, num_columns, batch_shape, dtype, device=None):
        """Eye: a (batch of) identity matrices in one ``eye`` launch."""
        h = device.handle
        dt = np.dtype(dtype.np)
        h.check_dtype(dt)
        out = self.rt.empty(h, tuple(batch_shape) + (num_rows, num_columns), dt)
        n = out.size
        if n:
            ct = self.rt.CTYPES[dt]
            one = (f"({ct})(row == col ? 1 : 0, 0)" if dt.kind == "c" else   # (float2: 1 + 0j)
                   f"({ct})(row == col ? 1 : 0)")
            src = (f"__kernel void eye(__global {ct} *out, long r, long c, long n) {{\n"
                   "    long i = get_global_id(0); if (i >= n) return;\n"
                   "    long col = i % c; long row = (i / c) % r;\n"
                   f"    out[i] = {one};\n}}\n")
            _run(h, src, "eye", [None, np.int64, np.int64, np.int64], n, out.base_data,
                 num_rows, num_columns, n)
        return out

    def linspace(self, start, stop, num, dtype, device=None):
        """LinSpace: NumPy's ``linspace`` (float64 steps, exact end) in one launch."""
        h = device.handle
        dt = np.dtype(dtype.np)
        h.check_dtype(dt)
        out = self.rt.empty(h, (num,), dt)
        if num == 0:
            return out
        ct = self.rt.CTYPES[dt]
        wt = "double" if h.fp64 else "float"
        wdt = np.float64 if h.fp64 else np.float32
        # NumPy's linspace: i * step + start (i / div * delta + start when step is 0),
        # the last value exactly stop, in float64, then cast
        src = (_NOCONTRACT + f"__kernel void linspace(__global {ct} *out, {wt} start, {wt} stop, "
               f"long num) {{\n    long i = get_global_id(0); if (i >= num) return;\n"
               f"    {wt} delta = stop - start; {wt} div = ({wt})(num - 1);\n"
               f"    {wt} v;\n"
               f"    if (num == 1) v = start;\n"
               f"    else if (i == num - 1) v = stop;\n"
               f"    else {{ {wt} step = delta / div;\n"
               f"        v = (step != 0) ? ({wt})i * step + start\n"
               f"                        : (({wt})i / div) * delta + start; }}\n"
               f"    out[i] = ({ct})v;\n}}\n")
        _run(h, src, "linspace", [None, wdt, wdt, np.int64], num, out.base_data,
             wdt(start), wdt(stop), num)
        return out

    def one_hot(self, indices, depth, on_value, off_value, axis, dtype):
        """OneHot: ``on_value`` where the index meets the depth coordinate, else ``off_value``."""
        if indices.dtype.kind not in "iu":
            raise InvalidArgumentError(f"indices must be int32 or int64, got {indices.dtype}")
        dev = self.rt.device_of(indices)
        dt = np.dtype(dtype.np)
        shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
        out = self.rt.empty(dev, shape, dt)
        n = out.size
        if n == 0:
            return out
        ind = self.rt.contiguous(indices)
        _, oi = self.rt.layout(ind)
        inner = math.prod(indices.shape[axis:])
        ct, it = self.rt.CTYPES[dt], self.rt.CTYPES[ind.dtype]
        src = (f"__kernel void one_hot(__global {ct} *out, __global const {it} *ind, long oi, "
               f"long inner, long depth, {ct} on, {ct} off, long n) {{\n"
               "    long i = get_global_id(0); if (i >= n) return;\n"
               "    long in_ = i % inner; long t = i / inner; long d = t % depth;\n"
               "    long j = (t / depth) * inner + in_;\n"
               "    out[i] = ((long)ind[oi + j] == d) ? on : off;\n}\n")
        adt = _argdt(dt)
        _run(dev, src, "one_hot", [None, None, np.int64, np.int64, np.int64, adt, adt, np.int64],
             n, out.base_data, ind.base_data, oi, inner, depth, _value(on_value, dt),
             _value(off_value, dt), n)
        return out

    # --- views ------------------------------------------------------------------------
    def _view(self, x, shape, strides, offset):
        """A zero-copy view of ``x`` (an empty tensor where ``x`` has no buffer)."""
        if x.base_data is None:        # empty input: nothing to share
            return self.rt.empty(self.rt.device_of(x), shape, x.dtype)
        return self.rt.view(x, shape, strides, offset)

    def reshape(self, x, shape):
        """Reshape: a view where the layout allows, else one contiguous copy."""
        shape = tuple(int(d) for d in shape)
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            fill_in = x.size // known if known else -1
            shape = tuple(fill_in if d == -1 else d for d in shape)
        if math.prod(shape) != x.size or any(d < 0 for d in shape):
            # (the dispatcher words the error through the op's shape inference)
            raise ValueError(f"cannot reshape {x.shape} to {shape}")
        if shape == x.shape:
            return x
        if self.rt.is_contiguous(x):
            return self._view(x, shape, None, None)
        st, off = self.rt.layout(x)
        new = _nocopy_strides(x.shape, st, shape)
        if new is None:
            x = self.rt.contiguous(x)
            return self._view(x, shape, None, None)
        return self._view(x, shape, new, off)

    def broadcast_to(self, x, shape):
        """BroadcastTo: a view with stride 0 along the broadcast dimensions."""
        shape = tuple(shape)
        if x.shape == shape:
            return x
        if len(x.shape) > len(shape) or any(
                a != b and a != 1 for a, b in zip(x.shape[::-1], shape[::-1])):
            raise ValueError(f"cannot broadcast {x.shape} to {shape}")
        st, off = self.rt.broadcast_strides(x, shape)
        return self._view(x, shape, st, off)

    def transpose(self, x, perm):
        """Transpose: a view with the strides permuted."""
        st, off = self.rt.layout(x)
        return self._view(x, tuple(x.shape[p] for p in perm), tuple(st[p] for p in perm), off)

    def expand_dims(self, x, axis):
        """ExpandDims: a view with a dimension of 1 (stride 0) at ``axis``."""
        st, off = self.rt.layout(x)
        return self._view(x, x.shape[:axis] + (1,) + x.shape[axis:], st[:axis] + (0,) + st[axis:],
                     off)

    def squeeze(self, x, axis):
        """Squeeze: a view without the dimensions of 1 (``axis``'s, or all)."""
        st, off = self.rt.layout(x)
        nd = x.ndim
        if axis is None:
            keep = [k for k in range(nd) if x.shape[k] != 1]
        else:
            axes = {a % nd for a in ((axis,) if isinstance(axis, int) else axis)}
            for a in axes:
                if x.shape[a] != 1:
                    raise InvalidArgumentError(
                        f"Can not squeeze dim[{a}], expected a dimension of 1, got {x.shape[a]}")
            keep = [k for k in range(nd) if k not in axes]
        return self._view(x, tuple(x.shape[k] for k in keep), tuple(st[k] for k in keep), off)

    def unpack(self, x, num, axis):
        """Unpack: ``num`` views, one per index along ``axis``."""
        st, off = self.rt.layout(x)
        shape = x.shape[:axis] + x.shape[axis + 1:]
        rest = st[:axis] + st[axis + 1:]
        return tuple(self._view(x, shape, rest, off + i * st[axis]) for i in range(num))

    def split_v(self, x, size_splits, axis):
        """SplitV: views of consecutive slabs of ``size_splits`` along ``axis``."""
        st, off = self.rt.layout(x)
        out = []
        start = 0
        for s in size_splits:
            shape = x.shape[:axis] + (s,) + x.shape[axis + 1:]
            out.append(self._view(x, shape, st, off + start * st[axis]))
            start += s
        return tuple(out)

    def slice_(self, x, begin, size):
        """Slice: a view from ``begin`` of ``size``."""
        st, off = self.rt.layout(x)
        off += sum(b * s for b, s in zip(begin, st))
        return self._view(x, tuple(size) + x.shape[len(size):], st, off)

    def strided_slice(self, x, spec):
        """StridedSlice: a view for positive steps, a strided copy for negative ones."""
        st, off = self.rt.layout(x)
        shape, strides = [], []
        for e in _parse_spec(x.shape, spec):
            if e[0] == "n":
                shape.append(1)
                strides.append(0)
            elif e[0] == "i":
                off += e[2] * st[e[1]]
            else:
                _, d, start, step, count = e
                shape.append(count)
                strides.append(step * st[d] if count > 1 else 0)
                if count:
                    off += start * st[d]
        shape = tuple(shape)
        if math.prod(shape) == 0:
            return self.rt.empty(self.rt.device_of(x), shape, x.dtype)
        if all(s >= 0 for s in strides):
            return self._view(x, shape, strides, off)
        dev = self.rt.device_of(x)
        out = self.rt.empty(dev, shape, x.dtype)
        ost, ooff = self.rt.layout(out)
        strided_copy(dev, out, ooff, ost, x, off, strides, shape)
        return out

    def strided_slice_grad(self, dy, shape, spec):
        """StridedSliceGrad: ``dy`` embedded in zeros of ``shape`` (one ``imap`` launch)."""
        shape = tuple(shape)
        dst, doff = self.rt.layout(dy)
        starts, steps, counts, strides = [], [], [], []
        k = 0   # dy's dimension
        for e in _parse_spec(shape, spec):
            if e[0] == "n":
                k += 1
            elif e[0] == "i":
                starts.append(e[2])
                steps.append(1)
                counts.append(1)
                strides.append(0)
            else:
                _, d, start, step, count = e
                starts.append(start)
                steps.append(step)
                counts.append(count)
                strides.append(dst[k])
                k += 1
        return index_map(dy, shape, "embed", starts, steps, counts, strides, doff, 0)

    # --- copies -----------------------------------------------------------------------
    def concat(self, *xs, axis):
        """ConcatV2: one strided copy per input into its slab of the output."""
        dev = self.rt.device_of(xs[0])
        s0 = xs[0].shape
        for x in xs[1:]:
            if len(x.shape) != len(s0) or any(
                    a != b for d, (a, b) in enumerate(zip(s0, x.shape)) if d != axis):
                raise ValueError(f"cannot concatenate {s0} and {x.shape} along {axis}")
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = self.rt.empty(dev, shape, xs[0].dtype)
        if out.size == 0:
            return out
        ost, _ = self.rt.layout(out)
        pos = 0
        for x in xs:
            st, off = self.rt.layout(x)
            strided_copy(dev, out, pos * ost[axis], ost, x, off, st, x.shape)
            pos += x.shape[axis]
        return out

    def pack(self, *xs, axis):
        """Pack: one strided copy per input into its index along ``axis``."""
        dev = self.rt.device_of(xs[0])
        s = xs[0].shape
        for x in xs[1:]:
            if x.shape != s:
                raise ValueError(f"cannot stack {s} and {x.shape}")
        out = self.rt.empty(dev, s[:axis] + (len(xs),) + s[axis:], xs[0].dtype)
        if out.size == 0:
            return out
        ost, _ = self.rt.layout(out)
        rest = ost[:axis] + ost[axis + 1:]
        for i, x in enumerate(xs):
            st, off = self.rt.layout(x)
            strided_copy(dev, out, i * ost[axis], rest, x, off, st, x.shape)
        return out

    def tile(self, x, multiples):
        """Tile: one ``imap`` launch (``c % n`` per dimension)."""
        if len(multiples) != x.ndim:
            raise InvalidArgumentError(
                f"Expected multiples argument to be a vector of length {x.ndim} but got length "
                f"{len(multiples)}")
        st, off = self.rt.layout(x)
        shape = tuple(n * m for n, m in zip(x.shape, multiples))
        nd = x.ndim
        return index_map(x, shape, "tile", [0] * nd, [1] * nd, x.shape, st, off)

    def pad(self, x, paddings, constant_values):
        """PadV2: one ``imap`` launch (``constant_values`` off the grid)."""
        st, off = self.rt.layout(x)
        shape = tuple(b + n + a for (b, a), n in zip(paddings, x.shape))
        nd = x.ndim
        return index_map(x, shape, "embed", [b for b, _ in paddings], [1] * nd, x.shape, st, off,
                         constant_values)

    def mirror_pad(self, x, paddings, mode):
        """MirrorPad: one ``imap`` launch (reflected or symmetric coordinates)."""
        st, off = self.rt.layout(x)
        shape = tuple(b + n + a for (b, a), n in zip(paddings, x.shape))
        nd = x.ndim
        return index_map(x, shape, "reflect" if mode == "REFLECT" else "symmetric",
                         [b for b, _ in paddings], [1] * nd, x.shape, st, off)

    # --- shape queries ----------------------------------------------------------------
    def shape(self, x, out_type):
        """Shape: ``x``'s shape uploaded as a vector of ``out_type``."""
        return self.rt.upload(self.rt.device_of(x), np.asarray(x.shape, dtype=out_type.np))

    def size(self, x, out_type):
        """Size: ``x``'s element count as a scalar of ``out_type``."""
        return self.rt.scalar(self.rt.device_of(x), x.size, out_type.np)

    def rank(self, x):
        """Rank: ``x``'s number of dimensions as an int32 scalar."""
        return self.rt.scalar(self.rt.device_of(x), x.ndim, np.int32)

    # --- selection --------------------------------------------------------------------
    def select(self, c, x, y):
        """SelectV2: ``x0 ? x1 : x2`` through the generated elementwise kernel."""
        return self.rt.elementwise("x0 ? x1 : x2", x.dtype, c, x, y)

    def identity(self, x):
        """Identity and StopGradient: ``x`` itself (tensors are immutable)."""
        return x

    def clip(self, t, lo, hi):
        """ClipByValue: ``min(max(t, lo), hi)``, NaN-propagating on floats as NumPy."""
        if t.dtype.kind == "f":   # np.maximum / np.minimum propagate NaN
            return self.rt.elementwise("FMINN(FMAXN(x0, x1), x2)", t.dtype, t, lo, hi,
                                       preamble=_NAN_MINMAX)
        return self.rt.elementwise("((x0 > x1 ? x0 : x1) < x2) ? (x0 > x1 ? x0 : x1) : x2",
                                   t.dtype, t, lo, hi)

    def where(self, c):
        """Where (one argument): the coordinates of ``c``'s non-zero elements, int64
        ``[count, ndim]`` (a count, a scan and a compaction kernel)."""
        dev = self.rt.device_of(c)
        nd = c.ndim
        n = c.size
        if n == 0:
            return self.rt.empty(dev, (0, nd), np.int64)
        c = self.rt.contiguous(c)
        _, ox = self.rt.layout(c)
        chunk = max(32, -(-n // 4096))
        G = -(-n // chunk)
        src = _where_src(self.rt.CTYPES[c.dtype], nd)
        counts = self.rt.empty(dev, (G + 1,), np.int64)
        i64 = np.int64
        _run(dev, src, "where_count", [None, i64, i64, i64, None], G,
             c.base_data, ox, n, chunk, counts.base_data)
        _run(dev, src, "where_scan", [None, i64], 1, counts.base_data, G)
        total = int(self.rt.download(self.rt.view(counts, (), (), G)))
        out = self.rt.empty(dev, (total, nd), np.int64)
        if total and nd:
            _run(dev, src, "where_write", [None, i64, i64, i64, None, None] + [i64] * (nd - 1), G,
                 c.base_data, ox, n, chunk, counts.base_data, out.base_data, *c.shape[1:])
        return out

    def bitcast(self, x, dtype):
        """Bitcast: a view of ``x``'s buffer as ``dtype`` (a tapeflow DType; the public
        function checked the shapes), after one copy where ``x`` is strided or its
        offset is not a multiple of the new item size."""
        to = np.dtype(dtype.np)
        a, b = x.dtype.itemsize, to.itemsize
        shape = (x.shape + (a // b,) if a > b else x.shape[:-1] if a < b else x.shape)
        if not self.rt.is_contiguous(x) or x.offset % b:
            x = self.rt.elementwise("x0", x.dtype, x, out_shape=x.shape)
        if x.base_data is None:
            return self.rt.empty(self.rt.device_of(x), shape, to)
        return self.rt.view(x, shape, dtype=to)

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {
            "Fill": KernelSpec(self.fill, needs_device=True, dtypes=ALL),
            "Bitcast": KernelSpec(self.bitcast, dtypes=NUMERIC),
            "ZerosLike": KernelSpec(self.zeros_like, dtypes=ALL),
            "OnesLike": KernelSpec(self.ones_like, dtypes=ALL),
            "Range": KernelSpec(self.range_, needs_device=True,
                                dtypes=FLOATS + ("int32", "int64")),
            "Eye": KernelSpec(self.eye, needs_device=True, dtypes=ALL),
            "LinSpace": KernelSpec(self.linspace, needs_device=True, dtypes=FLOATS),
            "OneHot": KernelSpec(self.one_hot, dtypes=ALL),
            "Reshape": KernelSpec(self.reshape, dtypes=ALL),
            "BroadcastTo": KernelSpec(self.broadcast_to, dtypes=ALL),
            "Transpose": KernelSpec(self.transpose, dtypes=ALL),
            "ExpandDims": KernelSpec(self.expand_dims, dtypes=ALL),
            "Squeeze": KernelSpec(self.squeeze, dtypes=ALL),
            "ConcatV2": KernelSpec(self.concat, dtypes=ALL),
            "Pack": KernelSpec(self.pack, dtypes=ALL),
            "Unpack": KernelSpec(self.unpack, dtypes=ALL),
            "SplitV": KernelSpec(self.split_v, dtypes=ALL),
            "Tile": KernelSpec(self.tile, dtypes=ALL),
            "PadV2": KernelSpec(self.pad, dtypes=ALL),
            "MirrorPad": KernelSpec(self.mirror_pad, dtypes=ALL),
            "Slice": KernelSpec(self.slice_, dtypes=ALL),
            "StridedSlice": KernelSpec(self.strided_slice, dtypes=ALL),
            "StridedSliceGrad": KernelSpec(self.strided_slice_grad, dtypes=ALL),
            "Shape": KernelSpec(self.shape, dtypes=ALL),
            "Size": KernelSpec(self.size, dtypes=ALL),
            "Rank": KernelSpec(self.rank, dtypes=ALL),
            "SelectV2": KernelSpec(self.select, dtypes=ALL),
            "Where": KernelSpec(self.where, dtypes=ALL),
            "Identity": KernelSpec(self.identity, dtypes=ALL),
            "StopGradient": KernelSpec(self.identity, dtypes=ALL),
            "ClipByValue": KernelSpec(self.clip, dtypes=NUMERIC),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return ArrayKernels(ctx).table()
