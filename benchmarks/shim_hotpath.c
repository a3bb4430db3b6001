/* The shim's hot path, timed against a driver whose calls return at once (benchmarks/nullcuda).
 *
 *   salus-shim-hotpath LIBRARY [--calls N] [--threads T] [--repeat R] [--mt-only]
 *
 * LIBRARY is the driver the program calls: the null driver itself (direct) or a shim in front
 * of it (SALUS_REAL_DRIVER names the null driver). Prints one key=value line per measure:
 * nanoseconds per call (median over batches of BATCH calls) for cuLaunchKernel, cuMemcpyAsync
 * and a cuMemAlloc + cuMemFree pair, single-threaded; and launches per second with T threads,
 * each on its own stream (best of R). --mt-only: the multi-threaded measure alone. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 100
#define SYNC_EVERY_BATCHES 50 /* a synchronising call now and then, as a program makes */
#define MAX_THREADS 64

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*ctx_retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*ctx_set_fn)(CUcontext);
typedef CUresult (*stream_create_fn)(CUstream *, unsigned);
typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*copy_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

static struct {
    init_fn init;
    device_get_fn device_get;
    ctx_retain_fn ctx_retain;
    ctx_set_fn ctx_set;
    stream_create_fn stream_create;
    stream_fn stream_sync;
    stream_fn stream_destroy;
    launch_fn launch;
    copy_fn copy;
    alloc_fn alloc;
    free_fn free;
    CUcontext ctx;
} cu;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *need(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (!fn) {
        fprintf(stderr, "salus-shim-hotpath: the library has no %s\n", name);
        exit(1);
    }
    return fn;
}

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "salus-shim-hotpath: %s failed (%d)\n", what, (int)rc);
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum op { OP_LAUNCH, OP_COPY, OP_ALLOC_FREE };

/* ns per call (median over batches) of op, calls times in batches of BATCH */
static double time_op(enum op op, long calls, CUstream stream)
{
    size_t batches = (size_t)(calls / BATCH > 0 ? calls / BATCH : 1);
    double *samples = calloc(batches, sizeof(*samples));
    CUdeviceptr src = 0, dst = 0;
    if (!samples)
        exit(1);
    check(cu.alloc(&src, 4096), "cuMemAlloc");
    check(cu.alloc(&dst, 4096), "cuMemAlloc");
    for (size_t b = 0; b < batches; b++) {
        uint64_t start = now_ns();
        for (int i = 0; i < BATCH; i++) {
            CUresult rc = CUDA_SUCCESS;
            CUdeviceptr p = 0;
            switch (op) {
            case OP_LAUNCH:
                rc = cu.launch((CUfunction)0x20, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL);
                break;
            case OP_COPY:
                rc = cu.copy(dst, src, 64, stream);
                break;
            case OP_ALLOC_FREE:
                rc = cu.alloc(&p, 4096);
                if (rc == CUDA_SUCCESS)
                    rc = cu.free(p);
                break;
            }
            if (rc != CUDA_SUCCESS)
                check(rc, "the timed call");
        }
        samples[b] = (double)(now_ns() - start) / BATCH;
        if ((b + 1) % SYNC_EVERY_BATCHES == 0)
            check(cu.stream_sync(stream), "cuStreamSynchronize");
    }
    check(cu.stream_sync(stream), "cuStreamSynchronize");
    check(cu.free(src), "cuMemFree");
    check(cu.free(dst), "cuMemFree");
    double m = median(samples, batches);
    free(samples);
    return m;
}

typedef struct {
    pthread_barrier_t *barrier;
    long launches;
    CUstream stream;
    uint64_t start_ns, end_ns; /* taken by the worker: main may not run when they start */
} worker_t;

static void *launch_worker(void *arg)
{
    worker_t *w = arg;
    check(cu.ctx_set(cu.ctx), "cuCtxSetCurrent");
    pthread_barrier_wait(w->barrier);
    w->start_ns = now_ns();
    for (long i = 0; i < w->launches; i++) {
        CUresult rc = cu.launch((CUfunction)0x20, 1, 1, 1, 32, 1, 1, 0, w->stream, NULL, NULL);
        if (rc != CUDA_SUCCESS)
            check(rc, "cuLaunchKernel");
    }
    check(cu.stream_sync(w->stream), "cuStreamSynchronize");
    w->end_ns = now_ns();
    return NULL;
}

