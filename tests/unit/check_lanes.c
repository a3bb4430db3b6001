/* Unit tests for memory/lanes: table-driven scenarios (admission, best fit, release,
 * defragmentation, multi-GPU placement, tenancy, never-fits refusal, learned sizes), plus
 * ordered admission, change reports, and random sequences checking the invariant and the
 * grants against the books. */
#include "lanes.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define G (1ull << 30)
#define M (1ull << 20)

typedef enum {
    L_END = 0,
    L_GPU,     /* gpu, p = total, e = reserve */
    L_ADMIT,   /* job, uid, p, e, gpu -> status, expect_gpu, expect_lane, expect_size */
    L_RELEASE, /* job */
    L_UPDATE,  /* job, p, e -> status, expect_lane, expect_size */
    L_GRANT,   /* job -> status, clear */
    L_YIELD,   /* job */
    L_LANE,    /* expect_lane: expect_size and jobs (0 jobs = the lane must not exist) */
    L_FREE,    /* gpu: expect_size = free bytes */
} lanes_op_t;

typedef struct {
    lanes_op_t op;
    uint64_t job;
    uint32_t uid;
    uint64_t p, e;
    int gpu;
    int status;
    int expect_gpu;
    uint32_t expect_lane;
    uint64_t expect_size;
    size_t jobs;
    bool clear;
} lanes_step_t;

#define GPU(index, total, reserve) {.op = L_GPU, .gpu = (index), .p = (total), .e = (reserve)}
#define ADMIT(id, user, P, E, st, g, lane, size)                                               \
    {.op = L_ADMIT, .job = (id), .uid = (user), .p = (P), .e = (E), .gpu = LANES_ANY_GPU,       \
     .status = (st), .expect_gpu = (g), .expect_lane = (lane), .expect_size = (size)}
#define ADMIT_ON(on, id, user, P, E, st, g, lane, size)                                        \
    {.op = L_ADMIT, .job = (id), .uid = (user), .p = (P), .e = (E), .gpu = (on),               \
     .status = (st), .expect_gpu = (g), .expect_lane = (lane), .expect_size = (size)}
#define RELEASE(id) {.op = L_RELEASE, .job = (id)}
#define UPDATE(id, P, E, st, lane, size)                                                       \
    {.op = L_UPDATE, .job = (id), .p = (P), .e = (E), .status = (st), .expect_lane = (lane),   \
     .expect_size = (size)}
#define GRANT(id, st, clr) {.op = L_GRANT, .job = (id), .status = (st), .clear = (clr)}
#define YIELD(id) {.op = L_YIELD, .job = (id)}
#define LANE(id, size, n) {.op = L_LANE, .expect_lane = (id), .expect_size = (size), .jobs = (n)}
#define LANE_GONE(id) {.op = L_LANE, .expect_lane = (id), .jobs = 0}
#define FREE(g, bytes) {.op = L_FREE, .gpu = (g), .expect_size = (bytes)}
#define UNKNOWN LANES_SIZE_UNKNOWN

typedef struct {
    const char *name;
    uint64_t overhead_bytes;
    bool share;
    bool no_defragment;
    uint32_t max_jobs_per_gpu;
    lanes_step_t steps[24];
} lanes_case_t;

