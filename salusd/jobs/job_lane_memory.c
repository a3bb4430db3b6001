/* Lane-shared chunks (salusd --lane-memory shared): the lane's ephemeral memory is one set of
 * chunks that salusd creates once per lane, the first time a job of the lane asks for it
 * (lane_map), of the lane's size then (a job answered {shared: 0, retry: 1}, e.g. while the GPU
 * has no room for them, asks again at a later iteration), with a lane page (lane_page.h) whose owner word says
 * which job uses them now. Every job of the lane that asks maps them at addresses of its own
 * and serves its ephemeral allocations from them while it holds the lane, so a switch creates,
 * maps, unmaps and returns nothing. Only the jobs of one user map them at a time: with lanes
 * shared across users (--share-lanes-across-users) a job of another user is answered {shared:
 * 0, retry: 2} while they are mapped (it takes chunks of its own for that iteration), and
 * those that map them unmap them at their next release (lane_page.h: evict_uid, lane_unmap);
 * then salusd clears them on the device before the next job of the other user gets them, so
 * a job never has another user's bytes mapped. The set goes when the last job that mapped it leaves; the owner word is cleared
 * when its job leaves. On a real GPU the chunks are created in salusd's own context of that
 * GPU, as every chunk is (devices.c).
 * Across a restart of salusd the set stays the lane's: each job's record in the state file
 * names the set it has mapped (state.h: lane_set), the job re-presents it when it re-attaches
 * (reattach_lane: the lane page and the chunk, checked against the record), and the first job
 * back makes it the lane's set again in the new salusd (imported, not created: its lane is
 * the lane the new scheduling core gives that job); its lane mates join it, so no switch
 * creates or maps anything afterwards. A set whose jobs come back in another lane than it is
 * now (or a set another one of that lane took first) is asked to be unmapped by them at their
 * next release, as after a re-layout, and goes with its last job.
 * A re-layout moves the set only for the jobs it moves (jobs_lane_memory_moved): a job that
 * stays in its lane keeps its mapping. */
#include "jobs-internal.h"

#include "gpu_sched.h"
#include "lane_page.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct lane_region_s {
    struct lane_region_s *next;
    int gpu;
    uint32_t lane;
    uid_t uid;
    chunk_t chunk;
    int chunk_fd;
    int page_fd;
    uint64_t page_dev, page_ino; /* the lane page's memfd (what a re-attach re-presents) */
    lane_page_t *page;
    size_t jobs;        /* jobs that asked for it (rt->lane_region) */
    size_t mappers;     /* of those, the jobs that have it mapped now (all of user uid) */
    uint64_t clear_at;  /* mapped in salusd's context, for clearing (0: not yet) */
    uint64_t clears;    /* cleared for another user's job */
    uint64_t clear_ns;  /* time those clears took, all together */
    uint64_t maps;      /* lane_map answers that handed them to a job */
    int restored;       /* re-presented by its jobs after a restart of salusd, not created */
    int placed;         /* its lane is known (a restored set: once its first job is back) */
    int retired;        /* not its lane's set (any more): its jobs unmap it at their release */
} lane_region_t;

/* The lane's chunks for a job of another user than the one whose jobs had them: NULL while
 * jobs of that user map them (they are asked to unmap them at their next release: evict_uid),
 * else cleared on the device and then that job's user's. */
static lane_region_t *hand_to_user(salusd_t *d, lane_region_t *r, const job_t *job)
{
    if (r->mappers > 0) {
        atomic_store(&r->page->evict_uid, (uint32_t)r->uid + 1);
        return NULL;
    }
    uint64_t start = salusd_now_ns();
    if ((!r->clear_at && devices_chunk_map(&d->devices, &r->chunk, &r->clear_at) < 0) ||
        devices_mapped_clear(&d->devices, &r->chunk, r->clear_at) < 0) {
        LOG_WARN("lane %u of GPU %d: its shared chunks could not be cleared; not handed over",
                 r->lane, r->gpu);
        return NULL;
    }
    uint64_t took = salusd_now_ns() - start;
    r->clears++;
    r->clear_ns += took;
    LOG_DEBUG("lane %u of GPU %d: shared chunks cleared for user %u in %.3f ms", r->lane, r->gpu,
              (unsigned)job->uid, (double)took / 1e6);
    r->uid = job->uid;
    atomic_store(&r->page->evict_uid, 0);
    return r;
}

static lane_region_t *find_region(salusd_t *d, int gpu, uint32_t lane)
{
    for (lane_region_t *r = d->lane_regions; r; r = r->next)
        if (r->gpu == gpu && r->lane == lane && r->placed && !r->retired)
            return r;
    return NULL;
}

