/* The cluster role: membership, the node's lease, the leader, the links (see cluster.h). */
#include "cluster-internal.h"

#include "jobs.h"
#include "log.h"
#include "ps_net_auth.h"
#include "state.h"

#include <errno.h>
#include <event2/event.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TICK_MS 250
#define START_WAIT_S 8

/* ---- the lease ----------------------------------------------------------------------------- */

static void lease_file_write(cluster_t *cl)
{
    if (!cl->lease_file[0])
        return;
    char tmp[sizeof(cl->lease_file) + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cl->lease_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%lld\n", (long long)cl->lease_id) < 0 || fclose(f) != 0 ||
        rename(tmp, cl->lease_file) < 0)
        LOG_WARN("cluster: cannot keep the lease id in %s: %s", cl->lease_file, strerror(errno));
}

static int64_t lease_file_read(const cluster_t *cl)
{
    long long id = 0;
    FILE *f = cl->lease_file[0] ? fopen(cl->lease_file, "r") : NULL;
    if (!f)
        return 0;
    if (fscanf(f, "%lld", &id) != 1 || id <= 0)
        id = 0;
    fclose(f);
    return id;
}

static void put_member(cluster_t *cl);
static void campaign(cluster_t *cl);
static void on_old_renewed(void *ctx, const etcd_result_t *r);
static void watch_links(cluster_t *cl, uint64_t now, uint64_t ttl_ns);
static void relist(cluster_t *cl);

/* When etcd confirmed the lease from: the send of the request it answered (its TTL ran from no
 * earlier), so that this node's own clock says "expired" no later than etcd does. */
static uint64_t lease_confirmed_at(const cluster_t *cl)
{
    uint64_t now = salusd_now_ns();
    return cl->lease_request_ns && cl->lease_request_ns <= now ? cl->lease_request_ns : now;
}

/* The lease ended (or may have): out of the cluster until a new one; a leader stops leading
 * at once (a successor may take P/leader as soon as etcd drops it), and its groups fail. */
static void lose_lease(cluster_t *cl)
{
    if (cl->lease_lost)
        return;
    if (cluster_is_leader(cl))
        LOG_WARN("cluster: node %s no longer leads (its lease ended): it grants no slot of "
                 "leader revision %lld any more", cl->node, (long long)cl->leader_epoch);
    cl->lease_lost = 1;
    cl->relist = 1; /* when back: read everything again (relist) */
    cl->leader[0] = 0;
    cluster_groups_lease_lost(cl);
}

static void start_failed(cluster_t *cl, const char *fmt, const char *what)
{
    if (cl->start_done)
        return;
    cl->start_done = 1;
    cl->start_error = 1;
    snprintf(cl->start_err, sizeof(cl->start_err), fmt, what);
}

static void on_granted(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    if (r->error || r->lease_id <= 0) {
        cl->stats.etcd_errors++;
        if (!cl->start_done)
            start_failed(cl, "%s", r->error ? r->message : "etcd granted no lease");
        else
            LOG_WARN("cluster: no new lease: %s", r->error ? r->message : "none granted");
        cl->keepalive_busy = 0;
        return;
    }
    cl->lease_id = r->lease_id;
    cl->lease_ok_ns = lease_confirmed_at(cl);
    cl->lease_lost = 0;
    cl->keepalive_busy = 0;
    cl->member_rev = r->revision;
    lease_file_write(cl);
    LOG_INFO("cluster: node %s holds lease %llx (TTL %lld s)", cl->node,
             (unsigned long long)cl->lease_id, (long long)cl->ttl_s);
    put_member(cl);
}

static void grant(cluster_t *cl)
{
    cl->keepalive_busy = 1;
    cl->lease_request_ns = salusd_now_ns();
    if (etcd_lease_grant(cl->etcd, cl->ttl_s, on_granted, cl) < 0)
        cl->keepalive_busy = 0;
}