static const lanes_case_t lanes_cases[] = {
    {"admission opens lanes, then joins the best-fitting lane", 0, false, false, 0, {
        GPU(0, 16 * G, 0),
        ADMIT(1, 1000, 2 * G, 6 * G, LANES_OK, 0, 1, 6 * G),
        ADMIT(2, 1000, 2 * G, 4 * G, LANES_OK, 0, 2, 4 * G),
        ADMIT(3, 1000, 1 * G, 3 * G, LANES_OK, 0, 2, 4 * G),  /* lane 2 (4) beats lane 1 (6) */
        ADMIT(4, 1000, 1 * G, 5 * G, LANES_OK, 0, 1, 6 * G),  /* only lane 1 holds E = 5 */
        FREE(0, 0),
        ADMIT(5, 1000, 5 * G, 1 * G, LANES_WAIT, 0, 0, 0),    /* even merged lanes leave < 5 */
        LANE(1, 6 * G, 2),
        LANE(2, 4 * G, 2),
    }},
    {"release shrinks lanes and closes empty ones", 0, false, false, 0, {
        GPU(0, 10 * G, 0),
        ADMIT(1, 1000, 1 * G, 6 * G, LANES_OK, 0, 1, 6 * G),
        ADMIT(2, 1000, 2 * G, 2 * G, LANES_OK, 0, 1, 6 * G),
        FREE(0, 1 * G),
        RELEASE(1),
        LANE(1, 2 * G, 1),
        FREE(0, 6 * G),
        RELEASE(2),
        LANE_GONE(1),
        FREE(0, 10 * G),
        ADMIT(3, 1000, 1 * G, 9 * G, LANES_OK, 0, 2, 9 * G),
    }},
    {"without defragmentation a job waits", 0, false, true, 0, {
        GPU(0, 10 * G, 0),
        ADMIT(1, 1000, 1 * G, 3 * G, LANES_OK, 0, 1, 3 * G),
        ADMIT(2, 1000, 1 * G, 3 * G, LANES_OK, 0, 2, 3 * G),
        ADMIT(3, 2000, 1 * G, 4 * G, LANES_WAIT, 0, 0, 0),
        ADMIT(4, 1000, 1 * G, 5 * G, LANES_WAIT, 0, 0, 0),
    }},
    {"defragmentation merges lanes to admit a waiting job", 0, false, false, 0, {
        GPU(0, 10 * G, 0),
        ADMIT(1, 1000, 1 * G, 3 * G, LANES_OK, 0, 1, 3 * G),
        ADMIT(2, 1000, 1 * G, 3 * G, LANES_OK, 0, 2, 3 * G),
        /* uid 2000 may not join uid 1000's lanes; merging lanes 1 and 2 frees 3 GiB */
        ADMIT(3, 2000, 1 * G, 4 * G, LANES_OK, 0, 3, 4 * G),
        LANE(1, 3 * G, 2),
        LANE_GONE(2),
        FREE(0, 0),
    }},
    {"defragmentation grows a lane to admit a waiting job", 0, false, false, 0, {
        GPU(0, 10 * G, 0),
        ADMIT(1, 1000, 1 * G, 3 * G, LANES_OK, 0, 1, 3 * G),
        ADMIT(2, 1000, 1 * G, 3 * G, LANES_OK, 0, 2, 3 * G),
        ADMIT(3, 1000, 1 * G, 4 * G, LANES_OK, 0, 1, 4 * G),
        LANE(2, 3 * G, 1),
        FREE(0, 0),
        RELEASE(3),
        LANE(1, 3 * G, 1),
        RELEASE(2),
        ADMIT(4, 1000, 1 * G, 3 * G, LANES_OK, 0, 3, 3 * G),
        /* E = 5: no growth fits (8 + 1 + 2 > 10); merge, then grow the merged lane */
        ADMIT(5, 1000, 1 * G, 5 * G, LANES_OK, 0, 1, 5 * G),
        LANE(1, 5 * G, 3),
        LANE_GONE(3),
    }},
    {"multi-GPU: spread, then best fit, pinning", 0, false, false, 0, {
        GPU(0, 8 * G, 0),
        GPU(1, 16 * G, 0),
        ADMIT(1, 1000, 1 * G, 6 * G, LANES_OK, 0, 1, 6 * G),   /* both idle: least left over */
        ADMIT(2, 1000, 1 * G, 2 * G, LANES_OK, 1, 2, 2 * G),   /* GPU 1 has fewer jobs */
        ADMIT(3, 1000, 1 * G, 10 * G, LANES_OK, 1, 3, 10 * G), /* fits GPU 1 only */
        ADMIT_ON(0, 4, 1000, 2 * G, 3 * G, LANES_WAIT, 0, 0, 0),
        ADMIT_ON(1, 5, 1000, 1 * G, 1 * G, LANES_OK, 1, 4, 1 * G),
        ADMIT_ON(7, 6, 1000, 1 * G, 1 * G, LANES_ERROR_UNKNOWN, 0, 0, 0),
        ADMIT(1, 1000, 1 * G, 1 * G, LANES_ERROR_EXISTS, 0, 0, 0),
    }},
    {"multi-GPU: idle GPUs first, whatever is left over", 0, false, false, 0, {
        GPU(0, 16 * G, 0),
        GPU(1, 16 * G, 0),
        GPU(2, 32 * G, 0),
        ADMIT(1, 1000, 1 * G, 1 * G, LANES_OK, 0, 1, 1 * G),
        ADMIT(2, 1000, 1 * G, 1 * G, LANES_OK, 1, 2, 1 * G),  /* not GPU 0 (less left over) */
        ADMIT(3, 1000, 1 * G, 1 * G, LANES_OK, 2, 3, 1 * G),
        ADMIT(4, 1000, 1 * G, 13 * G, LANES_OK, 0, 4, 13 * G), /* all busy: best fit, GPU 0 */
        ADMIT(5, 1000, 1 * G, 13 * G, LANES_OK, 1, 5, 13 * G), /* GPU 1 now has fewer jobs */
    }},
    {"tenancy: lanes are per user unless shared", 0, false, false, 0, {
        GPU(0, 12 * G, 0),
        ADMIT(1, 1000, 1 * G, 4 * G, LANES_OK, 0, 1, 4 * G),
        ADMIT(2, 2000, 1 * G, 4 * G, LANES_OK, 0, 2, 4 * G),
        ADMIT(3, 2000, 1 * G, 2 * G, LANES_OK, 0, 2, 4 * G),
        ADMIT(4, 3000, 1 * G, 2 * G, LANES_WAIT, 0, 0, 0),    /* no lane of uid 3000 */
        GRANT(2, LANES_OK, false),
        GRANT(3, LANES_ERROR_BUSY, false),                    /* serialised within a lane */
        GRANT(1, LANES_OK, false),                            /* other lanes run alongside */
        YIELD(2),
        GRANT(3, LANES_OK, false),                            /* same user: no clearing */
    }},
    {"tenancy: shared lanes report clear-needed on a user change", 0, true, false, 0, {
        GPU(0, 12 * G, 0),
        ADMIT(1, 2000, 1 * G, 4 * G, LANES_OK, 0, 1, 4 * G),
        ADMIT(2, 1000, 1 * G, 4 * G, LANES_OK, 0, 2, 4 * G),
        ADMIT(3, 1000, 1 * G, 2 * G, LANES_OK, 0, 2, 4 * G),  /* its own user's lane first */
        ADMIT(4, 3000, 1 * G, 2 * G, LANES_OK, 0, 1, 4 * G),  /* then the emptier lane */
        GRANT(1, LANES_OK, false),                            /* fresh lane */
        YIELD(1),
        GRANT(4, LANES_OK, true),                             /* uid 2000 -> 3000 */
        YIELD(4),
        GRANT(4, LANES_OK, false),
        YIELD(4),
        GRANT(1, LANES_OK, true),
        GRANT(4, LANES_ERROR_BUSY, false),
        GRANT(3, LANES_OK, false),                            /* lane 2: fresh */
        YIELD(3),
        GRANT(2, LANES_OK, false),                            /* lane 2: same user */
    }},
    {"a job larger than every GPU is refused, not queued", 512 * M, false, false, 0, {
        GPU(0, 8 * G, 1 * G),
        GPU(1, 4 * G, 0),
        ADMIT(1, 1000, 4 * G, 3 * G, LANES_NEVER_FITS, 0, 0, 0),     /* 7.5 > 7 */
        ADMIT(2, 1000, 3 * G, 3 * G, LANES_OK, 0, 1, 3 * G),         /* 6.5 <= 7 */
        ADMIT(3, 1000, 3 * G, 3 * G, LANES_WAIT, 0, 0, 0),           /* fits, later */
        ADMIT_ON(1, 4, 1000, 3 * G, 1 * G, LANES_NEVER_FITS, 0, 0, 0), /* 4.5 > 4 */
        ADMIT(5, 1000, UINT64_MAX - 1, 1, LANES_NEVER_FITS, 0, 0, 0),
        FREE(0, 512 * M),
    }},
    {"max_jobs_per_gpu = 1 (FIFO): one job per GPU", 0, false, false, 1, {
        GPU(0, 16 * G, 0),
        GPU(1, 16 * G, 0),
        ADMIT(1, 1000, 1 * G, 1 * G, LANES_OK, 0, 1, 1 * G),
        ADMIT(2, 1000, 1 * G, 1 * G, LANES_OK, 1, 2, 1 * G),
        ADMIT(3, 1000, 1 * G, 1 * G, LANES_WAIT, 0, 0, 0),
        RELEASE(1),
        ADMIT(3, 1000, 1 * G, 1 * G, LANES_OK, 0, 3, 1 * G),
    }},
    {"learned sizes replace provisional ones", 0, false, false, 0, {
        GPU(0, 16 * G, 0),
        ADMIT(2, 1000, 2 * G, 8 * G, LANES_OK, 0, 1, 8 * G),
        /* claims the free 6, less a least claim (3) left for one more */
        ADMIT(1, 1000, UNKNOWN, UNKNOWN, LANES_OK, 0, 2, 3 * G),
        UPDATE(1, 1 * G, 4 * G, LANES_OK, 2, 4 * G),      /* the claim ends, in place */
        UPDATE(1, 1 * G, 7 * G, LANES_MOVED, 1, 8 * G),   /* moves into lane 1 */
        LANE_GONE(2),
        UPDATE(1, 6 * G, 7 * G, LANES_OK, 1, 8 * G),
        FREE(0, 0),
        UPDATE(1, 7 * G, 8 * G, LANES_NO_LONGER_FITS, 0, 0),
        UPDATE(1, 20 * G, 1 * G, LANES_NEVER_FITS, 0, 0),
        UPDATE(1, UNKNOWN, 2 * G, LANES_OK, 1, 8 * G),    /* keeps P = 6 */
        RELEASE(2),
        LANE(1, 2 * G, 1),
        UPDATE(9, 1 * G, 1 * G, LANES_ERROR_UNKNOWN, 0, 0),
    }},
    {"a job of unknown sizes claims the free memory; others wait until it is learned", 0, false,
     false, 0, {
        GPU(0, 16 * G, 0),
        ADMIT(1, 1000, UNKNOWN, UNKNOWN, LANES_OK, 0, 1, 13 * G), /* all but a least claim */
        FREE(0, 3 * G),
        ADMIT(2, 1000, UNKNOWN, UNKNOWN, LANES_OK, 0, 2, 3 * G),  /* two together: both go */
        ADMIT(3, 1000, UNKNOWN, UNKNOWN, LANES_WAIT, 0, 0, 0),     /* a third waits */
        ADMIT(4, 1000, 1 * G, 1 * G, LANES_WAIT, 0, 0, 0),         /* nobody joins a claim */
        UPDATE(1, 1 * G, 3 * G, LANES_OK, 1, 3 * G),              /* learned: 4 GiB */
        FREE(0, 9 * G),
        ADMIT(3, 1000, UNKNOWN, UNKNOWN, LANES_OK, 0, 3, 6 * G),  /* then it claims */
        ADMIT(4, 1000, 1 * G, 1 * G, LANES_OK, 0, 4, 1 * G),      /* packing as usual */
        FREE(0, 1 * G),
        RELEASE(1),                                   /* (to a claim only when it waits) */
        LANE(3, 6 * G, 1),
        FREE(0, 5 * G),
    }},
    {"a claim needs the least claim free; merges make room", 0, false, false, 0, {
        GPU(0, 10 * G, 0),
        ADMIT(1, 1000, 1 * G, 3 * G, LANES_OK, 0, 1, 3 * G),
        ADMIT(2, 1000, 1 * G, 3 * G, LANES_OK, 0, 2, 3 * G),
        FREE(0, 2 * G),
        /* 2 free < 3 (the least claim): lanes 1 and 2 merge, the claim takes the 5 free */
        ADMIT(3, 1000, UNKNOWN, UNKNOWN, LANES_OK, 0, 3, 5 * G),
        LANE(1, 3 * G, 2),
        LANE_GONE(2),
        ADMIT(4, 1000, UNKNOWN, UNKNOWN, LANES_WAIT, 0, 0, 0),
        ADMIT(5, 1000, 20 * G, UNKNOWN, LANES_NEVER_FITS, 0, 0, 0),
    }},
};

