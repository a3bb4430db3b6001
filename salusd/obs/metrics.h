/* Subsystem obs/ (libsalusd-obs): /metrics. Reads the subsystems below it (their samples
 * and books); nothing below calls it.
 *
 * The Prometheus metrics endpoint of salusd: GET /metrics on the --metrics HOST:PORT address
 * (off when not given), served by libevent's HTTP server on the daemon's event loop.
 *
 * Two halves:
 * - metrics.c: the daemon side (listening socket, evhttp, collecting a snapshot of the
 *   daemon's state at each scrape);
 * - metrics_format.c: pure helpers with no daemon state and no I/O (address parsing, label
 *   escaping, rendering a snapshot as Prometheus text), unit-tested alone in
 *   tests/unit/check_metrics.c. */
#ifndef SALUS_SALUSD_METRICS_H
#define SALUS_SALUSD_METRICS_H

#include "registry.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct salusd_s;
struct salusd_config_s;

/* ---- daemon side (metrics.c) ---- */

/* Checks the metrics address of the configuration (empty: off). Prints "salusd: --metrics:
 * ..." to stderr and returns -1 when it is not HOST:PORT; main() exits 2 then. */
int metrics_check_config(const struct salusd_config_s *cfg);
/* Listens on the configured address and serves /metrics on d->base. Returns 0 (also when
 * metrics are off), or -1 with the reason logged (address in use, ...). */
int metrics_start(struct salusd_s *d);
/* Closes the listener and every open HTTP connection. Safe when never started. */
void metrics_stop(struct salusd_s *d);
/* The address actually bound ("127.0.0.1:9400", "[::1]:9400"; the real port when the
 * configuration asked for port 0), or NULL when metrics are off. */
const char *metrics_bound_address(const struct salusd_s *d);

/* ---- pure helpers (metrics_format.c) ---- */

#define METRICS_ADDRESS_BYTES 64 /* "[ffff:...:ffff]:65535" and a NUL fit */

typedef struct metrics_address_s {
    struct sockaddr_storage addr;
    socklen_t addr_len;
} metrics_address_t;

/* Parses "A.B.C.D:PORT" or "[IPV6]:PORT" (numeric addresses only: no name lookups; port
 * 0..65535, 0 picks a free port). Returns 0, or -EINVAL with a message in err. */
int metrics_parse_address(const char *text, metrics_address_t *out, char *err, size_t err_size);
/* Writes sa as "A.B.C.D:PORT" or "[IPV6]:PORT". Returns 0, or -EINVAL (other family, or out
 * too small). */
int metrics_format_address(const struct sockaddr *sa, char *out, size_t out_size);
/* 1 when sa is 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
int metrics_is_loopback(const struct sockaddr *sa);

/* Escapes a label value for the text format: backslash, double quote and line feed become
 * \\, \" and \n; bytes that are not valid UTF-8 become U+FFFD (a scrape with invalid UTF-8
 * is rejected whole by Prometheus, and job names come from clients). Works like snprintf:
 * writes at most out_size - 1 bytes and a NUL, returns the length the whole result needs. */
size_t metrics_escape_label(const char *value, char *out, size_t out_size);
/* The same for # HELP text, where only backslash and line feed are escaped. */
size_t metrics_escape_help(const char *text, char *out, size_t out_size);
/* Writes a sample value: "NaN", "+Inf", "-Inf", or the shortest "%g" form that reads back to
 * v. Returns the length (snprintf-like). */
size_t metrics_format_double(double v, char *out, size_t out_size);
/* Writes ns as seconds with all nine decimals ("12.000345678"), exactly. */
size_t metrics_format_ns_as_seconds(uint64_t ns, char *out, size_t out_size);

/* A growable text buffer; {0} is an empty one. failed is set (and the text stays short)
 * when memory ran out. */
typedef struct metrics_text_s {
    char *data;
    size_t len, capacity;
    int failed;
} metrics_text_t;

void metrics_text_reset(metrics_text_t *t);
void metrics_text_free(metrics_text_t *t);

typedef struct metrics_gpu_sample_s {
    int index;
    const char *name;
    uint64_t total_bytes;
    uint64_t reserved_bytes;   /* budgets of the admitted jobs */
    uint64_t used_bytes;       /* chunks handed out */
    uint64_t capacity_bytes;   /* what the lanes may use: total - reserve */
    uint64_t persistent_bytes; /* the lane manager's books: admitted jobs' P (+ overhead) */
    uint64_t lane_bytes;       /* sum of the GPU's lane sizes */
    uint64_t lanes;            /* lanes open on the GPU */
    int has_busy;              /* busy_ns is known (simgpu); no sample otherwise */
    uint64_t busy_ns;
    int has_utilization;       /* utilization is known (has_busy and a previous sample) */
    double utilization;
} metrics_gpu_sample_t;

