/* The parameter-server service's parts (ps.h): what ps_service.c, ps_tables.c, ps_open.c,
 * ps_worker.c, ps_pull.c, ps_server.c, ps_msg.c and ps_report.c share. Single-threaded:
 * everything runs on the daemon's loop.
 *
 * One ps_table_t per table this daemon knows, keyed (uid, group name, table name, ring
 * epoch). A table has two sides, either or both:
 *   - the worker side (local_workers > 0): the node's workers push, clock and pull; their
 *     pushes are summed per clock (ps_agg, BSP/SSP) and each complete clock goes to every
 *     shard as one update through the shard's stream (at most one update in flight);
 *   - the server side (shards[i] != NULL for the shards whose ring owner is this daemon): the
 *     shards' state, updates applied from the sources (the nodes that run the group's
 *     ranks), pulls answered or kept until the shard's done reaches the reader's bound. */
#ifndef SALUS_SALUSD_PS_INTERNAL_H
#define SALUS_SALUSD_PS_INTERNAL_H

#include "ps.h"

#include <stdint.h>
#include <sys/queue.h>

#define PS_NODE_BYTES 64
#define PS_ERR_BYTES 256
#define PS_GROUP_BYTES 64
#define PS_UPDATE_RETRY_MS 2000  /* an update not acknowledged by then is sent again */
#define PS_FETCH_RESEND_MS 2000  /* a remote read not answered by then is asked again */
#define PS_OPEN_TIMEOUT_MS 15000 /* a server that does not answer an open by then fails it */

typedef struct ps_s ps_t;
typedef struct ps_table_s ps_table_t;

/* A callback to call on a later loop turn (never from inside a ps.h call). */
typedef struct ps_call_s {
    const void *owner;
    ps_done_fn done;          /* one of done, pull */
    ps_pull_fn pull;
    void *arg;
    int rc;
    char err[PS_ERR_BYTES];
    ps_read_t read;
    TAILQ_ENTRY(ps_call_s) link;
} ps_call_t;

/* A worker's open waiting for the table to be agreed and created everywhere. */
typedef struct ps_open_wait_s {
    const void *owner;
    ps_done_fn done;
    void *arg;
    struct ps_open_wait_s *next;
} ps_open_wait_t;

/* One worker's pull: its slices come from the shards covering the range. */
typedef struct ps_pull_s {
    ps_t *ps;
    ps_table_t *table;        /* a slice answered -ESTALE is asked of the primary now */
    const void *owner;        /* NULL once forgotten: the slices still come, no callback */
    ps_pull_fn done;
    void *arg;
    float *out;               /* the caller's; NULL once forgotten */
    uint64_t offset, n;
    uint32_t slices_left;
    int rc;
    char err[PS_ERR_BYTES];
    ps_read_t read;           /* done, done_at_request: the least over the slices */
    uint64_t started_ns;
    LIST_ENTRY(ps_pull_s) link;
} ps_pull_t;

/* A slice of a shard served here, kept until the shard's done reaches min_done: for a local
 * pull (pull != NULL) or for a remote one (node, req). */
typedef struct ps_wait_s {
    uint32_t shard;
    uint64_t min_done, first, n;  /* shard-local range */
    uint64_t done_at_request, since_ns;
    ps_pull_t *pull;
    uint64_t out_index;           /* where the slice goes in pull->out */
    char node[PS_NODE_BYTES];
    uint64_t req;
    struct ps_wait_s *next;
} ps_wait_t;

/* A pull waiting for a fetch: where the slice goes in its buffer. */
typedef struct ps_rider_s {
    ps_pull_t *pull;
    uint64_t out_index;
    struct ps_rider_s *next;
} ps_rider_t;

/* A slice asked of a remote server. Co-located workers that read the same slice with the
 * same bound while it is on its way ride along: one network read per node per slice per
 * clock (the hierarchical scheme). */
typedef struct ps_fetch_s {
    uint64_t req;
    char node[PS_NODE_BYTES];
    ps_table_t *table;
    uint32_t shard;
    uint64_t min_done, first, n; /* shard-local */
    ps_rider_t *riders;
    uint64_t sent_ns;            /* when it was (last) sent: resent after PS_FETCH_RESEND_MS
                                  * (a lost request or reply; the server answers a req once) */
    uint64_t stalled_ns;         /* since when it cannot reach the shard's primary (its server
                                  * is down, or answered -ESTALE); 0: it can (ps_retarget.c) */
    uint64_t asked_ns;           /* when it was first asked of its server (node) */
    int refused;                 /* answered -ESTALE since the last view (a read that its
                                  * primary only keeps, waiting for the sources, is not) */
    struct ps_fetch_s *next;
} ps_fetch_t;

