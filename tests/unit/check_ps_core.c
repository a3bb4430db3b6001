/* Unit tests of the parameter server's pure core (ps-core/ps_core.h): rule and sync texts,
 * table names, the layout's cuts, the consistent-hash ring (order, balance, a server joining),
 * a shard under BSP / SSP / ASP (clock order, buffering, duplicates, bad input changing
 * nothing, exact arithmetic) and a node's aggregation. Nothing here sleeps or prints. */
#include "check_run.h"
#include "ps_core.h"
#include "ps_core_test.h"

#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rules and sync modes ------------------------------------------------------------- */

START_TEST(test_rule_parse_good)
{
    ps_rule_t r;
    char err[128] = "";
    ck_assert_int_eq(ps_rule_parse("add", &r, err, sizeof(err)), 0);
    ck_assert_int_eq(r.kind, PS_RULE_ADD);
    ck_assert_int_eq(ps_rule_parse("assign", &r, err, sizeof(err)), 0);
    ck_assert_int_eq(r.kind, PS_RULE_ASSIGN);
    ck_assert_int_eq(ps_rule_parse("sgd:0.05", &r, err, sizeof(err)), 0);
    ck_assert_int_eq(r.kind, PS_RULE_SGD);
    ck_assert(r.lr == 0.05f);
    ck_assert_int_eq(ps_rule_parse("sgd:1", &r, err, sizeof(err)), 0);
    ck_assert(r.lr == 1.0f);
    ck_assert_int_eq(ps_rule_parse("sgd:5e-3", &r, err, sizeof(err)), 0);
    ck_assert(r.lr == 5e-3f);
    ck_assert_int_eq(ps_rule_parse("sgd:.5", &r, err, sizeof(err)), 0);
    ck_assert(r.lr == 0.5f);
    ck_assert_str_eq(err, ""); /* untouched on success */
}
END_TEST

START_TEST(test_rule_parse_bad)
{
    static const char *const bad[] = {
        "", "sgd:", "sgd:-1", "sgd:0", "sgd:0.0", "sgd:nan", "sgd:inf", "sgd:-inf",
        "sgd:0x1p-3", "sgd:0.1x", "sgd: 0.1", "sgd:0.1 ", "sgd:+0.1", "sgd:1e39", "sgd:1e-50",
        "sgd:1e", "sgd:..5", "add ", " add", "addx", "Add", "assign:1", "sgd", "sgd0.1", "mul",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_rule_t r = {.kind = PS_RULE_ASSIGN, .lr = 7.0f}, before = r;
        char err[128] = "";
        ck_assert_msg(ps_rule_parse(bad[i], &r, err, sizeof(err)) == -EINVAL, "'%s'", bad[i]);
        ck_assert_msg(err[0] != '\0', "no error text for '%s'", bad[i]);
        ck_assert_msg(memcmp(&r, &before, sizeof(r)) == 0, "'%s' changed the rule", bad[i]);
    }
    ps_rule_t r;
    ck_assert_int_eq(ps_rule_parse(NULL, &r, NULL, 0), -EINVAL);
    ck_assert_int_eq(ps_rule_parse("add", NULL, NULL, 0), -EINVAL);
    char tiny[4];
    ck_assert_int_eq(ps_rule_parse("bogus-rule", &r, tiny, sizeof(tiny)), -EINVAL);
    ck_assert_uint_eq(strlen(tiny), 3); /* truncated, terminated */
}
END_TEST

