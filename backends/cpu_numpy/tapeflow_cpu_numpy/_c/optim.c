/* The fused optimizer updates (cpukernels.h, OptimArgs): ApplyAdam, ApplyGradientDescent,
 * ApplyMomentum, the RMSProp family and ApplyAdagrad in ONE pass over memory.
 *
 * Each update computes, element by element, exactly the float32 operations of the NumPy
 * kernel it replaces (core/tapeflow/kernels/optim.py, OptimKernels._*_block), in the
 * same order, each rounded to float32: there is no fused multiply-add anywhere (the
 * contraction of a*b + c into an FMA is turned off for this file below: with it the
 * results would differ from NumPy's in the last bit), and add, sub, mul, div and sqrt are
 * IEEE-correctly rounded in every variant, so the results are bitwise NumPy's.
 *
 * The element formulas are written once (the BODY_* macros, over the operation macros
 * LD, ST, ADD, SUB, MUL, DIV, SQRT) and instantiated for AVX-512F (16 floats a vector),
 * AVX2 (8) and plain C (1: the portable variant and every variant's tail). Each vector
 * step loads every input of its elements before it stores an output, so an output may
 * be its own input (in place: module.c allows exactly that, and no other overlap).
 * Above OPT_PARALLEL_MIN elements the range is split into chunks of OPT_CHUNK elements
 * run on the pool (elementwise: the result does not depend on the split).
 */
#include "cpukernels.h"

#include <math.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TFK_X86 1
#include <immintrin.h>
#else
#define TFK_X86 0
#endif

/* elements a task: a multiple of every vector width */
#define OPT_CHUNK ((size_t)1 << 15)
/* the pool is used from this many elements on (below, one call on the caller) */
#define OPT_PARALLEL_MIN ((size_t)1 << 16)

static const int ARITY[OPT_COUNT][2] = {
    [OPT_GRADIENT_DESCENT] = {2, 1},
    [OPT_MOMENTUM] = {3, 2},
    [OPT_ADAM] = {4, 3},
    [OPT_RMS_PROP] = {4, 3},
    [OPT_CENTERED_RMS_PROP] = {5, 4},
    [OPT_KERAS_RMS_PROP] = {3, 2},
    [OPT_KERAS_CENTERED_RMS_PROP] = {4, 3},
    [OPT_ADAGRAD] = {3, 2},
    [OPT_RELU_GRAD] = {2, 1},
};

int tfk_optim_arity(int kind, int *n_in, int *n_out)
{
    if (kind < 0 || kind >= OPT_COUNT)
        return -1;
    *n_in = ARITY[kind][0];
    *n_out = ARITY[kind][1];
    return 0;
}

/* ---- the element formulas (i: the first element; IN(k), OUT(k) the arrays) ---------- */
#define IN(k) (a->in[k] + i)
#define OUT(k) (a->out[k] + i)

/* var -= grad * lr */
#define BODY_GRADIENT_DESCENT(V)                                                          \
    do {                                                                                  \
        const V var = LD(IN(0)), g = LD(IN(1));                                           \
        ST(OUT(0), SUB(var, MUL(g, S0)));                                                 \
    } while (0)

/* accum = accum * momentum + g; var -= accum * lr (Nesterov: g * lr + accum * mom_lr) */
#define BODY_MOMENTUM(V)                                                                  \
    do {                                                                                  \
        const V var = LD(IN(0)), acc = LD(IN(1)), g = LD(IN(2));                          \
        const V oacc = ADD(MUL(acc, S2), g);                                              \
        const V t = a->flag ? ADD(MUL(g, S0), MUL(oacc, S1)) : MUL(oacc, S0);             \
        ST(OUT(1), oacc);                                                                 \
        ST(OUT(0), SUB(var, t));                                                          \
    } while (0)

/* m += (g - m) * c1; v += (g*g - v) * c2; var -= m * lr_t / (sqrt(v) + eps) */
#define BODY_ADAM(V)                                                                      \
    do {                                                                                  \
        const V var = LD(IN(0)), m = LD(IN(1)), v = LD(IN(2)), g = LD(IN(3));             \
        const V om = ADD(m, MUL(SUB(g, m), S1));                                          \
        const V ov = ADD(v, MUL(SUB(MUL(g, g), v), S2));                                  \
        const V d = ADD(SQRT(ov), S3);                                                    \
        ST(OUT(1), om);                                                                   \
        ST(OUT(2), ov);                                                                   \
        ST(OUT(0), SUB(var, DIV(MUL(om, S0), d)));                                        \
    } while (0)

/* ms += (g*g - ms) * c (OptimKernels._mean_square) */
#define MEAN_SQUARE(ms, g) ADD(ms, MUL(SUB(MUL(g, g), ms), S1))
/* mg += (g - mg) * c (OptimKernels._mean_grad) */
#define MEAN_GRAD(mg, g) ADD(mg, MUL(SUB(g, mg), S1))
/* OptimKernels._momentum_step: mom = mom * momentum + g * lr / sqrt(d) (momentum 0: the
 * step alone); var -= mom */
