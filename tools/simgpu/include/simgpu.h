/* simgpu read-only statistics — public.
 *
 * simgpu (tools/simgpu) is a CPU-backed implementation of the CUDA driver API.
 * Besides the driver entry points its library (libcuda.so.1 in
 * <builddir>/lib/simgpu/) exports this one function, so that a program that
 * loaded it (salusd, through dlopen + dlsym("simgpu_device_stats")) can read how
 * busy each simulated device is. Finding the symbol is also how a program tells
 * simgpu from a real driver.
 *
 * The numbers describe the simulated device as shared by every process on the
 * machine that uses the same SIMGPU_SHM_NAME. Utilisation over an interval is
 * (busy_ns[t1] - busy_ns[t0]) / (sample_ns[t1] - sample_ns[t0]).
 * The call does not need cuInit and is thread-safe. */
#ifndef SALUS_SIMGPU_H
#define SALUS_SIMGPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMGPU_STATS_ABI 1

typedef struct simgpu_device_stats {
    uint32_t abi;                /* SIMGPU_STATS_ABI of the library that filled it */
    uint32_t processes;          /* processes holding device memory (slots in use) */
    uint64_t busy_ns;            /* total time the engine was occupied by kernels, ever */
    uint64_t kernels;            /* kernels completed, ever */
    uint64_t used_bytes;         /* device memory in use, all processes together */
    uint64_t total_bytes;        /* device memory size (SIMGPU_MEMORY_MB of the segment's creator) */
    uint64_t engine_recoveries;  /* times the engine was taken back from a dead process */
    uint64_t sample_ns;          /* CLOCK_MONOTONIC time of this sample */
} simgpu_device_stats_t;

typedef int (*simgpu_device_stats_fn)(int device, simgpu_device_stats_t *stats);

/* Fills *stats for simulated device `device` (0-based). Returns 0, -EINVAL for a
 * NULL stats, -ENODEV if the device does not exist or the shared segment cannot
 * be opened. */
int simgpu_device_stats(int device, simgpu_device_stats_t *stats);

/* Charges to this process the memory of the virtual-memory handle it imported from fd
 * (an exported chunk: the same memfd), when no handle of this process is charged for it
 * yet. On a GPU, memory that a process maps stays in use until its last mapping is gone,
 * whoever created it; simgpu charges the creator only, so a program whose chunks outlive
 * the process that created them (salus jobs while salusd restarts) adopts them to keep the
 * device's books true. The charge goes with the handle's last reference (or the process).
 * Returns 0 (charged now, or already), -ENOENT when no handle of this process maps that
 * memfd, -ENOMEM when the device is full, -EINVAL for a bad fd. */
typedef int (*simgpu_vmm_adopt_fd_fn)(int fd);
int simgpu_vmm_adopt_fd(int fd);

/* Removes the shared segment of the simulated devices (SIMGPU_SHM_NAME) when this process
 * created it and no other process has it attached (this one keeps its mapping), so that the
 * next process starts from SIMGPU_DEVICES and SIMGPU_MEMORY_MB again; salusd calls it as it
 * stops. Returns 1 removed, 0 kept (not created here, or in use), or a negative errno. */
typedef int (*simgpu_shm_release_fn)(void);
int simgpu_shm_release(void);

#ifdef __cplusplus
}
#endif

#endif
