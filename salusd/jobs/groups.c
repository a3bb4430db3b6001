/* Groups of ranks (see groups.h). */
#include "groups.h"

#include "access.h"
#include "gpu_sched.h"
#include "jobs.h"
#include "jobs-internal.h"
#include "jobs_observer.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct group_rank_s {
    uint64_t job_id;           /* 0: not submitted yet */
    pid_t pid;                 /* the job's registered process (0 until then) */
    int32_t local_rank;
    int over;                  /* its end is settled */
    const char *end_state;     /* over: its final state's name */
    int end_gpu;               /* over: where it ran (-1: never admitted) */
    char node[64];             /* a cluster rank's node as its record said once the group was
                                * complete ("": not known): the record goes when every node
                                * is over, the list still names it */
} group_rank_t;

typedef struct group_s {
    uint64_t id;
    uid_t uid;
    char name[LAUNCH_GROUP_BYTES];
    uint32_t world;
    launch_sync_t sync;
    uint32_t staleness;
    int share_gpus;
    int restore;               /* a rank joined with "restore" */
    int reattached;            /* a rank re-attached into it after a restart of salusd */
    int cluster_complete;      /* a cluster group: every rank on every node was submitted */
    group_rank_t *ranks;       /* world entries, by rank */
    uint32_t joined;           /* ranks submitted */
    uint32_t over;             /* of those, ended */
    int failed;
    int32_t failed_rank;
    char failure[160];         /* "rank 1: killed by signal 9" */
    uint64_t ended_ns;         /* 0 while a rank may still run or join */
    uint64_t gang_wait_ns;     /* the ended ranks' gang waits */
    /* forming, every rank that came ended well: the missing ranks are waited for this long
     * (--group-form-timeout-s) before the group fails */
    struct event *form_timer;
    salusd_t *d;               /* (the timer's) */
    struct group_s *next;
} group_t;

struct groups_s {
    group_t *list;             /* newest first */
    uint64_t next_id;
};

static struct groups_s *groups_of(salusd_t *d)
{
    if (!d->groups) {
        d->groups = calloc(1, sizeof(*d->groups));
        if (d->groups)
            d->groups->next_id = 1;
    }
    return d->groups;
}

static group_t *group_by_id(const salusd_t *d, uint64_t id)
{
    for (group_t *g = d->groups && id ? d->groups->list : NULL; g; g = g->next)
        if (g->id == id)
            return g;
    return NULL;
}

/* The group a new rank of (uid, name) joins: one not ended, or a failed one still lingering. */
static group_t *group_current(const salusd_t *d, uid_t uid, const char *name)
{
    uint64_t now = salusd_now_ns();
    for (group_t *g = d->groups ? d->groups->list : NULL; g; g = g->next) {
        if (g->uid != uid || strcmp(g->name, name) != 0)
            continue;
        if (!g->ended_ns ||
            (g->failed && now - g->ended_ns < (uint64_t)GROUPS_FAILED_LINGER_S * 1000000000ull))
            return g;
    }
    return NULL;
}

static void group_free(group_t *g)
{
    if (g->form_timer)
        event_free(g->form_timer);
    free(g->ranks);
    free(g);
}

/* Keeps the last GROUPS_ENDED_KEPT ended groups. */
static void prune_ended(salusd_t *d)
{
    size_t ended = 0;
    for (group_t **p = d->groups ? &d->groups->list : NULL; p && *p;) {
        group_t *g = *p;
        if (g->ended_ns && ++ended > GROUPS_ENDED_KEPT) {
            *p = g->next;
            group_free(g);
        } else {
            p = &g->next;
        }
    }
}

static const char *sync_text(launch_sync_t sync, uint32_t staleness, char *buf, size_t size)
{
    if (sync == LAUNCH_SYNC_SSP)
        snprintf(buf, size, "ssp:%u", staleness);
    else
        snprintf(buf, size, "%s", launch_sync_name(sync));
    return buf;
}

