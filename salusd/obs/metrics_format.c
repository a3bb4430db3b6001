/* Pure helpers of the metrics endpoint (see metrics.h): no daemon state, no I/O. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- addresses ---- */

static int parse_port(const char *text, uint16_t *port)
{
    unsigned long value = 0;
    size_t n = strlen(text);
    if (n == 0 || n > 5)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -EINVAL;
        value = value * 10 + (unsigned long)(text[i] - '0');
    }
    if (value > 65535)
        return -EINVAL;
    *port = (uint16_t)value;
    return 0;
}

int metrics_parse_address(const char *text, metrics_address_t *out, char *err, size_t err_size)
{
    char host[METRICS_ADDRESS_BYTES];
    const char *port_text;
    uint16_t port = 0;
    int v6 = 0;

    memset(out, 0, sizeof(*out));
    if (!text || !text[0])
        goto bad;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof(host))
            goto bad;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port_text = close + 2;
        v6 = 1;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= sizeof(host))
            goto bad;
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        if (strchr(host, ':')) {
            snprintf(err, err_size, "'%s': write an IPv6 address in brackets, as in [::1]:9400",
                     text);
            return -EINVAL;
        }
        port_text = colon + 1;
    }
    if (parse_port(port_text, &port) < 0) {
        snprintf(err, err_size, "'%s': the port must be a number from 0 to 65535 (0: any free "
                                "port)", text);
        return -EINVAL;
    }
    if (v6) {
        struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1)
            goto bad;
        sa->sin6_family = AF_INET6;
        sa->sin6_port = htons(port);
        out->addr_len = sizeof(*sa);
    } else {
        struct sockaddr_in *sa = (struct sockaddr_in *)&out->addr;
        if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
            goto bad;
        sa->sin_family = AF_INET;
        sa->sin_port = htons(port);
        out->addr_len = sizeof(*sa);
    }
    return 0;

bad:
    snprintf(err, err_size, "'%s': expected HOST:PORT with a numeric IPv4 address "
                            "(127.0.0.1:9400) or an IPv6 address in brackets ([::1]:9400)",
             text ? text : "");
    return -EINVAL;
}

int metrics_format_address(const struct sockaddr *sa, char *out, size_t out_size)
{
    char host[INET6_ADDRSTRLEN];
    int n;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        if (!inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)))
            return -EINVAL;
        n = snprintf(out, out_size, "%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (!inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)))
            return -EINVAL;
        n = snprintf(out, out_size, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    } else {
        return -EINVAL;
    }
    return n < 0 || (size_t)n >= out_size ? -EINVAL : 0;
}

int metrics_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

/* ---- escaping and numbers ---- */

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 when s does not start one
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
static size_t utf8_sequence_length(const unsigned char *s)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

static void put(char *out, size_t out_size, size_t *len, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++, (*len)++)
        if (*len + 1 < out_size)
            out[*len] = bytes[i];
}

static size_t escape(const char *in, int quote, char *out, size_t out_size)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t len = 0;
    while (*s) {
        size_t n = utf8_sequence_length(s);
        if (n == 0) {
            put(out, out_size, &len, "\xEF\xBF\xBD", 3); /* U+FFFD */
            s++;
        } else if (*s == '\\') {
            put(out, out_size, &len, "\\\\", 2);
            s++;
        } else if (*s == '\n') {
            put(out, out_size, &len, "\\n", 2);
            s++;
        } else if (*s == '"' && quote) {
            put(out, out_size, &len, "\\\"", 2);
            s++;
        } else {
            put(out, out_size, &len, (const char *)s, n);
            s += n;
        }
    }
    if (out_size > 0)
        out[len < out_size ? len : out_size - 1] = '\0';
    return len;
}

size_t metrics_escape_label(const char *value, char *out, size_t out_size)
{
    return escape(value, 1, out, out_size);
}

size_t metrics_escape_help(const char *text, char *out, size_t out_size)
{
    return escape(text, 0, out, out_size);
}

size_t metrics_format_double(double v, char *out, size_t out_size)
{
    int n;
    if (isnan(v))
        n = snprintf(out, out_size, "NaN");
    else if (isinf(v))
        n = snprintf(out, out_size, v > 0 ? "+Inf" : "-Inf");
    else {
        /* the shortest precision that reads back exactly */
        for (int precision = 6;; precision++) {
            n = snprintf(out, out_size, "%.*g", precision, v);
            if (precision >= 17 || (n >= 0 && (size_t)n < out_size && strtod(out, NULL) == v))
                break;
        }
    }
    return n < 0 ? 0 : (size_t)n;
}

