"""Collectives on tapeflow tensors: allreduce (one tensor or a fused group), allgather,
broadcast, alltoall, barrier.

How the bytes move, by the device a tensor lives on (``transport()`` says which path
this machine takes; ``python -m tapeflow info`` prints it):

* ``cpu``: MPI on the tensor's own NumPy buffer (mpi4py's buffer interface, no copy
  in; the result buffer becomes the result tensor, no copy out).
* ``cuda``: NCCL (``cupy.cuda.nccl``, the unique id sent over MPI) when CuPy has it;
  else CUDA-aware MPI on the device pointer when the MPI library says it is one; else
  host staging.
* ``opencl`` (and any other device type): host staging: download, MPI, upload.

Every collective first checks that all ranks are about to do the same thing (the op,
the tensor names, shapes and dtypes) with one allreduce of a 56-bit hash (two
``int64``); only when the hashes differ do the ranks exchange their descriptions, to
name the tensor and the ranks in the error. ``init(check=False)`` skips it.

Collectives are not recorded on a GradientTape: reduce gradients after the tape
(:class:`~tapeflow.distributed.DistributedGradientTape`).
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from ..runtime.dispatch import constant
from ..errors import DeadlineExceededError, InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from . import _world

#: reduction ops (Horovod's names: ``hvd.Sum``, ``hvd.Average``, ...)
Sum, Average, Min, Max, Product = "sum", "average", "min", "max", "product"
_REDUCE_OPS = (Sum, Average, Min, Max, Product)


# --- helpers ------------------------------------------------------------------------------

def _tensor(x, what) -> Tensor:
    if isinstance(x, Variable):
        return x.read_value()
    if isinstance(x, Tensor):
        return x
    try:
        return constant(x)
    except Exception as e:
        raise InvalidTypeError(f"{what}: expected a Tensor, Variable or array, got "
                               f"{type(x).__name__} ({e})") from None


def _check_op(op, what):
    if op not in _REDUCE_OPS:
        raise InvalidArgumentError(
            f"{what}: op must be one of tf.distributed.Sum, Average, Min, Max, Product "
            f"(the strings {', '.join(map(repr, _REDUCE_OPS))}), got {op!r}")


def _name(w, kind, name):
    w.counter += 1
    return name if name is not None else f"{kind}.{w.counter}"


def _describe(t: Tensor) -> tuple:
    return (tuple(int(d) for d in t.shape), t.dtype.name)


def _wait(w, req, what):
    """Wait for a non-blocking MPI request, at most ``w.timeout`` seconds."""
    deadline = time.monotonic() + w.timeout
    delay = 1e-5
    while not req.Test():
        if time.monotonic() > deadline:
            raise DeadlineExceededError(
                f"{what}: rank {w.rank} of {w.size} waited {w.timeout:g} s and not every rank "
                "joined: a peer died, is stuck, or runs a different sequence of collectives "
                "(the timeout is init(timeout=...) / TAPEFLOW_COLLECTIVE_TIMEOUT)")
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


def _allreduce_buf(w, buf, mpi_op, what):
    MPI = w.MPI
    if w.timeout is None:
        w.comm.Allreduce(MPI.IN_PLACE, buf, op=mpi_op)
    else:
        _wait(w, w.comm.Iallreduce(MPI.IN_PLACE, buf, op=mpi_op), what)


_hashes: dict = {}          # description -> its 56-bit hash (a training loop repeats them)


def agree(w, kind, entries, extra=None, flags=None):
    """Raise, on every rank, if the ranks are not about to run the same collective on
    tensors of the same names, shapes and dtypes (``entries``: ``[(name, shape, dtype)]``).

    ``flags`` (a list of 0/1) ride along in the same tiny allreduce and come back
    OR-ed over the ranks (which gradients exist anywhere): one round trip for both."""
    if w.size == 1:
        return flags
    if not w.check:
        if flags is None:
            return None
        f = np.array(flags, dtype=np.int64)
        if f.size:
            _allreduce_buf(w, f, w.MPI.MAX, f"{kind} (flags)")
        return f.tolist()
    desc = (kind, extra, tuple(entries))
    h = _hashes.get(desc)
    if h is None:
        if len(_hashes) > 4096:
            _hashes.clear()
        h = _hashes[desc] = int.from_bytes(
            hashlib.blake2b(repr(desc).encode(), digest_size=7).digest(), "little")
    v = np.array([h, -h] + list(flags or ()), dtype=np.int64)
    _allreduce_buf(w, v, w.MPI.MAX, f"{kind} (metadata check)")
    if v[0] != h or v[1] != -h:
        descs = w.comm.allgather(desc)
        raise InvalidArgumentError(_mismatch(kind, descs))
    return None if flags is None else v[2:].tolist()


def _mismatch(kind, descs):
    def show(e):
        name, shape, dtype = e
        return f"{name!r} shape {shape} {dtype}"

    kinds = {d[0] for d in descs}
    if len(kinds) > 1 or len({repr(d[1]) for d in descs}) > 1:
        per = "; ".join(f"rank {r}: {d[0]}{'' if d[1] is None else f' ({d[1]})'} of "
                        f"{len(d[2])} tensor(s)" for r, d in enumerate(descs))
        return (f"{kind}: the ranks are running different collectives: {per}. Every rank "
                "must call the same collectives in the same order with the same arguments.")
    lens = [len(d[2]) for d in descs]
    if len(set(lens)) > 1:
        per = ", ".join(f"rank {r}: {n}" for r, n in enumerate(lens))
        return (f"{kind}: the ranks pass different numbers of tensors ({per}); every rank "
                "must pass the same list (a gradient that is None on one rank counts).")
    for i in range(lens[0]):
        col = [d[2][i] for d in descs]
        if len({repr(e) for e in col}) > 1:
            per = "; ".join(f"rank {r} has {show(e)}" for r, e in enumerate(col))
            return (f"{kind}: the ranks disagree on tensor {col[0][0]!r} (entry {i + 1} of "
                    f"{lens[0]}): {per}. Every rank must pass tensors of the same shape and "
                    "dtype in the same order (only allgather and alltoall allow a different "
                    "first dimension).")
    return f"{kind}: the ranks disagree on what to reduce: {descs}"   # pragma: no cover


# --- device paths -------------------------------------------------------------------------

def _cupy():
    import cupy                 # only ever for tensors on a cuda device: CuPy is there
    return cupy


def _nccl_module():
    try:
        from cupy.cuda import nccl
    except Exception:           # CuPy without NCCL, or no CuPy at all
        return None
    try:
        nccl.get_version()
    except Exception:
        return None
    return nccl


def _cuda_aware_mpi(w) -> bool:
    try:
        return bool(w.MPI.Query_cuda_support())
    except Exception:           # mpi4py < 4, or an MPI without the MPIX extension
        return False


def transport(device_type: str, w=None) -> str:
    """How collectives move tensors of ``device_type`` here ("cpu", "cuda", "opencl")."""
    if device_type == "cpu":
        return "MPI on the tensors' host buffers (no copies)"
    if device_type == "cuda":
        if _nccl_module() is not None:
            return "NCCL (cupy.cuda.nccl)"
        if w is not None and w.comm is not None and _cuda_aware_mpi(w):
            return "CUDA-aware MPI on device buffers"
        return "host staging (no NCCL in CuPy; MPI not CUDA-aware)"
    return "host staging (download, MPI, upload)"


def _use_nccl(dev):
    return dev.type == "cuda" and _nccl_module() is not None


_NCCL_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
               "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32",
               "int64": "NCCL_INT64", "uint32": "NCCL_UINT32", "uint64": "NCCL_UINT64"}
_NCCL_OPS = {Sum: "NCCL_SUM", Average: "NCCL_SUM", Min: "NCCL_MIN", Max: "NCCL_MAX",
             Product: "NCCL_PROD"}


def _nccl_comm(w, dev):
    """One NCCL communicator per CUDA device, its unique id sent from rank 0 over MPI."""
    comms = w.__dict__.setdefault("nccl", {})
    c = comms.get(dev.index)
    if c is None:
        nccl = _nccl_module()
        uid = nccl.get_unique_id() if w.rank == 0 else None
        uid = w.comm.bcast(uid, root=0)
        with _cupy().cuda.Device(dev.index):
            c = comms[dev.index] = nccl.NcclCommunicator(w.size, uid, w.rank)
    return c


def _nccl_allreduce(w, dev, buf, op):
    nccl = _nccl_module()
    cp = _cupy()
    dtype = buf.dtype.name
    if dtype not in _NCCL_TYPES:
        raise InvalidArgumentError(f"allreduce: NCCL cannot reduce {dtype} tensors")
    with cp.cuda.Device(dev.index):
        stream = cp.cuda.get_current_stream()
        _nccl_comm(w, dev).allReduce(buf.data.ptr, buf.data.ptr, buf.size,
                                     getattr(nccl, _NCCL_TYPES[dtype]),
                                     getattr(nccl, _NCCL_OPS[op]), stream.ptr)


def _host_array(t: Tensor) -> np.ndarray:
    """The tensor's values in host memory (the buffer itself on the CPU)."""
    return t._host()