int groups_fields_parse(const msgpack_object *body, groups_fields_t *f, char *why,
                        size_t why_size)
{
    uint64_t world = 0, rank = 0, staleness = 0;
    int64_t local = -1;
    int share = 0;
    char sync[8] = "bsp";
    memset(f, 0, sizeof(*f));
    f->local_rank = -1;
    snprintf(why, why_size, "submit: a rank takes group (a name), world (1..%d), rank (< "
             "world), local_rank (-1 or < world), sync (bsp, ssp, asp), staleness (ssp: "
             "1..%d) and share_gpus (bool)", LAUNCH_MAX_WORLD, LAUNCH_MAX_STALENESS);
    int rc = proto_get_str_copy(body, "group", f->name, sizeof(f->name));
    if (rc == -ENOENT)
        return proto_get(body, "world") || proto_get(body, "rank") ? -EINVAL : 0;
    if (rc < 0 || proto_get_uint(body, "world", &world) < 0 ||
        proto_get_uint(body, "rank", &rank) < 0 ||
        proto_get_int(body, "local_rank", &local) == -EINVAL ||
        proto_get_str_copy(body, "sync", sync, sizeof(sync)) == -EINVAL ||
        proto_get_uint(body, "staleness", &staleness) == -EINVAL ||
        proto_get_bool(body, "share_gpus", &share) == -EINVAL ||
        proto_get_bool(body, "restore", &f->restore) == -EINVAL)
        return -EINVAL;
    if (!launch_group_name_valid(f->name)) {
        snprintf(why, why_size, "submit: the group name must be 1 to %d characters of letters, "
                 "digits and . _ : @ + , = -", LAUNCH_GROUP_BYTES - 1);
        return -EINVAL;
    }
    if (world == 0 || world > LAUNCH_MAX_WORLD || rank >= world || local < -1 ||
        local >= (int64_t)world)
        return -EINVAL;
    if (strcmp(sync, "bsp") == 0)
        f->sync = LAUNCH_SYNC_BSP;
    else if (strcmp(sync, "asp") == 0)
        f->sync = LAUNCH_SYNC_ASP;
    else if (strcmp(sync, "ssp") == 0 && staleness >= 1 && staleness <= LAUNCH_MAX_STALENESS)
        f->sync = LAUNCH_SYNC_SSP;
    else
        return -EINVAL;
    f->world = (uint32_t)world;
    f->rank = (uint32_t)rank;
    f->local_rank = (int32_t)local;
    f->staleness = f->sync == LAUNCH_SYNC_SSP ? (uint32_t)staleness : 0;
    f->share_gpus = share;
    return 1;
}

int groups_check_join(salusd_t *d, uid_t uid, const groups_fields_t *f, char *err,
                      size_t err_size)
{
    char a[24], b[24];
    const group_t *g = group_current(d, uid, f->name);
    if (!g)
        return 0;
    if (g->failed) {
        snprintf(err, err_size, "group %s failed (%s): it takes no new ranks", g->name,
                 g->failure);
        return -EBUSY;
    }
    if (g->world != f->world) {
        snprintf(err, err_size, "group %s has world %u, not %u", g->name, g->world, f->world);
        return -EINVAL;
    }
    if (g->sync != f->sync || g->staleness != f->staleness) {
        snprintf(err, err_size, "group %s syncs %s, not %s", g->name,
                 sync_text(g->sync, g->staleness, a, sizeof(a)),
                 sync_text(f->sync, f->staleness, b, sizeof(b)));
        return -EINVAL;
    }
    if (g->share_gpus != f->share_gpus) {
        snprintf(err, err_size, "group %s was declared %s --share-gpus", g->name,
                 g->share_gpus ? "with" : "without");
        return -EINVAL;
    }
    if (g->ranks[f->rank].job_id && g->ranks[f->rank].over) {
        snprintf(err, err_size, "rank %u of group %s is taken (job %llu, ended; the group "
                 "waits up to %lld s for its ranks not submitted yet)", f->rank, g->name,
                 (unsigned long long)g->ranks[f->rank].job_id, d->config.group_form_timeout_s);
        return -EBUSY;
    }
    if (g->ranks[f->rank].job_id) {
        snprintf(err, err_size, "rank %u of group %s is taken (job %llu)", f->rank, g->name,
                 (unsigned long long)g->ranks[f->rank].job_id);
        return -EBUSY;
    }
    return 0;
}

