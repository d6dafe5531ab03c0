/* Pooling in NHWC (float32): max_pool, its gradient, avg_pool, its gradient.
 *
 * The same results as tapeflow's NumPy kernels (core/tapeflow/kernels/nn.py NNKernels),
 * up to the order of sums where windows overlap and the sign of zero (docs/cpu-kernels.md):
 *   - max_pool: the maximum of each window's valid elements (the padding is -inf, so
 *     it never wins); a NaN in a window makes its maximum NaN (as np.maximum);
 *   - max_pool_grad: dy routed to each window's FIRST element equal to y, in row-major
 *     window order, the padding included: a padded position "equals" y only where y is
 *     -inf (then the gradient is lost in the padding, as NumPy's padded compare drops
 *     it); a NaN maximum routes nothing; overlapping windows add up;
 *   - avg_pool: the sum of the valid elements divided by their count (the padding is
 *     excluded from the count), the division done last, as NumPy does it;
 *   - avg_pool_grad: dy / count added to each valid element of the window.
 * module.c requires every pad to be smaller than the window along its axis, so every
 * window holds at least one valid element, and its valid elements are a rectangle:
 * the kernels below take that rectangle (rows x cols pixels, rs floats between rows, cs
 * between pixels) and work along the C contiguous channels, 16 (AVX-512F, masked tail)
 * or 8 (AVX2, portable tail) at a time, or one by one (portable C).
 *
 * Where windows do not overlap (stride >= window) the gradients store every position
 * of dx once (0 where nothing is routed) instead of zeroing dx and adding; where they
 * overlap, max_pool_grad adds at every position of the window without branching on
 * where the maximum is (data: branches on it mispredict). Each output row asks the
 * memory for the next one's input rows ahead (prefetch_row).
 *
 * Threads (pool.c): the forward ops split the output rows; the gradients split the
 * images and, for few images, the channels into chunks of 16 (the windows of one image
 * overlap, the channels never do), each task zeroing its own part of dx first.
 */
#include "cpukernels.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TFK_X86 1
#include <immintrin.h>
#else
#define TFK_X86 0
#endif

/* below this many window elements (n*ho*wo*kh*kw*c) a call runs on the caller alone
 * (the forward ops read at memory speed: a second thread pays off later) */
#define SERIAL_ELEMS_FWD 1500000.0
#define SERIAL_ELEMS_BWD 200000.0

/* one window's valid rectangle: x at its first valid pixel */
typedef struct {
    const float *x;
    float *dx;
    size_t rows, cols, rs, cs;
    int first_padded;   /* the window's first (row-major) position is padding */
    int write;          /* the gradients: windows disjoint, so store every valid
                           position of dx (0 where nothing is routed): no zeroing pass,
                           no read of dx */
} Win;

/* ---- portable C ------------------------------------------------------------------ */
static void max_fwd_portable(const Win *w, size_t c, float *y)
{
    for (size_t j = 0; j < c; j++)
        y[j] = -INFINITY;
    for (size_t r = 0; r < w->rows; r++)
        for (size_t q = 0; q < w->cols; q++) {
            const float *v = w->x + r * w->rs + q * w->cs;
            for (size_t j = 0; j < c; j++)  /* a NaN, once in y[j], stays */
                y[j] = (v[j] > y[j] || v[j] != v[j]) ? v[j] : y[j];
        }
}

