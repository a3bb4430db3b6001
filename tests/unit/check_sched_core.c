/* Unit tests for the scheduling core (scheduler-core/sched_core.h), with a fake clock: every
 * scenario of the policy integration test (FIFO order, PACK concurrency, SRTF preemption at
 * boundaries, FAIR shares, never-fits refusal, learned sizes) plus a merge during an admission
 * round, 200 jobs in 200 lanes, visible waiting and a reserve that leaves no room. Nothing
 * sleeps: time is a number the test advances. */
#include "check_run.h"
#include "sched_core.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define MS 1000000ull

/* A fake node: the core, the clock, and what each job has done (as the shim counts it). */
typedef struct fake_job_s {
    uint64_t iterations, busy_ns;
    uint64_t persistent_bytes, ephemeral_bytes; /* measured */
    int admitted, refused, running, free_run;
    int gpu;
    uint32_t lane;
    uint64_t budget_bytes;
    int learned;
    int gate; /* the last GATE role (SCHED_CORE_GATE_*) */
} fake_job_t;

typedef struct fake_s {
    sched_core_t *core;
    sched_core_effects_t fx;
    uint64_t now_ns;
    fake_job_t jobs[512];
    uint64_t grants[4096]; /* job ids, in grant order */
    size_t grant_count;
    uint64_t admits[512]; /* job ids, in admission order */
    size_t admit_count;
    const char *last_refusal;
    uint64_t done_groups[1024], done_seqs[1024]; /* SLOT_DONE effects, in order */
    size_t done_count;
} fake_t;

/* Per-user caps and lanes shared across users for fake_start_users (0: none). */
typedef struct fake_users_s {
    double share;
    uint32_t max_jobs;
    bool share_lanes;
    uint64_t size_grain_bytes; /* the config's (0: the default) */
    uint64_t persistent_grain_bytes;
} fake_users_t;

static void fake_start_users(fake_t *f, const char *policy, uint64_t gpu_bytes,
                             const fake_users_t *users)
{
    sched_core_config_t config;
    int rc = 0;
    memset(f, 0, sizeof(*f));
    sched_core_config_default(&config);
    config.size_grain_bytes = users->size_grain_bytes;
    config.persistent_grain_bytes = users->persistent_grain_bytes;
    config.policy_name = policy;
    config.lanes.job_overhead_bytes = 0;
    config.user_gpu_share = users->share;
    config.user_max_jobs = users->max_jobs;
    config.lanes.share_lanes_across_users = users->share_lanes;
    sched_core_config_fit_gpu(&config, gpu_bytes);
    f->core = sched_core_create(&config, &rc);
    ck_assert_msg(f->core != NULL, "sched_core_create(%s): %d", policy, rc);
    ck_assert_int_eq(sched_core_add_gpu(f->core, 0, gpu_bytes, 0), 0);
    f->now_ns = 1000 * MS;
}

static void fake_start_grain(fake_t *f, const char *policy, uint64_t gpu_bytes,
                             uint64_t size_grain_bytes)
{
    fake_users_t users = {.size_grain_bytes = size_grain_bytes};
    fake_start_users(f, policy, gpu_bytes, &users);
}

static void fake_start(fake_t *f, const char *policy, uint64_t gpu_bytes)
{
    fake_users_t none = {0};
    fake_start_users(f, policy, gpu_bytes, &none);
}

static void fake_stop(fake_t *f)
{
    sched_core_destroy(f->core);
    sched_core_effects_free(&f->fx);
}

/* What the daemon's adapter does with the effects, on the fake jobs. */
static void apply(fake_t *f)
{
    for (size_t i = 0; i < f->fx.count; i++) {
        const sched_core_effect_t *e = &f->fx.items[i];
        ck_assert_uint_lt(e->job_id, 512);
        fake_job_t *j = &f->jobs[e->job_id];
        switch (e->kind) {
        case SCHED_CORE_ADMIT:
            ck_assert(!j->admitted);
            j->admitted = 1;
            j->gpu = e->gpu;
            j->lane = e->lane;
            j->budget_bytes = e->budget_bytes;
            ck_assert_uint_lt(f->admit_count, 512);
            f->admits[f->admit_count++] = e->job_id;
            break;
        case SCHED_CORE_REFUSE:
            ck_assert_ptr_nonnull(e->reason);
            j->refused = 1;
            f->last_refusal = e->reason;
            break;
        case SCHED_CORE_GRANT:
            ck_assert(j->admitted && !j->running);
            j->running = 1;
            j->free_run = e->free_run;
            j->lane = e->lane;
            ck_assert_uint_lt(f->grant_count, 4096);
            f->grants[f->grant_count++] = e->job_id;
            break;
        case SCHED_CORE_STOP_FREE_RUN:
            j->free_run = 0;
            break;
        case SCHED_CORE_BUDGET:
            j->budget_bytes = e->budget_bytes;
            break;
        case SCHED_CORE_MOVE:
            j->lane = e->lane;
            break;
        case SCHED_CORE_LEARNED:
            j->learned += e->reason == NULL;
            break;
        case SCHED_CORE_SLOT_DONE: /* cluster groups (job_id: the group's) */
            ck_assert_uint_lt(f->done_count, 1024);
            f->done_groups[f->done_count] = e->job_id;
            f->done_seqs[f->done_count++] = e->seq;
            break;
        case SCHED_CORE_GATE:
            ck_assert(j->admitted);
            j->gate = e->gate;
            break;
        }
    }
    sched_core_effects_clear(&f->fx);
}

static void reg(fake_t *f, uint64_t id, uint32_t uid, uint64_t p, uint64_t e, uint64_t iterations,
                int32_t priority)
{
    sched_core_job_hints_t h = {.id = id, .uid = uid, .persistent_bytes = p,
                                .ephemeral_bytes = e, .iterations_expected = iterations,
                                .priority = priority};
    ck_assert_int_eq(sched_core_job_registered(f->core, &h, f->now_ns, &f->fx), 0);
    apply(f);
}

/* The job stops at a boundary; if it ran, it ran one iteration of iteration_ns. */
static void boundary(fake_t *f, uint64_t id, uint64_t iteration_ns)
{
    fake_job_t *j = &f->jobs[id];
    uint64_t last = 0;
    if (j->running) {
        j->iterations++;
        j->busy_ns += iteration_ns;
        last = iteration_ns;
        j->running = 0;
    }
    sched_core_boundary_t b = {.iterations = j->iterations, .busy_ns = j->busy_ns,
                               .last_iteration_ns = last, .persistent_bytes = j->persistent_bytes,
                               .ephemeral_bytes = j->ephemeral_bytes, .ready = true};
    ck_assert_int_eq(sched_core_job_boundary(f->core, id, &b, f->now_ns, &f->fx), 0);
    apply(f);
}

/* Lanes held for GPU time: the job gives its lane up at a quiescent point after held_ns of
 * GPU work and does not ask for a turn yet (its host part follows). */
static void release(fake_t *f, uint64_t id, uint64_t held_ns)
{
    fake_job_t *j = &f->jobs[id];
    ck_assert(j->running);
    j->iterations++;
    j->busy_ns += held_ns;
    j->running = 0;
    sched_core_boundary_t b = {.iterations = j->iterations, .busy_ns = j->busy_ns,
                               .last_iteration_ns = held_ns, .ready = false};
    ck_assert_int_eq(sched_core_job_boundary(f->core, id, &b, f->now_ns, &f->fx), 0);
    apply(f);
}

/* ... and asks again at its next submission. */
static void ask(fake_t *f, uint64_t id)
{
    fake_job_t *j = &f->jobs[id];
    sched_core_boundary_t b = {.iterations = j->iterations, .busy_ns = j->busy_ns, .ready = true};
    ck_assert_int_eq(sched_core_job_boundary(f->core, id, &b, f->now_ns, &f->fx), 0);
    apply(f);
}

static void leave(fake_t *f, uint64_t id)
{
    f->jobs[id].running = 0;
    ck_assert_int_eq(sched_core_job_left(f->core, id, SCHED_CORE_EXIT_DONE, f->now_ns, &f->fx), 0);
    apply(f);
}

/* Runs the job that holds lane `lane` for one iteration of iteration_ns (the clock moves). */
static uint64_t run_one(fake_t *f, uint64_t first_id, uint64_t last_id, uint64_t iteration_ns)
{
    for (uint64_t id = first_id; id <= last_id; id++) {
        if (f->jobs[id].running) {
            f->now_ns += iteration_ns;
            boundary(f, id, iteration_ns);
            return id;
        }
    }
    return 0;
}

START_TEST(test_fifo_one_at_a_time_in_order)
{
    fake_t f;
    fake_start(&f, "fifo", 4 * GIB);
    for (uint64_t id = 1; id <= 3; id++)
        reg(&f, id, 1000, 100 * MIB, 100 * MIB, 2, 0);
    ck_assert(f.jobs[1].admitted && !f.jobs[2].admitted && !f.jobs[3].admitted);
    for (uint64_t id = 1; id <= 3; id++) {
        ck_assert_msg(f.jobs[id].admitted, "job %llu not admitted in turn", (unsigned long long)id);
        boundary(&f, id, 0); /* its first boundary: it runs alone, freely */
        ck_assert(f.jobs[id].running && f.jobs[id].free_run);
        f.now_ns += 50 * MS;
        leave(&f, id);
    }
    ck_assert_uint_eq(f.grant_count, 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_uint_eq(f.grants[i], i + 1);
    fake_stop(&f);
}
END_TEST

START_TEST(test_pack_jobs_that_fit_run_at_once)
{
    fake_t f;
    fake_start(&f, "pack", 4 * GIB);
    for (uint64_t id = 1; id <= 4; id++)
        reg(&f, id, 1000, 100 * MIB, 200 * MIB, 10, 0);
    for (uint64_t id = 1; id <= 4; id++) {
        ck_assert(f.jobs[id].admitted);
        for (uint64_t other = 1; other < id; other++)
            ck_assert_uint_ne(f.jobs[id].lane, f.jobs[other].lane);
        boundary(&f, id, 0);
    }
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_msg(f.jobs[id].running && f.jobs[id].free_run, "job %llu", (unsigned long long)id);
    fake_stop(&f);
}
END_TEST

/* 1 GiB GPU: jobs of 100 + 600 MiB cannot have a lane each, so they share one and take turns. */
START_TEST(test_pack_shared_lane_takes_turns)
{
    fake_t f;
    fake_start(&f, "pack", 1 * GIB);
    for (uint64_t id = 1; id <= 3; id++)
        reg(&f, id, 1000, 100 * MIB, 600 * MIB, 10, 0);
    for (uint64_t id = 1; id <= 3; id++) {
        ck_assert(f.jobs[id].admitted);
        ck_assert_uint_eq(f.jobs[id].lane, f.jobs[1].lane);
        boundary(&f, id, 0);
    }
    /* one runs, and it may not run freely: others wait */
    int running = 0;
    for (uint64_t id = 1; id <= 3; id++)
        running += f.jobs[id].running;
    ck_assert_int_eq(running, 1);
    for (int k = 0; k < 30; k++)
        ck_assert_uint_ne(run_one(&f, 1, 3, 10 * MS), 0);
    for (uint64_t id = 1; id <= 3; id++)
        ck_assert_uint_eq(f.jobs[id].iterations, 10);
    fake_stop(&f);
}
END_TEST

/* Lanes held for GPU time (the daemon's --lane-hold gpu): two jobs of one lane. A released
 * lane goes at once to the lane-mate that asks; the holder then runs freely and is told to
 * stop when the other asks again; a job that released and finds the lane free gets it
 * back; what the core books as GPU time is what the jobs report (the held time), not the
 * wall time between their boundaries. */
START_TEST(test_released_lane_goes_to_the_job_that_asks)
{
    fake_t f;
    sched_core_job_info_t info;
    fake_start(&f, "pack", 1 * GIB);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 100, 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 100, 0);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane);
    ask(&f, 1);
    ck_assert(f.jobs[1].running && f.jobs[1].free_run);
    ask(&f, 2); /* job 2 waits: job 1 must stop running freely */
    ck_assert(!f.jobs[2].running && !f.jobs[1].free_run);
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_PARKED);
    ck_assert_uint_eq(info.lane_holder, 1);

    f.now_ns += 4 * MS;
    release(&f, 1, 4 * MS); /* GPU work done: the lane goes to job 2 at once */
    ck_assert(f.jobs[2].running && f.jobs[2].free_run);
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_IDLE); /* on the host, holding nothing */

    f.now_ns += 36 * MS; /* job 1's host part; job 2 runs meanwhile */
    ask(&f, 1);
    ck_assert(!f.jobs[1].running && !f.jobs[2].free_run);
    f.now_ns += 2 * MS;
    release(&f, 2, 38 * MS);
    ck_assert(f.jobs[1].running);

    /* alone again: job 1 releases with nobody waiting and gets the lane back when it asks */
    release(&f, 1, 3 * MS);
    f.now_ns += 50 * MS;
    ask(&f, 1);
    ck_assert(f.jobs[1].running && !f.jobs[2].running);
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert_uint_eq(info.iterations, 2);
    ck_assert_uint_eq(info.busy_ns, 7 * MS); /* held 4 + 3 ms, over about 100 ms of wall time */
    fake_stop(&f);
}
END_TEST

START_TEST(test_srtf_short_overtakes_at_a_boundary)
{
    fake_t f;
    fake_start(&f, "srtf", 1 * GIB);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 1000, 0); /* long */
    boundary(&f, 1, 0);
    for (int k = 0; k < 5; k++)
        ck_assert_uint_eq(run_one(&f, 1, 2, 20 * MS), 1);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 3, 0); /* short, same lane */
    ck_assert(f.jobs[2].admitted);
    ck_assert_uint_eq(f.jobs[2].lane, f.jobs[1].lane);
    boundary(&f, 2, 0);
    ck_assert(!f.jobs[2].running);
    /* the long one must stop at its next boundary, and there the short one gets the lane */
    ck_assert(!f.jobs[1].free_run);
    ck_assert_uint_eq(run_one(&f, 1, 2, 20 * MS), 1);
    ck_assert(f.jobs[2].running);
    fake_stop(&f);
}
END_TEST

START_TEST(test_fair_equal_gpu_time)
{
    fake_t f;
    fake_start(&f, "fair", 1 * GIB);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 0, 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 0, 0);
    boundary(&f, 1, 0);
    boundary(&f, 2, 0);
    /* job 1 has iterations twice as long: it should get about half as many turns */
    for (int k = 0; k < 300; k++) {
        uint64_t id = f.jobs[1].running ? 1 : 2;
        run_one(&f, id, id, id == 1 ? 20 * MS : 10 * MS);
    }
    uint64_t a = f.jobs[1].busy_ns, b = f.jobs[2].busy_ns;
    uint64_t hi = a > b ? a : b, lo = a > b ? b : a;
    ck_assert_msg(hi - lo <= hi / 10, "GPU time %llu vs %llu ms", (unsigned long long)(a / MS),
                  (unsigned long long)(b / MS));
    fake_stop(&f);
}
END_TEST

START_TEST(test_never_fits_is_refused)
{
    fake_t f;
    fake_start(&f, "pack", 1 * GIB);
    reg(&f, 1, 1000, 2 * GIB, 2 * GIB, 2, 0);
    ck_assert(f.jobs[1].refused && !f.jobs[1].admitted);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), -ENOENT);
    ck_assert_uint_eq(sched_core_job_count(f.core), 0);
    fake_stop(&f);
}
END_TEST

START_TEST(test_learned_sizes)
{
    fake_t f;
    fake_start(&f, "pack", 4 * GIB);
    reg(&f, 1, 1000, LANES_SIZE_UNKNOWN, LANES_SIZE_UNKNOWN, 0, 0);
    ck_assert(f.jobs[1].admitted);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert(info.provisional);
    uint64_t provisional_budget = f.jobs[1].budget_bytes;
    f.jobs[1].persistent_bytes = 100 * MIB;
    f.jobs[1].ephemeral_bytes = 50 * MIB;
    boundary(&f, 1, 0);
    for (int k = 0; k < SCHED_CORE_DEFAULT_WARMUP_ITERATIONS; k++) {
        ck_assert_msg(!f.jobs[1].free_run, "a provisional job stops at every boundary");
        run_one(&f, 1, 1, 5 * MS);
    }
    ck_assert_int_eq(f.jobs[1].learned, 1);
    ck_assert_uint_eq(f.jobs[1].budget_bytes, 150 * MIB);
    ck_assert_uint_lt(f.jobs[1].budget_bytes, provisional_budget);
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert(!info.provisional);
    ck_assert_uint_eq(info.budget_bytes, 150 * MIB);
    ck_assert_uint_eq(sched_core_gpu_budget_bytes(f.core, 0), 150 * MIB);
    fake_stop(&f);
}
END_TEST

