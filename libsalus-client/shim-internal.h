/* State and internal interfaces of the shim. Everything here has hidden visibility; only
 * the driver entry points, dlsym and salus.h's functions leave the library (exports.map). */
#ifndef SALUS_CLIENT_SHIM_INTERNAL_H
#define SALUS_CLIENT_SHIM_INTERNAL_H

/* The driver's entry points are declared with default visibility, so that the wrappers
 * defined against these declarations are exported despite -fvisibility=hidden. */
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "client.h"
#include "driver.h"
#include "job_page.h"
#include "log.h"
#include "managed.h"

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#pragma GCC visibility push(default)
/* cuda.h maps cuGetProcAddress to its _v2; the shim also exports the CUDA 11.3 variant. */
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags);

/* Per-thread-default-stream variants have the base variant's type; cuda.h declares them only
 * under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#define SHIM_DECLARE_PTSZ(symbol, base_symbol) extern __typeof__(base_symbol) symbol;
SHIM_DECLARE_PTSZ(cuMemAllocAsync_ptsz, cuMemAllocAsync)
SHIM_DECLARE_PTSZ(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)
SHIM_DECLARE_PTSZ(cuMemFreeAsync_ptsz, cuMemFreeAsync)
SHIM_DECLARE_PTSZ(cuLaunchKernel_ptsz, cuLaunchKernel)
SHIM_DECLARE_PTSZ(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)
SHIM_DECLARE_PTSZ(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel)
SHIM_DECLARE_PTSZ(cuLaunchHostFunc_ptsz, cuLaunchHostFunc)
SHIM_DECLARE_PTSZ(cuGraphLaunch_ptsz, cuGraphLaunch)
SHIM_DECLARE_PTSZ(cuMemcpyAsync_ptsz, cuMemcpyAsync)
SHIM_DECLARE_PTSZ(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)
SHIM_DECLARE_PTSZ(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)
SHIM_DECLARE_PTSZ(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)
SHIM_DECLARE_PTSZ(cuMemsetD8Async_ptsz, cuMemsetD8Async)
SHIM_DECLARE_PTSZ(cuMemsetD16Async_ptsz, cuMemsetD16Async)
SHIM_DECLARE_PTSZ(cuMemsetD32Async_ptsz, cuMemsetD32Async)
SHIM_DECLARE_PTSZ(cuStreamSynchronize_ptsz, cuStreamSynchronize)
SHIM_DECLARE_PTSZ(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)
SHIM_DECLARE_PTSZ(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2)
SHIM_DECLARE_PTSZ(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2)
SHIM_DECLARE_PTSZ(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync)
SHIM_DECLARE_PTSZ(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async)
SHIM_DECLARE_PTSZ(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async)
SHIM_DECLARE_PTSZ(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async)
SHIM_DECLARE_PTSZ(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync_v2)
SHIM_DECLARE_PTSZ(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2)
SHIM_DECLARE_PTSZ(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2)
SHIM_DECLARE_PTSZ(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp_v2)
SHIM_DECLARE_PTSZ(cuMemcpy_ptds, cuMemcpy)
SHIM_DECLARE_PTSZ(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)
SHIM_DECLARE_PTSZ(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)
SHIM_DECLARE_PTSZ(cuMemsetD8_v2_ptds, cuMemsetD8_v2)
SHIM_DECLARE_PTSZ(cuMemsetD16_v2_ptds, cuMemsetD16_v2)
SHIM_DECLARE_PTSZ(cuMemsetD32_v2_ptds, cuMemsetD32_v2)
#undef SHIM_DECLARE_PTSZ
#pragma GCC visibility pop

typedef enum shim_mode {
    SHIM_MODE_FAILED = 0,   /* no daemon (fail closed) or no driver: every call errs */
    SHIM_MODE_MANAGED,      /* registered with salusd */
    SHIM_MODE_UNMANAGED,    /* SALUS_UNMANAGED=1: plain pass-through */
} shim_mode_t;

typedef struct shim_real_s {
#define SHIM_REAL_FIELD(symbol, base, version, ptds) __typeof__(symbol) *symbol;
    SHIM_MANAGED_CALLS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
    /* used by the shim itself */
    __typeof__(cuEventCreate) *cuEventCreate;
    __typeof__(cuEventRecord) *cuEventRecord;
    __typeof__(cuEventQuery) *cuEventQuery;
    __typeof__(cuEventDestroy_v2) *cuEventDestroy;
    __typeof__(cuCtxGetDevice) *cuCtxGetDevice;
} shim_real_t;