START_TEST(test_rule_format)
{
    char buf[64];
    ps_rule_t r = {.kind = PS_RULE_SGD, .lr = 0.05f};
    ck_assert_int_eq(ps_rule_format(&r, buf, sizeof(buf)), 8);
    ck_assert_str_eq(buf, "sgd:0.05");
    r = (ps_rule_t){.kind = PS_RULE_ADD};
    ck_assert_int_eq(ps_rule_format(&r, buf, sizeof(buf)), 3);
    ck_assert_str_eq(buf, "add");
    r = (ps_rule_t){.kind = PS_RULE_ASSIGN};
    ck_assert_int_eq(ps_rule_format(&r, buf, sizeof(buf)), 6);
    ck_assert_str_eq(buf, "assign");
    ck_assert_int_eq(ps_rule_format(&r, buf, 6), -ENOSPC); /* no room for the NUL */
    ck_assert_int_eq(ps_rule_format(&r, buf, 7), 6);
    /* every float reads back as itself, also ones %g's 6 digits would round */
    static const float lrs[] = {0.05f, 0.1234567f, 1e-7f, 3.0f, 123456789.0f, 0.3333333f};
    for (size_t i = 0; i < sizeof(lrs) / sizeof(lrs[0]); i++) {
        ps_rule_t in = {.kind = PS_RULE_SGD, .lr = lrs[i]}, out;
        ck_assert_int_gt(ps_rule_format(&in, buf, sizeof(buf)), 4);
        ck_assert_int_eq(ps_rule_parse(buf, &out, NULL, 0), 0);
        ck_assert_msg(memcmp(&in.lr, &out.lr, sizeof(float)) == 0, "%s", buf);
    }
    ps_rule_t bad = {.kind = PS_RULE_SGD, .lr = -1.0f};
    ck_assert_int_eq(ps_rule_format(&bad, buf, sizeof(buf)), -EINVAL);
    bad = (ps_rule_t){.kind = (ps_rule_kind_t)9};
    ck_assert_int_eq(ps_rule_format(&bad, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_sync_parse_format)
{
    ps_sync_t s;
    char err[128] = "", buf[32];
    ck_assert_int_eq(ps_sync_parse("bsp", &s, err, sizeof(err)), 0);
    ck_assert_int_eq(s.kind, PS_SYNC_BSP);
    ck_assert_int_eq(ps_sync_parse("asp", &s, err, sizeof(err)), 0);
    ck_assert_int_eq(s.kind, PS_SYNC_ASP);
    ck_assert_int_eq(ps_sync_parse("ssp:0", &s, err, sizeof(err)), 0);
    ck_assert_int_eq(s.kind, PS_SYNC_SSP);
    ck_assert_uint_eq(s.staleness, 0);
    ck_assert_int_eq(ps_sync_parse("ssp:1000", &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(s.staleness, 1000);
    ck_assert_int_eq(ps_sync_parse("ssp:2", &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(s.staleness, 2);
    ck_assert_int_eq(ps_sync_format(&s, buf, sizeof(buf)), 5);
    ck_assert_str_eq(buf, "ssp:2");
    ck_assert_int_eq(ps_sync_format(&s, buf, 5), -ENOSPC);
    ck_assert_str_eq(err, "");

    static const char *const bad[] = {
        "", "ssp:", "ssp:x", "ssp:1001", "ssp:-1", "ssp:+1", "ssp:2x", "ssp: 2", "ssp:2 ",
        "ssp:99999999999999999999", "ssp:4294967298", "bsp ", "BSP", "ssp", "asp:1", "bsp:0",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_sync_t t = {.kind = PS_SYNC_ASP, .staleness = 77}, before = t;
        char e[128] = "";
        ck_assert_msg(ps_sync_parse(bad[i], &t, e, sizeof(e)) == -EINVAL, "'%s'", bad[i]);
        ck_assert_msg(e[0] != '\0', "no error text for '%s'", bad[i]);
        ck_assert_msg(memcmp(&t, &before, sizeof(t)) == 0, "'%s' changed the mode", bad[i]);
    }
    static const char *const round[] = {"bsp", "asp", "ssp:0", "ssp:17", "ssp:1000"};
    for (size_t i = 0; i < sizeof(round) / sizeof(round[0]); i++) {
        ck_assert_int_eq(ps_sync_parse(round[i], &s, NULL, 0), 0);
        ck_assert_int_eq(ps_sync_format(&s, buf, sizeof(buf)), (int)strlen(round[i]));
        ck_assert_str_eq(buf, round[i]);
    }
    ps_sync_t over = {.kind = PS_SYNC_SSP, .staleness = 1001};
    ck_assert_int_eq(ps_sync_format(&over, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_sync_min_done)
{
    ps_sync_t bsp = {.kind = PS_SYNC_BSP}, asp = {.kind = PS_SYNC_ASP};
    ps_sync_t ssp = {.kind = PS_SYNC_SSP, .staleness = 2};
    ps_sync_t ssp0 = {.kind = PS_SYNC_SSP, .staleness = 0};
    ck_assert_uint_eq(ps_sync_min_done(&bsp, 0), 0);
    ck_assert_uint_eq(ps_sync_min_done(&bsp, 7), 7);
    ck_assert_uint_eq(ps_sync_min_done(&asp, 7), 0);
    ck_assert_uint_eq(ps_sync_min_done(&ssp, 0), 0);
    ck_assert_uint_eq(ps_sync_min_done(&ssp, 2), 0);
    ck_assert_uint_eq(ps_sync_min_done(&ssp, 3), 1);
    ck_assert_uint_eq(ps_sync_min_done(&ssp, 10), 8);
    ck_assert_uint_eq(ps_sync_min_done(&ssp0, 10), 10); /* ssp:0 is BSP */
}
END_TEST

START_TEST(test_name_valid)
{
    char longest[PS_NAME_BYTES], too_long[PS_NAME_BYTES + 1];
    memset(longest, 'a', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    memset(too_long, 'a', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    ck_assert_int_eq(ps_name_valid("w"), 1);
    ck_assert_int_eq(ps_name_valid("mlp.layer-1_W"), 1);
    ck_assert_int_eq(ps_name_valid(longest), 1);
    ck_assert_int_eq(ps_name_valid(too_long), 0);
    ck_assert_int_eq(ps_name_valid(""), 0);
    ck_assert_int_eq(ps_name_valid(NULL), 0);
    ck_assert_int_eq(ps_name_valid("a/b"), 0);
    ck_assert_int_eq(ps_name_valid("a b"), 0);
    ck_assert_int_eq(ps_name_valid("caf\xc3\xa9"), 0);
}
END_TEST

/* ---- layout --------------------------------------------------------------------------- */

/* Every element in exactly one shard, shards contiguous and in order, sizes within one of each
 * other and at most PS_SHARD_MAX_ELEMS, shard_of agreeing at every shard's ends. */
static void check_cuts(uint64_t count, uint32_t servers)
{
    ps_layout_t l;
    ck_assert_int_eq(ps_layout_init(&l, count, servers), 0);
    ck_assert_uint_eq(l.count, count);
    uint64_t want = (uint64_t)servers * PS_SHARDS_PER_SERVER;
    uint64_t by_size = (count + PS_SHARD_MAX_ELEMS - 1) / PS_SHARD_MAX_ELEMS;
    if (by_size > want)
        want = by_size;
    if (want > count)
        want = count;
    ck_assert_uint_eq(l.shards, want);
    /* plain comparisons in the loop (a ck_assert per shard is slow at 2^16 shards) */
    uint64_t next = 0, least = UINT64_MAX, most = 0;
    for (uint32_t s = 0; s < l.shards; s++) {
        uint64_t first, elems;
        ps_layout_shard(&l, s, &first, &elems);
        if (first != next || elems < 1 || elems > PS_SHARD_MAX_ELEMS ||
            ps_layout_shard_of(&l, first) != s || ps_layout_shard_of(&l, first + elems - 1) != s)
            ck_abort_msg("count %lu servers %u: shard %u holds [%lu, +%lu), expected at %lu",
                         (unsigned long)count, servers, s, (unsigned long)first,
                         (unsigned long)elems, (unsigned long)next);
        least = elems < least ? elems : least;
        most = elems > most ? elems : most;
        next = first + elems;
    }
    ck_assert_uint_eq(next, count);
    ck_assert_uint_le(most - least, 1);
    ck_assert_uint_eq(ps_layout_shard_of(&l, count), l.shards); /* past the end: no shard */
}

START_TEST(test_layout_cuts)
{
    static const uint64_t counts[] = {1, 2, 7, 31, 32, 33, 100, 1000, 262144, 262145,
                                      1u << 26, (1ull << 26) + 13, (1ull << 34) + 5};
    static const uint32_t servers[] = {1, 2, 3, 4, 7, 256};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t s = 0; s < sizeof(servers) / sizeof(servers[0]); s++)
            check_cuts(counts[c], servers[s]);

    /* a small table element by element: each in exactly one shard, the one shard_of names */
    ps_layout_t l;
    ck_assert_int_eq(ps_layout_init(&l, 1001, 3), 0);
    ck_assert_uint_eq(l.shards, 24);
    int hits[1001] = {0};
    for (uint32_t s = 0; s < l.shards; s++) {
        uint64_t first, elems;
        ps_layout_shard(&l, s, &first, &elems);
        for (uint64_t i = first; i < first + elems; i++) {
            hits[i]++;
            ck_assert_uint_eq(ps_layout_shard_of(&l, i), s);
        }
    }
    for (int i = 0; i < 1001; i++)
        ck_assert_int_eq(hits[i], 1);
    /* 1001 = 24 * 41 + 17: the first 17 shards one longer */
    uint64_t first, elems;
    ps_layout_shard(&l, 16, &first, &elems);
    ck_assert_uint_eq(elems, 42);
    ps_layout_shard(&l, 17, &first, &elems);
    ck_assert_uint_eq(first, 17 * 42);
    ck_assert_uint_eq(elems, 41);
    ps_layout_shard(&l, 24, &first, &elems); /* no such shard: empty */
    ck_assert_uint_eq(elems, 0);

    /* 256 MiB of float32 on 2 servers: 256 shards of 1 MiB; 4 MiB on 2 servers: 16 */
    ck_assert_int_eq(ps_layout_init(&l, 64ull << 20, 2), 0);
    ck_assert_uint_eq(l.shards, 256);
    ck_assert_int_eq(ps_layout_init(&l, 1ull << 20, 2), 0);
    ck_assert_uint_eq(l.shards, 16);
}
END_TEST

START_TEST(test_layout_bad)
{
    ps_layout_t l = {.count = 5, .shards = 5}, before = l;
    ck_assert_int_eq(ps_layout_init(&l, 0, 1), -EINVAL);
    ck_assert_int_eq(ps_layout_init(&l, 10, 0), -EINVAL);
    ck_assert_int_eq(ps_layout_init(&l, UINT64_MAX, 1), -EINVAL); /* > 2^32 shards */
    ck_assert_int_eq(ps_layout_init(NULL, 10, 1), -EINVAL);
    ck_assert_int_eq(memcmp(&l, &before, sizeof(l)), 0);
}
END_TEST

/* ---- the ring ------------------------------------------------------------------------- */

START_TEST(test_ring_order_independent)
{
    const char *a[] = {"node-a", "node-b", "node-c", "node-d"};
    const char *b[] = {"node-c", "node-a", "node-d", "node-b"};
    const char *c[] = {"node-d", "node-c", "node-b", "node-a"};
    ps_ring_t *ra = ps_ring_create(a, 4, 0), *rb = ps_ring_create(b, 4, 0),
              *rc = ps_ring_create(c, 4, 64);
    ck_assert_ptr_nonnull(ra);
    ck_assert_ptr_nonnull(rb);
    ck_assert_ptr_nonnull(rc);
    ck_assert_uint_eq(ps_ring_size(ra), 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(ps_ring_name(ra, i), a[i]); /* sorted by name */
        ck_assert_str_eq(ps_ring_name(rb, i), a[i]);
        ck_assert_str_eq(ps_ring_name(rc, i), a[i]);
    }
    ck_assert_ptr_null(ps_ring_name(ra, 4));
    for (uint32_t s = 0; s < 2000; s++) {
        size_t oa = ps_ring_owner(ra, "weights", s);
        ck_assert_uint_lt(oa, 4);
        ck_assert_uint_eq(ps_ring_owner(rb, "weights", s), oa);
        ck_assert_uint_eq(ps_ring_owner(rc, "weights", s), oa);
    }
    ck_assert_uint_eq(ps_ring_moved(ra, rb, "weights", 2000), 0);
    /* another table's shards land elsewhere: the table name is in the hash */
    uint32_t differ = 0;
    for (uint32_t s = 0; s < 256; s++)
        differ += ps_ring_owner(ra, "weights", s) != ps_ring_owner(ra, "bias", s);
    ck_assert_uint_gt(differ, 64);
    /* fewer virtual nodes: another ring */
    ps_ring_t *few = ps_ring_create(a, 4, 2);
    ck_assert_ptr_nonnull(few);
    ck_assert_uint_gt(ps_ring_moved(ra, few, "weights", 256), 0);
    ps_ring_destroy(few);
    ps_ring_destroy(ra);
    ps_ring_destroy(rb);
    ps_ring_destroy(rc);
    ps_ring_destroy(NULL);
}
END_TEST

/* The ring's contract (ref_hash: ps_core_test.h): servers at "name#v", shards at
 * "table/shard"; the owner is the first point at or after the shard's hash, wrapping; found
 * here by a plain scan over every point. */
static const char *ref_owner(const char *const *names, size_t n, uint32_t vnodes,
                             const char *table, uint32_t shard, int *wrapped)
{
    char text[128];
    snprintf(text, sizeof(text), "%s/%u", table, shard);
    uint64_t key = ref_hash(text);
    const char *after = NULL, *lowest = NULL;
    uint64_t after_hash = 0, lowest_hash = 0;
    for (size_t s = 0; s < n; s++)
        for (uint32_t v = 0; v < vnodes; v++) {
            snprintf(text, sizeof(text), "%s#%u", names[s], v);
            uint64_t h = ref_hash(text);
            if (h >= key && (after == NULL || h < after_hash)) {
                after = names[s];
                after_hash = h;
            }
            if (lowest == NULL || h < lowest_hash) {
                lowest = names[s];
                lowest_hash = h;
            }
        }
    *wrapped = after == NULL;
    return after ? after : lowest;
}

START_TEST(test_ring_reference)
{
    const char *names[] = {"beta", "alpha", "gamma"};
    static const uint32_t vnodes[] = {1, 2, 5, 64};
    uint32_t wraps = 0;
    for (size_t v = 0; v < sizeof(vnodes) / sizeof(vnodes[0]); v++) {
        ps_ring_t *r = ps_ring_create(names, 3, vnodes[v]);
        ck_assert_ptr_nonnull(r);
        for (uint32_t s = 0; s < 3000; s++) {
            int wrapped;
            const char *want = ref_owner(names, 3, vnodes[v], "t.w", s, &wrapped);
            const char *got = ps_ring_name(r, ps_ring_owner(r, "t.w", s));
            if (strcmp(want, got) != 0)
                ck_abort_msg("vnodes %u shard %u: %s, want %s", vnodes[v], s, got, want);
            wraps += (uint32_t)wrapped;
        }
        ps_ring_destroy(r);
    }
    ck_assert_uint_gt(wraps, 0); /* the wrap past the last point was exercised */
}
END_TEST

START_TEST(test_ring_bad)
{
    const char *dup[] = {"n1", "n2", "n1"};
    const char *empty[] = {"n1", ""};
    const char *null[] = {"n1", NULL};
    const char *one[] = {"n1"};
    ck_assert_ptr_null(ps_ring_create(dup, 3, 0));
    ck_assert_ptr_null(ps_ring_create(empty, 2, 0));
    ck_assert_ptr_null(ps_ring_create(null, 2, 0));
    ck_assert_ptr_null(ps_ring_create(one, 0, 0));
    ck_assert_ptr_null(ps_ring_create(NULL, 1, 0));
    ck_assert_ptr_null(ps_ring_create(one, 1, 1u << 20)); /* absurd vnodes */
    char names[PS_MAX_SERVERS + 1][8];
    const char *many[PS_MAX_SERVERS + 1];
    for (int i = 0; i <= PS_MAX_SERVERS; i++) {
        snprintf(names[i], sizeof(names[i]), "s%d", i);
        many[i] = names[i];
    }
    ck_assert_ptr_null(ps_ring_create(many, PS_MAX_SERVERS + 1, 0));
    ps_ring_t *full = ps_ring_create(many, PS_MAX_SERVERS, 0);
    ck_assert_ptr_nonnull(full);
    ps_ring_destroy(full);
    /* one server owns everything */
    ps_ring_t *single = ps_ring_create(one, 1, 0);
    for (uint32_t s = 0; s < 100; s++)
        ck_assert_uint_eq(ps_ring_owner(single, "t", s), 0);
    ps_ring_destroy(single);
}
END_TEST

START_TEST(test_ring_balance)
{
    const char *names[] = {"node1", "node2", "node3", "node4"};
    ps_ring_t *r = ps_ring_create(names, 4, 64);
    ck_assert_ptr_nonnull(r);
    static const char *const tables[] = {"weights", "mlp.w1", "mlp.b1", "emb"};
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        uint32_t per[4] = {0};
        for (uint32_t s = 0; s < 256; s++)
            per[ps_ring_owner(r, tables[t], s)]++;
        for (int i = 0; i < 4; i++) {
            ck_assert_msg(per[i] <= 2 * 256 / 4, "%s: %s owns %u of 256", tables[t], names[i],
                          per[i]);
            ck_assert_msg(per[i] > 0, "%s: %s owns nothing", tables[t], names[i]);
        }
    }
    ps_ring_destroy(r);
}
END_TEST

START_TEST(test_ring_join)
{
    const char *four[] = {"node1", "node2", "node3", "node4"};
    const char *five[] = {"node1", "node2", "node5", "node3", "node4"};
    ps_ring_t *a = ps_ring_create(four, 4, 64), *b = ps_ring_create(five, 5, 64);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    static const char *const tables[] = {"weights", "mlp.w1", "emb"};
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        uint32_t moved = 0;
        for (uint32_t s = 0; s < 256; s++) {
            const char *was = ps_ring_name(a, ps_ring_owner(a, tables[t], s));
            const char *now = ps_ring_name(b, ps_ring_owner(b, tables[t], s));
            if (strcmp(was, now) != 0) {
                moved++;
                ck_assert_msg(strcmp(now, "node5") == 0, "%s/%u moved %s -> %s", tables[t], s,
                              was, now);
            }
        }
        ck_assert_uint_eq(ps_ring_moved(a, b, tables[t], 256), moved);
        ck_assert_uint_eq(ps_ring_moved(b, a, tables[t], 256), moved);
        double fraction = moved / 256.0;
        ck_assert_msg(fraction >= 0.1 && fraction <= 0.35, "%s: %.3f moved", tables[t],
                      fraction);
    }
    ps_ring_destroy(a);
    ps_ring_destroy(b);
}
END_TEST

/* ---- a shard -------------------------------------------------------------------------- */

static void assert_values(const ps_shard_t *shard, const float *want, uint64_t n)
{
    ck_assert_uint_eq(ps_shard_elems(shard), n);
    const float *got = ps_shard_values(shard);
    for (uint64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                      "element %lu: %.9g, want %.9g", (unsigned long)i, got[i], want[i]);
}

START_TEST(test_shard_create_bad)
{
    ps_rule_t add = rule_of("add"), lr0 = {.kind = PS_RULE_SGD, .lr = 0.0f};
    ps_rule_t lrnan = {.kind = PS_RULE_SGD, .lr = NAN}, odd = {.kind = (ps_rule_kind_t)7};
    ps_sync_t bsp = sync_of("bsp"), over = {.kind = PS_SYNC_SSP, .staleness = 1001};
    ps_sync_t oddsync = {.kind = (ps_sync_kind_t)9};
    ck_assert_ptr_null(ps_shard_create(0, &add, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(PS_SHARD_MAX_ELEMS + 1, &add, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(4, &add, &bsp, 0));
    ck_assert_ptr_null(ps_shard_create(4, &add, &bsp, PS_MAX_SOURCES + 1));
    ck_assert_ptr_null(ps_shard_create(4, &lr0, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(4, &lrnan, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(4, &odd, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(4, &add, &over, 1));
    ck_assert_ptr_null(ps_shard_create(4, &add, &oddsync, 1));
    ck_assert_ptr_null(ps_shard_create(4, NULL, &bsp, 1));
    ck_assert_ptr_null(ps_shard_create(4, &add, NULL, 1));
    ps_shard_t *ok = ps_shard_create(PS_SHARD_MAX_ELEMS, &add, &bsp, PS_MAX_SOURCES);
    ck_assert_ptr_nonnull(ok);
    ck_assert_uint_eq(ps_shard_done(ok), 0);
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < PS_SHARD_MAX_ELEMS; i++)
        nonzero += ps_shard_values(ok)[i] != 0.0f;
    ck_assert_uint_eq(nonzero, 0);
    ck_assert_uint_ge(ps_shard_bytes(ok), PS_SHARD_MAX_ELEMS * sizeof(float));
    ps_shard_destroy(ok);
    ps_shard_destroy(NULL);
}
END_TEST

START_TEST(test_shard_bsp_every_source)
{
    ps_shard_t *sh = shard_new(4, "add", "bsp", 3);
    const float a[] = {1, 2, 3, 4}, b[] = {10, 20, 30, 40}, c[] = {100, 200};
    const float zero[4] = {0};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 4, NULL, a), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 1, 1, 0, 0, 4, NULL, b), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 2, 1, 0, 1, 2, NULL, c), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(sh, 2, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 0); /* source 1 has not closed */
    assert_values(sh, zero, 4);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    const float want[] = {11, 122, 233, 44};
    assert_values(sh, want, 4);
    /* a clock nobody contributed to still counts once every source closed it */
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    ck_assert_int_eq(ps_shard_close(sh, 1, 1), 1);
    ck_assert_int_eq(ps_shard_close(sh, 2, 1), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 2);
    assert_values(sh, want, 4);
    ps_shard_destroy(sh);
}
END_TEST

/* assign makes the order visible: a clock applied early would leave the wrong value */
START_TEST(test_shard_bsp_clock_order)
{
    ps_shard_t *sh = shard_new(2, "assign", "bsp", 2);
    const float v10[] = {10}, v20[] = {20}, v30[] = {30};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 1, NULL, v10), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, 1, NULL, v20), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    const float after0[] = {10, 0};
    assert_values(sh, after0, 2);
    /* source 0 closes clock 2 while clock 1 is incomplete: nothing applied */
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 2, 0, 1, NULL, v30), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 2), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    assert_values(sh, after0, 2);
    /* source 1 cannot skip clock 1 */
    ck_assert_int_eq(ps_shard_close(sh, 1, 2), -EINVAL);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    assert_values(sh, after0, 2);
    ck_assert_int_eq(ps_shard_close(sh, 1, 1), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 2);
    const float after1[] = {20, 0};
    assert_values(sh, after1, 2);
    ck_assert_int_eq(ps_shard_close(sh, 1, 2), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 3);
    const float after2[] = {30, 0}; /* element 1: never written, assign leaves it */
    assert_values(sh, after2, 2);
    ps_shard_destroy(sh);
}
END_TEST

START_TEST(test_shard_ssp_buffers)
{
    ps_shard_t *sh = shard_new(3, "add", "ssp:2", 2);
    uint64_t empty_bytes = ps_shard_bytes(sh);
    const float zero[3] = {0};
    /* the fast source runs 4 clocks ahead: all buffered, nothing applied */
    for (uint64_t c = 0; c < 4; c++) {
        const float v[] = {(float)(c + 1), 0, 0};
        ck_assert_int_eq(ps_shard_contribute(sh, 0, c + 1, c, 0, 3, NULL, v), 1);
        ck_assert_int_eq(ps_shard_close(sh, 0, c), 1);
    }
    ck_assert_uint_eq(ps_shard_done(sh), 0);
    assert_values(sh, zero, 3);
    ck_assert_uint_ge(ps_shard_bytes(sh), empty_bytes + 4 * 3 * sizeof(float));
    /* the window (ssp:2): up to done + 3, taken above; clock 4 must wait for done */
    const float one[] = {1};
    uint64_t bytes = ps_shard_bytes(sh);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 10, 4, 2, 1, NULL, one), -EAGAIN);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 10, PS_MAX_STALENESS + 2, 2, 1, NULL, one),
                     -EAGAIN);
    ck_assert_uint_eq(ps_shard_bytes(sh), bytes);
    /* the slow source: clock 0, then each clock applies in order */
    const float s0[] = {0, 5, 0};
    ck_assert_int_eq(ps_shard_contribute(sh, 1, 1, 0, 0, 3, NULL, s0), 1);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 10, 4, 2, 1, NULL, one), 1); /* now within */
    const float want0[] = {1, 5, 0};
    assert_values(sh, want0, 3);
    for (uint64_t c = 1; c < 4; c++)
        ck_assert_int_eq(ps_shard_close(sh, 1, c), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 4);
    const float want3[] = {1 + 2 + 3 + 4, 5, 0}; /* the far clock still pending */
    assert_values(sh, want3, 3);
    ps_shard_destroy(sh);
}
END_TEST

