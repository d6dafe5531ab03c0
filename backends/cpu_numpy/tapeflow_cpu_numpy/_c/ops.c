/* The drivers: conv2d (indirect GEMM), conv2d_filter_grad (an indirect GEMM over the
 * pixels, per-thread partial sums) and matmul, each cutting its work into tasks for
 * the pool (pool.c) and calling the micro-kernel (ukernels.c) tile by tile.
 * module.c has checked every size and buffer before these run; they run without the
 * GIL and touch no Python object.
 */
#include "cpukernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* below this many multiply-adds a call runs on the calling thread alone */
#define SERIAL_MACS 200000.0

static int threads_for(double macs, size_t ntasks, int nthreads)
{
    if (macs < SERIAL_MACS || nthreads < 1)
        return 1;
    if ((size_t)nthreads > ntasks)
        return (int)ntasks;
    return nthreads;
}

static void elu_tile(float *c, size_t rows, size_t cols, size_t ldc)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            const float v = c[i * ldc + j];
            if (v < 0.0f)
                c[i * ldc + j] = expm1f(v);
        }
}

/* x zero-padded by the geometry's pads into xp (n, h+pt+pb, w+pl+pr, c) */
typedef struct {
    const ConvGeom *g;
    const float *x;
    float *xp;
} PadJob;

static void pad_task(void *vjob, size_t b, int tid)
{
    const PadJob *j = vjob;
    const ConvGeom *g = j->g;
    (void)tid;
    const size_t hp = g->h + g->pt + g->pb, wp = g->w + g->pl + g->pr, c = g->c;
    float *dst = j->xp + b * hp * wp * c;
    const float *src = j->x + b * g->h * g->w * c;
    memset(dst, 0, g->pt * wp * c * sizeof(float));
    for (size_t y = 0; y < g->h; y++) {
        float *row = dst + (g->pt + y) * wp * c;
        memset(row, 0, g->pl * c * sizeof(float));
        memcpy(row + g->pl * c, src + y * g->w * c, g->w * c * sizeof(float));
        memset(row + (g->pl + g->w) * c, 0, g->pr * c * sizeof(float));
    }
    memset(dst + (g->pt + g->h) * wp * c, 0, g->pb * wp * c * sizeof(float));
}

/* xp (malloc'ed) = x zero-padded, and *gp the geometry of a convolution over it (no
 * pads); NULL where memory ran out */
static float *padded_input(const ConvGeom *g, const float *x, ConvGeom *gp, int nthreads)
{
    *gp = *g;
    gp->h += g->pt + g->pb;
    gp->w += g->pl + g->pr;
    gp->pt = gp->pb = gp->pl = gp->pr = 0;
    float *xp = malloc(gp->n * gp->h * gp->w * gp->c * sizeof(float));
    if (xp) {
        PadJob pj = {.g = g, .x = x, .xp = xp};
        tfk_pool_run(pad_task, &pj, g->n,
                     threads_for((double)gp->n * gp->h * gp->w * gp->c * 8.0, g->n, nthreads));
    }
    return xp;
}

/* ---- convolution forward --------------------------------------------------------- */
typedef struct {
    const ConvGeom *g;
    const float *x, *wp, *bp, *zero;
    float *y;
    int act;
    float alpha;
    const UKernel *uk;
    size_t m, k, npanels, rows_per_task;
    const float **ptrs; /* per thread: ks*MR pointers */
    const ptrdiff_t *off; /* the taps' offsets */
    int merge;          /* the kw taps of a filter row are adjacent pixels (dw == 1) */
} ConvJob;

/* an output pixel (b, oy, ox), stepped through the rows of a task without divisions */
typedef struct {
    size_t b, oy, ox;
} Cursor;

static void cursor_at(const ConvGeom *g, size_t m, Cursor *cu)
{
    cu->ox = m % g->wo;
    const size_t rest = m / g->wo;
    cu->oy = rest % g->ho;
    cu->b = rest / g->ho;
}

static void cursor_next(const ConvGeom *g, Cursor *cu)
{
    if (++cu->ox == g->wo) {
        cu->ox = 0;
        if (++cu->oy == g->ho) {
            cu->oy = 0;
            cu->b++;
        }
    }
}

