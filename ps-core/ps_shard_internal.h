/* A shard's insides, shared by ps_shard.c (contributions, closes) and ps_shard_state.c (its
 * whole state saved, loaded, compared, or made at a clock). Inside ps-core only. */
#ifndef SALUS_PS_CORE_PS_SHARD_INTERNAL_H
#define SALUS_PS_CORE_PS_SHARD_INTERNAL_H

#include "ps_core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct shard_source_s {
    uint64_t last_seq;
    int have_seq;        /* no contribution yet: every seq is new */
    uint64_t closed;     /* clocks 0 .. closed-1 closed */
} shard_source_t;

/* A clock's contributions, summed (BSP, SSP). */
typedef struct shard_pending_s {
    uint64_t clock;
    float *sum;          /* elems values; undefined until filled */
    uint8_t *touched;    /* assign only: a bit per element some contribution wrote */
    int filled;          /* sum holds the clock's sum (zeros and what came) */
} shard_pending_t;

struct ps_shard_s {
    uint64_t elems;
    ps_rule_t rule;
    ps_sync_t sync;
    uint32_t sources;
    float *values;
    uint64_t done;
    shard_source_t *source;
    shard_pending_t *pending; /* sorted by clock, all >= done */
    size_t npending, pending_cap;
    shard_pending_t spare;    /* an applied clock's buffers (sum NULL: none) */
    uint64_t refused;         /* clocks whose result was not finite, not applied */
};

static inline uint64_t ps_shard_touched_bytes(uint64_t elems)
{
    return (elems + 7) / 8;
}

#endif
