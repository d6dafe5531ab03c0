"""Numerical gradient checking (HIPS autograd's ``check_grads`` for tapeflow).

:func:`check_grads` compares the reverse-mode gradients that ``tf.GradientTape``
computes with central finite differences, in float64, along random directions:
for a random cotangent ``u`` of the outputs and a random direction ``v`` of one
argument ``x``,

    <vjp(u), v>   (the tape)    must equal    <u, (f(x + eps v) - f(x - eps v)) / 2 eps>

That costs one backward pass and two forward passes per argument, whatever the
sizes, and it works for any number of outputs of any shape. ``order=2`` checks
the backward pass itself the same way: ``g(x, u) = vjp_f(x)(u)`` is a function
made of tapeflow ops, so it is checked with nested tapes (w.r.t. ``x`` and ``u``);
``order=3`` goes one level further, and so on.

When a check fails, the message names the argument, the order, the directional
values, and (for arguments of up to ``_ELEMENTWISE_MAX`` elements) the full
gradient from the tape next to the elementwise finite-difference one, with the
largest absolute and relative errors and where they are.

>>> import tapeflow as tf
>>> from tapeflow.testing import check_grads
>>> import numpy as np
>>> check_grads(lambda x, y: tf.multiply(x, y), (np.array([1.0, 2.0]), np.array([[3.0], [4.0]])))
>>> check_grads(lambda x: x * x * x, (2.0,), argnums=(0,), order=3)
"""

from __future__ import annotations

import numpy as np

from .. import nest

__all__ = ["check_grads", "check_jvp", "assert_allclose"]

#: elementwise finite differences (for the failure message) up to this many elements
_ELEMENTWISE_MAX = 1024
_DEFAULT_EPS = 1e-6


def _tf():
    import tapeflow
    return tapeflow


def _fname(f):
    name = getattr(f, "__name__", None) or getattr(f, "name", None)
    return name if isinstance(name, str) else type(f).__name__


def _is_float_np(a):
    return isinstance(a, (np.ndarray, np.generic)) and np.asarray(a).dtype.kind == "f"


def _flat_outputs(out):
    return [o for o in nest.flatten(out) if o is not None]


def _float_outputs(out, where):
    tf = _tf()
    res = []
    for o in _flat_outputs(out):
        if isinstance(o, tf.Variable):
            o = o.read_value()
        if not isinstance(o, tf.Tensor):
            raise AssertionError(f"check_grads: {where} returned a {type(o).__name__} ({o!r:.80}); "
                                 "expected Tensors (or a list/tuple/dict of them)")
        if o.dtype.is_floating:
            res.append(o)
    return res


def _to_host64(t):
    return np.asarray(t.numpy(), dtype=np.float64)


def _prepare_args(args, argnums, dev):
    """Float data -> float64 tensors on ``dev``; other data -> tensors on ``dev``;
    Python values pass unchanged unless they are differentiated."""
    tf = _tf()
    out = []
    for i, a in enumerate(args):
        if isinstance(a, tf.Variable):
            a = a.read_value()
        if isinstance(a, tf.Tensor):
            if a.dtype.is_floating and a.dtype is not tf.float64:
                a = tf.cast(a, tf.float64)
            if dev is not None and a._device is not dev:
                a = a.to(dev)
        elif isinstance(a, (np.ndarray, np.generic)):
            arr = np.asarray(a)
            if arr.dtype.kind == "f":
                arr = arr.astype(np.float64)
            a = tf.constant(arr, device=dev)
        elif argnums is not None and i in argnums:
            if isinstance(a, (bool, str)) or not isinstance(a, (int, float, list, tuple)):
                raise TypeError(f"check_grads: argument {i} ({type(a).__name__}) cannot be "
                                "differentiated; pass a float array, Tensor or Python float")
            a = tf.constant(np.asarray(a, dtype=np.float64), device=dev)
        out.append(a)
    return out


def _fmt(a, limit=600):
    s = np.array2string(np.asarray(a), precision=6, threshold=64, edgeitems=3, max_line_width=100)
    s = s.replace("\n", "\n      ")
    return s if len(s) <= limit else s[:limit] + " ..."


