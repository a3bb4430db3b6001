/* Address-range sub-allocator: best fit over free extents, coalescing on free.
 *
 * Each range is cut into blocks that tile it exactly, linked in address order (prev/next,
 * within the range only). Every block is in `by_address` (key: start); free blocks are also in
 * `free_by_size` (key: size, start), whose ceiling of (size, 0) is the best fit. */
#include "allocator.h"

#include "alloc_tree-internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#define CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

typedef struct range_s {
    struct range_s *prev, *next; /* list of the allocator's ranges */
    uint64_t base;
    uint64_t size_bytes;
    uint64_t live_blocks;
} range_t;

typedef struct block_s {
    alloc_tree_node_t address_node; /* key (start, 0); always in by_address */
    alloc_tree_node_t size_node;    /* key (size, start); in free_by_size while free */
    struct block_s *prev, *next;    /* address order within the range */
    range_t *range;
    uint64_t start;
    uint64_t size_bytes;
    uint64_t requested_bytes; /* 0 while free */
    bool free;
} block_t;

struct allocator_s {
    uint64_t alignment_bytes;
    alloc_tree_t by_address;
    alloc_tree_t free_by_size;
    range_t *ranges;
    uint64_t range_count;
    uint64_t total_bytes;
    uint64_t in_use_bytes;
    uint64_t requested_bytes;
    uint64_t high_water_bytes;
    uint64_t live_blocks;
};

static block_t *block_of_address_node(alloc_tree_node_t *node)
{
    return node ? CONTAINER_OF(node, block_t, address_node) : NULL;
}

static void free_index_insert(allocator_t *a, block_t *b)
{
    b->size_node.key_major = b->size_bytes;
    b->size_node.key_minor = b->start;
    alloc_tree_insert(&a->free_by_size, &b->size_node);
}

static block_t *block_new(range_t *range, uint64_t start, uint64_t size_bytes)
{
    block_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->range = range;
    b->start = start;
    b->size_bytes = size_bytes;
    b->free = true;
    b->address_node.key_major = start;
    return b;
}

allocator_t *allocator_create(uint64_t alignment_bytes)
{
    if (alignment_bytes == 0)
        alignment_bytes = ALLOCATOR_DEFAULT_ALIGNMENT_BYTES;
    if ((alignment_bytes & (alignment_bytes - 1)) != 0)
        return NULL;
    allocator_t *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->alignment_bytes = alignment_bytes;
    alloc_tree_init(&a->by_address, 0x5A1u);
    alloc_tree_init(&a->free_by_size, 0xA11Cu);
    return a;
}

/* Every block is in by_address exactly once: free them by walking that tree. */
static void free_blocks_below(alloc_tree_node_t *node)
{
    if (!node)
        return;
    free_blocks_below(node->child[0]);
    free_blocks_below(node->child[1]);
    free(block_of_address_node(node));
}

void allocator_destroy(allocator_t *a)
{
    if (!a)
        return;
    free_blocks_below(a->by_address.root);
    while (a->ranges) {
        range_t *next = a->ranges->next;
        free(a->ranges);
        a->ranges = next;
    }
    free(a);
}

uint64_t allocator_alignment_bytes(const allocator_t *a)
{
    return a->alignment_bytes;
}

int allocator_range_add(allocator_t *a, uint64_t base, uint64_t size_bytes)
{
    uint64_t mask = a->alignment_bytes - 1;
    if (size_bytes == 0 || (base & mask) || (size_bytes & mask) || base + size_bytes < base)
        return -EINVAL;
    /* Ranges are tiled by blocks, so the neighbours in by_address reveal any overlap. */
    block_t *below = block_of_address_node(alloc_tree_floor(&a->by_address, base, 0));
    if (below && below->start + below->size_bytes > base)
        return -EEXIST;
    block_t *above = block_of_address_node(alloc_tree_ceil(&a->by_address, base, 0));
    if (above && above->start < base + size_bytes)
        return -EEXIST;

    range_t *range = calloc(1, sizeof(*range));
    block_t *b = NULL;
    if (!range)
        goto fail;
    b = block_new(range, base, size_bytes);
    if (!b)
        goto fail;
    range->base = base;
    range->size_bytes = size_bytes;
    range->next = a->ranges;
    if (a->ranges)
        a->ranges->prev = range;
    a->ranges = range;
    a->range_count++;
    a->total_bytes += size_bytes;
    alloc_tree_insert(&a->by_address, &b->address_node);
    free_index_insert(a, b);
    return 0;

fail:
    free(range);
    return -ENOMEM;
}

