/* salusctl cdi generate: a Container Device Interface spec that makes a container's CUDA
 * programs salus jobs of this node's salusd.
 *
 * What it hands to the container (every path on the host is this node's, found here):
 *   - the shim, read-only, as <lib>/libcuda.so.1 and <lib>/libcuda.so, preloaded (LD_PRELOAD)
 *     and first on LD_LIBRARY_PATH: the program's libcuda.so.1 is the shim whatever the image
 *     or another spec puts in the system's library directories;
 *   - the one library the shim needs beyond the C library (msgpack-c), beside it: the image
 *     need not have it (its C library must be as new as the host's);
 *   - the driver salusd itself loaded (the system's libcuda.so.1, or simgpu), read-only, at
 *     <lib>/driver/libcuda.so.1, with SALUS_REAL_DRIVER naming it (the shim would otherwise
 *     look for a driver in the image and could find itself);
 *   - the socket's directory, read-only (a socket is connected to, not written), with
 *     SALUS_SOCKET;
 *   - on simgpu, the shared segment of the simulated devices, read-write, under /dev/shm, and
 *     SIMGPU_SHM_NAME set (a rootless container's uid is 0: simgpu's default, derived from
 *     the uid, would name another segment).
 * One device per GPU of the node, named by its index, and "all". Device N sets SALUS_GPU=N:
 * the container's jobs run on GPU N, which they see as their device 0 (cuDeviceGetCount
 * answers 1), as `--gpus N` would show it; with "all" salusd chooses the GPU. */
#include "ctl.h"
#include "json.h"
#include "run.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CDI_VERSION "0.5.0"
#define CDI_DEFAULT_KIND "salus.dev/gpu"
#define CDI_LIB_DIR "/usr/lib/salus"
#define CDI_DRIVER "/usr/lib/salus/driver/libcuda.so.1"
#define CDI_SOCKET_DIR "/run/salus"

/* What the spec is made of, read from salusd and from this installation. */
typedef struct cdi_node_s {
    char kind[128];
    char shim[PATH_MAX];
    char msgpack[PATH_MAX];      /* the shim's one library beyond the C library */
    char msgpack_name[64];       /* its soname, as the shim asks for it */
    char driver[PATH_MAX];
    char socket_dir[PATH_MAX];
    char socket_name[108];
    char simgpu_shm[256]; /* "/simgpu-0"; empty on real GPUs */
    uint64_t gpus;
} cdi_node_t;

static void usage_cdi(void)
{
    fprintf(stderr, "salusctl: usage: salusctl cdi generate [--output FILE] [--kind VENDOR/CLASS]\n");
}

/* vendor/class as CDI names them: vendor a DNS-like name, class letters, digits, - and _ */
static int kind_valid(const char *kind)
{
    const char *slash = strchr(kind, '/');
    if (!slash || slash == kind || !slash[1] || strchr(slash + 1, '/'))
        return 0;
    for (const char *p = kind; *p; p++) {
        int alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
        if (!alnum && *p != '/' && *p != '-' && *p != '_' && !(p < slash && *p == '.'))
            return 0;
    }
    return 1;
}

/* The facts of this node: salusd's status (device kind, driver, GPUs, segment) and the shim
 * next to this salusctl. EXIT_OK, or an exit code after saying why. */