/* The lease kept in the state directory, if etcd still has it: a restart within the TTL. */
static void on_old_lease(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    if (r->error) {
        cl->keepalive_busy = 0;
        start_failed(cl, "%s", r->message);
        return;
    }
    if (r->ttl > 0) {
        /* renewed at once: what was left of it may be less than a keepalive period */
        LOG_INFO("cluster: node %s keeps lease %llx across its restart (%lld s were left)",
                 cl->node, (unsigned long long)cl->lease_id, (long long)r->ttl);
        cl->lease_request_ns = salusd_now_ns();
        if (etcd_lease_keepalive(cl->etcd, cl->lease_id, on_old_renewed, cl) < 0)
            start_failed(cl, "%s", "out of memory");
        return;
    }
    LOG_INFO("cluster: the lease of the previous start has expired: a new one");
    grant(cl);
}

static void on_old_renewed(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    cl->keepalive_busy = 0;
    if (r->error) {
        start_failed(cl, "%s", r->message);
        return;
    }
    if (r->ttl <= 0) {
        LOG_INFO("cluster: the lease of the previous start expired just now: a new one");
        grant(cl);
        return;
    }
    cl->lease_ok_ns = lease_confirmed_at(cl);
    put_member(cl);
}

static void on_keepalive(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    cl->keepalive_busy = 0;
    if (r->error) {
        cl->stats.etcd_errors++;
        LOG_DEBUG("cluster: keepalive: %s", r->message);
        return;
    }
    if (r->ttl <= 0) {
        LOG_WARN("cluster: etcd says the lease of node %s has expired", cl->node);
        lose_lease(cl);
        grant(cl);
        return;
    }
    cl->lease_ok_ns = lease_confirmed_at(cl);
}

static void on_member_put(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    cl->put_busy = 0;
    if (r->error) {
        cl->stats.etcd_errors++;
        if (cl->start_done)
            LOG_WARN("cluster: node %s could not list itself (%s): trying again", cl->node,
                     r->message);
        start_failed(cl, "%s", r->message);
        return;
    }
    cl->member_ok = 1;
    cl->member_rev = r->revision;
    if (!cl->start_done) {
        cl->start_done = 1; /* the listing and the watch follow (cluster_start) */
    } else if (cl->relist) {
        relist(cl);
        return;
    }
    campaign(cl);
}

static void put_member(cluster_t *cl)
{
    char key[256], value[256];
    cluster_key(cl, key, sizeof(key), "members/");
    snprintf(key + strlen(key), sizeof(key) - strlen(key), "%s", cl->node);
    snprintf(value, sizeof(value), "{\"addr\":\"%s\",\"pid\":%d}", cl->d->config.cluster_listen,
             (int)getpid());
    cl->member_ok = 0;
    cl->put_busy = etcd_put(cl->etcd, key, value, strlen(value), cl->lease_id, on_member_put,
                            cl) == 0;
    if (!cl->put_busy)
        start_failed(cl, "%s", "out of memory");
}

/* ---- the leader ---------------------------------------------------------------------------- */

static void on_campaign(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    cl->campaign_busy = 0;
    if (r->error)
        cl->stats.etcd_errors++;
    else if (r->succeeded)
        LOG_INFO("cluster: node %s leads the cluster's gang slots", cl->node);
}

/* Takes P/leader when nobody holds it (a transaction: only when absent). */
static void campaign(cluster_t *cl)
{
    if (cl->campaign_busy || cl->leader[0] || cl->lease_lost || !cl->lease_id)
        return;
    char key[256], value[128];
    cluster_key(cl, key, sizeof(key), "leader");
    snprintf(value, sizeof(value), "{\"node\":\"%s\"}", cl->node);
    etcd_txn_t txn = {.key = key, .target = ETCD_CMP_CREATE_REVISION, .rev = 0,
                      .success = {.kind = ETCD_OP_PUT, .value = value,
                                  .value_len = strlen(value), .lease = cl->lease_id},
                      .failure = {.kind = ETCD_OP_GET}};
    cl->campaign_busy = etcd_txn(cl->etcd, &txn, on_campaign, cl) == 0;
}

