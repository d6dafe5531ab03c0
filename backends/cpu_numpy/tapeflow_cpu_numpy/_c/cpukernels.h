/* tapeflow_cpu_numpy._cpukernels: the native CPU kernels (issue 48).
 *
 * One register-blocked micro-kernel computes an MR x NR tile of C = A @ B in every
 * operation of this library:
 *
 *   - the convolution forward is an INDIRECT GEMM in NHWC (as XNNPACK does it): the
 *     rows of A are output pixels, K is (tap, channel), and the micro-kernel reads,
 *     for each tap, MR pointers to the C contiguous channels of the input pixels that
 *     tap sees (a shared zero row where the tap falls in the padding): no im2col copy;
 *     B is the HWIO filter packed into panels of NR output channels;
 *   - the filter gradient is a GEMM over K = N*Ho*Wo with the filter entries as rows:
 *     an indirect GEMM too, whose "taps" are output rows (along one, an input value
 *     moves by sw*c floats a pixel: a_step) and whose B is dy in place; the input is
 *     zero-padded once where the convolution pads; per-thread partial sums are
 *     reduced at the end;
 *   - matmul reads A's rows through the same pointers and B's panels in place (or
 *     packed, for B transposed and for the last, partial panel).
 *
 * files: ukernels.c (the micro-kernels: AVX-512F, AVX2+FMA, portable C; chosen at run
 * time), ops.c (the drivers: conv2d, conv2d_backprop_filter, matmul), optim.c (the
 * fused optimizer updates: elementwise, one pass, bitwise NumPy's), pool.c (the
 * persistent thread pool), pooling.c (NHWC max/avg pooling and their gradients),
 * module.c (the Python module: buffers, checks, GIL release).
 * No NumPy headers: arrays arrive through the buffer protocol, validated in module.c
 * before any C code touches their memory.
 */
#ifndef TAPEFLOW_CPUKERNELS_H
#define TAPEFLOW_CPUKERNELS_H

#include <stddef.h>
#include <stdint.h>

/* the activations applied in registers before the store (ACT_ELU: by the driver, on
 * the stored tile while it is in cache) */
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_RELU6 = 2, ACT_LEAKY = 3, ACT_ELU = 4 };
/* the instruction-set variants, best last */
enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, ISA_COUNT = 3 };

#define TFK_MAX_MR 8
#define TFK_MAX_NR 32
#define TFK_MAX_THREADS 256

/* One tile: c[i][j] (i < mr, j < nr) = init + sum over t < ks, k < kc of
 * a[t*MR + i][k*a_step] * w[(t*kc + k)*w_stride + j], then the activation.
 * init is c's own value (load_c), else bias[j] (bias not NULL), else 0.
 * Every a[t*MR + i] for i < MR (not only mr) must be readable (the driver repeats a
 * valid row), and every row of w must hold NR readable floats (zero-padded panels). */
typedef struct {
    size_t mr, nr;
    size_t kc, ks;
    const float *const *a;
    ptrdiff_t a_step;
    const float *w;
    size_t w_stride;
    const float *bias;
    float *c;
    size_t ldc;
    int load_c;
    int act;
    float alpha;
} TileArgs;

typedef void (*ukernel_fn)(const TileArgs *);

typedef struct {
    const char *name;
    size_t mr, nr;
    ukernel_fn fn;
} UKernel;

/* ukernels.c */
int tfk_isa_supported(int isa);
const UKernel *tfk_pick_kernel(int isa, size_t n);
const UKernel *tfk_pick_kernel_rows(int isa, size_t n, size_t m);

/* pool.c: run fn(ctx, task, tid) for task in [0, ntasks) on up to nthreads threads
 * (the caller is tid 0; every tid < nthreads); runs all on the caller when the pool is
 * busy (another Python thread's call) or cannot start. Returns the threads used. */
typedef void (*tfk_task_fn)(void *ctx, size_t task, int tid);
int tfk_pool_run(tfk_task_fn fn, void *ctx, size_t ntasks, int nthreads);
void tfk_pool_init(void);
void tfk_pool_shutdown(void);

/* ops.c: each returns 0, or -1 when memory ran out (nothing else can fail: module.c
 * checked every size and buffer) */
typedef struct {
    size_t n, h, w, c;       /* input NHWC */
    size_t kh, kw, o;        /* filter HWIO (c from the input) */
    size_t sh, sw, dh, dw, pt, pb, pl, pr;
    size_t ho, wo;           /* output */
} ConvGeom;

int tfk_conv2d(const ConvGeom *g, const float *x, const float *w, const float *bias,
               float *y, int act, float alpha, int isa, int nthreads);
int tfk_conv2d_filter_grad(const ConvGeom *g, const float *x, const float *dy, float *dw,
                           int isa, int nthreads);
int tfk_matmul(const float *a, const float *b, float *c, size_t m, size_t n, size_t k,
               int transpose_a, int transpose_b, int isa, int nthreads);

/* optim.c: the fused optimizer updates, one pass over memory, bitwise NumPy's
 * OptimKernels (core/tapeflow/kernels/optim.py). in[]: the variable, its slots and the
 * gradient in the kernel's order; out[k]: the new in[k] (in[k] itself in place, else an
 * array that overlaps no input: module.c checks); s[]: the float32 coefficients in the
 * kernel's order; flag: Nesterov (momentum) or momentum != 0 (RMSProp). */
enum { OPT_GRADIENT_DESCENT = 0, OPT_MOMENTUM = 1, OPT_ADAM = 2, OPT_RMS_PROP = 3,
       OPT_CENTERED_RMS_PROP = 4, OPT_KERAS_RMS_PROP = 5, OPT_KERAS_CENTERED_RMS_PROP = 6,
       OPT_ADAGRAD = 7, OPT_RELU_GRAD = 8, OPT_COUNT = 9 };
#define TFK_OPT_MAX_IN 5
typedef struct {
    int kind;
    size_t n;
    const float *in[TFK_OPT_MAX_IN];
    float *out[TFK_OPT_MAX_IN - 1];
    float s[4];
    int flag;
} OptimArgs;
/* the number of arrays in and out of an update (-1: no such kind) */
int tfk_optim_arity(int kind, int *n_in, int *n_out);
void tfk_optim(const OptimArgs *a, int isa, int nthreads);

/* pooling.c: NHWC float32 pooling (max, avg and their gradients; the NumPy kernels'
 * semantics, pooling.c says them); module.c has checked that every pad is smaller than
 * the window along its axis (every window holds a valid element). Each returns 0. */
typedef struct {
    size_t n, h, w, c;      /* input NHWC */
    size_t kh, kw, sh, sw, pt, pl;
    size_t ho, wo;          /* output */
} PoolGeom;

int tfk_max_pool(const PoolGeom *g, const float *x, float *y, int isa, int nthreads);
int tfk_max_pool_grad(const PoolGeom *g, const float *x, const float *y, const float *dy,
                      float *dx, int isa, int nthreads);
int tfk_avg_pool(const PoolGeom *g, const float *x, float *y, int isa, int nthreads);
int tfk_avg_pool_grad(const PoolGeom *g, const float *dy, float *dx, int isa, int nthreads);

#endif
