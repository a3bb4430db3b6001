/* The cluster role's group records in etcd (see cluster.h): each node writes its ranks into
 * P/groups/UID/NAME with compare-and-swap transactions and follows everyone's through the
 * watch; a record with every rank registered releases the local ranks, a failed record
 * fails the local group, a record whose nodes are all over is deleted. */
#include "cluster-internal.h"

#include "groups.h"
#include "jobs.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cluster_group_t *cluster_group_by_key(cluster_t *cl, const char *key)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next)
        if (!g->dropped && strcmp(g->key, key) == 0)
            return g;
    return NULL;
}

cluster_group_t *cluster_group_by_local(cluster_t *cl, uint64_t local_id)
{
    for (cluster_group_t *g = local_id ? cl->groups : NULL; g; g = g->next)
        if (!g->dropped && g->local_id == local_id)
            return g;
    return NULL;
}

static void group_free(cluster_group_t *g)
{
    free(g->written);
    free(g->ranks);
    free(g->local_job);
    free(g->local_reg);
    free(g->ready_nodes);
    free(g->slot_nodes);
    free(g->ssp);
    free(g);
}

/* Forgets g; with a request in flight (its ctx is g) only marks it, and the request's
 * callback drops it. */
static void group_drop(cluster_t *cl, cluster_group_t *g)
{
    if (g->write_busy || g->read_busy) {
        g->dropped = 1;
        return;
    }
    for (cluster_group_t **p = &cl->groups; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            group_free(g);
            return;
        }
}

void cluster_groups_free(cluster_t *cl)
{
    while (cl->groups) {
        cluster_group_t *g = cl->groups;
        cl->groups = g->next;
        group_free(g);
    }
}

/* Forgets the local part of an ended run. */
static void detach_local(cluster_group_t *g)
{
    free(g->local_job);
    free(g->local_reg);
    g->local_job = NULL;
    g->local_reg = NULL;
    g->local_id = 0;
    g->local_ranks = g->local_registered = g->local_admitted = 0;
    g->released = g->over = g->local_failed = g->ready_sent = g->record_gone = 0;
    g->failure_ours_pending = g->conflict = g->await_fresh = 0;
    g->local_failure[0] = 0;
    g->local_world = 0;
    g->last_seq = g->pending_seq = g->pending_target = g->wait_since_ns = 0;
}

/* A group by key, made when unknown (world 0: not read yet). */
static cluster_group_t *group_get(cluster_t *cl, const char *key)
{
    cluster_group_t *g = cluster_group_by_key(cl, key);
    if (g)
        return g;
    g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    snprintf(g->key, sizeof(g->key), "%s", key);
    g->next = cl->groups;
    cl->groups = g;
    return g;
}

static int group_size(cluster_group_t *g, uint32_t world)
{
    if (g->world == world && g->ranks)
        return 0;
    if (g->world && g->world != world)
        return -EINVAL;
    g->ranks = calloc(world, sizeof(*g->ranks));
    if (!g->ranks)
        return -ENOMEM;
    g->world = world;
    return 0;
}

uint32_t cluster_group_nodes(const cluster_group_t *g, const char **nodes, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; g->ranks && i < g->world; i++) {
        const char *node = g->ranks[i].node;
        if (!node[0])
            continue;
        uint32_t j = 0;
        while (j < n && strcmp(nodes[j], node) != 0)
            j++;
        if (j == n && n < max)
            nodes[n++] = node;
    }
    return n;
}

/* ---- the local part's failure ------------------------------------------------------------- */

static void fail_local(cluster_t *cl, cluster_group_t *g, const char *why, uint64_t *counter)
{
    if (!g->local_id || g->local_failed)
        return;
    g->local_failed = 1;
    if (counter)
        (*counter)++;
    if (!g->failed) {
        g->failed = 1;
        g->failure_ours_pending = 1;
        snprintf(g->failure, sizeof(g->failure), "%s", why);
        snprintf(g->local_failure, sizeof(g->local_failure), "%s", why);
    }
    groups_fail(cl->d, g->local_id, why);
}

/* ---- the record: JSON in, JSON out --------------------------------------------------------- */

