/* Jobs controlled from salusctl (see jobctl.h). */
#include "jobctl.h"

#include "groups.h"
#include "job_cgroup.h"
#include "jobs.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define JOBCTL_LOG_PATH_BYTES 4096
#define JOBCTL_DEFAULT_GRACE_MS 10000
#define JOBCTL_MAX_GRACE_MS 3600000
/* removing a job's cgroup waits for its killed processes: this often, this many times */
#define JOBCTL_CGROUP_RETRY_MS 20
#define JOBCTL_CGROUP_RETRIES 250

typedef struct jobctl_entry_s {
    struct jobctl_s *ctl;
    uint64_t job_id;
    char *log_path;              /* NULL: not submitted (shown, never opened) */
    int log_fd;                  /* the log, taken from the submitter at submit; -1: none */
    int reported;                /* the supervisor reported the exit status (job_exit) */
    int supervised;              /* submitted: its supervisor reports the exit status */
    int external;                /* reserved by root for another process (reserve_for): its
                                    supervisor (a resource manager's) is never signalled */
    int supervisor_pidfd;        /* -1 once the supervisor is gone */
    struct event *supervisor_event;
    struct event *kill_timer;    /* SIGKILL when the grace period ends */
    char cgroup[JOB_CGROUP_PATH_BYTES]; /* the job's cgroup; "": none (process group) */
    int command_pidfd;           /* the command's, left in another manager's cgroup; -1 */
    struct event *cgroup_timer;  /* retries removing it while its processes die */
    int cgroup_tries;
    struct jobctl_entry_s *next;
} jobctl_entry_t;

typedef struct jobctl_waiter_s {
    server_later_t requester;    /* its conn NULL once the requester's connection went */
    uint64_t job_id;
    struct jobctl_waiter_s *next;
} jobctl_waiter_t;

struct jobctl_s {
    salusd_t *daemon;
    jobctl_entry_t *entries;
    jobctl_waiter_t *waiters;
};

static struct jobctl_s *ctl_of(salusd_t *d)
{
    if (!d->jobctl) {
        d->jobctl = calloc(1, sizeof(*d->jobctl));
        if (d->jobctl)
            d->jobctl->daemon = d;
    }
    return d->jobctl;
}

static jobctl_entry_t *entry_find(salusd_t *d, uint64_t job_id)
{
    for (jobctl_entry_t *e = d->jobctl ? d->jobctl->entries : NULL; e; e = e->next)
        if (e->job_id == job_id)
            return e;
    return NULL;
}

static void entry_close_command(jobctl_entry_t *e)
{
    if (e->command_pidfd >= 0)
        close(e->command_pidfd);
    e->command_pidfd = -1;
}

static void entry_close_supervisor(jobctl_entry_t *e)
{
    if (e->supervisor_event)
        event_free(e->supervisor_event);
    e->supervisor_event = NULL;
    if (e->supervisor_pidfd >= 0)
        close(e->supervisor_pidfd);
    e->supervisor_pidfd = -1;
}

static void entry_free(jobctl_entry_t *e)
{
    /* never kills here: at shutdown, a job's processes outlive salusd */
    int rc = e->cgroup[0] ? job_cgroup_remove(e->cgroup, 0) : 0;
    if (rc < 0)
        LOG_WARN("job %llu: its cgroup %s is left (%s)", (unsigned long long)e->job_id,
                 e->cgroup, strerror(-rc));
    if (e->cgroup_timer)
        event_free(e->cgroup_timer);
    entry_close_supervisor(e);
    entry_close_command(e);
    if (e->kill_timer)
        event_free(e->kill_timer);
    if (e->log_fd >= 0)
        close(e->log_fd);
    free(e->log_path);
    free(e);
}

static jobctl_entry_t *entry_get(salusd_t *d, uint64_t job_id)
{
    jobctl_entry_t *e = entry_find(d, job_id);
    struct jobctl_s *ctl = ctl_of(d);
    if (e || !ctl)
        return e;
    e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->ctl = ctl;
    e->job_id = job_id;
    e->supervisor_pidfd = -1;
    e->command_pidfd = -1;
    e->log_fd = -1;
    e->next = ctl->entries;
    ctl->entries = e;
    return e;
}

