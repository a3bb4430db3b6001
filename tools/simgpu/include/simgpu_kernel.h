/* simgpu kernel-pack ABI — public and stable.
 *
 * A kernel pack is a shared library that exports CPU versions of GPU kernels by
 * name. simgpu finds packs through SIMGPU_KERNEL_PACKS (colon-separated paths),
 * calls simgpu_kernel_pack() once per pack and refuses a pack whose abi differs
 * from SIMGPU_KERNEL_ABI. cuModuleGetFunction(name) looks the name up in the packs.
 * A launch runs kernel->run() on the stream's worker thread and occupies the
 * simulated device for cost_ns() (or the measured CPU time when cost_ns is NULL)
 * divided by SIMGPU_SPEED. */
#ifndef SALUS_SIMGPU_KERNEL_H
#define SALUS_SIMGPU_KERNEL_H

#ifdef __cplusplus
extern "C" {
#endif

#define SIMGPU_KERNEL_ABI 1

typedef struct { unsigned x, y, z; } simgpu_dim3;

typedef struct simgpu_launch {
    simgpu_dim3 grid, block;
    unsigned shared_bytes;
    void **params;                                   /* exactly cuLaunchKernel's kernelParams */
} simgpu_launch;

typedef struct simgpu_kernel {
    const char *name;                                /* as given to cuModuleGetFunction */
    void (*run)(const simgpu_launch *launch);        /* runs the whole grid on the CPU */
    double (*cost_ns)(const simgpu_launch *launch);  /* modelled device time; NULL: measured CPU time */
} simgpu_kernel;

/* the one symbol every pack exports */
const simgpu_kernel *simgpu_kernel_pack(unsigned *count, unsigned *abi);

#ifdef __cplusplus
}
#endif

#endif
