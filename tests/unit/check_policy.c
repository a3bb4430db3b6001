/* Unit tests for scheduler-policies.
 *
 * With SALUS_TEST_POLICY=<name> in the environment this program runs the policy-generic
 * suite against that policy (CTest registers it once per policy); without it, the registry
 * and switch tests and each policy's own tests. */
#include "policy.h"
#include "policy-internal.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull
#define MAX_JOBS 16

TCase *policy_nohints_tcase(void); /* check_policy_nohints.c: LAS and Gittins */

/* ---- a tiny deterministic driver: pick -> run one iteration -> iteration_done ------------ */

typedef struct {
    policy_job_t jobs[MAX_JOBS];
    uint64_t iteration_ns[MAX_JOBS]; /* how long each job's iterations take */
    size_t count;
    uint64_t now_ns;
} sim_t;

static policy_job_t *sim_add(policy_t *p, sim_t *s, uint64_t id, uint32_t lane,
                             uint64_t iteration_ns, uint64_t expected)
{
    ck_assert_uint_lt(s->count, MAX_JOBS);
    policy_job_t *job = &s->jobs[s->count];
    *job = (policy_job_t){.id = id, .arrival_ns = s->now_ns, .iterations_expected = expected,
                          .lane = lane, .runnable = true};
    s->iteration_ns[s->count++] = iteration_ns;
    policy_job_arrived(p, job, s->now_ns);
    return job;
}

static void sim_remove(policy_t *p, sim_t *s, size_t index)
{
    uint64_t id = s->jobs[index].id;
    s->count--;
    s->jobs[index] = s->jobs[s->count];
    s->iteration_ns[index] = s->iteration_ns[s->count];
    policy_job_left(p, id, s->now_ns);
}

/* Picks in `lane`, runs one iteration of the picked job; returns its id, or 0 when idle. */
static uint64_t sim_step(policy_t *p, sim_t *s, uint32_t lane)
{
    int i = policy_pick(p, lane, s->jobs, s->count, s->now_ns);
    if (i < 0)
        return 0;
    ck_assert_int_lt(i, (int)s->count);
    policy_job_t *job = &s->jobs[i];
    ck_assert(job->runnable);
    ck_assert_uint_eq(job->lane, lane);
    uint64_t duration = s->iteration_ns[i];
    s->now_ns += duration;
    job->iterations_done++;
    job->attained_ns += duration;
    job->mean_iteration_ns = job->attained_ns / job->iterations_done;
    if (job->iterations_expected && job->iterations_done >= job->iterations_expected)
        job->runnable = false; /* finished */
    policy_iteration_done(p, job, duration, s->now_ns);
    return job->id;
}

static const policy_job_t *sim_job(const sim_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->count; i++)
        if (s->jobs[i].id == id)
            return &s->jobs[i];
    return NULL;
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- generic suite: every policy --------------------------------------------------------- */

static const char *generic_name;

static void start(policy_t *p, const char *name)
{
    ck_assert_msg(policy_init(p, name, NULL) == 0, "policy %s did not start", name);
}

START_TEST(test_generic_init_fini)
{
    policy_config_t config = {.default_iteration_ns = 5 * MS};
    policy_t p = {0};
    const policy_ops_t *ops = policy_find(generic_name);
    ck_assert_ptr_nonnull(ops);
    ck_assert_ptr_nonnull(ops->init);
    ck_assert_ptr_nonnull(ops->fini);
    ck_assert_ptr_nonnull(ops->pick);
    ck_assert_int_eq(policy_init(&p, generic_name, &config), 0);
    ck_assert_str_eq(policy_name(&p), generic_name);
    policy_fini(&p);
    policy_fini(&p); /* idempotent */
    for (int round = 0; round < 100; round++) {
        sim_t s = {0};
        start(&p, generic_name);
        for (uint64_t id = 1; id <= 8; id++)
            sim_add(&p, &s, id, (uint32_t)(id % 2), MS, 0);
        for (int k = 0; k < 20; k++)
            sim_step(&p, &s, (uint32_t)(k % 2));
        policy_fini(&p); /* jobs still known: fini must free their state (ASan checks) */
    }
}
END_TEST