/* launches per second with threads threads, each launching calls on its own stream */
static double launch_throughput(int threads, long calls, CUstream *streams)
{
    pthread_t tids[MAX_THREADS];
    worker_t workers[MAX_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++) {
        workers[t] = (worker_t){.barrier = &barrier, .launches = calls, .stream = streams[t]};
        if (pthread_create(&tids[t], NULL, launch_worker, &workers[t]) != 0) {
            fprintf(stderr, "salus-shim-hotpath: cannot start a thread\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&barrier);
    uint64_t start = UINT64_MAX, end = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        start = workers[t].start_ns < start ? workers[t].start_ns : start;
        end = workers[t].end_ns > end ? workers[t].end_ns : end;
    }
    uint64_t elapsed = end - start;
    pthread_barrier_destroy(&barrier);
    return (double)calls * threads * 1e9 / (double)(elapsed ? elapsed : 1);
}

int main(int argc, char **argv)
{
    long calls = 1000000;
    int threads = 2, repeat = 3, mt_only = 0;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: salus-shim-hotpath LIBRARY [--calls N] [--threads T] [--repeat R] [--mt-only]\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--calls") == 0)
            calls = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mt-only") == 0)
            mt_only = 1;
        else {
            fprintf(stderr, "salus-shim-hotpath: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (calls < BATCH || threads < 1 || threads > MAX_THREADS || repeat < 1) {
        fprintf(stderr, "salus-shim-hotpath: need --calls >= %d, 1 <= --threads <= %d, --repeat >= 1\n",
                BATCH, MAX_THREADS);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "salus-shim-hotpath: %s\n", dlerror());
        return 1;
    }
    cu.init = (init_fn)need(lib, "cuInit");
    cu.device_get = (device_get_fn)need(lib, "cuDeviceGet");
    cu.ctx_retain = (ctx_retain_fn)need(lib, "cuDevicePrimaryCtxRetain");
    cu.ctx_set = (ctx_set_fn)need(lib, "cuCtxSetCurrent");
    cu.stream_create = (stream_create_fn)need(lib, "cuStreamCreate");
    cu.stream_sync = (stream_fn)need(lib, "cuStreamSynchronize");
    cu.stream_destroy = (stream_fn)need(lib, "cuStreamDestroy_v2");
    cu.launch = (launch_fn)need(lib, "cuLaunchKernel");
    cu.copy = (copy_fn)need(lib, "cuMemcpyAsync");
    cu.alloc = (alloc_fn)need(lib, "cuMemAlloc_v2");
    cu.free = (free_fn)need(lib, "cuMemFree_v2");

    CUdevice dev;
    CUstream streams[MAX_THREADS];
    check(cu.init(0), "cuInit");
    check(cu.device_get(&dev, 0), "cuDeviceGet");
    check(cu.ctx_retain(&cu.ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cu.ctx_set(cu.ctx), "cuCtxSetCurrent");
    for (int t = 0; t < threads; t++)
        check(cu.stream_create(&streams[t], CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    /* memory the job keeps throughout, as a model keeps its weights: salusd learns a
     * persistent size from it (a job that keeps nothing would learn a budget too small for
     * a chunk of its own) */
    CUdeviceptr weights = 0;
    check(cu.alloc(&weights, (size_t)8 << 20), "cuMemAlloc");
    /* warm up: the first submission waits for the lane, the first allocation maps a chunk */
    time_op(OP_LAUNCH, calls / 10 > BATCH ? calls / 10 : BATCH, streams[0]);
    time_op(OP_ALLOC_FREE, BATCH, streams[0]);
    double launch = 1e30, copy = 1e30, alloc_free = 1e30, mt = 0;
    for (int r = 0; r < repeat; r++) {
        double v = launch_throughput(threads, calls, streams);
        mt = v > mt ? v : mt;
        if (mt_only)
            continue;
        v = time_op(OP_LAUNCH, calls, streams[0]);
        launch = v < launch ? v : launch;
        v = time_op(OP_COPY, calls, streams[0]);
        copy = v < copy ? v : copy;
        v = time_op(OP_ALLOC_FREE, calls / 10 > BATCH ? calls / 10 : BATCH, streams[0]);
        alloc_free = v < alloc_free ? v : alloc_free;
    }
    for (int t = 0; t < threads; t++)
        check(cu.stream_destroy(streams[t]), "cuStreamDestroy");
    check(cu.free(weights), "cuMemFree");
    if (mt_only) {
        printf("mt_threads=%d mt_launches_per_s=%.0f\n", threads, mt);
        return 0;
    }
    printf("launch_ns=%.2f copy_ns=%.2f alloc_free_ns=%.2f mt_threads=%d mt_launches_per_s=%.0f\n",
           launch, copy, alloc_free, threads, mt);
    return 0;
}
