/* salus-serve: a model server with open-loop requests, for latency beside training.
 *
 * A model's forward pass is a few kernels (--layers, --gpu-ms of device time per request in
 * all); requests arrive open-loop, at exponentially distributed intervals of mean 1/--rate
 * (Poisson arrivals, from --seed: the same seed, the same arrival times), whether or not the
 * server is busy: a request that arrives while an earlier one is served waits its turn (one
 * request at a time, as one CUDA stream serves them). Each request's latency runs from its
 * arrival to the synchronisation after its last kernel. At the end it prints p50, p95, p99
 * and the throughput.
 *
 * One source, three builds (see README.md): nvcc --fatbin (the kernel, for real GPUs), g++
 * (the host program), g++ -DSIMGPU_PACK (the kernel as a simgpu pack, where serve_layer costs
 * exactly its duration_ns argument). */
#include <stddef.h>

/* keeps the device busy for duration_ns (one layer of the forward pass). On a GPU one thread
 * spins on the global nanosecond timer; in the simgpu pack the pack's cost function charges
 * duration_ns. */
extern "C" __global__ void serve_layer(unsigned long long duration_ns)
{
#if defined(__CUDA_ARCH__)
    if ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x != 0)
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

static double serve_layer_cost_ns(const simgpu_launch *launch)
{
    return (double)workload_pack_argument<unsigned long long>(launch->params[0]);
}

static const simgpu_kernel serve_pack[] = {
    WORKLOAD_PACK_KERNEL(serve_layer, serve_layer_cost_ns),
};
WORKLOAD_PACK_EXPORT(serve_pack)

#elif !defined(__CUDACC__)
/* ---- host program (g++ only: nvcc compiles just the kernels) ------------------------------ */
#include "workload_host.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>

extern "C" const unsigned char salus_workload_serve_image[];

typedef struct serve_config {
    double rate;        /* requests per second */
    double gpu_ms;      /* device time per request */
    unsigned layers;    /* kernels per request */
    unsigned requests;
    unsigned long long seed;
    double persistent_mb;
    int device;
} serve_config;

