/* Unit tests of the option table (common/options.c). */
#include "log.h"
#include "options.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char path[32];
    int flag;
    long long count;
    unsigned long long size;
    int level;
} cfg_t;

#define ROW(n, t, d, lo, hi, f) {n, t, d, lo, hi, offsetof(cfg_t, f), sizeof(((cfg_t *)0)->f), "help"}
static const option_def_t table[] = {
    ROW("path", OPTION_STRING, "/default", 0, 0, path),
    ROW("flag", OPTION_BOOL, "no", 0, 0, flag),
    ROW("count", OPTION_INT, "5", 1, 10, count),
    ROW("size", OPTION_BYTES, "1MiB", 64, 1LL << 30, size),
    ROW("log-level", OPTION_LOG_LEVEL, "info", 0, 0, level),
};
#define N (sizeof(table) / sizeof(table[0]))

/* A row whose field does not have its type's size (an int for OPTION_INT) is refused before
 * anything is written past the field: defaults and set both fail and the neighbour stays. */
typedef struct {
    int small;
    int neighbour;
} narrow_t;

START_TEST(test_field_of_the_wrong_size)
{
    const option_def_t narrow[] = {
        {"small", OPTION_INT, "7", 0, 100, offsetof(narrow_t, small), sizeof(int), "help"},
    };
    narrow_t c = {.small = 1, .neighbour = 42};
    char err[256] = "";
    ck_assert_int_eq(options_set_defaults(narrow, 1, &c), -EINVAL);
    ck_assert_int_eq(options_set(narrow, 1, &c, "small", "3", err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "4-byte field") != NULL, "%s", err);
    ck_assert_int_eq(c.small, 1);
    ck_assert_int_eq(c.neighbour, 42);
    /* every row of the test table has the right size */
    cfg_t ok;
    ck_assert_int_eq(options_set_defaults(table, N, &ok), 0);
}
END_TEST

