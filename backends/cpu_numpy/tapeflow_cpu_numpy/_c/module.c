/* tapeflow_cpu_numpy._cpukernels: the Python module (cpukernels.h says what is where).
 *
 * Every entry point takes its arrays through the buffer protocol (C contiguous,
 * float32, aligned; the result array is allocated by the caller, native.py) and checks
 * every size, shape and overlap here, before the drivers in ops.c touch memory; the
 * compute runs with the GIL released. A refusal is a ValueError (native.py checks the
 * same things first and raises tapeflow's errors: these are the last line), running
 * out of memory a MemoryError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cpukernels.h"

static const char *const ISA_NAMES[ISA_COUNT] = {"portable", "avx2", "avx512"};
static int g_isa = ISA_PORTABLE;
static int g_threads = 1;

/* the most any stride, dilation or pad may be (keeps every index computation far from
 * overflow) */
#define GEOM_LIMIT ((Py_ssize_t)1 << 24)

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static void release(Buf *b, int n)
{
    for (int i = 0; i < n; i++)
        if (b[i].held) {
            PyBuffer_Release(&b[i].view);
            b[i].held = 0;
        }
}

static int is_f32(const char *fmt)
{
    if (fmt == NULL)
        return 0;
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')
        fmt++;
    return fmt[0] == 'f' && fmt[1] == '\0';
}

/* obj as a C-contiguous, aligned float32 buffer of ndim dimensions, none of them 0 */
static int get_f32(PyObject *obj, Buf *b, int ndim, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous%s float32 array, got %.100s",
                     what, writable ? " writable" : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    b->held = 1;
    if (b->view.ndim != ndim || b->view.itemsize != 4 || !is_f32(b->view.format)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a %d-d float32 array (got %d-d, format %s)",
                     what, ndim, b->view.ndim, b->view.format ? b->view.format : "?");
        return -1;
    }
    if (((uintptr_t)b->view.buf) % sizeof(float) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: the array's data is not aligned to 4 bytes", what);
        return -1;
    }
    Py_ssize_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (b->view.shape[i] <= 0) {
            PyErr_Format(PyExc_ValueError, "%s: a dimension is 0 (nothing to compute)", what);
            return -1;
        }
        count *= b->view.shape[i];
    }
    if (count * 4 != b->view.len) {
        PyErr_Format(PyExc_ValueError, "%s: the buffer's length does not match its shape", what);
        return -1;
    }
    return 0;
}

static int overlaps(const Buf *a, const Buf *b)
{
    const char *a0 = a->view.buf, *b0 = b->view.buf;
    return a0 < b0 + b->view.len && b0 < a0 + a->view.len;
}

static int check_out_alone(const Buf *out, const Buf *ins, int n)
{
    for (int i = 0; i < n; i++)
        if (ins[i].held && overlaps(out, &ins[i])) {
            PyErr_SetString(PyExc_ValueError,
                            "the result array shares memory with an input (pass a fresh one)");
            return -1;
        }
    return 0;
}

static int check_range(Py_ssize_t v, Py_ssize_t lo, const char *what)
{
    if (v < lo || v > GEOM_LIMIT) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%zd, %zd] (this library's limit, "
                     "2**24: use the NumPy path beyond it), got %zd", what, lo, GEOM_LIMIT, v);
        return -1;
    }
    return 0;
}

/* the output extent of one spatial axis, or -1 (error set) */
static Py_ssize_t out_extent(Py_ssize_t size, Py_ssize_t k, Py_ssize_t s, Py_ssize_t d,
                             Py_ssize_t p0, Py_ssize_t p1, const char *axis)
{
    if (k > GEOM_LIMIT || size > GEOM_LIMIT) {
        PyErr_Format(PyExc_ValueError, "the input (%zd) or the filter (%zd) along %s is over "
                     "this library's limit of %zd (2**24): use the NumPy path", size, k, axis,
                     GEOM_LIMIT);
        return -1;
    }
    const Py_ssize_t eff = (k - 1) * d + 1, padded = size + p0 + p1;
    if (eff > padded) {
        PyErr_Format(PyExc_ValueError,
                     "the dilated filter (%zd along %s) is larger than the padded input (%zd)",
                     eff, axis, padded);
        return -1;
    }
    return (padded - eff) / s + 1;
}

