/* Turn-taking on each GPU at iteration granularity, first come first served: the holder
 * runs; a job that parks at a boundary while others wait goes to the back of the queue and
 * the first waiting job is granted. With nobody waiting the holder runs freely (free_run)
 * and its boundaries cost nothing. The lanes-and-policies issue replaces this order with
 * the policies in scheduler-policies/; the grant mechanism (job page + futex) stays. */
#include "jobs.h"

#include "job_page.h"
#include "log.h"

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* jobs.c keeps the page pointer in its runtime; this accessor avoids exposing that struct */
job_page_t *jobs_page(const job_t *job);

static void grant(salusd_t *d, job_t *job, int free_run)
{
    job_page_t *page = jobs_page(job);
    if (!page)
        return;
    atomic_store(&page->free_run, (uint32_t)free_run);
    atomic_store(&page->grant_seq, atomic_load(&page->boundary_seq));
    syscall(SYS_futex, (uint32_t *)&page->grant_seq, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
    d->sched[job->gpu].holder = job->id;
    job->state = JOB_RUNNING;
}

static void enqueue(sched_gpu_t *s, uint64_t id)
{
    for (int i = 0; i < s->queued; i++)
        if (s->queue[i] == id)
            return;
    if (s->queued < SCHED_MAX_QUEUE)
        s->queue[s->queued++] = id;
}

static uint64_t dequeue(sched_gpu_t *s)
{
    if (s->queued == 0)
        return 0;
    uint64_t id = s->queue[0];
    for (int i = 1; i < s->queued; i++)
        s->queue[i - 1] = s->queue[i];
    s->queued--;
    return id;
}

static void remove_queued(sched_gpu_t *s, uint64_t id)
{
    for (int i = 0; i < s->queued; i++) {
        if (s->queue[i] != id)
            continue;
        for (int k = i + 1; k < s->queued; k++)
            s->queue[k - 1] = s->queue[k];
        s->queued--;
        return;
    }
}

/* Grants the next queued job that still exists; returns whether one was granted. */
static int grant_next(salusd_t *d, sched_gpu_t *s)
{
    uint64_t id;
    while ((id = dequeue(s)) != 0) {
        job_t *next = registry_find(d->registry, id);
        if (next && jobs_page(next)) {
            grant(d, next, s->queued == 0);
            return 1;
        }
    }
    s->holder = 0;
    return 0;
}

void sched_job_parked(salusd_t *d, job_t *job)
{
    job_page_t *page = jobs_page(job);
    if (!page || job->gpu < 0 || !atomic_load(&page->waiting) ||
        atomic_load(&page->grant_seq) >= atomic_load(&page->boundary_seq))
        return;
    sched_gpu_t *s = &d->sched[job->gpu];
    if (s->holder == 0 || s->holder == job->id) {
        if (s->holder == job->id && s->queued > 0) {
            /* its turn is over: the first waiting job goes, this one waits */
            job->state = JOB_PAUSED;
            enqueue(s, job->id);
            grant_next(d, s);
            return;
        }
        grant(d, job, s->queued == 0);
        return;
    }
    job->state = JOB_PAUSED;
    enqueue(s, job->id);
    /* the holder must stop at its next boundary */
    job_t *holder = registry_find(d->registry, s->holder);
    if (holder && jobs_page(holder))
        atomic_store(&jobs_page(holder)->free_run, 0);
}

void sched_job_left(salusd_t *d, job_t *job)
{
    if (job->gpu < 0)
        return;
    sched_gpu_t *s = &d->sched[job->gpu];
    remove_queued(s, job->id);
    if (s->holder == job->id)
        grant_next(d, s);
}

int sched_is_holder(const salusd_t *d, const job_t *job)
{
    return job->gpu >= 0 && d->sched[job->gpu].holder == job->id;
}
