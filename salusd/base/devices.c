#include "devices.h"

#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "simgpu.h"

static const char *const real_driver_paths[] = {
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1",
};

static int try_driver(devices_t *devs, const char *path, int want_gpus, char *err, size_t size)
{
    int count = 0;
    if (driver_load(&devs->driver, path, NULL, err, size) < 0)
        return -ENOENT;
    CUresult rc = devs->driver.fn_cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = devs->driver.fn_cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || (want_gpus && count <= 0)) {
        snprintf(err, size, "%s: cuInit/cuDeviceGetCount failed (%s) or no device",
                 path, driver_error_name(&devs->driver, rc));
        driver_unload(&devs->driver);
        return -ENODEV;
    }
    return count;
}

static int simgpu_path(char *out, size_t size)
{
    static const char *const relative[] = {"../lib/simgpu/libcuda.so.1",
                                           "../lib/salus/simgpu/libcuda.so.1"};
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -ENOENT;
    slash[1] = '\0';
    for (size_t i = 0; i < sizeof(relative) / sizeof(relative[0]); i++) {
        char candidate[PATH_MAX + 64];
        snprintf(candidate, sizeof(candidate), "%s%s", exe, relative[i]);
        char resolved[PATH_MAX];
        if (realpath(candidate, resolved) && access(resolved, R_OK) == 0) {
            snprintf(out, size, "%s", resolved);
            return 0;
        }
    }
    return -ENOENT;
}

static int setup_gpu(devices_t *devs, int index)
{
    driver_t *d = &devs->driver;
    gpu_t *g = &devs->gpus[index];
    size_t total = 0, granularity = 0;
    g->index = index;
    if (d->fn_cuDeviceGet(&g->device, index) != CUDA_SUCCESS ||
        d->fn_cuDeviceGetName(g->name, sizeof(g->name), g->device) != CUDA_SUCCESS ||
        d->fn_cuDeviceTotalMem(&total, g->device) != CUDA_SUCCESS ||
        d->fn_cuDevicePrimaryCtxRetain(&g->context, g->device) != CUDA_SUCCESS)
        return -EIO;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = index;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (d->fn_cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        granularity == 0)
        return -EIO;
    g->total_bytes = total;
    g->granularity_bytes = granularity;
    return 0;
}

int devices_open(devices_t *devs, const char *driver_path, char *err, size_t err_size)
{
    char path[PATH_MAX];
    int count = -1;
    memset(devs, 0, sizeof(*devs));
    if (driver_path && driver_path[0]) {
        count = try_driver(devs, driver_path, 0, err, err_size);
    } else {
        for (size_t i = 0; i < sizeof(real_driver_paths) / sizeof(real_driver_paths[0]) && count <= 0; i++)
            if (access(real_driver_paths[i], R_OK) == 0)
                count = try_driver(devs, real_driver_paths[i], 1, err, err_size);
        if (count <= 0) {
            if (simgpu_path(path, sizeof(path)) < 0) {
                snprintf(err, err_size, "no working GPU driver and no simgpu next to salusd "
                                        "(looked for ../lib/simgpu/libcuda.so.1); use --driver");
                return -ENODEV;
            }
            count = try_driver(devs, path, 1, err, err_size);
        }
    }
    if (count <= 0)
        return count < 0 ? count : -ENODEV;
    devs->simgpu_stats = (int (*)(int, void *))dlsym(devs->driver.handle, "simgpu_device_stats");
    devs->simulated = devs->simgpu_stats != NULL;
    devs->count = count > DEVICES_MAX_GPUS ? DEVICES_MAX_GPUS : count;
    for (int i = 0; i < devs->count; i++) {
        if (setup_gpu(devs, i) < 0) {
            snprintf(err, err_size, "GPU %d of %s could not be set up", i, devs->driver.path);
            devices_close(devs);
            return -EIO;
        }
    }
    return 0;
}

void devices_close(devices_t *devs)
{
    for (int i = 0; i < devs->count; i++)
        if (devs->gpus[i].context)
            devs->driver.fn_cuDevicePrimaryCtxRelease(devs->gpus[i].device);
    /* the driver stays loaded, as in any CUDA program: its primary contexts and threads
     * live until the process exits */
    devs->count = 0;
}

