/* Unit tests of the metrics endpoint's pure helpers (salusd/metrics_format.c): addresses,
 * escaping, numbers, and the rendered text of a made-up snapshot. */
#include "metrics.h"

#include <arpa/inet.h>
#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *text, char *formatted, size_t size)
{
    metrics_address_t a;
    char err[256] = "";
    int rc = metrics_parse_address(text, &a, err, sizeof(err));
    if (rc < 0) {
        ck_assert_msg(err[0] != '\0', "no message for '%s'", text);
        return rc;
    }
    ck_assert_int_eq(metrics_format_address((struct sockaddr *)&a.addr, formatted, size), 0);
    return 0;
}

START_TEST(test_parse_address)
{
    char out[METRICS_ADDRESS_BYTES];
    ck_assert_int_eq(parse("127.0.0.1:9400", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "127.0.0.1:9400");
    ck_assert_int_eq(parse("127.0.0.1:0", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "127.0.0.1:0");
    ck_assert_int_eq(parse("0.0.0.0:65535", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "0.0.0.0:65535");
    ck_assert_int_eq(parse("[::1]:9400", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "[::1]:9400");
    ck_assert_int_eq(parse("[::]:1", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "[::]:1");
    ck_assert_int_eq(parse("[fe80::1:2:3:4]:80", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "[fe80::1:2:3:4]:80");

    static const char *const bad[] = {
        "", ":9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
        "127.0.0.1:+80", "127.0.0.1: 80", "127.0.0.1:80 ", "127.0.0.1:123456", "localhost:80",
        "256.0.0.1:80", "1.2.3:80", "::1:9400", "[::1]9400", "[::1]:", "[::1", "[127.0.0.1]:80",
        "[]:80", "[::1]:80:80", "example.com:80", "127.0.0.1:0x50",
        "[aaaa:bbbb:cccc:dddd:eeee:ffff:aaaa:bbbb:cccc:dddd:eeee:ffff:aaaa:bbbb:cccc]:80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse(bad[i], out, sizeof(out)) == -EINVAL, "'%s' was accepted", bad[i]);
    metrics_address_t a;
    char err[256];
    ck_assert_int_eq(metrics_parse_address(NULL, &a, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(metrics_parse_address("::1:80", &a, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "brackets"));
    ck_assert_int_eq(metrics_parse_address("1.2.3.4:99999", &a, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "port"));
    /* a buffer too small to format into */
    ck_assert_int_eq(metrics_parse_address("127.0.0.1:9400", &a, err, sizeof(err)), 0);
    ck_assert_int_eq(metrics_format_address((struct sockaddr *)&a.addr, out, 8), -EINVAL);
}
END_TEST

START_TEST(test_loopback)
{
    static const struct {
        const char *text;
        int loopback;
    } cases[] = {
        {"127.0.0.1:1", 1}, {"127.255.0.9:1", 1}, {"[::1]:1", 1}, {"[::ffff:127.0.0.1]:1", 1},
        {"0.0.0.0:1", 0},   {"10.0.0.1:1", 0},    {"[::]:1", 0},  {"[::ffff:10.0.0.1]:1", 0},
        {"128.0.0.1:1", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        metrics_address_t a;
        char err[256];
        ck_assert_int_eq(metrics_parse_address(cases[i].text, &a, err, sizeof(err)), 0);
        ck_assert_msg(metrics_is_loopback((struct sockaddr *)&a.addr) == cases[i].loopback,
                      "%s", cases[i].text);
    }
}
END_TEST

START_TEST(test_escape)
{
    char out[256];
    ck_assert_uint_eq(metrics_escape_label("plain", out, sizeof(out)), 5);
    ck_assert_str_eq(out, "plain");
    metrics_escape_label("a\"b\\c\nd", out, sizeof(out));
    ck_assert_str_eq(out, "a\\\"b\\\\c\\nd");
    metrics_escape_help("a\"b\\c\nd", out, sizeof(out));
    ck_assert_str_eq(out, "a\"b\\\\c\\nd");
    /* valid UTF-8 passes, tabs and carriage returns are legal in label values */
    metrics_escape_label("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\t\r", out, sizeof(out));
    ck_assert_str_eq(out, "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\t\r");
    /* invalid bytes become U+FFFD: stray continuation, truncated, overlong, surrogate,
     * past U+10FFFF, 0xFF */
    metrics_escape_label("a\x80z", out, sizeof(out));
    ck_assert_str_eq(out, "a\xEF\xBF\xBDz");
    metrics_escape_label("\xC3", out, sizeof(out));
    ck_assert_str_eq(out, "\xEF\xBF\xBD");
    metrics_escape_label("\xC0\xAF", out, sizeof(out));
    ck_assert_str_eq(out, "\xEF\xBF\xBD\xEF\xBF\xBD");
    metrics_escape_label("\xED\xA0\x80", out, sizeof(out));
    ck_assert_str_eq(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    metrics_escape_label("\xF4\x90\x80\x80", out, sizeof(out));
    ck_assert_str_eq(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    metrics_escape_label("\xFF\"", out, sizeof(out));
    ck_assert_str_eq(out, "\xEF\xBF\xBD\\\"");
    /* snprintf-like truncation: the full length comes back, the output stays terminated */
    char small[4];
    ck_assert_uint_eq(metrics_escape_label("\"\"\"", small, sizeof(small)), 6);
    ck_assert_str_eq(small, "\\\"\\");
    ck_assert_uint_eq(metrics_escape_label("abc", NULL, 0), 3);
    ck_assert_uint_eq(metrics_escape_label("", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_numbers)
{
    char out[64];
    metrics_format_double(NAN, out, sizeof(out));
    ck_assert_str_eq(out, "NaN");
    metrics_format_double(INFINITY, out, sizeof(out));
    ck_assert_str_eq(out, "+Inf");
    metrics_format_double(-INFINITY, out, sizeof(out));
    ck_assert_str_eq(out, "-Inf");
    metrics_format_double(0.0, out, sizeof(out));
    ck_assert_str_eq(out, "0");
    metrics_format_double(0.25, out, sizeof(out));
    ck_assert_str_eq(out, "0.25");
    metrics_format_double(1.0, out, sizeof(out));
    ck_assert_str_eq(out, "1");
    metrics_format_double(0.1 + 0.2, out, sizeof(out));
    ck_assert(strtod(out, NULL) == 0.1 + 0.2);
    metrics_format_double(1.0 / 3.0, out, sizeof(out));
    ck_assert(strtod(out, NULL) == 1.0 / 3.0);
    metrics_format_double(1e300, out, sizeof(out));
    ck_assert_str_eq(out, "1e+300");

    metrics_format_ns_as_seconds(0, out, sizeof(out));
    ck_assert_str_eq(out, "0.000000000");
    metrics_format_ns_as_seconds(1, out, sizeof(out));
    ck_assert_str_eq(out, "0.000000001");
    metrics_format_ns_as_seconds(12000345678ull, out, sizeof(out));
    ck_assert_str_eq(out, "12.000345678");
    metrics_format_ns_as_seconds(UINT64_MAX, out, sizeof(out));
    ck_assert_str_eq(out, "18446744073.709551615");
}
END_TEST

static int count_lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    size_t len = strlen(prefix);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        n += strncmp(line, prefix, len) == 0;
    return n;
}

START_TEST(test_render)
{
    metrics_gpu_sample_t gpus[2] = {
        {.index = 0, .name = "simgpu \"0\"", .total_bytes = 8ull << 30,
         .reserved_bytes = 1ull << 30, .used_bytes = 64ull << 20, .lane_bytes = 3ull << 20, .lanes = 2, .has_busy = 1,
         .busy_ns = 1500000000ull, .has_utilization = 1, .utilization = 0.5},
        {.index = 1, .name = "real", .total_bytes = 16ull << 30},
    };
    metrics_job_sample_t jobs[2] = {
        {.id = 7, .name = "we\"ird\\na\nme", .uid = 1000, .state = "running", .iterations = 42,
         .gpu_ns = 2000000001ull, .memory_bytes = 67108864, .budget_bytes = 1ull << 30,
         .persistent_bytes = 1024, .ephemeral_peak_bytes = 2048, .wait_ns = 3500000000ull},
        {.id = 8, .name = "plain", .uid = 0, .state = "done", .iterations = 3},
    };
    metrics_group_sample_t groups[2] = {
        {.name = "run-7f3a", .uid = 1000, .state = "running", .world = 4, .ranks = 4,
         .gang_wait_ns = 1250000000ull},
        {.name = "9.0", .uid = 0, .state = "failed", .world = 2, .ranks = 1, .failed = 1},
    };
    metrics_snapshot_t s = {.version = "1.2.3", .policy = "pack", .queue_length = 1,
                            .jobs_ended = {[JOB_DONE] = 5, [JOB_KILLED] = 2},
                            .gpus = gpus, .gpu_count = 2, .jobs = jobs, .job_count = 2,
                            .groups = groups, .group_count = 2};
    metrics_text_t t = {0};
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_ptr_nonnull(t.data);
    ck_assert_uint_eq(strlen(t.data), t.len);
    ck_assert_int_eq(t.data[t.len - 1], '\n');
    const char *text = t.data;
    ck_assert_ptr_nonnull(strstr(text, "salus_build_info{version=\"1.2.3\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_policy_info{policy=\"pack\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_queue_length 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_info{gpu=\"0\",name=\"simgpu \\\"0\\\"\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_memory_total_bytes{gpu=\"1\"} 17179869184\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_memory_reserved_bytes{gpu=\"0\"} 1073741824\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_memory_used_bytes{gpu=\"0\"} 67108864\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_memory_lane_bytes{gpu=\"0\"} 3145728\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_lanes{gpu=\"0\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_busy_seconds_total{gpu=\"0\"} 1.500000000\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_gpu_utilization{gpu=\"0\"} 0.5\n"));
    /* no made-up busy time or utilization for the GPU that does not report it */
    ck_assert_ptr_null(strstr(text, "salus_gpu_busy_seconds_total{gpu=\"1\"}"));
    ck_assert_ptr_null(strstr(text, "salus_gpu_utilization{gpu=\"1\"}"));
    const char *labels = "{job_id=\"7\",name=\"we\\\"ird\\\\na\\nme\",uid=\"1000\"";
    char want[512];
    snprintf(want, sizeof(want), "salus_job_iterations_total%s} 42\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_gpu_seconds_total%s} 2.000000001\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_memory_bytes%s} 67108864\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_persistent_bytes%s} 1024\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_ephemeral_peak_bytes%s} 2048\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_wait_seconds%s} 3.500000000\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_state%s,state=\"running\"} 1\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "salus_job_state%s,state=\"paused\"} 0\n", labels);
    ck_assert_ptr_nonnull(strstr(text, want));
    ck_assert_ptr_nonnull(strstr(
        text, "salus_job_state{job_id=\"8\",name=\"plain\",uid=\"0\",state=\"done\"} 1\n"));
    /* a state set: one series per job and state (JOB_SHOWN_STATE_COUNT), exactly one of them 1 */
    ck_assert_int_eq(count_lines_starting(text, "salus_job_state{"), 2 * JOB_SHOWN_STATE_COUNT);
    /* every family has one HELP and one TYPE line, and no line is empty */
    int help = count_lines_starting(text, "# HELP "), type = count_lines_starting(text, "# TYPE ");
    ck_assert_int_eq(help, type);
    ck_assert_int_eq(help, 27);
    /* groups: counted by state, and per group (name and uid as labels) */
    ck_assert_ptr_nonnull(strstr(text, "salus_groups{state=\"running\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_groups{state=\"failed\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_groups{state=\"forming\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_group_world{group=\"run-7f3a\",uid=\"1000\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_group_ranks{group=\"9.0\",uid=\"0\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_group_failed{group=\"9.0\",uid=\"0\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_group_failed{group=\"run-7f3a\",uid=\"1000\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(
        text, "salus_group_gang_wait_seconds_total{group=\"run-7f3a\",uid=\"1000\"} 1.250000000\n"));
    /* jobs ended, counted by how */
    ck_assert_ptr_nonnull(strstr(text, "salus_jobs_ended_total{state=\"killed\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "salus_jobs_ended_total{state=\"ended\"} 0\n"));
    ck_assert_ptr_null(strstr(text, "\n\n"));

    /* reset keeps the buffer and starts over */
    size_t first_len = t.len;
    metrics_text_reset(&t);
    ck_assert_uint_eq(t.len, 0);
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_uint_eq(t.len, first_len);
    metrics_text_free(&t);
    ck_assert_ptr_null(t.data);
}
END_TEST

/* The cluster's etcd requests by kind, and the daemon's own CPU and peak RSS (getrusage). */
START_TEST(test_render_cluster_process)
{
    metrics_cluster_sample_t c = {.member = 1, .members = 4, .messages_sent = 9,
                                  .etcd_keepalives = 30, .etcd_leases = 1, .etcd_ranges = 5,
                                  .etcd_writes = 12, .etcd_watch_streams = 3,
                                  .etcd_watch_events = 77, .etcd_txns_failed = 4};
    metrics_process_sample_t p = {.user_ns = 1500000000ull, .system_ns = 250000000ull,
                                  .max_rss_bytes = 12582912};
    metrics_snapshot_t s = {.version = "1", .policy = "pack", .cluster = &c, .process = &p};
    metrics_text_t t = {0};
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    const char *text = t.data;
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_requests_total{kind=\"keepalive\"} 30\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_requests_total{kind=\"lease\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_requests_total{kind=\"range\"} 5\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_requests_total{kind=\"write\"} 12\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_requests_total{kind=\"watch\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_watch_events_total 77\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_cluster_etcd_txns_failed_total 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_daemon_cpu_seconds_total{mode=\"user\"} 1.500000000\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_daemon_cpu_seconds_total{mode=\"system\"} 0.250000000\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nsalus_daemon_max_resident_bytes 12582912\n"));
    ck_assert_int_eq(count_lines_starting(text, "# HELP salus_cluster_etcd_requests_total"), 1);
    ck_assert_int_eq(count_lines_starting(text, "# TYPE salus_daemon_cpu_seconds_total counter"), 1);
    metrics_text_free(&t);
}
END_TEST

/* The policy's rank: one series per job that has one, labelled with what the number means. */
START_TEST(test_render_policy_rank)
{
    metrics_job_sample_t jobs[3] = {
        {.id = 1, .name = "long", .uid = 0, .state = "paused", .has_policy_rank = 1,
         .policy_rank = 3},
        {.id = 2, .name = "short", .uid = 0, .state = "running", .has_policy_rank = 1,
         .policy_rank = 0},
        {.id = 3, .name = "gone", .uid = 0, .state = "done"},
    };
    metrics_snapshot_t s = {.version = "0", .policy = "las", .rank_name = "queue", .jobs = jobs,
                            .job_count = 3};
    metrics_text_t t = {0};
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_ptr_nonnull(strstr(
        t.data, "salus_job_policy_rank{job_id=\"1\",name=\"long\",uid=\"0\",rank=\"queue\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(
        t.data, "salus_job_policy_rank{job_id=\"2\",name=\"short\",uid=\"0\",rank=\"queue\"} 0\n"));
    ck_assert_int_eq(count_lines_starting(t.data, "salus_job_policy_rank{"), 2);
    ck_assert_int_eq(count_lines_starting(t.data, "# TYPE salus_job_policy_rank gauge"), 1);
    metrics_text_reset(&t);
    s.rank_name = NULL; /* a policy without a view: no family */
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_ptr_null(strstr(t.data, "salus_job_policy_rank"));
    metrics_text_free(&t);
}
END_TEST

START_TEST(test_render_empty)
{
    metrics_snapshot_t s = {.version = "0", .policy = "fifo"};
    metrics_text_t t = {0};
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_ptr_nonnull(strstr(t.data, "salus_queue_length 0\n"));
    ck_assert_ptr_null(strstr(t.data, "salus_job_state{"));
    ck_assert_ptr_nonnull(strstr(t.data, "salus_groups{state=\"running\"} 0\n"));
    metrics_text_free(&t);
    /* without job labels: the counts by state, no group's name */
    metrics_group_sample_t g = {.name = "secret", .uid = 5, .state = "waiting", .world = 2};
    s.groups = &g;
    s.group_count = 1;
    s.omit_jobs = 1;
    ck_assert_int_eq(metrics_render(&s, &t), 0);
    ck_assert_ptr_nonnull(strstr(t.data, "salus_groups{state=\"waiting\"} 1\n"));
    ck_assert_ptr_null(strstr(t.data, "secret"));
    metrics_text_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, test_parse_address);
    tcase_add_test(tc, test_loopback);
    tcase_add_test(tc, test_render_policy_rank);
    tcase_add_test(tc, test_escape);
    tcase_add_test(tc, test_numbers);
    tcase_add_test(tc, test_render);
    tcase_add_test(tc, test_render_empty);
    tcase_add_test(tc, test_render_cluster_process);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