def _from_host(a: np.ndarray, dev) -> Tensor:
    """A tensor on ``dev`` holding the (fresh, owned) host array ``a``."""
    return wrap(dev.backend.from_host(a, dev), dev)


def _mpi_reduce_op(w, op, dtype):
    MPI = w.MPI
    if dtype == np.bool_ and op not in (Min, Max):
        raise InvalidArgumentError(
            f"allreduce: a bool tensor can only be reduced with Min (all) or Max (any), "
            f"not {op}; cast it to an int dtype to count")
    return {Sum: MPI.SUM, Average: MPI.SUM, Min: MPI.MIN, Max: MPI.MAX,
            Product: MPI.PROD}[op]


# --- allreduce ----------------------------------------------------------------------------

def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """The elementwise reduction (``op``: Average by default, Sum, Min, Max, Product)
    of ``tensor`` over all ranks, on every rank, on the tensor's device and in its dtype.

    ``prescale_factor``/``postscale_factor`` multiply the local value before and the
    result after the reduction (floating-point tensors). Average of an integer tensor
    truncates toward zero. Every rank must pass a tensor of the same shape and dtype.

    >>> import tapeflow as tf
    >>> print(tf.distributed.allreduce(tf.constant([1., 2.]), op=tf.distributed.Sum))
    tf.Tensor([1. 2.], shape=(2,), dtype=float32)
    """
    return grouped_allreduce([tensor], op=op, name=name, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, bucket_bytes=0)[0]


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0,
                      postscale_factor=1.0, bucket_bytes=None, _checked=False):
    """:func:`allreduce` of each tensor in ``tensors`` (a list; ``None`` entries stay
    ``None``), with **tensor fusion**: tensors of one device and dtype are packed, in
    order, into buffers of up to ``bucket_bytes`` (default: the world's, 64 MiB) and
    each buffer is reduced with one call. The results do not share memory with the
    inputs."""
    w = _world.world()
    _check_op(op, "allreduce")
    items = [(i, _tensor(t, "allreduce")) for i, t in enumerate(tensors) if t is not None]
    base = _name(w, "allreduce", name)
    if not _checked:
        entries = [(f"{base}[{i}]" if len(tensors) > 1 else base, *_describe(t))
                   for i, t in items]
        agree(w, "allreduce", entries, (op, float(prescale_factor), float(postscale_factor)))
    out = [None] * len(tensors)
    if not items:
        return out
    limit = w.bucket_bytes if bucket_bytes is None else int(bucket_bytes)
    for bucket in _buckets(items, limit):
        for i, r in zip((i for i, _ in bucket),
                        _reduce_bucket(w, bucket, op, prescale_factor, postscale_factor,
                                       base)):
            out[i] = r
    return out


