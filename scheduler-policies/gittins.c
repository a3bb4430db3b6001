/* GITTINS: the Gittins index over the sizes of the jobs seen so far (Tiresias, NSDI 2019).
 * Needs no job lengths: it learns the distribution of job sizes S (the GPU time, attained_ns,
 * of the last GITTINS_WINDOW jobs that left) and runs first the job whose index
 *
 *     G(a) = sup over d > 0 of  P(S - a <= d | S > a) / E[min(S - a, d) | S > a]
 *
 * is highest, a being the GPU time it has attained: the job most likely to finish soon per
 * unit of GPU time still to invest. With heavy-tailed sizes G falls as a grows (LAS's order),
 * but a job that has nearly reached a common size ranks above a new one.
 *
 * The index is kept as a table over attained service in quarter-octave buckets from 1 ms,
 * evaluated at each bucket's lower edge and rebuilt when a job leaves (O(buckets x window));
 * pick only looks it up. Ties (same bucket): priority, arrival, id, i.e. FIFO. Before any job
 * has left there is no distribution: jobs are then ordered by bucket (least attained first).
 * Every job that leaves after running counts, finished or killed (an early-stopped trial is a
 * real size). Waiting jobs are admitted in the same order.
 *
 * Promotion against starvation as LAS's (policy_promoted): a job that has waited 10 min for
 * its turn goes first for one second of service.
 *
 * The sizes survive a daemon restart through save_state / load_state (a versioned,
 * checksummed little-endian record, below). */
#include "le_bytes.h"
#include "policy-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GITTINS_WINDOW 1024
#define GITTINS_UNIT_NS 1000000ull /* bucket 0: below 1 ms */
#define GITTINS_BUCKETS (1 + 4 * 64)

typedef struct gittins_state_s {
    /* first (policy_promoting_pick); records' value: attained service at its last report */
    policy_promoting_t promoting;
    uint64_t ring[GITTINS_WINDOW]; /* sizes, in the order the jobs left */
    size_t count, next;
    uint64_t sorted[GITTINS_WINDOW]; /* the same, ascending */
    uint64_t key[GITTINS_BUCKETS];   /* per bucket: lower runs first */
} gittins_state_t;

static unsigned bucket_of(uint64_t attained_ns)
{
    uint64_t x = attained_ns / GITTINS_UNIT_NS;
    if (x == 0)
        return 0;
    unsigned e = 63u - (unsigned)__builtin_clzll(x);
    unsigned frac = (unsigned)(e >= 2 ? (x >> (e - 2)) & 3 : (x << (2 - e)) & 3);
    return 1 + 4 * e + frac;
}

static uint64_t bucket_edge_ns(unsigned bucket)
{
    if (bucket == 0)
        return 0;
    unsigned e = (bucket - 1) / 4, frac = (bucket - 1) % 4;
    uint64_t x = e >= 2 ? (uint64_t)(4 + frac) << (e - 2) : (uint64_t)(4 + frac) >> (2 - e);
    return x > UINT64_MAX / GITTINS_UNIT_NS ? UINT64_MAX : x * GITTINS_UNIT_NS;
}

double policy_gittins_index(const uint64_t *sizes_ns, size_t count, uint64_t attained_ns)
{
    size_t first = 0;
    while (first < count && sizes_ns[first] <= attained_ns)
        first++;
    /* For an empirical distribution the sup is reached at d = s_j - a for a size s_j > a:
     * there the numerator steps up while the denominator is continuous. */
    double best = 0, done_sum = 0;
    for (size_t j = first; j < count; j++) {
        double d = (double)(sizes_ns[j] - attained_ns);
        done_sum += d;
        if (j + 1 < count && sizes_ns[j + 1] == sizes_ns[j])
            continue; /* equal sizes step together */
        double finished = (double)(j - first + 1);
        double invested = done_sum + (double)(count - j - 1) * d; /* x |S > a|, in ns */
        double index = finished / invested * 1e9;
        if (index > best)
            best = index;
    }
    return best;
}

/* The index as a key: higher index, lower key. */
static uint64_t index_key(double index)
{
    double scaled = index * 1e6;
    if (scaled >= 4e18)
        return 0;
    return UINT64_MAX - (uint64_t)scaled;
}

static void rebuild(gittins_state_t *state)
{
    memcpy(state->sorted, state->ring, state->count * sizeof(state->ring[0]));
    /* insertion sort: once per departure, at most GITTINS_WINDOW sizes */
    for (size_t i = 1; i < state->count; i++) {
        uint64_t v = state->sorted[i];
        size_t j = i;
        for (; j > 0 && state->sorted[j - 1] > v; j--)
            state->sorted[j] = state->sorted[j - 1];
        state->sorted[j] = v;
    }
    uint64_t largest = state->count ? state->sorted[state->count - 1] : 0;
    for (unsigned b = 0; b < GITTINS_BUCKETS; b++) {
        if (state->count == 0)
            state->key[b] = b; /* no distribution yet: least attained first */
        else if (bucket_edge_ns(b) >= largest)
            state->key[b] = UINT64_MAX; /* larger than every job seen: index 0 */
        else
            state->key[b] = index_key(policy_gittins_index(state->sorted, state->count,
                                                           bucket_edge_ns(b)));
    }
}

