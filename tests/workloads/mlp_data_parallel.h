/* salus-mlp's data-parallel mode (--data-parallel simgpu|mpi): who this rank is,
 * and the gradient allreduce.
 *
 * Rank r of world N trains on rows r*b .. r*b+b-1 of the global batch of N*b that
 * one process with --batch N*b would use at that step, computes its gradients
 * (the mean over its rows), sums them over the ranks, and applies the SGD step
 * with the sum divided by N, so every rank holds the same weights. The loss of
 * the step is summed with the gradients (one more float), so every rank prints
 * the loss of the global batch.
 *
 *   simgpu  the simgpu collective kernel allreduce_sum_f32 (tests/workloads/
 *           collective.c) on the device buffer, in stream order; simgpu only.
 *   mpi     cuStreamSynchronize, copy to the host, MPI_Allreduce(SUM), copy back.
 *           Only in salus-mlp-mpi (built when CMake finds MPI); salus-mlp itself
 *           never links libmpi.
 *
 * Rank and world: --rank/--world, else SALUS_RANK/SALUS_WORLD, else Open MPI's
 * OMPI_COMM_WORLD_RANK/SIZE; with mpi, MPI_Comm_rank/size (flags that disagree
 * are refused). Communicator (simgpu): --comm, else SALUS_GROUP, else
 * "salus-mlp". */
#ifndef SALUS_TESTS_WORKLOADS_MLP_DATA_PARALLEL_H
#define SALUS_TESTS_WORKLOADS_MLP_DATA_PARALLEL_H

#include "workload_host.h"

#include <string>

#if defined(SALUS_MLP_MPI)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

typedef enum { MLP_SINGLE, MLP_PARALLEL_SIMGPU, MLP_PARALLEL_MPI } mlp_parallel_mode;

typedef struct mlp_parallel {
    mlp_parallel_mode mode;
    long rank, world;  /* -1 until known */
    std::string communicator;
    CUfunction allreduce;  /* simgpu mode */
} mlp_parallel;

static inline void mlp_parallel_select(mlp_parallel *parallel, const char *mode)
{
    if (strcmp(mode, "simgpu") == 0)
        parallel->mode = MLP_PARALLEL_SIMGPU;
    else if (strcmp(mode, "mpi") == 0)
        parallel->mode = MLP_PARALLEL_MPI;
    else
        workload_usage_error("--data-parallel: expected 'simgpu' or 'mpi', got '%s'", mode);
#if !defined(SALUS_MLP_MPI)
    if (parallel->mode == MLP_PARALLEL_MPI)
        workload_usage_error("--data-parallel mpi: this salus-mlp is built without MPI; use salus-mlp-mpi");
#endif
}

/* the first of `names` that is set, parsed as an integer in [minimum, maximum]; -1 if none is */
static inline long mlp_parallel_from_environment(const char *const *names, long minimum, long maximum)
{
    for (; *names; names++) {
        const char *text = getenv(*names);
        if (!text || !*text)
            continue;
        char *end = NULL;
        errno = 0;
        long value = strtol(text, &end, 10);
        if (errno || *end || value < minimum || value > maximum)
            workload_usage_error("%s=%s: expected an integer in [%ld, %ld]", *names, text, minimum, maximum);
        return value;
    }
    return -1;
}

static inline bool mlp_parallel_name_valid(const std::string &name)
{
    if (name.empty() || name.size() > 96)
        return false;
    for (char ch : name)
        if (!isalnum((unsigned char)ch) && ch != '.' && ch != '_' && ch != '-')
            return false;
    return true;
}