static void leader_event(cluster_t *cl, const etcd_kv_t *kv, int deleted)
{
    char was[LINKS_NODE_BYTES];
    snprintf(was, sizeof(was), "%s", cl->leader);
    if (deleted) {
        cl->leader[0] = 0;
        cl->leader_epoch = 0;
    } else {
        struct json_object *o = cluster_json_parse(kv->value, kv->value_len), *n;
        if (!o || !json_object_object_get_ex(o, "node", &n) ||
            !json_object_is_type(n, json_type_string)) {
            LOG_WARN("cluster: the leader key holds no node: ignored");
            json_object_put(o);
            return;
        }
        snprintf(cl->leader, sizeof(cl->leader), "%s", json_object_get_string(n));
        cl->leader_epoch = kv->create_revision;
        if (kv->create_revision > cl->newest_epoch)
            cl->newest_epoch = kv->create_revision; /* slots of older terms are refused */
        json_object_put(o);
        if (cl->counter_epoch != cl->leader_epoch) { /* a new term: its slots count afresh */
            cl->counter_epoch = cl->leader_epoch;
            cl->slot_counter = 0;
        }
    }
    if (strcmp(was, cl->leader) != 0) {
        LOG_INFO("cluster: leader %s%s", cl->leader[0] ? cl->leader : "(none)",
                 cluster_is_leader(cl) ? " (this node)" : "");
        if (cl->leader[0])
            cluster_slots_resync(cl);
        else
            campaign(cl);
    }
}

/* ---- members ------------------------------------------------------------------------------- */

static void member_event(cluster_t *cl, const char *node, const etcd_kv_t *kv, int deleted)
{
    uint32_t i = 0;
    while (i < cl->member_count && strcmp(cl->members[i].node, node) != 0)
        i++;
    if (deleted) {
        if (strcmp(node, cl->node) == 0 && kv->mod_revision &&
            kv->mod_revision <= cl->member_rev) {
            /* the key of a lease this node has already replaced (a watch that delivers the
             * expiry late, after the new grant): not a loss of the new lease */
            LOG_INFO("cluster: node %s: the delete of its former member key (revision %lld, "
                     "not after %lld) is stale: ignored", node, (long long)kv->mod_revision,
                     (long long)cl->member_rev);
            return;
        }
        if (i == cl->member_count)
            return;
        cl->members[i] = cl->members[--cl->member_count];
        LOG_WARN("cluster: node %s left the cluster (its lease ended)", node);
        if (strcmp(node, cl->node) == 0) {
            lose_lease(cl);
            return;
        }
        links_forget(cl->links, node);
        if (cl->observer)
            cl->observer->node_gone(cl, node, "left the cluster (its lease expired)");
        cluster_groups_node_gone(cl, node, "left the cluster (its lease expired)");
        return;
    }
    struct json_object *o = cluster_json_parse(kv->value, kv->value_len), *a;
    if (!o || !json_object_object_get_ex(o, "addr", &a) ||
        !json_object_is_type(a, json_type_string) || strlen(node) >= LINKS_NODE_BYTES) {
        LOG_WARN("cluster: member %s: a record without an address: ignored", node);
        json_object_put(o);
        return;
    }
    if (i == cl->member_count) {
        if (cl->member_count == CLUSTER_MAX_MEMBERS) {
            LOG_WARN("cluster: more than %d members: %s ignored", CLUSTER_MAX_MEMBERS, node);
            json_object_put(o);
            return;
        }
        cl->member_count++;
        LOG_INFO("cluster: node %s is a member (%s)", node, json_object_get_string(a));
    }
    snprintf(cl->members[i].node, sizeof(cl->members[i].node), "%s", node);
    snprintf(cl->members[i].addr, sizeof(cl->members[i].addr), "%s", json_object_get_string(a));
    if (strcmp(node, cl->node) != 0 && links_connect(cl->links, node, cl->members[i].addr) < 0)
        LOG_WARN("cluster: member %s: bad address %s", node, cl->members[i].addr);
    json_object_put(o);
}