START_TEST(test_generic_pick_none)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, generic_name);
    ck_assert_int_eq(policy_pick(&p, 1, s.jobs, 0, 0), -1);
    sim_add(&p, &s, 1, 1, MS, 0)->runnable = false;
    sim_add(&p, &s, 2, 2, MS, 0);
    ck_assert_int_eq(policy_pick(&p, 1, s.jobs, s.count, 0), -1); /* not runnable */
    ck_assert_int_eq(policy_pick(&p, 3, s.jobs, s.count, 0), -1); /* no job in lane */
    ck_assert_int_eq(policy_pick(&p, 2, s.jobs, s.count, 0), 1);
    policy_fini(&p);
}
END_TEST

/* Random arrivals, departures (in any order, including unknown ids), runnable changes and
 * iterations: pick always returns a runnable job of the lane, never a finished or departed
 * one, and is work-conserving. */
START_TEST(test_generic_random_events)
{
    policy_t p = {0};
    sim_t s = {0};
    uint64_t next_id = 1;
    rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(_i + 1) * 0x1000193u;
    start(&p, generic_name);
    for (int step = 0; step < 4000; step++) {
        uint64_t event = rng_next() % 100;
        if (event < 15 && s.count < MAX_JOBS) {
            policy_job_t *job = sim_add(&p, &s, next_id++, (uint32_t)(rng_next() % 3),
                                        (1 + rng_next() % 20) * MS, rng_next() % 40);
            job->priority = (int32_t)(rng_next() % 3) - 1;
        } else if (event < 25 && s.count > 0) {
            sim_remove(&p, &s, rng_next() % s.count);
        } else if (event < 28) {
            policy_job_left(&p, 100000 + rng_next() % 10, s.now_ns); /* unknown id */
        } else if (event < 30 && s.count > 0) {
            policy_job_arrived(&p, &s.jobs[rng_next() % s.count], s.now_ns); /* again */
        } else if (event < 40 && s.count > 0) {
            policy_job_t *job = &s.jobs[rng_next() % s.count];
            bool finished = job->iterations_expected &&
                            job->iterations_done >= job->iterations_expected;
            job->runnable = !finished && !job->runnable;
        } else {
            uint32_t lane = (uint32_t)(rng_next() % 3);
            bool eligible = false;
            for (size_t i = 0; i < s.count; i++)
                eligible |= s.jobs[i].runnable && s.jobs[i].lane == lane;
            uint64_t id = sim_step(&p, &s, lane); /* checks runnable + lane */
            ck_assert_msg((id != 0) == eligible, "step %d: pick %s but lane %u %s", step,
                          id ? "chose" : "idle", lane, eligible ? "has work" : "is empty");
        }
    }
    while (s.count > 0)
        sim_remove(&p, &s, rng_next() % s.count);
    ck_assert_int_eq(policy_pick(&p, 0, s.jobs, 0, s.now_ns), -1);
    policy_fini(&p);
}
END_TEST

START_TEST(test_generic_admission_order_is_a_permutation)
{
    policy_t p = {0};
    policy_job_t waiting[MAX_JOBS];
    size_t order[MAX_JOBS];
    rng_state = 12345;
    start(&p, generic_name);
    for (int round = 0; round < 50; round++) {
        size_t n = rng_next() % MAX_JOBS;
        bool seen[MAX_JOBS] = {false};
        for (size_t i = 0; i < n; i++)
            waiting[i] = (policy_job_t){.id = i + 1, .arrival_ns = rng_next() % 1000,
                                        .iterations_expected = rng_next() % 100,
                                        .mean_iteration_ns = rng_next() % (10 * MS),
                                        .priority = (int32_t)(rng_next() % 3)};
        policy_admission_order(&p, waiting, n, order, 0);
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_lt(order[i], n);
            ck_assert(!seen[order[i]]);
            seen[order[i]] = true;
        }
    }
    policy_fini(&p);
}
END_TEST

