/* The parameter server's pure logic: update rules, sync modes, how a table is cut into shards,
 * the consistent-hash ring that places shards on servers, a shard's state on its server, and a
 * node's aggregation of its co-located workers' pushes. No I/O, no clock, no globals: the
 * daemon (salusd/ps*.c) moves the bytes and calls these; unit tests drive them directly.
 *
 * Clocks. A worker's clock starts at 0; it pulls, computes, pushes its contribution for its
 * current clock c, then clocks (c -> c + 1). A shard's `done` counts the clocks whose
 * contributions from every source are applied (clocks 0 .. done-1). A read by a worker at
 * clock c must see a state with done >= ps_sync_min_done(sync, c):
 *     BSP     c          (every update of the clocks before c; exact: never more, see below)
 *     SSP:s   c - s      (Bösen: every update up to clock c - s - 1), 0 when c <= s
 *     ASP     0          (no waiting)
 * Under BSP and SSP a shard buffers a clock's contributions and applies the clock whole, in
 * clock order, once every source has closed it (so a BSP read sees exactly clocks < c); under
 * ASP each contribution is applied when it arrives.
 *
 * Sources. A shard's contributions come from `sources` numbered 0 .. sources-1 (the nodes that
 * run workers of the group); each source sends, per clock, zero or more contributions (each
 * with a sequence number, strictly increasing per source, at most one in flight: a retry
 * repeats the last seq and is recognised as a duplicate), then closes the clock. */
#ifndef SALUS_PS_CORE_H
#define SALUS_PS_CORE_H

#include <stddef.h>
#include <stdint.h>

#define PS_NAME_BYTES 64          /* table names: [A-Za-z0-9._-]{1,63} */
#define PS_MAX_SOURCES 256
#define PS_MAX_LOCAL_WORKERS 256
#define PS_MAX_STALENESS 1000
#define PS_SHARD_MAX_ELEMS (256u * 1024u)  /* 1 MiB of float32 */
#define PS_SHARDS_PER_SERVER 8            /* at least this many shards per server, when
                                           * the table has the elements for them */
#define PS_RING_VNODES 64                 /* virtual nodes per server on the ring */
#define PS_MAX_SERVERS 256

/* ---- update rules ---------------------------------------------------------------------- */
typedef enum ps_rule_kind_e { PS_RULE_ADD, PS_RULE_ASSIGN, PS_RULE_SGD } ps_rule_kind_t;
typedef struct ps_rule_s {
    ps_rule_kind_t kind;
    float lr;                 /* sgd only: value -= lr * (sum of the clock's contributions) */
} ps_rule_t;
/* Under BSP and SSP a clock's contributions are summed, then applied once: add: value += sum;
 * assign: value = sum, only for the elements some contribution of that clock wrote (with one
 * writer per element and clock: its value; a sum, not the last arrival, so that a node's
 * aggregate holding zeros where its workers wrote nothing cannot overwrite another node's
 * value); sgd: value -= lr * sum (float arithmetic). Under ASP each contribution is applied on
 * arrival the same way (assign: the last applied wins). */
/* "add", "assign", "sgd:LR" (LR a finite float > 0, plain decimal: no sign, spaces, hex, inf
 * or nan). 0, or -EINVAL with err set (when err is not NULL; truncated to err_size) and *rule
 * unchanged. */
int ps_rule_parse(const char *text, ps_rule_t *rule, char *err, size_t err_size);
/* The canonical text ("sgd:0.05" as %g, with up to 9 digits when 6 would not read back as the
 * same float); the length written, or -ENOSPC (buf too small), -EINVAL (not a valid rule). */
int ps_rule_format(const ps_rule_t *rule, char *buf, size_t size);

