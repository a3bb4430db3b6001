/* salus-synth: a synthetic training job with exactly the shape a test asks for.
 *
 * Persistent memory allocated once; per iteration: host time (a sleep standing for
 * data loading), ephemeral memory allocated and freed, and device time (one kernel
 * that keeps the device busy for the requested time). --touch writes and verifies
 * every byte so the memory is really used.
 *
 * One source, three builds (see README.md): nvcc --fatbin (the kernels, for real
 * GPUs), g++ (the host program), g++ -DSIMGPU_PACK (the kernels as a simgpu pack,
 * where synth_busy costs exactly its duration_ns argument). */
#include <stddef.h>

/* the word written at index `index` of a buffer touched with `seed` */
__host__ __device__ static inline unsigned synth_pattern(unsigned long long index, unsigned seed)
{
    return (unsigned)(index * 2654435761ull) ^ seed;
}

#define SYNTH_THREAD() ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
#define SYNTH_THREADS() ((unsigned long long)gridDim.x * blockDim.x)

/* words[i] = pattern(i, seed), grid-stride */
extern "C" __global__ void synth_fill(unsigned *words, unsigned long long count, unsigned seed)
{
    for (unsigned long long i = SYNTH_THREAD(); i < count; i += SYNTH_THREADS())
        words[i] = synth_pattern(i, seed);
}

/* *mismatches += number of words that differ from pattern(i, seed) */
extern "C" __global__ void synth_verify(const unsigned *words, unsigned long long count, unsigned seed,
                                        unsigned *mismatches)
{
    unsigned found = 0;
    for (unsigned long long i = SYNTH_THREAD(); i < count; i += SYNTH_THREADS())
        found += words[i] != synth_pattern(i, seed);
    if (found != 0)
        atomicAdd(mismatches, found);
}

/* keeps the device busy for duration_ns. On a GPU one thread spins on the global
 * nanosecond timer; in the simgpu pack the body does nothing and the pack's cost
 * function charges duration_ns. */
extern "C" __global__ void synth_busy(unsigned long long duration_ns)
{
#if defined(__CUDA_ARCH__)
    if (SYNTH_THREAD() != 0)
        return;
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < duration_ns);
#else
    (void)duration_ns;
#endif
}

#if defined(SIMGPU_PACK)
/* ---- simgpu kernel pack ------------------------------------------------------------------ */
#include "workload_pack.h"

/* fill and verify: one pass over the words at a modelled 1000 GB/s (1000 bytes/ns) */
static double synth_touch_cost_ns(const simgpu_launch *launch)
{
    return 4.0 * (double)workload_pack_argument<unsigned long long>(launch->params[1]) / 1000.0;
}

/* exactly the requested time */
static double synth_busy_cost_ns(const simgpu_launch *launch)
{
    return (double)workload_pack_argument<unsigned long long>(launch->params[0]);
}

static const simgpu_kernel synth_pack[] = {
    WORKLOAD_PACK_KERNEL(synth_fill, synth_touch_cost_ns),
    WORKLOAD_PACK_KERNEL(synth_verify, synth_touch_cost_ns),
    WORKLOAD_PACK_KERNEL(synth_busy, synth_busy_cost_ns),
};
WORKLOAD_PACK_EXPORT(synth_pack)

#elif !defined(__CUDACC__)
/* ---- host program (g++ only: nvcc compiles just the kernels) ------------------------------ */
#include "workload_host.h"

#include "salus.h"

#include <getopt.h>

/* the kernels for real GPUs (a fatbin), or a placeholder where nvcc was missing */
extern "C" const unsigned char salus_workload_synth_image[];

typedef struct synth_config {
    size_t persistent_bytes, ephemeral_bytes;
    double gpu_ms, host_ms;
    unsigned iterations;
    bool async_alloc, touch;
    bool mark; /* salus.h iteration marks around each iteration */
    int device;
    unsigned kernels; /* the device time of an iteration in this many kernels */
    bool no_sync;     /* never synchronise (a best-effort job that never waits for its work) */
    bool stamps;      /* 'begin=N t=NS' / 'end=N t=NS' lines (CLOCK_MONOTONIC) */
} synth_config;

