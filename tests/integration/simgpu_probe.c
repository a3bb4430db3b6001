/* simgpu_probe: the driver-API program the simgpu_*.sh integration scripts run,
 * one command per behaviour. It uses the driver API only (as any program
 * would) plus simgpu_device_stats. Exit status 0 means the check passed; output
 * lines are "key value" for the scripts to read.
 *
 *   info                          free/total memory, stats
 *   alloc MB                      allocate; exit 2 on CUDA_ERROR_OUT_OF_MEMORY
 *   hold MB                       allocate, print "ready", wait for stdin to close
 *   stamps N NS                   N kernels of NS each; prints "launching N" before the first
 *                                 launch, then each kernel's start time (CLOCK_MONOTONIC)
 *   vmm-share                     two processes (fork) share a VMM allocation over SCM_RIGHTS
 *   hold-kernel MB NS             allocate, start a kernel of NS, print "running", wait forever
 *   after-crash MB                the whole device is usable: MB allocate, a kernel runs at once
 *   walk FILE                     cuGetProcAddress over every name in FILE */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1ull << 20)

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult rc_ = (call);                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                    \
            const char *name_ = NULL;                                                 \
            cuGetErrorName(rc_, &name_);                                              \
            fprintf(stderr, "probe[%d]: %s failed: %s\n", (int)getpid(), #call,       \
                    name_ ? name_ : "?");                                             \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static CUmodule module;

static void setup(void)
{
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    static const char image[] = "simgpu ignores the image";
    CHECK(cuModuleLoadData(&module, image));
}

static CUfunction function(const char *name)
{
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, module, name));
    return f;
}

static void print_info(void)
{
    size_t free_bytes, total;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    simgpu_device_stats_t st;
    if (simgpu_device_stats(0, &st) != 0)
        exit(1);
    printf("free_mb %llu\ntotal_mb %llu\nbusy_ns %llu\nkernels %llu\nrecoveries %llu\n",
           (unsigned long long)(free_bytes / MiB), (unsigned long long)(total / MiB),
           (unsigned long long)st.busy_ns, (unsigned long long)st.kernels,
           (unsigned long long)st.engine_recoveries);
    fflush(stdout);
}

static int cmd_alloc(unsigned long long mb, bool hold)
{
    setup();
    CUdeviceptr p;
    CUresult rc = cuMemAlloc(&p, mb * MiB);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        printf("oom\n");
        return 2;
    }
    CHECK(rc);
    CHECK(cuMemsetD8(p, 1, mb * MiB < 4096 ? mb * MiB : 4096));
    printf("allocated %llu\n", mb);
    if (hold) {
        printf("ready\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
    }
    return 0;
}

static int cmd_stamps(int n, unsigned long long ns)
{
    setup();
    CUfunction stamp = function("stamp");
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, (size_t)n * 8));
    printf("launching %d\n", n); /* a launch returns once its kernel has started */
    fflush(stdout);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        CUdeviceptr slot = out + (CUdeviceptr)i * 8;
        void *params[] = {&slot, &ns};
        CHECK(cuLaunchKernel(stamp, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    }
    CHECK(cuCtxSynchronize());
    uint64_t t1 = now_ns();
    unsigned long long starts[n];
    CHECK(cuMemcpyDtoH(starts, out, sizeof(starts)));
    for (int i = 0; i < n; i++)
        printf("start %llu\n", starts[i]);
    printf("wall_ns %llu\nbegin %llu\nend %llu\n", (unsigned long long)(t1 - t0),
           (unsigned long long)t0, (unsigned long long)t1);
    return 0;
}

static int send_fd(int sock, int fd)
{
    char byte = 'f';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof(control));
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof(control.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof(control.buf)};
    if (recvmsg(sock, &msg, 0) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static CUmemAllocationProp vmm_prop(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    return prop;
}

static CUdeviceptr vmm_map(CUmemGenericAllocationHandle handle, size_t size)
{
    CUdeviceptr va;
    CUmemAllocationProp prop = vmm_prop();
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, handle, 0));
    CHECK(cuMemSetAccess(va, size, &access, 1));
    return va;
}

/* The exporter (parent) writes 0xA5 pattern, sends the fd; the importer (child)
 * checks it, writes 0x3C at the end, and says so; the exporter sees it. */
