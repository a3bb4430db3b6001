/* A shard's whole state as bytes (to catch a standby up, or move a shard to another server),
 * a shard made at a clock (restored from a checkpoint), and two shards compared.
 *
 * The format, little-endian, version 1:
 *     header   "PSSHARD\0", u32 version, u32 rule kind, u32 rule lr (float bits),
 *              u32 sync kind, u32 staleness, u32 sources, u64 elems, u64 done,
 *              u32 pending clocks, u32 zero                                     (56 bytes)
 *     sources  per source: u64 last seq, u64 closed clocks, u32 flags (bit 0: a seq seen)
 *     values   elems float bits (u32 each)
 *     pending  per pending clock, in clock order: u64 clock, elems float bits of its sum,
 *              then (assign only) its written bits, (elems + 7) / 8 bytes
 *     checksum u64 FNV-1a (64 bits) of every byte before it
 * The length follows from the header, so a truncated state is refused before anything else;
 * the checksum catches a changed byte; every field is then checked against what a live shard
 * can hold (done = the least closed clock, pending clocks after done and within the window,
 * finite values), so that a state that passes is one ps_shard_contribute / ps_shard_close
 * could have made. */
#include "ps_core.h"
#include "ps_core_internal.h"
#include "ps_shard_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC "PSSHARD"   /* 8 bytes with its NUL */
#define STATE_VERSION 1u
#define STATE_HEADER_BYTES 56u
#define STATE_SOURCE_BYTES 20u
#define STATE_CHECKSUM_BYTES 8u
#define STATE_FLAG_SEQ 1u
/* Clocks in a state (done, closed, pending) stay at or below this, so that no later close or
 * window sum can wrap. */
#define STATE_CLOCK_MAX ((uint64_t)INT64_MAX)

/* ---- little-endian bytes -------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t float_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return bits;
}

static float bits_float(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static void put_floats(uint8_t *p, const float *values, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        put_u32(p + 4 * i, float_bits(values[i]));
}

/* Reads n floats into out: 1 when all are finite. */
static int get_floats(const uint8_t *p, float *out, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = bits_float(get_u32(p + 4 * i));
    return ps_vec_finite(out, n);
}

uint64_t ps_fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* ---- sizes ------------------------------------------------------------------------------ */

static uint64_t written_bits_bytes(uint64_t elems, const ps_rule_t *rule)
{
    return rule->kind == PS_RULE_ASSIGN ? ps_shard_touched_bytes(elems) : 0;
}

/* The bytes of a state with these counts (elems <= PS_SHARD_MAX_ELEMS, sources <=
 * PS_MAX_SOURCES and npending <= 2^32: far from any wrap). */
static uint64_t state_bytes(uint64_t elems, const ps_rule_t *rule, uint32_t sources,
                            uint64_t npending)
{
    uint64_t per_pending = 8 + 4 * elems + written_bits_bytes(elems, rule);
    return STATE_HEADER_BYTES + (uint64_t)sources * STATE_SOURCE_BYTES + 4 * elems +
           npending * per_pending + STATE_CHECKSUM_BYTES;
}

size_t ps_shard_state_size(const ps_shard_t *shard)
{
    if (shard == NULL)
        return 0;
    return (size_t)state_bytes(shard->elems, &shard->rule, shard->sources, shard->npending);
}

/* ---- save ------------------------------------------------------------------------------- */

