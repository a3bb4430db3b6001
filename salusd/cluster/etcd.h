/* A client of a real etcd (v3), through its JSON gateway (POST /v3/...: kv/range, kv/put,
 * kv/deleterange, kv/txn, lease/grant, lease/keepalive, lease/revoke, lease/timetolive,
 * watch), with libcurl's multi interface driven by the daemon's libevent loop: no call
 * blocks, every result arrives later in a callback run from the loop. Keys and values are
 * base64 on the wire (etcd's gateway), plain bytes here. JSON is json-c's.
 *
 * Endpoints: a comma-separated list "HOST:PORT[,HOST:PORT...]" (an "etcd://" prefix is
 * accepted and dropped); a request that cannot reach one endpoint is tried on the next, once
 * round the list; the error then names every endpoint tried ("etcd unreachable at
 * 10.0.0.1:2379: Connection refused"). With tls.ca_file set the scheme is https and the
 * server is verified against that CA; with cert_file/key_file the client presents that
 * certificate (etcd's --client-cert-auth).
 *
 * Callbacks are never run from inside the call that queued the request; etcd_destroy drops
 * every pending request without running its callback. A result's pointers (kvs, message)
 * live until the callback returns. */
#ifndef SALUS_SALUSD_ETCD_H
#define SALUS_SALUSD_ETCD_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct etcd_s etcd_t;
typedef struct etcd_watch_s etcd_watch_t;

typedef struct etcd_tls_s {
    const char *ca_file;   /* NULL: plain http */
    const char *cert_file; /* client certificate (NULL: none) */
    const char *key_file;
} etcd_tls_t;

typedef struct etcd_config_s {
    const char *endpoints;   /* "HOST:PORT[,...]", optional "etcd://" prefix */
    etcd_tls_t tls;
    uint32_t timeout_ms;     /* per request (not watches); 0: 3000 */
} etcd_config_t;

typedef struct etcd_kv_s {
    const char *key;
    size_t key_len;
    const char *value;       /* NUL-terminated copy (value[value_len] == 0) */
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
} etcd_kv_t;

typedef struct etcd_result_s {
    int error;               /* 0, or a negative errno: -EHOSTUNREACH / -ECONNREFUSED /
                                -ETIMEDOUT (no endpoint answered), -EPROTO (a reply that is
                                not etcd's JSON), -EACCES (TLS refused), -EIO (etcd said no) */
    const char *message;     /* error: why, naming the endpoint(s); else "" */
    int64_t revision;        /* the header's revision (the store's, after the operation) */
    int succeeded;           /* txn: the compare held */
    const etcd_kv_t *kvs;    /* range, and a txn's range in the branch taken */
    size_t count;
    int64_t lease_id;        /* lease grant / keepalive / timetolive */
    int64_t ttl;             /* keepalive / timetolive: seconds left; <= 0: expired or unknown */
} etcd_result_t;

typedef void (*etcd_cb)(void *ctx, const etcd_result_t *result);

/* NULL with err filled when the endpoints do not parse or curl cannot start. Connects to
 * nothing yet. */
etcd_t *etcd_create(struct event_base *base, const etcd_config_t *config, char *err,
                    size_t err_size);
void etcd_destroy(etcd_t *etcd); /* NULL ok */
const char *etcd_endpoints(const etcd_t *etcd); /* as given, for messages */
/* 1 when requests go as plain http (no tls.ca_file) to an endpoint whose host is not a
 * loopback address (127.0.0.0/8, ::1, "localhost"): anyone on the path may read and write
 * what the cluster trusts. out: those endpoints ("10.0.0.100:2379,..."), for the warning. */
int etcd_plain_remote(const etcd_t *etcd, char *out, size_t out_size);

/* Each: 0 (queued; cb runs later, exactly once, unless etcd_destroy comes first) or -ENOMEM.
 * cb may be NULL. */
