/* salusd's options: one table (config.c) used by the command line and --config files. */
#ifndef SALUS_SALUSD_CONFIG_H
#define SALUS_SALUSD_CONFIG_H

#include "options.h"

#include <stddef.h>

typedef struct salusd_config_s {
    char socket_path[108];
    char config_path[4096];
    int foreground;
    int log_level;
    char log_file[4096];         /* a detached salusd logs here (empty: the default) */
    unsigned long long max_frame_bytes;
    long long max_connections;
    long long max_connections_per_uid;
    long long max_queued_submits_per_uid;
    long long max_jobs_per_uid;
    unsigned long long max_output_bytes;
    unsigned long long max_output_bytes_per_uid; /* all connections of one user together */
    unsigned long long max_output_bytes_total;   /* all clients together */
    unsigned long long max_partial_frame_bytes;
    long long hello_timeout_ms;
    char driver_path[4096];
    unsigned long long chunk_bytes;
    long long finished_jobs_kept;
    char policy[32];
    int share_lanes_across_users;
    unsigned long long gpu_reserve_bytes;
    unsigned long long job_overhead_bytes;
    unsigned long long provisional_min_bytes; /* a job without hints: its least claim */
    unsigned long long provisional_max_bytes; /* the most a claim may hold; 0: no cap */
    char metrics_address[64];    /* HOST:PORT of the /metrics endpoint; empty: off */
    char admin_group[64];        /* members see and control every job (access.c) */
    int admin_from_containers;   /* administrators also from other pid/user namespaces */
    char allow_group[64];        /* empty: every local user may connect; else this group */
    long long metrics_timeout_ms;
    long long wait_log_s;        /* log jobs waiting longer than this (0: never) */
    int metrics_job_labels;      /* per-job samples (names, uids) in /metrics */
    char user_gpu_share_text[32]; /* --user-gpu-share as given */
    double user_gpu_share;       /* parsed from it: 0 < F <= 1 */
    long long user_max_jobs;     /* admitted jobs of one user at once */
    char lane_hold_text[16];     /* --lane-hold as given */
    int lane_hold_gpu;           /* 1: jobs give their lanes up at quiescent points */
    char lane_memory_text[16];   /* --lane-memory as given */
    int lane_memory_shared;      /* 1: one set of chunks per lane (job_lane_memory.c) */
    char state_dir[4096];        /* what outlives a restart; empty: the default (state.h) */
    long long reattach_grace_s;  /* survivors of a restart re-attach within this */
    char gang_turns_text[8];     /* --gang-turns as given */
    int gang_turns_off;          /* --gang-turns off: BSP ranks take turns one by one */
    long long gang_slot_iterations; /* iterations of each rank in one gang slot */
    /* the slo policy and preemption at the gate (policy.h slo_lc_run_max, gate_page.h) */
    long long slo_lc_run_max;    /* latency-critical iterations in a row while best-effort waits */
    long long gate_park_max_ms;  /* the longest park of a best-effort job at a time */
    long long gate_pass_after_park; /* its submissions that pass after such a park */
    long long gate_inflight;     /* k: an event every k launches, 2k in flight at most */
    long long group_kill_grace_s; /* a failed group's other ranks: SIGTERM, then SIGKILL */
    long long group_form_timeout_s; /* a forming group whose ranks all ended well waits this
                                     * long for the missing ones, then fails (groups.h) */
    unsigned long long ps_user_bytes; /* parameter-server memory of one user here (ps.h) */
    long long ps_fed_timeout_ms; /* a federated round open this long is closed as it is */
    long long ps_replicas;       /* replicas of each shard of a table opened here (R) */
    int ps_net_integrity;        /* every UCX message between daemons tagged (ps_net.h) */
    int ps_rejoin;               /* a server a fail-over took out of a view is added back */
    /* the cluster role (cluster.h): empty cluster = a single node */
    char cluster[1024];          /* etcd endpoints: etcd://HOST:PORT[,HOST:PORT...] */
    char cluster_node[64];       /* this node's name (empty: the host name) */
    char cluster_listen[64];     /* ADDR:PORT for links from the other daemons */
    char cluster_key[4096];      /* the shared cluster key's file (root-only) */
    long long cluster_lease_ttl_s; /* etcd lease of this node's membership */
    char cluster_prefix[128];    /* etcd key prefix of the cluster */
    char etcd_cacert[4096], etcd_cert[4096], etcd_key[4096]; /* TLS to etcd */
} salusd_config_t;

extern const option_def_t salusd_options[];
extern const size_t salusd_option_count;

/* Defaults, then the --config file (if named on the command line), then the command line.
 * Returns 0, 1 when --help or --version was handled, or -1 with a message printed. */
int salusd_config_load(salusd_config_t *cfg, int argc, char **argv);
/* Every policy name salusd accepts, from the policies' registry: "fifo, srtf, ... or gittins".
 * 0, or -1 when size is too small. */
int salusd_policy_names(char *out, size_t size);

#endif