/* Runs job `id` (registered without hints, measuring p and e) through its warm-up; returns
 * its learned budget. */
static uint64_t learn(fake_t *f, uint64_t id, uint64_t p, uint64_t e)
{
    reg(f, id, 1000, LANES_SIZE_UNKNOWN, LANES_SIZE_UNKNOWN, 0, 0);
    ck_assert(f->jobs[id].admitted);
    f->jobs[id].persistent_bytes = p;
    f->jobs[id].ephemeral_bytes = e;
    boundary(f, id, 0);
    for (int k = 0; k < SCHED_CORE_DEFAULT_WARMUP_ITERATIONS; k++)
        run_one(f, id, id, 5 * MS);
    ck_assert_int_eq(f->jobs[id].learned, 1);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f->core, id, &info), 0);
    ck_assert(!info.provisional);
    ck_assert_uint_eq(info.budget_bytes, f->jobs[id].budget_bytes);
    return f->jobs[id].budget_bytes;
}

/* Learned sizes are whole grains of the memory the daemon hands out: a job that keeps nothing
 * between iterations and allocates a few KiB in each gets one grain, not a few KiB (below one
 * chunk, its next allocation would fail). */
START_TEST(test_learned_sizes_whole_grains)
{
    fake_t f;
    fake_start(&f, "pack", 4 * GIB);
    ck_assert_uint_eq(learn(&f, 1, 0, 3 << 10), SCHED_CORE_DEFAULT_SIZE_GRAIN_BYTES);
    leave(&f, 1);
    /* nothing measured at all: still one grain */
    ck_assert_uint_eq(learn(&f, 2, 0, 0), SCHED_CORE_DEFAULT_SIZE_GRAIN_BYTES);
    leave(&f, 2);
    /* each size rounds up on its own: 5 MiB + 1 -> 6 MiB, 1 MiB -> 2 MiB */
    ck_assert_uint_eq(learn(&f, 3, 5 * MIB + 1, 1 * MIB), 8 * MIB);
    leave(&f, 3);
    ck_assert_uint_eq(sched_core_gpu_budget_bytes(f.core, 0), 0);
    fake_stop(&f);

    /* the daemon's grain (its coarsest chunk granularity) */
    fake_start_grain(&f, "pack", 4 * GIB, 64 * MIB);
    ck_assert_uint_eq(learn(&f, 1, 0, 4096), 64 * MIB);
    ck_assert_uint_eq(learn(&f, 2, 65 * MIB, 64 * MIB), 192 * MIB);
    fake_stop(&f);

    /* the shim's chunk (persistent grain): kept blocks pin whole chunks, ephemeral ones do not */
    fake_users_t chunks = {.size_grain_bytes = 2 * MIB, .persistent_grain_bytes = 64 * MIB};
    fake_start_users(&f, "pack", 4 * GIB, &chunks);
    ck_assert_uint_eq(learn(&f, 1, 16 * MIB, 550 * MIB), 64 * MIB + 550 * MIB);
    ck_assert_uint_eq(learn(&f, 2, 0, 3 * MIB), 4 * MIB);
    ck_assert_uint_eq(learn(&f, 3, 65 * MIB, 1 * MIB), 128 * MIB + 2 * MIB);
    fake_stop(&f);
}
END_TEST

/* A later admission of one round merges the lanes of earlier ones: the ADMIT effects carry
 * the lanes and budgets as they are after the round, not as they were at each admission. */
START_TEST(test_merge_during_admission_round)
{
    fake_t f;
    fake_start(&f, "pack", 10 * GIB);
    sched_core_job_hints_t h[3] = {
        {.id = 1, .uid = 1000, .persistent_bytes = 0, .ephemeral_bytes = 4 * GIB},
        {.id = 2, .uid = 1000, .persistent_bytes = 0, .ephemeral_bytes = 4 * GIB},
        {.id = 3, .uid = 2000, .persistent_bytes = 0, .ephemeral_bytes = 3 * GIB},
    };
    ck_assert_int_eq(sched_core_jobs_registered(f.core, h, 3, f.now_ns, &f.fx), 0);
    int moves = 0;
    for (size_t i = 0; i < f.fx.count; i++)
        moves += f.fx.items[i].kind == SCHED_CORE_MOVE;
    apply(&f);
    for (uint64_t id = 1; id <= 3; id++) {
        ck_assert_msg(f.jobs[id].admitted, "job %llu", (unsigned long long)id);
        lanes_placement_t pl;
        ck_assert_int_eq(lanes_job_placement(sched_core_lanes(f.core), id, &pl), LANES_OK);
        ck_assert_uint_eq(f.jobs[id].lane, pl.lane_id);
        ck_assert_uint_eq(f.jobs[id].budget_bytes, pl.persistent_bytes + pl.lane_size_bytes);
    }
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane); /* merged */
    ck_assert_uint_ne(f.jobs[3].lane, f.jobs[1].lane);
    ck_assert_int_eq(moves, 0); /* their ADMIT is already final: no stale lane to correct */
    fake_stop(&f);
}
END_TEST

/* 200 tiny jobs at once on one large GPU: a lane each, all run at once, all finish. No fixed
 * cap anywhere: the 65th job gets its turn like the first. */
START_TEST(test_200_jobs_200_lanes)
{
    fake_t f;
    /* _i == 1: the same under per-user caps that leave room for all 200 */
    fake_users_t users = {.share = _i ? 0.75 : 0, .max_jobs = _i ? 200 : 0};
    fake_start_users(&f, "pack", 64 * GIB, &users);
    for (uint64_t id = 1; id <= 200; id++)
        reg(&f, id, 1000, 1 * MIB, 1 * MIB, 3, 0);
    size_t lanes = lanes_list(sched_core_lanes(f.core), NULL, 0);
    ck_assert_uint_eq(lanes, 200);
    for (uint64_t id = 1; id <= 200; id++) {
        ck_assert(f.jobs[id].admitted);
        boundary(&f, id, 0);
        ck_assert_msg(f.jobs[id].running, "job %llu got no turn", (unsigned long long)id);
    }
    for (int round = 0; round < 3; round++)
        for (uint64_t id = 1; id <= 200; id++) {
            f.now_ns += MS;
            boundary(&f, id, MS);
        }
    for (uint64_t id = 1; id <= 200; id++) {
        ck_assert_uint_eq(f.jobs[id].iterations, 3);
        leave(&f, id);
    }
    ck_assert_uint_eq(sched_core_job_count(f.core), 0);
    ck_assert_uint_eq(lanes_list(sched_core_lanes(f.core), NULL, 0), 0);
    fake_stop(&f);
}
END_TEST

/* A job parked behind a lane-mate shows its wait in progress and who holds its lane. */
START_TEST(test_wait_in_progress_is_visible)
{
    fake_t f;
    fake_start(&f, "fifo", 1 * GIB);
    sched_core_effects_t none = {0};
    ck_assert_int_eq(sched_core_set_policy(f.core, "pack", f.now_ns, &none), 0);
    sched_core_effects_free(&none);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 10, 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 10, 0);
    boundary(&f, 1, 0);
    uint64_t parked_at = f.now_ns + 5 * MS;
    f.now_ns = parked_at;
    boundary(&f, 2, 0);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_PARKED);
    ck_assert_uint_eq(info.waiting_since_ns, parked_at);
    ck_assert_uint_eq(info.lane_holder, 1);
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_RUNNING);
    ck_assert_str_eq(sched_core_phase_name(SCHED_CORE_PARKED), "parked");
    fake_stop(&f);
}
END_TEST

START_TEST(test_reserve_as_large_as_the_gpu_is_an_error)
{
    sched_core_t *core = sched_core_create(NULL, NULL);
    ck_assert_ptr_nonnull(core);
    ck_assert_int_eq(sched_core_add_gpu(core, 0, 4 * GIB, 4 * GIB), -EINVAL);
    ck_assert_int_eq(sched_core_add_gpu(core, 0, 4 * GIB, 1 * GIB), 0);
    ck_assert_int_eq(sched_core_add_gpu(core, 0, 4 * GIB, 1 * GIB), -EINVAL); /* known */
    sched_core_destroy(core);
    int rc = 0;
    sched_core_config_t config;
    sched_core_config_default(&config);
    config.policy_name = "no-such-policy";
    ck_assert_ptr_null(sched_core_create(&config, &rc));
    ck_assert_int_eq(rc, -ENOENT);
}
END_TEST

/* A job that leaves while holding its lane hands it to the next one; unknown ids are no-ops. */
START_TEST(test_leaving_holder_hands_the_lane_on)
{
    fake_t f;
    fake_start(&f, "pack", 1 * GIB);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 10, 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 10, 0);
    boundary(&f, 1, 0);
    boundary(&f, 2, 0);
    ck_assert(f.jobs[1].running && !f.jobs[2].running);
    leave(&f, 1);
    ck_assert(f.jobs[2].running && f.jobs[2].free_run);
    ck_assert_int_eq(sched_core_job_left(f.core, 77, SCHED_CORE_EXIT_GONE, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(f.fx.count, 0);
    sched_core_boundary_t b = {.ready = true};
    ck_assert_int_eq(sched_core_job_boundary(f.core, 77, &b, f.now_ns, &f.fx), -ENOENT);
    ck_assert_int_eq(sched_core_set_policy(f.core, "nope", f.now_ns, &f.fx), -ENOENT);
    ck_assert_str_eq(sched_core_policy_name(f.core), "pack");
    fake_stop(&f);
}
END_TEST

/* The policy's rank of a job through the core: LAS's queue follows the GPU time the job
 * reported at its boundaries; a policy without a view says so. */
START_TEST(test_policy_rank_through_the_core)
{
    fake_t f;
    double rank = -1;
    fake_start(&f, "pack", 1 * GIB);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 0, 0);
    ck_assert_ptr_null(sched_core_rank_name(f.core));
    ck_assert_int_eq(sched_core_job_rank(f.core, 1, f.now_ns, &rank), -ENOTSUP);
    ck_assert_int_eq(sched_core_set_policy(f.core, "las", f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert_str_eq(sched_core_rank_name(f.core), "queue");
    ck_assert_int_eq(sched_core_job_rank(f.core, 99, f.now_ns, &rank), -ENOENT);
    ck_assert_int_eq(sched_core_job_rank(f.core, 1, f.now_ns, &rank), 0);
    ck_assert_double_eq(rank, 0);
    boundary(&f, 1, 0);
    ck_assert(f.jobs[1].running);
    f.now_ns += 1500 * MS;
    boundary(&f, 1, 1500 * MS); /* 1.5 s of GPU time: past the first queue (1 s) */
    ck_assert_int_eq(sched_core_job_rank(f.core, 1, f.now_ns, &rank), 0);
    ck_assert_double_eq(rank, 1);
    fake_stop(&f);
}
END_TEST

/* The GRANT effect of the last event for job id (fails when there is none). */
static const sched_core_effect_t *grant_of(const fake_t *f, uint64_t id)
{
    for (size_t i = 0; i < f->fx.count; i++)
        if (f->fx.items[i].kind == SCHED_CORE_GRANT && f->fx.items[i].job_id == id)
            return &f->fx.items[i];
    ck_abort_msg("no grant for job %llu", (unsigned long long)id);
    return NULL;
}

/* A boundary that does not ask for a turn (a host part follows). */
static void boundary_not_ready(fake_t *f, uint64_t id, uint64_t iteration_ns)
{
    fake_job_t *j = &f->jobs[id];
    if (j->running) {
        j->iterations++;
        j->busy_ns += iteration_ns;
        j->running = 0;
    }
    sched_core_boundary_t b = {.iterations = j->iterations, .busy_ns = j->busy_ns,
                               .last_iteration_ns = iteration_ns, .ready = false};
    ck_assert_int_eq(sched_core_job_boundary(f->core, id, &b, f->now_ns, &f->fx), 0);
    apply(f);
}

/* The lane's holder in the lane manager's books (0: none). */
static uint64_t lanes_holder(const fake_t *f, uint32_t lane)
{
    lanes_lane_info_t infos[16];
    size_t n = lanes_list(sched_core_lanes(f->core), infos, 16);
    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++)
        if (infos[i].lane_id == lane)
            return infos[i].active ? infos[i].active_job_id : 0;
    ck_abort_msg("no lane %u", lane);
    return 0;
}

/* A job that takes its lane again at its boundary (the core skips the lane manager's yield and
 * grant then): between events the lane manager's books always name the holder, and a lane
 * merged from other users' lanes while the job held it is reported for clearing at its next
 * grant, even when the same job takes it again. */
START_TEST(test_same_job_again_after_a_merge)
{
    fake_t f;
    fake_users_t users = {.share_lanes = true};
    fake_start_users(&f, "pack", 10 * GIB, &users);
    reg(&f, 1, 1000, 0, 4 * GIB, 100, 0);
    reg(&f, 2, 2000, 0, 4 * GIB, 100, 0);
    ck_assert_uint_ne(f.jobs[1].lane, f.jobs[2].lane);
    boundary(&f, 1, 0);
    ck_assert(f.jobs[1].running);
    ck_assert_uint_eq(lanes_holder(&f, f.jobs[1].lane), 1);
    for (int i = 0; i < 3; i++) { /* alone: the same job again, the lane stays held */
        f.now_ns += MS;
        sched_core_boundary_t b = {.iterations = f.jobs[1].iterations + 1,
                                   .busy_ns = f.jobs[1].busy_ns + MS,
                                   .last_iteration_ns = MS, .ready = true};
        f.jobs[1].iterations++;
        f.jobs[1].busy_ns += MS;
        f.jobs[1].running = 0;
        ck_assert_int_eq(sched_core_job_boundary(f.core, 1, &b, f.now_ns, &f.fx), 0);
        ck_assert(!grant_of(&f, 1)->clear_needed);
        apply(&f);
        ck_assert(f.jobs[1].running);
        ck_assert_uint_eq(lanes_holder(&f, f.jobs[1].lane), 1);
    }
    /* job 2 runs once in its lane (its uid's data there), then runs host code */
    boundary(&f, 2, 0);
    ck_assert(f.jobs[2].running);
    f.now_ns += MS;
    boundary_not_ready(&f, 2, MS);
    ck_assert_uint_eq(lanes_holder(&f, f.jobs[2].lane), 0);
    /* job 3 fits only if lanes 1 and 2 merge (then grow): one lane of three users */
    reg(&f, 3, 3000, 0, 7 * GIB, 100, 0);
    ck_assert(f.jobs[3].admitted);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane);
    ck_assert_uint_eq(f.jobs[3].lane, f.jobs[1].lane);
    ck_assert_uint_eq(lanes_holder(&f, f.jobs[1].lane), 1); /* still held across the merge */
    f.now_ns += MS;
    f.jobs[1].iterations++;
    f.jobs[1].busy_ns += MS;
    f.jobs[1].running = 0;
    sched_core_boundary_t b = {.iterations = f.jobs[1].iterations, .busy_ns = f.jobs[1].busy_ns,
                               .last_iteration_ns = MS, .ready = true};
    ck_assert_int_eq(sched_core_job_boundary(f.core, 1, &b, f.now_ns, &f.fx), 0);
    ck_assert_msg(grant_of(&f, 1)->clear_needed, "merged lane not reported for clearing");
    apply(&f);
    ck_assert_uint_eq(lanes_holder(&f, f.jobs[1].lane), 1);
    /* now the lane holds job 1's uid's data: no clearing for it again */
    f.now_ns += MS;
    f.jobs[1].iterations++;
    f.jobs[1].busy_ns += MS;
    f.jobs[1].running = 0;
    b = (sched_core_boundary_t){.iterations = f.jobs[1].iterations,
                                .busy_ns = f.jobs[1].busy_ns, .last_iteration_ns = MS,
                                .ready = true};
    ck_assert_int_eq(sched_core_job_boundary(f.core, 1, &b, f.now_ns, &f.fx), 0);
    ck_assert(!grant_of(&f, 1)->clear_needed);
    apply(&f);
    /* a lane-mate parks behind it and sees it as the holder; job 1 then runs host code: the
     * lane manager's books let the lane go, and the lane-mate gets it (with clearing) */
    boundary(&f, 3, 0);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 3, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_PARKED);
    ck_assert_uint_eq(info.lane_holder, 1);
    f.now_ns += MS;
    f.jobs[1].iterations++;
    f.jobs[1].busy_ns += MS;
    f.jobs[1].running = 0;
    b = (sched_core_boundary_t){.iterations = f.jobs[1].iterations,
                                .busy_ns = f.jobs[1].busy_ns, .last_iteration_ns = MS,
                                .ready = false};
    ck_assert_int_eq(sched_core_job_boundary(f.core, 1, &b, f.now_ns, &f.fx), 0);
    ck_assert(grant_of(&f, 3)->clear_needed);
    apply(&f);
    ck_assert(f.jobs[3].running && !f.jobs[1].running);
    ck_assert_uint_eq(lanes_holder(&f, f.jobs[3].lane), 3);
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_IDLE);
    fake_stop(&f);
}
END_TEST

