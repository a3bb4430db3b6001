/* The lane's shared chunks (salusd --lane-memory shared; common/lane_page.h). An allocation on
 * the job's first GPU that takes its live memory past its persistent size (the lane manager's
 * books: hints, or learned sizes) is served from the lane's chunks when they have room; what
 * stays below it (its persistent memory) from chunks of its own. salusd sends them at the
 * first such allocation (lane_map), the job maps them at addresses of its own and keeps them
 * mapped until it ends (re-presenting them to a restarted salusd: reattach.c). Before it
 * allocates there the job takes the lane page's owner word (CAS
 * 0 -> its id); when it gives its lane up it stores 0 again, but only when no block of its own
 * lives in the lane's chunks and no free of one is pending (its work is complete then: the
 * lane goes only at a quiescent point or a boundary). A job that kept lane memory live keeps
 * the owner word (its memory is persistent by the learned-size rule), and its lane-mates serve
 * their allocations from chunks of their own meanwhile: two jobs never use the same bytes at
 * once, whichever way the turns go. Everything here runs with the memory lock held. */
#include "shim-internal.h"

#include "allocator.h"
#include "lane_page.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

enum { LANE_UNASKED = 0, LANE_MAPPED, LANE_NONE };

static struct {
    int state;
    lane_page_t *page;
    allocator_t *allocator;
    CUdeviceptr base;
    uint64_t bytes;
    uint64_t persistent; /* the job's persistent size: its own chunks serve that much */
    uint64_t uid;     /* the job's user as salusd knows it (the lane page's evict_uid) */
    uint64_t unmaps;  /* unmapped for another user's job */
    int owned;        /* this job holds the owner word */
    uint64_t blocks;  /* live blocks in the lane's chunks */
    uint64_t pinned;  /* give-ups that kept the owner word (lane memory live) */
    uint64_t ask_at;  /* the iteration count from which lane_map is asked (again) */
    unsigned asks;
} lane;

static CUresult map_chunk(int fd, uint64_t bytes)
{
    size_t granularity = 0;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = shim.gpu;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult rc = shim.drv.fn_cuMemGetAllocationGranularity(&granularity, &prop,
                                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || bytes % granularity)
        return CUDA_ERROR_INVALID_VALUE;
    rc = shim.drv.fn_cuMemAddressReserve(&lane.base, bytes, granularity, 0, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUmemGenericAllocationHandle handle;
    rc = shim.drv.fn_cuMemImportFromShareableHandle(&handle, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc == CUDA_SUCCESS) {
        rc = shim.drv.fn_cuMemMap(lane.base, bytes, 0, handle, 0);
        shim.drv.fn_cuMemRelease(handle); /* the mapping keeps the memory */
    }
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = shim.gpu},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (rc == CUDA_SUCCESS && (rc = shim.drv.fn_cuMemSetAccess(lane.base, bytes, &access, 1)) !=
                                  CUDA_SUCCESS)
        shim.drv.fn_cuMemUnmap(lane.base, bytes);
    if (rc != CUDA_SUCCESS)
        shim.drv.fn_cuMemAddressFree(lane.base, bytes);
    return rc;
}

/* Asks salusd for the lane's chunks; LANE_NONE when it has none for this job, LANE_UNASKED
 * again (asked at a later iteration, less and less often) when it may have them later. */
