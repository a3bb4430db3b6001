/* What salusctl groups and /metrics show of the parameter servers. */
#include "ps-internal.h"
#include "ps_cluster.h"
#include "ps_fed_table-internal.h"

#include "proto.h"

#include <msgpack.h>
#include <string.h>

static uint64_t table_done(const ps_table_t *t)
{
    if (t->fed) /* federated: the rounds closed */
        return ps_fed_table_round(t);
    uint64_t done = UINT64_MAX;
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++)
        if (t->shards[i] && ps_shard_done(t->shards[i]) < done)
            done = ps_shard_done(t->shards[i]);
    return done;
}

static uint32_t table_shards_here(const ps_table_t *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++)
        n += t->shards[i] != NULL;
    return n;
}

static uint32_t table_primaries_here(const ps_table_t *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; t->owner && i < t->layout.shards; i++)
        n += ps_repl_is_primary(t, i);
    return n;
}

static uint64_t table_bytes_here(const ps_table_t *t)
{
    uint64_t sum = t->agg ? ps_agg_bytes(t->agg) : 0;
    if (t->fed) /* federated: the model and the open round's pushes */
        return ps_fed_table_bytes(t);
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++)
        if (t->shards[i])
            sum += ps_shard_bytes(t->shards[i]);
    return sum;
}

void ps_report_group_tables(salusd_t *d, uint64_t group_id, struct msgpack_packer *pk)
{
    ps_t *ps = ps_of(d);
    uint32_t n = 0;
    for (ps_table_t *t = ps ? ps->tables : NULL; t; t = t->next)
        n += group_id && t->group_id == group_id && t->state == PS_TABLE_READY;
    msgpack_pack_array(pk, n);
    for (ps_table_t *t = ps ? ps->tables : NULL; t; t = t->next) {
        if (!group_id || t->group_id != group_id || t->state != PS_TABLE_READY)
            continue;
        uint64_t done = table_done(t);
        proto_map_t map;
        proto_map_begin(&map, pk);
        proto_map_str(&map, "name", t->name);
        proto_map_uint(&map, "count", t->spec.count);
        proto_map_str(&map, "rule", t->rule_text);
        proto_map_str(&map, "sync", t->sync_text);
        proto_map_str(&map, "servers", t->spec.servers);
        proto_map_uint(&map, "epoch", t->epoch);
        proto_map_uint(&map, "shards", t->layout.shards);
        proto_map_uint(&map, "shards_here", table_shards_here(t));
        proto_map_uint(&map, "bytes_here", table_bytes_here(t));
        /* the least done among the shards served here (nil: none here) */
        proto_map_int_or_nil(&map, "done", (int64_t)done, done != UINT64_MAX);
        /* the view in force here, R, and what its changes moved */
        proto_map_uint(&map, "view", t->view);
        proto_map_str(&map, "view_servers", t->view_servers);
        proto_map_uint(&map, "replicas", t->replicas);
        proto_map_uint(&map, "primaries_here", table_primaries_here(t));
        proto_map_uint(&map, "shards_moved", t->moved);
        proto_map_uint(&map, "replica_copies", t->copies);
        /* the last recovery of its workers' updates and reads after a fail-over (ms; nil:
         * none) */
        proto_map_int_or_nil(&map, "failover_ms", (int64_t)(t->failover_ns / 1000000),
                             t->failovers > 0);
        proto_map_end(&map);
    }
}

int ps_report_sample(const salusd_t *d, ps_sample_t *s)
{
    const ps_t *ps = ps_of(d);
    if (!ps)
        return -1;
    *s = ps->stats;
    s->tables = s->shards = s->bytes = 0;
    for (const ps_table_t *t = ps->tables; t; t = t->next) {
        if (t->state != PS_TABLE_READY)
            continue;
        s->tables++;
        s->shards += table_shards_here(t);
        s->bytes += table_bytes_here(t);
    }
    ps_net_t *net = ps_cluster_net((salusd_t *)d);
    if (net) {
        ps_net_stats_t ns;
        ps_net_get_stats(net, &ns);
        s->net_bytes_sent = ns.bytes_sent;
        s->net_bytes_received = ns.bytes_received;
    }
    return 0;
}
