/* What ps_shard.c and ps_agg.c share: checking a contribution's shape (a range or a key set
 * within `limit` elements, finite values) and applying or summing it. Inside ps-core only. */
#ifndef SALUS_PS_CORE_PS_CORE_INTERNAL_H
#define SALUS_PS_CORE_PS_CORE_INTERNAL_H

#include "ps_core.h"

#include <math.h>
#include <stdint.h>

/* 1 when the contribution fits: keys == NULL: [offset, offset + n) within limit; else every
 * keys[i] < limit (offset ignored); values non-NULL when n > 0 and all finite. 0 otherwise. */
static inline int ps_span_valid(uint64_t limit, uint64_t offset, uint64_t n,
                                const uint64_t *keys, const float *values)
{
    if (n > 0 && values == NULL)
        return 0;
    if (keys == NULL) {
        if (offset > limit || n > limit - offset)
            return 0;
    } else {
        for (uint64_t i = 0; i < n; i++)
            if (keys[i] >= limit)
                return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return 0;
    return 1;
}

/* sum[offset + i] += values[i], or sum[keys[i]] += values[i] (after ps_span_valid). When
 * touched is non-NULL, the bit of every element written is set. */
static inline void ps_span_add(float *sum, uint8_t *touched, uint64_t offset, uint64_t n,
                               const uint64_t *keys, const float *values)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = keys ? keys[i] : offset + i;
        sum[at] += values[i];
        if (touched)
            touched[at >> 3] |= (uint8_t)(1u << (at & 7));
    }
}

/* The rule applied to one element: add, assign or sgd with the clock's (or the
 * contribution's) value v. */
static inline float ps_rule_apply(const ps_rule_t *rule, float current, float v)
{
    switch (rule->kind) {
    case PS_RULE_ADD:
        return current + v;
    case PS_RULE_ASSIGN:
        return v;
    case PS_RULE_SGD:
        return current - rule->lr * v;
    }
    return current;
}

/* 1 when rule / sync hold values the parsers could have produced. */
int ps_rule_valid(const ps_rule_t *rule);
int ps_sync_valid(const ps_sync_t *sync);

#endif