START_TEST(test_shard_asp_at_once)
{
    ps_shard_t *sh = shard_new(2, "add", "asp", 2);
    const float a[] = {1.5f, 2}, b[] = {0.25f};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 2, NULL, a), 1);
    const float want1[] = {1.5f, 2};
    assert_values(sh, want1, 2);
    ck_assert_uint_eq(ps_shard_done(sh), 0);
    ck_assert_int_eq(ps_shard_contribute(sh, 1, 1, 3, 1, 1, NULL, b), 1); /* any open clock */
    const float want2[] = {1.5f, 2.25f};
    assert_values(sh, want2, 2);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 0);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    assert_values(sh, want2, 2);
    /* a closed clock is refused under ASP too */
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 0, 0, 2, NULL, a), -EINVAL);
    assert_values(sh, want2, 2);
    /* ASP lets a node run any number of clocks ahead of the slowest (nothing is held per
     * clock): a contribution 5000 clocks past done is applied, not refused */
    for (uint64_t c = 1; c < 5000; c++)
        ck_assert_int_eq(ps_shard_close(sh, 0, c), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 5000, 1, 1, NULL, b), 1);
    const float want3[] = {1.5f, 2.5f};
    assert_values(sh, want3, 2);
    ps_shard_destroy(sh);
}
END_TEST

START_TEST(test_shard_duplicates)
{
    static const char *const syncs[] = {"bsp", "ssp:1", "asp"};
    for (size_t m = 0; m < 3; m++) {
        ps_shard_t *sh = shard_new(2, "add", syncs[m], 1);
        const float a[] = {1, 2};
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 5, 0, 0, 2, NULL, a), 1);
        uint64_t bytes = ps_shard_bytes(sh);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 5, 0, 0, 2, NULL, a), 0); /* the retry */
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 4, 0, 0, 2, NULL, a), 0); /* older */
        ck_assert_uint_eq(ps_shard_bytes(sh), bytes);
        ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
        ck_assert_int_eq(ps_shard_close(sh, 0, 0), 0); /* a repeated close */
        ck_assert_uint_eq(ps_shard_done(sh), 1);
        assert_values(sh, a, 2); /* applied once */
        /* a retry after the clock closed is still only a duplicate */
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 5, 0, 0, 2, NULL, a), 0);
        assert_values(sh, a, 2);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 6, 1, 0, 2, NULL, a), 1);
        ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
        const float twice[] = {2, 4};
        assert_values(sh, twice, 2);
        ps_shard_destroy(sh);
    }
    /* seq 0 is a valid first sequence number */
    ps_shard_t *sh = shard_new(1, "add", "asp", 1);
    const float one[] = {1};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 0, 0, 0, 1, NULL, one), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 0, 0, 0, 1, NULL, one), 0);
    assert_values(sh, one, 1);
    ps_shard_destroy(sh);
}
END_TEST

START_TEST(test_shard_keys_and_ranges)
{
    ps_shard_t *sh = shard_new(6, "add", "bsp", 1);
    const uint64_t keys[] = {3, 1, 3, 5};
    const float kv[] = {1, 2, 4, 8}, rv[] = {0.5f, 0.25f, 0.125f};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 4, keys, kv), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 0, 2, 3, NULL, rv), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 0, 6, 0, NULL, NULL), 1); /* empty, at end */
    /* with keys the offset does not matter */
    const uint64_t k0[] = {0};
    const float v0[] = {16};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 4, 0, 99, 1, k0, v0), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    const float want[] = {16, 2, 0.5f, 5.25f, 0.125f, 8};
    assert_values(sh, want, 6);
    ps_shard_destroy(sh);
}
END_TEST