def _vjp(f, args, argnums, cot, rng, where):
    """Forward ``f`` under a tape, then backprop ``cot`` (host arrays or tensors;
    ``None``: draw random ones). Returns (float outputs, cotangent tensors, grads)."""
    tf = _tf()
    with tf.GradientTape() as tape:
        for i in argnums:
            tape.watch(args[i])
        outs = _float_outputs(f(*args), where)
    if cot is None:
        cot = [tf.constant(rng.standard_normal(tuple(o.shape)).astype(o.dtype.np),
                           device=o._device) for o in outs]
    if len(cot) != len(outs):
        raise AssertionError(f"check_grads: {where} returned {len(outs)} float outputs; "
                             f"expected {len(cot)}")
    if outs:
        grads = tape.gradient(outs, [args[i] for i in argnums], output_gradients=list(cot))
    else:
        grads = [None] * len(argnums)
    return outs, cot, grads


def _eval_outputs(f, args, where):
    return [_to_host64(o) for o in _float_outputs(f(*args), where)]


def _with_arg(args, i, value, dev):
    tf = _tf()
    a = list(args)
    a[i] = tf.constant(value, device=dev)
    return a


def _elementwise(f, args, i, u_host, eps, dev, where):
    """d <u, f> / d args[i], one element at a time (used only to explain a failure)."""
    x = _to_host64(args[i])
    g = np.zeros(x.shape, dtype=np.float64)
    flat = x.reshape(-1)
    for k in range(flat.size):
        xp = flat.copy()
        xm = flat.copy()
        xp[k] += eps
        xm[k] -= eps
        fp = _eval_outputs(f, _with_arg(args, i, xp.reshape(x.shape), dev), where)
        fm = _eval_outputs(f, _with_arg(args, i, xm.reshape(x.shape), dev), where)
        g.reshape(-1)[k] = sum(np.sum(uu * (a - b)) for uu, a, b in zip(u_host, fp, fm)) / (2 * eps)
    return g


def _compare_arrays(ana, num):
    diff = np.abs(ana - num)
    rel = diff / np.maximum(np.abs(num), np.finfo(np.float64).tiny)
    if diff.size == 0:
        return ""
    ia = np.unravel_index(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)), diff.shape)
    ir = np.unravel_index(np.nanargmax(np.where(np.isnan(rel), np.inf, rel)), rel.shape)
    return (f"  elementwise: max abs err {diff[ia]:.3g} at index {tuple(int(j) for j in ia)}, "
            f"max rel err {rel[ir]:.3g} at index {tuple(int(j) for j in ir)}\n"
            f"  d<u, f>/dx from the tape:       {_fmt(ana)}\n"
            f"  d<u, f>/dx, finite differences: {_fmt(num)}\n")


