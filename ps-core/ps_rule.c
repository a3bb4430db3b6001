/* Update rules, sync modes and table names: parsing and canonical text. */
#include "ps_core.h"
#include "ps_core_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_size, const char *fmt, ...)
{
    if (err && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* A decimal float "1", "0.05", "5e-3", ".5" (no sign but an exponent's, no spaces, no hex,
 * no inf/nan); 0 and *out set, or -EINVAL. strtod reads the C locale's '.' in salusd (which
 * never calls setlocale); errno is left as it was. */
static int parse_decimal_float(const char *text, float *out)
{
    if (*text == '\0' || strspn(text, "0123456789.eE+-") != strlen(text))
        return -EINVAL;
    if (*text == '+' || *text == '-')
        return -EINVAL;
    char *end = NULL;
    int saved_errno = errno;
    errno = 0;
    double d = strtod(text, &end);
    int range = errno == ERANGE;
    errno = saved_errno;
    if (end == text || *end != '\0' || range || !isfinite(d))
        return -EINVAL;
    float f = (float)d;
    if (!isfinite(f))
        return -EINVAL;
    *out = f;
    return 0;
}

int ps_rule_valid(const ps_rule_t *rule)
{
    if (rule == NULL)
        return 0;
    switch (rule->kind) {
    case PS_RULE_ADD:
    case PS_RULE_ASSIGN:
        return 1;
    case PS_RULE_SGD:
        return isfinite(rule->lr) && rule->lr > 0.0f;
    }
    return 0;
}

static inline float combine(const ps_rule_t *rule, float current, float v)
{
    return rule ? ps_rule_apply(rule, current, v) : current + v;
}

/* 1 when x[0, n) and y[0, n) share a byte (the kernels below assume they do not). */
static int range_overlaps(const float *x, const float *y, uint64_t n)
{
    uintptr_t a = (uintptr_t)x, b = (uintptr_t)y, len = (uintptr_t)n * sizeof(float);
    return n > 0 && a < b + len && b < a + len;
}

/* The range case of ps_span_update_finite for rule kinds known here (kind: the combining
 * rule, ADD when NULL; bkind: base's rule, -1 when there is no base): the check, then the
 * writes, each in blocks of 8 (vector code), the same expressions as combine and
 * ps_rule_apply (so the same results). 1 when written. */
static inline __attribute__((always_inline)) int range_update_k(
    int kind, float lr, int bkind, float blr, float *restrict x, const float *restrict base,
    uint64_t n, const float *restrict values)
{
    uint32_t bad = 0;
    uint64_t i = 0;
    for (; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK) {
        uint32_t b = 0;
        for (int k = 0; k < PS_VEC_BLOCK; k++) {
            float r = ps_rule_apply_k(kind, lr, x[i + k], values[i + k]);
            b |= ps_float_bad(r);
            if (bkind >= 0)
                b |= ps_float_bad(ps_rule_apply_k(bkind, blr, base[i + k], r));
        }
        bad |= b;
    }
    for (; i < n; i++) {
        float r = ps_rule_apply_k(kind, lr, x[i], values[i]);
        bad |= ps_float_bad(r);
        if (bkind >= 0)
            bad |= ps_float_bad(ps_rule_apply_k(bkind, blr, base[i], r));
    }
    if (bad)
        return 0;
    for (i = 0; i + PS_VEC_BLOCK <= n; i += PS_VEC_BLOCK)
        for (int k = 0; k < PS_VEC_BLOCK; k++)
            x[i + k] = ps_rule_apply_k(kind, lr, x[i + k], values[i + k]);
    for (; i < n; i++)
        x[i] = ps_rule_apply_k(kind, lr, x[i], values[i]);
    return 1;
}

#define RANGE_UPDATE_BASE(K, L)                                                            \
    do {                                                                                   \
        if (!base)                                                                         \
            return range_update_k(K, L, -1, 0.0f, x, NULL, n, values);                     \
        switch (base_rule->kind) {                                                         \
        case PS_RULE_ADD:                                                                  \
            return range_update_k(K, L, PS_RULE_ADD, 0.0f, x, base, n, values);            \
        case PS_RULE_ASSIGN:                                                               \
            return range_update_k(K, L, PS_RULE_ASSIGN, 0.0f, x, base, n, values);         \
        case PS_RULE_SGD:                                                                  \
            return range_update_k(K, L, PS_RULE_SGD, base_rule->lr, x, base, n, values);   \
        }                                                                                  \
    } while (0)

/* range_update_k for the rules given: 1 written, 0 a result would not be finite, -1 the
 * kernels cannot take it (x overlaps values or base, no base rule): the caller's element
 * loop does it then. */
static int range_update(float *x, const float *base, const ps_rule_t *base_rule,
                        const ps_rule_t *rule, uint64_t n, const float *values)
{
    if (range_overlaps(x, values, n) || (base && (!base_rule || range_overlaps(x, base, n))))
        return -1;
    switch (rule ? rule->kind : PS_RULE_ADD) {
    case PS_RULE_ADD:
        RANGE_UPDATE_BASE(PS_RULE_ADD, 0.0f);
        break;
    case PS_RULE_ASSIGN:
        RANGE_UPDATE_BASE(PS_RULE_ASSIGN, 0.0f);
        break;
    case PS_RULE_SGD:
        RANGE_UPDATE_BASE(PS_RULE_SGD, rule->lr);
        break;
    }
    return -1;
}

int ps_span_update_finite(float *x, const float *base, const ps_rule_t *base_rule,
                          const ps_rule_t *rule, uint64_t offset, uint64_t n,
                          const uint64_t *keys, const float *values)
{
    uint32_t bad = 0;
    if (keys == NULL) {
        /* a range holds each element once: checked first, then written (vector code for
         * each pair of rules, range_update) */
        int done = range_update(x + offset, base ? base + offset : NULL, base_rule, rule, n,
                                values);
        if (done >= 0)
            return done;
        for (uint64_t i = 0; i < n; i++) {
            float r = combine(rule, x[offset + i], values[i]);
            bad |= ps_float_bad(r);
            if (base)
                bad |= ps_float_bad(ps_rule_apply(base_rule, base[offset + i], r));
        }
        if (bad)
            return 0;
        for (uint64_t i = 0; i < n; i++)
            x[offset + i] = combine(rule, x[offset + i], values[i]);
        return 1;
    }
    /* keys may repeat: written in order, each element's former value kept to be put back */
    float *old = malloc(n ? n * sizeof(float) : 1);
    if (old == NULL)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = keys[i];
        old[i] = x[at];
        x[at] = combine(rule, x[at], values[i]);
        bad |= ps_float_bad(x[at]);
        if (base)
            bad |= ps_float_bad(ps_rule_apply(base_rule, base[at], x[at]));
    }
    if (bad)
        for (uint64_t i = n; i-- > 0;)
            x[keys[i]] = old[i];
    free(old);
    return !bad;
}