/* Every bad call returns -EINVAL and leaves the values, done, the pending sums (checked by
 * what clock 0 applies in the end) and the sequence numbers exactly as they were. */
START_TEST(test_shard_bad_input)
{
    static const char *const syncs[] = {"bsp", "asp"};
    for (size_t m = 0; m < 2; m++) {
        ps_shard_t *sh = shard_new(4, "add", syncs[m], 2);
        const float good[] = {1, 2, 3, 4};
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 4, NULL, good), 1);
        ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
        float before[4];
        memcpy(before, ps_shard_values(sh), sizeof(before));
        uint64_t done = ps_shard_done(sh), bytes = ps_shard_bytes(sh);

        const float nan_v[] = {1, NAN}, inf_v[] = {INFINITY}, ninf_v[] = {-INFINITY};
        const uint64_t far_key[] = {0, 4}, huge_key[] = {UINT64_MAX};
        ck_assert_int_eq(ps_shard_contribute(sh, 2, 9, 0, 0, 4, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 1, 4, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 5, 0, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, UINT64_MAX, 2, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, UINT64_MAX, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, 2, far_key, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, 1, huge_key, good), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, 2, NULL, nan_v), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 3, 1, NULL, inf_v), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 3, 1, NULL, ninf_v), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, 2, NULL, NULL), -EINVAL);
        ck_assert_int_eq(ps_shard_contribute(sh, 1, 9, 0, 0, 4, NULL, good), -EINVAL); /* closed */
        if (m == 0) { /* BSP: beyond the window */
            ck_assert_int_eq(
                ps_shard_contribute(sh, 0, 9, PS_MAX_STALENESS + 3, 0, 4, NULL, good), -EAGAIN);
            ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, UINT64_MAX, 0, 4, NULL, good),
                             -EAGAIN);
        }
        ck_assert_int_eq(ps_shard_contribute(NULL, 0, 9, 0, 0, 4, NULL, good), -EINVAL);
        ck_assert_int_eq(ps_shard_close(sh, 2, 0), -EINVAL);
        ck_assert_int_eq(ps_shard_close(sh, 0, 1), -EINVAL); /* a gap */
        ck_assert_int_eq(ps_shard_close(sh, 1, 2), -EINVAL); /* a gap */
        ck_assert_int_eq(ps_shard_close(NULL, 0, 0), -EINVAL);

        ck_assert_int_eq(memcmp(before, ps_shard_values(sh), sizeof(before)), 0);
        ck_assert_uint_eq(ps_shard_done(sh), done);
        ck_assert_uint_eq(ps_shard_bytes(sh), bytes);
        /* seq 9 was never recorded: it is taken now */
        const float tenth[] = {0.5f};
        ck_assert_int_eq(ps_shard_contribute(sh, 0, 9, 0, 0, 1, NULL, tenth), 1);
        ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
        ck_assert_uint_eq(ps_shard_done(sh), 1);
        const float want[] = {1.5f, 2, 3, 4};
        assert_values(sh, want, 4);
        ps_shard_destroy(sh);
    }
}
END_TEST