int64_t ps_shard_save(const ps_shard_t *shard, void *buf, size_t size)
{
    if (shard == NULL || (buf == NULL && size > 0))
        return -EINVAL;
    uint64_t need = ps_shard_state_size(shard);
    if (size < need)
        return -ENOSPC;
    uint8_t *p = buf, *at = p;
    memcpy(at, STATE_MAGIC, 8);
    put_u32(at + 8, STATE_VERSION);
    put_u32(at + 12, (uint32_t)shard->rule.kind);
    put_u32(at + 16, shard->rule.kind == PS_RULE_SGD ? float_bits(shard->rule.lr) : 0);
    put_u32(at + 20, (uint32_t)shard->sync.kind);
    put_u32(at + 24, shard->sync.kind == PS_SYNC_SSP ? shard->sync.staleness : 0);
    put_u32(at + 28, shard->sources);
    put_u64(at + 32, shard->elems);
    put_u64(at + 40, shard->done);
    put_u32(at + 48, (uint32_t)shard->npending);
    put_u32(at + 52, 0);
    at += STATE_HEADER_BYTES;
    for (uint32_t s = 0; s < shard->sources; s++, at += STATE_SOURCE_BYTES) {
        const shard_source_t *src = &shard->source[s];
        put_u64(at, src->have_seq ? src->last_seq : 0);
        put_u64(at + 8, src->closed);
        put_u32(at + 16, src->have_seq ? STATE_FLAG_SEQ : 0);
    }
    put_floats(at, shard->values, shard->elems);
    at += 4 * shard->elems;
    uint64_t bits = written_bits_bytes(shard->elems, &shard->rule);
    for (size_t i = 0; i < shard->npending; i++) {
        const shard_pending_t *pend = &shard->pending[i];
        put_u64(at, pend->clock);
        at += 8;
        if (pend->filled)
            put_floats(at, pend->sum, shard->elems);
        else
            memset(at, 0, 4 * shard->elems); /* not filled: its sum is zeros so far */
        at += 4 * shard->elems;
        if (bits) {
            memcpy(at, pend->touched, bits);
            at += bits;
        }
    }
    put_u64(at, ps_fnv1a(p, (size_t)(at - p)));
    at += STATE_CHECKSUM_BYTES;
    return (int64_t)(at - p);
}

/* ---- load ------------------------------------------------------------------------------- */

