/* salusctl ps-servers GROUP --add NODE | --remove NODE: changes the server set of every
 * parameter-server table of the caller's group (the daemon proposes each table's new view in
 * etcd); prints per table "table T: view N -> M servers a,b,c". */
#include "ctl.h"
#include "json.h"

#include <stdio.h>
#include <string.h>

#define PS_SERVERS_TIMEOUT_MS 30000 /* a few etcd round trips per table */

static const char *text(const msgpack_object *map, const char *key, char *out, size_t size)
{
    if (proto_get_str_copy(map, key, out, size) < 0)
        out[0] = 0;
    return out;
}

int verb_ps_servers(ctl_t *ctl, int argc, char **argv)
{
    const char *group = NULL, *node = NULL, *which = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--add") == 0 || strcmp(argv[i], "--remove") == 0) {
            if (which || i + 1 >= argc) {
                which = NULL;
                break;
            }
            which = argv[i] + 2;
            node = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            ctl->json = 1;
        } else if (argv[i][0] == '-' || group) {
            group = NULL;
            break;
        } else {
            group = argv[i];
        }
    }
    if (!group || !which || !node || !node[0]) {
        fprintf(stderr, "salusctl: usage: salusctl ps-servers GROUP --add NODE | --remove NODE\n");
        return EXIT_USAGE;
    }
    salus_client_t c;
    proto_msg_t reply;
    if (ctl_open(ctl, &c) != EXIT_OK)
        return EXIT_DAEMON;
    msgpack_packer *pk = salus_client_begin(&c, "ps_servers", 2);
    proto_pack_kv_str(pk, "group", group);
    proto_pack_kv_str(pk, which, node);
    int timeout = ctl->timeout_ms > PS_SERVERS_TIMEOUT_MS ? ctl->timeout_ms
                                                          : PS_SERVERS_TIMEOUT_MS;
    int rc = ctl_finish(ctl, &c, "ps-servers", &reply, timeout);
    if (rc != EXIT_OK)
        return rc;
    const msgpack_object *tables = proto_get(&reply.body, "tables");
    if (!tables || tables->type != MSGPACK_OBJECT_ARRAY) {
        fprintf(stderr, "salusctl: ps-servers: salusd sent a reply without a tables list\n");
        proto_msg_free(&reply);
        return EXIT_DAEMON;
    }
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    }
    rc = EXIT_OK;
    for (uint32_t i = 0; i < tables->via.array.size; i++) {
        const msgpack_object *t = &tables->via.array.ptr[i];
        char name[72], servers[1100], note[320], error[420];
        uint64_t from = 0, to = 0;
        proto_get_uint(t, "from", &from);
        proto_get_uint(t, "to", &to);
        text(t, "table", name, sizeof(name));
        text(t, "servers", servers, sizeof(servers));
        text(t, "note", note, sizeof(note));
        text(t, "error", error, sizeof(error));
        if (error[0]) {
            fprintf(stderr, "salusctl: ps-servers: table %s: %s\n", name, error);
            rc = EXIT_DAEMON;
        } else if (ctl->json) {
            continue;
        } else if (note[0]) {
            printf("table %s: view %llu unchanged (%s): servers %s\n", name,
                   (unsigned long long)to, note, servers);
        } else {
            printf("table %s: view %llu -> %llu servers %s\n", name, (unsigned long long)from,
                   (unsigned long long)to, servers);
        }
    }
    proto_msg_free(&reply);
    return rc;
}
