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
 * returned; the modelled remainder of the kernel then passes asynchronously.
 *
 * Host services (ABI 2, simgpu_kernel.h): a kernel may wait off the engine
 * (release it, sleep on a futex, take it again; its parameters count as consumed
 * from then on, so the launch returns) and may fail, which makes the error sticky
 * in its context. The modelled duration and the busy time count engine time
 * only. */
#include <errno.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* ---- host services (simgpu_kernel.h, ABI 2) ---- */

static simgpu_op_t *op_of_launch(const simgpu_launch *launch)
{
    return (simgpu_op_t *)(void *)((char *)launch - offsetof(simgpu_op_t, u.kernel.launch));
}

/* the launch's parameters have been read: let cuLaunchKernel return (once: the
 * flag lives in the launching call's frame, gone after it returned) */
static void launch_consumed(simgpu_op_t *op)
{
    CUstream stream = op->u.kernel.stream;
    if (!op->u.kernel.consumed)
        return;
    pthread_mutex_lock(&stream->lock);
    *op->u.kernel.consumed = true;
    op->u.kernel.consumed = NULL;
    pthread_cond_broadcast(&stream->cond);
    pthread_mutex_unlock(&stream->lock);
}

static int host_wait_off_engine(const simgpu_launch *launch, const volatile uint32_t *word,
                                uint32_t value, uint64_t timeout_ns)
{
    simgpu_op_t *op = op_of_launch(launch);
    int device = op->u.kernel.stream->ctx->device;
    launch_consumed(op);
    uint64_t now = simgpu_now_ns();
    uint64_t held = now - op->u.kernel.segment_start_ns;
    op->u.kernel.held_ns += held;
    simgpu_engine_yield(device, held);

    int rc = 0;
    uint64_t deadline = timeout_ns ? now + timeout_ns : 0;
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == value) {
        struct timespec relative, *limit = NULL;
        if (deadline) {
            now = simgpu_now_ns();
            if (now >= deadline) {
                rc = -ETIMEDOUT;
                break;
            }
            relative.tv_sec = (time_t)((deadline - now) / 1000000000ull);
            relative.tv_nsec = (long)((deadline - now) % 1000000000ull);
            limit = &relative;
        }
        /* a shared futex (no FUTEX_PRIVATE_FLAG): the word may live in a segment
         * that other processes change and wake */
        syscall(SYS_futex, word, FUTEX_WAIT, value, limit, NULL, 0);
    }

    simgpu_engine_acquire(device);
    op->u.kernel.segment_start_ns = simgpu_now_ns();
    return rc;
}

static void host_fail(const simgpu_launch *launch, int cuda_error)
{
    simgpu_op_t *op = op_of_launch(launch);
    int expected = 0;
    if (cuda_error == 0)
        cuda_error = CUDA_ERROR_LAUNCH_FAILED;
    __atomic_compare_exchange_n(&op->u.kernel.stream->ctx->sticky_error, &expected, cuda_error,
                                false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static const simgpu_host host_services = {
    .size = sizeof(simgpu_host),
    .wait_off_engine = host_wait_off_engine,
    .fail = host_fail,
};

/* ---- execution ---- */

void simgpu_kernel_execute(simgpu_op_t *op, CUstream stream)
{
    const simgpu_kernel *kernel = op->u.kernel.function->kernel;
    simgpu_launch *launch = &op->u.kernel.launch;
    int device = stream->ctx->device;
    launch->host = &host_services;
    op->u.kernel.stream = stream;
    op->u.kernel.held_ns = 0;
    double cost_ns = kernel->cost_ns ? kernel->cost_ns(launch) : -1.0;

    simgpu_engine_acquire(device);
    op->u.kernel.segment_start_ns = simgpu_now_ns();
    simgpu_record_kernel("start", kernel->name); /* under the engine: in start order */
    uint64_t cpu_start = thread_cpu_ns();
    if (kernel->run)
        kernel->run(launch);
    uint64_t cpu_ns = thread_cpu_ns() - cpu_start;

    launch_consumed(op);  /* unless the kernel did so when it waited off the engine */

    if (!(cost_ns >= 0.0))  /* NULL cost_ns, or a NaN/negative answer */
        cost_ns = (double)cpu_ns;
    double modelled = cost_ns / simgpu_config.speed;
    /* the model counts engine time only: what earlier segments held, then this one */
    double remaining = modelled - (double)op->u.kernel.held_ns;
    if (remaining > 0.0)
        sleep_until(op->u.kernel.segment_start_ns + (uint64_t)remaining);
    simgpu_engine_release(device, simgpu_now_ns() - op->u.kernel.segment_start_ns);
}

static CUresult launch(CUfunction f, const simgpu_launch *shape, CUstream stream, bool per_thread,
                       void **extra)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    rc = simgpu_ctx_error(stream->ctx);  /* a failed kernel poisons its context */
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
    simgpu_record_kernel("submit", function->kernel->name);
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
