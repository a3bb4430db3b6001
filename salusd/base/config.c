#include "config.h"

#include "log.h"
#include "paths.h"
#include "policy.h"
#include "proto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The names of --policy come from the policies' registry (scheduler-policies/policy.c), so
 * that the help never lists fewer or more than salusd accepts; filled by config_policy_names. */
static char policy_help[256] = "scheduling policy at start (salusctl policy switches it)";

#define ROW(name, type, def, lo, hi, field, help)                                              \
    {name, type, def, lo, hi, offsetof(salusd_config_t, field),                                \
     sizeof(((salusd_config_t *)0)->field), help}

const option_def_t salusd_options[] = {
    ROW("socket", OPTION_STRING, NULL, 0, 0, socket_path,
        "control socket path (default: $SALUS_SOCKET, /run/salus/salusd.sock as root, "
        "else $XDG_RUNTIME_DIR/salus/salusd.sock or /tmp/salus-$UID/salusd.sock)"),
    ROW("config", OPTION_STRING, NULL, 0, 0, config_path, "read options from this file first"),
    ROW("foreground", OPTION_BOOL, "no", 0, 0, foreground,
        "stay in the foreground (as under systemd) instead of detaching"),
    ROW("log-level", OPTION_LOG_LEVEL, "info", 0, 0, log_level,
        "error, warn, info, debug or trace"),
    ROW("log-file", OPTION_STRING, NULL, 0, 0, log_file,
        "once detached (without --foreground), log to this file instead of the terminal "
        "(default: salusd.log in the state directory; salusd-<hash>.log for another socket)"),
    ROW("max-frame-bytes", OPTION_BYTES, "1MiB", 64, 64LL << 20, max_frame_bytes,
        "largest protocol frame accepted from a client"),
    ROW("max-connections", OPTION_INT, "1024", 1, 65536, max_connections,
        "client connections served at once"),
    ROW("max-connections-per-uid", OPTION_INT, "128", 1, 65536, max_connections_per_uid,
        "client connections of one user at once (root and salusd's own user: no cap)"),
    ROW("max-queued-submits-per-uid", OPTION_INT, "64", 1, 65536, max_queued_submits_per_uid,
        "submitted jobs of one user whose program has not registered yet"),
    ROW("max-jobs-per-uid", OPTION_INT, "64", 1, 65536, max_jobs_per_uid,
        "registered (running or waiting) jobs of one user"),
    ROW("user-gpu-share", OPTION_STRING, "0.75", 0, 0, user_gpu_share_text,
        "fraction (0 < F <= 1) of each GPU's memory that one user's admitted jobs may hold; "
        "a job that alone needs more is refused (root and salusd's own user: no cap)"),
    ROW("user-max-jobs", OPTION_INT, "32", 1, 65536, user_max_jobs,
        "admitted jobs of one user at once; more wait (root and salusd's own user: no cap)"),
    ROW("max-output-bytes", OPTION_BYTES, "4MiB", 4096, 1LL << 30, max_output_bytes,
        "replies queued for a client that does not read them before it is disconnected"),
    ROW("max-output-bytes-per-uid", OPTION_BYTES, "8MiB", 4096, 1LL << 32,
        max_output_bytes_per_uid,
        "replies queued for the clients of one user that do not read them, all its "
        "connections together (root's too); past it the connection holding the most is "
        "disconnected"),
    ROW("max-output-bytes-total", OPTION_BYTES, "24MiB", 4096, 1LL << 34, max_output_bytes_total,
        "replies queued for all clients together; past it the connection holding the most is "
        "disconnected"),
    ROW("max-partial-frame-bytes", OPTION_BYTES, "16MiB", 64 << 10, 1LL << 32,
        max_partial_frame_bytes,
        "memory held in partly received frames, all clients together; past it the client "
        "that adds more is disconnected"),
    ROW("hello-timeout-ms", OPTION_INT, "10000", 10, 3600000, hello_timeout_ms,
        "a client that has not said hello this long after connecting is disconnected"),
    ROW("driver", OPTION_STRING, NULL, 0, 0, driver_path,
        "CUDA driver to use (default: the system's libcuda.so.1 if a GPU works, else simgpu)"),
    ROW("chunk-bytes", OPTION_BYTES, "64MiB", 1 << 20, 1LL << 40, chunk_bytes,
        "device memory is handed to jobs in chunks of this size (or larger)"),
    ROW("finished-jobs-kept", OPTION_INT, "100", 0, 100000, finished_jobs_kept,
        "finished jobs listed by ps before the oldest are forgotten"),
    ROW("policy", OPTION_STRING, "pack", 0, 0, policy, policy_help),
    ROW("lane-hold", OPTION_STRING, "gpu", 0, 0, lane_hold_text,
        "what a job holds its lane for: 'gpu' (its GPU work: it gives the lane up at each "
        "quiescent point) or 'iteration' (its whole iteration, host time included)"),
    ROW("lane-memory", OPTION_STRING, "fresh", 0, 0, lane_memory_text,
        "a lane's ephemeral memory: 'fresh' (each job takes chunks of its own) or 'shared' "
        "(one set of chunks per lane, mapped by each of its jobs of one user: a switch moves "
        "no memory)"),
    ROW("wait-log-s", OPTION_INT, "30", 0, 86400, wait_log_s,
        "a job waiting longer than this many seconds (for admission, or for its turn) is "
        "logged once per interval with the job that holds its lane; 0: never"),
    ROW("share-lanes-across-users", OPTION_BOOL, "no", 0, 0, share_lanes_across_users,
        "let jobs of different users share a lane"),
    ROW("gpu-reserve", OPTION_BYTES, "0", 0, 1LL << 50, gpu_reserve_bytes,
        "memory of each GPU kept out of the lanes (the daemon's own context and more)"),
    ROW("job-overhead", OPTION_BYTES, "512MiB", 0, 1LL << 40, job_overhead_bytes,
        "per-job context overhead charged on real GPUs (0 on simgpu)"),
    ROW("provisional-min", OPTION_BYTES, "3GiB", 0, 1LL << 50, provisional_min_bytes,
        "a job without size hints is admitted on a claim of its GPU's free memory where at "
        "least this much is free (at most half the smallest GPU); it keeps the claim until "
        "its sizes are learned"),
    ROW("provisional-max", OPTION_BYTES, "0", 0, 1LL << 50, provisional_max_bytes,
        "the most such a claim may hold, also when it grows for the job (0: no cap, all the "
        "GPU can give it); a job without hints that needs more is out of memory"),
    ROW("metrics", OPTION_STRING, NULL, 0, 0, metrics_address,
        "serve Prometheus metrics at http://HOST:PORT/metrics (127.0.0.1:9400, [::1]:9400; "
        "port 0: any free port, see salusctl status; default: off)"),
    ROW("admin-group", OPTION_STRING, "salus-admin", 0, 0, admin_group,
        "members see and control every user's jobs and may switch the policy"),
    ROW("admin-from-containers", OPTION_BOOL, "no", 0, 0, admin_from_containers,
        "root, salusd's user and admin-group members are administrators also from another "
        "pid or user namespace (a container); default: only in salusd's own namespaces"),
    ROW("allow-group", OPTION_STRING, NULL, 0, 0, allow_group,
        "only root and this group may connect (socket root:GROUP 0660; default: every "
        "local user, socket 0666)"),
    ROW("metrics-timeout-ms", OPTION_INT, "10000", 100, 600000, metrics_timeout_ms,
        "an HTTP connection to the metrics endpoint is closed this long after it opened"),
    ROW("metrics-job-labels", OPTION_BOOL, "no", 0, 0, metrics_job_labels,
        "add per-job samples (job names and uids as labels) to /metrics; anyone who can "
        "reach the endpoint reads them"),
    ROW("state-dir", OPTION_STRING, NULL, 0, 0, state_dir,
        "what a restarted salusd needs (job ids, running jobs, policy state) is kept here "
        "(default: /var/lib/salus as root, else $XDG_STATE_HOME/salus)"),
    ROW("reattach-grace-s", OPTION_INT, "30", 1, 3600, reattach_grace_s,
        "after a restart, jobs that survived it have this long to re-attach; no new job is "
        "admitted before they all did or the time is over"),
    ROW("gang-turns", OPTION_STRING, "on", 0, 0, gang_turns_text,
        "'on': the ranks of a BSP group are granted their GPUs together; 'off' exists only "
        "to compare: ranks take turns one by one, and collectives may deadlock"),
    ROW("gang-slot-iterations", OPTION_INT, "1", 1, 1000, gang_slot_iterations,
        "iterations of each rank in one gang slot before the lanes go back to the policy"),
    ROW("slo-lc-run-max", OPTION_INT, "8", 1, 10000, slo_lc_run_max,
        "slo policy: the most latency-critical iterations a lane grants in a row while a "
        "best-effort job of it waits (the best-effort jobs' starvation bound)"),
    ROW("gate-park-max-ms", OPTION_INT, "100", 1, 60000, gate_park_max_ms,
        "preemption at the gate (slo): the longest a best-effort job parks at a time while a "
        "latency-critical job of its GPU has a request going on"),
    ROW("gate-pass-after-park", OPTION_INT, "2", 1, 1000, gate_pass_after_park,
        "preemption at the gate (slo): submissions of a best-effort thread that pass after a "
        "park reached --gate-park-max-ms, before it may park again"),
    ROW("gate-inflight", OPTION_INT, "2", 1, 1024, gate_inflight,
        "preemption at the gate (slo): k; while a latency-critical job is on its GPU, a "
        "best-effort thread records an event every k launches and waits for the previous one "
        "(at most 2k of its submissions in flight)"),
    ROW("group-kill-grace-s", OPTION_INT, "5", 0, 9, group_kill_grace_s,
        "when a rank fails, the group's other ranks get SIGTERM, then SIGKILL this many "
        "seconds later"),
    ROW("group-form-timeout-s", OPTION_INT, "60", 1, 86400, group_form_timeout_s,
        "a group not every rank of which was submitted yet, whose submitted ranks all exited "
        "0, waits this long for the others (a late rank joins it), then fails: 'rank N never "
        "came'"),
    ROW("ps-user-bytes", OPTION_BYTES, "1GiB", 0, 1LL << 50, ps_user_bytes,
        "parameter-server tables: memory one user's tables may hold on this daemon (table "
        "elements where its workers run, shards where it serves); more is refused"),
    ROW("ps-fed-timeout-ms", OPTION_INT, "600000", 1, 86400000, ps_fed_timeout_ms,
        "federated tables: a round still open after this long (a client that died) is "
        "closed with the pushes it has (a failure timeout: stragglers are decided by work)"),
    ROW("ps-replicas", OPTION_INT, "3", 1, 8, ps_replicas,
        "parameter-server tables opened here keep each shard on this many servers (a "
        "primary and hot standbys; bounded by the table's servers) unless the open names "
        "its own"),
    ROW("ps-net-integrity", OPTION_BOOL, "no", 0, 0, ps_net_integrity,
        "parameter servers: every UCX message between daemons carries an AES-GCM tag keyed "
        "per pair from the cluster key, checked before it is used (off: the data plane "
        "trusts its fabric, as NCCL and MPI do); every daemon of the cluster alike"),
    ROW("ps-rejoin", OPTION_BOOL, "yes", 0, 0, ps_rejoin,
        "parameter servers: a server that a fail-over took out of a table's view (its lease "
        "ended, or its daemon restarted within it) is proposed back once it is a live "
        "member again, catching up by whole-shard copies (no: only salusctl ps-servers "
        "--add adds it)"),
    ROW("cluster", OPTION_STRING, NULL, 0, 0, cluster,
        "join the cluster coordinated by this etcd (etcd://HOST:PORT[,HOST:PORT...]): "
        "groups span nodes; default: a single node"),
    ROW("cluster-node", OPTION_STRING, NULL, 0, 0, cluster_node,
        "this node's name in the cluster (letters, digits, . _ -; default: the host name)"),
    ROW("cluster-listen", OPTION_STRING, NULL, 0, 0, cluster_listen,
        "ADDR:PORT on which the other daemons link to this one (ADDR must be an address "
        "they reach: it is published in etcd); required with --cluster"),
    ROW("cluster-key", OPTION_STRING, NULL, 0, 0, cluster_key,
        "file with the cluster's shared key (owned by salusd's user, mode 0600 or 0400); "
        "daemons prove it to each other; required with --cluster"),
    ROW("cluster-lease-ttl-s", OPTION_INT, "5", 2, 300, cluster_lease_ttl_s,
        "TTL of this node's etcd lease: a node gone (or cut off) this long leaves the cluster "
        "and its groups fail elsewhere"),
    ROW("cluster-prefix", OPTION_STRING, "/salus", 0, 0, cluster_prefix,
        "etcd key prefix under which the cluster keeps its members and groups"),
    ROW("etcd-cacert", OPTION_STRING, NULL, 0, 0, etcd_cacert,
        "CA certificate that etcd's server certificate is checked against (https)"),
    ROW("etcd-cert", OPTION_STRING, NULL, 0, 0, etcd_cert,
        "client certificate salusd presents to etcd (etcd --client-cert-auth)"),
    ROW("etcd-key", OPTION_STRING, NULL, 0, 0, etcd_key, "the client certificate's key"),
};
const size_t salusd_option_count = sizeof(salusd_options) / sizeof(salusd_options[0]);