/* Lane-mates follow re-layouts: jobs whose lanes merge take turns in the merged lane, and a
 * job that leaves is no longer offered a turn. */
START_TEST(test_turns_follow_a_merge)
{
    fake_t f;
    fake_start(&f, "pack", 10 * GIB);
    reg(&f, 1, 1000, 0, 4 * GIB, 100, 0);
    reg(&f, 2, 1000, 0, 4 * GIB, 100, 0);
    boundary(&f, 1, 0);
    boundary(&f, 2, 0);
    ck_assert(f.jobs[1].running && f.jobs[2].running); /* a lane each */
    reg(&f, 3, 2000, 0, 3 * GIB, 100, 0); /* another user's: lanes 1 and 2 merge for it */
    ck_assert(f.jobs[3].admitted);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane);
    /* both still hold (the books changed at once, they follow at their boundaries) */
    f.now_ns += MS;
    boundary(&f, 1, MS);
    f.now_ns += MS;
    boundary(&f, 2, MS);
    ck_assert_int_eq(f.jobs[1].running + f.jobs[2].running, 1); /* one lane: one at a time */
    for (int i = 0; i < 6; i++)
        ck_assert_uint_ne(run_one(&f, 1, 2, MS), 0);
    ck_assert_int_eq(f.jobs[1].running + f.jobs[2].running, 1);
    uint64_t holder = f.jobs[1].running ? 1 : 2, other = 3 - holder;
    leave(&f, holder);
    ck_assert(f.jobs[other].running);
    f.now_ns += MS;
    boundary(&f, other, MS);
    ck_assert(f.jobs[other].running && f.jobs[other].free_run); /* alone in its lane now */
    fake_stop(&f);
}
END_TEST

/* ---- per-user quotas and the two-level pick ---------------------------------------------- */

/* A 4 GiB GPU, share 0.75 (3 GiB): a job of all but 64 MiB is refused at once, naming the cap;
 * root's same job is exempt. */
START_TEST(test_quota_refuses_a_job_over_the_share)
{
    fake_t f;
    fake_users_t users = {.share = 0.75, .max_jobs = 32};
    fake_start_users(&f, "pack", 4 * GIB, &users);
    reg(&f, 1, 1000, 2 * GIB, 2 * GIB - 64 * MIB, 10, 0);
    ck_assert(f.jobs[1].refused && !f.jobs[1].admitted);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "user-gpu-share"));
    ck_assert_uint_eq(sched_core_job_count(f.core), 0);
    reg(&f, 2, 0, 2 * GIB, 2 * GIB - 64 * MIB, 10, 0); /* root: no cap */
    ck_assert(f.jobs[2].admitted && !f.jobs[2].refused);
    fake_stop(&f);
}
END_TEST

/* A job that fits the share alone but not beside its user's other jobs waits, and is admitted
 * when they leave; the same for the job count. */
START_TEST(test_quota_waits_at_the_cap)
{
    fake_t f;
    fake_users_t users = {.share = 0.75, .max_jobs = 2};
    fake_start_users(&f, "pack", 4 * GIB, &users);
    reg(&f, 1, 1000, 2 * GIB, 512 * MIB, 10, 0);  /* 2.5 of 3 GiB */
    reg(&f, 2, 1000, 512 * MIB, 256 * MIB, 10, 0); /* 0.75 more: over the share */
    ck_assert(f.jobs[1].admitted && !f.jobs[2].admitted && !f.jobs[2].refused);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &info), 0);
    ck_assert_int_eq(info.phase, SCHED_CORE_WAITING);
    f.now_ns += 10 * MS;
    leave(&f, 1);
    ck_assert(f.jobs[2].admitted);
    /* job count: two admitted, the third waits until one leaves */
    reg(&f, 3, 1000, 64 * MIB, 64 * MIB, 10, 0);
    reg(&f, 4, 1000, 64 * MIB, 64 * MIB, 10, 0);
    ck_assert(f.jobs[3].admitted && !f.jobs[4].admitted);
    leave(&f, 2);
    ck_assert(f.jobs[4].admitted);
    fake_stop(&f);
}
END_TEST

/* User A's greedy job holds most of A's share and A's next job waits at the cap; user B's small
 * job is admitted beside the greedy one. Without caps A's two jobs fill the GPU and B waits. */
START_TEST(test_quota_admits_another_user_beside_a_greedy_one)
{
    for (int capped = 0; capped <= 1; capped++) {
        fake_t f;
        fake_users_t users = {.share = capped ? 0.75 : 0, .max_jobs = capped ? 32 : 0};
        fake_start_users(&f, "pack", 4 * GIB, &users);
        reg(&f, 1, 1000, 2560 * MIB, 256 * MIB, 100000, 0); /* greedy, idle */
        reg(&f, 2, 1000, 1280 * MIB, 128 * MIB, 100000, 0); /* shares its lane: GPU full */
        reg(&f, 3, 2000, 32 * MIB, 32 * MIB, 5, 0);         /* B's small job */
        ck_assert(f.jobs[1].admitted);
        ck_assert_msg(f.jobs[2].admitted == !capped, "A's next job, capped %d", capped);
        ck_assert_msg(f.jobs[3].admitted == capped, "B's small job, capped %d", capped);
        fake_stop(&f);
    }
}
END_TEST

/* FIFO (one job at a time) with two users: admission alternates between them by GPU time
 * (1 of A, then B's 4, then A's 2 on a tie broken by the policy's order...); with one user
 * the order is the policy's. */
START_TEST(test_fair_user_pick_for_admission)
{
    static const uint32_t two_users[] = {0, 1000, 1000, 1000, 2000, 2000};
    static const uint64_t expected_two[] = {1, 4, 2, 5, 3};
    for (int two = 0; two <= 1; two++) {
        fake_t f;
        fake_start(&f, "fifo", 4 * GIB);
        for (uint64_t id = 1; id <= 5; id++) {
            reg(&f, id, two ? two_users[id] : 1000, 100 * MIB, 100 * MIB, 1, 0);
            f.now_ns += MS;
        }
        for (size_t done = 0; done < 5; done++) {
            ck_assert_uint_eq(f.admit_count, done + 1);
            uint64_t id = f.admits[done];
            boundary(&f, id, 0);        /* first boundary: granted */
            run_one(&f, id, id, 100 * MS); /* one iteration of 100 ms */
            leave(&f, id);
        }
        for (size_t i = 0; i < 5; i++)
            ck_assert_uint_eq(f.admits[i], (two ? expected_two[i] : i + 1));
        fake_stop(&f);
    }
}
END_TEST

/* A lane shared by two users (A with two jobs, B with one): turns go to the user whose jobs have
 * held the GPU least, so B gets about half the GPU time, not a third. */
START_TEST(test_fair_user_pick_for_turns)
{
    fake_t f;
    fake_users_t users = {.share_lanes = true};
    fake_start_users(&f, "pack", 1 * GIB, &users);
    reg(&f, 1, 1000, 100 * MIB, 600 * MIB, 0, 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 0, 0);
    reg(&f, 3, 2000, 100 * MIB, 600 * MIB, 0, 0);
    for (uint64_t id = 1; id <= 3; id++) {
        ck_assert(f.jobs[id].admitted);
        ck_assert_uint_eq(f.jobs[id].lane, f.jobs[1].lane);
        boundary(&f, id, 0);
    }
    for (int k = 0; k < 300; k++)
        ck_assert_uint_ne(run_one(&f, 1, 3, 10 * MS), 0);
    uint64_t a = f.jobs[1].busy_ns + f.jobs[2].busy_ns, b = f.jobs[3].busy_ns;
    ck_assert_msg(a + b == 300 * 10 * MS, "total %llu ms", (unsigned long long)((a + b) / MS));
    uint64_t hi = a > b ? a : b, lo = a > b ? b : a;
    ck_assert_msg(hi - lo <= hi / 20, "A %llu ms vs B %llu ms", (unsigned long long)(a / MS),
                  (unsigned long long)(b / MS));
    /* and A's two jobs share A's half */
    ck_assert_uint_gt(f.jobs[1].busy_ns, a / 3);
    ck_assert_uint_gt(f.jobs[2].busy_ns, a / 3);
    fake_stop(&f);
}
END_TEST

/* Runs a mixed trace of one user: 12 jobs of different sizes and lengths on a 2 GiB GPU,
 * arriving over time; each job leaves after its iterations. */
static void one_user_trace(fake_t *f)
{
    int started[13] = {0}, done[13] = {0};
    size_t finished = 0;
    for (int step = 0; step < 20000 && finished < 12; step++) {
        if (step % 7 == 0 && step / 7 < 12) {
            uint64_t id = (uint64_t)step / 7 + 1;
            reg(f, id, 1000, (id % 3 + 1) * 100 * MIB, (id % 4 + 1) * 150 * MIB,
                2 + id % 5, (int32_t)(id % 2));
        }
        for (uint64_t id = 1; id <= 12; id++) {
            if (f->jobs[id].admitted && !started[id] && !done[id]) {
                started[id] = 1;
                boundary(f, id, 0);
            }
        }
        uint64_t ran = 0;
        for (uint64_t id = 1; id <= 12 && !ran; id++)
            if (f->jobs[id].running && !done[id])
                ran = run_one(f, id, id, (id % 3 + 1) * 10 * MS);
        if (!ran)
            f->now_ns += MS;
        if (ran && f->jobs[ran].iterations >= 2 + ran % 5) {
            done[ran] = 1;
            finished++;
            leave(f, ran);
        }
    }
    ck_assert_uint_eq(finished, 12);
}

/* With one user, the two-level pick (taken when the user has a job cap) reduces to the
 * policy's own picks: the same admissions and grants as without caps, for every policy. */
START_TEST(test_one_user_picks_unchanged)
{
    static const char *const policies[] = {"fifo", "pack", "srtf", "fair"};
    for (size_t p = 0; p < 4; p++) {
        fake_t *plain = calloc(1, sizeof(*plain)), *capped = calloc(1, sizeof(*capped));
        ck_assert(plain && capped);
        fake_users_t none = {0}, cap = {.max_jobs = 1000};
        fake_start_users(plain, policies[p], 2 * GIB, &none);
        fake_start_users(capped, policies[p], 2 * GIB, &cap);
        one_user_trace(plain);
        one_user_trace(capped);
        ck_assert_uint_eq(plain->admit_count, 12);
        ck_assert_uint_eq(plain->admit_count, capped->admit_count);
        ck_assert_uint_eq(plain->grant_count, capped->grant_count);
        ck_assert_msg(plain->grant_count > 12, "%s: %zu grants", policies[p], plain->grant_count);
        for (size_t i = 0; i < plain->admit_count; i++)
            ck_assert_uint_eq(plain->admits[i], capped->admits[i]);
        for (size_t i = 0; i < plain->grant_count; i++)
            ck_assert_msg(plain->grants[i] == capped->grants[i], "%s: grant %zu: %llu vs %llu",
                          policies[p], i, (unsigned long long)plain->grants[i],
                          (unsigned long long)capped->grants[i]);
        fake_stop(plain);
        fake_stop(capped);
        free(plain);
        free(capped);
    }
}
END_TEST

START_TEST(test_quota_share_out_of_range_is_an_error)
{
    sched_core_config_t config;
    int rc = 0;
    sched_core_config_default(&config);
    config.user_gpu_share = 1.5;
    ck_assert_ptr_null(sched_core_create(&config, &rc));
    ck_assert_int_eq(rc, -EINVAL);
}
END_TEST

/* Survivors of a daemon restart come back with their sizes, ahead of a waiting job and without
 * an admission round; two that shared a lane share one again and take turns; one that no
 * longer fits is refused with nothing changed. */
START_TEST(test_reattach_restores_places_before_waiting_jobs)
{
    fake_t f;
    fake_start(&f, "pack", 4 * GIB);
    sched_core_reattach_t alone = {.gpu = 0, .persistent_bytes = 512 * MIB,
                                   .ephemeral_bytes = 512 * MIB, .iterations = 7,
                                   .busy_ns = 70 * MS};
    sched_core_reattach_t shared = {.gpu = 0, .persistent_bytes = 256 * MIB,
                                    .ephemeral_bytes = 1 * GIB, .iterations = 3};
    sched_core_job_hints_t h = {.id = 5, .uid = 1000};
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &alone, f.now_ns, &f.fx), 0);
    apply(&f);
    h.id = 6;
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &shared, f.now_ns, &f.fx), 0);
    apply(&f);
    h.id = 7;
    shared.lane_of_job = 6;
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &shared, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &shared, f.now_ns, &f.fx), -EEXIST);
    ck_assert_uint_eq(f.admit_count, 0); /* no ADMIT: the daemon answers a re-attach itself */
    sched_core_job_info_t i5, i6, i7;
    ck_assert_int_eq(sched_core_job_info(f.core, 5, &i5), 0);
    ck_assert_int_eq(sched_core_job_info(f.core, 6, &i6), 0);
    ck_assert_int_eq(sched_core_job_info(f.core, 7, &i7), 0);
    ck_assert_int_eq(i5.phase, SCHED_CORE_IDLE);
    ck_assert_uint_eq(i5.iterations, 7);
    ck_assert_uint_eq(i5.budget_bytes, 1 * GIB);
    ck_assert_uint_eq(i6.lane, i7.lane);
    ck_assert_uint_ne(i5.lane, i6.lane);
    ck_assert_uint_eq(i6.budget_bytes, 256 * MIB + 1 * GIB);
    /* 4 GiB - 1 GiB - (2 x 256 MiB + 1 GiB) = 1.5 GiB left, 2 GiB if the lanes merge: a
     * survivor with 2.5 GiB of persistent memory does not fit; nothing changes */
    sched_core_reattach_t big = {.gpu = 0, .persistent_bytes = 2560 * MIB,
                                 .ephemeral_bytes = 512 * MIB};
    h.id = 8;
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &big, f.now_ns, &f.fx), -ENOSPC);
    ck_assert_int_eq(sched_core_job_info(f.core, 8, &i7), -ENOENT);
    sched_core_reattach_t nowhere = {.gpu = 3, .persistent_bytes = MIB, .ephemeral_bytes = MIB};
    h.id = 9;
    ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &nowhere, f.now_ns, &f.fx), -EINVAL);
    /* the two of one lane take turns; the one alone runs freely */
    f.jobs[5].admitted = f.jobs[6].admitted = f.jobs[7].admitted = 1;
    f.jobs[5].iterations = 7;
    f.jobs[5].busy_ns = 70 * MS;
    f.jobs[6].iterations = f.jobs[7].iterations = 3;
    boundary(&f, 5, 0);
    ck_assert(f.jobs[5].running && f.jobs[5].free_run);
    boundary(&f, 6, 0);
    boundary(&f, 7, 0);
    ck_assert(f.jobs[6].running != f.jobs[7].running);
    /* the policy's state for the state file: the built-in policies keep none */
    uint8_t buf[64];
    ck_assert_int_eq(sched_core_policy_save_state(f.core, buf, sizeof(buf)), -ENOTSUP);
    ck_assert_int_eq(sched_core_policy_load_state(f.core, buf, 1), -ENOTSUP);
    /* a job registered after the survivors waits for a round; it is admitted when it fits */
    reg(&f, 10, 1000, 2304 * MIB, 512 * MIB, 0, 0);
    ck_assert(!f.jobs[10].admitted);
    leave(&f, 5);
    ck_assert(f.jobs[10].admitted);
    fake_stop(&f);
}
END_TEST

/* ---- groups: gang admission and gang turns (sched_core.h, "Groups") ---------------------- */

/* A fake node of `gpus` GPUs of gpu_bytes each. */
static void fake_start_gpus(fake_t *f, const char *policy, int gpus, uint64_t gpu_bytes,
                            uint32_t slot_iterations, bool gang_turns_off)
{
    sched_core_config_t config;
    int rc = 0;
    memset(f, 0, sizeof(*f));
    sched_core_config_default(&config);
    config.policy_name = policy;
    config.lanes.job_overhead_bytes = 0;
    config.gang_slot_iterations = slot_iterations;
    config.gang_turns_off = gang_turns_off;
    sched_core_config_fit_gpu(&config, gpu_bytes);
    f->core = sched_core_create(&config, &rc);
    ck_assert_msg(f->core != NULL, "sched_core_create(%s): %d", policy, rc);
    for (int g = 0; g < gpus; g++)
        ck_assert_int_eq(sched_core_add_gpu(f->core, g, gpu_bytes, 0), 0);
    f->now_ns = 1000 * MS;
}