static int sync_matches(const cluster_group_t *g, const char *sync)
{
    return strcmp(g->sync, sync) == 0;
}

/* Reads a record's value into g. -EPROTO when it is not a record. */
static int parse_record(cluster_t *cl, cluster_group_t *g, const etcd_kv_t *kv)
{
    struct json_object *o = cluster_json_parse(kv->value, kv->value_len), *v, *ranks, *over;
    int rc = -EPROTO;
    if (!o || !json_object_object_get_ex(o, "world", &v) || !json_object_is_type(v, json_type_int))
        goto out;
    int64_t world = json_object_get_int64(v);
    if (world < 1 || world > LAUNCH_MAX_WORLD)
        goto out;
    if (g->local_job && (uint32_t)world != g->local_world) {
        /* another world than this node's ranks were declared with: they fail here, and
         * this node writes nothing into that record */
        char why[200];
        snprintf(why, sizeof(why), "group %s has world %lld on other nodes, not %u", g->name,
                 (long long)world, g->local_world);
        g->conflict = 1;
        fail_local(cl, g, why, &cl->stats.groups_failed_rank);
        rc = -EINVAL;
        goto out;
    }
    if (g->epoch != kv->create_revision) { /* another run of the name: start afresh */
        free(g->ranks);
        g->ranks = NULL;
        g->world = 0;
        g->failed = 0;
        g->failure[0] = 0;
        g->nodes_over_count = 0;
        cluster_slots_forget(cl, g); /* (the last run's slots, targets and readies) */
    }
    if (group_size(g, (uint32_t)world) < 0)
        goto out;
    g->epoch = kv->create_revision;
    g->mod_revision = kv->mod_revision;
    if (json_object_object_get_ex(o, "sync", &v) && json_object_is_type(v, json_type_string)) {
        if (g->sync[0] && !sync_matches(g, json_object_get_string(v)) && g->local_id) {
            char why[200];
            snprintf(why, sizeof(why), "group %s syncs %s on other nodes, not %s", g->name,
                     json_object_get_string(v), g->sync);
            fail_local(cl, g, why, &cl->stats.groups_failed_rank);
        }
        snprintf(g->sync, sizeof(g->sync), "%s", json_object_get_string(v));
    }
    if (json_object_object_get_ex(o, "failed", &v) && json_object_is_type(v, json_type_string)) {
        g->failed = 1;
        snprintf(g->failure, sizeof(g->failure), "%s", json_object_get_string(v));
    }
    memset(g->ranks, 0, g->world * sizeof(*g->ranks));
    if (json_object_object_get_ex(o, "ranks", &ranks) &&
        json_object_is_type(ranks, json_type_object)) {
        json_object_object_foreach(ranks, name, r) {
            char *end = NULL;
            unsigned long i = strtoul(name, &end, 10);
            struct json_object *n, *j, *reg;
            if (!end || *end || i >= g->world || !json_object_is_type(r, json_type_object) ||
                !json_object_object_get_ex(r, "node", &n) ||
                !json_object_is_type(n, json_type_string) ||
                strlen(json_object_get_string(n)) >= LINKS_NODE_BYTES)
                continue;
            snprintf(g->ranks[i].node, sizeof(g->ranks[i].node), "%s", json_object_get_string(n));
            if (json_object_object_get_ex(r, "job", &j))
                g->ranks[i].job = (uint64_t)json_object_get_int64(j);
            if (json_object_object_get_ex(r, "reg", &reg))
                g->ranks[i].registered = json_object_get_boolean(reg);
        }
    }
    g->nodes_over_count = 0;
    if (json_object_object_get_ex(o, "over", &over) && json_object_is_type(over, json_type_object)) {
        json_object_object_foreach(over, node, flag) {
            (void)flag;
            if (g->nodes_over_count < CLUSTER_GROUP_MAX_NODES)
                snprintf(g->nodes_over[g->nodes_over_count++], LINKS_NODE_BYTES, "%s", node);
        }
    }
    rc = 0;
out:
    json_object_put(o);
    return rc;
}

static int node_over(const cluster_group_t *g, const char *node)
{
    for (uint32_t i = 0; i < g->nodes_over_count; i++)
        if (strcmp(g->nodes_over[i], node) == 0)
            return 1;
    return 0;
}

