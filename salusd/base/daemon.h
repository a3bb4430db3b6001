/* Subsystem base/ (libsalusd-base), the lowest: the clock, options, devices and memory chunks,
 * the job table, access, systemd notification, the state file and durable writes, the control
 * socket and its frames. Calls nothing of salusd above it; the server reaches the request
 * handlers only through the server_ops_t that main passes to server_start.
 *
 * The daemon's state, shared by its parts (server, handlers, registry). One instance. */
#ifndef SALUS_SALUSD_DAEMON_H
#define SALUS_SALUSD_DAEMON_H

#include "config.h"
#include "devices.h"
#include "proto.h"
#include "registry.h"

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

struct event_base;
struct evconnlistener;
struct bufferevent;
struct evbuffer_cb_entry;
struct metrics_s;
struct server_user_s;

/* descriptors a client may pass with one frame; more are closed on arrival */
#define SERVER_MAX_FRAME_FDS 4

/* The subsystems above base that keep state per connection: one slot each in conn_t (base's
 * own state, server.c's books and access.c's cache, are conn_t's fields). The order is that of
 * the layers: when a connection goes, server.c hands each slot that is set to the on_close its
 * owner registered (server_observe_close), from the last owner to the first, so that a
 * subsystem lets go of a connection before the subsystems it calls do. */
typedef enum conn_slot_e {
    CONN_SLOT_JOB,        /* jobs/: the runtime of the job the connection registered */
    CONN_SLOT_PS_SERVERS, /* ps/ps_replicas_ctl.c: its ps_servers ops not answered yet */
    CONN_SLOT_PS_LOCAL,   /* ps/ps_local.c: its tables and the request in flight */
    CONN_SLOT_PS_CKPT,    /* ps/ps_ckpt.c: its checkpoints not answered yet */
    CONN_SLOT_JOBCTL,     /* ctl/jobctl.c: its waits */
    CONN_SLOT_COUNT
} conn_slot_t;

typedef struct conn_s {
    struct salusd_s *daemon;
    struct bufferevent *bev;  /* writes (replies); reading is server.c's own */
    struct event *read_event; /* reads with recvmsg, so that passed descriptors arrive */
    struct evbuffer *input;   /* bytes read and not yet taken as frames */
    uint64_t received;        /* bytes read from the peer so far */
    /* descriptors passed with a frame not wholly read yet (SCM_RIGHTS), each with the
     * stream offset at which the data they came with ended */
    int queued_fds[SERVER_MAX_FRAME_FDS];
    uint64_t queued_fd_end[SERVER_MAX_FRAME_FDS];
    int queued_nfds;
    int frame_fds[SERVER_MAX_FRAME_FDS]; /* those of the frame being handled */
    int frame_nfds;
    int frame_fds_taken;
    pid_t pid;                /* from SO_PEERCRED */
    uid_t uid;
    gid_t gid;
    int pidfd;                /* the peer process, bound at accept (server.c); never -1 */
    size_t input_held_bytes;  /* bytes of a partial frame held in the input buffer */
    /* replies queued for it (server_output.c's books), its user's books, and the callback
     * that keeps them (NULL once the connection is dropped) */
    size_t output_bytes;
    struct server_user_s *user;
    struct evbuffer_cb_entry *output_cb;
    struct event *hello_deadline; /* closes the connection if no hello by then */
    int hello_done;
    int closing;              /* an error was sent; close once it is written */
    int access;               /* access.c's cache: 0 unknown, 1 sees all jobs, 2 own only */
    /* the subsystems' state (NULL: none), each reached through server_conn_slot and
     * released by its owner's on_close when the connection goes */
    void *slot[CONN_SLOT_COUNT];
    char client[32];
    LIST_ENTRY(conn_s) link;
} conn_t;

typedef struct gpu_sched_s gpu_sched_t;

typedef struct salusd_s {
    salusd_config_t config;
    devices_t devices;
    gpu_sched_t *gpu_sched;   /* lanes and the active policy (gpu_sched.c) */
    struct event *grow_timer; /* retries chunk requests that found the device full (jobs.c) */
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *signal_events[3];
    registry_t *registry;
    LIST_HEAD(conn_list, conn_s) conns;
    unsigned connection_count;
    uint64_t partial_frame_bytes; /* sum of the connections' input_held_bytes */
    /* server_output.c: the users with connections open, the replies queued for all clients,
     * the most held (queued replies and partial frames) since memory was last handed back,
     * the timer that hands it back after a burst, and the rate limit of its cut lines */
    LIST_HEAD(server_user_list, server_user_s) users;
    uint64_t output_bytes;
    uint64_t held_peak_bytes;
    struct event *release_timer;
    struct event *accept_pause; /* re-enables accepting after an accept error */
    uint64_t started_ns;
    uint64_t frames_rejected;
    uint64_t requests_served;
    int socket_bound;
    proto_enc_t enc;          /* scratch encoder for replies (single-threaded loop) */
    const struct server_ops_s *server_ops; /* the requests' dispatcher (server_start) */
    const struct conn_slot_ops_s *slot_ops[CONN_SLOT_COUNT]; /* server_observe_close */
    struct metrics_s *metrics; /* the /metrics endpoint (metrics.c); NULL: off */
    struct jobctl_s *jobctl;  /* submitted jobs' logs, exit statuses, waiters (jobctl.c) */
    struct restart_s *restart; /* the state file and the survivors of a restart (job_reattach.c) */
    struct groups_s *groups;  /* groups of ranks (groups.c) */
    struct lane_region_s *lane_regions; /* --lane-memory shared: the lanes' chunks (job_lane_memory.c) */
    /* lanes' sets of chunks since start: made, and re-presented by their jobs after a restart */
    uint64_t lane_sets_created, lane_sets_restored;
    /* the tables of the subsystems above jobs that hear its events, and the events raised
     * during an apply of the core's effects, not delivered yet (jobs_observer.h) */
    struct jobs_notifier_s *jobs_notifier;
    struct cluster_s *cluster; /* the cluster role (cluster.c); NULL: a single node */
    struct ps_s *ps;          /* the parameter-server role (ps.h); NULL: not started */
} salusd_t;

