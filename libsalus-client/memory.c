/* Device memory for the job: chunks the daemon hands out (virtual-memory allocations
 * exported as file descriptors), mapped into one reserved address range and sub-allocated
 * with memory/allocator. A job on several GPUs (--gpus N) has one such pool per GPU: an
 * allocation comes from the pool of the current context's device, in chunks salusd creates
 * on that GPU against the budget of the job's member there. Async frees are stream-ordered: a block freed on stream S may be
 * reused at once by an allocation on S, and by anyone once the free's event completed. */
#include "shim-internal.h"

#include "allocator.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pending_free_s {
    uint64_t address;
    int pool;
    CUstream stream;
    CUevent done;
    struct pending_free_s *next;
} pending_free_t;

typedef struct chunk_map_s {
    uint64_t id;
    CUdeviceptr at;
    uint64_t bytes;
} chunk_map_t;

/* One GPU's memory (the job's k-th GPU). */
typedef struct pool_s {
    allocator_t *allocator;      /* device memory: blocks inside the mapped chunks */
    allocator_t *address_space;  /* where chunks go inside the reserved range */
    uint64_t granularity;
    CUdeviceptr va_base;
    uint64_t va_bytes;
    uint64_t mapped_bytes;       /* chunks mapped on this GPU */
} pool_t;

static struct {
    pthread_mutex_t lock;
    pool_t pools[SHIM_MAX_GPUS];
    chunk_map_t *chunks;         /* of every pool (their addresses never overlap) */
    size_t chunk_count, chunk_capacity;
    uint64_t mapped_bytes;       /* every pool's */
    uint64_t live_bytes;
    uint64_t extra_bytes;        /* held outside the chunks (shim_mem_note_extra) */
    pending_free_t *pending;
} mem = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* The real ordinal of the job's k-th GPU. */
static int device_of(int k)
{
    return shim.gpu_count > 1 && k < shim.gpu_count ? shim.gpus[k] : shim.gpu;
}

/* The pool of the current context's device (0 for a job on one GPU, or without a context). */
static int current_pool(void)
{
    /* the CUDA 2.0 variant (one argument): the driver's default is cuCtxGetDevice_v2 */
    static CUresult (*get_device)(CUdevice *);
    CUdevice dev;
    if (shim.gpu_count <= 1)
        return 0;
    if (!__atomic_load_n(&get_device, __ATOMIC_ACQUIRE)) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult found;
        if (shim.drv.get_proc_address("cuCtxGetDevice", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT,
                                      &found) != CUDA_SUCCESS || !fn)
            return 0;
        __atomic_store_n(&get_device, (CUresult (*)(CUdevice *))fn, __ATOMIC_RELEASE);
    }
    if (get_device(&dev) != CUDA_SUCCESS)
        return 0;
    for (int k = 0; k < shim.gpu_count; k++)
        if (shim.gpus[k] == (int)dev)
            return k;
    return 0;
}

static CUmemAllocationProp chunk_prop(int k)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_of(k);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