/* A clock's sum on its way to the shards: released when every shard has acknowledged. */
typedef struct ps_outgoing_s {
    uint64_t clock;
    uint32_t pending;         /* shards not acknowledged yet */
} ps_outgoing_t;

/* One update of a shard's stream (this node as the source -> the shard's owner). */
typedef struct ps_update_s {
    uint64_t seq, clock;
    int close;                /* the update closes clock (BSP/SSP); ASP: a bare contribution */
    uint64_t offset, n;       /* shard-local; keys (shard-local) when not NULL */
    uint64_t *keys;
    const float *values;      /* into the clock's sum (outgoing), or owned (ASP) */
    float *owned;
    ps_outgoing_t *outgoing;
    struct ps_update_s *next;
} ps_update_t;

typedef struct ps_stream_s {
    ps_update_t *head, *tail; /* head: in flight while in_flight */
    int in_flight;
    int sent;                 /* the head's send completed (UCX has it all out) */
    uint64_t next_seq;        /* the seq of the next update made */
    uint64_t sent_ns;         /* when it completed: the retry counts from there, so that a
                               * large update still on its way is never sent twice */
    char sent_to[PS_NODE_BYTES]; /* the primary the head last went to (this daemon's name
                               * when applied here): a view that names another one sends
                               * it again */
    uint64_t stalled_ns;      /* since when the head cannot reach the shard's primary (its
                               * server is down, or answered -ESTALE); 0: it can */
    uint64_t first_sent_ns;   /* when the head first went to a remote primary (0: not yet):
                               * a server found down later has not answered it since then */
    int refused;              /* the head was answered -ESTALE since the last view */
    uint64_t warned_ns;       /* the first_sent_ns of the head logged as unacknowledged */
    uint64_t backoff_seq;     /* the head whose plain resends `backoff` counts */
    uint32_t backoff;         /* resends of that head by the retry timer while its primary
                               * was reachable (only slow): the next waits
                               * PS_UPDATE_RETRY_MS << min(backoff, PS_UPDATE_BACKOFF_MAX) */
} ps_stream_t;
#define PS_UPDATE_BACKOFF_MAX 4 /* 2, 4, 8, 16, then every 32 s */

typedef enum ps_table_state_e { PS_TABLE_OPENING, PS_TABLE_READY, PS_TABLE_FAILED } ps_table_state_t;