static void max_bwd_portable(const Win *w, size_t c, const float *y, const float *dy)
{
    /* blocks of 16 channels, the channels innermost (the compiler's vectors), no branch
     * on the data: todo and the hits are 0/1 floats */
    for (size_t j0 = 0; j0 < c; j0 += 16) {
        const size_t nb = c - j0 < 16 ? c - j0 : 16;
        float todo[16], yb[16], db[16];
        uint32_t dbits[16];
        for (size_t j = 0; j < nb; j++) {
            yb[j] = y[j0 + j];
            db[j] = dy[j0 + j];
            todo[j] = (w->first_padded && yb[j] == -INFINITY) ? 0.0f : 1.0f;
        }
        memcpy(dbits, db, nb * sizeof(float));
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                const size_t o = r * w->rs + q * w->cs + j0;
                const float *restrict xv = w->x + o;
                float *restrict d = w->dx + o;
                if (w->write)
                    for (size_t j = 0; j < nb; j++) {
                        const int hit = (todo[j] != 0.0f) & (xv[j] == yb[j]);
                        d[j] = hit ? db[j] : 0.0f;
                        todo[j] = hit ? 0.0f : todo[j];
                    }
                else
                    for (size_t j = 0; j < nb; j++) {
                        const int hit = (todo[j] != 0.0f) & (xv[j] == yb[j]);
                        float add;      /* db[j] or 0, by its bits: no branch */
                        const uint32_t bits = dbits[j] & (0u - (uint32_t)hit);
                        memcpy(&add, &bits, sizeof add);
                        d[j] = d[j] + add;
                        todo[j] = hit ? 0.0f : todo[j];
                    }
            }
    }
}

static void avg_fwd_portable(const Win *w, size_t c, float *y)
{
    for (size_t j = 0; j < c; j++)
        y[j] = 0.0f;
    for (size_t r = 0; r < w->rows; r++)
        for (size_t q = 0; q < w->cols; q++) {
            const float *v = w->x + r * w->rs + q * w->cs;
            for (size_t j = 0; j < c; j++)
                y[j] += v[j];
        }
    const float cnt = (float)(w->rows * w->cols);
    for (size_t j = 0; j < c; j++)
        y[j] /= cnt;
}

static void avg_bwd_portable(const Win *w, size_t c, const float *dy)
{
    const float cnt = (float)(w->rows * w->cols);
    for (size_t r = 0; r < w->rows; r++)
        for (size_t q = 0; q < w->cols; q++) {
            float *d = w->dx + r * w->rs + q * w->cs;
            if (w->write)
                for (size_t j = 0; j < c; j++)
                    d[j] = dy[j] / cnt;
            else
                for (size_t j = 0; j < c; j++)
                    d[j] += dy[j] / cnt;
        }
}

/* the window w moved on by j channels */
static inline Win shift(const Win *w, size_t j)
{
    Win s = *w;
    if (s.x)
        s.x += j;
    if (s.dx)
        s.dx += j;
    return s;
}

#if TFK_X86
/* ---- AVX-512F: 16 channels a register, the tail masked ------------------------- */
#define T512 __attribute__((target("avx512f,avx512vl,fma")))

static inline T512 __mmask16 tail16(size_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* the lanes m of p: masked only for the tail (a masked store is slow on Zen 4: the
 * gradient took 0.28 ms with them where a copy of x takes 0.07) */
static inline __attribute__((always_inline)) T512 __m512 load16(const float *p, __mmask16 m)
{
    return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

static inline __attribute__((always_inline)) T512 void store16(float *p, __mmask16 m,
                                                               __m512 v)
{
    if (m == 0xFFFF)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}

static T512 void max_fwd_avx512(const Win *w, size_t c, float *y)
{
    const __m512 nanv = _mm512_set1_ps(NAN);
    for (size_t j = 0; j < c; j += 16) {
        const __mmask16 m = tail16(c - j);
        __m512 acc = _mm512_set1_ps(-INFINITY);
        __mmask16 nan = 0;
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                const __m512 v = load16(w->x + r * w->rs + q * w->cs + j, m);
                acc = _mm512_max_ps(v, acc);
                nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            }
        store16(y + j, m, _mm512_mask_blend_ps(nan, acc, nanv));
    }
}

static T512 void max_bwd_avx512(const Win *w, size_t c, const float *y, const float *dy)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (size_t j = 0; j < c; j += 16) {
        const __mmask16 m = tail16(c - j);
        const __m512 yv = load16(y + j, m);
        const __m512 dv = load16(dy + j, m);
        __mmask16 todo = m;
        if (w->first_padded)
            todo &= (__mmask16)~_mm512_cmp_ps_mask(yv, ninf, _CMP_EQ_OQ);
        if (w->write) {
            for (size_t r = 0; r < w->rows; r++)
                for (size_t q = 0; q < w->cols; q++) {
                    const size_t o = r * w->rs + q * w->cs + j;
                    const __m512 v = load16(w->x + o, m);
                    const __mmask16 hit = _mm512_mask_cmp_ps_mask(todo, v, yv, _CMP_EQ_OQ);
                    store16(w->dx + o, m, _mm512_maskz_mov_ps(hit, dv));
                    todo &= (__mmask16)~hit;
                }
            continue;
        }
        /* every position, without a branch (where the maximum is, is data: branching
         * on it mispredicts; 3x3/1 windows: 2.3 -> 1.2 ms) */
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                const size_t o = r * w->rs + q * w->cs + j;
                const __m512 v = load16(w->x + o, m);
                const __mmask16 hit = _mm512_mask_cmp_ps_mask(todo, v, yv, _CMP_EQ_OQ);
                const __m512 d = load16(w->dx + o, m);
                store16(w->dx + o, m, _mm512_add_ps(d, _mm512_maskz_mov_ps(hit, dv)));
                todo &= (__mmask16)~hit;
            }
    }
}

