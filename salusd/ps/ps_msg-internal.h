/* The messages between daemons (ps_msg.c sends them, ps_msg_recv.c takes them apart): the
 * format's types and the little-endian writer and reader of their headers. */
#ifndef SALUS_SALUSD_PS_MSG_INTERNAL_H
#define SALUS_SALUSD_PS_MSG_INTERNAL_H

#include "ps-internal.h"
#include "ps_net.h"

#include <stdint.h>
#include <string.h>

#define PS_MSG_MAGIC 0x50534d31u /* "PSM1" */

enum {
    MSG_OPEN = 1,
    MSG_OPEN_OK,
    MSG_OPEN_ERR,
    MSG_UPDATE,
    MSG_UPDATE_ACK,
    MSG_PULL,
    MSG_PULL_REPLY,
    MSG_BYE,
    /* replication (ps_repl_fwd.c; 16 .. 31 are replication's and re-targeting's) */
    MSG_REPL_UPDATE = 16,     /* primary -> standby: an update it took (as MSG_UPDATE) */
    MSG_REPL_ACK = 17,        /* standby -> primary: u32 shard, u32 source, u64 seq, i32 rc */
    MSG_SHARD_STATE = 18,     /* a shard's whole state: u32 shard, u64 req, u8 handover */
    MSG_SHARD_STATE_ACK = 19, /* u32 shard, u64 req, i32 rc */
};

typedef struct wbuf_s {
    uint8_t b[PS_NET_MAX_HEADER];
    size_t len;
    int bad;
} wbuf_t;

static inline void ps_msg_put(wbuf_t *w, uint64_t v, size_t bytes)
{
    if (w->len + bytes > sizeof(w->b)) {
        w->bad = 1;
        return;
    }
    for (size_t i = 0; i < bytes; i++)
        w->b[w->len++] = (uint8_t)(v >> (8 * i));
}

static inline void ps_msg_put_str(wbuf_t *w, const char *s)
{
    size_t n = strlen(s);
    if (n > 255 || w->len + 1 + n > sizeof(w->b)) {
        w->bad = 1;
        return;
    }
    w->b[w->len++] = (uint8_t)n;
    memcpy(w->b + w->len, s, n);
    w->len += n;
}

typedef struct rbuf_s {
    const uint8_t *b;
    size_t len, at;
    int bad;
} rbuf_t;

static inline uint64_t ps_msg_get(rbuf_t *r, size_t bytes)
{
    uint64_t v = 0;
    if (r->at + bytes > r->len) {
        r->bad = 1;
        return 0;
    }
    for (size_t i = 0; i < bytes; i++)
        v |= (uint64_t)r->b[r->at++] << (8 * i);
    return v;
}

/* A string into out (NUL-terminated); bad when too long for out or it holds a NUL. */
static inline void ps_msg_get_str(rbuf_t *r, char *out, size_t size)
{
    size_t n = (size_t)ps_msg_get(r, 1);
    if (r->bad || r->at + n > r->len || n >= size || memchr(r->b + r->at, '\0', n)) {
        r->bad = 1;
        out[0] = '\0';
        return;
    }
    memcpy(out, r->b + r->at, n);
    out[n] = '\0';
    r->at += n;
}

/* The common part of every header: magic, type, the table's identity. */
void ps_msg_begin(wbuf_t *w, int type, const ps_table_t *t);
/* An update's header (MSG_UPDATE, MSG_REPL_UPDATE) after ps_msg_begin: u32 shard, u32 source,
 * u64 seq, u64 clock, u8 close, u8 keyed, u64 offset, u64 n. */
void ps_msg_put_update(wbuf_t *w, uint32_t shard, uint32_t source, const ps_update_t *u);
/* Sends header w and a copy of payload to node. 0 or a negative errno. */
int ps_msg_send(ps_t *ps, const char *node, const wbuf_t *w, const void *payload, size_t len);
/* An update's acknowledgement (rc 0 also for a duplicate). */
void ps_msg_send_ack(ps_table_t *t, const char *node, uint32_t shard, uint32_t source,
                     uint64_t seq, int rc);

#endif
