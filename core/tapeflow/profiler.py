"""``tapeflow.profiler``: where the time of eager ops goes, per op and per call.

While a profile runs, every registered kernel is replaced by a timing wrapper (and
put back when it stops), so profiling costs nothing when it is off: no flag is
checked per op, the dispatcher calls the same functions as always. Each kernel call
records the op, the device type, the input shapes and dtypes, and its wall time; on
devices that are not the host the wrapper waits for the device after the kernel
(``synchronize=True``, the default), so the time is the device's, not the launch's.

What it sees: ops run eagerly (forward, the gradient ops a tape runs, optimizer
updates). A ``tf.function`` traced before the profile started replays the kernels it
captured at trace time, and fused kernels are not ops: profile the eager code, or
trace inside the profile.

>>> import tapeflow as tf
>>> x = tf.ones([64, 64])
>>> with tf.profiler.profile() as prof:
...     y = tf.reduce_sum(tf.matmul(x, x) + 1.0)
>>> sorted(r.name for r in prof.key_averages())
['Add', 'MatMul', 'Sum']
>>> print(prof.key_averages().table(sort_by="total", row_limit=1))  # doctest: +SKIP
op        device  calls  total ms  avg us  % time  input shapes
MatMul    cpu         1     0.040    40.1    71.2  float32[64,64], float32[64,64]
>>> path = prof.export_chrome_trace("/tmp/trace.json")   # opens in Perfetto, chrome://tracing

``tf.profiler.experimental.start()`` / ``stop()`` do the same without a block
(``stop()`` returns the :class:`Profile`; with ``logdir`` it also writes the Chrome
trace there).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import types

from .runtime import devices as _devs
from .runtime import registry as _reg
from .errors import FailedPreconditionError

__all__ = ["profile", "Profile", "Event", "experimental"]

_lock = threading.Lock()
_active: list = []          # the running Profile (at most one)


class Event:
    """One kernel call: ``name``, ``device`` (type), ``shapes``/``dtypes`` of the
    inputs, ``start_ns``/``end_ns`` (``time.perf_counter_ns``), ``thread``."""

    __slots__ = ("name", "device", "shapes", "dtypes", "start_ns", "end_ns", "thread")

    def __init__(self, name, device, shapes, dtypes, start_ns, end_ns, thread):
        self.name, self.device, self.shapes, self.dtypes = name, device, shapes, dtypes
        self.start_ns, self.end_ns, self.thread = start_ns, end_ns, thread

    @property
    def duration_us(self) -> float:
        return (self.end_ns - self.start_ns) / 1e3

    def inputs(self) -> str:
        return ", ".join(f"{d}[{','.join(map(str, s))}]" for s, d in zip(self.shapes,
                                                                        self.dtypes))


class _Row:
    __slots__ = ("name", "device", "calls", "total_us", "inputs")

    def __init__(self, name, device, inputs):
        self.name, self.device, self.inputs = name, device, inputs
        self.calls = 0
        self.total_us = 0.0

    @property
    def avg_us(self):
        return self.total_us / self.calls if self.calls else 0.0


class KeyAverages(list):
    """Per-(op, device) totals; :meth:`table` prints them."""

    def table(self, sort_by="total", row_limit=None) -> str:
        """A text table sorted by ``"total"``, ``"calls"`` or ``"avg"`` (descending)."""
        key = {"total": lambda r: r.total_us, "calls": lambda r: r.calls,
               "avg": lambda r: r.avg_us}.get(sort_by)
        if key is None:
            raise FailedPreconditionError(f"sort_by must be 'total', 'calls' or 'avg', "
                                          f"not {sort_by!r}")
        rows = sorted(self, key=key, reverse=True)[:row_limit]
        grand = sum(r.total_us for r in self) or 1.0
        cols = ["op", "device", "calls", "total ms", "avg us", "% time", "input shapes"]
        body = [[r.name, r.device, str(r.calls), f"{r.total_us / 1e3:.3f}", f"{r.avg_us:.1f}",
                 f"{100 * r.total_us / grand:.1f}", r.inputs] for r in rows]
        widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c)
                  for i, c in enumerate(cols)]
        fmt = "  ".join("{:<%d}" % w if i in (0, 1, 6) else "{:>%d}" % w
                        for i, w in enumerate(widths))
        return "\n".join(fmt.format(*row).rstrip() for row in [cols] + body)


class Profile:
    """The events of one profiling session (see the module docstring)."""

    def __init__(self, synchronize=True):
        self.synchronize = synchronize
        self.events: list[Event] = []
        self._saved: list = []          # (op, device type, original fn)
        self._running = False

    # --- collection ------------------------------------------------------------------
    def _wrap(self, op, device_type, fn):
        events = self.events
        clock = time.perf_counter_ns
        get_ident = threading.get_ident
        name = op.name
        host = device_type == "cpu"
        sync = self.synchronize and not host

        def timed(*arrays, **attrs):
            t0 = clock()
            out = fn(*arrays, **attrs)
            if sync:
                dev = attrs.get("device") or _first_device(device_type)
                if dev is not None:
                    dev.backend.synchronize(dev)
            t1 = clock()
            events.append(Event(name, device_type,
                                tuple(tuple(getattr(a, "shape", ())) for a in arrays),
                                tuple(str(getattr(a, "dtype", type(a).__name__))
                                      for a in arrays), t0, t1, get_ident()))
            return out
        timed.__wrapped__ = fn
        timed.__name__ = getattr(fn, "__name__", name)
        return timed

    def start(self):
        with _lock:
            if _active:
                raise FailedPreconditionError(
                    "a profile is already running: stop it first (tf.profiler.experimental."
                    "stop()) -- profiles do not nest")
            for op in list(_reg.OPS.values()):
                for device_type, entry in list(op.kernels.items()):
                    fn = entry.fn
                    wrapped = self._wrap(op, device_type, fn)
                    if _reg.swap_kernel(op, device_type, fn, wrapped):
                        self._saved.append((op, device_type, wrapped, fn))
            _active.append(self)
            self._running = True
        return self

    def stop(self):
        with _lock:
            for op, device_type, wrapped, fn in reversed(self._saved):
                _reg.swap_kernel(op, device_type, wrapped, fn)
            self._saved.clear()
            if self in _active:
                _active.remove(self)
            self._running = False
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # --- results -----------------------------------------------------------------------
    def key_averages(self) -> KeyAverages:
        """Totals per (op, device), with the most frequent input signature."""
        rows: dict = {}
        sigs: dict = {}
        for e in self.events:
            key = (e.name, e.device)
            r = rows.get(key)
            if r is None:
                r = rows[key] = _Row(e.name, e.device, "")
            r.calls += 1
            r.total_us += e.duration_us
            s = sigs.setdefault(key, {})
            sig = e.inputs()
            s[sig] = s.get(sig, 0) + 1
        for key, r in rows.items():
            r.inputs = max(sigs[key].items(), key=lambda kv: kv[1])[0]
        return KeyAverages(rows.values())

    def export_chrome_trace(self, path) -> str:
        """Write the events as Chrome trace JSON (Perfetto, chrome://tracing); returns
        the path."""
        t0 = min((e.start_ns for e in self.events), default=0)
        trace = {"traceEvents": [
            {"name": e.name, "cat": e.device, "ph": "X", "pid": os.getpid(),
             "tid": e.thread, "ts": (e.start_ns - t0) / 1e3, "dur": e.duration_us,
             "args": {"device": e.device, "inputs": e.inputs()}}
            for e in self.events], "displayTimeUnit": "ms"}
        path = os.fspath(path)
        # a new temp file of a random name (O_EXCL: never a file or a symlink planted at
        # a predictable name), renamed over path once complete
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".",
                                   dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(trace, f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return path


def _first_device(device_type):
    try:
        return _devs.get_device(f"{device_type}:0")
    except Exception:       # noqa: BLE001 - no such device: nothing to wait for
        return None


def profile(synchronize=True) -> Profile:
    """A context manager that profiles the ops run inside it (see the module doc)."""
    return Profile(synchronize=synchronize)


def _start(logdir=None, options=None):
    p = Profile()
    p._logdir = logdir
    return p.start()


def _stop():
    if not _active:
        raise FailedPreconditionError("no profile is running: tf.profiler.experimental."
                                      "start() first")
    p = _active[-1].stop()
    logdir = getattr(p, "_logdir", None)
    if logdir:
        os.makedirs(logdir, exist_ok=True)
        p.export_chrome_trace(os.path.join(logdir, f"trace-{os.getpid()}.json"))
    return p


#: ``tf.profiler.experimental.start(logdir)`` / ``stop()``, as in TensorFlow
experimental = types.SimpleNamespace(start=_start, stop=_stop)
