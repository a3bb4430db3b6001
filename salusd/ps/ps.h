/* Subsystem ps/ (libsalusd-ps): the parameter-server service over ps-core/. Calls only
 * cluster/, jobs/, sched/, base/ and the pure modules; hears them through ps_jobs_observer and
 * the cluster_observer_t it registers; exports its rows of the request table (ps_ops).
 *
 * The parameter-server role of salusd (README: Parameter servers).
 *
 * Tables belong to a group (uid, group name): a table's name is looked up in the caller's
 * group only, so a worker of another group or user never reaches it. A table is cut into
 * shards (ps-core/ps_core.h) placed on a consistent-hash ring over the table's server set: the
 * daemons of the group's nodes (a single node: this daemon), or the nodes named at open. The
 * ring and its epoch live in etcd (P/ps/UID/GROUP/TABLE, created by a transaction only when
 * absent; later openers must agree on count, rule, sync and servers) when the daemon is a
 * cluster member; on a single node it is this daemon alone.
 *
 * Each node with workers aggregates its local workers' pushes per clock (BSP, SSP) and sends
 * one update per shard per clock to the shard's server, over ps_net (UCX) or directly when the
 * server is this daemon; under ASP each push goes on at once. Pulls are answered by the shards'
 * servers once their state satisfies the sync mode's bound (ps_sync_min_done).
 *
 * Memory: every table's element bytes are charged, on the daemon of the opening worker, to the
 * owning user (--ps-user-bytes, default 1GiB per user; root and the daemon's user included);
 * a server charges its shards to the same user. Over the quota: refused with -EDQUOT. The
 * clocks' sums a node's aggregation and a server's shards hold besides (at most the sync
 * mode's window + 2 clocks of the table: ps_sync_window) are counted in the same quota: a
 * push that would start a clock's sum over it is refused with -EDQUOT. A push or clock more
 * than the window ahead of the slowest local rank (BSP 1, SSP:s s + 1) is refused with
 * -EAGAIN (a correct worker, which pulls each clock, never gets there).
 *
 * This file is the interface between the local endpoint (ps_local.c: the workers' requests on
 * the daemon's socket) and the service (ps_service.c and its parts). Every call that takes a
 * callback either returns a negative errno (with err set, and the callback is never called) or
 * returns 0 and calls the callback exactly once, later (never from inside the call), unless
 * ps_forget_owner(owner) came first. */
#ifndef SALUS_SALUSD_PS_H
#define SALUS_SALUSD_PS_H

#include "daemon.h"
#include "jobs_observer.h"
#include "ps_core.h"
#include "ps_fed.h"

#define PS_SERVERS_BYTES 1024 /* "node,node,..." */

/* Who is asking: filled by ps_local.c from the job registered by the connection's process
 * (never from what the client says). */
typedef struct ps_worker_s {
    uid_t uid;
    uint64_t group_id;        /* groups.c's id */
    const char *group;        /* the group's name */
    uint32_t rank, world;
    uint64_t job_id;
    const void *owner;        /* the requester (for ps_forget_owner) */
} ps_worker_t;

typedef struct ps_table_spec_s {
    char name[PS_NAME_BYTES];
    uint64_t count;            /* float32 elements, >= 1 */
    ps_rule_t rule;            /* unused when federated */
    ps_sync_t sync;
    char servers[PS_SERVERS_BYTES]; /* "": the group's nodes */
    int federated;             /* 1: rule text "fedavg:..." (ps_fed.h), in fed; one daemon
                                * serves it (salusd/ps/ps_fed_table.c) */
    ps_fed_spec_t fed;
    uint32_t replicas;         /* R, 1 .. PS_MAX_REPLICAS; 0: the daemon's --ps-replicas */
} ps_table_spec_t;

/* The identity of a push: a retried push carries the same id and is applied once. */
typedef struct ps_push_id_s {
    uint32_t rank;
    uint64_t clock;
    uint64_t seq;              /* per (worker, table), strictly increasing from 1 */
} ps_push_id_t;

/* What a pull saw (salus_ps.h's salus_ps_read_t). */
typedef struct ps_read_s {
    uint64_t clock;            /* the reader's clock */
    uint64_t done;             /* the least done among the shards read (ps_core.h) */
    uint64_t done_at_request;  /* the least done when the request reached the shards */
    uint64_t waited_ns;        /* time held back by the sync bound (0: none) */
    int waited;
} ps_read_t;

