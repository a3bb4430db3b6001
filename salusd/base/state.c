/* salusd's state file (see state.h): encode, decode and check, atomic writes. */
#include "state.h"

#include "fsio.h"
#include "le_bytes.h"
#include "paths.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The lane set a job had mapped: "lane_set": [chunk_id, bytes, dev, ino, page_dev, page_ino],
 * only when it had one (a file without it loads as a job without one). */
static void pack_lane_set(msgpack_packer *pk, const state_lane_set_t *set)
{
    const uint64_t f[6] = {set->chunk_id, set->bytes, set->dev, set->ino, set->page_dev,
                           set->page_ino};
    if (!set->bytes)
        return;
    proto_pack_str(pk, "lane_set");
    msgpack_pack_array(pk, 6);
    for (int k = 0; k < 6; k++)
        msgpack_pack_uint64(pk, f[k]);
}

static int decode_lane_set(const msgpack_object *job, state_lane_set_t *set)
{
    const msgpack_object *o = proto_get(job, "lane_set");
    uint64_t f[6];
    memset(set, 0, sizeof(*set));
    if (!o)
        return 0;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 6)
        return -EPROTO;
    for (int k = 0; k < 6; k++) {
        if (o->via.array.ptr[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return -EPROTO;
        f[k] = o->via.array.ptr[k].via.u64;
    }
    if (f[1] == 0 || f[1] > (1ull << 50))
        return -EPROTO;
    *set = (state_lane_set_t){.chunk_id = f[0], .bytes = f[1], .dev = f[2], .ino = f[3],
                              .page_dev = f[4], .page_ino = f[5]};
    return 0;
}

static void pack_job(msgpack_packer *pk, const state_job_t *job)
{
    /* the optional parts (a group, a class, other GPUs, a lane set) only when there is one: a
     * file without them is what an older salusd wrote, and loads as a single best-effort job on
     * one GPU */
    int several = job->gpus >= 2 && job->members;
    msgpack_pack_map(pk, 16 + (job->group[0] ? 7 : 0) + (job->latency_target_ns ? 2 : 0) +
                             (several ? 2 : 0) + (job->lane_set.bytes ? 1 : 0));
    if (several) {
        proto_pack_kv_uint(pk, "gpus", job->gpus);
        proto_pack_str(pk, "members");
        msgpack_pack_array(pk, job->gpus - 1);
        for (uint32_t k = 0; k + 1 < job->gpus; k++) {
            msgpack_pack_array(pk, 4);
            msgpack_pack_uint64(pk, (uint64_t)job->members[k].gpu);
            msgpack_pack_uint64(pk, job->members[k].lane);
            msgpack_pack_uint64(pk, job->members[k].persistent_bytes);
            msgpack_pack_uint64(pk, job->members[k].ephemeral_bytes);
        }
    }
    pack_lane_set(pk, &job->lane_set);
    if (job->latency_target_ns) {
        proto_pack_kv_uint(pk, "latency_target_ns", job->latency_target_ns);
        proto_pack_kv_uint(pk, "request_ns", job->request_ns);
    }
    if (job->group[0]) {
        proto_pack_kv_str(pk, "group", job->group);
        proto_pack_kv_uint(pk, "group_world", job->group_world);
        proto_pack_kv_uint(pk, "group_rank", job->group_rank);
        proto_pack_kv_int(pk, "group_local_rank", job->group_local_rank);
        proto_pack_kv_uint(pk, "group_sync", job->group_sync);
        proto_pack_kv_uint(pk, "group_staleness", job->group_staleness);
        proto_pack_kv_uint(pk, "group_share_gpus", job->group_share_gpus);
    }
    proto_pack_kv_uint(pk, "id", job->id);
    proto_pack_kv_uint(pk, "uid", job->uid);
    proto_pack_kv_uint(pk, "gid", job->gid);
    proto_pack_kv_int(pk, "pid", job->pid);
    proto_pack_kv_str(pk, "name", job->name);
    proto_pack_kv_int(pk, "gpu", job->gpu);
    proto_pack_kv_uint(pk, "lane", job->lane);
    proto_pack_kv_uint(pk, "persistent_bytes", job->persistent_bytes);
    proto_pack_kv_uint(pk, "ephemeral_bytes", job->ephemeral_bytes);
    proto_pack_kv_uint(pk, "iterations_expected", job->iterations_expected);
    proto_pack_kv_int(pk, "priority", job->priority);
    proto_pack_kv_uint(pk, "page_dev", job->page_dev);
    proto_pack_kv_uint(pk, "page_ino", job->page_ino);
    proto_pack_kv_uint(pk, "charged_bytes", job->charged_bytes);
    proto_pack_kv_uint(pk, "chunk_count", job->chunk_count);
    proto_pack_str(pk, "chunks");
    msgpack_pack_array(pk, (uint32_t)job->chunk_count);
    for (size_t i = 0; i < job->chunk_count; i++) {
        /* [id, bytes, dev, ino], and the job's GPU it is on when not its first */
        int elsewhere = several && job->chunks[i].device != 0;
        msgpack_pack_array(pk, elsewhere ? 5 : 4);
        msgpack_pack_uint64(pk, job->chunks[i].id);
        msgpack_pack_uint64(pk, job->chunks[i].bytes);
        msgpack_pack_uint64(pk, job->chunks[i].dev);
        msgpack_pack_uint64(pk, job->chunks[i].ino);
        if (elsewhere)
            msgpack_pack_uint64(pk, job->chunks[i].device);
    }
}

int state_encode(const salusd_state_t *state, uint8_t **out, size_t *out_bytes)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    if (!state || state->job_count > STATE_MAX_JOBS)
        return -EINVAL;
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_kv_uint(&pk, "next_job_id", state->next_job_id);
    proto_pack_kv_str(&pk, "policy", state->policy);
    proto_pack_str(&pk, "policy_state");
    msgpack_pack_bin(&pk, state->policy_state_bytes);
    msgpack_pack_bin_body(&pk, state->policy_state, state->policy_state_bytes);
    proto_pack_str(&pk, "jobs");
    msgpack_pack_array(&pk, (uint32_t)state->job_count);
    for (size_t i = 0; i < state->job_count; i++)
        pack_job(&pk, &state->jobs[i]);
    int rc = 0;
    size_t total = STATE_HEADER_BYTES + sbuf.size;
    uint8_t *image = sbuf.size <= STATE_MAX_BYTES ? malloc(total) : NULL;
    if (!image) {
        rc = sbuf.size > STATE_MAX_BYTES ? -EINVAL : -ENOMEM;
        goto out;
    }
    memcpy(image, STATE_MAGIC, 8);
    le_put(image + 8, STATE_FORMAT_VERSION, 4);
    le_put(image + 12, sbuf.size, 4);
    le_put(image + 16, le_fnv1a64((const uint8_t *)sbuf.data, sbuf.size), 8);
    memcpy(image + STATE_HEADER_BYTES, sbuf.data, sbuf.size);
    *out = image;
    *out_bytes = total;
out:
    msgpack_sbuffer_destroy(&sbuf);
    return rc;
}