size_t metrics_format_ns_as_seconds(uint64_t ns, char *out, size_t out_size)
{
    int n = snprintf(out, out_size, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u,
                     ns % 1000000000u);
    return n < 0 ? 0 : (size_t)n;
}

/* ---- the text buffer ---- */

void metrics_text_reset(metrics_text_t *t)
{
    t->len = 0;
    t->failed = 0;
    if (t->data)
        t->data[0] = '\0';
}

void metrics_text_free(metrics_text_t *t)
{
    free(t->data);
    memset(t, 0, sizeof(*t));
}

static int text_reserve(metrics_text_t *t, size_t more)
{
    if (t->failed)
        return -ENOMEM;
    if (t->len + more + 1 <= t->capacity)
        return 0;
    size_t capacity = t->capacity ? t->capacity : 4096;
    while (capacity < t->len + more + 1)
        capacity *= 2;
    char *data = realloc(t->data, capacity);
    if (!data) {
        t->failed = 1;
        return -ENOMEM;
    }
    t->data = data;
    t->capacity = capacity;
    return 0;
}

static void text_printf(metrics_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void text_printf(metrics_text_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || text_reserve(t, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* ---- rendering ---- */

static void family(metrics_text_t *t, const char *name, const char *type, const char *help)
{
    char escaped[1024];
    metrics_escape_help(help, escaped, sizeof(escaped));
    text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, escaped, name, type);
}

/* field_offset: a uint64_t field of metrics_gpu_sample_t */
static void gpu_gauge(metrics_text_t *t, const metrics_snapshot_t *s, const char *name,
                      const char *help, size_t field_offset)
{
    family(t, name, "gauge", help);
    for (size_t i = 0; i < s->gpu_count; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&s->gpus[i] + field_offset, sizeof(v));
        text_printf(t, "%s{gpu=\"%d\"} %" PRIu64 "\n", name, s->gpus[i].index, v);
    }
}

/* field_offset: a uint64_t field of metrics_job_sample_t; seconds: it holds ns, written as
 * seconds */
/* Latency-critical jobs' requests (their iterations): counts and latency quantiles (to
 * within 25 %: latency_hist.h). Nothing when no job is latency-critical. */
static void job_requests(metrics_text_t *t, const metrics_snapshot_t *s)
{
    char escaped[REGISTRY_NAME_BYTES * 3 + 1], number[64];
    size_t lc = 0;
    for (size_t i = 0; i < s->job_count; i++)
        lc += s->jobs[i].latency_target_ns != 0;
    if (lc == 0)
        return;
    family(t, "salus_job_requests_total", "counter",
           "Requests (iterations) of a latency-critical job (salusctl run --latency-target).");
    for (size_t i = 0; i < s->job_count; i++) {
        const metrics_job_sample_t *j = &s->jobs[i];
        if (!j->latency_target_ns)
            continue;
        metrics_escape_label(j->name, escaped, sizeof(escaped));
        text_printf(t, "salus_job_requests_total{job_id=\"%" PRIu64 "\",name=\"%s\",uid=\"%u\"} %"
                       PRIu64 "\n", j->id, escaped, j->uid, j->requests);
    }
    family(t, "salus_job_requests_over_target_total", "counter",
           "Requests of a latency-critical job that took longer than its latency target.");
    for (size_t i = 0; i < s->job_count; i++) {
        const metrics_job_sample_t *j = &s->jobs[i];
        if (!j->latency_target_ns)
            continue;
        metrics_escape_label(j->name, escaped, sizeof(escaped));
        text_printf(t, "salus_job_requests_over_target_total{job_id=\"%" PRIu64 "\",name=\"%s\","
                       "uid=\"%u\"} %" PRIu64 "\n", j->id, escaped, j->uid,
                    j->requests_over_target);
    }
    family(t, "salus_job_request_latency_seconds", "gauge",
           "Quantiles of a latency-critical job's request latency (from its first submission to "
           "the synchronisation that ends it), to within 25 %.");
    for (size_t i = 0; i < s->job_count; i++) {
        const metrics_job_sample_t *j = &s->jobs[i];
        static const char *const q[] = {"0.5", "0.95", "0.99"};
        if (!j->latency_target_ns)
            continue;
        uint64_t ns[] = {j->request_p50_ns, j->request_p95_ns, j->request_p99_ns};
        metrics_escape_label(j->name, escaped, sizeof(escaped));
        for (int k = 0; k < 3; k++) {
            metrics_format_double((double)ns[k] / 1e9, number, sizeof(number));
            text_printf(t, "salus_job_request_latency_seconds{job_id=\"%" PRIu64 "\",name=\"%s\","
                           "uid=\"%u\",quantile=\"%s\"} %s\n", j->id, escaped, j->uid, q[k],
                        number);
        }
    }
}

static void job_value(metrics_text_t *t, const metrics_snapshot_t *s, const char *name,
                      const char *type, const char *help, size_t field_offset, int seconds)
{
    char labels[512], name_escaped[REGISTRY_NAME_BYTES * 3 + 1], value[32];
    family(t, name, type, help);
    for (size_t i = 0; i < s->job_count; i++) {
        const metrics_job_sample_t *j = &s->jobs[i];
        uint64_t v;
        memcpy(&v, (const char *)j + field_offset, sizeof(v));
        metrics_escape_label(j->name, name_escaped, sizeof(name_escaped));
        snprintf(labels, sizeof(labels), "job_id=\"%" PRIu64 "\",name=\"%s\",uid=\"%u\"", j->id,
                 name_escaped, j->uid);
        if (seconds)
            metrics_format_ns_as_seconds(v, value, sizeof(value));
        else
            snprintf(value, sizeof(value), "%" PRIu64, v);
        text_printf(t, "%s{%s} %s\n", name, labels, value);
    }
}

/* field_offset: a uint64_t field of metrics_group_sample_t; seconds: as in job_value */
/* The cluster role's families: one row per sample (a family's later rows, help NULL, add
 * samples under the previous row's family). */
static void cluster_families(metrics_text_t *t, const metrics_cluster_sample_t *c)
{
    static const struct {
        const char *family, *type, *help, *labels;
        size_t offset;
    } rows[] = {
#define CL(field) offsetof(metrics_cluster_sample_t, field)
        {"salus_cluster_member", "gauge",
         "1 while this node is in the cluster (its etcd lease is alive).", "", CL(member)},
        {"salus_cluster_members", "gauge", "Nodes listed in etcd as members.", "", CL(members)},
        {"salus_cluster_leader", "gauge", "1 when this node orders the gang slots.", "",
         CL(leader)},
        {"salus_cluster_links_up", "gauge", "Links this daemon dialed that are up.", "",
         CL(links_up)},
        {"salus_cluster_links_refused_total", "counter",
         "Link connections refused (no proof of the cluster key, not a member, bad frames).", "",
         CL(links_refused)},
        {"salus_cluster_link_frames_rejected_total", "counter",
         "Frames from linked daemons that did not decode.", "", CL(links_frames_rejected)},
        {"salus_cluster_messages_total", "counter", "Messages on the daemon links.",
         "{direction=\"sent\"}", CL(messages_sent)},
        {"salus_cluster_messages_total", NULL, NULL, "{direction=\"received\"}",
         CL(messages_received)},
        {"salus_cluster_slots_total", "counter",
         "Gang slots: issued by this node as leader, served on this node, refused (of a former "
         "leader's term, or from a node that does not lead).", "{kind=\"issued\"}",
         CL(slots_issued)},
        {"salus_cluster_slots_total", NULL, NULL, "{kind=\"served\"}", CL(slots_served)},
        {"salus_cluster_slots_total", NULL, NULL, "{kind=\"refused\"}", CL(slots_refused)},
        {"salus_cluster_group_failures_total", "counter",
         "Cluster groups failed here, by cause: a rank, a node gone, etcd lost.",
         "{cause=\"rank\"}", CL(failed_rank)},
        {"salus_cluster_group_failures_total", NULL, NULL, "{cause=\"node\"}", CL(failed_node)},
        {"salus_cluster_group_failures_total", NULL, NULL, "{cause=\"etcd\"}", CL(failed_etcd)},
        {"salus_cluster_etcd_errors_total", "counter",
         "etcd requests that failed (unreachable, refused).", "", CL(etcd_errors)},
        {"salus_cluster_etcd_requests_total", "counter",
         "Requests this node sent to etcd, by kind: lease keepalives (every TTL/3), other "
         "lease requests, ranges (reads), writes (put, delete, txn), watch streams opened.",
         "{kind=\"keepalive\"}", CL(etcd_keepalives)},
        {"salus_cluster_etcd_requests_total", NULL, NULL, "{kind=\"lease\"}", CL(etcd_leases)},
        {"salus_cluster_etcd_requests_total", NULL, NULL, "{kind=\"range\"}", CL(etcd_ranges)},
        {"salus_cluster_etcd_requests_total", NULL, NULL, "{kind=\"write\"}", CL(etcd_writes)},
        {"salus_cluster_etcd_requests_total", NULL, NULL, "{kind=\"watch\"}",
         CL(etcd_watch_streams)},
        {"salus_cluster_etcd_watch_events_total", "counter",
         "Events etcd's watches delivered to this node (members, leader, group records).", "",
         CL(etcd_watch_events)},
        {"salus_cluster_etcd_txns_failed_total", "counter",
         "Transactions (compare-and-swap writes) etcd answered with their compare failed: "
         "another node wrote the key first.", "", CL(etcd_txns_failed)},
#undef CL
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].help)
            family(t, rows[i].family, rows[i].type, rows[i].help);
        uint64_t value;
        memcpy(&value, (const char *)c + rows[i].offset, sizeof(value));
        text_printf(t, "%s%s %" PRIu64 "\n", rows[i].family, rows[i].labels, value);
    }
}