/* Switching from any policy to this one keeps scheduling valid jobs. */
START_TEST(test_generic_switch_into)
{
    const policy_ops_t *from = policy_at((size_t)_i);
    policy_t p = {0};
    sim_t s = {0};
    start(&p, from->name);
    for (uint64_t id = 1; id <= 6; id++)
        sim_add(&p, &s, id, 7, (id + 1) * MS, 10);
    for (int k = 0; k < 10; k++)
        sim_step(&p, &s, 7);
    ck_assert_int_eq(policy_switch(&p, generic_name, NULL, s.jobs, s.count, s.now_ns), 0);
    ck_assert_str_eq(policy_name(&p), generic_name);
    int done = 0;
    while (sim_step(&p, &s, 7) != 0)
        done++;
    ck_assert_int_eq(done, 6 * 10 - 10); /* every remaining iteration ran */
    policy_fini(&p);
}
END_TEST

/* The optional view and persistence hooks come in pairs and behave. */
START_TEST(test_generic_view_and_state)
{
    const policy_ops_t *ops = policy_find(generic_name);
    ck_assert((ops->rank_name == NULL) == (ops->job_rank == NULL));
    ck_assert((ops->save_state == NULL) == (ops->load_state == NULL));
    policy_t p = {0};
    sim_t s = {0};
    start(&p, generic_name);
    for (uint64_t id = 1; id <= 6; id++)
        sim_add(&p, &s, id, 0, id * MS, 5);
    for (int k = 0; k < 12; k++)
        sim_step(&p, &s, 0);
    sim_remove(&p, &s, 0);
    sim_remove(&p, &s, 0);
    for (size_t i = 0; i < s.count; i++) {
        double rank = NAN;
        ck_assert(policy_job_rank(&p, &s.jobs[i], s.now_ns, &rank) == (ops->job_rank != NULL));
        ck_assert(ops->job_rank == NULL || isfinite(rank));
    }
    static unsigned char saved[1 << 16], again[1 << 16];
    long len = policy_save_state(&p, saved, sizeof(saved));
    if (!ops->save_state) {
        ck_assert_int_eq(len, -ENOTSUP);
    } else {
        ck_assert_int_gt(len, 0);
        policy_t q = {0};
        start(&q, generic_name);
        ck_assert_int_eq(policy_load_state(&q, saved, (size_t)len), 0);
        ck_assert_int_eq(policy_save_state(&q, again, sizeof(again)), len);
        ck_assert_mem_eq(saved, again, (size_t)len);
        memset(again, 0, (size_t)len);
        ck_assert_int_lt(policy_load_state(&q, again, (size_t)len), 0);
        policy_fini(&q);
    }
    policy_fini(&p);
}
END_TEST

