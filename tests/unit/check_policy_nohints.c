/* Unit tests of the policies that need no job lengths: LAS (las.c) and Gittins (gittins.c).
 * Part of the check_policy program (check_policy.c adds this test case to its suite). */
#include "policy.h"
#include "policy-internal.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#define MS 1000000ull
#define S (1000 * MS)

TCase *policy_nohints_tcase(void);

/* A lane of jobs driven by hand: the test says who runs, for how long. */
typedef struct {
    policy_t policy;
    policy_job_t jobs[8];
    size_t count;
    uint64_t now_ns;
} lane_t;

static void lane_start(lane_t *l, const char *name)
{
    memset(l, 0, sizeof(*l));
    ck_assert_int_eq(policy_init(&l->policy, name, NULL), 0);
}

static size_t lane_add(lane_t *l, uint64_t id, uint64_t attained_ns)
{
    size_t i = l->count++;
    l->jobs[i] = (policy_job_t){.id = id, .arrival_ns = l->now_ns, .attained_ns = attained_ns,
                                .iterations_done = attained_ns ? 1 : 0, .runnable = true};
    policy_job_arrived(&l->policy, &l->jobs[i], l->now_ns);
    return i;
}

/* Job i runs one iteration of duration_ns. */
static void lane_run(lane_t *l, size_t i, uint64_t duration_ns)
{
    l->now_ns += duration_ns;
    l->jobs[i].attained_ns += duration_ns;
    l->jobs[i].iterations_done++;
    l->jobs[i].mean_iteration_ns = l->jobs[i].attained_ns / l->jobs[i].iterations_done;
    policy_iteration_done(&l->policy, &l->jobs[i], duration_ns, l->now_ns);
}

static uint64_t lane_pick(lane_t *l)
{
    int i = policy_pick(&l->policy, 0, l->jobs, l->count, l->now_ns);
    ck_assert_int_ge(i, 0);
    return l->jobs[i].id;
}

static double lane_rank(lane_t *l, size_t i)
{
    double rank = -1;
    ck_assert(policy_job_rank(&l->policy, &l->jobs[i], l->now_ns, &rank));
    return rank;
}

/* ---- LAS --------------------------------------------------------------------------------- */

START_TEST(test_las_queue_thresholds)
{
    ck_assert_uint_eq(policy_las_queue_of(0), 0);
    ck_assert_uint_eq(policy_las_queue_of(1 * S - 1), 0);
    ck_assert_uint_eq(policy_las_queue_of(1 * S), 1);
    ck_assert_uint_eq(policy_las_queue_of(4 * S - 1), 1);
    ck_assert_uint_eq(policy_las_queue_of(4 * S), 2);
    ck_assert_uint_eq(policy_las_queue_of(16 * S), 3);
    ck_assert_uint_eq(policy_las_queue_of(1024 * S - 1), 5);
    ck_assert_uint_eq(policy_las_queue_of(1024 * S), 6);
    ck_assert_uint_eq(policy_las_queue_of(UINT64_MAX), 6);
    for (uint32_t q = 0; q < 6; q++) {
        ck_assert_uint_eq(policy_las_queue_of(policy_las_threshold_ns(q) - 1), q);
        ck_assert_uint_eq(policy_las_queue_of(policy_las_threshold_ns(q)), q + 1);
    }
    ck_assert_uint_eq(policy_las_threshold_ns(6), UINT64_MAX);
    ck_assert_uint_eq(policy_las_promote_after_ns(), 600 * S);
}
END_TEST