void state_free(salusd_state_t *state)
{
    if (!state)
        return;
    for (size_t i = 0; i < state->job_count; i++) {
        free(state->jobs[i].chunks);
        free(state->jobs[i].members);
    }
    free(state->jobs);
    free(state->policy_state);
    memset(state, 0, sizeof(*state));
}

/* A uint field that must be present and at most max. */
static int need_uint(const msgpack_object *map, const char *key, uint64_t max, uint64_t *value)
{
    return proto_get_uint(map, key, value) == 0 && *value <= max ? 0 : -EPROTO;
}

static int need_int(const msgpack_object *map, const char *key, int64_t lo, int64_t hi,
                    int64_t *value)
{
    return proto_get_int(map, key, value) == 0 && *value >= lo && *value <= hi ? 0 : -EPROTO;
}

/* A job's other GPUs (--gpus N): "gpus" N and "members", N - 1 arrays [gpu, lane,
 * persistent_bytes, ephemeral_bytes], each GPU in range and none twice (the job's own
 * included). Neither key: a job on one GPU (files of older salusd). */
static int decode_members(const msgpack_object *o, state_job_t *job, const char **what)
{
    const msgpack_object *members = proto_get(o, "members");
    uint64_t n = 1;
    *what = "a job's GPUs (--gpus: gpus and members)";
    job->gpus = 1;
    if (!proto_get(o, "gpus"))
        return members ? -EPROTO : 0;
    if (need_uint(o, "gpus", STATE_MAX_GPUS, &n) < 0 || n < 2 || !members ||
        members->type != MSGPACK_OBJECT_ARRAY || members->via.array.size != n - 1)
        return -EPROTO;
    job->members = calloc(n - 1, sizeof(*job->members));
    if (!job->members)
        return -ENOMEM;
    job->gpus = (uint32_t)n;
    for (uint32_t k = 0; k + 1 < n; k++) {
        const msgpack_object *m = &members->via.array.ptr[k];
        uint64_t f[4];
        if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size != 4)
            return -EPROTO;
        for (int i = 0; i < 4; i++) {
            if (m->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return -EPROTO;
            f[i] = m->via.array.ptr[i].via.u64;
        }
        if (f[0] > STATE_MAX_GPU_INDEX) {
            *what = "a job's GPUs (--gpus: a member's GPU index out of range)";
            return -EPROTO;
        }
        if (f[1] > UINT32_MAX || f[2] > (1ull << 50) || f[3] > (1ull << 50))
            return -EPROTO;
        int twice = (int64_t)f[0] == job->gpu;
        for (uint32_t j = 0; j < k; j++)
            twice |= (int64_t)f[0] == job->members[j].gpu;
        if (twice) {
            *what = "a job's GPUs (--gpus: one GPU given to two of its members)";
            return -EPROTO;
        }
        job->members[k] = (state_member_t){.gpu = (int32_t)f[0], .lane = (uint32_t)f[1],
                                           .persistent_bytes = f[2], .ephemeral_bytes = f[3]};
    }
    return 0;
}