/* One key under the prefix, put or deleted. */
static void key_event(cluster_t *cl, const etcd_kv_t *kv, int deleted)
{
    size_t plen = strlen(cl->prefix);
    if (kv->key_len <= plen + 1 || memcmp(kv->key, cl->prefix, plen) != 0 || kv->key[plen] != '/')
        return;
    const char *rest = kv->key + plen + 1;
    size_t rest_len = kv->key_len - plen - 1;
    char sub[300];
    if (rest_len >= sizeof(sub))
        return;
    memcpy(sub, rest, rest_len);
    sub[rest_len] = 0;
    if (strncmp(sub, "members/", 8) == 0)
        member_event(cl, sub + 8, kv, deleted);
    else if (strcmp(sub, "leader") == 0)
        leader_event(cl, kv, deleted);
    else if (strncmp(sub, "groups/", 7) == 0)
        cluster_groups_event(cl, kv, deleted);
}

static void on_watch(void *ctx, const etcd_event_t *events, size_t count, int64_t revision,
                     int error, const char *message)
{
    cluster_t *cl = ctx;
    (void)revision;
    if (error == -ERANGE) { /* compacted past what this node has seen: read it all again */
        LOG_WARN("cluster: the watch fell behind etcd's compaction (%s): reading again", message);
        relist(cl);
        return;
    }
    if (error) {
        cl->stats.etcd_errors++;
        LOG_DEBUG("cluster: watch: %s", message);
        return;
    }
    for (size_t i = 0; i < count; i++)
        key_event(cl, &events[i].kv, events[i].kind == ETCD_EVENT_DELETE);
}

static void on_listing(void *ctx, const etcd_result_t *r)
{
    cluster_t *cl = ctx;
    cl->listing_busy = 0;
    if (r->error) {
        cl->stats.etcd_errors++;
        if (cl->start_done) {
            LOG_WARN("cluster: reading the cluster again failed (%s): trying again", r->message);
            cl->relist = 1; /* the tick does (no watch meanwhile) */
        }
        start_failed(cl, "%s", r->message);
        return;
    }
    /* members and the leader first (the listing is sorted: groups/ comes before them), so
     * that the groups are judged against the members */
    char groups[256];
    cluster_key(cl, groups, sizeof(groups), "groups/");
    size_t glen = strlen(groups);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < r->count; i++) {
            int is_group = r->kvs[i].key_len >= glen && memcmp(r->kvs[i].key, groups, glen) == 0;
            if (is_group == pass)
                key_event(cl, &r->kvs[i], 0);
        }
        cl->members_read = 1;
    }
    cluster_groups_check_members(cl);
    char prefix[256];
    cluster_key(cl, prefix, sizeof(prefix), "");
    cl->w_members = etcd_watch(cl->etcd, prefix, r->revision + 1, on_watch, cl);
    if (!cl->w_members)
        start_failed(cl, "%s", "out of memory");
    campaign(cl);
}

/* Back in the cluster after the lease was lost (etcd away, or a new etcd): what this node
 * knew may be stale (members gone, another leader, an etcd whose revisions started again):
 * the watch stops, everything is read again, the watch starts after that listing. */
