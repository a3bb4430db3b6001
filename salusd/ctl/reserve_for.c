/* Jobs a resource manager's plugin reserves for the processes it starts (see reserve_for.h). */
#include "reserve_for.h"

#include "access.h"
#include "groups.h"
#include "jobctl.h"
#include "jobs.h"

#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RESERVE_FOR_TAG_BYTES 64
/* a share's budget is a whole number of these (the chunks' granularity on every device) */
#define RESERVE_FOR_GRAIN (2ULL << 20)

typedef struct reserve_for_tag_s {
    char tag[RESERVE_FOR_TAG_BYTES];
    uint64_t job_id;
    struct reserve_for_tag_s *next;
} reserve_for_tag_t;

/* the event loop's thread only */
static reserve_for_tag_t *tags;

/* Drops the tags of jobs the registry forgot. */
static void prune(salusd_t *d)
{
    for (reserve_for_tag_t **p = &tags; *p;) {
        if (!registry_find(d->registry, (*p)->job_id)) {
            reserve_for_tag_t *gone = *p;
            *p = gone->next;
            free(gone);
        } else {
            p = &(*p)->next;
        }
    }
}

static reserve_for_tag_t *tag_find(const char *tag)
{
    for (reserve_for_tag_t *t = tags; t; t = t->next)
        if (strcmp(t->tag, tag) == 0)
            return t;
    return NULL;
}

static void tag_drop(reserve_for_tag_t *gone)
{
    for (reserve_for_tag_t **p = &tags; *p; p = &(*p)->next) {
        if (*p == gone) {
            *p = gone->next;
            free(gone);
            return;
        }
    }
}

void reserve_for_shutdown(salusd_t *d)
{
    (void)d;
    while (tags) {
        reserve_for_tag_t *t = tags;
        tags = t->next;
        free(t);
    }
}

static int tag_valid(const char *tag)
{
    if (!tag[0])
        return 0;
    for (const char *p = tag; *p; p++)
        if (*p <= ' ' || *p > '~')
            return 0;
    return 1;
}

static int pid_open(uint64_t pid)
{
    if (pid == 0 || pid > 0x3fffffff)
        return -EINVAL;
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    return fd < 0 ? -errno : fd;
}

/* k/n of what GPU gpu offers jobs, in whole grains: half persistent, half ephemeral */
static int share_budget(const salusd_t *d, uint64_t gpu, uint64_t k, uint64_t n,
                        jobs_fields_t *fields)
{
    uint64_t total = d->devices.gpus[gpu].total_bytes;
    uint64_t offered = total > d->config.gpu_reserve_bytes ? total - d->config.gpu_reserve_bytes
                                                           : 0;
    uint64_t share = (uint64_t)((unsigned __int128)offered * k / n);
    uint64_t grains = share / RESERVE_FOR_GRAIN;
    if (grains < 2)
        return -ENOSPC;
    fields->persistent_bytes = grains / 2 * RESERVE_FOR_GRAIN;
    fields->ephemeral_bytes = (grains - grains / 2) * RESERVE_FOR_GRAIN;
    return 0;
}