typedef struct metrics_job_sample_s {
    uint64_t id;
    char name[REGISTRY_NAME_BYTES];
    unsigned uid;
    const char *state;         /* one of job_state_name()'s names */
    uint64_t iterations;
    uint64_t gpu_ns;
    uint64_t memory_bytes;
    uint64_t budget_bytes;
    uint64_t persistent_bytes;
    uint64_t ephemeral_peak_bytes;
    uint64_t wait_ns;          /* waited in total, the wait in progress included */
    int has_policy_rank;       /* the policy's rank of the job (snapshot's rank_name) */
    double policy_rank;
    /* a latency-critical job (latency_target_ns > 0): its requests (job_stats_t) */
    uint64_t latency_target_ns;
    uint64_t requests, requests_over_target;
    uint64_t request_p50_ns, request_p95_ns, request_p99_ns;
} metrics_job_sample_t;

/* A group of ranks (groups.c). */
typedef struct metrics_group_sample_s {
    char name[64];
    unsigned uid;
    const char *state;         /* forming, waiting, running, failed, done */
    uint64_t world;
    uint64_t ranks;            /* ranks submitted and not ended */
    uint64_t failed;           /* 1 when a rank failed it */
    uint64_t gang_wait_ns;     /* its ranks' time held back for the group, summed */
} metrics_group_sample_t;

/* The cluster role (cluster.h), when the daemon is a member. */
typedef struct metrics_cluster_sample_s {
    uint64_t member, members, leader;
    uint64_t links_up, links_refused, links_frames_rejected, messages_sent, messages_received;
    uint64_t slots_issued, slots_served, slots_refused;
    uint64_t failed_rank, failed_node, failed_etcd;
    uint64_t etcd_errors;
    uint64_t etcd_keepalives, etcd_leases, etcd_ranges, etcd_writes;
    uint64_t etcd_watch_streams, etcd_watch_events, etcd_txns_failed;
} metrics_cluster_sample_t;

/* The daemon process itself (getrusage RUSAGE_SELF: every thread). */
typedef struct metrics_process_sample_s {
    uint64_t user_ns, system_ns;
    uint64_t max_rss_bytes;    /* the peak resident set */
} metrics_process_sample_t;

/* The parameter-server role (ps.h): tables, shards and their memory here, what the workers
 * and the servers moved. */
typedef struct metrics_ps_sample_s {
    uint64_t tables, shards, bytes;
    uint64_t pushes, pushes_duplicate, pulls, push_bytes, pull_bytes;
    uint64_t net_bytes_sent, net_bytes_received;
    uint64_t updates_sent, updates_applied;
    uint64_t staleness_waits, staleness_wait_ns;
    uint64_t refused;
    uint64_t fed_rounds_timed_out;
    uint64_t views, shards_moved, shard_copies; /* view changes, what they moved */
    uint64_t failovers, failover_last_ns; /* the workers' side's recoveries, the last's time */
} metrics_ps_sample_t;

typedef struct metrics_snapshot_s {
    const char *version;
    const char *policy;
    const char *rank_name;     /* what the policy's rank of a job means; NULL: none */
    uint64_t queue_length;     /* jobs waiting for admission + jobs parked waiting for a GPU */
    uint64_t jobs_ended[JOB_STATE_COUNT]; /* by final state (done..ended), since start */
    const metrics_gpu_sample_t *gpus;
    size_t gpu_count;
    const metrics_job_sample_t *jobs;
    size_t job_count;
    const metrics_group_sample_t *groups;
    size_t group_count;
    const metrics_cluster_sample_t *cluster; /* NULL: not a cluster member */
    const metrics_ps_sample_t *ps; /* NULL: the parameter-server role is not running */
    const metrics_process_sample_t *process; /* NULL: not shown */
    int omit_jobs;             /* no salus_job_* or per-group families (names and uids stay
                                  private); salus_groups (counts by state) stays */
} metrics_snapshot_t;

/* Appends the snapshot to out in the Prometheus text format (version 0.0.4): every family
 * with # HELP and # TYPE, then its samples. Returns 0, or -ENOMEM (out->failed). */
int metrics_render(const metrics_snapshot_t *s, metrics_text_t *out);

#endif