int allocator_range_remove(allocator_t *a, uint64_t base)
{
    block_t *b = block_of_address_node(alloc_tree_find(&a->by_address, base, 0));
    if (!b || b->range->base != base)
        return -ENOENT;
    range_t *range = b->range;
    if (range->live_blocks != 0)
        return -EBUSY;
    /* Empty and fully coalesced: one free block spans the range. */
    alloc_tree_remove(&a->by_address, &b->address_node);
    alloc_tree_remove(&a->free_by_size, &b->size_node);
    free(b);
    if (range->prev)
        range->prev->next = range->next;
    else
        a->ranges = range->next;
    if (range->next)
        range->next->prev = range->prev;
    a->range_count--;
    a->total_bytes -= range->size_bytes;
    free(range);
    return 0;
}

int allocator_range_find_empty(const allocator_t *a, uint64_t *base_out, uint64_t *size_bytes_out)
{
    for (const range_t *range = a->ranges; range; range = range->next) {
        if (range->live_blocks == 0) {
            *base_out = range->base;
            *size_bytes_out = range->size_bytes;
            return 0;
        }
    }
    return -ENOENT;
}

int allocator_alloc(allocator_t *a, uint64_t size_bytes, uint64_t *address_out)
{
    uint64_t mask = a->alignment_bytes - 1;
    if (size_bytes == 0 || size_bytes > UINT64_MAX - mask)
        return -EINVAL;
    uint64_t rounded = (size_bytes + mask) & ~mask;

    block_t *b = NULL;
    alloc_tree_node_t *fit = alloc_tree_ceil(&a->free_by_size, rounded, 0);
    if (!fit)
        return -ENOMEM;
    b = CONTAINER_OF(fit, block_t, size_node);

    block_t *rest = NULL;
    if (b->size_bytes > rounded) {
        /* Allocate the tail record first so that a failure leaves nothing changed. */
        rest = block_new(b->range, b->start + rounded, b->size_bytes - rounded);
        if (!rest)
            return -ENOMEM;
    }
    alloc_tree_remove(&a->free_by_size, &b->size_node);
    if (rest) {
        b->size_bytes = rounded;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        alloc_tree_insert(&a->by_address, &rest->address_node);
        free_index_insert(a, rest);
    }
    b->free = false;
    b->requested_bytes = size_bytes;
    b->range->live_blocks++;
    a->live_blocks++;
    a->in_use_bytes += rounded;
    a->requested_bytes += size_bytes;
    if (a->in_use_bytes > a->high_water_bytes)
        a->high_water_bytes = a->in_use_bytes;
    *address_out = b->start;
    return 0;
}

/* Merges `right` (free, same range, directly after `left`) into `left`. `left` must not be in
 * free_by_size while this runs. */
static void absorb(allocator_t *a, block_t *left, block_t *right)
{
    alloc_tree_remove(&a->free_by_size, &right->size_node);
    alloc_tree_remove(&a->by_address, &right->address_node);
    left->size_bytes += right->size_bytes;
    left->next = right->next;
    if (right->next)
        right->next->prev = left;
    free(right);
}

/* Classifies an address that starts no live block: inside a live block, in free space, or
 * outside every range. */
static int classify_bad_address(const allocator_t *a, uint64_t address)
{
    block_t *b = block_of_address_node(alloc_tree_floor(&a->by_address, address, 0));
    if (!b || address - b->start >= b->size_bytes)
        return -ENOENT;
    return b->free ? -EALREADY : -EINVAL;
}

