/* Unit tests for memory/allocator: table-driven cases plus a randomized property test
 * against a shadow model. */
#include "allocator.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- table-driven cases ------------------------------------------------------------- */

typedef enum {
    OP_END = 0,
    OP_RANGE_ADD,    /* a = base, b = size */
    OP_RANGE_REMOVE, /* a = base */
    OP_ALLOC,        /* a = size; expect = address on success */
    OP_FREE,         /* a = address; expect = rounded size on success */
    OP_LOOKUP,       /* a = address; expect = block base on success */
    OP_IN_USE,       /* expect = in_use_bytes */
    OP_HIGH_WATER,   /* expect = high_water_bytes */
    OP_RESET_HIGH_WATER,
    OP_LARGEST_FREE, /* expect = largest_free_bytes */
    OP_FREE_BLOCKS,  /* expect = number of free extents */
} op_t;

typedef struct {
    op_t op;
    uint64_t a, b;
    int rc;
    uint64_t expect;
} step_t;

typedef struct {
    const char *name;
    uint64_t alignment_bytes;
    step_t steps[24];
} alloc_case_t;

#define K 1024u
#define BASE 0x7f0000000000ull

static const alloc_case_t alloc_cases[] = {
    {"basic alloc and rounding", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_ALLOC, 100, 0, 0, BASE},
        {OP_ALLOC, 256, 0, 0, BASE + 256},
        {OP_ALLOC, 257, 0, 0, BASE + 512},
        {OP_IN_USE, 0, 0, 0, 1024},
        {OP_FREE, BASE + 512, 0, 0, 512},
        {OP_IN_USE, 0, 0, 0, 512},
        {OP_LARGEST_FREE, 0, 0, 0, 3 * K + 512},
    }},
    {"bad frees are errors, not crashes", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_ALLOC, 512, 0, 0, BASE},
        {OP_FREE, BASE + 256, 0, -EINVAL, 0},   /* interior pointer */
        {OP_FREE, BASE + 2048, 0, -EALREADY, 0}, /* free space */
        {OP_FREE, 0x1000, 0, -ENOENT, 0},        /* in no range */
        {OP_FREE, BASE, 0, 0, 512},
        {OP_FREE, BASE, 0, -EALREADY, 0},        /* double free */
        {OP_IN_USE, 0, 0, 0, 0},
    }},
    {"best fit picks the smallest hole", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_ALLOC, 1024, 0, 0, BASE},
        {OP_ALLOC, 256, 0, 0, BASE + 1024},
        {OP_ALLOC, 512, 0, 0, BASE + 1280},
        {OP_ALLOC, 256, 0, 0, BASE + 1792},
        {OP_FREE, BASE, 0, 0, 1024},
        {OP_FREE, BASE + 1280, 0, 0, 512},
        {OP_ALLOC, 500, 0, 0, BASE + 1280},  /* the 512 hole, not the 1024 one */
        {OP_ALLOC, 768, 0, 0, BASE},         /* the 1024 hole beats the 2048 tail */
        {OP_ALLOC, 2048, 0, 0, BASE + 2048},
        {OP_ALLOC, 256, 0, 0, BASE + 768},
        {OP_ALLOC, 1, 0, -ENOMEM, 0},
    }},
    {"free coalesces both neighbours", 0, {
        {OP_RANGE_ADD, BASE, 1 * K, 0, 0},
        {OP_ALLOC, 256, 0, 0, BASE},
        {OP_ALLOC, 256, 0, 0, BASE + 256},
        {OP_ALLOC, 256, 0, 0, BASE + 512},
        {OP_ALLOC, 256, 0, 0, BASE + 768},
        {OP_FREE, BASE, 0, 0, 256},
        {OP_FREE, BASE + 512, 0, 0, 256},
        {OP_FREE_BLOCKS, 0, 0, 0, 2},
        {OP_LARGEST_FREE, 0, 0, 0, 256},
        {OP_FREE, BASE + 256, 0, 0, 256},
        {OP_FREE_BLOCKS, 0, 0, 0, 1},
        {OP_LARGEST_FREE, 0, 0, 0, 768},
        {OP_FREE, BASE + 768, 0, 0, 256},
        {OP_LARGEST_FREE, 0, 0, 0, 1024},
        {OP_ALLOC, 1024, 0, 0, BASE},
    }},
    {"adjacent ranges never merge", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_RANGE_ADD, BASE + 4 * K, 4 * K, 0, 0},
        {OP_ALLOC, 8 * K, 0, -ENOMEM, 0},
        {OP_ALLOC, 4 * K, 0, 0, BASE},
        {OP_RANGE_REMOVE, BASE, 0, -EBUSY, 0},
        {OP_RANGE_REMOVE, BASE + 4 * K, 0, 0, 0},
        {OP_ALLOC, 256, 0, -ENOMEM, 0},
        {OP_FREE, BASE, 0, 0, 4 * K},
        {OP_RANGE_REMOVE, BASE, 0, 0, 0},
        {OP_FREE, BASE, 0, -ENOENT, 0},
        {OP_LARGEST_FREE, 0, 0, 0, 0},
    }},
    {"range arguments are checked", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_RANGE_ADD, BASE + 1 * K, 4 * K, -EEXIST, 0},
        {OP_RANGE_ADD, BASE - 1 * K, 2 * K, -EEXIST, 0},
        {OP_RANGE_ADD, BASE - 4 * K, 4 * K, 0, 0},
        {OP_RANGE_ADD, BASE + 8 * K + 1, 4 * K, -EINVAL, 0},
        {OP_RANGE_ADD, BASE + 8 * K, 100, -EINVAL, 0},
        {OP_RANGE_ADD, BASE + 8 * K, 0, -EINVAL, 0},
        {OP_RANGE_ADD, UINT64_MAX - 1023, 4 * K, -EINVAL, 0},
        {OP_RANGE_REMOVE, BASE + 256, 0, -ENOENT, 0},
        {OP_RANGE_REMOVE, BASE - 4 * K, 0, 0, 0},
        {OP_ALLOC, 0, 0, -EINVAL, 0},
        {OP_ALLOC, UINT64_MAX, 0, -EINVAL, 0},
        {OP_ALLOC, UINT64_MAX - 4 * K, 0, -ENOMEM, 0},
    }},
    {"high-water mark and reset", 0, {
        {OP_RANGE_ADD, BASE, 64 * K, 0, 0},
        {OP_ALLOC, 1000, 0, 0, BASE},
        {OP_ALLOC, 3000, 0, 0, BASE + 1024},
        {OP_HIGH_WATER, 0, 0, 0, 1024 + 3072},
        {OP_FREE, BASE + 1024, 0, 0, 3072},
        {OP_HIGH_WATER, 0, 0, 0, 1024 + 3072},
        {OP_RESET_HIGH_WATER, 0, 0, 0, 0},
        {OP_HIGH_WATER, 0, 0, 0, 1024},
        {OP_ALLOC, 256, 0, 0, BASE + 1024},
        {OP_HIGH_WATER, 0, 0, 0, 1280},
    }},
    {"lookup finds the block around a pointer", 0, {
        {OP_RANGE_ADD, BASE, 4 * K, 0, 0},
        {OP_ALLOC, 300, 0, 0, BASE},
        {OP_ALLOC, 300, 0, 0, BASE + 512},
        {OP_LOOKUP, BASE + 511, 0, 0, BASE},
        {OP_LOOKUP, BASE + 512, 0, 0, BASE + 512},
        {OP_LOOKUP, BASE + 1024, 0, -ENOENT, 0},
        {OP_LOOKUP, 42, 0, -ENOENT, 0},
    }},
    {"custom granularity", 2 * K * K, {
        {OP_RANGE_ADD, BASE, 8 * K * K, 0, 0},
        {OP_ALLOC, 1, 0, 0, BASE},
        {OP_ALLOC, 2 * K * K + 1, 0, 0, BASE + 2 * K * K},
        {OP_IN_USE, 0, 0, 0, 6 * K * K},
        {OP_RANGE_ADD, BASE + 8 * K * K, 4 * K, -EINVAL, 0},
    }},
};