typedef struct shim_state_s {
    shim_mode_t mode;
    CUresult init_error;         /* what calls return in SHIM_MODE_FAILED */
    int refused;                 /* salusd answered the registration with a refusal */
    driver_t drv;                /* the real driver */
    shim_real_t real;
    /* session */
    pthread_mutex_t client_lock; /* one request at a time on the daemon socket */
    salus_client_t client;
    uint64_t job_id;
    int gpu;                     /* the real device ordinal the job was placed on */
    /* every GPU of the job (salusctl run --gpus N), in order; gpus[0] == gpu. The job sees
     * exactly these, as devices 0 .. gpu_count - 1 (device.c) */
#define SHIM_MAX_GPUS 32
    int gpus[SHIM_MAX_GPUS];
    int gpu_count;
    uint64_t budget_bytes;       /* at admission; the page has the current one */
    uint64_t va_bytes;           /* address space to reserve: the largest budget possible */
    uint64_t chunk_bytes;
    job_page_t *page;
    int page_fd;                 /* kept: re-presented when the job re-attaches */
    int notify_fd;
    uint64_t reattach_grace_ms;  /* how long to wait for a restarted salusd */
    char socket_path[108];
} shim_state_t;

extern shim_state_t shim;

/* session.c: connects, registers, loads the real driver. Idempotent and thread-safe. */
CUresult shim_init(void);
void *shim_real_dlsym(void *handle, const char *symbol);
/* Asks the daemon for a chunk of at least bytes on the job's device-th GPU (0: its first;
 * --gpus N: 0 .. N - 1); returns the chunk's fd (to import) or a negative errno (-ENOMEM:
 * over the budget there or the device is full). */
int shim_session_grow(uint64_t bytes, uint32_t device, uint64_t *chunk_id,
                      uint64_t *chunk_bytes);
int shim_session_alive(void);
/* The lane's shared chunks (salusd --lane-memory shared): the lane page's and the chunks'
 * descriptors, the chunk's id and size, the job's persistent size and its uid as salusd
 * knows it; -ENOENT when salusd has none for this job (*retry: 1, it may have them later;
 * 2, at its next iteration: another user's jobs map them now). */
int shim_session_lane_map(uint64_t *chunk_id, uint64_t *bytes, uint64_t *persistent,
                          uint64_t *uid, int *page_fd, int *chunk_fd, int *retry);
/* The job unmapped them (a job of another user asked for them: lane_page.h). */
int shim_session_lane_unmap(void);
/* Gives chunk_id back to salusd (after it was unmapped). */
int shim_session_release(uint64_t chunk_id);
/* Charges bytes the job took through the real driver to its budget (release: gives them
 * back). -ENOMEM: over the budget. */
int shim_session_charge(uint64_t bytes, int release);

/* reattach.c: surviving a restart of salusd. The chunks the job holds (a descriptor of each,
 * kept from shim_session_grow until shim_session_release); a watcher thread that notices the
 * daemon's loss at once (the job then stops at its next boundary, and on simgpu takes the
 * charge of its chunks, which the dead daemon's went with); re-attaching (with client_lock
 * held: 0, or -1 when the job failed closed, with one line saying why). */
void shim_chunk_keep(uint64_t id, uint64_t bytes, int fd);
void shim_chunk_forget(uint64_t id);
/* The lane's shared chunks the job has mapped (a copy of the lane page's and the chunk's
 * descriptors, from lane_map until it unmaps them): re-presented too (reattach_lane), so that
 * they stay the lane's set in the restarted salusd. */
void shim_lane_keep(uint64_t chunk_id, uint64_t bytes, int page_fd, int chunk_fd);
void shim_lane_forget(void);
void shim_watch_start(void);
int shim_daemon_lost(void);
int shim_reattach_locked(void);
/* The same, taking client_lock. */
int shim_session_recover(void);

/* memory.c */
CUresult shim_mem_alloc(CUdeviceptr *dptr, size_t bytes, CUstream stream, int stream_ordered);
/* CUDA_ERROR_NOT_FOUND: dptr is not the shim's (e.g. cuMemAllocManaged memory) */
CUresult shim_mem_free(CUdeviceptr dptr, CUstream stream, int stream_ordered);
uint64_t shim_mem_live_bytes(void);
/* At a boundary: unmaps the chunks that hold no live block and returns them to salusd. */
void shim_mem_trim(void);
void shim_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Device memory held outside the sub-allocator (virtual-memory allocations, managed memory,
 * arrays): counted as live like a block, so that boundaries and learned sizes see it. */
void shim_mem_note_extra(uint64_t bytes, int freed);

/* The job gives its lane up (gate.c): it stops using the lane's shared chunks, unless lane
 * memory of its own is still live there (lane_memory.c). */
void shim_mem_lane_give_up(void);

