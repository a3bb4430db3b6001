/* The parameter-server core's unit tests' helpers (check_ps_core.c, check_ps_replicas.c): rules,
 * sync modes and shards made or the test fails, a small deterministic generator, and the
 * ring's hash as the tests pin it. */
#ifndef SALUS_PS_CORE_TEST_H
#define SALUS_PS_CORE_TEST_H

#include "ps_core.h"

#include <check.h>
#include <stdint.h>

static inline ps_rule_t rule_of(const char *text)
{
    ps_rule_t r;
    ck_assert_int_eq(ps_rule_parse(text, &r, NULL, 0), 0);
    return r;
}

static inline ps_sync_t sync_of(const char *text)
{
    ps_sync_t s;
    ck_assert_int_eq(ps_sync_parse(text, &s, NULL, 0), 0);
    return s;
}

static inline ps_shard_t *shard_new(uint64_t elems, const char *rule, const char *sync,
                                    uint32_t sources)
{
    ps_rule_t r = rule_of(rule);
    ps_sync_t s = sync_of(sync);
    ps_shard_t *shard = ps_shard_create(elems, &r, &s, sources);
    ck_assert_ptr_nonnull(shard);
    return shard;
}

/* A small deterministic generator (splitmix64): the same runs every time. */
typedef struct rng_s {
    uint64_t state;
} rng_t;

static inline uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint32_t rng_below(rng_t *r, uint32_t n)
{
    return (uint32_t)(rng_next(r) % n);
}

/* The ring's hash, part of the cluster's contract (every daemon must place a shard on the
 * same server), pinned by the tests' own copy: FNV-1a 64 of the text, then splitmix64's
 * finaliser. */
static inline uint64_t ref_hash(const char *text)
{
    uint64_t h = 14695981039346656037ull;
    for (const char *c = text; *c; c++) {
        h ^= (uint8_t)*c;
        h *= 1099511628211ull;
    }
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

#endif