/* Registers rank `rank` of group `group` (world ranks, sync); returns the core's answer. */
static int reg_rank_rc(fake_t *f, uint64_t id, uint64_t group, uint32_t world, uint32_t rank,
                       sched_core_sync_t sync, uint32_t staleness, uint64_t p, uint64_t e)
{
    sched_core_job_hints_t h = {.id = id, .uid = 1000, .persistent_bytes = p,
                                .ephemeral_bytes = e, .iterations_expected = 1000,
                                .group = {.id = group, .world = world, .rank = rank,
                                          .sync = sync, .staleness = staleness}};
    int rc = sched_core_job_registered(f->core, &h, f->now_ns, &f->fx);
    apply(f);
    return rc;
}

static void reg_rank(fake_t *f, uint64_t id, uint64_t group, uint32_t world, uint32_t rank,
                     sched_core_sync_t sync, uint32_t staleness)
{
    ck_assert_int_eq(reg_rank_rc(f, id, group, world, rank, sync, staleness, 100 * MIB,
                                 600 * MIB), 0);
}

/* Counts the effects of a kind in the current (not yet applied) list. */
static size_t effects_of(const fake_t *f, sched_core_effect_kind_t kind)
{
    size_t n = 0;
    for (size_t i = 0; i < f->fx.count; i++)
        n += f->fx.items[i].kind == kind;
    return n;
}

/* All or nothing: two ranks on two GPUs, one GPU taken by another user's job (its lane
 * cannot be shared): nothing is admitted, the lane manager's books do not move, and no
 * effect leaks; when the GPU frees, both ranks are admitted in that event, on distinct GPUs.
 * Three ranks registered on 2 GPUs, or a rank larger than any GPU, is refused, every rank. */
START_TEST(test_group_all_or_nothing)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 0, false);
    sched_core_job_hints_t big = {.id = 1, .uid = 2000, .persistent_bytes = 100 * MIB,
                                  .ephemeral_bytes = 800 * MIB};
    ck_assert_int_eq(sched_core_job_registered(f.core, &big, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert(f.jobs[1].admitted);
    reg_rank(&f, 2, 7, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    uint64_t version = lanes_version(sched_core_lanes(f.core));
    sched_core_job_hints_t h = {.id = 3, .uid = 1000, .persistent_bytes = 100 * MIB,
                                .ephemeral_bytes = 600 * MIB,
                                .group = {.id = 7, .world = 2, .rank = 1}};
    ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(f.fx.count, 0); /* no ADMIT, no MOVE, no BUDGET */
    apply(&f);
    ck_assert(!f.jobs[2].admitted && !f.jobs[3].admitted);
    ck_assert_uint_eq(lanes_version(sched_core_lanes(f.core)), version);
    lanes_gpu_info_t info;
    for (int g = 0; g < 2; g++) {
        ck_assert_int_eq(lanes_gpu_info(sched_core_lanes(f.core), g, &info), LANES_OK);
        ck_assert_uint_eq(info.job_count, g == 0 ? 1 : 0);
    }
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &ji), 0);
    ck_assert_int_eq(ji.phase, SCHED_CORE_WAITING);
    ck_assert_uint_eq(ji.group.id, 7);
    ck_assert_uint_eq(ji.group.world, 2);
    ck_assert_uint_eq(ji.group.rank, 0);
    f.now_ns += 10 * MS;
    ck_assert_int_eq(sched_core_job_left(f.core, 1, SCHED_CORE_EXIT_DONE, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(effects_of(&f, SCHED_CORE_ADMIT), 2);
    apply(&f);
    ck_assert(f.jobs[2].admitted && f.jobs[3].admitted);
    ck_assert_int_ne(f.jobs[2].gpu, f.jobs[3].gpu);
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 10 * MS); /* waited for its place */
    /* world 3 on 2 GPUs: two ranks registered may fit (the third may be host-only); the
     * third to register makes it one that can never be placed: refused, every rank, with a
     * reason */
    reg_rank(&f, 10, 8, 3, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 11, 8, 3, 1, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(!f.jobs[10].refused && !f.jobs[11].refused);
    ck_assert(!f.jobs[10].admitted && !f.jobs[11].admitted);
    reg_rank(&f, 12, 8, 3, 2, SCHED_CORE_SYNC_BSP, 0);
    for (uint32_t r = 0; r < 3; r++)
        ck_assert(f.jobs[10 + r].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "more ranks than"));
    /* a rank that fits no GPU: the group is refused whole */
    reg_rank(&f, 20, 9, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert_int_eq(reg_rank_rc(&f, 21, 9, 2, 1, SCHED_CORE_SYNC_BSP, 0, 100 * MIB, 2 * GIB), 0);
    ck_assert(f.jobs[20].refused && f.jobs[21].refused);
    ck_assert_int_eq(sched_core_job_info(f.core, 20, &ji), -ENOENT);
    ck_assert_uint_eq(sched_core_job_count(f.core), 2);
    fake_stop(&f);
}
END_TEST

/* A group waits for all its ranks; its waiting ranks do not hold up single jobs behind them
 * under a non-blocking policy, and do under a blocking one (FIFO). */
START_TEST(test_group_waits_for_its_ranks)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 4 * GIB, 0, false);
    reg_rank(&f, 1, 5, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(!f.jobs[1].admitted);
    reg(&f, 2, 1000, 100 * MIB, 100 * MIB, 10, 0); /* a single job behind it */
    ck_assert(f.jobs[2].admitted);
    f.now_ns += 5 * MS;
    reg_rank(&f, 3, 5, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[1].admitted && f.jobs[3].admitted);
    ck_assert_int_ne(f.jobs[1].gpu, f.jobs[3].gpu);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 5 * MS);
    ck_assert_int_eq(sched_core_job_info(f.core, 3, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 0);
    fake_stop(&f);

    fake_start_gpus(&f, "fifo", 2, 4 * GIB, 0, false);
    reg_rank(&f, 1, 5, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    reg(&f, 2, 1000, 100 * MIB, 100 * MIB, 10, 0);
    ck_assert(!f.jobs[1].admitted && !f.jobs[2].admitted); /* blocked behind the group */
    reg_rank(&f, 3, 5, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[1].admitted && f.jobs[3].admitted && !f.jobs[2].admitted);
    fake_stop(&f);
}
END_TEST

/* A group of more ranks than its user may have admitted at once (--user-max-jobs) can never
 * be placed: it is refused whole, naming the cap, instead of waiting forever. */
START_TEST(test_group_over_the_job_cap_is_refused)
{
    fake_t f;
    fake_users_t users = {.share = 0, .max_jobs = 1};
    fake_start_users(&f, "pack", 4 * GIB, &users);
    for (uint64_t r = 0; r < 2; r++) {
        sched_core_job_hints_t h = {.id = 1 + r, .uid = 1000, .persistent_bytes = 64 * MIB,
                                    .ephemeral_bytes = 64 * MIB, .iterations_expected = 10,
                                    .group = {.id = 5, .world = 2, .rank = (uint32_t)r,
                                              .share_gpus = true}};
        ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
        apply(&f);
    }
    ck_assert(f.jobs[1].refused && f.jobs[2].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "user-max-jobs"));
    ck_assert_uint_eq(sched_core_job_count(f.core), 0);
    /* root is not capped: the same group is placed */
    for (uint64_t r = 0; r < 2; r++) {
        sched_core_job_hints_t h = {.id = 3 + r, .uid = 0, .persistent_bytes = 64 * MIB,
                                    .ephemeral_bytes = 64 * MIB, .iterations_expected = 10,
                                    .group = {.id = 6, .world = 2, .rank = (uint32_t)r,
                                              .share_gpus = true}};
        ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
        apply(&f);
    }
    ck_assert(f.jobs[3].admitted && f.jobs[4].admitted);
    fake_stop(&f);
}
END_TEST

/* A group's ranks are under their user's share of each GPU (--user-gpu-share) as single jobs
 * are: a rank over the share of every GPU has its group refused, naming the cap; a rank that
 * fits the share alone but not beside its user's other jobs waits until they leave. */
START_TEST(test_group_within_the_user_share)
{
    fake_t f;
    fake_users_t users = {.share = 0.5, .max_jobs = 32};
    fake_start_users(&f, "pack", 4 * GIB, &users);
    sched_core_job_hints_t h = {.id = 1, .uid = 1000, .persistent_bytes = 2 * GIB,
                                .ephemeral_bytes = 1 * GIB, .iterations_expected = 10,
                                .group = {.id = 5, .world = 1, .rank = 0}};
    ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert(f.jobs[1].refused && !f.jobs[1].admitted);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "user-gpu-share"));
    reg(&f, 2, 1000, 1 * GIB, 512 * MIB, 10, 0); /* 1.5 of the user's 2 GiB */
    ck_assert(f.jobs[2].admitted);
    h = (sched_core_job_hints_t){.id = 3, .uid = 1000, .persistent_bytes = 768 * MIB,
                                 .ephemeral_bytes = 512 * MIB, .iterations_expected = 10,
                                 .group = {.id = 6, .world = 1, .rank = 0}};
    ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert(!f.jobs[3].admitted && !f.jobs[3].refused); /* over the share beside job 2 */
    leave(&f, 2);
    ck_assert(f.jobs[3].admitted);
    fake_stop(&f);
}
END_TEST

/* Inconsistent ranks: -EINVAL and nothing changed. */
START_TEST(test_group_invalid_hints)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 4 * GIB, 0, false);
    reg_rank(&f, 1, 5, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    const struct {
        uint32_t world, rank;
        sched_core_sync_t sync;
        uint64_t group;
    } bad[] = {
        {2, 0, SCHED_CORE_SYNC_BSP, 5},           /* rank 0 twice */
        {2, 2, SCHED_CORE_SYNC_BSP, 5},           /* rank >= world */
        {3, 1, SCHED_CORE_SYNC_BSP, 5},           /* another world */
        {2, 1, SCHED_CORE_SYNC_ASP, 5},           /* another sync */
        {0, 0, SCHED_CORE_SYNC_BSP, 6},           /* world 0 */
        {2, 0, (sched_core_sync_t)9, 6},          /* no such sync */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(reg_rank_rc(&f, 2, bad[i].group, bad[i].world, bad[i].rank, bad[i].sync,
                                     0, 100 * MIB, 600 * MIB),
                         -EINVAL);
        ck_assert_uint_eq(sched_core_job_count(f.core), 1);
        ck_assert_uint_eq(f.admit_count, 0);
        ck_assert(!f.jobs[2].refused);
    }
    /* the group is as it was: its rank 1 completes it */
    reg_rank(&f, 2, 5, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    fake_stop(&f);
}
END_TEST

/* The collective model of the gang tests: a rank that holds its lane finishes its iteration
 * only when every rank of its group has started that iteration (NCCL's kernels spin until
 * their peers arrive). */
typedef struct gang_sim_s {
    uint64_t ids[2][2]; /* [group][rank] */
    int started[8];     /* asked for its first turn */
} gang_sim_t;

static bool gang_can_finish(const fake_t *f, const gang_sim_t *g, int group, int rank)
{
    const fake_job_t *j = &f->jobs[g->ids[group][rank]];
    if (!j->running)
        return false;
    for (int r = 0; r < 2; r++) {
        const fake_job_t *peer = &f->jobs[g->ids[group][r]];
        if (!(peer->iterations > j->iterations ||
              (peer->running && peer->iterations == j->iterations)))
            return false;
    }
    return true;
}

static void gang_finish(fake_t *f, const gang_sim_t *g, int group, int rank)
{
    uint64_t id = g->ids[group][rank];
    fake_job_t *j = &f->jobs[id];
    f->now_ns += 1 * MS;
    if (j->free_run) { /* it goes on without stopping */
        j->iterations++;
        j->busy_ns += 1 * MS;
    } else {
        boundary(f, id, 1 * MS);
    }
}

/* The circle: a rank of each group holds a lane that a rank of the other waits for. */
static bool gang_circle(const fake_t *f, const gang_sim_t *g)
{
    bool waits_on[2] = {false, false}; /* [h]: a rank of h waits for a lane the other holds */
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 2; r++) {
            const fake_job_t *w = &f->jobs[g->ids[h][r]];
            if (w->running || !g->started[h * 2 + r])
                continue;
            for (int r2 = 0; r2 < 2; r2++) {
                const fake_job_t *o = &f->jobs[g->ids[1 - h][r2]];
                waits_on[h] |= o->running && o->lane == w->lane;
            }
        }
    return waits_on[0] && waits_on[1];
}

/* Two 2-rank BSP groups on 2 GPUs of one lane each, placed in opposite rank order: A's rank 0
 * and B's rank 1 share GPU 0's lane, A's rank 1 and B's rank 0 GPU 1's. */
static void gang_setup(fake_t *f, gang_sim_t *g, uint32_t slot, bool turns_off)
{
    memset(g, 0, sizeof(*g));
    fake_start_gpus(f, "pack", 2, 1 * GIB, slot, turns_off);
    reg_rank(f, 1, 100, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(f, 2, 100, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(f, 3, 200, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(f, 4, 200, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    g->ids[0][0] = 1;
    g->ids[0][1] = 2;
    g->ids[1][0] = 4;
    g->ids[1][1] = 3;
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert(f->jobs[id].admitted);
    ck_assert_int_eq(f->jobs[1].gpu, f->jobs[3].gpu); /* A0 beside B1 */
    ck_assert_int_eq(f->jobs[2].gpu, f->jobs[4].gpu); /* A1 beside B0 */
    ck_assert_int_ne(f->jobs[1].gpu, f->jobs[2].gpu);
    ck_assert_uint_eq(f->jobs[1].lane, f->jobs[3].lane);
    ck_assert_uint_eq(f->jobs[2].lane, f->jobs[4].lane);
}

static uint64_t prng_next(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Gang turns: randomised interleavings of asks and boundaries (1000 seeds with slots of one
 * iteration, 300 with slots of three, 300 with a single job sharing GPU 0's lane): never the
 * circle, a new slot's grants come in one event, and both groups (and the single job) make
 * progress. */
START_TEST(test_gang_turns_never_circle)
{
    enum { ITERATIONS = 20, MAX_STEPS = 600, SINGLE = 5 };
    const uint32_t slot = _i == 1 ? 3 : 1;
    for (uint64_t seed = 1; seed <= (_i == 0 ? 1000u : 300u); seed++) {
        fake_t f;
        gang_sim_t g;
        uint64_t rng = seed * 0x9E3779B97F4A7C15ull;
        gang_setup(&f, &g, slot, false);
        bool single = _i == 2, single_started = false;
        if (single) {
            reg(&f, SINGLE, 1000, 100 * MIB, 600 * MIB, 1000, 0);
            ck_assert_uint_eq(f.jobs[SINGLE].lane, f.jobs[1].lane);
        }
        int steps = 0;
        for (;;) {
            uint64_t done = UINT64_MAX;
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++)
                    if (f.jobs[g.ids[h][r]].iterations < done)
                        done = f.jobs[g.ids[h][r]].iterations;
            if (done >= ITERATIONS && (!single || f.jobs[SINGLE].iterations >= ITERATIONS / 2))
                break;
            ck_assert_msg(steps++ < MAX_STEPS, "seed %llu: no progress in %d steps (%llu done)",
                          (unsigned long long)seed, MAX_STEPS, (unsigned long long)done);
            int actions[8][3], count = 0; /* kind (0 ask, 1 finish), group, rank */
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++) {
                    if (!g.started[h * 2 + r])
                        memcpy(actions[count++], (int[3]){0, h, r}, sizeof(actions[0]));
                    else if (gang_can_finish(&f, &g, h, r))
                        memcpy(actions[count++], (int[3]){1, h, r}, sizeof(actions[0]));
                }
            if (single && (!single_started || f.jobs[SINGLE].running))
                memcpy(actions[count++], (int[3]){2, 0, 0}, sizeof(actions[0]));
            ck_assert_msg(count > 0, "seed %llu: deadlock", (unsigned long long)seed);
            int *a = actions[prng_next(&rng) % (uint64_t)count];
            size_t grants_before = f.grant_count;
            int running_before[2] = {0, 0};
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++)
                    running_before[h] += f.jobs[g.ids[h][r]].running;
            if (a[0] == 2 && !single_started) {
                single_started = true;
                ask(&f, SINGLE);
            } else if (a[0] == 2 && f.jobs[SINGLE].free_run) {
                f.jobs[SINGLE].iterations++; /* it goes on without stopping */
            } else if (a[0] == 2) {
                boundary(&f, SINGLE, 1 * MS);
            } else if (a[0] == 0) {
                g.started[a[1] * 2 + a[2]] = 1;
                ask(&f, g.ids[a[1]][a[2]]);
            } else {
                gang_finish(&f, &g, a[1], a[2]);
            }
            ck_assert_msg(!gang_circle(&f, &g), "seed %llu: circular wait", (unsigned long long)seed);
            int granted[2] = {0, 0};
            for (size_t i = grants_before; i < f.grant_count; i++)
                if (f.grants[i] != SINGLE)
                    granted[f.grants[i] == 1 || f.grants[i] == 2 ? 0 : 1]++;
            for (int h = 0; h < 2; h++) /* a new slot's grants: both ranks in one event */
                ck_assert_msg(running_before[h] > 0 || granted[h] == 0 || granted[h] == 2,
                              "seed %llu: %d grant(s)", (unsigned long long)seed, granted[h]);
        }
        fake_stop(&f);
    }
}
END_TEST

/* The same set-up with gang turns off reaches the circle (a deterministic sequence), and
 * with gang turns on the same sequence goes on. */
START_TEST(test_gang_turns_off_reaches_the_circle)
{
    for (int off = 1; off >= 0; off--) {
        fake_t f;
        gang_sim_t g;
        gang_setup(&f, &g, 1, off);
        const int order[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}}; /* A0, B0, A1, B1 ask */
        for (int k = 0; k < 4; k++) {
            g.started[order[k][0] * 2 + order[k][1]] = 1;
            ask(&f, g.ids[order[k][0]][order[k][1]]);
        }
        int finishable = 0;
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 2; r++)
                finishable += gang_can_finish(&f, &g, h, r);
        if (off) {
            ck_assert(gang_circle(&f, &g));
            ck_assert_int_eq(finishable, 0); /* deadlock */
        } else {
            ck_assert(!gang_circle(&f, &g));
            ck_assert_int_eq(finishable, 2); /* A holds both lanes */
            ck_assert(f.jobs[1].running && f.jobs[2].running);
        }
        fake_stop(&f);
    }
}
END_TEST

/* Single jobs fill what gangs leave: one on a lane no gang reserves runs on; one on a lane
 * the gang reserves is told to stop running freely, the gang gets the lane at its boundary,
 * and the single job has its turn when the gang's slot is over. */
START_TEST(test_gang_single_jobs_fill_in)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    reg(&f, 3, 1000, 100 * MIB, 600 * MIB, 100, 0); /* shares rank 0's lane */
    reg(&f, 4, 1000, 50 * MIB, 100 * MIB, 100, 0);  /* a lane of its own on GPU 1 */
    ck_assert_uint_eq(f.jobs[3].lane, f.jobs[1].lane);
    ck_assert_int_eq(f.jobs[4].gpu, f.jobs[2].gpu);
    ck_assert_uint_ne(f.jobs[4].lane, f.jobs[2].lane);
    ask(&f, 3);
    ask(&f, 4);
    ck_assert(f.jobs[3].running && f.jobs[3].free_run && f.jobs[4].running && f.jobs[4].free_run);
    ask(&f, 1);
    ck_assert(!f.jobs[1].running && f.jobs[3].free_run); /* rank 1 not ready: no reservation */
    ask(&f, 2);
    ck_assert(!f.jobs[3].free_run && f.jobs[3].running); /* reserved: stop at the boundary */
    ck_assert(!f.jobs[1].running && !f.jobs[2].running);
    ck_assert(f.jobs[4].running && f.jobs[4].free_run);  /* not reserved: runs on */
    f.now_ns += 3 * MS;
    boundary(&f, 3, 3 * MS); /* the lane frees: the gang gets both lanes now */
    ck_assert(f.jobs[1].running && f.jobs[2].running && !f.jobs[3].running);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 3 * MS);
    boundary(&f, 1, 1 * MS);
    ck_assert(!f.jobs[3].running); /* the slot goes on: rank 1 is still in it */
    boundary(&f, 2, 1 * MS);
    ck_assert(f.jobs[3].running);  /* the slot is over: the single job's turn */
    ck_assert(!f.jobs[1].running && !f.jobs[2].running);
    boundary(&f, 3, 1 * MS);       /* then the gang's next slot */
    ck_assert(f.jobs[1].running && f.jobs[2].running && !f.jobs[3].running);
    fake_stop(&f);
}
END_TEST

