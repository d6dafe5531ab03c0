/* The persistent thread pool: created lazily (the first call that wants more than one
 * thread starts the workers it needs), the caller is thread 0 and works too, tasks are
 * handed out by an atomic counter. A second call while one runs (another Python thread:
 * the kernels run without the GIL) does not wait: it runs its tasks on its own thread.
 * After fork() the child has none of the parent's workers: the pool is forgotten in the
 * child (pthread_atfork) and re-created there on first use. tfk_pool_shutdown (at the
 * interpreter's exit, Py_AtExit) joins the workers.
 *
 * The protocol (every shared field is read and written under pool.mu, except the
 * task counter pool.next, which only the threads of the job in flight touch):
 *   - a job is published by bumping pool.gen (the generation) after setting fn, ctx,
 *     ntasks, nactive and pending; each worker remembers the last generation it saw
 *     and waits on pool.wake in a loop until gen differs (spurious and stolen wake-ups
 *     re-check the predicate) -- it cannot miss a job: a broadcast it slept through
 *     left gen changed;
 *   - a new worker starts from the generation before the job that started it
 *     (pool.born), not from pool.gen, which that job may have bumped before the
 *     worker first ran (reading pool.gen there loses the job: the worker waits on wake
 *     while the caller waits on done, the stacks of the two-thread hang once seen);
 *   - the caller waits on pool.done in a loop until pending is 0; the job's fields
 *     stay valid until then, and the next job cannot be published before (pool_busy);
 *   - at most one job runs at a time (pool_busy, a compare-and-swap): a second caller
 *     runs its tasks on its own thread rather than wait;
 *   - shutdown sets pool.shutdown under the mutex: a job published before it still
 *     completes (a worker takes part in a generation it has not seen before it looks
 *     at shutdown), a call after it runs on the caller alone (it never publishes a job
 *     the exiting workers would not take);
 *   - before sleeping on a condition variable, a worker (for the next job) and the
 *     caller (for the workers' end) spin up to SPIN_NS on atomic mirrors of gen and
 *     pending: only a hint, the loops under the mutex decide, but back-to-back jobs
 *     then skip the futex wake-ups (2-thread MatMul of 64 rows: 162-175 -> 128 us);
 *   - the workers block every signal (the caller's thread, Python's, handles them).
 */
#define _GNU_SOURCE
#include "cpukernels.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* how long a thread spins for the other side (a worker for the next job, the caller
 * for the workers' end) before it sleeps on a condition variable: back-to-back ops
 * (a training step's) then need no futex wake-up, tens of microseconds in a VM */
#define SPIN_NS 30000L

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
    /* mirrors of gen and pending written under mu, read without it by the spins
     * (a hint only: the loops under mu decide) */
    atomic_ulong gen_hint;
    atomic_int pending_hint;
} Pool;

static Pool pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
                    .done = PTHREAD_COND_INITIALIZER};
static atomic_int pool_busy;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* spin (without the mutex) up to SPIN_NS while *hint == value */
static void spin_while_ulong(atomic_ulong *hint, unsigned long value)
{
    const long t0 = now_ns();
    for (int i = 1; atomic_load_explicit(hint, memory_order_relaxed) == value; i++) {
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 > SPIN_NS)
            return;
    }
}

static void spin_while_pending(void)
{
    const long t0 = now_ns();
    for (int i = 1; atomic_load_explicit(&pool.pending_hint, memory_order_relaxed) > 0; i++) {
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 > SPIN_NS)
            return;
    }
}

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
        if (pool.gen == seen && !pool.shutdown) {
            pthread_mutex_unlock(&pool.mu);
            spin_while_ulong(&pool.gen_hint, seen);
            pthread_mutex_lock(&pool.mu);
        }
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
        atomic_store(&pool.pending_hint, pool.pending - 1);
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
        /* (the worker inherits the creator's signal mask: all blocked while it starts) */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        const int rc = pthread_create(&pool.th[tid - 1], &attr, worker, (void *)(intptr_t)tid);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    const int avail = pool.shutdown ? 1 : ensure_workers(nthreads);
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
    atomic_store(&pool.pending_hint, nthreads - 1);
    atomic_store(&pool.next, 0);
    pool.gen++;
    atomic_store(&pool.gen_hint, pool.gen);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    run_tasks(fn, ctx, ntasks, 0);
    spin_while_pending();
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pool.fn = NULL;
    pool.ctx = NULL;
    pthread_mutex_unlock(&pool.mu);
    atomic_store(&pool_busy, 0);
    return nthreads;
}

/* (a call running concurrently -- a daemon thread's, without the GIL -- completes: see
 * the protocol above; the pool can start again afterwards) */
void tfk_pool_shutdown(void)
{
    pthread_mutex_lock(&pool.mu);
    if (pool.shutdown) {     /* another thread is shutting the pool down */
        pthread_mutex_unlock(&pool.mu);
        return;
    }
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
