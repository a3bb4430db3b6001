/* Address-range sub-allocator.
 *
 * Hands out blocks of device virtual addresses from one or more ranges (the chunks the shim
 * has mapped). It only does bookkeeping: it never touches the memory, calls no driver function
 * and keeps no clock. The shim wraps cuMemAlloc* / cuMemAllocAsync / cuMemFree* around it.
 *
 * Contract
 *  - Every block starts on a multiple of the allocator's alignment (default 256 bytes, the
 *    granularity cuMemAlloc promises) and its size is rounded up to that alignment. Ranges
 *    must start on, and be a multiple of, the alignment.
 *  - Best fit: allocator_alloc() takes the smallest free block that holds the rounded size
 *    (lowest address on ties), so it fails with -ENOMEM only when no free block is large
 *    enough (stats.largest_free_bytes < rounded size). Returned blocks never overlap.
 *  - allocator_free() coalesces with free neighbours of the same range (never across two
 *    ranges, even adjacent ones, so that a range can always be removed whole).
 *  - alloc, free and lookup are O(log n) in the number of blocks (two treaps: blocks by
 *    address, free blocks by size); range_add / range_remove are O(log n) too.
 *  - Not thread-safe: the caller holds its own lock.
 *
 * Errors are negative errno values:
 *   -EINVAL   bad argument (size 0, misaligned range, overflow), or a pointer inside a
 *             live block that is not its start
 *   -ENOMEM   no free block large enough, or the bookkeeping record could not be allocated
 *   -ENOENT   the address is in no range (unknown pointer / unknown range)
 *   -EALREADY the address lies in free space: a double free (or a pointer never returned)
 *   -EEXIST   range_add: the new range overlaps an existing one
 *   -EBUSY    range_remove: the range still holds live blocks */
#ifndef SALUS_MEMORY_ALLOCATOR_H
#define SALUS_MEMORY_ALLOCATOR_H

#include <stdint.h>

#define ALLOCATOR_DEFAULT_ALIGNMENT_BYTES 256u

typedef struct allocator_s allocator_t;

typedef struct allocator_stats_s {
    uint64_t total_bytes;        /* sum of the ranges' sizes */
    uint64_t in_use_bytes;       /* sum of live blocks, rounded sizes */
    uint64_t requested_bytes;    /* sum of live blocks, sizes as asked */
    uint64_t high_water_bytes;   /* max in_use_bytes since create or the last reset */
    uint64_t free_bytes;         /* total_bytes - in_use_bytes */
    uint64_t largest_free_bytes; /* the largest block allocator_alloc() could return now */
    uint64_t live_blocks;
    uint64_t free_blocks;        /* free extents (fragmentation indicator) */
    uint64_t ranges;
} allocator_stats_t;

typedef struct allocator_block_s {
    uint64_t base;
    uint64_t size_bytes;      /* rounded to the alignment */
    uint64_t requested_bytes; /* as passed to allocator_alloc() */
    uint64_t range_base;      /* the range that holds the block */
} allocator_block_t;

/* alignment_bytes: a power of two, or 0 for the default. Returns NULL on a bad alignment or
 * when out of host memory. */
allocator_t *allocator_create(uint64_t alignment_bytes);
/* Frees the bookkeeping (live blocks included). The device memory is the caller's. NULL ok. */
void allocator_destroy(allocator_t *allocator);
uint64_t allocator_alignment_bytes(const allocator_t *allocator);

/* Adds [base, base + size_bytes) as free space. */
int allocator_range_add(allocator_t *allocator, uint64_t base, uint64_t size_bytes);
/* Removes the range that starts at base; only when it holds no live block (-EBUSY). */
int allocator_range_remove(allocator_t *allocator, uint64_t base);
/* Finds a range without live blocks (a chunk the shim may unmap). 0, or -ENOENT if none. */
int allocator_range_find_empty(const allocator_t *allocator, uint64_t *base_out,
                               uint64_t *size_bytes_out);

/* Allocates size_bytes (> 0); *address_out gets the block's start. */
int allocator_alloc(allocator_t *allocator, uint64_t size_bytes, uint64_t *address_out);
/* Frees the block that starts at address; *size_bytes_out (optional) gets its rounded size. */
int allocator_free(allocator_t *allocator, uint64_t address, uint64_t *size_bytes_out);
/* Finds the live block that contains address (its start or any byte inside it), as
 * cuMemGetAddressRange needs. 0, -ENOENT (not in a live block) . */
int allocator_lookup(const allocator_t *allocator, uint64_t address, allocator_block_t *out);

void allocator_stats(const allocator_t *allocator, allocator_stats_t *out);
/* Restarts the high-water mark at the current in-use bytes (e.g. at an iteration boundary). */
void allocator_reset_high_water(allocator_t *allocator);

/* Checks every internal invariant (tree order, address lists, coalescing, totals). 0 when
 * consistent, -EFAULT otherwise. O(n); for tests and debug builds. */
int allocator_validate(const allocator_t *allocator);

#endif