void devices_release_segment(devices_t *devs)
{
    if (!devs->simulated || !devs->driver.handle)
        return;
    simgpu_shm_release_fn release =
        (simgpu_shm_release_fn)dlsym(devs->driver.handle, "simgpu_shm_release");
    int rc = release ? release() : 0;
    if (rc > 0)
        LOG_INFO("removed the simulated devices' segment (no job uses it): the next salusd "
                 "starts from SIMGPU_DEVICES and SIMGPU_MEMORY_MB again");
    else if (rc < 0)
        LOG_WARN("cannot remove the simulated devices' segment: %s", strerror(-rc));
}

/* Zeroes a chunk through a temporary mapping in the daemon's own address space. */
static int clear_chunk(devices_t *devs, int gpu, CUmemGenericAllocationHandle handle, uint64_t size)
{
    driver_t *d = &devs->driver;
    CUdeviceptr at = 0;
    CUresult rc = d->fn_cuMemAddressReserve(&at, size, devs->gpus[gpu].granularity_bytes, 0, 0);
    if (rc != CUDA_SUCCESS)
        return -EIO;
    rc = d->fn_cuMemMap(at, size, 0, handle, 0);
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = gpu},
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = d->fn_cuMemSetAccess(at, size, &access, 1);
        if (rc == CUDA_SUCCESS)
            rc = d->fn_cuMemsetD8(at, 0, size);
        /* the set may still run on the device: finish it before the memory goes out */
        if (rc == CUDA_SUCCESS)
            rc = d->fn_cuCtxSynchronize(devs->gpus[gpu].context);
        d->fn_cuMemUnmap(at, size);
    }
    d->fn_cuMemAddressFree(at, size);
    return rc == CUDA_SUCCESS ? 0 : -EIO;
}

int devices_chunk_map(devices_t *devs, const chunk_t *chunk, uint64_t *at)
{
    driver_t *d = &devs->driver;
    CUdeviceptr va = 0;
    d->fn_cuCtxSetCurrent(devs->gpus[chunk->gpu].context);
    CUresult rc = d->fn_cuMemAddressReserve(&va, chunk->bytes,
                                            devs->gpus[chunk->gpu].granularity_bytes, 0, 0);
    if (rc != CUDA_SUCCESS)
        return -EIO;
    rc = d->fn_cuMemMap(va, chunk->bytes, 0, chunk->handle, 0);
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE,
                                               .id = chunk->gpu},
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = d->fn_cuMemSetAccess(va, chunk->bytes, &access, 1);
        if (rc != CUDA_SUCCESS)
            d->fn_cuMemUnmap(va, chunk->bytes);
    }
    if (rc != CUDA_SUCCESS) {
        d->fn_cuMemAddressFree(va, chunk->bytes);
        return -EIO;
    }
    *at = (uint64_t)va;
    return 0;
}

void devices_chunk_unmap(devices_t *devs, const chunk_t *chunk, uint64_t at)
{
    devs->driver.fn_cuCtxSetCurrent(devs->gpus[chunk->gpu].context);
    devs->driver.fn_cuMemUnmap((CUdeviceptr)at, chunk->bytes);
    devs->driver.fn_cuMemAddressFree((CUdeviceptr)at, chunk->bytes);
}

int devices_mapped_clear(devices_t *devs, const chunk_t *chunk, uint64_t at)
{
    driver_t *d = &devs->driver;
    d->fn_cuCtxSetCurrent(devs->gpus[chunk->gpu].context);
    CUresult rc = d->fn_cuMemsetD8((CUdeviceptr)at, 0, chunk->bytes);
    if (rc == CUDA_SUCCESS) /* done on the device before the memory goes out */
        rc = d->fn_cuCtxSynchronize(devs->gpus[chunk->gpu].context);
    return rc == CUDA_SUCCESS ? 0 : -EIO;
}