/* Checks the invariant and the lane-size rule on every GPU. */
static void check_invariants(const lanes_t *l, const char *name, int step)
{
    lanes_lane_info_t infos[64];
    size_t n = lanes_list(l, infos, 64);
    ck_assert_uint_le(n, 64);
    for (int gpu = 0; gpu < 8; gpu++) {
        lanes_gpu_info_t info;
        if (lanes_gpu_info(l, gpu, &info) != LANES_OK)
            continue;
        ck_assert_msg(info.persistent_bytes + info.lane_bytes <= info.capacity_bytes,
                      "%s: step %d: GPU %d overcommitted", name, step, gpu);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t ids[64];
        size_t jobs = lanes_lane_jobs(l, infos[i].lane_id, ids, 64);
        uint64_t largest = 0;
        ck_assert_msg(jobs > 0, "%s: step %d: empty lane %u kept", name, step, infos[i].lane_id);
        for (size_t j = 0; j < jobs; j++) {
            lanes_placement_t p;
            ck_assert_int_eq(lanes_job_placement(l, ids[j], &p), LANES_OK);
            ck_assert_int_eq(p.gpu, infos[i].gpu);
            if (p.ephemeral_bytes > largest)
                largest = p.ephemeral_bytes;
        }
        ck_assert_msg(largest == infos[i].size_bytes, "%s: step %d: lane %u size %llu != max E",
                      name, step, infos[i].lane_id, (unsigned long long)infos[i].size_bytes);
    }
}

static const lanes_lane_info_t *find_lane(const lanes_lane_info_t *infos, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (infos[i].lane_id == id)
            return &infos[i];
    return NULL;
}