static void add_size(gittins_state_t *state, uint64_t size_ns)
{
    state->ring[state->next] = size_ns;
    state->next = (state->next + 1) % GITTINS_WINDOW;
    if (state->count < GITTINS_WINDOW)
        state->count++;
}

/* The table's key of the job's bucket, at least 1 (policy_promoting_pick gives a promoted job
 * 0: first). */
static uint64_t gittins_key(const void *opaque, const policy_job_t *job)
{
    const gittins_state_t *state = opaque;
    uint64_t key = state->key[bucket_of(job->attained_ns)];
    return key == 0 ? 1 : key;
}

static void *gittins_init(const policy_config_t *config)
{
    (void)config;
    gittins_state_t *state = calloc(1, sizeof(*state));
    if (state) {
        state->promoting.key = gittins_key;
        rebuild(state);
    }
    return state;
}

static void gittins_fini(void *opaque)
{
    gittins_state_t *state = opaque;
    policy_records_free(&state->promoting.records);
    free(state);
}

static void gittins_job_arrived(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    gittins_state_t *state = opaque;
    policy_record_t *record =
        policy_promotion_job_arrived(&state->promoting.records, job->id, now_ns);
    if (record) /* else out of memory: its size will not be learned */
        record->value = job->attained_ns;
}

static void gittins_iteration_done(void *opaque, const policy_job_t *job, uint64_t duration_ns,
                                   uint64_t now_ns)
{
    gittins_state_t *state = opaque;
    policy_record_t *record =
        policy_promotion_job_iteration(&state->promoting.records, job, duration_ns, now_ns);
    if (record)
        record->value = job->attained_ns;
}

static void gittins_job_left(void *opaque, uint64_t job_id, uint64_t now_ns)
{
    gittins_state_t *state = opaque;
    (void)now_ns;
    policy_record_t *record = policy_records_find(&state->promoting.records, job_id);
    if (!record)
        return;
    uint64_t size_ns = record->value;
    policy_records_remove(&state->promoting.records, job_id);
    if (size_ns == 0)
        return; /* never ran: no size */
    add_size(state, size_ns);
    rebuild(state);
}

/* The index the job is ordered by (its bucket's), in 1/s; before any job has left, 0. */
static double gittins_job_rank(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    const gittins_state_t *state = opaque;
    (void)now_ns;
    if (state->count == 0)
        return 0;
    return policy_gittins_index(state->sorted, state->count,
                                bucket_edge_ns(bucket_of(job->attained_ns)));
}

/* ---- persistence: "SGIT", u32 version, u32 count, u32 0, count x u64 sizes (oldest first),
 * u64 FNV-1a of everything before; all little-endian ------------------------------------ */

#define GITTINS_MAGIC "SGIT"
#define GITTINS_VERSION 1u
#define GITTINS_HEADER_BYTES 16

static long gittins_save_state(void *opaque, void *buf, size_t cap)
{
    const gittins_state_t *state = opaque;
    size_t len = GITTINS_HEADER_BYTES + state->count * 8 + 8;
    if (cap < len)
        return -ENOSPC;
    uint8_t *out = buf;
    memcpy(out, GITTINS_MAGIC, 4);
    le_put(out + 4, GITTINS_VERSION, 4);
    le_put(out + 8, state->count, 4);
    le_put(out + 12, 0, 4);
    size_t oldest = state->count < GITTINS_WINDOW ? 0 : state->next;
    for (size_t i = 0; i < state->count; i++)
        le_put(out + GITTINS_HEADER_BYTES + 8 * i,
               state->ring[(oldest + i) % GITTINS_WINDOW], 8);
    le_put(out + len - 8, le_fnv1a64(out, len - 8), 8);
    return (long)len;
}

static int gittins_load_state(void *opaque, const void *buf, size_t len)
{
    gittins_state_t *state = opaque;
    const uint8_t *in = buf;
    if (!in || len < GITTINS_HEADER_BYTES + 8 || memcmp(in, GITTINS_MAGIC, 4) != 0)
        return -EINVAL;
    if (le_get(in + 4, 4) != GITTINS_VERSION)
        return -EPROTO;
    uint64_t count = le_get(in + 8, 4);
    if (count > GITTINS_WINDOW || le_get(in + 12, 4) != 0 ||
        len != GITTINS_HEADER_BYTES + count * 8 + 8 || le_fnv1a64(in, len - 8) != le_get(in + len - 8, 8))
        return -EINVAL;
    for (size_t i = 0; i < count; i++)
        if (le_get(in + GITTINS_HEADER_BYTES + 8 * i, 8) == 0)
            return -EINVAL; /* a size is never 0 */
    for (size_t i = 0; i < count; i++)
        state->ring[i] = le_get(in + GITTINS_HEADER_BYTES + 8 * i, 8);
    state->count = count;
    state->next = count % GITTINS_WINDOW;
    rebuild(state);
    return 0;
}

const policy_ops_t policy_gittins_ops = {
    .name = "gittins",
    .description = "Gittins index over the learned job sizes, no job lengths",
    .rank_name = "index",
    .init = gittins_init,
    .fini = gittins_fini,
    .job_arrived = gittins_job_arrived,
    .job_left = gittins_job_left,
    .iteration_done = gittins_iteration_done,
    .pick = policy_promoting_pick,
    .admission_order = policy_promoting_admission_order,
    .save_state = gittins_save_state,
    .load_state = gittins_load_state,
    .job_rank = gittins_job_rank,
};