#define MOMENTUM_STEP(V, var, mom, g, d, kvar, kmom)                                      \
    do {                                                                                  \
        const V q = DIV(MUL(g, S0), SQRT(d));                                             \
        const V omom = a->flag ? ADD(MUL(mom, S2), q) : q;                                \
        ST(OUT(kmom), omom);                                                              \
        ST(OUT(kvar), SUB(var, omom));                                                    \
    } while (0)
/* OptimKernels._keras_step: var -= g * lr / (d + epsilon) (epsilon: S2) */
#define KERAS_STEP(var, g, d) SUB(var, DIV(MUL(g, S0), ADD(d, S2)))

/* TensorFlow 1's RMSProp: (var, ms, mom, grad); (lr, 1 - rho, momentum, epsilon) */
#define BODY_RMS_PROP(V)                                                                  \
    do {                                                                                  \
        const V var = LD(IN(0)), ms = LD(IN(1)), mom = LD(IN(2)), g = LD(IN(3));          \
        const V oms = MEAN_SQUARE(ms, g);                                                 \
        ST(OUT(1), oms);                                                                  \
        MOMENTUM_STEP(V, var, mom, g, ADD(oms, S3), 0, 2);                                \
    } while (0)

/* centered: (var, mg, ms, mom, grad); the denominator sqrt(ms - mg*mg + epsilon) */
#define BODY_CENTERED_RMS_PROP(V)                                                         \
    do {                                                                                  \
        const V var = LD(IN(0)), mg = LD(IN(1)), ms = LD(IN(2)), mom = LD(IN(3));         \
        const V g = LD(IN(4));                                                            \
        const V oms = MEAN_SQUARE(ms, g), omg = MEAN_GRAD(mg, g);                         \
        ST(OUT(1), omg);                                                                  \
        ST(OUT(2), oms);                                                                  \
        MOMENTUM_STEP(V, var, mom, g, ADD(SUB(oms, MUL(omg, omg)), S3), 0, 3);            \
    } while (0)

/* Keras's RMSprop: (var, ms, grad); (lr, 1 - rho, epsilon) */
#define BODY_KERAS_RMS_PROP(V)                                                            \
    do {                                                                                  \
        const V var = LD(IN(0)), ms = LD(IN(1)), g = LD(IN(2));                           \
        const V oms = MEAN_SQUARE(ms, g);                                                 \
        ST(OUT(1), oms);                                                                  \
        ST(OUT(0), KERAS_STEP(var, g, SQRT(oms)));                                        \
    } while (0)

/* Keras's centered RMSprop: (var, ms, mg, grad); the denominator sqrt(ms - mg*mg) + eps */
#define BODY_KERAS_CENTERED_RMS_PROP(V)                                                   \
    do {                                                                                  \
        const V var = LD(IN(0)), ms = LD(IN(1)), mg = LD(IN(2)), g = LD(IN(3));           \
        const V oms = MEAN_SQUARE(ms, g), omg = MEAN_GRAD(mg, g);                         \
        ST(OUT(1), oms);                                                                  \
        ST(OUT(2), omg);                                                                  \
        ST(OUT(0), KERAS_STEP(var, g, SQRT(SUB(oms, MUL(omg, omg)))));                    \
    } while (0)

/* accum += g*g; var -= g * lr / sqrt(accum) */
#define BODY_ADAGRAD(V)                                                                   \
    do {                                                                                  \
        const V var = LD(IN(0)), acc = LD(IN(1)), g = LD(IN(2));                          \
        const V oacc = ADD(acc, MUL(g, g));                                               \
        ST(OUT(1), oacc);                                                                 \
        ST(OUT(0), SUB(var, DIV(MUL(g, S0), SQRT(oacc))));                                \
    } while (0)

/* not an optimizer, the same one-pass engine: ReluGrad, dy * (x > 0) with the mask as
 * 1.0 or 0.0 (NumPy's dy * (x > 0): a NaN or infinite dy where x <= 0 gives NaN, -0.0
 * where dy is negative, bitwise) */
#define BODY_RELU_GRAD(V)                                                                 \
    do {                                                                                  \
        ST(OUT(0), MUL(LD(IN(0)), POS(LD(IN(1)))));                                       \
    } while (0)

/* the loop over [i, e) in steps of W of every update, for the operation macros in scope */
#define RANGE_LOOPS(V, W)                                                                 \
    switch (a->kind) {                                                                    \
    case OPT_GRADIENT_DESCENT: for (; i + (W) <= e; i += (W)) BODY_GRADIENT_DESCENT(V);   \
        break;                                                                            \
    case OPT_MOMENTUM: for (; i + (W) <= e; i += (W)) BODY_MOMENTUM(V);                   \
        break;                                                                            \
    case OPT_ADAM: for (; i + (W) <= e; i += (W)) BODY_ADAM(V);                           \
        break;                                                                            \
    case OPT_RMS_PROP: for (; i + (W) <= e; i += (W)) BODY_RMS_PROP(V);                   \
        break;                                                                            \
    case OPT_CENTERED_RMS_PROP: for (; i + (W) <= e; i += (W)) BODY_CENTERED_RMS_PROP(V); \
        break;                                                                            \
    case OPT_KERAS_RMS_PROP: for (; i + (W) <= e; i += (W)) BODY_KERAS_RMS_PROP(V);       \
        break;                                                                            \
    case OPT_KERAS_CENTERED_RMS_PROP:                                                     \
        for (; i + (W) <= e; i += (W)) BODY_KERAS_CENTERED_RMS_PROP(V);                   \
        break;                                                                            \
    case OPT_ADAGRAD: for (; i + (W) <= e; i += (W)) BODY_ADAGRAD(V);                     \
        break;                                                                            \
    case OPT_RELU_GRAD: for (; i + (W) <= e; i += (W)) BODY_RELU_GRAD(V);                 \
        break;                                                                            \
    default: break;                                                                       \
    }