/* Drops the entries of jobs the registry forgot (finished-jobs-kept). */
static void prune(salusd_t *d)
{
    if (!d->jobctl)
        return;
    for (jobctl_entry_t **p = &d->jobctl->entries; *p;) {
        if (!registry_find(d->registry, (*p)->job_id)) {
            jobctl_entry_t *gone = *p;
            *p = gone->next;
            entry_free(gone);
        } else {
            p = &(*p)->next;
        }
    }
}

static int finished(const job_t *job)
{
    return !job->runtime && JOB_STATE_IS_FINAL(job->state);
}

/* 1 while processes of a job may still run in its cgroup (or its command, left in another
 * manager's cgroup) after its registered program ended: its supervisor waits for its
 * command still */
static int cgroup_running(salusd_t *d, const job_t *job)
{
    const jobctl_entry_t *e = entry_find(d, job->id);
    return e && (e->cgroup[0] || e->command_pidfd >= 0) && e->supervisor_pidfd >= 0;
}

/* Over for wait: finished with its status known or given up on, and a submitted job's
 * supervisor reported or is gone. */
static int ended(salusd_t *d, const job_t *job)
{
    if (!finished(job) || jobs_exit_pending(job)) /* the kernel may yet say how it ended */
        return 0;
    const jobctl_entry_t *e = entry_find(d, job->id);
    return !e || !e->supervised || e->reported || e->supervisor_pidfd < 0;
}

static void reply_wait(salusd_t *d, conn_t *c, uint64_t request_id, const job_t *job)
{
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, request_id, "", 4);
    proto_pack_kv_uint(&enc->pk, "id", job->id);
    proto_pack_kv_str(&enc->pk, "state", jobs_state(d, job));
    proto_pack_str(&enc->pk, "exit_status");
    if (job->exit_known)
        msgpack_pack_int(&enc->pk, job->exit_status);
    else
        msgpack_pack_nil(&enc->pk);
    proto_pack_str(&enc->pk, "signal");
    if (job->exit_known && job->exit_signal)
        msgpack_pack_int(&enc->pk, job->exit_signal);
    else
        msgpack_pack_nil(&enc->pk);
    proto_enc_finish(enc);
    server_send(c, enc);
}

/* Answers the waits on job_id that are over; a rank's settled end goes to its group. */
static void notify_waiters(salusd_t *d, uint64_t job_id)
{
    job_t *over = registry_find(d->registry, job_id);
    if (over && over->group_id && ended(d, over))
        groups_rank_over(d, over);
    if (!d->jobctl)
        return;
    for (jobctl_waiter_t **p = &d->jobctl->waiters; *p;) {
        jobctl_waiter_t *w = *p;
        job_t *job = w->job_id == job_id ? registry_find(d->registry, job_id) : NULL;
        if (w->job_id != job_id || (job && !ended(d, job))) {
            p = &w->next;
            continue;
        }
        if (job)
            reply_wait(d, w->requester.conn, w->requester.request_id, job);
        else
            server_reply_error(w->requester.conn, w->requester.request_id, PROTO_ENOTFOUND, 0,
                               "job %llu was forgotten before it ended",
                               (unsigned long long)job_id);
        *p = w->next;
        server_later_done(&w->requester);
        free(w);
    }
}

int jobctl_job_settled(salusd_t *d, const job_t *job)
{
    return ended(d, job);
}

void jobctl_job_finished(salusd_t *d, job_t *job)
{
    jobctl_entry_t *e = entry_find(d, job->id);
    if (e && e->kill_timer && !cgroup_running(d, job)) {
        event_free(e->kill_timer);
        e->kill_timer = NULL;
    }
    notify_waiters(d, job->id);
}

/* The connection's waits (its slot, CONN_SLOT_JOBCTL) go with it. */
static void on_conn_close(conn_t *c, void *state)
{
    salusd_t *d = c->daemon;
    server_later_close(c, state);
    for (jobctl_waiter_t **p = &d->jobctl->waiters; *p;) {
        if (!(*p)->requester.conn) {
            jobctl_waiter_t *gone = *p;
            *p = gone->next;
            free(gone);
        } else {
            p = &(*p)->next;
        }
    }
}

const conn_slot_ops_t jobctl_conn_ops = {.on_close = on_conn_close};