struct ps_table_s {
    ps_t *ps;
    uint64_t handle;
    uid_t uid;
    uint64_t group_id;        /* the local group; 0: served for another node's group only */
    char group[PS_GROUP_BYTES];
    char name[PS_NAME_BYTES];
    uint64_t epoch;
    ps_table_spec_t spec;     /* count, rule, sync; servers as agreed (sorted) */
    char rule_text[PS_FED_RULE_BYTES], sync_text[32]; /* rule: up to 63 characters (fedavg) */
    ps_table_state_t state;
    int error;                /* PS_TABLE_FAILED: why */
    char error_text[PS_ERR_BYTES];
    ps_open_wait_t *waiters;
    uint32_t opens_pending;   /* remote servers not answered yet */
    uint64_t open_req;        /* the id the open messages carry */
    struct event *open_timer;
    ps_layout_t layout;
    ps_ring_t *ring;
    uint32_t vnodes;          /* the ring's virtual nodes per server, as agreed (sent on) */
    uint32_t *owner;          /* per shard: its server's index in the ring */
    int self_server;          /* this daemon's index in the ring, -1: not a server */
    /* the sources: the group's nodes that run ranks (sorted), this node's index */
    uint32_t sources;
    char (*source_names)[PS_NODE_BYTES];
    uint8_t *source_over;     /* said bye or is gone */
    uint64_t *source_final;   /* the clocks a source closed in all, as its bye said
                               * (UINT64_MAX: not told) */
    int self_source;          /* -1: no local workers */
    /* worker side */
    uint32_t local_workers;
    int worker_over;          /* the local group ended (or never had workers here) */
    ps_agg_t *agg;            /* BSP/SSP */
    uint64_t *asp_seq, *asp_clock; /* ASP: per local worker */
    /* updates a server refused (their result would not be finite): each local worker's next
     * push hears of the last one, once */
    uint64_t refusals, refusal_clock; /* how many clocks had one; the last one's clock */
    uint64_t *refusals_told;  /* per local worker */
    char refusal_text[PS_ERR_BYTES];
    uint64_t asp_closed;      /* ASP: clocks every local worker has closed (sent as closes) */
    ps_stream_t *streams;     /* per shard */
    uint64_t charged_bytes;   /* what the quota counts for this table here */
    /* server side */
    ps_shard_t **shards;      /* per shard; NULL where this daemon holds no replica of it */
    ps_wait_t *waits;
    struct ps_fed_table_s
        *fed; /* a federated table (salusd/ps/ps_fed_table.c): the rounds, no shards */
    /* replicas and views (ps_repl.c) */
    uint32_t replicas;        /* R: the view's (until a view is read: the open's; 0 counts
                               * as 1). R > 1 (and more than one server): the worker side
                               * waits for the next view when a primary cannot be reached;
                               * with R 1 it fails at once */
    uint64_t view;            /* the number of the view in force here (0: none yet) */
    char view_servers[PS_SERVERS_BYTES]; /* its servers (sorted); "": the ring record's */
    int watching;             /* ps_replicas_watch was called */
    struct ps_repl_shard_s *repl; /* per shard: this daemon's part in its replica set */
    struct ps_forward_s *forwards; /* updates applied here as primary, waiting for standbys */
    struct ps_reopen_s *reopens; /* opens sent again to servers, not answered yet */
    uint64_t moved, copies;   /* primaries moved, replica copies made, over its views */
    /* the worker side's fail-over (ps_retarget.c): since when an update or read of the table
     * cannot reach its shard's primary (0: all can), why, and the recoveries seen */
    uint64_t outage_ns;
    char outage_why[PS_ERR_BYTES];
    uint64_t failovers, failover_ns; /* failover_ns: the last recovery's time */
    /* checkpoints (ps_ckpt*.c): the clock the table started at (the agreed record's start:
     * 0, or C when restored from a checkpoint taken at C); the restored values while the
     * opener sends them to the servers (NULL otherwise) */
    uint64_t start_clock;
    float *restore_values;
    ps_table_t *next;
};

struct ps_s {
    salusd_t *d;
    ps_table_t *tables;
    uint64_t next_handle, next_req;
    TAILQ_HEAD(ps_call_list, ps_call_s) calls;
    struct event *call_event;
    struct event *retry_timer;  /* resends updates not acknowledged in time */
    struct event *pump_timer;   /* a zero timer: sends the rest of a large clock's updates */
    LIST_HEAD(ps_pull_list, ps_pull_s) pulls;
    ps_fetch_t *fetches;
    ps_sample_t stats;          /* counters (tables, shards, bytes: computed by ps_report_sample) */
    uint64_t dropped;           /* bad messages from peers */
    /* replication (ps_repl*.c) */
    struct ps_copy_s *copies;   /* whole-state copies sent, not acknowledged yet */
    struct event *repl_timer;   /* while forwards or copies wait: liveness, resends */
    /* test seams: NULL in the daemon (ps_replicas_member_alive, ps_net) */
    int (*member_alive)(salusd_t *d, const char *node);
    int (*send_tap)(void *arg, const char *node, const void *header, size_t header_len,
                    const void *payload, size_t payload_len);
    void *send_tap_arg;
};

static inline ps_t *ps_of(const salusd_t *d)
{
    return d ? (ps_t *)d->ps : NULL;
}

/* ps_service.c: deferred callbacks */
void ps_call_done(ps_t *ps, const void *owner, ps_done_fn done, void *arg, int rc,
                  const char *err);
void ps_call_pull(ps_t *ps, const void *owner, ps_pull_fn fn, void *arg, int rc,
                  const char *err, const ps_read_t *read);