static void relist(cluster_t *cl)
{
    cl->relist = 0;
    etcd_watch_cancel(cl->w_members);
    cl->w_members = NULL;
    for (uint32_t i = 0; i < cl->member_count; i++) /* the listing dials those still there */
        if (strcmp(cl->members[i].node, cl->node) != 0)
            links_forget(cl->links, cl->members[i].node);
    cl->member_count = 0;
    cl->leader[0] = 0;
    cl->newest_epoch = 0; /* (a new etcd counts its revisions afresh): from the listing */
    cl->members_read = 0;
    cl->listing_busy = 1;
    char prefix[256];
    cluster_key(cl, prefix, sizeof(prefix), "");
    LOG_INFO("cluster: node %s is back in the cluster (lease %llx): reading it again", cl->node,
             (unsigned long long)cl->lease_id);
    if (etcd_get(cl->etcd, prefix, 1, on_listing, cl) < 0) {
        cl->listing_busy = 0;
        cl->relist = 1;
    }
}

/* ---- the tick: keepalive, lease loss ----------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_t *cl = arg;
    uint64_t now = salusd_now_ns();
    uint64_t ttl_ns = (uint64_t)cl->ttl_s * 1000000000ull;
    if (!cl->lease_lost && cl->lease_ok_ns && now - cl->lease_ok_ns >= ttl_ns) {
        LOG_WARN("cluster: etcd (%s) not reached for %lld s: the lease of node %s has "
                 "expired; its cluster groups fail", etcd_endpoints(cl->etcd),
                 (long long)cl->ttl_s, cl->node);
        lose_lease(cl);
    }
    if (!cl->lease_lost && cl->start_done) {
        if (!cl->member_ok && !cl->put_busy && cl->lease_id)
            put_member(cl); /* a put that failed */
        else if (cl->member_ok && cl->relist && !cl->listing_busy)
            relist(cl); /* a read again that failed */
        watch_links(cl, now, ttl_ns);
        if (!cl->returns_checked && !jobs_admission_held(cl->d)) {
            /* the survivors of a restart are back (or will not be): ready where all are */
            cl->returns_checked = 1;
            cluster_groups_check_returns(cl);
            cluster_groups_ready_all(cl);
        }
    }
    if (!cl->lease_lost && now - cl->last_resync_ns >= 1000000000ull) {
        /* a ready or a slot lost on the way (a link that broke, a record the leader had
         * not read yet) is said again; the leader takes it once */
        cl->last_resync_ns = now;
        cluster_slots_resync(cl);
        cluster_ssp_resync(cl);
        cluster_groups_retry(cl);
        if (cl->d->config.wait_log_s > 0) /* a wait for a slot that does not end says why */
            cluster_slots_watch(cl, now, (uint64_t)cl->d->config.wait_log_s * 1000000000ull);
    }
    if (cl->keepalive_busy)
        return;
    if (cl->lease_lost) {
        if (now - cl->last_grant_ns >= ttl_ns / 3) {
            cl->last_grant_ns = now;
            grant(cl); /* back in once etcd answers */
        }
        return;
    }
    if (now - cl->lease_ok_ns >= ttl_ns / 3) {
        cl->keepalive_busy = 1;
        cl->lease_request_ns = now;
        if (etcd_lease_keepalive(cl->etcd, cl->lease_id, on_keepalive, cl) < 0)
            cl->keepalive_busy = 0;
    }
    if (!cl->leader[0])
        campaign(cl);
}

/* A member whose link stays down longer than the lease TTL (etcd still listing it: a cut
 * between the daemons only) is treated as gone: its groups fail, as for an expired lease. */
static void watch_links(cluster_t *cl, uint64_t now, uint64_t ttl_ns)
{
    for (uint32_t i = 0; i < cl->member_count; i++) {
        cluster_member_t *m = &cl->members[i];
        if (strcmp(m->node, cl->node) == 0 || links_is_up(cl->links, m->node)) {
            m->down_since = 0;
            m->declared_gone = 0;
            continue;
        }
        if (!m->down_since)
            m->down_since = now;
        else if (!m->declared_gone && now - m->down_since >= ttl_ns) {
            m->declared_gone = 1;
            LOG_WARN("cluster: no link to %s for %lld s: its groups fail", m->node,
                     (long long)cl->ttl_s);
            if (cl->observer)
                cl->observer->node_gone(cl, m->node, "no link for longer than the lease TTL");
            cluster_groups_node_gone(cl, m->node, "cannot be reached over its link (down "
                                     "longer than the lease TTL)");
        }
    }
}

