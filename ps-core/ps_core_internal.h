/* What ps_shard.c and ps_agg.c share: checking a contribution's shape (a range or a key set
 * within `limit` elements, finite values) and applying or summing it. Inside ps-core only. */
#ifndef SALUS_PS_CORE_PS_CORE_INTERNAL_H
#define SALUS_PS_CORE_PS_CORE_INTERNAL_H

#include "ps_core.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The element loops of the data path, in blocks of 8 that the compiler makes vector code
 * (no per-element branch). A float is finite when its exponent bits are not all ones. */
#define PS_VEC_BLOCK 8

static inline uint32_t ps_float_bad(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return (bits & 0x7f800000u) == 0x7f800000u;
}

/* 1 when every one of the n values is finite. */
static inline int ps_vec_finite(const float *values, uint64_t n)
{
    uint64_t i = 0;
    for (; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK) {
        uint32_t bad = 0;
        for (int k = 0; k < PS_VEC_BLOCK; k++)
            bad |= ps_float_bad(values[i + k]);
        if (bad)
            return 0;
    }
    for (; i < n; i++)
        if (ps_float_bad(values[i]))
            return 0;
    return 1;
}

/* dst[i] = src[i] for i < n, each value read once: 1 when every value was finite (0: dst
 * holds a partial copy, for the caller to drop). */
static inline int ps_vec_copy_finite(float *restrict dst, const float *restrict src, uint64_t n)
{
    uint64_t i = 0;
    for (; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK) {
        uint32_t bad = 0;
        for (int k = 0; k < PS_VEC_BLOCK; k++) {
            float v = src[i + k];
            dst[i + k] = v;
            bad |= ps_float_bad(v);
        }
        if (bad)
            return 0;
    }
    for (; i < n; i++) {
        dst[i] = src[i];
        if (ps_float_bad(dst[i]))
            return 0;
    }
    return 1;
}

/* dst[i] += src[i] for i < n. */
static inline void ps_vec_add(float *restrict dst, const float *restrict src, uint64_t n)
{
    uint64_t i = 0;
    for (; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK)
        for (int k = 0; k < PS_VEC_BLOCK; k++)
            dst[i + k] += src[i + k];
    for (; i < n; i++)
        dst[i] += src[i];
}

/* Sets the bits [from, from + n) of a bitmap: a byte at a time in the middle. */
static inline void ps_bits_set(uint8_t *bits, uint64_t from, uint64_t n)
{
    uint64_t end = from + n;
    for (; from < end && (from & 7); from++)
        bits[from >> 3] |= (uint8_t)(1u << (from & 7));
    if (end - from >= 8) {
        memset(bits + (from >> 3), 0xff, (end - from) >> 3);
        from += (end - from) & ~(uint64_t)7;
    }
    for (; from < end; from++)
        bits[from >> 3] |= (uint8_t)(1u << (from & 7));
}

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
    return ps_vec_finite(values, n);
}

/* sum[offset + i] += values[i], or sum[keys[i]] += values[i] (after ps_span_valid). When
 * touched is non-NULL, the bit of every element written is set. */
static inline void ps_span_add(float *sum, uint8_t *touched, uint64_t offset, uint64_t n,
                               const uint64_t *keys, const float *values)
{
    if (keys == NULL) {
        ps_vec_add(sum + offset, values, n);
        if (touched && n > 0)
            ps_bits_set(touched, offset, n);
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = keys[i];
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

/* The rule of kind `kind` (a constant where the kernels below are inlined: the switch folds
 * away) applied to one element; the same expressions as ps_rule_apply, so the same results. */
static inline __attribute__((always_inline)) float ps_rule_apply_k(int kind, float lr,
                                                                   float current, float v)
{
    return kind == PS_RULE_ASSIGN ? v : kind == PS_RULE_SGD ? current - lr * v : current + v;
}

/* dst[i] = src[i] for i < n, in one pass with two checks: bit 0 of the result set when a
 * value is not finite, bit 1 when the rule (kind, lr) applied to base[i] (base not NULL)
 * and the value is not (each value read once). */
static inline __attribute__((always_inline)) uint32_t ps_vec_copy_rule_bad_k(
    int kind, float lr, float *restrict dst, const float *restrict src,
    const float *restrict base, uint64_t n)
{
    uint32_t bad = 0, rbad = 0;
    uint64_t i = 0;
    for (; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK) {
        uint32_t b = 0, r = 0;
        for (int k = 0; k < PS_VEC_BLOCK; k++) {
            float v = src[i + k];
            dst[i + k] = v;
            b |= ps_float_bad(v);
            r |= ps_float_bad(ps_rule_apply_k(kind, lr, base[i + k], v));
        }
        bad |= b;
        rbad |= r;
    }
    for (; i < n; i++) {
        dst[i] = src[i];
        bad |= ps_float_bad(src[i]);
        rbad |= ps_float_bad(ps_rule_apply_k(kind, lr, base[i], src[i]));
    }
    return (bad ? 1u : 0u) | (rbad ? 2u : 0u);
}

/* ps_vec_copy_finite and ps_vec_rule_bad of the copy in one pass (base not NULL): bit 0 a
 * value is not finite, bit 1 the rule's result on base is not. */
static inline uint32_t ps_vec_copy_rule_bad(const ps_rule_t *rule, float *restrict dst,
                                            const float *restrict src,
                                            const float *restrict base, uint64_t n)
{
    switch (rule->kind) {
    case PS_RULE_ADD:
        return ps_vec_copy_rule_bad_k(PS_RULE_ADD, 0.0f, dst, src, base, n);
    case PS_RULE_ASSIGN:
        return ps_vec_copy_rule_bad_k(PS_RULE_ASSIGN, 0.0f, dst, src, base, n);
    case PS_RULE_SGD:
        return ps_vec_copy_rule_bad_k(PS_RULE_SGD, rule->lr, dst, src, base, n);
    }
    return ps_vec_copy_finite(dst, src, n) ? 0u : 1u;
}

/* Sets the bit of every element of a span ([offset, offset + n), or keys[]). */
static inline void ps_span_mark(uint8_t *touched, uint64_t offset, uint64_t n,
                                const uint64_t *keys)
{
    if (keys == NULL) {
        if (n > 0)
            ps_bits_set(touched, offset, n);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        touched[keys[i] >> 3] |= (uint8_t)(1u << (keys[i] & 7));
}

/* x[at] = x[at] + v (rule NULL) or the rule applied to x[at] and v, for the elements of a span
 * (after ps_span_valid; a key given twice is updated twice, in order), provided every result
 * is finite and, when base is not NULL, so is base_rule applied to base[at] and the result
 * (what the result will make of the values it is applied to). 1: done; 0: a result would not
 * be finite, x as it was; -ENOMEM (a key set's undo copy), x as it was. */
int ps_span_update_finite(float *x, const float *base, const ps_rule_t *base_rule,
                          const ps_rule_t *rule, uint64_t offset, uint64_t n,
                          const uint64_t *keys, const float *values);

/* 1 when rule / sync hold values the parsers could have produced. */
int ps_rule_valid(const ps_rule_t *rule);
int ps_sync_valid(const ps_sync_t *sync);

#endif
