/* Device and host allocations, cuMemGetInfo and stream-ordered allocation (memory pools
 * are in pool.c, managed memory in managed.c).
 *
 * Device memory is host memory: an anonymous mapping whose address is the
 * CUdeviceptr, so a kernel running on the CPU uses the program's pointers.
 * Every allocation is a range in one sorted table (base, size, kind, context),
 * which answers frees, address ranges and pointer attributes. Device bytes are
 * charged to this process in the shared segment, rounded up to whole pages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simgpu-internal.h"

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static simgpu_range_t *ranges;
static size_t range_count, range_capacity;
static uint64_t next_id = 1;

uint64_t simgpu_next_id(void)
{
    return __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
}

/* Under ranges_lock: index of the first range with base > ptr. */
static size_t upper_bound(uintptr_t ptr)
{
    size_t lo = 0, hi = range_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t range_extent(const simgpu_range_t *r)
{
    return r->bytes ? r->bytes : 1;
}

int simgpu_range_insert(const simgpu_range_t *range)
{
    int rc = 0;
    pthread_mutex_lock(&ranges_lock);
    if (range_count == range_capacity) {
        size_t capacity = range_capacity ? range_capacity * 2 : 64;
        simgpu_range_t *grown = realloc(ranges, capacity * sizeof(*grown));
        if (!grown) {
            rc = -1;
            goto out;
        }
        ranges = grown;
        range_capacity = capacity;
    }
    size_t at = upper_bound(range->base);
    /* overlap with the neighbours? */
    if ((at > 0 && ranges[at - 1].base + range_extent(&ranges[at - 1]) > range->base) ||
        (at < range_count && range->base + range_extent(range) > ranges[at].base)) {
        rc = -2;
        goto out;
    }
    memmove(&ranges[at + 1], &ranges[at], (range_count - at) * sizeof(*ranges));
    ranges[at] = *range;
    range_count++;
out:
    pthread_mutex_unlock(&ranges_lock);
    return rc;
}

bool simgpu_range_find(uintptr_t ptr, simgpu_range_t *out)
{
    bool found = false;
    pthread_mutex_lock(&ranges_lock);
    size_t at = upper_bound(ptr);
    if (at > 0 && ptr < ranges[at - 1].base + range_extent(&ranges[at - 1])) {
        *out = ranges[at - 1];
        found = true;
    }
    pthread_mutex_unlock(&ranges_lock);
    return found;
}

bool simgpu_range_remove(uintptr_t base, simgpu_range_kind_t kind, simgpu_range_t *out)
{
    bool found = false;
    pthread_mutex_lock(&ranges_lock);
    size_t at = upper_bound(base);
    if (at > 0 && ranges[at - 1].base == base && ranges[at - 1].kind == kind) {
        *out = ranges[at - 1];
        memmove(&ranges[at - 1], &ranges[at], (range_count - at) * sizeof(*ranges));
        range_count--;
        found = true;
    }
    pthread_mutex_unlock(&ranges_lock);
    return found;
}

static void range_release(const simgpu_range_t *r)
{
    munmap((void *)r->base, r->mapped_bytes);
    if (r->shared)
        close(r->shared_fd);
    if (r->kind == SIMGPU_RANGE_DEVICE)
        simgpu_mem_uncharge(r->device, r->mapped_bytes);
}

void simgpu_range_free_ctx(CUcontext ctx)
{
    pthread_mutex_lock(&ranges_lock);
    size_t kept = 0;
    for (size_t i = 0; i < range_count; i++) {
        simgpu_range_t *r = &ranges[i];
        if (r->ctx == ctx && (r->kind == SIMGPU_RANGE_DEVICE || r->kind == SIMGPU_RANGE_HOST ||
                              r->kind == SIMGPU_RANGE_IPC))
            range_release(r);
        else if (r->ctx == ctx && r->kind == SIMGPU_RANGE_REGISTERED)
            ; /* the program's memory: only forget the registration */
        else
            ranges[kept++] = *r;
    }
    range_count = kept;
    pthread_mutex_unlock(&ranges_lock);
}

CUresult simgpu_range_share(uintptr_t ptr, simgpu_range_t *out)
{
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    int fd = -1;
    pthread_mutex_lock(&ranges_lock);
    size_t i = upper_bound(ptr);
    if (i == 0 || ptr >= ranges[i - 1].base + range_extent(&ranges[i - 1]) ||
        ranges[i - 1].kind != SIMGPU_RANGE_DEVICE)
        goto out;
    simgpu_range_t *r = &ranges[i - 1];
    if (!r->shared) {
        /* move the pages onto a memfd at the same address: copy them out, map the memfd
         * over them (MAP_FIXED replaces the anonymous pages atomically) */
        char name[32];
        snprintf(name, sizeof(name), "simgpu-ipc-d%d", r->device);
        fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)r->mapped_bytes) != 0) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        for (size_t done = 0; done < r->mapped_bytes;) {
            ssize_t n = pwrite(fd, (const char *)r->base + done, r->mapped_bytes - done, (off_t)done);
            if (n <= 0) {
                rc = CUDA_ERROR_OPERATING_SYSTEM;
                goto out;
            }
            done += (size_t)n;
        }
        if (mmap((void *)r->base, r->mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
            MAP_FAILED) {
            rc = CUDA_ERROR_OPERATING_SYSTEM;
            goto out;
        }
        r->shared = true;
        r->shared_fd = fd;
        fd = -1;
    }
    *out = *r;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&ranges_lock);
    if (fd >= 0)
        close(fd);
    return rc;
}

static size_t page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