/* ---- the links' hooks ---------------------------------------------------------------------- */

static int hook_is_member(void *ctx, const char *node)
{
    return cluster_is_member(ctx, node);
}

static void hook_up(void *ctx, const char *node)
{
    cluster_t *cl = ctx;
    LOG_INFO("cluster: link to %s is up", node);
    if (strcmp(node, cl->leader) == 0)
        cluster_slots_resync(cl);
    cluster_slots_link_up(cl, node);
    if (cl->observer)
        cl->observer->link_up(cl, node);
}

static void hook_down(void *ctx, const char *node, const char *why)
{
    (void)ctx;
    LOG_WARN("cluster: link to %s is down: %s", node, why);
}

static void hook_message(void *ctx, const char *node, const proto_msg_t *msg)
{
    cluster_t *cl = ctx;
    cl->stats.messages_received++;
    if (strncmp(msg->op, "ps_", 3) == 0) {
        if (cl->observer)
            cl->observer->message(cl, node, msg);
        return;
    }
    if (strcmp(msg->op, "ssp") == 0) {
        cluster_ssp_message(cl, node, msg);
        return;
    }
    cluster_slots_message(cl, node, msg);
}

static const links_hooks_t hooks = {
    .is_member = hook_is_member,
    .on_up = hook_up,
    .on_down = hook_down,
    .on_message = hook_message,
};

/* ---- start, stop --------------------------------------------------------------------------- */

static void set_lease_file(cluster_t *cl)
{
    char dir[PATH_MAX];
    if (cl->d->config.state_dir[0])
        snprintf(dir, sizeof(dir), "%s", cl->d->config.state_dir);
    else if (state_default_dir(dir, sizeof(dir)) < 0)
        return;
    snprintf(cl->lease_file, sizeof(cl->lease_file), "%s/cluster-%s.lease", dir, cl->node);
}

void cluster_observe(cluster_t *cl, const cluster_observer_t *obs, void *state)
{
    cl->observer = obs;
    cl->observer_state = state;
}

