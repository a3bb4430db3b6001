/* The workers' parameter-server requests on the daemon's socket (protocol minor 3; the ops
 * are described in common/proto.h): a worker's own second connection, next to its shim's
 * session, opens tables of its group and pushes, pulls and clocks them through the service
 * (ps.h). Values travel in a sealed memfd the worker passes at open and both sides map. */
#ifndef SALUS_SALUSD_PS_LOCAL_H
#define SALUS_SALUSD_PS_LOCAL_H

#include "daemon.h"

#define PS_LOCAL_MAX_TABLES 64 /* tables open at once per connection */

void ps_local_handle_open(conn_t *c, const proto_msg_t *msg);
void ps_local_handle_push(conn_t *c, const proto_msg_t *msg);
void ps_local_handle_pull(conn_t *c, const proto_msg_t *msg);
void ps_local_handle_clock(conn_t *c, const proto_msg_t *msg);
void ps_local_handle_close(conn_t *c, const proto_msg_t *msg);
/* Federated tables (rule fedavg:...): the open round's state, a client's push. */
void ps_local_handle_fed_state(conn_t *c, const proto_msg_t *msg);
void ps_local_handle_fed_push(conn_t *c, const proto_msg_t *msg);
/* The close observer of a connection's PS state (CONN_SLOT_PS_LOCAL), registered by main:
 * its requests in flight are forgotten, its mappings go. */
extern const conn_slot_ops_t ps_local_conn_ops;

#endif
