/* simgpu kernel-pack ABI — public and stable.
 *
 * A kernel pack is a shared library that exports CPU versions of GPU kernels by
 * name. simgpu finds packs through SIMGPU_KERNEL_PACKS (colon-separated paths),
 * calls simgpu_kernel_pack() once per pack and accepts a pack whose abi lies in
 * [SIMGPU_KERNEL_ABI_OLDEST, SIMGPU_KERNEL_ABI]. cuModuleGetFunction(name) looks
 * the name up in the packs. A launch runs kernel->run() on the stream's worker
 * thread while holding the device's execution engine, and occupies the engine for
 * cost_ns() (or the measured CPU time when cost_ns is NULL) divided by
 * SIMGPU_SPEED.
 *
 * ABI versions:
 *   1  name, run, cost_ns; simgpu_launch without `host`.
 *   2  simgpu_launch gains `host` (appended): services a kernel may call from run(),
 *      first of all waiting for another process OFF the engine, as a collective
 *      kernel waits for its peers. A pack that says abi 2 may read launch->host;
 *      an ABI-1 pack never sees the field and keeps working unchanged. simgpu
 *      releases before ABI 2 refuse an ABI-2 pack, so a pack never runs where the
 *      services it calls are missing. */
#ifndef SALUS_SIMGPU_KERNEL_H
#define SALUS_SIMGPU_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMGPU_KERNEL_ABI 2        /* the newest ABI; what a pack built against this header says */
#define SIMGPU_KERNEL_ABI_OLDEST 1 /* the oldest ABI simgpu still loads */

typedef struct { unsigned x, y, z; } simgpu_dim3;

typedef struct simgpu_launch simgpu_launch;

/* Host services (ABI 2). Every member is called from run() only, on the worker
 * thread that runs the kernel, and only with the `launch` that run() was given. */
typedef struct simgpu_host {
    /* sizeof(simgpu_host) in the simgpu that filled it: a member may be used only
     * when it lies wholly below `size` (later ABIs append members) */
    unsigned size;

    /* Waits off the engine, as a kernel blocked on a peer does without occupying
     * the device: (1) marks the launch's parameters consumed, so cuLaunchKernel
     * returns (launch->params must not be read afterwards: copy what you need
     * first); (2) releases the device's engine, so other kernels of any process or
     * stream run meanwhile; (3) sleeps with FUTEX_WAIT on `word` (a shared futex:
     * the word may lie in a MAP_SHARED segment that other processes change and
     * FUTEX_WAKE) while *word == value, at most timeout_ns (0: no limit); no
     * polling, no CPU burnt; (4) takes the engine again before it returns.
     * Returns 0 once *word != value, -ETIMEDOUT when the time ran out (the engine
     * is held again in both cases). The engine's busy time and the kernel's
     * modelled duration count only the time the kernel held the engine. May be
     * called several times in one run(). */
    int (*wait_off_engine)(const simgpu_launch *launch, const volatile uint32_t *word,
                           uint32_t value, uint64_t timeout_ns);

    /* Marks the kernel failed with `cuda_error` (a CUresult, e.g. 702
     * CUDA_ERROR_LAUNCH_TIMEOUT): the error becomes sticky in the launching
     * context, as a device fault is, and the next synchronising call of that
     * context (cuStreamSynchronize, cuCtxSynchronize, a synchronous copy or set)
     * and every later launch in it returns it. The first error wins; 0 stands for
     * 719 CUDA_ERROR_LAUNCH_FAILED. */
    void (*fail)(const simgpu_launch *launch, int cuda_error);
} simgpu_host;

struct simgpu_launch {
    simgpu_dim3 grid, block;
    unsigned shared_bytes;
    void **params;                                   /* exactly cuLaunchKernel's kernelParams */
    const simgpu_host *host;                         /* ABI 2: never NULL; ABI-1 packs ignore it */
};

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