static T512 void avg_fwd_avx512(const Win *w, size_t c, float *y)
{
    const __m512 cnt = _mm512_set1_ps((float)(w->rows * w->cols));
    for (size_t j = 0; j < c; j += 16) {
        const __mmask16 m = tail16(c - j);
        __m512 acc = _mm512_setzero_ps();
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++)
                acc = _mm512_add_ps(acc, load16(w->x + r * w->rs + q * w->cs + j, m));
        store16(y + j, m, _mm512_div_ps(acc, cnt));
    }
}

static T512 void avg_bwd_avx512(const Win *w, size_t c, const float *dy)
{
    const __m512 cnt = _mm512_set1_ps((float)(w->rows * w->cols));
    for (size_t j = 0; j < c; j += 16) {
        const __mmask16 m = tail16(c - j);
        const __m512 g = _mm512_div_ps(load16(dy + j, m), cnt);
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                float *d = w->dx + r * w->rs + q * w->cs + j;
                store16(d, m, w->write ? g : _mm512_add_ps(load16(d, m), g));
            }
    }
}

/* ---- AVX2: 8 channels a register, the tail in portable C ------------------------ */
#define T256 __attribute__((target("avx2,fma")))

static T256 void max_fwd_avx2(const Win *w, size_t c, float *y)
{
    const __m256 nanv = _mm256_set1_ps(NAN);
    size_t j = 0;
    for (; j + 8 <= c; j += 8) {
        __m256 acc = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                const __m256 v = _mm256_loadu_ps(w->x + r * w->rs + q * w->cs + j);
                acc = _mm256_max_ps(v, acc);
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            }
        _mm256_storeu_ps(y + j, _mm256_blendv_ps(acc, nanv, nan));
    }
    if (j < c) {
        const Win s = shift(w, j);
        max_fwd_portable(&s, c - j, y + j);
    }
}

static T256 void max_bwd_avx2(const Win *w, size_t c, const float *y, const float *dy)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256 ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    size_t j = 0;
    for (; j + 8 <= c; j += 8) {
        const __m256 yv = _mm256_loadu_ps(y + j), dv = _mm256_loadu_ps(dy + j);
        __m256 todo = ones;
        if (w->first_padded)
            todo = _mm256_andnot_ps(_mm256_cmp_ps(yv, ninf, _CMP_EQ_OQ), todo);
        if (w->write) {
            for (size_t r = 0; r < w->rows; r++)
                for (size_t q = 0; q < w->cols; q++) {
                    const size_t o = r * w->rs + q * w->cs + j;
                    const __m256 hit = _mm256_and_ps(
                        _mm256_cmp_ps(_mm256_loadu_ps(w->x + o), yv, _CMP_EQ_OQ), todo);
                    _mm256_storeu_ps(w->dx + o, _mm256_and_ps(hit, dv));
                    todo = _mm256_andnot_ps(hit, todo);
                }
            continue;
        }
        for (size_t r = 0; r < w->rows; r++)        /* (no branch: see max_bwd_avx512) */
            for (size_t q = 0; q < w->cols; q++) {
                const size_t o = r * w->rs + q * w->cs + j;
                const __m256 hit = _mm256_and_ps(
                    _mm256_cmp_ps(_mm256_loadu_ps(w->x + o), yv, _CMP_EQ_OQ), todo);
                const __m256 d = _mm256_loadu_ps(w->dx + o);
                _mm256_storeu_ps(w->dx + o, _mm256_add_ps(d, _mm256_and_ps(hit, dv)));
                todo = _mm256_andnot_ps(hit, todo);
            }
    }
    if (j < c) {
        const Win s = shift(w, j);
        max_bwd_portable(&s, c - j, y + j, dy + j);
    }
}