/* 1 when the worker's next push of the whole table `handle` reads each of its values once
 * (BSP/SSP, the first push of the worker's clock on this node: the aggregation copies and
 * checks in one pass), so that the workers' endpoint may pass the shared region itself
 * rather than a private copy; 0 otherwise (ASP checks, then copies; a later push checks,
 * then adds). */
int ps_push_reads_once(salusd_t *d, const ps_worker_t *w, uint64_t handle);

/* ps_tables.c, ps_open.c (ps_table_open) */
ps_table_t *ps_table_by_handle(ps_t *ps, const ps_worker_t *w, uint64_t handle);
ps_table_t *ps_table_find(ps_t *ps, uid_t uid, const char *group, const char *name,
                          uint64_t epoch);
int ps_table_open(ps_t *ps, const ps_worker_t *w, const ps_table_spec_t *spec,
                  uint64_t *handle, ps_done_fn done, void *arg, char *err, size_t err_size);
/* Builds layout, ring, owners and sources from an agreed record (the server side for a
 * remote open: group_id 0); the shards served here come with ps_table_create_shards, after
 * the quota was checked. 0 or a negative errno with err. */
struct ps_ring_record_s; /* ps_cluster.h (not included here: ps_cluster.c includes groups.h,
                          * which includes ps.h) */
int ps_table_build(ps_table_t *t, const struct ps_ring_record_s *rec, const char *const *sources,
                   uint32_t nsources, char *err, size_t err_size);
int ps_table_create_shards(ps_table_t *t, char *err, size_t err_size);
ps_table_t *ps_table_new(ps_t *ps, uid_t uid, uint64_t group_id, const char *group,
                         const char *name);
/* The table fails: waiters, reads and fetches hear rc and err; its shards and quota charge go
 * at once, its worker side (ps_worker_fini) on the next loop turn, by ps_tables_reap. */
void ps_table_fail(ps_table_t *t, int rc, const char *err);
void ps_tables_reap(ps_t *ps);
void ps_table_ready(ps_table_t *t);
void ps_table_free(ps_table_t *t);
/* Frees the table when neither side needs it any more (workers over, every source over). */
void ps_table_maybe_free(ps_table_t *t);
/* "b, a,a" -> "a,b" in out (sorted, distinct names); names[] point into store. The count,
 * or -EINVAL with err. */
int ps_parse_servers(const char *text, char *store, size_t store_size, const char **names,
                     char *out, size_t out_size, char *err, size_t err_size);
/* What a table's aggregation and shards hold besides its charged elements: the clocks' sums. */
uint64_t ps_table_held_bytes(const ps_table_t *t);
/* Bytes the quota counts for uid on this daemon (every table's charged elements and held
 * bytes), and what this table would add. */
uint64_t ps_user_bytes(ps_t *ps, uid_t uid);
int ps_quota_check(ps_t *ps, uid_t uid, uint64_t more, const char *table, char *err,
                   size_t err_size);
/* The element bytes of this table's shards served here (from the owners: also before they
 * are created). */
uint64_t ps_table_shard_bytes(const ps_table_t *t);
/* The rule text of a spec (a fedavg rule's or ps_rule_format's); the length or < 0. */
int ps_table_rule_text(const ps_table_spec_t *spec, char *buf, size_t size);

/* ps_worker.c, ps_pull.c (ps_pull_start, ps_pull_slice, fetches) */
int ps_worker_init(ps_table_t *t);   /* agg / ASP books / streams; 0 or -ENOMEM */
void ps_worker_fini(ps_table_t *t);
/* The clocks this node has closed for the table (every local worker closed them): their
 * updates went into the streams. */
uint64_t ps_worker_clocks_sent(const ps_table_t *t);
int ps_worker_push(ps_table_t *t, uint32_t worker, const ps_push_id_t *id, uint64_t offset,
                   uint64_t n, const uint64_t *keys, const float *values, char *err,
                   size_t err_size);
int ps_worker_clock(ps_table_t *t, uint32_t worker, uint64_t clock, char *err,
                    size_t err_size);
/* The head of a shard's stream was acknowledged (seq): the next goes. rc -ESTALE: not by the
 * primary (a view change is under way): kept, and sent again at the next view or retry. */
void ps_worker_acked(ps_table_t *t, uint32_t shard, uint64_t seq, int rc);
/* The send of update seq of a shard's stream completed (ps_msg.c's sent callback); ok 0: it
 * failed (a link that dropped), and the next retry sends it again. */