int cluster_group_node_over(const cluster_t *cl, const cluster_group_t *g, const char *node)
{
    return node_over(g, node) || (strcmp(node, cl->node) == 0 && g->local_id && g->over);
}

/* The record as this node wants it: what was read, with this node's ranks, its end and its
 * failure laid over it. NULL on -ENOMEM. */
static char *build_record(cluster_t *cl, const cluster_group_t *g)
{
    struct json_object *o = json_object_new_object(), *ranks = json_object_new_object(),
                       *over = json_object_new_object();
    if (!o || !ranks || !over) {
        json_object_put(o);
        json_object_put(ranks);
        json_object_put(over);
        return NULL;
    }
    json_object_object_add(o, "world", json_object_new_int64(g->world));
    json_object_object_add(o, "sync", json_object_new_string(g->sync));
    json_object_object_add(o, "share", json_object_new_boolean(g->share_gpus));
    /* the record's failure, else this node's own still to be written (a record read since
     * may have been another run's, which cleared g->failed) */
    const char *failure = g->failed ? g->failure
                          : g->failure_ours_pending && g->local_failure[0] ? g->local_failure
                                                                          : NULL;
    if (failure)
        json_object_object_add(o, "failed", json_object_new_string(failure));
    for (uint32_t i = 0; i < g->world; i++) {
        const char *node = g->ranks[i].node;
        uint64_t job = g->ranks[i].job;
        int reg = g->ranks[i].registered;
        if (g->local_job && g->local_job[i]) {
            node = cl->node;
            job = g->local_job[i];
            reg = g->local_reg[i];
        }
        if (!node[0])
            continue;
        struct json_object *r = json_object_new_object();
        char name[16];
        snprintf(name, sizeof(name), "%u", i);
        json_object_object_add(r, "node", json_object_new_string(node));
        json_object_object_add(r, "job", json_object_new_int64((int64_t)job));
        json_object_object_add(r, "reg", json_object_new_boolean(reg));
        json_object_object_add(ranks, name, r);
    }
    json_object_object_add(o, "ranks", ranks);
    for (uint32_t i = 0; i < g->nodes_over_count; i++)
        json_object_object_add(over, g->nodes_over[i], json_object_new_int(1));
    if ((g->over || g->lost_here) && !node_over(g, cl->node))
        json_object_object_add(over, cl->node, json_object_new_int(1));
    json_object_object_add(o, "over", over);
    char *text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return text;
}

/* Whether the record lacks something of this node's. */
static int needs_write(const cluster_t *cl, const cluster_group_t *g)
{
    if (!g->ranks || g->conflict || g->await_fresh)
        return 0;
    if (g->failure_ours_pending || (g->lost_here && !node_over(g, cl->node)))
        return 1;
    if (!g->local_id)
        return 0;
    if (g->over && !node_over(g, cl->node))
        return 1;
    for (uint32_t i = 0; i < g->world; i++)
        if (g->local_job[i] && (strcmp(g->ranks[i].node, cl->node) != 0 ||
                                g->ranks[i].job != g->local_job[i] ||
                                g->ranks[i].registered != g->local_reg[i]))
            return 1;
    return 0;
}

/* ---- the record's consequences here -------------------------------------------------------- */

/* Every rank of the record was submitted somewhere (its node is named). */
static int all_submitted(const cluster_group_t *g)
{
    for (uint32_t i = 0; i < g->world; i++)
        if (!g->ranks[i].node[0])
            return 0;
    return 1;
}

static int all_over(const cluster_t *cl, const cluster_group_t *g)
{
    const char *nodes[CLUSTER_GROUP_MAX_NODES];
    uint32_t n = cluster_group_nodes(g, nodes, CLUSTER_GROUP_MAX_NODES);
    for (uint32_t i = 0; i < n; i++)
        if (!node_over(g, nodes[i]) && (!cl->members_read || cluster_is_member(cl, nodes[i])) &&
            !(strcmp(nodes[i], cl->node) == 0 && g->over))
            return 0;
    return n > 0;
}

static void write_record(cluster_t *cl, cluster_group_t *g);