/* lane_memory.c, with the memory lock held: an allocation from the lane's shared chunks when it
 * takes the job's live memory (live_bytes now) past its persistent size (0: served;
 * *block_bytes: what it takes), a lookup (0: dptr is in them), a free, and the give-up
 * (frees_pending: an async free of a lane block is not complete yet). */
int shim_lane_alloc(size_t bytes, uint64_t live_bytes, uint64_t *address, uint64_t *block_bytes);
int shim_lane_lookup(uint64_t address, uint64_t *base, uint64_t *block_bytes);
void shim_lane_free(uint64_t address);
void shim_lane_give_up(int frees_pending);

/* charged.c: memory taken through the real driver and charged to the job */
/* CUDA_ERROR_NOT_FOUND: dptr is not a charged allocation */
CUresult shim_charged_free(CUdeviceptr dptr);
/* Charges bytes before the real call (and counts them as live); CUDA_ERROR_OUT_OF_MEMORY
 * over the budget. shim_charge_undo gives them back. */
CUresult shim_charge(uint64_t bytes);
void shim_charge_undo(uint64_t bytes);

/* gate.c */
enum { SHIM_WORK_NONE = 0, SHIM_WORK_COPY = 1, SHIM_WORK_LAUNCH = 2 };
/* What a submission that passed the gate hands to shim_gate_done: the in-flight count it
 * was counted on (NULL: none) */
typedef struct gate_thread_s *shim_gate_ticket_t;
/* copies, sets and other stream work */
CUresult shim_gate(CUstream stream, int ptds, shim_gate_ticket_t *ticket);
/* kernel, graph and host-function launches: what iterations are made of */
CUresult shim_gate_launch(CUstream stream, int ptds, shim_gate_ticket_t *ticket);
CUresult shim_gate_memory(void);
/* ticket may be NULL when is_work is SHIM_WORK_NONE */
CUresult shim_gate_enter(CUstream stream, int ptds, int is_work, shim_gate_ticket_t *ticket);
/* After the real call of a gated submission returned (pairs with a successful shim_gate). */
void shim_gate_done(shim_gate_ticket_t ticket);
/* The program destroys a stream: the gate stops watching it. */
void shim_forget_stream(CUstream stream);
void shim_after_sync(int whole_context);
void shim_note_free(uint64_t live_bytes);
/* After a free returned its memory (no memory lock held): may end the iteration there. */
void shim_gate_after_free(void);
void shim_note_alloc(uint64_t live_bytes);
int shim_mark_iteration(int begin);

/* Job classes (gate_preempt.c): the fields of a latency-critical job's registration
 * (SALUS_LATENCY_TARGET_MS, SALUS_REQUEST_MS): how many, and packed. */
int shim_class_fields(void);
void shim_class_pack(msgpack_packer *pk);
/* An iteration of duration_ns ended: a latency-critical job counts it as a request. */
void shim_class_request_done(job_page_t *page, uint64_t duration_ns);
/* Preemption at the gate (gate_preempt.c, gate_page.h), for a job whose page gives it a
 * role (job_page.h gate_role): called by every submission before the gate's own work, it
 * counts a latency-critical job's request, or parks a preemptible job while one goes on and
 * bounds its launches in flight. shim_gate_preempt_idle: the job's work is all done (a
 * quiescent point): its request is over. */
enum { SHIM_GATE_LC = 1, SHIM_GATE_PREEMPTIBLE = 2 }; /* = SCHED_CORE_GATE_* */
CUresult shim_gate_preempt(CUstream stream, int ptds, int is_work, uint32_t role);
void shim_gate_preempt_idle(void);
/* After a re-attach to a restarted salusd: the gate page is the new daemon's, asked for at the
 * next submission that needs it (the previous one's stays mapped, unused). */
void shim_gate_preempt_reattached(void);

/* dlopen.c: set while the shim loads the real driver (its dlopen is not redirected) */
extern __thread int shim_loading_driver;

/* procaddr.c */
void *shim_managed_lookup(const char *name, int cuda_version, int ptds);
void *shim_managed_by_symbol(const char *symbol);

uint64_t shim_now_ns(void);

/* Opens a wrapper of a call the real driver may lack: initialises the shim, answers
 * NOT_SUPPORTED when the real driver has no such entry point, and passes the call straight
 * through when the shim is not managing this process. */
#define SHIM_MANAGED_OR_REAL(symbol, ...)                                                      \
    CUresult init_rc_ = shim_init();                                                           \
    if (init_rc_ != CUDA_SUCCESS)                                                              \
        return init_rc_;                                                                       \
    if (!shim.real.symbol)                                                                     \
        return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    if (shim.mode != SHIM_MODE_MANAGED)                                                        \
        return shim.real.symbol(__VA_ARGS__)

#endif
