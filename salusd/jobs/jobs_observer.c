/* The jobs subsystem's observers (jobs_observer.h): the tables registered, and the events
 * raised while the core's effects are applied, queued until the apply is over. */
#include "jobs_observer.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    EV_RANK_SUBMITTED,
    EV_RANK_REGISTERED,
    EV_RANK_ADMITTED,
    EV_GROUP_FAILED,
    EV_GROUP_OVER,
    EV_SLOT_DONE,
    EV_RANK_ITERATIONS,
} ev_kind_t;

typedef struct {
    ev_kind_t kind;
    uint32_t rank;
    uint64_t group_id;
    uint64_t value; /* a job id, or a slot's seq */
    char failure[200];
} ev_t;

typedef struct jobs_notifier_s {
    const jobs_observer_t *obs[JOBS_OBSERVERS_MAX];
    size_t count;
    unsigned depth;  /* applies in progress (nested) */
    int delivering;  /* the queue is being delivered (by the outermost end) */
    ev_t *queue;
    size_t head, len, cap;
} jobs_notifier_t;

int jobs_observe(salusd_t *d, const jobs_observer_t *obs)
{
    if (!d->jobs_notifier && !(d->jobs_notifier = calloc(1, sizeof(*d->jobs_notifier))))
        return -ENOMEM;
    jobs_notifier_t *n = d->jobs_notifier;
    if (n->count == JOBS_OBSERVERS_MAX)
        return -ENOSPC;
    n->obs[n->count++] = obs;
    return 0;
}

void jobs_observers_fini(salusd_t *d)
{
    if (!d->jobs_notifier)
        return;
    free(d->jobs_notifier->queue);
    free(d->jobs_notifier);
    d->jobs_notifier = NULL;
}

static void deliver(salusd_t *d, const ev_t *ev)
{
    jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++) {
        const jobs_observer_t *o = n->obs[i];
        switch (ev->kind) {
        case EV_RANK_SUBMITTED:
            if (o->rank_submitted)
                o->rank_submitted(d, ev->group_id, ev->rank, ev->value);
            break;
        case EV_RANK_REGISTERED:
            if (o->rank_registered)
                o->rank_registered(d, ev->group_id, ev->rank, ev->value);
            break;
        case EV_RANK_ADMITTED:
            if (o->rank_admitted)
                o->rank_admitted(d, ev->group_id);
            break;
        case EV_GROUP_FAILED:
            if (o->group_failed)
                o->group_failed(d, ev->group_id, ev->failure);
            break;
        case EV_GROUP_OVER:
            if (o->group_over)
                o->group_over(d, ev->group_id);
            break;
        case EV_SLOT_DONE:
            if (o->slot_done)
                o->slot_done(d, ev->group_id, ev->value);
            break;
        case EV_RANK_ITERATIONS:
            if (o->rank_iterations)
                o->rank_iterations(d, ev->group_id);
            break;
        }
        n = d->jobs_notifier;
    }
}

/* Delivers ev now, or queues it while an apply is in progress. */
static void raise_event(salusd_t *d, const ev_t *ev)
{
    jobs_notifier_t *n = d->jobs_notifier;
    if (!n || !n->count)
        return;
    if (!n->depth) {
        deliver(d, ev);
        return;
    }
    if (n->head + n->len == n->cap) {
        if (n->head) { /* room at the front: moved there */
            memmove(n->queue, n->queue + n->head, n->len * sizeof(*n->queue));
            n->head = 0;
        } else {
            size_t cap = n->cap ? 2 * n->cap : 16;
            ev_t *q = realloc(n->queue, cap * sizeof(*q));
            if (!q) {
                LOG_ERROR("out of memory queuing an event of the jobs; delivered at once");
                deliver(d, ev);
                return;
            }
            n->queue = q;
            n->cap = cap;
        }
    }
    n->queue[n->head + n->len++] = *ev;
}

void jobs_effects_begin(salusd_t *d)
{
    if (d->jobs_notifier)
        d->jobs_notifier->depth++;
}

int jobs_effects_applying(const salusd_t *d)
{
    return d->jobs_notifier && d->jobs_notifier->depth > 0;
}

void jobs_effects_end(salusd_t *d)
{
    jobs_notifier_t *n = d->jobs_notifier;
    if (!n || !n->depth || --n->depth || n->delivering)
        return;
    /* an observer may apply effects again (a gang slot): what they raise joins the queue's
     * end and is delivered by this loop, not by a nested one */
    n->delivering = 1;
    while (n->len) {
        ev_t ev = n->queue[n->head++];
        n->len--;
        if (!n->len)
            n->head = 0;
        deliver(d, &ev);
    }
    n->delivering = 0;
}

void jobs_raise_rank_submitted(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id)
{
    ev_t ev = {.kind = EV_RANK_SUBMITTED, .group_id = group_id, .rank = rank, .value = job_id};
    raise_event(d, &ev);
}

void jobs_raise_rank_registered(salusd_t *d, const job_t *job)
{
    ev_t ev = {.kind = EV_RANK_REGISTERED, .group_id = job->group_id, .rank = job->group_rank,
               .value = job->id};
    raise_event(d, &ev);
}

void jobs_raise_rank_admitted(salusd_t *d, const job_t *job)
{
    ev_t ev = {.kind = EV_RANK_ADMITTED, .group_id = job->group_id};
    raise_event(d, &ev);
}

void jobs_raise_group_failed(salusd_t *d, uint64_t group_id, const char *failure)
{
    ev_t ev = {.kind = EV_GROUP_FAILED, .group_id = group_id};
    snprintf(ev.failure, sizeof(ev.failure), "%s", failure);
    raise_event(d, &ev);
}

void jobs_raise_group_over(salusd_t *d, uint64_t group_id)
{
    ev_t ev = {.kind = EV_GROUP_OVER, .group_id = group_id};
    raise_event(d, &ev);
}

void jobs_raise_slot_done(salusd_t *d, uint64_t group_id, uint64_t seq)
{
    ev_t ev = {.kind = EV_SLOT_DONE, .group_id = group_id, .value = seq};
    raise_event(d, &ev);
}

void jobs_raise_rank_iterations(salusd_t *d, uint64_t group_id)
{
    ev_t ev = {.kind = EV_RANK_ITERATIONS, .group_id = group_id};
    raise_event(d, &ev);
}

void jobs_raise_job_finished(salusd_t *d, job_t *job)
{
    jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++)
        if (n->obs[i]->job_finished)
            n->obs[i]->job_finished(d, job);
}

int jobs_ask_job_settled(salusd_t *d, const job_t *job)
{
    jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++)
        if (n->obs[i]->job_settled)
            return n->obs[i]->job_settled(d, job);
    return 1;
}

int jobs_ask_terminate(salusd_t *d, job_t *job, uint64_t grace_ms)
{
    jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++)
        if (n->obs[i]->terminate_job)
            return n->obs[i]->terminate_job(d, job, grace_ms);
    return -ESRCH;
}

const char *jobs_ask_rank_node(const salusd_t *d, uint64_t group_id, uint32_t rank)
{
    const jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++)
        if (n->obs[i]->rank_node)
            return n->obs[i]->rank_node(d, group_id, rank);
    return NULL;
}

int jobs_ask_pack_group_tables(salusd_t *d, uint64_t group_id, msgpack_packer *pk)
{
    jobs_notifier_t *n = d->jobs_notifier;
    for (size_t i = 0; n && i < n->count; i++)
        if (n->obs[i]->pack_group_tables) {
            n->obs[i]->pack_group_tables(d, group_id, pk);
            return 1;
        }
    return 0;
}