static Suite *generic_suite(const char *name)
{
    static char suite_name[64];
    snprintf(suite_name, sizeof(suite_name), "policy generic (%s)", name);
    generic_name = name;
    Suite *s = suite_create(suite_name);
    TCase *tc = tcase_create("generic");
    tcase_add_test(tc, test_generic_init_fini);
    tcase_add_test(tc, test_generic_pick_none);
    tcase_add_loop_test(tc, test_generic_random_events, 0, 4);
    tcase_add_test(tc, test_generic_admission_order_is_a_permutation);
    tcase_add_loop_test(tc, test_generic_switch_into, 0, (int)policy_count());
    tcase_add_test(tc, test_generic_view_and_state);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- registry and switch ----------------------------------------------------------------- */

START_TEST(test_registry)
{
    static const char *const expected[] = {"fifo", "srtf", "pack", "fair", "las", "gittins",
                                           "slo"};
    ck_assert_uint_eq(policy_count(), 7);
    for (size_t i = 0; i < 7; i++) {
        ck_assert_str_eq(policy_at(i)->name, expected[i]);
        ck_assert_ptr_eq(policy_find(expected[i]), policy_at(i));
    }
    ck_assert_ptr_eq(policy_find("FAIR"), policy_find("fair"));
    ck_assert_ptr_null(policy_find("lottery"));
    ck_assert_ptr_null(policy_find(NULL));
    ck_assert_ptr_eq(policy_find("Gittins"), policy_find("gittins"));
    ck_assert_ptr_null(policy_at(7));
    policy_t p = {0};
    ck_assert_int_eq(policy_init(&p, "lottery", NULL), -ENOENT);
    ck_assert_ptr_null(p.ops);
}
END_TEST

static int failing_picks;

static void *failing_init(const policy_config_t *config)
{
    (void)config;
    return NULL;
}

static void failing_fini(void *state)
{
    (void)state;
}

static int failing_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                        uint64_t now_ns)
{
    (void)state, (void)lane, (void)jobs, (void)count, (void)now_ns;
    failing_picks++;
    return -1;
}

static const policy_ops_t failing_ops = {
    .name = "failing", .init = failing_init, .fini = failing_fini, .pick = failing_pick};

START_TEST(test_switch_keeps_old_policy_when_init_fails)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "pack");
    sim_add(&p, &s, 1, 0, MS, 0);
    sim_add(&p, &s, 2, 0, MS, 0);
    ck_assert_uint_eq(sim_step(&p, &s, 0), 1);
    ck_assert_int_eq(policy_switch_ops(&p, &failing_ops, NULL, s.jobs, s.count, 0), -ENOMEM);
    ck_assert_int_eq(policy_switch(&p, "lottery", NULL, s.jobs, s.count, 0), -ENOENT);
    ck_assert_str_eq(policy_name(&p), "pack");
    ck_assert_uint_eq(sim_step(&p, &s, 0), 2); /* PACK's round-robin state survived */
    ck_assert_int_eq(failing_picks, 0);
    ck_assert_int_eq(policy_switch(&p, "fifo", NULL, s.jobs, s.count, 0), 0);
    ck_assert_uint_eq(policy_max_jobs_per_gpu(&p), 1);
    ck_assert(policy_admission_blocks(&p));
    policy_fini(&p);
}
END_TEST

/* ---- FIFO --------------------------------------------------------------------------------- */

START_TEST(test_fifo_arrival_order)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "fifo");
    ck_assert_uint_eq(policy_max_jobs_per_gpu(&p), 1);
    ck_assert(policy_admission_blocks(&p));
    s.now_ns = 10;
    sim_add(&p, &s, 7, 0, MS, 3);
    s.now_ns = 20;
    sim_add(&p, &s, 3, 0, MS, 2)->priority = 5; /* priority only breaks arrival ties */
    uint64_t ran[5];
    for (int k = 0; k < 5; k++)
        ran[k] = sim_step(&p, &s, 0);
    ck_assert_uint_eq(ran[0], 7);
    ck_assert_uint_eq(ran[2], 7);
    ck_assert_uint_eq(ran[3], 3);
    ck_assert_uint_eq(ran[4], 3);

    policy_job_t waiting[3] = {{.id = 1, .arrival_ns = 300}, {.id = 2, .arrival_ns = 100},
                               {.id = 3, .arrival_ns = 200, .iterations_expected = 1}};
    size_t order[3];
    policy_admission_order(&p, waiting, 3, order, 0);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 2);
    ck_assert_uint_eq(order[2], 0);
    policy_fini(&p);
}
END_TEST

/* ---- SRTF --------------------------------------------------------------------------------- */