int groups_join(salusd_t *d, job_t *job, const groups_fields_t *f)
{
    struct groups_s *all = groups_of(d);
    if (!all)
        return -ENOMEM;
    group_t *g = group_current(d, job->uid, f->name);
    if (!g) {
        prune_ended(d);
        g = calloc(1, sizeof(*g));
        group_rank_t *ranks = g ? calloc(f->world, sizeof(*ranks)) : NULL;
        if (!ranks) {
            free(g);
            return -ENOMEM;
        }
        g->id = all->next_id++;
        g->uid = job->uid;
        snprintf(g->name, sizeof(g->name), "%s", f->name);
        g->world = f->world;
        g->sync = f->sync;
        g->staleness = f->staleness;
        g->share_gpus = f->share_gpus;
        g->ranks = ranks;
        g->failed_rank = -1;
        g->d = d;
        g->next = all->list;
        all->list = g;
        LOG_INFO("group %s of uid %u formed (id %llu, world %u)", g->name, (unsigned)g->uid,
                 (unsigned long long)g->id, g->world);
    }
    g->restore |= f->restore != 0;
    g->reattached |= f->reattached != 0;
    if (g->form_timer && event_pending(g->form_timer, EV_TIMEOUT, NULL)) {
        event_del(g->form_timer); /* a missing rank came: the group lives on with it */
        LOG_INFO("group %s of uid %u: rank %u came while the group waited for its missing "
                 "ranks", g->name, (unsigned)g->uid, f->rank);
    }
    group_rank_t *r = &g->ranks[f->rank];
    r->job_id = job->id;
    r->local_rank = f->local_rank;
    r->end_gpu = -1;
    g->joined++;
    job->group_id = g->id;
    job->group_rank = f->rank;
    job->group_world = g->world;
    job->group_sync = groups_core_sync(g->sync);
    job->group_staleness = g->staleness;
    job->group_share_gpus = g->share_gpus;
    job->group_cluster = d->cluster != NULL;
    snprintf(job->group_name, sizeof(job->group_name), "%s", g->name);
    job->group_local_rank = f->local_rank;
    uint64_t id = g->id;
    jobs_raise_rank_submitted(d, id, f->rank, job->id);
    g = group_by_id(d, id);
    if (g && !d->cluster && g->joined == g->world && !g->failed) {
        /* every rank submitted: the registered ones are admitted, the others are host-only
         * (-ENOENT: none registered yet; each is released as it registers) */
        uint32_t registered = 0;
        for (uint32_t i = 0; i < g->world; i++) {
            job_t *rank = d->registry && g->ranks[i].job_id && !g->ranks[i].over
                              ? registry_find(d->registry, g->ranks[i].job_id) : NULL;
            registered += rank && !jobs_is_reserved(rank);
        }
        LOG_INFO("group %s of uid %u: every rank of %u submitted; %u registered, the others "
                 "are host-only until they register", g->name, (unsigned)g->uid, g->world,
                 registered);
        jobs_group_release(d, id);
    }
    return 0;
}

static void settle(salusd_t *d, group_t *g);

int groups_all_submitted(const salusd_t *d, uint64_t id)
{
    const group_t *g = group_by_id(d, id);
    if (!g)
        return 0;
    /* (a cluster group: when its record has every rank's node, cluster_groups.c) */
    return d->cluster ? g->cluster_complete : g->joined == g->world;
}

void groups_cluster_complete(salusd_t *d, uint64_t id)
{
    group_t *g = group_by_id(d, id);
    if (!g || g->cluster_complete)
        return;
    g->cluster_complete = 1;
    uint32_t registered = 0;
    for (uint32_t i = 0; i < g->world; i++) {
        const char *node = jobs_ask_rank_node(d, g->id, i);
        if (node)
            snprintf(g->ranks[i].node, sizeof(g->ranks[i].node), "%s", node);
        job_t *rank = d->registry && g->ranks[i].job_id && !g->ranks[i].over
                          ? registry_find(d->registry, g->ranks[i].job_id) : NULL;
        registered += rank && !jobs_is_reserved(rank);
    }
    LOG_INFO("group %s of uid %u: every rank of %u submitted on the cluster's nodes; %u of the "
             "%u here registered, the others are host-only until they register", g->name,
             (unsigned)g->uid, g->world, registered, g->joined);
    settle(d, g); /* its ranks here may all have ended well while it waited for the others */
}

/* A submitted rank that has not registered once its group is complete: it makes no driver
 * call (yet), holds no GPU and no memory and does not delay the others. */
static int host_only(const salusd_t *d, const group_t *g, const job_t *job)
{
    return jobs_is_reserved(job) && !g->failed && groups_all_submitted(d, g->id);
}

const char *groups_job_state(const salusd_t *d, const job_t *job, const char *state)
{
    const group_t *g = group_by_id(d, job->group_id);
    return g && host_only(d, g, job) ? "host-only" : state;
}

