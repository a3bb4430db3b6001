/* Checkpoints of a group's parameter-server tables, and their restore (README: Parameter
 * servers, checkpoints).
 *
 * Taking one (ps_ckpt.c): `salusctl checkpoint GROUP` on a node that runs ranks of the group
 * (op ps_checkpoint). C = the largest clock this node has closed over the group's tables here
 * (ps_worker_clocks_sent): no shard's done is beyond it (done never passes a clock some source
 * has not closed), and the request to each shard's server goes before this node's next update
 * on the same in-order endpoint. Each shard's server answers with the shard's values at done ==
 * C (ps_ckpt_server.c: kept until done reaches C; refused when done passed C; ASP: the values
 * of now, and the output says so). When every shard of every table answered, each table is
 * written to STATE_DIR/checkpoints/UID/GROUP/TABLE.ckpt (ps_ckpt_file.h: temporary, fsync,
 * rename), then copied to every other node that runs ranks of the group (so that any of them
 * can restore); bounded by a timeout, after which it fails and writes nothing. --period S:
 * one every S seconds while the group has live ranks here (0 stops it).
 *
 * Restoring (ps_ckpt_restore.c): the ranks of a group run with `salusctl run --restore` mark
 * the group restored on their node (groups_restored). The first open of each table there reads
 * its checkpoint file (an error when it is missing or bad) and proposes the ring record with
 * start = C; the agreed record must say C (a table already created by a run that did not
 * restore is an error). The servers' shards are made at done = C with the values
 * (ps_shard_create_at): those served here at once, the others by the opener's MSG_SNAP_LOAD
 * after its MSG_OPEN, acknowledged before the open completes. Every opener's aggregation starts
 * at the record's C (ps_agg_create_at) and the open's reply tells the client library its clock
 * (salus_ps_clock_of returns C). */
#ifndef SALUS_SALUSD_PS_CKPT_H
#define SALUS_SALUSD_PS_CKPT_H

#include "ps-internal.h"

#include <stddef.h>
#include <stdint.h>

#define PS_CKPT_TIMEOUT_S 30      /* a checkpoint not complete by then fails (op: timeout_s) */
#define PS_CKPT_SERVER_KEEP_S 120 /* a server keeps a snapshot request at most this long */
#define PS_CKPT_MAX_TABLES 64     /* tables of a group in one checkpoint */

/* The messages between daemons (ps_msg-internal.h's numbers 32..47 are this module's):
 *   SNAP_REQ       u64 req, u32 shard, u64 clock
 *   SNAP_REPLY     u64 req, u32 shard, i32 rc, u64 done, u8 asp, str why   payload n floats
 *   SNAP_LOAD      u64 req, u32 shard, u64 clock                           payload the shard's
 *                                                                          values
 *   SNAP_LOAD_ACK  u64 req, u32 shard, i32 rc, str why
 *   SNAP_FILE      u64 req                                  payload an encoded checkpoint file
 *   SNAP_FILE_ACK  u64 req, i32 rc, str why
 * after the common header (ps_msg_begin: the table's identity). */
enum {
    MSG_SNAP_REQ = 32,
    MSG_SNAP_REPLY = 33,
    MSG_SNAP_LOAD = 34,
    MSG_SNAP_LOAD_ACK = 35,
    MSG_SNAP_FILE = 36,
    MSG_SNAP_FILE_ACK = 37,
    MSG_SNAP_LAST = 47
};

/* ps_ckpt.c: the op ps_checkpoint {group, uid?, period_s?, timeout_s?} -> {clock, ms, lines}
 * (or {period_s, lines} when setting the period). */
void ps_ckpt_handle_checkpoint(conn_t *c, const proto_msg_t *msg);
/* A shard's answer reached the checkpoint req (from node; NULL values when rc < 0). */
void ps_ckpt_snap_arrived(ps_t *ps, const char *node, uint64_t req, uint32_t shard, int rc,
                          const char *why, const float *values, uint64_t n, uint64_t done,
                          int asp);
/* A copy of the files was written (rc 0) or not by node. */
void ps_ckpt_file_acked(ps_t *ps, const char *node, uint64_t req, int rc, const char *why);
/* The state directory (config or default) into out: 0 or -ENOENT. */
int ps_ckpt_state_dir(const salusd_t *d, char *out, size_t size);
/* The daemon stops: every checkpoint and period timer goes. */
void ps_ckpt_stop(salusd_t *d);

/* ps_ckpt_server.c */
/* Receives a message numbered 32..47 (r after the common header; t: the table, or NULL). */
void ps_ckpt_msg_recv(ps_t *ps, const char *node, int type, ps_table_t *t, uid_t uid,
                      const char *group, const char *name, uint64_t epoch, const void *header,
                      size_t header_len, size_t at, const void *payload, size_t payload_len);
/* A snapshot of shard at clock for req: answered now (to node, or to this daemon's own
 * checkpoint when node is this daemon), kept until done reaches clock, or refused. */
void ps_ckpt_serve(ps_table_t *t, uint32_t shard, uint64_t clock, const char *node, uint64_t req);
/* ps_server_wake's hook: the shard's done moved; kept requests at that clock are answered. */
void ps_ckpt_shard_done(ps_table_t *t, uint32_t shard);
/* Makes the shard served here start at done = clock with values (elems of them), unless it
 * holds that state already; refused when it holds anything else. 0 or a negative errno. */
int ps_ckpt_load_shard(ps_table_t *t, uint32_t shard, uint64_t clock, const float *values,
                       char *err, size_t err_size);
void ps_ckpt_server_stop(ps_t *ps);

/* ps_ckpt_restore.c: ps_open.c's hooks */
/* Before the ring is agreed: a restored group's table reads its checkpoint (t->restore_values,
 * t->start_clock) and *start is its clock; else nothing. 0 or a negative errno with err. */
int ps_ckpt_open_prepare(ps_table_t *t, const ps_table_spec_t *spec, uint64_t *start,
                         char *err, size_t err_size);
/* The agreed record: it must start at the checkpoint's clock when this opener restores. */
int ps_ckpt_open_agreed(const ps_table_t *t, const struct ps_ring_record_s *rec, char *err,
                        size_t err_size);
/* After the shards here were created: those are loaded from the checkpoint (every replica
 * held here). */
int ps_ckpt_open_shards(ps_table_t *t, char *err, size_t err_size);
/* After the open went to server node: the checkpoint's values of the shards it holds (as
 * primary or standby) go too (each counted in t->opens_pending until acknowledged). 0 or a
 * negative errno. */
int ps_ckpt_open_sent(ps_table_t *t, const char *node);
/* The clock an open table starts at (0 for an unknown handle). */
uint64_t ps_ckpt_start_clock(salusd_t *d, uint64_t handle);

#endif
