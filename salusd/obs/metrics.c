/* The metrics endpoint, daemon side (see metrics.h): a listening socket handed to evhttp on
 * the daemon's event loop, and at each scrape a snapshot of devices, schedulers and jobs
 * rendered by metrics_format.c. Everything runs on the loop's thread. */
#include "metrics.h"

#include "cluster.h"
#include "daemon.h"
#include "groups.h"
#include "jobs.h"
#include "log.h"
#include "ps.h"
#include "gpu_sched.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define METRICS_PATH "/metrics"
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* A scraper sends a short GET: anything bigger is refused by evhttp. */
#define METRICS_MAX_HEADERS_BYTES 8192
#define METRICS_MAX_BODY_BYTES 1024
#define METRICS_IDLE_TIMEOUT_S 10
/* HTTP connections open at once; more are closed as soon as they are accepted */
#define METRICS_MAX_CONNECTIONS 64

/* One HTTP connection and its deadline: evhttp's own timeout is an inactivity timer, so a
 * client trickling bytes would hold a connection (and a descriptor) for ever. */
typedef struct metrics_conn_s {
    struct metrics_s *m;
    struct bufferevent *bev;        /* evhttp's, created by make_bufferevent */
    struct evhttp_connection *evcon; /* NULL until bound */
    struct event *timer;            /* binds at once, then fires at the deadline */
    int expiring;                   /* the deadline is closing it */
    struct metrics_conn_s *next;
} metrics_conn_t;

typedef struct metrics_s {
    salusd_t *daemon;
    struct evhttp *http;
    char bound_address[METRICS_ADDRESS_BYTES];
    /* the previous busy sample of each GPU, for salus_gpu_utilization */
    uint64_t previous_busy_ns[DEVICES_MAX_GPUS];
    uint64_t previous_sample_ns[DEVICES_MAX_GPUS];
    int have_previous[DEVICES_MAX_GPUS];
    double last_utilization[DEVICES_MAX_GPUS];
    metrics_gpu_sample_t gpus[DEVICES_MAX_GPUS];
    metrics_job_sample_t *jobs;
    size_t job_capacity;
    metrics_group_sample_t *groups;
    size_t group_capacity;
    metrics_cluster_sample_t cluster;
    metrics_ps_sample_t ps;
    metrics_process_sample_t process;
    metrics_text_t text;
    uint64_t scrapes;
    metrics_conn_t *conns;
    size_t conn_count;
} metrics_t;

int metrics_check_config(const struct salusd_config_s *cfg)
{
    metrics_address_t address;
    char err[256];
    if (!cfg->metrics_address[0])
        return 0;
    if (metrics_parse_address(cfg->metrics_address, &address, err, sizeof(err)) < 0) {
        fprintf(stderr, "salusd: --metrics: %s\n", err);
        return -1;
    }
    return 0;
}

/* Busy fraction of gpu since the previous sample (clamped to 0..1: a counter that went
 * backwards, a recreated simgpu segment, reads 0). With no time elapsed the last value
 * stands. */
static void sample_gpu(metrics_t *m, int gpu, uint64_t now_ns)
{
    metrics_gpu_sample_t *s = &m->gpus[gpu];
    gpu_sched_gpu_sample_t g;

    memset(s, 0, sizeof(*s));
    s->index = gpu;
    if (gpu_sched_gpu_sample(m->daemon, gpu, &g) < 0)
        return;
    s->name = g.name;
    s->total_bytes = g.total_bytes;
    s->reserved_bytes = g.reserved_bytes;
    s->used_bytes = g.used_bytes;
    s->capacity_bytes = g.capacity_bytes;
    s->persistent_bytes = g.persistent_bytes;
    s->lane_bytes = g.lane_bytes;
    s->lanes = g.lanes;
    if (!g.has_busy)
        return;
    uint64_t busy_ns = g.busy_ns;
    s->has_busy = 1;
    s->busy_ns = busy_ns;
    if (m->have_previous[gpu] && now_ns > m->previous_sample_ns[gpu]) {
        double busy = busy_ns > m->previous_busy_ns[gpu]
                          ? (double)(busy_ns - m->previous_busy_ns[gpu]) : 0.0;
        double ratio = busy / (double)(now_ns - m->previous_sample_ns[gpu]);
        m->last_utilization[gpu] = ratio > 1.0 ? 1.0 : ratio;
    }
    s->has_utilization = m->have_previous[gpu];
    s->utilization = m->last_utilization[gpu];
    m->previous_busy_ns[gpu] = busy_ns;
    m->previous_sample_ns[gpu] = now_ns;
    m->have_previous[gpu] = 1;
}