/* strides, pads, dilations of conv2d and its filter gradient, checked */
static int parse_geom(Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pb,
                      Py_ssize_t pl, Py_ssize_t pr, Py_ssize_t dh, Py_ssize_t dw)
{
    if (check_range(sh, 1, "stride (height)") || check_range(sw, 1, "stride (width)")
        || check_range(dh, 1, "dilation (height)") || check_range(dw, 1, "dilation (width)")
        || check_range(pt, 0, "pad (top)") || check_range(pb, 0, "pad (bottom)")
        || check_range(pl, 0, "pad (left)") || check_range(pr, 0, "pad (right)"))
        return -1;
    return 0;
}

static PyObject *memory_error(void)
{
    return PyErr_NoMemory();
}

/* conv2d(x, w, bias or None, out, sh, sw, pt, pb, pl, pr, dh, dw, act, alpha) */
static PyObject *py_conv2d(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo_, *bo, *oo;
    Py_ssize_t sh, sw, pt, pb, pl, pr, dh, dw;
    int act;
    float alpha;
    if (!PyArg_ParseTuple(args, "OOOOnnnnnnnnif", &xo, &wo_, &bo, &oo, &sh, &sw, &pt, &pb,
                          &pl, &pr, &dh, &dw, &act, &alpha))
        return NULL;
    if (parse_geom(sh, sw, pt, pb, pl, pr, dh, dw))
        return NULL;
    if (act < ACT_NONE || act > ACT_ELU) {
        PyErr_Format(PyExc_ValueError, "unknown activation code %d", act);
        return NULL;
    }
    Buf b[4] = {{.held = 0}};
    if (get_f32(xo, &b[0], 4, 0, "conv2d input") || get_f32(wo_, &b[1], 4, 0, "conv2d filter")
        || (bo != Py_None && get_f32(bo, &b[2], 1, 0, "conv2d bias"))
        || get_f32(oo, &b[3], 4, 1, "conv2d output"))
        goto fail;
    const Py_ssize_t *xs = b[0].view.shape, *ws = b[1].view.shape, *os = b[3].view.shape;
    if (ws[2] != xs[3]) {
        PyErr_Format(PyExc_ValueError, "conv2d: the filter's input channels (%zd) are not the "
                     "input's channels (%zd)", ws[2], xs[3]);
        goto fail;
    }
    if (b[2].held && b[2].view.shape[0] != ws[3]) {
        PyErr_Format(PyExc_ValueError, "conv2d: the bias has %zd values for %zd output channels",
                     b[2].view.shape[0], ws[3]);
        goto fail;
    }
    const Py_ssize_t ho = out_extent(xs[1], ws[0], sh, dh, pt, pb, "height");
    if (ho < 0)
        goto fail;
    const Py_ssize_t wo = out_extent(xs[2], ws[1], sw, dw, pl, pr, "width");
    if (wo < 0)
        goto fail;
    if (os[0] != xs[0] || os[1] != ho || os[2] != wo || os[3] != ws[3]) {
        PyErr_Format(PyExc_ValueError, "conv2d: the output array is not (%zd, %zd, %zd, %zd)",
                     xs[0], ho, wo, ws[3]);
        goto fail;
    }
    if (check_out_alone(&b[3], b, 3))
        goto fail;
    ConvGeom g = {.n = xs[0], .h = xs[1], .w = xs[2], .c = xs[3], .kh = ws[0], .kw = ws[1],
                  .o = ws[3], .sh = sh, .sw = sw, .dh = dh, .dw = dw, .pt = pt, .pb = pb, .pl = pl, .pr = pr,
                  .ho = ho, .wo = wo};
    const int isa = g_isa, nt = g_threads;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfk_conv2d(&g, b[0].view.buf, b[1].view.buf, b[2].held ? b[2].view.buf : NULL,
                    b[3].view.buf, act, alpha, isa, nt);
    Py_END_ALLOW_THREADS
    release(b, 4);
    if (rc != 0)
        return memory_error();
    Py_RETURN_NONE;
fail:
    release(b, 4);
    return NULL;
}