void ps_retarget_update_sent(ps_t *ps, uint64_t handle, uint32_t shard, uint64_t seq, int ok);
/* Arms the retry timer (updates and fetches on their way). */
void ps_retarget_arm_retry(ps_t *ps);
/* Resends the updates not acknowledged within PS_UPDATE_RETRY_MS of their send. */
void ps_retarget_retry(ps_t *ps);
/* Sends the updates a large clock left for later turns (the pump timer), up to
 * PS_PUMP_TURN_BYTES a turn. */
#define PS_PUMP_TURN_BYTES (16u << 20)
void ps_worker_pump_later(ps_t *ps);
/* 0 when [offset, offset + n) is a non-empty range of the table, else -EINVAL with err (a
 * pull of either kind of table). */
int ps_pull_range_check(const ps_table_t *t, uint64_t offset, uint64_t n, char *err,
                        size_t err_size);
int ps_pull_start(ps_table_t *t, const ps_worker_t *w, uint64_t clock, uint64_t offset,
                  uint64_t n, float *out, ps_pull_fn done, void *arg, char *err,
                  size_t err_size);
/* A slice of a pull arrived (or failed: rc < 0). */
void ps_pull_slice(ps_pull_t *p, int rc, const char *err, uint64_t out_index,
                   const float *values, uint64_t n, uint64_t done, uint64_t done_at_request,
                   uint64_t waited_ns, int waited);
/* A fetch's answer (or failure) goes to each of its riders; the fetch is freed. But rc
 * -ESTALE (its server is not the shard's primary now, or the shard is moving): the fetch is
 * kept (back on ps->fetches) and asked again at the next view change or retry. */
void ps_pull_fetch_finish(ps_fetch_t *f, int rc, const char *err, const float *values,
                          uint64_t done, uint64_t done_at_request, uint64_t waited_ns, int waited);
/* The table's fetches on their way fail (rc, err). */
void ps_worker_fail_fetches(ps_table_t *t, int rc, const char *err);
/* Node is down (peer down): the update streams and fetches that wait on it fail (R 1), or
 * wait for the next view (R > 1; ps_retarget.c), at most PS_FAILOVER_TTLS lease TTLs. */
void ps_retarget_node_down(ps_t *ps, const char *node);

/* ps_server.c */
/* An update from this daemon's own workers (source) to a shard whose primary is here
 * (ps_repl_update with no origin): 1 applied, 0 duplicate, PS_UPDATE_PENDING (taken; the
 * standbys' acks come first, then ps_worker_acked), -EAGAIN / -ENOMEM (not now), < 0 bad. */
int ps_server_update(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u);
/* Applies an update to the shard held here (any replica): 1 applied, 0 duplicate, -ERANGE
 * taken but refused (its result would not be finite: the values stay, its clock closes, the
 * source is told), < 0 bad. */
int ps_server_apply(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u);
/* A slice read: answered now (1) or kept (0), or a negative errno. */
int ps_server_read(ps_table_t *t, ps_wait_t *w);
void ps_server_wake(ps_table_t *t, uint32_t shard);
void ps_server_drop_waits(ps_table_t *t, const char *node, const ps_pull_t *pull);
/* Fails the waiting reads that can no longer complete: a source that is over (bye, or its
 * workers here ended) closes no more clocks (BSP, SSP). */
void ps_server_fail_stranded(ps_table_t *t);
/* Every read kept on the table's shards fails (a source is gone: the bound is out of reach). */
void ps_server_fail_waits(ps_table_t *t, int rc, const char *err);
/* The slice of a kept or answered read goes to its reader. */
void ps_server_answer(ps_table_t *t, ps_wait_t *w);

/* ps_msg.c: the messages between daemons */
void ps_msg_recv(void *ctx, const char *node, const void *header, size_t header_len,
                 const void *payload, size_t payload_len);
int ps_msg_send_open(ps_table_t *t, const char *node);
/* fresh 0: the table exists already (a server that joined its view): the shards come as
 * copies, never empty. */
int ps_msg_send_open_as(ps_table_t *t, const char *node, int fresh);
int ps_msg_send_update(ps_table_t *t, uint32_t shard, const ps_update_t *u);
int ps_msg_send_pull(ps_table_t *t, const ps_fetch_t *f);
void ps_msg_send_pull_reply(ps_table_t *t, const ps_wait_t *w, int rc, const char *err);
void ps_msg_send_bye(ps_table_t *t);