void jobctl_shutdown(salusd_t *d)
{
    if (!d->jobctl)
        return;
    while (d->jobctl->waiters) {
        jobctl_waiter_t *w = d->jobctl->waiters;
        d->jobctl->waiters = w->next;
        server_later_done(&w->requester);
        free(w);
    }
    while (d->jobctl->entries) {
        jobctl_entry_t *e = d->jobctl->entries;
        d->jobctl->entries = e->next;
        entry_free(e);
    }
    free(d->jobctl);
    d->jobctl = NULL;
    job_cgroup_shutdown();
}

/* The job named by the body's id that c may control; replies the error otherwise. */
static job_t *controlled_job(conn_t *c, const proto_msg_t *msg, const char *op)
{
    uint64_t id = 0;
    if (proto_get_uint(&msg->body, "id", &id) < 0 || id == 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s takes id (a job id > 0)", op);
        return NULL;
    }
    job_t *job = registry_find(c->daemon->registry, id);
    if (!job) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0, "no job %llu", (unsigned long long)id);
        return NULL;
    }
    if (!access_may_control_job(c, job)) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "permission_denied: job %llu belongs to another %s",
                           (unsigned long long)id, c->uid == job->uid ? "container" : "user");
        return NULL;
    }
    return job;
}

/* The job is over: what is left in its cgroup is killed, and the cgroup removed once its
 * processes are gone. */
static void on_cgroup_reap(evutil_socket_t fd, short events, void *arg)
{
    jobctl_entry_t *e = arg;
    salusd_t *d = e->ctl->daemon;
    (void)fd;
    (void)events;
    if (!e->cgroup[0])
        return;
    int rc = job_cgroup_remove(e->cgroup, 1);
    if (rc == -EBUSY && e->cgroup_tries++ < JOBCTL_CGROUP_RETRIES) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = JOBCTL_CGROUP_RETRY_MS * 1000};
        if (!e->cgroup_timer)
            e->cgroup_timer = evtimer_new(d->base, on_cgroup_reap, e);
        if (e->cgroup_timer && evtimer_add(e->cgroup_timer, &tv) == 0)
            return;
    }
    if (rc < 0)
        LOG_WARN("job %llu: cannot remove its cgroup %s: %s", (unsigned long long)e->job_id,
                 e->cgroup, strerror(-rc));
    else
        LOG_DEBUG("job %llu: removed its cgroup", (unsigned long long)e->job_id);
    e->cgroup[0] = '\0';
}

static void on_supervisor_exit(evutil_socket_t fd, short events, void *arg)
{
    jobctl_entry_t *e = arg;
    salusd_t *d = e->ctl->daemon;
    (void)fd;
    (void)events;
    entry_close_supervisor(e);
    on_cgroup_reap(-1, 0, e);
    /* what its cgroup's reap does for a command left in another manager's cgroup (reaped
     * by now when the supervisor waited for it) */
    if (e->command_pidfd >= 0)
        syscall(SYS_pidfd_send_signal, e->command_pidfd, SIGKILL, NULL, 0);
    entry_close_command(e);
    job_t *job = registry_find(d->registry, e->job_id);
    if (job && jobs_is_reserved(job)) {
        LOG_INFO("job %llu: its supervisor ended without a report", (unsigned long long)e->job_id);
        jobs_end_reserved(d, job, JOB_FAILED); /* notifies the waiters */
    } else {
        notify_waiters(d, e->job_id);
    }
}

#define JOBCTL_FD_LOG 0
#define JOBCTL_FD_COMMAND 1

/* The body's fds: the roles of the descriptors passed with the frame, in order ("log":
 * the log file, read-only; "command": a pidfd of the command's process, forked by the
 * submitter and waiting to exec). Takes them into fds[role] (-1: not passed). 0, or a
 * negative errno with why set. */
static int take_submit_fds(conn_t *c, const msgpack_object *body, int fds[2], const char **why)
{
    const msgpack_object *roles = proto_get(body, "fds");
    fds[0] = fds[1] = -1;
    *why = "fds must be an array naming each descriptor passed with the frame "
           "(\"log\", \"command\"), each at most once";
    if (!roles || roles->type == MSGPACK_OBJECT_NIL) {
        *why = "descriptors came with a submit whose fds names none";
        return server_frame_fds(c) == 0 ? 0 : -EINVAL;
    }
    if (roles->type != MSGPACK_OBJECT_ARRAY || roles->via.array.size > 2)
        return -EINVAL;
    if ((int)roles->via.array.size != server_frame_fds(c)) {
        *why = "the frame names more or fewer descriptors (fds) than came with it: pass "
               "them with the frame (SCM_RIGHTS)";
        return -EINVAL;
    }
    for (uint32_t i = 0; i < roles->via.array.size; i++) {
        const msgpack_object *r = &roles->via.array.ptr[i];
        int role = -1;
        if (r->type == MSGPACK_OBJECT_STR && r->via.str.size == 3 &&
            memcmp(r->via.str.ptr, "log", 3) == 0)
            role = JOBCTL_FD_LOG;
        else if (r->type == MSGPACK_OBJECT_STR && r->via.str.size == 7 &&
                 memcmp(r->via.str.ptr, "command", 7) == 0)
            role = JOBCTL_FD_COMMAND;
        if (role < 0 || fds[role] >= 0)
            return -EINVAL;
        fds[role] = server_take_fd(c);
    }
    return 0;
}