/* ---- sync modes ------------------------------------------------------------------------ */
typedef enum ps_sync_kind_e { PS_SYNC_BSP, PS_SYNC_SSP, PS_SYNC_ASP } ps_sync_kind_t;
typedef struct ps_sync_s {
    ps_sync_kind_t kind;
    uint32_t staleness;       /* ssp only: s, 0 .. PS_MAX_STALENESS */
} ps_sync_t;
/* "bsp", "ssp:S" (S decimal digits, 0 .. PS_MAX_STALENESS), "asp". 0, or -EINVAL with err set
 * and *sync unchanged. */
int ps_sync_parse(const char *text, ps_sync_t *sync, char *err, size_t err_size);
/* The canonical text; the length written, -ENOSPC or -EINVAL as ps_rule_format. */
int ps_sync_format(const ps_sync_t *sync, char *buf, size_t size);
/* The least `done` a read at clock c may see (above). */
uint64_t ps_sync_min_done(const ps_sync_t *sync, uint64_t clock);
/* How many clocks a worker may run ahead of the slowest local worker, and a contribution's
 * clock ahead of a shard's done: BSP 1, SSP:s s + 1, ASP UINT64_MAX (no per-clock sums, no
 * bound). A correct worker never reaches it: its next pull waits first (a worker at clock c
 * has read done >= c - s). What goes beyond is refused with -EAGAIN (nothing changed: the
 * same call succeeds once the slowest worker, or done, has moved on), so that no worker can
 * make the daemon hold more than window + 2 clocks' sums of a table. */
uint64_t ps_sync_window(const ps_sync_t *sync);

/* 1 when name is a valid table name, else 0. */
int ps_name_valid(const char *name);

/* ---- layout: a table of `count` float32 elements cut into shards ------------------------ */
typedef struct ps_layout_s {
    uint64_t count;           /* elements */
    uint32_t shards;          /* >= 1 */
} ps_layout_t;
/* shards = min(count, max(servers * PS_SHARDS_PER_SERVER, ceil(count / PS_SHARD_MAX_ELEMS))),
 * at least 1; so no shard holds more than PS_SHARD_MAX_ELEMS. -EINVAL when count is 0 or
 * servers is 0 (or the table would need more than UINT32_MAX shards). */
int ps_layout_init(ps_layout_t *layout, uint64_t count, uint32_t servers);
/* Shard i holds elements [first, first + elems): even cuts (the first count % shards shards
 * one element longer). shard >= shards: first = count, elems = 0. */
void ps_layout_shard(const ps_layout_t *layout, uint32_t shard, uint64_t *first, uint64_t *elems);
/* The shard holding element index; index >= count: layout->shards (no shard). */
uint32_t ps_layout_shard_of(const ps_layout_t *layout, uint64_t index);

/* ---- the consistent-hash ring ------------------------------------------------------------ */
typedef struct ps_ring_s ps_ring_t;
/* A ring over `n` distinct server names (each hashed at `vnodes` points; 0: PS_RING_VNODES).
 * The ring does not depend on the order of names. NULL on bad input (n == 0, n >
 * PS_MAX_SERVERS, a duplicate, empty or NULL name, vnodes > 4096) or no memory.
 * The hash is part of the cluster's contract (every daemon places a shard alike): hash(text)
 * = splitmix64's finaliser of the 64-bit FNV-1a of text; server s's points are hash("s#v"),
 * v = 0 .. vnodes-1 in decimal; a shard's key is hash("table/shard"). check_ps_core pins it. */
ps_ring_t *ps_ring_create(const char *const *names, size_t n, uint32_t vnodes);
void ps_ring_destroy(ps_ring_t *ring); /* NULL ok */
size_t ps_ring_size(const ps_ring_t *ring);
const char *ps_ring_name(const ps_ring_t *ring, size_t index); /* sorted by name */
/* The index (into ps_ring_name's order) of the server that owns `shard` of table `table`
 * (the first ring point at or after the hash of "table/shard", wrapping). */