static int decode_job(const msgpack_object *o, state_job_t *job, const char **what)
{
    uint64_t u[11];
    int64_t pid, gpu, priority;
    *what = "a job record";
    if (o->type != MSGPACK_OBJECT_MAP)
        return -EPROTO;
    if (need_uint(o, "id", UINT64_MAX, &u[0]) < 0 || u[0] == 0 ||
        need_uint(o, "uid", UINT32_MAX, &u[1]) < 0 || need_uint(o, "gid", UINT32_MAX, &u[2]) < 0 ||
        need_int(o, "pid", 1, INT32_MAX, &pid) < 0 ||
        need_int(o, "gpu", 0, STATE_MAX_GPU_INDEX, &gpu) < 0 ||
        need_uint(o, "lane", UINT32_MAX, &u[3]) < 0 ||
        need_uint(o, "persistent_bytes", 1ull << 50, &u[4]) < 0 ||
        need_uint(o, "ephemeral_bytes", 1ull << 50, &u[5]) < 0 ||
        need_uint(o, "iterations_expected", UINT64_MAX, &u[6]) < 0 ||
        need_int(o, "priority", INT64_MIN, INT64_MAX, &priority) < 0 ||
        need_uint(o, "page_dev", UINT64_MAX, &u[7]) < 0 ||
        need_uint(o, "page_ino", UINT64_MAX, &u[8]) < 0 ||
        need_uint(o, "charged_bytes", 1ull << 50, &u[9]) < 0 ||
        need_uint(o, "chunk_count", STATE_MAX_CHUNKS, &u[10]) < 0 ||
        proto_get_str_copy(o, "name", job->name, sizeof(job->name)) < 0)
        return -EPROTO;
    job->id = u[0];
    job->uid = (uint32_t)u[1];
    job->gid = (uint32_t)u[2];
    job->pid = (int32_t)pid;
    job->gpu = (int32_t)gpu;
    job->lane = (uint32_t)u[3];
    job->persistent_bytes = u[4];
    job->ephemeral_bytes = u[5];
    job->iterations_expected = u[6];
    job->priority = priority;
    job->page_dev = u[7];
    job->page_ino = u[8];
    job->charged_bytes = u[9];
    *what = "a job's group";
    int have_group = proto_get_str_copy(o, "group", job->group, sizeof(job->group));
    if (have_group == 0) {
        uint64_t g[5];
        int64_t local;
        if (need_uint(o, "group_world", 1u << 20, &g[0]) < 0 || g[0] == 0 ||
            need_uint(o, "group_rank", g[0] - 1, &g[1]) < 0 ||
            need_int(o, "group_local_rank", -1, (int64_t)g[0] - 1, &local) < 0 ||
            need_uint(o, "group_sync", 2, &g[2]) < 0 ||
            need_uint(o, "group_staleness", 1u << 20, &g[3]) < 0 ||
            need_uint(o, "group_share_gpus", 1, &g[4]) < 0 || !job->group[0])
            return -EPROTO;
        job->group_world = (uint32_t)g[0];
        job->group_rank = (uint32_t)g[1];
        job->group_local_rank = (int32_t)local;
        job->group_sync = (uint32_t)g[2];
        job->group_staleness = (uint32_t)g[3];
        job->group_share_gpus = (uint32_t)g[4];
    } else if (have_group != -ENOENT) {
        return -EPROTO;
    } else {
        job->group[0] = 0;
    }
    *what = "a job's class";
    if (proto_get(o, "latency_target_ns")) { /* a latency-critical job (absent: best-effort) */
        if (need_uint(o, "latency_target_ns", STATE_MAX_CLASS_NS, &job->latency_target_ns) < 0 ||
            job->latency_target_ns == 0 ||
            need_uint(o, "request_ns", STATE_MAX_CLASS_NS, &job->request_ns) < 0)
            return -EPROTO;
    } else if (proto_get(o, "request_ns")) {
        return -EPROTO; /* a request time without a target: not what this module writes */
    }
    int rc = decode_members(o, job, what);
    if (rc < 0)
        return rc;
    *what = "a job's lane set";
    if (decode_lane_set(o, &job->lane_set) < 0)
        return -EPROTO;
    const msgpack_object *chunks = proto_get(o, "chunks");
    *what = "a job's chunks";
    if (!chunks || chunks->type != MSGPACK_OBJECT_ARRAY || chunks->via.array.size != u[10])
        return -EPROTO;
    job->chunk_count = chunks->via.array.size;
    job->chunks = job->chunk_count ? calloc(job->chunk_count, sizeof(*job->chunks)) : NULL;
    if (job->chunk_count && !job->chunks)
        return -ENOMEM;
    for (size_t i = 0; i < job->chunk_count; i++) {
        const msgpack_object *c = &chunks->via.array.ptr[i];
        /* [id, bytes, dev, ino] on the job's first GPU; [.., device] on its device-th */
        if (c->type != MSGPACK_OBJECT_ARRAY ||
            (c->via.array.size != 4 && c->via.array.size != 5))
            return -EPROTO;
        uint64_t f[5] = {0};
        for (uint32_t k = 0; k < c->via.array.size; k++) {
            if (c->via.array.ptr[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return -EPROTO;
            f[k] = c->via.array.ptr[k].via.u64;
        }
        if (f[1] == 0 || f[1] > (1ull << 50))
            return -EPROTO;
        if (f[4] >= job->gpus) {
            *what = "a job's chunks (a chunk on a GPU the job does not have)";
            return -EPROTO;
        }
        job->chunks[i] = (state_chunk_t){.id = f[0], .bytes = f[1], .dev = f[2], .ino = f[3],
                                         .device = (uint32_t)f[4]};
    }
    return 0;
}

/* One past the last id a job's record takes (a --gpus N job: its own and its N - 1 members'). */
static uint64_t job_ids_end(const state_job_t *job)
{
    return job->id + (job->gpus >= 2 ? job->gpus : 1);
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(const state_job_t *const *)a)->id, y = (*(const state_job_t *const *)b)->id;
    return x < y ? -1 : x > y;
}

/* 0 when no two of the n jobs' id ranges meet, else -EPROTO (-ENOMEM). */
static int ids_apart(const state_job_t *jobs, size_t n)
{
    if (n < 2)
        return 0;
    const state_job_t **sorted = malloc(n * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        sorted[i] = &jobs[i];
    qsort(sorted, n, sizeof(*sorted), by_id);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (sorted[i]->id < job_ids_end(sorted[i - 1]))
            rc = -EPROTO;
    free(sorted);
    return rc;
}

static int decode_body(const msgpack_object *root, salusd_state_t *state, const char **what)
{
    *what = "the body";
    if (root->type != MSGPACK_OBJECT_MAP)
        return -EPROTO;
    *what = "next_job_id";
    if (need_uint(root, "next_job_id", UINT64_MAX - 1, &state->next_job_id) < 0 ||
        state->next_job_id == 0)
        return -EPROTO;
    *what = "policy";
    if (proto_get_str_copy(root, "policy", state->policy, sizeof(state->policy)) < 0)
        return -EPROTO;
    const msgpack_object *ps = proto_get(root, "policy_state");
    if (!ps || ps->type != MSGPACK_OBJECT_BIN)
        return -EPROTO;
    if (ps->via.bin.size) {
        state->policy_state = malloc(ps->via.bin.size);
        if (!state->policy_state)
            return -ENOMEM;
        memcpy(state->policy_state, ps->via.bin.ptr, ps->via.bin.size);
        state->policy_state_bytes = ps->via.bin.size;
    }
    const msgpack_object *jobs = proto_get(root, "jobs");
    *what = "jobs";
    if (!jobs || jobs->type != MSGPACK_OBJECT_ARRAY || jobs->via.array.size > STATE_MAX_JOBS)
        return -EPROTO;
    size_t n = jobs->via.array.size;
    state->jobs = n ? calloc(n, sizeof(*state->jobs)) : NULL;
    if (n && !state->jobs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        state->job_count = i + 1; /* what state_free must release */
        int rc = decode_job(&jobs->via.array.ptr[i], &state->jobs[i], what);
        if (rc < 0)
            return rc;
        if (state->jobs[i].id >= state->next_job_id ||
            job_ids_end(&state->jobs[i]) > state->next_job_id) {
            *what = "a job id (or a --gpus job's member's) at or past next_job_id";
            return -EPROTO;
        }
    }
    /* a --gpus N job's members take the ids after its own: no two jobs' ids may meet */
    *what = "two jobs' ids (a --gpus job's members' included) that meet";
    return ids_apart(state->jobs, n);
}

int state_decode(const uint8_t *image, size_t image_bytes, salusd_state_t *state, char *err,
                 size_t err_size)
{
    memset(state, 0, sizeof(*state));
    if (image_bytes < STATE_HEADER_BYTES || memcmp(image, STATE_MAGIC, 8) != 0) {
        snprintf(err, err_size, "not a salusd state file (no SALUSST magic)");
        return -EINVAL;
    }
    uint32_t version = (uint32_t)le_get(image + 8, 4);
    uint32_t body = (uint32_t)le_get(image + 12, 4);
    if (version != STATE_FORMAT_VERSION) {
        snprintf(err, err_size, "state format %u, this salusd reads format %u", version,
                 STATE_FORMAT_VERSION);
        return -EPROTO;
    }
    if (body != image_bytes - STATE_HEADER_BYTES) {
        snprintf(err, err_size, "truncated or padded: the header says %u bytes of body, the "
                                "file has %zu", body, image_bytes - STATE_HEADER_BYTES);
        return -EPROTO;
    }
    const uint8_t *payload = image + STATE_HEADER_BYTES;
    if (le_fnv1a64(payload, body) != le_get(image + 16, 8)) {
        snprintf(err, err_size, "checksum mismatch (the file is corrupt)");
        return -EPROTO;
    }
    if (proto_scan(payload, body) < 0) {
        snprintf(err, err_size, "the body is not one well-formed msgpack value");
        return -EPROTO;
    }
    msgpack_unpacked unpacked;
    msgpack_unpacked_init(&unpacked);
    size_t offset = 0;
    int rc;
    const char *what = "the body";
    if (msgpack_unpack_next(&unpacked, (const char *)payload, body, &offset) !=
            MSGPACK_UNPACK_SUCCESS || offset != body) {
        rc = -EPROTO;
    } else {
        rc = decode_body(&unpacked.data, state, &what);
    }
    msgpack_unpacked_destroy(&unpacked);
    if (rc < 0) {
        snprintf(err, err_size, rc == -ENOMEM ? "out of memory" : "bad %s", what);
        state_free(state);
    }
    return rc;
}

int state_write_file(const char *path, const salusd_state_t *state, int durable, char *err,
                     size_t err_size)
{
    char tmp[NAME_MAX + 1], why[PATH_MAX + 256];
    const char *name = NULL;
    uint8_t *image = NULL;
    size_t bytes = 0;
    int fd = -1, dfd = -1, rc;
    rc = state_encode(state, &image, &bytes);
    if (rc < 0) {
        snprintf(err, err_size, "cannot encode the state: %s", strerror(-rc));
        return rc;
    }
    /* the directory opened component by component (no symbolic link followed, every one
     * root's or salusd's and not writable by others but with the sticky bit); the file's own
     * directory is made (0700) when missing */
    dfd = fsio_open_parent(path, 1, &name, why, sizeof(why));
    if (dfd < 0) {
        rc = dfd;
        snprintf(err, err_size, "the state file's directory: %s", why);
        goto out;
    }
    struct stat st;
    if (fstat(dfd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        rc = -EPERM;
        snprintf(err, err_size, "the state directory of %s must be a directory of uid %u that "
                 "only it can write", path, (unsigned)geteuid());
        goto out;
    }
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= (int)sizeof(tmp)) {
        rc = -ENAMETOOLONG;
        snprintf(err, err_size, "%s: name too long", path);
        goto out;
    }
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, err_size, "%s.tmp: %s", path, strerror(-rc));
        goto out;
    }
    rc = fsio_write_all(fd, image, bytes);
    if (rc < 0) {
        snprintf(err, err_size, "%s.tmp: %s", path, strerror(-rc));
        goto out;
    }
    if ((durable && fsync(fd) < 0) || close(fd) < 0) {
        rc = -errno;
        fd = -1;
        snprintf(err, err_size, "%s.tmp: %s", path, strerror(-rc));
        goto out;
    }
    fd = -1;
    if (renameat(dfd, tmp, dfd, name) < 0) {
        rc = -errno;
        snprintf(err, err_size, "rename to %s: %s", path, strerror(-rc));
        goto out;
    }
    if (durable)
        fsync(dfd);
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && dfd >= 0 && name)
        unlinkat(dfd, tmp, 0);
    if (dfd >= 0)
        close(dfd);
    free(image);
    return rc;
}