/* ---- replicas, fail-over, re-balancing (ps_repl.c and its parts) ---------------------------
 * A table's t->ring and t->owner[] always describe its CURRENT view (ps_cluster.h's ps_view_t):
 * t->owner[shard] is the shard's primary; the standbys follow (ps_ring_replicas). On a view
 * change the server side swaps ring and owners, moves or copies shard state as needed, and
 * then calls ps_retarget_view_changed so that the worker side sends again what went to a
 * replaced primary. A server that is not (or not yet) the primary of a shard in its view
 * answers an update or a read of it with -ESTALE: the sender keeps it and sends it again
 * after the next view change (or its retry timer). */
/* The node name of shard's primary in the table's current view (NULL: none known now). */
const char *ps_table_primary(const ps_table_t *t, uint32_t shard);

/* This daemon's part in a shard's replica set (current view). */
typedef struct ps_standby_s {
    char node[PS_NODE_BYTES];
    uint64_t copy_req;        /* a whole-state copy on its way to it (0: none) */
} ps_standby_t;
typedef struct ps_repl_shard_s {
    int replica;              /* this daemon is one of the shard's replicas */
    int loading;              /* primary here, its state not here yet (a joined server):
                               * updates held back (no ack), reads kept */
    uint32_t nstandbys;       /* as primary: the other replicas */
    ps_standby_t standby[PS_MAX_REPLICAS];
    uint64_t applied;         /* updates taken here as primary (marks for copies) */
} ps_repl_shard_t;
/* An update taken here as primary: the source hears its ack once every live standby has it. */
typedef struct ps_forward_s {
    uint32_t shard, source;
    uint64_t seq, mark;       /* mark: the shard's `applied` after it */
    char origin[PS_NODE_BYTES]; /* the source's node; "" for this daemon's own workers */
    uint8_t waiting[PS_MAX_REPLICAS]; /* per standby index */
    int rc;                   /* what the source hears: 0, or -ERANGE (refused) */
    uint64_t since_ns;        /* when it was taken */
    struct ps_forward_s *next;
} ps_forward_t;
/* A whole-state copy on its way (primary -> standby, or old primary -> new one). */
typedef struct ps_copy_s {
    ps_t *ps;
    uint64_t table;           /* handle */
    uint32_t shard;
    uint64_t req, mark;       /* mark: the shard's `applied` when taken */
    char node[PS_NODE_BYTES];
    int handover;             /* to the new primary: buf kept (the shard may go here) */
    void *buf;
    size_t len;
    uint64_t sent_ns;
    uint64_t since_ns;        /* its first send: not taken within the fail-over bound, it */
    int warned;               /* is logged once (warned), with the node's last refusal */
    int refused;              /* (0: none) */
    struct ps_copy_s *next;
} ps_copy_t;

/* An open this node (a source) sent to a server that may have lost the table (its daemon
 * restarted within its lease) or joined the view: such an open can be lost (sent before that
 * daemon took this node's messages), and a server without the table refuses every copy and
 * forward, which its primaries wait on without a bound (its lease is alive). So it is sent
 * again every PS_REOPEN_RESEND_MS until the server answers it (OK or an error), it leaves
 * the view, or its lease ends; logged once when unanswered past the fail-over bound. */
typedef struct ps_reopen_s {
    char node[PS_NODE_BYTES];
    uint64_t since_ns, sent_ns;
    int warned;
    struct ps_reopen_s *next;
} ps_reopen_t;
#define PS_REOPEN_RESEND_MS 500

/* ps_server.c's ps_server_update returns this when the update was taken here as primary and
 * its acknowledgement waits for the standbys (ps_worker_acked is called then). */
#define PS_UPDATE_PENDING 2
#define PS_COPY_RESEND_MS 200  /* a copy not acknowledged by then is sent again */
/* A forward a live standby has not acknowledged by then (lost on its way: a daemon restarted
 * within its lease drops what comes before it took this daemon's messages) is covered by a
 * copy sent to that standby, without waiting for the source to send the update again. */
#define PS_FORWARD_WAIT_MS 10000

