/* salus's SPANK plugin: `srun --salus[=OPTS]` and `sbatch --salus[=OPTS]` make every task of
 * the step a salus job of its node's salusd.
 *
 * plugstack.conf: required PATH/salus_spank.so [socket=PATH] [shards=N] [lib=DIR]
 *   socket=PATH  the node's salusd socket; %n is the node's name (SLURMD_NODENAME), for nodes
 *                that share a filesystem (default /run/salus/salusd.sock)
 *   shards=N     the shards each GPU is split into (gres/shard): a task holding k of GPU g
 *                gets a budget of k/N of g's memory on g (default: shards are not read)
 *   lib=DIR      where the shim (libcuda.so.1) is (default: the installed one)
 * OPTS (comma-separated): name=, iterations=, persistent=, ephemeral=, priority=, sync=
 * (bsp, ssp:S, asp), share-gpus; as salusctl run's flags.
 *
 * In slurm_spank_task_init_privileged (slurmstepd's child for the task, root, before it
 * execs) salusd reserves a job for the task's process and user (reserve_for: the group is the
 * step, JOBID.STEPID, rank SLURM_PROCID, world SLURM_NTASKS; a one-task step is a single
 * job), and the task's environment gets SALUS_JOB_ID, SALUS_SOCKET and the shim's variables,
 * so whatever the task runs registers against that reservation. slurm_spank_task_exit
 * (slurmstepd, as it collects the task's exit status) reports how it ended (reserved_exit).
 * A node whose salusd does not answer fails the task at once, naming the socket. */
#include <slurm/spank.h>

#include "client.h"
#include "options.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

SPANK_PLUGIN(salus, 1);

#ifndef SALUS_SHIM_DIR
#define SALUS_SHIM_DIR "/usr/local/lib/salus"
#endif
#define SALUS_DEFAULT_SOCKET "/run/salus/salusd.sock"
#define SALUS_TIMEOUT_MS 10000
#define SALUS_PATH_BYTES 4096
#define SALUS_OPTS_BYTES 1024
/* Slurm's step ids of the batch script and the extern step (slurm.h's SLURM_BATCH_SCRIPT,
 * SLURM_EXTERN_CONT) */
#define SALUS_STEP_BATCH 0xfffffffbu
#define SALUS_STEP_EXTERN 0xfffffffcu

static int salus_enabled;
static char salus_opts[SALUS_OPTS_BYTES];

static int salus_option(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    salus_enabled = 1;
    snprintf(salus_opts, sizeof(salus_opts), "%s", optarg ? optarg : "");
    return 0;
}

static struct spank_option salus_spank_option = {
    "salus", "[OPTS]",
    "Run every task as a salus job of its node's salusd (OPTS: name=, iterations=, "
    "persistent=, ephemeral=, priority=, sync=bsp|ssp:S|asp, share-gpus; comma-separated)",
    2, 0, salus_option,
};

/* registered here, not through a spank_options table: sbatch and salloc (the allocator
 * context) know only options registered this way */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_option_register(sp, &salus_spank_option) != ESPANK_SUCCESS) {
        slurm_error("salus: cannot register the --salus option");
        return -1;
    }
    return 0;
}

typedef struct salus_args_s {
    char socket[SALUS_PATH_BYTES]; /* with %n */
    char lib[SALUS_PATH_BYTES];
    unsigned shards;
} salus_args_t;

typedef struct salus_job_opts_s {
    char name[64];
    uint64_t iterations, persistent, ephemeral;
    int64_t priority;
    char sync[32];
    int share_gpus;
} salus_job_opts_t;

static int parse_args(int ac, char **av, salus_args_t *a)
{
    snprintf(a->socket, sizeof(a->socket), "%s", SALUS_DEFAULT_SOCKET);
    snprintf(a->lib, sizeof(a->lib), "%s", SALUS_SHIM_DIR);
    a->shards = 0;
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "socket=", 7) == 0 && av[i][7]) {
            snprintf(a->socket, sizeof(a->socket), "%s", av[i] + 7);
        } else if (strncmp(av[i], "lib=", 4) == 0 && av[i][4]) {
            snprintf(a->lib, sizeof(a->lib), "%s", av[i] + 4);
        } else if (strncmp(av[i], "shards=", 7) == 0) {
            char *end;
            unsigned long n = strtoul(av[i] + 7, &end, 10);
            if (*end || n == 0 || n > 1024) {
                slurm_error("salus: plugstack.conf: shards= takes 1 to 1024, not '%s'", av[i] + 7);
                return -1;
            }
            a->shards = (unsigned)n;
        } else {
            slurm_error("salus: plugstack.conf: unknown argument '%s' (socket=, shards=, lib=)",
                        av[i]);
            return -1;
        }
    }
    return 0;
}

