/* A table of `count` float32 elements cut into even shards. */
#include "ps_core.h"

#include <errno.h>

int ps_layout_init(ps_layout_t *layout, uint64_t count, uint32_t servers)
{
    if (layout == NULL || count == 0 || servers == 0)
        return -EINVAL;
    uint64_t by_servers = (uint64_t)servers * PS_SHARDS_PER_SERVER;
    uint64_t by_size = count / PS_SHARD_MAX_ELEMS + (count % PS_SHARD_MAX_ELEMS != 0);
    uint64_t shards = by_servers > by_size ? by_servers : by_size;
    if (shards > count)
        shards = count;
    if (shards > UINT32_MAX)
        return -EINVAL; /* a table of more than 2^32 MiB */
    layout->count = count;
    layout->shards = (uint32_t)shards;
    return 0;
}

void ps_layout_shard(const ps_layout_t *layout, uint32_t shard, uint64_t *first, uint64_t *elems)
{
    uint64_t at = layout ? layout->count : 0, len = 0;
    if (layout && shard < layout->shards) {
        uint64_t base = layout->count / layout->shards;
        uint64_t longer = layout->count % layout->shards; /* shards 0 .. longer-1 hold base+1 */
        if (shard < longer) {
            at = shard * (base + 1);
            len = base + 1;
        } else {
            at = longer * (base + 1) + (shard - longer) * base;
            len = base;
        }
    }
    if (first)
        *first = at;
    if (elems)
        *elems = len;
}

uint32_t ps_layout_shard_of(const ps_layout_t *layout, uint64_t index)
{
    if (layout == NULL || layout->shards == 0 || index >= layout->count)
        return layout ? layout->shards : 0; /* no shard */
    uint64_t base = layout->count / layout->shards;
    uint64_t longer = layout->count % layout->shards;
    uint64_t long_part = longer * (base + 1);
    if (index < long_part)
        return (uint32_t)(index / (base + 1));
    return (uint32_t)(longer + (index - long_part) / base);
}