START_TEST(test_lanes_case)
{
    const lanes_case_t *c = &lanes_cases[_i];
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = c->overhead_bytes;
    config.share_lanes_across_users = c->share;
    config.defragment = !c->no_defragment;
    config.max_jobs_per_gpu = c->max_jobs_per_gpu;
    config.provisional_min_bytes = 3 * G;
    lanes_t *l = lanes_create(&config);
    ck_assert_ptr_nonnull(l);

    for (int s = 0; c->steps[s].op != L_END; s++) {
        const lanes_step_t *st = &c->steps[s];
        lanes_placement_t p = {0};
        lanes_status_t status = LANES_OK;
        switch (st->op) {
        case L_GPU:
            ck_assert_int_eq(lanes_add_gpu(l, st->gpu, st->p, st->e), LANES_OK);
            break;
        case L_ADMIT: {
            lanes_request_t r = {st->job, st->uid, st->p, st->e, st->gpu, 0, false};
            status = lanes_admit(l, &r, &p);
            break;
        }
        case L_RELEASE:
            ck_assert_int_eq(lanes_release(l, st->job), LANES_OK);
            break;
        case L_UPDATE:
            status = lanes_update_sizes(l, st->job, st->p, st->e, &p);
            break;
        case L_GRANT: {
            bool clear = !st->clear;
            status = lanes_grant(l, st->job, &clear);
            ck_assert_msg(clear == st->clear, "%s: step %d: clear_needed %d", c->name, s, clear);
            break;
        }
        case L_YIELD:
            ck_assert_int_eq(lanes_yield(l, st->job), LANES_OK);
            break;
        case L_LANE: {
            lanes_lane_info_t infos[64];
            size_t n = lanes_list(l, infos, 64);
            const lanes_lane_info_t *lane = find_lane(infos, n, st->expect_lane);
            if (st->jobs == 0) {
                ck_assert_msg(lane == NULL, "%s: step %d: lane %u still open", c->name, s,
                              st->expect_lane);
            } else {
                ck_assert_msg(lane != NULL, "%s: step %d: lane %u missing", c->name, s,
                              st->expect_lane);
                ck_assert_uint_eq(lane->size_bytes, st->expect_size);
                ck_assert_uint_eq(lane->job_count, st->jobs);
            }
            break;
        }
        case L_FREE: {
            lanes_gpu_info_t info;
            ck_assert_int_eq(lanes_gpu_info(l, st->gpu, &info), LANES_OK);
            ck_assert_msg(info.free_bytes == st->expect_size, "%s: step %d: free %llu", c->name,
                          s, (unsigned long long)info.free_bytes);
            break;
        }
        case L_END: break;
        }
        ck_assert_msg((int)status == st->status, "%s: step %d: status %s, expected %s", c->name,
                      s, lanes_status_name(status), lanes_status_name((lanes_status_t)st->status));
        if ((st->op == L_ADMIT || st->op == L_UPDATE) &&
            (status == LANES_OK || status == LANES_MOVED)) {
            if (st->op == L_ADMIT)
                ck_assert_int_eq(p.gpu, st->expect_gpu);
            ck_assert_msg(p.lane_id == st->expect_lane, "%s: step %d: lane %u, expected %u",
                          c->name, s, p.lane_id, st->expect_lane);
            ck_assert_uint_eq(p.lane_size_bytes, st->expect_size);
        }
        check_invariants(l, c->name, s);
    }
    lanes_destroy(l);
}
END_TEST

START_TEST(test_provisional_flag)
{
    lanes_t *l = lanes_create(NULL);
    lanes_placement_t p;
    lanes_request_t r = {1, 1000, UNKNOWN, 3 * G, LANES_ANY_GPU, 0, false};
    ck_assert_int_eq(lanes_add_gpu(l, 0, 16 * G, 1 * G), LANES_OK);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 16 * G, 1 * G), LANES_ERROR_EXISTS);
    ck_assert_int_eq(lanes_add_gpu(l, 1, 1 * G, 1 * G), LANES_ERROR_INVALID);
    ck_assert_int_eq(lanes_admit(l, &r, &p), LANES_OK);
    ck_assert(p.provisional);
    ck_assert_uint_eq(p.persistent_bytes, 0);
    /* the claim: capacity 15 GiB less the overhead and a least claim left for one more */
    ck_assert_uint_eq(p.ephemeral_bytes, 15 * G - LANES_DEFAULT_JOB_OVERHEAD_BYTES -
                                             LANES_DEFAULT_PROVISIONAL_MIN_BYTES);
    ck_assert_uint_eq(p.lane_size_bytes, p.ephemeral_bytes);
    lanes_gpu_info_t info;
    ck_assert_int_eq(lanes_gpu_info(l, 0, &info), LANES_OK);
    ck_assert_uint_eq(info.persistent_bytes, LANES_DEFAULT_JOB_OVERHEAD_BYTES);
    ck_assert_uint_eq(info.free_bytes, LANES_DEFAULT_PROVISIONAL_MIN_BYTES);
    ck_assert_int_eq(lanes_update_sizes(l, 1, 2 * G, 3 * G, &p), LANES_OK);
    ck_assert(!p.provisional);
    ck_assert_uint_eq(p.lane_size_bytes, 3 * G);
    ck_assert_int_eq(lanes_release(l, 1), LANES_OK);
    ck_assert_int_eq(lanes_release(l, 1), LANES_ERROR_UNKNOWN);
    ck_assert_int_eq(lanes_grant(l, 1, NULL), LANES_ERROR_UNKNOWN);
    lanes_destroy(l);
}
END_TEST

/* Claims: the least claim, the cap (config and request), the GPU with the largest claim,
 * and freed memory going to a GPU's claims in admission order before anyone else. */
