/* Contexts: the per-thread current-context stack, created contexts and the
 * primary context of each device.
 *
 * A primary context is one struct per device that lives as long as the
 * process: releasing it to zero (or resetting it) tears down its streams and
 * allocations, and a later retain returns the same handle, as the driver does. */
#include <stdlib.h>
#include <string.h>

#include "simgpu-internal.h"

#define CTX_STACK_DEPTH 64

typedef struct primary_state {
    struct CUctx_st *ctx;
    unsigned retain;
    unsigned flags;
} primary_state_t;

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static primary_state_t primaries[SIMGPU_MAX_DEVICES];
static __thread CUcontext ctx_stack[CTX_STACK_DEPTH];
static __thread int ctx_depth;
static uint64_t next_ctx_id = 1;

static struct CUctx_st *ctx_new(int device, unsigned flags, bool primary)
{
    struct CUctx_st *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NULL;
    ctx->magic = SIMGPU_MAGIC_CTX;
    ctx->device = device;
    ctx->flags = flags;
    ctx->primary = primary;
    ctx->id = __atomic_fetch_add(&next_ctx_id, 1, __ATOMIC_RELAXED);
    ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
    ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    pthread_mutex_init(&ctx->lock, NULL);
    return ctx;
}

/* Waits for and destroys every stream, then frees the context's allocations. */
static void ctx_teardown(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    struct CUstream_st *streams = ctx->streams;
    ctx->streams = NULL;
    ctx->legacy_stream = NULL;
    pthread_mutex_unlock(&ctx->lock);
    while (streams) {
        struct CUstream_st *next = streams->next;
        simgpu_stream_destroy(streams);
        streams = next;
    }
    simgpu_range_free_ctx(ctx);
    /* a fresh id: per-thread default streams of the old incarnation are gone */
    ctx->id = __atomic_fetch_add(&next_ctx_id, 1, __ATOMIC_RELAXED);
}

bool simgpu_ctx_valid(CUcontext ctx)
{
    return ctx && ctx->magic == SIMGPU_MAGIC_CTX;
}

CUresult simgpu_ctx_current(CUcontext *out)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (ctx_depth == 0 || !ctx_stack[ctx_depth - 1])
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx_stack[ctx_depth - 1];
    return CUDA_SUCCESS;
}

CUresult simgpu_ctx_synchronize(CUcontext ctx)
{
    pthread_mutex_lock(&ctx->lock);
    for (struct CUstream_st *s = ctx->streams; s; s = s->next)
        simgpu_stream_synchronize(s);
    pthread_mutex_unlock(&ctx->lock);
    return simgpu_ctx_error(ctx);
}

CUresult simgpu_ctx_error(CUcontext ctx)
{
    return (CUresult)__atomic_load_n(&ctx->sticky_error, __ATOMIC_ACQUIRE);
}

static CUresult ctx_push(CUcontext ctx)
{
    if (ctx_depth == CTX_STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice device)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *ctx = ctx_new(device, flags, false);
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = ctx_push(ctx);
    if (rc) {
        free(ctx);
        return rc;
    }
    *pctx = ctx;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice device)
{
    return ctx_create(pctx, flags, device);
}

SIMGPU_API cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice device)
{
    return ctx_create(pctx, flags, device);
}

SIMGPU_API cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int count,
                          unsigned int flags, CUdevice device)
{
    (void)params;
    (void)count;
    return ctx_create(pctx, flags, device);
}

SIMGPU_API cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                          CUdevice device)
{
    (void)params;
    return ctx_create(pctx, flags, device);
}

SIMGPU_API cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!simgpu_ctx_valid(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(ctx);
    /* drop it from this thread's stack (other threads must not use it any more) */
    int kept = 0;
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] != ctx)
            ctx_stack[kept++] = ctx_stack[i];
    ctx_depth = kept;
    ctx->magic = 0;
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

SIMGPU_API cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!simgpu_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return ctx_push(ctx);
}

SIMGPU_API cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

SIMGPU_API cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext ctx = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = ctx;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

SIMGPU_API cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!simgpu_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        return ctx_push(ctx);
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

/* ctx, or the current context when ctx is NULL. */
static CUresult ctx_or_current(CUcontext ctx, CUcontext *out)
{
    if (!ctx)
        return simgpu_ctx_current(out);
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!simgpu_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult rc = ctx_or_current(ctx, &ctx);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

SIMGPU_API cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = ctx_or_current(ctx, &ctx);
    return rc ? rc : simgpu_ctx_synchronize(ctx);
}

SIMGPU_API cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

SIMGPU_API cuCtxGetFlags(unsigned int *flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxSetFlags(unsigned int flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    ctx->flags = flags;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    CUresult rc = ctx_or_current(ctx, &ctx);
    if (rc)
        return rc;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = ctx->id;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult rc = ctx_or_current(ctx, &ctx);
    if (rc)
        return rc;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetLimit(size_t *value, CUlimit limit)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!value || (unsigned)limit >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    *value = ctx->limits[limit];
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if ((unsigned)limit >= 16 || limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
        return CUDA_ERROR_INVALID_VALUE;
    ctx->limits[limit] = value;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxGetCacheConfig(CUfunc_cache *config)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
}

SIMGPU_API cuCtxSetCacheConfig(CUfunc_cache config)
{
    (void)config;
    CUcontext ctx;
    return simgpu_ctx_current(&ctx);
}

/* ---- primary contexts ---- */

static CUresult primary_check(CUdevice device)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    return simgpu_device_valid(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIMGPU_API cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice device)
{
    CUresult rc = primary_check(device);
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    primary_state_t *p = &primaries[device];
    if (!p->ctx)
        p->ctx = ctx_new(device, p->flags, true);
    if (p->ctx) {
        p->ctx->flags = p->flags;
        p->retain++;
        *pctx = p->ctx;
    } else {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

SIMGPU_API cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    CUresult rc = primary_check(device);
    if (rc)
        return rc;
    pthread_mutex_lock(&primary_lock);
    primary_state_t *p = &primaries[device];
    if (p->retain == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (--p->retain == 0)
        ctx_teardown(p->ctx);
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

SIMGPU_API cuDevicePrimaryCtxRelease(CUdevice device)
{
    return cuDevicePrimaryCtxRelease_v2(device);
}

SIMGPU_API cuDevicePrimaryCtxSetFlags_v2(CUdevice device, unsigned int flags)
{
    CUresult rc = primary_check(device);
    if (rc)
        return rc;
    pthread_mutex_lock(&primary_lock);
    primaries[device].flags = flags;
    if (primaries[device].ctx)
        primaries[device].ctx->flags = flags;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}

SIMGPU_API cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active)
{
    CUresult rc = primary_check(device);
    if (rc)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    *flags = primaries[device].flags;
    *active = primaries[device].retain > 0;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDevicePrimaryCtxReset_v2(CUdevice device)
{
    CUresult rc = primary_check(device);
    if (rc)
        return rc;
    pthread_mutex_lock(&primary_lock);
    primary_state_t *p = &primaries[device];
    if (p->ctx)
        ctx_teardown(p->ctx);
    p->flags = 0;
    if (p->ctx)
        p->ctx->flags = 0;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDevicePrimaryCtxReset(CUdevice device)
{
    return cuDevicePrimaryCtxReset_v2(device);
}