/* conv2d_backprop_filter(x, dy, out, sh, sw, pt, pb, pl, pr, dh, dw) */
static PyObject *py_conv2d_filter(PyObject *self, PyObject *args)
{
    PyObject *xo, *dyo, *oo;
    Py_ssize_t sh, sw, pt, pb, pl, pr, dh, dw;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnnn", &xo, &dyo, &oo, &sh, &sw, &pt, &pb, &pl, &pr,
                          &dh, &dw))
        return NULL;
    if (parse_geom(sh, sw, pt, pb, pl, pr, dh, dw))
        return NULL;
    Buf b[3] = {{.held = 0}};
    if (get_f32(xo, &b[0], 4, 0, "conv2d_backprop_filter input")
        || get_f32(dyo, &b[1], 4, 0, "conv2d_backprop_filter dy")
        || get_f32(oo, &b[2], 4, 1, "conv2d_backprop_filter output"))
        goto fail;
    const Py_ssize_t *xs = b[0].view.shape, *ds = b[1].view.shape, *os = b[2].view.shape;
    if (os[2] != xs[3] || os[3] != ds[3]) {
        PyErr_Format(PyExc_ValueError, "conv2d_backprop_filter: the output array is not "
                     "(kh, kw, %zd, %zd)", xs[3], ds[3]);
        goto fail;
    }
    const Py_ssize_t ho = out_extent(xs[1], os[0], sh, dh, pt, pb, "height");
    if (ho < 0)
        goto fail;
    const Py_ssize_t wo = out_extent(xs[2], os[1], sw, dw, pl, pr, "width");
    if (wo < 0)
        goto fail;
    if (ds[0] != xs[0] || ds[1] != ho || ds[2] != wo) {
        PyErr_Format(PyExc_ValueError, "conv2d_backprop_filter: dy is not (%zd, %zd, %zd, %zd)",
                     xs[0], ho, wo, ds[3]);
        goto fail;
    }
    if (check_out_alone(&b[2], b, 2))
        goto fail;
    ConvGeom g = {.n = xs[0], .h = xs[1], .w = xs[2], .c = xs[3], .kh = os[0], .kw = os[1],
                  .o = ds[3], .sh = sh, .sw = sw, .dh = dh, .dw = dw, .pt = pt, .pb = pb, .pl = pl, .pr = pr,
                  .ho = ho, .wo = wo};
    const int isa = g_isa, nt = g_threads;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfk_conv2d_filter_grad(&g, b[0].view.buf, b[1].view.buf, b[2].view.buf, isa, nt);
    Py_END_ALLOW_THREADS
    release(b, 3);
    if (rc != 0)
        return memory_error();
    Py_RETURN_NONE;
fail:
    release(b, 3);
    return NULL;
}

/* matmul(a, b, out, transpose_a, transpose_b) */
static PyObject *py_matmul(PyObject *self, PyObject *args)
{
    PyObject *ao, *bo, *oo;
    int ta, tb;
    if (!PyArg_ParseTuple(args, "OOOpp", &ao, &bo, &oo, &ta, &tb))
        return NULL;
    Buf b[3] = {{.held = 0}};
    if (get_f32(ao, &b[0], 2, 0, "matmul a") || get_f32(bo, &b[1], 2, 0, "matmul b")
        || get_f32(oo, &b[2], 2, 1, "matmul output"))
        goto fail;
    const Py_ssize_t *as = b[0].view.shape, *bs = b[1].view.shape, *os = b[2].view.shape;
    const Py_ssize_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1];
    const Py_ssize_t kb = tb ? bs[1] : bs[0], n = tb ? bs[0] : bs[1];
    if (k != kb) {
        PyErr_Format(PyExc_ValueError, "matmul: the inner dimensions differ (%zd and %zd)", k, kb);
        goto fail;
    }
    if (os[0] != m || os[1] != n) {
        PyErr_Format(PyExc_ValueError, "matmul: the output array is not (%zd, %zd)", m, n);
        goto fail;
    }
    if (check_out_alone(&b[2], b, 2))
        goto fail;
    const int isa = g_isa, nt = g_threads;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfk_matmul(b[0].view.buf, b[1].view.buf, b[2].view.buf, m, n, k, ta, tb, isa, nt);
    Py_END_ALLOW_THREADS
    release(b, 3);
    if (rc != 0)
        return memory_error();
    Py_RETURN_NONE;