START_TEST(test_shard_arithmetic)
{
    /* add: sums of the clock's contributions, exact on small binary fractions */
    ps_shard_t *add = shard_new(2, "add", "bsp", 2);
    const float a0[] = {1.5f, -2}, a1[] = {2.25f, 0.5f};
    ck_assert_int_eq(ps_shard_contribute(add, 0, 1, 0, 0, 2, NULL, a0), 1);
    ck_assert_int_eq(ps_shard_contribute(add, 1, 1, 0, 0, 2, NULL, a1), 1);
    ck_assert_int_eq(ps_shard_close(add, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(add, 1, 0), 1);
    const float add_want[] = {3.75f, -1.5f};
    assert_values(add, add_want, 2);
    ps_shard_destroy(add);

    /* sgd: value -= lr * sum */
    ps_shard_t *sgd = shard_new(2, "sgd:0.5", "bsp", 2);
    const float g0[] = {2, 1}, g1[] = {4, -3};
    ck_assert_int_eq(ps_shard_contribute(sgd, 0, 1, 0, 0, 2, NULL, g0), 1);
    ck_assert_int_eq(ps_shard_contribute(sgd, 1, 1, 0, 0, 2, NULL, g1), 1);
    ck_assert_int_eq(ps_shard_close(sgd, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(sgd, 1, 0), 1);
    const float sgd_want0[] = {-3, 1};
    assert_values(sgd, sgd_want0, 2);
    const float g2[] = {-2};
    ck_assert_int_eq(ps_shard_contribute(sgd, 0, 2, 1, 0, 1, NULL, g2), 1);
    ck_assert_int_eq(ps_shard_close(sgd, 0, 1), 1);
    ck_assert_int_eq(ps_shard_close(sgd, 1, 1), 1);
    const float sgd_want1[] = {-2, 1};
    assert_values(sgd, sgd_want1, 2);
    ps_shard_destroy(sgd);

    /* sgd under ASP: each contribution at once */
    ps_shard_t *asgd = shard_new(1, "sgd:0.25", "asp", 1);
    const float g[] = {8};
    ck_assert_int_eq(ps_shard_contribute(asgd, 0, 1, 0, 0, 1, NULL, g), 1);
    const float asgd_want[] = {-2};
    assert_values(asgd, asgd_want, 1);
    ps_shard_destroy(asgd);

    /* assign under BSP: the clock's sum where written, the old value elsewhere */
    ps_shard_t *as = shard_new(3, "assign", "bsp", 2);
    const float s0[] = {1, 2}, s1[] = {4};
    ck_assert_int_eq(ps_shard_contribute(as, 0, 1, 0, 0, 2, NULL, s0), 1);
    ck_assert_int_eq(ps_shard_contribute(as, 1, 1, 0, 0, 1, NULL, s1), 1);
    ck_assert_int_eq(ps_shard_close(as, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(as, 1, 0), 1);
    const float as_want0[] = {5, 2, 0};
    assert_values(as, as_want0, 3);
    const uint64_t k[] = {2};
    const float s2[] = {-7}, zero[] = {0};
    ck_assert_int_eq(ps_shard_contribute(as, 0, 2, 1, 0, 1, k, s2), 1);
    ck_assert_int_eq(ps_shard_contribute(as, 1, 2, 1, 1, 1, NULL, zero), 1); /* assigns 0 */
    ck_assert_int_eq(ps_shard_close(as, 0, 1), 1);
    ck_assert_int_eq(ps_shard_close(as, 1, 1), 1);
    const float as_want1[] = {5, 0, -7};
    assert_values(as, as_want1, 3);
    ps_shard_destroy(as);
}
END_TEST

/* ---- a shard against a reference model: random interleavings ---------------------------- */

/* (rng_t, ps_core_test.h: every run sees the same 1000 cases) */
#define MODEL_SOURCES 3
#define MODEL_MAX_ELEMS 8
#define MODEL_MAX_LOG 256

/* The model keeps every taken contribution, element by element, and recomputes the values from
 * scratch: clock by clock up to done (the least number of clocks every source closed), each
 * clock's contributions summed in the order they came, then the rule. */
typedef struct model_entry_s {
    uint64_t clock;
    uint32_t element;
    float value;
} model_entry_t;

typedef struct model_s {
    uint64_t elems;
    ps_rule_t rule;
    uint64_t closed[MODEL_SOURCES];
    model_entry_t log[MODEL_MAX_LOG];
    size_t nlog;
} model_t;

static uint64_t model_done(const model_t *m)
{
    uint64_t done = m->closed[0];
    for (int s = 1; s < MODEL_SOURCES; s++)
        done = m->closed[s] < done ? m->closed[s] : done;
    return done;
}

static void model_values(const model_t *m, float *out)
{
    for (uint64_t i = 0; i < m->elems; i++)
        out[i] = 0.0f;
    uint64_t done = model_done(m);
    for (uint64_t c = 0; c < done; c++) {
        float sum[MODEL_MAX_ELEMS] = {0};
        int written[MODEL_MAX_ELEMS] = {0};
        for (size_t e = 0; e < m->nlog; e++)
            if (m->log[e].clock == c) {
                sum[m->log[e].element] += m->log[e].value;
                written[m->log[e].element] = 1;
            }
        for (uint64_t i = 0; i < m->elems; i++) {
            if (m->rule.kind == PS_RULE_ADD)
                out[i] += sum[i];
            else if (m->rule.kind == PS_RULE_SGD)
                out[i] -= m->rule.lr * sum[i];
            else if (written[i])
                out[i] = sum[i];
        }
    }
}

/* A source's next move in a case: its own clock, seq and how many clocks it runs. */
typedef struct model_source_s {
    uint64_t clock, seq, clocks;
    int pushed;          /* seq has been taken once: a retry may repeat it */
    uint64_t last_offset, last_n, last_keys[4];
    int last_used_keys;
    float last_values[MODEL_MAX_ELEMS];
} model_source_t;

static void model_check(const model_t *m, const ps_shard_t *sh, int trial, int step)
{
    float want[MODEL_MAX_ELEMS];
    model_values(m, want);
    if (ps_shard_done(sh) != model_done(m))
        ck_abort_msg("case %d step %d: done %lu, model %lu", trial, step,
                     (unsigned long)ps_shard_done(sh), (unsigned long)model_done(m));
    if (memcmp(ps_shard_values(sh), want, m->elems * sizeof(float)) != 0)
        ck_abort_msg("case %d step %d: values differ from the model", trial, step);
}

/* One random case: 3 sources each running 1..5 clocks of 0..3 contributions (ranges or key
 * sets of small binary fractions, so that every sum is exact), in a random interleaving, with
 * retries, repeated closes and bad calls mixed in; the shard must agree with the model after
 * every step and return what the header promises. */
static void model_case(rng_t *rng, int trial, const char *sync)
{
    static const char *const rules[] = {"add", "assign", "sgd:0.5"};
    model_t m = {.elems = 1 + rng_below(rng, MODEL_MAX_ELEMS)};
    m.rule = rule_of(rules[rng_below(rng, 3)]);
    ps_sync_t sy = sync_of(sync);
    ps_shard_t *sh = ps_shard_create(m.elems, &m.rule, &sy, MODEL_SOURCES);
    ck_assert_ptr_nonnull(sh);
    uint64_t empty_bytes = ps_shard_bytes(sh);
    model_source_t src[MODEL_SOURCES] = {{0}};
    for (int s = 0; s < MODEL_SOURCES; s++)
        src[s].clocks = 1 + rng_below(rng, 5);
    /* the sources all run the same number of clocks in the end, so that done reaches it */
    uint64_t clocks = src[0].clocks;
    for (int s = 1; s < MODEL_SOURCES; s++)
        clocks = src[s].clocks > clocks ? src[s].clocks : clocks;
    for (int s = 0; s < MODEL_SOURCES; s++)
        src[s].clocks = clocks;

    for (int step = 0;; step++) {
        int live[MODEL_SOURCES], nlive = 0;
        for (int s = 0; s < MODEL_SOURCES; s++)
            if (src[s].clock < src[s].clocks)
                live[nlive++] = s;
        if (nlive == 0)
            break;
        int s = live[rng_below(rng, (uint32_t)nlive)];
        model_source_t *me = &src[s];
        uint32_t move = rng_below(rng, 10);
        if (move < 5 && m.nlog + MODEL_MAX_ELEMS <= MODEL_MAX_LOG) {
            /* a new contribution: a range or a key set */
            float values[MODEL_MAX_ELEMS];
            uint64_t keys[4], offset = 0, n;
            int use_keys = rng_below(rng, 2);
            if (use_keys) {
                n = 1 + rng_below(rng, 4);
                for (uint64_t i = 0; i < n; i++)
                    keys[i] = rng_below(rng, (uint32_t)m.elems);
            } else {
                offset = rng_below(rng, (uint32_t)m.elems);
                n = 1 + rng_below(rng, (uint32_t)(m.elems - offset));
            }
            for (uint64_t i = 0; i < n; i++)
                values[i] = ((float)rng_below(rng, 33) - 16.0f) / 4.0f;
            uint64_t taken_seq = me->seq;
            me->seq += 1 + rng_below(rng, 3); /* increasing, not always by one */
            if (sy.kind != PS_SYNC_ASP && me->clock - model_done(&m) > ps_sync_window(&sy)) {
                /* too far ahead of done: refused, nothing changed (the seq is not taken) */
                ck_assert_int_eq(ps_shard_contribute(sh, (uint32_t)s, me->seq, me->clock,
                                                     offset, n, use_keys ? keys : NULL, values),
                                 -EAGAIN);
                me->seq = taken_seq;
                continue;
            }
            ck_assert_int_eq(ps_shard_contribute(sh, (uint32_t)s, me->seq, me->clock, offset, n,
                                                 use_keys ? keys : NULL, values), 1);
            for (uint64_t i = 0; i < n; i++)
                m.log[m.nlog++] = (model_entry_t){.clock = me->clock,
                                                  .element = (uint32_t)(use_keys ? keys[i]
                                                                                 : offset + i),
                                                  .value = values[i]};
            me->pushed = 1;
            me->last_offset = offset;
            me->last_n = n;
            me->last_used_keys = use_keys;
            memcpy(me->last_keys, keys, sizeof(keys));
            memcpy(me->last_values, values, n * sizeof(float));
        } else if (move == 5 && me->pushed) {
            /* a retry of the last contribution: a duplicate */
            ck_assert_int_eq(ps_shard_contribute(sh, (uint32_t)s, me->seq, me->clock,
                                                 me->last_offset, me->last_n,
                                                 me->last_used_keys ? me->last_keys : NULL,
                                                 me->last_values), 0);
        } else if (move == 6) {
            /* bad calls: a gap in the closes, a closed clock, a key out of range */
            const float one[] = {1};
            const uint64_t out[] = {m.elems};
            ck_assert_int_eq(ps_shard_close(sh, (uint32_t)s, me->clock + 1), -EINVAL);
            if (me->clock > 0)
                ck_assert_int_eq(ps_shard_contribute(sh, (uint32_t)s, me->seq + 1,
                                                     me->clock - 1, 0, 1, NULL, one), -EINVAL);
            ck_assert_int_eq(ps_shard_contribute(sh, (uint32_t)s, me->seq + 1, me->clock, 0, 1,
                                                 out, one), -EINVAL);
        } else {
            ck_assert_int_eq(ps_shard_close(sh, (uint32_t)s, me->clock), 1);
            m.closed[s]++;
            me->clock++;
            if (rng_below(rng, 4) == 0) /* a repeated close */
                ck_assert_int_eq(ps_shard_close(sh, (uint32_t)s, me->clock - 1), 0);
        }
        model_check(&m, sh, trial, step);
    }
    ck_assert_uint_eq(ps_shard_done(sh), clocks);
    /* every clock's buffers freed but one clock's, kept for the next clock */
    uint64_t kept = m.elems * sizeof(float) + (m.rule.kind == PS_RULE_ASSIGN ? (m.elems + 7) / 8 : 0);
    ck_assert(ps_shard_bytes(sh) == empty_bytes || ps_shard_bytes(sh) == empty_bytes + kept);
    ps_shard_destroy(sh);
}

START_TEST(test_shard_random_interleavings)
{
    rng_t rng = {.state = 18};
    for (int trial = 0; trial < 1000; trial++)
        model_case(&rng, trial, "bsp");
    /* SSP buffers and applies exactly as BSP at the shard (only reads differ) */
    for (int trial = 0; trial < 200; trial++)
        model_case(&rng, 1000 + trial, "ssp:2");
}
END_TEST

/* ---- aggregation ---------------------------------------------------------------------- */

static ps_agg_t *agg_new(uint64_t count, const char *sync, uint32_t workers)
{
    ps_sync_t s = sync_of(sync);
    ps_agg_t *agg = ps_agg_create(count, &s, workers);
    ck_assert_ptr_nonnull(agg);
    return agg;
}

static void assert_sum(const float *got, const float *want, uint64_t n)
{
    ck_assert_ptr_nonnull(got);
    for (uint64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                      "element %lu: %.9g, want %.9g", (unsigned long)i, got[i], want[i]);
}

START_TEST(test_agg_create_bad)
{
    ps_sync_t bsp = sync_of("bsp"), asp = sync_of("asp");
    ps_sync_t over = {.kind = PS_SYNC_SSP, .staleness = PS_MAX_STALENESS + 1};
    ck_assert_ptr_null(ps_agg_create(4, &asp, 2));
    ck_assert_ptr_null(ps_agg_create(0, &bsp, 2));
    ck_assert_ptr_null(ps_agg_create(4, &bsp, 0));
    ck_assert_ptr_null(ps_agg_create(4, &bsp, PS_MAX_LOCAL_WORKERS + 1));
    ck_assert_ptr_null(ps_agg_create(4, &over, 2));
    ck_assert_ptr_null(ps_agg_create(4, NULL, 2));
    ps_agg_t *ok = ps_agg_create(4, &bsp, PS_MAX_LOCAL_WORKERS);
    ck_assert_ptr_nonnull(ok);
    ps_agg_destroy(ok);
    ps_agg_destroy(NULL);
}
END_TEST

START_TEST(test_agg_sums)
{
    ps_agg_t *agg = agg_new(5, "bsp", 3);
    const float w0[] = {1, 2, 3, 4, 5}, w1[] = {0.5f, 0.25f}, w2[] = {8, 16};
    const uint64_t k2[] = {4, 0};
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, 0, 0, 5, NULL, w0), 1);
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, 0, 3, 2, NULL, w1), 1);
    ck_assert_int_eq(ps_agg_push(agg, 2, 1, 0, 0, 2, k2, w2), 1);
    ck_assert_int_eq(ps_agg_push(agg, 0, 2, 0, 1, 1, NULL, w1), 1); /* a second push, same clock */
    ck_assert_ptr_null(ps_agg_sum(agg, 0));
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ck_assert_int_eq(ps_agg_close(agg, 2, 0), 2);
    ck_assert_ptr_null(ps_agg_sum(agg, 0)); /* worker 1 still open */
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), 1);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 1), 0);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    const float want[] = {1 + 16, 2 + 0.5f, 3, 4 + 0.5f, 5 + 0.25f + 8};
    assert_sum(ps_agg_sum(agg, 0), want, 5);
    const uint8_t *written = ps_agg_written(agg, 0);
    ck_assert_ptr_nonnull(written);
    ck_assert_uint_eq(written[0], 0x1f); /* worker 0 wrote all five */
    /* a clock nobody pushed into: zeros once complete */
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 1), 2);
    ck_assert_ptr_null(ps_agg_sum(agg, 1));
    ck_assert_ptr_null(ps_agg_written(agg, 1));
    ck_assert_int_eq(ps_agg_close(agg, 2, 1), 1);
    const float zeros[5] = {0};
    assert_sum(ps_agg_sum(agg, 1), zeros, 5);
    ck_assert_ptr_nonnull(ps_agg_written(agg, 1));
    ck_assert_uint_eq(ps_agg_written(agg, 1)[0], 0); /* nobody wrote: send no values */
    assert_sum(ps_agg_sum(agg, 0), want, 5); /* clock 0 stays until released */
    ps_agg_destroy(agg);
}
END_TEST

START_TEST(test_agg_ssp_fast_worker)
{
    ps_agg_t *agg = agg_new(2, "ssp:2", 2);
    const float one[] = {1, 0}, ten[] = {10, 0}, hundred[] = {100, 0}, slow[] = {0, 5};
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, 0, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ck_assert_int_eq(ps_agg_push(agg, 0, 2, 1, 0, 2, NULL, ten), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), 2);
    ck_assert_int_eq(ps_agg_push(agg, 0, 3, 2, 0, 2, NULL, hundred), 1);
    /* worker 0 at clock 2 with clocks 0, 1 and 2 open */
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), 2);
    ck_assert_ptr_null(ps_agg_sum(agg, 0));
    ck_assert_ptr_null(ps_agg_sum(agg, 1));
    /* worker 1 may not push into a clock other than its own */
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, 1, 0, 2, NULL, slow), -EINVAL);
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, 0, 0, 2, NULL, slow), 1);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    const float want0[] = {1, 5};
    assert_sum(ps_agg_sum(agg, 0), want0, 2);
    ck_assert_ptr_null(ps_agg_sum(agg, 1));
    ck_assert_int_eq(ps_agg_close(agg, 1, 1), 1);
    const float want1[] = {10, 0};
    assert_sum(ps_agg_sum(agg, 1), want1, 2);
    ck_assert_uint_eq(ps_agg_written(agg, 0)[0], 0x3); /* both elements, by two workers */
    ck_assert_uint_eq(ps_agg_written(agg, 1)[0], 0x3); /* worker 0 pushed the whole range */
    ck_assert_ptr_null(ps_agg_sum(agg, 2));
    ck_assert_int_eq(ps_agg_close(agg, 0, 2), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 2), 1);
    const float want2[] = {100, 0};
    assert_sum(ps_agg_sum(agg, 2), want2, 2);
    ps_agg_destroy(agg);
}
END_TEST