START_TEST(test_alloc_case)
{
    const alloc_case_t *c = &alloc_cases[_i];
    allocator_t *a = allocator_create(c->alignment_bytes);
    ck_assert_ptr_nonnull(a);
    for (int s = 0; c->steps[s].op != OP_END; s++) {
        const step_t *st = &c->steps[s];
        allocator_stats_t stats;
        allocator_block_t block;
        uint64_t value = 0;
        int rc = 0;
        switch (st->op) {
        case OP_RANGE_ADD: rc = allocator_range_add(a, st->a, st->b); break;
        case OP_RANGE_REMOVE: rc = allocator_range_remove(a, st->a); break;
        case OP_ALLOC: rc = allocator_alloc(a, st->a, &value); break;
        case OP_FREE: rc = allocator_free(a, st->a, &value); break;
        case OP_LOOKUP:
            rc = allocator_lookup(a, st->a, &block);
            value = rc == 0 ? block.base : 0;
            break;
        case OP_RESET_HIGH_WATER: allocator_reset_high_water(a); break;
        case OP_IN_USE:
        case OP_HIGH_WATER:
        case OP_LARGEST_FREE:
        case OP_FREE_BLOCKS:
            allocator_stats(a, &stats);
            value = st->op == OP_IN_USE       ? stats.in_use_bytes
                    : st->op == OP_HIGH_WATER ? stats.high_water_bytes
                    : st->op == OP_LARGEST_FREE ? stats.largest_free_bytes
                                                : stats.free_blocks;
            break;
        case OP_END: break;
        }
        ck_assert_msg(rc == st->rc, "%s: step %d: rc %d, expected %d", c->name, s, rc, st->rc);
        if (rc == 0 && st->op != OP_RANGE_ADD && st->op != OP_RANGE_REMOVE &&
            st->op != OP_RESET_HIGH_WATER)
            ck_assert_msg(value == st->expect, "%s: step %d: got %#llx, expected %#llx", c->name,
                          s, (unsigned long long)value, (unsigned long long)st->expect);
        ck_assert_msg(allocator_validate(a) == 0, "%s: step %d: invariants broken", c->name, s);
    }
    allocator_destroy(a);
}
END_TEST