static int parse_size(const char *key, const char *value, uint64_t *out)
{
    unsigned long long bytes;
    if (options_parse_bytes(value, &bytes) < 0) {
        slurm_error("salus: --salus %s= takes a size such as 512MiB, not '%s'", key, value);
        return -1;
    }
    *out = bytes;
    return 0;
}

static int parse_uint(const char *key, const char *value, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (!*value || *end || errno || value[0] == '-') {
        slurm_error("salus: --salus %s= takes a number, not '%s'", key, value);
        return -1;
    }
    *out = v;
    return 0;
}

/* OPTS of --salus; -1 after a message naming the bad one */
static int parse_opts(const char *text, salus_job_opts_t *o)
{
    char buf[SALUS_OPTS_BYTES], *save = NULL;
    memset(o, 0, sizeof(*o));
    snprintf(o->sync, sizeof(o->sync), "bsp");
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        const char *value = eq ? eq + 1 : NULL;
        if (eq)
            *eq = '\0';
        int rc = 0;
        if (strcmp(tok, "share-gpus") == 0 && !value) {
            o->share_gpus = 1;
        } else if (!value) {
            rc = -1;
        } else if (strcmp(tok, "name") == 0 && strlen(value) < sizeof(o->name)) {
            snprintf(o->name, sizeof(o->name), "%s", value);
        } else if (strcmp(tok, "iterations") == 0) {
            rc = parse_uint(tok, value, &o->iterations);
        } else if (strcmp(tok, "persistent") == 0) {
            rc = parse_size(tok, value, &o->persistent);
        } else if (strcmp(tok, "ephemeral") == 0) {
            rc = parse_size(tok, value, &o->ephemeral);
        } else if (strcmp(tok, "priority") == 0) {
            char *end;
            o->priority = strtoll(value, &end, 10);
            rc = *value && !*end ? 0 : -1;
        } else if (strcmp(tok, "sync") == 0 && strlen(value) < sizeof(o->sync)) {
            snprintf(o->sync, sizeof(o->sync), "%s", value);
        } else {
            rc = -1;
        }
        if (rc < 0) {
            slurm_error("salus: --salus: bad option '%s%s%s' (name=, iterations=, persistent=, "
                        "ephemeral=, priority=, sync=bsp|ssp:S|asp, share-gpus)",
                        tok, value ? "=" : "", value ? value : "");
            return -1;
        }
    }
    return 0;
}

/* PATH with %n replaced by the node's name */
static int socket_path(spank_t sp, const char *pattern, char *out, size_t size)
{
    char node[256] = "";
    if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) != ESPANK_SUCCESS || !node[0]) {
        const char *env = getenv("SLURMD_NODENAME");
        if (env && *env)
            snprintf(node, sizeof(node), "%s", env);
        else if (gethostname(node, sizeof(node) - 1) < 0)
            snprintf(node, sizeof(node), "localhost");
    }
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        const char *add = p[0] == '%' && p[1] == 'n' ? node : NULL;
        size_t len = add ? strlen(add) : 1;
        if (n + len + 1 > size)
            return -1;
        memcpy(out + n, add ? add : p, len);
        n += len;
        p += add ? 1 : 0;
    }
    out[n] = '\0';
    return 0;
}

/* "JOBID.STEPID.TASK" (STEPID "batch" for the batch script): the reservation's tag; its first
 * two parts are the group. 0, or 1 for a step without tasks of the user (extern). */
static int step_names(spank_t sp, char *group, size_t gsize, char *tag, size_t tsize)
{
    uint32_t job = 0, step = 0, task = 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_GLOBAL_ID, &task) != ESPANK_SUCCESS)
        return -1;
    if (step == SALUS_STEP_EXTERN)
        return 1;
    if (step == SALUS_STEP_BATCH)
        snprintf(group, gsize, "%u.batch", job);
    else
        snprintf(group, gsize, "%u.%u", job, step);
    snprintf(tag, tsize, "slurm:%s.%u", group, task);
    return 0;
}

static int setenv_or_fail(spank_t sp, const char *var, const char *value)
{
    if (spank_setenv(sp, var, value, 1) == ESPANK_SUCCESS)
        return 0;
    slurm_error("salus: cannot set %s in the task's environment", var);
    return -1;
}

/* VAR=ADD:old (ADD alone when VAR is unset) */
static int prepend_env(spank_t sp, const char *var, const char *add)
{
    char old[SALUS_PATH_BYTES] = "", joined[2 * SALUS_PATH_BYTES + 2];
    if (spank_getenv(sp, var, old, sizeof(old)) != ESPANK_SUCCESS)
        old[0] = '\0';
    snprintf(joined, sizeof(joined), "%s%s%s", add, old[0] ? ":" : "", old);
    return setenv_or_fail(sp, var, joined);
}