static CUresult device_alloc(CUcontext ctx, size_t bytes, CUdeviceptr *out)
{
    if (!out || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t mapped = page_round(bytes);
    if (mapped < bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = simgpu_mem_charge(ctx->device, mapped);
    if (rc)
        return rc;
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        simgpu_mem_uncharge(ctx->device, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    simgpu_range_t r = {.base = (uintptr_t)p, .bytes = bytes, .mapped_bytes = mapped,
                        .kind = SIMGPU_RANGE_DEVICE, .device = ctx->device, .ctx = ctx,
                        .id = simgpu_next_id()};
    if (simgpu_range_insert(&r) < 0) {
        range_release(&r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult simgpu_device_free(CUdeviceptr ptr)
{
    simgpu_range_t r;
    if (!simgpu_range_remove((uintptr_t)ptr, SIMGPU_RANGE_DEVICE, &r))
        return CUDA_ERROR_INVALID_VALUE;
    range_release(&r);
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    return rc ? rc : device_alloc(ctx, bytesize, dptr);
}

SIMGPU_API cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                              unsigned int element_bytes)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!pitch || width == 0 || height == 0 ||
        (element_bytes != 4 && element_bytes != 8 && element_bytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t row = (width + 511) / 512 * 512;
    rc = device_alloc(ctx, row * height, dptr);
    if (!rc)
        *pitch = row;
    return rc;
}

SIMGPU_API cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (dptr == 0)
        return CUDA_SUCCESS;
    simgpu_range_t r;
    if (!simgpu_range_find((uintptr_t)dptr, &r) || r.kind != SIMGPU_RANGE_DEVICE ||
        r.base != (uintptr_t)dptr)
        return CUDA_ERROR_INVALID_VALUE;
    /* like the driver, a free waits for work that may still use the memory */
    simgpu_ctx_synchronize(r.ctx);
    return simgpu_device_free(dptr);
}

SIMGPU_API cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t used, total;
    simgpu_mem_info(ctx->device, &used, &total);
    *total_bytes = (size_t)total;
    *free_bytes = used < total ? (size_t)(total - used) : 0;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_vmm_info_t v;
    simgpu_range_t r;
    uintptr_t base;
    size_t bytes;
    if (simgpu_vmm_find((uintptr_t)dptr, &v)) {
        base = v.base;
        bytes = v.bytes;
    } else if (simgpu_range_find((uintptr_t)dptr, &r) && r.kind != SIMGPU_RANGE_RESERVED) {
        base = r.base;
        bytes = r.bytes;
    } else {
        return CUDA_ERROR_NOT_FOUND;
    }
    if (pbase)
        *pbase = (CUdeviceptr)base;
    if (psize)
        *psize = bytes;
    return CUDA_SUCCESS;
}

/* ---- host memory ---- */

static CUresult host_alloc(void **pp, size_t bytes, unsigned flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!pp || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t mapped = page_round(bytes);
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    simgpu_range_t r = {.base = (uintptr_t)p, .bytes = bytes, .mapped_bytes = mapped,
                        .kind = SIMGPU_RANGE_HOST, .device = ctx->device, .ctx = ctx,
                        .flags = flags, .id = simgpu_next_id()};
    if (simgpu_range_insert(&r) < 0) {
        munmap(p, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

SIMGPU_API cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                     CU_MEMHOSTALLOC_WRITECOMBINED;
    if (flags & ~known)
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize, flags);
}

SIMGPU_API cuMemFreeHost(void *p)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!simgpu_range_remove((uintptr_t)p, SIMGPU_RANGE_HOST, &r))
        return CUDA_ERROR_INVALID_VALUE;
    range_release(&r);
    return CUDA_SUCCESS;
}

static bool host_range(const void *p, simgpu_range_t *r)
{
    return simgpu_range_find((uintptr_t)p, r) &&
           (r->kind == SIMGPU_RANGE_HOST || r->kind == SIMGPU_RANGE_REGISTERED);
}

SIMGPU_API cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!pdptr || flags != 0 || !host_range(p, &r))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;  /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemHostGetFlags(unsigned int *pflags, void *p)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!pflags || !host_range(p, &r))
        return CUDA_ERROR_INVALID_VALUE;
    *pflags = r.flags | CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!p || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_range_t r = {.base = (uintptr_t)p, .bytes = bytesize, .kind = SIMGPU_RANGE_REGISTERED,
                        .device = ctx->device, .ctx = ctx, .flags = flags,
                        .id = simgpu_next_id()};
    int ins = simgpu_range_insert(&r);
    if (ins == -2)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    return ins < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

SIMGPU_API cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
    return cuMemHostRegister_v2(p, bytesize, flags);
}

SIMGPU_API cuMemHostUnregister(void *p)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!simgpu_range_remove((uintptr_t)p, SIMGPU_RANGE_REGISTERED, &r))
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation (pools: pool.c) ---- */

/* The allocation happens at once (the memory is charged from the call on);
 * using it before the stream reaches this point is the program's error anyway. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUstream stream, bool per_thread)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    return rc ? rc : device_alloc(stream->ctx, bytes, dptr);
}

SIMGPU_API cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { return alloc_async(d, n, s, false); }
SIMGPU_API cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) { return alloc_async(d, n, s, true); }

static CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!simgpu_range_find((uintptr_t)dptr, &r) || r.kind != SIMGPU_RANGE_DEVICE ||
        r.base != (uintptr_t)dptr)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_FREE);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.free.ptr = dptr;
    return simgpu_stream_submit(stream, op, false);
}

SIMGPU_API cuMemFreeAsync(CUdeviceptr d, CUstream s) { return free_async(d, s, false); }
SIMGPU_API cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { return free_async(d, s, true); }
