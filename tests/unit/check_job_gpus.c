/* salusd/job_gpus.c: a job on several GPUs as members of the scheduling core (ids, effects
 * mapped back to the job, grants counted, events sent to every member). */
#include "check_run.h"
#include "job_gpus.h"

#include <errno.h>
#include <string.h>

#define GIB (1ull << 30)

static sched_core_effect_t effect(sched_core_effect_kind_t kind, uint64_t id, int gpu)
{
    return (sched_core_effect_t){.kind = kind, .job_id = id, .gpu = gpu, .lane = (uint32_t)gpu + 1,
                                 .budget_bytes = 100 + id};
}

static void push(sched_core_effects_t *fx, sched_core_effect_t e)
{
    if (fx->count == fx->capacity) {
        fx->capacity = fx->capacity ? fx->capacity * 2 : 8;
        fx->items = realloc(fx->items, fx->capacity * sizeof(*fx->items));
        ck_assert_ptr_nonnull(fx->items);
    }
    fx->items[fx->count++] = e;
}

/* carries fx through the table: the effects that reach the daemon, in out */
static size_t carried(job_gpus_t *t, const sched_core_effects_t *fx, sched_core_effect_t *out,
                      size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < fx->count; i++) {
        sched_core_effect_t e;
        if (job_gpus_effect(t, fx, i, &e) == JOB_GPUS_CARRY_OUT) {
            ck_assert_uint_lt(n, cap);
            out[n++] = e;
        }
    }
    return n;
}

START_TEST(test_ids)
{
    job_gpus_t *t = job_gpus_create();
    uint32_t rank = 99;
    ck_assert_int_eq(job_gpus_add(t, NULL, 5, 3), 0);
    ck_assert_int_eq(job_gpus_add(t, NULL, 9, 1), 0); /* one GPU: nothing recorded */
    ck_assert_int_eq(job_gpus_add(t, NULL, 20, 2), 0);
    ck_assert_uint_eq(job_gpus_owner(t, 5, &rank), 5);
    ck_assert_uint_eq(rank, 0);
    ck_assert_uint_eq(job_gpus_owner(t, 7, &rank), 5);
    ck_assert_uint_eq(rank, 2);
    ck_assert_uint_eq(job_gpus_owner(t, 8, &rank), 8);
    ck_assert_uint_eq(rank, 0);
    ck_assert_uint_eq(job_gpus_owner(t, 4, NULL), 4);
    ck_assert_uint_eq(job_gpus_owner(t, 21, &rank), 20);
    ck_assert_uint_eq(rank, 1);
    ck_assert_uint_eq(job_gpus_count(t, 5), 3);
    ck_assert_uint_eq(job_gpus_count(t, 6), 1); /* a member is not a job */
    ck_assert_uint_eq(job_gpus_count(t, 9), 1);
    /* overlapping ranges, zero, too many, already there */
    ck_assert_int_eq(job_gpus_add(t, NULL, 4, 2), -EINVAL);
    ck_assert_int_eq(job_gpus_add(t, NULL, 7, 2), -EINVAL);
    ck_assert_int_eq(job_gpus_add(t, NULL, 30, 0), -EINVAL);
    ck_assert_int_eq(job_gpus_add(t, NULL, 30, JOB_GPUS_MAX + 1), -EINVAL);
    ck_assert_int_eq(job_gpus_add(t, NULL, 0, 2), -EINVAL);
    job_gpus_info_t info;
    ck_assert_int_eq(job_gpus_info(t, 9, &info), -ENOENT);
    ck_assert_int_eq(job_gpus_info(t, 5, &info), 0);
    ck_assert_uint_eq(info.gpus, 3);
    ck_assert(!info.admitted);
    ck_assert_int_eq(info.gpu[0], -1);
    job_gpus_destroy(t);
}
END_TEST

START_TEST(test_forgotten_jobs_dropped)
{
    job_gpus_t *t = job_gpus_create();
    registry_t *reg = registry_create();
    job_t *a = registry_add(reg, "a", 1, 0, 0, 0, NULL);
    ck_assert_int_eq(job_gpus_add(t, reg, a->id, 2), 0);
    registry_set_next_id(reg, a->id + 2);
    job_t *b = registry_add(reg, "b", 2, 0, 0, 0, NULL);
    ck_assert_uint_eq(b->id, a->id + 2); /* the member's id was never handed out */
    uint64_t a_id = a->id;
    ck_assert_int_eq(registry_remove(reg, a_id), 0);
    ck_assert_int_eq(job_gpus_add(t, reg, b->id, 2), 0);
    ck_assert_uint_eq(job_gpus_count(t, a_id), 1); /* a was forgotten: its entry went */
    ck_assert_uint_eq(job_gpus_count(t, b->id), 2);
    registry_destroy(reg);
    job_gpus_destroy(t);
}
END_TEST

