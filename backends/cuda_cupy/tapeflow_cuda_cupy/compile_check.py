"""Compile every CUDA source of this backend with NVRTC — no GPU needed.

NVRTC is a compiler library: it runs on any machine with ``libnvrtc`` (pip package
``nvidia-cuda-nvrtc``), CuPy's headers (the ``cupy`` wheel) and the CUDA runtime
headers (``nvidia-cuda-runtime``: ``cuda_fp16.h``). This module rebuilds the source
CuPy generates for each fused kernel (typedefs, CuPy's headers, the preamble, the
per-element references) for every dtype the kernel is used with, and the raw
kernels' sources as they are, and compiles them to PTX for ``compute_90``. It catches
what would otherwise surface only at the first call on a GPU: syntax errors, missing
overloads (``float16`` arithmetic, ``expm1`` on ``float``), bad casts.

    python -m tapeflow_cuda_cupy.compile_check      # exit status 1 on a failure

``CUDA_INCLUDE_DIR`` names the directory holding ``cuda_fp16.h`` when it cannot be
found from the ``nvidia-cuda-runtime`` package or ``CUDA_PATH``.
"""

from __future__ import annotations

import glob
import os
import sys

from . import k_cuda, philox

_CTYPE = {"float16": "float16", "float32": "float", "float64": "double", "int8": "signed char",
          "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
          "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
          "bool": "bool"}
_FLOATS = ("float16", "float32", "float64")

#: the dtypes each fused kernel is launched with (float16 rows/L2 go through float32)
ELEMENTWISE_DTYPES = {name: _FLOATS for name in k_cuda.ELEMENTWISE}
ELEMENTWISE_DTYPES["squared_difference"] = _FLOATS + ("int8", "int16", "int32", "int64",
                                                      "uint8")
REDUCTION_DTYPES = {"count_out_of_range": ("int8", "int16", "int32", "int64", "uint8"),
                    "l2_loss": ("float32", "float64")}


class Unavailable(Exception):
    """NVRTC or a header is missing: the check cannot run here."""


def _cupy_include():
    try:
        import cupy
    except Exception as e:
        raise Unavailable(f"CuPy is not importable ({type(e).__name__}: {e})") from None
    d = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
    if not os.path.isdir(d):
        raise Unavailable(f"CuPy's headers are missing ({d})")
    return d


def _cuda_include():
    cands = [os.environ.get("CUDA_INCLUDE_DIR", "")]
    for base in sys.path:
        cands += glob.glob(os.path.join(base, "nvidia", "cu1*", "include"))
        cands += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "include"))
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            cands.append(os.path.join(os.environ[env], "include"))
    cands.append("/usr/local/cuda/include")
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "cuda_fp16.h")):
            return c
    raise Unavailable("cuda_fp16.h not found (pip install nvidia-cuda-runtime, or set "
                      "CUDA_INCLUDE_DIR)")


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as e:
        raise Unavailable(f"NVRTC is not loadable ({type(e).__name__}: {e}); pip install "
                          "nvidia-cuda-nvrtc (and put its lib/ on LD_LIBRARY_PATH)") from None
    return nvrtc


def options(cupy_include, cuda_include, arch="compute_90"):
    """The options CuPy compiles its kernels with (``cupy/_core/core.pyx``,
    ``cupy/cuda/compiler.py``)."""
    cccl = os.path.join(cupy_include, "cupy", "_cccl")
    return ["--std=c++17", f"-I{cccl}/cub", f"-I{cccl}/thrust", f"-I{cccl}/libcudacxx",
            f"-I{cupy_include}", f"-I{cuda_include}", f"--gpu-architecture={arch}",
            "--device-as-default-execution-space", "-ftz=true"]


_CUPY_HEADER = ("#include <cupy/complex.cuh>\n#include <cupy/carray.cuh>\n"
                "#include <cupy/atomics.cuh>\n#include <cupy/math_constants.h>\n")


def _decl(dtype):
    """CuPy's type declaration for a dtype (``_scalar.pyx``): float16 needs its header."""
    return '#include "cupy/float16.cuh"\n\n' if dtype == "float16" else ""


def _params(spec):
    out = []
    for p in spec.split(","):
        typ, name = p.split()
        out.append((typ, name))
    return out


def _ctype(typ, t):
    return _CTYPE[typ] if typ in _CTYPE else ("long long" if typ == "int64" else
                                              "double" if typ == "float64" else t)


