/* memory-probe: the driver's pools, managed memory and arrays, checked the way a program
 * sees them. Runs natively on simgpu and under salus (where cuMemGetInfo is the job's view).
 *
 *   memory-probe api              pools (create, current, attributes, destroy), managed
 *                                 memory and arrays: results and the real API's errors
 *   memory-probe arrays MIB FILE  a 2D float4 array of MIB MiB; prints "holding" and waits
 *                                 until FILE exists; checks cuMemGetInfo's free memory went
 *                                 down by at least MIB while it lived and back after
 *   memory-probe mixed MIB        MIB MiB of managed memory, then MIB/2 MiB with cuMemAlloc
 *                                 (under salus: both fit a budget of 2 x MIB)
 *   memory-probe threads N        N threads at once, each 50 rounds of: cuMemCreate, reserve,
 *                                 map, set access, memset, unmap, release, free the range,
 *                                 cuMemAllocAsync + cuMemFreeAsync, a managed allocation;
 *                                 must finish (no call may wait on another) and leave
 *                                 cuMemGetInfo's free memory as it found it
 *   memory-probe vmm-export SOCKET MIB FILE
 *                                 cuMemCreate of MIB MiB (shareable as a file descriptor),
 *                                 filled with a pattern; serves its exported descriptor to
 *                                 one connection on the Unix socket SOCKET; holds until FILE
 *   memory-probe vmm-import SOCKET FILE
 *                                 receives such a descriptor, imports, maps and reads it
 *                                 (the pattern must be there); holds until FILE
 * One line per check; exit 0 when all hold. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define EXPECT(call, want)                                                                     \
    do {                                                                                       \
        CUresult got_ = (call);                                                                \
        const char *name_ = NULL;                                                              \
        cuGetErrorName(got_, &name_);                                                          \
        printf("%s -> %s%s\n", #call, name_ ? name_ : "?", got_ == (want) ? "" : "  (WRONG)");  \
        failures += got_ != (want);                                                            \
    } while (0)

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        int ok_ = (cond);                                                                      \
        printf("%s: %s\n", #cond, ok_ ? "yes" : "NO");                                         \
        failures += !ok_;                                                                      \
    } while (0)

static size_t free_bytes(void)
{
    size_t free = 0, total = 0;
    cuMemGetInfo(&free, &total);
    return free;
}

static void api(CUdevice dev)
{
    /* pools */
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool = NULL, got = NULL, dflt = NULL;
    CUmemPoolProps bad = props;
    bad.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
    EXPECT(cuMemPoolCreate(&pool, &bad), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
    EXPECT(cuDeviceGetDefaultMemPool(&dflt, dev), CUDA_SUCCESS);
    EXPECT(cuMemPoolDestroy(dflt), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetMemPool(dev, pool), CUDA_SUCCESS);
    EXPECT(cuDeviceGetMemPool(&got, dev), CUDA_SUCCESS);
    CHECK(got == pool);
    cuuint64_t threshold = 64ull << 20, read = 0;
    EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
    EXPECT(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &read), CUDA_SUCCESS);
    CHECK(read == threshold);
    int opportunistic = 0, back = 1;
    EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &opportunistic), CUDA_SUCCESS);
    EXPECT(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &back), CUDA_SUCCESS);
    CHECK(back == 0);
    CUdeviceptr p = 0;
    EXPECT(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, NULL), CUDA_SUCCESS);
    EXPECT(cuMemsetD8Async(p, 7, 1 << 20, NULL), CUDA_SUCCESS);
    EXPECT(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    EXPECT(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    EXPECT(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    EXPECT(cuDeviceGetMemPool(&got, dev), CUDA_SUCCESS);
    CHECK(got == dflt); /* destroying the current pool leaves the default one current */

    /* managed memory: the host reads what the device wrote, with no copy */
    CUdeviceptr m = 0;
    EXPECT(cuMemAllocManaged(&m, 4096, 0x7), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    size_t before = free_bytes();
    EXPECT(cuMemAllocManaged(&m, 8 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK(before - free_bytes() >= (8u << 20));
    EXPECT(cuMemsetD32(m, 0x01020304, 2 << 20), CUDA_SUCCESS);
    CHECK(((uint32_t *)(uintptr_t)m)[12345] == 0x01020304);
    EXPECT(cuMemFree(m), CUDA_SUCCESS);
    CHECK(free_bytes() == before);

    /* arrays */
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 256, .Height = 128, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CUDA_ARRAY_DESCRIPTOR d2_back;
    CUarray a2 = NULL, a3 = NULL;
    before = free_bytes();
    EXPECT(cuArrayCreate(&a2, &d2), CUDA_SUCCESS);
    CHECK(before - free_bytes() >= 256u * 128 * 16);
    EXPECT(cuArrayGetDescriptor(&d2_back, a2), CUDA_SUCCESS);
    CHECK(d2_back.Width == 256 && d2_back.Height == 128 && d2_back.NumChannels == 4);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 32, .Depth = 8,
                                  .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 2};
    CUDA_ARRAY3D_DESCRIPTOR d3_back;
    EXPECT(cuArray3DCreate(&a3, &d3), CUDA_SUCCESS);
    EXPECT(cuArray3DGetDescriptor(&d3_back, a3), CUDA_SUCCESS);
    CHECK(d3_back.Depth == 8 && d3_back.Format == CU_AD_FORMAT_UNSIGNED_INT16);
    CUDA_ARRAY_DESCRIPTOR three_channels = d2;
    three_channels.NumChannels = 3;
    CUarray bad_array = NULL;
    EXPECT(cuArrayCreate(&bad_array, &three_channels), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuArrayDestroy(a3), CUDA_SUCCESS);
    EXPECT(cuArrayDestroy(a2), CUDA_SUCCESS);
    CHECK(free_bytes() == before);

    /* virtual memory with properties a shared chunk does not have: counted all the same */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.allocFlags.gpuDirectRDMACapable = 1;
    size_t granularity = 0;
    EXPECT(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h;
    before = free_bytes();
    EXPECT(cuMemCreate(&h, granularity, &prop, 0), CUDA_SUCCESS);
    CHECK(before - free_bytes() >= granularity);
    EXPECT(cuMemRelease(h), CUDA_SUCCESS);
    CHECK(free_bytes() == before);
}

static void mixed(size_t mib)
{
    CUdeviceptr m = 0, d = 0;
    EXPECT(cuMemAllocManaged(&m, mib << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    EXPECT(cuMemAlloc(&d, (mib << 20) / 2), CUDA_SUCCESS);
    EXPECT(cuMemFree(d), CUDA_SUCCESS);
    EXPECT(cuMemFree(m), CUDA_SUCCESS);
}

static CUcontext probe_ctx;
static CUdevice probe_dev;

static void *churn(void *arg)
{
    (void)arg;
    int bad = 0;
    CUstream stream;
    cuCtxSetCurrent(probe_ctx);
    bad |= cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = probe_dev;
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t g = 0;
    bad |= cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS;
    for (int round = 0; round < 50 && !bad; round++) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va = 0, p = 0, m = 0;
        bad |= cuMemCreate(&h, g, &prop, 0) != CUDA_SUCCESS;
        bad |= cuMemAddressReserve(&va, g, 0, 0, 0) != CUDA_SUCCESS;
        bad |= cuMemMap(va, g, 0, h, 0) != CUDA_SUCCESS;
        bad |= cuMemRelease(h) != CUDA_SUCCESS; /* the mapping keeps it */
        bad |= cuMemSetAccess(va, g, &access, 1) != CUDA_SUCCESS;
        bad |= cuMemsetD8Async(va, (unsigned char)round, g, stream) != CUDA_SUCCESS;
        bad |= cuMemAllocAsync(&p, 1 << 20, stream) != CUDA_SUCCESS;
        bad |= cuMemFreeAsync(p, stream) != CUDA_SUCCESS;
        bad |= cuStreamSynchronize(stream) != CUDA_SUCCESS;
        bad |= cuMemUnmap(va, g) != CUDA_SUCCESS;
        bad |= cuMemAddressFree(va, g) != CUDA_SUCCESS;
        bad |= cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS;
        bad |= cuMemFree(m) != CUDA_SUCCESS;
    }
    cuStreamDestroy(stream);
    return (void *)(intptr_t)bad;
}

static void threads(int n)
{
    pthread_t t[16];
    if (n < 1 || n > 16)
        n = 4;
    cuCtxGetCurrent(&probe_ctx);
    cuCtxGetDevice(&probe_dev);
    size_t before = free_bytes();
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, churn, NULL);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        bad += r != NULL;
    }
    printf("threads with a failed call: %d of %d\n", bad, n);
    failures += bad;
    CHECK(free_bytes() == before);
}

static void hold(const char *go)
{
    printf("holding\n");
    fflush(stdout);
    struct stat st;
    struct timespec tick = {0, 10000000};
    for (int i = 0; i < 12000 && stat(go, &st) != 0; i++)
        nanosleep(&tick, NULL);
}

static int unix_socket(const char *path, struct sockaddr_un *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    snprintf(addr->sun_path, sizeof(addr->sun_path), "%s", path);
    return fd;
}

static void vmm_export(const char *path, size_t mib, const char *go)
{
    CUdevice dev;
    cuCtxGetDevice(&dev);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t bytes = mib << 20;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT(cuMemCreate(&h, bytes, &prop, 0), CUDA_SUCCESS);
    EXPECT(cuMemAddressReserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
    EXPECT(cuMemMap(va, bytes, 0, h, 0), CUDA_SUCCESS);
    EXPECT(cuMemSetAccess(va, bytes, &access, 1), CUDA_SUCCESS);
    EXPECT(cuMemsetD32(va, 0x5a1a5u, bytes / 4), CUDA_SUCCESS);
    int fd = -1;
    EXPECT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    struct sockaddr_un addr;
    int listener = unix_socket(path, &addr);
    if (bind(listener, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(listener, 1) < 0) {
        perror("memory-probe: listen");
        exit(1);
    }
    printf("listening\n");
    fflush(stdout);
    int conn = accept(listener, NULL, NULL);
    char control[CMSG_SPACE(sizeof(int))] = {0};
    uint64_t size = bytes;
    struct iovec iov = {&size, sizeof(size)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof(control)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    CHECK(sendmsg(conn, &msg, 0) == (ssize_t)sizeof(size));
    close(fd);
    hold(go);
    close(conn);
    close(listener);
    EXPECT(cuMemUnmap(va, bytes), CUDA_SUCCESS);
    EXPECT(cuMemRelease(h), CUDA_SUCCESS);
    EXPECT(cuMemAddressFree(va, bytes), CUDA_SUCCESS);
}

static void vmm_import(const char *path, const char *go)
{
    struct sockaddr_un addr;
    int sock = unix_socket(path, &addr);
    if (connect(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        perror("memory-probe: connect");
        exit(1);
    }
    char control[CMSG_SPACE(sizeof(int))];
    uint64_t bytes = 0;
    struct iovec iov = {&bytes, sizeof(bytes)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof(control)};
    int fd = -1;
    if (recvmsg(sock, &msg, 0) != (ssize_t)sizeof(bytes) || !CMSG_FIRSTHDR(&msg)) {
        fprintf(stderr, "memory-probe: no descriptor received\n");
        exit(1);
    }
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
    CUdevice dev;
    cuCtxGetDevice(&dev);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t before = free_bytes();
    EXPECT(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
    close(fd);
    EXPECT(cuMemAddressReserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
    EXPECT(cuMemMap(va, bytes, 0, h, 0), CUDA_SUCCESS);
    EXPECT(cuMemSetAccess(va, bytes, &access, 1), CUDA_SUCCESS);
    uint32_t word = 0;
    EXPECT(cuMemcpyDtoH(&word, va + bytes - 4, 4), CUDA_SUCCESS);
    CHECK(word == 0x5a1a5u);
    CHECK(free_bytes() == before); /* the exporter was charged, not the importer */
    hold(go);
    EXPECT(cuMemUnmap(va, bytes), CUDA_SUCCESS);
    EXPECT(cuMemRelease(h), CUDA_SUCCESS);
    EXPECT(cuMemAddressFree(va, bytes), CUDA_SUCCESS);
    close(sock);
}

static void arrays(size_t mib, const char *go)
{
    /* width x height float4 texels of 16 bytes: mib MiB */
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 1024, .Height = mib * 64, .Format = CU_AD_FORMAT_FLOAT,
                               .NumChannels = 4};
    size_t before = free_bytes();
    CUarray a = NULL;
    EXPECT(cuArrayCreate(&a, &d), CUDA_SUCCESS);
    CHECK(before - free_bytes() >= (mib << 20));
    hold(go);
    EXPECT(cuArrayDestroy(a), CUDA_SUCCESS);
    CHECK(free_bytes() == before);
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    int usage = argc < 2;
    if (!usage)
        usage = strcmp(argv[1], "api") == 0 ? argc != 2
                : strcmp(argv[1], "arrays") == 0 ? argc != 4
                : strcmp(argv[1], "mixed") == 0 ? argc != 3
                : strcmp(argv[1], "threads") == 0 ? argc != 3
                : strcmp(argv[1], "vmm-export") == 0 ? argc != 5
                : strcmp(argv[1], "vmm-import") == 0 ? argc != 4 : 1;
    if (usage) {
        fprintf(stderr, "usage: memory-probe api | arrays MIB FILE | mixed MIB | threads N | vmm-export SOCKET MIB FILE | "
                        "vmm-import SOCKET FILE\n");
        return 2;
    }
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "memory-probe: no device\n");
        return 1;
    }
    if (strcmp(argv[1], "api") == 0)
        api(dev);
    else if (strcmp(argv[1], "arrays") == 0)
        arrays(strtoull(argv[2], NULL, 10), argv[3]);
    else if (strcmp(argv[1], "threads") == 0)
        threads(atoi(argv[2]));
    else if (strcmp(argv[1], "mixed") == 0)
        mixed(strtoull(argv[2], NULL, 10));
    else if (strcmp(argv[1], "vmm-export") == 0)
        vmm_export(argv[2], strtoull(argv[3], NULL, 10), argv[4]);
    else
        vmm_import(argv[2], argv[3]);
    cuDevicePrimaryCtxRelease(dev);
    printf("%s\n", failures ? "memory-probe: FAIL" : "memory-probe: ok");
    return failures ? 1 : 0;
}