static int read_node(ctl_t *ctl, cdi_node_t *node)
{
    salus_client_t c;
    proto_msg_t reply;
    char lib_dir[PATH_MAX], device[16] = "", driver[PATH_MAX] = "";
    if (salusctl_shim_dir(lib_dir, sizeof(lib_dir)) < 0) {
        fprintf(stderr, "salusctl: cdi: the shim (../lib/salus/libcuda.so.1 next to salusctl) "
                        "is missing\n");
        return EXIT_DAEMON;
    }
    char shim[PATH_MAX + 16];
    snprintf(shim, sizeof(shim), "%s/libcuda.so.1", lib_dir);
    if (!realpath(shim, node->shim)) {
        fprintf(stderr, "salusctl: cdi: the shim %s: %s\n", shim, strerror(errno));
        return EXIT_DAEMON;
    }
    /* msgpack-c as this salusctl loaded it (the shim links the same library) */
    Dl_info lib;
    if (!dladdr((void *)&msgpack_unpack_next, &lib) || !lib.dli_fname ||
        !strchr(lib.dli_fname, '/') || !realpath(lib.dli_fname, node->msgpack)) {
        fprintf(stderr, "salusctl: cdi: cannot find the msgpack-c library the shim needs\n");
        return EXIT_DAEMON;
    }
    snprintf(node->msgpack_name, sizeof(node->msgpack_name), "%s", strrchr(lib.dli_fname, '/') + 1);
    int rc = ctl_open(ctl, &c);
    if (rc != EXIT_OK)
        return rc;
    salus_client_begin(&c, "status", 0);
    rc = ctl_finish(ctl, &c, "cdi", &reply, ctl->timeout_ms);
    if (rc != EXIT_OK)
        return rc;
    const msgpack_object *gpus = proto_get(&reply.body, "gpus");
    node->gpus = gpus && gpus->type == MSGPACK_OBJECT_ARRAY ? gpus->via.array.size : 0;
    proto_get_str_copy(&reply.body, "device", device, sizeof(device));
    proto_get_str_copy(&reply.body, "driver", driver, sizeof(driver));
    if (proto_get_str_copy(&reply.body, "simgpu_shm", node->simgpu_shm,
                           sizeof(node->simgpu_shm)) < 0)
        node->simgpu_shm[0] = '\0';
    proto_msg_free(&reply);
    if (node->gpus == 0 || driver[0] != '/') {
        fprintf(stderr, "salusctl: cdi: salusd at %s reported no GPU or no driver path\n",
                ctl->socket_path);
        return EXIT_DAEMON;
    }
    if (strcmp(device, "simgpu") == 0 &&
        (node->simgpu_shm[0] != '/' || strchr(node->simgpu_shm + 1, '/'))) {
        fprintf(stderr, "salusctl: cdi: salusd runs on simgpu but did not name its segment "
                        "(an older salusd?)\n");
        return EXIT_DAEMON;
    }
    if (!realpath(driver, node->driver)) {
        fprintf(stderr, "salusctl: cdi: salusd's driver %s: %s\n", driver, strerror(errno));
        return EXIT_DAEMON;
    }
    /* the socket's directory as the host sees it (the socket itself may be replaced) */
    char dir[PATH_MAX];
    const char *slash = strrchr(ctl->socket_path, '/');
    if (!slash || !slash[1]) {
        fprintf(stderr, "salusctl: cdi: the socket path %s has no directory\n", ctl->socket_path);
        return EXIT_USAGE;
    }
    snprintf(node->socket_name, sizeof(node->socket_name), "%s", slash + 1);
    snprintf(dir, sizeof(dir), "%.*s", slash == ctl->socket_path ? 1 : (int)(slash - ctl->socket_path),
             ctl->socket_path);
    if (!realpath(dir, node->socket_dir)) {
        fprintf(stderr, "salusctl: cdi: the socket directory %s: %s\n", dir, strerror(errno));
        return EXIT_DAEMON;
    }
    return EXIT_OK;
}

static void print_mount(FILE *out, const char *host, const char *container, int writable,
                        int last)
{
    fprintf(out, "      {\"hostPath\": ");
    json_print_string(out, host, strlen(host));
    fprintf(out, ", \"containerPath\": ");
    json_print_string(out, container, strlen(container));
    fprintf(out, ", \"options\": [\"%s\", \"nosuid\", \"nodev\", \"bind\"]}%s\n",
            writable ? "rw" : "ro", last ? "" : ",");
}

static void print_env(FILE *out, const char *name, const char *value, int last)
{
    char line[PATH_MAX + 64];
    snprintf(line, sizeof(line), "%s=%s", name, value);
    fprintf(out, "      ");
    json_print_string(out, line, strlen(line));
    fprintf(out, "%s\n", last ? "" : ",");
}

/* device N pins the container's jobs to GPU N (SALUS_GPU); "all" leaves the GPU to salusd */
static void print_device(FILE *out, const char *name, const char *gpu, int last)
{
    fprintf(out, "    {\"name\": \"%s\", \"containerEdits\": {\"env\": [\"SALUS_GPU=%s\"]}}%s\n",
            name, gpu, last ? "" : ",");
}