/* gang_slot_iterations = 3: the gang keeps its lanes 3 iterations per rank while the other
 * group waits, then the other group has its slot. */
START_TEST(test_gang_slot_length)
{
    fake_t f;
    gang_sim_t g;
    gang_setup(&f, &g, 3, false);
    ask(&f, 1);
    ask(&f, 2); /* A is complete first: its slot */
    ask(&f, 3);
    ask(&f, 4);
    ck_assert(f.jobs[1].running && f.jobs[2].running && !f.jobs[3].running && !f.jobs[4].running);
    ck_assert(!f.jobs[1].free_run && !f.jobs[2].free_run); /* B waits: they stop */
    for (int k = 0; k < 3; k++) {
        for (uint64_t id = 1; id <= 2; id++) {
            ck_assert_msg(f.jobs[id].running, "rank %llu, iteration %d", (unsigned long long)id, k);
            boundary(&f, id, 1 * MS);
            if (k < 2 || id < 2)
                ck_assert(!f.jobs[3].running && !f.jobs[4].running);
        }
    }
    ck_assert_uint_eq(f.jobs[1].iterations, 3);
    ck_assert_uint_eq(f.jobs[2].iterations, 3);
    ck_assert(!f.jobs[1].running && !f.jobs[2].running); /* slot over ... */
    ck_assert(f.jobs[3].running && f.jobs[4].running);   /* ... B's slot */
    fake_stop(&f);
}
END_TEST

/* A release (ready = false) inside the slot keeps the lane for the gang: the single job that
 * waits on it is not granted; the rank gets it back when it asks. */
START_TEST(test_gang_release_keeps_the_reservation)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 2, false);
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    reg(&f, 3, 1000, 100 * MIB, 600 * MIB, 100, 0);
    ck_assert_uint_eq(f.jobs[3].lane, f.jobs[1].lane);
    ask(&f, 1);
    ask(&f, 2);
    ck_assert(f.jobs[1].running && f.jobs[1].free_run); /* alone: it runs freely */
    ask(&f, 3);
    ck_assert(!f.jobs[1].free_run && !f.jobs[2].free_run); /* both stop */
    release(&f, 1, 1 * MS);
    ck_assert(!f.jobs[3].running);
    ask(&f, 1);
    ck_assert(f.jobs[1].running && !f.jobs[3].running);
    fake_stop(&f);
}
END_TEST

/* A rank that leaves is no longer part of its gang: the rest are still granted, whether it
 * leaves before asking (no wait for a departed rank) or in the middle of a slot. */
START_TEST(test_gang_member_leaves)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    ask(&f, 1);
    ck_assert(!f.jobs[1].running); /* waits for rank 1 */
    leave(&f, 2);
    ck_assert(f.jobs[1].running); /* a gang of one */
    fake_stop(&f);

    fake_start_gpus(&f, "pack", 3, 1 * GIB, 1, false);
    reg_rank(&f, 1, 100, 3, 0, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 2, 100, 3, 1, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 3, 100, 3, 2, SCHED_CORE_SYNC_BSP, 0);
    reg(&f, 4, 1000, 100 * MIB, 600 * MIB, 100, 0); /* beside rank 0: no free runs */
    ck_assert_uint_eq(f.jobs[4].lane, f.jobs[1].lane);
    ask(&f, 4);
    for (uint64_t id = 1; id <= 3; id++)
        ask(&f, id);
    boundary(&f, 4, 1 * MS);
    ck_assert(f.jobs[1].running && f.jobs[2].running && f.jobs[3].running);
    leave(&f, 3); /* in the middle of the slot */
    boundary(&f, 1, 1 * MS);
    ck_assert(!f.jobs[4].running);
    boundary(&f, 2, 1 * MS);
    ck_assert(f.jobs[4].running); /* slot over: the single job's turn */
    boundary(&f, 4, 1 * MS);
    ck_assert(f.jobs[1].running && f.jobs[2].running); /* the gang of two goes on */
    ck_assert_uint_eq(f.jobs[1].iterations, 1);
    fake_stop(&f);
}
END_TEST

/* SSP, staleness 1: a rank two iterations ahead of the slowest is held (and its wait
 * counted) until the slowest reports a boundary. */
START_TEST(test_ssp_holds_a_rank_too_far_ahead)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_SSP, 1);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_SSP, 1);
    ask(&f, 1);
    ck_assert(f.jobs[1].running && !f.jobs[1].free_run); /* SSP ranks never run freely */
    boundary(&f, 1, 1 * MS);
    ck_assert(f.jobs[1].running); /* 1 ahead: fine */
    boundary(&f, 1, 1 * MS);
    ck_assert(!f.jobs[1].running); /* 2 ahead: held */
    f.now_ns += 4 * MS;
    ask(&f, 2);
    ck_assert(f.jobs[2].running && !f.jobs[1].running);
    boundary(&f, 2, 1 * MS); /* the slowest reports: rank 0 goes on */
    ck_assert(f.jobs[1].running);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 4 * MS);
    ck_assert_int_eq(ji.group.sync, SCHED_CORE_SYNC_SSP);
    ck_assert_uint_eq(ji.group.staleness, 1);
    fake_stop(&f);
}
END_TEST

/* Host-only ranks (submitted, never registered): a BSP group of world 4 whose ranks 1 and 3
 * registered waits until the caller releases it (every rank submitted), then both are
 * admitted in that event on distinct GPUs (world 4 on 3 GPUs is not refused: the others need
 * none) and take their gang slots together without waiting for ranks 0 and 2; rank 2 calling
 * the driver late is placed alone on the free GPU, joins the slot going on and then takes the
 * gang's slots with the others; rank 0 too would make
 * four ranks on three GPUs: refused, alone. An SSP:1 group of world 3 with one host-only rank:
 * the bound holds among the two registered ranks only. A release before any rank registered
 * is -ENOENT. */
static int group_release(fake_t *f, uint64_t group);

START_TEST(test_group_host_only)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 3, 1 * GIB, 1, false);
    ck_assert_int_eq(group_release(&f, 100), -ENOENT);
    reg_rank(&f, 1, 100, 4, 1, SCHED_CORE_SYNC_BSP, 0);
    reg_rank(&f, 2, 100, 4, 3, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(!f.jobs[1].admitted && !f.jobs[2].admitted && !f.jobs[1].refused);
    f.now_ns += 3 * MS;
    ck_assert_int_eq(sched_core_group_release(f.core, 100, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(effects_of(&f, SCHED_CORE_ADMIT), 2);
    apply(&f);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_int_ne(f.jobs[1].gpu, f.jobs[2].gpu);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 3 * MS);
    ask(&f, 1);
    ck_assert(!f.jobs[1].running); /* its gang: rank 3 (job 2) is not ready yet */
    ask(&f, 2);
    ck_assert(f.jobs[1].running && f.jobs[2].running); /* together, ranks 0 and 2 not awaited */
    boundary(&f, 1, 1 * MS);
    boundary(&f, 2, 1 * MS);
    ck_assert(f.jobs[1].running && f.jobs[2].running); /* the next slot */
    boundary(&f, 1, 1 * MS);
    boundary(&f, 2, 1 * MS);
    /* rank 2 calls the driver after all: a late rank, on the GPU neither holds */
    reg_rank(&f, 3, 100, 4, 2, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[3].admitted);
    ck_assert(f.jobs[3].gpu != f.jobs[1].gpu && f.jobs[3].gpu != f.jobs[2].gpu);
    ask(&f, 3);
    /* its peers are in a slot (they may wait for it in a collective): it joins the slot */
    ck_assert(f.jobs[1].running && f.jobs[2].running && f.jobs[3].running);
    for (uint64_t id = 1; id <= 3; id++)
        boundary(&f, id, 1 * MS);
    ck_assert(f.jobs[1].running && f.jobs[2].running && f.jobs[3].running); /* one gang now */
    /* rank 0 too: four registered ranks on three GPUs can never be placed */
    reg_rank(&f, 4, 100, 4, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[4].refused && !f.jobs[1].refused && f.jobs[1].admitted);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "more ranks than"));
    for (uint64_t id = 1; id <= 3; id++)
        leave(&f, id);
    /* SSP:1, world 3, rank 1 host-only (never an iteration): ranks 0 and 2 keep step with
     * each other only */
    reg_rank(&f, 10, 200, 3, 0, SCHED_CORE_SYNC_SSP, 1);
    reg_rank(&f, 11, 200, 3, 2, SCHED_CORE_SYNC_SSP, 1);
    ck_assert(!f.jobs[10].admitted);
    ck_assert_int_eq(group_release(&f, 200), 0);
    ck_assert(f.jobs[10].admitted && f.jobs[11].admitted);
    ck_assert_int_eq(group_release(&f, 200), 0); /* twice: nothing more */
    ask(&f, 10);
    ask(&f, 11);
    for (int k = 0; k < 5; k++) {
        ck_assert(f.jobs[10].running && f.jobs[11].running);
        boundary(&f, 10, 1 * MS);
        boundary(&f, 11, 1 * MS);
    }
    ck_assert_uint_eq(f.jobs[10].iterations, 5);
    boundary(&f, 10, 1 * MS); /* 1 ahead of rank 2: fine */
    boundary(&f, 10, 1 * MS); /* 2 ahead: held, by rank 2 alone */
    ck_assert(!f.jobs[10].running);
    fake_stop(&f);
}
END_TEST

/* ASP ranks take turns as single jobs: one runs while its peer waits for nothing. */
START_TEST(test_asp_ranks_take_single_turns)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_ASP, 0);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_ASP, 0);
    ask(&f, 1);
    ck_assert(f.jobs[1].running && f.jobs[1].free_run && !f.jobs[2].running);
    fake_stop(&f);
}
END_TEST

/* Ranks that survive a daemon restart come back into their group: they take gang turns again
 * (one rank alone is not granted), with no gang wait for the time they held their places. */
START_TEST(test_gang_reattached_ranks)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    for (uint32_t r = 0; r < 2; r++) {
        sched_core_job_hints_t h = {.id = 1 + r, .uid = 1000,
                                    .group = {.id = 100, .world = 2, .rank = r}};
        sched_core_reattach_t where = {.gpu = (int)r, .persistent_bytes = 100 * MIB,
                                       .ephemeral_bytes = 600 * MIB, .iterations = 4};
        ck_assert_int_eq(sched_core_job_reattached(f.core, &h, &where, f.now_ns, &f.fx), 0);
        apply(&f);
        f.jobs[1 + r].admitted = 1; /* (the daemon answers a re-attach itself) */
        f.jobs[1 + r].iterations = 4;
    }
    f.now_ns += 5 * MS;
    ask(&f, 1);
    ck_assert(!f.jobs[1].running);
    ask(&f, 2);
    ck_assert(f.jobs[1].running && f.jobs[2].running);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 0);
    ck_assert_uint_eq(ji.group.id, 100);
    ck_assert_uint_eq(ji.group.rank, 1);
    fake_stop(&f);
}
END_TEST

/* ---- cluster groups: release and externally ordered gang slots (sched_core.h) ------------ */

/* Registers rank `rank` of cluster group `group` (world ranks across the cluster). */
static int reg_cluster_rc(fake_t *f, uint64_t id, uint64_t group, uint32_t world, uint32_t rank,
                          sched_core_sync_t sync, uint64_t p, uint64_t e)
{
    sched_core_job_hints_t h = {.id = id, .uid = 1000, .persistent_bytes = p,
                                .ephemeral_bytes = e, .iterations_expected = 1000,
                                .group = {.id = group, .world = world, .rank = rank,
                                          .sync = sync, .cluster = true}};
    int rc = sched_core_job_registered(f->core, &h, f->now_ns, &f->fx);
    apply(f);
    return rc;
}

static void reg_cluster(fake_t *f, uint64_t id, uint64_t group, uint32_t world, uint32_t rank)
{
    ck_assert_int_eq(reg_cluster_rc(f, id, group, world, rank, SCHED_CORE_SYNC_BSP, 100 * MIB,
                                    600 * MIB), 0);
}

static int group_release(fake_t *f, uint64_t group)
{
    int rc = sched_core_group_release(f->core, group, f->now_ns, &f->fx);
    apply(f);
    return rc;
}

/* Two released cluster groups of two ranks here (world 4), 100 (jobs 1, 2) and 200 (jobs 3,
 * 4), on two 1 GiB GPUs, A's rank 0 beside B's rank 1 (as gang_setup); slots of
 * slot_iterations iterations. */
static void cluster_pair(fake_t *f, uint32_t slot_iterations)
{
    fake_start_gpus(f, "pack", 2, 1 * GIB, slot_iterations, false);
    reg_cluster(f, 1, 100, 4, 0);
    reg_cluster(f, 2, 100, 4, 1);
    reg_cluster(f, 3, 200, 4, 3);
    reg_cluster(f, 4, 200, 4, 2);
    ck_assert_int_eq(group_release(f, 100), 0);
    ck_assert_int_eq(group_release(f, 200), 0);
}

/* slot seq of group, whose ranks reach target iterations at its end (0: not known) */
static int group_slot_to(fake_t *f, uint64_t group, uint64_t seq, uint64_t target)
{
    int rc = sched_core_group_slot(f->core, group, seq, target, f->now_ns, &f->fx);
    apply(f);
    return rc;
}