def _buckets(items, limit):
    """Group ``[(index, tensor)]`` by (device, dtype), in order, into runs of at most
    ``limit`` bytes (a larger tensor is a bucket of its own)."""
    open_ = {}
    done = []
    for i, t in items:
        key = (t._device.name, t.dtype.name)
        nbytes = t.size * t.dtype.size
        b = open_.get(key)
        if b is not None and b[0] + nbytes <= limit:
            b[0] += nbytes
            b[1].append((i, t))
            continue
        if b is not None:
            done.append(b)
        open_[key] = [nbytes, [(i, t)]]
    done.extend(open_.values())
    done.sort(key=lambda b: b[1][0][0])         # deterministic: by first tensor's index
    return [b[1] for b in done]


def _reduce_bucket(w, bucket, op, pre, post, name):
    t0 = bucket[0][1]
    dev, dtype = t0._device, t0.dtype.as_numpy_dtype
    n = w.size
    floating = np.dtype(dtype).kind == "f"
    if not floating and (pre != 1.0 or post != 1.0):
        raise InvalidArgumentError(
            f"allreduce {name!r}: prescale/postscale factors need floating-point tensors, "
            f"got {np.dtype(dtype).name}")
    # Average: with a power-of-two number of ranks, 1/n is exact, so it scales while
    # packing (no extra pass); otherwise the sum is divided once after the reduction
    # (rounding each rank's value by 1/n first would lose accuracy)
    scale, avg = pre, op == Average and floating
    if avg and n & (n - 1) == 0:
        scale = pre / n
    elif avg:
        post = post / n
    if n == 1:
        # one process: the reduction is the identity (scaled; tensors are immutable, so
        # an unscaled result may be the input itself)
        f = scale * post
        return [t * constant(f, dtype=t.dtype, device=dev.name) if f != 1.0 else t
                for _, t in bucket]
    if _use_nccl(dev):
        return _reduce_bucket_cuda(w, bucket, op, scale, post, dev, _nccl_reduce(w, dev, op))
    work = np.float32 if dtype == np.float16 else dtype     # MPI has no float16 reduction
    sizes = [t.size for _, t in bucket]
    buf = np.empty(sum(sizes), dtype=work)
    if dtype == np.bool_:
        buf = buf.view(np.uint8)
    off = 0
    for (_, t), k in zip(bucket, sizes):
        a = _host_array(t)
        dst = buf[off:off + k].reshape(a.shape)
        if scale != 1.0:
            np.multiply(a, scale, out=dst, dtype=work)  # pack and scale in one pass
        else:
            np.copyto(dst, a.view(np.uint8) if dtype == np.bool_ else a, casting="unsafe")
        off += k
    mpi_op = _mpi_reduce_op(w, op, np.dtype(dtype))
    what = f"allreduce {name!r}"
    if dev.type == "cuda" and _cuda_aware_mpi(w):       # pragma: no cover - needs a GPU
        return _reduce_bucket_cuda(w, bucket, op, scale, post, dev,
                                   _cuda_mpi_reduce(w, mpi_op, what))
    _allreduce_buf(w, buf, mpi_op, what)
    if op == Average and not floating:
        buf[...] = np.trunc(buf / n)
    if post != 1.0:
        buf *= post
    if dtype == np.bool_:
        buf = buf.view(np.bool_)
    outs = []
    off = 0
    for (_, t), k in zip(bucket, sizes):
        a = buf[off:off + k].reshape(tuple(t.shape))
        if work is not dtype and dtype != np.bool_:
            a = a.astype(dtype)
        outs.append(_from_host(a, dev))
        off += k
    return outs


