/* Ordered tree used inside the sub-allocator (memory/ internal, not a public header).
 *
 * An intrusive treap: the caller embeds an alloc_tree_node_t in its own record, sets
 * key_major / key_minor, and inserts it. Keys compare as the pair (major, minor) and must be
 * unique within one tree. Expected depth is O(log n) whatever the insertion order, because
 * each node gets a pseudo-random priority from the tree's own deterministic generator (no
 * clock, no global state, so two runs with the same operations build the same tree).
 *
 * The allocator keeps two trees over the same blocks: every block by address (key = start,
 * 0) and free blocks by size (key = size, start) for best fit. */
#ifndef SALUS_MEMORY_ALLOC_TREE_INTERNAL_H
#define SALUS_MEMORY_ALLOC_TREE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

typedef struct alloc_tree_node_s {
    struct alloc_tree_node_s *child[2];
    uint64_t key_major;
    uint64_t key_minor;
    uint32_t priority;
} alloc_tree_node_t;

typedef struct alloc_tree_s {
    alloc_tree_node_t *root;
    uint64_t rng_state;
    size_t count;
} alloc_tree_t;

void alloc_tree_init(alloc_tree_t *tree, uint64_t seed);
/* The node's keys must be set and not already present. O(log n) expected. */
void alloc_tree_insert(alloc_tree_t *tree, alloc_tree_node_t *node);
/* The node must be in the tree (found by its keys, removed by identity). */
void alloc_tree_remove(alloc_tree_t *tree, alloc_tree_node_t *node);
alloc_tree_node_t *alloc_tree_find(const alloc_tree_t *tree, uint64_t major, uint64_t minor);
/* Smallest node with key >= (major, minor), or NULL. */
alloc_tree_node_t *alloc_tree_ceil(const alloc_tree_t *tree, uint64_t major, uint64_t minor);
/* Largest node with key <= (major, minor), or NULL. */
alloc_tree_node_t *alloc_tree_floor(const alloc_tree_t *tree, uint64_t major, uint64_t minor);
/* Largest node, or NULL when empty. */
alloc_tree_node_t *alloc_tree_max(const alloc_tree_t *tree);
/* Checks ordering and heap priorities; returns the node count, or -1 when broken. */
long alloc_tree_validate(const alloc_tree_t *tree);

#endif
