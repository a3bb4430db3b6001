/* Unit tests of the daemon's job registry (salusd/registry.c). */
#include "registry.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_add_find_remove)
{
    registry_t *r = registry_create();
    ck_assert_ptr_nonnull(r);
    job_t *a = registry_add(r, "alpha", 100, 1000, 1000, 5, NULL);
    job_t *b = registry_add(r, "", 101, 1001, 1001, 6, NULL);
    job_t *c = registry_add(r, "gamma", 102, 1000, 1000, 7, NULL);
    ck_assert_uint_eq(a->id, 1);
    ck_assert_uint_eq(b->id, 2);
    ck_assert_uint_eq(c->id, 3);
    ck_assert_str_eq(b->name, "job");
    ck_assert_int_eq(a->state, JOB_WAITING);
    /* no record of where it ran until it ends after an admission */
    ck_assert_int_eq(a->end_gpu, -1);
    ck_assert_uint_eq(a->end_budget_bytes, 0);
    ck_assert_uint_eq(registry_count(r), 3);
    ck_assert_ptr_eq(registry_find(r, 2), b);
    ck_assert_int_eq(registry_remove(r, 2), 0);
    ck_assert_int_eq(registry_remove(r, 2), -ENOENT);
    ck_assert_ptr_null(registry_find(r, 2));
    ck_assert_uint_eq(registry_count(r), 2);
    ck_assert_uint_eq(registry_at(r, 0)->id, 1);
    ck_assert_uint_eq(registry_at(r, 1)->id, 3);
    ck_assert_ptr_null(registry_at(r, 2));
    /* ids are never reused */
    job_t *d = registry_add(r, "delta", 103, 0, 0, 8, NULL);
    ck_assert_uint_eq(d->id, 4);
    registry_destroy(r);
}
END_TEST

START_TEST(test_many_and_long_names)
{
    registry_t *r = registry_create();
    char name[200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    for (int i = 0; i < 1000; i++)
        ck_assert_ptr_nonnull(registry_add(r, name, i, 0, 0, 0, NULL));
    ck_assert_uint_eq(strlen(registry_find(r, 500)->name), REGISTRY_NAME_BYTES - 1);
    for (uint64_t id = 1; id <= 1000; id += 2)
        ck_assert_int_eq(registry_remove(r, id), 0);
    ck_assert_uint_eq(registry_count(r), 500);
    for (size_t i = 0; i < 500; i++)
        ck_assert_uint_eq(registry_at(r, i)->id, 2 * (i + 1));
    registry_destroy(r);
}
END_TEST

START_TEST(test_state_names)
{
    ck_assert_str_eq(job_state_name(JOB_WAITING), "waiting");
    ck_assert_str_eq(job_state_name(JOB_PAUSED), "paused");
    ck_assert_str_eq(job_state_name(JOB_DONE), "done");
    ck_assert_str_eq(job_state_name(JOB_FAILED), "failed");
    ck_assert_str_eq(job_state_name(JOB_KILLED), "killed");
    ck_assert_str_eq(job_state_name(JOB_ENDED), "ended");
    ck_assert_str_eq(job_state_name(JOB_STATE_COUNT), "unknown");
    ck_assert_str_eq(job_state_name((job_state_t)42), "unknown");
    /* as shown: "running" is no stored state, only a name jobs_state gives */
    const char *shown[] = {"waiting", "running", "paused", "done", "failed", "killed", "ended"};
    ck_assert_uint_eq(JOB_SHOWN_STATE_COUNT, sizeof(shown) / sizeof(shown[0]));
    for (size_t i = 0; i < JOB_SHOWN_STATE_COUNT; i++)
        ck_assert_str_eq(job_shown_state_name(i), shown[i]);
    ck_assert_str_eq(job_shown_state_name(JOB_SHOWN_STATE_COUNT), "unknown");
    ck_assert(!JOB_STATE_IS_FINAL(JOB_PAUSED) && JOB_STATE_IS_FINAL(JOB_DONE) &&
              JOB_STATE_IS_FINAL(JOB_ENDED) && !JOB_STATE_IS_FINAL(JOB_STATE_COUNT));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("jobs");
    tcase_add_test(tc, test_add_find_remove);
    tcase_add_test(tc, test_many_and_long_names);
    tcase_add_test(tc, test_state_names);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