static void print_spec(FILE *out, const cdi_node_t *node)
{
    char socket[PATH_MAX], shm_host[PATH_MAX], shm_container[PATH_MAX];
    int simulated = node->simgpu_shm[0] != '\0';
    snprintf(socket, sizeof(socket), "%s/%s", CDI_SOCKET_DIR, node->socket_name);
    fprintf(out, "{\n  \"cdiVersion\": \"%s\",\n  \"kind\": ", CDI_VERSION);
    json_print_string(out, node->kind, strlen(node->kind));
    fprintf(out, ",\n  \"devices\": [\n");
    for (uint64_t i = 0; i < node->gpus; i++) {
        char name[24];
        snprintf(name, sizeof(name), "%llu", (unsigned long long)i);
        print_device(out, name, name, 0);
    }
    print_device(out, "all", "", 1);
    fprintf(out, "  ],\n  \"containerEdits\": {\n    \"env\": [\n");
    print_env(out, "LD_PRELOAD", CDI_LIB_DIR "/libcuda.so.1", 0);
    print_env(out, "LD_LIBRARY_PATH", CDI_LIB_DIR, 0);
    print_env(out, "SALUS_REAL_DRIVER", CDI_DRIVER, 0);
    print_env(out, "SALUS_SOCKET", socket, 0);
    if (simulated)
        print_env(out, "SIMGPU_SHM_NAME", node->simgpu_shm, 0);
    print_env(out, "PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
    fprintf(out, "    ],\n    \"mounts\": [\n");
    print_mount(out, node->shim, CDI_LIB_DIR "/libcuda.so.1", 0, 0);
    print_mount(out, node->shim, CDI_LIB_DIR "/libcuda.so", 0, 0);
    char msgpack[PATH_MAX];
    snprintf(msgpack, sizeof(msgpack), "%s/%s", CDI_LIB_DIR, node->msgpack_name);
    print_mount(out, node->msgpack, msgpack, 0, 0);
    print_mount(out, node->driver, CDI_DRIVER, 0, 0);
    print_mount(out, node->socket_dir, CDI_SOCKET_DIR, 0, !simulated);
    if (simulated) {
        snprintf(shm_host, sizeof(shm_host), "/dev/shm%s", node->simgpu_shm);
        snprintf(shm_container, sizeof(shm_container), "/dev/shm%s", node->simgpu_shm);
        print_mount(out, shm_host, shm_container, 1, 1);
    }
    fprintf(out, "    ]\n  }\n}\n");
}

/* Writes the spec to path through a temporary file renamed over it (a runtime reading the
 * spec directory never sees half a spec). */
static int write_spec(const char *path, const cdi_node_t *node)
{
    char tmp[PATH_MAX + 16];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        fprintf(stderr, "salusctl: cdi: %s: name too long\n", path);
        return EXIT_USAGE;
    }
    FILE *out = fopen(tmp, "we");
    if (!out) {
        fprintf(stderr, "salusctl: cdi: cannot write %s: %s\n", tmp, strerror(errno));
        return EXIT_DAEMON;
    }
    print_spec(out, node);
    int failed = ferror(out) | (fchmod(fileno(out), 0644) < 0);
    failed |= fclose(out) != 0;
    if (failed || rename(tmp, path) < 0) {
        fprintf(stderr, "salusctl: cdi: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return EXIT_DAEMON;
    }
    return EXIT_OK;
}

int verb_cdi(ctl_t *ctl, int argc, char **argv)
{
    cdi_node_t node = {.kind = CDI_DEFAULT_KIND};
    const char *output = NULL;
    if (argc < 1 || strcmp(argv[0], "generate") != 0) {
        usage_cdi();
        return EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--output") == 0 && i + 1 < argc && argv[i + 1][0]) {
            output = argv[++i];
        } else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
            if (!kind_valid(argv[i + 1]) || strlen(argv[i + 1]) >= sizeof(node.kind)) {
                fprintf(stderr, "salusctl: cdi: --kind takes VENDOR/CLASS (salus.dev/gpu), not "
                                "'%s'\n", argv[i + 1]);
                return EXIT_USAGE;
            }
            snprintf(node.kind, sizeof(node.kind), "%s", argv[++i]);
        } else {
            usage_cdi();
            return EXIT_USAGE;
        }
    }
    int rc = read_node(ctl, &node);
    if (rc != EXIT_OK)
        return rc;
    if (!output) {
        print_spec(stdout, &node);
        return fflush(stdout) == 0 ? EXIT_OK : EXIT_DAEMON;
    }
    return write_spec(output, &node);
}