START_TEST(test_las_lower_queue_first_fifo_within)
{
    lane_t l;
    lane_start(&l, "las");
    ck_assert_str_eq(policy_rank_name(&l.policy), "queue");
    size_t a = lane_add(&l, 1, 3 * S); /* queue 1, earlier arrival */
    l.now_ns += MS;
    size_t b = lane_add(&l, 2, 2 * S); /* queue 1 too, less attained */
    ck_assert_uint_eq(lane_pick(&l), 1); /* FIFO within a queue, not least attained */
    ck_assert_double_eq(lane_rank(&l, a), 1);
    lane_run(&l, a, 1 * S); /* job 1 reaches 4 s: queue 2 */
    ck_assert_double_eq(lane_rank(&l, a), 2);
    ck_assert_uint_eq(lane_pick(&l), 2);
    size_t c = lane_add(&l, 3, 0); /* a newcomer: queue 0 preempts at the next boundary */
    ck_assert_uint_eq(lane_pick(&l), 3);
    lane_run(&l, c, 999 * MS);
    ck_assert_uint_eq(lane_pick(&l), 3); /* 0.999 s: still queue 0 */
    lane_run(&l, c, 2 * MS);
    ck_assert_double_eq(lane_rank(&l, c), 1);
    ck_assert_uint_eq(lane_pick(&l), 2); /* both queue 1: the earlier arrival */
    (void)b;
    policy_fini(&l.policy);
}
END_TEST

/* A long job waiting behind a stream of newcomers is promoted to queue 0 once it has waited
 * the promotion time, runs one quantum (the first threshold) there, and falls back. */
START_TEST(test_las_promotion)
{
    lane_t l;
    lane_start(&l, "las");
    size_t old = lane_add(&l, 1, 100 * S); /* queue 4 */
    lane_run(&l, old, 1 * S);
    uint64_t last_ran = l.now_ns;
    uint64_t next_id = 2;
    size_t fresh = lane_add(&l, next_id++, 0);
    uint64_t waited_in_low_queue = 0;
    /* newcomers keep queue 0 busy; each runs 0.5 s and is replaced by a new one */
    while (lane_pick(&l) != 1) {
        waited_in_low_queue = l.now_ns - last_ran;
        ck_assert_double_eq(lane_rank(&l, old), 4);
        lane_run(&l, fresh, 500 * MS);
        policy_job_left(&l.policy, l.jobs[fresh].id, l.now_ns);
        l.jobs[fresh] = (policy_job_t){.id = next_id++, .arrival_ns = l.now_ns, .runnable = true};
        policy_job_arrived(&l.policy, &l.jobs[fresh], l.now_ns);
        ck_assert_uint_lt(l.now_ns, last_ran + 700 * S);
    }
    /* promoted exactly when the wait reached the promotion time, not before */
    ck_assert_uint_ge(l.now_ns - last_ran, policy_las_promote_after_ns());
    ck_assert_uint_lt(waited_in_low_queue, policy_las_promote_after_ns());
    ck_assert_double_eq(lane_rank(&l, old), 0);
    /* one quantum of queue 0 (1 s) in 0.25 s iterations, interleaved with nobody */
    int promoted_turns = 0;
    while (lane_pick(&l) == 1) {
        lane_run(&l, old, 250 * MS);
        promoted_turns++;
        ck_assert_int_le(promoted_turns, 4);
    }
    ck_assert_int_eq(promoted_turns, 4);
    ck_assert_double_eq(lane_rank(&l, old), 4); /* back to its queue */
    policy_fini(&l.policy);
}
END_TEST

/* ---- Gittins ----------------------------------------------------------------------------- */

START_TEST(test_gittins_index_hand_computed)
{
    /* Sizes 1, 1, 1, 10 s. At a = 0: d = 1 s gives P(S <= 1) / E[min(S, 1)] = (3/4) / 1
     * = 0.75/s; d = 10 s gives 1 / 3.25 = 0.31/s: G(0) = 0.75. At a = 0.5 s: d = 0.5 gives
     * (3/4) / 0.5 = 1.5/s. At a = 2 s only the 10 s job is left: 1 / 8 = 0.125/s. */
    const uint64_t sizes[] = {1 * S, 1 * S, 1 * S, 10 * S};
    ck_assert_double_eq_tol(policy_gittins_index(sizes, 4, 0), 0.75, 1e-9);
    ck_assert_double_eq_tol(policy_gittins_index(sizes, 4, 500 * MS), 1.5, 1e-9);
    ck_assert_double_eq_tol(policy_gittins_index(sizes, 4, 2 * S), 0.125, 1e-9);
    ck_assert_double_eq(policy_gittins_index(sizes, 4, 10 * S), 0);
    ck_assert_double_eq(policy_gittins_index(sizes, 0, 0), 0);
    /* Sizes 2, 4, 6 s at a = 1 s: d = 1: (1/3) / 1 = 0.333; d = 3: (2/3) / (1 + 3 + 3)/3
     * = 2/7 = 0.286; d = 5: 1 / (1 + 3 + 5)/3 = 1/3: G = 1/3. */
    const uint64_t even[] = {2 * S, 4 * S, 6 * S};
    ck_assert_double_eq_tol(policy_gittins_index(even, 3, 1 * S), 1.0 / 3, 1e-9);
}
END_TEST