int ps_rule_parse(const char *text, ps_rule_t *rule, char *err, size_t err_size)
{
    if (text == NULL || rule == NULL)
        return fail(err, err_size, "no rule given");
    if (strcmp(text, "add") == 0) {
        *rule = (ps_rule_t){.kind = PS_RULE_ADD, .lr = 0.0f};
        return 0;
    }
    if (strcmp(text, "assign") == 0) {
        *rule = (ps_rule_t){.kind = PS_RULE_ASSIGN, .lr = 0.0f};
        return 0;
    }
    if (strncmp(text, "sgd:", 4) == 0) {
        float lr;
        if (parse_decimal_float(text + 4, &lr) < 0 || !(lr > 0.0f))
            return fail(err, err_size,
                        "bad learning rate in rule '%.40s': want sgd:LR with LR a finite "
                        "number > 0", text);
        *rule = (ps_rule_t){.kind = PS_RULE_SGD, .lr = lr};
        return 0;
    }
    return fail(err, err_size, "unknown update rule '%.40s': want add, assign or sgd:LR", text);
}

/* "sgd:" and the shortest %g text (6 to 9 significant digits) that reads back as lr. */
int ps_rule_format(const ps_rule_t *rule, char *buf, size_t size)
{
    if (!ps_rule_valid(rule) || (buf == NULL && size > 0))
        return -EINVAL;
    int len;
    if (rule->kind == PS_RULE_ADD) {
        len = snprintf(buf, size, "add");
    } else if (rule->kind == PS_RULE_ASSIGN) {
        len = snprintf(buf, size, "assign");
    } else {
        char text[48];
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(text, sizeof(text), "%.*g", digits, (double)rule->lr);
            if (strtof(text, NULL) == rule->lr)
                break;
        }
        len = snprintf(buf, size, "sgd:%s", text);
    }
    if (len < 0 || (size_t)len >= size)
        return -ENOSPC;
    return len;
}