static void map_lane(void)
{
    uint64_t bytes = 0, chunk_id = 0;
    int page_fd = -1, chunk_fd = -1, retry = 0;
    lane.state = LANE_NONE;
    if (shim_session_lane_map(&chunk_id, &bytes, &lane.persistent, &lane.uid, &page_fd,
                              &chunk_fd, &retry) < 0) {
        if (retry == 2) { /* another user's jobs map them: they unmap at their release */
            lane.state = LANE_UNASKED;
            lane.ask_at = atomic_load(&shim.page->iterations) + 1;
        } else if (retry) {
            unsigned shift = lane.asks < 12 ? lane.asks : 12;
            lane.state = LANE_UNASKED;
            lane.ask_at = atomic_load(&shim.page->iterations) + (1ull << shift);
            lane.asks++;
        }
        return;
    }
    void *p = mmap(NULL, LANE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
    if (p == MAP_FAILED) {
        close(page_fd);
        close(chunk_fd);
        return;
    }
    lane.page = p;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (lane.page->magic == LANE_PAGE_MAGIC && lane.page->version == LANE_PAGE_VERSION &&
        lane.page->bytes == bytes)
        rc = map_chunk(chunk_fd, bytes);
    if (rc == CUDA_SUCCESS) /* re-presented if salusd restarts (reattach.c) */
        shim_lane_keep(chunk_id, bytes, page_fd, chunk_fd);
    close(page_fd);
    close(chunk_fd);
    if (rc == CUDA_SUCCESS) {
        lane.allocator = allocator_create(0);
        if (!lane.allocator || allocator_range_add(lane.allocator, lane.base, bytes) < 0) {
            shim.drv.fn_cuMemUnmap(lane.base, bytes);
            shim.drv.fn_cuMemAddressFree(lane.base, bytes);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        shim_lane_forget();
        LOG_WARN("the lane's shared chunks could not be mapped; the job takes its own");
        if (lane.allocator)
            allocator_destroy(lane.allocator);
        lane.allocator = NULL;
        munmap(lane.page, LANE_PAGE_BYTES);
        lane.page = NULL;
        return;
    }
    lane.bytes = bytes;
    lane.state = LANE_MAPPED;
    LOG_DEBUG("mapped the lane's shared chunks: %llu MiB at 0x%llx",
              (unsigned long long)(bytes >> 20), (unsigned long long)lane.base);
}

int shim_lane_alloc(size_t bytes, uint64_t live_bytes, uint64_t *address, uint64_t *block_bytes)
{
    if (lane.state == LANE_NONE || shim.gpu_count > 1)
        return -ENOENT;
    if (lane.state == LANE_MAPPED && live_bytes + bytes <= lane.persistent)
        return -ENOENT; /* its persistent memory: chunks of its own */
    if (lane.state == LANE_UNASKED) {
        if (atomic_load(&shim.page->iterations) < lane.ask_at)
            return -ENOENT;
        map_lane();
        if (lane.state != LANE_MAPPED || live_bytes + bytes <= lane.persistent)
            return -ENOENT;
    }
    if (bytes > lane.bytes)
        return -ENOSPC;
    if (!lane.owned) {
        uint64_t none = 0;
        if (!atomic_compare_exchange_strong(&lane.page->owner, &none, shim.job_id))
            return -EBUSY; /* a lane-mate kept lane memory live: chunks of our own */
        lane.owned = 1;
        if (atomic_exchange(&lane.page->last_owner, shim.job_id) != shim.job_id)
            atomic_fetch_add(&lane.page->handovers, 1);
    }
    if (allocator_alloc(lane.allocator, bytes, address) < 0)
        return -ENOSPC;
    allocator_block_t block;
    allocator_lookup(lane.allocator, *address, &block);
    *block_bytes = block.size_bytes;
    lane.blocks++;
    return 0;
}

int shim_lane_lookup(uint64_t address, uint64_t *base, uint64_t *block_bytes)
{
    allocator_block_t block;
    if (lane.state != LANE_MAPPED || address < lane.base || address >= lane.base + lane.bytes ||
        allocator_lookup(lane.allocator, address, &block) < 0)
        return -ENOENT;
    *base = block.base;
    *block_bytes = block.size_bytes;
    return 0;
}

void shim_lane_free(uint64_t address)
{
    if (lane.state == LANE_MAPPED && allocator_free(lane.allocator, address, NULL) == 0)
        lane.blocks--;
}

void shim_lane_give_up(int frees_pending)
{
    if (lane.state != LANE_MAPPED)
        return;
    if (lane.owned && (lane.blocks > 0 || frees_pending)) {
        if (lane.pinned++ == 0)
            LOG_DEBUG("lane memory live past the release (%llu blocks): the job keeps the "
                      "lane's chunks and its lane-mates take their own",
                      (unsigned long long)lane.blocks);
        return;
    }
    if (lane.owned) {
        lane.owned = 0;
        atomic_store(&lane.page->owner, 0);
    }
    int moved = 0;
    for (int i = 0; i < LANE_PAGE_MOVED && !moved; i++)
        moved = atomic_load(&lane.page->moved[i]) == shim.job_id;
    if (!moved && atomic_load(&lane.page->evict_uid) != lane.uid + 1)
        return;
    /* a job of another user asked for them (unmapped now, before salusd clears them for it),
     * or a re-layout moved this job to another lane: asked for again (its lane's) at its next
     * allocation past its persistent size */
    shim.drv.fn_cuMemUnmap(lane.base, lane.bytes);
    shim.drv.fn_cuMemAddressFree(lane.base, lane.bytes);
    shim_lane_forget();
    allocator_destroy(lane.allocator);
    lane.allocator = NULL;
    munmap(lane.page, LANE_PAGE_BYTES);
    lane.page = NULL;
    lane.state = LANE_UNASKED;
    lane.ask_at = 0;
    lane.asks = 0;
    lane.unmaps++;
    shim_session_lane_unmap();
}