size_t ps_ring_owner(const ps_ring_t *ring, const char *table, uint32_t shard);
/* Of the table's shards, how many have a different owner's name in b than in a. */
uint32_t ps_ring_moved(const ps_ring_t *a, const ps_ring_t *b, const char *table,
                       uint32_t shards);

/* ---- replicas ------------------------------------------------------------------------------
 * A shard lives on r distinct servers (r bounded by the ring's size): the primary, which is
 * ps_ring_owner's server, then the standbys, the next distinct servers met going round the
 * ring from the shard's key. */
#define PS_MAX_REPLICAS 8
/* Writes the indices (ps_ring_name's order) of shard's replicas into out[0 .. k-1], primary
 * first, k = min(r, ps_ring_size(ring)) (r 0 counts as 1, r > PS_MAX_REPLICAS as
 * PS_MAX_REPLICAS); returns k. out must hold PS_MAX_REPLICAS. */
uint32_t ps_ring_replicas(const ps_ring_t *ring, const char *table, uint32_t shard, uint32_t r,
                          size_t *out);
/* Going from ring a to ring b with r replicas: of the table's shards, how many have another
 * primary (by name) in b than in a (*primaries), and how many replica copies b has that a
 * had not (*copies: for each shard, the servers in its b replica set not in its a set: the
 * state that must be sent). Either pointer may be NULL. */
void ps_ring_moves(const ps_ring_t *a, const ps_ring_t *b, const char *table, uint32_t shards,
                   uint32_t r, uint32_t *primaries, uint32_t *copies);

/* ---- a shard on its server ---------------------------------------------------------------- */
typedef struct ps_shard_s ps_shard_t;
/* A shard of `elems` elements (1 .. PS_SHARD_MAX_ELEMS), all 0, with `sources` contributors
 * (1 .. PS_MAX_SOURCES), a valid rule and sync mode. NULL on bad input or no memory. */
ps_shard_t *ps_shard_create(uint64_t elems, const ps_rule_t *rule, const ps_sync_t *sync,
                            uint32_t sources);
void ps_shard_destroy(ps_shard_t *shard); /* NULL ok */
/* A contribution of source for clock: n values for elements [offset, offset + n) of the shard
 * (keys == NULL), or for the n element indices keys[] (each < elems; offset is then ignored;
 * a key given twice adds twice). Returns 1 taken (applied, or buffered for its clock), 0 a
 * duplicate (seq <= the source's last: nothing changed), -EINVAL bad input (source, range,
 * key, a clock the source has closed already, a non-finite value, values NULL with n > 0):
 * nothing changed, -EAGAIN (BSP/SSP: clock beyond done + ps_sync_window: the source must wait
 * for done to move; ASP has no bound): nothing changed, -ENOMEM (a new clock's buffer or a
 * key set's undo copy): nothing changed, -ERANGE: a result would not be finite (float
 * overflow): the clock's sum with it, the values it makes under ASP, or (BSP/SSP, the clock
 * applied next) the values the clock's sum with it would make; its values are refused (the
 * shard keeps its values and sums), the contribution counts as taken (its seq is recorded: a
 * retry is a duplicate, 0). The shape (source, range, keys, values) is checked before the
 * duplicate test, the clock after it: a retry of a taken contribution is 0 even after its
 * clock closed. */
int ps_shard_contribute(ps_shard_t *shard, uint32_t source, uint64_t seq, uint64_t clock,
                        uint64_t offset, uint64_t n, const uint64_t *keys, const float *values);
/* Source has closed clock (clocks close in order: a repeat of the last closed clock returns 0,
 * a gap or an older clock returns -EINVAL). Returns 1 when it was new; may advance done (apply
 * whole clocks, in order, each once every source has closed it). A clock whose sum would make
 * a value that is not finite (SSP: a clock summed ahead of the values it meets) is not
 * applied: the values stay as they were, done still counts it (ps_shard_refused). */