static int group_slot(fake_t *f, uint64_t group, uint64_t seq)
{
    return group_slot_to(f, group, seq, 0);
}

/* An SSP:1 cluster group of world 3, rank 0 here: without a remote count the bound is kept
 * among the local ranks (none to wait for); once the others' least count is given, the rank
 * 2 iterations ahead of it is held, and goes on when it grows; a value for an unknown group
 * or a group not SSP across nodes is refused. */
START_TEST(test_cluster_ssp_remote_least)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 1, 1 * GIB, 1, false);
    sched_core_job_hints_t h = {.id = 1, .uid = 1000, .persistent_bytes = 100 * MIB,
                                .ephemeral_bytes = 600 * MIB, .iterations_expected = 1000,
                                .group = {.id = 9, .world = 3, .rank = 0, .staleness = 1,
                                          .sync = SCHED_CORE_SYNC_SSP, .cluster = true}};
    ck_assert_int_eq(sched_core_job_registered(f.core, &h, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert_int_eq(group_release(&f, 9), 0);
    ask(&f, 1);
    ck_assert(f.jobs[1].running);
    ck_assert_int_eq(sched_core_group_remote_least(f.core, 9, 0, f.now_ns, &f.fx), 0);
    apply(&f);
    boundary(&f, 1, 1 * MS);
    ck_assert(f.jobs[1].running); /* 1 ahead of the others: fine */
    boundary(&f, 1, 1 * MS);
    ck_assert(!f.jobs[1].running); /* 2 ahead: held */
    f.now_ns += 3 * MS;
    ck_assert_int_eq(sched_core_group_remote_least(f.core, 9, 1, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert(f.jobs[1].running); /* the slowest elsewhere did one: it goes on */
    boundary(&f, 1, 1 * MS);
    ck_assert(!f.jobs[1].running); /* 3 done, the others 1: held again */
    ck_assert_int_eq(sched_core_group_remote_least(f.core, 9, UINT64_MAX, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert(f.jobs[1].running); /* no other rank left: the local bound only */
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 3 * MS);
    ck_assert_int_eq(sched_core_group_remote_least(f.core, 77, 1, f.now_ns, &f.fx), -ENOENT);
    reg_cluster(&f, 2, 8, 2, 0); /* BSP */
    ck_assert_int_eq(sched_core_group_remote_least(f.core, 8, 1, f.now_ns, &f.fx), -EINVAL);
    apply(&f);
    fake_stop(&f);
}
END_TEST

/* Two of a world of 3 here: checked like local ranks, not admitted until the release, then
 * both in that event on distinct GPUs; a cluster group with more ranks here than GPUs is
 * refused at registration (one with more in its world is not); release of an unknown group
 * is an error. */
START_TEST(test_cluster_waits_for_release)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 1, false);
    reg_cluster(&f, 1, 7, 3, 0);
    reg_cluster(&f, 2, 7, 3, 2);
    ck_assert(!f.jobs[1].admitted && !f.jobs[2].admitted);
    ck_assert_int_eq(reg_cluster_rc(&f, 3, 7, 3, 2, SCHED_CORE_SYNC_BSP, MIB, MIB), -EINVAL);
    ck_assert_int_eq(reg_cluster_rc(&f, 3, 7, 3, 3, SCHED_CORE_SYNC_BSP, MIB, MIB), -EINVAL);
    ck_assert_int_eq(reg_cluster_rc(&f, 3, 7, 4, 1, SCHED_CORE_SYNC_BSP, MIB, MIB), -EINVAL);
    ck_assert_int_eq(reg_cluster_rc(&f, 3, 7, 3, 1, SCHED_CORE_SYNC_ASP, MIB, MIB), -EINVAL);
    ck_assert_int_eq(reg_rank_rc(&f, 3, 7, 3, 1, SCHED_CORE_SYNC_BSP, 0, MIB, MIB), -EINVAL);
    ck_assert_int_eq(group_release(&f, 99), -ENOENT);
    ck_assert_int_eq(group_slot(&f, 99, 1), -ENOENT);
    ck_assert(!f.jobs[1].admitted && !f.jobs[2].admitted);
    sched_core_job_info_t ji;
    ck_assert_int_eq(sched_core_job_info(f.core, 1, &ji), 0);
    ck_assert_int_eq(ji.phase, SCHED_CORE_WAITING);
    ck_assert(ji.group.cluster);
    f.now_ns += 5 * MS;
    ck_assert_int_eq(sched_core_group_release(f.core, 7, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(effects_of(&f, SCHED_CORE_ADMIT), 2);
    apply(&f);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_int_ne(f.jobs[1].gpu, f.jobs[2].gpu);
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &ji), 0);
    ck_assert_uint_eq(ji.gang_wait_ns, 5 * MS);
    ck_assert_int_eq(group_release(&f, 7), 0); /* twice: 0, nothing more */
    ck_assert_uint_eq(f.admit_count, 2);
    /* a local group can be released too (its other rank is host-only: test_group_host_only) */
    reg_rank(&f, 10, 8, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(!f.jobs[10].admitted);
    ck_assert_int_eq(group_release(&f, 8), 0);
    ck_assert(f.jobs[10].admitted);
    /* world 5 with 2 ranks here fits 2 GPUs (it waits); a third rank here is refused, all */
    reg_cluster(&f, 20, 9, 5, 0);
    reg_cluster(&f, 21, 9, 5, 3);
    ck_assert(!f.jobs[20].refused && !f.jobs[21].refused);
    reg_cluster(&f, 22, 9, 5, 4);
    ck_assert(f.jobs[20].refused && f.jobs[21].refused && f.jobs[22].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "more ranks than"));
    ck_assert_int_eq(group_release(&f, 9), -ENOENT);
    fake_stop(&f);
}
END_TEST

/* Two cluster groups sharing both lanes (A's rank 0 beside B's rank 1, as gang_setup): slots
 * are served in the order given (B's first, although A has the lower id and neither was
 * served: the local order would pick A), each for gang_slot_iterations (2) iterations of every
 * rank, granted together and never freely; SLOT_DONE carries the group and seq; a duplicate
 * seq is -EALREADY, an older one -EINVAL, as is a slot for a local group or an ASP one. */
START_TEST(test_cluster_slots_in_fifo_order)
{
    fake_t f;
    cluster_pair(&f, 2);
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert(f.jobs[id].admitted);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[3].lane);
    ck_assert_uint_eq(f.jobs[2].lane, f.jobs[4].lane);
    for (uint64_t id = 1; id <= 4; id++)
        ask(&f, id);
    ck_assert_uint_eq(f.grant_count, 0); /* no slot, no turn */
    uint64_t head_group = 1, head_seq = 1;
    ck_assert_uint_eq(sched_core_slots_queued(f.core, &head_group, &head_seq), 0);
    ck_assert_uint_eq(head_group, 0);
    ck_assert_uint_eq(head_seq, 0);
    ck_assert_int_eq(sched_core_group_slot(f.core, 200, 1, 0, f.now_ns, &f.fx), 0);
    ck_assert_uint_eq(effects_of(&f, SCHED_CORE_GRANT), 2); /* together, in one event */
    apply(&f);
    ck_assert_int_eq(group_slot(&f, 100, 1), 0);
    ck_assert_int_eq(group_slot(&f, 200, 2), 0);
    ck_assert_int_eq(group_slot(&f, 200, 2), -EALREADY);
    ck_assert_int_eq(group_slot(&f, 200, 1), -EINVAL);
    ck_assert_int_eq(group_slot(&f, 100, 0), -EINVAL);
    ck_assert_uint_eq(sched_core_slots_queued(f.core, &head_group, &head_seq), 2);
    ck_assert_uint_eq(head_group, 200);
    ck_assert_uint_eq(head_seq, 1);
    ck_assert(f.jobs[3].running && f.jobs[4].running && !f.jobs[1].running && !f.jobs[2].running);
    ck_assert(!f.jobs[3].free_run && !f.jobs[4].free_run);
    for (int k = 0; k < 2; k++) {
        boundary(&f, 3, 1 * MS);
        ck_assert_uint_eq(f.done_count, 0);
        ck_assert(f.jobs[3].running == (k == 0)); /* granted again inside its slot */
        boundary(&f, 4, 1 * MS);
    }
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert_uint_eq(f.done_groups[0], 200);
    ck_assert_uint_eq(f.done_seqs[0], 1);
    ck_assert(f.jobs[1].running && f.jobs[2].running); /* A's slot, in the same event */
    ck_assert(!f.jobs[1].free_run && !f.jobs[2].free_run);
    ck_assert(!f.jobs[3].running && !f.jobs[4].running);
    for (int k = 0; k < 2; k++)
        for (uint64_t id = 1; id <= 2; id++)
            boundary(&f, id, 1 * MS);
    ck_assert_uint_eq(f.done_count, 2);
    ck_assert_uint_eq(f.done_groups[1], 100);
    ck_assert_uint_eq(f.done_seqs[1], 1);
    ck_assert(f.jobs[3].running && f.jobs[4].running); /* B's second slot */
    for (int k = 0; k < 2; k++)
        for (uint64_t id = 3; id <= 4; id++)
            boundary(&f, id, 1 * MS);
    ck_assert_uint_eq(f.done_count, 3);
    ck_assert_uint_eq(f.done_seqs[2], 2);
    ck_assert_uint_eq(sched_core_slots_queued(f.core, &head_group, &head_seq), 0);
    ck_assert_uint_eq(head_group, 0);
    size_t grants = f.grant_count;
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert(!f.jobs[id].running); /* no slot: nobody runs, all ready */
    f.now_ns += 1 * MS;
    ck_assert_int_eq(sched_core_admit(f.core, f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert_uint_eq(f.grant_count, grants);
    ck_assert_int_eq(group_slot(&f, 100, 7), 0); /* seqs need not be dense */
    ck_assert(f.jobs[1].running && f.jobs[2].running);
    /* only BSP cluster groups take slots */
    reg_rank(&f, 10, 300, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert_int_eq(group_slot(&f, 300, 1), -EINVAL);
    ck_assert_int_eq(reg_cluster_rc(&f, 11, 400, 2, 0, SCHED_CORE_SYNC_ASP, MIB, MIB), 0);
    ck_assert_int_eq(group_slot(&f, 400, 1), -EINVAL);
    fake_stop(&f);
}
END_TEST

/* One GPU, slots of slot_iterations; job 1 is rank 1 of cluster group 100 (world 3, its other
 * ranks elsewhere), released and ready: it waits for a slot. */
static void lone_cluster_rank(fake_t *f, uint32_t slot_iterations)
{
    fake_start_gpus(f, "pack", 1, 1 * GIB, slot_iterations, false);
    reg_cluster(f, 1, 100, 3, 1);
    ck_assert_int_eq(group_release(f, 100), 0);
    ask(f, 1);
}

/* A rank that registered after its peers on other nodes had their first slot (0 iterations
 * where they did 1) is sent the next slot with the leader's target, 2: it is granted again at
 * its first boundary and its slot ends at the second (its peers may wait for it in a
 * collective between the two: MPI_Allreduce after a synchronising copy). Before, its slot
 * ended at its first boundary and it waited for the next slot while its peers waited in the
 * collective for it. In step, a slot is one iteration; a rank more than two slots behind the
 * target (one that called the driver long after its peers started) does one iteration, as
 * without a target; so does a slot whose target is not known. A rank at its slot's target or
 * past it is not granted (the slot ends at once). With slots of 2 iterations the bound is 4. */
START_TEST(test_cluster_late_rank_catches_up)
{
    fake_t f;
    lone_cluster_rank(&f, 1);
    ck_assert_int_eq(group_slot_to(&f, 100, 2, 2), 0);
    ck_assert(f.jobs[1].running);
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 0);
    ck_assert(f.jobs[1].running); /* granted again: 1 of 2 */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert_uint_eq(f.done_seqs[0], 2);
    ck_assert(!f.jobs[1].running);
    ck_assert_int_eq(group_slot_to(&f, 100, 3, 3), 0); /* in step: one iteration */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 2);
    ck_assert(!f.jobs[1].running);
    ck_assert_int_eq(group_slot_to(&f, 100, 4, 20), 0); /* far behind: one iteration */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 3);
    ck_assert(!f.jobs[1].running);
    ck_assert_int_eq(group_slot_to(&f, 100, 5, 0), 0); /* no target: one iteration */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 4);
    ck_assert_uint_eq(f.done_seqs[3], 5);
    ck_assert(!f.jobs[1].running);
    /* past its target (5 of 3), or at it: no part in the slot, which ends at once (an
     * iteration beyond the target would wait in its collective for peers that stop there) */
    ck_assert_int_eq(group_slot_to(&f, 100, 6, 3), 0);
    ck_assert_uint_eq(f.done_count, 5);
    ck_assert_uint_eq(f.done_seqs[4], 6);
    ck_assert(!f.jobs[1].running);
    ck_assert_int_eq(group_slot_to(&f, 100, 7, 5), 0);
    ck_assert_uint_eq(f.done_count, 6);
    ck_assert(!f.jobs[1].running);
    ck_assert_uint_eq(f.jobs[1].iterations, 5);
    ck_assert_int_eq(group_slot_to(&f, 100, 8, 8), 0); /* 3 behind, past the bound: one */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 7);
    ck_assert_uint_eq(f.jobs[1].iterations, 6);
    fake_stop(&f);

    /* slots of 2 iterations: up to 4 behind catches up, 5 behind does 2 */
    lone_cluster_rank(&f, 2);
    ck_assert_int_eq(group_slot_to(&f, 100, 1, 4), 0);
    for (int k = 0; k < 3; k++) {
        boundary(&f, 1, 1 * MS);
        ck_assert_uint_eq(f.done_count, 0);
        ck_assert(f.jobs[1].running);
    }
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert_int_eq(group_slot_to(&f, 100, 2, 9), 0);
    boundary(&f, 1, 1 * MS);
    ck_assert(f.jobs[1].running);
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 2);
    ck_assert_uint_eq(f.jobs[1].iterations, 6);
    fake_stop(&f);
}
END_TEST

/* After a restart of salusd on one node, its rank ran the iteration of slot 1 on the former
 * daemon's grant; the restarted daemon is sent slot 1 again (target 1), and the rank comes
 * back ready at 1 iteration. It is not granted: its peers on the other nodes stopped at 1,
 * and an iteration beyond would wait for them in its collective while they wait for the next
 * slot, which waits for this node (a deadlock seen in the failure table, row 2). The slot ends
 * at once, and a slot queued behind it is served in the same event. */
START_TEST(test_cluster_rank_at_target_sits_out)
{
    fake_t f;
    lone_cluster_rank(&f, 1);
    ck_assert_int_eq(group_slot_to(&f, 100, 1, 1), 0);
    ck_assert(f.jobs[1].running);
    /* the sent-again slot and the next one arrive while the rank still runs */
    ck_assert_int_eq(group_slot_to(&f, 100, 2, 1), 0);
    ck_assert_int_eq(group_slot_to(&f, 100, 3, 2), 0);
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.jobs[1].iterations, 1);
    ck_assert_uint_eq(f.done_count, 2); /* 1, and 2 at once */
    ck_assert_uint_eq(f.done_seqs[0], 1);
    ck_assert_uint_eq(f.done_seqs[1], 2);
    ck_assert(f.jobs[1].running); /* slot 3, in the same event */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 3);
    ck_assert_uint_eq(f.done_seqs[2], 3);
    ck_assert(!f.jobs[1].running);
    ck_assert_uint_eq(f.jobs[1].iterations, 2);
    /* a slot whose target it has reached, arriving while it waits: over at once, no grant */
    size_t grants = f.grant_count;
    ck_assert_int_eq(group_slot_to(&f, 100, 4, 2), 0);
    ck_assert_uint_eq(f.done_count, 4);
    ck_assert_uint_eq(f.grant_count, grants);
    ck_assert(!f.jobs[1].running);
    fake_stop(&f);
}
END_TEST

/* A single job waiting on a lane that a cluster slot reserves has its turn between two slots
 * of the group (even with the next slot queued already); a cluster rank alone in its lane is
 * not granted freely (it must report the boundaries that end its slot). */
START_TEST(test_cluster_single_job_between_slots)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 1, 1 * GIB, 1, false);
    reg_cluster(&f, 1, 100, 2, 1);
    ck_assert_int_eq(group_release(&f, 100), 0);
    reg(&f, 2, 1000, 100 * MIB, 600 * MIB, 100, 0);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane);
    ask(&f, 1);
    ck_assert_int_eq(group_slot(&f, 100, 1), 0);
    ck_assert(f.jobs[1].running && !f.jobs[1].free_run);
    ask(&f, 2);
    ck_assert(!f.jobs[2].running); /* the lane is the slot's */
    ck_assert_int_eq(group_slot(&f, 100, 2), 0);
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert(f.jobs[2].running && !f.jobs[1].running); /* its turn first */
    boundary(&f, 2, 1 * MS);
    ck_assert(f.jobs[1].running && !f.jobs[2].running); /* then slot 2 */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 2);
    ck_assert_uint_eq(f.done_seqs[1], 2);
    ck_assert(f.jobs[2].running); /* no slot left: its turn */
    ck_assert_uint_eq(f.grant_count, 4);
    ck_assert_uint_eq(f.grants[0], 1);
    ck_assert_uint_eq(f.grants[1], 2);
    ck_assert_uint_eq(f.grants[2], 1);
    ck_assert_uint_eq(f.grants[3], 2);
    fake_stop(&f);
}
END_TEST