static void close_submit_fds(int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    fds[0] = fds[1] = -1;
}

/* The job's cgroup, with the command's process (*pidfd, a child of the submitter waiting
 * to exec) in it; a process in a cgroup another manager owns stays there and the entry
 * keeps *pidfd (taken: -1 left) to signal it. 0 (e->cgroup set, or left empty where no
 * cgroup can be had: the process group serves), or a negative errno when the pidfd is not
 * the submitter's child. */
static int place_command(conn_t *c, jobctl_entry_t *e, int *pidfd)
{
    int rc = job_cgroup_create(e->job_id, e->cgroup, sizeof(e->cgroup));
    if (rc < 0) {
        if (rc != -ENOTSUP)
            LOG_WARN("job %llu: cannot create its cgroup (%s); kill reaches its process "
                     "group only", (unsigned long long)e->job_id, strerror(-rc));
        e->cgroup[0] = '\0';
        return 0;
    }
    rc = job_cgroup_place(e->cgroup, *pidfd, c->pid, c->uid);
    if (rc == JOB_CGROUP_LEFT) {
        job_cgroup_remove(e->cgroup, 0);
        e->cgroup[0] = '\0';
        e->command_pidfd = *pidfd;
        *pidfd = -1;
        LOG_INFO("job %llu: its command is in a cgroup another manager owns: left there, "
                 "kill signals it through its pidfd", (unsigned long long)e->job_id);
        return 0;
    }
    if (rc < 0) {
        job_cgroup_remove(e->cgroup, 0);
        e->cgroup[0] = '\0';
        if (rc == -EPERM || rc == -EBADF || rc == -ESRCH)
            return rc;
        LOG_WARN("job %llu: cannot move its command into its cgroup (%s); kill reaches its "
                 "process group only", (unsigned long long)e->job_id, strerror(-rc));
    }
    return 0;
}

/* submit {name, iterations, persistent_bytes, ephemeral_bytes, priority, log, fds}:
 * reserves a job for the requesting process (salusctl's supervisor), answers {job_id}. The
 * descriptors passed with the frame (SCM_RIGHTS) are named by fds: "log", the log file
 * (read-only; log is its path, shown only: salusd never opens a path a user typed) and
 * "command", a pidfd of the command's process, which goes into the job's cgroup before
 * the reply (it waits for the job id before it execs). */
