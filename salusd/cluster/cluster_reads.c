/* The cluster's state read without effects: a key under the cluster's prefix, a JSON object
 * from etcd's text, membership and leadership. Apart from cluster.c so that the files above
 * it (group records, gang slots) link in their unit test without the lease, the watch and
 * the links. */
#include "cluster-internal.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

void cluster_key(const cluster_t *cl, char *out, size_t size, const char *part)
{
    snprintf(out, size, "%s/%s", cl->prefix, part);
}

struct json_object *cluster_json_parse(const char *text, size_t len)
{
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)(len > INT_MAX ? 0 : len));
    if (json_tokener_get_error(tok) != json_tokener_success || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

int cluster_is_member(const cluster_t *cl, const char *node)
{
    for (uint32_t i = 0; i < cl->member_count; i++)
        if (strcmp(cl->members[i].node, node) == 0)
            return 1;
    return 0;
}

int cluster_is_leader(const cluster_t *cl)
{
    return !cl->lease_lost && cl->leader[0] && strcmp(cl->leader, cl->node) == 0;
}