static void on_deleted(void *ctx, const etcd_result_t *r)
{
    (void)ctx;
    (void)r;
}

static void maybe_ready(cluster_t *cl, cluster_group_t *g);

/* After the record changed (read or written): conflicts, failure, release, clean-up. */
static void consider(cluster_t *cl, cluster_group_t *g)
{
    if (!g->ranks || g->dropped || g->conflict)
        return;
    if (g->await_fresh) /* a new run here waits for the old run's record to go (local_group) */
        goto cleanup;
    /* a local rank whose place another node holds */
    for (uint32_t i = 0; g->local_job && i < g->world; i++)
        if (g->local_job[i] && g->ranks[i].node[0] && strcmp(g->ranks[i].node, cl->node) != 0) {
            char why[200];
            snprintf(why, sizeof(why), "rank %u of group %s is taken on node %s", i, g->name,
                     g->ranks[i].node);
            g->local_job[i] = 0; /* not ours: the record keeps the other node's */
            fail_local(cl, g, why, &cl->stats.groups_failed_rank);
        }
    if (g->failed && g->local_id && !g->local_failed)
        fail_local(cl, g, g->failure, &cl->stats.groups_failed_rank);
    if (!g->failed && g->local_id && !g->released && !g->local_failed && all_submitted(g)) {
        /* every rank submitted: those registered here are admitted, the others are host-only
         * (no GPU, no slot) until they register, then placed as late ranks */
        g->released = 1;
        groups_cluster_complete(cl->d, g->local_id);
        int rc = jobs_group_release(cl->d, g->local_id);
        LOG_INFO("cluster: group %s: every rank of %u submitted: of its %u rank%s here, %u "
                 "registered %s", g->name, g->world, g->local_ranks,
                 g->local_ranks == 1 ? "" : "s", g->local_registered,
                 rc == 0 ? "may be admitted" : rc == -ENOENT ? "(none yet: host-only)"
                                                            : "could not be released");
        /* ranks admitted before the release (survivors of a restart re-attach before this
         * node reads the record that completes the group, and the tick's one ready for them
         * may have come first): ready now, or the leader waits for this node for ever */
        maybe_ready(cl, g);
    }
    if (cluster_is_leader(cl))
        cluster_slots_check(cl, g);
cleanup:
    if (needs_write(cl, g))
        write_record(cl, g);
    else if (!g->write_busy && all_over(cl, g) && g->mod_revision) {
        char key[300];
        cluster_key(cl, key, sizeof(key), "groups/");
        snprintf(key + strlen(key), sizeof(key) - strlen(key), "%s", g->key);
        etcd_txn_t txn = {.key = key, .target = ETCD_CMP_MOD_REVISION, .rev = g->mod_revision,
                          .success = {.kind = ETCD_OP_DELETE}};
        etcd_txn(cl->etcd, &txn, on_deleted, cl);
        if (cl->observer) /* the run's parameter-server rings go with it */
            cl->observer->ring_forget(cl, g->uid, g->name, g->epoch);
    }
}

static void on_written(void *ctx, const etcd_result_t *r)
{
    cluster_group_t *g = ctx;
    cluster_t *cl = g->cl;
    g->write_busy = 0;
    if (g->dropped) {
        group_drop(cl, g);
        return;
    }
    LOG_DEBUG("cluster: group %s: record written: error %d, succeeded %d, revision %lld, %zu kv",
              g->name, r->error, r->succeeded, (long long)r->revision, r->count);
    if (r->error) {
        cl->stats.etcd_errors++;
        LOG_WARN("cluster: group %s: the record could not be written: %s", g->name, r->message);
        g->write_again = 1; /* the tick tries again */
        free(g->written);
        g->written = NULL;
        return;
    }
    char *written = g->written;
    g->written = NULL;
    if (r->succeeded && written) {
        /* the record is now exactly what was written (not what this node knows since: a
         * rank that registered meanwhile is written next, by consider) */
        etcd_kv_t kv = {.value = written, .value_len = strlen(written),
                        .create_revision = g->epoch ? g->epoch : r->revision,
                        .mod_revision = r->revision};
        if (!g->epoch)
            g->epoch = r->revision;
        if (g->written_failed)
            g->failure_ours_pending = 0;
        parse_record(cl, g, &kv);
    } else if (r->count == 1) {
        parse_record(cl, g, &r->kvs[0]);
    } else if (!r->succeeded && g->over) {
        /* deleted meanwhile, the run over here: every node was over (or this one was taken
         * for over) and one deleted it. Nothing is made again (a record of one node's ranks
         * would stay in etcd for ever); the ranks' nodes are kept for the list, as when the
         * delete comes through the watch */
        free(written);
        cluster_slots_forget(cl, g);
        g->record_gone = 1;
        g->failure_ours_pending = 0;
        g->epoch = 0;
        g->mod_revision = 0;
        return;
    } else if (!r->succeeded) { /* deleted meanwhile: make it again */
        g->epoch = 0;
        g->mod_revision = 0;
        if (g->ranks)
            memset(g->ranks, 0, g->world * sizeof(*g->ranks));
        g->nodes_over_count = 0;
    }
    free(written);
    consider(cl, g);
}