/* the simulated GPU salusd runs on, when it runs on simgpu ("" otherwise) */
static int daemon_simgpu(salus_client_t *c, char *shm, size_t size, char *err, size_t esize)
{
    proto_msg_t reply;
    char device[16] = "";
    shm[0] = '\0';
    salus_client_begin(c, "status", 0);
    int rc = salus_client_call(c, &reply, err, esize);
    if (rc < 0)
        return rc;
    proto_get_str_copy(&reply.body, "device", device, sizeof(device));
    if (strcmp(device, "simgpu") == 0 &&
        proto_get_str_copy(&reply.body, "simgpu_shm", shm, size) == 0 && shm[0] == '/')
        memmove(shm, shm + 1, strlen(shm));
    proto_msg_free(&reply);
    return 0;
}

static unsigned env_uint(spank_t sp, const char *var, int *found)
{
    char text[64] = "";
    *found = spank_getenv(sp, var, text, sizeof(text)) == ESPANK_SUCCESS && text[0];
    return *found ? (unsigned)strtoul(text, NULL, 10) : 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    salus_args_t args;
    salus_job_opts_t opts;
    char group[64], tag[96], sock[SALUS_PATH_BYTES], err[512] = "", text[64];
    char shm[256] = "", preload[SALUS_PATH_BYTES + 16];
    uid_t uid;
    gid_t gid;
    pid_t pid = getpid(); /* the task's process (S_TASK_PID is not known yet here) */
    uint32_t rank = 0, world = 1, local = 0;
    if (!salus_enabled)
        return 0;
    if (parse_args(ac, av, &args) < 0 || parse_opts(salus_opts, &opts) < 0)
        return -1;
    int steps = step_names(sp, group, sizeof(group), tag, sizeof(tag));
    if (steps != 0)
        return steps > 0 ? 0 : -1;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &world) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS) {
        slurm_error("salus: the task's ids are not known to the plugin");
        return -1;
    }
    if (socket_path(sp, args.socket, sock, sizeof(sock)) < 0) {
        slurm_error("salus: the socket path '%s' is too long", args.socket);
        return -1;
    }
    /* shards: k of GPU g (the first of CUDA_VISIBLE_DEVICES) of the N each GPU has */
    int has_k = 0, has_g = 0;
    unsigned k = args.shards ? env_uint(sp, "SLURM_SHARDS_ON_NODE", &has_k) : 0;
    unsigned g = has_k ? env_uint(sp, "CUDA_VISIBLE_DEVICES", &has_g) : 0;
    int share = has_k && has_g && k > 0;
    if (share && k > args.shards) {
        slurm_error("salus: the task holds %u shards, more than the %u of a GPU (shards= in "
                    "plugstack.conf)", k, args.shards);
        return -1;
    }

    salus_client_t c;
    int rc = salus_client_open(&c, sock, "salus-spank", SALUS_TIMEOUT_MS, err, sizeof(err));
    if (rc < 0) {
        slurm_error("salus: cannot reach salusd at %s: %s", sock, err[0] ? err : strerror(-rc));
        return -1;
    }
    rc = daemon_simgpu(&c, shm, sizeof(shm), err, sizeof(err));
    int grouped = world > 1;
    msgpack_packer *pk = rc < 0 ? NULL
                                : salus_client_begin(&c, "reserve_for",
                                                     10 + (share ? 3 : 0) + (grouped ? 7 : 0));
    if (pk) {
        char name[sizeof(tag)];
        /* default: JOBID.STEPID.TASK (the tag without "slurm:"; fits a job's 63 bytes) */
        snprintf(name, sizeof(name), "%s", opts.name[0] ? opts.name : tag + 6);
        proto_pack_kv_str(pk, "tag", tag);
        proto_pack_kv_uint(pk, "uid", uid);
        proto_pack_kv_uint(pk, "gid", gid);
        proto_pack_kv_uint(pk, "pid", (uint64_t)pid);
        proto_pack_kv_uint(pk, "supervisor_pid", (uint64_t)getppid()); /* slurmstepd */
        proto_pack_kv_str(pk, "name", name);
        proto_pack_kv_uint(pk, "iterations", opts.iterations);
        proto_pack_kv_uint(pk, "persistent_bytes", opts.persistent);
        proto_pack_kv_uint(pk, "ephemeral_bytes", opts.ephemeral);
        proto_pack_kv_int(pk, "priority", opts.priority);
        if (share) {
            proto_pack_kv_uint(pk, "pin_gpu", g);
            proto_pack_kv_uint(pk, "share_k", k);
            proto_pack_kv_uint(pk, "share_n", args.shards);
        }
        if (grouped) {
            const char *colon = strchr(opts.sync, ':');
            char mode[8];
            snprintf(mode, sizeof(mode), "%.*s", colon ? (int)(colon - opts.sync) : 7, opts.sync);
            proto_pack_kv_str(pk, "group", group);
            proto_pack_kv_uint(pk, "world", world);
            proto_pack_kv_uint(pk, "rank", rank);
            proto_pack_kv_int(pk, "local_rank", local);
            proto_pack_kv_str(pk, "sync", mode);
            proto_pack_kv_uint(pk, "staleness", colon ? strtoul(colon + 1, NULL, 10) : 0);
            proto_pack_kv_bool(pk, "share_gpus", opts.share_gpus);
        }
    }
    proto_msg_t reply;
    uint64_t id = 0, persistent = opts.persistent, ephemeral = opts.ephemeral;
    if (pk)
        rc = salus_client_call(&c, &reply, err, sizeof(err));
    if (pk && rc == 0) {
        proto_get_uint(&reply.body, "job_id", &id);
        proto_get_uint(&reply.body, "persistent_bytes", &persistent);
        proto_get_uint(&reply.body, "ephemeral_bytes", &ephemeral);
        proto_msg_free(&reply);
    }
    salus_client_close(&c);
    if (rc < 0 || id == 0) {
        slurm_error("salus: salusd at %s refused task %u of step %s: %s", sock, rank, group,
                    err[0] ? err : strerror(rc < 0 ? -rc : EPROTO));
        return -1;
    }

    snprintf(preload, sizeof(preload), "%s/libcuda.so.1", args.lib);
    snprintf(text, sizeof(text), "%llu", (unsigned long long)id);
    rc = setenv_or_fail(sp, "SALUS_JOB_ID", text) | setenv_or_fail(sp, "SALUS_SOCKET", sock) |
         prepend_env(sp, "LD_LIBRARY_PATH", args.lib) | prepend_env(sp, "LD_PRELOAD", preload);
    if (spank_getenv(sp, "PYTORCH_CUDA_ALLOC_CONF", err, sizeof(err)) != ESPANK_SUCCESS)
        rc |= setenv_or_fail(sp, "PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");
    if (shm[0]) /* the node's simulated GPU, not the one of the node srun ran on */
        rc |= setenv_or_fail(sp, "SIMGPU_SHM_NAME", shm);
    if (persistent || ephemeral) {
        snprintf(text, sizeof(text), "%llu", (unsigned long long)persistent);
        rc |= setenv_or_fail(sp, "SALUS_MEM_PERSISTENT", text);
        snprintf(text, sizeof(text), "%llu", (unsigned long long)ephemeral);
        rc |= setenv_or_fail(sp, "SALUS_MEM_EPHEMERAL", text);
    }
    if (share) { /* the shim shows the job its one GPU, as CUDA_VISIBLE_DEVICES would */
        snprintf(text, sizeof(text), "%u", g);
        rc |= setenv_or_fail(sp, "SALUS_GPU", text);
        spank_unsetenv(sp, "CUDA_VISIBLE_DEVICES");
    }
    if (grouped) {
        rc |= setenv_or_fail(sp, "SALUS_GROUP", group);
        snprintf(text, sizeof(text), "%u", world);
        rc |= setenv_or_fail(sp, "SALUS_WORLD", text);
        snprintf(text, sizeof(text), "%u", rank);
        rc |= setenv_or_fail(sp, "SALUS_RANK", text);
        snprintf(text, sizeof(text), "%u", local);
        rc |= setenv_or_fail(sp, "SALUS_LOCAL_RANK", text);
    }
    return rc ? -1 : 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    salus_args_t args;
    char group[64], tag[96], sock[SALUS_PATH_BYTES], err[512] = "";
    int status = 0;
    if (!salus_enabled || parse_args(ac, av, &args) < 0)
        return 0;
    if (step_names(sp, group, sizeof(group), tag, sizeof(tag)) != 0 ||
        spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS ||
        socket_path(sp, args.socket, sock, sizeof(sock)) < 0)
        return 0;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + sig;
    salus_client_t c;
    int rc = salus_client_open(&c, sock, "salus-spank", SALUS_TIMEOUT_MS, err, sizeof(err));
    if (rc < 0) { /* the task failed at its start for the same reason, and said so */
        slurm_debug("salus: cannot report the end of %s to salusd at %s: %s", tag, sock, err);
        return 0;
    }
    msgpack_packer *pk = salus_client_begin(&c, "reserved_exit", sig ? 3 : 2);
    proto_pack_kv_str(pk, "tag", tag);
    proto_pack_kv_int(pk, "status", code > 255 ? 255 : code);
    if (sig)
        proto_pack_kv_int(pk, "signal", sig);
    proto_msg_t reply;
    rc = salus_client_call(&c, &reply, err, sizeof(err));
    if (rc == 0)
        proto_msg_free(&reply);
    else /* a task whose reservation failed has none: nothing to report */
        slurm_debug("salus: reserved_exit %s: %s", tag, err);
    salus_client_close(&c);
    return 0;
}
