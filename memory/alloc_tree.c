/* Intrusive treap: ordered by (key_major, key_minor), heap-ordered by priority. */
#include "alloc_tree-internal.h"

static int key_compare(uint64_t a_major, uint64_t a_minor, const alloc_tree_node_t *b)
{
    if (a_major != b->key_major)
        return a_major < b->key_major ? -1 : 1;
    if (a_minor != b->key_minor)
        return a_minor < b->key_minor ? -1 : 1;
    return 0;
}

static uint32_t next_priority(alloc_tree_t *tree)
{
    /* xorshift64*: deterministic, good enough to balance a treap. */
    uint64_t x = tree->rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    tree->rng_state = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

void alloc_tree_init(alloc_tree_t *tree, uint64_t seed)
{
    tree->root = NULL;
    tree->count = 0;
    tree->rng_state = seed ? seed : 0x9E3779B97F4A7C15ULL;
}

/* Rotates the child on side `dir` above `root`; returns the new subtree root. */
static alloc_tree_node_t *rotate_up(alloc_tree_node_t *root, int dir)
{
    alloc_tree_node_t *pivot = root->child[dir];
    root->child[dir] = pivot->child[!dir];
    pivot->child[!dir] = root;
    return pivot;
}

static alloc_tree_node_t *insert_at(alloc_tree_node_t *root, alloc_tree_node_t *node)
{
    if (!root)
        return node;
    int dir = key_compare(node->key_major, node->key_minor, root) > 0;
    root->child[dir] = insert_at(root->child[dir], node);
    if (root->child[dir]->priority > root->priority)
        root = rotate_up(root, dir);
    return root;
}

void alloc_tree_insert(alloc_tree_t *tree, alloc_tree_node_t *node)
{
    node->child[0] = node->child[1] = NULL;
    node->priority = next_priority(tree);
    tree->root = insert_at(tree->root, node);
    tree->count++;
}

/* Joins two treaps where every key of `low` is below every key of `high`. */
static alloc_tree_node_t *join(alloc_tree_node_t *low, alloc_tree_node_t *high)
{
    if (!low)
        return high;
    if (!high)
        return low;
    if (low->priority > high->priority) {
        low->child[1] = join(low->child[1], high);
        return low;
    }
    high->child[0] = join(low, high->child[0]);
    return high;
}

static alloc_tree_node_t *remove_at(alloc_tree_node_t *root, alloc_tree_node_t *node, int *found)
{
    if (!root)
        return NULL;
    if (root == node) {
        *found = 1;
        return join(node->child[0], node->child[1]);
    }
    int dir = key_compare(node->key_major, node->key_minor, root) > 0;
    root->child[dir] = remove_at(root->child[dir], node, found);
    return root;
}

void alloc_tree_remove(alloc_tree_t *tree, alloc_tree_node_t *node)
{
    int found = 0;
    tree->root = remove_at(tree->root, node, &found);
    if (found)
        tree->count--;
    node->child[0] = node->child[1] = NULL;
}

alloc_tree_node_t *alloc_tree_find(const alloc_tree_t *tree, uint64_t major, uint64_t minor)
{
    alloc_tree_node_t *node = tree->root;
    while (node) {
        int c = key_compare(major, minor, node);
        if (c == 0)
            return node;
        node = node->child[c > 0];
    }
    return NULL;
}

alloc_tree_node_t *alloc_tree_ceil(const alloc_tree_t *tree, uint64_t major, uint64_t minor)
{
    alloc_tree_node_t *node = tree->root, *best = NULL;
    while (node) {
        int c = key_compare(major, minor, node);
        if (c == 0)
            return node;
        if (c < 0) {
            best = node;
            node = node->child[0];
        } else {
            node = node->child[1];
        }
    }
    return best;
}

alloc_tree_node_t *alloc_tree_floor(const alloc_tree_t *tree, uint64_t major, uint64_t minor)
{
    alloc_tree_node_t *node = tree->root, *best = NULL;
    while (node) {
        int c = key_compare(major, minor, node);
        if (c == 0)
            return node;
        if (c > 0) {
            best = node;
            node = node->child[1];
        } else {
            node = node->child[0];
        }
    }
    return best;
}

alloc_tree_node_t *alloc_tree_max(const alloc_tree_t *tree)
{
    alloc_tree_node_t *node = tree->root;
    while (node && node->child[1])
        node = node->child[1];
    return node;
}

/* Returns the subtree size, or -1 when ordering or heap order is broken. Bounds are exclusive;
 * a NULL bound means unbounded. */
static long validate_at(const alloc_tree_node_t *node, const alloc_tree_node_t *low,
                        const alloc_tree_node_t *high)
{
    if (!node)
        return 0;
    if (low && key_compare(node->key_major, node->key_minor, low) <= 0)
        return -1;
    if (high && key_compare(node->key_major, node->key_minor, high) >= 0)
        return -1;
    for (int dir = 0; dir < 2; dir++)
        if (node->child[dir] && node->child[dir]->priority > node->priority)
            return -1;
    long left = validate_at(node->child[0], low, node);
    long right = validate_at(node->child[1], node, high);
    if (left < 0 || right < 0)
        return -1;
    return left + right + 1;
}

long alloc_tree_validate(const alloc_tree_t *tree)
{
    long n = validate_at(tree->root, NULL, NULL);
    if (n >= 0 && (size_t)n != tree->count)
        return -1;
    return n;
}