/* ps_repl.c: views */
/* Builds ring and owners for view servers `servers` with R `replicas`, marks the replicas
 * here (repl[]); for a table being built (no view yet). 0 or a negative errno with err. */
int ps_repl_init_view(ps_table_t *t, uint64_t number, const char *servers, uint32_t replicas,
                      char *err, size_t err_size);
/* The view_changed hook (ps_cluster.h). */
struct ps_view_s;
void ps_repl_view_changed(void *ctx, uid_t uid, const char *group, uint64_t epoch,
                          const char *table, const struct ps_view_s *view);
/* Starts watching the table's view (once). */
void ps_repl_watch(ps_table_t *t);
/* A node reachable again: the tables this daemon is a source of whose view has it as a server
 * send it the open again (not fresh; one it has is answered OK): a server restarted within its
 * lease kept its place in the views but lost its tables, and nothing else gives them back. */
void ps_repl_peer_up(ps_t *ps, const char *node);
/* node's daemon restarted within its lease (its tables lost, its place in the views kept):
 * each table whose view has it proposes the view without it, as when its lease ends. */
void ps_repl_peer_restarted(ps_t *ps, const char *node);
/* Sends the table's open (not fresh) to server node and keeps it to send again until node
 * answers it (ps_reopen_t). 0, or the send's negative errno (kept all the same). */
int ps_repl_send_open(ps_table_t *t, const char *node);
/* node answered the table's open (OK, or refused it: logged by the caller). */
void ps_repl_open_answered(ps_table_t *t, const char *node);
/* The repl timer's turn for the table's opens: resent when due, dropped when the server left
 * the view or its lease ended. 1 when some still wait for an answer. */
int ps_repl_check_opens(ps_table_t *t, uint64_t now);
/* 1 when this daemon is shard's primary in the table's view. */
int ps_repl_is_primary(const ps_table_t *t, uint32_t shard);
/* 1 when node is alive as far as the cluster knows (the test seam first). */
int ps_repl_alive(ps_t *ps, const char *node);
/* The table's replication books go (forwards, copies). */
void ps_repl_fini(ps_table_t *t);
/* The element bytes of the shards this daemon holds a replica of (the quota). */
uint64_t ps_repl_shard_bytes(const ps_table_t *t);

/* ps_repl_fwd.c: forwarding to standbys, whole-state copies */
/* An update from source (origin: its node, NULL for this daemon's workers) to shard, taken
 * here as primary: 1 applied, 0 duplicate, PS_UPDATE_PENDING (the ack waits for standbys),
 * -ESTALE (not the primary here, or not serving yet: its state is on its way), -EAGAIN /
 * -ENOMEM (not now: no ack, resent), other < 0 refused. */
int ps_repl_update(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u,
                   const char *origin);
/* Sends shard's state to node (copy or handover); 0 or a negative errno. */
int ps_repl_send_copy(ps_table_t *t, uint32_t shard, const char *node, int handover);
/* The shard's forwards and copies are dropped (no longer primary here). */
void ps_repl_drop_shard(ps_table_t *t, uint32_t shard);
/* Re-checks the forwards: a standby that is not alive is not waited for. */
void ps_repl_check(ps_t *ps);
void ps_repl_arm(ps_t *ps);
/* The messages 16..: 1 when type was one of them (handled), else 0. */
struct rbuf_s;
int ps_repl_recv(ps_t *ps, const char *node, int type, struct rbuf_s *r, ps_table_t *t,
                 const void *payload, size_t payload_len);
/* ps_worker.c / ps_pull.c: the table's view changed: the heads of the update streams and the
 * fetches whose primary changed go again to the new primaries (same seq: applied once). */
void ps_retarget_view_changed(ps_table_t *t);
/* (ps_retarget.c; what it needs of the server side:) t->self_server is this daemon's index in
 * the new ring; reads kept on a shard this daemon no longer primaries (ps_wait_t with pull !=
 * NULL) are left on t->waits, or answered -ESTALE (ps_pull_slice): either way the worker side
 * asks them of the new primary. For the local source's updates (pump), PS_UPDATE_PENDING's
 * acknowledgement comes later (ps_worker_acked, never from inside ps_server_update), once
 * the standbys have it; -ESTALE (ps_server_read too: w is freed as on any error): not the
 * primary (yet), the worker side keeps the update or read and tries again later. */

#endif