def _check_level(f, args, argnums, labels, order, level, eps, rtol, atol, rng, dev, fname):
    tf = _tf()
    where = fname if level == 1 else f"the order-{level - 1} gradient of {fname}"
    try:
        outs, cot, grads = _vjp(f, args, argnums, None, rng, where)
    except AssertionError:
        raise
    except Exception as e:
        e.add_note(f"check_grads: raised while computing the order-{level} gradient of "
                   f"{fname} with GradientTape")
        raise
    if not outs:
        raise AssertionError(f"check_grads: {where} has no float output: there is no gradient "
                             "to check (is the op differentiable?)")
    u_host = [_to_host64(c) for c in cot]
    for j, i in enumerate(argnums):
        x = args[i]
        g = grads[j]
        what = (f"order-{level} gradient of {fname} w.r.t. {labels[i]} "
                f"(shape {tuple(x.shape)}, {x.dtype.name})")
        if g is not None:
            if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype:
                raise AssertionError(f"check_grads: the {what}: the tape returned a gradient of "
                                     f"shape {tuple(g.shape)} and dtype {g.dtype.name}")
            if dev is not None and g._device is not dev:
                raise AssertionError(f"check_grads: the {what}: the tape returned a gradient on "
                                     f"{g.device}, expected {dev}")
            g_host = _to_host64(g)
        else:
            g_host = np.zeros(tuple(x.shape), dtype=np.float64)
        x_host = _to_host64(x)
        v = rng.standard_normal(x_host.shape)
        fp = _eval_outputs(f, _with_arg(args, i, x_host + eps * v, dev), where)
        fm = _eval_outputs(f, _with_arg(args, i, x_host - eps * v, dev), where)
        terms = [uu * (a - b) / (2 * eps) for uu, a, b in zip(u_host, fp, fm)]
        num = float(sum(np.sum(t) for t in terms))
        ana_terms = g_host * v
        ana = float(np.sum(ana_terms))
        # The inner products may cancel: allow for it up to a factor 1000 of the
        # sum of absolute terms, plus the rounding noise of the differences.
        l1 = float(sum(np.sum(np.abs(t)) for t in terms)) + float(np.sum(np.abs(ana_terms)))
        scale = max(abs(ana), abs(num), 1e-3 * l1)
        noise = 8 * np.finfo(np.float64).eps / eps * float(
            sum(np.sum(np.abs(uu) * (np.abs(a) + np.abs(b))) for uu, a, b in zip(u_host, fp, fm)))
        err = abs(ana - num)
        if np.isfinite(ana) and np.isfinite(num) and err <= atol + rtol * scale + noise:
            continue
        msg = (f"check_grads: the {what} disagrees with central finite differences "
               f"(float64, eps={eps:g}).\n"
               f"  along a random direction v and cotangent u: <tape gradient, v> = {ana:.10g}, "
               f"finite differences = {num:.10g}\n"
               f"  abs err {err:.3g}, rel err {err / max(scale, 1e-300):.3g} "
               f"(rtol={rtol:g}, atol={atol:g}, rounding noise {noise:.2g})\n")
        if g is None:
            msg += "  the tape returned None (the output does not depend on it)\n"
        if x_host.size <= _ELEMENTWISE_MAX:
            try:
                num_full = _elementwise(f, args, i, u_host, eps, dev, where)
                msg += _compare_arrays(g_host, num_full)
            except Exception as e:  # the explanation must not hide the failure
                msg += f"  (elementwise comparison failed: {type(e).__name__}: {e})\n"
        msg += f"  point: {labels[i]} = {_fmt(x_host)}"
        raise AssertionError(msg)
    if order > level:
        n = len(args)
        n_out = len(cot)

        def vjp_f(*a):
            _, _, gs = _vjp(f, list(a[:n]), argnums, list(a[n:]), rng, where)
            return [tf.zeros_like(a[i]) if gg is None else gg for i, gg in zip(argnums, gs)]

        vjp_f.__name__ = f"vjp({_fname(f)})"
        labels2 = list(labels) + [f"the cotangent of output {k} (order-{level} backward input)"
                                  for k in range(n_out)]
        argnums2 = tuple(argnums) + tuple(range(n, n + n_out))
        _check_level(vjp_f, list(args) + list(cot), argnums2, labels2, order, level + 1, eps,
                     rtol, atol, rng, dev, fname)


def check_grads(f, args, order=2, eps=None, rtol=1e-5, atol=1e-6, device=None, argnums=None,
                seed=0):
    """Check ``f``'s tape gradients against central finite differences, to ``order``.

    Args:
        f: ``f(*args)`` built from tapeflow ops, returning a Tensor or a (nested)
            list/tuple/dict of Tensors; non-float outputs are ignored.
        args: the point. Float NumPy arrays and float Tensors become float64 tensors
            (on ``device``); other arrays become tensors of their own dtype; anything
            else (axes, shapes, Python scalars) is passed unchanged.
        order: 1 checks the gradient; 2 also the gradient of the gradient (nested
            tapes, w.r.t. the arguments and the output cotangent); and so on.
        eps: finite-difference step (default 1e-6, in float64).
        rtol, atol: tolerances for the directional derivatives.
        device: run everything on this device (default: the current placement).
        argnums: which arguments to differentiate (default: every float array or
            float Tensor argument; a Python float is differentiated only if listed).
        seed: seed of the random directions and cotangents.

    Raises:
        AssertionError naming the argument, the order, the tape's and the
        numerical values and the errors.
    """
    tf = _tf()
    eps = _DEFAULT_EPS if eps is None else float(eps)
    if order < 1:
        return
    dev = None if device is None else tf.runtime.devices.get_device(device)
    rng = np.random.default_rng(seed)
    ctx = tf.device(dev) if dev is not None else _NullCtx()
    with ctx:
        a = _prepare_args(tuple(args), None if argnums is None else tuple(argnums), dev)
        if argnums is None:
            argnums = tuple(i for i, x in enumerate(a)
                            if isinstance(x, tf.Tensor) and x.dtype.is_floating)
        else:
            argnums = tuple(int(i) % len(a) for i in argnums)
            for i in argnums:
                if not (isinstance(a[i], tf.Tensor) and a[i].dtype.is_floating):
                    raise TypeError(f"check_grads: argument {i} is not a float array/Tensor "
                                    f"({type(args[i]).__name__}); it cannot be differentiated")
        if not argnums:
            return
        labels = [f"argument {i}" for i in range(len(a))]
        _check_level(f, a, argnums, labels, order, 1, eps, rtol, atol, rng, dev, _fname(f))