void jobctl_handle_submit(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    jobs_fields_t fields;
    groups_fields_t group;
    char log_path[JOBCTL_LOG_PATH_BYTES] = "", group_err[256];
    int fds[2] = {-1, -1};
    const char *why = NULL;
    struct stat st;
    const msgpack_object *b = &msg->body;
    prune(d);
    int log_rc = proto_get_str_copy(b, "log", log_path, sizeof(log_path));
    int frc = jobs_fields_parse(b, &fields);
    if (frc == -EINVAL || log_rc == -EINVAL || (log_rc == 0 && log_path[0] != '/') ||
        memchr(log_path, '\n', strlen(log_path))) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "submit takes name (string of at most %d bytes), iterations, "
                           "persistent_bytes, ephemeral_bytes, gpus (unsigned), priority (integer) "
                           "log (an absolute path) and fds (the passed descriptors' roles)",
                           REGISTRY_NAME_BYTES - 1);
        return;
    }
    int grouped = groups_fields_parse(b, &group, group_err, sizeof(group_err));
    if (grouped == 0 || grouped == 1)
        grouped = grouped ? groups_check_join(d, c->uid, &group, group_err, sizeof(group_err))
                          : -1;
    if (grouped < -1) {
        server_reply_error(c, msg->id, grouped == -EBUSY ? PROTO_ESTATE : PROTO_EBADARG, 0,
                           "%s", group_err);
        return;
    }
    if (grouped == 0 && fields.gpus > 1) { /* its members' gang would replace its group's */
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "submit: a rank of a group takes one GPU (gpus with group is not "
                           "supported)");
        return;
    }
    if (proto_get(b, "log_fd")) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "submit: log_fd is not supported: pass the log's descriptor with "
                           "the frame (SCM_RIGHTS) and name it in fds");
        return;
    }
    if (take_submit_fds(c, b, fds, &why) < 0) {
        close_submit_fds(fds);
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "submit: %s", why);
        return;
    }
    /* a regular file only (a FIFO or a device could hang a reader) */
    if (fds[JOBCTL_FD_LOG] >= 0 &&
        (fstat(fds[JOBCTL_FD_LOG], &st) < 0 || !S_ISREG(st.st_mode))) {
        close_submit_fds(fds);
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "submit: the log (the descriptor passed as \"log\") must be a "
                           "regular file");
        return;
    }
    if (frc < 0) {
        close_submit_fds(fds);
        jobs_reply_bad_name(c, msg->id, "submit");
        return;
    }
    if (d->devices.count == 0) {
        close_submit_fds(fds);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "salusd has no GPU");
        return;
    }
    if (jobs_reply_bad_gpus(c, msg->id, "submit", &fields)) {
        close_submit_fds(fds);
        return;
    }
    job_t *job = jobs_reserve(c, &fields);
    jobctl_entry_t *e = job ? entry_get(d, job->id) : NULL;
    if (e && log_path[0])
        e->log_path = strdup(log_path);
    if (!e || (log_path[0] && !e->log_path) || (grouped == 0 && groups_join(d, job, &group) < 0)) {
        close_submit_fds(fds);
        if (job)
            jobs_end_reserved(d, job, JOB_FAILED);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    e->supervised = 1;
    /* the supervisor's end, reported or not, ends a job whose program never registered */
    e->supervisor_pidfd = server_dup_pidfd(c); /* the connection's process, not its pid */
    if (e->supervisor_pidfd >= 0) {
        e->supervisor_event = event_new(d->base, e->supervisor_pidfd, EV_READ,
                                        on_supervisor_exit, e);
        if (!e->supervisor_event || event_add(e->supervisor_event, NULL) < 0)
            entry_close_supervisor(e);
    }
    if (!e->supervisor_event) { /* nothing would ever end the reservation: drop it now */
        int err = e->supervisor_pidfd < 0 ? -e->supervisor_pidfd : ENOMEM;
        close_submit_fds(fds);
        entry_close_supervisor(e);
        jobs_end_reserved(d, job, JOB_FAILED);
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "cannot watch the submitting process "
                           "(pid %d): %s", (int)c->pid,
                           err == ESRCH ? "it has exited" : strerror(err));
        return;
    }
    if (fds[JOBCTL_FD_COMMAND] >= 0) {
        int rc = place_command(c, e, &fds[JOBCTL_FD_COMMAND]);
        if (rc < 0) {
            close_submit_fds(fds);
            jobs_end_reserved(d, job, JOB_FAILED);
            server_reply_error(c, msg->id, PROTO_EPERM, 0,
                               "submit: the \"command\" descriptor must be a pidfd of a live "
                               "child of the submitting process, of the same user (%s)",
                               strerror(-rc));
            return;
        }
    }
    e->log_fd = fds[JOBCTL_FD_LOG];
    fds[JOBCTL_FD_LOG] = -1;
    close_submit_fds(fds);
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", grouped == 0 ? 3 : 2);
    proto_pack_kv_uint(&enc->pk, "job_id", job->id);
    proto_pack_kv_bool(&enc->pk, "cgroup", e->cgroup[0] != '\0');
    if (grouped == 0) /* the echo that tells salusctl this daemon took the group */
        proto_pack_kv_str(&enc->pk, "group", group.name);
    proto_enc_finish(enc);
    server_send(c, enc);
}