/* After the command line: MPI_Init (mpi) and rank, world, communicator from flags or environment. */
static inline void mlp_parallel_start(mlp_parallel *parallel, int *argc, char ***argv)
{
    static const char *const rank_names[] = {"SALUS_RANK", "OMPI_COMM_WORLD_RANK", NULL};
    static const char *const world_names[] = {"SALUS_WORLD", "OMPI_COMM_WORLD_SIZE", NULL};
    const long world_limit = 64; /* the simgpu collective's limit too */
    (void)argc;
    (void)argv;
    if (parallel->mode == MLP_SINGLE) {
        if (parallel->rank >= 0 || parallel->world >= 0 || !parallel->communicator.empty())
            workload_usage_error("--rank, --world and --comm need --data-parallel");
        return;
    }
#if defined(SALUS_MLP_MPI)
    if (parallel->mode == MLP_PARALLEL_MPI) {
        int rank = 0, world = 0;
        if (MPI_Init(argc, argv) != MPI_SUCCESS) {
            fprintf(stderr, "%s: MPI_Init failed\n", workload_program);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        if ((parallel->rank >= 0 && parallel->rank != rank) || (parallel->world >= 0 && parallel->world != world))
            workload_usage_error("--rank %ld --world %ld disagree with MPI's rank %d of %d", parallel->rank,
                                 parallel->world, rank, world);
        parallel->rank = rank;
        parallel->world = world;
    }
#endif
    if (parallel->world < 0)
        parallel->world = mlp_parallel_from_environment(world_names, 1, world_limit);
    if (parallel->rank < 0)
        parallel->rank = mlp_parallel_from_environment(rank_names, 0, world_limit - 1);
    if (parallel->world < 1 || parallel->rank < 0)
        workload_usage_error("--data-parallel needs --rank and --world (or SALUS_RANK/SALUS_WORLD, "
                             "OMPI_COMM_WORLD_RANK/SIZE)");
    if (parallel->world > world_limit || parallel->rank >= parallel->world)
        workload_usage_error("rank %ld of world %ld: need rank < world <= %ld", parallel->rank, parallel->world,
                             world_limit);
    if (parallel->communicator.empty()) {
        const char *group = getenv("SALUS_GROUP");
        parallel->communicator = group && *group ? group : "salus-mlp";
    }
    if (!mlp_parallel_name_valid(parallel->communicator))
        workload_usage_error("communicator '%s': 1..96 characters of [A-Za-z0-9._-]",
                             parallel->communicator.c_str());
}

/* Sums `count` floats at `sums` (device memory) over the ranks, in stream order. */
static inline void mlp_parallel_allreduce(mlp_parallel *parallel, const workload_device *device, CUdeviceptr sums,
                                          unsigned long long count, std::vector<float> *host)
{
    if (parallel->mode == MLP_PARALLEL_SIMGPU) {
        const char *communicator = parallel->communicator.c_str();
        unsigned rank = (unsigned)parallel->rank, world = (unsigned)parallel->world;
        void *arguments[] = {&sums, &count, &communicator, &rank, &world};
        CHECK_CU(cuLaunchKernel(parallel->allreduce, 1, 1, 1, 1, 1, 1, 0, device->stream, arguments, NULL));
        return;
    }
#if defined(SALUS_MLP_MPI)
    host->resize(count);
    CHECK_CU(cuStreamSynchronize(device->stream));
    CHECK_CU(cuMemcpyDtoH(host->data(), sums, count * sizeof(float)));
    if (MPI_Allreduce(MPI_IN_PLACE, host->data(), (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Allreduce failed\n", workload_program);
        exit(WORKLOAD_EXIT_DRIVER_ERROR);
    }
    CHECK_CU(cuMemcpyHtoDAsync(sums, host->data(), count * sizeof(float), device->stream));
    CHECK_CU(cuStreamSynchronize(device->stream));
#else
    (void)host;
#endif
}

static inline void mlp_parallel_finish(const mlp_parallel *parallel)
{
#if defined(SALUS_MLP_MPI)
    if (parallel->mode == MLP_PARALLEL_MPI)
        MPI_Finalize();
#else
    (void)parallel;
#endif
}

#endif
