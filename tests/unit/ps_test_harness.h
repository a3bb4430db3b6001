/* The parameter-server unit tests' harness: one real salusd_t with its event loop and no
 * cluster (`d`), the jobs its groups are made of (`jobs`), groups joined as the daemon joins
 * them, and the service's callbacks awaited by running the loop with a deadline. Included by
 * one source file of a test program only (it defines salusd_now_ns, which the daemon's core
 * library leaves to its program). */
#ifndef SALUS_PS_TEST_HARNESS_H
#define SALUS_PS_TEST_HARNESS_H

#include "groups.h"
#include "ps.h"

#include <check.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The daemon's clock, moved ahead by harness_skew_ns (a test's way to make a timer's work
 * due without waiting for it). */
static uint64_t harness_skew_ns;

uint64_t salusd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + harness_skew_ns;
}

static salusd_t d;
static job_t jobs[4];

/* Zeroes d and jobs and sets the daemon's default options (a test changes what it needs next). */
static inline void harness_init(void)
{
    harness_skew_ns = 0;
    memset(&d, 0, sizeof(d));
    memset(jobs, 0, sizeof(jobs));
    ck_assert_int_eq(options_set_defaults(salusd_options, salusd_option_count, &d.config), 0);
}

/* The event loop and the service (ps_start). */
static inline void harness_start(void)
{
    d.base = event_base_new();
    ck_assert_ptr_nonnull(d.base);
    ck_assert_int_eq(ps_start(&d), 0);
}

static inline void harness_stop(void)
{
    ps_stop(&d);
    groups_fini(&d);
    event_base_free(d.base);
}

/* Ranks 0 .. world-1 of group `name` of uid as jobs[first ..] (ids 100 + first + rank), with
 * f's sync, staleness and restore; the group's id. */
static inline uint64_t harness_group(const char *name, uid_t uid, uint32_t world, int first,
                                     groups_fields_t f)
{
    f.world = world;
    f.local_rank = -1;
    snprintf(f.name, sizeof(f.name), "%s", name);
    for (uint32_t r = 0; r < world; r++) {
        f.rank = r;
        job_t *job = &jobs[first + (int)r];
        job->id = 100 + (uint64_t)first + r;
        job->uid = uid;
        char err[256] = "";
        ck_assert_int_eq(groups_check_join(&d, uid, &f, err, sizeof(err)), 0);
        ck_assert_int_eq(groups_join(&d, job, &f), 0);
    }
    return jobs[first].group_id;
}

static inline ps_worker_t worker_of(int job, const char *group, const void *owner)
{
    return (ps_worker_t){.uid = jobs[job].uid, .group_id = jobs[job].group_id, .group = group,
                         .rank = jobs[job].group_rank, .world = jobs[job].group_world,
                         .job_id = jobs[job].id, .owner = owner};
}

/* ---- callbacks -------------------------------------------------------------------------- */
#ifndef HARNESS_ERR_SIZE
#define HARNESS_ERR_SIZE 256 /* a result's message; a test with longer ones sets its own */
#endif

typedef struct result_s {
    int called, rc;
    char err[HARNESS_ERR_SIZE];
    ps_read_t read;
} result_t;

static inline void on_done(void *arg, int rc, const char *err)
{
    result_t *r = arg;
    r->called++;
    r->rc = rc;
    snprintf(r->err, sizeof(r->err), "%s", err ? err : "");
}

static inline void on_pull(void *arg, int rc, const char *err, const ps_read_t *read)
{
    on_done(arg, rc, err);
    if (read)
        ((result_t *)arg)->read = *read;
}

/* Runs the loop until r was called (deadline 5 s). */
static inline void wait_for(result_t *r)
{
    uint64_t deadline = salusd_now_ns() + 5000000000ull;
    while (!r->called && salusd_now_ns() < deadline)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    ck_assert_msg(r->called, "no callback within 5 s");
}

/* The outcome of a call that answers through r: the call's own rc when not 0 (err set by the
 * call), else r's once it came (wait_for), with r's message copied to err. */
static inline int harness_outcome(int rc, result_t *r, char *err, size_t err_size)
{
    if (rc != 0)
        return rc;
    wait_for(r);
    snprintf(err, err_size, "%s", r->err);
    return r->rc;
}

/* A pull of n values (offset 0, clock 0) of w's table h fails, by the call or its callback,
 * with a message that says `word`. */
static inline void harness_pull_fails(const ps_worker_t *w, uint64_t h, uint64_t n,
                                      const char *word)
{
    float *out = calloc(n, sizeof(float));
    ck_assert_ptr_nonnull(out);
    result_t p = {0};
    char err[256] = "";
    int rc = ps_pull(&d, w, h, 0, 0, n, out, on_pull, &p, err, sizeof(err));
    rc = harness_outcome(rc, &p, err, sizeof(err));
    free(out);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, word) != NULL, "%s", err);
}

/* Runs the loop for a while (what is due runs; used to show that something did NOT come). */
static inline void run_idle(void)
{
    for (int i = 0; i < 50; i++)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

#endif