int jobctl_report_exit(salusd_t *d, job_t *job, int exited, int code)
{
    jobctl_entry_t *e = entry_get(d, job->id);
    if (!e)
        return -ENOMEM;
    uint64_t id = job->id;
    e->reported = 1;
    if (e->external) /* the reporter waited for the command: nothing of it is left to signal */
        entry_close_command(e);
    jobs_set_exit(d, job, exited, code);
    if (jobs_is_reserved(job)) /* its command never used the GPU */
        jobs_end_reserved(d, job, jobs_exit_state(job));
    else
        jobs_exit_probe_stop(d, job); /* the report is the status: no need to ask the kernel */
    notify_waiters(d, id);
    return 0;
}

int jobctl_watch_reserved_for(salusd_t *d, job_t *job, int supervisor_pidfd, int command_pidfd)
{
    jobctl_entry_t *e = entry_get(d, job->id);
    if (!e)
        return -ENOMEM;
    e->supervised = 1;
    e->external = 1;
    e->supervisor_pidfd = supervisor_pidfd;
    e->command_pidfd = command_pidfd;
    e->supervisor_event = event_new(d->base, supervisor_pidfd, EV_READ, on_supervisor_exit, e);
    if (!e->supervisor_event || event_add(e->supervisor_event, NULL) < 0) {
        e->command_pidfd = -1; /* the caller's still */
        if (e->supervisor_event)
            event_free(e->supervisor_event);
        e->supervisor_event = NULL;
        e->supervisor_pidfd = -1;
        return -ENOMEM;
    }
    return 0;
}

/* job_exit {id, status, signal?}: the command's exit status, or the signal that killed it
 * (status then 128 + signal). */
void jobctl_handle_job_exit(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    int64_t status = -1, sig = 0;
    if (proto_get_int(&msg->body, "status", &status) < 0 || status < 0 || status > 255 ||
        proto_get_int(&msg->body, "signal", &sig) == -EINVAL || sig < 0 || sig > 127) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "job_exit takes id, status (0..255) and signal (0..127)");
        return;
    }
    job_t *job = controlled_job(c, msg, "job_exit");
    if (!job)
        return;
    if (jobctl_report_exit(d, job, sig == 0, sig ? (int)sig : (int)status) < 0) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", 0);
    proto_enc_finish(enc);
    server_send(c, enc);
}

/* Signals the job, always through pidfds: every process of its cgroup (or its command,
 * left in another manager's cgroup), its registered process, and for a job of salusctl run
 * or submit its supervisor, which passes the signal on to the command (submit: its whole
 * process group) with the user's own rights (SIGKILL travels as SIGUSR1: the supervisor
 * must live to report). */
static int signal_job(salusd_t *d, const job_t *job, int sig)
{
    const jobctl_entry_t *e = entry_find(d, job->id);
    int rc = -ESRCH;
    /* every process of the job's cgroup, also those that left its process group */
    if (e && e->cgroup[0] && job_cgroup_signal(e->cgroup, sig) > 0)
        rc = 0;
    /* its command, where another manager keeps it in that manager's cgroup */
    if (e && e->command_pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, e->command_pidfd, sig, NULL, 0) == 0)
        rc = 0;
    if (e && e->supervised && !e->external && e->supervisor_pidfd >= 0) {
        int via = sig == SIGKILL ? SIGUSR1 : sig;
        if (syscall(SYS_pidfd_send_signal, e->supervisor_pidfd, via, NULL, 0) == 0)
            rc = 0;
        else if (rc < 0)
            rc = -errno;
    }
    if (!jobs_is_reserved(job)) {
        int direct = jobs_signal(job, sig);
        if (rc < 0)
            rc = direct;
    }
    return rc;
}

static void on_grace_over(evutil_socket_t fd, short events, void *arg)
{
    jobctl_entry_t *e = arg;
    salusd_t *d = e->ctl->daemon;
    (void)fd;
    (void)events;
    event_free(e->kill_timer);
    e->kill_timer = NULL;
    job_t *job = registry_find(d->registry, e->job_id);
    /* a supervisor that has not reported still waits for the command (it may outlive its
     * registered program's end, e.g. a rank refused while it waited for admission) */
    int command_left = e->supervised && e->supervisor_pidfd >= 0 && !e->reported;
    if (job && (!finished(job) || cgroup_running(d, job) || command_left) &&
        signal_job(d, job, SIGKILL) == 0)
        LOG_INFO("job %llu did not end after SIGTERM; sent SIGKILL", (unsigned long long)job->id);
}

