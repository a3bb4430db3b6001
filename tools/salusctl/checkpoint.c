/* salusctl checkpoint GROUP [--period SECONDS] [--timeout SECONDS] [--uid UID]: a checkpoint of
 * the group's parameter-server tables (salusd/ps_ckpt.h), taken by the daemon of this node,
 * which must run ranks of the group; or, with --period, one every SECONDS (0 stops them). */
#include "ctl.h"
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_seconds(const char *flag, const char *text, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!*text || *end || errno || text[0] == '-' || v > max) {
        fprintf(stderr, "salusctl: checkpoint: %s expects 0 .. %llu, got '%s'\n", flag,
                (unsigned long long)max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int verb_checkpoint(ctl_t *ctl, int argc, char **argv)
{
    const char *group = NULL;
    uint64_t period = 0, timeout = 30, uid = 0;
    int has_period = 0, has_uid = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--period") == 0 || strcmp(a, "--timeout") == 0 ||
             strcmp(a, "--uid") == 0) && i + 1 >= argc) {
            fprintf(stderr, "salusctl: checkpoint: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        if (strcmp(a, "--period") == 0) {
            if (parse_seconds(a, argv[++i], 7 * 24 * 3600, &period) < 0)
                return EXIT_USAGE;
            has_period = 1;
        } else if (strcmp(a, "--timeout") == 0) {
            if (parse_seconds(a, argv[++i], 3600, &timeout) < 0 || timeout == 0) {
                fprintf(stderr, "salusctl: checkpoint: --timeout is 1 .. 3600 seconds\n");
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--uid") == 0) {
            if (parse_seconds(a, argv[++i], 0xffffffffull, &uid) < 0)
                return EXIT_USAGE;
            has_uid = 1;
        } else if (strcmp(a, "--json") == 0) {
            ctl->json = 1;
        } else if (a[0] == '-' || group) {
            fprintf(stderr, "usage: salusctl checkpoint GROUP [--period SECONDS] "
                            "[--timeout SECONDS] [--uid UID]\n");
            return EXIT_USAGE;
        } else {
            group = a;
        }
    }
    if (!group) {
        fprintf(stderr, "usage: salusctl checkpoint GROUP [--period SECONDS] [--timeout SECONDS] "
                        "[--uid UID]\n");
        return EXIT_USAGE;
    }
    salus_client_t c;
    proto_msg_t reply;
    if (ctl_open(ctl, &c) != EXIT_OK)
        return EXIT_DAEMON;
    msgpack_packer *pk = salus_client_begin(&c, "ps_checkpoint", 2 + has_period + has_uid);
    proto_pack_kv_str(pk, "group", group);
    proto_pack_kv_uint(pk, "timeout_s", timeout);
    if (has_period)
        proto_pack_kv_uint(pk, "period_s", period);
    if (has_uid)
        proto_pack_kv_uint(pk, "uid", uid);
    /* the daemon answers within its own timeout */
    int rc = ctl_finish(ctl, &c, "checkpoint", &reply, (int)(timeout * 1000) + 10000);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    } else {
        const msgpack_object *lines = proto_get(&reply.body, "lines");
        for (uint32_t i = 0; lines && lines->type == MSGPACK_OBJECT_ARRAY &&
                             i < lines->via.array.size; i++) {
            const msgpack_object *l = &lines->via.array.ptr[i];
            if (l->type == MSGPACK_OBJECT_STR)
                printf("%.*s\n", (int)l->via.str.size, l->via.str.ptr);
        }
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}