typedef struct synth_kernels {
    CUfunction fill, verify, busy;
} synth_kernels;

/* enough blocks to cover the buffer, at most 4096 (the kernels stride over the rest) */
static void synth_launch_touch(const workload_device *device, CUfunction function, void **arguments,
                               unsigned long long words)
{
    unsigned long long blocks = (words + WORKLOAD_BLOCK_THREADS - 1) / WORKLOAD_BLOCK_THREADS;
    if (blocks > 4096)
        blocks = 4096;
    if (blocks == 0)
        blocks = 1;
    CHECK_CU(cuLaunchKernel(function, (unsigned)blocks, 1, 1, WORKLOAD_BLOCK_THREADS, 1, 1, 0, device->stream,
                            arguments, NULL));
}

/* queues fill and verify of `bytes` (whole words) at `pointer` */
static void synth_touch(const workload_device *device, const synth_kernels *kernels, CUdeviceptr pointer,
                        size_t bytes, unsigned seed, CUdeviceptr mismatches)
{
    unsigned long long words = bytes / sizeof(unsigned);
    if (words == 0)
        return;
    void *fill_args[] = {&pointer, &words, &seed};
    synth_launch_touch(device, kernels->fill, fill_args, words);
    void *verify_args[] = {&pointer, &words, &seed, &mismatches};
    synth_launch_touch(device, kernels->verify, verify_args, words);
}

/* after a synchronisation: exits if any verify kernel so far found a bad word */
static void synth_check_mismatches(CUdeviceptr mismatches, const char *what, unsigned iteration)
{
    unsigned count = 0;
    CHECK_CU(cuMemcpyDtoH(&count, mismatches, sizeof count));
    if (count != 0) {
        fprintf(stderr, "salus-synth: %s memory: %u word(s) did not read back as written (iteration %u)\n", what,
                count, iteration);
        exit(WORKLOAD_EXIT_VERIFY);
    }
}