static CUresult reserve_address_space(pool_t *pool, int k)
{
    size_t granularity = 0;
    CUmemAllocationProp prop = chunk_prop(k);
    CUresult rc = shim.drv.fn_cuMemGetAllocationGranularity(&granularity, &prop,
                                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t want = shim.va_bytes > shim.budget_bytes ? shim.va_bytes : shim.budget_bytes;
    pool->va_bytes = round_up(want ? want : granularity, granularity);
    rc = shim.drv.fn_cuMemAddressReserve(&pool->va_base, pool->va_bytes, granularity, 0, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    pool->granularity = granularity;
    pool->allocator = allocator_create(0);
    /* granularity is a power of two on every driver we know; the allocator checks */
    pool->address_space = allocator_create(granularity);
    if (!pool->allocator || !pool->address_space ||
        allocator_range_add(pool->address_space, pool->va_base, pool->va_bytes) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

static int remember_chunk(uint64_t id, CUdeviceptr at, uint64_t bytes)
{
    if (mem.chunk_count == mem.chunk_capacity) {
        size_t cap = mem.chunk_capacity ? mem.chunk_capacity * 2 : 16;
        chunk_map_t *chunks = realloc(mem.chunks, cap * sizeof(*chunks));
        if (!chunks)
            return -ENOMEM;
        mem.chunks = chunks;
        mem.chunk_capacity = cap;
    }
    mem.chunks[mem.chunk_count++] = (chunk_map_t){.id = id, .at = at, .bytes = bytes};
    return 0;
}

/* Maps one more chunk of at least bytes somewhere free in pool k's reserved range. */
static CUresult grow(int k, uint64_t bytes)
{
    pool_t *pool = &mem.pools[k];
    uint64_t chunk_id = 0, chunk_bytes = 0, at = 0;
    uint64_t want = round_up(bytes > shim.chunk_bytes ? bytes : shim.chunk_bytes, pool->granularity);
    uint64_t budget = atomic_load(&shim.page->budget_bytes);
    uint64_t used = pool->mapped_bytes + mem.extra_bytes; /* extra: charged to the first GPU */
    /* the page has the first GPU's budget; salusd checks the others' (mem_grow's device) */
    if (k == 0 && used + want > budget) /* what is left of the budget, whole granules */
        want = budget > used ? (budget - used) / pool->granularity * pool->granularity : 0;
    if (want < bytes || allocator_alloc(pool->address_space, want, &at) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = shim_session_grow(want, (uint32_t)k, &chunk_id, &chunk_bytes);
    if (fd == -ENOMEM && k > 0 && want > round_up(bytes, pool->granularity)) {
        /* a whole chunk is over that member's budget: what was asked may still fit */
        allocator_free(pool->address_space, at, NULL);
        want = round_up(bytes, pool->granularity);
        if (allocator_alloc(pool->address_space, want, &at) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        fd = shim_session_grow(want, (uint32_t)k, &chunk_id, &chunk_bytes);
    }
    if (fd < 0 || chunk_bytes != want) {
        if (fd >= 0) {
            close(fd);
            shim_session_release(chunk_id);
        }
        allocator_free(pool->address_space, at, NULL);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUmemGenericAllocationHandle handle;
    CUresult rc = shim.drv.fn_cuMemImportFromShareableHandle(
        &handle, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (rc == CUDA_SUCCESS) {
        rc = shim.drv.fn_cuMemMap(at, chunk_bytes, 0, handle, 0);
        /* the mapping keeps the memory alive; the handle is no longer needed */
        shim.drv.fn_cuMemRelease(handle);
    }
    /* a job on several GPUs (--gpus) has its memory on its first one; every one of its GPUs
     * may reach it (peer access on a real GPU) */
    CUmemAccessDesc access[SHIM_MAX_GPUS];
    size_t devices = shim.gpu_count > 1 ? (size_t)shim.gpu_count : 1;
    for (size_t k = 0; k < devices; k++)
        access[k] = (CUmemAccessDesc){
            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE,
                         .id = devices > 1 ? shim.gpus[k] : shim.gpu},
            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (rc == CUDA_SUCCESS &&
        (rc = shim.drv.fn_cuMemSetAccess(at, chunk_bytes, access, devices)) != CUDA_SUCCESS)
        shim.drv.fn_cuMemUnmap(at, chunk_bytes);
    if (rc == CUDA_SUCCESS && (allocator_range_add(pool->allocator, at, chunk_bytes) < 0 ||
                               remember_chunk(chunk_id, at, chunk_bytes) < 0)) {
        allocator_range_remove(pool->allocator, at);
        shim.drv.fn_cuMemUnmap(at, chunk_bytes);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        shim_session_release(chunk_id);
        allocator_free(pool->address_space, at, NULL);
        return rc;
    }
    mem.mapped_bytes += chunk_bytes;
    pool->mapped_bytes += chunk_bytes;
    atomic_store(&shim.page->mapped_bytes, mem.mapped_bytes);
    LOG_DEBUG("mapped chunk %llu: %llu KiB at 0x%llx", (unsigned long long)chunk_id,
              (unsigned long long)(chunk_bytes >> 10), (unsigned long long)at);
    return CUDA_SUCCESS;
}

/* The pool index of a block in the lane's shared chunks (lane_memory.c) */
#define LANE_POOL (-1)

static void release_block(int k, uint64_t address)
{
    uint64_t size = 0;
    if (k == LANE_POOL) {
        shim_lane_free(address);
        return;
    }
    if (allocator_free(mem.pools[k].allocator, address, &size) == 0)
        (void)size;
}

/* Returns pending async frees to the allocator once their event completed (waiting for it
 * with wait_all). Blocks are reused only then, on any stream: handing one to an allocation on
 * the freeing stream earlier would also release it to every other stream. */
static void retire_pending(int wait_all)
{
    pending_free_t **link = &mem.pending;
    while (*link) {
        pending_free_t *p = *link;
        int done = 0;
        if (wait_all)
            done = shim.real.cuEventSynchronize(p->done) == CUDA_SUCCESS;
        if (!done)
            done = shim.real.cuEventQuery(p->done) != CUDA_ERROR_NOT_READY;
        if (!done) {
            link = &p->next;
            continue;
        }
        release_block(p->pool, p->address);
        shim.real.cuEventDestroy(p->done);
        *link = p->next;
        free(p);
    }
}

/* Stream-ordered reuse: an allocation on stream S may take a block whose free is still
 * pending on S itself (S orders the old uses before the new ones). Only that block moves;
 * the per-thread default stream is excluded (its handle names a different stream in each
 * thread). The block is no larger than twice the request, so big blocks are not wasted. */
static int reuse_on_stream(int k, CUstream stream, size_t bytes, uint64_t *address)
{
    if (stream == CU_STREAM_PER_THREAD)
        return -ENOENT;
    for (pending_free_t **link = &mem.pending; *link; link = &(*link)->next) {
        pending_free_t *p = *link;
        allocator_block_t block;
        if (p->pool != k || p->stream != stream ||
            allocator_lookup(mem.pools[k].allocator, p->address, &block) < 0 ||
            block.size_bytes < bytes || block.size_bytes > 2 * (uint64_t)bytes + 4096)
            continue;
        *address = p->address;
        shim.real.cuEventDestroy(p->done);
        *link = p->next;
        free(p);
        return 0;
    }
    return -ENOENT;
}

CUresult shim_mem_alloc(CUdeviceptr *dptr, size_t bytes, CUstream stream, int stream_ordered)
{
    uint64_t address = 0;
    CUresult rc = CUDA_SUCCESS;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = shim_gate_memory();
    if (rc != CUDA_SUCCESS)
        return rc;
    int k = current_pool();
    pool_t *pool = &mem.pools[k];
    pthread_mutex_lock(&mem.lock);
    if (!pool->allocator && (rc = reserve_address_space(pool, k)) != CUDA_SUCCESS)
        goto out;
    if (mem.pending)
        retire_pending(0);
    if (stream_ordered && mem.pending && reuse_on_stream(k, stream, bytes, &address) == 0) {
        allocator_block_t reused;
        allocator_lookup(pool->allocator, address, &reused);
        mem.live_bytes += reused.size_bytes;
        *dptr = (CUdeviceptr)address;
        shim_note_alloc(mem.live_bytes);
        goto out;
    }
    uint64_t lane_bytes = 0; /* --lane-memory shared: the lane's chunks first */
    if (k == 0 && shim_lane_alloc(bytes, mem.live_bytes, &address, &lane_bytes) == 0) {
        mem.live_bytes += lane_bytes;
        *dptr = (CUdeviceptr)address;
        shim_note_alloc(mem.live_bytes);
        goto out;
    }
    int arc = allocator_alloc(pool->allocator, bytes, &address);
    if (arc == -ENOMEM && mem.pending) {
        retire_pending(1);
        arc = allocator_alloc(pool->allocator, bytes, &address);
    }
    if (arc == -ENOMEM) {
        rc = grow(k, round_up(bytes, ALLOCATOR_DEFAULT_ALIGNMENT_BYTES));
        if (rc != CUDA_SUCCESS) {
            LOG_DEBUG("allocation of %zu bytes refused: over the job's budget", bytes);
            goto out;
        }
        arc = allocator_alloc(pool->allocator, bytes, &address);
    }
    if (arc < 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    allocator_block_t block;
    allocator_lookup(pool->allocator, address, &block);
    mem.live_bytes += block.size_bytes;
    *dptr = (CUdeviceptr)address;
    shim_note_alloc(mem.live_bytes);
out:
    pthread_mutex_unlock(&mem.lock);
    return rc;
}

CUresult shim_mem_free(CUdeviceptr dptr, CUstream stream, int stream_ordered)
{
    CUresult rc = CUDA_SUCCESS;
    allocator_block_t block;
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&mem.lock);
    int k = 0; /* the pool that holds dptr */
    if (shim_lane_lookup(dptr, &block.base, &block.size_bytes) == 0)
        k = LANE_POOL;
    while (k >= 0 && k < SHIM_MAX_GPUS &&
           (!mem.pools[k].allocator || allocator_lookup(mem.pools[k].allocator, dptr, &block) < 0))
        k++;
    if (k == SHIM_MAX_GPUS) {
        rc = CUDA_ERROR_NOT_FOUND; /* not ours: the caller hands it to the real driver */
        goto out;
    }
    if (block.base != dptr) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (stream_ordered) {
        pending_free_t *p = calloc(1, sizeof(*p));
        if (!p) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        rc = shim.real.cuEventCreate(&p->done, CU_EVENT_DISABLE_TIMING);
        if (rc == CUDA_SUCCESS)
            rc = shim.real.cuEventRecord(p->done, stream);
        if (rc != CUDA_SUCCESS) {
            free(p);
            goto out;
        }
        p->address = dptr;
        p->pool = k;
        p->stream = stream;
        p->next = mem.pending;
        mem.pending = p;
    } else {
        release_block(k, dptr);
    }
    mem.live_bytes -= block.size_bytes;
    shim_note_free(mem.live_bytes);
out:
    pthread_mutex_unlock(&mem.lock);
    if (rc == CUDA_SUCCESS)
        shim_gate_after_free(); /* the release point: its memory may be at its low point */
    return rc;
}

void shim_mem_trim(void)
{
    uint64_t base, size;
    pthread_mutex_lock(&mem.lock);
    if (mem.pending)
        retire_pending(0);
    for (int k = 0; k < SHIM_MAX_GPUS; k++) {
        pool_t *pool = &mem.pools[k];
        while (pool->allocator && allocator_range_find_empty(pool->allocator, &base, &size) == 0) {
            size_t i = 0;
            while (i < mem.chunk_count && mem.chunks[i].at != base)
                i++;
            if (i == mem.chunk_count || allocator_range_remove(pool->allocator, base) < 0)
                break;
            shim.drv.fn_cuMemUnmap(base, size);
            allocator_free(pool->address_space, base, NULL);
            shim_session_release(mem.chunks[i].id);
            mem.chunks[i] = mem.chunks[--mem.chunk_count];
            mem.mapped_bytes -= size;
            pool->mapped_bytes -= size;
        }
    }
    atomic_store(&shim.page->mapped_bytes, mem.mapped_bytes);
    pthread_mutex_unlock(&mem.lock);
}

void shim_mem_lane_give_up(void)
{
    int lane_pending = 0;
    pthread_mutex_lock(&mem.lock);
    if (mem.pending)
        retire_pending(0); /* the job's work is complete here: their events are */
    for (pending_free_t *p = mem.pending; p && !lane_pending; p = p->next)
        lane_pending = p->pool == LANE_POOL;
    shim_lane_give_up(lane_pending);
    pthread_mutex_unlock(&mem.lock);
}

void shim_mem_note_extra(uint64_t bytes, int freed)
{
    pthread_mutex_lock(&mem.lock);
    if (freed) {
        mem.live_bytes -= bytes < mem.live_bytes ? bytes : mem.live_bytes;
        mem.extra_bytes -= bytes < mem.extra_bytes ? bytes : mem.extra_bytes;
        shim_note_free(mem.live_bytes);
    } else {
        mem.live_bytes += bytes;
        mem.extra_bytes += bytes;
        shim_note_alloc(mem.live_bytes);
    }
    pthread_mutex_unlock(&mem.lock);
    if (freed)
        shim_gate_after_free(); /* virtual-memory, managed and charged memory: the same */
}

uint64_t shim_mem_live_bytes(void)
{
    pthread_mutex_lock(&mem.lock);
    uint64_t live = mem.live_bytes;
    pthread_mutex_unlock(&mem.lock);
    return live;
}

void shim_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    uint64_t live = shim_mem_live_bytes();
    uint64_t budget = atomic_load(&shim.page->budget_bytes);
    *total_bytes = (size_t)budget;
    *free_bytes = (size_t)(live < budget ? budget - live : 0);
}
