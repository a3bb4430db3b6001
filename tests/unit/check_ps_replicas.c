/* Unit tests of what replication needs from the parameter server's pure core
 * (ps-core/ps_core.h): a shard's replica set on the ring and what moves between two rings, a
 * shard's whole state saved and loaded (round trips at every step of random runs, truncated,
 * corrupted and wrong-shape states refused), a shard and a node's aggregation made at a clock
 * (restored from a checkpoint). The rest of ps_core.h is tests/unit/check_ps_core.c's. Nothing
 * here sleeps or prints. */
#include "check_run.h"
#include "ps_core.h"
#include "ps_core_test.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replicas ------------------------------------------------------------------------------ */

/* The contract, pinned by a plain reimplementation (ref_hash: ps_core_test.h), points
 * "name#v", keys "table/shard"; the replicas are the first distinct servers met going round the
 * sorted points from the first one at or after the key. */
typedef struct ref_point_s {
    uint64_t hash;
    const char *name;
} ref_point_t;

static int ref_point_cmp(const void *a, const void *b)
{
    const ref_point_t *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The names of the replicas into out (k of them). */
static uint32_t ref_replicas(const char *const *names, size_t n, uint32_t vnodes,
                             const char *table, uint32_t shard, uint32_t r, const char **out)
{
    ref_point_t *pts = calloc(n * vnodes, sizeof(*pts));
    ck_assert_ptr_nonnull(pts);
    char text[128];
    for (size_t s = 0; s < n; s++)
        for (uint32_t v = 0; v < vnodes; v++) {
            snprintf(text, sizeof(text), "%s#%u", names[s], v);
            pts[s * vnodes + v] = (ref_point_t){.hash = ref_hash(text), .name = names[s]};
        }
    qsort(pts, n * vnodes, sizeof(*pts), ref_point_cmp);
    snprintf(text, sizeof(text), "%s/%u", table, shard);
    uint64_t key = ref_hash(text);
    size_t start = 0;
    while (start < n * vnodes && pts[start].hash < key)
        start++;
    uint32_t k = 0;
    for (size_t i = 0; i < n * vnodes && k < r; i++) {
        const char *name = pts[(start + i) % (n * vnodes)].name;
        uint32_t j = 0;
        while (j < k && strcmp(out[j], name) != 0)
            j++;
        if (j == k)
            out[k++] = name;
    }
    free(pts);
    return k;
}

START_TEST(test_replicas_sets)
{
    const char *names[] = {"n3", "n1", "n6", "n2", "n5", "n4"};
    for (size_t n = 1; n <= 6; n++) {
        ps_ring_t *ring = ps_ring_create(names, n, 16);
        ck_assert_ptr_nonnull(ring);
        for (uint32_t r = 0; r <= PS_MAX_REPLICAS + 2; r++) {
            uint32_t capped = r == 0 ? 1 : r > PS_MAX_REPLICAS ? PS_MAX_REPLICAS : r;
            uint32_t want_k = capped < n ? capped : (uint32_t)n;
            for (uint32_t s = 0; s < 64; s++) {
                size_t out[PS_MAX_REPLICAS];
                uint32_t k = ps_ring_replicas(ring, "t.w", s, r, out);
                ck_assert_uint_eq(k, want_k);
                ck_assert_uint_eq(out[0], ps_ring_owner(ring, "t.w", s)); /* primary first */
                for (uint32_t i = 0; i < k; i++) {
                    ck_assert_uint_lt(out[i], n);
                    for (uint32_t j = 0; j < i; j++)
                        ck_assert_uint_ne(out[i], out[j]); /* distinct */
                }
                const char *ref[PS_MAX_REPLICAS];
                ck_assert_uint_eq(ref_replicas(names, n, 16, "t.w", s, capped, ref), k);
                for (uint32_t i = 0; i < k; i++)
                    ck_assert_str_eq(ps_ring_name(ring, out[i]), ref[i]);
            }
        }
        ps_ring_destroy(ring);
    }
    size_t out[PS_MAX_REPLICAS];
    ck_assert_uint_eq(ps_ring_replicas(NULL, "t", 0, 3, out), 0);
    ps_ring_t *one = ps_ring_create(names, 1, 0);
    ck_assert_uint_eq(ps_ring_replicas(one, "t", 0, 3, NULL), 0);
    ck_assert_uint_eq(ps_ring_replicas(one, "t", 0, 3, out), 1);
    ck_assert_uint_eq(out[0], 0);
    ps_ring_destroy(one);
}
END_TEST

START_TEST(test_replicas_name_order)
{
    const char *a[] = {"node1", "node2", "node3", "node4", "node5"};
    const char *b[] = {"node4", "node2", "node5", "node1", "node3"};
    ps_ring_t *ra = ps_ring_create(a, 5, 0), *rb = ps_ring_create(b, 5, 0);
    ck_assert_ptr_nonnull(ra);
    ck_assert_ptr_nonnull(rb);
    for (uint32_t s = 0; s < 512; s++) {
        size_t oa[PS_MAX_REPLICAS], ob[PS_MAX_REPLICAS];
        uint32_t ka = ps_ring_replicas(ra, "emb", s, 3, oa);
        ck_assert_uint_eq(ps_ring_replicas(rb, "emb", s, 3, ob), ka);
        for (uint32_t i = 0; i < ka; i++)
            ck_assert_str_eq(ps_ring_name(ra, oa[i]), ps_ring_name(rb, ob[i]));
    }
    ps_ring_destroy(ra);
    ps_ring_destroy(rb);
}
END_TEST

/* 1 when name is among the k replica names of set (indices into ring). */
static int in_set(const ps_ring_t *ring, const size_t *set, uint32_t k, const char *name)
{
    for (uint32_t i = 0; i < k; i++)
        if (strcmp(ps_ring_name(ring, set[i]), name) == 0)
            return 1;
    return 0;
}

START_TEST(test_ring_moves_join)
{
    const char *four[] = {"node1", "node2", "node3", "node4"};
    const char *five[] = {"node3", "node1", "node5", "node2", "node4"};
    ps_ring_t *a = ps_ring_create(four, 4, 0), *b = ps_ring_create(five, 5, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    static const char *const tables[] = {"weights", "mlp.w1", "emb"};
    const uint32_t shards = 320;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        for (uint32_t r = 1; r <= 3; r += 2) {
            uint32_t moved = 0, copies = 0;
            for (uint32_t s = 0; s < shards; s++) {
                size_t sa[PS_MAX_REPLICAS], sb[PS_MAX_REPLICAS];
                uint32_t ka = ps_ring_replicas(a, tables[t], s, r, sa);
                uint32_t kb = ps_ring_replicas(b, tables[t], s, r, sb);
                ck_assert_uint_eq(ka, r);
                ck_assert_uint_eq(kb, r);
                const char *was = ps_ring_name(a, sa[0]), *now = ps_ring_name(b, sb[0]);
                if (strcmp(was, now) != 0) {
                    moved++;
                    ck_assert_msg(strcmp(now, "node5") == 0, "%s/%u: primary %s -> %s",
                                  tables[t], s, was, now);
                }
                for (uint32_t i = 0; i < kb; i++) {
                    const char *name = ps_ring_name(b, sb[i]);
                    if (!in_set(a, sa, ka, name)) {
                        copies++; /* only the joining server gets copies */
                        ck_assert_msg(strcmp(name, "node5") == 0, "%s/%u: a copy on %s",
                                      tables[t], s, name);
                    }
                }
            }
            double fraction = moved / (double)shards;
            ck_assert_msg(fraction >= 0.10 && fraction <= 0.32, "%s r %u: %.3f of primaries",
                          tables[t], r, fraction);
            /* r copies of every shard: the new server holds about r/5 of them */
            double share = copies / (double)(shards * r);
            ck_assert_msg(share >= 0.10 && share <= 0.32, "%s r %u: %.3f of copies", tables[t],
                          r, share);
            uint32_t got_moved = 0, got_copies = 0;
            ps_ring_moves(a, b, tables[t], shards, r, &got_moved, &got_copies);
            ck_assert_uint_eq(got_moved, moved);
            ck_assert_uint_eq(got_copies, copies);
            ck_assert_uint_eq(got_moved, ps_ring_moved(a, b, tables[t], shards));
            if (r == 1)
                ck_assert_uint_eq(copies, moved);
            else
                ck_assert_uint_gt(copies, moved); /* standbys move too */
            /* the server leaving again: the same primaries move back, and every copy node5
             * held is made again on one of the others */
            ps_ring_moves(b, a, tables[t], shards, r, &got_moved, &got_copies);
            ck_assert_uint_eq(got_moved, moved);
            ck_assert_uint_eq(got_copies, copies);
            ps_ring_moves(a, a, tables[t], shards, r, &got_moved, &got_copies);
            ck_assert_uint_eq(got_moved, 0);
            ck_assert_uint_eq(got_copies, 0);
        }
    }
    uint32_t p = 7, c = 7;
    ps_ring_moves(a, b, "emb", 64, 3, NULL, &c); /* either pointer may be NULL */
    ps_ring_moves(a, b, "emb", 64, 3, &p, NULL);
    ck_assert_uint_gt(c, p);
    ps_ring_moves(NULL, b, "emb", 64, 3, &p, &c);
    ck_assert_uint_eq(p, 0);
    ck_assert_uint_eq(c, 0);
    ps_ring_destroy(a);
    ps_ring_destroy(b);
}
END_TEST

/* ---- a shard's state: random runs, a round trip at every step ---------------------------- */

#define RUN_SOURCES 3
#define RUN_ELEMS 13 /* not a multiple of 8: the written bits' last byte is partial */
#define RUN_MAX_SHARDS 4

/* A run's sources: their next seq and current clock, and the last contribution taken (for a
 * retry). */
typedef struct run_s {
    rng_t rng;
    uint64_t seq[RUN_SOURCES], clock[RUN_SOURCES];
    int pushed[RUN_SOURCES];
} run_t;

/* One random move, done alike on every shard of shards[0 .. n-1] (which must answer alike):
 * a contribution (a range or keys, small binary fractions: exact sums), a retry of the last
 * one, or a close. */
static void run_step(run_t *run, ps_shard_t **shards, size_t n)
{
    uint32_t s = rng_below(&run->rng, RUN_SOURCES);
    uint32_t what = rng_below(&run->rng, 10);
    int got[RUN_MAX_SHARDS];
    if (what < 6 || (what < 7 && !run->pushed[s])) {
        uint64_t keys[4], offset = rng_below(&run->rng, RUN_ELEMS), count;
        float values[RUN_ELEMS];
        int use_keys = rng_below(&run->rng, 2);
        if (use_keys) {
            count = 1 + rng_below(&run->rng, 4);
            for (uint64_t i = 0; i < count; i++)
                keys[i] = rng_below(&run->rng, RUN_ELEMS);
        } else {
            count = rng_below(&run->rng, (uint32_t)(RUN_ELEMS - offset) + 1);
        }
        for (uint64_t i = 0; i < count; i++)
            values[i] = (float)((int)rng_below(&run->rng, 33) - 16) / 8.0f;
        uint64_t seq = run->seq[s] + 1;
        for (size_t i = 0; i < n; i++)
            got[i] = ps_shard_contribute(shards[i], s, seq, run->clock[s], offset, count,
                                         use_keys ? keys : NULL, values);
        ck_assert(got[0] == 1 || got[0] == -EAGAIN);
        if (got[0] == 1) {
            run->seq[s] = seq;
            run->pushed[s] = 1;
        }
    } else if (what < 7) {
        float one = 1.0f;
        for (size_t i = 0; i < n; i++) /* a retry: recognised by its seq on every copy */
            got[i] = ps_shard_contribute(shards[i], s, run->seq[s], run->clock[s], 0, 1, NULL,
                                         &one);
        ck_assert_int_eq(got[0], 0);
    } else {
        for (size_t i = 0; i < n; i++)
            got[i] = ps_shard_close(shards[i], s, run->clock[s]);
        ck_assert_int_eq(got[0], 1);
        run->clock[s]++;
    }
    for (size_t i = 1; i < n; i++)
        ck_assert_int_eq(got[i], got[0]);
}

/* Saves shard and loads it back: the copy (same as shard), its state's size checked. */
static ps_shard_t *round_trip(const ps_shard_t *shard, const char *rule, const char *sync,
                              uint32_t sources)
{
    size_t size = ps_shard_state_size(shard);
    ck_assert_uint_gt(size, 0);
    uint8_t *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(ps_shard_save(shard, buf, size), (int64_t)size);
    ps_rule_t r = rule_of(rule);
    ps_sync_t s = sync_of(sync);
    char err[160] = "";
    ps_shard_t *copy = ps_shard_load(buf, size, ps_shard_elems(shard), &r, &s, sources, err,
                                     sizeof(err));
    ck_assert_msg(copy != NULL, "load refused: %s", err);
    ck_assert(ps_shard_same(shard, copy));
    ck_assert(ps_shard_same(copy, shard));
    ck_assert_uint_eq(ps_shard_state_size(copy), size);
    free(buf);
    return copy;
}

static const char *const RULES[] = {"add", "assign", "sgd:0.5"};
static const char *const SYNCS[] = {"bsp", "ssp:2", "asp"};

START_TEST(test_state_random_runs)
{
    uint32_t with_pending = 0, with_two = 0;
    for (size_t ri = 0; ri < 3; ri++)
        for (size_t si = 0; si < 3; si++)
            for (uint64_t trial = 0; trial < 12; trial++) {
                run_t run = {.rng = {.state = trial * 131 + ri * 7 + si}};
                ps_shard_t *live = shard_new(RUN_ELEMS, RULES[ri], SYNCS[si], RUN_SOURCES);
                /* the state's size with no pending clock, and one pending clock's bytes */
                size_t bare = ps_shard_state_size(live);
                size_t per_clock = 8 + 4 * RUN_ELEMS + (ri == 1 ? (RUN_ELEMS + 7) / 8 : 0);
                for (int step = 0; step < 60; step++) {
                    /* a copy made now, then driven alongside: the same answers, the same
                     * state, after every further move */
                    ps_shard_t *copy = round_trip(live, RULES[ri], SYNCS[si], RUN_SOURCES);
                    size_t size = ps_shard_state_size(live);
                    with_pending += size >= bare + per_clock;
                    with_two += size >= bare + 2 * per_clock;
                    ps_shard_t *both[2] = {live, copy};
                    for (int more = 0; more < 6; more++) {
                        run_step(&run, both, 2);
                        if (!ps_shard_same(live, copy))
                            ck_abort_msg("%s %s trial %lu step %d: copies differ",
                                         RULES[ri], SYNCS[si], (unsigned long)trial, step);
                        ck_assert_uint_eq(ps_shard_done(live), ps_shard_done(copy));
                        ck_assert(memcmp(ps_shard_values(live), ps_shard_values(copy),
                                         RUN_ELEMS * sizeof(float)) == 0);
                    }
                    ps_shard_destroy(copy);
                }
                ck_assert_uint_gt(ps_shard_done(live), 3); /* the runs went through clocks */
                ps_shard_destroy(live);
            }
    /* the round trips met pending clocks, several at once too (SSP) */
    ck_assert_uint_gt(with_pending, 200);
    ck_assert_uint_gt(with_two, 20);
}
END_TEST

/* ---- a shard's state: one with pending clocks, and every way to spoil it ------------------ */

#define ST_ELEMS 13
#define ST_SOURCES 3

/* 13 elements, 3 sources: source 0 wrote the whole shard for clock 0, closed it and wrote two
 * keys for clock 1; source 1 wrote a key for clock 0 and closed it; source 2 has done nothing.
 * So done is 0 and (BSP, SSP) clocks 0 and 1 are pending. */
static ps_shard_t *pending_shard(const char *rule, const char *sync)
{
    ps_shard_t *shard = shard_new(ST_ELEMS, rule, sync, ST_SOURCES);
    float whole[ST_ELEMS];
    for (int i = 0; i < ST_ELEMS; i++)
        whole[i] = (float)(i + 1) / 4.0f;
    uint64_t keys[2] = {2, 5}, key3 = 3;
    float two[2] = {0.5f, -1.5f}, one = 2.25f;
    ck_assert_int_eq(ps_shard_contribute(shard, 0, 1, 0, 0, ST_ELEMS, NULL, whole), 1);
    ck_assert_int_eq(ps_shard_close(shard, 0, 0), 1);
    ck_assert_int_eq(ps_shard_contribute(shard, 0, 2, 1, 0, 2, keys, two), 1);
    ck_assert_int_eq(ps_shard_contribute(shard, 1, 7, 0, 0, 1, &key3, &one), 1);
    ck_assert_int_eq(ps_shard_close(shard, 1, 0), 1);
    ck_assert_uint_eq(ps_shard_done(shard), 0);
    return shard;
}

/* The saved state of shard (malloc'd; *size set). */
static uint8_t *saved(const ps_shard_t *shard, size_t *size)
{
    *size = ps_shard_state_size(shard);
    uint8_t *buf = malloc(*size + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(ps_shard_save(shard, buf, *size), (int64_t)*size);
    return buf;
}

/* Loading buf must be refused, with a reason. */
static void assert_refused(const uint8_t *buf, size_t size, const char *rule, const char *sync,
                           uint64_t elems, uint32_t sources, const char *what)
{
    ps_rule_t r = rule_of(rule);
    ps_sync_t s = sync_of(sync);
    char err[160] = "";
    ps_shard_t *got = ps_shard_load(buf, size, elems, &r, &s, sources, err, sizeof(err));
    if (got != NULL) {
        ps_shard_destroy(got);
        ck_abort_msg("%s %s: %s was loaded", rule, sync, what);
    }
    ck_assert_msg(err[0] != '\0', "%s %s: %s refused without a reason", rule, sync, what);
    /* and with no room for a reason: refused alike, nothing written */
    ck_assert_ptr_null(ps_shard_load(buf, size, elems, &r, &s, sources, NULL, 0));
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The format's checksum written again after a forged change (FNV-1a 64 of all bytes before it),
 * so that what refuses the change is the field check, not the checksum. */
static void resign(uint8_t *buf, size_t size)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i + 8 < size; i++) {
        h ^= buf[i];
        h *= 1099511628211ull;
    }
    put_le(buf + size - 8, h, 8);
}

/* The format's offsets (ps_shard_state.c's comment): header 56 bytes, 20 per source, then the
 * values, then per pending clock its number, sum and (assign) written bits. */
#define OFF_VERSION 8
#define OFF_SOURCES_COUNT 28
#define OFF_DONE 40
#define OFF_NPENDING 48
#define OFF_RESERVED 52
#define OFF_SOURCE(s) (56 + 20 * (s))
#define OFF_VALUES OFF_SOURCE(ST_SOURCES)
#define OFF_PENDING (OFF_VALUES + 4 * ST_ELEMS)

START_TEST(test_state_truncated)
{
    for (size_t ri = 0; ri < 3; ri++)
        for (size_t si = 0; si < 3; si++) {
            ps_shard_t *shard = pending_shard(RULES[ri], SYNCS[si]);
            size_t size;
            uint8_t *buf = saved(shard, &size);
            for (size_t len = 0; len < size; len++) {
                /* a copy of exactly len bytes, so that ASan sees any read past it */
                uint8_t *part = malloc(len ? len : 1);
                ck_assert_ptr_nonnull(part);
                memcpy(part, buf, len);
                char what[64];
                snprintf(what, sizeof(what), "%zu of %zu bytes", len, size);
                assert_refused(part, len, RULES[ri], SYNCS[si], ST_ELEMS, ST_SOURCES, what);
                free(part);
            }
            buf[size] = 0;
            assert_refused(buf, size + 1, RULES[ri], SYNCS[si], ST_ELEMS, ST_SOURCES,
                           "a state with a byte more");
            assert_refused(NULL, size, RULES[ri], SYNCS[si], ST_ELEMS, ST_SOURCES, "NULL");
            free(buf);
            ps_shard_destroy(shard);
        }
}
END_TEST

START_TEST(test_state_flipped_bytes)
{
    static const uint8_t masks[] = {0x01, 0x80, 0xff};
    for (size_t ri = 0; ri < 3; ri++)
        for (size_t si = 0; si < 3; si++) {
            ps_shard_t *shard = pending_shard(RULES[ri], SYNCS[si]);
            size_t size;
            uint8_t *buf = saved(shard, &size);
            for (size_t at = 0; at < size; at++)
                for (size_t m = 0; m < sizeof(masks); m++) {
                    buf[at] ^= masks[m];
                    char what[64];
                    snprintf(what, sizeof(what), "byte %zu ^ 0x%02x", at, masks[m]);
                    assert_refused(buf, size, RULES[ri], SYNCS[si], ST_ELEMS, ST_SOURCES, what);
                    buf[at] ^= masks[m];
                }
            free(buf);
            ps_shard_destroy(shard);
        }
}
END_TEST

/* A forged change to a signed state: refused. */
typedef void (*forge_fn)(uint8_t *buf);

static void forge_done_ahead(uint8_t *b) { put_le(b + OFF_DONE, 1, 8); }
static void forge_done_behind(uint8_t *b) { put_le(b + OFF_SOURCE(2) + 8, 1, 8); }
static void forge_done_huge(uint8_t *b) { put_le(b + OFF_DONE, 1ull << 63, 8); }
static void forge_seq_flags(uint8_t *b) { put_le(b + OFF_SOURCE(2) + 16, 2, 4); }
static void forge_seq_unseen(uint8_t *b) { put_le(b + OFF_SOURCE(2), 5, 8); }
static void forge_closed_huge(uint8_t *b) { put_le(b + OFF_SOURCE(0) + 8, (1ull << 63) + 1, 8); }
static void forge_value_nan(uint8_t *b) { put_le(b + OFF_VALUES + 4 * 4, 0x7fc00000u, 4); }
static void forge_value_inf(uint8_t *b) { put_le(b + OFF_VALUES + 4 * 12, 0xff800000u, 4); }
static void forge_version(uint8_t *b) { put_le(b + OFF_VERSION, 2, 4); }
static void forge_reserved(uint8_t *b) { put_le(b + OFF_RESERVED, 1, 4); }
static void forge_magic(uint8_t *b) { b[0] = 'X'; }
static void forge_npending(uint8_t *b) { put_le(b + OFF_NPENDING, 1000, 4); }
static void forge_sources(uint8_t *b) { put_le(b + OFF_SOURCES_COUNT, 2, 4); }

/* (BSP, SSP: pending clocks 0 and 1 follow the values) */
static void forge_sum_nan(uint8_t *b) { put_le(b + OFF_PENDING + 8 + 4 * 3, 0x7f800001u, 4); }
static void forge_clock_far(uint8_t *b) { put_le(b + OFF_PENDING, 9, 8); }
static void forge_clock_order(uint8_t *b)
{
    /* clock 1's number (after clock 0's entry) made 0: two entries of one clock */
    size_t entry = 8 + 4 * ST_ELEMS + (get_le(b + 12, 4) == PS_RULE_ASSIGN ? 2 : 0);
    put_le(b + OFF_PENDING + entry, 0, 8);
}
static void forge_bits_beyond(uint8_t *b) { b[OFF_PENDING + 8 + 4 * ST_ELEMS + 1] |= 0x80; }

START_TEST(test_state_forged_fields)
{
    static const struct {
        forge_fn forge;
        const char *what;
        int pending_only, assign_only;
    } forged[] = {
        {forge_done_ahead, "done beyond the sources' closes", 0, 0},
        {forge_done_behind, "done behind every source's closes", 0, 0},
        {forge_done_huge, "done out of range", 0, 0},
        {forge_seq_flags, "unknown seq flags", 0, 0},
        {forge_seq_unseen, "a seq on a source that sent none", 0, 0},
        {forge_closed_huge, "closed clocks out of range", 0, 0},
        {forge_value_nan, "a NaN value", 0, 0},
        {forge_value_inf, "an infinite value", 0, 0},
        {forge_version, "another version", 0, 0},
        {forge_reserved, "a reserved field set", 0, 0},
        {forge_magic, "another magic", 0, 0},
        {forge_npending, "1000 pending clocks", 0, 0},
        {forge_sources, "another count of sources", 0, 0},
        {forge_sum_nan, "a NaN in a pending sum", 1, 0},
        {forge_clock_far, "a pending clock beyond the window", 1, 0},
        {forge_clock_order, "pending clocks out of order", 1, 0},
        {forge_bits_beyond, "written bits beyond the shard", 1, 1},
    };
    for (size_t ri = 0; ri < 3; ri++)
        for (size_t si = 0; si < 3; si++) {
            ps_shard_t *shard = pending_shard(RULES[ri], SYNCS[si]);
            size_t size;
            uint8_t *buf = saved(shard, &size);
            ck_assert_uint_eq(get_le(buf + OFF_DONE, 8), ps_shard_done(shard));
            ck_assert_uint_eq(get_le(buf + OFF_NPENDING, 4), si == 2 ? 0 : 2);
            /* the control: signed again unchanged, it loads */
            resign(buf, size);
            ps_rule_t r = rule_of(RULES[ri]);
            ps_sync_t s = sync_of(SYNCS[si]);
            ps_shard_t *back = ps_shard_load(buf, size, ST_ELEMS, &r, &s, ST_SOURCES, NULL, 0);
            ck_assert_ptr_nonnull(back);
            ck_assert(ps_shard_same(shard, back));
            ps_shard_destroy(back);
            uint8_t *copy = malloc(size);
            ck_assert_ptr_nonnull(copy);
            for (size_t f = 0; f < sizeof(forged) / sizeof(forged[0]); f++) {
                if ((forged[f].pending_only && si == 2) || (forged[f].assign_only && ri != 1))
                    continue;
                memcpy(copy, buf, size);
                forged[f].forge(copy);
                resign(copy, size);
                assert_refused(copy, size, RULES[ri], SYNCS[si], ST_ELEMS, ST_SOURCES,
                               forged[f].what);
            }
            free(copy);
            free(buf);
            ps_shard_destroy(shard);
        }
}
END_TEST

START_TEST(test_state_wrong_shape)
{
    ps_shard_t *shard = pending_shard("sgd:0.5", "ssp:2");
    size_t size;
    uint8_t *buf = saved(shard, &size);
    assert_refused(buf, size, "sgd:0.5", "ssp:2", ST_ELEMS - 1, ST_SOURCES, "fewer elements");
    assert_refused(buf, size, "sgd:0.5", "ssp:2", ST_ELEMS + 1, ST_SOURCES, "more elements");
    assert_refused(buf, size, "sgd:0.5", "ssp:2", ST_ELEMS, ST_SOURCES - 1, "fewer sources");
    assert_refused(buf, size, "sgd:0.5", "ssp:2", ST_ELEMS, ST_SOURCES + 1, "more sources");
    assert_refused(buf, size, "sgd:0.25", "ssp:2", ST_ELEMS, ST_SOURCES, "another lr");
    assert_refused(buf, size, "add", "ssp:2", ST_ELEMS, ST_SOURCES, "another rule");
    assert_refused(buf, size, "sgd:0.5", "ssp:3", ST_ELEMS, ST_SOURCES, "another staleness");
    assert_refused(buf, size, "sgd:0.5", "bsp", ST_ELEMS, ST_SOURCES, "another sync mode");
    /* a shape that is itself bad */
    ps_rule_t r = rule_of("sgd:0.5");
    ps_sync_t s = sync_of("ssp:2");
    char err[128] = "";
    ck_assert_ptr_null(ps_shard_load(buf, size, ST_ELEMS, &r, &s, 0, err, sizeof(err)));
    ck_assert(err[0] != '\0');
    ck_assert_ptr_null(ps_shard_load(buf, size, 0, &r, &s, ST_SOURCES, err, sizeof(err)));
    ck_assert_ptr_null(ps_shard_load(buf, size, ST_ELEMS, NULL, &s, ST_SOURCES, NULL, 0));
    /* the right shape loads (the same buffer) */
    ps_shard_t *back = ps_shard_load(buf, size, ST_ELEMS, &r, &s, ST_SOURCES, NULL, 0);
    ck_assert_ptr_nonnull(back);
    ck_assert(ps_shard_same(shard, back));
    ps_shard_destroy(back);
    free(buf);
    ps_shard_destroy(shard);
}
END_TEST

START_TEST(test_state_save_room)
{
    ps_shard_t *shard = pending_shard("assign", "bsp");
    size_t size = ps_shard_state_size(shard);
    /* the header's formula: two pending clocks of 13 elements with their written bits */
    ck_assert_uint_eq(size, 56 + 20 * ST_SOURCES + 4 * ST_ELEMS + 2 * (8 + 4 * ST_ELEMS + 2) + 8);
    uint8_t *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(ps_shard_save(shard, buf, size - 1), -ENOSPC);
    ck_assert_int_eq(ps_shard_save(shard, NULL, 0), -ENOSPC);
    ck_assert_int_eq(ps_shard_save(NULL, buf, size), -EINVAL);
    ck_assert_int_eq(ps_shard_save(shard, buf, size), (int64_t)size);
    ck_assert_uint_eq(ps_shard_state_size(NULL), 0);
    /* a pending clock more: a bigger state */
    float v = 1.0f;
    ck_assert_int_eq(ps_shard_contribute(shard, 2, 1, 1, 4, 1, NULL, &v), 1);
    ck_assert_uint_eq(ps_shard_state_size(shard), size);   /* clock 1 was pending already */
    ck_assert_int_eq(ps_shard_close(shard, 2, 0), 1);       /* clock 0 applied: one less */
    ck_assert_uint_eq(ps_shard_done(shard), 1);
    ck_assert_uint_lt(ps_shard_state_size(shard), size);
    free(buf);
    ps_shard_destroy(shard);
}
END_TEST

START_TEST(test_state_same_detects)
{
    ps_shard_t *a = pending_shard("add", "bsp"), *b = pending_shard("add", "bsp");
    ck_assert(ps_shard_same(a, b));
    float v = 0.25f;
    /* a pending sum differs */
    ck_assert_int_eq(ps_shard_contribute(a, 2, 1, 0, 1, 1, NULL, &v), 1);
    ck_assert(!ps_shard_same(a, b));
    ck_assert_int_eq(ps_shard_contribute(b, 2, 1, 0, 1, 1, NULL, &v), 1);
    ck_assert(ps_shard_same(a, b));
    /* a close differs, then the values (clock 0 applied on a only) */
    ck_assert_int_eq(ps_shard_close(a, 2, 0), 1);
    ck_assert(!ps_shard_same(a, b));
    ck_assert_int_eq(ps_shard_close(b, 2, 0), 1);
    ck_assert(ps_shard_same(a, b));
    ps_shard_destroy(a);
    ps_shard_destroy(b);

    /* ASP: only a seq differs (an empty contribution changes no value) */
    a = shard_new(4, "add", "asp", 2);
    b = shard_new(4, "add", "asp", 2);
    ck_assert_int_eq(ps_shard_contribute(a, 1, 3, 0, 0, 0, NULL, NULL), 1);
    ck_assert(memcmp(ps_shard_values(a), ps_shard_values(b), 4 * sizeof(float)) == 0);
    ck_assert(!ps_shard_same(a, b));
    ck_assert_int_eq(ps_shard_contribute(b, 1, 2, 0, 0, 0, NULL, NULL), 1);
    ck_assert(!ps_shard_same(a, b)); /* seq 2, not 3 */
    ck_assert_int_eq(ps_shard_contribute(b, 1, 3, 0, 0, 0, NULL, NULL), 1);
    ck_assert(ps_shard_same(a, b));
    /* -0 and +0 are one value but not the same bits: replicas in step agree bit for bit */
    float neg = -0.0f;
    ck_assert_int_eq(ps_shard_contribute(a, 0, 1, 0, 2, 1, NULL, &neg), 1);
    ck_assert_int_eq(ps_shard_contribute(b, 0, 1, 0, 2, 1, NULL, &neg), 1);
    ck_assert(ps_shard_same(a, b));
    ps_shard_t *other = shard_new(4, "assign", "asp", 2);
    ck_assert(!ps_shard_same(a, other)); /* another rule */
    ps_shard_destroy(other);
    other = shard_new(4, "add", "asp", 3);
    ck_assert(!ps_shard_same(a, other)); /* another count of sources */
    ps_shard_destroy(other);
    ck_assert(ps_shard_same(NULL, NULL));
    ck_assert(!ps_shard_same(a, NULL));
    ck_assert(!ps_shard_same(NULL, a));
    ps_shard_destroy(a);
    ps_shard_destroy(b);
}
END_TEST

/* ---- made at a clock (restored from a checkpoint) ------------------------------------------ */

START_TEST(test_shard_create_at)
{
    static const char *const syncs[] = {"bsp", "ssp:1", "asp"};
    const uint64_t at = 5;
    float start[ST_ELEMS];
    for (int i = 0; i < ST_ELEMS; i++)
        start[i] = (float)i - 6.5f;
    for (size_t si = 0; si < 3; si++) {
        ps_rule_t r = rule_of("add");
        ps_sync_t s = sync_of(syncs[si]);
        ps_shard_t *shard = ps_shard_create_at(ST_ELEMS, &r, &s, ST_SOURCES, at, start);
        ck_assert_ptr_nonnull(shard);
        ck_assert_uint_eq(ps_shard_done(shard), at);
        for (uint32_t src = 0; src < ST_SOURCES; src++)
            ck_assert_uint_eq(ps_shard_closed(shard, src), at);
        ck_assert(memcmp(ps_shard_values(shard), start, sizeof(start)) == 0);
        /* clock at - 1 is closed for everyone, clock at is open; no seq seen (seq 0 is new) */
        float v = 1.0f;
        ck_assert_int_eq(ps_shard_contribute(shard, 0, 0, at - 1, 0, 1, NULL, &v), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(shard, 0, 0, at, 0, 1, NULL, &v), 1);
        ck_assert_int_eq(ps_shard_contribute(shard, 0, 0, at, 0, 1, NULL, &v), 0);
        ck_assert_int_eq(ps_shard_close(shard, 1, at - 1), 0);      /* a repeat */
        ck_assert_int_eq(ps_shard_close(shard, 1, at - 2), -EINVAL);
        if (s.kind != PS_SYNC_ASP) /* the window counts from done = at */
            ck_assert_int_eq(ps_shard_contribute(shard, 1, 1, at + ps_sync_window(&s) + 1, 0,
                                                 1, NULL, &v),
                             -EAGAIN);
        for (uint32_t src = 0; src < ST_SOURCES; src++)
            ck_assert_int_eq(ps_shard_close(shard, src, at), 1);
        ck_assert_uint_eq(ps_shard_done(shard), at + 1);
        ck_assert(ps_shard_values(shard)[0] == start[0] + 1.0f);
        ck_assert(memcmp(ps_shard_values(shard) + 1, start + 1, sizeof(start) - 4) == 0);
        /* and its state travels like any other */
        ps_shard_t *copy = round_trip(shard, "add", syncs[si], ST_SOURCES);
        ps_shard_destroy(copy);
        ps_shard_destroy(shard);

        /* at 0 with zeros: a new shard */
        float zeros[ST_ELEMS] = {0};
        shard = ps_shard_create_at(ST_ELEMS, &r, &s, ST_SOURCES, 0, zeros);
        ps_shard_t *fresh = ps_shard_create(ST_ELEMS, &r, &s, ST_SOURCES);
        ck_assert(ps_shard_same(shard, fresh));
        ps_shard_destroy(fresh);
        ps_shard_destroy(shard);
    }
    /* the window: BSP at done = at takes clock at + 1 from a source that closed at, not at + 2 */
    ps_rule_t r = rule_of("add");
    ps_sync_t bsp = sync_of("bsp");
    ps_shard_t *shard = ps_shard_create_at(ST_ELEMS, &r, &bsp, 2, at, start);
    float v = 1.0f;
    ck_assert_int_eq(ps_shard_close(shard, 0, at), 1);
    ck_assert_int_eq(ps_shard_contribute(shard, 0, 1, at + 1, 0, 1, NULL, &v), 1);
    ck_assert_int_eq(ps_shard_close(shard, 0, at + 1), 1);
    ck_assert_int_eq(ps_shard_contribute(shard, 0, 2, at + 2, 0, 1, NULL, &v), -EAGAIN);
    ps_shard_destroy(shard);
    /* bad input */
    float bad[ST_ELEMS];
    memcpy(bad, start, sizeof(bad));
    bad[7] = NAN;
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, &r, &bsp, 2, at, bad));
    bad[7] = INFINITY;
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, &r, &bsp, 2, at, bad));
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, &r, &bsp, 2, at, NULL));
    ck_assert_ptr_null(ps_shard_create_at(0, &r, &bsp, 2, at, start));
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, &r, &bsp, 0, at, start));
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, NULL, &bsp, 2, at, start));
    ck_assert_ptr_null(ps_shard_create_at(ST_ELEMS, &r, &bsp, 2, UINT64_MAX, start));
}
END_TEST