int devices_chunk_create(devices_t *devs, int gpu, uint64_t bytes, int clear, chunk_t *chunk,
                         int *fd_out)
{
    driver_t *d = &devs->driver;
    gpu_t *g = &devs->gpus[gpu];
    uint64_t size = (bytes + g->granularity_bytes - 1) / g->granularity_bytes * g->granularity_bytes;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = gpu;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    d->fn_cuCtxSetCurrent(g->context);
    CUresult rc = d->fn_cuMemCreate(&chunk->handle, size, &prop, 0);
    if (rc != CUDA_SUCCESS) {
        /* a full device is routine (the request waits); anything else is worth a warning */
        SALUS_LOG(rc == CUDA_ERROR_OUT_OF_MEMORY ? SALUS_LOG_DEBUG : SALUS_LOG_WARN,
                  "cuMemCreate(%llu bytes) on GPU %d failed: %s", (unsigned long long)size, gpu,
                  driver_error_name(d, rc));
        return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    /* memory may pass between users: hand out only zeroes */
    if (clear && clear_chunk(devs, gpu, chunk->handle, size) < 0) {
        d->fn_cuMemRelease(chunk->handle);
        LOG_WARN("could not clear a new chunk on GPU %d; not handing it out", gpu);
        return -EIO;
    }
    int fd = -1;
    rc = d->fn_cuMemExportToShareableHandle(&fd, chunk->handle,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) {
        d->fn_cuMemRelease(chunk->handle);
        LOG_WARN("cuMemExportToShareableHandle failed: %s", driver_error_name(d, rc));
        return -EIO;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        d->fn_cuMemRelease(chunk->handle);
        return -EIO;
    }
    chunk->dev = (uint64_t)st.st_dev;
    chunk->ino = (uint64_t)st.st_ino;
    if (devs->next_chunk_id == 0)
        devs->next_chunk_id = 1;
    chunk->id = devs->next_chunk_id++;
    chunk->gpu = gpu;
    chunk->bytes = size;
    g->chunk_bytes += size;
    *fd_out = fd;
    return 0;
}

void devices_chunk_release(devices_t *devs, chunk_t *chunk)
{
    gpu_t *g = &devs->gpus[chunk->gpu];
    devs->driver.fn_cuCtxSetCurrent(g->context);
    devs->driver.fn_cuMemRelease(chunk->handle);
    g->chunk_bytes -= chunk->bytes;
    chunk->bytes = 0;
}

int devices_chunk_import(devices_t *devs, int gpu, int fd, uint64_t id, uint64_t bytes,
                         chunk_t *chunk)
{
    driver_t *d = &devs->driver;
    gpu_t *g = &devs->gpus[gpu];
    struct stat st;
    if (fstat(fd, &st) < 0 || bytes == 0 || bytes % g->granularity_bytes)
        return -EINVAL;
    d->fn_cuCtxSetCurrent(g->context);
    CUresult rc = d->fn_cuMemImportFromShareableHandle(&chunk->handle, (void *)(intptr_t)fd,
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc != CUDA_SUCCESS) {
        LOG_DEBUG("cuMemImportFromShareableHandle: %s", driver_error_name(d, rc));
        return -EINVAL;
    }
    /* a chunk maps whole: a mapping of its size must succeed, one granule more must not */
    CUdeviceptr at = 0;
    rc = d->fn_cuMemAddressReserve(&at, bytes + g->granularity_bytes, g->granularity_bytes, 0, 0);
    int ok = rc == CUDA_SUCCESS;
    if (ok) {
        ok = d->fn_cuMemMap(at, bytes, 0, chunk->handle, 0) == CUDA_SUCCESS;
        if (ok)
            d->fn_cuMemUnmap(at, bytes);
        if (ok && d->fn_cuMemMap(at, bytes + g->granularity_bytes, 0, chunk->handle, 0) ==
                      CUDA_SUCCESS) {
            d->fn_cuMemUnmap(at, bytes + g->granularity_bytes);
            ok = 0;
        }
        d->fn_cuMemAddressFree(at, bytes + g->granularity_bytes);
    }
    if (!ok) {
        d->fn_cuMemRelease(chunk->handle);
        return -EINVAL;
    }
    chunk->id = id;
    chunk->gpu = gpu;
    chunk->bytes = bytes;
    chunk->dev = (uint64_t)st.st_dev;
    chunk->ino = (uint64_t)st.st_ino;
    g->chunk_bytes += bytes;
    if (id >= devs->next_chunk_id)
        devs->next_chunk_id = id + 1;
    return 0;
}

int devices_mem_info(devices_t *devs, int gpu, uint64_t *free_bytes, uint64_t *total_bytes)
{
    size_t free_now = 0, total = 0;
    devs->driver.fn_cuCtxSetCurrent(devs->gpus[gpu].context);
    if (devs->driver.fn_cuMemGetInfo(&free_now, &total) != CUDA_SUCCESS)
        return -EIO;
    *free_bytes = free_now;
    *total_bytes = total;
    return 0;
}

int devices_busy_ns(devices_t *devs, int gpu, uint64_t *busy_ns)
{
    simgpu_device_stats_t stats;
    *busy_ns = 0;
    if (!devs->simgpu_stats)
        return -ENOTSUP;
    if (devs->simgpu_stats(gpu, &stats) < 0)
        return -EIO;
    *busy_ns = stats.busy_ns;
    return 0;
}