static int cmd_vmm_share(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 1;
    const size_t size = 2 * MiB;
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        setup();
        size_t free_before, total;
        int fd = recv_fd(sv[1]);
        if (fd < 0)
            _exit(1);
        CHECK(cuMemGetInfo(&free_before, &total));
        CUmemGenericAllocationHandle handle;
        CHECK(cuMemImportFromShareableHandle(&handle, (void *)(uintptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        CUdeviceptr va = vmm_map(handle, size);
        size_t free_after;
        CHECK(cuMemGetInfo(&free_after, &total));
        unsigned char bytes[2];
        CHECK(cuMemcpyDtoH(&bytes[0], va, 1));
        CHECK(cuMemcpyDtoH(&bytes[1], va + size - 1, 1));
        printf("importer_sees %02x%02x\nimport_charged_mb %llu\nexporter_charged_visible %d\n",
               bytes[0], bytes[1], (unsigned long long)((free_before - free_after) / MiB),
               total - free_before >= size);
        fflush(stdout);
        CHECK(cuMemsetD8(va + size - 1, 0x3c, 1));
        CHECK(cuCtxSynchronize());
        if (write(sv[1], "w", 1) != 1)
            _exit(1);
        char c;
        if (read(sv[1], &c, 1) != 1)  /* the exporter has looked */
            _exit(1);
        CHECK(cuMemUnmap(va, size));
        CHECK(cuMemRelease(handle));
        _exit(0);
    }
    close(sv[1]);
    setup();
    CUmemAllocationProp prop = vmm_prop();
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, size, &prop, 0));
    CUdeviceptr va = vmm_map(handle, size);
    CHECK(cuMemsetD8(va, 0xa5, size));
    int fd;
    CHECK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (send_fd(sv[0], fd) < 0)
        return 1;
    close(fd);
    char c;
    if (read(sv[0], &c, 1) != 1)
        return 1;
    unsigned char last;
    CHECK(cuMemcpyDtoH(&last, va + size - 1, 1));
    printf("exporter_sees %02x\n", last);
    fflush(stdout);
    if (write(sv[0], "k", 1) != 1)
        return 1;
    int status;
    waitpid(child, &status, 0);
    CHECK(cuMemUnmap(va, size));
    CHECK(cuMemRelease(handle));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && last == 0x3c ? 0 : 1;
}

static int cmd_hold_kernel(unsigned long long mb, unsigned long long ns)
{
    setup();
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, mb * MiB));
    int fds[2];
    if (pipe(fds) < 0)
        return 1;
    CUfunction f = function("signal_busy");
    void *params[] = {&fds[1], &ns};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    char c;
    if (read(fds[0], &c, 1) != 1)
        return 1;
    printf("running\n");
    fflush(stdout);
    for (;;)
        pause();
}

static int cmd_after_crash(unsigned long long mb)
{
    setup();
    print_info();
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, mb * MiB));
    unsigned long long ns = 1000000ull;
    void *params[] = {&ns};
    uint64_t t0 = now_ns();
    CHECK(cuLaunchKernel(function("busy"), 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    printf("kernel_ms %.3f\n", (double)(now_ns() - t0) / 1e6);
    print_info();
    return 0;
}

typedef CUresult (*wide_fn)(long, long, long, long, long, long, long, long, long, long, long,
                            long);

static int cmd_walk(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    char name[256];
    unsigned answered = 0, not_found = 0, stubs = 0, names = 0;
    char (*stub_names)[256] = calloc(4096, 256);
    void **stub_fns = calloc(4096, sizeof(void *));
    while (fscanf(f, "%255s", name) == 1) {
        names++;
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult status = 99;
        CUresult rc = cuGetProcAddress(name, &fn, CUDA_VERSION, 0, &status);
        if (rc == CUDA_ERROR_NOT_FOUND) {
            if (fn || status == CU_GET_PROC_ADDRESS_SUCCESS) {
                fprintf(stderr, "walk: %s: NOT_FOUND with a pointer or success status\n", name);
                return 1;
            }
            not_found++;
            continue;
        }
        if (rc != CUDA_SUCCESS || !fn || status != CU_GET_PROC_ADDRESS_SUCCESS) {
            fprintf(stderr, "walk: %s: rc %d status %d\n", name, rc, status);
            return 1;
        }
        answered++;
        /* implemented entry points are exported; anything else is a stub */
        Dl_info info;
        bool exported = dladdr(fn, &info) && info.dli_saddr == fn && info.dli_sname;
        if (!exported && stubs < 4096) {
            snprintf(stub_names[stubs], 256, "%s", name);
            stub_fns[stubs++] = fn;
        }
        /* before cuInit and without a context, every entry point called with
         * zero arguments must fail or succeed cleanly (nothing to crash on) */
        ((wide_fn)fn)(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    }
    fclose(f);
    /* with a context current, every stub answers NOT_SUPPORTED */
    setup();
    for (unsigned i = 0; i < stubs; i++) {
        CUresult rc = ((wide_fn)stub_fns[i])(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        if (rc != CUDA_ERROR_NOT_SUPPORTED) {
            fprintf(stderr, "walk: stub %s returned %d\n", stub_names[i], rc);
            return 1;
        }
    }
    printf("names %u\nanswered %u\nnot_found %u\nstubs %u\n", names, answered, not_found, stubs);
    free(stub_names);
    free(stub_fns);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 64;
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0) {
        setup();
        print_info();
        return 0;
    }
    if (strcmp(cmd, "alloc") == 0 && argc == 3)
        return cmd_alloc(strtoull(argv[2], NULL, 10), false);
    if (strcmp(cmd, "hold") == 0 && argc == 3)
        return cmd_alloc(strtoull(argv[2], NULL, 10), true);
    if (strcmp(cmd, "stamps") == 0 && argc == 4)
        return cmd_stamps(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    if (strcmp(cmd, "vmm-share") == 0)
        return cmd_vmm_share();
    if (strcmp(cmd, "hold-kernel") == 0 && argc == 4)
        return cmd_hold_kernel(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    if (strcmp(cmd, "after-crash") == 0 && argc == 3)
        return cmd_after_crash(strtoull(argv[2], NULL, 10));
    if (strcmp(cmd, "walk") == 0 && argc == 3)
        return cmd_walk(argv[2]);
    fprintf(stderr, "usage: see the comment at the top of simgpu_probe.c\n");
    return 64;
}