int jobctl_terminate(salusd_t *d, job_t *job, uint64_t grace_ms)
{
    int rc = signal_job(d, job, SIGTERM);
    if (rc < 0)
        return rc;
    jobctl_entry_t *e = entry_get(d, job->id);
    if (e && !e->kill_timer) {
        struct timeval tv = {.tv_sec = (time_t)(grace_ms / 1000),
                             .tv_usec = (suseconds_t)(grace_ms % 1000) * 1000};
        e->kill_timer = evtimer_new(d->base, on_grace_over, e);
        if (e->kill_timer && evtimer_add(e->kill_timer, &tv) < 0) {
            event_free(e->kill_timer);
            e->kill_timer = NULL;
        }
    }
    return 0;
}

/* kill {id, force?, grace_ms?}: SIGTERM, then SIGKILL after grace_ms (default 10 s) if the
 * job has not ended; force: SIGKILL at once. Answers {id, signal}. */
void jobctl_handle_kill(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    int force = 0;
    uint64_t grace_ms = JOBCTL_DEFAULT_GRACE_MS;
    if (proto_get_bool(&msg->body, "force", &force) == -EINVAL ||
        proto_get_uint(&msg->body, "grace_ms", &grace_ms) == -EINVAL ||
        grace_ms > JOBCTL_MAX_GRACE_MS) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "kill takes id, force (bool) and grace_ms (at most %d)",
                           JOBCTL_MAX_GRACE_MS);
        return;
    }
    job_t *job = controlled_job(c, msg, "kill");
    if (!job)
        return;
    if (finished(job) && !cgroup_running(d, job)) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "job %llu has already ended",
                           (unsigned long long)job->id);
        return;
    }
    int rc = force ? signal_job(d, job, SIGKILL) : jobctl_terminate(d, job, grace_ms);
    if (rc < 0) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "cannot signal job %llu: %s",
                           (unsigned long long)job->id,
                           rc == -ESRCH ? "no process of it is known" : strerror(-rc));
        return;
    }
    LOG_INFO("job %llu: %s sent at the request of uid %u", (unsigned long long)job->id,
             force ? "SIGKILL" : "SIGTERM", (unsigned)c->uid);
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", 2);
    proto_pack_kv_uint(&enc->pk, "id", job->id);
    proto_pack_kv_str(&enc->pk, "signal", force ? "SIGKILL" : "SIGTERM");
    proto_enc_finish(enc);
    server_send(c, enc);
}

/* wait {id}: answers {id, state, exit_status|nil} once the job has ended. */
void jobctl_handle_wait(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    prune(d);
    job_t *job = controlled_job(c, msg, "wait");
    if (!job)
        return;
    if (ended(d, job)) {
        reply_wait(d, c, msg->id, job);
        return;
    }
    jobctl_waiter_t *w = calloc(1, sizeof(*w));
    struct jobctl_s *ctl = ctl_of(d);
    if (!w || !ctl || server_later_add(c, CONN_SLOT_JOBCTL, &w->requester, msg->id) < 0) {
        free(w);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    w->job_id = job->id;
    w->next = ctl->waiters;
    ctl->waiters = w;
}

/* logs {id}: answers {id, log, ended} with the log file's descriptor (SCM_RIGHTS): the one
 * taken from the submitter at submit. log is its path, for display only: nobody opens it. */
void jobctl_handle_logs(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    prune(d);
    job_t *job = controlled_job(c, msg, "logs");
    if (!job)
        return;
    const jobctl_entry_t *e = entry_find(d, job->id);
    if (!e || e->log_fd < 0) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0,
                           "job %llu has no log file salusd holds (only jobs started with "
                           "salusctl submit have one)", (unsigned long long)job->id);
        return;
    }
    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", 4);
    proto_pack_kv_uint(&enc->pk, "id", job->id);
    proto_pack_kv_str(&enc->pk, "log", e->log_path ? e->log_path : "");
    proto_pack_kv_bool(&enc->pk, "ended", ended(d, job));
    proto_pack_kv_uint(&enc->pk, "fds", 1);
    proto_enc_finish(enc);
    if (server_send_fds(c, enc, &e->log_fd, 1) < 0)
        LOG_WARN("job %llu: could not pass its log to uid %u", (unsigned long long)job->id,
                 (unsigned)c->uid);
}

const jobs_observer_t jobctl_jobs_observer = {
    .job_finished = jobctl_job_finished,
    .job_settled = jobctl_job_settled,
    .terminate_job = jobctl_terminate,
};