/* The parameter-server role's families, in the same table form as the cluster's (seconds:
 * a nanosecond field shown in seconds). */
static void ps_families(metrics_text_t *t, const metrics_ps_sample_t *p)
{
    static const struct {
        const char *family, *type, *help, *labels;
        size_t offset;
        int seconds;
    } rows[] = {
#define PSF(field) offsetof(metrics_ps_sample_t, field)
        {"salus_ps_tables", "gauge", "Parameter-server tables open on this daemon.", "",
         PSF(tables), 0},
        {"salus_ps_shards", "gauge", "Table shards this daemon serves.", "", PSF(shards), 0},
        {"salus_ps_bytes", "gauge",
         "Memory of the tables here: shards served and the clocks being summed.", "",
         PSF(bytes), 0},
        {"salus_ps_pushes_total", "counter",
         "Workers' pushes: taken (added once), and retries of one taken already (not added "
         "again).", "{kind=\"new\"}", PSF(pushes), 0},
        {"salus_ps_pushes_total", NULL, NULL, "{kind=\"duplicate\"}", PSF(pushes_duplicate), 0},
        {"salus_ps_pulls_total", "counter", "Workers' pulls answered.", "", PSF(pulls), 0},
        {"salus_ps_payload_bytes_total", "counter", "Bytes of the workers' pushes and pulls.",
         "{op=\"push\"}", PSF(push_bytes), 0},
        {"salus_ps_payload_bytes_total", NULL, NULL, "{op=\"pull\"}", PSF(pull_bytes), 0},
        {"salus_ps_net_bytes_total", "counter", "Bytes between daemons over UCX.",
         "{direction=\"sent\"}", PSF(net_bytes_sent), 0},
        {"salus_ps_net_bytes_total", NULL, NULL, "{direction=\"received\"}",
         PSF(net_bytes_received), 0},
        {"salus_ps_updates_total", "counter",
         "Per-shard updates: made by this node's workers, applied to the shards here.",
         "{kind=\"sent\"}", PSF(updates_sent), 0},
        {"salus_ps_updates_total", NULL, NULL, "{kind=\"applied\"}", PSF(updates_applied), 0},
        {"salus_ps_staleness_waits_total", "counter",
         "Pulls held back by their table's sync bound.", "", PSF(staleness_waits), 0},
        {"salus_ps_staleness_wait_seconds_total", "counter",
         "Time pulls were held back by their table's sync bound.", "", PSF(staleness_wait_ns),
         1},
        {"salus_ps_refused_total", "counter",
         "Requests refused: bad input, quota, access, bad messages from other daemons.", "",
         PSF(refused), 0},
        {"salus_ps_fed_rounds_timed_out_total", "counter",
         "Federated rounds closed by --ps-fed-timeout-ms with the pushes they had.", "",
         PSF(fed_rounds_timed_out), 0},
        {"salus_ps_views_total", "counter",
         "Table views taken here (replicas: fail-over, a server joined or left).", "",
         PSF(views), 0},
        {"salus_ps_shards_moved_total", "counter",
         "Shards whose primary changed with those views (of the tables here).", "",
         PSF(shards_moved), 0},
        {"salus_ps_shard_copies_total", "counter",
         "Whole-state copies of shards sent (standbys caught up, state handed over).", "",
         PSF(shard_copies), 0},
        {"salus_ps_failovers_total", "counter",
         "Recoveries of this node's workers' updates and reads that could not reach a shard's "
         "primary (answered again after a view change).", "", PSF(failovers), 0},
        {"salus_ps_failover_seconds", "gauge",
         "The last recovery's time: from the first update or read that could not reach a "
         "primary to the first answered after it.", "", PSF(failover_last_ns), 1},
#undef PSF
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].help)
            family(t, rows[i].family, rows[i].type, rows[i].help);
        uint64_t v;
        char value[32];
        memcpy(&v, (const char *)p + rows[i].offset, sizeof(v));
        if (rows[i].seconds)
            metrics_format_ns_as_seconds(v, value, sizeof(value));
        else
            snprintf(value, sizeof(value), "%" PRIu64, v);
        text_printf(t, "%s%s %s\n", rows[i].family, rows[i].labels, value);
    }
}

