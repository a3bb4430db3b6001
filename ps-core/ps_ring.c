/* The consistent-hash ring: every server hashed at `vnodes` points ("name#v"), a shard owned by
 * the server of the first point at or after the hash of "table/shard" (wrapping). The points
 * are sorted once; a lookup is a binary search. The hash is FNV-1a (64 bits) with splitmix64's
 * finaliser on top, so that nearby texts ("node1#3", "node1#4") land far apart. A shard's
 * replicas are the first distinct servers met going on from its point. */
#include "ps_core.h"

#include <stdlib.h>
#include <string.h>

#define RING_MAX_VNODES 4096u

typedef struct ring_point_s {
    uint64_t hash;
    uint32_t server; /* index into names (sorted) */
} ring_point_t;

struct ps_ring_s {
    char **names;       /* sorted by strcmp */
    size_t n;
    ring_point_t *points;
    size_t npoints;
};

#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv_bytes(uint64_t h, const char *bytes, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)bytes[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* The decimal digits of v appended to the hash. */
static uint64_t fnv_decimal(uint64_t h, uint64_t v)
{
    char digits[20];
    size_t len = 0;
    do {
        digits[sizeof(digits) - 1 - len++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return fnv_bytes(h, digits + sizeof(digits) - len, len);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* hash("<text><sep><number>") */
static uint64_t ring_hash(const char *text, char sep, uint64_t number)
{
    uint64_t h = fnv_bytes(FNV_OFFSET, text, strlen(text));
    h = fnv_bytes(h, &sep, 1);
    return mix64(fnv_decimal(h, number));
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* By hash; equal hashes (never seen, but possible) by server index, i.e. by name. */
static int cmp_point(const void *a, const void *b)
{
    const ring_point_t *pa = a, *pb = b;
    if (pa->hash != pb->hash)
        return pa->hash < pb->hash ? -1 : 1;
    return (pa->server > pb->server) - (pa->server < pb->server);
}

ps_ring_t *ps_ring_create(const char *const *names, size_t n, uint32_t vnodes)
{
    if (vnodes == 0)
        vnodes = PS_RING_VNODES;
    if (names == NULL || n == 0 || n > PS_MAX_SERVERS || vnodes > RING_MAX_VNODES)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (names[i] == NULL || names[i][0] == '\0')
            return NULL;

    ps_ring_t *ring = calloc(1, sizeof(*ring));
    if (ring == NULL)
        return NULL;
    ring->names = calloc(n, sizeof(*ring->names));
    ring->points = calloc((size_t)n * vnodes, sizeof(*ring->points));
    if (ring->names == NULL || ring->points == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        ring->names[i] = malloc(len + 1);
        if (ring->names[i] == NULL)
            goto fail;
        memcpy(ring->names[i], names[i], len + 1);
        ring->n++;
    }
    qsort(ring->names, n, sizeof(*ring->names), cmp_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ring->names[i - 1], ring->names[i]) == 0)
            goto fail; /* a duplicate */

    for (size_t s = 0; s < n; s++)
        for (uint32_t v = 0; v < vnodes; v++)
            ring->points[ring->npoints++] =
                (ring_point_t){.hash = ring_hash(ring->names[s], '#', v), .server = (uint32_t)s};
    qsort(ring->points, ring->npoints, sizeof(*ring->points), cmp_point);
    return ring;

fail:
    ps_ring_destroy(ring);
    return NULL;
}

void ps_ring_destroy(ps_ring_t *ring)
{
    if (ring == NULL)
        return;
    for (size_t i = 0; i < ring->n; i++)
        free(ring->names[i]);
    free(ring->names);
    free(ring->points);
    free(ring);
}

size_t ps_ring_size(const ps_ring_t *ring)
{
    return ring ? ring->n : 0;
}

const char *ps_ring_name(const ps_ring_t *ring, size_t index)
{
    if (ring == NULL || index >= ring->n)
        return NULL;
    return ring->names[index];
}

/* The index of the first ring point at or after the hash of "table/shard", wrapping. */
static size_t first_point(const ps_ring_t *ring, const char *table, uint32_t shard)
{
    uint64_t h = ring_hash(table ? table : "", '/', shard);
    size_t lo = 0, hi = ring->npoints;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ring->points[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == ring->npoints ? 0 : lo; /* wrap */
}

size_t ps_ring_owner(const ps_ring_t *ring, const char *table, uint32_t shard)
{
    if (ring == NULL)
        return 0;
    return ring->points[first_point(ring, table, shard)].server;
}

uint32_t ps_ring_replicas(const ps_ring_t *ring, const char *table, uint32_t shard, uint32_t r,
                          size_t *out)
{
    if (ring == NULL || out == NULL)
        return 0;
    if (r == 0)
        r = 1;
    if (r > PS_MAX_REPLICAS)
        r = PS_MAX_REPLICAS;
    uint32_t k = r < ring->n ? r : (uint32_t)ring->n;
    /* round the ring from the shard's key: every server has points on it, so one full turn
     * meets all of them */
    size_t at = first_point(ring, table, shard);
    uint32_t found = 0;
    for (size_t step = 0; step < ring->npoints && found < k; step++) {
        size_t server = ring->points[(at + step) % ring->npoints].server;
        uint32_t seen = 0;
        while (seen < found && out[seen] != server)
            seen++;
        if (seen == found)
            out[found++] = server;
    }
    return found;
}

uint32_t ps_ring_moved(const ps_ring_t *a, const ps_ring_t *b, const char *table,
                       uint32_t shards)
{
    uint32_t moved = 0;
    if (a == NULL || b == NULL)
        return 0;
    for (uint32_t s = 0; s < shards; s++)
        if (strcmp(a->names[ps_ring_owner(a, table, s)], b->names[ps_ring_owner(b, table, s)]))
            moved++;
    return moved;
}

void ps_ring_moves(const ps_ring_t *a, const ps_ring_t *b, const char *table, uint32_t shards,
                   uint32_t r, uint32_t *primaries, uint32_t *copies)
{
    uint32_t moved = 0, sent = 0;
    for (uint32_t s = 0; a != NULL && b != NULL && s < shards; s++) {
        size_t in_a[PS_MAX_REPLICAS], in_b[PS_MAX_REPLICAS];
        uint32_t ka = ps_ring_replicas(a, table, s, r, in_a);
        uint32_t kb = ps_ring_replicas(b, table, s, r, in_b);
        if (strcmp(a->names[in_a[0]], b->names[in_b[0]]) != 0)
            moved++;
        for (uint32_t i = 0; i < kb; i++) {
            uint32_t j = 0;
            while (j < ka && strcmp(a->names[in_a[j]], b->names[in_b[i]]) != 0)
                j++;
            if (j == ka)
                sent++; /* a copy b places where a had none: its state must be sent */
        }
    }
    if (primaries)
        *primaries = moved;
    if (copies)
        *copies = sent;
}