/* the element offsets of the taps from a window's first pixel (ks of them) */
static void tap_offsets(const ConvGeom *g, ptrdiff_t *off)
{
    for (size_t ki = 0; ki < g->kh; ki++)
        for (size_t kj = 0; kj < g->kw; kj++)
            off[ki * g->kw + kj] = (ptrdiff_t)((ki * g->dh * g->w + kj * g->dw) * g->c);
}

/* ptr[t * stride] (t < kh*kw): the input pixel tap t of pixel cu's window sees, or
 * zero (the shared zero row) where the tap falls in the padding */
static void window(const ConvGeom *g, const ptrdiff_t *off, const float *x, const float *zero,
                   const Cursor *cu, const float **ptr, size_t stride)
{
    const float *img = x + cu->b * g->h * g->w * g->c;
    const ptrdiff_t iy0 = (ptrdiff_t)(cu->oy * g->sh) - (ptrdiff_t)g->pt;
    const ptrdiff_t ix0 = (ptrdiff_t)(cu->ox * g->sw) - (ptrdiff_t)g->pl;
    const size_t ks = g->kh * g->kw;
    if (iy0 >= 0 && ix0 >= 0 && iy0 + (ptrdiff_t)((g->kh - 1) * g->dh) < (ptrdiff_t)g->h
        && ix0 + (ptrdiff_t)((g->kw - 1) * g->dw) < (ptrdiff_t)g->w) {
        const float *base = img + ((size_t)iy0 * g->w + (size_t)ix0) * g->c;
        for (size_t t = 0; t < ks; t++)
            ptr[t * stride] = base + off[t];
        return;
    }
    for (size_t ki = 0; ki < g->kh; ki++) {
        const ptrdiff_t iy = iy0 + (ptrdiff_t)(ki * g->dh);
        const int row_in = iy >= 0 && iy < (ptrdiff_t)g->h;
        for (size_t kj = 0; kj < g->kw; kj++) {
            const ptrdiff_t ix = ix0 + (ptrdiff_t)(kj * g->dw);
            const float *p = zero;
            if (row_in && ix >= 0 && ix < (ptrdiff_t)g->w)
                p = img + ((size_t)iy * g->w + (size_t)ix) * g->c;
            ptr[(ki * g->kw + kj) * stride] = p;
        }
    }
}

/* whether pixel cu's window lies inside the image horizontally */
static int h_inside(const ConvGeom *g, const Cursor *cu)
{
    const ptrdiff_t ix0 = (ptrdiff_t)(cu->ox * g->sw) - (ptrdiff_t)g->pl;
    return ix0 >= 0 && ix0 + (ptrdiff_t)((g->kw - 1) * g->dw) < (ptrdiff_t)g->w;
}

/* ptr[ki * stride] (ki < kh): the first of the kw adjacent pixels (dw == 1) filter row
 * ki of pixel cu's window sees (their kw*c channels are contiguous in NHWC), or the
 * zero row (kw*c zeros) where that row falls in the padding; the window must lie
 * inside the image horizontally (h_inside) */
static void row_window(const ConvGeom *g, const float *x, const float *zero, const Cursor *cu,
                       const float **ptr, size_t stride)
{
    const float *img = x + cu->b * g->h * g->w * g->c;
    const ptrdiff_t iy0 = (ptrdiff_t)(cu->oy * g->sh) - (ptrdiff_t)g->pt;
    const size_t ix0 = cu->ox * g->sw - g->pl, rowstep = g->dh * g->w * g->c;
    if (iy0 >= 0 && iy0 + (ptrdiff_t)((g->kh - 1) * g->dh) < (ptrdiff_t)g->h) {
        const float *p = img + ((size_t)iy0 * g->w + ix0) * g->c;
        for (size_t ki = 0; ki < g->kh; ki++, p += rowstep)
            ptr[ki * stride] = p;
        return;
    }
    for (size_t ki = 0; ki < g->kh; ki++) {
        const ptrdiff_t iy = iy0 + (ptrdiff_t)(ki * g->dh);
        ptr[ki * stride] = iy >= 0 && iy < (ptrdiff_t)g->h
                           ? img + ((size_t)iy * g->w + ix0) * g->c : zero;
    }
}

