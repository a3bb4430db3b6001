/* Federated rounds (ps_fed.h): the rule text, the seeded choice of a round's clients, the
 * pushes of the open round and the weighted average that closes it. Pure: no I/O, no clock. */
#include "ps_fed.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_FED_MAX_SAMPLES (1ll << 48) /* so that K sample counts sum exactly in 64 bits */

/* One client's push in the open round (slot i of the round's sorted client list). */
typedef struct ps_fed_push_s {
    int pushed;
    int accepted;             /* counts in the average (the policy's verdict) */
    uint64_t samples;
    uint32_t work;
    float *model;             /* count values; only for an accepted push */
} ps_fed_push_t;

struct ps_fed_s {
    ps_fed_spec_t spec;
    uint64_t count;
    float *values;
    uint64_t round;           /* the open round */
    uint32_t *chosen;         /* its K clients, ascending */
    ps_fed_push_t *pushes;    /* per chosen slot */
    uint32_t pushed, accepted;
    uint32_t *previous;       /* the clients that pushed for round - 1 (ascending) */
    uint32_t previous_n;
    ps_fed_round_info_t last;
};

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

int ps_fed_is_rule(const char *text)
{
    return text && strncmp(text, "fedavg", 6) == 0;
}

static int spec_valid(const ps_fed_spec_t *s, char *err, size_t err_size)
{
    if (s->clients < 1 || s->clients > PS_FED_MAX_CLIENTS) {
        set_err(err, err_size, "fedavg: %u clients (1 .. %d)", s->clients, PS_FED_MAX_CLIENTS);
        return 0;
    }
    if (s->per_round < 1 || s->per_round > s->clients) {
        set_err(err, err_size, "fedavg: %u clients per round (1 .. the %u clients)",
                s->per_round, s->clients);
        return 0;
    }
    if (s->epochs < 1 || s->epochs > PS_FED_MAX_EPOCHS) {
        set_err(err, err_size, "fedavg: %u epochs (1 .. %d)", s->epochs, PS_FED_MAX_EPOCHS);
        return 0;
    }
    if (s->policy != PS_FED_DROP && s->policy != PS_FED_PARTIAL) {
        set_err(err, err_size, "fedavg: an unknown policy");
        return 0;
    }
    return 1;
}

/* A plain decimal field of text (up to ':' or the end) into *v (at most max); the field's
 * end, or NULL. */
static const char *field(const char *p, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    const char *start = p;
    while (*p >= '0' && *p <= '9') {
        if (p - start >= 10)
            return NULL;
        x = x * 10 + (uint64_t)(*p - '0');
        p++;
    }
    if (p == start || (*p != ':' && *p != '\0') || x > max)
        return NULL;
    *v = x;
    return p;
}

int ps_fed_parse(const char *text, ps_fed_spec_t *spec, char *err, size_t err_size)
{
    static const char *const names[] = {"clients N", "per-round K", "epochs E", "seed"};
    uint64_t v[4];
    if (!text || !spec) {
        set_err(err, err_size, "fedavg: no rule text");
        return -EINVAL;
    }
    if (strncmp(text, "fedavg:", 7) != 0) {
        set_err(err, err_size, "bad federated rule '%.80s' (fedavg:N:K:E:SEED:drop|partial)",
                text);
        return -EINVAL;
    }
    const char *p = text + 7;
    for (int i = 0; i < 4; i++) {
        const char *end = field(p, UINT32_MAX, &v[i]);
        if (!end || *end != ':') {
            set_err(err, err_size,
                    "bad federated rule '%.80s': %s is not a plain decimal of at most %u "
                    "(fedavg:N:K:E:SEED:drop|partial)", text, names[i], UINT32_MAX);
            return -EINVAL;
        }
        p = end + 1;
    }
    ps_fed_spec_t s = {.clients = (uint32_t)v[0], .per_round = (uint32_t)v[1],
                       .epochs = (uint32_t)v[2], .seed = (uint32_t)v[3]};
    if (strcmp(p, "drop") == 0)
        s.policy = PS_FED_DROP;
    else if (strcmp(p, "partial") == 0)
        s.policy = PS_FED_PARTIAL;
    else {
        set_err(err, err_size, "bad federated rule '%.80s': the policy is drop or partial",
                text);
        return -EINVAL;
    }
    if (!spec_valid(&s, err, err_size))
        return -EINVAL;
    *spec = s;
    return 0;
}