static void write_record(cluster_t *cl, cluster_group_t *g)
{
    if (g->record_gone)
        return; /* over everywhere, deleted: nothing to write */
    if (g->write_busy) {
        g->write_again = 1;
        return;
    }
    g->write_again = 0;
    char *value = build_record(cl, g);
    if (!value)
        return;
    char key[300];
    cluster_key(cl, key, sizeof(key), "groups/");
    snprintf(key + strlen(key), sizeof(key) - strlen(key), "%s", g->key);
    etcd_txn_t txn = {.key = key,
                      .target = g->mod_revision ? ETCD_CMP_MOD_REVISION : ETCD_CMP_CREATE_REVISION,
                      .rev = g->mod_revision,
                      .success = {.kind = ETCD_OP_PUT, .value = value, .value_len = strlen(value)},
                      .failure = {.kind = ETCD_OP_GET}};
    g->cl = cl;
    g->write_busy = etcd_txn(cl->etcd, &txn, on_written, g) == 0;
    LOG_DEBUG("cluster: group %s: writing the record (if %s revision %lld): %s", g->name,
              g->mod_revision ? "mod" : "create", (long long)g->mod_revision, value);
    if (g->write_busy) {
        g->written = value; /* what etcd holds once it succeeds */
        g->written_failed = strstr(value, "\"failed\":") != NULL;
    } else {
        g->write_again = 1; /* not queued: the tick tries again */
    }
    if (!g->write_busy)
        free(value);
}

static void on_reread(void *ctx, const etcd_result_t *r)
{
    cluster_group_t *g = ctx;
    cluster_t *cl = g->cl;
    g->read_busy = 0;
    if (g->dropped) {
        group_drop(cl, g);
        return;
    }
    if (r->error || g->write_busy || r->count != 1)
        return;
    if ((int64_t)r->kvs[0].mod_revision > g->mod_revision) {
        LOG_DEBUG("cluster: group %s: the record read again is newer than the watch's (%lld > "
                  "%lld)", g->name, (long long)r->kvs[0].mod_revision, (long long)g->mod_revision);
        if (parse_record(cl, g, &r->kvs[0]) == 0)
            consider(cl, g);
    }
}

void cluster_groups_retry(cluster_t *cl)
{
    /* a group that waits here for the other nodes reads its record again: a change the watch
     * missed (a stream that broke and came back) is seen within a tick */
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (!g->local_id || g->released || g->local_failed || g->over || g->record_gone ||
            g->write_busy || g->read_busy || !g->epoch)
            continue;
        char key[300];
        cluster_key(cl, key, sizeof(key), "groups/");
        snprintf(key + strlen(key), sizeof(key) - strlen(key), "%s", g->key);
        g->cl = cl;
        g->read_busy = etcd_get(cl->etcd, key, 0, on_reread, g) == 0;
    }
    for (cluster_group_t *g = cl->groups, *next; g; g = next) {
        next = g->next;
        groups_desc_t desc;
        char sync[16];
        if (g->record_gone && !g->write_busy && !g->read_busy && groups_describe(cl->d, g->local_id, &desc, sync, sizeof(sync)) < 0)
            group_drop(cl, g); /* groups.c no longer lists it */
        else if (g->write_again && !g->write_busy && !g->record_gone)
            consider(cl, g);
    }
}