static void conv_task(void *vjob, size_t task, int tid)
{
    const ConvJob *j = vjob;
    const ConvGeom *g = j->g;
    const size_t MR = j->uk->mr, NR = j->uk->nr, ks = g->kh * g->kw, o = g->o;
    const float **ptr = j->ptrs + (size_t)tid * ks * MR;
    const size_t m_begin = task * j->rows_per_task;
    const size_t m_end = MIN(j->m, m_begin + j->rows_per_task);
    Cursor cu;
    cursor_at(g, m_begin, &cu);
    for (size_t m0 = m_begin; m0 < m_end; m0 += MR) {
        const size_t mr = MIN(MR, m_end - m0);
        /* a block whose windows all lie inside horizontally reads each filter row's
         * kw*c contiguous floats as one tap (kh taps): a third of the pointers of a
         * 3x3 filter, and taps long enough for the kernel's loop with 1-3 channels */
        int merged = j->merge;
        if (merged) {
            Cursor probe = cu;
            for (size_t i = 0; i < mr && merged; i++) {
                merged = h_inside(g, &probe);
                cursor_next(g, &probe);
            }
        }
        const size_t taps = merged ? g->kh : ks, kc = merged ? g->kw * g->c : g->c;
        const size_t swc = g->sw * g->c;
        for (size_t i = 0; i < MR; i++) {      /* (rows past mr repeat row 0) */
            if (i < mr) {
                if (merged && i > 0 && cu.ox > 0) {
                    /* the next pixel of the same output row: sw*c floats on */
                    for (size_t t = 0; t < taps; t++) {
                        const float *prev = ptr[t * MR + i - 1];
                        ptr[t * MR + i] = prev == j->zero ? prev : prev + swc;
                    }
                } else if (merged)
                    row_window(g, j->x, j->zero, &cu, ptr + i, MR);
                else
                    window(g, j->off, j->x, j->zero, &cu, ptr + i, MR);
                cursor_next(g, &cu);
            } else {
                for (size_t t = 0; t < taps; t++)
                    ptr[t * MR + i] = ptr[t * MR];
            }
        }
        for (size_t p = 0; p < j->npanels; p++) {
            TileArgs t = {
                .mr = mr, .nr = MIN(NR, o - p * NR), .kc = kc, .ks = taps,
                .a = ptr, .a_step = 1, .w = j->wp + p * j->k * NR, .w_stride = NR,
                .bias = j->bp ? j->bp + p * NR : NULL, .c = j->y + m0 * o + p * NR,
                .ldc = o, .load_c = 0, .act = j->act == ACT_ELU ? ACT_NONE : j->act,
                .alpha = j->alpha};
            j->uk->fn(&t);
        }
        if (j->act == ACT_ELU)
            elu_tile(j->y + m0 * o, mr, o, o);
    }
}

/* below this many channels a padded convolution runs on a zero-padded copy of its
 * input (small: few channels), where every window lies inside and each filter row is
 * one tap of kw*c floats (the indirect kernel's loop is too short with 1-7 floats a
 * tap; the first layer of a CNN: 1-3 channels) */
#define PAD_COPY_BELOW_C 8