static void synth_run(const synth_config *config)
{
    workload_device device;
    workload_device_open(&device, config->device, salus_workload_synth_image);
    synth_kernels kernels;
    CHECK_CU(cuModuleGetFunction(&kernels.fill, device.module, "synth_fill"));
    CHECK_CU(cuModuleGetFunction(&kernels.verify, device.module, "synth_verify"));
    CHECK_CU(cuModuleGetFunction(&kernels.busy, device.module, "synth_busy"));

    /* the persistent buffer is touched once with seed 0 and verified at the end: it
     * must survive whatever happens to the ephemeral memory in between */
    CUdeviceptr persistent = 0, mismatches = 0;
    if (config->persistent_bytes != 0)
        persistent = workload_alloc(&device, config->persistent_bytes, config->async_alloc, "persistent");
    if (config->touch) {
        unsigned zero = 0;
        mismatches = workload_alloc(&device, sizeof zero, false, "mismatch counter");
        CHECK_CU(cuMemcpyHtoD(mismatches, &zero, sizeof zero));
        if (persistent != 0)
            synth_touch(&device, &kernels, persistent, config->persistent_bytes, 0, mismatches);
    }
    CHECK_CU(cuStreamSynchronize(device.stream));

    unsigned long long busy_ns = (unsigned long long)llround(config->gpu_ms * 1e6);
    uint64_t host_ns = (uint64_t)llround(config->host_ms * 1e6);
    uint64_t start_ns = workload_now_ns();
    for (unsigned iteration = 1; iteration <= config->iterations; iteration++) {
        uint64_t iteration_start_ns = workload_now_ns();
        if (host_ns != 0)
            workload_sleep_ns(host_ns);
        if (config->mark && salus_iteration_begin() < 0) {
            fprintf(stderr, "salus-synth: salus_iteration_begin failed: salusd is gone\n");
            exit(1);
        }
        if (config->stamps) {
            printf("begin=%u t=%llu\n", iteration, (unsigned long long)workload_now_ns());
            fflush(stdout);
        }

        CUdeviceptr ephemeral = 0;
        if (config->ephemeral_bytes != 0)
            ephemeral = workload_alloc(&device, config->ephemeral_bytes, config->async_alloc, "ephemeral");
        if (config->touch && ephemeral != 0)
            synth_touch(&device, &kernels, ephemeral, config->ephemeral_bytes, iteration, mismatches);
        if (busy_ns != 0) {
            unsigned long long kernel_ns = busy_ns / config->kernels;
            void *busy_args[] = {&kernel_ns};
            for (unsigned k = 0; k < config->kernels; k++)
                CHECK_CU(cuLaunchKernel(kernels.busy, 1, 1, 1, 1, 1, 1, 0, device.stream, busy_args, NULL));
        }
        if (config->async_alloc)
            workload_free(&device, ephemeral, true);
        if (!config->no_sync)
            CHECK_CU(cuStreamSynchronize(device.stream));
        if (!config->async_alloc)
            workload_free(&device, ephemeral, false);
        if (config->touch)
            synth_check_mismatches(mismatches, "ephemeral", iteration);
        /* taken before the end mark: a rank granted after this one's boundary stamps later */
        uint64_t end_ns = workload_now_ns();
        if (config->mark)
            salus_iteration_end();
        if (config->stamps)
            printf("end=%u t=%llu\n", iteration, (unsigned long long)end_ns);

        printf("iter=%u ms=%.3f\n", iteration, (double)(workload_now_ns() - iteration_start_ns) / 1e6);
        fflush(stdout);
    }
    double total_ms = (double)(workload_now_ns() - start_ns) / 1e6;

    if (config->touch) {
        if (persistent != 0) {
            unsigned long long words = config->persistent_bytes / sizeof(unsigned);
            unsigned seed = 0;
            void *verify_args[] = {&persistent, &words, &seed, &mismatches};
            synth_launch_touch(&device, kernels.verify, verify_args, words);
            CHECK_CU(cuStreamSynchronize(device.stream));
        }
        synth_check_mismatches(mismatches, "persistent", config->iterations);
        CHECK_CU(cuMemFree(mismatches));
    }
    workload_free(&device, persistent, config->async_alloc);
    CHECK_CU(cuStreamSynchronize(device.stream));
    workload_device_close(&device);

    printf("synth_done iterations=%u total_ms=%.3f mean_iter_ms=%.3f persistent_bytes=%zu ephemeral_bytes=%zu "
           "gpu_ms=%g host_ms=%g\n",
           config->iterations, total_ms, total_ms / config->iterations, config->persistent_bytes,
           config->ephemeral_bytes, config->gpu_ms, config->host_ms);
    fflush(stdout);
}

static void synth_usage(FILE *out)
{
    fprintf(out,
            "usage: salus-synth [options]\n"
            "A synthetic training job through the CUDA driver API: persistent memory held\n"
            "throughout; per iteration host time, ephemeral memory and device time.\n"
            "\n"
            "  --persistent-mb X   memory allocated once (MiB, default 64)\n"
            "  --ephemeral-mb X    memory allocated and freed every iteration (MiB, default 128)\n"
            "  --gpu-ms X          device time per iteration (default 10)\n"
            "  --host-ms X         host time per iteration, before the device work (default 2)\n"
            "  --iterations N      iterations (default 20)\n"
            "  --async-alloc       use cuMemAllocAsync/cuMemFreeAsync on the stream\n"
            "  --touch             write and verify every word of the memory with kernels\n"
            "  --mark              mark each iteration with salus.h (no-op without salus)\n"
            "  --kernels N         the device time of an iteration in N kernels (default 1)\n"
            "  --no-sync           never synchronise within the loop (needs --ephemeral-mb 0)\n"
            "  --stamps            also print 'begin=<n> t=<ns>' once iteration n may start (after\n"
            "                      --mark's wait) and 'end=<n> t=<ns>' (taken before its end mark),\n"
            "                      t from CLOCK_MONOTONIC\n"
            "  --device N          device ordinal (default 0)\n"
            "  --help              this text\n"
            "\n"
            "Prints 'iter=<n> ms=<wall ms>' per iteration and ends with\n"
            "'synth_done iterations=N total_ms=T mean_iter_ms=M persistent_bytes=P ephemeral_bytes=E ...'.\n"
            "Exit status: 0 done, 1 a driver call failed (named on stderr), 2 bad usage,\n"
            "3 --touch found memory that did not read back as written.\n");
}