fail:
    release(b, 3);
    return NULL;
}

/* optim(kind, ndim, ins, outs, s0, s1, s2, s3, flag): a fused optimizer update
 * (optim.c); ins, outs: tuples of ndim-d float32 arrays of one size; outs[k] is ins[k]
 * (in place) or overlaps no input; outs are disjoint. Returns True, or False (nothing
 * done) when an array updated in place overlaps another input: the caller's NumPy path
 * then runs, whose op-by-op order decides what that means. */
static PyObject *py_optim(PyObject *self, PyObject *args)
{
    int kind, ndim, flag, n_in, n_out;
    PyObject *ins, *outs;
    float s[4];
    if (!PyArg_ParseTuple(args, "iiO!O!ffffp", &kind, &ndim, &PyTuple_Type, &ins, &PyTuple_Type,
                          &outs, &s[0], &s[1], &s[2], &s[3], &flag))
        return NULL;
    if (ndim < 0 || ndim > 64) {
        PyErr_Format(PyExc_ValueError, "optim: bad number of dimensions %d", ndim);
        return NULL;
    }
    if (tfk_optim_arity(kind, &n_in, &n_out)) {
        PyErr_Format(PyExc_ValueError, "optim: unknown update kind %d", kind);
        return NULL;
    }
    if (PyTuple_GET_SIZE(ins) != n_in || PyTuple_GET_SIZE(outs) != n_out) {
        PyErr_Format(PyExc_ValueError, "optim: update %d takes %d inputs and %d outputs, got "
                     "%zd and %zd", kind, n_in, n_out, PyTuple_GET_SIZE(ins),
                     PyTuple_GET_SIZE(outs));
        return NULL;
    }
    Buf b[2 * TFK_OPT_MAX_IN] = {{.held = 0}};
    Buf *bi = b, *bo = b + TFK_OPT_MAX_IN;
    for (int k = 0; k < n_in; k++)
        if (get_f32(PyTuple_GET_ITEM(ins, k), &bi[k], ndim, 0, "optim input"))
            goto fail;
    for (int k = 0; k < n_out; k++)
        if (get_f32(PyTuple_GET_ITEM(outs, k), &bo[k], ndim, 1, "optim output"))
            goto fail;
    const Py_ssize_t n = bi[0].view.len / 4;
    for (int k = 0; k < n_in + n_out; k++) {
        const Buf *x = k < n_in ? &bi[k] : &bo[k - n_in];
        if (x->view.len / 4 != n) {
            PyErr_Format(PyExc_ValueError, "optim: the arrays differ in size (%zd and %zd)",
                         n, x->view.len / 4);
            goto fail;
        }
    }
    for (int k = 0; k < n_out; k++) {
        const int same = bo[k].view.buf == bi[k].view.buf;
        for (int j = 0; j < n_in; j++)
            if ((j != k || !same) && overlaps(&bo[k], &bi[j])) {
                if (same) {         /* in place over inputs that share memory: not here */
                    release(b, 2 * TFK_OPT_MAX_IN);
                    Py_RETURN_FALSE;
                }
                PyErr_SetString(PyExc_ValueError, "optim: an output shares memory with an "
                                "input (pass a fresh array, or the input itself to update "
                                "it in place)");
                goto fail;
            }
        for (int j = 0; j < k; j++)
            if (overlaps(&bo[k], &bo[j])) {
                PyErr_SetString(PyExc_ValueError, "optim: two outputs share memory");
                goto fail;
            }
    }
    OptimArgs a = {.kind = kind, .n = (size_t)n, .flag = flag};
    for (int k = 0; k < n_in; k++)
        a.in[k] = bi[k].view.buf;
    for (int k = 0; k < n_out; k++)
        a.out[k] = bo[k].view.buf;
    for (int k = 0; k < 4; k++)
        a.s[k] = s[k];
    const int isa = g_isa, nt = g_threads;
    Py_BEGIN_ALLOW_THREADS
    tfk_optim(&a, isa, nt);
    Py_END_ALLOW_THREADS
    release(b, 2 * TFK_OPT_MAX_IN);
    Py_RETURN_TRUE;
fail:
    release(b, 2 * TFK_OPT_MAX_IN);
    return NULL;
}