def _in_args(ins):
    """The kernel arguments and element references of the input parameters ``ins`` as
    CuPy writes them (``T`` inputs are arrays read at ``_i``, the others scalars)."""
    args, refs = [], []
    for typ, n in _params(ins):
        if typ == "T":
            args.append(f"const T* _raw_{n}")
            refs.append(f"const T &{n} = _raw_{n}[_i];")
        else:
            args.append(f"const {_ctype(typ, 'T')} {n}")
    return args, refs


def elementwise_source(name, dtype):
    """What CuPy generates for ``ELEMENTWISE[name]`` with ``T`` = ``dtype`` (one element
    per thread instead of CuPy's indexer; the operation and its references as CuPy
    writes them)."""
    ins, outs, body = k_cuda.ELEMENTWISE[name]
    args, refs = _in_args(ins)
    for _typ, n in _params(outs):
        args.append(f"T* _raw_{n}")
        refs.append(f"T &{n} = _raw_{n}[_i];")
    return (f"{_CUPY_HEADER}{_decl(dtype)}typedef {_CTYPE[dtype]} T;\n"
            f"{k_cuda.ELEMENTWISE_PREAMBLE}\n"
            f'extern "C" __global__ void tapeflow_{name}({", ".join(args)}) {{\n'
            f"  const int _i = blockIdx.x * blockDim.x + threadIdx.x;\n  "
            + "\n  ".join(refs) + f"\n  {body};\n}}\n")


def reduction_source(name, dtype):
    """What CuPy generates for ``REDUCTIONS[name]``: map, reduce and post-map
    expressions with CuPy's names (``a``, ``b``, ``_type_reduce``)."""
    ins, outs, mapx, redx, post, ident = k_cuda.REDUCTIONS[name]
    (otyp, oname), = _params(outs)
    out_c = "T" if otyp == "T" else _ctype(otyp, "T")
    args, refs = _in_args(ins)
    args.append(f"{out_c}* _raw_{oname}")
    return (f"{_CUPY_HEADER}{_decl(dtype)}typedef {_CTYPE[dtype]} T;\n"
            f"typedef {out_c} _type_reduce;\n"
            f'extern "C" __global__ void tapeflow_{name}({", ".join(args)}) {{\n'
            f"  const int _i = threadIdx.x;\n  " + "\n  ".join(refs) + "\n"
            f"  _type_reduce a = _type_reduce({ident});\n"
            f"  {{ _type_reduce b = _type_reduce({mapx}); a = {redx}; }}\n"
            f"  {out_c} &{oname} = _raw_{oname}[0];\n  {post};\n}}\n")


def sources():
    """``[(label, source, uses_cupy_headers)]`` of every CUDA source of the backend."""
    out = [("philox", philox._SOURCE, False)]
    for dt in k_cuda._ROW_TYPES:
        for lt, lname in k_cuda._LABEL_TYPES.items():
            src = k_cuda._ROWS_TEMPLATE.format(L=lname, **k_cuda._ROW_TYPES[dt])
            out.append((f"rows[{dt.name},{lt.name}]", src, False))
    for name, dts in ELEMENTWISE_DTYPES.items():
        for dt in dts:
            out.append((f"elementwise {name}[{dt}]", elementwise_source(name, dt), True))
    for name, dts in REDUCTION_DTYPES.items():
        for dt in dts:
            out.append((f"reduction {name}[{dt}]", reduction_source(name, dt), True))
    return out


def compile_all(arch="compute_90"):
    """``[(label, ok, log)]`` for every source; raises :class:`Unavailable` when NVRTC or
    the headers are missing."""
    nvrtc = _nvrtc()
    opts = options(_cupy_include(), _cuda_include(), arch)
    results = []
    for label, src, _ in sources():
        prog = nvrtc.createProgram(src, "tapeflow_check.cu", [], [])
        try:
            nvrtc.compileProgram(prog, opts)
            ok, log = True, nvrtc.getProgramLog(prog)
        except Exception as e:
            ok, log = False, f"{e}\n{nvrtc.getProgramLog(prog)}"
        finally:
            nvrtc.destroyProgram(prog)
        results.append((label, ok, log))
    return results


def main(argv=None):
    try:
        results = compile_all()
    except Unavailable as e:
        print(f"compile check unavailable: {e}")
        return 2
    bad = [r for r in results if not r[1]]
    for label, ok, log in results:
        print(f"{'ok  ' if ok else 'FAIL'} {label}")
        if not ok or (log and "warning" in log):
            print("     " + log.strip().replace("\n", "\n     "))
    print(f"{len(results) - len(bad)} compiled, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