/* ---- plain C: the portable variant, and the SIMD variants' tails -------------------- */
#define LD(p) (*(p))
#define ST(p, x) (*(p) = (x))
#define ADD(x, y) ((x) + (y))
#define SUB(x, y) ((x) - (y))
#define MUL(x, y) ((x) * (y))
#define DIV(x, y) ((x) / (y))
#define SQRT(x) sqrtf(x)
#define POS(x) ((x) > 0.0f ? 1.0f : 0.0f)

static void range_portable(const OptimArgs *a, size_t i, size_t e)
{
    const float S0 = a->s[0], S1 = a->s[1], S2 = a->s[2], S3 = a->s[3];
    (void)S1, (void)S2, (void)S3;
    RANGE_LOOPS(float, 1)
}

#undef LD
#undef ST
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef SQRT
#undef POS

#if TFK_X86
/* ---- AVX2 (8 floats) ---------------------------------------------------------------- */
#define LD(p) _mm256_loadu_ps(p)
#define ST(p, x) _mm256_storeu_ps(p, x)
#define ADD(x, y) _mm256_add_ps(x, y)
#define SUB(x, y) _mm256_sub_ps(x, y)
#define MUL(x, y) _mm256_mul_ps(x, y)
#define DIV(x, y) _mm256_div_ps(x, y)
#define SQRT(x) _mm256_sqrt_ps(x)
#define POS(x) _mm256_and_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ),          \
                             _mm256_set1_ps(1.0f))

__attribute__((target("avx2"))) static void range_avx2(const OptimArgs *a, size_t i, size_t e)
{
    const __m256 S0 = _mm256_set1_ps(a->s[0]), S1 = _mm256_set1_ps(a->s[1]);
    const __m256 S2 = _mm256_set1_ps(a->s[2]), S3 = _mm256_set1_ps(a->s[3]);
    (void)S1, (void)S2, (void)S3;
    RANGE_LOOPS(__m256, 8)
    range_portable(a, i, e);
}

#undef LD
#undef ST
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef SQRT
#undef POS

/* ---- AVX-512F (16 floats) ----------------------------------------------------------- */
#define LD(p) _mm512_loadu_ps(p)
#define ST(p, x) _mm512_storeu_ps(p, x)
#define ADD(x, y) _mm512_add_ps(x, y)
#define SUB(x, y) _mm512_sub_ps(x, y)
#define MUL(x, y) _mm512_mul_ps(x, y)
#define DIV(x, y) _mm512_div_ps(x, y)
#define SQRT(x) _mm512_sqrt_ps(x)
#define POS(x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ),  \
                                   _mm512_set1_ps(1.0f))

__attribute__((target("avx512f"))) static void range_avx512(const OptimArgs *a, size_t i,
                                                            size_t e)
{
    const __m512 S0 = _mm512_set1_ps(a->s[0]), S1 = _mm512_set1_ps(a->s[1]);
    const __m512 S2 = _mm512_set1_ps(a->s[2]), S3 = _mm512_set1_ps(a->s[3]);
    (void)S1, (void)S2, (void)S3;
    RANGE_LOOPS(__m512, 16)
    range_avx2(a, i, e);          /* (the CPU runs AVX2 too: tfk_isa_supported) */
}

#undef LD
#undef ST
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef SQRT
#undef POS
#endif

typedef struct {
    const OptimArgs *a;
    void (*range)(const OptimArgs *, size_t, size_t);
} OptimJob;

static void optim_task(void *ctx, size_t task, int tid)
{
    const OptimJob *job = ctx;
    const size_t s = task * OPT_CHUNK;
    const size_t e = s + OPT_CHUNK < job->a->n ? s + OPT_CHUNK : job->a->n;
    job->range(job->a, s, e);
    (void)tid;
}

void tfk_optim(const OptimArgs *a, int isa, int nthreads)
{
    OptimJob job = {a, range_portable};
#if TFK_X86
    if (isa == ISA_AVX512)
        job.range = range_avx512;
    else if (isa == ISA_AVX2)
        job.range = range_avx2;
#endif
    (void)isa;
    if (a->n < OPT_PARALLEL_MIN || nthreads <= 1) {
        job.range(a, 0, a->n);
        return;
    }
    tfk_pool_run(optim_task, &job, (a->n + OPT_CHUNK - 1) / OPT_CHUNK, nthreads);
}