int ps_fed_format(const ps_fed_spec_t *spec, char *buf, size_t size)
{
    if (!spec || !spec_valid(spec, NULL, 0))
        return -EINVAL;
    int n = snprintf(buf, size, "fedavg:%u:%u:%u:%u:%s", spec->clients, spec->per_round,
                     spec->epochs, spec->seed, spec->policy == PS_FED_DROP ? "drop" : "partial");
    if (!buf || n < 0 || (size_t)n >= size)
        return -ENOSPC;
    return n;
}

/* ---- the choice of a round's clients ------------------------------------------------------ */

static uint64_t splitmix64_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The generator's state for (seed, round): splitmix64's first output from the seed, xor the
 * round, so that rounds draw from unrelated streams. */
void ps_fed_select(const ps_fed_spec_t *spec, uint64_t round, uint32_t *out)
{
    uint32_t ids[PS_FED_MAX_CLIENTS];
    uint32_t n = spec->clients, k = spec->per_round;
    if (n > PS_FED_MAX_CLIENTS)
        n = PS_FED_MAX_CLIENTS;
    if (k > n)
        k = n;
    uint64_t seed_state = spec->seed;
    uint64_t state = splitmix64_next(&seed_state) ^ round;
    for (uint32_t i = 0; i < n; i++)
        ids[i] = i;
    for (uint32_t i = 0; i < k; i++) { /* partial Fisher-Yates */
        uint32_t j = i + (uint32_t)(splitmix64_next(&state) % (n - i));
        uint32_t tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
    qsort(ids, k, sizeof(ids[0]), cmp_u32);
    memcpy(out, ids, k * sizeof(ids[0]));
}

/* The slot of client in a sorted list of n ids, or -1. */
static int slot_of(const uint32_t *ids, uint32_t n, uint32_t client)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ids[mid] == client)
            return (int)mid;
        if (ids[mid] < client)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int ps_fed_selected(const ps_fed_spec_t *spec, uint64_t round, uint32_t client)
{
    uint32_t ids[PS_FED_MAX_CLIENTS];
    if (!spec || !spec_valid(spec, NULL, 0) || client >= spec->clients)
        return 0;
    ps_fed_select(spec, round, ids);
    return slot_of(ids, spec->per_round, client) >= 0;
}

/* ---- the model and its rounds ------------------------------------------------------------- */

ps_fed_t *ps_fed_create(const ps_fed_spec_t *spec, uint64_t count, const float *init)
{
    if (!spec || !spec_valid(spec, NULL, 0) || count == 0 || count > (1ull << 32))
        return NULL;
    for (uint64_t i = 0; init && i < count; i++)
        if (!isfinite(init[i]))
            return NULL;
    ps_fed_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->spec = *spec;
    f->count = count;
    f->values = init ? malloc(count * sizeof(float)) : calloc(count, sizeof(float));
    f->chosen = calloc(spec->per_round, sizeof(*f->chosen));
    f->previous = calloc(spec->per_round, sizeof(*f->previous));
    f->pushes = calloc(spec->per_round, sizeof(*f->pushes));
    if (!f->values || !f->chosen || !f->previous || !f->pushes) {
        ps_fed_destroy(f);
        return NULL;
    }
    if (init)
        memcpy(f->values, init, count * sizeof(float));
    ps_fed_select(spec, 0, f->chosen);
    f->last.round = UINT64_MAX;
    return f;
}

static void clear_pushes(ps_fed_t *f)
{
    for (uint32_t i = 0; i < f->spec.per_round; i++) {
        free(f->pushes[i].model);
        memset(&f->pushes[i], 0, sizeof(f->pushes[i]));
    }
    f->pushed = f->accepted = 0;
}

void ps_fed_destroy(ps_fed_t *f)
{
    if (!f)
        return;
    if (f->pushes)
        clear_pushes(f);
    free(f->pushes);
    free(f->values);
    free(f->chosen);
    free(f->previous);
    free(f);
}

const ps_fed_spec_t *ps_fed_spec(const ps_fed_t *f)
{
    return &f->spec;
}

uint64_t ps_fed_count(const ps_fed_t *f)
{
    return f->count;
}

uint64_t ps_fed_round(const ps_fed_t *f)
{
    return f->round;
}

const float *ps_fed_values(const ps_fed_t *f)
{
    return f->values;
}

uint32_t ps_fed_pushed(const ps_fed_t *f)
{
    return f->pushed;
}

int ps_fed_client_pushed(const ps_fed_t *f, uint32_t client)
{
    int slot = slot_of(f->chosen, f->spec.per_round, client);
    return slot >= 0 && f->pushes[slot].pushed;
}

void ps_fed_last_round(const ps_fed_t *f, ps_fed_round_info_t *info)
{
    *info = f->last;
}