static int collect(metrics_t *m, metrics_snapshot_t *snap)
{
    salusd_t *d = m->daemon;
    uint64_t now = salusd_now_ns();
    jobs_sample_t js;
    gpu_sched_sample_t ss;
    jobs_sample(d, &js);
    gpu_sched_sample(d, &ss);
    size_t count = js.count;

    memset(snap, 0, sizeof(*snap));
    if (count > m->job_capacity) {
        metrics_job_sample_t *jobs = realloc(m->jobs, count * sizeof(*jobs));
        if (!jobs)
            return -ENOMEM;
        m->jobs = jobs;
        m->job_capacity = count;
    }
    for (int i = 0; i < ss.gpus && i < DEVICES_MAX_GPUS; i++)
        sample_gpu(m, i, now);
    for (size_t i = 0; i < count; i++) {
        jobs_info_t info;
        metrics_job_sample_t *j = &m->jobs[i];
        if (jobs_info_at(d, i, &info) < 0)
            return -EIO;
        j->id = info.id;
        memcpy(j->name, info.name, sizeof(j->name));
        j->uid = (unsigned)info.uid;
        j->state = info.state;
        j->iterations = info.iterations;
        j->gpu_ns = info.busy_ns;
        j->memory_bytes = info.memory_bytes;
        j->budget_bytes = info.budget_bytes;
        j->persistent_bytes = info.persistent_bytes;
        j->ephemeral_peak_bytes = info.ephemeral_peak_bytes;
        j->wait_ns = info.wait_ns;
        j->has_policy_rank = info.has_policy_rank;
        j->policy_rank = info.policy_rank;
        j->latency_target_ns = info.latency_target_ns;
        j->requests = info.requests;
        j->requests_over_target = info.requests_over_target;
        j->request_p50_ns = info.request_p50_ns;
        j->request_p95_ns = info.request_p95_ns;
        j->request_p99_ns = info.request_p99_ns;
        /* not admitted yet, or admitted and waiting for its turn: ps's "waiting" and
         * "paused" */
        snap->queue_length += strcmp(info.state, job_state_name(JOB_WAITING)) == 0 ||
                              strcmp(info.state, job_state_name(JOB_PAUSED)) == 0;
    }
    size_t group_count = groups_count(d);
    if (group_count > m->group_capacity) {
        metrics_group_sample_t *groups = realloc(m->groups, group_count * sizeof(*groups));
        if (!groups)
            return -ENOMEM;
        m->groups = groups;
        m->group_capacity = group_count;
    }
    for (size_t i = 0; i < group_count; i++) {
        groups_sample_t g;
        metrics_group_sample_t *out = &m->groups[i];
        if (groups_sample_at(d, i, &g) < 0)
            return -EIO;
        snprintf(out->name, sizeof(out->name), "%s", g.name);
        out->uid = g.uid;
        out->state = g.state;
        out->world = g.world;
        out->ranks = g.ranks_live;
        out->failed = g.failed != 0;
        out->gang_wait_ns = g.gang_wait_ns;
    }
    snap->groups = m->groups;
    snap->group_count = group_count;
    cluster_sample_t cs;
    snap->cluster = NULL;
    if (cluster_sample(d, &cs) == 0) {
        m->cluster = (metrics_cluster_sample_t){
            .member = (uint64_t)cs.member, .members = cs.members, .leader = (uint64_t)cs.leader,
            .links_up = cs.links_up, .links_refused = cs.links_refused,
            .links_frames_rejected = cs.links_frames_rejected, .messages_sent = cs.messages_sent,
            .messages_received = cs.messages_received, .slots_issued = cs.slots_issued,
            .slots_served = cs.slots_served, .slots_refused = cs.slots_refused,
            .failed_rank = cs.groups_failed_rank,
            .failed_node = cs.groups_failed_node, .failed_etcd = cs.groups_failed_etcd,
            .etcd_errors = cs.etcd_errors, .etcd_keepalives = cs.etcd_keepalives,
            .etcd_leases = cs.etcd_leases, .etcd_ranges = cs.etcd_ranges,
            .etcd_writes = cs.etcd_writes, .etcd_watch_streams = cs.etcd_watch_streams,
            .etcd_watch_events = cs.etcd_watch_events,
            .etcd_txns_failed = cs.etcd_txns_failed};
        snap->cluster = &m->cluster;
    }
    ps_sample_t pss;
    snap->ps = NULL;
    if (ps_report_sample(d, &pss) == 0) {
        m->ps = (metrics_ps_sample_t){
            .tables = pss.tables, .shards = pss.shards, .bytes = pss.bytes,
            .pushes = pss.pushes, .pushes_duplicate = pss.pushes_duplicate, .pulls = pss.pulls,
            .push_bytes = pss.push_bytes, .pull_bytes = pss.pull_bytes,
            .net_bytes_sent = pss.net_bytes_sent, .net_bytes_received = pss.net_bytes_received,
            .updates_sent = pss.updates_sent, .updates_applied = pss.updates_applied,
            .staleness_waits = pss.staleness_waits, .staleness_wait_ns = pss.staleness_wait_ns,
            .refused = pss.refused, .fed_rounds_timed_out = pss.fed_rounds_timed_out,
            .views = pss.views, .shards_moved = pss.shards_moved,
            .shard_copies = pss.shard_copies, .failovers = pss.failovers,
            .failover_last_ns = pss.failover_last_ns};
        snap->ps = &m->ps;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        m->process = (metrics_process_sample_t){
            .user_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000u +
                       (uint64_t)ru.ru_utime.tv_usec * 1000u,
            .system_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000u +
                         (uint64_t)ru.ru_stime.tv_usec * 1000u,
            .max_rss_bytes = (uint64_t)ru.ru_maxrss * 1024u}; /* Linux: KiB */
        snap->process = &m->process;
    }
    for (int st = JOB_DONE; st < JOB_STATE_COUNT; st++)
        snap->jobs_ended[st] = js.ended[st];
    snap->version = SALUS_VERSION;
    snap->policy = ss.policy;
    snap->rank_name = ss.rank_name;
    snap->gpus = m->gpus;
    snap->gpu_count = (size_t)(ss.gpus < DEVICES_MAX_GPUS ? ss.gpus : DEVICES_MAX_GPUS);
    snap->jobs = m->jobs;
    snap->job_count = count;
    snap->omit_jobs = !d->config.metrics_job_labels;
    return 0;
}