/* A worker cannot make the aggregation hold more than the sync mode's window of clocks: the
 * push or clock beyond is refused with -EAGAIN (nothing changed) until the slowest worker (and
 * the release of sent clocks) lets it on. */
START_TEST(test_agg_window)
{
    const float one[] = {1, 1};
    /* BSP: one clock ahead of the slowest */
    ps_agg_t *agg = agg_new(2, "bsp", 2);
    uint64_t seq = 0;
    ck_assert_int_eq(ps_agg_push(agg, 0, ++seq, 0, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ck_assert_int_eq(ps_agg_push(agg, 0, ++seq, 1, 0, 2, NULL, one), 1);
    uint64_t bytes = ps_agg_bytes(agg);
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), -EAGAIN);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), 1);
    /* the review's flood: 300 pushes and clocks while the other worker waits */
    int refused = 0;
    for (int i = 0; i < 300; i++) {
        refused += ps_agg_push(agg, 0, ++seq, ps_agg_clock_of(agg, 0), 0, 2, NULL, one) < 0;
        refused += ps_agg_close(agg, 0, ps_agg_clock_of(agg, 0)) == -EAGAIN;
    }
    ck_assert_int_eq(refused, 300);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), 1);
    ck_assert_uint_eq(ps_agg_bytes(agg), bytes);
    ck_assert_uint_eq(ps_agg_push_bytes(agg, 0), 0); /* its clock has its sum */
    /* the slow worker closes 0: the fast one may go on to clock 2, not 3 */
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), 2);
    ck_assert_uint_eq(ps_agg_push_bytes(agg, 0), 2 * sizeof(float) + 1);
    ck_assert_int_eq(ps_agg_push(agg, 0, ++seq, 2, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 2), -EAGAIN);
    ck_assert_int_eq(ps_agg_close(agg, 1, 1), 1);
    /* clock 0 is complete but not released (its acknowledgements lag): window + 1 from it */
    ck_assert_int_eq(ps_agg_close(agg, 0, 2), -EAGAIN);
    ps_agg_release(agg, 0);
    ck_assert_int_eq(ps_agg_close(agg, 0, 2), 2);
    ps_agg_destroy(agg);

    /* SSP:2: three clocks ahead (s + 1), not four */
    agg = agg_new(2, "ssp:2", 2);
    for (uint64_t c = 0; c < 3; c++) {
        ck_assert_int_eq(ps_agg_push(agg, 0, c + 1, c, 0, 2, NULL, one), 1);
        ck_assert_int_eq(ps_agg_close(agg, 0, c), 2);
    }
    ck_assert_int_eq(ps_agg_push(agg, 0, 4, 3, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 3), -EAGAIN);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 3), 2);
    ps_agg_destroy(agg);

    /* the window itself */
    ps_sync_t sync = {.kind = PS_SYNC_BSP};
    ck_assert_uint_eq(ps_sync_window(&sync), 1);
    sync = (ps_sync_t){.kind = PS_SYNC_SSP, .staleness = 7};
    ck_assert_uint_eq(ps_sync_window(&sync), 8);
    sync = (ps_sync_t){.kind = PS_SYNC_ASP};
    ck_assert_uint_eq(ps_sync_window(&sync), UINT64_MAX);
}
END_TEST

/* A BSP shard holds at most done + 1 pending clocks: a source further ahead is told -EAGAIN
 * (nothing changed) and is taken once done has moved. */
START_TEST(test_shard_window)
{
    ps_shard_t *sh = shard_new(2, "add", "bsp", 2);
    const float one[] = {1, 1};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, 2, NULL, one), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    uint64_t bytes = ps_shard_bytes(sh);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 2, 0, 2, NULL, one), -EAGAIN);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 1002, 0, 2, NULL, one), -EAGAIN);
    ck_assert_uint_eq(ps_shard_bytes(sh), bytes);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 2, 0, 2, NULL, one), 1);
    ps_shard_destroy(sh);
}
END_TEST

START_TEST(test_agg_duplicates_and_bad)
{
    ps_agg_t *agg = agg_new(3, "bsp", 2);
    const float a[] = {1, 2, 3};
    ck_assert_int_eq(ps_agg_push(agg, 0, 7, 0, 0, 3, NULL, a), 1);
    uint64_t bytes = ps_agg_bytes(agg);
    ck_assert_int_eq(ps_agg_push(agg, 0, 7, 0, 0, 3, NULL, a), 0);
    ck_assert_int_eq(ps_agg_push(agg, 0, 6, 0, 0, 3, NULL, a), 0);

    const float nan_v[] = {NAN}, inf_v[] = {1, INFINITY};
    const uint64_t far[] = {3}, huge[] = {UINT64_MAX};
    ck_assert_int_eq(ps_agg_push(agg, 2, 8, 0, 0, 3, NULL, a), -EINVAL);   /* worker */
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 1, 0, 3, NULL, a), -EINVAL);   /* not its clock */
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 1, 3, NULL, a), -EINVAL);   /* range */
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, UINT64_MAX, 2, NULL, a), -EINVAL);
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 0, 1, far, a), -EINVAL);    /* key */
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 0, 1, huge, a), -EINVAL);
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 0, 1, NULL, nan_v), -EINVAL);
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 0, 2, NULL, inf_v), -EINVAL);
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 0, 2, NULL, NULL), -EINVAL);
    ck_assert_int_eq(ps_agg_push(NULL, 0, 8, 0, 0, 3, NULL, a), -EINVAL);
    ck_assert_int_eq(ps_agg_close(agg, 2, 0), -EINVAL);
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), -EINVAL); /* not its clock */
    ck_assert_int_eq(ps_agg_close(NULL, 0, 0), -EINVAL);
    ck_assert_uint_eq(ps_agg_bytes(agg), bytes);
    ck_assert_uint_eq(ps_agg_clock_of(agg, 0), 0);

    /* seq 8 was never recorded */
    const float b[] = {0.5f};
    ck_assert_int_eq(ps_agg_push(agg, 0, 8, 0, 2, 1, NULL, b), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 0); /* a repeat */
    ck_assert_int_eq(ps_agg_push(agg, 0, 9, 0, 0, 3, NULL, a), -EINVAL); /* closed clock */
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 0);
    const float want[] = {1, 2, 3.5f};
    assert_sum(ps_agg_sum(agg, 0), want, 3);
    ps_agg_destroy(agg);
}
END_TEST

START_TEST(test_agg_written_keys)
{
    ps_agg_t *agg = agg_new(20, "bsp", 1);
    const uint64_t keys[] = {0, 9, 19, 9};
    const float v[] = {1, 2, 3, 4};
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, 0, 0, 4, keys, v), 1);
    ck_assert_ptr_null(ps_agg_written(agg, 0));
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 1);
    const uint8_t *w = ps_agg_written(agg, 0);
    ck_assert_ptr_nonnull(w);
    ck_assert_uint_eq(w[0], 0x01);
    ck_assert_uint_eq(w[1], 0x02);
    ck_assert_uint_eq(w[2], 0x08);
    const float *sum = ps_agg_sum(agg, 0);
    ck_assert(sum[9] == 6.0f && sum[19] == 3.0f && sum[0] == 1.0f && sum[1] == 0.0f);
    ps_agg_release(agg, 0);
    ck_assert_ptr_null(ps_agg_written(agg, 0));
    ps_agg_destroy(agg);
}
END_TEST

START_TEST(test_agg_release)
{
    ps_agg_t *agg = agg_new(1024, "ssp:1", 2);
    uint64_t empty = ps_agg_bytes(agg);
    const float v[] = {1};
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, 0, 0, 1, NULL, v), 1);
    ck_assert_uint_ge(ps_agg_bytes(agg), empty + 1024 * sizeof(float));
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ps_agg_release(agg, 0); /* not complete: nothing */
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    ck_assert_ptr_nonnull(ps_agg_sum(agg, 0));
    ck_assert_int_eq(ps_agg_close(agg, 0, 1), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 1), 1);
    ck_assert_ptr_nonnull(ps_agg_sum(agg, 1));
    uint64_t two = ps_agg_bytes(agg);
    ps_agg_release(agg, 0);
    ck_assert_ptr_null(ps_agg_sum(agg, 0));
    ck_assert_ptr_nonnull(ps_agg_sum(agg, 1));
    ck_assert_uint_eq(ps_agg_bytes(agg), two); /* its buffers kept for the next clock */
    ps_agg_release(agg, 0); /* twice: nothing */
    ps_agg_release(agg, 1);
    ps_agg_release(agg, 99); /* never existed */
    ck_assert_ptr_null(ps_agg_sum(agg, 1));
    /* nothing open: back to the start but for one clock's buffers, kept for the next */
    ck_assert_uint_eq(ps_agg_bytes(agg), empty + 1024 * sizeof(float) + 1024 / 8);
    ps_agg_destroy(agg);
}
END_TEST

/* The aggregator against a model, 300 random interleavings of 3 workers: the model keeps every
 * taken push element by element; a clock is complete below the least worker clock; a complete
 * clock's sum (and written bits) must match the log, until the test releases it. */
#define AGG_MODEL_WORKERS 3
#define AGG_MODEL_CLOCKS 6

static void agg_model_check(const ps_agg_t *agg, const model_entry_t *log, size_t nlog,
                            const uint64_t *clock, const int *released, uint64_t count,
                            int trial, int step)
{
    uint64_t least = clock[0];
    for (int w = 1; w < AGG_MODEL_WORKERS; w++)
        least = clock[w] < least ? clock[w] : least;
    for (uint64_t c = 0; c < AGG_MODEL_CLOCKS + 1; c++) {
        const float *sum = ps_agg_sum(agg, c);
        const uint8_t *written = ps_agg_written(agg, c);
        if (c >= least || released[c]) {
            if (sum != NULL || written != NULL)
                ck_abort_msg("case %d step %d: clock %lu has a sum", trial, step,
                             (unsigned long)c);
            continue;
        }
        if (sum == NULL || written == NULL)
            ck_abort_msg("case %d step %d: complete clock %lu has no sum", trial, step,
                         (unsigned long)c);
        float want[MODEL_MAX_ELEMS] = {0};
        int wrote[MODEL_MAX_ELEMS] = {0};
        for (size_t e = 0; e < nlog; e++)
            if (log[e].clock == c) {
                want[log[e].element] += log[e].value;
                wrote[log[e].element] = 1;
            }
        for (uint64_t i = 0; i < count; i++)
            if (memcmp(&sum[i], &want[i], sizeof(float)) != 0 ||
                !!(written[i / 8] & (1u << (i % 8))) != wrote[i])
                ck_abort_msg("case %d step %d: clock %lu element %lu: %g (written %d), model "
                             "%g (%d)", trial, step, (unsigned long)c, (unsigned long)i, sum[i],
                             !!(written[i / 8] & (1u << (i % 8))), want[i], wrote[i]);
    }
}