/* The set whose chunk is that file (a restored set's lane mates re-present the same one). */
static lane_region_t *find_region_file(salusd_t *d, uint64_t dev, uint64_t ino)
{
    for (lane_region_t *r = d->lane_regions; r; r = r->next)
        if (r->chunk.dev == dev && r->chunk.ino == ino)
            return r;
    return NULL;
}

/* The job is asked to unmap r at its next release (lane_page.h: moved); 0, or -ENOSPC when
 * every slot is taken (it keeps them mapped). */
static int ask_to_unmap(lane_region_t *r, const job_t *job)
{
    for (int i = 0; i < LANE_PAGE_MOVED; i++) {
        uint64_t none = 0;
        if (atomic_load(&r->page->moved[i]) == job->id ||
            atomic_compare_exchange_strong(&r->page->moved[i], &none, job->id))
            return 0;
    }
    return -ENOSPC;
}

static void free_region(salusd_t *d, lane_region_t *r)
{
    for (lane_region_t **link = &d->lane_regions; *link; link = &(*link)->next)
        if (*link == r) {
            *link = r->next;
            break;
        }
    if (r->clear_at)
        devices_chunk_unmap(&d->devices, &r->chunk, r->clear_at);
    devices_chunk_release(&d->devices, &r->chunk);
    close(r->chunk_fd);
    close(r->page_fd);
    munmap(r->page, LANE_PAGE_BYTES);
    if (r->clears)
        LOG_INFO("lane %u of GPU %d: its shared chunks (%llu MiB) were cleared %llu times for "
                 "another user's job, %.3f ms each on average", r->lane, r->gpu,
                 (unsigned long long)(r->chunk.bytes >> 20), (unsigned long long)r->clears,
                 (double)r->clear_ns / 1e6 / (double)r->clears);
    LOG_DEBUG("lane %u of GPU %d: its shared chunks are gone", r->lane, r->gpu);
    free(r);
}

static int create_lane_page(lane_region_t *r)
{
    int fd = memfd_create("salus-lane-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, LANE_PAGE_BYTES) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    void *p = mmap(NULL, LANE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) == 0) {
        r->page_dev = (uint64_t)st.st_dev;
        r->page_ino = (uint64_t)st.st_ino;
    }
    r->page_fd = fd;
    r->page = p;
    r->page->magic = LANE_PAGE_MAGIC;
    r->page->version = LANE_PAGE_VERSION;
    r->page->bytes = r->chunk.bytes;
    atomic_store(&r->page->owner, 0);
    return 0;
}

/* The lane's set of chunks, created now if the lane has none. NULL when it cannot be shared
 * with this job (why: for the log). */
static lane_region_t *region_for(salusd_t *d, const job_t *job, const char **why, int *retry)
{
    *retry = 1; /* (the reasons that may pass: not admitted yet, a claim, a full GPU) */
    gpu_sched_job_info_t sched_info;
    if (gpu_sched_job_info(d, job, &sched_info) < 0 || !sched_info.admitted) {
        *why = "not admitted";
        return NULL;
    }
    if (sched_info.provisional) {
        *why = "its sizes are being learned (a lane of its own)";
        return NULL;
    }
    if (job_gpus_count(gpu_sched_job_gpus(d), job->id) > 1) {
        *retry = 0;
        *why = "a job on several GPUs";
        return NULL;
    }
    lane_region_t *r = find_region(d, sched_info.gpu, sched_info.lane);
    if (r) {
        if (r->uid != job->uid && !d->config.share_lanes_across_users) {
            *retry = 0; /* (lanes are not shared across users then: a lane id reused) */
            *why = "the lane's chunks are another user's";
            return NULL;
        }
        return r; /* another user's: handed over in jobs_handle_lane_map */
    }
    gpu_sched_lane_info_t *lanes = NULL;
    size_t count = 0;
    uint64_t size = 0;
    if (gpu_sched_lanes(d, &lanes, &count) == 0) {
        for (size_t i = 0; i < count; i++)
            if (lanes[i].gpu == sched_info.gpu && lanes[i].lane == sched_info.lane)
                size = lanes[i].size_bytes;
        gpu_sched_lanes_free(lanes, count);
    }
    if (size == 0) {
        *why = "its lane has no ephemeral memory";
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        *why = "out of memory";
        return NULL;
    }
    r->gpu = sched_info.gpu;
    r->lane = sched_info.lane;
    r->uid = job->uid;
    int rc = devices_chunk_create(&d->devices, sched_info.gpu, size, 0, &r->chunk, &r->chunk_fd);
    if (rc < 0) {
        *why = rc == -ENOMEM ? "the GPU has no room for them now" : "the GPU could not create them";
        free(r);
        return NULL;
    }
    if (create_lane_page(r) < 0) {
        devices_chunk_release(&d->devices, &r->chunk);
        close(r->chunk_fd);
        free(r);
        *why = "no lane page";
        return NULL;
    }
    r->placed = 1;
    r->next = d->lane_regions;
    d->lane_regions = r;
    d->lane_sets_created++;
    LOG_INFO("lane %u of GPU %d: %llu MiB of shared chunks for its jobs", r->lane, r->gpu,
             (unsigned long long)(r->chunk.bytes >> 20));
    return r;
}

