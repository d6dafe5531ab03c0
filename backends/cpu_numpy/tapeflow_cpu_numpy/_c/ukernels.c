/* The micro-kernels (cpukernels.h, TileArgs): one MR x NR tile of C per call, the
 * accumulators in registers over the whole K, the bias as their initial value and the
 * activation applied before the (masked, for a partial tile) store.
 *
 *   avx512  8x16 and 8x32 (AVX-512F: 16 floats a register; 8x32 = 16 accumulators,
 *           two loads of B and eight broadcasts per k; 8x16 for <= 16 outputs), and
 *           6x16, 6x32 for a GEMM of few rows that 6 divides better (m = 9, 25)
 *           (12x32, 24 accumulators, measured no faster than 8x32 on Zen 4: left out)
 *   avx2    6x16 (AVX2 + FMA: 12 accumulators, two loads of B, six broadcasts)
 *   portable 4x8 (plain C; what the compiler makes of it)
 *
 * Each SIMD kernel is compiled for its instruction set by a per-function target
 * attribute (no per-file compiler flags) and only ever called after
 * __builtin_cpu_supports said the CPU (and the OS's saved register state) has it.
 */
#include "cpukernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TFK_X86 1
#include <immintrin.h>
#else
#define TFK_X86 0
#endif

/* ---- portable C ------------------------------------------------------------------ */
#define P_MR 4
#define P_NR 8

static inline float act1(float v, int act, float alpha)
{
    switch (act) {
    case ACT_RELU: return v < 0.0f ? 0.0f : v;
    case ACT_RELU6: return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
    case ACT_LEAKY: return v < 0.0f ? v * alpha : v;
    default: return v;
    }
}

static void ukernel_portable(const TileArgs *p)
{
    float acc[P_MR][P_NR];
    const size_t mr = p->mr, nr = p->nr;
    for (size_t i = 0; i < P_MR; i++)
        for (size_t j = 0; j < P_NR; j++) {
            if (p->load_c)
                acc[i][j] = (i < mr && j < nr) ? p->c[i * p->ldc + j] : 0.0f;
            else
                acc[i][j] = p->bias ? p->bias[j] : 0.0f;
        }
    const float *w = p->w;
    for (size_t t = 0; t < p->ks; t++) {
        const float *ap[P_MR];
        for (size_t i = 0; i < P_MR; i++)
            ap[i] = p->a[t * P_MR + i];
        for (size_t k = 0; k < p->kc; k++) {
            for (size_t i = 0; i < P_MR; i++) {
                const float av = *ap[i];
                ap[i] += p->a_step;
                for (size_t j = 0; j < P_NR; j++)
                    acc[i][j] += av * w[j];
            }
            w += p->w_stride;
        }
    }
    for (size_t i = 0; i < mr; i++)
        for (size_t j = 0; j < nr; j++)
            p->c[i * p->ldc + j] = act1(acc[i][j], p->act, p->alpha);
}

#if TFK_X86
/* ---- AVX-512F ------------------------------------------------------------------- */
#define T512 __attribute__((target("avx512f,avx512vl,fma")))

static inline __attribute__((always_inline)) T512 __m512 act512(__m512 v, int act,
                                                                   __m512 alpha)
{
    const __m512 zero = _mm512_setzero_ps();
    /* max(zero, v): a NaN in v stays NaN (the second operand is returned for NaN) */
    switch (act) {
    case ACT_RELU: return _mm512_max_ps(zero, v);
    case ACT_RELU6: return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(zero, v));
    case ACT_LEAKY:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, alpha);
    default: return v;
    }
}

static inline __attribute__((always_inline)) T512 void
tile512(const TileArgs *p, const size_t MR, const size_t NV)
{
    __m512 acc[TFK_MAX_MR][2];
    __mmask16 mk[2];
    const size_t mr = p->mr, nr = p->nr;
    for (size_t v = 0; v < NV; v++) {
        const size_t lo = 16 * v;
        mk[v] = nr >= lo + 16 ? (__mmask16)0xFFFF
                : nr > lo ? (__mmask16)((1u << (nr - lo)) - 1u) : (__mmask16)0;
    }
    if (p->load_c) {
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            for (size_t v = 0; v < NV; v++)
                acc[i][v] = i < mr ? _mm512_maskz_loadu_ps(mk[v], p->c + i * p->ldc + 16 * v)
                                   : _mm512_setzero_ps();
    } else {
        __m512 b[2];
        for (size_t v = 0; v < NV; v++)
            b[v] = p->bias ? _mm512_loadu_ps(p->bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            for (size_t v = 0; v < NV; v++)
                acc[i][v] = b[v];
    }
    const float *w = p->w;
    const size_t ws = p->w_stride, kc = p->kc;
    const ptrdiff_t step = p->a_step;
    for (size_t t = 0; t < p->ks; t++) {
        const float *ap[TFK_MAX_MR];
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            ap[i] = p->a[t * MR + i];
        for (size_t k = 0; k < kc; k++) {
            const __m512 w0 = _mm512_loadu_ps(w);
            const __m512 w1 = NV > 1 ? _mm512_loadu_ps(w + 16) : w0;
#pragma GCC unroll 8
            for (size_t i = 0; i < MR; i++) {
                const __m512 av = _mm512_set1_ps(*ap[i]);
                ap[i] += step;
                acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
                if (NV > 1)
                    acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
            }
            w += ws;
        }
    }
    const __m512 alpha = _mm512_set1_ps(p->alpha);
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; i++) {
        if (i >= mr)
            break;
        float *c = p->c + i * p->ldc;
        for (size_t v = 0; v < NV; v++) {
            const __m512 r = act512(acc[i][v], p->act, alpha);
            if (mk[v] == (__mmask16)0xFFFF)
                _mm512_storeu_ps(c + 16 * v, r);
            else if (mk[v])
                _mm512_mask_storeu_ps(c + 16 * v, mk[v], r);
        }
    }
}