START_TEST(test_claims)
{
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    config.provisional_min_bytes = 4 * G;
    config.provisional_max_bytes = 6 * G;
    lanes_t *l = lanes_create(&config);
    lanes_placement_t p;
    ck_assert_int_eq(lanes_add_gpu(l, 0, 16 * G, 0), LANES_OK);
    ck_assert_int_eq(lanes_add_gpu(l, 1, 16 * G, 0), LANES_OK);
    static const struct {
        uint64_t id, cap;
        lanes_status_t status;
        int gpu;
        uint64_t claim;
    } steps[] = {
        {1, 0, LANES_OK, 0, 6 * G},       /* at most 6 */
        {2, 0, LANES_OK, 1, 6 * G},       /* equal claims: fewer jobs */
        {3, 0, LANES_OK, 0, 6 * G},       /* then the lower index */
        {4, 5 * G, LANES_OK, 1, 5 * G},   /* the request's cap */
        {5, 0, LANES_OK, 1, 5 * G},       /* the largest claim: GPU 1 has 5 free, GPU 0 4 */
        {6, 0, LANES_OK, 0, 4 * G},       /* 4: the least claim */
        {7, 0, LANES_WAIT, 0, 0},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        lanes_request_t r = {steps[i].id, 1000, UNKNOWN, UNKNOWN, LANES_ANY_GPU, steps[i].cap, false};
        ck_assert_int_eq(lanes_admit(l, &r, &p), steps[i].status);
        if (steps[i].status != LANES_OK)
            continue;
        ck_assert_msg(p.gpu == steps[i].gpu && p.ephemeral_bytes == steps[i].claim,
                      "job %llu: GPU %d, claim %llu MiB", (unsigned long long)steps[i].id,
                      p.gpu, (unsigned long long)(p.ephemeral_bytes >> 20));
    }
    /* GPU 0: claims 1 (6), 3 (6), 6 (4); job 6 wants 6 (holding its 4): it waits; 1 learns
     * 1 + 1: 4 free, job 6 grows to 6, then 2 are left */
    ck_assert_int_eq(lanes_want(l, 6, 6 * G, 4 * G, &p), LANES_WAIT);
    ck_assert_uint_eq(p.ephemeral_bytes, 4 * G);
    ck_assert_int_eq(lanes_update_sizes(l, 1, 1 * G, 1 * G, &p), LANES_OK);
    ck_assert_int_eq(lanes_job_placement(l, 6, &p), LANES_OK);
    ck_assert_uint_eq(p.ephemeral_bytes, 6 * G);
    lanes_gpu_info_t info;
    ck_assert_int_eq(lanes_gpu_info(l, 0, &info), LANES_OK);
    ck_assert_uint_eq(info.free_bytes, 2 * G);
    /* GPU 1: claims 2 (6), 4 (5, capped), 5 (5); 4 may never have 6 (its cap); 5 waits for
     * 6; 2 leaves: 5 grows to 6 */
    ck_assert_int_eq(lanes_want(l, 4, 6 * G, 0, &p), LANES_NEVER_FITS);
    ck_assert_int_eq(lanes_want(l, 5, 6 * G, 5 * G, &p), LANES_WAIT);
    ck_assert_int_eq(lanes_release(l, 2), LANES_OK);
    ck_assert_int_eq(lanes_job_placement(l, 4, &p), LANES_OK);
    ck_assert_uint_eq(p.ephemeral_bytes, 5 * G);
    ck_assert_int_eq(lanes_job_placement(l, 5, &p), LANES_OK);
    ck_assert_uint_eq(p.ephemeral_bytes, 6 * G);
    ck_assert_int_eq(lanes_gpu_info(l, 1, &info), LANES_OK);
    ck_assert_uint_eq(info.free_bytes, 5 * G);
    lanes_destroy(l);
}
END_TEST

/* A claim that must grow: at once when the GPU has room, else it keeps what it holds and
 * waits, served whole before newcomers when memory frees; more than the GPU: never. */