typedef void (*ps_done_fn)(void *arg, int rc, const char *err);
typedef void (*ps_pull_fn)(void *arg, int rc, const char *err, const ps_read_t *read);

int ps_start(salusd_t *d);    /* after cluster_start; 0 or -1 (logged) */
void ps_stop(salusd_t *d);

/* Opens (creating on first open) table spec->name of the worker's group. done(rc): 0, or
 * -EINVAL (a spec that disagrees with the table's: "table 'w' has 1000 elements, not 2000"),
 * -EDQUOT (over the user's quota), -EHOSTUNREACH (a server is not a member), ...
 * On success *handle names the table in later calls (stable while the table lives). */
int ps_open(salusd_t *d, const ps_worker_t *w, const ps_table_spec_t *spec, uint64_t *handle,
            ps_done_fn done, void *arg, char *err, size_t err_size);
/* The element count of an open table (0: unknown handle or not the worker's group). */
uint64_t ps_table_count(salusd_t *d, const ps_worker_t *w, uint64_t handle);
/* A push of n values (copied before the call returns) for [offset, offset + n), or for the
 * element indices keys[0..n-1] (keys != NULL). -EINVAL (range, key, clock, non-finite value),
 * -ENOENT (handle). done(rc) when taken: rc 0 new, 1 a duplicate of a push taken before
 * (applied once), for this call alone. */
int ps_push(salusd_t *d, const ps_worker_t *w, uint64_t handle, const ps_push_id_t *id,
            uint64_t offset, uint64_t n, const uint64_t *keys, const float *values,
            ps_done_fn done, void *arg, char *err, size_t err_size);
/* The worker ends its clock `clock` (its current one) of the table. */
int ps_clock(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t clock,
             ps_done_fn done, void *arg, char *err, size_t err_size);
/* Reads [offset, offset + n) into out (the caller's until done is called or the owner is
 * forgotten) once the state satisfies the table's bound for a reader at clock. */
int ps_pull(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t clock,
            uint64_t offset, uint64_t n, float *out, ps_pull_fn done, void *arg, char *err,
            size_t err_size);
/* The requester is gone: no callback for it is called after this. */
void ps_forget_owner(salusd_t *d, const void *owner);
/* A group ended here (all its local ranks over): its tables' local state goes. */
void ps_group_over(salusd_t *d, uint64_t group_id);

/* For salusctl groups: the value of a group's "tables" key, the list [{name, count, rule,
 * sync, servers, epoch, shards, shards_here, bytes_here, done, view, view_servers, replicas,
 * primaries_here, shards_moved, replica_copies}] of the group's tables on this daemon (an
 * empty list when none; done: the least done among the shards here, nil when none is here;
 * view: the number of the server view in force here; shards_moved: primaries its changes
 * moved, replica_copies: replicas they added). */
struct msgpack_packer;
void ps_report_group_tables(salusd_t *d, uint64_t group_id, struct msgpack_packer *pk);
/* What the parameter servers hear of the jobs subsystem (main registers it): a group over
 * (ps_group_over), its tables for the groups op (ps_report_group_tables). */
/* The parameter servers' rows of the request table (ps_ops.c). */
extern const server_op_t ps_ops[];
extern const jobs_observer_t ps_jobs_observer;

/* For /metrics. */
typedef struct ps_sample_s {
    uint64_t tables, shards;                 /* here */
    uint64_t bytes;                          /* tables' memory here */
    uint64_t pushes, pushes_duplicate, pulls;
    uint64_t push_bytes, pull_bytes;         /* workers' payloads on this daemon */
    uint64_t net_bytes_sent, net_bytes_received;
    uint64_t updates_sent, updates_applied;  /* per-shard per-clock updates */
    uint64_t staleness_waits, staleness_wait_ns;
    uint64_t refused;                        /* requests refused (bad input, quota, access) */
    uint64_t fed_rounds_timed_out;           /* federated rounds closed by the timeout */
    uint64_t views;                          /* table views taken here */
    uint64_t shards_moved;                   /* shards whose primary changed, over them */
    uint64_t shard_copies;                   /* whole-state copies sent */
    /* the workers' side: outages ended (updates or reads that could not reach a
     * shard's primary, answered again after a view change), and the last one's time */
    uint64_t failovers, failover_last_ns;
} ps_sample_t;
int ps_report_sample(const salusd_t *d, ps_sample_t *sample);

#endif