START_TEST(test_admit_and_grant_mapped)
{
    job_gpus_t *t = job_gpus_create();
    sched_core_effects_t fx = {0};
    sched_core_effect_t out[8];
    ck_assert_int_eq(job_gpus_add(t, NULL, 10, 2), 0);
    /* member 1 first: nothing until member 0 is admitted too; then the job, as member 0 */
    push(&fx, effect(SCHED_CORE_ADMIT, 11, 2));
    push(&fx, effect(SCHED_CORE_ADMIT, 30, 1)); /* another job passes unchanged */
    ck_assert_uint_eq(carried(t, &fx, out, 8), 1);
    ck_assert_uint_eq(out[0].job_id, 30);
    sched_core_effects_clear(&fx);
    push(&fx, effect(SCHED_CORE_ADMIT, 10, 0));
    ck_assert_uint_eq(carried(t, &fx, out, 8), 1);
    ck_assert_int_eq(out[0].kind, SCHED_CORE_ADMIT);
    ck_assert_uint_eq(out[0].job_id, 10);
    ck_assert_int_eq(out[0].gpu, 0);
    ck_assert_uint_eq(out[0].lane, 1);
    ck_assert_uint_eq(out[0].budget_bytes, 110);
    char text[32];
    job_gpus_text(t, 10, 0, text, sizeof(text));
    ck_assert_str_eq(text, "0,2");
    job_gpus_text(t, 30, 1, text, sizeof(text));
    ck_assert_str_eq(text, "1");
    /* budgets: member 0's is the page's; member 1's is its own */
    sched_core_effects_clear(&fx);
    push(&fx, effect(SCHED_CORE_BUDGET, 11, 2));
    push(&fx, effect(SCHED_CORE_BUDGET, 10, 0));
    ck_assert_uint_eq(carried(t, &fx, out, 8), 1);
    ck_assert_uint_eq(out[0].budget_bytes, 110);
    /* granted in one event: one GRANT of the job, free_run only if both run freely */
    sched_core_effects_clear(&fx);
    sched_core_effect_t g0 = effect(SCHED_CORE_GRANT, 10, 0), g1 = effect(SCHED_CORE_GRANT, 11, 2);
    g0.free_run = true;
    push(&fx, g0);
    push(&fx, g1);
    ck_assert_uint_eq(carried(t, &fx, out, 8), 1);
    ck_assert_int_eq(out[0].kind, SCHED_CORE_GRANT);
    ck_assert_uint_eq(out[0].job_id, 10);
    ck_assert(!out[0].free_run);
    job_gpus_info_t info;
    ck_assert_int_eq(job_gpus_info(t, 10, &info), 0);
    ck_assert_uint_eq(info.grants, 1);
    ck_assert_uint_eq(info.grants_split, 0);
    /* a refusal or a stop of any member is the job's */
    sched_core_effects_clear(&fx);
    push(&fx, effect(SCHED_CORE_STOP_FREE_RUN, 11, 2));
    ck_assert_uint_eq(carried(t, &fx, out, 8), 1);
    ck_assert_uint_eq(out[0].job_id, 10);
    sched_core_effects_free(&fx);
    job_gpus_destroy(t);
}
END_TEST

static sched_core_t *core_of_gpus(int gpus)
{
    int rc = 0;
    sched_core_t *core = sched_core_create(NULL, &rc);
    ck_assert_ptr_nonnull(core);
    for (int g = 0; g < gpus; g++)
        ck_assert_int_eq(sched_core_add_gpu(core, g, 4 * GIB, 0), 0);
    return core;
}