def _reduce_bucket_cuda(w, bucket, op, scale, post, dev, reduce):  # pragma: no cover - GPU
    """Pack the bucket's CuPy arrays into one device buffer, ``reduce(buf)`` it in place
    (NCCL, or CUDA-aware MPI), scale, and hand out views of it as the results."""
    cp = _cupy()
    with cp.cuda.Device(dev.index):
        parts = [t._data.reshape(-1) for _, t in bucket]
        buf = cp.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        if scale != 1.0:
            buf *= scale
        reduce(buf)
        if op == Average and buf.dtype.kind != "f":
            buf[...] = cp.trunc(buf / w.size).astype(buf.dtype)
        if post != 1.0:
            buf *= post
        outs, off = [], 0
        for _, t in bucket:
            k = t.size
            outs.append(wrap(buf[off:off + k].reshape(tuple(t.shape)), dev))
            off += k
    return outs


def _nccl_reduce(w, dev, op):                                     # pragma: no cover - GPU
    return lambda buf: _nccl_allreduce(w, dev, buf, op)


def _cuda_mpi_reduce(w, mpi_op, what):                            # pragma: no cover - GPU
    def reduce(buf):
        _cupy().cuda.get_current_stream().synchronize()    # MPI reads the memory directly
        _allreduce_buf(w, buf, mpi_op, what)
    return reduce