/* ---- events from etcd ---------------------------------------------------------------------- */

void cluster_groups_event(cluster_t *cl, const etcd_kv_t *kv, int deleted)
{
    size_t plen = strlen(cl->prefix) + strlen("/groups/");
    char key[sizeof(((cluster_group_t *)0)->key)];
    if (kv->key_len <= plen || kv->key_len - plen >= sizeof(key))
        return;
    memcpy(key, kv->key + plen, kv->key_len - plen);
    key[kv->key_len - plen] = 0;
    cluster_group_t *g = cluster_group_by_key(cl, key);
    if (deleted) {
        if (!g)
            return;
        if (g->await_fresh) { /* the old run's record is gone: the new run's is made now */
            g->await_fresh = 0;
            g->lost_here = 0;
            g->epoch = 0;
            g->mod_revision = 0;
            memset(g->ranks, 0, g->world * sizeof(*g->ranks));
            g->nodes_over_count = 0;
            g->failed = 0;
            g->failure[0] = 0;
            cluster_slots_forget(cl, g);
            write_record(cl, g);
            return;
        }
        if (g->local_id && !g->over && !g->local_failed && g->epoch) {
            fail_local(cl, g, "its cluster record was deleted", &cl->stats.groups_failed_rank);
            return;
        }
        if (!g->local_id) {
            cluster_slots_forget(cl, g);
            group_drop(cl, g);
        } else if (g->over) { /* kept while groups.c lists the group: its ranks' nodes */
            cluster_slots_forget(cl, g);
            g->record_gone = 1;
            g->failure_ours_pending = 0;
            g->epoch = 0;
            g->mod_revision = 0;
        } else {
            g->epoch = 0;
            g->mod_revision = 0;
        }
        return;
    }
    if (!g) {
        g = group_get(cl, key);
        if (!g)
            return;
        const char *name = strchr(key, '/');
        name = name ? name + 1 : key;
        g->uid = (uint32_t)strtoul(key, NULL, 10);
        size_t len = strlen(name);
        memcpy(g->name, name, len < sizeof(g->name) ? len + 1 : 0);
        if (len >= sizeof(g->name)) { /* no group of ours has such a name */
            group_drop(cl, g);
            return;
        }
    }
    if (g->local_id && g->over &&
        (g->record_gone || (g->epoch && g->epoch != kv->create_revision))) {
        /* a new run of the name while the old one is still kept here: forget the old */
        detach_local(g);
    }
    LOG_DEBUG("cluster: group %s: record at revision %lld: %.*s", g->name,
              (long long)kv->mod_revision, (int)kv->value_len, kv->value);
    if (parse_record(cl, g, kv) < 0) {
        LOG_WARN("cluster: %.*s is not a group record: ignored", (int)kv->key_len, kv->key);
        return;
    }
    consider(cl, g);
}

void cluster_groups_node_gone(cluster_t *cl, const char *node, const char *how)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (g->dropped || g->await_fresh || g->conflict)
            continue;
        int there = 0;
        for (uint32_t i = 0; g->ranks && i < g->world; i++)
            there |= strcmp(g->ranks[i].node, node) == 0;
        if (!there || g->failed || node_over(g, node))
            continue;
        char why[200];
        snprintf(why, sizeof(why), "node %s %s", node, how);
        g->failed = 1;
        snprintf(g->failure, sizeof(g->failure), "%s", why);
        snprintf(g->local_failure, sizeof(g->local_failure), "%s", why);
        if (g->local_id && !g->local_failed) {
            g->local_failed = 1;
            cl->stats.groups_failed_node++;
            groups_fail(cl->d, g->local_id, why);
        }
        g->failure_ours_pending = 1;
        write_record(cl, g);
    }
}