/* Teaches the policy sizes: jobs that run size_ns each and leave. */
static void teach(lane_t *l, const uint64_t *sizes_ns, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        uint64_t id = 1000 + k;
        policy_job_t job = {.id = id, .arrival_ns = l->now_ns, .runnable = true};
        policy_job_arrived(&l->policy, &job, l->now_ns);
        job.attained_ns = sizes_ns[k];
        job.iterations_done = 1;
        l->now_ns += sizes_ns[k];
        policy_iteration_done(&l->policy, &job, sizes_ns[k], l->now_ns);
        policy_job_left(&l->policy, id, l->now_ns);
    }
}

START_TEST(test_gittins_learns_and_orders)
{
    static const uint64_t sizes[] = {1 * S, 1 * S, 1 * S, 10 * S};
    lane_t l;
    lane_start(&l, "gittins");
    ck_assert_str_eq(policy_rank_name(&l.policy), "index");
    size_t half = lane_add(&l, 1, 500 * MS);
    ck_assert_double_eq(lane_rank(&l, half), 0); /* nothing learned yet */
    l.now_ns += MS;
    lane_add(&l, 2, 0);
    ck_assert_uint_eq(lane_pick(&l), 2); /* before any size is known: least attained */
    teach(&l, sizes, 4);
    /* Now a job half way to the common 1 s size (index ~1.36/s, its bucket starts at 448 ms)
     * goes before a new one (0.75/s): the order LAS would not take. */
    ck_assert_double_eq_tol(lane_rank(&l, half), 3.0 / (4 * 0.552), 1e-6);
    ck_assert_double_eq_tol(lane_rank(&l, 1), 0.75, 1e-9);
    ck_assert_uint_eq(lane_pick(&l), 1);
    /* Past the common size, the new job goes first (0.125/s at 2 s against 0.75/s). */
    lane_run(&l, half, 1500 * MS);
    ck_assert_uint_eq(lane_pick(&l), 2);
    /* A job that never ran teaches nothing; one that ran does, when it leaves. */
    policy_job_left(&l.policy, 2, l.now_ns);
    l.count = 1;
    ck_assert_double_eq_tol(lane_rank(&l, 0), 1.0 / 8, 0.02);
    policy_job_left(&l.policy, 1, l.now_ns); /* 2 s: a fifth size */
    l.jobs[0] = (policy_job_t){.id = 3, .runnable = true};
    /* sizes 1, 1, 1, 2, 10 at 0: d = 1 s gives (3/5) / 1 = 0.6/s */
    ck_assert_double_eq_tol(lane_rank(&l, 0), 0.6, 1e-9);
    policy_fini(&l.policy);
}
END_TEST

/* Gittins promotes as LAS does: a job of low index waiting behind a stream of new jobs runs
 * once it has waited the promotion time, for one second of service. */
