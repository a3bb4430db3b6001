/* The control socket's parts (server.c: connections and frames; server_output.c: the replies
 * queued for clients, their caps, handing memory back after a burst). */
#ifndef SALUS_SALUSD_SERVER_INTERNAL_H
#define SALUS_SALUSD_SERVER_INTERNAL_H

#include "daemon.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

/* The books of one user's connections (one record per uid with a connection open). */
typedef struct server_user_s {
    uid_t uid;
    unsigned connections;
    uint64_t output_bytes;    /* replies queued for its connections, not sent yet */
    LIST_ENTRY(server_user_s) link;
} server_user_t;

/* server.c: closes c once the loop is back, dropping the replies it has not read. */
void server_conn_drop(conn_t *c);

/* server_output.c. Called by server.c only, on the loop's thread. */
int server_output_start(salusd_t *d);
void server_output_stop(salusd_t *d);
/* A new connection joins its user's books (and has its queued replies counted): 0 or
 * -ENOMEM. server_output_leave: it is freed (after server_output_forget). */
int server_output_join(conn_t *c);
void server_output_leave(conn_t *c);
/* c's books follow what its output buffer holds now (after a write to it). */
void server_output_sync(conn_t *c);
/* c's queued replies are no longer counted (it is being dropped or freed). */
void server_output_forget(conn_t *c);
/* Room for add more bytes of replies queued on c: 0, or -ENOBUFS when c itself must be cut
 * (logged). Past the cap of its user or of all clients, the connection that would hold the
 * most is cut, c or another (server_conn_drop); a connection that holds nothing may always
 * queue one reply (then the others holding the most are cut). */
int server_output_admit(conn_t *c, size_t add);
/* After partial-frame books changed (server.c): a burst that is over hands memory back. */
void server_output_note_held(salusd_t *d);

#endif