int state_read_file(const char *path, salusd_state_t *state, char *err, size_t err_size)
{
    memset(state, 0, sizeof(*state));
    uint8_t *image = NULL;
    size_t got = 0;
    char why[256] = "";
    int rc = fsio_read_file(path, STATE_MAX_BYTES + STATE_HEADER_BYTES, 1, "a state file",
                            &image, &got, err, err_size);
    if (rc < 0)
        return rc;
    rc = state_decode(image, got, state, why, sizeof(why));
    if (rc < 0)
        snprintf(err, err_size, "%s: %s", path, why);
    free(image);
    return rc;
}

int state_default_dir(char *out, size_t out_size)
{
    int n;
    const char *xdg = getenv("XDG_STATE_HOME");
    const char *systemd = getenv("STATE_DIRECTORY"); /* the unit's StateDirectory= */
    if (systemd && systemd[0] == '/' && !strchr(systemd, ':')) {
        n = snprintf(out, out_size, "%s", systemd);
    } else if (geteuid() == 0) {
        n = snprintf(out, out_size, "/var/lib/salus");
    } else if (xdg && xdg[0] == '/') {
        n = snprintf(out, out_size, "%s/salus", xdg);
    } else {
        const char *home = getenv("HOME");
        struct passwd *pw = (!home || home[0] != '/') ? getpwuid(getuid()) : NULL;
        if (pw)
            home = pw->pw_dir;
        if (!home || home[0] != '/')
            return -ENOENT;
        n = snprintf(out, out_size, "%s/.local/state/salus", home);
    }
    return n < 0 || (size_t)n >= out_size ? -ENAMETOOLONG : 0;
}

int state_file_path(const char *dir, const char *socket_path, const char *default_socket,
                    char *out, size_t out_size)
{
    int n;
    if (!default_socket || strcmp(socket_path, default_socket) == 0)
        n = snprintf(out, out_size, "%s/salusd.state", dir);
    else
        n = snprintf(out, out_size, "%s/salusd-%016llx.state", dir,
                     (unsigned long long)le_fnv1a64((const uint8_t *)socket_path,
                                                 strlen(socket_path)));
    return n < 0 || (size_t)n >= out_size ? -ENAMETOOLONG : 0;
}