START_TEST(test_claim_wants)
{
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    lanes_t *l = lanes_create(&config);
    lanes_placement_t p;
    lanes_gpu_info_t info;
    ck_assert_int_eq(lanes_add_gpu(l, 0, 10 * G, 0), LANES_OK);
    lanes_request_t known = {1, 1000, 4 * G, 2 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t unknown = {2, 1000, UNKNOWN, UNKNOWN, LANES_ANY_GPU, 0, false};
    ck_assert_int_eq(lanes_admit(l, &known, &p), LANES_OK);
    ck_assert_int_eq(lanes_admit(l, &unknown, &p), LANES_OK);
    ck_assert_uint_eq(p.ephemeral_bytes, 4 * G);
    ck_assert_int_eq(lanes_want(l, 2, 3 * G, 0, &p), LANES_OK); /* within its claim */
    ck_assert_uint_eq(p.ephemeral_bytes, 4 * G);
    /* 6: no room (the claim is never merged): it keeps the 1 it holds and waits */
    ck_assert_int_eq(lanes_want(l, 2, 6 * G, 1 * G, &p), LANES_WAIT);
    ck_assert_uint_eq(p.ephemeral_bytes, 1 * G);
    ck_assert(p.provisional);
    ck_assert_int_eq(lanes_gpu_info(l, 0, &info), LANES_OK);
    ck_assert_uint_eq(info.free_bytes, 3 * G);
    /* a newcomer may have what it gave back meanwhile */
    lanes_request_t small = {3, 1000, 1 * G, 1 * G, LANES_ANY_GPU, 0, false};
    ck_assert_int_eq(lanes_admit(l, &small, &p), LANES_OK);
    /* job 1 leaves: 7 free, the claim takes its 5 first */
    ck_assert_int_eq(lanes_release(l, 1), LANES_OK);
    ck_assert_int_eq(lanes_job_placement(l, 2, &p), LANES_OK);
    ck_assert_uint_eq(p.ephemeral_bytes, 6 * G);
    ck_assert_int_eq(lanes_gpu_info(l, 0, &info), LANES_OK);
    ck_assert_uint_eq(info.free_bytes, 2 * G);
    ck_assert_int_eq(lanes_want(l, 2, 11 * G, 0, &p), LANES_NEVER_FITS);
    ck_assert_int_eq(lanes_want(l, 3, 2 * G, 0, &p), LANES_ERROR_INVALID); /* sizes known */
    ck_assert_int_eq(lanes_want(l, 9, 2 * G, 0, &p), LANES_ERROR_UNKNOWN);
    /* learned: the claim ends; a want no longer applies */
    ck_assert_int_eq(lanes_update_sizes(l, 2, 1 * G, 5 * G, &p), LANES_OK);
    ck_assert(!p.provisional);
    ck_assert_uint_eq(p.lane_size_bytes, 5 * G);
    ck_assert_int_eq(lanes_want(l, 2, 6 * G, 0, &p), LANES_ERROR_INVALID);
    lanes_destroy(l);
}
END_TEST

/* A waiting job does not block later jobs that fit, unless the order is strict (FIFO). */
START_TEST(test_admit_in_order)
{
    for (int strict = 0; strict < 2; strict++) {
        lanes_config_t config;
        lanes_config_default(&config);
        config.job_overhead_bytes = 0;
        lanes_t *l = lanes_create(&config);
        ck_assert_int_eq(lanes_add_gpu(l, 0, 10 * G, 0), LANES_OK);
        lanes_request_t first = {1, 1000, 4 * G, 4 * G, LANES_ANY_GPU, 0, false};
        ck_assert_int_eq(lanes_admit(l, &first, NULL), LANES_OK);
        const lanes_request_t waiting[] = {
            {2, 1000, 1 * G, 64 * G, LANES_ANY_GPU, 0, false}, /* never fits: refused, blocks nothing */
            {3, 2000, 3 * G, 3 * G, LANES_ANY_GPU, 0, false},  /* must wait */
            {4, 2000, 1 * G, 1 * G, LANES_ANY_GPU, 0, false},  /* fits */
        };
        lanes_status_t results[3];
        lanes_placement_t placements[3];
        size_t admitted = lanes_admit_in_order(l, waiting, 3, strict, results, placements);
        ck_assert_int_eq(results[0], LANES_NEVER_FITS);
        ck_assert_int_eq(results[1], LANES_WAIT);
        ck_assert_int_eq(results[2], strict ? LANES_WAIT : LANES_OK);
        ck_assert_uint_eq(admitted, strict ? 0 : 1);
        if (!strict)
            ck_assert_uint_eq(placements[2].lane_size_bytes, 1 * G);
        lanes_destroy(l);
    }
}
END_TEST

typedef struct {
    lanes_change_t changes[16];
    int count;
} change_log_t;

static void record_change(void *context, const lanes_change_t *change)
{
    change_log_t *log = context;
    ck_assert_int_lt(log->count, 16);
    log->changes[log->count++] = *change;
}

/* Changes come in an order safe to apply: moves, closes, shrinks, grows, opens. */
START_TEST(test_change_reports)
{
    change_log_t log = {0};
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    config.on_change = record_change;
    config.on_change_context = &log;
    lanes_t *l = lanes_create(&config);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 10 * G, 0), LANES_OK);
    lanes_request_t a = {1, 1000, 1 * G, 3 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t b = {2, 1000, 1 * G, 3 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t c = {3, 2000, 1 * G, 4 * G, LANES_ANY_GPU, 0, false};
    ck_assert_int_eq(lanes_admit(l, &a, NULL), LANES_OK);
    ck_assert_int_eq(lanes_admit(l, &b, NULL), LANES_OK);
    ck_assert_int_eq(log.count, 2);
    ck_assert_int_eq(log.changes[1].kind, LANES_CHANGE_LANE_OPENED);
    ck_assert_uint_eq(log.changes[1].new_size_bytes, 3 * G);
    log.count = 0;
    ck_assert_int_eq(lanes_admit(l, &c, NULL), LANES_OK); /* merges lanes 1 and 2 */
    ck_assert_int_eq(log.count, 3);
    ck_assert_int_eq(log.changes[0].kind, LANES_CHANGE_JOB_MOVED);
    ck_assert_uint_eq(log.changes[0].job_id, 2);
    ck_assert_uint_eq(log.changes[0].old_lane_id, 2);
    ck_assert_uint_eq(log.changes[0].lane_id, 1);
    ck_assert_int_eq(log.changes[1].kind, LANES_CHANGE_LANE_CLOSED);
    ck_assert_uint_eq(log.changes[1].lane_id, 2);
    ck_assert_int_eq(log.changes[2].kind, LANES_CHANGE_LANE_OPENED);
    ck_assert_uint_eq(log.changes[2].lane_id, 3);
    log.count = 0;
    ck_assert_int_eq(lanes_update_sizes(l, 1, 1 * G, 1 * G, NULL), LANES_OK);
    ck_assert_int_eq(log.count, 0); /* lane 1 still holds job 2 (E = 3) */
    ck_assert_int_eq(lanes_release(l, 2), LANES_OK);
    ck_assert_int_eq(log.count, 1);
    ck_assert_int_eq(log.changes[0].kind, LANES_CHANGE_LANE_RESIZED);
    ck_assert_uint_eq(log.changes[0].old_size_bytes, 3 * G);
    ck_assert_uint_eq(log.changes[0].new_size_bytes, 1 * G);
    lanes_destroy(l);
}
END_TEST

static uint64_t random_next(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Random admissions, releases and updates never break the invariant. */
START_TEST(test_random_invariant)
{
    uint64_t state = 0x1234567u + (uint64_t)_i;
#define NEXT() random_next(&state)
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 256 * M;
    config.share_lanes_across_users = _i % 2;
    lanes_t *l = lanes_create(&config);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 16 * G, 1 * G), LANES_OK);
    ck_assert_int_eq(lanes_add_gpu(l, 1, 24 * G, 1 * G), LANES_OK);
    bool present[64] = {false};
    for (int step = 0; step < 3000; step++) {
        uint64_t id = NEXT() % 64;
        if (!present[id]) {
            lanes_request_t r = {id, (uint32_t)(1000 + NEXT() % 3), (1 + NEXT() % 16) * 256 * M,
                                 (1 + NEXT() % 32) * 256 * M, LANES_ANY_GPU, 0, id % 5 == 0};
            lanes_status_t st = lanes_admit(l, &r, NULL);
            ck_assert(st == LANES_OK || st == LANES_WAIT || st == LANES_NEVER_FITS);
            present[id] = st == LANES_OK;
        } else if (NEXT() % 3 == 0) {
            lanes_status_t st = lanes_update_sizes(l, id, (1 + NEXT() % 16) * 256 * M,
                                                   (1 + NEXT() % 32) * 256 * M, NULL);
            ck_assert(st == LANES_OK || st == LANES_MOVED || st == LANES_NO_LONGER_FITS ||
                      st == LANES_NEVER_FITS);
        } else {
            ck_assert_int_eq(lanes_release(l, id), LANES_OK);
            present[id] = false;
        }
        check_invariants(l, "random", step);
        for (uint64_t j = 0; j < 64; j += 5) { /* an `alone` job's lane holds it only */
            lanes_placement_t pl;
            uint64_t ids[64];
            if (present[j] && lanes_job_placement(l, j, &pl) == LANES_OK)
                ck_assert_msg(lanes_lane_jobs(l, pl.lane_id, ids, 64) == 1,
                              "step %d: job %llu shares lane %u", step, (unsigned long long)j,
                              pl.lane_id);
        }
    }
#undef NEXT
    lanes_destroy(l);
}
END_TEST

/* An `alone` request (a latency-critical job) opens a lane of its own: it neither joins nor
 * grows a lane that would take it, other lanes merge to make room, nobody joins it or lands
 * in it at a re-attach, and it waits where no merge makes room. */