int cluster_start(salusd_t *d)
{
    const salusd_config_t *cfg = &d->config;
    if (!cfg->cluster[0])
        return 0;
    cluster_t *cl = calloc(1, sizeof(*cl));
    if (!cl) {
        LOG_ERROR("cluster: out of memory");
        return -1;
    }
    d->cluster = cl;
    cl->d = d;
    cl->ttl_s = cfg->cluster_lease_ttl_s;
    snprintf(cl->node, sizeof(cl->node), "%s", cfg->cluster_node);
    snprintf(cl->prefix, sizeof(cl->prefix), "%s", cfg->cluster_prefix);
    size_t plen = strlen(cl->prefix);
    while (plen > 1 && cl->prefix[plen - 1] == '/')
        cl->prefix[--plen] = 0;
    set_lease_file(cl);

    char err[512];
    uint8_t key[LINKS_KEY_MAX_BYTES];
    size_t key_len = 0;
    if (links_key_load(cfg->cluster_key, key, sizeof(key), &key_len, err, sizeof(err)) < 0) {
        LOG_ERROR("cluster: %s", err);
        return -1;
    }
    etcd_config_t ec = {.endpoints = cfg->cluster,
                        .tls = {.ca_file = cfg->etcd_cacert[0] ? cfg->etcd_cacert : NULL,
                                .cert_file = cfg->etcd_cert[0] ? cfg->etcd_cert : NULL,
                                .key_file = cfg->etcd_key[0] ? cfg->etcd_key : NULL},
                        /* a request that hangs must not outlast a keepalive period */
                        .timeout_ms = (uint32_t)(cfg->cluster_lease_ttl_s * 1000 / 3 > 1000
                                                     ? cfg->cluster_lease_ttl_s * 1000 / 3
                                                     : 1000)};
    cl->etcd = etcd_create(d->base, &ec, err, sizeof(err));
    if (!cl->etcd) {
        LOG_ERROR("cluster: %s", err);
        return -1;
    }
    char plain[256];
    if (etcd_plain_remote(cl->etcd, plain, sizeof(plain))) {
        snprintf(cl->etcd_warning, sizeof(cl->etcd_warning),
                 "etcd at %s is plain HTTP on an address other than loopback: whoever reaches "
                 "it or its path can change the members, the group records, the leader and "
                 "the tables' replica sets; give etcd TLS with client certificates "
                 "(--etcd-cacert, --etcd-cert, --etcd-key)", plain);
        LOG_WARN("cluster: %s", cl->etcd_warning);
    }
    links_config_t lc = {.node = cl->node, .listen = cfg->cluster_listen, .key = key,
                         .key_len = key_len};
    cl->links = links_create(d->base, &lc, &hooks, cl, err, sizeof(err));
    int master_rc = ps_net_auth_master(key, key_len, cl->ps_net_master);
    memset(key, 0, sizeof(key));
    if (master_rc < 0) {
        LOG_ERROR("cluster: no key for the UCX messages could be made");
        return -1;
    }
    if (!cl->links) {
        LOG_ERROR("cluster: links on %s: %s", cfg->cluster_listen, err);
        return -1;
    }

    /* the lease (the previous start's, if etcd still has it), the member key, the listing */
    cl->lease_id = lease_file_read(cl);
    cl->keepalive_busy = 1;
    int rc = cl->lease_id ? etcd_lease_timetolive(cl->etcd, cl->lease_id, on_old_lease, cl)
                          : etcd_lease_grant(cl->etcd, cl->ttl_s, on_granted, cl);
    if (rc < 0) {
        LOG_ERROR("cluster: out of memory");
        return -1;
    }
    uint64_t deadline = salusd_now_ns() + START_WAIT_S * 1000000000ull;
    while (!cl->start_done && salusd_now_ns() < deadline)
        event_base_loop(d->base, EVLOOP_ONCE);
    if (!cl->start_done)
        start_failed(cl, "etcd at %s did not answer within 8 s", etcd_endpoints(cl->etcd));
    if (cl->start_error) {
        LOG_ERROR("cluster: cannot join the cluster at %s: %s", cfg->cluster, cl->start_err);
        return -1;
    }
    char prefix[256];
    cluster_key(cl, prefix, sizeof(prefix), "");
    cl->start_done = 0;
    if (etcd_get(cl->etcd, prefix, 1, on_listing, cl) < 0)
        return -1;
    deadline = salusd_now_ns() + START_WAIT_S * 1000000000ull;
    while (!cl->members_read && !cl->start_error && salusd_now_ns() < deadline)
        event_base_loop(d->base, EVLOOP_ONCE);
    if (!cl->members_read) {
        LOG_ERROR("cluster: cannot read the cluster at %s: %s", cfg->cluster,
                  cl->start_error ? cl->start_err : "no answer within 8 s");
        return -1;
    }
    cl->start_done = 1;
    cl->tick = event_new(d->base, -1, EV_PERSIST, on_tick, cl);
    struct timeval every = {.tv_sec = 0, .tv_usec = TICK_MS * 1000};
    if (!cl->tick || event_add(cl->tick, &every) < 0)
        return -1;
    LOG_INFO("cluster: node %s joined %s (prefix %s, links on %s, %u member%s)", cl->node,
             cfg->cluster, cl->prefix, cfg->cluster_listen, cl->member_count,
             cl->member_count == 1 ? "" : "s");
    return 0;
}

