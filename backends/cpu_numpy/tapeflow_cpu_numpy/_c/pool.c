/* The persistent thread pool: created lazily (the first call that wants more than one
 * thread starts the workers it needs), the caller is thread 0 and works too, tasks are
 * handed out by an atomic counter. A second call while one runs (another Python thread:
 * the kernels run without the GIL) does not wait: it runs its tasks on its own thread.
 * After fork() the child has none of the parent's workers: the pool is forgotten in the
 * child (pthread_atfork) and re-created there on first use. tfk_pool_shutdown (at the
 * interpreter's exit, Py_AtExit) joins the workers.
 */
#define _GNU_SOURCE
#include "cpukernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_t th[TFK_MAX_THREADS];
    int nworkers;           /* started workers: tids 1..nworkers */
    unsigned long born[TFK_MAX_THREADS]; /* the generation each worker was started at */
    unsigned long gen;      /* job generation */
    int shutdown;
    tfk_task_fn fn;
    void *ctx;
    size_t ntasks;
    int nactive;            /* tids < nactive take part in this job */
    int pending;            /* active workers that have not finished this job */
    atomic_size_t next;
} Pool;

static Pool pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
                    .done = PTHREAD_COND_INITIALIZER};
static atomic_int pool_busy;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void run_tasks(tfk_task_fn fn, void *ctx, size_t ntasks, int tid)
{
    for (;;) {
        const size_t i = atomic_fetch_add(&pool.next, 1);
        if (i >= ntasks)
            break;
        fn(ctx, i, tid);
    }
}

static void *worker(void *arg)
{
    const int tid = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.mu);
    /* (not pool.gen: the job that started this worker may have bumped it already) */
    unsigned long seen = pool.born[tid - 1];
    for (;;) {
        while (pool.gen == seen && !pool.shutdown)
            pthread_cond_wait(&pool.wake, &pool.mu);
        if (pool.gen == seen)       /* shut down, and no job left to take part in */
            break;
        seen = pool.gen;
        if (tid >= pool.nactive)
            continue;
        tfk_task_fn fn = pool.fn;
        void *ctx = pool.ctx;
        const size_t ntasks = pool.ntasks;
        pthread_mutex_unlock(&pool.mu);
        run_tasks(fn, ctx, ntasks, tid);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

/* in the child of fork(): the workers are the parent's; start afresh */
static void atfork_child(void)
{
    memset(&pool, 0, sizeof pool);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    atomic_store(&pool_busy, 0);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

void tfk_pool_init(void) { pthread_once(&atfork_once, register_atfork); }

/* start workers up to want-1 (under pool.mu); returns the threads available */
static int ensure_workers(int want)
{
    if (want > TFK_MAX_THREADS)
        want = TFK_MAX_THREADS;
    while (pool.nworkers + 1 < want) {
        const int tid = pool.nworkers + 1;
        pool.born[tid - 1] = pool.gen;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        const int rc = pthread_create(&pool.th[tid - 1], &attr, worker, (void *)(intptr_t)tid);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.nworkers++;
    }
    return pool.nworkers + 1;
}

int tfk_pool_run(tfk_task_fn fn, void *ctx, size_t ntasks, int nthreads)
{
    if ((size_t)nthreads > ntasks)
        nthreads = (int)ntasks;
    int expected = 0;
    if (nthreads <= 1 || !atomic_compare_exchange_strong(&pool_busy, &expected, 1)) {
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return 1;
    }
    pthread_mutex_lock(&pool.mu);
    const int avail = ensure_workers(nthreads);
    if (avail < nthreads)
        nthreads = avail;
    if (nthreads <= 1) {
        pthread_mutex_unlock(&pool.mu);
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        atomic_store(&pool_busy, 0);
        return 1;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.ntasks = ntasks;
    pool.nactive = nthreads;
    pool.pending = nthreads - 1;
    atomic_store(&pool.next, 0);
    pool.gen++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    run_tasks(fn, ctx, ntasks, 0);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pool.fn = NULL;
    pool.ctx = NULL;
    pthread_mutex_unlock(&pool.mu);
    atomic_store(&pool_busy, 0);
    return nthreads;
}

void tfk_pool_shutdown(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.shutdown = 1;
    pthread_cond_broadcast(&pool.wake);
    const int n = pool.nworkers;
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < n; i++)
        pthread_join(pool.th[i], NULL);
    pthread_mutex_lock(&pool.mu);
    pool.nworkers = 0;
    pool.shutdown = 0;
    pthread_mutex_unlock(&pool.mu);
}