/* A whole-table push is checked as it is copied in (a clock's first) or added: a value that
 * is not finite, in a block of 8 or in the tail, refuses it with nothing changed, also when
 * the clock's buffers came from the spare kept by a released clock. */
START_TEST(test_agg_whole_push_refused)
{
    enum { N = 21 };
    ps_agg_t *agg = agg_new(N, "bsp", 2);
    uint64_t empty = ps_agg_bytes(agg);
    float v[N], bad[N], want[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i;
    for (uint64_t clock = 0; clock < 2; clock++) {
        for (int at = 3; at < N; at += 16) { /* 3: in a block, 19: in the tail */
            memcpy(bad, v, sizeof(bad));
            bad[at] = at == 3 ? NAN : INFINITY;
            uint64_t bytes = ps_agg_bytes(agg);
            ck_assert_int_eq(ps_agg_push(agg, 0, 10 * clock + 1, clock, 0, N, NULL, bad), -EINVAL);
            ck_assert_uint_eq(ps_agg_bytes(agg), bytes); /* no clock made */
            ck_assert_int_eq(ps_agg_clock_fresh(agg, clock), 1);
        }
        ck_assert_int_eq(ps_agg_clock_fresh(agg, clock), 1);
        ck_assert_int_eq(ps_agg_push(agg, 0, 10 * clock + 1, clock, 0, N, NULL, v), 1);
        ck_assert_int_eq(ps_agg_clock_fresh(agg, clock), 0); /* the next push adds */
        ck_assert_int_eq(ps_agg_push(agg, 1, 10 * clock + 1, clock, 0, N, NULL, bad), -EINVAL);
        ck_assert_int_eq(ps_agg_push(agg, 1, 10 * clock + 2, clock, 0, N, NULL, v), 1);
        ck_assert_int_eq(ps_agg_push(agg, 1, 10 * clock + 2, clock, 0, N, NULL, bad), -EINVAL);
        ck_assert_int_eq(ps_agg_push(agg, 1, 10 * clock + 2, clock, 0, N, NULL, v), 0);
        ck_assert_int_eq(ps_agg_close(agg, 0, clock), 2);
        ck_assert_int_eq(ps_agg_close(agg, 1, clock), 1);
        for (int i = 0; i < N; i++)
            want[i] = 2.0f * (float)i;
        assert_sum(ps_agg_sum(agg, clock), want, N);
        const uint8_t *written = ps_agg_written(agg, clock);
        ck_assert_uint_eq(written[0], 0xff);
        ck_assert_uint_eq(written[1], 0xff);
        ck_assert_uint_eq(written[2], 0x1f); /* 21 bits: none past the table */
        ps_agg_release(agg, clock);
        ck_assert_uint_eq(ps_agg_bytes(agg), empty + N * sizeof(float) + (N + 7) / 8);
    }
    /* a partial push makes the clock's sum too */
    const float one[] = {1};
    ck_assert_int_eq(ps_agg_push(agg, 0, 30, 2, 5, 1, NULL, one), 1);
    ck_assert_int_eq(ps_agg_clock_fresh(agg, 2), 0);
    ck_assert_int_eq(ps_agg_clock_fresh(NULL, 2), 0);
    ck_assert_int_eq(ps_agg_push(agg, 1, 30, 2, 0, N, NULL, v), 1); /* added to it */
    ck_assert_int_eq(ps_agg_close(agg, 0, 2), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 2), 1);
    for (int i = 0; i < N; i++)
        want[i] = (float)i + (i == 5 ? 1.0f : 0.0f);
    assert_sum(ps_agg_sum(agg, 2), want, N);
    ps_agg_release(agg, 2);
    /* a clock nobody pushed to (its buffers from the spare): zeros */
    ck_assert_int_eq(ps_agg_clock_fresh(agg, 3), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 3), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 3), 1);
    ck_assert_int_eq(ps_agg_clock_fresh(agg, 3), 0);
    memset(want, 0, sizeof(want));
    assert_sum(ps_agg_sum(agg, 3), want, N);
    ps_agg_destroy(agg);
}
END_TEST

/* The vector kernels (blocks of 8 and a tail, per rule) give what the element formulas give,
 * bit for bit: two sources' whole contributions summed in arrival order and applied; a
 * second contribution whose sum would overflow is refused (-ERANGE) and the first one alone
 * is applied. */
START_TEST(test_shard_kernels_exact)
{
    enum { N = 37 };
    static const char *const rules[] = {"add", "sgd:0.5", "assign"};
    for (int r = 0; r < 3; r++) {
        ps_shard_t *sh = shard_new(N, rules[r], "bsp", 2);
        float a[N], b[N], want[N] = {0};
        for (int i = 0; i < N; i++) {
            a[i] = (float)i * 0.25f - 3.0f;
            b[i] = 1.5f - (float)i * 0.125f;
        }
        for (uint64_t clock = 0; clock < 2; clock++) {
            if (clock == 1) /* the sum overflows where both are FLT_MAX: b is refused */
                for (int i = 5; i < N; i += 28)
                    a[i] = b[i] = FLT_MAX;
            ck_assert_int_eq(ps_shard_contribute(sh, 0, clock + 1, clock, 0, N, NULL, a), 1);
            ck_assert_int_eq(ps_shard_contribute(sh, 1, clock + 1, clock, 0, N, NULL, b),
                             clock == 0 ? 1 : -ERANGE);
            ck_assert_int_eq(ps_shard_close(sh, 0, clock), 1);
            ck_assert_int_eq(ps_shard_close(sh, 1, clock), 1);
            for (int i = 0; i < N; i++) {
                float sum = clock == 0 ? a[i] + b[i] : a[i];
                want[i] = r == 0 ? want[i] + sum : r == 1 ? want[i] - 0.5f * sum : sum;
                ck_assert_msg(memcmp(&ps_shard_values(sh)[i], &want[i], sizeof(float)) == 0,
                              "rule %s clock %llu element %d: %a, not %a", rules[r],
                              (unsigned long long)clock, i, ps_shard_values(sh)[i], want[i]);
            }
        }
        ps_shard_destroy(sh);
    }
}
END_TEST

/* The same for a shard's whole-shard contributions (the first one of a clock is copied in),
 * add and assign: refused with nothing changed; applied right after. */
START_TEST(test_shard_whole_refused)
{
    enum { N = 21 };
    static const char *const rules[] = {"add", "assign"};
    for (int r = 0; r < 2; r++) {
        ps_shard_t *sh = shard_new(N, rules[r], "bsp", 2);
        uint64_t empty = ps_shard_bytes(sh);
        float v[N], bad[N];
        for (int i = 0; i < N; i++)
            v[i] = (float)i;
        memcpy(bad, v, sizeof(bad));
        bad[19] = NAN;
        for (uint64_t clock = 0; clock < 2; clock++) {
            uint64_t bytes = ps_shard_bytes(sh);
            ck_assert_int_eq(ps_shard_contribute(sh, 0, clock + 1, clock, 0, N, NULL, bad),
                             -EINVAL);
            ck_assert_uint_eq(ps_shard_bytes(sh), bytes);
            ck_assert_int_eq(ps_shard_contribute(sh, 0, clock + 1, clock, 0, N, NULL, v), 1);
            ck_assert_int_eq(ps_shard_contribute(sh, 1, clock + 1, clock, 0, N, NULL, bad),
                             -EINVAL);
            ck_assert_int_eq(ps_shard_contribute(sh, 1, clock + 1, clock, 0, N, NULL, v), 1);
            ck_assert_int_eq(ps_shard_close(sh, 0, clock), 1);
            ck_assert_int_eq(ps_shard_close(sh, 1, clock), 1);
            for (int i = 0; i < N; i++) /* add: 2i per clock; assign: the clock's sum 2i */
                ck_assert_float_eq(ps_shard_values(sh)[i],
                                   (r == 0 ? (float)(clock + 1) : 1.0f) * 2.0f * (float)i);
        }
        uint64_t kept = N * sizeof(float) + (r == 1 ? (N + 7) / 8 : 0);
        ck_assert_uint_eq(ps_shard_bytes(sh), empty + kept);
        ps_shard_destroy(sh);
    }
}
END_TEST

/* Updates whose result would not be finite (float overflow) are refused with -ERANGE and the
 * values stay the last finite ones: the replay (two pushes of 3e38 to an "add" table
 * under BSP), a clock's sum of two sources, ASP, keys given twice, SGD, SSP's clock summed
 * ahead (refused whole when applied), and a node's aggregation. */