static T512 void ukernel_avx512_8x32(const TileArgs *p) { tile512(p, 8, 2); }
static T512 void ukernel_avx512_8x16(const TileArgs *p) { tile512(p, 8, 1); }
static T512 void ukernel_avx512_6x32(const TileArgs *p) { tile512(p, 6, 2); }
static T512 void ukernel_avx512_6x16(const TileArgs *p) { tile512(p, 6, 1); }

/* ---- AVX2 + FMA ------------------------------------------------------------------ */
#define T256 __attribute__((target("avx2,fma")))

static inline __attribute__((always_inline)) T256 __m256 act256(__m256 v, int act,
                                                                   __m256 alpha)
{
    const __m256 zero = _mm256_setzero_ps();
    switch (act) {
    case ACT_RELU: return _mm256_max_ps(zero, v);
    case ACT_RELU6: return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(zero, v));
    case ACT_LEAKY:
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, alpha), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    default: return v;
    }
}

static inline __attribute__((always_inline)) T256 void
tile256(const TileArgs *p, const size_t MR, const size_t NV)
{
    __m256 acc[TFK_MAX_MR][2];
    __m256i mk[2];
    int full[2];
    const size_t mr = p->mr, nr = p->nr;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (size_t v = 0; v < NV; v++) {
        const size_t lo = 8 * v;
        const int cnt = nr >= lo + 8 ? 8 : nr > lo ? (int)(nr - lo) : 0;
        mk[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane);
        full[v] = cnt == 8 ? 1 : cnt == 0 ? -1 : 0;
    }
    if (p->load_c) {
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            for (size_t v = 0; v < NV; v++)
                acc[i][v] = i < mr ? _mm256_maskload_ps(p->c + i * p->ldc + 8 * v, mk[v])
                                   : _mm256_setzero_ps();
    } else {
        __m256 b[2];
        for (size_t v = 0; v < NV; v++)
            b[v] = p->bias ? _mm256_loadu_ps(p->bias + 8 * v) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            for (size_t v = 0; v < NV; v++)
                acc[i][v] = b[v];
    }
    const float *w = p->w;
    const size_t ws = p->w_stride, kc = p->kc;
    const ptrdiff_t step = p->a_step;
    for (size_t t = 0; t < p->ks; t++) {
        const float *ap[TFK_MAX_MR];
#pragma GCC unroll 8
        for (size_t i = 0; i < MR; i++)
            ap[i] = p->a[t * MR + i];
        for (size_t k = 0; k < kc; k++) {
            const __m256 w0 = _mm256_loadu_ps(w);
            const __m256 w1 = NV > 1 ? _mm256_loadu_ps(w + 8) : w0;
#pragma GCC unroll 8
            for (size_t i = 0; i < MR; i++) {
                const __m256 av = _mm256_broadcast_ss(ap[i]);
                ap[i] += step;
                acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
                if (NV > 1)
                    acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
            }
            w += ws;
        }
    }
    const __m256 alpha = _mm256_set1_ps(p->alpha);
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; i++) {
        if (i >= mr)
            break;
        float *c = p->c + i * p->ldc;
        for (size_t v = 0; v < NV; v++) {
            const __m256 r = act256(acc[i][v], p->act, alpha);
            if (full[v] == 1)
                _mm256_storeu_ps(c + 8 * v, r);
            else if (full[v] == 0)
                _mm256_maskstore_ps(c + 8 * v, mk[v], r);
        }
    }
}

static T256 void ukernel_avx2_6x16(const TileArgs *p) { tile256(p, 6, 2); }
#endif /* TFK_X86 */

static const UKernel K_PORTABLE = {"portable 4x8", P_MR, P_NR, ukernel_portable};
#if TFK_X86
static const UKernel K_AVX2 = {"avx2 6x16", 6, 16, ukernel_avx2_6x16};
static const UKernel K_AVX512_16 = {"avx512 8x16", 8, 16, ukernel_avx512_8x16};
static const UKernel K_AVX512_32 = {"avx512 8x32", 8, 32, ukernel_avx512_8x32};
static const UKernel K_AVX512_6x16 = {"avx512 6x16", 6, 16, ukernel_avx512_6x16};
static const UKernel K_AVX512_6x32 = {"avx512 6x32", 6, 32, ukernel_avx512_6x32};
#endif

int tfk_isa_supported(int isa)
{
    switch (isa) {
    case ISA_PORTABLE: return 1;
#if TFK_X86
    case ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
               && __builtin_cpu_supports("fma");
#endif
    default: return 0;
    }
}

/* the kernel for isa (assumed supported) and an output of n columns */
const UKernel *tfk_pick_kernel(int isa, size_t n)
{
#if TFK_X86
    if (isa == ISA_AVX512)
        return n <= 16 ? &K_AVX512_16 : &K_AVX512_32;
    if (isa == ISA_AVX2)
        return &K_AVX2;
#endif
    (void)n;
    return &K_PORTABLE;
}

/* the same for a GEMM of only m rows (the filter gradient's kh*kw*c): where 6-row tiles
 * cover m with fewer padding rows than 8-row ones (m = 9: 12 against 16), 6x16/6x32 */
const UKernel *tfk_pick_kernel_rows(int isa, size_t n, size_t m)
{
    const UKernel *k = tfk_pick_kernel(isa, n);
#if TFK_X86
    if (isa == ISA_AVX512 && (m + 5) / 6 * 6 < (m + 7) / 8 * 8)
        return n <= 16 ? &K_AVX512_6x16 : &K_AVX512_6x32;
#endif
    (void)m;
    return k;
}