static T256 void avg_fwd_avx2(const Win *w, size_t c, float *y)
{
    const __m256 cnt = _mm256_set1_ps((float)(w->rows * w->cols));
    size_t j = 0;
    for (; j + 8 <= c; j += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++)
                acc = _mm256_add_ps(acc, _mm256_loadu_ps(w->x + r * w->rs + q * w->cs + j));
        _mm256_storeu_ps(y + j, _mm256_div_ps(acc, cnt));
    }
    if (j < c) {
        const Win s = shift(w, j);
        avg_fwd_portable(&s, c - j, y + j);
    }
}

static T256 void avg_bwd_avx2(const Win *w, size_t c, const float *dy)
{
    const __m256 cnt = _mm256_set1_ps((float)(w->rows * w->cols));
    size_t j = 0;
    for (; j + 8 <= c; j += 8) {
        const __m256 g = _mm256_div_ps(_mm256_loadu_ps(dy + j), cnt);
        for (size_t r = 0; r < w->rows; r++)
            for (size_t q = 0; q < w->cols; q++) {
                float *d = w->dx + r * w->rs + q * w->cs + j;
                _mm256_storeu_ps(d, w->write ? g : _mm256_add_ps(_mm256_loadu_ps(d), g));
            }
    }
    if (j < c) {
        const Win s = shift(w, j);
        avg_bwd_portable(&s, c - j, dy + j);
    }
}
#endif

/* ---- drivers --------------------------------------------------------------------- */
typedef void (*fwd_fn)(const Win *, size_t, float *);
typedef void (*max_bwd_fn)(const Win *, size_t, const float *, const float *);
typedef void (*avg_bwd_fn)(const Win *, size_t, const float *);

typedef struct {
    const PoolGeom *g;
    const float *x, *y, *dy;
    float *out;
    fwd_fn fwd;
    max_bwd_fn max_bwd;
    avg_bwd_fn avg_bwd;
    size_t chunk, nchunks;  /* the gradients' channel chunks */
} Job;

/* the valid rectangle of window (oy, ox) of image b, at channel 0 */
static Win window(const PoolGeom *g, const float *x, float *dx, size_t b, size_t oy,
                  size_t ox)
{
    const ptrdiff_t ys = (ptrdiff_t)(oy * g->sh) - (ptrdiff_t)g->pt;
    const ptrdiff_t xs = (ptrdiff_t)(ox * g->sw) - (ptrdiff_t)g->pl;
    const size_t y0 = ys < 0 ? 0 : (size_t)ys, x0 = xs < 0 ? 0 : (size_t)xs;
    size_t y1 = (size_t)(ys + (ptrdiff_t)g->kh), x1 = (size_t)(xs + (ptrdiff_t)g->kw);
    if (y1 > g->h)
        y1 = g->h;
    if (x1 > g->w)
        x1 = g->w;
    const size_t off = ((b * g->h + y0) * g->w + x0) * g->c;
    Win win = {.x = x ? x + off : NULL, .dx = dx ? dx + off : NULL, .rows = y1 - y0,
               .cols = x1 - x0, .rs = g->w * g->c, .cs = g->c,
               .first_padded = ys < 0 || xs < 0};
    return win;
}