void cluster_groups_check_returns(cluster_t *cl)
{
    /* after a restart: a rank the record places here that did not come back (its process
     * ended while salusd was away, or missed the grace period) fails its group */
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (g->dropped || !g->ranks || node_over(g, cl->node))
            continue;
        for (uint32_t i = 0; i < g->world; i++) {
            if (strcmp(g->ranks[i].node, cl->node) != 0 || !g->ranks[i].registered ||
                (g->local_job && g->local_job[i] == g->ranks[i].job))
                continue;
            if (!g->local_id) { /* none of the run is here any more: this node is over */
                g->lost_here = 1;
                if (g->failed) {
                    write_record(cl, g);
                    break;
                }
            }
            if (g->failed)
                break;
            char why[200];
            snprintf(why, sizeof(why), "rank %u on node %s did not come back after salusd "
                     "restarted there", i, cl->node);
            LOG_WARN("cluster: group %s: %s: the group fails", g->name, why);
            g->failed = 1;
            snprintf(g->failure, sizeof(g->failure), "%s", why);
            snprintf(g->local_failure, sizeof(g->local_failure), "%s", why);
            g->failure_ours_pending = 1;
            if (g->local_id && !g->local_failed) {
                g->local_failed = 1;
                cl->stats.groups_failed_rank++;
                groups_fail(cl->d, g->local_id, why);
            }
            write_record(cl, g);
            break;
        }
    }
}

void cluster_groups_check_members(cluster_t *cl)
{
    /* nodes named in records that are not members (they left while this node was away) */
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        const char *nodes[CLUSTER_GROUP_MAX_NODES];
        uint32_t n = g->dropped ? 0 : cluster_group_nodes(g, nodes, CLUSTER_GROUP_MAX_NODES);
        for (uint32_t i = 0; i < n; i++)
            if (!cluster_is_member(cl, nodes[i]) && !node_over(g, nodes[i])) {
                char node[LINKS_NODE_BYTES];
                snprintf(node, sizeof(node), "%s", nodes[i]);
                cluster_groups_node_gone(cl, node, "is not in the cluster (its lease expired)");
                break;
            }
    }
}

/* Whether every local rank that registered is admitted (host-only ranks, not registered,
 * take no slot: a node of host-only ranks only is never ready, and gets no slot). */
static int local_all_admitted(const cluster_group_t *g)
{
    return g->local_registered && g->local_admitted >= g->local_registered;
}

void cluster_groups_ready_all(cluster_t *cl)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next)
        if (!g->dropped && g->local_id && g->released && !g->ready_sent && !g->local_failed &&
            !g->over && local_all_admitted(g)) {
            g->ready_sent = 1;
            cluster_slots_ready(cl, g);
        }
}

/* Tells the leader this node is ready for g's slots once its registered ranks are admitted
 * (not while survivors of a restart may still come back: the tick does it then). */
static void maybe_ready(cluster_t *cl, cluster_group_t *g)
{
    if (local_all_admitted(g) && !g->ready_sent && !g->local_failed && !g->over &&
        !jobs_admission_held(cl->d)) {
        g->ready_sent = 1;
        cluster_slots_ready(cl, g);
    }
}

void cluster_groups_lease_lost(cluster_t *cl)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (!g->local_id || g->local_failed || g->over)
            continue;
        char why[200];
        snprintf(why, sizeof(why), "node %s lost etcd (%s): its lease expired", cl->node,
                 etcd_endpoints(cl->etcd));
        fail_local(cl, g, why, &cl->stats.groups_failed_etcd);
    }
}

/* ---- hooks from the daemon ----------------------------------------------------------------- */