int ps_shard_close(ps_shard_t *shard, uint32_t source, uint64_t clock);
/* How many clocks were not applied because their result was not finite. */
uint64_t ps_shard_refused(const ps_shard_t *shard);
uint64_t ps_shard_done(const ps_shard_t *shard);
/* The clocks source has closed (0 .. closed-1); 0 for a bad source. */
uint64_t ps_shard_closed(const ps_shard_t *shard, uint32_t source);
uint64_t ps_shard_elems(const ps_shard_t *shard);
const float *ps_shard_values(const ps_shard_t *shard);
/* Bytes the shard holds now (values and pending clocks), for the quota and metrics. */
uint64_t ps_shard_bytes(const ps_shard_t *shard);
/* Of those, the pending clocks' sums (and a kept one's): what the quota counts besides the
 * values. */
uint64_t ps_shard_pending_bytes(const ps_shard_t *shard);

/* ---- a shard's whole state, to copy or move it --------------------------------------------
 * What a standby is caught up with and a re-balanced shard moves with: the values, done, each
 * source's last seq and closed clocks, the pending clocks' sums and written bits. The bytes are
 * a little-endian format of ps-core's own (a magic and a version first), the same on every
 * daemon; loading checks every field (a truncated or corrupted state, or one of another shape,
 * is refused, never half-loaded). The format is described in ps_shard_state.c; a state is
 * 56 + 20 * sources + 4 * elems + (per pending clock 8 + 4 * elems, + (elems + 7) / 8 for
 * assign) + 8 bytes. Clocks in a state (done, closed) are at most INT64_MAX, as they are for
 * ps_shard_create_at and ps_agg_create_at. (Values and sums stay finite: updates whose result
 * would not be are refused; a state holding a non-finite one is refused by ps_shard_load.) */
/* The bytes ps_shard_save needs now. */
size_t ps_shard_state_size(const ps_shard_t *shard);
/* Writes the state into buf: the bytes written, or -ENOSPC (size too small: nothing useful
 * written). */
int64_t ps_shard_save(const ps_shard_t *shard, void *buf, size_t size);
/* A shard made from a saved state, which must be of a shard of `elems` elements with this rule,
 * sync mode and number of sources; NULL with err saying why (any inconsistency, non-finite
 * value, wrong shape) or no memory. */
ps_shard_t *ps_shard_load(const void *buf, size_t size, uint64_t elems, const ps_rule_t *rule,
                          const ps_sync_t *sync, uint32_t sources, char *err, size_t err_size);
/* A shard that starts at clock `done` (restored from a checkpoint): values[0 .. elems-1] copied
 * (finite), every source has closed clocks 0 .. done-1, no seq seen. NULL on bad input (as
 * ps_shard_create, or a non-finite value) or no memory. */
ps_shard_t *ps_shard_create_at(uint64_t elems, const ps_rule_t *rule, const ps_sync_t *sync,
                               uint32_t sources, uint64_t done, const float *values);
/* 1 when every element, done, every source's seq and closed clocks and the pending clocks are
 * the same in a and b (a test of replicas kept in step), else 0. */
int ps_shard_same(const ps_shard_t *a, const ps_shard_t *b);
/* The 64-bit FNV-1a hash of n bytes: the checksum closing a shard's state and a checkpoint
 * file (salusd/ps_ckpt_file.c). */
uint64_t ps_fnv1a(const void *p, size_t n);

/* ---- a node's aggregation of its local workers ------------------------------------------ */
/* BSP and SSP only (under ASP the daemon forwards each push at once; ps_agg_create refuses
 * ASP). Local workers are numbered 0 .. workers-1 (their order among the group's ranks on this
 * node). Each push carries the worker's sequence number (strictly increasing per worker; a
 * retried push repeats it) and its clock, which must be the worker's current clock. Several
 * clocks may be open at once (SSP: fast workers ahead). A clock's sum is complete once every
 * local worker has closed it. */