/* ask the memory for n floats at p (rw 1: to be written) */
static inline void prefetch(const float *p, size_t n, int rw)
{
    const char *c = (const char *)p;
    for (size_t off = 0; off < n * sizeof(float); off += 64) {
        if (rw)
            __builtin_prefetch(c + off, 1, 3);
        else
            __builtin_prefetch(c + off, 0, 3);
    }
}

/* ask for the input rows of output row (b, oy) (dx's too, where not NULL), and its
 * rows of y and dy: the window-by-window walk reads kh rows at once in pieces of c
 * floats, which the hardware prefetchers follow badly from memory */
static void prefetch_row(const PoolGeom *g, const Job *jb, size_t b, size_t oy, int grad)
{
    const ptrdiff_t ys = (ptrdiff_t)(oy * g->sh) - (ptrdiff_t)g->pt;
    const size_t y0 = ys < 0 ? 0 : (size_t)ys;
    const size_t y1 = (size_t)(ys + (ptrdiff_t)g->kh) < g->h ? (size_t)(ys + (ptrdiff_t)g->kh)
                                                              : g->h;
    const size_t row = g->w * g->c, orow = g->wo * g->c;
    for (size_t iy = y0; iy < y1; iy++) {
        if (jb->x)
            prefetch(jb->x + (b * g->h + iy) * row, row, 0);
        if (grad)
            prefetch(jb->out + (b * g->h + iy) * row, row, 1);
    }
    if (grad) {
        if (jb->y)
            prefetch(jb->y + (b * g->ho + oy) * orow, orow, 0);
        prefetch(jb->dy + (b * g->ho + oy) * orow, orow, 0);
    }
}

/* forward: task = one output row (b, oy) */
static void fwd_task(void *ctx, size_t task, int tid)
{
    const Job *jb = ctx;
    const PoolGeom *g = jb->g;
    const size_t b = task / g->ho, oy = task % g->ho;
    float *y = jb->out + (b * g->ho + oy) * g->wo * g->c;
    if (task + 1 < g->n * g->ho)            /* the next row, while this one computes */
        prefetch_row(g, jb, (task + 1) / g->ho, (task + 1) % g->ho, 0);
    for (size_t ox = 0; ox < g->wo; ox++) {
        const Win w = window(g, jb->x, NULL, b, oy, ox);
        jb->fwd(&w, g->c, y + ox * g->c);
    }
}

/* whether index i along an axis (stride s, window k, pad p, o windows) is in a window,
 * for disjoint windows (s >= k: only window (i + p) / s can hold it) */
static int covered(size_t i, size_t s, size_t k, size_t p, size_t o)
{
    const size_t q = i + p, win = q / s;
    return win < o && q - win * s < k;
}

/* gradients: task = (image b, channel chunk k): zero that part of dx (for disjoint
 * windows only the positions no window covers: the windows store the rest), then add
 * (store) each window's share */
static void bwd_task(void *ctx, size_t task, int tid)
{
    const Job *jb = ctx;
    const PoolGeom *g = jb->g;
    const size_t b = task / jb->nchunks, c0 = (task % jb->nchunks) * jb->chunk;
    const size_t cl = g->c - c0 < jb->chunk ? g->c - c0 : jb->chunk;
    const int write = g->sh >= g->kh && g->sw >= g->kw;
    float *dx = jb->out;
    float *img = dx + b * g->h * g->w * g->c + c0;
    if (!write && cl == g->c)
        memset(img, 0, g->h * g->w * g->c * sizeof(float));
    else
        for (size_t iy = 0; iy < g->h; iy++) {
            const int row = write && covered(iy, g->sh, g->kh, g->pt, g->ho);
            for (size_t ix = 0; ix < g->w; ix++)
                if (!row || !covered(ix, g->sw, g->kw, g->pl, g->wo))
                    memset(img + (iy * g->w + ix) * g->c, 0, cl * sizeof(float));
        }
    for (size_t oy = 0; oy < g->ho; oy++) {
        if (oy + 1 < g->ho)
            prefetch_row(g, jb, b, oy + 1, 1);
        for (size_t ox = 0; ox < g->wo; ox++) {
            Win w = window(g, jb->x, dx, b, oy, ox);
            const size_t yo = ((b * g->ho + oy) * g->wo + ox) * g->c + c0;
            w = shift(&w, c0);
            w.write = write;
            if (jb->max_bwd)
                jb->max_bwd(&w, cl, jb->y + yo, jb->dy + yo);
            else
                jb->avg_bwd(&w, cl, jb->dy + yo);
        }
    }
}

