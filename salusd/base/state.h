/* What salusd keeps across its own restarts (--state-dir), and the file it keeps it in.
 *
 * A restarted (or upgraded) daemon cannot learn from its jobs what only it knew: the job-id
 * counter, the policy's state (policy_save_state), and, for each live job, what the job will
 * re-present when it re-attaches and must be checked against: its uid and pid, its GPU and
 * sizes (learned ones included) and which lane it shared, its job page and each chunk it was
 * handed (size, the identity of the file behind its descriptor: st_dev, st_ino, and which of
 * the job's GPUs it is memory of); and what only its registration said: its class (a latency
 * target and request time; absent in files of older salusd, which load as best-effort), its
 * group, and for a job on several GPUs (--gpus N) its other members' GPUs, sizes and lanes
 * (absent in files of older salusd, whose jobs load as jobs on one GPU); and the lane's shared
 * chunks it was handed (--lane-memory shared), which it re-presents too.
 *
 * The file: a 24-byte header, then a msgpack body.
 *     magic "SALUSST\0" | format version (u32 LE) | body length (u32 LE) | FNV-1a 64 of the body
 * It is written whole (temporary file, rename), so that a crash of salusd leaves the old file or
 * the new one; a durable write also fsyncs the file before the rename and the directory after
 * it, so that the file survives a crash of the machine too. A file with another magic (not a salus state file), a
 * newer format, a wrong length or checksum, or a body that is not what this module writes is
 * refused with a message saying which; it is never trusted in part. Pure: no daemon state. */
#ifndef SALUS_SALUSD_STATE_H
#define SALUS_SALUSD_STATE_H

#include <stddef.h>
#include <stdint.h>

#define STATE_MAGIC "SALUSST"  /* 8 bytes with its NUL */
#define STATE_FORMAT_VERSION 1u
#define STATE_HEADER_BYTES 24u
#define STATE_MAX_BYTES (16u << 20)
#define STATE_MAX_JOBS 65536u
#define STATE_MAX_CHUNKS 65536u
#define STATE_NAME_BYTES 64
#define STATE_POLICY_BYTES 32
#define STATE_MAX_CLASS_NS (3600ull * 1000000000ull) /* an hour, as register takes */
#define STATE_MAX_GPUS 32        /* a --gpus job's GPUs at most (JOB_GPUS_MAX) */
#define STATE_MAX_GPU_INDEX 1023 /* a GPU index on file; the node's count is checked at re-attach */

typedef struct state_chunk_s {
    uint64_t id;
    uint64_t bytes;
    uint64_t dev, ino;  /* the file behind the chunk's descriptor */
    uint32_t device;    /* the job's k-th GPU it is memory of (--gpus; 0: its first) */
} state_chunk_t;

/* Member k >= 1 of a job on several GPUs (member 0 is the job's own gpu, lane and sizes). */
typedef struct state_member_s {
    int32_t gpu;
    uint32_t lane;
    uint64_t persistent_bytes, ephemeral_bytes;
} state_member_t;

/* The lane's shared chunks a job was handed (salusd --lane-memory shared; bytes 0: none):
 * the chunk's id, size and file, and the lane page's file. Its lane mates' records name the
 * same set; the set is its user's (the job's uid). */
typedef struct state_lane_set_s {
    uint64_t chunk_id, bytes;
    uint64_t dev, ino;
    uint64_t page_dev, page_ino;
} state_lane_set_t;

typedef struct state_job_s {
    uint64_t id;
    uint32_t uid, gid;
    int32_t pid;
    char name[STATE_NAME_BYTES];
    int32_t gpu;
    uint32_t lane;                     /* its lane then (jobs with the same lane shared it) */
    uint64_t persistent_bytes, ephemeral_bytes; /* the sizes its budget was made of */
    uint64_t iterations_expected;
    int64_t priority;
    uint64_t page_dev, page_ino;       /* its job page */
    uint64_t charged_bytes;            /* memory taken through the driver (mem_charge) */
    state_chunk_t *chunks;
    size_t chunk_count;
    /* a rank of a group ("" : a single job): it rejoins its group when it re-attaches */
    char group[STATE_NAME_BYTES];
    uint32_t group_world, group_rank, group_staleness;
    int32_t group_local_rank;
    uint32_t group_sync;              /* launch_sync_t */
    uint32_t group_share_gpus;
    /* its class (sched_core.h, "Classes"): > 0 a latency-critical job's target per request
     * (then request_ns, its expected GPU time per request, 0 = unknown); 0 best-effort. Both
     * at most STATE_MAX_CLASS_NS. */
    uint64_t latency_target_ns, request_ns;
    /* a job on several GPUs (--gpus N): gpus N >= 2 and members[0 .. N - 2] its members 1 ..
     * N - 1, every member on a GPU of its own; 0 or 1 (members NULL): a job on one GPU */
    uint32_t gpus;
    state_member_t *members;
    state_lane_set_t lane_set;        /* absent in files of older salusd: none */
} state_job_t;

typedef struct salusd_state_s {
    uint64_t next_job_id;
    char policy[STATE_POLICY_BYTES];   /* the policy whose state follows ("" none) */
    uint8_t *policy_state;
    size_t policy_state_bytes;
    state_job_t *jobs;
    size_t job_count;
} salusd_state_t;

/* The whole file image (header + body) in *out (malloc'd). 0 or -ENOMEM, -EINVAL. */
int state_encode(const salusd_state_t *state, uint8_t **out, size_t *out_bytes);
/* Reads a file image into *state (release with state_free). 0, or -EINVAL / -EPROTO /
 * -ENOMEM with err saying what is wrong with it (nothing to free then). */
int state_decode(const uint8_t *image, size_t image_bytes, salusd_state_t *state, char *err,
                 size_t err_size);
void state_free(salusd_state_t *state);

/* Writes path atomically (path.tmp, then rename; durable: fsync of the file before and of the
 * directory after; the directory is created 0700 when missing). Its directories are opened
 * component by component (fsio_open_dir: no symbolic link followed), the last one must be
 * salusd's uid's and writable by nobody else. 0 or a negative errno with err. */
int state_write_file(const char *path, const salusd_state_t *state, int durable, char *err,
                     size_t err_size);
/* Reads and checks path: 0; -ENOENT when there is no file (a first start); other negative
 * values with err naming the file and what is wrong (state left empty). */
int state_read_file(const char *path, salusd_state_t *state, char *err, size_t err_size);

/* The default state directory: $STATE_DIRECTORY (systemd's StateDirectory=, one path), else
 * /var/lib/salus as root, else $XDG_STATE_HOME/salus or ~/.local/state/salus. */
int state_default_dir(char *out, size_t out_size);
/* The state file of a daemon on socket_path inside dir: salusd.state for the default socket,
 * else salusd-<16 hex digits of the socket path's hash>.state (one file per control socket,
 * so that daemons on different sockets never share one). */
int state_file_path(const char *dir, const char *socket_path, const char *default_socket,
                    char *out, size_t out_size);

#endif