/* "fifo, srtf, pack, fair, las or gittins": every name of the registry, in its order. */
int salusd_policy_names(char *out, size_t size)
{
    size_t n = policy_count(), used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++) {
        int w = snprintf(out + used, size - used, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                         policy_at(i)->name);
        if (w < 0 || (size_t)w >= size - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}

static void config_policy_help(void)
{
    char names[192];
    if (salusd_policy_names(names, sizeof(names)) == 0)
        snprintf(policy_help, sizeof(policy_help),
                 "scheduling policy at start: %s (salusctl policy switches it)", names);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: salusd [OPTIONS]\n\nThe salus GPU sharing daemon.\n\nOptions:\n");
    options_usage(salusd_options, salusd_option_count, out);
    fprintf(out, "  %-28s %s\n  %-28s %s\n", "--help", "show this help", "--version",
            "show the version");
}

int salusd_config_load(salusd_config_t *cfg, int argc, char **argv)
{
    char err[512];
    int next = 1;

    memset(cfg, 0, sizeof(*cfg));
    config_policy_help();
    if (options_set_defaults(salusd_options, salusd_option_count, cfg) < 0) {
        fprintf(stderr, "salusd: invalid built-in defaults\n");
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("salusd %s (protocol %d)\n", SALUS_VERSION, PROTO_VERSION);
            return 1;
        }
    }
    /* First pass for --config alone, so that the command line overrides the file. */
    salusd_config_t probe = *cfg;
    if (options_parse_args(salusd_options, salusd_option_count, &probe, argc, argv, &next, err,
                           sizeof(err)) < 0) {
        fprintf(stderr, "salusd: %s (see salusd --help)\n", err);
        return -1;
    }
    if (next < argc) {
        fprintf(stderr, "salusd: unexpected argument '%s' (see salusd --help)\n", argv[next]);
        return -1;
    }
    if (probe.config_path[0] &&
        options_load_file(salusd_options, salusd_option_count, cfg, probe.config_path, err,
                          sizeof(err)) < 0) {
        fprintf(stderr, "salusd: config: %s\n", err);
        return -1;
    }
    if (options_parse_args(salusd_options, salusd_option_count, cfg, argc, argv, &next, err,
                           sizeof(err)) < 0) {
        fprintf(stderr, "salusd: %s\n", err);
        return -1;
    }
    char *end = NULL;
    cfg->user_gpu_share = strtod(cfg->user_gpu_share_text, &end);
    if (end == cfg->user_gpu_share_text || *end != '\0' || !(cfg->user_gpu_share > 0) ||
        cfg->user_gpu_share > 1) {
        fprintf(stderr, "salusd: --user-gpu-share '%s': expected a fraction 0 < F <= 1\n",
                cfg->user_gpu_share_text);
        return -1;
    }
    if (strcmp(cfg->lane_hold_text, "gpu") != 0 && strcmp(cfg->lane_hold_text, "iteration") != 0) {
        fprintf(stderr, "salusd: --lane-hold '%s': expected 'gpu' or 'iteration'\n",
                cfg->lane_hold_text);
        return -1;
    }
    if (!policy_find(cfg->policy)) { /* before any device or socket is touched */
        char names[192] = "";
        salusd_policy_names(names, sizeof(names));
        fprintf(stderr, "salusd: --policy '%s': no such policy (expected %s)\n", cfg->policy,
                names);
        return -1;
    }
    cfg->lane_hold_gpu = strcmp(cfg->lane_hold_text, "gpu") == 0;
    if (strcmp(cfg->lane_memory_text, "fresh") != 0 && strcmp(cfg->lane_memory_text, "shared") != 0) {
        fprintf(stderr, "salusd: --lane-memory '%s': expected 'fresh' or 'shared'\n",
                cfg->lane_memory_text);
        return -1;
    }
    cfg->lane_memory_shared = strcmp(cfg->lane_memory_text, "shared") == 0;
    if (strcmp(cfg->gang_turns_text, "on") != 0 && strcmp(cfg->gang_turns_text, "off") != 0) {
        fprintf(stderr, "salusd: --gang-turns '%s': expected 'on' or 'off'\n",
                cfg->gang_turns_text);
        return -1;
    }
    cfg->gang_turns_off = strcmp(cfg->gang_turns_text, "off") == 0;
    if (cfg->cluster[0] && (!cfg->cluster_listen[0] || !cfg->cluster_key[0])) {
        fprintf(stderr, "salusd: --cluster needs --cluster-listen ADDR:PORT and --cluster-key "
                "FILE\n");
        return -1;
    }
    if (!cfg->cluster[0] && (cfg->cluster_listen[0] || cfg->cluster_key[0])) {
        fprintf(stderr, "salusd: --cluster-listen and --cluster-key need --cluster\n");
        return -1;
    }
    if (cfg->cluster[0] && !cfg->cluster_node[0] &&
        (gethostname(cfg->cluster_node, sizeof(cfg->cluster_node) - 1) < 0 ||
         !cfg->cluster_node[0])) {
        fprintf(stderr, "salusd: no host name to name this node: give --cluster-node\n");
        return -1;
    }
    for (const char *p = cfg->cluster_node; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') {
            fprintf(stderr, "salusd: --cluster-node '%s': letters, digits, '.', '_' and '-' "
                    "only\n", cfg->cluster_node);
            return -1;
        }
    if (cfg->cluster_prefix[0] != '/' || strchr(cfg->cluster_prefix, ' ')) {
        fprintf(stderr, "salusd: --cluster-prefix '%s': expected a key prefix starting with "
                "'/'\n", cfg->cluster_prefix);
        return -1;
    }
    if (!cfg->socket_path[0] && salus_default_socket_path(cfg->socket_path,
                                                          sizeof(cfg->socket_path)) < 0) {
        fprintf(stderr, "salusd: the socket path is too long for a Unix socket\n");
        return -1;
    }
    return 0;
}