int tfk_conv2d(const ConvGeom *g, const float *x, const float *w, const float *bias,
               float *y, int act, float alpha, int isa, int nthreads)
{
    if ((g->pt || g->pb || g->pl || g->pr) && g->c < PAD_COPY_BELOW_C && g->kw > 1
        && g->dw == 1) {
        ConvGeom gp;
        float *xp = padded_input(g, x, &gp, nthreads);
        if (!xp)
            return -1;
        const int rc = tfk_conv2d(&gp, xp, w, bias, y, act, alpha, isa, nthreads);
        free(xp);
        return rc;
    }
    const UKernel *uk = tfk_pick_kernel(isa, g->o);
    const size_t MR = uk->mr, NR = uk->nr, ks = g->kh * g->kw, o = g->o;
    const size_t k = ks * g->c, npanels = CEIL_DIV(o, NR), m = g->n * g->ho * g->wo;
    /* the filter in panels of NR output channels (zero-padded), the bias likewise */
    float *wp = malloc(npanels * k * NR * sizeof(float));
    float *bp = bias ? calloc(npanels * NR, sizeof(float)) : NULL;
    float *zero = calloc(g->kw * g->c, sizeof(float));
    const size_t nblocks = CEIL_DIV(m, MR);
    size_t ntasks = (size_t)(nthreads > 0 ? nthreads : 1) * 8;
    if (ntasks > nblocks)
        ntasks = nblocks;
    const size_t rows_per_task = MR * CEIL_DIV(nblocks, ntasks);
    ntasks = CEIL_DIV(m, rows_per_task);
    const int nt = threads_for((double)m * (double)k * (double)o, ntasks, nthreads);
    const float **ptrs = malloc((size_t)nt * ks * MR * sizeof(*ptrs));
    ptrdiff_t *off = malloc(ks * sizeof(*off));
    int rc = 0;
    if (!wp || (bias && !bp) || !zero || !ptrs || !off) {
        rc = -1;
        goto done;
    }
    for (size_t p = 0; p < npanels; p++)
        for (size_t r = 0; r < k; r++)
            for (size_t jj = 0; jj < NR; jj++) {
                const size_t col = p * NR + jj;
                wp[(p * k + r) * NR + jj] = col < o ? w[r * o + col] : 0.0f;
            }
    if (bias)
        memcpy(bp, bias, o * sizeof(float));
    ConvJob job = {.g = g, .x = x, .wp = wp, .bp = bp, .zero = zero, .y = y, .act = act,
                   .alpha = alpha, .uk = uk, .m = m, .k = k, .npanels = npanels,
                   .rows_per_task = rows_per_task, .ptrs = ptrs, .off = off,
                   .merge = g->kw > 1 && g->dw == 1};
    tap_offsets(g, off);
    tfk_pool_run(conv_task, &job, ntasks, nt);
done:
    free(off);
    free(wp);
    free(bp);
    free(zero);
    free((void *)ptrs);
    return rc;
}

/* ---- convolution filter gradient ------------------------------------------------- *
 * dw[(ki, kj, ci)][o] = sum over pixels of x[window tap (ki, kj), ci] * dy[pixel][o]:
 * a GEMM whose rows are the R = kh*kw*c filter entries, columns the o outputs and K the
 * N*Ho*Wo pixels. It is an indirect GEMM again, with the output rows as the "taps":
 * along one output row (wo pixels) the input value row (ki, kj, ci) reads moves by
 * sw*c floats a pixel (a_step), and dy's rows are contiguous across output rows (B in
 * place). So each tile gets, per output row of its group, MR pointers into the input
 * -- no copy of the windows -- and the input is zero-padded once (a copy) when the
 * convolution pads, so that every window lies inside it. Tasks are groups of output
 * rows; each thread sums into its own partial dw, added up at the end. */
typedef struct {
    const ConvGeom *g;       /* (the padded input's geometry: no pads) */
    const float *x, *dy;
    const UKernel *uk;
    size_t r, rows, group, npanels, nfull;
    const ptrdiff_t *roff;   /* per filter entry r: its offset from a window's start */
    float *partial;          /* per thread: r*o */
    float *tail;             /* per thread: group*wo*NR (the last, partial panel of dy) */
    const float **ptrs;      /* per thread: group*MR */
} FgJob;

static void fg_task(void *vjob, size_t task, int tid)
{
    const FgJob *j = vjob;
    const ConvGeom *g = j->g;
    const size_t MR = j->uk->mr, NR = j->uk->nr, o = g->o, r = j->r, wo = g->wo;
    const size_t q0 = task * j->group, nq = MIN(j->group, j->rows - q0);
    float *acc = j->partial + (size_t)tid * r * o;
    float *tail = j->tail ? j->tail + (size_t)tid * j->group * wo * NR : NULL;
    const float **ptr = j->ptrs + (size_t)tid * j->group * MR;
    const ptrdiff_t step = (ptrdiff_t)(g->sw * g->c);
    if (tail) {         /* dy's last output columns, zero-padded to NR */
        const size_t c0 = j->nfull * NR, cn = o - c0;
        for (size_t kk = 0; kk < nq * wo; kk++) {
            const float *src = j->dy + (q0 * wo + kk) * o + c0;
            for (size_t jj = 0; jj < NR; jj++)
                tail[kk * NR + jj] = jj < cn ? src[jj] : 0.0f;
        }
    }
    for (size_t r0 = 0; r0 < r; r0 += MR) {
        const size_t mr = MIN(MR, r - r0);
        for (size_t t = 0; t < nq; t++) {
            const size_t q = q0 + t, oy = q % g->ho, b = q / g->ho;
            const float *start = j->x + (b * g->h + oy * g->sh) * g->w * g->c;
            for (size_t i = 0; i < MR; i++)
                ptr[t * MR + i] = start + j->roff[r0 + (i < mr ? i : 0)];
        }
        for (size_t p = 0; p < j->npanels; p++) {
            const int full = p < j->nfull;
            TileArgs t = {
                .mr = mr, .nr = MIN(NR, o - p * NR), .kc = wo, .ks = nq, .a = ptr,
                .a_step = step, .w = full ? j->dy + q0 * wo * o + p * NR : tail,
                .w_stride = full ? o : NR, .bias = NULL, .c = acc + r0 * o + p * NR,
                .ldc = o, .load_c = 1, .act = ACT_NONE, .alpha = 0.0f};
            j->uk->fn(&t);
        }
    }
}