uint64_t groups_find(const salusd_t *d, uid_t uid, const char *name)
{
    for (group_t *g = d->groups ? d->groups->list : NULL; g; g = g->next)
        if (g->uid == uid && !g->ended_ns && strcmp(g->name, name) == 0)
            return g->id;
    return 0;
}

int groups_restored(const salusd_t *d, uint64_t id)
{
    const group_t *g = group_by_id(d, id);
    return g ? g->restore : 0;
}

int groups_refuses(const salusd_t *d, const job_t *job, char *err, size_t err_size)
{
    const group_t *g = group_by_id(d, job->group_id);
    if (!g || !g->failed)
        return 0;
    snprintf(err, err_size, "group %s failed (%s)", g->name, g->failure);
    return 1;
}

const char *groups_of_job(const salusd_t *d, const job_t *job, uint32_t *rank)
{
    const group_t *g = group_by_id(d, job->group_id);
    *rank = job->group_rank;
    return g ? g->name : NULL;
}

/* How the job ended, as a failure says it; NULL when it ended cleanly (exit status 0). */
static const char *bad_end(const job_t *job, char *buf, size_t size)
{
    if (job->exit_known && job->exit_signal)
        snprintf(buf, size, "killed by signal %d", job->exit_signal);
    else if (job->exit_known && job->exit_status != 0)
        snprintf(buf, size, "exited with status %d", job->exit_status);
    else if (job->exit_known)
        return NULL;
    else if (job->state == JOB_FAILED)
        snprintf(buf, size, "failed (refused, or its salusctl run or its connection went "
                 "away before admission)");
    else
        snprintf(buf, size, "ended without an exit status (its process or connection went "
                 "away)");
    return buf;
}

/* Ends every other rank still live: a waiting registration is answered with the failure,
 * every process gets SIGTERM and, after the grace period, SIGKILL. */
static void end_other_ranks(salusd_t *d, uint64_t group_id)
{
    uint64_t grace_ms = (uint64_t)d->config.group_kill_grace_s * 1000;
    group_t *g = group_by_id(d, group_id);
    for (uint32_t i = 0; g && i < g->world; i++) {
        uint64_t id = g->ranks[i].job_id;
        job_t *job = id && !g->ranks[i].over ? registry_find(d->registry, id) : NULL;
        if (!job)
            continue;
        char reason[256];
        snprintf(reason, sizeof(reason), "group %s failed (%s)", g->name, g->failure);
        /* a registration waiting for admission is answered first: the kill timer set next
         * must outlive the end of the job's run-time state */
        if (jobs_waiting_admission(job))
            jobs_fail(d, job, reason);
        job = registry_find(d->registry, id);
        int rc = job ? jobs_ask_terminate(d, job, grace_ms) : -ESRCH;
        LOG_INFO("group %s: rank %u (job %llu) is ended: %s%s", g->name, i,
                 (unsigned long long)id, reason, rc < 0 ? " (no process of it to signal)" : "");
        g = group_by_id(d, group_id); /* still there: only joins prune */
    }
}

/* Over: every rank it had ended (or the group failed and they have). */
static void end_group(salusd_t *d, group_t *g)
{
    if (g->form_timer)
        event_del(g->form_timer);
    g->ended_ns = salusd_now_ns();
    LOG_INFO("group %s of uid %u ended: %s", g->name, (unsigned)g->uid,
             g->failed ? "failed" : "done");
    jobs_raise_group_over(d, g->id); /* its parameter-server tables here go too */
}

/* A rank not submitted anywhere (a cluster group: its record names no node for it). */
static int rank_missing(const salusd_t *d, const group_t *g, uint32_t i)
{
    return !g->ranks[i].job_id && !(d->cluster && jobs_ask_rank_node(d, g->id, i));
}