uint64_t ps_fed_bytes(const ps_fed_t *f)
{
    if (!f)
        return 0;
    return (1ull + f->accepted) * f->count * sizeof(float) +
           (uint64_t)f->spec.per_round * (2 * sizeof(uint32_t) + sizeof(ps_fed_push_t));
}

/* Closes the open round (the average of its accepted pushes), opens the next. */
static uint32_t close_round(ps_fed_t *f, int timed_out)
{
    uint32_t k = f->spec.per_round;
    uint64_t n = 0;
    for (uint32_t i = 0; i < k; i++)
        if (f->pushes[i].accepted)
            n += f->pushes[i].samples;
    if (f->accepted > 0) {
        double p[PS_FED_MAX_CLIENTS];
        const float *w[PS_FED_MAX_CLIENTS];
        uint32_t m = 0;
        for (uint32_t i = 0; i < k; i++) /* slots ascend with the client id */
            if (f->pushes[i].accepted) {
                p[m] = (double)f->pushes[i].samples / (double)n;
                w[m++] = f->pushes[i].model;
            }
        for (uint64_t j = 0; j < f->count; j++) {
            double acc = 0.0;
            for (uint32_t a = 0; a < m; a++)
                acc += p[a] * (double)w[a][j];
            f->values[j] = (float)acc;
        }
    }
    f->last = (ps_fed_round_info_t){.round = f->round, .pushed = f->pushed,
                                    .accepted = f->accepted, .samples = n,
                                    .timed_out = timed_out};
    uint32_t accepted = f->accepted;
    f->previous_n = 0;
    for (uint32_t i = 0; i < k; i++)
        if (f->pushes[i].pushed)
            f->previous[f->previous_n++] = f->chosen[i];
    clear_pushes(f);
    f->round++;
    ps_fed_select(&f->spec, f->round, f->chosen);
    return accepted;
}

uint32_t ps_fed_close_round(ps_fed_t *f)
{
    return close_round(f, 1);
}

int ps_fed_push(ps_fed_t *f, uint32_t client, uint64_t round, int64_t samples, uint32_t work,
                const float *values, uint64_t n, char *err, size_t err_size)
{
    const ps_fed_spec_t *s = &f->spec;
    if (client >= s->clients) {
        set_err(err, err_size, "client %u is outside the table's %u clients", client,
                s->clients);
        return -EINVAL;
    }
    if (samples < 1 || samples > PS_FED_MAX_SAMPLES) {
        set_err(err, err_size, "sample count %lld: it must be at least 1%s", (long long)samples,
                samples < 1 ? "" : " and at most 2^48");
        return -EINVAL;
    }
    if (work > s->epochs) {
        set_err(err, err_size, "work %u is more than the %u epochs", work, s->epochs);
        return -EINVAL;
    }
    if (n != f->count || !values) {
        set_err(err, err_size, "a push carries the whole model: %llu values, not %llu",
                (unsigned long long)f->count, (unsigned long long)n);
        return -EINVAL;
    }
    if (round < f->round) {
        if (round + 1 == f->round && slot_of(f->previous, f->previous_n, client) >= 0)
            return 0; /* a repeat of its push for the round that has closed since */
        set_err(err, err_size, "round %llu is closed (the open round is %llu)",
                (unsigned long long)round, (unsigned long long)f->round);
        return -EINVAL;
    }
    if (round > f->round) {
        set_err(err, err_size, "round %llu is not open (the open round is %llu)",
                (unsigned long long)round, (unsigned long long)f->round);
        return -EINVAL;
    }
    int slot = slot_of(f->chosen, s->per_round, client);
    if (slot < 0) {
        set_err(err, err_size, "client %u is not one of round %llu's clients", client,
                (unsigned long long)round);
        return -EINVAL;
    }
    if (f->pushes[slot].pushed)
        return 0;
    int accepted = s->policy == PS_FED_DROP ? work >= s->epochs : work >= 1;
    float *model = NULL;
    if (accepted && !(model = malloc(n * sizeof(float)))) {
        set_err(err, err_size, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t j = 0; j < n; j++) { /* checked and copied in one pass: each value read
                                         * once (the caller's region may change meanwhile) */
        float v = values[j];
        if (!isfinite(v)) {
            free(model);
            set_err(err, err_size, "value %llu of the push is not finite",
                    (unsigned long long)j);
            return -EINVAL;
        }
        if (model)
            model[j] = v;
    }
    f->pushes[slot] = (ps_fed_push_t){.pushed = 1, .accepted = accepted,
                                      .samples = (uint64_t)samples, .work = work,
                                      .model = model};
    f->pushed++;
    f->accepted += (uint32_t)accepted;
    if (f->pushed < s->per_round)
        return 1;
    close_round(f, 0);
    return 2;
}
