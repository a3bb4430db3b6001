/* ps_cluster's parts: the pure pieces (the ring record's JSON, the token exchange), kept
 * apart so that tests/unit/check_ps_cluster.c tests them alone. */
#ifndef SALUS_SALUSD_PS_CLUSTER_INTERNAL_H
#define SALUS_SALUSD_PS_CLUSTER_INTERNAL_H

#include "ps_cluster.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the ring record: P/ps/UID/GROUP/EPOCH/TABLE -------------------------------------------
 * value {"count": N, "rule": "add", "sync": "bsp", "servers": ["n1", "n2"], "vnodes": 64};
 * the record's epoch is the key's create revision (not in the value). */

#define PS_RING_MAX_VNODES 65536u
#define PS_RING_MAX_COUNT (1ull << 40)

/* Whether rec's fields are sane (count 1..PS_RING_MAX_COUNT, rule and sync of
 * [a-z0-9:.+-], servers a sorted list of distinct node names [A-Za-z0-9._-]{1,63}, vnodes
 * 1..PS_RING_MAX_VNODES). 0 or -EINVAL with err saying which. */
int ps_ring_record_check(const ps_ring_record_t *rec, char *err, size_t err_size);
/* The value for rec (checked first). The length, -EINVAL (err set) or -ENOSPC. */
int ps_ring_record_format(const ps_ring_record_t *rec, char *buf, size_t size, char *err,
                          size_t err_size);
/* Reads a value (len bytes, not NUL-terminated) into rec (epoch left 0), every field checked:
 * 0, or -EINVAL with err saying what is wrong. */
int ps_ring_record_parse(const char *text, size_t len, ps_ring_record_t *rec, char *err,
                         size_t err_size);

/* ---- the token exchange over the links ("ps_hello" {addr, token, have}) --------------------
 * Per member: mine, the token we expect on its messages (sent to it in our last hello;
 * fresh at each link-up of the link we dialed), theirs, the token it expects on ours (from
 * its last hello; 0: none). "have" in a hello: the sender holds a token of the receiver's
 * (theirs != 0); a receiver that holds none of its own yet, or whose peer has none of its,
 * answers with a hello (when its link is up; else its link-up does). Whichever side's link
 * comes up first, and across restarts of either daemon, both sides end with
 * add(send = the other's mine, recv = their own mine). Tokens are never 0. */
typedef struct ps_hello_peer_s {
    uint64_t mine, theirs;
} ps_hello_peer_t;

typedef struct ps_hello_out_s {
    int send;                 /* send a hello {token: send_token, have: send_have} */
    uint64_t send_token;
    int send_have;
    int add;                  /* ps_net_add_peer(send_token = add_send, recv = add_recv) */
    uint64_t add_send, add_recv;
} ps_hello_out_t;

/* The link we dialed to the peer is up (fresh: a new random token, != 0). */
void ps_hello_link_up(ps_hello_peer_t *p, uint64_t fresh, ps_hello_out_t *out);
/* A hello from the peer (token != 0); link_up: our link to it is up now. */
void ps_hello_received(ps_hello_peer_t *p, uint64_t token, int have, int link_up,
                       uint64_t fresh, ps_hello_out_t *out);
/* The peer is down (gone, or its sends failed): it takes a new hello to be a peer again.
 * With link_up, a hello that asks it for one (have 0) goes at once. */
void ps_hello_down(ps_hello_peer_t *p, int link_up, uint64_t fresh, ps_hello_out_t *out);

/* ---- tokens -------------------------------------------------------------------------------- */
/* A token from getrandom (never 0); 0 when none could be drawn. */
uint64_t ps_cluster_token(void);

#endif
