/* gate-threads: a job whose iterations are submitted by several threads at once, each on
 * its own stream, for the gate's lock-free path.
 *
 *   gate-threads ITERATIONS THREADS GPU_MS EPHEMERAL_MB [HOLD_FILE]
 *
 * Each iteration: the main thread allocates EPHEMERAL_MB MiB; THREADS threads each submit,
 * on their own stream, 20 host functions that together keep the stream busy for GPU_MS ms
 * plus copies into the ephemeral block, and synchronise their stream; the main thread waits
 * for all of them and frees the block. Links simgpu's libcuda.so.1 (under salus the shim
 * answers). Prints "gate_threads_done iterations=N" and exits 0 when every call succeeded.
 * With HOLD_FILE, the third iteration's first host function prints "hold_wait" and waits (at
 * most 60 s) until HOLD_FILE exists: the job is in the middle of an iteration, its stream
 * busy, while a test arranges what happens meanwhile (a lane-mate that asks for its turn). */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define LAUNCHES 20
#define MAX_THREADS 16

static long spin_ns;
static const char *hold_file;
static CUcontext ctx;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void CUDA_CB busy(void *arg)
{
    (void)arg;
    uint64_t until = now_ns() + (uint64_t)spin_ns;
    while (now_ns() < until)
        ;
}

static void CUDA_CB hold(void *arg)
{
    (void)arg;
    printf("hold_wait file=%s\n", hold_file);
    fflush(stdout);
    struct timespec pause = {0, 5000000};
    for (int waited_ms = 0; access(hold_file, F_OK) != 0 && waited_ms < 60000; waited_ms += 5)
        nanosleep(&pause, NULL);
}

typedef struct {
    pthread_barrier_t *start, *done;
    int iterations;
    CUdeviceptr *block;
    size_t slice;
    int index;
    int failed;
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    CUstream stream;
    unsigned char host[256] = {0};
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        w->failed = 1;
        stream = NULL;
    }
    for (int it = 0; it < w->iterations; it++) {
        pthread_barrier_wait(w->start);
        if (hold_file && it == 2 && w->index == 0)
            w->failed |= cuLaunchHostFunc(stream, hold, NULL) != CUDA_SUCCESS;
        for (int i = 0; i < LAUNCHES && !w->failed; i++) {
            CUdeviceptr at = *w->block + (CUdeviceptr)(w->index * w->slice);
            w->failed |= cuLaunchHostFunc(stream, busy, NULL) != CUDA_SUCCESS;
            w->failed |= cuMemcpyHtoDAsync(at, host, sizeof(host), stream) != CUDA_SUCCESS;
        }
        if (!w->failed)
            w->failed |= cuStreamSynchronize(stream) != CUDA_SUCCESS;
        pthread_barrier_wait(w->done);
    }
    if (stream)
        cuStreamDestroy(stream);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: gate-threads ITERATIONS THREADS GPU_MS EPHEMERAL_MB [HOLD_FILE]\n");
        return 2;
    }
    hold_file = argc == 6 ? argv[5] : NULL;
    int iterations = atoi(argv[1]), threads = atoi(argv[2]);
    double gpu_ms = atof(argv[3]);
    size_t ephemeral = (size_t)atol(argv[4]) << 20;
    if (iterations < 1 || threads < 1 || threads > MAX_THREADS || gpu_ms < 0 || ephemeral < 4096) {
        fprintf(stderr, "gate-threads: bad arguments\n");
        return 2;
    }
    spin_ns = (long)(gpu_ms * 1e6 / LAUNCHES);
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "gate-threads: no device\n");
        return 1;
    }
    pthread_barrier_t start, done;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
    CUdeviceptr block = 0;
    pthread_t tids[MAX_THREADS];
    worker_t workers[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        workers[t] = (worker_t){.start = &start, .done = &done, .iterations = iterations,
                                .block = &block, .slice = ephemeral / (size_t)threads, .index = t};
        pthread_create(&tids[t], NULL, worker, &workers[t]);
    }
    int failed = 0;
    for (int it = 0; it < iterations; it++) {
        failed |= cuMemAlloc(&block, ephemeral) != CUDA_SUCCESS;
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        failed |= cuMemFree(block) != CUDA_SUCCESS;
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        failed |= workers[t].failed;
    }
    if (failed) {
        fprintf(stderr, "gate-threads: a driver call failed\n");
        return 1;
    }
    printf("gate_threads_done iterations=%d\n", iterations);
    return 0;
}
