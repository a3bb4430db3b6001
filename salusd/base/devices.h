/* The node's GPUs as salusd owns them: the driver (a real libcuda.so.1, or simgpu when no GPU
 * works), each device's primary context, and physical memory in chunks created with the
 * virtual-memory API and exported as POSIX file descriptors for jobs to map. */
#ifndef SALUS_SALUSD_DEVICES_H
#define SALUS_SALUSD_DEVICES_H

#include "driver.h"

#include <stdint.h>

#define DEVICES_MAX_GPUS 16

typedef struct gpu_s {
    int index;
    CUdevice device;
    CUcontext context;
    char name[128];
    uint64_t total_bytes;
    uint64_t granularity_bytes;
    uint64_t chunk_bytes;        /* memory handed out in chunks, all jobs */
} gpu_t;

typedef struct devices_s {
    driver_t driver;
    int simulated;               /* 1: simgpu */
    int count;
    gpu_t gpus[DEVICES_MAX_GPUS];
    int (*simgpu_stats)(int device, void *stats); /* simgpu_device_stats, when simulated */
    uint64_t next_chunk_id;      /* above every chunk id handed out or taken back */
} devices_t;

typedef struct chunk_s {
    uint64_t id;
    int gpu;
    uint64_t bytes;
    CUmemGenericAllocationHandle handle;
    uint64_t dev, ino;           /* the file behind its exported descriptor (fstat) */
} chunk_t;

/* Loads driver_path, or (empty) the first working real driver, else simgpu found next to
 * salusd (../lib/simgpu/libcuda.so.1, ../lib/salus/simgpu/libcuda.so.1). */
int devices_open(devices_t *devs, const char *driver_path, char *err, size_t err_size);
void devices_close(devices_t *devs);
/* On simgpu, removes the devices' shared segment when this salusd created it and no job is
 * attached to it any more (jobs that outlive a stop keep it). */
void devices_release_segment(devices_t *devs);
/* Creates a chunk of at least bytes (rounded to the granularity) on gpu and exports it;
 * with clear, its memory is zeroed first. *fd_out is the caller's to send and close.
 * Returns 0 or a negative errno (-ENOMEM). */
int devices_chunk_create(devices_t *devs, int gpu, uint64_t bytes, int clear, chunk_t *chunk,
                         int *fd_out);
void devices_chunk_release(devices_t *devs, chunk_t *chunk);
/* A chunk mapped in salusd's own context (at *at), for clearing it again and again: a lane's
 * shared chunks before they go to another user's job (devices_mapped_clear: a memset on the
 * device, waited for). 0 or -EIO. */
int devices_chunk_map(devices_t *devs, const chunk_t *chunk, uint64_t *at);
void devices_chunk_unmap(devices_t *devs, const chunk_t *chunk, uint64_t at);
int devices_mapped_clear(devices_t *devs, const chunk_t *chunk, uint64_t at);
/* Takes back a chunk a job re-presents after a restart (fd: its descriptor, the caller's):
 * the driver must import it as memory of gpu, of exactly `bytes`; it becomes chunk `id`
 * again. 0; -EINVAL when the driver does not take it as such (not a chunk of this device). */
int devices_chunk_import(devices_t *devs, int gpu, int fd, uint64_t id, uint64_t bytes,
                         chunk_t *chunk);
/* Free and total memory of gpu as the driver reports it (cuMemGetInfo). */
int devices_mem_info(devices_t *devs, int gpu, uint64_t *free_bytes, uint64_t *total_bytes);
/* Device busy time so far (simgpu only; 0 and -ENOTSUP on a real GPU for now). */
int devices_busy_ns(devices_t *devs, int gpu, uint64_t *busy_ns);

#endif