static void reply_text(struct evhttp_request *req, int code, const char *reason,
                       const char *body)
{
    struct evbuffer *buf = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (buf)
        evbuffer_add(buf, body, strlen(body));
    evhttp_send_reply(req, code, reason, buf);
    if (buf)
        evbuffer_free(buf);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    metrics_t *m = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
    metrics_snapshot_t snap;

    if (!path || strcmp(path, METRICS_PATH) != 0) {
        reply_text(req, HTTP_NOTFOUND, "Not Found", "not found: salusd serves " METRICS_PATH
                                                    " only\n");
        return;
    }
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        evhttp_add_header(headers, "Allow", "GET, HEAD");
        reply_text(req, 405, "Method Not Allowed", "use GET or HEAD\n");
        return;
    }
    metrics_text_reset(&m->text);
    if (collect(m, &snap) < 0 || metrics_render(&snap, &m->text) < 0) {
        LOG_WARN("metrics: out of memory while rendering a scrape");
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
        return;
    }
    struct evbuffer *buf = evbuffer_new();
    if (!buf || evbuffer_add(buf, m->text.data, m->text.len) < 0) {
        if (buf)
            evbuffer_free(buf);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
        return;
    }
    evhttp_add_header(headers, "Content-Type", METRICS_CONTENT_TYPE);
    evhttp_send_reply(req, HTTP_OK, "OK", buf);
    evbuffer_free(buf);
    m->scrapes++;
    LOG_TRACE("metrics: scrape %llu, %zu bytes", (unsigned long long)m->scrapes, m->text.len);
}

static void conn_forget(metrics_conn_t *mc)
{
    metrics_t *m = mc->m;
    for (metrics_conn_t **p = &m->conns; *p; p = &(*p)->next) {
        if (*p == mc) {
            *p = mc->next;
            break;
        }
    }
    m->conn_count--;
    event_free(mc->timer);
    free(mc);
}

/* evhttp is freeing the connection (reply sent, error, timeout, shutdown). */
static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    metrics_conn_t *mc = arg;
    (void)evcon;
    if (!mc->expiring)
        conn_forget(mc);
}

static void on_conn_timer(evutil_socket_t fd, short events, void *arg)
{
    metrics_conn_t *mc = arg;
    metrics_t *m = mc->m;
    (void)fd;
    (void)events;
    if (!mc->evcon) {
        /* run right after evhttp set the connection up: its callbacks' argument is it */
        void *evcon = NULL;
        bufferevent_getcb(mc->bev, NULL, NULL, NULL, &evcon);
        if (!evcon) {
            conn_forget(mc);
            return;
        }
        mc->evcon = evcon;
        evhttp_connection_set_closecb(mc->evcon, on_conn_closed, mc);
        if (m->conn_count > METRICS_MAX_CONNECTIONS) {
            LOG_DEBUG("metrics: %zu connections open; closing a new one", m->conn_count);
        } else {
            long long ms = m->daemon->config.metrics_timeout_ms;
            struct timeval deadline = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
            evtimer_add(mc->timer, &deadline);
            return;
        }
    } else {
        LOG_DEBUG("metrics: closing a connection open for %lld ms (metrics-timeout-ms)",
                  m->daemon->config.metrics_timeout_ms);
    }
    mc->expiring = 1;
    evhttp_connection_free(mc->evcon);
    conn_forget(mc);
}