/* Ranks leaving: the slot goes on with the ranks left; when the group's last local rank has
 * gone, its slots (the one served and the queued ones) are dropped, each with its SLOT_DONE
 * in order, and the next group's slot is served. */
START_TEST(test_cluster_ranks_leave_drop_slots)
{
    fake_t f;
    cluster_pair(&f, 1);
    for (uint64_t id = 1; id <= 4; id++)
        ask(&f, id);
    ck_assert_int_eq(group_slot(&f, 100, 1), 0);
    ck_assert_int_eq(group_slot(&f, 100, 2), 0);
    ck_assert_int_eq(group_slot(&f, 200, 1), 0);
    ck_assert_int_eq(group_slot(&f, 100, 3), 0);
    ck_assert(f.jobs[1].running && f.jobs[2].running);
    leave(&f, 2);
    ck_assert_uint_eq(f.done_count, 0); /* rank 0 still runs the slot */
    boundary(&f, 1, 1 * MS);
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert(f.jobs[1].running); /* slot 2: a gang of one here */
    ck_assert(!f.jobs[3].running && !f.jobs[4].running);
    leave(&f, 1);
    ck_assert_uint_eq(f.done_count, 3);
    ck_assert_uint_eq(f.done_groups[1], 100);
    ck_assert_uint_eq(f.done_seqs[1], 2);
    ck_assert_uint_eq(f.done_groups[2], 100);
    ck_assert_uint_eq(f.done_seqs[2], 3);
    ck_assert(f.jobs[3].running && f.jobs[4].running); /* B's slot */
    uint64_t head_group = 0, head_seq = 0;
    ck_assert_uint_eq(sched_core_slots_queued(f.core, &head_group, &head_seq), 0);
    ck_assert_uint_eq(head_group, 200);
    ck_assert_uint_eq(head_seq, 1);
    ck_assert_int_eq(group_slot(&f, 100, 4), -ENOENT); /* no rank here any more */
    fake_stop(&f);
}
END_TEST

/* Local gangs beside a cluster group: they take slots in the local order (least recently
 * served first) whether or not the cluster group has a slot; the cluster group runs only in
 * its slot, placed among them by the time its last slot started. */
START_TEST(test_cluster_beside_local_gangs)
{
    fake_t f;
    gang_sim_t g;
    gang_setup(&f, &g, 1, false);
    ck_assert_int_eq(reg_cluster_rc(&f, 5, 300, 3, 1, SCHED_CORE_SYNC_BSP, 10 * MIB, 600 * MIB),
                     0);
    ck_assert_int_eq(group_release(&f, 300), 0);
    ck_assert(f.jobs[5].admitted);
    ck_assert_uint_eq(f.jobs[5].lane, f.jobs[1].lane);
    ask(&f, 5); /* (the others wait: no gang runs freely) */
    ask(&f, 3);
    ask(&f, 4);
    ask(&f, 1);
    ask(&f, 2);
    /* B (complete first), A, B, A: the local order; 300 has no slot */
    uint64_t expect[5][2] = {{3, 4}, {1, 2}, {3, 4}, {1, 2}, {3, 4}};
    for (int s = 0; s < 5; s++) {
        ck_assert_msg(f.jobs[expect[s][0]].running && f.jobs[expect[s][1]].running, "slot %d", s);
        ck_assert(!f.jobs[5].running);
        ck_assert(!f.jobs[expect[s][0]].free_run && !f.jobs[expect[s][1]].free_run);
        if (s == 4)
            break;
        f.now_ns += 1 * MS;
        boundary(&f, expect[s][0], 1 * MS);
        boundary(&f, expect[s][1], 1 * MS);
    }
    ck_assert_int_eq(group_slot(&f, 300, 1), 0);
    ck_assert(!f.jobs[5].running); /* B holds the lane */
    f.now_ns += 1 * MS;
    boundary(&f, 3, 1 * MS);
    boundary(&f, 4, 1 * MS);
    /* 300 (never served) before A (served 1 ms ago), which claims its lanes and waits */
    ck_assert(f.jobs[5].running);
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert(!f.jobs[id].running);
    boundary(&f, 5, 1 * MS);
    ck_assert_uint_eq(f.done_count, 1);
    ck_assert_uint_eq(f.done_groups[0], 300);
    ck_assert_uint_eq(f.done_seqs[0], 1);
    ck_assert(!f.jobs[5].running && f.jobs[1].running && f.jobs[2].running);
    fake_stop(&f);
}
END_TEST

/* Three nodes (three cores of 2 GPUs) with ranks of 2 or 3 cluster groups in random
 * placements (worlds of 2 to 4, at most 2 ranks of a group per node) and a single job per
 * node, all sharing lanes; one driver issues every group's slots in one global order and
 * delivers each node its slots in that order, at random times (also before the node released
 * the group). A rank's iteration completes only when every rank of its group, on every node,
 * has been granted that iteration (a collective). Over 200 seeds: every group does its N
 * iterations (no deadlock) within a bounded number of steps, each node's SLOT_DONEs come in
 * the order its slots were given, and every slot given ends. */
enum { CL_NODES = 3, CL_GROUPS = 3, CL_WORLD = 4, CL_N = 8, CL_SINGLE = 5 };

typedef struct cl_rank_s {
    int node;
    uint64_t id; /* the job id on its node */
} cl_rank_t;

typedef struct cl_sim_s {
    fake_t *nodes[CL_NODES];
    int groups;
    uint32_t world[CL_GROUPS];
    cl_rank_t ranks[CL_GROUPS][CL_WORLD];
    bool has[CL_NODES][CL_GROUPS];
    bool released[CL_NODES][CL_GROUPS];
    bool asked[CL_GROUPS][CL_WORLD]; /* asked for a turn, not finished since */
    uint64_t order[CL_GROUPS * CL_N][2]; /* the global order: (group id, seq) */
    size_t order_count;
    size_t delivered[CL_NODES];            /* position in the order of each node's next slot */
    uint64_t given[CL_NODES][CL_GROUPS * CL_N][2]; /* what each node was given, in order */
    size_t given_count[CL_NODES];
    bool single_started[CL_NODES];
} cl_sim_t;

static uint64_t cl_group_id(int g)
{
    return 100 + (uint64_t)g;
}

static bool cl_can_finish(const cl_sim_t *c, int g, int r)
{
    const fake_job_t *j = &c->nodes[c->ranks[g][r].node]->jobs[c->ranks[g][r].id];
    if (!j->running)
        return false;
    for (uint32_t p = 0; p < c->world[g]; p++) {
        const fake_job_t *peer = &c->nodes[c->ranks[g][p].node]->jobs[c->ranks[g][p].id];
        if (!(peer->iterations > j->iterations ||
              (peer->running && peer->iterations == j->iterations)))
            return false;
    }
    return true;
}

static void cl_setup(cl_sim_t *c, uint64_t *rng)
{
    memset(c, 0, sizeof(*c));
    uint64_t next_id[CL_NODES];
    for (int n = 0; n < CL_NODES; n++) {
        c->nodes[n] = calloc(1, sizeof(fake_t));
        ck_assert_ptr_nonnull(c->nodes[n]);
        fake_start_gpus(c->nodes[n], "pack", 2, 1 * GIB, 1, false);
        next_id[n] = 10;
    }
    c->groups = 2 + (int)(prng_next(rng) % 2);
    for (int g = 0; g < c->groups; g++) {
        c->world[g] = 2 + (uint32_t)(prng_next(rng) % 3);
        int per_node[CL_NODES] = {0};
        for (uint32_t r = 0; r < c->world[g]; r++) {
            int n;
            do
                n = (int)(prng_next(rng) % CL_NODES);
            while (per_node[n] == 2);
            per_node[n]++;
            c->ranks[g][r] = (cl_rank_t){.node = n, .id = next_id[n]++};
            c->has[n][g] = true;
            ck_assert_int_eq(reg_cluster_rc(c->nodes[n], c->ranks[g][r].id, cl_group_id(g),
                                            c->world[g], r, SCHED_CORE_SYNC_BSP, 50 * MIB,
                                            600 * MIB), 0);
        }
    }
    for (int n = 0; n < CL_NODES; n++)
        reg(c->nodes[n], CL_SINGLE, 1000, 50 * MIB, 600 * MIB, 100, 0);
    /* the global order: rounds of every group's next slot, each round in a random order */
    uint64_t seq = 1;
    for (int round = 0; round < CL_N; round++) {
        int perm[CL_GROUPS] = {0, 1, 2};
        for (int i = c->groups - 1; i > 0; i--) {
            int k = (int)(prng_next(rng) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        for (int i = 0; i < c->groups; i++) {
            c->order[c->order_count][0] = cl_group_id(perm[i]);
            c->order[c->order_count++][1] = seq++;
        }
    }
}

/* The node's next slot in the global order (skipping groups it has no rank of), or -1. */
static long cl_next_slot(const cl_sim_t *c, int n)
{
    for (size_t i = c->delivered[n]; i < c->order_count; i++)
        if (c->has[n][c->order[i][0] - 100])
            return (long)i;
    return -1;
}

static bool cl_done(const cl_sim_t *c)
{
    for (int g = 0; g < c->groups; g++)
        for (uint32_t r = 0; r < c->world[g]; r++)
            if (c->nodes[c->ranks[g][r].node]->jobs[c->ranks[g][r].id].iterations < CL_N)
                return false;
    for (int n = 0; n < CL_NODES; n++)
        if (c->nodes[n]->jobs[CL_SINGLE].iterations < CL_N)
            return false;
    return true;
}

/* Do two groups share a lane on at least `nodes` nodes? */
static bool cl_groups_share_lanes(const cl_sim_t *c, int nodes)
{
    for (int g = 0; g < c->groups; g++)
        for (int h = g + 1; h < c->groups; h++) {
            bool on[CL_NODES] = {false};
            for (uint32_t r = 0; r < c->world[g]; r++)
                for (uint32_t q = 0; q < c->world[h]; q++) {
                    const cl_rank_t *a = &c->ranks[g][r], *b = &c->ranks[h][q];
                    const fake_job_t *ja = &c->nodes[a->node]->jobs[a->id];
                    const fake_job_t *jb = &c->nodes[b->node]->jobs[b->id];
                    on[a->node] |= a->node == b->node && ja->gpu == jb->gpu &&
                                   ja->lane == jb->lane;
                }
            int count = 0;
            for (int n = 0; n < CL_NODES; n++)
                count += on[n];
            if (count >= nodes)
                return true;
        }
    return false;
}

START_TEST(test_cluster_three_nodes_never_deadlock)
{
    enum { MAX_STEPS = 4000 };
    int contended = 0; /* seeds where two groups share lanes on two nodes (a circle could form) */
    for (uint64_t seed = 1; seed <= 200; seed++) {
        cl_sim_t c;
        uint64_t rng = seed * 0x9E3779B97F4A7C15ull;
        cl_setup(&c, &rng);
        int steps = 0;
        while (!cl_done(&c)) {
            ck_assert_msg(steps++ < MAX_STEPS, "seed %llu: not done in %d steps",
                          (unsigned long long)seed, MAX_STEPS);
            /* kind (0 release, 1 deliver, 2 ask, 3 finish, 4 single), node/group, rank/node */
            int actions[64][3], count = 0;
            for (int n = 0; n < CL_NODES; n++) {
                for (int g = 0; g < c.groups; g++)
                    if (c.has[n][g] && !c.released[n][g])
                        memcpy(actions[count++], (int[3]){0, n, g}, sizeof(actions[0]));
                if (cl_next_slot(&c, n) >= 0)
                    memcpy(actions[count++], (int[3]){1, n, 0}, sizeof(actions[0]));
                const fake_job_t *s = &c.nodes[n]->jobs[CL_SINGLE];
                if (s->iterations < CL_N && (!c.single_started[n] || s->running))
                    memcpy(actions[count++], (int[3]){4, n, 0}, sizeof(actions[0]));
            }
            for (int g = 0; g < c.groups; g++)
                for (uint32_t r = 0; r < c.world[g]; r++) {
                    const fake_job_t *j = &c.nodes[c.ranks[g][r].node]->jobs[c.ranks[g][r].id];
                    if (!c.asked[g][r] && j->admitted && j->iterations < CL_N)
                        memcpy(actions[count++], (int[3]){2, g, (int)r}, sizeof(actions[0]));
                    else if (j->iterations < CL_N && cl_can_finish(&c, g, (int)r))
                        memcpy(actions[count++], (int[3]){3, g, (int)r}, sizeof(actions[0]));
                }
            ck_assert_msg(count > 0, "seed %llu: deadlock after %d steps",
                          (unsigned long long)seed, steps);
            int *a = actions[prng_next(&rng) % (uint64_t)count];
            if (a[0] == 0) {
                c.released[a[1]][a[2]] = true;
                ck_assert_int_eq(group_release(c.nodes[a[1]], cl_group_id(a[2])), 0);
            } else if (a[0] == 1) {
                int n = a[1];
                size_t i = (size_t)cl_next_slot(&c, n);
                ck_assert_int_eq(group_slot(c.nodes[n], c.order[i][0], c.order[i][1]), 0);
                memcpy(c.given[n][c.given_count[n]++], c.order[i], sizeof(c.order[i]));
                c.delivered[n] = i + 1;
            } else if (a[0] == 2) {
                c.asked[a[1]][a[2]] = true;
                ask(c.nodes[c.ranks[a[1]][a[2]].node], c.ranks[a[1]][a[2]].id);
            } else if (a[0] == 3) {
                fake_t *f = c.nodes[c.ranks[a[1]][a[2]].node];
                ck_assert(!f->jobs[c.ranks[a[1]][a[2]].id].free_run);
                f->now_ns += 1 * MS;
                if (prng_next(&rng) % 2) { /* asks again at once */
                    boundary(f, c.ranks[a[1]][a[2]].id, 1 * MS);
                } else { /* a host part first: it asks in a later step */
                    release(f, c.ranks[a[1]][a[2]].id, 1 * MS);
                    c.asked[a[1]][a[2]] = false;
                }
            } else {
                fake_t *f = c.nodes[a[1]];
                f->now_ns += 1 * MS;
                if (!c.single_started[a[1]]) {
                    c.single_started[a[1]] = true;
                    ask(f, CL_SINGLE);
                } else if (f->jobs[CL_SINGLE].free_run) {
                    f->jobs[CL_SINGLE].iterations++; /* it goes on without stopping */
                } else {
                    boundary(f, CL_SINGLE, 1 * MS);
                }
                if (f->jobs[CL_SINGLE].iterations >= CL_N)
                    leave(f, CL_SINGLE); /* its work is done */
            }
        }
        contended += cl_groups_share_lanes(&c, 2);
        for (int n = 0; n < CL_NODES; n++) {
            fake_t *f = c.nodes[n];
            /* every slot given ended, in the order given */
            ck_assert_msg(f->done_count == c.given_count[n], "seed %llu node %d: %zu of %zu",
                          (unsigned long long)seed, n, f->done_count, c.given_count[n]);
            for (size_t i = 0; i < f->done_count; i++) {
                ck_assert_uint_eq(f->done_groups[i], c.given[n][i][0]);
                ck_assert_uint_eq(f->done_seqs[i], c.given[n][i][1]);
            }
            ck_assert_uint_eq(sched_core_slots_queued(f->core, NULL, NULL), 0);
            fake_stop(f);
            free(f);
        }
    }
    ck_assert_int_ge(contended, 50);
}
END_TEST

/* A single job pinned to a GPU (a container given salus.dev/gpu=N: SALUS_GPU) is admitted on
 * that GPU only: on GPU 1 where GPU 0 would do, waiting for GPU 1 while GPU 0 has room. */
static void reg_pinned(fake_t *f, uint64_t id, uint64_t p, uint64_t e, int gpu)
{
    sched_core_job_hints_t h = {.id = id, .uid = 1000, .persistent_bytes = p,
                                .ephemeral_bytes = e, .iterations_expected = 1000,
                                .pinned = true, .pinned_gpu = gpu};
    ck_assert_int_eq(sched_core_job_registered(f->core, &h, f->now_ns, &f->fx), 0);
    apply(f);
}

START_TEST(test_pinned_job_runs_on_its_gpu)
{
    fake_t f;
    fake_start_gpus(&f, "pack", 2, 1 * GIB, 0, false);
    reg_pinned(&f, 1, 100 * MIB, 100 * MIB, 1);
    reg_pinned(&f, 2, 100 * MIB, 100 * MIB, 1);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_int_eq(f.jobs[1].gpu, 1);
    ck_assert_int_eq(f.jobs[2].gpu, 1);
    /* GPU 1 cannot take it beside jobs 1 and 2; GPU 0 could, but it is not its GPU */
    reg_pinned(&f, 3, 850 * MIB, 100 * MIB, 1);
    ck_assert(!f.jobs[3].admitted && !f.jobs[3].refused);
    /* a job not pinned goes where there is room */
    reg(&f, 4, 1000, 100 * MIB, 100 * MIB, 1000, 0);
    ck_assert(f.jobs[4].admitted);
    ck_assert_int_eq(f.jobs[4].gpu, 0);
    leave(&f, 1);
    leave(&f, 2);
    ck_assert(f.jobs[3].admitted);
    ck_assert_int_eq(f.jobs[3].gpu, 1);
    fake_stop(&f);
}
END_TEST

/* Classes: a latency-critical job that no GPU can serve within its target beside those there
 * is refused with the reason; under slo the best-effort jobs of its GPU outside its lane are
 * preemptible at the gate, group ranks never; under another policy nobody is. */
static void reg_lc(fake_t *f, uint64_t id, uint64_t e, uint64_t iteration_ns, uint64_t target_ns,
                   uint64_t group)
{
    sched_core_job_hints_t h = {.id = id, .persistent_bytes = 0, .ephemeral_bytes = e,
                                .iteration_ns = iteration_ns, .latency_target_ns = target_ns};
    if (group)
        h.group = (sched_core_group_t){.id = group, .world = 1, .rank = 0,
                                       .sync = SCHED_CORE_SYNC_ASP};
    ck_assert_int_eq(sched_core_job_registered(f->core, &h, f->now_ns, &f->fx), 0);
    apply(f);
}

START_TEST(test_classes_admission_and_gate_roles)
{
    fake_t f;
    fake_start(&f, "slo", 16 * GIB);
    reg(&f, 1, 0, 0, 1 * GIB, 0, 0);         /* best-effort */
    reg_lc(&f, 2, 1 * GIB, 0, 0, 7);        /* best-effort rank of a group */
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_NONE); /* no latency-critical job yet */
    reg_lc(&f, 3, 1 * GIB, 4 * MS, 10 * MS, 0);
    ck_assert(f.jobs[3].admitted);
    ck_assert_int_eq(f.jobs[3].gate, SCHED_CORE_GATE_LC);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    ck_assert_int_eq(f.jobs[2].gate, SCHED_CORE_GATE_NONE); /* a rank: exempt */
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 3, &info), 0);
    ck_assert_uint_eq(info.latency_target_ns, 10 * MS);
    /* alone, its iteration is longer than its target */
    reg_lc(&f, 4, 1 * GIB, 12 * MS, 10 * MS, 0);
    ck_assert(f.jobs[4].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "longer than its target"));
    /* beside job 3: 4 + 7 ms > 10 ms (job 3's target) */
    reg_lc(&f, 5, 1 * GIB, 7 * MS, 50 * MS, 0);
    ck_assert(f.jobs[5].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "beside the latency-critical jobs"));
    /* 4 + 5 ms fits both targets */
    reg_lc(&f, 6, 1 * GIB, 5 * MS, 20 * MS, 0);
    ck_assert(f.jobs[6].admitted && !f.jobs[6].refused);
    /* the latency-critical jobs leave: nobody is preemptible any more */
    leave(&f, 3);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_PREEMPTIBLE); /* job 6 is there */
    leave(&f, 6);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_NONE);
    /* another policy: roles go */
    reg_lc(&f, 7, 1 * GIB, 1 * MS, 10 * MS, 0);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    ck_assert_int_eq(sched_core_set_policy(f.core, "fair", f.now_ns, &f.fx), 0);
    apply(&f);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_NONE);
    ck_assert_int_eq(f.jobs[7].gate, SCHED_CORE_GATE_NONE);
    fake_stop(&f);
}
END_TEST