int tfk_conv2d_filter_grad(const ConvGeom *g0, const float *x, const float *dy, float *dw,
                           int isa, int nthreads)
{
    const size_t r = g0->kh * g0->kw * g0->c, rows = g0->n * g0->ho;
    const UKernel *uk = tfk_pick_kernel_rows(isa, g0->o, r);
    const size_t MR = uk->mr, NR = uk->nr, o = g0->o;
    const int padded = g0->pt || g0->pl || g0->pb || g0->pr;
    ConvGeom g = *g0;
    float *xp = padded ? padded_input(g0, x, &g, nthreads) : NULL;
    /* groups of output rows of >= ~256 pixels, >= 4 per thread where there are enough */
    size_t group = CEIL_DIV(256, g.wo);
    const size_t per_thread = CEIL_DIV(rows, (size_t)(nthreads > 0 ? nthreads : 1) * 4);
    if (group > per_thread)
        group = per_thread > 0 ? per_thread : 1;
    const size_t ntasks = CEIL_DIV(rows, group);
    const size_t nfull = o / NR, npanels = CEIL_DIV(o, NR);
    const int nt = threads_for((double)rows * (double)g.wo * (double)r * (double)o, ntasks,
                               nthreads);
    float *partial = calloc((size_t)nt * r * o, sizeof(float));
    float *tail = npanels > nfull ? malloc((size_t)nt * group * g.wo * NR * sizeof(float)) : NULL;
    const float **ptrs = malloc((size_t)nt * group * MR * sizeof(*ptrs));
    ptrdiff_t *roff = malloc(r * sizeof(*roff));
    int rc = 0;
    if ((padded && !xp) || !partial || (npanels > nfull && !tail) || !ptrs || !roff) {
        rc = -1;
        goto done;
    }
    for (size_t ki = 0, e = 0; ki < g.kh; ki++)
        for (size_t kj = 0; kj < g.kw; kj++)
            for (size_t ci = 0; ci < g.c; ci++)
                roff[e++] = (ptrdiff_t)((ki * g.dh * g.w + kj * g.dw) * g.c + ci);
    FgJob job = {.g = &g, .x = padded ? xp : x, .dy = dy, .uk = uk, .r = r, .rows = rows,
                 .group = group, .npanels = npanels, .nfull = nfull, .roff = roff,
                 .partial = partial, .tail = tail, .ptrs = ptrs};
    tfk_pool_run(fg_task, &job, ntasks, nt);
    memcpy(dw, partial, r * o * sizeof(float));
    for (int t = 1; t < nt; t++) {
        const float *src = partial + (size_t)t * r * o;
        for (size_t i = 0; i < r * o; i++)
            dw[i] += src[i];
    }
done:
    free(xp);
    free(partial);
    free(tail);
    free((void *)ptrs);
    free(roff);
    return rc;
}

/* ---- matmul ---------------------------------------------------------------------- */
#define MM_KB 256        /* K block: a block of A's rows and of a panel stay in cache */
#define MM_ROWS 64       /* rows of a task (rounded to MR) */

typedef struct {
    const float *a;
    size_t lda, m, n, k;
    float *c;
    const float *const *bp;  /* per panel: its first row */
    const size_t *bs;        /* per panel: its row stride */
    const UKernel *uk;
    size_t rows_per_task, panels_per_task, ntask_p, npanels;
    const float **ptrs;      /* per thread: MR */
} MmJob;