START_TEST(test_alone)
{
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    lanes_t *l = lanes_create(&config);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 10 * G, 0), LANES_OK);
    lanes_request_t a = {1, 1000, 1 * G, 4 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t b = {2, 1000, 1 * G, 2 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t lc = {3, 1000, 0, 3 * G, LANES_ANY_GPU, 0, true};
    lanes_placement_t pa, pb, plc;
    ck_assert_int_eq(lanes_admit(l, &a, &pa), LANES_OK);
    ck_assert_int_eq(lanes_admit(l, &b, &pb), LANES_OK); /* 2 GiB left */
    ck_assert_int_eq(lanes_admit(l, &lc, &plc), LANES_OK); /* a and b merge */
    ck_assert_int_eq(lanes_job_placement(l, 2, &pb), LANES_OK);
    ck_assert_uint_eq(pb.lane_id, pa.lane_id);
    ck_assert_uint_ne(plc.lane_id, pa.lane_id);
    /* nobody joins it: a best-effort job it would fit best takes the other lane */
    lanes_request_t c = {4, 1000, 1 * G, 2 * G, LANES_ANY_GPU, 0, false};
    lanes_placement_t pc;
    ck_assert_int_eq(lanes_admit(l, &c, &pc), LANES_OK);
    ck_assert_uint_eq(pc.lane_id, pa.lane_id);
    /* nor at a re-attach, and an `alone` one joins nobody's */
    lanes_request_t d = {5, 1000, 0, 1 * G, LANES_ANY_GPU, 0, false};
    ck_assert_int_eq(lanes_admit_to_lane(l, &d, plc.lane_id, NULL), LANES_ERROR_INVALID);
    d.alone = true;
    ck_assert_int_eq(lanes_admit_to_lane(l, &d, pa.lane_id, NULL), LANES_ERROR_INVALID);
    /* no room for a lane of its own and nothing to merge: it waits */
    ck_assert_int_eq(lanes_release(l, 4), LANES_OK); /* 1 GiB free */
    d.ephemeral_bytes = 2 * G;
    ck_assert_int_eq(lanes_admit(l, &d, NULL), LANES_WAIT);
    d.ephemeral_bytes = 1 * G;
    ck_assert_int_eq(lanes_admit(l, &d, NULL), LANES_OK);
    /* learned sizes that do not fit its lane: it never moves into another (lane 1 would
     * hold it) */
    ck_assert_int_eq(lanes_update_sizes(l, 3, 0, 4 * G, NULL), LANES_NO_LONGER_FITS);
    ck_assert_int_eq(lanes_release(l, 5), LANES_OK);
    ck_assert_int_eq(lanes_update_sizes(l, 3, 0, 4 * G, &plc), LANES_OK);
    uint64_t ids[8];
    ck_assert_uint_eq(lanes_lane_jobs(l, plc.lane_id, ids, 8), 1);
    lanes_destroy(l);
}
END_TEST

/* The index of the committed state (job look-ups, granted jobs per lane) agrees with the books
 * through random admissions, releases, updates (moves, merges), grants and yields: a grant is
 * refused exactly when another job of the lane is granted, lanes_list names the lane's first
 * granted job, and every job's placement is the lane that lists it. lanes_version moves with
 * admissions and releases, not with grants, yields or a job left waiting. */
START_TEST(test_random_grants)
{
    uint64_t state = 0x9e3779b9u + (uint64_t)_i;
#define NEXT() random_next(&state)
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    config.share_lanes_across_users = _i % 2;
    lanes_t *l = lanes_create(&config);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 12 * G, 0), LANES_OK);
    ck_assert_int_eq(lanes_add_gpu(l, 1, 8 * G, 0), LANES_OK);
    bool present[48] = {false}, granted[48] = {false};
    int refused = 0, grants = 0;
    for (int step = 0; step < 4000; step++) {
        uint64_t id = NEXT() % 48;
        unsigned what = (unsigned)(NEXT() % 8);
        uint64_t version = lanes_version(l);
        bool changes = false; /* admitted or released: the version must move */
        if (!present[id]) {
            lanes_request_t r = {id, (uint32_t)(1000 + NEXT() % 2), (NEXT() % 4) * 256 * M,
                                 (1 + NEXT() % 24) * 256 * M, LANES_ANY_GPU, 0, false};
            lanes_status_t st = lanes_admit(l, &r, NULL);
            ck_assert(st == LANES_OK || st == LANES_WAIT);
            present[id] = st == LANES_OK;
            granted[id] = false;
            changes = st == LANES_OK;
        } else if (what < 3) {
            lanes_placement_t mine;
            ck_assert_int_eq(lanes_job_placement(l, id, &mine), LANES_OK);
            bool other = false;
            for (uint64_t j = 0; j < 48; j++) {
                lanes_placement_t pl;
                if (j != id && present[j] && granted[j] &&
                    lanes_job_placement(l, j, &pl) == LANES_OK && pl.lane_id == mine.lane_id)
                    other = true;
            }
            lanes_status_t st = lanes_grant(l, id, NULL);
            if (granted[id])
                ck_assert_int_eq(st, LANES_OK);
            else
                ck_assert_int_eq(st, other ? LANES_ERROR_BUSY : LANES_OK);
            refused += st == LANES_ERROR_BUSY;
            grants += st == LANES_OK;
            granted[id] = st == LANES_OK;
        } else if (what < 6) {
            ck_assert_int_eq(lanes_yield(l, id), LANES_OK);
            granted[id] = false;
        } else if (what == 6) {
            lanes_status_t st = lanes_update_sizes(l, id, (NEXT() % 4) * 256 * M,
                                                   (1 + NEXT() % 24) * 256 * M, NULL);
            ck_assert(st == LANES_OK || st == LANES_MOVED || st == LANES_NO_LONGER_FITS ||
                      st == LANES_NEVER_FITS);
        } else {
            ck_assert_int_eq(lanes_release(l, id), LANES_OK);
            present[id] = granted[id] = false;
            changes = true;
        }
        if (changes)
            ck_assert_uint_gt(lanes_version(l), version);
        else if (what < 6)
            ck_assert_uint_eq(lanes_version(l), version); /* grants, yields, waits */
        lanes_lane_info_t infos[64];
        size_t n = lanes_list(l, infos, 64);
        ck_assert_uint_le(n, 64);
        for (size_t i = 0; i < n; i++) {
            uint64_t ids[48];
            size_t jobs = lanes_lane_jobs(l, infos[i].lane_id, ids, 48);
            uint64_t first_granted = 0;
            for (size_t j = 0; j < jobs; j++) {
                lanes_placement_t pl;
                ck_assert(present[ids[j]]);
                ck_assert_int_eq(lanes_job_placement(l, ids[j], &pl), LANES_OK);
                ck_assert_uint_eq(pl.lane_id, infos[i].lane_id);
                if (granted[ids[j]] && !first_granted)
                    first_granted = ids[j] + 1;
            }
            ck_assert_msg(infos[i].active == (first_granted != 0), "step %d: lane %u active %d",
                          step, infos[i].lane_id, infos[i].active);
            if (first_granted)
                ck_assert_uint_eq(infos[i].active_job_id, first_granted - 1);
        }
    }
    ck_assert_int_gt(refused, 0); /* both answers were exercised */
    ck_assert_int_gt(grants, 0);