START_TEST(test_srtf_short_job_preempts_at_boundary)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "srtf");
    ck_assert(!policy_admission_blocks(&p));
    sim_add(&p, &s, 1, 0, 10 * MS, 1000); /* long: 1000 x 10 ms */
    for (int k = 0; k < 10; k++)
        ck_assert_uint_eq(sim_step(&p, &s, 0), 1);
    sim_add(&p, &s, 2, 0, 10 * MS, 10); /* short, arrives while the long one runs */
    ck_assert_uint_eq(sim_step(&p, &s, 0), 2); /* next boundary: the short job */
    for (int k = 0; k < 9; k++)
        ck_assert_uint_eq(sim_step(&p, &s, 0), 2);
    ck_assert(!sim_job(&s, 2)->runnable);
    ck_assert_uint_eq(sim_step(&p, &s, 0), 1);
    policy_fini(&p);
}
END_TEST

START_TEST(test_srtf_estimates)
{
    policy_t p = {0};
    start(&p, "srtf");
    /* unknown counts: expected to run as long again as so far */
    policy_job_t jobs[] = {
        {.id = 1, .iterations_done = 100, .mean_iteration_ns = MS, .runnable = true},
        {.id = 2, .iterations_done = 5, .mean_iteration_ns = MS, .runnable = true},
        {.id = 3, .iterations_done = 50, .iterations_expected = 60, .mean_iteration_ns = MS,
         .runnable = true}, /* 10 ms left */
    };
    ck_assert_int_eq(policy_pick(&p, 0, jobs, 3, 0), 1);
    jobs[1].iterations_done = 20; /* 20 ms > 10 ms */
    ck_assert_int_eq(policy_pick(&p, 0, jobs, 3, 0), 2);
    /* overran its hint: estimated like an unknown count (50 ms) */
    jobs[2].iterations_done = 70;
    jobs[2].mean_iteration_ns = MS / 2;
    ck_assert_int_eq(policy_pick(&p, 0, jobs, 3, 0), 1);
    /* unmeasured: probed first by default */
    policy_job_t fresh = {.id = 4, .iterations_expected = 5000, .runnable = true};
    policy_job_t four[4] = {jobs[0], jobs[1], jobs[2], fresh};
    ck_assert_int_eq(policy_pick(&p, 0, four, 4, 0), 3);
    /* with an assumed iteration time, a long unmeasured job waits */
    policy_config_t config = {.default_iteration_ns = 10 * MS};
    ck_assert_int_eq(policy_switch(&p, "srtf", &config, four, 4, 0), 0);
    ck_assert_int_eq(policy_pick(&p, 0, four, 4, 0), 1);
    size_t order[4];
    policy_admission_order(&p, four, 4, order, 0);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[3], 3);
    policy_fini(&p);
}
END_TEST

/* ---- PACK --------------------------------------------------------------------------------- */

START_TEST(test_pack_round_robin)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "pack");
    ck_assert_uint_eq(policy_max_jobs_per_gpu(&p), 0);
    ck_assert(!policy_admission_blocks(&p));
    sim_add(&p, &s, 1, 4, 1 * MS, 0);
    sim_add(&p, &s, 2, 4, 5 * MS, 0);
    sim_add(&p, &s, 3, 4, 2 * MS, 0);
    sim_add(&p, &s, 9, 5, 1 * MS, 0); /* another lane: never picked for lane 4 */
    static const uint64_t expected[] = {1, 2, 3, 1, 2, 3, 1, 2, 3};
    for (int k = 0; k < 9; k++)
        ck_assert_uint_eq(sim_step(&p, &s, 4), expected[k]);
    s.jobs[1].runnable = false; /* job 2 is busy elsewhere (e.g. host work) */
    ck_assert_uint_eq(sim_step(&p, &s, 4), 1);
    ck_assert_uint_eq(sim_step(&p, &s, 4), 3);
    ck_assert_uint_eq(sim_step(&p, &s, 4), 1);
    s.jobs[1].runnable = true; /* longest since its last turn: goes next */
    ck_assert_uint_eq(sim_step(&p, &s, 4), 2);
    ck_assert_uint_eq(sim_step(&p, &s, 4), 3);
    policy_fini(&p);
}
END_TEST

