/* Events: a record queues a marker on the stream; the stream's worker stamps it
 * (CLOCK_MONOTONIC) when it gets there, so elapsed times are device times. */
#include <stdlib.h>

#include "simgpu-internal.h"

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    pthread_mutex_t lock;          /* guards marker */
    simgpu_marker_t *marker;       /* latest record, NULL if never recorded */
};

static bool event_valid(CUevent event)
{
    return event && event->magic == SIMGPU_MAGIC_EVENT;
}

/* A reference to the event's latest marker (NULL if never recorded). */
static simgpu_marker_t *event_marker(CUevent event)
{
    pthread_mutex_lock(&event->lock);
    simgpu_marker_t *marker = event->marker;
    if (marker)
        simgpu_marker_ref(marker);
    pthread_mutex_unlock(&event->lock);
    return marker;
}

SIMGPU_API cuEventCreate(CUevent *phEvent, unsigned int flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *event = calloc(1, sizeof(*event));
    if (!event)
        return CUDA_ERROR_OUT_OF_MEMORY;
    event->magic = SIMGPU_MAGIC_EVENT;
    event->flags = flags;
    pthread_mutex_init(&event->lock, NULL);
    *phEvent = event;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent event, CUstream stream, unsigned flags, bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_marker_t *marker = simgpu_marker_new();
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_MARKER);
    if (!marker || !op) {
        free(marker);
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    simgpu_marker_ref(marker);  /* one for the op, one for the event */
    op->u.marker = marker;
    pthread_mutex_lock(&event->lock);
    simgpu_marker_t *old = event->marker;
    event->marker = marker;
    pthread_mutex_unlock(&event->lock);
    simgpu_marker_unref(old);
    return simgpu_stream_submit(stream, op, false);
}

SIMGPU_API cuEventRecord(CUevent e, CUstream s) { return event_record(e, s, 0, false); }
SIMGPU_API cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s, 0, true); }

SIMGPU_API cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, false);
}

SIMGPU_API cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, true);
}

SIMGPU_API cuEventQuery(CUevent event)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    simgpu_marker_t *marker = event_marker(event);
    if (!marker)
        return CUDA_SUCCESS;
    bool done = simgpu_marker_done(marker, NULL);
    simgpu_marker_unref(marker);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMGPU_API cuEventSynchronize(CUevent event)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    simgpu_marker_t *marker = event_marker(event);
    if (marker) {
        simgpu_marker_wait(marker);
        simgpu_marker_unref(marker);
    }
    return CUDA_SUCCESS;
}

SIMGPU_API cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!event_valid(start) || !event_valid(end))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    simgpu_marker_t *a = event_marker(start), *b = event_marker(end);
    uint64_t ta = 0, tb = 0;
    if (!a || !b)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!simgpu_marker_done(a, &ta) || !simgpu_marker_done(b, &tb))
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)tb - (double)ta) / 1e6);
    simgpu_marker_unref(a);
    simgpu_marker_unref(b);
    return rc;
}

SIMGPU_API cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    return cuEventElapsedTime_v2(ms, start, end);
}

SIMGPU_API cuEventDestroy_v2(CUevent event)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    event->magic = 0;
    simgpu_marker_unref(event->marker);  /* a queued record keeps its own reference */
    pthread_mutex_destroy(&event->lock);
    free(event);
    return CUDA_SUCCESS;
}

SIMGPU_API cuEventDestroy(CUevent event)
{
    return cuEventDestroy_v2(event);
}

static CUresult stream_wait_event(CUstream stream, CUevent event, unsigned flags,
                                  bool per_thread_default)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread_default, &stream);
    if (rc)
        return rc;
    if (!event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_marker_t *marker = event_marker(event);
    if (!marker)
        return CUDA_SUCCESS;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_WAIT);
    if (!op) {
        simgpu_marker_unref(marker);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.marker = marker;
    return simgpu_stream_submit(stream, op, false);
}

SIMGPU_API cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    return stream_wait_event(s, e, flags, false);
}

SIMGPU_API cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
    return stream_wait_event(s, e, flags, true);
}