int ps_sync_valid(const ps_sync_t *sync)
{
    if (sync == NULL)
        return 0;
    switch (sync->kind) {
    case PS_SYNC_BSP:
    case PS_SYNC_ASP:
        return 1;
    case PS_SYNC_SSP:
        return sync->staleness <= PS_MAX_STALENESS;
    }
    return 0;
}

int ps_sync_parse(const char *text, ps_sync_t *sync, char *err, size_t err_size)
{
    if (text == NULL || sync == NULL)
        return fail(err, err_size, "no sync mode given");
    if (strcmp(text, "bsp") == 0) {
        *sync = (ps_sync_t){.kind = PS_SYNC_BSP, .staleness = 0};
        return 0;
    }
    if (strcmp(text, "asp") == 0) {
        *sync = (ps_sync_t){.kind = PS_SYNC_ASP, .staleness = 0};
        return 0;
    }
    if (strncmp(text, "ssp:", 4) == 0) {
        const char *digits = text + 4;
        size_t len = strspn(digits, "0123456789");
        uint32_t s = 0;
        if (len == 0 || digits[len] != '\0' || len > 9)
            goto bad_ssp;
        for (size_t i = 0; i < len; i++)
            s = s * 10 + (uint32_t)(digits[i] - '0');
        if (s > PS_MAX_STALENESS)
            goto bad_ssp;
        *sync = (ps_sync_t){.kind = PS_SYNC_SSP, .staleness = s};
        return 0;
bad_ssp:
        return fail(err, err_size,
                    "bad staleness in sync mode '%.40s': want ssp:S with S an integer 0..%d",
                    text, PS_MAX_STALENESS);
    }
    return fail(err, err_size, "unknown sync mode '%.40s': want bsp, ssp:S or asp", text);
}

int ps_sync_format(const ps_sync_t *sync, char *buf, size_t size)
{
    if (!ps_sync_valid(sync) || (buf == NULL && size > 0))
        return -EINVAL;
    int len;
    if (sync->kind == PS_SYNC_BSP)
        len = snprintf(buf, size, "bsp");
    else if (sync->kind == PS_SYNC_ASP)
        len = snprintf(buf, size, "asp");
    else
        len = snprintf(buf, size, "ssp:%u", (unsigned)sync->staleness);
    if (len < 0 || (size_t)len >= size)
        return -ENOSPC;
    return len;
}

uint64_t ps_sync_min_done(const ps_sync_t *sync, uint64_t clock)
{
    if (sync == NULL)
        return clock; /* the strictest answer */
    switch (sync->kind) {
    case PS_SYNC_ASP:
        return 0;
    case PS_SYNC_SSP:
        return clock > sync->staleness ? clock - sync->staleness : 0;
    case PS_SYNC_BSP:
        break;
    }
    return clock;
}

uint64_t ps_sync_window(const ps_sync_t *sync)
{
    if (sync == NULL)
        return 1;
    switch (sync->kind) {
    case PS_SYNC_ASP:
        return UINT64_MAX;
    case PS_SYNC_SSP:
        return (uint64_t)sync->staleness + 1;
    case PS_SYNC_BSP:
        break;
    }
    return 1;
}

int ps_name_valid(const char *name)
{
    if (name == NULL)
        return 0;
    size_t len = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                              "0123456789._-");
    return len >= 1 && len < PS_NAME_BYTES && name[len] == '\0';
}