static void group_value(metrics_text_t *t, const metrics_snapshot_t *s, const char *name,
                        const char *type, const char *help, size_t field_offset, int seconds)
{
    char escaped[64 * 3 + 1], value[32];
    family(t, name, type, help);
    for (size_t i = 0; i < s->group_count; i++) {
        const metrics_group_sample_t *g = &s->groups[i];
        uint64_t v;
        memcpy(&v, (const char *)g + field_offset, sizeof(v));
        metrics_escape_label(g->name, escaped, sizeof(escaped));
        if (seconds)
            metrics_format_ns_as_seconds(v, value, sizeof(value));
        else
            snprintf(value, sizeof(value), "%" PRIu64, v);
        text_printf(t, "%s{group=\"%s\",uid=\"%u\"} %s\n", name, escaped, g->uid, value);
    }
}

int metrics_render(const metrics_snapshot_t *s, metrics_text_t *t)
{
    char escaped[1024], value[64];

    family(t, "salus_build_info", "gauge", "salusd's version; the value is always 1.");
    metrics_escape_label(s->version, escaped, sizeof(escaped));
    text_printf(t, "salus_build_info{version=\"%s\"} 1\n", escaped);

    family(t, "salus_policy_info", "gauge",
           "The scheduling policy in force (salusctl policy switches it); always 1.");
    metrics_escape_label(s->policy, escaped, sizeof(escaped));
    text_printf(t, "salus_policy_info{policy=\"%s\"} 1\n", escaped);

    family(t, "salus_queue_length", "gauge",
           "Jobs waiting for admission plus admitted jobs waiting for their turn (ps states "
           "waiting and paused).");
    text_printf(t, "salus_queue_length %" PRIu64 "\n", s->queue_length);

    family(t, "salus_jobs_ended_total", "counter",
           "Jobs that ended since salusd started, by how: done (exit status 0), failed (another "
           "status, or refused), killed (by a signal), ended (status unknown).");
    for (int st = JOB_DONE; st < JOB_STATE_COUNT; st++)
        text_printf(t, "salus_jobs_ended_total{state=\"%s\"} %" PRIu64 "\n",
                    job_state_name((job_state_t)st), s->jobs_ended[st]);

    family(t, "salus_gpu_info", "gauge", "Each GPU salusd owns, with its name; always 1.");
    for (size_t i = 0; i < s->gpu_count; i++) {
        metrics_escape_label(s->gpus[i].name ? s->gpus[i].name : "", escaped, sizeof(escaped));
        text_printf(t, "salus_gpu_info{gpu=\"%d\",name=\"%s\"} 1\n", s->gpus[i].index, escaped);
    }
    gpu_gauge(t, s, "salus_gpu_memory_total_bytes", "Memory of the GPU.",
              offsetof(metrics_gpu_sample_t, total_bytes));
    gpu_gauge(t, s, "salus_gpu_memory_reserved_bytes",
              "Memory booked on the GPU: the admitted jobs' persistent memory plus the "
              "lanes (jobs sharing a lane count it once).",
              offsetof(metrics_gpu_sample_t, reserved_bytes));
    gpu_gauge(t, s, "salus_gpu_memory_used_bytes",
              "GPU memory handed out to jobs in chunks.",
              offsetof(metrics_gpu_sample_t, used_bytes));
    gpu_gauge(t, s, "salus_gpu_memory_capacity_bytes",
              "Memory the lanes may use: total minus the configured reserve.",
              offsetof(metrics_gpu_sample_t, capacity_bytes));
    gpu_gauge(t, s, "salus_gpu_memory_persistent_bytes",
              "Persistent memory of the admitted jobs (with their context overhead), as booked "
              "by the lane manager.",
              offsetof(metrics_gpu_sample_t, persistent_bytes));
    gpu_gauge(t, s, "salus_gpu_memory_lane_bytes", "Sum of the sizes of the GPU's lanes.",
              offsetof(metrics_gpu_sample_t, lane_bytes));
    gpu_gauge(t, s, "salus_gpu_lanes", "Lanes open on the GPU.",
              offsetof(metrics_gpu_sample_t, lanes));

    family(t, "salus_gpu_busy_seconds_total", "counter",
           "Time the GPU spent running kernels. Known on simgpu only: on a real GPU there is "
           "no sample rather than a made-up 0.");
    for (size_t i = 0; i < s->gpu_count; i++) {
        if (!s->gpus[i].has_busy)
            continue;
        metrics_format_ns_as_seconds(s->gpus[i].busy_ns, value, sizeof(value));
        text_printf(t, "salus_gpu_busy_seconds_total{gpu=\"%d\"} %s\n", s->gpus[i].index,
                    value);
    }
    family(t, "salus_gpu_utilization", "gauge",
           "Busy fraction of the GPU (0 to 1) between the previous scrape (of any scraper) "
           "and this one; the first scrape covers the time since the endpoint started. "
           "simgpu only, like salus_gpu_busy_seconds_total.");
    for (size_t i = 0; i < s->gpu_count; i++) {
        if (!s->gpus[i].has_utilization)
            continue;
        metrics_format_double(s->gpus[i].utilization, value, sizeof(value));
        text_printf(t, "salus_gpu_utilization{gpu=\"%d\"} %s\n", s->gpus[i].index, value);
    }

    static const char *const group_states[] = {"forming", "waiting", "running", "failed", "done"};
    family(t, "salus_groups", "gauge",
           "Groups of ranks (distributed jobs) by state: forming (not every rank submitted), "
           "waiting (a rank not admitted), running, failed, done (ended groups: the last few).");
    for (size_t k = 0; k < sizeof(group_states) / sizeof(group_states[0]); k++) {
        uint64_t n = 0;
        for (size_t i = 0; i < s->group_count; i++)
            n += s->groups[i].state && strcmp(s->groups[i].state, group_states[k]) == 0;
        text_printf(t, "salus_groups{state=\"%s\"} %" PRIu64 "\n", group_states[k], n);
    }
    if (s->process) {
        family(t, "salus_daemon_cpu_seconds_total", "counter",
               "CPU time salusd used since it started (getrusage), by mode.");
        metrics_format_ns_as_seconds(s->process->user_ns, value, sizeof(value));
        text_printf(t, "salus_daemon_cpu_seconds_total{mode=\"user\"} %s\n", value);
        metrics_format_ns_as_seconds(s->process->system_ns, value, sizeof(value));
        text_printf(t, "salus_daemon_cpu_seconds_total{mode=\"system\"} %s\n", value);
        family(t, "salus_daemon_max_resident_bytes", "gauge",
               "The largest resident set salusd had since it started (getrusage).");
        text_printf(t, "salus_daemon_max_resident_bytes %" PRIu64 "\n", s->process->max_rss_bytes);
    }
    if (s->cluster)
        cluster_families(t, s->cluster);
    if (s->ps)
        ps_families(t, s->ps);
    if (s->omit_jobs)
        return t->failed ? -ENOMEM : 0;
    group_value(t, s, "salus_group_world", "gauge", "Ranks the group was declared with.",
                offsetof(metrics_group_sample_t, world), 0);
    group_value(t, s, "salus_group_ranks", "gauge", "The group's ranks submitted and not ended.",
                offsetof(metrics_group_sample_t, ranks), 0);
    group_value(t, s, "salus_group_failed", "gauge",
                "1 when one of the group's ranks failed it (salusctl groups says which and how).",
                offsetof(metrics_group_sample_t, failed), 0);
    group_value(t, s, "salus_group_gang_wait_seconds_total", "counter",
                "Time the group's ranks were held back for the group (waiting for the other "
                "ranks, for their gang's slot, or for the slowest rank), summed over ranks.",
                offsetof(metrics_group_sample_t, gang_wait_ns), 1);
    /* A state set, as kube-state-metrics does for pod phases: one series per job and state,
     * 1 for the job's state and 0 for the others, so that no series vanishes when a job
     * changes state. */
    family(t, "salus_job_state", "gauge",
           "1 for the job's current state, 0 for the others (running: holds its GPU now; "
           "paused: admitted, waiting for its turn; waiting: not yet admitted).");
    for (size_t i = 0; i < s->job_count; i++) {
        const metrics_job_sample_t *j = &s->jobs[i];
        metrics_escape_label(j->name, escaped, sizeof(escaped));
        for (size_t st = 0; st < JOB_SHOWN_STATE_COUNT; st++) {
            const char *name = job_shown_state_name(st);
            text_printf(t, "salus_job_state{job_id=\"%" PRIu64 "\",name=\"%s\",uid=\"%u\","
                           "state=\"%s\"} %d\n", j->id, escaped, j->uid, name,
                        j->state && strcmp(j->state, name) == 0);
        }
    }
    job_value(t, s, "salus_job_iterations_total", "counter",
              "Iterations the job completed (found by the shim at synchronisation points).",
              offsetof(metrics_job_sample_t, iterations), 0);
    job_value(t, s, "salus_job_gpu_seconds_total", "counter",
              "The job's GPU time: the sum of its iteration durations as the shim measured "
              "them (ps: gpu_time_ms).", offsetof(metrics_job_sample_t, gpu_ns), 1);
    job_value(t, s, "salus_job_memory_bytes", "gauge",
              "GPU memory handed to the job in chunks (0 once it ended).",
              offsetof(metrics_job_sample_t, memory_bytes), 0);
    job_value(t, s, "salus_job_memory_budget_bytes", "gauge",
              "The job's memory budget (its hints, or the default).",
              offsetof(metrics_job_sample_t, budget_bytes), 0);
    job_value(t, s, "salus_job_persistent_bytes", "gauge",
              "Memory the job keeps across iterations, as the shim last reported it.",
              offsetof(metrics_job_sample_t, persistent_bytes), 0);
    job_value(t, s, "salus_job_ephemeral_peak_bytes", "gauge",
              "Highest memory the job used within one iteration above its persistent memory.",
              offsetof(metrics_job_sample_t, ephemeral_peak_bytes), 0);
    job_value(t, s, "salus_job_wait_seconds", "gauge",
              "Time the job has waited, for admission and for its turns, the wait going on "
              "now included (ps: wait_time_ms).", offsetof(metrics_job_sample_t, wait_ns), 1);
    job_requests(t, s);
    if (s->rank_name) {
        metrics_escape_label(s->rank_name, value, sizeof(value));
        family(t, "salus_job_policy_rank", "gauge",
               "The policy's rank of the job, named by the rank label (las: its queue, lower "
               "runs first; gittins: its Gittins index in 1/s, higher runs first).");
        for (size_t i = 0; i < s->job_count; i++) {
            const metrics_job_sample_t *j = &s->jobs[i];
            char number[64];
            if (!j->has_policy_rank)
                continue;
            metrics_escape_label(j->name, escaped, sizeof(escaped));
            metrics_format_double(j->policy_rank, number, sizeof(number));
            text_printf(t, "salus_job_policy_rank{job_id=\"%" PRIu64 "\",name=\"%s\",uid=\"%u\","
                           "rank=\"%s\"} %s\n", j->id, escaped, j->uid, value, number);
        }
    }
    return t->failed ? -ENOMEM : 0;
}
