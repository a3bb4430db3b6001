/* salusctl groups: the groups of ranks (distributed jobs) the caller may see. */
#include "ctl.h"
#include "json.h"

#include <stdio.h>
#include <string.h>

static void print_field(const msgpack_object *map, const char *key, char *out, size_t size)
{
    const msgpack_object *v = proto_get(map, key);
    if (v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        snprintf(out, size, "%llu", (unsigned long long)v->via.u64);
    else if (v && v->type == MSGPACK_OBJECT_STR)
        snprintf(out, size, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    else
        snprintf(out, size, "-");
}

int verb_groups(ctl_t *ctl, int argc, char **argv)
{
    salus_client_t c;
    proto_msg_t reply;
    (void)argc;
    (void)argv;
    if (ctl_open(ctl, &c) != EXIT_OK)
        return EXIT_DAEMON;
    salus_client_begin(&c, "groups", 0);
    int rc = ctl_finish(ctl, &c, "groups", &reply, ctl->timeout_ms);
    if (rc != EXIT_OK)
        return rc;
    const msgpack_object *groups = proto_get(&reply.body, "groups");
    if (!groups || groups->type != MSGPACK_OBJECT_ARRAY) {
        fprintf(stderr, "salusctl: groups: salusd sent a reply without a groups list\n");
        proto_msg_free(&reply);
        return EXIT_DAEMON;
    }
    if (ctl->json) {
        json_print(stdout, groups);
        putchar('\n');
        proto_msg_free(&reply);
        return EXIT_OK;
    }
    printf("%-20s %-6s %5s %-9s %-8s %7s  %s\n", "GROUP", "UID", "WORLD", "SYNC", "STATE",
           "GANG_S", "FAILURE");
    for (uint32_t i = 0; i < groups->via.array.size; i++) {
        const msgpack_object *g = &groups->via.array.ptr[i];
        char name[72], uid[16], world[16], sync[24], state[16], gang[24], failure[192];
        uint64_t gang_ms = 0;
        print_field(g, "name", name, sizeof(name));
        print_field(g, "uid", uid, sizeof(uid));
        print_field(g, "world", world, sizeof(world));
        print_field(g, "sync", sync, sizeof(sync));
        print_field(g, "state", state, sizeof(state));
        print_field(g, "failure", failure, sizeof(failure));
        proto_get_uint(g, "gang_wait_ms", &gang_ms);
        snprintf(gang, sizeof(gang), "%.1f", (double)gang_ms / 1000.0);
        printf("%-20s %-6s %5s %-9s %-8s %7s  %s\n", name, uid, world, sync, state, gang,
               failure);
        const msgpack_object *ranks = proto_get(g, "ranks");
        for (uint32_t k = 0; ranks && ranks->type == MSGPACK_OBJECT_ARRAY &&
                             k < ranks->via.array.size; k++) {
            const msgpack_object *r = &ranks->via.array.ptr[k];
            char rank[16], job[24], pid[16], gpu[16], rstate[24], node[72];
            print_field(r, "rank", rank, sizeof(rank));
            print_field(r, "job_id", job, sizeof(job));
            print_field(r, "pid", pid, sizeof(pid));
            print_field(r, "gpu", gpu, sizeof(gpu));
            print_field(r, "state", rstate, sizeof(rstate));
            print_field(r, "node", node, sizeof(node));
            uint64_t rank_gang_ms = 0;
            proto_get_uint(r, "gang_wait_ms", &rank_gang_ms);
            printf("  rank %-4s node %-10s job %-6s pid %-8s gpu %-3s %-13s gang %.1f s\n", rank,
                   node, job, pid, gpu, rstate, (double)rank_gang_ms / 1000.0);
        }
        /* its parameter-server tables on this daemon (a daemon without them sends none) */
        const msgpack_object *tables = proto_get(g, "tables");
        for (uint32_t k = 0; tables && tables->type == MSGPACK_OBJECT_ARRAY &&
                             k < tables->via.array.size; k++) {
            const msgpack_object *t = &tables->via.array.ptr[k];
            char tname[72], count[24], rule[40], tsync[40], servers[256], epoch[24], here[16],
                shards[16], bytes[24], done[24];
            print_field(t, "name", tname, sizeof(tname));
            print_field(t, "count", count, sizeof(count));
            print_field(t, "rule", rule, sizeof(rule));
            print_field(t, "sync", tsync, sizeof(tsync));
            print_field(t, "servers", servers, sizeof(servers));
            print_field(t, "epoch", epoch, sizeof(epoch));
            print_field(t, "shards", shards, sizeof(shards));
            print_field(t, "shards_here", here, sizeof(here));
            print_field(t, "bytes_here", bytes, sizeof(bytes));
            print_field(t, "done", done, sizeof(done));
            printf("  table %-16s count %-10s rule %-10s sync %-7s epoch %-6s shards %s/%s here, "
                   "%s bytes, done %s, servers %s\n",
                   tname, count, rule, tsync, epoch, here, shards, bytes, done, servers);
            uint64_t failover_ms;
            if (proto_get_uint(t, "failover_ms", &failover_ms) == 0)
                printf("    last fail-over: its updates and reads recovered after %.3f s\n",
                       (double)failover_ms / 1000.0);
            uint64_t view = 0, replicas = 0, primaries = 0, moved = 0, copies = 0, nshards = 0;
            char vservers[256];
            if (proto_get_uint(t, "view", &view) == 0 && view > 0) { /* replicas */
                print_field(t, "view_servers", vservers, sizeof(vservers));
                proto_get_uint(t, "replicas", &replicas);
                proto_get_uint(t, "primaries_here", &primaries);
                proto_get_uint(t, "shards_moved", &moved);
                proto_get_uint(t, "replica_copies", &copies);
                proto_get_uint(t, "shards", &nshards);
                printf("    view %llu: servers %s, %llu replicas, %llu primaries here; its "
                       "changes moved %llu of %llu primaries (%.3f), %llu replica copies\n",
                       (unsigned long long)view, vservers, (unsigned long long)replicas,
                       (unsigned long long)primaries, (unsigned long long)moved,
                       (unsigned long long)nshards,
                       nshards ? (double)moved / (double)nshards : 0.0,
                       (unsigned long long)copies);
            }
        }
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}