void jobs_handle_lane_map(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    if (!rt || rt->reply_pending) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "lane_map needs an admitted job");
        return;
    }
    const char *why = "salusd runs with --lane-memory fresh";
    int retry = 0;
    lane_region_t *r = rt->lane_region;
    if (d->config.lane_memory_shared && !r && (r = region_for(d, job, &why, &retry)) != NULL) {
        r->jobs++;
        rt->lane_region = r;
        jobs_state_save(d); /* on file before the job has them: it re-presents them */
    }
    if (r && !rt->lane_mapped && r->uid != job->uid && (r = hand_to_user(d, r, job)) == NULL) {
        why = "another user's job maps the lane's chunks now";
        retry = 2; /* at its next iteration */
    }
    if (r && !rt->lane_mapped) {
        rt->lane_mapped = 1;
        r->mappers++;
        r->maps++;
        LOG_DEBUG("lane %u of GPU %d: mapped by job %llu of user %u", r->lane, r->gpu,
                  (unsigned long long)job->id, (unsigned)job->uid);
    }
    proto_enc_t *e = &d->enc;
    if (!r) {
        LOG_DEBUG("job %llu takes chunks of its own for its lane: %s",
                  (unsigned long long)job->id, why);
        proto_enc_begin(e, PROTO_REPLY, msg->id, "", 2);
        proto_pack_kv_uint(&e->pk, "shared", 0);
        proto_pack_kv_uint(&e->pk, "retry", (uint64_t)retry); /* it may ask again later */
        proto_enc_finish(e);
        server_send(c, e);
        return;
    }
    uint64_t persistent = 0, ephemeral = 0;
    uint32_t lane = 0;
    if (gpu_sched_job_sizes(d, job, &persistent, &ephemeral, &lane) < 0)
        persistent = 0;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 6);
    proto_pack_kv_uint(&e->pk, "shared", 1);
    proto_pack_kv_uint(&e->pk, "uid", (uint64_t)job->uid); /* whose jobs evict_uid names */
    /* what the job's own chunks serve: its memory up to its persistent size */
    proto_pack_kv_uint(&e->pk, "persistent", persistent);
    proto_pack_kv_uint(&e->pk, "chunk_id", r->chunk.id);
    proto_pack_kv_uint(&e->pk, "bytes", r->chunk.bytes);
    proto_pack_kv_uint(&e->pk, "fds", 2);
    proto_enc_finish(e);
    int fds[2] = {r->page_fd, r->chunk_fd};
    if (server_send_fds(c, e, fds, 2) < 0)
        LOG_WARN("could not send lane %u's chunks to job %llu", r->lane,
                 (unsigned long long)job->id);
}

/* lane_unmap: the job unmapped the lane's chunks (it gave its lane up while a job of another
 * user asked for them). */
void jobs_handle_lane_unmap(conn_t *c, const proto_msg_t *msg)
{
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    if (!rt || !rt->lane_region || !rt->lane_mapped) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "lane_unmap: the job has no lane "
                                                        "chunks mapped");
        return;
    }
    lane_region_t *r = rt->lane_region;
    uint64_t me = job->id; /* (it gave the owner word back before it unmapped) */
    atomic_compare_exchange_strong(&r->page->owner, &me, 0);
    rt->lane_mapped = 0;
    r->mappers--;
    LOG_DEBUG("lane %u of GPU %d: unmapped by job %llu of user %u", r->lane, r->gpu,
              (unsigned long long)job->id, (unsigned)job->uid);
    for (int i = 0; i < LANE_PAGE_MOVED; i++) {
        uint64_t id = job->id;
        if (atomic_compare_exchange_strong(&r->page->moved[i], &id, 0)) {
            /* a re-layout moved it: its next lane_map is for its new lane's chunks */
            rt->lane_region = NULL;
            jobs_state_dirty(c->daemon); /* its record names them no more */
            if (--r->jobs == 0)
                free_region(c->daemon, r);
            break;
        }
    }
    server_reply_done(c, msg->id);
}