static double elems(const PoolGeom *g)
{
    return (double)g->n * (double)g->ho * (double)g->wo * (double)g->kh * (double)g->kw
           * (double)g->c;
}

static int nthreads_for(const PoolGeom *g, double serial, size_t ntasks, int nthreads)
{
    if (elems(g) < serial || nthreads < 1)
        return 1;
    return (size_t)nthreads > ntasks ? (int)ntasks : nthreads;
}

static void run_fwd(const PoolGeom *g, const float *x, float *y, fwd_fn fn, int nthreads)
{
    Job jb = {.g = g, .x = x, .out = y, .fwd = fn};
    const size_t ntasks = g->n * g->ho;
    tfk_pool_run(fwd_task, &jb, ntasks, nthreads_for(g, SERIAL_ELEMS_FWD, ntasks, nthreads));
}

static void run_bwd(Job *jb, int nthreads)
{
    const PoolGeom *g = jb->g;
    /* few images for the threads: chunks of channels too (multiples of 16 floats) */
    size_t nchunks = 1;
    const size_t want = (size_t)(nthreads > 1 ? nthreads : 1) * 4;
    if (nthreads > 1 && g->n < want && g->c > 16) {
        const size_t most = (g->c + 15) / 16;
        nchunks = (want + g->n - 1) / g->n;
        if (nchunks > most)
            nchunks = most;
    }
    jb->chunk = ((g->c + nchunks - 1) / nchunks + 15) / 16 * 16;
    if (jb->chunk > g->c)
        jb->chunk = g->c;
    jb->nchunks = (g->c + jb->chunk - 1) / jb->chunk;
    const size_t ntasks = g->n * jb->nchunks;
    tfk_pool_run(bwd_task, jb, ntasks, nthreads_for(g, SERIAL_ELEMS_BWD, ntasks, nthreads));
}

int tfk_max_pool(const PoolGeom *g, const float *x, float *y, int isa, int nthreads)
{
    fwd_fn fn = max_fwd_portable;
#if TFK_X86
    if (isa == ISA_AVX512)
        fn = max_fwd_avx512;
    else if (isa == ISA_AVX2)
        fn = max_fwd_avx2;
#endif
    run_fwd(g, x, y, fn, nthreads);
    return 0;
}

int tfk_avg_pool(const PoolGeom *g, const float *x, float *y, int isa, int nthreads)
{
    fwd_fn fn = avg_fwd_portable;
#if TFK_X86
    if (isa == ISA_AVX512)
        fn = avg_fwd_avx512;
    else if (isa == ISA_AVX2)
        fn = avg_fwd_avx2;
#endif
    run_fwd(g, x, y, fn, nthreads);
    return 0;
}

int tfk_max_pool_grad(const PoolGeom *g, const float *x, const float *y, const float *dy,
                      float *dx, int isa, int nthreads)
{
    Job jb = {.g = g, .x = x, .y = y, .dy = dy, .out = dx, .max_bwd = max_bwd_portable};
#if TFK_X86
    if (isa == ISA_AVX512)
        jb.max_bwd = max_bwd_avx512;
    else if (isa == ISA_AVX2)
        jb.max_bwd = max_bwd_avx2;
#endif
    run_bwd(&jb, nthreads);
    return 0;
}

int tfk_avg_pool_grad(const PoolGeom *g, const float *dy, float *dx, int isa, int nthreads)
{
    Job jb = {.g = g, .dy = dy, .out = dx, .avg_bwd = avg_bwd_portable};
#if TFK_X86
    if (isa == ISA_AVX512)
        jb.avg_bwd = avg_bwd_avx512;
    else if (isa == ISA_AVX2)
        jb.avg_bwd = avg_bwd_avx2;
#endif
    run_bwd(&jb, nthreads);
    return 0;
}