START_TEST(test_shard_overflow_refused)
{
    enum { N = 10 };
    float big[N], small[N];
    for (int i = 0; i < N; i++) {
        big[i] = 3e38f;
        small[i] = (float)i;
    }
    /* BSP, one source: 3e38, then 3e38 again -> refused, done moves, values stay 3e38 */
    ps_shard_t *sh = shard_new(N, "add", "bsp", 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, N, NULL, big), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, N, NULL, big), -ERANGE);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, N, NULL, big), 0); /* a retry */
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 2);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(ps_shard_values(sh)[i], 3e38f);
    /* a partial range too (the element that would overflow is the last one) */
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 2, 5, 5, NULL, big), -ERANGE);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 4, 2, 0, N, NULL, small), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 2), 1);
    ck_assert_float_eq(ps_shard_values(sh)[9], 3e38f + 9.0f);
    ck_assert_uint_eq(ps_shard_refused(sh), 0);
    /* its state saves and loads (every value finite) */
    size_t size = ps_shard_state_size(sh);
    void *buf = malloc(size);
    ck_assert_int_ge(ps_shard_save(sh, buf, size), 1);
    ps_rule_t rule;
    ps_sync_t sync;
    ck_assert_int_eq(ps_rule_parse("add", &rule, NULL, 0), 0);
    ck_assert_int_eq(ps_sync_parse("bsp", &sync, NULL, 0), 0);
    char err[128];
    ps_shard_t *back = ps_shard_load(buf, size, N, &rule, &sync, 1, err, sizeof(err));
    ck_assert_msg(back != NULL, "%s", err);
    ck_assert(ps_shard_same(sh, back));
    ps_shard_destroy(back);
    free(buf);
    ps_shard_destroy(sh);

    /* BSP, two sources: each 2e38 is finite, their sum is not: the second is refused */
    float two[N];
    for (int i = 0; i < N; i++)
        two[i] = 2e38f;
    sh = shard_new(N, "add", "bsp", 2);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, N, NULL, two), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 1, 1, 0, 0, N, NULL, two), -ERANGE);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(sh, 1, 0), 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(ps_shard_values(sh)[i], 2e38f);
    /* keys: the same key twice makes 4e38: refused, the sum as it was */
    uint64_t keys[2] = {3, 3};
    float kv[2] = {1e38f, 1e38f};
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, 2, keys, kv), -ERANGE);
    keys[1] = 4;
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 1, 0, 2, keys, small), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    ck_assert_int_eq(ps_shard_close(sh, 1, 1), 1);
    ck_assert_float_eq(ps_shard_values(sh)[3], 2e38f);
    ck_assert_float_eq(ps_shard_values(sh)[4], 2e38f + 1.0f);
    ps_shard_destroy(sh);

    /* ASP: applied on arrival, the same check */
    sh = shard_new(N, "add", "asp", 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, N, NULL, big), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 0, 0, N, NULL, big), -ERANGE);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(ps_shard_values(sh)[i], 3e38f);
    ps_shard_destroy(sh);

    /* SGD: value -= lr * sum */
    sh = shard_new(N, "sgd:1000", "bsp", 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, N, NULL, big), -ERANGE);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(ps_shard_values(sh)[i], 0.0f);
    ps_shard_destroy(sh);

    /* SSP: clock 1 is summed while clock 0 is pending, so its check comes when it is applied:
     * the whole clock is refused, the values stay clock 0's */
    sh = shard_new(N, "add", "ssp:1", 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 1, 0, 0, N, NULL, big), 1);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 2, 1, 0, N, NULL, big), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 0), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 1), 1);
    ck_assert_uint_eq(ps_shard_done(sh), 2);
    ck_assert_uint_eq(ps_shard_refused(sh), 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(ps_shard_values(sh)[i], 3e38f);
    ck_assert_int_eq(ps_shard_contribute(sh, 0, 3, 2, 0, N, NULL, small), 1);
    ck_assert_int_eq(ps_shard_close(sh, 0, 2), 1);
    ck_assert_float_eq(ps_shard_values(sh)[1], 3e38f + 1.0f);
    ps_shard_destroy(sh);

    /* a node's aggregation: two workers' 2e38 would sum to inf: the second push is refused,
     * nothing changed (it may push again) */
    ps_sync_t bsp;
    ck_assert_int_eq(ps_sync_parse("bsp", &bsp, NULL, 0), 0);
    ps_agg_t *agg = ps_agg_create(N, &bsp, 2);
    ck_assert_ptr_nonnull(agg);
    ck_assert_int_eq(ps_agg_push(agg, 0, 1, 0, 0, N, NULL, two), 1);
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, 0, 0, N, NULL, two), -ERANGE);
    ck_assert_int_eq(ps_agg_push(agg, 1, 1, 0, 0, N, NULL, small), 1);
    ck_assert_int_eq(ps_agg_close(agg, 0, 0), 2);
    ck_assert_int_eq(ps_agg_close(agg, 1, 0), 1);
    ck_assert_float_eq(ps_agg_sum(agg, 0)[2], 2e38f + 2.0f);
    ps_agg_destroy(agg);
}
END_TEST

START_TEST(test_agg_random_interleavings)
{
    rng_t rng = {.state = 1818};
    for (int trial = 0; trial < 300; trial++) {
        uint64_t count = 1 + rng_below(&rng, MODEL_MAX_ELEMS);
        ps_agg_t *agg = agg_new(count, trial % 2 ? "bsp" : "ssp:3", AGG_MODEL_WORKERS);
        uint64_t empty = ps_agg_bytes(agg);
        model_entry_t log[MODEL_MAX_LOG];
        size_t nlog = 0;
        uint64_t clock[AGG_MODEL_WORKERS] = {0}, seq[AGG_MODEL_WORKERS] = {0};
        int released[AGG_MODEL_CLOCKS + 1] = {0};
        for (int step = 0;; step++) {
            int live[AGG_MODEL_WORKERS], nlive = 0;
            for (int w = 0; w < AGG_MODEL_WORKERS; w++)
                if (clock[w] < AGG_MODEL_CLOCKS)
                    live[nlive++] = w;
            if (nlive == 0)
                break;
            int w = live[rng_below(&rng, (uint32_t)nlive)];
            uint32_t move = rng_below(&rng, 10);
            if (move < 5 && nlog + MODEL_MAX_ELEMS <= MODEL_MAX_LOG) {
                float values[4];
                uint64_t keys[4], offset = 0, n;
                int use_keys = rng_below(&rng, 2);
                if (use_keys) {
                    n = 1 + rng_below(&rng, 4);
                    for (uint64_t i = 0; i < n; i++)
                        keys[i] = rng_below(&rng, (uint32_t)count);
                } else {
                    offset = rng_below(&rng, (uint32_t)count);
                    n = 1 + rng_below(&rng, (uint32_t)(count - offset));
                    n = n > 4 ? 4 : n;
                }
                for (uint64_t i = 0; i < n; i++)
                    values[i] = ((float)rng_below(&rng, 33) - 16.0f) / 4.0f;
                seq[w]++;
                ck_assert_int_eq(ps_agg_push(agg, (uint32_t)w, seq[w], clock[w], offset, n,
                                             use_keys ? keys : NULL, values), 1);
                if (rng_below(&rng, 4) == 0) /* the retry */
                    ck_assert_int_eq(ps_agg_push(agg, (uint32_t)w, seq[w], clock[w], offset, n,
                                                 use_keys ? keys : NULL, values), 0);
                for (uint64_t i = 0; i < n; i++)
                    log[nlog++] = (model_entry_t){
                        .clock = clock[w],
                        .element = (uint32_t)(use_keys ? keys[i] : offset + i),
                        .value = values[i]};
            } else if (move == 5) {
                /* bad: a clock not the worker's, a key out of range */
                const float one[] = {1};
                const uint64_t out[] = {count};
                ck_assert_int_eq(ps_agg_push(agg, (uint32_t)w, seq[w] + 1, clock[w] + 1, 0, 1,
                                             NULL, one), -EINVAL);
                ck_assert_int_eq(ps_agg_push(agg, (uint32_t)w, seq[w] + 1, clock[w], 0, 1, out,
                                             one), -EINVAL);
                ck_assert_int_eq(ps_agg_close(agg, (uint32_t)w, clock[w] + 1), -EINVAL);
            } else if (move == 6) {
                /* the daemon releases a random clock (nothing when not complete) */
                uint64_t c = rng_below(&rng, AGG_MODEL_CLOCKS);
                uint64_t least = clock[0];
                for (int o = 1; o < AGG_MODEL_WORKERS; o++)
                    least = clock[o] < least ? clock[o] : least;
                ps_agg_release(agg, c);
                if (c < least)
                    released[c] = 1;
            } else {
                int others_past = 1;
                for (int o = 0; o < AGG_MODEL_WORKERS; o++)
                    if (o != w && clock[o] <= clock[w])
                        others_past = 0;
                /* the window: BSP 1, ssp:3 4 clocks from the slowest; one more from the
                 * oldest sum not released */
                uint64_t window = trial % 2 ? 1 : 4, least = clock[0], oldest;
                for (int o = 1; o < AGG_MODEL_WORKERS; o++)
                    least = clock[o] < least ? clock[o] : least;
                for (oldest = 0; oldest < least && released[oldest]; oldest++)
                    ;
                if (clock[w] + 1 - least > window || clock[w] + 1 - oldest > window + 1) {
                    ck_assert_int_eq(ps_agg_close(agg, (uint32_t)w, clock[w]), -EAGAIN);
                    continue;
                }
                ck_assert_int_eq(ps_agg_close(agg, (uint32_t)w, clock[w]), others_past ? 1 : 2);
                clock[w]++;
                ck_assert_int_eq(ps_agg_close(agg, (uint32_t)w, clock[w] - 1), 0);
                ck_assert_uint_eq(ps_agg_clock_of(agg, (uint32_t)w), clock[w]);
            }
            agg_model_check(agg, log, nlog, clock, released, count, trial, step);
        }
        for (uint64_t c = 0; c < AGG_MODEL_CLOCKS; c++)
            ps_agg_release(agg, c);
        /* nothing open: back to the start but for one clock's buffers, kept for the next */
        uint64_t kept = count * sizeof(float) + (count + 7) / 8;
        ck_assert(ps_agg_bytes(agg) == empty || ps_agg_bytes(agg) == empty + kept);
        ps_agg_destroy(agg);
    }
}
END_TEST

static Suite *ps_core_suite(void)
{
    Suite *s = suite_create("ps_core");
    TCase *text = tcase_create("text");
    tcase_add_test(text, test_rule_parse_good);
    tcase_add_test(text, test_rule_parse_bad);
    tcase_add_test(text, test_rule_format);
    tcase_add_test(text, test_sync_parse_format);
    tcase_add_test(text, test_sync_min_done);
    tcase_add_test(text, test_name_valid);
    suite_add_tcase(s, text);

    TCase *placement = tcase_create("placement");
    tcase_add_test(placement, test_layout_cuts);
    tcase_add_test(placement, test_layout_bad);
    tcase_add_test(placement, test_ring_order_independent);
    tcase_add_test(placement, test_ring_reference);
    tcase_add_test(placement, test_ring_bad);
    tcase_add_test(placement, test_ring_balance);
    tcase_add_test(placement, test_ring_join);
    tcase_set_timeout(placement, 60);
    suite_add_tcase(s, placement);

    TCase *shard = tcase_create("shard");
    tcase_add_test(shard, test_shard_create_bad);
    tcase_add_test(shard, test_shard_bsp_every_source);
    tcase_add_test(shard, test_shard_bsp_clock_order);
    tcase_add_test(shard, test_shard_ssp_buffers);
    tcase_add_test(shard, test_shard_asp_at_once);
    tcase_add_test(shard, test_shard_duplicates);
    tcase_add_test(shard, test_shard_keys_and_ranges);
    tcase_add_test(shard, test_shard_bad_input);
    tcase_add_test(shard, test_shard_arithmetic);
    tcase_add_test(shard, test_shard_random_interleavings);
    tcase_set_timeout(shard, 60);
    suite_add_tcase(s, shard);

    TCase *agg = tcase_create("agg");
    tcase_add_test(agg, test_agg_create_bad);
    tcase_add_test(agg, test_agg_sums);
    tcase_add_test(agg, test_agg_whole_push_refused);
    tcase_add_test(shard, test_shard_whole_refused);
    tcase_add_test(shard, test_shard_kernels_exact);
    tcase_add_test(shard, test_shard_overflow_refused);
    tcase_add_test(agg, test_agg_ssp_fast_worker);
    tcase_add_test(agg, test_agg_duplicates_and_bad);
    tcase_add_test(agg, test_agg_written_keys);
    tcase_add_test(agg, test_agg_release);
    tcase_add_test(agg, test_agg_random_interleavings);
    tcase_add_test(agg, test_agg_window);
    tcase_add_test(shard, test_shard_window);
    suite_add_tcase(s, agg);
    return s;
}

int main(void)
{
    return check_run_suite(ps_core_suite());
}