/* pool(kind, ins, out, kh, kw, sh, sw, pt, pb, pl, pr): NHWC pooling (pooling.c); kind
 * 0 max_pool (ins: x), 1 max_pool_grad (x, y, dy), 2 avg_pool (x), 3 avg_pool_grad (dy);
 * out is (n, ho, wo, c) for 0 and 2, the input's (n, h, w, c) for 1 and 3; every pad
 * must be smaller than the window along its axis */
static PyObject *py_pool(PyObject *self, PyObject *args)
{
    static const char *const NAMES[4] = {"max_pool", "max_pool_grad", "avg_pool",
                                         "avg_pool_grad"};
    static const int N_IN[4] = {1, 3, 1, 1};
    int kind;
    PyObject *ins, *oo;
    Py_ssize_t kh, kw, sh, sw, pt, pb, pl, pr;
    if (!PyArg_ParseTuple(args, "iO!Onnnnnnnn", &kind, &PyTuple_Type, &ins, &oo, &kh, &kw,
                          &sh, &sw, &pt, &pb, &pl, &pr))
        return NULL;
    if (kind < 0 || kind > 3) {
        PyErr_Format(PyExc_ValueError, "pool: unknown pooling kind %d", kind);
        return NULL;
    }
    const char *name = NAMES[kind];
    if (PyTuple_GET_SIZE(ins) != N_IN[kind]) {
        PyErr_Format(PyExc_ValueError, "%s takes %d input arrays, got %zd", name, N_IN[kind],
                     PyTuple_GET_SIZE(ins));
        return NULL;
    }
    if (parse_geom(sh, sw, pt, pb, pl, pr, 1, 1) || check_range(kh, 1, "window (height)")
        || check_range(kw, 1, "window (width)"))
        return NULL;
    if (pt >= kh || pb >= kh || pl >= kw || pr >= kw) {
        PyErr_Format(PyExc_ValueError, "%s: every pad must be smaller than the window "
                     "(%zd, %zd), got (%zd, %zd, %zd, %zd)", name, kh, kw, pt, pb, pl, pr);
        return NULL;
    }
    Buf b[4] = {{.held = 0}};
    for (int k = 0; k < N_IN[kind]; k++)
        if (get_f32(PyTuple_GET_ITEM(ins, k), &b[k], 4, 0, name))
            goto fail;
    if (get_f32(oo, &b[3], 4, 1, name))
        goto fail;
    /* the input-shaped array (x; dx for avg_pool_grad), the output-shaped ones */
    const Py_ssize_t *xs = kind == 3 ? b[3].view.shape : b[0].view.shape;
    const Py_ssize_t ho = out_extent(xs[1], kh, sh, 1, pt, pb, "height");
    if (ho < 0)
        goto fail;
    const Py_ssize_t wo = out_extent(xs[2], kw, sw, 1, pl, pr, "width");
    if (wo < 0)
        goto fail;
    for (int k = 0; k < 4; k++) {
        if (!b[k].held)
            continue;
        const int xshaped = (k == 0 && kind != 3) || (k == 3 && (kind & 1));
        const Py_ssize_t *s = b[k].view.shape;
        if (s[0] != xs[0] || s[3] != xs[3]
            || (xshaped ? (s[1] != xs[1] || s[2] != xs[2]) : (s[1] != ho || s[2] != wo))) {
            PyErr_Format(PyExc_ValueError, "%s: array %d is (%zd, %zd, %zd, %zd), expected "
                         "(%zd, %zd, %zd, %zd)", name, k, s[0], s[1], s[2], s[3], xs[0],
                         xshaped ? xs[1] : ho, xshaped ? xs[2] : wo, xs[3]);
            goto fail;
        }
    }
    if (check_out_alone(&b[3], b, 3))
        goto fail;
    PoolGeom g = {.n = xs[0], .h = xs[1], .w = xs[2], .c = xs[3], .kh = kh, .kw = kw,
                  .sh = sh, .sw = sw, .pt = pt, .pl = pl, .ho = ho, .wo = wo};
    const float *in0 = b[0].view.buf;
    float *out = b[3].view.buf;
    const int isa = g_isa, nt = g_threads;
    Py_BEGIN_ALLOW_THREADS
    switch (kind) {
    case 0: tfk_max_pool(&g, in0, out, isa, nt); break;
    case 1: tfk_max_pool_grad(&g, in0, b[1].view.buf, b[2].view.buf, out, isa, nt); break;
    case 2: tfk_avg_pool(&g, in0, out, isa, nt); break;
    default: tfk_avg_pool_grad(&g, in0, out, isa, nt); break;
    }
    Py_END_ALLOW_THREADS
    release(b, 4);
    Py_RETURN_NONE;
fail:
    release(b, 4);
    return NULL;
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    const long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1 || n > TFK_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "the number of threads must be in [1, %d], got %ld",
                     TFK_MAX_THREADS, n);
        return NULL;
    }
    g_threads = (int)n;
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(g_threads);
}

