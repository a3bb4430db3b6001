/* Kernel launches.
 *
 * A launch is an operation on its stream. The stream's worker computes the
 * kernel's modelled time (cost_ns, before anything else reads the parameters),
 * acquires the device's engine (one kernel at a time across every process and
 * stream), runs the kernel on the CPU, and keeps the engine until
 * start + cost / SIMGPU_SPEED (when cost_ns is NULL: the CPU time run() took,
 * divided by SIMGPU_SPEED), so a kernel never finishes faster than its model.
 *
 * kernelParams point at the caller's argument storage and simgpu cannot know
 * their sizes (the image is not parsed), so the caller is held until run() has
 * returned; the modelled remainder of the kernel then passes asynchronously. */
#include <errno.h>
#include <time.h>

#include "simgpu-internal.h"

static int extra_noted;

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

void simgpu_kernel_execute(simgpu_op_t *op, CUstream stream, pthread_mutex_t *lock,
                           pthread_cond_t *cond)
{
    const simgpu_kernel *kernel = op->u.kernel.function->kernel;
    const simgpu_launch *launch = &op->u.kernel.launch;
    int device = stream->ctx->device;
    double cost_ns = kernel->cost_ns ? kernel->cost_ns(launch) : -1.0;

    simgpu_engine_acquire(device);
    uint64_t start = simgpu_now_ns();
    uint64_t cpu_start = thread_cpu_ns();
    if (kernel->run)
        kernel->run(launch);
    uint64_t cpu_ns = thread_cpu_ns() - cpu_start;

    /* the parameters have been read: let the caller go on */
    pthread_mutex_lock(lock);
    *op->u.kernel.consumed = true;
    pthread_cond_broadcast(cond);
    pthread_mutex_unlock(lock);

    if (!(cost_ns >= 0.0))  /* NULL cost_ns, or a NaN/negative answer */
        cost_ns = (double)cpu_ns;
    double modelled = cost_ns / simgpu_config.speed;
    if (modelled > 0.0)
        sleep_until(start + (uint64_t)modelled);
    simgpu_engine_release(device, simgpu_now_ns() - start);
}

static CUresult launch(CUfunction f, const simgpu_launch *shape, CUstream stream, bool per_thread,
                       void **extra)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    struct CUfunc_st *function = simgpu_function_from_handle(f);
    if (!function)
        return CUDA_ERROR_INVALID_HANDLE;
    if (extra)
        return simgpu_not_supported("cuLaunchKernel with the 'extra' parameter form", &extra_noted);
    const simgpu_dim3 *g = &shape->grid, *b = &shape->block;
    if (!g->x || !g->y || !g->z || !b->x || !b->y || !b->z || g->x > 2147483647u ||
        g->y > 65535 || g->z > 65535 || b->x > 1024 || b->y > 1024 || b->z > 64 ||
        (uint64_t)b->x * b->y * b->z > 1024 ||
        shape->shared_bytes > (unsigned)function->max_dynamic_shared_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    bool consumed = false;
    op->u.kernel.function = function;
    op->u.kernel.launch = *shape;
    op->u.kernel.consumed = &consumed;
    return simgpu_stream_submit_until(stream, op, &consumed);
}

static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shared, CUstream stream,
                              void **params, void **extra, bool per_thread)
{
    simgpu_launch shape = {.grid = {gx, gy, gz}, .block = {bx, by, bz}, .shared_bytes = shared,
                           .params = params};
    return launch(f, &shape, stream, per_thread, extra);
}

SIMGPU_API cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                          CUstream stream, void **params, void **extra)
{
    return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, false);
}

SIMGPU_API cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared, CUstream stream, void **params, void **extra)
{
    return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, true);
}

static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra, bool per_thread)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    return launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                         config->blockDimX, config->blockDimY, config->blockDimZ,
                         config->sharedMemBytes, config->hStream, params, extra, per_thread);
}

SIMGPU_API cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch_kernel_ex(config, f, params, extra, false);
}

SIMGPU_API cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra)
{
    return launch_kernel_ex(config, f, params, extra, true);
}

SIMGPU_API cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shared, CUstream stream,
                                     void **params)
{
    return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, NULL, false);
}

SIMGPU_API cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                          unsigned int gz, unsigned int bx, unsigned int by,
                                          unsigned int bz, unsigned int shared, CUstream stream,
                                          void **params)
{
    return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, NULL, true);
}