static void mm_task(void *vjob, size_t task, int tid)
{
    const MmJob *j = vjob;
    const size_t MR = j->uk->mr, NR = j->uk->nr;
    const size_t tm = task / j->ntask_p, tp = task % j->ntask_p;
    const size_t r_begin = tm * j->rows_per_task, r_end = MIN(j->m, r_begin + j->rows_per_task);
    const size_t p_begin = tp * j->panels_per_task;
    const size_t p_end = MIN(j->npanels, p_begin + j->panels_per_task);
    const float **ptr = j->ptrs + (size_t)tid * MR;
    for (size_t k0 = 0; k0 < j->k; k0 += MM_KB) {
        const size_t kn = MIN(MM_KB, j->k - k0);
        for (size_t p = p_begin; p < p_end; p++) {
            /* (a panel read in place is not copied into a contiguous block first:
             * measured slower on Zen 4, the prefetchers follow B's rows) */
            const float *wblk = j->bp[p] + k0 * j->bs[p];
            const size_t wstride = j->bs[p];
            /* the next panel's block, prefetched a slice after each row block's tile
             * (a strided panel of a wide B is a page per row: the hardware prefetchers
             * do not cross pages) */
            const int pf = p + 1 < p_end && j->bs[p + 1] != NR;
            const float *next = pf ? j->bp[p + 1] + k0 * j->bs[p + 1] : NULL;
            const size_t nblk = CEIL_DIV(r_end - r_begin, MR);
            const size_t slice = CEIL_DIV(kn, nblk);
            size_t pk = 0;
            for (size_t m0 = r_begin; m0 < r_end; m0 += MR) {
                const size_t mr = MIN(MR, r_end - m0);
                if (pf) {
                    for (size_t e = MIN(kn, pk + slice); pk < e; pk++) {
                        __builtin_prefetch(next + pk * j->bs[p + 1]);
                        __builtin_prefetch(next + pk * j->bs[p + 1] + 16);
                    }
                }
                for (size_t i = 0; i < MR; i++)
                    ptr[i] = j->a + (m0 + (i < mr ? i : 0)) * j->lda + k0;
                TileArgs t = {
                    .mr = mr, .nr = MIN(NR, j->n - p * NR), .kc = kn, .ks = 1, .a = ptr,
                    .a_step = 1, .w = wblk, .w_stride = wstride,
                    .bias = NULL, .c = j->c + m0 * j->n + p * NR, .ldc = j->n,
                    .load_c = k0 > 0, .act = ACT_NONE, .alpha = 0.0f};
                j->uk->fn(&t);
            }
        }
    }
}

typedef struct {
    const float *b;   /* (n, k): B transposed */
    size_t n, k, nr;
    float *packed;    /* per panel: k*nr */
} PackJob;

static void pack_bt_task(void *vjob, size_t p, int tid)
{
    const PackJob *j = vjob;
    (void)tid;
    float *dst = j->packed + p * j->k * j->nr;
    for (size_t jj = 0; jj < j->nr; jj++) {
        const size_t col = p * j->nr + jj;
        if (col < j->n) {
            const float *src = j->b + col * j->k;
            for (size_t kk = 0; kk < j->k; kk++)
                dst[kk * j->nr + jj] = src[kk];
        } else {
            for (size_t kk = 0; kk < j->k; kk++)
                dst[kk * j->nr + jj] = 0.0f;
        }
    }
}

/* c (m x n) = the transpose of ct (n x m), in blocks */
static void transpose_into(const float *ct, float *c, size_t m, size_t n)
{
    for (size_t j0 = 0; j0 < n; j0 += 32)
        for (size_t i0 = 0; i0 < m; i0 += 32)
            for (size_t i = i0; i < MIN(m, i0 + 32); i++)
                for (size_t j = j0; j < MIN(n, j0 + 32); j++)
                    c[i * n + j] = ct[j * m + i];
}