START_TEST(test_defaults_and_set)
{
    cfg_t c;
    char err[256];
    ck_assert_int_eq(options_set_defaults(table, N, &c), 0);
    ck_assert_str_eq(c.path, "/default");
    ck_assert_int_eq(c.flag, 0);
    ck_assert_int_eq(c.count, 5);
    ck_assert_uint_eq(c.size, 1u << 20);
    ck_assert_int_eq(c.level, SALUS_LOG_INFO);

    ck_assert_int_eq(options_set(table, N, &c, "count", "10", err, sizeof(err)), 0);
    ck_assert_int_eq(c.count, 10);
    ck_assert_int_eq(options_set(table, N, &c, "count", "11", err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[1, 10]"));
    ck_assert_int_eq(options_set(table, N, &c, "count", "3x", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(c.count, 10);
    ck_assert_int_eq(options_set(table, N, &c, "nope", "1", err, sizeof(err)), -ENOENT);
    ck_assert_int_eq(options_set(table, N, &c, "size", "4KiB", err, sizeof(err)), 0);
    ck_assert_uint_eq(c.size, 4096);
    ck_assert_int_eq(options_set(table, N, &c, "size", "2G", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(options_set(table, N, &c, "size", "12", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(options_set(table, N, &c, "log-level", "debug", err, sizeof(err)), 0);
    ck_assert_int_eq(c.level, SALUS_LOG_DEBUG);
    ck_assert_int_eq(options_set(table, N, &c, "log-level", "loud", err, sizeof(err)), -EINVAL);
    char longpath[64];
    memset(longpath, 'x', sizeof(longpath) - 1);
    longpath[63] = '\0';
    ck_assert_int_eq(options_set(table, N, &c, "path", longpath, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(c.path, "/default");
}
END_TEST

START_TEST(test_bytes)
{
    unsigned long long v;
    ck_assert_int_eq(options_parse_bytes("512", &v), 0);
    ck_assert_uint_eq(v, 512);
    ck_assert_int_eq(options_parse_bytes("16MiB", &v), 0);
    ck_assert_uint_eq(v, 16u << 20);
    ck_assert_int_eq(options_parse_bytes("3 G", &v), 0);
    ck_assert_uint_eq(v, 3ull << 30);
    /* MB is the SI unit (10^6 bytes), MiB the binary one */
    ck_assert_int_eq(options_parse_bytes("512MB", &v), 0);
    ck_assert_uint_eq(v, 512000000ull);
    ck_assert_int_eq(options_parse_bytes("512MiB", &v), 0);
    ck_assert_uint_eq(v, 512ull << 20);
    ck_assert_int_eq(options_parse_bytes("2GB", &v), 0);
    ck_assert_uint_eq(v, 2000000000ull);
    ck_assert_int_eq(options_parse_bytes("10kB", &v), 0);
    ck_assert_uint_eq(v, 10000ull);
    ck_assert_int_eq(options_parse_bytes("-1", &v), -EINVAL);
    ck_assert_int_eq(options_parse_bytes("1Q", &v), -EINVAL);
    ck_assert_int_eq(options_parse_bytes("", &v), -EINVAL);
    ck_assert_int_eq(options_parse_bytes("99999999999999999999", &v), -EINVAL);
    ck_assert_int_eq(options_parse_bytes("17179869184T", &v), -EINVAL); /* overflow */
}
END_TEST

START_TEST(test_args)
{
    cfg_t c;
    char err[256];
    int next = 0;
    options_set_defaults(table, N, &c);
    char *argv[] = {"prog", "--flag", "--count=7", "--path", "/p", "--size", "2MiB",
                    "--no-flag", "--", "rest"};
    ck_assert_int_eq(options_parse_args(table, N, &c, 10, argv, &next, err, sizeof(err)), 0);
    ck_assert_int_eq(c.flag, 0);
    ck_assert_int_eq(c.count, 7);
    ck_assert_str_eq(c.path, "/p");
    ck_assert_uint_eq(c.size, 2u << 20);
    ck_assert_int_eq(next, 9);

    char *bad[] = {"prog", "--bogus"};
    ck_assert_int_eq(options_parse_args(table, N, &c, 2, bad, &next, err, sizeof(err)), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "--bogus"));
    char *missing[] = {"prog", "--count"};
    ck_assert_int_eq(options_parse_args(table, N, &c, 2, missing, &next, err, sizeof(err)),
                     -EINVAL);
    char *positional[] = {"prog", "--flag", "run", "--count=1"};
    ck_assert_int_eq(options_parse_args(table, N, &c, 4, positional, &next, err, sizeof(err)), 0);
    ck_assert_int_eq(next, 2);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_file)
{
    cfg_t c;
    char err[256];
    char path[] = "/tmp/check_options_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    options_set_defaults(table, N, &c);
    write_file(path, "# comment\n\npath = /etc/x   # trailing\nflag\ncount 9\nsize=8K\n");
    ck_assert_int_eq(options_load_file(table, N, &c, path, err, sizeof(err)), 0);
    ck_assert_str_eq(c.path, "/etc/x");
    ck_assert_int_eq(c.flag, 1);
    ck_assert_int_eq(c.count, 9);
    ck_assert_uint_eq(c.size, 8192);

    write_file(path, "count = 2\nbogus = 1\n");
    ck_assert_int_lt(options_load_file(table, N, &c, path, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(err, ":2: unknown option 'bogus'"));
    write_file(path, "count = 99\n");
    ck_assert_int_lt(options_load_file(table, N, &c, path, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(err, ":1:"));
    unlink(path);
    ck_assert_int_lt(options_load_file(table, N, &c, path, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(err, path));
}
END_TEST

START_TEST(test_log_levels)
{
    salus_log_level_t l;
    ck_assert_int_eq(salus_log_level_parse("WARN", &l), 0);
    ck_assert_int_eq(l, SALUS_LOG_WARN);
    ck_assert_int_eq(salus_log_level_parse("4", &l), 0);
    ck_assert_int_eq(l, SALUS_LOG_TRACE);
    ck_assert_int_eq(salus_log_level_parse("5", &l), -1);
    ck_assert_str_eq(salus_log_level_name(SALUS_LOG_ERROR), "error");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_defaults_and_set);
    tcase_add_test(tc, test_field_of_the_wrong_size);
    tcase_add_test(tc, test_bytes);
    tcase_add_test(tc, test_args);
    tcase_add_test(tc, test_file);
    tcase_add_test(tc, test_log_levels);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