void cluster_stop(salusd_t *d)
{
    cluster_t *cl = cluster_of(d);
    if (!cl)
        return;
    if (cl->tick)
        event_free(cl->tick);
    etcd_watch_cancel(cl->w_members);
    links_destroy(cl->links);
    etcd_destroy(cl->etcd);
    cl->etcd = NULL;
    if (cl->observer)
        cl->observer->free(cl);
    cluster_groups_free(cl);
    memset(cl->ps_net_master, 0, sizeof(cl->ps_net_master));
    free(cl);
    d->cluster = NULL;
}

/* ---- what status and groups show ------------------------------------------------------------- */

void cluster_pack_status(salusd_t *d, msgpack_packer *pk)
{
    cluster_t *cl = cluster_of(d);
    uint64_t now = salusd_now_ns();
    int64_t left_ms = cl->lease_ok_ns && !cl->lease_lost
                          ? (int64_t)cl->ttl_s * 1000 - (int64_t)((now - cl->lease_ok_ns) / 1000000)
                          : 0;
    links_stats_t ls;
    links_get_stats(cl->links, &ls);
    msgpack_pack_map(pk, cl->etcd_warning[0] ? 11 : 10);
    proto_pack_kv_str(pk, "node", cl->node);
    if (cl->etcd_warning[0])
        proto_pack_kv_str(pk, "etcd_warning", cl->etcd_warning);
    proto_pack_kv_str(pk, "etcd", etcd_endpoints(cl->etcd));
    proto_pack_kv_uint(pk, "lease_id", (uint64_t)cl->lease_id);
    proto_pack_kv_uint(pk, "lease_ttl_s", (uint64_t)cl->ttl_s);
    proto_pack_kv_int(pk, "lease_left_ms", left_ms > 0 ? left_ms : 0);
    proto_pack_kv_bool(pk, "member", !cl->lease_lost);
    proto_pack_kv_str(pk, "leader", cl->leader);
    proto_pack_kv_uint(pk, "links_up", ls.up);
    proto_pack_str(pk, "ps_peers"); /* the UCX peers of the parameter servers */
    if (cl->observer)
        cl->observer->pack_peers(cl, pk);
    else
        msgpack_pack_array(pk, 0);
    proto_pack_str(pk, "members");
    msgpack_pack_array(pk, cl->member_count);
    for (uint32_t i = 0; i < cl->member_count; i++) {
        msgpack_pack_map(pk, 3);
        proto_pack_kv_str(pk, "node", cl->members[i].node);
        proto_pack_kv_str(pk, "addr", cl->members[i].addr);
        proto_pack_kv_bool(pk, "link_up", strcmp(cl->members[i].node, cl->node) == 0 ||
                                              links_is_up(cl->links, cl->members[i].node));
    }
}

int cluster_sample(const salusd_t *d, cluster_sample_t *s)
{
    const cluster_t *cl = cluster_of(d);
    if (!cl)
        return -ENOENT;
    *s = cl->stats;
    links_stats_t ls;
    links_get_stats(cl->links, &ls);
    s->member = !cl->lease_lost;
    s->members = cl->member_count;
    s->leader = cluster_is_leader(cl);
    s->links_up = ls.up;
    s->links_refused = ls.refused;
    s->links_frames_rejected = ls.frames_rejected;
    s->messages_sent = ls.sent;
    s->messages_received = ls.received;
    etcd_stats_t es = {0};
    if (cl->etcd)
        etcd_get_stats(cl->etcd, &es);
    s->etcd_keepalives = es.keepalives;
    s->etcd_leases = es.leases;
    s->etcd_ranges = es.ranges;
    s->etcd_writes = es.writes;
    s->etcd_watch_streams = es.watch_streams;
    s->etcd_watch_events = es.watch_events;
    s->etcd_txns_failed = es.txns_failed;
    return 0;
}