START_TEST(test_create_rejects_bad_alignment)
{
    ck_assert_ptr_null(allocator_create(3));
    ck_assert_ptr_null(allocator_create(768));
    allocator_t *a = allocator_create(0);
    ck_assert_uint_eq(allocator_alignment_bytes(a), ALLOCATOR_DEFAULT_ALIGNMENT_BYTES);
    allocator_destroy(a);
    allocator_destroy(NULL);
}
END_TEST

START_TEST(test_find_empty_range)
{
    allocator_t *a = allocator_create(0);
    uint64_t base = 0, size = 0, p = 0;
    ck_assert_int_eq(allocator_range_find_empty(a, &base, &size), -ENOENT);
    ck_assert_int_eq(allocator_range_add(a, BASE, 4 * K), 0);
    ck_assert_int_eq(allocator_alloc(a, 4 * K, &p), 0);
    ck_assert_int_eq(allocator_range_find_empty(a, &base, &size), -ENOENT);
    ck_assert_int_eq(allocator_range_add(a, BASE + 64 * K, 8 * K), 0);
    ck_assert_int_eq(allocator_range_find_empty(a, &base, &size), 0);
    ck_assert_uint_eq(base, BASE + 64 * K);
    ck_assert_uint_eq(size, 8 * K);
    allocator_destroy(a); /* with a live block: destroy frees the records */
}
END_TEST

/* ---- randomized property test ------------------------------------------------------- */

/* Check records every passing ck_assert (a write per call); in loops of millions of checks,
 * test the condition first and let Check report only failures. */
#define REQUIRE_MSG(cond, ...)                                                                 \
    do {                                                                                       \
        if (!(cond))                                                                           \
            ck_abort_msg(__VA_ARGS__);                                                         \
    } while (0)