int tfk_matmul(const float *a, const float *b, float *c, size_t m, size_t n, size_t k,
               int transpose_a, int transpose_b, int isa, int nthreads)
{
    if (transpose_b && (double)m * (double)k + (double)m * (double)n < (double)n * (double)k) {
        /* B given (n, k) and larger than A and C: C^T = B @ op(A)^T reads B's rows in
         * place (packing op(A)^T, small), then C is C^T transposed (a dense layer's
         * input gradient dy @ W^T: no pass over the whole weight matrix) */
        float *ct = malloc(n * m * sizeof(float));
        if (!ct)
            return -1;
        const int rc = tfk_matmul(b, a, ct, n, m, k, 0, !transpose_a, isa, nthreads);
        if (rc == 0)
            transpose_into(ct, c, m, n);
        free(ct);
        return rc;
    }
    const UKernel *uk = tfk_pick_kernel(isa, n);
    const size_t MR = uk->mr, NR = uk->nr;
    const size_t npanels = CEIL_DIV(n, NR), nfull = n / NR;
    const double macs = (double)m * (double)n * (double)k;
    float *at = NULL, *packed = NULL;
    const float **bp = malloc(npanels * sizeof(*bp));
    size_t *bs = malloc(npanels * sizeof(*bs));
    const float **ptrs = NULL;
    int rc = 0;
    if (!bp || !bs) {
        rc = -1;
        goto done;
    }
    if (transpose_a) {   /* A is given (k, m): its transpose, copied in blocks */
        at = malloc(m * k * sizeof(float));
        if (!at) {
            rc = -1;
            goto done;
        }
        for (size_t k0 = 0; k0 < k; k0 += 32)
            for (size_t i0 = 0; i0 < m; i0 += 32)
                for (size_t kk = k0; kk < MIN(k, k0 + 32); kk++)
                    for (size_t i = i0; i < MIN(m, i0 + 32); i++)
                        at[i * k + kk] = a[kk * m + i];
        a = at;
    }
    if (transpose_b) {   /* B is given (n, k): every panel packed */
        packed = malloc(npanels * k * NR * sizeof(float));
        if (!packed) {
            rc = -1;
            goto done;
        }
        PackJob pj = {.b = b, .n = n, .k = k, .nr = NR, .packed = packed};
        tfk_pool_run(pack_bt_task, &pj, npanels,
                     threads_for(macs / 8.0, npanels, nthreads));
        for (size_t p = 0; p < npanels; p++) {
            bp[p] = packed + p * k * NR;
            bs[p] = NR;
        }
    } else {             /* B (k, n): its full panels read in place, the last one packed */
        for (size_t p = 0; p < nfull; p++) {
            bp[p] = b + p * NR;
            bs[p] = n;
        }
        if (npanels > nfull) {
            packed = malloc(k * NR * sizeof(float));
            if (!packed) {
                rc = -1;
                goto done;
            }
            const size_t c0 = nfull * NR, cn = n - c0;
            for (size_t kk = 0; kk < k; kk++)
                for (size_t jj = 0; jj < NR; jj++)
                    packed[kk * NR + jj] = jj < cn ? b[kk * n + c0 + jj] : 0.0f;
            bp[nfull] = packed;
            bs[nfull] = NR;
        }
    }
    const size_t rows_per_task = MIN(MR * CEIL_DIV(m, MR), MR * CEIL_DIV(MM_ROWS, MR));
    const size_t ntask_m = CEIL_DIV(m, rows_per_task);
    size_t want_p = CEIL_DIV((size_t)(nthreads > 0 ? nthreads : 1) * 4, ntask_m);
    if (want_p > npanels)
        want_p = npanels;
    const size_t panels_per_task = CEIL_DIV(npanels, want_p);
    const size_t ntask_p = CEIL_DIV(npanels, panels_per_task);
    const size_t ntasks = ntask_m * ntask_p;
    const int nt = threads_for(macs, ntasks, nthreads);
    ptrs = malloc((size_t)nt * MR * sizeof(*ptrs));
    if (!ptrs) {
        rc = -1;
        goto done;
    }
    MmJob job = {.a = a, .lda = k, .m = m, .n = n, .k = k, .c = c, .bp = bp, .bs = bs,
                 .uk = uk, .rows_per_task = rows_per_task, .panels_per_task = panels_per_task,
                 .ntask_p = ntask_p, .npanels = npanels, .ptrs = ptrs};
    tfk_pool_run(mm_task, &job, ntasks, nt);
done:
    free(at);
    free(packed);
    free((void *)bp);
    free(bs);
    free((void *)ptrs);
    return rc;
}
