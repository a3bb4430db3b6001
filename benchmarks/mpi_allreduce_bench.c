/* mpi_allreduce_bench: the MPI side of benchmarks/ps-allreduce.sh. Every rank runs --rounds
 * MPI_Allreduce(SUM, float) of --bytes bytes (after one untimed warm-up), timing each, and
 * rank 0 prints the median:
 *     mpi_bench bytes=S rounds=R ranks=N median_round_ms=X
 * The result is checked (every element is the number of ranks; exit 1 otherwise). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    uint64_t bytes = 1 << 20;
    int rounds = 10;
    MPI_Init(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mpi_allreduce_bench [--bytes S] [--rounds R]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    uint64_t count = bytes / sizeof(float);
    if (count == 0 || count > INT32_MAX || rounds < 1) {
        fprintf(stderr, "mpi_allreduce_bench: 4 bytes to 8 GiB, at least one round\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    double *ms = calloc((size_t)rounds, sizeof(double));
    if (!in || !out || !ms) {
        fprintf(stderr, "mpi_allreduce_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (uint64_t i = 0; i < count; i++)
        in[i] = 1.0f;
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    for (int r = 0; r < rounds; r++) {
        memset(out, 0, count * sizeof(float));
        double t0 = MPI_Wtime();
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        ms[r] = (MPI_Wtime() - t0) * 1e3;
        for (uint64_t i = 0; i < count; i++) {
            if (out[i] != (float)ranks) {
                fprintf(stderr, "mpi_allreduce_bench: rank %d round %d element %llu is %g, not %d\n",
                        rank, r, (unsigned long long)i, out[i], ranks);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    qsort(ms, (size_t)rounds, sizeof(double), cmp_double);
    double median = rounds % 2 ? ms[rounds / 2] : (ms[rounds / 2 - 1] + ms[rounds / 2]) / 2;
    /* the slowest rank's median: an allreduce is done when it is done everywhere */
    double worst = 0;
    MPI_Reduce(&median, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_bench bytes=%llu rounds=%d ranks=%d median_round_ms=%.3f\n",
               (unsigned long long)bytes, rounds, ranks, worst);
    free(in);
    free(out);
    free(ms);
    MPI_Finalize();
    return 0;
}