#define REQUIRE(cond) REQUIRE_MSG(cond, "%s:%d: %s", __FILE__, __LINE__, #cond)
#define REQUIRE_EQ(a, b)                                                                       \
    REQUIRE_MSG((uint64_t)(a) == (uint64_t)(b), "%s:%d: %s == %llu, expected %s == %llu",      \
                __FILE__, __LINE__, #a, (unsigned long long)(a), #b, (unsigned long long)(b))

typedef struct {
    uint64_t base, size_bytes, requested_bytes;
} shadow_block_t;

typedef struct {
    uint64_t base, size_bytes;
    bool present;
} shadow_range_t;

#define MAX_RANGES 6
#define MAX_LIVE 20000

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cmp_block(const void *x, const void *y)
{
    const shadow_block_t *a = x, *b = y;
    return a->base < b->base ? -1 : a->base > b->base;
}

/* Largest free extent, computed from the shadow model alone. */
static uint64_t shadow_largest_free(const shadow_range_t *ranges, shadow_block_t *live, size_t n)
{
    uint64_t largest = 0;
    qsort(live, n, sizeof(*live), cmp_block);
    for (int r = 0; r < MAX_RANGES; r++) {
        if (!ranges[r].present)
            continue;
        uint64_t cursor = ranges[r].base, end = ranges[r].base + ranges[r].size_bytes;
        for (size_t i = 0; i < n; i++) {
            if (live[i].base < ranges[r].base || live[i].base >= end)
                continue;
            if (live[i].base - cursor > largest)
                largest = live[i].base - cursor;
            cursor = live[i].base + live[i].size_bytes;
        }
        if (end - cursor > largest)
            largest = end - cursor;
    }
    return largest;
}

static uint64_t random_size(void)
{
    uint64_t pick = rng_next() % 100;
    if (pick < 70)
        return 1 + rng_next() % (16 * K);
    if (pick < 95)
        return 1 + rng_next() % (256 * K);
    return 1 + rng_next() % (4 * K * K);
}

static void property_run(uint64_t seed, uint64_t alignment_bytes, int steps)
{
    allocator_t *a = allocator_create(alignment_bytes);
    shadow_range_t ranges[MAX_RANGES] = {{0}};
    shadow_block_t *live = calloc(MAX_LIVE, sizeof(*live));
    size_t n_live = 0;
    uint64_t in_use = 0, high_water = 0, mask = alignment_bytes - 1, max_live_seen = 0;
    rng_state = seed;
    REQUIRE((a) != NULL);
    REQUIRE((live) != NULL);

    for (int r = 0; r < MAX_RANGES; r++) {
        /* Ranges 16 MiB apart, sizes 2..16 MiB; the last two start absent. */
        ranges[r].base = BASE + (uint64_t)r * 16 * K * K;
        ranges[r].size_bytes = (2 + rng_next() % 15) * K * K;
        if (r < MAX_RANGES - 2) {
            REQUIRE_EQ(allocator_range_add(a, ranges[r].base, ranges[r].size_bytes), 0);
            ranges[r].present = true;
        }
    }

    for (int step = 0; step < steps; step++) {
        uint64_t op = rng_next() % 100;
        /* Grow towards thousands of live blocks in the first half, then drain. */
        bool grow = step < steps / 2 ? op < 62 : op < 40;
        if (op >= 97) {
            int r = (int)(rng_next() % MAX_RANGES);
            if (!ranges[r].present) {
                REQUIRE_EQ(allocator_range_add(a, ranges[r].base, ranges[r].size_bytes), 0);
                ranges[r].present = true;
            } else {
                bool busy = false;
                for (size_t i = 0; i < n_live && !busy; i++)
                    busy = live[i].base >= ranges[r].base &&
                           live[i].base < ranges[r].base + ranges[r].size_bytes;
                int rc = allocator_range_remove(a, ranges[r].base);
                REQUIRE_EQ(rc, busy ? -EBUSY : 0);
                if (!busy)
                    ranges[r].present = false;
            }
        } else if (grow || n_live == 0) {
            uint64_t size = random_size(), address = 0;
            uint64_t rounded = (size + mask) & ~mask;
            int rc = allocator_alloc(a, size, &address);
            if (rc == -ENOMEM) {
                /* Best fit fails only when no extent is large enough. */
                REQUIRE(shadow_largest_free(ranges, live, n_live) < rounded);
                continue;
            }
            REQUIRE_EQ(rc, 0);
            REQUIRE_EQ(address & mask, 0);
            bool inside = false;
            for (int r = 0; r < MAX_RANGES; r++)
                inside |= ranges[r].present && address >= ranges[r].base &&
                          address + rounded <= ranges[r].base + ranges[r].size_bytes;
            REQUIRE_MSG(inside, "block %#llx outside every range", (unsigned long long)address);
            for (size_t i = 0; i < n_live; i++)
                REQUIRE_MSG(address + rounded <= live[i].base ||
                                live[i].base + live[i].size_bytes <= address,
                            "overlap at step %d", step);
            REQUIRE(n_live < MAX_LIVE);
            live[n_live++] = (shadow_block_t){address, rounded, size};
            in_use += rounded;
            if (in_use > high_water)
                high_water = in_use;
        } else {
            size_t i = rng_next() % n_live;
            uint64_t freed = 0;
            allocator_block_t block;
            uint64_t inner = live[i].base + rng_next() % live[i].requested_bytes;
            REQUIRE_EQ(allocator_lookup(a, inner, &block), 0);
            REQUIRE_EQ(block.base, live[i].base);
            REQUIRE_EQ(block.requested_bytes, live[i].requested_bytes);
            REQUIRE_EQ(allocator_free(a, live[i].base, &freed), 0);
            REQUIRE_EQ(freed, live[i].size_bytes);
            REQUIRE_EQ(allocator_free(a, live[i].base, NULL), -EALREADY);
            in_use -= live[i].size_bytes;
            live[i] = live[--n_live];
        }
        if (n_live > max_live_seen)
            max_live_seen = n_live;
        if (rng_next() % 500 == 0) {
            allocator_reset_high_water(a);
            high_water = in_use;
        }

        allocator_stats_t stats;
        allocator_stats(a, &stats);
        REQUIRE_EQ(stats.in_use_bytes, in_use);
        REQUIRE_EQ(stats.high_water_bytes, high_water);
        REQUIRE_EQ(stats.live_blocks, n_live);
        REQUIRE_EQ(stats.free_bytes, stats.total_bytes - in_use);
        if (step % 256 == 0) {
            REQUIRE_EQ(allocator_validate(a), 0);
            REQUIRE_EQ(stats.largest_free_bytes, shadow_largest_free(ranges, live, n_live));
        }
    }
    REQUIRE(max_live_seen >= 1000); /* the run did reach thousands of blocks */

    /* Free everything: every present range must come back as one extent. */
    while (n_live > 0)
        REQUIRE_EQ(allocator_free(a, live[--n_live].base, NULL), 0);
    REQUIRE_EQ(allocator_validate(a), 0);
    for (int r = 0; r < MAX_RANGES; r++)
        if (ranges[r].present)
            REQUIRE_EQ(allocator_range_remove(a, ranges[r].base), 0);
    allocator_stats_t stats;
    allocator_stats(a, &stats);
    REQUIRE_EQ(stats.total_bytes, 0);
    REQUIRE_EQ(stats.free_blocks, 0);
    free(live);
    allocator_destroy(a);
}

START_TEST(test_property_random)
{
    static const uint64_t seeds[] = {1, 0xdeadbeef, 0x123456789abcdefull, 77};
    property_run(seeds[_i], _i % 2 ? 4096 : ALLOCATOR_DEFAULT_ALIGNMENT_BYTES, 30000);
}
END_TEST

static Suite *allocator_suite(void)
{
    Suite *s = suite_create("allocator");
    TCase *tc = tcase_create("cases");
    tcase_add_loop_test(tc, test_alloc_case, 0, (int)(sizeof(alloc_cases) / sizeof(alloc_cases[0])));
    tcase_add_test(tc, test_create_rejects_bad_alignment);
    tcase_add_test(tc, test_find_empty_range);
    suite_add_tcase(s, tc);
    TCase *prop = tcase_create("property");
    tcase_set_timeout(prop, 120);
    tcase_add_loop_test(prop, test_property_random, 0, 4);
    suite_add_tcase(s, prop);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(allocator_suite());
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists every test */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