static cluster_group_t *local_group(cluster_t *cl, uint64_t group_id)
{
    cluster_group_t *g = cluster_group_by_local(cl, group_id);
    if (g)
        return g;
    groups_desc_t desc;
    char sync[16], key[sizeof(g->key)];
    if (groups_describe(cl->d, group_id, &desc, sync, sizeof(sync)) < 0)
        return NULL;
    snprintf(key, sizeof(key), "%u/%s", (unsigned)desc.uid, desc.name);
    g = group_get(cl, key);
    if (!g)
        return NULL;
    if (g->local_id && g->local_id != group_id)
        detach_local(g); /* the record's former local run is over; this is a new one */
    if (g->world && g->world != desc.world) {
        LOG_WARN("cluster: group %s has world %u on other nodes, not %u", desc.name, g->world,
                 desc.world);
        return NULL;
    }
    if (!g->ranks && group_size(g, desc.world) < 0)
        return NULL;
    if (!g->local_job) {
        g->local_job = calloc(desc.world, sizeof(*g->local_job));
        g->local_reg = calloc(desc.world, sizeof(*g->local_reg));
        if (!g->local_job || !g->local_reg)
            return NULL;
        g->local_world = desc.world;
        /* the record of a former run of the name (failed, or over here) is not this run's:
         * it waits until that record is deleted (every node over), then makes its own */
        if (g->epoch && (g->failed || node_over(g, cl->node)))
            g->await_fresh = 1;
    }
    g->local_id = group_id;
    g->uid = (uint32_t)desc.uid;
    snprintf(g->name, sizeof(g->name), "%s", desc.name);
    if (!g->sync[0])
        snprintf(g->sync, sizeof(g->sync), "%s", desc.sync);
    else if (strcmp(g->sync, desc.sync) != 0) {
        char why[200];
        snprintf(why, sizeof(why), "group %s syncs %s on other nodes, not %s", desc.name,
                 g->sync, desc.sync);
        fail_local(cl, g, why, &cl->stats.groups_failed_rank);
    }
    g->share_gpus = desc.share_gpus;
    return g;
}

void cluster_rank_submitted(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id)
{
    cluster_t *cl = cluster_of(d);
    if (!cl)
        return;
    cluster_group_t *g = local_group(cl, group_id);
    if (!g || rank >= g->world) {
        groups_fail(d, group_id, "the cluster cannot record this group (see salusd's log)");
        return;
    }
    if (cl->lease_lost) {
        char why[200];
        snprintf(why, sizeof(why), "node %s is not in the cluster now (etcd %s)", cl->node,
                 etcd_endpoints(cl->etcd));
        fail_local(cl, g, why, &cl->stats.groups_failed_etcd);
        return;
    }
    g->local_job[rank] = job_id;
    g->local_ranks++;
    write_record(cl, g);
}

void cluster_rank_registered(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g || rank >= g->world || g->local_job[rank] != job_id)
        return;
    if (!g->local_reg[rank]) {
        g->local_reg[rank] = 1;
        g->local_registered++;
    }
    if (g->released) /* registered after the release (a late rank, or a restart) */
        jobs_group_release(d, g->local_id);
    write_record(cl, g);
    /* (a late rank may have been admitted before this event came: ready now) */
    g = cluster_group_by_local(cl, group_id);
    if (g)
        maybe_ready(cl, g);
}

void cluster_rank_admitted(salusd_t *d, uint64_t group_id)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g)
        return;
    g->local_admitted++;
    maybe_ready(cl, g);
    cluster_ssp_update(cl, g);
}

void cluster_group_failed(salusd_t *d, uint64_t group_id, const char *failure)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g || g->local_failed)
        return;
    g->local_failed = 1;
    cl->stats.groups_failed_rank++;
    if (!g->failed) {
        g->failed = 1;
        snprintf(g->failure, sizeof(g->failure), "%s on node %s", failure, cl->node);
        snprintf(g->local_failure, sizeof(g->local_failure), "%s", g->failure);
        g->failure_ours_pending = 1;
    }
    write_record(cl, g);
}

void cluster_group_over(salusd_t *d, uint64_t group_id)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g || g->over)
        return;
    g->over = 1;
    cluster_ssp_over(cl, g);
    write_record(cl, g);
}

const char *cluster_rank_node(const salusd_t *d, uint64_t group_id, uint32_t rank)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g || !g->ranks || rank >= g->world)
        return NULL;
    if (g->local_job && g->local_job[rank])
        return cl->node;
    return g->ranks[rank].node[0] ? g->ranks[rank].node : NULL;
}

const jobs_observer_t cluster_jobs_observer = {
    .rank_submitted = cluster_rank_submitted,
    .rank_registered = cluster_rank_registered,
    .rank_admitted = cluster_rank_admitted,
    .group_failed = cluster_group_failed,
    .group_over = cluster_group_over,
    .slot_done = cluster_slot_done,
    .rank_iterations = cluster_ssp_iterations,
    .rank_node = cluster_rank_node,
};