/* xorshift64*: the arrival times depend on the seed only */
static double serve_uniform(unsigned long long *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    unsigned long long x = *state * 2685821657736338717ull;
    return ((double)(x >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

static int serve_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the p-th percentile of sorted[0..n) (nearest rank) */
static double serve_percentile(const double *sorted, unsigned n, double p)
{
    unsigned rank = (unsigned)ceil(p / 100.0 * n);
    return sorted[rank == 0 ? 0 : rank - 1];
}

static void serve_run(const serve_config *config)
{
    workload_device device;
    workload_device_open(&device, config->device, salus_workload_serve_image);
    CUfunction layer;
    CHECK_CU(cuModuleGetFunction(&layer, device.module, "serve_layer"));
    size_t weights_bytes = (size_t)(config->persistent_mb * 1024.0 * 1024.0);
    CUdeviceptr weights = weights_bytes ? workload_alloc(&device, weights_bytes, false, "weights") : 0;
    CHECK_CU(cuStreamSynchronize(device.stream));

    double *latency_ms = (double *)calloc(config->requests, sizeof(double));
    if (!latency_ms) {
        fprintf(stderr, "salus-serve: out of memory\n");
        exit(1);
    }
    unsigned long long state = config->seed ? config->seed : 1;
    unsigned long long layer_ns = (unsigned long long)llround(config->gpu_ms * 1e6 / config->layers);
    uint64_t start_ns = workload_now_ns(), arrival_ns = start_ns;
    for (unsigned r = 0; r < config->requests; r++) {
        arrival_ns += (uint64_t)llround(-log(serve_uniform(&state)) / config->rate * 1e9);
        uint64_t now = workload_now_ns();
        if (now < arrival_ns)
            workload_sleep_ns(arrival_ns - now);
        void *args[] = {&layer_ns};
        for (unsigned k = 0; k < config->layers; k++)
            CHECK_CU(cuLaunchKernel(layer, 1, 1, 1, 1, 1, 1, 0, device.stream, args, NULL));
        CHECK_CU(cuStreamSynchronize(device.stream));
        latency_ms[r] = (double)(workload_now_ns() - arrival_ns) / 1e6;
    }
    double total_s = (double)(workload_now_ns() - start_ns) / 1e9;
    workload_free(&device, weights, false);
    workload_device_close(&device);

    qsort(latency_ms, config->requests, sizeof(double), serve_compare);
    printf("serve_done requests=%u rate=%g gpu_ms=%g layers=%u p50_ms=%.3f p95_ms=%.3f p99_ms=%.3f "
           "max_ms=%.3f throughput=%.2f\n",
           config->requests, config->rate, config->gpu_ms, config->layers,
           serve_percentile(latency_ms, config->requests, 50.0),
           serve_percentile(latency_ms, config->requests, 95.0),
           serve_percentile(latency_ms, config->requests, 99.0), latency_ms[config->requests - 1],
           config->requests / total_s);
    fflush(stdout);
    free(latency_ms);
}

static void serve_usage(FILE *out)
{
    fprintf(out,
            "usage: salus-serve [options]\n"
            "A model server: open-loop requests (Poisson arrivals), each a forward pass of a few\n"
            "kernels; latency from arrival to completion.\n"
            "\n"
            "  --rate X            requests per second (default 20)\n"
            "  --gpu-ms X          device time of one request (default 5)\n"
            "  --layers N          kernels per request (default 4)\n"
            "  --requests N        requests (default 200)\n"
            "  --seed N            seed of the arrival times (default 1)\n"
            "  --persistent-mb X   the model's weights, allocated once (MiB, default 16)\n"
            "  --device N          device ordinal (default 0)\n"
            "  --help              this text\n"
            "\n"
            "Ends with 'serve_done requests=N rate=R gpu_ms=G layers=L p50_ms=A p95_ms=B\n"
            "p99_ms=C max_ms=D throughput=T' (T: requests per second).\n"
            "Exit status: 0 done, 1 a driver call failed (named on stderr), 2 bad usage.\n");
}

static void serve_parse(int argc, char **argv, serve_config *config)
{
    enum { RATE = 256, GPU_MS, LAYERS, REQUESTS, SEED, PERSISTENT, DEVICE, HELP };
    static const struct option options[] = {
        {"rate", required_argument, NULL, RATE},
        {"gpu-ms", required_argument, NULL, GPU_MS},
        {"layers", required_argument, NULL, LAYERS},
        {"requests", required_argument, NULL, REQUESTS},
        {"seed", required_argument, NULL, SEED},
        {"persistent-mb", required_argument, NULL, PERSISTENT},
        {"device", required_argument, NULL, DEVICE},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0},
    };
    *config = serve_config{20.0, 5.0, 4, 200, 1, 16.0, 0};
    int option;
    while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *name = option >= RATE && option <= HELP ? options[option - RATE].name : "";
        switch (option) {
        case RATE: config->rate = workload_parse_double(name, optarg, 0.001, 1e6); break;
        case GPU_MS: config->gpu_ms = workload_parse_double(name, optarg, 0, 3600e3); break;
        case LAYERS: config->layers = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 16); break;
        case REQUESTS: config->requests = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 24); break;
        case SEED: config->seed = workload_parse_unsigned(name, optarg, 0, ~0ull); break;
        case PERSISTENT: config->persistent_mb = workload_parse_double(name, optarg, 0, 1024.0 * 1024.0); break;
        case DEVICE: config->device = (int)workload_parse_unsigned(name, optarg, 0, 1023); break;
        case HELP: serve_usage(stdout); exit(0);
        default: serve_usage(stderr); exit(WORKLOAD_EXIT_USAGE);
        }
    }
    if (optind < argc)
        workload_usage_error("unexpected argument '%s'", argv[optind]);
}

int main(int argc, char **argv)
{
    workload_program = "salus-serve";
    serve_config config;
    serve_parse(argc, argv, &config);
    serve_run(&config);
    return 0;
}
#endif