static void say(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *err, size_t err_size, const char *fmt, ...)
{
    if (err == NULL || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* The header against the shape the caller expects: 0, or -1 with err set. */
static int check_header(const uint8_t *p, uint64_t elems, const ps_rule_t *rule,
                        const ps_sync_t *sync, uint32_t sources, char *err, size_t err_size)
{
    if (memcmp(p, STATE_MAGIC, 8) != 0) {
        say(err, err_size, "not a shard state (bad magic)");
        return -1;
    }
    uint32_t version = get_u32(p + 8);
    if (version != STATE_VERSION) {
        say(err, err_size, "shard state version %u, this build reads %u", version,
            STATE_VERSION);
        return -1;
    }
    uint32_t want_lr = rule->kind == PS_RULE_SGD ? float_bits(rule->lr) : 0;
    uint32_t want_staleness = sync->kind == PS_SYNC_SSP ? sync->staleness : 0;
    if (get_u32(p + 12) != (uint32_t)rule->kind || get_u32(p + 16) != want_lr) {
        say(err, err_size, "shard state of another rule");
        return -1;
    }
    if (get_u32(p + 20) != (uint32_t)sync->kind || get_u32(p + 24) != want_staleness) {
        say(err, err_size, "shard state of another sync mode");
        return -1;
    }
    if (get_u32(p + 28) != sources) {
        say(err, err_size, "shard state of %u sources, want %u", get_u32(p + 28), sources);
        return -1;
    }
    if (get_u64(p + 32) != elems) {
        say(err, err_size, "shard state of %llu elements, want %llu",
            (unsigned long long)get_u64(p + 32), (unsigned long long)elems);
        return -1;
    }
    if (get_u32(p + 52) != 0) {
        say(err, err_size, "shard state header: reserved field not zero");
        return -1;
    }
    return 0;
}

/* The sources' records into shard (done already set): 0, or -1 with err set. */
static int load_sources(ps_shard_t *shard, const uint8_t *at, char *err, size_t err_size)
{
    uint64_t least = UINT64_MAX;
    for (uint32_t s = 0; s < shard->sources; s++, at += STATE_SOURCE_BYTES) {
        uint64_t seq = get_u64(at), closed = get_u64(at + 8);
        uint32_t flags = get_u32(at + 16);
        if (flags & ~STATE_FLAG_SEQ || (!(flags & STATE_FLAG_SEQ) && seq != 0)) {
            say(err, err_size, "shard state: source %u has a bad seq record", s);
            return -1;
        }
        if (closed > STATE_CLOCK_MAX || closed < shard->done) {
            say(err, err_size, "shard state: source %u closed %llu clocks, done is %llu", s,
                (unsigned long long)closed, (unsigned long long)shard->done);
            return -1;
        }
        shard->source[s] = (shard_source_t){
            .last_seq = seq, .have_seq = (flags & STATE_FLAG_SEQ) != 0, .closed = closed};
        least = closed < least ? closed : least;
    }
    if (least != shard->done) { /* done counts exactly the clocks every source closed */
        say(err, err_size, "shard state: done %llu, but every source closed %llu",
            (unsigned long long)shard->done, (unsigned long long)least);
        return -1;
    }
    return 0;
}

/* The pending clocks into shard: 0, or -1 with err set (the entries made so far are the
 * shard's, freed with it). */
static int load_pending(ps_shard_t *shard, const uint8_t *at, size_t npending, char *err,
                        size_t err_size)
{
    if (npending == 0)
        return 0;
    shard->pending = calloc(npending, sizeof(*shard->pending));
    if (shard->pending == NULL) {
        say(err, err_size, "no memory");
        return -1;
    }
    shard->pending_cap = npending;
    uint64_t elems = shard->elems, bits = written_bits_bytes(elems, &shard->rule);
    uint64_t window = ps_sync_window(&shard->sync);
    for (size_t i = 0; i < npending; i++) {
        uint64_t clock = get_u64(at);
        at += 8;
        if (clock < shard->done || clock - shard->done > window ||
            (i > 0 && clock <= shard->pending[i - 1].clock)) {
            say(err, err_size, "shard state: pending clock %llu out of order or range",
                (unsigned long long)clock);
            return -1;
        }
        shard_pending_t *pend = &shard->pending[i];
        pend->clock = clock;
        pend->sum = malloc(elems * sizeof(float));
        pend->touched = bits ? malloc(bits) : NULL;
        shard->npending++;
        if (pend->sum == NULL || (bits && pend->touched == NULL)) {
            say(err, err_size, "no memory");
            return -1;
        }
        if (!get_floats(at, pend->sum, elems)) {
            say(err, err_size, "shard state: a non-finite sum of clock %llu",
                (unsigned long long)clock);
            return -1;
        }
        pend->filled = 1;
        at += 4 * elems;
        if (bits) {
            memcpy(pend->touched, at, bits);
            if (elems % 8 && pend->touched[bits - 1] >> (elems % 8)) {
                say(err, err_size, "shard state: written bits beyond the shard");
                return -1;
            }
            at += bits;
        }
    }
    return 0;
}

ps_shard_t *ps_shard_load(const void *buf, size_t size, uint64_t elems, const ps_rule_t *rule,
                          const ps_sync_t *sync, uint32_t sources, char *err, size_t err_size)
{
    ps_shard_t *shard = ps_shard_create(elems, rule, sync, sources);
    if (shard == NULL) {
        say(err, err_size, "bad shard shape, or no memory");
        return NULL;
    }
    const uint8_t *p = buf;
    if (p == NULL || size < STATE_HEADER_BYTES + STATE_CHECKSUM_BYTES) {
        say(err, err_size, "shard state truncated (%zu bytes)", size);
        goto fail;
    }
    if (check_header(p, elems, rule, sync, sources, err, err_size) < 0)
        goto fail;
    uint64_t npending = get_u32(p + 48);
    uint64_t most = sync->kind == PS_SYNC_ASP ? 0 : ps_sync_window(sync) + 1;
    if (npending > most) {
        say(err, err_size, "shard state: %llu pending clocks, at most %llu",
            (unsigned long long)npending, (unsigned long long)most);
        goto fail;
    }
    uint64_t want = state_bytes(elems, rule, sources, npending);
    if (size != want) {
        say(err, err_size, "shard state of %zu bytes, its header says %llu", size,
            (unsigned long long)want);
        goto fail;
    }
    if (get_u64(p + want - STATE_CHECKSUM_BYTES) != ps_fnv1a(p, want - STATE_CHECKSUM_BYTES)) {
        say(err, err_size, "shard state checksum mismatch");
        goto fail;
    }
    shard->done = get_u64(p + 40);
    if (shard->done > STATE_CLOCK_MAX) {
        say(err, err_size, "shard state: done %llu out of range",
            (unsigned long long)shard->done);
        goto fail;
    }
    const uint8_t *at = p + STATE_HEADER_BYTES;
    if (load_sources(shard, at, err, err_size) < 0)
        goto fail;
    at += (uint64_t)sources * STATE_SOURCE_BYTES;
    if (!get_floats(at, shard->values, elems)) {
        say(err, err_size, "shard state: a non-finite value");
        goto fail;
    }
    at += 4 * elems;
    if (load_pending(shard, at, (size_t)npending, err, err_size) < 0)
        goto fail;
    return shard;

fail:
    ps_shard_destroy(shard);
    return NULL;
}

/* ---- made at a clock, compared ------------------------------------------------------------ */

ps_shard_t *ps_shard_create_at(uint64_t elems, const ps_rule_t *rule, const ps_sync_t *sync,
                               uint32_t sources, uint64_t done, const float *values)
{
    if (values == NULL || done > STATE_CLOCK_MAX)
        return NULL;
    ps_shard_t *shard = ps_shard_create(elems, rule, sync, sources);
    if (shard == NULL)
        return NULL;
    if (!ps_vec_copy_finite(shard->values, values, elems)) {
        ps_shard_destroy(shard);
        return NULL;
    }
    shard->done = done;
    for (uint32_t s = 0; s < sources; s++)
        shard->source[s].closed = done;
    return shard;
}

/* 1 when pending entries a and b hold the same clock, sum and written bits. */
static int pending_same(const ps_shard_t *shard, const shard_pending_t *a,
                        const shard_pending_t *b)
{
    if (a->clock != b->clock)
        return 0;
    for (uint64_t i = 0; i < shard->elems; i++) {
        uint32_t x = a->filled ? float_bits(a->sum[i]) : 0;
        uint32_t y = b->filled ? float_bits(b->sum[i]) : 0;
        if (x != y)
            return 0;
    }
    uint64_t bits = written_bits_bytes(shard->elems, &shard->rule);
    return bits == 0 || memcmp(a->touched, b->touched, bits) == 0;
}

int ps_shard_same(const ps_shard_t *a, const ps_shard_t *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (a->elems != b->elems || a->sources != b->sources || a->rule.kind != b->rule.kind ||
        (a->rule.kind == PS_RULE_SGD && float_bits(a->rule.lr) != float_bits(b->rule.lr)) ||
        a->sync.kind != b->sync.kind ||
        (a->sync.kind == PS_SYNC_SSP && a->sync.staleness != b->sync.staleness) ||
        a->done != b->done || a->npending != b->npending)
        return 0;
    for (uint32_t s = 0; s < a->sources; s++) {
        const shard_source_t *x = &a->source[s], *y = &b->source[s];
        if (x->have_seq != y->have_seq || x->closed != y->closed ||
            (x->have_seq && x->last_seq != y->last_seq))
            return 0;
    }
    /* bit for bit: replicas that applied the same contributions in the same order agree */
    if (memcmp(a->values, b->values, a->elems * sizeof(float)) != 0)
        return 0;
    for (size_t i = 0; i < a->npending; i++)
        if (!pending_same(a, &a->pending[i], &b->pending[i]))
            return 0;
    return 1;
}