static PyObject *py_isas(PyObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (int i = ISA_COUNT - 1; i >= 0; i--) {
        if (!tfk_isa_supported(i))
            continue;
        PyObject *s = PyUnicode_FromString(ISA_NAMES[i]);
        if (!s || PyList_Append(out, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
    }
    return out;
}

static PyObject *py_set_isa(PyObject *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, ISA_NAMES[i]) == 0) {
            if (!tfk_isa_supported(i)) {
                PyErr_Format(PyExc_ValueError, "this CPU cannot run the %s kernels", name);
                return NULL;
            }
            g_isa = i;
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "unknown instruction set %R", arg);
    return NULL;
}

static PyObject *py_get_isa(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(ISA_NAMES[g_isa]);
}

/* kernel_name(n): the micro-kernel the current variant uses for n output columns */
static PyObject *py_kernel_name(PyObject *self, PyObject *arg)
{
    const Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(tfk_pick_kernel(g_isa, n > 0 ? (size_t)n : 1)->name);
}

static PyMethodDef methods[] = {
    {"conv2d", py_conv2d, METH_VARARGS,
     "conv2d(x, w, bias, out, sh, sw, pt, pb, pl, pr, dh, dw, act, alpha): NHWC x HWIO -> out"},
    {"conv2d_backprop_filter", py_conv2d_filter, METH_VARARGS,
     "conv2d_backprop_filter(x, dy, out, sh, sw, pt, pb, pl, pr, dh, dw): the HWIO gradient"},
    {"matmul", py_matmul, METH_VARARGS, "matmul(a, b, out, transpose_a, transpose_b)"},
    {"pool", py_pool, METH_VARARGS,
     "pool(kind, ins, out, kh, kw, sh, sw, pt, pb, pl, pr): NHWC pooling (pooling.c)"},
    {"optim", py_optim, METH_VARARGS,
     "optim(kind, ndim, ins, outs, s0, s1, s2, s3, flag): a fused optimizer update"},
    {"set_num_threads", py_set_num_threads, METH_O, "set_num_threads(n)"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "get_num_threads()"},
    {"isas", py_isas, METH_NOARGS, "the variants this CPU runs, best first"},
    {"set_isa", py_set_isa, METH_O, "set_isa(name)"},
    {"get_isa", py_get_isa, METH_NOARGS, "the variant in use"},
    {"kernel_name", py_kernel_name, METH_O, "kernel_name(n): the micro-kernel for n columns"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_cpukernels",
                                    "tapeflow's native CPU kernels (see native.py)", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cpukernels(void)
{
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    tfk_pool_init();
    static int atexit_done = 0;
    if (!atexit_done) {
        Py_AtExit(tfk_pool_shutdown);
        atexit_done = 1;
    }
    for (int i = ISA_COUNT - 1; i >= 0; i--)
        if (tfk_isa_supported(i)) {
            g_isa = i;
            break;
        }
    return m;
}
