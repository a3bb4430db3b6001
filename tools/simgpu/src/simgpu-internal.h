/* simgpu internals: the objects behind the driver handles and the calls the
 * source files make into each other. Nothing here is visible outside the .so
 * (the library is built with -fvisibility=hidden; entry points are marked
 * SIMGPU_API). */
#ifndef SALUS_SIMGPU_INTERNAL_H
#define SALUS_SIMGPU_INTERNAL_H

/* simgpu implements deprecated entry points too */
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simgpu-undef.h"
#include "simgpu-decls.h"
#include "simgpu_kernel.h"

/* An exported driver entry point. */
#define SIMGPU_API __attribute__((visibility("default"))) CUresult CUDAAPI

#define SIMGPU_DRIVER_VERSION 13000
#define SIMGPU_MAX_DEVICES 16
#define SIMGPU_DEVICE_NAME "salus simgpu"
#define SIMGPU_CC_MAJOR 8
#define SIMGPU_CC_MINOR 0
#define SIMGPU_SM_COUNT 108
#define SIMGPU_VMM_GRANULARITY ((size_t)2 << 20)  /* 2 MiB, as on real GPUs */

/* Handle magics: every handle struct starts with one, checked on entry. */
enum {
    SIMGPU_MAGIC_CTX = 0x53474358,      /* "SGCX" */
    SIMGPU_MAGIC_STREAM = 0x53475354,   /* "SGST" */
    SIMGPU_MAGIC_EVENT = 0x53474556,    /* "SGEV" */
    SIMGPU_MAGIC_MODULE = 0x53474d44,   /* "SGMD" */
    SIMGPU_MAGIC_FUNC = 0x53474655,     /* "SGFU" */
    SIMGPU_MAGIC_LIBRARY = 0x53474c42,  /* "SGLB" */
    SIMGPU_MAGIC_MEMHANDLE = 0x53474d48,/* "SGMH" */
    SIMGPU_MAGIC_POOL = 0x5347504c,     /* "SGPL" */
};

/* ---- configuration and process state (device.c) ---- */
#define SIMGPU_DEFAULT_PROCESS_SLOTS 1024
#define SIMGPU_MAX_PROCESS_SLOTS 65536
typedef struct simgpu_config {
    int device_count;          /* SIMGPU_DEVICES, default 1 */
    uint64_t memory_bytes;     /* SIMGPU_MEMORY_MB per device, default 16384 MiB */
    double speed;              /* SIMGPU_SPEED, default 1.0 */
    uint32_t process_slots;    /* SIMGPU_PROCESS_SLOTS per device, default 1024 */
    char shm_name[256];        /* SIMGPU_SHM_NAME, default /simgpu-<uid> */
} simgpu_config_t;

extern simgpu_config_t simgpu_config;

/* CUDA_SUCCESS once cuInit succeeded, CUDA_ERROR_NOT_INITIALIZED before. */
CUresult simgpu_initialized(void);
/* Reads the configuration from the environment (idempotent). */
void simgpu_config_load(void);
bool simgpu_device_valid(CUdevice device);
uint64_t simgpu_now_ns(void);
/* cuDeviceGetAttribute's answer (attributes.c); INVALID_VALUE for an unknown attribute. */
CUresult simgpu_device_attribute(CUdevice_attribute attribute, CUdevice device, int *value);
/* One-time stderr note "simgpu[pid]: NAME is not supported ..."; returns NOT_SUPPORTED. */
CUresult simgpu_not_supported(const char *name, int *noted);

/* Whether simgpu-api.def lists base name `base` (procaddr.c). */
bool simgpu_api_implements(const char *base);

/* ---- shared segment: memory accounting and the execution engine (engine.c) ---- */
/* Maps the segment (creating it if needed). 0, or a CUresult error. */
CUresult simgpu_shm_attach(void);
/* Charges bytes to this process on device; CUDA_ERROR_OUT_OF_MEMORY if they do not fit. */
CUresult simgpu_mem_charge(int device, uint64_t bytes);
void simgpu_mem_uncharge(int device, uint64_t bytes);
void simgpu_mem_info(int device, uint64_t *used_bytes, uint64_t *total_bytes);
/* The record of kernel starts (record.c, SIMGPU_KERNEL_LOG): what is "submit" or "start". */
void simgpu_record_kernel(const char *what, const char *kernel_name);