void reserve_for_handle(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    const msgpack_object *b = &msg->body;
    char tag[RESERVE_FOR_TAG_BYTES] = "", why[256];
    uint64_t uid = 0, gid = 0, pid = 0, supervisor = 0, share_k = 0, share_n = 0;
    jobs_fields_t fields;
    groups_fields_t group;
    prune(d);
    int frc = jobs_fields_parse(b, &fields);
    if (proto_get_str_copy(b, "tag", tag, sizeof(tag)) < 0 || !tag_valid(tag) ||
        proto_get_uint(b, "uid", &uid) < 0 || uid > 0xfffffffe ||
        proto_get_uint(b, "gid", &gid) < 0 || gid > 0xfffffffe ||
        proto_get_uint(b, "pid", &pid) < 0 || proto_get_uint(b, "supervisor_pid", &supervisor) < 0 ||
        proto_get_uint(b, "share_k", &share_k) == -EINVAL ||
        proto_get_uint(b, "share_n", &share_n) == -EINVAL || frc == -EINVAL) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "reserve_for takes tag (1 to %d printable bytes), uid, gid, pid, "
                           "supervisor_pid, share_k and share_n (unsigned), and submit's job and "
                           "group fields", RESERVE_FOR_TAG_BYTES - 1);
        return;
    }
    if (frc < 0) {
        jobs_reply_bad_name(c, msg->id, "reserve_for");
        return;
    }
    if (d->devices.count == 0) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "salusd has no GPU");
        return;
    }
    if (jobs_reply_bad_gpus(c, msg->id, "reserve_for", &fields))
        return;
    if (share_k || share_n) {
        if (share_k == 0 || share_n == 0 || share_k > share_n || !fields.gpu_pinned) {
            server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                               "reserve_for: a share takes share_k and share_n (1 <= k <= n) "
                               "and pin_gpu (the GPU it is a share of)");
            return;
        }
        if (share_budget(d, fields.pinned_gpu, share_k, share_n, &fields) < 0) {
            server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                               "reserve_for: %llu/%llu of GPU %llu is less than two chunks",
                               (unsigned long long)share_k, (unsigned long long)share_n,
                               (unsigned long long)fields.pinned_gpu);
            return;
        }
    }
    reserve_for_tag_t *known = tag_find(tag);
    const job_t *known_job = known ? registry_find(d->registry, known->job_id) : NULL;
    if (known && known_job && !known_job->runtime && JOB_STATE_IS_FINAL(known_job->state)) {
        tag_drop(known); /* its job is over: the name is free again (a restarted manager) */
        known = NULL;
    }
    if (known) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                           "reserve_for: tag %s already names job %llu", tag,
                           (unsigned long long)known->job_id);
        return;
    }
    int grouped = groups_fields_parse(b, &group, why, sizeof(why));
    if (grouped == 1)
        grouped = groups_check_join(d, (uid_t)uid, &group, why, sizeof(why));
    else if (grouped == 0)
        grouped = 1; /* not a group */
    if (grouped < 0) {
        server_reply_error(c, msg->id, grouped == -EBUSY ? PROTO_ESTATE : PROTO_EBADARG, 0,
                           "%s", why);
        return;
    }
    int command = pid_open(pid), watcher = command >= 0 ? pid_open(supervisor) : -1;
    if (command < 0 || watcher < 0) {
        int bad = command < 0 ? command : watcher;
        if (command >= 0)
            close(command);
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "reserve_for: process %llu: %s",
                           (unsigned long long)(command < 0 ? pid : supervisor),
                           bad == -ESRCH ? "no such process" : strerror(-bad));
        return;
    }
    reserve_for_tag_t *t = calloc(1, sizeof(*t));
    job_t *job = t ? jobs_reserve_for(c, (uid_t)uid, (gid_t)gid, (pid_t)pid, &fields,
                                      share_k != 0)
                   : NULL;
    if (!job || (grouped == 0 && groups_join(d, job, &group) < 0) ||
        jobctl_watch_reserved_for(d, job, watcher, command) < 0) {
        if (job)
            jobs_end_reserved(d, job, JOB_FAILED);
        free(t);
        close(command);
        close(watcher);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    snprintf(t->tag, sizeof(t->tag), "%s", tag);
    t->job_id = job->id;
    t->next = tags;
    tags = t;
    LOG_INFO("job %llu reserved for pid %llu (uid %llu) as %s%s%s%s", (unsigned long long)job->id,
             (unsigned long long)pid, (unsigned long long)uid, tag,
             grouped == 0 ? " (group " : "", grouped == 0 ? group.name : "",
             grouped == 0 ? ")" : "");
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", grouped == 0 ? 4 : 3);
    proto_pack_kv_uint(&enc->pk, "job_id", job->id);
    proto_pack_kv_uint(&enc->pk, "persistent_bytes", fields.persistent_bytes);
    proto_pack_kv_uint(&enc->pk, "ephemeral_bytes", fields.ephemeral_bytes);
    if (grouped == 0)
        proto_pack_kv_str(&enc->pk, "group", group.name);
    proto_enc_finish(enc);
    server_send(c, enc);
}

void reserve_for_handle_exit(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    char tag[RESERVE_FOR_TAG_BYTES] = "";
    int64_t status = -1, sig = 0;
    if (proto_get_str_copy(&msg->body, "tag", tag, sizeof(tag)) < 0 || !tag_valid(tag) ||
        proto_get_int(&msg->body, "status", &status) < 0 || status < 0 || status > 255 ||
        proto_get_int(&msg->body, "signal", &sig) == -EINVAL || sig < 0 || sig > 127) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "reserved_exit takes tag, status (0..255) and signal (0..127)");
        return;
    }
    prune(d);
    const reserve_for_tag_t *t = tag_find(tag);
    job_t *job = t ? registry_find(d->registry, t->job_id) : NULL;
    if (!job) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0, "no reservation %s", tag);
        return;
    }
    uint64_t id = job->id;
    if (jobctl_report_exit(d, job, sig == 0, sig ? (int)sig : (int)status) < 0) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    LOG_INFO("job %llu (%s): its process %s %d", (unsigned long long)id, tag,
             sig ? "was killed by signal" : "exited with", sig ? (int)sig : (int)status);
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", 1);
    proto_pack_kv_uint(&enc->pk, "id", id);
    proto_enc_finish(enc);
    server_send(c, enc);
}