START_TEST(test_gittins_promotion)
{
    static const uint64_t sizes[] = {1 * S, 1 * S, 1 * S, 10 * S};
    lane_t l;
    lane_start(&l, "gittins");
    teach(&l, sizes, 4);
    size_t old = lane_add(&l, 1, 5 * S); /* index 1/5 per s */
    lane_run(&l, old, 1 * S);
    uint64_t last_ran = l.now_ns;
    uint64_t next_id = 2;
    size_t fresh = lane_add(&l, next_id++, 0); /* index 0.75 per s, and more as it runs */
    while (lane_pick(&l) != 1) {
        lane_run(&l, fresh, 500 * MS);
        policy_job_left(&l.policy, l.jobs[fresh].id, l.now_ns);
        l.jobs[fresh] = (policy_job_t){.id = next_id++, .arrival_ns = l.now_ns, .runnable = true};
        policy_job_arrived(&l.policy, &l.jobs[fresh], l.now_ns);
        ck_assert_uint_lt(l.now_ns, last_ran + 700 * S);
    }
    ck_assert_uint_ge(l.now_ns - last_ran, policy_las_promote_after_ns());
    int promoted_turns = 0;
    while (lane_pick(&l) == 1) {
        lane_run(&l, old, 250 * MS);
        ck_assert_int_le(++promoted_turns, 4);
    }
    ck_assert_int_eq(promoted_turns, 4);
    policy_fini(&l.policy);
}
END_TEST

START_TEST(test_gittins_state_round_trip)
{
    static const uint64_t sizes[] = {1 * S, 1 * S, 1 * S, 10 * S, 3 * S};
    lane_t a, b;
    uint8_t saved[256], again[256];
    lane_start(&a, "gittins");
    teach(&a, sizes, 5);
    ck_assert_int_eq(policy_save_state(&a.policy, saved, 16), -ENOSPC);
    long len = policy_save_state(&a.policy, saved, sizeof(saved));
    ck_assert_int_eq(len, 16 + 5 * 8 + 8);
    lane_add(&a, 1, 0);

    lane_start(&b, "gittins");
    lane_add(&b, 1, 0);
    ck_assert_double_eq(lane_rank(&b, 0), 0);
    ck_assert_int_eq(policy_load_state(&b.policy, saved, (size_t)len), 0);
    ck_assert_double_eq(lane_rank(&b, 0), lane_rank(&a, 0));
    ck_assert_double_gt(lane_rank(&b, 0), 0);
    ck_assert_int_eq(policy_save_state(&b.policy, again, sizeof(again)), len);
    ck_assert_mem_eq(saved, again, (size_t)len);
    policy_fini(&b.policy);

    /* Corrupt bytes are refused and leave the state as init made it. */
    lane_start(&b, "gittins");
    lane_add(&b, 1, 0);
    for (long at = 0; at < len; at++) {
        memcpy(again, saved, (size_t)len);
        again[at] ^= 0x40;
        int rc = policy_load_state(&b.policy, again, (size_t)len);
        ck_assert_msg(rc == -EINVAL || rc == -EPROTO, "byte %ld flipped: %d", at, rc);
    }
    ck_assert_int_eq(policy_load_state(&b.policy, saved, (size_t)len - 1), -EINVAL);
    ck_assert_int_eq(policy_load_state(&b.policy, saved, 3), -EINVAL);
    ck_assert_int_eq(policy_load_state(&b.policy, NULL, 0), -EINVAL);
    ck_assert_double_eq(lane_rank(&b, 0), 0);
    ck_assert_int_eq(policy_save_state(&b.policy, again, sizeof(again)), 16 + 8);
    policy_fini(&b.policy);
    policy_fini(&a.policy);

    /* A policy without the hooks says so. */
    policy_t fifo = {0};
    ck_assert_int_eq(policy_init(&fifo, "fifo", NULL), 0);
    ck_assert_int_eq(policy_save_state(&fifo, saved, sizeof(saved)), -ENOTSUP);
    ck_assert_ptr_null(policy_rank_name(&fifo));
    policy_fini(&fifo);
}
END_TEST

TCase *policy_nohints_tcase(void)
{
    TCase *tc = tcase_create("no job lengths");
    tcase_add_test(tc, test_las_queue_thresholds);
    tcase_add_test(tc, test_las_lower_queue_first_fifo_within);
    tcase_add_test(tc, test_las_promotion);
    tcase_add_test(tc, test_gittins_index_hand_computed);
    tcase_add_test(tc, test_gittins_learns_and_orders);
    tcase_add_test(tc, test_gittins_promotion);
    tcase_add_test(tc, test_gittins_state_round_trip);
    return tc;
}