START_TEST(test_agg_create_at)
{
    const uint64_t at = 7, count = 6;
    ps_sync_t bsp = sync_of("bsp"), ssp = sync_of("ssp:2"), asp = sync_of("asp");
    ps_agg_t *agg = ps_agg_create_at(count, &bsp, 3, at);
    ck_assert_ptr_nonnull(agg);
    for (uint32_t w = 0; w < 3; w++)
        ck_assert_uint_eq(ps_agg_clock_of(agg, w), at);
    float v[6] = {1, 2, 3, 4, 5, 6};
    /* clocks before `at` are closed and released: no sum, a push refused, a close a repeat */
    ck_assert_ptr_null(ps_agg_sum(agg, at - 1));
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, at - 1, 0, count, NULL, v), -EINVAL);
    ck_assert_int_eq(ps_agg_close(agg, 0, at - 1), 0);
    ck_assert_int_eq(ps_agg_close(agg, 0, at - 2), -EINVAL);
    ck_assert_uint_eq(ps_agg_sum_bytes(agg), 0);
    /* clock `at` runs as any clock */
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, at, 0, count, NULL, v), 1);
    ck_assert_int_eq(ps_agg_push(agg, 2, 1, at, 1, 2, NULL, v), 1);
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, at + 1, 0, count, NULL, v), -EINVAL);
    ck_assert_int_eq(ps_agg_close(agg, 0, at), 2);
    ck_assert_int_eq(ps_agg_push(agg, 0, 2, at + 1, 0, count, NULL, v), 1); /* window 1 */
    ck_assert_int_eq(ps_agg_close(agg, 0, at + 1), -EAGAIN);                /* beyond it */
    ck_assert_int_eq(ps_agg_close(agg, 1, at), 2);
    ck_assert_ptr_null(ps_agg_sum(agg, at));
    ck_assert_int_eq(ps_agg_close(agg, 2, at), 1);
    const float *sum = ps_agg_sum(agg, at);
    ck_assert_ptr_nonnull(sum);
    const float want[6] = {1, 3, 5, 4, 5, 6};
    ck_assert(memcmp(sum, want, sizeof(want)) == 0);
    ps_agg_release(agg, at);
    ck_assert_ptr_null(ps_agg_sum(agg, at));
    ps_agg_destroy(agg);

    /* SSP: a worker may run s + 1 clocks ahead of the others, counted from `at` */
    agg = ps_agg_create_at(count, &ssp, 2, at);
    ck_assert_ptr_nonnull(agg);
    for (uint64_t c = at; c < at + 3; c++)
        ck_assert_int_eq(ps_agg_close(agg, 0, c), 2);
    ck_assert_int_eq(ps_agg_close(agg, 0, at + 3), -EAGAIN);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), at + 3);
    ck_assert_int_eq(ps_agg_close(agg, 1, at), 1);
    ck_assert_ptr_nonnull(ps_agg_sum(agg, at)); /* zeros: nobody pushed */
    ps_agg_destroy(agg);

    /* at 0: the same as ps_agg_create */
    agg = ps_agg_create_at(count, &bsp, 2, 0);
    ck_assert_ptr_nonnull(agg);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 1), 0);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 2);
    ps_agg_destroy(agg);
    ck_assert_ptr_null(ps_agg_create_at(count, &asp, 2, at));
    ck_assert_ptr_null(ps_agg_create_at(0, &bsp, 2, at));
    ck_assert_ptr_null(ps_agg_create_at(count, &bsp, 0, at));
    ck_assert_ptr_null(ps_agg_create_at(count, NULL, 2, at));
    ck_assert_ptr_null(ps_agg_create_at(count, &bsp, 2, UINT64_MAX));
}
END_TEST

static Suite *ps_replicas_suite(void)
{
    Suite *s = suite_create("ps_replicas");
    TCase *ring = tcase_create("ring");
    tcase_add_test(ring, test_replicas_sets);
    tcase_add_test(ring, test_replicas_name_order);
    tcase_add_test(ring, test_ring_moves_join);
    tcase_set_timeout(ring, 60);
    suite_add_tcase(s, ring);

    TCase *state = tcase_create("state");
    tcase_add_test(state, test_state_random_runs);
    tcase_add_test(state, test_state_truncated);
    tcase_add_test(state, test_state_flipped_bytes);
    tcase_add_test(state, test_state_forged_fields);
    tcase_add_test(state, test_state_wrong_shape);
    tcase_add_test(state, test_state_save_room);
    tcase_add_test(state, test_state_same_detects);
    tcase_set_timeout(state, 120);
    suite_add_tcase(s, state);

    TCase *at = tcase_create("at_clock");
    tcase_add_test(at, test_shard_create_at);
    tcase_add_test(at, test_agg_create_at);
    suite_add_tcase(s, at);
    return s;
}

int main(void)
{
    return check_run_suite(ps_replicas_suite());
}