def check_jvp(f, args, eps=None, rtol=1e-5, atol=1e-6, device=None, argnums=None, seed=0):
    """Check ``f``'s forward-mode derivatives (``tf.autodiff.ForwardAccumulator``) at
    ``args`` (as :func:`check_grads` takes them) along random tangents: against central
    finite differences of every float output, and against reverse mode
    (``<J v, w> == <v, J^T w>`` for a random cotangent ``w``).

    >>> import tapeflow as tf
    >>> check_jvp(lambda x: tf.sin(x) * x, [np.array([0.5, 1.0])])
    """
    tf = _tf()
    eps = _DEFAULT_EPS if eps is None else float(eps)
    dev = None if device is None else tf.runtime.devices.get_device(device)
    rng = np.random.default_rng(seed)
    where = _fname(f)
    with tf.device(dev) if dev is not None else _NullCtx():
        a = _prepare_args(tuple(args), None if argnums is None else tuple(argnums), dev)
        if argnums is None:
            argnums = tuple(i for i, x in enumerate(a)
                            if isinstance(x, tf.Tensor) and x.dtype.is_floating)
        argnums = tuple(int(i) % len(a) for i in argnums)
        if not argnums:
            return
        vs = [rng.standard_normal(tuple(a[i].shape)) for i in argnums]
        tangents = [tf.constant(v, dtype=a[i].dtype, device=dev) for i, v in zip(argnums, vs)]
        with tf.autodiff.ForwardAccumulator([a[i] for i in argnums], tangents) as acc:
            outs = _float_outputs(f(*a), where)
        if not outs:
            raise AssertionError(f"check_jvp: {where} has no float output")
        jv = [_to_host64(t) for t in acc.jvp(outs, unconnected_gradients="zero")]
        plus, minus = list(a), list(a)
        for i, v in zip(argnums, vs):
            x = _to_host64(a[i])
            plus[i] = tf.constant(x + eps * v, device=dev)
            minus[i] = tf.constant(x - eps * v, device=dev)
        fp, fm = _eval_outputs(f, plus, where), _eval_outputs(f, minus, where)
        for k, (t, p, m) in enumerate(zip(jv, fp, fm)):
            num = (p - m) / (2 * eps)
            noise = 8 * np.finfo(np.float64).eps / eps * (np.abs(p) + np.abs(m))
            bad = ~(np.abs(t - num) <= atol + rtol * np.maximum(np.abs(num), np.abs(t)) + noise)
            if t.shape != num.shape or np.any(bad & np.isfinite(num)):
                raise AssertionError(
                    f"check_jvp: the forward-mode derivative of output {k} of {where} differs "
                    f"from finite differences:\n  jvp:       {t.ravel()[:8]}\n  numerical: "
                    f"{num.ravel()[:8]}")
        _, cot, grads = _vjp(f, a, argnums, None, rng, where)
        lhs = sum(float(np.sum(t * _to_host64(c))) for t, c in zip(jv, cot))
        rhs = sum(float(np.sum((_to_host64(g) if g is not None else 0.0) * v))
                  for g, v in zip(grads, vs))
        scale = max(abs(lhs), abs(rhs), 1.0)
        if not abs(lhs - rhs) <= 1e-7 * scale + atol:
            raise AssertionError(f"check_jvp: forward and reverse mode disagree for {where}: "
                                 f"<J v, w> = {lhs!r} but <v, J^T w> = {rhs!r}")


class _NullCtx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def assert_allclose(actual, desired, rtol=1e-6, atol=0.0, equal_nan=True, err_msg="",
                    check_dtype=False, check_shape=True):
    """``numpy.testing.assert_allclose`` that accepts Tensors, and also checks the
    shape (and with ``check_dtype`` the dtype) exactly, with a tapeflow-style message.

    >>> import tapeflow as tf
    >>> assert_allclose(tf.constant([1.0, 2.0]), [1.0, 2.0])
    """
    a = np.asarray(actual.numpy() if hasattr(actual, "numpy") else actual)
    d = np.asarray(desired.numpy() if hasattr(desired, "numpy") else desired)
    pre = f"{err_msg}: " if err_msg else ""
    if check_shape and a.shape != d.shape:
        raise AssertionError(f"{pre}shape {a.shape} != expected {d.shape}")
    if check_dtype and a.dtype != d.dtype:
        raise AssertionError(f"{pre}dtype {a.dtype} != expected {d.dtype}")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, equal_nan=equal_nan, err_msg=err_msg)