void jobs_lane_memory_moved(salusd_t *d, job_t *job, int gpu, uint32_t lane)
{
    job_runtime_t *rt = runtime_of(job);
    lane_region_t *r = rt ? rt->lane_region : NULL;
    if (!r || (r->gpu == gpu && r->lane == lane))
        return;
    if (!rt->lane_mapped) { /* (unmapped for another user's job): its next ask is its new lane's */
        rt->lane_region = NULL;
        if (--r->jobs == 0)
            free_region(d, r);
        return;
    }
    if (ask_to_unmap(r, job) == 0)
        LOG_DEBUG("job %llu moved from lane %u: it unmaps that lane's shared chunks at its "
                  "next release", (unsigned long long)job->id, r->lane);
}

void jobs_lane_memory_leave(salusd_t *d, job_t *job)
{
    job_runtime_t *rt = runtime_of(job);
    lane_region_t *r = rt ? rt->lane_region : NULL;
    if (!r)
        return;
    uint64_t me = job->id; /* it ended holding them: its work on them ended with it */
    atomic_compare_exchange_strong(&r->page->owner, &me, 0);
    for (int i = 0; i < LANE_PAGE_MOVED; i++) {
        uint64_t id = job->id;
        atomic_compare_exchange_strong(&r->page->moved[i], &id, 0);
    }
    if (rt->lane_mapped) {
        r->mappers--;
        LOG_DEBUG("lane %u of GPU %d: unmapped by job %llu of user %u (it ended)", r->lane,
                  r->gpu, (unsigned long long)job->id, (unsigned)job->uid);
    }
    rt->lane_mapped = 0;
    rt->lane_region = NULL;
    if (--r->jobs == 0)
        free_region(d, r);
}

/* ---- across a restart of salusd ----------------------------------------------------------- */

void jobs_lane_memory_record(const job_t *job, state_lane_set_t *out)
{
    job_runtime_t *rt = runtime_of(job);
    /* (also while unmapped for another user's job: the same set, which it re-presents only
     * when it has it mapped) */
    const lane_region_t *r = rt ? rt->lane_region : NULL;
    memset(out, 0, sizeof(*out));
    if (r)
        *out = (state_lane_set_t){.chunk_id = r->chunk.id, .bytes = r->chunk.bytes,
                                  .dev = r->chunk.dev, .ino = r->chunk.ino,
                                  .page_dev = r->page_dev, .page_ino = r->page_ino};
}

/* The re-presented lane page: the recorded memfd, sealed at its size, of the set's layout. */
static int adopt_lane_page(lane_region_t *r, const state_lane_set_t *set, int fd,
                           const char **why)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != LANE_PAGE_BYTES ||
        (uint64_t)st.st_dev != set->page_dev || (uint64_t)st.st_ino != set->page_ino) {
        *why = "its lane page is not the one salusd gave it";
        return -EPERM;
    }
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        *why = "its lane page is not sealed";
        return -EPERM;
    }
    void *p = mmap(NULL, LANE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        *why = "its lane page cannot be mapped";
        return -EPERM;
    }
    lane_page_t *page = p;
    if (page->magic != LANE_PAGE_MAGIC || page->version != LANE_PAGE_VERSION ||
        page->bytes != set->bytes) {
        munmap(p, LANE_PAGE_BYTES);
        *why = "its lane page has another layout version or size";
        return -EPERM;
    }
    r->page = page;
    r->page_fd = fd;
    r->page_dev = set->page_dev;
    r->page_ino = set->page_ino;
    return 0;
}