# --- broadcast, allgather, alltoall, barrier ----------------------------------------------

def broadcast(tensor, root_rank=0, name=None):
    """``root_rank``'s value of ``tensor`` on every rank (each rank passes a tensor of
    the same shape and dtype; the result is on the tensor's device).

    >>> import tapeflow as tf
    >>> print(tf.distributed.broadcast(tf.constant([3, 4]), root_rank=0))
    tf.Tensor([3 4], shape=(2,), dtype=int32)
    """
    return grouped_broadcast([tensor], root_rank, name)[0]


def _check_root(w, root_rank, what):
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) \
            or not 0 <= root_rank < w.size:
        raise InvalidArgumentError(
            f"{what}: root_rank must be an int in [0, {w.size}) for a job of {w.size} "
            f"process(es), got {root_rank!r}")


def grouped_broadcast(tensors, root_rank=0, name=None):
    """:func:`broadcast` of each tensor of ``tensors``, one MPI call per dtype."""
    w = _world.world()
    _check_root(w, root_rank, "broadcast")
    ts = [_tensor(t, "broadcast") for t in tensors]
    base = _name(w, "broadcast", name)
    entries = [(f"{base}[{i}]" if len(ts) > 1 else base, *_describe(t)) for i, t in enumerate(ts)]
    agree(w, "broadcast", entries, int(root_rank))
    if w.size == 1 or not ts:
        return list(ts)
    nbytes = [t.size * t.dtype.size for t in ts]
    buf = np.empty(sum(nbytes), dtype=np.uint8)
    off = 0
    if w.rank == root_rank:
        for t, k in zip(ts, nbytes):
            a = np.ascontiguousarray(_host_array(t))
            buf[off:off + k] = a.reshape(-1).view(np.uint8)
            off += k
    if w.timeout is None:
        w.comm.Bcast(buf, root=root_rank)
    else:
        _wait(w, w.comm.Ibcast(buf, root=root_rank), f"broadcast {base!r}")
    outs, off = [], 0
    for t, k in zip(ts, nbytes):
        a = buf[off:off + k].view(t.dtype.as_numpy_dtype).reshape(tuple(t.shape))
        outs.append(_from_host(a, t._device))
        off += k
    return outs


def allgather(tensor, name=None):
    """The ranks' tensors concatenated along axis 0, in rank order, on every rank. The
    first dimension may differ between ranks; the others and the dtype may not.

    >>> import tapeflow as tf
    >>> tf.distributed.allgather(tf.ones([2, 3])).shape
    TensorShape([2, 3])
    """
    w = _world.world()
    t = _tensor(tensor, "allgather")
    base = _name(w, "allgather", name)
    if t.ndim == 0:
        raise InvalidArgumentError(
            f"allgather {base!r}: a 0-d tensor has no axis 0 to concatenate on; reshape it "
            "to [1] first")
    if w.size == 1:
        return t
    shape, dtype = _describe(t)
    descs = w.comm.allgather((shape, dtype))
    if len({(s[1:], d) for s, d in descs}) > 1:
        per = "; ".join(f"rank {r} has shape {s} {d}" for r, (s, d) in enumerate(descs))
        raise InvalidArgumentError(
            f"allgather {base!r}: the ranks' tensors differ beyond the first dimension or "
            f"in dtype: {per}")
    row = t.dtype.size * int(np.prod(shape[1:], dtype=np.int64))
    counts = [s[0] * row for s, _ in descs]
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64).tolist()
    send = np.ascontiguousarray(_host_array(t)).reshape(-1).view(np.uint8)
    recv = np.empty(sum(counts), dtype=np.uint8)
    args = (send, [recv, counts, displs, w.MPI.BYTE])
    if w.timeout is None:
        w.comm.Allgatherv(*args)
    else:
        _wait(w, w.comm.Iallgatherv(*args), f"allgather {base!r}")
    total = sum(s[0] for s, _ in descs)
    a = recv.view(t.dtype.as_numpy_dtype).reshape((total,) + shape[1:])
    return _from_host(a, t._device)