static void on_form_timeout(evutil_socket_t fd, short events, void *arg)
{
    (void)fd;
    (void)events;
    group_t *g = arg;
    salusd_t *d = g->d;
    if (g->ended_ns || g->failed || g->over != g->joined || groups_all_submitted(d, g->id))
        return; /* (a rank came meanwhile: joins take the timer off) */
    uint32_t missing = 0;
    int32_t first = -1;
    for (uint32_t i = 0; i < g->world; i++)
        if (rank_missing(d, g, i) && missing++ == 0)
            first = (int32_t)i;
    g->failed = 1;
    g->failed_rank = first;
    if (first < 0) /* (every rank is named, but the record did not say so complete here) */
        snprintf(g->failure, sizeof(g->failure), "not every rank came within %lld s after "
                 "the ranks here ended", d->config.group_form_timeout_s);
    else if (missing == 1)
        snprintf(g->failure, sizeof(g->failure), "rank %d never came (waited %lld s after "
                 "the other ranks ended)", first, d->config.group_form_timeout_s);
    else
        snprintf(g->failure, sizeof(g->failure), "rank %d never came, nor %u other rank%s "
                 "(waited %lld s after the ranks submitted ended)", first, missing - 1,
                 missing == 2 ? "" : "s", d->config.group_form_timeout_s);
    LOG_WARN("group %s of uid %u failed: %s", g->name, (unsigned)g->uid, g->failure);
    uint64_t id = g->id;
    jobs_raise_group_failed(d, id, g->failure);
    g = group_by_id(d, id);
    if (g && !g->ended_ns)
        end_group(d, g);
}

/* Ends g once every rank it had is over, unless it is still forming (fewer ranks submitted
 * than its world) and has not failed: a rank that came late must join this group, not form
 * another of the name, so it waits for its missing ranks up to --group-form-timeout-s. */
static void settle(salusd_t *d, group_t *g)
{
    if (g->ended_ns || g->over != g->joined)
        return;
    if (g->failed || g->reattached || groups_all_submitted(d, g->id)) {
        end_group(d, g);
        return;
    }
    if (!g->form_timer && d->base)
        g->form_timer = evtimer_new(d->base, on_form_timeout, g);
    struct timeval bound = {.tv_sec = d->config.group_form_timeout_s};
    if (!g->form_timer || evtimer_add(g->form_timer, &bound) < 0) {
        LOG_ERROR("group %s of uid %u: no timer for the wait for its missing ranks: it ends "
                  "now", g->name, (unsigned)g->uid);
        end_group(d, g);
        return;
    }
    uint32_t missing = 0;
    for (uint32_t i = 0; i < g->world; i++)
        missing += rank_missing(d, g, i);
    LOG_INFO("group %s of uid %u: its %u rank%s here ended well, %u of its world %u not "
             "submitted yet: it waits for them up to %lld s", g->name, (unsigned)g->uid,
             g->joined, g->joined == 1 ? "" : "s", missing, g->world,
             d->config.group_form_timeout_s);
}

void groups_rank_over(salusd_t *d, job_t *job)
{
    /* (ending the other ranks may forget this job: only these copies are used after it) */
    uint64_t group_id = job->group_id;
    group_t *g = group_by_id(d, group_id);
    if (!g || job->group_rank >= g->world || g->ranks[job->group_rank].job_id != job->id ||
        g->ranks[job->group_rank].over)
        return;
    group_rank_t *r = &g->ranks[job->group_rank];
    char how[128];
    r->over = 1;
    r->pid = job->pid;
    r->end_state = job_state_name(job->state);
    r->end_gpu = job->end_gpu;
    g->over++;
    g->gang_wait_ns += job->end_gang_wait_ns;
    if (!g->failed && bad_end(job, how, sizeof(how))) {
        g->failed = 1;
        g->failed_rank = (int32_t)job->group_rank;
        snprintf(g->failure, sizeof(g->failure), "rank %u: %s", job->group_rank, how);
        LOG_WARN("group %s of uid %u failed: %s; its other ranks are ended", g->name,
                 (unsigned)g->uid, g->failure);
        end_other_ranks(d, g->id);
        g = group_by_id(d, group_id);
        if (!g)
            return;
        jobs_raise_group_failed(d, g->id, g->failure);
    }
    /* every rank it had ended: over; while forming after good ends, once the missing ranks
     * came and ended, or after the bound (a rank that never comes must not keep the group,
     * and its name with the ranks taken, forever) */
    settle(d, g);
}

int groups_describe(const salusd_t *d, uint64_t id, groups_desc_t *desc, char *sync_buf,
                    size_t sync_size)
{
    const group_t *g = group_by_id(d, id);
    if (!g)
        return -ENOENT;
    desc->uid = g->uid;
    desc->name = g->name;
    desc->world = g->world;
    desc->sync = sync_text(g->sync, g->staleness, sync_buf, sync_size);
    desc->share_gpus = g->share_gpus;
    return 0;
}