/* The engine: one kernel at a time per device across all processes. */
void simgpu_engine_acquire(int device);
void simgpu_engine_release(int device, uint64_t busy_ns);
/* Lets the engine go in the middle of a kernel (a wait off the engine): busy_ns
 * is added to the device's busy time, the kernel is not counted yet. */
void simgpu_engine_yield(int device, uint64_t busy_ns);
int simgpu_shm_device_count(void);

/* ---- contexts (context.c) ---- */
struct CUctx_st {
    uint32_t magic;
    int device;
    unsigned flags;
    bool primary;
    uint64_t id;
    pthread_mutex_t lock;          /* guards streams, legacy_stream */
    struct CUstream_st *streams;   /* every stream of the context, including default ones */
    struct CUstream_st *legacy_stream;
    size_t limits[16];
    int sticky_error;              /* atomic: a kernel's failure (simgpu_host.fail), 0 if none */
};

/* The calling thread's current context, or CUDA_ERROR_INVALID_CONTEXT. */
CUresult simgpu_ctx_current(CUcontext *out);
bool simgpu_ctx_valid(CUcontext ctx);
CUresult simgpu_ctx_synchronize(CUcontext ctx);
/* The context's sticky error (a failed kernel), CUDA_SUCCESS if none. */
CUresult simgpu_ctx_error(CUcontext ctx);

/* ---- streams and markers (stream.c) ---- */
/* A marker completes when its stream reaches it; events and waits hold references. */
typedef struct simgpu_marker {
    int refs;                  /* atomic */
    bool done;
    uint64_t time_ns;          /* CLOCK_MONOTONIC when completed */
} simgpu_marker_t;

simgpu_marker_t *simgpu_marker_new(void);
void simgpu_marker_ref(simgpu_marker_t *marker);
void simgpu_marker_unref(simgpu_marker_t *marker);
bool simgpu_marker_done(simgpu_marker_t *marker, uint64_t *time_ns);
void simgpu_marker_wait(simgpu_marker_t *marker);

typedef enum simgpu_op_kind {
    SIMGPU_OP_COPY,
    SIMGPU_OP_COPY3D,             /* pitched rows and slices (cuMemcpy2D/3D) */
    SIMGPU_OP_SET,
    SIMGPU_OP_HOSTFN,
    SIMGPU_OP_CALLBACK,
    SIMGPU_OP_MARKER,
    SIMGPU_OP_WAIT,
    SIMGPU_OP_KERNEL,
    SIMGPU_OP_FREE,
} simgpu_op_kind_t;

typedef struct simgpu_op {
    simgpu_op_kind_t kind;
    struct simgpu_op *next;
    union {
        struct { void *dst; const void *src; size_t bytes; } copy;
        struct {
            unsigned char *dst;
            const unsigned char *src;
            size_t width_bytes, height, depth;
            size_t dst_pitch, src_pitch;      /* bytes from one row to the next */
            size_t dst_slice, src_slice;      /* bytes from one slice to the next */
        } copy3d;
        struct {
            void *dst;
            uint32_t value;
            unsigned element_bytes;
            size_t count;                     /* elements per row */
            size_t rows, pitch_bytes;         /* 2-D sets; rows 0 means 1 */
        } set;
        struct { CUhostFn fn; void *data; } hostfn;
        struct { CUstreamCallback fn; void *data; CUstream stream; } callback;
        simgpu_marker_t *marker;       /* MARKER: completes it; WAIT: waits for it */
        struct { CUdeviceptr ptr; } free;
        struct {
            struct CUfunc_st *function;
            simgpu_launch launch;
            bool *consumed;            /* set once run() returned (params read) */
            /* the execution, for the host services (launch.c) */
            struct CUstream_st *stream;
            uint64_t held_ns;          /* engine time of the segments before the current one */
            uint64_t segment_start_ns; /* when the engine was last taken */
        } kernel;
    } u;
} simgpu_op_t;

struct CUstream_st {
    uint32_t magic;
    CUcontext ctx;
    unsigned flags;
    int priority;
    uint64_t id;
    bool legacy;                  /* the context's legacy default stream */
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* signalled on completion of each op */
    simgpu_op_t *head, *tail;
    uint64_t enqueued, completed;
    bool worker_started, stopping;
    pthread_t worker;
    struct CUstream_st *next;     /* in ctx->streams */
};

