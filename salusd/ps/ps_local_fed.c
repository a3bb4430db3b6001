/* The local endpoint's federated ops (ps_local.h): a federated table's open round
 * (ps_fed_state) and a client's push of its local model (ps_fed_push), handed to
 * ps_fed_table.c (ps_fed_table-internal.h) on a connection's table (ps_local-internal.h). */
#include "ps_local.h"

#include "ps_local-internal.h"
#include "ps_fed_table-internal.h"

#include <stdint.h>

/* ps_fed_state {handle} -> {round, selected, pushed, clients, per_round, epochs} */
void ps_local_handle_fed_state(conn_t *c, const proto_msg_t *msg)
{
    ps_local_conn_t *pc = NULL;
    ps_worker_t w;
    ps_local_table_t *t = ps_local_request_table(c, msg, &pc, &w);
    ps_fed_state_t st;
    char err[256] = "";
    if (!t)
        return;
    int rc = ps_fed_table_state(c->daemon, &w, t->handle, &st, err, sizeof(err));
    if (rc < 0) {
        ps_local_reply_error(c, msg->id, "ps_fed_state", rc, err);
        return;
    }
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 6);
    proto_pack_kv_uint(&e->pk, "round", st.round);
    proto_pack_kv_bool(&e->pk, "selected", st.selected);
    proto_pack_kv_bool(&e->pk, "pushed", st.pushed);
    proto_pack_kv_uint(&e->pk, "clients", st.clients);
    proto_pack_kv_uint(&e->pk, "per_round", st.per_round);
    proto_pack_kv_uint(&e->pk, "epochs", st.epochs);
    proto_enc_finish(e);
    server_send(c, e);
}

/* ps_fed_push {handle, round, samples (int), work, n} -> {duplicate}: the worker's local
 * model in the region's first n floats (n: the table's count; ps_fed_push reads each value
 * once, so the region itself is passed) */
void ps_local_handle_fed_push(conn_t *c, const proto_msg_t *msg)
{
    ps_local_conn_t *pc = NULL;
    ps_worker_t w;
    ps_local_table_t *t = ps_local_request_table(c, msg, &pc, &w);
    uint64_t round = 0, work = 0, n = 0;
    int64_t samples = 0;
    char err[256] = "";
    if (!t)
        return;
    if (proto_get_uint(&msg->body, "round", &round) < 0 ||
        proto_get_int(&msg->body, "samples", &samples) < 0 ||
        proto_get_uint(&msg->body, "work", &work) < 0 ||
        proto_get_uint(&msg->body, "n", &n) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_fed_push: usage {handle, round, samples, work, n}");
        return;
    }
    if (n > t->count) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_fed_push: %llu values are beyond the table's %llu elements "
                           "(a push carries the whole model)", (unsigned long long)n,
                           (unsigned long long)t->count);
        return;
    }
    if (work > UINT32_MAX)
        work = UINT32_MAX; /* ps_fed_push says it is more than the epochs */
    int rc = ps_fed_table_push(c->daemon, &w, t->handle, round, samples, (uint32_t)work,
                               (const float *)(const void *)t->map, n, err, sizeof(err));
    if (rc < 0) {
        ps_local_reply_error(c, msg->id, "ps_fed_push", rc, err);
        return;
    }
    ps_local_reply_duplicate(c, msg->id, rc == 1);
}