int jobs_lane_memory_reattach(salusd_t *d, job_t *job, const state_job_t *rec, uint64_t chunk_id,
                              uint64_t bytes, int page_fd, int chunk_fd, const char **why)
{
    job_runtime_t *rt = runtime_of(job);
    const state_lane_set_t *set = &rec->lane_set;
    struct stat st;
    if (!rt || rt->lane_region) {
        *why = "it re-presents a lane set twice";
        return -EPERM;
    }
    if (fstat(chunk_fd, &st) < 0 || chunk_id != set->chunk_id || bytes != set->bytes ||
        (uint64_t)st.st_dev != set->dev || (uint64_t)st.st_ino != set->ino) {
        *why = "the lane chunk it re-presents is not the one salusd handed it";
        return -EPERM;
    }
    lane_region_t *r = find_region_file(d, set->dev, set->ino);
    if (r) { /* a lane mate brought it back already */
        if (r->gpu != rec->gpu || r->uid != job->uid || r->chunk.id != chunk_id ||
            r->page_dev != set->page_dev || r->page_ino != set->page_ino ||
            fstat(page_fd, &st) < 0 || (uint64_t)st.st_dev != set->page_dev ||
            (uint64_t)st.st_ino != set->page_ino) {
            *why = "the lane set it re-presents is not the one its lane mates re-presented";
            return -EPERM;
        }
        close(page_fd);
        close(chunk_fd);
    } else {
        r = calloc(1, sizeof(*r));
        if (!r) {
            *why = "salusd is out of memory";
            return -ENOMEM;
        }
        if (adopt_lane_page(r, set, page_fd, why) < 0) {
            free(r);
            return -EPERM;
        }
        if (devices_chunk_import(&d->devices, rec->gpu, chunk_fd, chunk_id, bytes, &r->chunk) <
            0) {
            munmap(r->page, LANE_PAGE_BYTES);
            free(r);
            *why = "the driver does not take its lane chunk as memory of its GPU of that size";
            return -EPERM;
        }
        r->chunk_fd = chunk_fd;
        r->gpu = rec->gpu;
        r->lane = rec->lane; /* until its first job is back: the lane the new core gives it */
        r->uid = job->uid;
        r->restored = 1;
        r->next = d->lane_regions;
        d->lane_regions = r;
        d->lane_sets_restored++;
    }
    r->jobs++;
    r->mappers++;
    rt->lane_region = r;
    rt->lane_mapped = 1;
    return 0;
}

void jobs_lane_memory_reattached(salusd_t *d, job_t *job)
{
    job_runtime_t *rt = runtime_of(job);
    lane_region_t *r = rt ? rt->lane_region : NULL;
    gpu_sched_job_info_t info;
    if (!r || gpu_sched_job_info(d, job, &info) < 0 || !info.admitted)
        return;
    if (!r->placed) {
        /* (looked up before r is placed: a set restored later sits before it in the list) */
        lane_region_t *current = find_region(d, r->gpu, info.lane);
        r->placed = 1;
        r->lane = info.lane;
        if (!d->config.lane_memory_shared || current) {
            r->retired = 1; /* fresh chunks now, or another set is that lane's already */
            LOG_WARN("lane %u of GPU %d: the shared chunks job %llu re-presented (%llu MiB) are "
                     "not the lane's set here (%s): its jobs unmap them at their next release",
                     r->lane, r->gpu, (unsigned long long)job->id,
                     (unsigned long long)(r->chunk.bytes >> 20),
                     d->config.lane_memory_shared ? "the lane has another set"
                                                  : "salusd runs with --lane-memory fresh");
        } else {
            LOG_INFO("lane %u of GPU %d: %llu MiB of shared chunks re-presented by job %llu "
                     "after salusd's restart: the lane's set again", r->lane, r->gpu,
                     (unsigned long long)(r->chunk.bytes >> 20), (unsigned long long)job->id);
        }
    }
    if (r->retired || info.gpu != r->gpu || info.lane != r->lane) {
        if (ask_to_unmap(r, job) == 0)
            LOG_DEBUG("job %llu came back in lane %u, not its set's lane %u: it unmaps the "
                      "set at its next release", (unsigned long long)job->id, info.lane,
                      r->lane);
        return;
    }
    LOG_DEBUG("lane %u of GPU %d: job %llu maps its shared chunks again (re-attached)", r->lane,
              r->gpu, (unsigned long long)job->id);
}

uint64_t jobs_lane_memory_bytes(const salusd_t *d, int gpu)
{
    uint64_t bytes = 0;
    for (const lane_region_t *r = d->lane_regions; r; r = r->next)
        if (r->gpu == gpu)
            bytes += r->chunk.bytes;
    return bytes;
}

int jobs_lane_set_info(const salusd_t *d, int gpu, uint32_t lane, jobs_lane_set_info_t *out)
{
    memset(out, 0, sizeof(*out));
    for (const lane_region_t *r = d->lane_regions; r; r = r->next) {
        if (r->gpu != gpu || r->lane != lane || !r->placed || r->retired)
            continue;
        out->chunk_id = r->chunk.id;
        out->bytes = r->chunk.bytes;
        out->jobs = r->jobs;
        out->mapped = r->mappers;
        out->maps = r->maps;
        out->restored = r->restored;
        out->handovers = atomic_load(&r->page->handovers);
        return 0;
    }
    return -ENOENT;
}