typedef struct ps_agg_s ps_agg_t;
ps_agg_t *ps_agg_create(uint64_t count, const ps_sync_t *sync, uint32_t workers);
/* As ps_agg_create, with every worker's current clock `clock` (a group restored from a
 * checkpoint at that clock): clocks before it count as closed and released. */
ps_agg_t *ps_agg_create_at(uint64_t count, const ps_sync_t *sync, uint32_t workers,
                           uint64_t clock);
void ps_agg_destroy(ps_agg_t *agg); /* NULL ok */
/* 1 taken (added into the clock's sum), 0 duplicate (seq <= the worker's last seq: nothing
 * changed), -EINVAL bad input (worker, range, key, clock other than the worker's current one,
 * a non-finite value): nothing changed, -ERANGE (the clock's sum with it would not be finite:
 * float overflow): nothing changed, -EAGAIN (the clock more than ps_sync_window ahead of
 * the slowest local worker's, or more than window + 1 ahead of the oldest sum not yet
 * released: wait for the others, or for the servers' acknowledgements): nothing changed,
 * -ENOMEM (a new clock's sum): nothing changed. keys == NULL: n values
 * for [offset, offset + n); else n values for keys[] (offset ignored). Shape before duplicate
 * before clock, as ps_shard_contribute. */
int ps_agg_push(ps_agg_t *agg, uint32_t worker, uint64_t seq, uint64_t clock, uint64_t offset,
                uint64_t n, const uint64_t *keys, const float *values);
/* Worker closes its current clock (it must be `clock`; a repeat of the last closed one returns
 * 0). Returns 1 when this made clock complete on this node (every worker closed it), 2 when
 * new but not complete, 0 repeat, -EINVAL bad (worker, any other clock), -EAGAIN (the worker's
 * next clock would be beyond the window of ps_agg_push: nothing changed), -ENOMEM (the zero sum
 * of a complete clock nobody pushed into): nothing changed. */
int ps_agg_close(ps_agg_t *agg, uint32_t worker, uint64_t clock);
/* The worker's current clock (0 for a bad worker). */
uint64_t ps_agg_clock_of(const ps_agg_t *agg, uint32_t worker);
/* The sum of a complete clock's contributions (count values; zeros where nobody pushed), or
 * NULL when that clock is not complete or was released. Stays valid until released. */
const float *ps_agg_sum(const ps_agg_t *agg, uint64_t clock);
/* Which elements of a complete clock's sum some push wrote: bit i (byte i / 8, bit i % 8) set
 * for element i; NULL exactly when ps_agg_sum is. Added after the interfaces were declared
 * (nothing else changed): an "assign" table must not be sent the zeros nobody pushed, or the
 * shard would assign them (send the written elements as keys, or a bare close when none). */
const uint8_t *ps_agg_written(const ps_agg_t *agg, uint64_t clock);
/* Frees a complete clock's sum (after it was sent to every shard's server); nothing for a clock
 * not complete or already released. */
void ps_agg_release(ps_agg_t *agg, uint64_t clock);
uint64_t ps_agg_bytes(const ps_agg_t *agg);
/* Of those, the clocks' sums and bits (and a kept one's): what the quota counts. */
uint64_t ps_agg_sum_bytes(const ps_agg_t *agg);
/* The bytes a push of worker (at its current clock) would allocate now: a clock's sum and bits
 * when that clock has none yet and no released buffers are kept, else 0; for a quota check
 * before the push. */
uint64_t ps_agg_push_bytes(const ps_agg_t *agg, uint32_t worker);
/* 1 when no push has made clock's sum yet: the next push of the whole table for it is copied
 * in with each value read once (checked in the same pass), so that its values may be memory
 * another process can write meanwhile; 0 otherwise (a push reads its values more than once:
 * a private copy). */
int ps_agg_clock_fresh(const ps_agg_t *agg, uint64_t clock);

#endif