#undef NEXT
    lanes_destroy(l);
}
END_TEST

/* A job coming back after a daemon restart joins the lane it shared (grown to its E when the
 * GPU holds it); no room, another uid's lane or an unknown lane are refused, nothing changed. */
START_TEST(test_admit_to_lane)
{
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    lanes_t *lanes = lanes_create(&config);
    ck_assert_ptr_nonnull(lanes);
    ck_assert_int_eq(lanes_add_gpu(lanes, 0, 4 * G, 0), LANES_OK);
    lanes_placement_t a, b;
    lanes_request_t ra = {.job_id = 1, .uid = 7, .persistent_bytes = 1 * G,
                          .ephemeral_bytes = 512 * M, .gpu = 0};
    ck_assert_int_eq(lanes_admit(lanes, &ra, &a), LANES_OK);
    /* B would open a lane of its own; to its old lane mate's it goes, the lane grows to 1 GiB */
    lanes_request_t rb = {.job_id = 2, .uid = 7, .persistent_bytes = 512 * M,
                          .ephemeral_bytes = 1 * G, .gpu = 0};
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rb, a.lane_id, &b), LANES_OK);
    ck_assert_uint_eq(b.lane_id, a.lane_id);
    ck_assert_uint_eq(b.lane_size_bytes, 1 * G);
    ck_assert_uint_eq(lanes_lane_jobs(lanes, a.lane_id, NULL, 0), 2);
    lanes_gpu_info_t info;
    ck_assert_int_eq(lanes_gpu_info(lanes, 0, &info), LANES_OK);
    ck_assert_uint_eq(info.free_bytes, 4 * G - 1 * G - 512 * M - 1 * G);
    /* 1.5 GiB left: a job with 1 GiB + growing the lane to 2 GiB does not fit */
    lanes_request_t rc = {.job_id = 3, .uid = 7, .persistent_bytes = 1 * G,
                          .ephemeral_bytes = 2 * G, .gpu = 0};
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rc, a.lane_id, NULL), LANES_WAIT);
    rc.uid = 8; /* another user's job never joins it (lanes not shared across users) */
    rc.ephemeral_bytes = 1 * G;
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rc, a.lane_id, NULL), LANES_ERROR_INVALID);
    rc.uid = 7;
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rc, 99, NULL), LANES_ERROR_UNKNOWN);
    rc.ephemeral_bytes = LANES_SIZE_UNKNOWN;
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rc, a.lane_id, NULL), LANES_ERROR_INVALID);
    ck_assert_int_eq(lanes_admit_to_lane(lanes, &rb, a.lane_id, NULL), LANES_ERROR_EXISTS);
    ck_assert_uint_eq(lanes_lane_jobs(lanes, a.lane_id, NULL, 0), 2);
    lanes_destroy(lanes);
}
END_TEST

/* A scratch copy tries admissions silently; the original is untouched, and the same calls on it
 * give the same placements (the core's all-or-nothing group admission relies on both). */
START_TEST(test_clone_is_a_silent_scratch_copy)
{
    change_log_t log = {0};
    lanes_config_t config;
    lanes_config_default(&config);
    config.job_overhead_bytes = 0;
    config.on_change = record_change;
    config.on_change_context = &log;
    lanes_t *l = lanes_create(&config);
    ck_assert_int_eq(lanes_add_gpu(l, 0, 10 * G, 0), LANES_OK);
    ck_assert_int_eq(lanes_add_gpu(l, 1, 10 * G, 0), LANES_OK);
    lanes_request_t a = {1, 1000, 1 * G, 3 * G, LANES_ANY_GPU, 0, false};
    lanes_request_t b = {2, 1000, 1 * G, 3 * G, 1, 0, false};
    lanes_request_t c = {3, 2000, 1 * G, 4 * G, 1, 0, false};
    ck_assert_int_eq(lanes_admit(l, &a, NULL), LANES_OK);
    ck_assert_int_eq(lanes_grant(l, 1, NULL), LANES_OK);
    log.count = 0;
    uint64_t version = lanes_version(l);
    lanes_t *scratch = lanes_clone(l);
    ck_assert_ptr_nonnull(scratch);
    lanes_placement_t pa, pb, pc, qb, qc;
    ck_assert_int_eq(lanes_job_placement(scratch, 1, &pa), LANES_OK);
    ck_assert_int_eq(lanes_grant(scratch, 1, NULL), LANES_OK); /* granted in the copy too */
    ck_assert_int_eq(lanes_admit(scratch, &b, &pb), LANES_OK);
    ck_assert_int_eq(lanes_admit(scratch, &c, &pc), LANES_OK); /* merges on GPU 1 */
    ck_assert_int_eq(log.count, 0);                            /* nothing reported */
    ck_assert_uint_eq(lanes_version(l), version);
    ck_assert_int_eq(lanes_job_placement(l, 2, &qb), LANES_ERROR_UNKNOWN);
    lanes_destroy(scratch);
    ck_assert_int_eq(lanes_admit(l, &b, &qb), LANES_OK);
    ck_assert_int_eq(lanes_admit(l, &c, &qc), LANES_OK);
    ck_assert(log.count > 0);
    ck_assert_int_eq(qb.gpu, pb.gpu);
    ck_assert_uint_eq(qb.lane_id, pb.lane_id);
    ck_assert_int_eq(qc.gpu, pc.gpu);
    ck_assert_uint_eq(qc.lane_id, pc.lane_id);
    ck_assert_uint_eq(qc.lane_size_bytes, pc.lane_size_bytes);
    lanes_destroy(l);
}
END_TEST

static Suite *lanes_suite(void)
{
    Suite *s = suite_create("lanes");
    TCase *tc = tcase_create("scenarios");
    tcase_add_loop_test(tc, test_lanes_case, 0, (int)(sizeof(lanes_cases) / sizeof(lanes_cases[0])));
    tcase_add_test(tc, test_provisional_flag);
    tcase_add_test(tc, test_claims);
    tcase_add_test(tc, test_claim_wants);
    tcase_add_test(tc, test_admit_in_order);
    tcase_add_test(tc, test_change_reports);
    tcase_add_test(tc, test_admit_to_lane);
    tcase_add_test(tc, test_clone_is_a_silent_scratch_copy);
    tcase_add_test(tc, test_alone);
    tcase_add_loop_test(tc, test_random_invariant, 0, 2);
    tcase_add_loop_test(tc, test_random_grants, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lanes_suite());
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists every test */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