def alltoall(tensor, splits=None, name=None):
    """Scatter slices of ``tensor`` along axis 0 to the ranks and gather what they send:
    rank ``r`` receives slice ``r`` of every rank, concatenated in rank order. Without
    ``splits`` the first dimension is split evenly (it must divide by ``size()``);
    ``splits`` (one int per rank) gives the sizes, and then the result is
    ``(tensor, received_splits)``, as in Horovod.

    >>> import tapeflow as tf
    >>> print(tf.distributed.alltoall(tf.constant([1, 2])))
    tf.Tensor([1 2], shape=(2,), dtype=int32)
    """
    w = _world.world()
    t = _tensor(tensor, "alltoall")
    base = _name(w, "alltoall", name)
    if t.ndim == 0:
        raise InvalidArgumentError(f"alltoall {base!r}: a 0-d tensor has no axis 0 to split")
    n0 = int(t.shape[0])
    if splits is None:
        if n0 % w.size:
            raise InvalidArgumentError(
                f"alltoall {base!r}: the first dimension ({n0}) does not divide evenly among "
                f"{w.size} ranks; pass splits=[...] (one size per rank)")
        sp = [n0 // w.size] * w.size
    else:
        sp = [int(s) for s in (splits.numpy().tolist() if isinstance(splits, Tensor)
                               else splits)]
        if len(sp) != w.size or min(sp, default=0) < 0 or sum(sp) != n0:
            raise InvalidArgumentError(
                f"alltoall {base!r}: splits must hold {w.size} non-negative sizes summing to "
                f"the first dimension {n0}, got {sp}")
    shape, dtype = _describe(t)
    if w.size == 1:
        return (t, constant(sp, dtype="int32")) if splits is not None else t
    agree(w, "alltoall", [(base, shape[1:], dtype)])
    send_counts = np.array(sp, dtype=np.int64)
    recv_counts = np.empty_like(send_counts)
    w.comm.Alltoall(send_counts, recv_counts)
    row = t.dtype.size * int(np.prod(shape[1:], dtype=np.int64))
    sc = (send_counts * row).tolist()
    rc = (recv_counts * row).tolist()
    sd = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64).tolist()
    rd = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64).tolist()
    send = np.ascontiguousarray(_host_array(t)).reshape(-1).view(np.uint8)
    recv = np.empty(sum(rc), dtype=np.uint8)
    args = ([send, sc, sd, w.MPI.BYTE], [recv, rc, rd, w.MPI.BYTE])
    if w.timeout is None:
        w.comm.Alltoallv(*args)
    else:
        _wait(w, w.comm.Ialltoallv(*args), f"alltoall {base!r}")
    a = recv.view(t.dtype.as_numpy_dtype).reshape((int(recv_counts.sum()),) + shape[1:])
    out = _from_host(a, t._device)
    if splits is None:
        return out
    return out, constant(recv_counts.astype(np.int32))


def barrier():
    """Wait until every rank has reached this call."""
    w = _world.world()
    if w.size == 1:
        return
    if w.timeout is None:
        w.comm.Barrier()
    else:
        _wait(w, w.comm.Ibarrier(), "barrier")