uint64_t salusd_now_ns(void);

/* server.c. What the server asks of the layer that answers requests (ctl's handlers_ops),
 * passed to server_start. */
typedef struct server_ops_s {
    /* answers one request (kind PROTO_REQUEST) from a connection that said hello */
    void (*dispatch)(conn_t *c, const proto_msg_t *msg);
} server_ops_t;

int server_start(salusd_t *d, const server_ops_t *ops);

/* What the owner of a connection slot does when a connection goes; each owner registers its
 * table once, at start (main.c), before server_start. */
typedef struct conn_slot_ops_s {
    /* Called by server.c on the loop's thread, once per closing connection whose slot of
     * this owner is set, after the upper owners' and before the connection is freed; the
     * slot is already cleared. Releases state; must not block nor write to c. Required. */
    void (*on_close)(conn_t *c, void *state);
} conn_slot_ops_t;

/* 0, -EINVAL (no such owner, or no on_close) or -EEXIST (the owner registered already). */
int server_observe_close(salusd_t *d, conn_slot_t owner, const conn_slot_ops_t *ops);
/* The state owner keeps for c (NULL: none). */
static inline void *server_conn_slot(const conn_t *c, conn_slot_t owner)
{
    return c->slot[owner];
}
/* Sets (or with NULL clears) the state owner keeps for c: 0, or -ENOSYS when owner registered
 * no on_close (the state would never be released: nothing is set). */
int server_conn_slot_set(conn_t *c, conn_slot_t owner, void *state);

/* A request answered later (a wait, a checkpoint, a ps_servers op), part of its owner's
 * record of it and linked in the list that the owner's slot of the connection holds, so
 * that the requester going away is known: conn becomes NULL, and no reply is sent. */
typedef struct server_later_s {
    conn_t *conn;             /* the requester; NULL: gone, or never linked */
    uint64_t request_id;
    LIST_ENTRY(server_later_s) link;
} server_later_t;
/* Links later to c's requests of owner: 0, -ENOMEM, or -ENOSYS (no on_close for owner). */
int server_later_add(conn_t *c, conn_slot_t owner, server_later_t *later, uint64_t request_id);
/* Unlinks later (answered, or its record goes); harmless when it is not linked. */
void server_later_done(server_later_t *later);
/* The on_close of an owner whose slot holds only requests answered later: each is unlinked,
 * its conn NULL, and the list goes. */
void server_later_close(conn_t *c, void *state);
extern const conn_slot_ops_t server_later_ops;

/* Who may call an op and what it counts against: a row's flags, checked once by ctl's
 * dispatcher before the handler runs (handlers.c), each refusal a clear error reply. */
enum {
    SERVER_OP_ANYONE = 0,
    SERVER_OP_ROOT = 1u << 0,         /* root from salusd's own pid and user namespaces only */
    SERVER_OP_JOB = 1u << 1,          /* only on a connection registered as a job */
    SERVER_OP_CAP_JOBS = 1u << 2,     /* makes a job of the caller: max-jobs-per-uid */
    SERVER_OP_CAP_SUBMITS = 1u << 3,  /* queues a job of the caller: max-queued-submits-per-uid */
};

/* One row of the request table: each subsystem exports its rows (jobs_ops, ps_ops), ctl's
 * table concatenates them with its own (handlers.c). A handler writes exactly one reply or
 * error. A table ends with a row whose op is NULL. */
typedef struct server_op_s {
    const char *op;
    void (*fn)(conn_t *c, const proto_msg_t *msg);
    unsigned flags;                   /* SERVER_OP_* */
} server_op_t;
/* Whether salusd may take the socket path: 0 nothing there, 1 a stale socket (no server
 * answers), or negative (logged): a live server answers, or the path is not a socket. */
int server_socket_free(const char *path);
void server_stop(salusd_t *d);
/* A new descriptor (close-on-exec) for the connection's peer process, for a job that
 * outlives the request: -ESRCH when that process has exited (the pid may belong to another
 * process now), another negative errno when no descriptor is left. */
int server_dup_pidfd(const conn_t *c);
/* Connections of uid now open. */
unsigned server_connections_of(const salusd_t *d, uid_t uid);
/* The next descriptor passed with the frame being handled (the caller owns it), or -1
 * when none is left; server_frame_fds: how many are left to take. Descriptors a handler
 * does not take are closed after it returns. */
int server_take_fd(conn_t *c);
int server_frame_fds(const conn_t *c);
/* Sends an encoded frame (enc->sbuf) on the connection. */
void server_send(conn_t *c, const proto_enc_t *enc);
/* Sends a frame with file descriptors (SCM_RIGHTS). Returns 0, or a negative errno when
 * they cannot be sent in order (the caller drops the connection). The fds stay the
 * caller's to close. */
int server_send_fds(conn_t *c, const proto_enc_t *enc, const int *fds, int nfds);
/* A reply with an empty body: the request with this id was done. */
void server_reply_done(conn_t *c, uint64_t id);
/* Sends an error reply; with close_after, closes the connection once it is written. */
void server_reply_error(conn_t *c, uint64_t id, proto_error_code_t code, int close_after,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));


#endif
