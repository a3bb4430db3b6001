/* Streams: an in-order queue of operations and one worker thread each (started
 * at the first submission), markers (what events record and streams wait on),
 * the legacy and per-thread default streams and the legacy-stream ordering:
 * work on the legacy stream waits for all earlier work on the context's
 * blocking streams, and work on a blocking stream waits for earlier legacy
 * work. Both are expressed as a marker queued on the other stream and a wait
 * queued on this one. */
#include <stdlib.h>
#include <string.h>

#include "simgpu-internal.h"

#define PER_THREAD_STREAMS 8

static pthread_mutex_t marker_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t marker_cond = PTHREAD_COND_INITIALIZER;
static uint64_t next_stream_id = 1;

static __thread struct {
    uint64_t ctx_id;
    CUstream stream;
} per_thread[PER_THREAD_STREAMS];
static __thread unsigned per_thread_next;

/* ---- markers ---- */

simgpu_marker_t *simgpu_marker_new(void)
{
    simgpu_marker_t *marker = calloc(1, sizeof(*marker));
    if (marker)
        marker->refs = 1;
    return marker;
}

void simgpu_marker_ref(simgpu_marker_t *marker)
{
    __atomic_add_fetch(&marker->refs, 1, __ATOMIC_RELAXED);
}

void simgpu_marker_unref(simgpu_marker_t *marker)
{
    if (marker && __atomic_sub_fetch(&marker->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(marker);
}

static void marker_complete(simgpu_marker_t *marker)
{
    pthread_mutex_lock(&marker_lock);
    marker->time_ns = simgpu_now_ns();
    marker->done = true;
    pthread_cond_broadcast(&marker_cond);
    pthread_mutex_unlock(&marker_lock);
}

bool simgpu_marker_done(simgpu_marker_t *marker, uint64_t *time_ns)
{
    pthread_mutex_lock(&marker_lock);
    bool done = marker->done;
    if (done && time_ns)
        *time_ns = marker->time_ns;
    pthread_mutex_unlock(&marker_lock);
    return done;
}

void simgpu_marker_wait(simgpu_marker_t *marker)
{
    pthread_mutex_lock(&marker_lock);
    while (!marker->done)
        pthread_cond_wait(&marker_cond, &marker_lock);
    pthread_mutex_unlock(&marker_lock);
}

/* ---- the worker ---- */

simgpu_op_t *simgpu_op_new(simgpu_op_kind_t kind)
{
    simgpu_op_t *op = calloc(1, sizeof(*op));
    if (op)
        op->kind = kind;
    return op;
}

static void op_execute(CUstream s, simgpu_op_t *op)
{
    switch (op->kind) {
    case SIMGPU_OP_COPY:
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
        break;
    case SIMGPU_OP_COPY3D:
        for (size_t z = 0; z < op->u.copy3d.depth; z++)
            for (size_t y = 0; y < op->u.copy3d.height; y++)
                memmove(op->u.copy3d.dst + z * op->u.copy3d.dst_slice + y * op->u.copy3d.dst_pitch,
                        op->u.copy3d.src + z * op->u.copy3d.src_slice + y * op->u.copy3d.src_pitch,
                        op->u.copy3d.width_bytes);
        break;
    case SIMGPU_OP_SET: {
        size_t n = op->u.set.count;
        uint32_t v = op->u.set.value;
        size_t rows = op->u.set.rows ? op->u.set.rows : 1;
        for (size_t row = 0; row < rows; row++) {
            void *line = (char *)op->u.set.dst + row * op->u.set.pitch_bytes;
            if (op->u.set.element_bytes == 1) {
                memset(line, (int)(v & 0xff), n);
            } else if (op->u.set.element_bytes == 2) {
                uint16_t *p = line;
                for (size_t i = 0; i < n; i++)
                    p[i] = (uint16_t)v;
            } else {
                uint32_t *p = line;
                for (size_t i = 0; i < n; i++)
                    p[i] = v;
            }
        }
        break;
    }
    case SIMGPU_OP_HOSTFN:
        op->u.hostfn.fn(op->u.hostfn.data);
        break;
    case SIMGPU_OP_CALLBACK:
        op->u.callback.fn(op->u.callback.stream, CUDA_SUCCESS, op->u.callback.data);
        break;
    case SIMGPU_OP_MARKER:
        marker_complete(op->u.marker);
        simgpu_marker_unref(op->u.marker);
        break;
    case SIMGPU_OP_WAIT:
        simgpu_marker_wait(op->u.marker);
        simgpu_marker_unref(op->u.marker);
        break;
    case SIMGPU_OP_KERNEL:
        simgpu_kernel_execute(op, s);
        break;
    case SIMGPU_OP_FREE:
        simgpu_device_free(op->u.free.ptr);
        break;
    }
}

static void *worker_main(void *arg)
{
    CUstream s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cond, &s->lock);
        simgpu_op_t *op = s->head;
        if (!op)
            break;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        op_execute(s, op);
        free(op);
        pthread_mutex_lock(&s->lock);
        s->completed++;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Appends op; returns its sequence number (0 if the worker could not start). */
static uint64_t stream_enqueue(CUstream s, simgpu_op_t *op)
{
    uint64_t seq = 0;
    pthread_mutex_lock(&s->lock);
    if (!s->worker_started) {
        if (pthread_create(&s->worker, NULL, worker_main, s) != 0)
            goto out;
        s->worker_started = true;
    }
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    seq = ++s->enqueued;
    pthread_cond_broadcast(&s->cond);
out:
    pthread_mutex_unlock(&s->lock);
    return seq;
}

static bool stream_pending(CUstream s)
{
    pthread_mutex_lock(&s->lock);
    bool pending = s->completed < s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return pending;
}

/* Makes `waiter` wait for everything queued so far on `target`. */
static void stream_order_after(CUstream waiter, CUstream target)
{
    if (!stream_pending(target))
        return;
    simgpu_marker_t *marker = simgpu_marker_new();
    simgpu_op_t *mark = simgpu_op_new(SIMGPU_OP_MARKER);
    simgpu_op_t *wait = simgpu_op_new(SIMGPU_OP_WAIT);
    if (!marker || !mark || !wait) {
        free(marker);
        free(mark);
        free(wait);
        simgpu_stream_synchronize(target);  /* out of memory: order by blocking */
        return;
    }
    simgpu_marker_ref(marker);
    mark->u.marker = marker;
    wait->u.marker = marker;
    if (!stream_enqueue(target, mark)) {
        simgpu_marker_unref(marker);
        marker_complete(marker);
        free(mark);
    }
    if (!stream_enqueue(waiter, wait)) {
        simgpu_marker_unref(marker);
        free(wait);
    }
}

static void stream_apply_legacy_order(CUstream s)
{
    CUcontext ctx = s->ctx;
    if (s->flags & CU_STREAM_NON_BLOCKING)
        return;
    pthread_mutex_lock(&ctx->lock);
    if (s->legacy) {
        for (CUstream t = ctx->streams; t; t = t->next)
            if (t != s && !(t->flags & CU_STREAM_NON_BLOCKING))
                stream_order_after(s, t);
    } else if (ctx->legacy_stream) {
        stream_order_after(s, ctx->legacy_stream);
    }
    pthread_mutex_unlock(&ctx->lock);
}

static CUresult stream_submit(CUstream s, simgpu_op_t *op, uint64_t *seq)
{
    stream_apply_legacy_order(s);
    *seq = stream_enqueue(s, op);
    if (*seq == 0) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult simgpu_stream_submit(CUstream s, simgpu_op_t *op, bool wait)
{
    uint64_t seq;
    CUresult rc = stream_submit(s, op, &seq);
    if (rc || !wait)
        return rc;
    pthread_mutex_lock(&s->lock);
    while (s->completed < seq)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return simgpu_ctx_error(s->ctx);
}

CUresult simgpu_stream_submit_until(CUstream s, simgpu_op_t *op, bool *flag)
{
    uint64_t seq;
    CUresult rc = stream_submit(s, op, &seq);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    while (!*flag && s->completed < seq)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return CUDA_SUCCESS;
}

void simgpu_stream_synchronize(CUstream s)
{
    pthread_mutex_lock(&s->lock);
    while (s->completed < s->enqueued)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

CUresult simgpu_stream_create(CUcontext ctx, unsigned flags, int priority, bool legacy,
                              CUstream *out)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = SIMGPU_MAGIC_STREAM;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->legacy = legacy;
    s->id = __atomic_fetch_add(&next_stream_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (legacy)
        ctx->legacy_stream = s;  /* caller holds ctx->lock */
    else
        pthread_mutex_lock(&ctx->lock);
    s->next = ctx->streams;
    ctx->streams = s;
    if (!legacy)
        pthread_mutex_unlock(&ctx->lock);
    *out = s;
    return CUDA_SUCCESS;
}

/* Drains the queue, stops the worker and frees the stream (already unlinked). */
void simgpu_stream_destroy(CUstream s)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (s->worker_started)
        pthread_join(s->worker, NULL);
    s->magic = 0;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

static CUresult legacy_stream(CUcontext ctx, CUstream *out)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->legacy_stream)
        rc = simgpu_stream_create(ctx, 0, 0, true, out);
    else
        *out = ctx->legacy_stream;
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

static CUresult per_thread_stream(CUcontext ctx, CUstream *out)
{
    for (int i = 0; i < PER_THREAD_STREAMS; i++) {
        if (per_thread[i].stream && per_thread[i].ctx_id == ctx->id) {
            *out = per_thread[i].stream;
            return CUDA_SUCCESS;
        }
    }
    CUresult rc = simgpu_stream_create(ctx, 0, 0, false, out);
    if (rc)
        return rc;
    unsigned slot = per_thread_next++ % PER_THREAD_STREAMS;
    per_thread[slot].ctx_id = ctx->id;
    per_thread[slot].stream = *out;
    return CUDA_SUCCESS;
}

CUresult simgpu_stream_resolve(CUstream in, bool per_thread_default, CUstream *out)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!in)
        in = per_thread_default ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (in == CU_STREAM_LEGACY || in == CU_STREAM_PER_THREAD) {
        CUcontext ctx;
        rc = simgpu_ctx_current(&ctx);
        if (rc)
            return rc;
        return in == CU_STREAM_LEGACY ? legacy_stream(ctx, out) : per_thread_stream(ctx, out);
    }
    if (in->magic != SIMGPU_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = in;
    return CUDA_SUCCESS;
}

/* ---- entry points ---- */

SIMGPU_API cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    return simgpu_stream_create(ctx, flags, priority, false, phStream);
}

SIMGPU_API cuStreamCreate(CUstream *phStream, unsigned int flags)
{
    return cuStreamCreateWithPriority(phStream, flags, 0);
}

SIMGPU_API cuStreamDestroy_v2(CUstream stream)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD ||
        stream->magic != SIMGPU_MAGIC_STREAM || stream->legacy)
        return CUDA_ERROR_INVALID_HANDLE;
    CUcontext ctx = stream->ctx;
    pthread_mutex_lock(&ctx->lock);
    for (CUstream *p = &ctx->streams; *p; p = &(*p)->next) {
        if (*p == stream) {
            *p = stream->next;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    for (int i = 0; i < PER_THREAD_STREAMS; i++)
        if (per_thread[i].stream == stream)
            per_thread[i].stream = NULL;
    simgpu_stream_destroy(stream);
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamDestroy(CUstream stream)
{
    return cuStreamDestroy_v2(stream);
}

static CUresult stream_synchronize(CUstream stream, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    simgpu_stream_synchronize(stream);
    return simgpu_ctx_error(stream->ctx);
}

SIMGPU_API cuStreamSynchronize(CUstream stream) { return stream_synchronize(stream, false); }
SIMGPU_API cuStreamSynchronize_ptsz(CUstream stream) { return stream_synchronize(stream, true); }

static CUresult stream_query(CUstream stream, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    return stream_pending(stream) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

SIMGPU_API cuStreamQuery(CUstream stream) { return stream_query(stream, false); }
SIMGPU_API cuStreamQuery_ptsz(CUstream stream) { return stream_query(stream, true); }

static CUresult stream_get_priority(CUstream stream, int *priority, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    *priority = stream->priority;
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamGetPriority(CUstream s, int *p) { return stream_get_priority(s, p, false); }
SIMGPU_API cuStreamGetPriority_ptsz(CUstream s, int *p) { return stream_get_priority(s, p, true); }

static CUresult stream_get_flags(CUstream stream, unsigned *flags, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = stream->flags;
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamGetFlags(CUstream s, unsigned int *f) { return stream_get_flags(s, f, false); }
SIMGPU_API cuStreamGetFlags_ptsz(CUstream s, unsigned int *f) { return stream_get_flags(s, f, true); }

static CUresult stream_get_ctx(CUstream stream, CUcontext *pctx, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = stream->ctx;
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamGetCtx(CUstream s, CUcontext *c) { return stream_get_ctx(s, c, false); }
SIMGPU_API cuStreamGetCtx_ptsz(CUstream s, CUcontext *c) { return stream_get_ctx(s, c, true); }

SIMGPU_API cuStreamGetCtx_v2(CUstream s, CUcontext *c, CUgreenCtx *g)
{
    if (g)
        *g = NULL;
    return stream_get_ctx(s, c, false);
}

SIMGPU_API cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *c, CUgreenCtx *g)
{
    if (g)
        *g = NULL;
    return stream_get_ctx(s, c, true);
}

static CUresult stream_get_id(CUstream stream, unsigned long long *id, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = stream->id;
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamGetId(CUstream s, unsigned long long *id) { return stream_get_id(s, id, false); }
SIMGPU_API cuStreamGetId_ptsz(CUstream s, unsigned long long *id) { return stream_get_id(s, id, true); }

static CUresult stream_get_device(CUstream stream, CUdevice *device, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = stream->ctx->device;
    return CUDA_SUCCESS;
}

SIMGPU_API cuStreamGetDevice(CUstream s, CUdevice *d) { return stream_get_device(s, d, false); }
SIMGPU_API cuStreamGetDevice_ptsz(CUstream s, CUdevice *d) { return stream_get_device(s, d, true); }

static CUresult launch_host_func(CUstream stream, CUhostFn fn, void *data, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.hostfn.fn = fn;
    op->u.hostfn.data = data;
    return simgpu_stream_submit(stream, op, false);
}

SIMGPU_API cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    return launch_host_func(s, fn, data, false);
}

SIMGPU_API cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    return launch_host_func(s, fn, data, true);
}

static CUresult add_callback(CUstream stream, CUstreamCallback fn, void *data, unsigned flags,
                             bool per_thread_default)
{
    CUstream original = stream;
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!fn || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_CALLBACK);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.callback.fn = fn;
    op->u.callback.data = data;
    op->u.callback.stream = original;
    return simgpu_stream_submit(stream, op, false);
}

SIMGPU_API cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *data, unsigned int flags)
{
    return add_callback(s, fn, data, flags, false);
}

SIMGPU_API cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback fn, void *data, unsigned int flags)
{
    return add_callback(s, fn, data, flags, true);
}