/* ---- FAIR --------------------------------------------------------------------------------- */

static void assert_within(uint64_t a, uint64_t b, double tolerance, const char *what)
{
    uint64_t low = a < b ? a : b, high = a < b ? b : a;
    ck_assert_msg(high > 0 && (double)(high - low) / (double)high <= tolerance,
                  "%s: %llu vs %llu", what, (unsigned long long)a, (unsigned long long)b);
}

/* PACK with hundreds of jobs whose ids arrive out of order and leave from the middle (its
 * per-job records are a sorted array): the job whose last turn is oldest always goes next. */
START_TEST(test_pack_many_jobs_out_of_order)
{
    enum { N = 300 };
    static policy_job_t jobs[N];
    policy_t p = {0};
    ck_assert_int_eq(policy_init(&p, "pack", NULL), 0);
    for (size_t i = 0; i < N; i++) {
        uint64_t id = 1 + (i * 7919) % N; /* a permutation of 1..N */
        jobs[i] = (policy_job_t){.id = id, .arrival_ns = 0, .lane = 1, .runnable = true};
        policy_job_arrived(&p, &jobs[i], 0);
        policy_iteration_done(&p, &jobs[i], MS, 0); /* turns in array order */
    }
    /* every third job leaves */
    size_t count = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 3 == 0)
            policy_job_left(&p, jobs[i].id, 0);
        else
            jobs[count++] = jobs[i];
    }
    /* the remaining jobs take turns in the order of their last turns: array order, twice */
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < count; k++) {
            int i = policy_pick(&p, 1, jobs, count, 0);
            ck_assert_int_eq(i, (int)k);
            policy_iteration_done(&p, &jobs[i], MS, 0);
        }
    }
    policy_fini(&p);
}
END_TEST

/* The per-job records (sorted array and hash index): every id added is found with its value
 * through insertions and removals in any order, ids that leave are not, and the array stays
 * sorted. Ids include far apart ones (1 << 40 apart) and neighbours. */
START_TEST(test_records_find_get_remove)
{
    enum { N = 500 };
    static uint64_t ids[N];
    static bool present[N];
    policy_records_t r = {0};
    for (size_t i = 0; i < N; i++) {
        ids[i] = (i % 2 ? (uint64_t)(i + 1) << 40 : 0) + 1 + (i * 7919) % N;
        policy_record_t *rec = policy_records_get(&r, ids[i]);
        ck_assert_ptr_nonnull(rec);
        rec->value = ids[i] ^ 0x5a5a;
        present[i] = true;
        if (i % 5 == 4) { /* one of the earlier ones leaves */
            size_t gone = (i * 31) % (i + 1);
            policy_records_remove(&r, ids[gone]);
            present[gone] = false;
        }
        ck_assert_ptr_eq(policy_records_get(&r, ids[i]), policy_records_find(&r, ids[i]));
    }
    size_t count = 0;
    for (size_t i = 0; i < N; i++) {
        const policy_record_t *rec = policy_records_find(&r, ids[i]);
        if (!present[i]) {
            ck_assert_msg(rec == NULL, "record %zu still found after its removal", i);
            continue;
        }
        count++;
        ck_assert_msg(rec && rec->job_id == ids[i] && rec->value == (ids[i] ^ 0x5a5a),
                      "record %zu lost", i);
    }
    ck_assert_uint_eq(r.count, count);
    for (size_t i = 1; i < r.count; i++)
        ck_assert(r.items[i - 1].job_id < r.items[i].job_id);
    ck_assert_ptr_null(policy_records_find(&r, 123456789));
    policy_records_free(&r);
    ck_assert_ptr_null(policy_records_find(&r, ids[1]));
}
END_TEST