START_TEST(test_core_members)
{
    job_gpus_t *t = job_gpus_create();
    sched_core_t *core = core_of_gpus(3);
    sched_core_effects_t fx = {0};
    sched_core_effect_t out[16];
    ck_assert_int_eq(job_gpus_add(t, NULL, 10, 2), 0);
    sched_core_job_hints_t hints = {.id = 10, .uid = 0, .persistent_bytes = 256 << 20,
                                    .ephemeral_bytes = 256 << 20};
    ck_assert_int_eq(job_gpus_register(t, core, &hints, 1000, &fx), 0);
    /* two members in the core, in one group of world 2, each its rank */
    ck_assert_uint_eq(sched_core_job_count(core), 2);
    sched_core_job_info_t m0, m1;
    ck_assert_int_eq(sched_core_job_info(core, 10, &m0), 0);
    ck_assert_int_eq(sched_core_job_info(core, 11, &m1), 0);
    ck_assert_uint_eq(m0.group.id, 10 | JOB_GPUS_GROUP_BIT);
    ck_assert_uint_eq(m1.group.id, m0.group.id);
    ck_assert_uint_eq(m0.group.world, 2);
    ck_assert_uint_eq(m1.group.rank, 1);
    ck_assert_int_eq(m1.group.sync, SCHED_CORE_SYNC_BSP);
    /* both admitted: the daemon hears of one admission, the job's */
    size_t n = carried(t, &fx, out, 16), admits = 0;
    for (size_t i = 0; i < n; i++)
        if (out[i].kind == SCHED_CORE_ADMIT) {
            admits++;
            ck_assert_uint_eq(out[i].job_id, 10);
        }
    ck_assert_uint_eq(admits, 1);
    job_gpus_info_t info;
    ck_assert_int_eq(job_gpus_info(t, 10, &info), 0);
    ck_assert(info.admitted);
    ck_assert_int_ge(info.gpu[0], 0);
    ck_assert_int_ge(info.gpu[1], 0);
    ck_assert_int_ne(info.gpu[0], info.gpu[1]); /* distinct GPUs */
    /* member 1's place and budget are its own; what it holds is counted apart */
    int gpu = -1;
    uint64_t budget = 0;
    ck_assert_int_eq(job_gpus_place(t, core, 10, 1, &gpu, &budget), 0);
    ck_assert_int_eq(gpu, info.gpu[1]);
    ck_assert_uint_ge(budget, 512u << 20);
    ck_assert_int_eq(job_gpus_place(t, core, 10, 2, &gpu, &budget), -ENOENT);
    ck_assert_ptr_null(job_gpus_committed(t, 10, 0));
    ck_assert_ptr_null(job_gpus_committed(t, 10, 2));
    *job_gpus_committed(t, 10, 1) += 64u << 20;
    ck_assert_uint_eq(job_gpus_committed_total(t, 10), 64u << 20);
    ck_assert_uint_eq(job_gpus_member_on(t, 10, info.gpu[1]), 1);
    ck_assert_uint_eq(job_gpus_member_on(t, 10, info.gpu[0]), 0);
    /* a boundary goes to every member; both then run their turn: one GRANT of the job */
    sched_core_effects_clear(&fx);
    sched_core_boundary_t b = {.iterations = 1, .busy_ns = 1000, .last_iteration_ns = 1000,
                               .ready = true};
    ck_assert_int_eq(job_gpus_boundary(t, core, 10, &b, 2000, &fx), 0);
    ck_assert_int_eq(sched_core_job_info(core, 10, &m0), 0);
    ck_assert_int_eq(sched_core_job_info(core, 11, &m1), 0);
    ck_assert_uint_eq(m0.iterations, 1);
    ck_assert_uint_eq(m1.iterations, 1);
    n = carried(t, &fx, out, 16);
    size_t grants = 0;
    for (size_t i = 0; i < n; i++)
        grants += out[i].kind == SCHED_CORE_GRANT && out[i].job_id == 10;
    ck_assert_uint_eq(grants, 1);
    ck_assert(job_gpus_holds_lanes(t, core, 10));
    ck_assert_int_eq(job_gpus_info(t, 10, &info), 0);
    ck_assert_uint_eq(info.grants, 1);
    /* the job leaves: so do its members */
    sched_core_effects_clear(&fx);
    ck_assert_int_eq(job_gpus_left(t, core, 10, SCHED_CORE_EXIT_DONE, 3000, &fx), 0);
    ck_assert_uint_eq(sched_core_job_count(core), 0);
    ck_assert(!job_gpus_holds_lanes(t, core, 10));
    ck_assert_uint_eq(job_gpus_committed_total(t, 10), 0); /* its memory went back */
    sched_core_effects_free(&fx);
    sched_core_destroy(core);
    job_gpus_destroy(t);
}
END_TEST

START_TEST(test_split_grants_counted)
{
    job_gpus_t *t = job_gpus_create();
    sched_core_effects_t fx = {0};
    sched_core_effect_t out[4];
    ck_assert_int_eq(job_gpus_add(t, NULL, 10, 2), 0);
    push(&fx, effect(SCHED_CORE_ADMIT, 10, 0));
    push(&fx, effect(SCHED_CORE_ADMIT, 11, 1));
    ck_assert_uint_eq(carried(t, &fx, out, 4), 1);
    /* member 0 in one event, member 1 in a later one: granted then, counted as split */
    sched_core_effects_clear(&fx);
    push(&fx, effect(SCHED_CORE_GRANT, 10, 0));
    ck_assert_uint_eq(carried(t, &fx, out, 4), 0);
    sched_core_effects_clear(&fx);
    push(&fx, effect(SCHED_CORE_GRANT, 11, 1));
    ck_assert_uint_eq(carried(t, &fx, out, 4), 1);
    ck_assert_uint_eq(out[0].job_id, 10);
    job_gpus_info_t info;
    ck_assert_int_eq(job_gpus_info(t, 10, &info), 0);
    ck_assert_uint_eq(info.grants, 1);
    ck_assert_uint_eq(info.grants_split, 1);
    sched_core_effects_free(&fx);
    job_gpus_destroy(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("job_gpus");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ids);
    tcase_add_test(tc, test_forgotten_jobs_dropped);
    tcase_add_test(tc, test_admit_and_grant_mapped);
    tcase_add_test(tc, test_core_members);
    tcase_add_test(tc, test_split_grants_counted);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
