/* Unit tests of the log-line rate limit (common/log_limit.c), on a clock the test moves: the
 * first lines of a window are written, the rest dropped and counted; the count is said once,
 * before the first line of a later window or by a flush once the window is over, never twice. */
#include "check_run.h"
#include "log_limit.h"

#include <check.h>
#include <stdint.h>

#define S 1000000000ull

START_TEST(test_limit_within_window)
{
    salus_log_limit_t lim = SALUS_LOG_LIMIT_INIT(60, 60);
    uint64_t said = 99, t = 5 * S;
    int written = 0;
    for (int i = 0; i < 1000; i++, t += S / 100) /* 1000 lines in 10 s */
        written += salus_log_limit_take(&lim, t, &said);
    ck_assert_int_eq(written, 60);
    ck_assert_uint_eq(lim.dropped, 940);
    ck_assert_uint_eq(lim.dropped_total, 940);
    ck_assert_uint_eq(said, 0);
    ck_assert_uint_eq(salus_log_limit_flush(&lim, t), 0); /* the window is not over yet */
    ck_assert_uint_gt(salus_log_limit_left_ns(&lim, t), 0);
}
END_TEST

START_TEST(test_drops_said_by_next_window)
{
    salus_log_limit_t lim = SALUS_LOG_LIMIT_INIT(3, 60);
    uint64_t said = 0;
    for (int i = 0; i < 10; i++)
        salus_log_limit_take(&lim, S + (uint64_t)i, &said);
    ck_assert_uint_eq(lim.dropped, 7);
    /* the first line of the next window carries the count, the next ones none */
    ck_assert_int_eq(salus_log_limit_take(&lim, 62 * S, &said), 1);
    ck_assert_uint_eq(said, 7);
    ck_assert_int_eq(salus_log_limit_take(&lim, 62 * S + 1, &said), 1);
    ck_assert_uint_eq(said, 0);
    ck_assert_uint_eq(salus_log_limit_flush(&lim, 200 * S), 0); /* already said */
    ck_assert_uint_eq(lim.dropped_total, 7);
}
END_TEST

START_TEST(test_drops_said_by_flush_once)
{
    salus_log_limit_t lim = SALUS_LOG_LIMIT_INIT(2, 60);
    uint64_t said = 0;
    for (int i = 0; i < 5; i++)
        salus_log_limit_take(&lim, 10 * S, &said);
    ck_assert_uint_eq(salus_log_limit_flush(&lim, 69 * S), 0);
    ck_assert_uint_eq(salus_log_limit_left_ns(&lim, 69 * S), S);
    ck_assert_uint_eq(salus_log_limit_flush(&lim, 70 * S), 3);
    ck_assert_uint_eq(salus_log_limit_flush(&lim, 71 * S), 0);
    ck_assert_int_eq(salus_log_limit_take(&lim, 72 * S, &said), 1);
    ck_assert_uint_eq(said, 0); /* the flush said them */
}
END_TEST

/* 300 lines a second for 40 s (the flood of a link port): 60 a minute are written, and every
 * dropped line is counted once, in a count that is said */
START_TEST(test_flood_of_forty_seconds)
{
    salus_log_limit_t lim = SALUS_LOG_LIMIT_INIT(60, 60);
    uint64_t said = 0, said_total = 0, t = 1;
    int written = 0;
    for (int i = 0; i < 300 * 40; i++, t += S / 300) {
        written += salus_log_limit_take(&lim, t, &said);
        said_total += said;
    }
    ck_assert_int_eq(written, 60);
    said_total += salus_log_limit_flush(&lim, t + 60 * S);
    ck_assert_uint_eq(said_total, 300 * 40 - 60);
    ck_assert_uint_eq(lim.dropped_total, 300 * 40 - 60);
}
END_TEST

START_TEST(test_clock_going_back_starts_a_window)
{
    salus_log_limit_t lim = SALUS_LOG_LIMIT_INIT(1, 60);
    uint64_t said = 0;
    ck_assert_int_eq(salus_log_limit_take(&lim, 100 * S, &said), 1);
    ck_assert_int_eq(salus_log_limit_take(&lim, 100 * S, &said), 0);
    ck_assert_int_eq(salus_log_limit_take(&lim, 50 * S, &said), 1);
    ck_assert_uint_eq(said, 1);
}
END_TEST

static Suite *log_limit_suite(void)
{
    Suite *s = suite_create("log_limit");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_limit_within_window);
    tcase_add_test(tc, test_drops_said_by_next_window);
    tcase_add_test(tc, test_drops_said_by_flush_once);
    tcase_add_test(tc, test_flood_of_forty_seconds);
    tcase_add_test(tc, test_clock_going_back_starts_a_window);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run_suite(log_limit_suite());
}