START_TEST(test_fair_equal_attained_time)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "fair");
    sim_add(&p, &s, 1, 0, 1 * MS, 0);
    sim_add(&p, &s, 2, 0, 3 * MS, 0);
    sim_add(&p, &s, 3, 0, 7 * MS, 0);
    while (s.now_ns < 3000 * MS)
        sim_step(&p, &s, 0);
    for (uint64_t id = 2; id <= 3; id++)
        assert_within(sim_job(&s, 1)->attained_ns, sim_job(&s, id)->attained_ns, 0.10,
                      "attained");

    /* A newcomer shares from now on instead of holding the lane until it catches up. */
    uint64_t before[3];
    for (int k = 0; k < 3; k++)
        before[k] = s.jobs[k].attained_ns;
    sim_add(&p, &s, 4, 0, 2 * MS, 0);
    bool old_ran = false;
    for (int k = 0; k < 10; k++)
        old_ran |= sim_step(&p, &s, 0) != 4;
    ck_assert(old_ran);
    while (s.now_ns < 6000 * MS)
        sim_step(&p, &s, 0);
    uint64_t newcomer = sim_job(&s, 4)->attained_ns;
    for (int k = 0; k < 3; k++)
        assert_within(s.jobs[k].attained_ns - before[k], newcomer, 0.10, "since arrival");
    policy_fini(&p);
}
END_TEST

/* SLO: a latency-critical job of a lane goes first; the best-effort ones take turns by the
 * base policy; a best-effort job waits at most POLICY_SLO_DEFAULT_LC_RUN_MAX
 * latency-critical iterations in a row (slo_runs below). */
START_TEST(test_slo_latency_critical_first)
{
    policy_t p = {0};
    sim_t s = {0};
    start(&p, "slo");
    ck_assert(p.ops->gate_preemption);
    sim_add(&p, &s, 1, 0, 5 * MS, 0);
    sim_add(&p, &s, 2, 0, 5 * MS, 0);
    policy_job_t *lc = sim_add(&p, &s, 3, 0, 1 * MS, 0);
    lc->latency_target_ns = 10 * MS;
    lc = sim_add(&p, &s, 4, 0, 1 * MS, 0);
    lc->latency_target_ns = 20 * MS;
    /* the tighter target first, then the other latency-critical job */
    ck_assert_uint_eq(sim_step(&p, &s, 0), 3);
    s.jobs[2].runnable = false; /* job 3 is on the host now */
    ck_assert_uint_eq(sim_step(&p, &s, 0), 4);
    s.jobs[3].runnable = false;
    /* best-effort: round by the base policy (fair: least attained first) */
    uint64_t a = sim_step(&p, &s, 0), b = sim_step(&p, &s, 0);
    ck_assert(a != b && a <= 2 && b <= 2);
    /* a request arrives: it goes before the best-effort jobs at once */
    s.jobs[2].runnable = true;
    ck_assert_uint_eq(sim_step(&p, &s, 0), 3);
    policy_fini(&p);
}
END_TEST

/* The latency-critical job always has work: the best-effort one gets a turn after every
 * run_max of its iterations in a row, never later and never sooner. Returns the turns. */
static unsigned slo_runs(const policy_config_t *config, unsigned run_max)
{
    policy_t p = {0};
    sim_t s = {0};
    ck_assert_int_eq(policy_init(&p, "slo", config), 0);
    sim_add(&p, &s, 1, 0, 5 * MS, 0);
    policy_job_t *lc = sim_add(&p, &s, 2, 0, 1 * MS, 0);
    lc->latency_target_ns = 10 * MS;
    unsigned in_row = 0, be_turns = 0;
    for (int k = 0; k < 100; k++) {
        if (sim_step(&p, &s, 0) == 2) {
            in_row++;
            ck_assert_uint_le(in_row, run_max);
        } else {
            ck_assert_uint_eq(in_row, run_max); /* not before the bound either */
            in_row = 0;
            be_turns++;
        }
    }
    ck_assert_uint_eq(be_turns, 100 / (run_max + 1));
    policy_fini(&p);
    return be_turns;
}

