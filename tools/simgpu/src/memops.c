/* Stream memory operations: cuStreamWriteValue32/64, cuStreamWaitValue32/64 and
 * cuStreamBatchMemOp (the _v2 API of CUDA 11.7 and later; the v1 names answer
 * CUDA_ERROR_NOT_SUPPORTED).
 *
 * A batch is one operation on its stream (a host function of the worker, so stream.c
 * needs nothing new): a write stores the value atomically, a wait polls the word until
 * its condition holds (every 20 us; like a GPU's, a wait that is never satisfied blocks
 * its stream for good). Memory barriers are fences; flushing remote writes is not
 * supported (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "simgpu-internal.h"

typedef struct memop_batch {
    unsigned count;
    CUstreamBatchMemOpParams ops[];
} memop_batch_t;

static bool wait_satisfied(const CUstreamBatchMemOpParams *op)
{
    unsigned kind = op->waitValue.flags & 0x3u;
    if (op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32) {
        uint32_t now = __atomic_load_n((const uint32_t *)(uintptr_t)op->waitValue.address, __ATOMIC_ACQUIRE);
        uint32_t value = op->waitValue.value;
        switch (kind) {
        case CU_STREAM_WAIT_VALUE_GEQ: return (int32_t)(now - value) >= 0;
        case CU_STREAM_WAIT_VALUE_EQ: return now == value;
        case CU_STREAM_WAIT_VALUE_AND: return (now & value) != 0;
        default: return ~(now | value) != 0;
        }
    }
    uint64_t now = __atomic_load_n((const uint64_t *)(uintptr_t)op->waitValue.address, __ATOMIC_ACQUIRE);
    uint64_t value = op->waitValue.value64;
    switch (kind) {
    case CU_STREAM_WAIT_VALUE_GEQ: return (int64_t)(now - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return now == value;
    case CU_STREAM_WAIT_VALUE_AND: return (now & value) != 0;
    default: return ~(now | value) != 0;
    }
}

/* runs on the stream's worker */
static void CUDA_CB batch_run(void *data)
{
    memop_batch_t *batch = data;
    for (unsigned i = 0; i < batch->count; i++) {
        const CUstreamBatchMemOpParams *op = &batch->ops[i];
        switch (op->operation) {
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            __atomic_store_n((uint32_t *)(uintptr_t)op->writeValue.address, op->writeValue.value, __ATOMIC_RELEASE);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            __atomic_store_n((uint64_t *)(uintptr_t)op->writeValue.address, op->writeValue.value64,
                             __ATOMIC_RELEASE);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            while (!wait_satisfied(op)) {
                struct timespec pause = {0, 20000};
                nanosleep(&pause, NULL);
            }
            break;
        default: /* CU_STREAM_MEM_OP_BARRIER */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            break;
        }
    }
    free(batch);
}

static CUresult op_check(const CUstreamBatchMemOpParams *op)
{
    switch (op->operation) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        uintptr_t align = op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
        if (!op->writeValue.address || op->writeValue.address % align ||
            (op->writeValue.flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
        uintptr_t align = op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
        if (op->waitValue.flags & CU_STREAM_WAIT_VALUE_FLUSH)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (!op->waitValue.address || op->waitValue.address % align || (op->waitValue.flags & ~0x3u))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_BARRIER:
        return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult submit_batch(CUstream stream, unsigned count, const CUstreamBatchMemOpParams *ops,
                             unsigned flags, bool per_thread)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    if (count == 0 || count > 256 || !ops || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        rc = op_check(&ops[i]);
        if (rc)
            return rc;
    }
    memop_batch_t *batch = malloc(sizeof(*batch) + count * sizeof(ops[0]));
    if (!batch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    batch->count = count;
    memcpy(batch->ops, ops, count * sizeof(ops[0]));
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_HOSTFN);
    if (!op) {
        free(batch);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.hostfn.fn = batch_run;
    op->u.hostfn.data = batch;
    return simgpu_stream_submit(stream, op, false);
}

static CUresult one_op(CUstream stream, CUstreamBatchMemOpType operation, CUdeviceptr address, uint64_t value,
                       unsigned flags, bool per_thread)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof(op));
    op.operation = operation;
    if (operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 || operation == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
        op.waitValue.address = address;
        op.waitValue.value64 = value;
        if (operation == CU_STREAM_MEM_OP_WAIT_VALUE_32)
            op.waitValue.value = (cuuint32_t)value;
        op.waitValue.flags = flags;
    } else {
        op.writeValue.address = address;
        op.writeValue.value64 = value;
        if (operation == CU_STREAM_MEM_OP_WRITE_VALUE_32)
            op.writeValue.value = (cuuint32_t)value;
        op.writeValue.flags = flags;
    }
    return submit_batch(stream, 1, &op, 0, per_thread);
}

#define W32 CU_STREAM_MEM_OP_WRITE_VALUE_32
#define W64 CU_STREAM_MEM_OP_WRITE_VALUE_64
#define A32 CU_STREAM_MEM_OP_WAIT_VALUE_32
#define A64 CU_STREAM_MEM_OP_WAIT_VALUE_64

SIMGPU_API cuStreamWriteValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) { return one_op(s, W32, a, v, f, false); }
SIMGPU_API cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) { return one_op(s, W32, a, v, f, true); }
SIMGPU_API cuStreamWriteValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) { return one_op(s, W64, a, v, f, false); }
SIMGPU_API cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) { return one_op(s, W64, a, v, f, true); }
SIMGPU_API cuStreamWaitValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) { return one_op(s, A32, a, v, f, false); }
SIMGPU_API cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) { return one_op(s, A32, a, v, f, true); }
SIMGPU_API cuStreamWaitValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) { return one_op(s, A64, a, v, f, false); }
SIMGPU_API cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) { return one_op(s, A64, a, v, f, true); }

SIMGPU_API cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return submit_batch(s, count, ops, flags, false);
}

SIMGPU_API cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                      unsigned int flags)
{
    return submit_batch(s, count, ops, flags, true);
}