int etcd_lease_grant(etcd_t *etcd, int64_t ttl_s, etcd_cb cb, void *ctx);
/* One keepalive round trip for lease id (result ttl: the seconds left, <= 0 when the lease
 * is gone). The caller repeats it (every ttl/3). */
int etcd_lease_keepalive(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx);
int etcd_lease_timetolive(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx);
int etcd_lease_revoke(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx);
/* lease 0: none. */
int etcd_put(etcd_t *etcd, const char *key, const char *value, size_t value_len, int64_t lease,
             etcd_cb cb, void *ctx);
/* prefix: every key that starts with key. */
int etcd_get(etcd_t *etcd, const char *key, int prefix, etcd_cb cb, void *ctx);
int etcd_delete(etcd_t *etcd, const char *key, int prefix, etcd_cb cb, void *ctx);

/* A transaction on one key: if the compare holds, the success op runs, else the failure op.
 * Either op may be a put, a delete or a range of that key (so that a failed compare-and-swap
 * returns the current value in kvs). */
typedef enum etcd_cmp_target_e {
    ETCD_CMP_CREATE_REVISION, /* create_revision == rev (0: the key does not exist) */
    ETCD_CMP_MOD_REVISION,    /* mod_revision == rev */
} etcd_cmp_target_t;

typedef enum etcd_op_kind_e {
    ETCD_OP_NONE = 0,
    ETCD_OP_PUT,
    ETCD_OP_DELETE,
    ETCD_OP_GET,
} etcd_op_kind_t;

typedef struct etcd_op_s {
    etcd_op_kind_t kind;
    const char *value; /* PUT */
    size_t value_len;
    int64_t lease;     /* PUT; 0: none */
} etcd_op_t;

typedef struct etcd_txn_s {
    const char *key;
    etcd_cmp_target_t target;
    int64_t rev;
    etcd_op_t success, failure;
} etcd_txn_t;

int etcd_txn(etcd_t *etcd, const etcd_txn_t *txn, etcd_cb cb, void *ctx);

/* What this client asked of etcd since etcd_create, counted when a request is queued (a
 * request tried on a second endpoint counts once): lease keepalives (every TTL/3, whatever
 * runs), the other lease requests (grant, timetolive, revoke), ranges, writes (put, delete,
 * txn), watch streams opened (reconnects included) and the events they delivered; and the
 * transactions etcd answered whose compare failed (a compare-and-swap that lost a race). */
typedef struct etcd_stats_s {
    uint64_t keepalives, leases, ranges, writes;
    uint64_t watch_streams, watch_events;
    uint64_t txns_failed;
} etcd_stats_t;
void etcd_get_stats(const etcd_t *etcd, etcd_stats_t *stats);

/* ---- watches ---------------------------------------------------------------------------- */

typedef enum etcd_event_kind_e {
    ETCD_EVENT_PUT,
    ETCD_EVENT_DELETE,
} etcd_event_kind_t;

typedef struct etcd_event_s {
    etcd_event_kind_t kind;
    etcd_kv_t kv;            /* DELETE: key and mod_revision only */
} etcd_event_t;

/* events: one batch as etcd sent it (count may be 0 for progress). error != 0: the stream
 * broke (message says why); the watch goes on by itself, reconnecting (after 200 ms, then
 * backing off to 2 s) from the revision after the last one delivered, until cancelled. A
 * compacted start revision is reported as error -ERANGE (the caller re-reads and watches
 * again). */
typedef void (*etcd_watch_cb)(void *ctx, const etcd_event_t *events, size_t count,
                              int64_t revision, int error, const char *message);

/* Watches every key under prefix from start_revision (0: from now). NULL on -ENOMEM. */
etcd_watch_t *etcd_watch(etcd_t *etcd, const char *prefix, int64_t start_revision,
                         etcd_watch_cb cb, void *ctx);
void etcd_watch_cancel(etcd_watch_t *watch); /* NULL ok; no callback after it */

#endif