START_TEST(test_slo_starvation_bound)
{
    ck_assert_uint_eq(slo_runs(NULL, POLICY_SLO_DEFAULT_LC_RUN_MAX), 11);
    policy_config_t config = {.slo_lc_run_max = 0}; /* 0: the default */
    ck_assert_uint_eq(slo_runs(&config, POLICY_SLO_DEFAULT_LC_RUN_MAX), 11);
}
END_TEST

/* salusd --slo-lc-run-max: the bound is the config's, tighter or looser than the default's
 * (ignored, the first would see 8 in a row and the second a best-effort turn after 8). */
START_TEST(test_slo_starvation_bound_configured)
{
    policy_config_t config = {.slo_lc_run_max = 3};
    ck_assert_uint_eq(slo_runs(&config, 3), 25);
    config.slo_lc_run_max = 12;
    ck_assert_uint_eq(slo_runs(&config, 12), 7);
    config.slo_lc_run_max = 1; /* alternate */
    ck_assert_uint_eq(slo_runs(&config, 1), 50);
}
END_TEST

START_TEST(test_slo_base_policy_and_admission)
{
    policy_config_t config = {.slo_base = "pack"};
    policy_t p = {0};
    ck_assert_int_eq(policy_init(&p, "slo", &config), 0);
    sim_t s = {0};
    sim_add(&p, &s, 1, 0, 1 * MS, 0);
    sim_add(&p, &s, 2, 0, 9 * MS, 0);
    /* pack underneath: strict round-robin however long the iterations */
    uint64_t first = sim_step(&p, &s, 0);
    for (int k = 0; k < 10; k++)
        ck_assert_uint_eq(sim_step(&p, &s, 0), k % 2 ? first : 3 - first);
    /* admission: latency-critical first, the others in the base's (arrival) order */
    policy_job_t waiting[4] = {{.id = 10, .arrival_ns = 1}, {.id = 11, .arrival_ns = 2},
                               {.id = 12, .arrival_ns = 3, .latency_target_ns = MS},
                               {.id = 13, .arrival_ns = 4}};
    size_t order[4];
    policy_admission_order(&p, waiting, 4, order, 5);
    ck_assert_uint_eq(order[0], 2);
    ck_assert_uint_eq(order[1], 0);
    ck_assert_uint_eq(order[2], 1);
    ck_assert_uint_eq(order[3], 3);
    policy_fini(&p);
    config.slo_base = "slo"; /* not itself */
    ck_assert_int_eq(policy_init(&p, "slo", &config), -ENOMEM);
    config.slo_base = "lottery";
    ck_assert_int_eq(policy_init(&p, "slo", &config), -ENOMEM);
}
END_TEST

static Suite *specific_suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_switch_keeps_old_policy_when_init_fails);
    suite_add_tcase(s, tc);
    tc = tcase_create("policies");
    tcase_add_test(tc, test_fifo_arrival_order);
    tcase_add_test(tc, test_srtf_short_job_preempts_at_boundary);
    tcase_add_test(tc, test_srtf_estimates);
    tcase_add_test(tc, test_pack_round_robin);
    tcase_add_test(tc, test_pack_many_jobs_out_of_order);
    tcase_add_test(tc, test_records_find_get_remove);
    tcase_add_test(tc, test_fair_equal_attained_time);
    tcase_add_test(tc, test_slo_latency_critical_first);
    tcase_add_test(tc, test_slo_starvation_bound);
    tcase_add_test(tc, test_slo_starvation_bound_configured);
    tcase_add_test(tc, test_slo_base_policy_and_admission);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, policy_nohints_tcase());
    return s;
}

int main(void)
{
    const char *name = getenv("SALUS_TEST_POLICY");
    if (name && !policy_find(name)) {
        fprintf(stderr, "check_policy: unknown policy '%s'\n", name);
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(name ? generic_suite(name) : specific_suite());
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists every test */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