void groups_fail(salusd_t *d, uint64_t id, const char *failure)
{
    group_t *g = group_by_id(d, id);
    if (!g || g->failed || g->ended_ns)
        return;
    g->failed = 1;
    g->failed_rank = -1;
    snprintf(g->failure, sizeof(g->failure), "%s", failure);
    LOG_WARN("group %s of uid %u failed: %s; its ranks here are ended", g->name,
             (unsigned)g->uid, g->failure);
    end_other_ranks(d, id);
    g = group_by_id(d, id);
    if (g)
        settle(d, g);
}

uint32_t groups_live_jobs(salusd_t *d, uint64_t id, uint64_t *jobs, uint32_t max)
{
    const group_t *g = group_by_id(d, id);
    uint32_t n = 0;
    for (uint32_t i = 0; g && i < g->world && n < max; i++)
        if (g->ranks[i].job_id && !g->ranks[i].over)
            jobs[n++] = g->ranks[i].job_id;
    return n;
}

/* A live rank's job (NULL: not submitted, ended, or forgotten). */
static job_t *rank_job(salusd_t *d, const group_rank_t *r)
{
    return r->job_id && !r->over ? registry_find(d->registry, r->job_id) : NULL;
}

static uint32_t remote_ranks(const salusd_t *d, const group_t *g);

static const char *group_state(salusd_t *d, const group_t *g)
{
    if (g->failed)
        return "failed";
    if (g->ended_ns)
        return "done";
    if (g->joined + remote_ranks(d, g) < g->world) /* (in a cluster, the other nodes' too) */
        return "forming";
    for (uint32_t i = 0; i < g->world; i++) {
        job_t *job = rank_job(d, &g->ranks[i]);
        int gpu;
        uint64_t budget;
        if (job && job->runtime && !jobs_is_reserved(job) &&
            jobs_placement(d, job, &gpu, &budget) < 0)
            return "waiting";
    }
    return "running";
}

static uint64_t group_gang_wait_ns(salusd_t *d, const group_t *g)
{
    uint64_t sum = g->gang_wait_ns;
    for (uint32_t i = 0; i < g->world; i++) {
        job_t *job = rank_job(d, &g->ranks[i]);
        gpu_sched_job_info_t sched_info;
        if (job && job->runtime && gpu_sched_job_info(d, job, &sched_info) == 0)
            sum += sched_info.gang_wait_ns;
        else if (job && !job->runtime)
            sum += job->end_gang_wait_ns;
    }
    return sum;
}

/* The node of rank i of a cluster group: its record's, else what it said when the group was
 * complete (NULL: not known, or not a cluster group). */
static const char *rank_node(const salusd_t *d, const group_t *g, uint32_t i)
{
    const char *node = d->cluster ? jobs_ask_rank_node(d, g->id, i) : NULL;
    return node ? node : g->ranks[i].node[0] ? g->ranks[i].node : NULL;
}

static void pack_rank(salusd_t *d, msgpack_packer *pk, const group_t *g, uint32_t i)
{
    const group_rank_t *r = &g->ranks[i];
    job_t *job = r->job_id ? registry_find(d->registry, r->job_id) : NULL;
    int gpu = r->over ? r->end_gpu : -1;
    uint64_t budget = 0, gang_wait_ns = 0;
    const char *state = r->over ? r->end_state : "not submitted";
    pid_t pid = r->pid;
    gpu_sched_job_info_t sched_info;
    if (job) {
        jobs_placement(d, job, &gpu, &budget);
        state = host_only(d, g, job)     ? "host-only"
                : jobs_is_reserved(job) ? "submitted"
                                        : jobs_state(d, job);
        pid = jobs_is_reserved(job) ? 0 : job->pid;
        if (job->runtime && gpu_sched_job_info(d, job, &sched_info) == 0)
            gang_wait_ns = sched_info.gang_wait_ns;
        else
            gang_wait_ns = job->end_gang_wait_ns;
    }
    proto_map_t map;
    proto_map_begin(&map, pk);
    proto_map_uint(&map, "rank", i);
    proto_map_int_or_nil(&map, "job_id", (int64_t)r->job_id, r->job_id != 0);
    proto_map_int_or_nil(&map, "pid", pid, pid > 0);
    proto_map_int_or_nil(&map, "local_rank", r->local_rank, r->job_id && r->local_rank >= 0);
    proto_map_int_or_nil(&map, "gpu", gpu, gpu >= 0);
    proto_map_str(&map, "state", state);
    proto_map_uint(&map, "gang_wait_ms", gang_wait_ns / 1000000);
    const char *node = rank_node(d, g, i);
    if (node)
        proto_map_str(&map, "node", node);
    proto_map_end(&map);
}