static void synth_parse(int argc, char **argv, synth_config *config)
{
    enum { PERSISTENT = 256, EPHEMERAL, GPU_MS, HOST_MS, ITERATIONS, ASYNC, TOUCH, DEVICE, MARK, KERNELS, NO_SYNC,
           STAMPS, HELP };
    static const struct option options[] = {
        {"persistent-mb", required_argument, NULL, PERSISTENT},
        {"ephemeral-mb", required_argument, NULL, EPHEMERAL},
        {"gpu-ms", required_argument, NULL, GPU_MS},
        {"host-ms", required_argument, NULL, HOST_MS},
        {"iterations", required_argument, NULL, ITERATIONS},
        {"async-alloc", no_argument, NULL, ASYNC},
        {"touch", no_argument, NULL, TOUCH},
        {"device", required_argument, NULL, DEVICE},
        {"mark", no_argument, NULL, MARK},
        {"kernels", required_argument, NULL, KERNELS},
        {"no-sync", no_argument, NULL, NO_SYNC},
        {"stamps", no_argument, NULL, STAMPS},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0},
    };
    const double mebibyte = 1024.0 * 1024.0, memory_limit_mb = 1024.0 * 1024.0, time_limit_ms = 3600e3;
    *config = synth_config{(size_t)(64 * mebibyte), (size_t)(128 * mebibyte), 10.0, 2.0, 20, false, false, false, 0,
                           1, false, false};
    int option;
    while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *name = option >= PERSISTENT && option <= HELP ? options[option - PERSISTENT].name : "";
        switch (option) {
        case PERSISTENT:
            config->persistent_bytes = (size_t)(workload_parse_double(name, optarg, 0, memory_limit_mb) * mebibyte);
            break;
        case EPHEMERAL:
            config->ephemeral_bytes = (size_t)(workload_parse_double(name, optarg, 0, memory_limit_mb) * mebibyte);
            break;
        case GPU_MS: config->gpu_ms = workload_parse_double(name, optarg, 0, time_limit_ms); break;
        case HOST_MS: config->host_ms = workload_parse_double(name, optarg, 0, time_limit_ms); break;
        case ITERATIONS: config->iterations = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 30); break;
        case ASYNC: config->async_alloc = true; break;
        case TOUCH: config->touch = true; break;
        case DEVICE: config->device = (int)workload_parse_unsigned(name, optarg, 0, 1023); break;
        case MARK: config->mark = true; break;
        case KERNELS: config->kernels = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 20); break;
        case NO_SYNC: config->no_sync = true; break;
        case STAMPS: config->stamps = true; break;
        case HELP: synth_usage(stdout); exit(0);
        default: synth_usage(stderr); exit(WORKLOAD_EXIT_USAGE);
        }
    }
    if (optind < argc)
        workload_usage_error("unexpected argument '%s'", argv[optind]);
    if (config->no_sync && (config->ephemeral_bytes != 0 || config->touch))
        workload_usage_error("--no-sync needs --ephemeral-mb 0 and no --touch");
}

int main(int argc, char **argv)
{
    workload_program = "salus-synth";
    synth_config config;
    synth_parse(argc, argv, &config);
    synth_run(&config);
    return 0;
}
#endif