/* Why a job waits for admission (sched_core_job_info's wait, salusctl ps' WAITING_FOR): no
 * room for it; no room for a lane of its own (latency-critical); behind an earlier job under
 * a policy that admits in order; its user's caps; its group not all there. Admitted: none. */
static sched_core_wait_t wait_of(fake_t *f, uint64_t id)
{
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f->core, id, &info), 0);
    return info.wait;
}

START_TEST(test_wait_reasons)
{
    fake_t f;
    fake_start(&f, "fifo", 1 * GIB);
    reg(&f, 1, 0, 0, 800 * MIB, 0, 0);
    reg(&f, 2, 0, 0, 800 * MIB, 0, 0);
    reg(&f, 3, 0, 0, 64 * MIB, 0, 0);
    ck_assert(f.jobs[1].admitted && !f.jobs[2].admitted && !f.jobs[3].admitted);
    ck_assert_int_eq(wait_of(&f, 1), SCHED_CORE_WAIT_NONE);
    ck_assert_int_eq(wait_of(&f, 2), SCHED_CORE_WAIT_MEMORY);
    ck_assert_int_eq(wait_of(&f, 3), SCHED_CORE_WAIT_ORDER); /* it would fit */
    ck_assert_str_eq(sched_core_wait_text(SCHED_CORE_WAIT_MEMORY, false),
                     "no GPU has room for it now");
    leave(&f, 1);
    ck_assert(f.jobs[2].admitted);
    ck_assert_int_eq(wait_of(&f, 2), SCHED_CORE_WAIT_NONE);
    fake_stop(&f);

    fake_start(&f, "slo", 3 * GIB);
    reg(&f, 1, 0, 0, 2 * GIB, 0, 0);
    reg(&f, 2, 0, 0, 1 * GIB, 0, 0);
    reg_lc(&f, 3, 1 * GIB, 0, 10 * MS, 0);
    reg_lc(&f, 4, 1 * GIB, 0, 10 * MS, 0);
    ck_assert(f.jobs[3].admitted && !f.jobs[4].admitted && !f.jobs[4].refused);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 4, &info), 0);
    ck_assert_int_eq(info.wait, SCHED_CORE_WAIT_MEMORY);
    ck_assert_str_eq(sched_core_wait_text(info.wait, info.latency_target_ns != 0),
                     "no GPU has room for a lane of its own now");
    fake_stop(&f);

    fake_users_t users = {.max_jobs = 1};
    fake_start_users(&f, "pack", 4 * GIB, &users);
    reg(&f, 1, 1000, 0, 100 * MIB, 0, 0);
    reg(&f, 2, 1000, 0, 100 * MIB, 0, 0);
    ck_assert(f.jobs[1].admitted && !f.jobs[2].admitted);
    ck_assert_int_eq(wait_of(&f, 2), SCHED_CORE_WAIT_USER);
    fake_stop(&f);

    fake_start_gpus(&f, "pack", 2, 4 * GIB, 1, false); /* (ranks on GPUs of their own) */
    reg_rank(&f, 1, 100, 2, 0, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(!f.jobs[1].admitted);
    ck_assert_int_eq(wait_of(&f, 1), SCHED_CORE_WAIT_GROUP);
    reg_rank(&f, 2, 100, 2, 1, SCHED_CORE_SYNC_BSP, 0);
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_int_eq(wait_of(&f, 1), SCHED_CORE_WAIT_NONE);
    fake_stop(&f);
}
END_TEST

/* A latency-critical job always has a lane of its own: where the GPU has no room for a new
 * lane it does not join a best-effort job's lane (the best-effort lanes merge to make room),
 * no best-effort job joins its lane later, a second one waits (not refused) while no merge
 * makes room, and is admitted alone once the first leaves. */
START_TEST(test_latency_critical_job_has_a_lane_of_its_own)
{
    fake_t f;
    fake_start(&f, "slo", 3 * GIB);
    reg(&f, 1, 0, 0, 2 * GIB, 0, 0); /* lane A, 2 GiB */
    reg(&f, 2, 0, 0, 1 * GIB, 0, 0); /* lane B, 1 GiB: the GPU is full */
    ck_assert(f.jobs[1].admitted && f.jobs[2].admitted);
    ck_assert_uint_ne(f.jobs[1].lane, f.jobs[2].lane);
    /* joining lane B would fit; instead A and B merge and it opens a lane of its own */
    reg_lc(&f, 3, 1 * GIB, 0, 10 * MS, 0);
    ck_assert(f.jobs[3].admitted && !f.jobs[3].refused);
    ck_assert_uint_eq(f.jobs[1].lane, f.jobs[2].lane);
    ck_assert_uint_ne(f.jobs[3].lane, f.jobs[1].lane);
    ck_assert_int_eq(f.jobs[3].gate, SCHED_CORE_GATE_LC);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    ck_assert_int_eq(f.jobs[2].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    /* a best-effort job that fits in its lane joins the best-effort lane instead */
    reg(&f, 4, 0, 0, 1 * GIB, 0, 0);
    ck_assert(f.jobs[4].admitted);
    ck_assert_uint_eq(f.jobs[4].lane, f.jobs[1].lane);
    /* a second latency-critical job: no room for a lane of its own, and no merge makes one:
     * it waits, refused by nobody */
    reg_lc(&f, 5, 1 * GIB, 0, 10 * MS, 0);
    ck_assert(!f.jobs[5].admitted && !f.jobs[5].refused);
    /* best-effort jobs leaving do not bring it into their lane while it stays */
    leave(&f, 2);
    leave(&f, 4);
    ck_assert(!f.jobs[5].admitted && !f.jobs[5].refused);
    /* the first leaves: the second takes a lane of its own, not job 1's */
    leave(&f, 3);
    ck_assert(f.jobs[5].admitted);
    ck_assert_uint_ne(f.jobs[5].lane, f.jobs[1].lane);
    /* a best-effort newcomer joins job 1's lane, not its */
    reg(&f, 6, 0, 0, 1 * GIB, 0, 0);
    ck_assert(f.jobs[6].admitted);
    ck_assert_uint_eq(f.jobs[6].lane, f.jobs[1].lane);
    fake_stop(&f);
}
END_TEST

/* A latency-critical job that survived a restart of salusd comes back with its class: it is
 * one of the admitted jobs every walk sees, so the best-effort jobs of its GPU are preemptible
 * at the gate (those back before it too, and those that register after) and a latency-critical
 * job that would not fit beside it is refused. */
START_TEST(test_reattached_latency_critical_job_keeps_its_class)
{
    fake_t f;
    fake_start(&f, "slo", 16 * GIB);
    sched_core_reattach_t place = {.gpu = 0, .persistent_bytes = 256 * MIB,
                                   .ephemeral_bytes = 256 * MIB, .iterations = 5,
                                   .busy_ns = 20 * MS};
    sched_core_job_hints_t be = {.id = 1, .uid = 1000};
    ck_assert_int_eq(sched_core_job_reattached(f.core, &be, &place, f.now_ns, &f.fx), 0);
    f.jobs[1].admitted = 1; /* (no ADMIT: the daemon answers a re-attach itself) */
    apply(&f);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_NONE); /* no latency-critical job yet */
    sched_core_job_hints_t lc = {.id = 2, .uid = 1000, .iteration_ns = 1 * MS,
                                 .latency_target_ns = 10 * MS};
    ck_assert_int_eq(sched_core_job_reattached(f.core, &lc, &place, f.now_ns, &f.fx), 0);
    f.jobs[2].admitted = 1;
    apply(&f);
    ck_assert_int_eq(f.jobs[2].gate, SCHED_CORE_GATE_LC);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    sched_core_job_info_t info;
    ck_assert_int_eq(sched_core_job_info(f.core, 2, &info), 0);
    ck_assert_uint_eq(info.latency_target_ns, 10 * MS);
    /* its requests took 4 ms (20 ms in 5): 4 + 7 ms > its 10 ms target */
    reg_lc(&f, 3, 1 * GIB, 7 * MS, 50 * MS, 0);
    ck_assert(f.jobs[3].refused);
    ck_assert_ptr_nonnull(strstr(f.last_refusal, "beside the latency-critical jobs"));
    /* a best-effort job that registers now is preemptible at once */
    reg(&f, 4, 0, 0, 1 * GIB, 0, 0);
    ck_assert(f.jobs[4].admitted);
    ck_assert_int_eq(f.jobs[4].gate, SCHED_CORE_GATE_PREEMPTIBLE);
    /* it leaves: nobody is preemptible any more */
    leave(&f, 2);
    ck_assert_int_eq(f.jobs[1].gate, SCHED_CORE_GATE_NONE);
    ck_assert_int_eq(f.jobs[4].gate, SCHED_CORE_GATE_NONE);
    fake_stop(&f);
}
END_TEST

static Suite *sched_core_suite(void)
{
    Suite *s = suite_create("sched_core");
    TCase *t = tcase_create("scenarios");
    tcase_add_test(t, test_fifo_one_at_a_time_in_order);
    tcase_add_test(t, test_pack_jobs_that_fit_run_at_once);
    tcase_add_test(t, test_pack_shared_lane_takes_turns);
    tcase_add_test(t, test_srtf_short_overtakes_at_a_boundary);
    tcase_add_test(t, test_released_lane_goes_to_the_job_that_asks);
    tcase_add_test(t, test_fair_equal_gpu_time);
    tcase_add_test(t, test_never_fits_is_refused);
    tcase_add_test(t, test_pinned_job_runs_on_its_gpu);
    tcase_add_test(t, test_learned_sizes);
    tcase_add_test(t, test_learned_sizes_whole_grains);
    tcase_add_test(t, test_merge_during_admission_round);
    tcase_add_loop_test(t, test_200_jobs_200_lanes, 0, 2);
    tcase_add_test(t, test_wait_in_progress_is_visible);
    tcase_add_test(t, test_reserve_as_large_as_the_gpu_is_an_error);
    tcase_add_test(t, test_leaving_holder_hands_the_lane_on);
    tcase_add_test(t, test_policy_rank_through_the_core);
    tcase_add_test(t, test_same_job_again_after_a_merge);
    tcase_add_test(t, test_turns_follow_a_merge);
    tcase_add_test(t, test_quota_refuses_a_job_over_the_share);
    tcase_add_test(t, test_quota_waits_at_the_cap);
    tcase_add_test(t, test_quota_admits_another_user_beside_a_greedy_one);
    tcase_add_test(t, test_fair_user_pick_for_admission);
    tcase_add_test(t, test_fair_user_pick_for_turns);
    tcase_add_test(t, test_one_user_picks_unchanged);
    tcase_add_test(t, test_quota_share_out_of_range_is_an_error);
    tcase_add_test(t, test_reattach_restores_places_before_waiting_jobs);
    suite_add_tcase(s, t);
    TCase *g = tcase_create("groups");
    tcase_set_timeout(g, 120);
    tcase_add_test(g, test_group_all_or_nothing);
    tcase_add_test(g, test_group_waits_for_its_ranks);
    tcase_add_test(g, test_group_invalid_hints);
    tcase_add_test(g, test_group_over_the_job_cap_is_refused);
    tcase_add_test(g, test_group_within_the_user_share);
    tcase_add_loop_test(g, test_gang_turns_never_circle, 0, 3);
    tcase_add_test(g, test_gang_turns_off_reaches_the_circle);
    tcase_add_test(g, test_gang_single_jobs_fill_in);
    tcase_add_test(g, test_gang_slot_length);
    tcase_add_test(g, test_gang_release_keeps_the_reservation);
    tcase_add_test(g, test_gang_member_leaves);
    tcase_add_test(g, test_ssp_holds_a_rank_too_far_ahead);
    tcase_add_test(g, test_asp_ranks_take_single_turns);
    tcase_add_test(g, test_group_host_only);
    tcase_add_test(g, test_gang_reattached_ranks);
    suite_add_tcase(s, g);
    TCase *c = tcase_create("cluster");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_cluster_waits_for_release);
    tcase_add_test(c, test_cluster_ssp_remote_least);
    tcase_add_test(c, test_cluster_slots_in_fifo_order);
    tcase_add_test(c, test_cluster_single_job_between_slots);
    tcase_add_test(c, test_cluster_late_rank_catches_up);
    tcase_add_test(c, test_cluster_rank_at_target_sits_out);
    tcase_add_test(c, test_cluster_ranks_leave_drop_slots);
    tcase_add_test(c, test_cluster_beside_local_gangs);
    tcase_add_test(c, test_classes_admission_and_gate_roles);
    tcase_add_test(c, test_reattached_latency_critical_job_keeps_its_class);
    tcase_add_test(c, test_latency_critical_job_has_a_lane_of_its_own);
    tcase_add_test(c, test_wait_reasons);
    tcase_add_test(c, test_cluster_three_nodes_never_deadlock);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return check_run_suite(sched_core_suite());
}
