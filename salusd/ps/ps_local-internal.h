/* ps_local's parts: the requests' common steps (ps_local.c) and the federated ops
 * (ps_local_fed.c) share a connection's state and tables. */
#ifndef SALUS_SALUSD_PS_LOCAL_INTERNAL_H
#define SALUS_SALUSD_PS_LOCAL_INTERNAL_H

#include "launch.h"
#include "ps.h"
#include "ps_local.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ps_local_table_s {
    int used;
    uint64_t handle;           /* the service's */
    uint64_t count;
    uint8_t *map;              /* count floats, then count uint64 keys */
    size_t map_bytes;
    uint64_t last_seq;         /* the highest push sequence this connection had acknowledged */
    void *copy;                /* the pushes' private copies, kept for the next push (no fresh
                                * pages to fault in per push) */
    size_t copy_bytes;
} ps_local_table_t;

typedef enum ps_local_op_e { PS_OP_NONE, PS_OP_OPEN, PS_OP_PUSH, PS_OP_PULL, PS_OP_CLOCK } ps_local_op_t;

typedef struct ps_local_conn_s {
    conn_t *conn;
    uint64_t job_id;           /* bound by the first successful open; 0: none */
    char group[LAUNCH_GROUP_BYTES];
    /* the request in flight */
    ps_local_op_t op;
    uint64_t request_id;
    int slot;                  /* its table */
    uint64_t clock, seq;
    uint64_t open_handle;      /* ps_open's out-parameter */
    ps_local_table_t tables[PS_LOCAL_MAX_TABLES];
} ps_local_conn_t;

/* The state of a connection that opened a table and has no request in flight, its worker
 * (w NULL: not looked up) and the table named by the body's handle (NULL: an error was
 * answered). */
ps_local_table_t *ps_local_request_table(conn_t *c, const proto_msg_t *msg,
                                         ps_local_conn_t **pcp, ps_worker_t *w);
/* Answers request id with the service's rc as a protocol error: "op: err" (err empty: the
 * errno's text). */
void ps_local_reply_error(conn_t *c, uint64_t id, const char *op, int rc, const char *err);
/* Answers a push (request id) {duplicate}. */
void ps_local_reply_duplicate(conn_t *c, uint64_t id, int duplicate);

#endif