/* Resolves a stream argument: NULL means the legacy default stream, or the
 * per-thread one when per_thread_default (the _ptsz/_ptds entry points). */
CUresult simgpu_stream_resolve(CUstream in, bool per_thread_default, CUstream *out);
CUresult simgpu_stream_create(CUcontext ctx, unsigned flags, int priority, bool legacy, CUstream *out);
void simgpu_stream_destroy(CUstream stream);
/* Queues op (taken over) on stream with legacy-stream ordering applied; if wait,
 * returns once the op completed. */
CUresult simgpu_stream_submit(CUstream stream, simgpu_op_t *op, bool wait);
/* Queues op and waits until *flag is set by the worker (under the stream lock). */
CUresult simgpu_stream_submit_until(CUstream stream, simgpu_op_t *op, bool *flag);
void simgpu_stream_synchronize(CUstream stream);
simgpu_op_t *simgpu_op_new(simgpu_op_kind_t kind);

/* ---- allocations (memory.c) ---- */
typedef enum simgpu_range_kind {
    SIMGPU_RANGE_DEVICE,       /* cuMemAlloc*, cuMemAllocAsync */
    SIMGPU_RANGE_HOST,         /* cuMemAllocHost, cuMemHostAlloc */
    SIMGPU_RANGE_REGISTERED,   /* cuMemHostRegister */
    SIMGPU_RANGE_RESERVED,     /* cuMemAddressReserve */
    SIMGPU_RANGE_IPC,          /* cuIpcOpenMemHandle: another process's device memory */
} simgpu_range_kind_t;

typedef struct simgpu_range {
    uintptr_t base;
    size_t bytes;              /* as requested */
    size_t mapped_bytes;       /* length of the mmap, charged bytes for DEVICE */
    simgpu_range_kind_t kind;
    int device;
    CUcontext ctx;
    unsigned flags;
    uint64_t id;
    bool shared;               /* DEVICE: backed by shared_fd (a memfd) since cuIpcGetMemHandle */
    int shared_fd;
} simgpu_range_t;

int simgpu_range_insert(const simgpu_range_t *range);
/* Finds the range holding ptr; copies it into *out. false if none. */
bool simgpu_range_find(uintptr_t ptr, simgpu_range_t *out);
/* Removes the range starting exactly at base; copies it into *out. */
bool simgpu_range_remove(uintptr_t base, simgpu_range_kind_t kind, simgpu_range_t *out);
/* Frees every DEVICE/HOST allocation of ctx (context destruction). */
void simgpu_range_free_ctx(CUcontext ctx);
CUresult simgpu_device_free(CUdeviceptr ptr);
/* Makes the DEVICE range holding ptr shareable (its pages moved, in place, onto a memfd,
 * once) and copies the range into *out. CUDA_ERROR_INVALID_VALUE if ptr is no device
 * allocation of this process. */
CUresult simgpu_range_share(uintptr_t ptr, simgpu_range_t *out);
uint64_t simgpu_next_id(void);

/* VMM mappings (vmm.c), consulted by pointer attributes. */
typedef struct simgpu_vmm_info {
    uintptr_t base;
    size_t bytes;
    int device;
    uint64_t handle_id;
    unsigned handle_types;
    int access;                 /* CUmemAccess_flags */
} simgpu_vmm_info_t;
bool simgpu_vmm_find(uintptr_t ptr, simgpu_vmm_info_t *out);
/* The memfd behind the VMM mapping holding ptr and where the mapping starts in it. */
bool simgpu_vmm_backing(uintptr_t ptr, simgpu_vmm_info_t *out, int *fd, size_t *fd_offset);

/* ---- modules and functions (module.c) ---- */
struct CUfunc_st {
    uint32_t magic;
    const simgpu_kernel *kernel;
    struct CUmod_st *module;
    struct CUlib_st *library;
    int max_dynamic_shared_bytes;
    struct CUfunc_st *next;
};

/* Accepts a CUfunction or a CUkernel handle (the runtime passes kernels as functions). */
struct CUfunc_st *simgpu_function_from_handle(const void *handle);

/* ---- launches (launch.c) ---- */
void simgpu_kernel_execute(simgpu_op_t *op, CUstream stream);

#endif
