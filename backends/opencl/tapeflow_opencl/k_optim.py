"""Fused optimizer updates (issue 34): one generated OpenCL C kernel per optimizer.

Each op of :mod:`tapeflow.ops.optim` (``ApplyAdam``...) is one elementwise kernel that
reads the variable, its slots and the gradient once and writes the new variable and
slots: one launch per variable and step instead of about ten. The formulas and their
order are those of the ``cpu`` kernels (:class:`tapeflow.kernels.optim.OptimKernels`),
with ``FP_CONTRACT OFF`` (no fused multiply-add the NumPy update does not do); the
result agrees within float rounding (the device's ``sqrt`` and division may differ in
the last bit). The step's coefficients (learning rate, Adam's ``lr_t``) are 0-d device
arrays read by every work item; the fixed hyperparameters are kernel arguments, so a
new ``beta1`` compiles nothing. With ``inplace=True`` (contiguous inputs) the outputs
are the inputs' buffers; otherwise new arrays.
"""

from __future__ import annotations

import numpy as np

from . import runtime as rt
from .runtime import FLOATS

#: op -> (array inputs, scalar inputs, kernel constants from attrs, body); the outputs
#: are the array inputs but ``grad``, in order. Bodies update the locals of the inputs.
_OPS = {
    "ApplyGradientDescent": (("var", "grad"), ("lr",), lambda a: {},
                             lambda a: "var = var - grad * lr;"),
    "ApplyMomentum": (("var", "accum", "grad"), ("lr", "mom_lr"),
                      lambda a: {"momentum": a["momentum"]},
                      lambda a: "accum = accum * momentum + grad; var = var - " + (
                          "(grad * lr + accum * mom_lr);" if a["use_nesterov"]
                          else "accum * lr;")),
    "ApplyAdam": (("var", "m", "v", "grad"), ("lr_t",),
                  lambda a: {"c1": 1 - a["beta1"], "c2": 1 - a["beta2"],
                             "epsilon": a["epsilon"]},
                  lambda a: "m = m + (grad - m) * c1; v = v + (grad * grad - v) * c2; "
                            "var = var - m * lr_t / (sqrt(v) + epsilon);"),
    "ApplyRMSProp": (("var", "ms", "mom", "grad"), ("lr",),
                     lambda a: {"c": 1 - a["rho"], "momentum": a["momentum"],
                                "epsilon": a["epsilon"]},
                     lambda a: "ms = ms + (grad * grad - ms) * c; "
                               "T step = grad * lr / sqrt(ms + epsilon); "
                               + _mom_step(a)),
    "ApplyCenteredRMSProp": (("var", "mg", "ms", "mom", "grad"), ("lr",),
                             lambda a: {"c": 1 - a["rho"], "momentum": a["momentum"],
                                        "epsilon": a["epsilon"]},
                             lambda a: "ms = ms + (grad * grad - ms) * c; "
                                       "mg = mg + (grad - mg) * c; "
                                       "T step = grad * lr / sqrt(ms - mg * mg + epsilon); "
                                       + _mom_step(a)),
    "ApplyKerasRMSProp": (("var", "ms", "grad"), ("lr",),
                          lambda a: {"c": 1 - a["rho"], "epsilon": a["epsilon"]},
                          lambda a: "ms = ms + (grad * grad - ms) * c; "
                                    "var = var - grad * lr / (sqrt(ms) + epsilon);"),
    "ApplyKerasCenteredRMSProp": (("var", "ms", "mg", "grad"), ("lr",),
                                  lambda a: {"c": 1 - a["rho"], "epsilon": a["epsilon"]},
                                  lambda a: "ms = ms + (grad * grad - ms) * c; "
                                            "mg = mg + (grad - mg) * c; var = var - grad * lr"
                                            " / (sqrt(ms - mg * mg) + epsilon);"),
    "ApplyAdagrad": (("var", "accum", "grad"), ("lr",), lambda a: {},
                     lambda a: "accum = accum + grad * grad; "
                               "var = var - grad * lr / sqrt(accum);"),
}


def _mom_step(attrs):
    """RMSProp's momentum update (momentum 0: the step alone, as the ``cpu`` kernel)."""
    if attrs["momentum"]:
        return "mom = mom * momentum + step; var = var - mom;"
    return "mom = step; var = var - mom;"


def _source(T, arrays, scalars, consts, body):
    outs = [a for a in arrays if a != "grad"]
    params = ["long n"]
    params += [f"__global const {T}* {a}_in, long {a}_o" for a in arrays]
    params += [f"__global const {T}* {s}_in, long {s}_o" for s in scalars]
    params += [f"{T} {c}" for c in consts]
    params += [f"__global {T}* {a}_out, long {a}_oo" for a in outs]
    lines = ["#pragma OPENCL FP_CONTRACT OFF", f"typedef {T} T;",
             "__kernel void optim_k(" + ", ".join(params) + ") {",
             "  long i = get_global_id(0); if (i >= n) return;"]
    lines += [f"  T {a} = {a}_in[{a}_o + i];" for a in arrays]
    lines += [f"  const T {s} = {s}_in[{s}_o];" for s in scalars]
    lines += ["  " + body]
    lines += [f"  {a}_out[{a}_oo + i] = {a};" for a in outs]
    lines.append("}")
    return "\n".join(lines) + "\n"


class OptimKernels:
    """The fused optimizer updates on OpenCL (one generated kernel per op)."""

    def update(self, op_name, *inputs, inplace=False, **attrs):
        """Run op ``op_name``'s kernel on ``inputs`` (the arrays, then the 0-d
        coefficients); returns the new variable and slots (one array for
        ``ApplyGradientDescent``)."""
        arrays, scalars, consts_of, body_of = _OPS[op_name]
        arr = [rt.contiguous(a) for a in inputs[:len(arrays)]]
        sc = list(inputs[len(arrays):])
        var = arr[0]
        dev = rt.device_of(var)
        outs_in = [a for name, a in zip(arrays, arr) if name != "grad"]
        if inplace and all(o is i for o, i in zip(outs_in, inputs)):
            outs = outs_in
        else:
            outs = [rt.empty(dev, var.shape, var.dtype) for _ in outs_in]
        n = var.size
        if n:
            consts = consts_of(attrs)
            T = rt.CTYPES[var.dtype]
            src = _source(T, arrays, scalars, consts, body_of(attrs))
            ft = var.dtype.type
            sd = ([np.int64] + [None, np.int64] * (len(arrays) + len(scalars))
                  + [ft] * len(consts) + [None, np.int64] * len(outs))
            args = [n]
            for a in arr + sc:
                args += [rt.buf(dev, a), a.offset // a.dtype.itemsize]
            args += [ft(v) for v in consts.values()]
            for o in outs:
                args += [rt.buf(dev, o), o.offset // o.dtype.itemsize]
            rt.launch(dev, rt.kernel(dev, src, "optim_k", sd), (n,), None, *args)
        return outs[0] if len(outs) == 1 else tuple(outs)


def build():
    k = OptimKernels()
    return {name: {"fn": rt.bind(k.update, name.lower(), name), "dtypes": FLOATS}
            for name in _OPS}