/* evhttp's bufferevent for each accepted connection; the connection is bound to its
 * deadline once evhttp has set it up (an event made active now runs before any of its
 * I/O). */
static struct bufferevent *make_bufferevent(struct event_base *base, void *arg)
{
    metrics_t *m = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    metrics_conn_t *mc = bev ? calloc(1, sizeof(*mc)) : NULL;
    if (mc)
        mc->timer = evtimer_new(base, on_conn_timer, mc);
    if (!mc || !mc->timer) {
        LOG_WARN("metrics: out of memory; a connection goes without its deadline");
        free(mc);
        return bev;
    }
    mc->m = m;
    mc->bev = bev;
    mc->next = m->conns;
    m->conns = mc;
    m->conn_count++;
    event_active(mc->timer, EV_TIMEOUT, 1);
    return bev;
}

/* A non-blocking listening socket on address; returns the fd or a negative errno. */
static int listen_on(const metrics_address_t *address)
{
    int one = 1;
    int fd = socket(address->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (address->addr.ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
        bind(fd, (const struct sockaddr *)&address->addr, address->addr_len) < 0 ||
        listen(fd, 64) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int metrics_start(salusd_t *d)
{
    metrics_address_t address;
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    char err[256];
    int fd = -1;

    if (!d->config.metrics_address[0])
        return 0;
    if (metrics_parse_address(d->config.metrics_address, &address, err, sizeof(err)) < 0) {
        LOG_ERROR("--metrics: %s", err);
        return -1;
    }
    metrics_t *m = calloc(1, sizeof(*m));
    if (!m) {
        LOG_ERROR("metrics: out of memory");
        return -1;
    }
    m->daemon = d;
    fd = listen_on(&address);
    if (fd < 0) {
        LOG_ERROR("metrics: cannot listen on %s: %s", d->config.metrics_address, strerror(-fd));
        goto fail;
    }
    if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) < 0 ||
        metrics_format_address((const struct sockaddr *)&bound, m->bound_address,
                               sizeof(m->bound_address)) < 0) {
        LOG_ERROR("metrics: cannot read back the address bound for %s",
                  d->config.metrics_address);
        goto fail;
    }
    m->http = evhttp_new(d->base);
    if (!m->http) {
        LOG_ERROR("metrics: cannot create the HTTP server");
        goto fail;
    }
    /* every method reaches on_request, which answers 405 (with Allow) for all but GET and
     * HEAD; evhttp's own refusal would be a 501 */
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS_BYTES);
    evhttp_set_max_body_size(m->http, METRICS_MAX_BODY_BYTES);
    evhttp_set_timeout(m->http, METRICS_IDLE_TIMEOUT_S);
    evhttp_set_gencb(m->http, on_request, m);
    evhttp_set_bevcb(m->http, make_bufferevent, m);
    if (!evhttp_accept_socket_with_handle(m->http, fd)) {
        LOG_ERROR("metrics: cannot serve on %s", m->bound_address);
        goto fail;
    }
    fd = -1; /* evhttp closes it */
    /* the first scrape's utilization covers the time from now */
    gpu_sched_sample_t ss;
    gpu_sched_sample(d, &ss);
    for (int i = 0; i < ss.gpus && i < DEVICES_MAX_GPUS; i++)
        sample_gpu(m, i, salusd_now_ns());
    d->metrics = m;
    if (metrics_is_loopback((const struct sockaddr *)&bound))
        LOG_INFO("metrics: Prometheus text at http://%s%s", m->bound_address, METRICS_PATH);
    else
        LOG_WARN("metrics: Prometheus text at http://%s%s; this address is not loopback: "
                 "anyone who can reach it can read job names and uids", m->bound_address,
                 METRICS_PATH);
    return 0;

fail:
    if (fd >= 0)
        close(fd);
    if (m->http)
        evhttp_free(m->http);
    free(m);
    return -1;
}

void metrics_stop(salusd_t *d)
{
    metrics_t *m = d->metrics;
    if (!m)
        return;
    evhttp_free(m->http); /* closes the connections: their trackers go */
    while (m->conns) /* not bound yet */
        conn_forget(m->conns);
    metrics_text_free(&m->text);
    free(m->jobs);
    free(m->groups);
    free(m);
    d->metrics = NULL;
}

const char *metrics_bound_address(const salusd_t *d)
{
    return d->metrics ? d->metrics->bound_address : NULL;
}