/* A rank of a cluster group that runs on another node (what its record says). */
static void pack_remote_rank(msgpack_packer *pk, uint32_t i, const char *node)
{
    proto_map_t map;
    proto_map_begin(&map, pk);
    proto_map_uint(&map, "rank", i);
    proto_map_str(&map, "node", node);
    proto_map_str(&map, "state", "remote");
    proto_map_end(&map);
}

static uint32_t remote_ranks(const salusd_t *d, const group_t *g)
{
    uint32_t n = 0;
    for (uint32_t i = 0; d->cluster && i < g->world; i++)
        n += !g->ranks[i].job_id && rank_node(d, g, i) != NULL;
    return n;
}

void groups_handle_list(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    proto_enc_t *e = &d->enc;
    uint32_t shown = 0;
    char sync[24];
    for (group_t *g = d->groups ? d->groups->list : NULL; g; g = g->next)
        shown += access_may_control(c, g->uid);
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_str(&e->pk, "groups");
    msgpack_pack_array(&e->pk, shown);
    for (group_t *g = d->groups ? d->groups->list : NULL; g; g = g->next) {
        if (!access_may_control(c, g->uid))
            continue;
        proto_map_t map;
        proto_map_begin(&map, &e->pk);
        proto_map_uint(&map, "id", g->id);
        proto_map_str(&map, "name", g->name);
        proto_map_uint(&map, "uid", (uint64_t)g->uid);
        proto_map_uint(&map, "world", g->world);
        proto_map_str(&map, "sync", sync_text(g->sync, g->staleness, sync, sizeof(sync)));
        proto_pack_str(&map.pk, "share_gpus");
        if (g->share_gpus)
            msgpack_pack_true(&map.pk);
        else
            msgpack_pack_false(&map.pk);
        map.count++;
        proto_map_str(&map, "state", group_state(d, g));
        proto_map_int_or_nil(&map, "failed_rank", g->failed_rank, g->failed && g->failed_rank >= 0);
        if (g->failed)
            proto_map_str(&map, "failure", g->failure);
        else
            proto_map_int_or_nil(&map, "failure", 0, 0);
        proto_map_uint(&map, "gang_wait_ms", group_gang_wait_ns(d, g) / 1000000);
        /* the ranks submitted only: a world of thousands whose ranks never came would make
         * the list larger than a frame (and unreadable by everyone who may see it) */
        proto_pack_str(&map.pk, "ranks");
        msgpack_pack_array(&map.pk, g->joined + remote_ranks(d, g));
        for (uint32_t i = 0; i < g->world; i++)
            if (g->ranks[i].job_id)
                pack_rank(d, &map.pk, g, i);
            else if (d->cluster && rank_node(d, g, i))
                pack_remote_rank(&map.pk, i, rank_node(d, g, i));
        map.count++;
        proto_pack_str(&map.pk, "tables"); /* its parameter-server tables here (ps.h) */
        if (!jobs_ask_pack_group_tables(d, g->id, &map.pk))
            msgpack_pack_array(&map.pk, 0);
        map.count++;
        proto_map_end(&map);
    }
    proto_enc_finish(e);
    server_send(c, e);
}

size_t groups_count(const salusd_t *d)
{
    size_t n = 0;
    for (group_t *g = d->groups ? d->groups->list : NULL; g; g = g->next)
        n++;
    return n;
}

int groups_sample_at(salusd_t *d, size_t index, groups_sample_t *s)
{
    group_t *g = d->groups ? d->groups->list : NULL;
    for (; g && index; index--)
        g = g->next;
    if (!g)
        return -ENOENT;
    memset(s, 0, sizeof(*s));
    s->name = g->name;
    s->uid = (unsigned)g->uid;
    s->state = group_state(d, g);
    s->world = g->world;
    s->ranks_live = g->joined - g->over;
    s->failed = g->failed;
    s->gang_wait_ns = group_gang_wait_ns(d, g);
    return 0;
}

void groups_fini(salusd_t *d)
{
    if (!d->groups)
        return;
    while (d->groups->list) {
        group_t *g = d->groups->list;
        d->groups->list = g->next;
        group_free(g);
    }
    free(d->groups);
    d->groups = NULL;
}