int allocator_free(allocator_t *a, uint64_t address, uint64_t *size_bytes_out)
{
    block_t *b = block_of_address_node(alloc_tree_find(&a->by_address, address, 0));
    if (!b || b->free)
        return classify_bad_address(a, address);

    uint64_t size_bytes = b->size_bytes;
    b->free = true;
    b->range->live_blocks--;
    a->live_blocks--;
    a->in_use_bytes -= size_bytes;
    a->requested_bytes -= b->requested_bytes;
    b->requested_bytes = 0;

    if (b->next && b->next->free)
        absorb(a, b, b->next);
    if (b->prev && b->prev->free) {
        block_t *left = b->prev;
        alloc_tree_remove(&a->free_by_size, &left->size_node);
        /* Same as absorb(), except that `b` is not in free_by_size. */
        alloc_tree_remove(&a->by_address, &b->address_node);
        left->size_bytes += b->size_bytes;
        left->next = b->next;
        if (b->next)
            b->next->prev = left;
        free(b);
        b = left;
    }
    free_index_insert(a, b);
    if (size_bytes_out)
        *size_bytes_out = size_bytes;
    return 0;
}

int allocator_lookup(const allocator_t *a, uint64_t address, allocator_block_t *out)
{
    block_t *b = block_of_address_node(alloc_tree_floor(&a->by_address, address, 0));
    if (!b || b->free || address - b->start >= b->size_bytes)
        return -ENOENT;
    out->base = b->start;
    out->size_bytes = b->size_bytes;
    out->requested_bytes = b->requested_bytes;
    out->range_base = b->range->base;
    return 0;
}

void allocator_stats(const allocator_t *a, allocator_stats_t *out)
{
    alloc_tree_node_t *largest = alloc_tree_max(&a->free_by_size);
    out->total_bytes = a->total_bytes;
    out->in_use_bytes = a->in_use_bytes;
    out->requested_bytes = a->requested_bytes;
    out->high_water_bytes = a->high_water_bytes;
    out->free_bytes = a->total_bytes - a->in_use_bytes;
    out->largest_free_bytes = largest ? largest->key_major : 0;
    out->live_blocks = a->live_blocks;
    out->free_blocks = a->free_by_size.count;
    out->ranges = a->range_count;
}

void allocator_reset_high_water(allocator_t *a)
{
    a->high_water_bytes = a->in_use_bytes;
}

int allocator_validate(const allocator_t *a)
{
    uint64_t mask = a->alignment_bytes - 1;
    uint64_t blocks = 0, free_blocks = 0, in_use = 0, requested = 0, total = 0, live = 0;
    uint64_t ranges = 0;

    if (alloc_tree_validate(&a->by_address) < 0 || alloc_tree_validate(&a->free_by_size) < 0)
        return -EFAULT;
    for (const range_t *range = a->ranges; range; range = range->next) {
        uint64_t expect = range->base, range_live = 0;
        block_t *b = block_of_address_node(alloc_tree_find(&a->by_address, range->base, 0));
        const block_t *prev = NULL;
        ranges++;
        total += range->size_bytes;
        for (; b; prev = b, b = b->next) {
            if (b->range != range || b->prev != prev || b->start != expect)
                return -EFAULT;
            if (b->size_bytes == 0 || (b->start & mask) || (b->size_bytes & mask))
                return -EFAULT;
            if (alloc_tree_find(&a->by_address, b->start, 0) != &b->address_node)
                return -EFAULT;
            bool indexed = alloc_tree_find(&a->free_by_size, b->size_bytes, b->start) ==
                           &b->size_node;
            if (b->free != indexed)
                return -EFAULT;
            if (b->free) {
                if (prev && prev->free) /* two free neighbours: coalescing missed */
                    return -EFAULT;
                free_blocks++;
            } else {
                if (b->requested_bytes == 0 || b->requested_bytes > b->size_bytes)
                    return -EFAULT;
                range_live++;
                in_use += b->size_bytes;
                requested += b->requested_bytes;
            }
            blocks++;
            expect = b->start + b->size_bytes;
        }
        if (expect != range->base + range->size_bytes || range_live != range->live_blocks)
            return -EFAULT;
        live += range_live;
    }
    if (ranges != a->range_count || total != a->total_bytes || in_use != a->in_use_bytes ||
        requested != a->requested_bytes || live != a->live_blocks ||
        blocks != a->by_address.count || free_blocks != a->free_by_size.count ||
        a->high_water_bytes < a->in_use_bytes)
        return -EFAULT;
    return 0;
}
