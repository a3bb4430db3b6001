/* salus-mlp's parameter-server mode (--ps bsp|ssp:S|asp): the weights in a table served by
 * salusd (libsalus-client/include/salus_ps.h), each rank pulling them, computing its gradient
 * on its rows and pushing it.
 *
 * The scheme, exact under BSP: every rank makes the same initial weights W0 from --seed; the
 * table "mlp-w" (rule sgd:LR with the program's --lr, the --ps sync mode) holds the change from
 * W0, so it starts at 0 and the weights are W0 + table. All parameters are one flat array in
 * the order of the gradient buffer of the data-parallel mode: the output layer (for each
 * output k: w2[k][0..hidden-1], b2[k]), then the hidden layer (for each hidden unit j:
 * w1[j][0..inputs-1], b1[j]). Iteration k (clock k-1) of rank r of world N:
 *   pull the table (the sync mode decides which clocks it includes), weights = W0 + table;
 *   forward and backward on rows r*b .. r*b+b-1 of the global batch of N*b (the rows the
 *   data-parallel mode takes, so the N ranks together cover the batch of one process with
 *   --batch N*b); gradient g_r = the mean over its b rows;
 *   push g_r / N, clock: the servers apply table -= LR * sum_r g_r / N, the mean over the
 *   global batch, once every rank pushed (BSP).
 * Under BSP, N ranks of batch b therefore make the steps of one process with batch N*b: the
 * division by b then by N (a power of two in the tests) rounds as the division by N*b does;
 * only the order of the float sums and the W0 + table split differ (rounding).
 *
 * The loss: a second table "mlp-loss" (rule add, the same sync), one element per iteration
 * (and one more, the end's counter under ASP, below), to which each rank pushes its rows' mean
 * loss / N at its clock (before its gradient): the element holds the global batch's loss once
 * every rank pushed. The loss lines ('iter=K loss=V', as the data-parallel mode prints them)
 * come at the end, read from that table once it holds every clock.
 *
 * The end: after its last clock a rank pulls both tables until they hold every rank's every
 * clock (bounded; a read at clock K may see less under ssp), so every rank ends with the same
 * final weights. Under asp, where salus_ps.h promises no `done` (contributions are applied on
 * arrival), each rank adds 1 to the last element of "mlp-loss" after its last push and waits
 * until it holds the world before one final pull of each table (every push acknowledged; one
 * still on its way to a remote shard may be missing: asp promises nothing there). The final
 * weights are printed as 'mlp_weights_digest n= sum= l2=' (and with --dump-weights FILE one
 * value per line, as without --ps).
 *
 * --ps-log FILE: one line per pull of "mlp-w", 'read rank=R clock=C done=D done_at_request=A
 * waited=W waited_ns=NS t_ns=T' (salus_ps_read_t; T: CLOCK_MONOTONIC when the pull returned);
 * one per push to "mlp-loss", 'push rank=R clock=C loss_part=V'; at the end the final
 * "mlp-loss", 'loss_table clock=C value=V' (a test recomputes each element from the pushes).
 * --ps-slow-ms MS: sleep MS before each push (a slowed worker).
 *
 * Restored runs (salusctl run --restore: the tables start from a checkpoint taken at clock C):
 * salus_ps_clock_of says C after the open, and the run continues at iteration C + 1 (clock C),
 * with that iteration's rows, as the interrupted run would have; it prints 'ps_resume clock=C'.
 * --ps-stop-at K: the run ends after iteration K (its clock K-1) as if K were --iterations
 * (its final pulls wait for clock K, the losses of iterations 1..K are printed), a "killed" run
 * made deterministic. --ps-dump-first FILE: the table "mlp-w" as the run's first pull read it,
 * one %.9g a line (after a restore: the checkpoint's values, which a test compares bit for bit).
 *
 * Rank and world: --rank/--world, else SALUS_RANK/SALUS_WORLD (salusctl run --group ...), else
 * OMPI_COMM_WORLD_RANK/SIZE, as the data-parallel mode. Not with --data-parallel or
 * --cpu-reference. Without salus every call fails with -ENOSYS: the program says so and exits 1. */
#ifndef SALUS_TESTS_WORKLOADS_MLP_PS_H
#define SALUS_TESTS_WORKLOADS_MLP_PS_H

#include "workload_host.h"

#include <salus_ps.h>

#include <math.h>
#include <stdarg.h>
#include <string>
#include <vector>

#include "mlp_data_parallel.h"

typedef struct mlp_ps {
    bool enabled;
    std::string sync;        /* "bsp", "ssp:S", "asp" */
    long rank, world;
    const char *log_path;    /* --ps-log */
    FILE *log;
    double slow_ms;          /* --ps-slow-ms */
    unsigned stop_at;        /* --ps-stop-at (0: none) */
    const char *dump_first;  /* --ps-dump-first */
    unsigned first, last;    /* the iterations this run does (first > 1: restored) */
    salus_ps_table_t *weights, *losses;
    unsigned long long count; /* parameters */
    unsigned iterations;
    std::vector<float> initial, table; /* W0 and the table's values, flat */
} mlp_ps;

static const unsigned mlp_ps_iteration_limit = 1u << 20; /* the loss table: 4 MiB at most */

/* --ps MODE: bsp, asp or ssp:S with S in [0, 1000000] */
static inline void mlp_ps_select(mlp_ps *ps, const char *mode)
{
    bool good = strcmp(mode, "bsp") == 0 || strcmp(mode, "asp") == 0;
    if (!good && strncmp(mode, "ssp:", 4) == 0 && mode[4] >= '0' && mode[4] <= '9') {
        char *end = NULL;
        errno = 0;
        unsigned long staleness = strtoul(mode + 4, &end, 10);
        good = errno == 0 && *end == '\0' && staleness <= 1000000;
    }
    if (!good)
        workload_usage_error("--ps: expected 'bsp', 'ssp:S' (S an integer) or 'asp', got '%s'", mode);
    ps->enabled = true;
    ps->sync = mode;
}

/* After the command line: rank and world from the flags (-1: not given) or the environment. */
static inline void mlp_ps_start(mlp_ps *ps, long flag_rank, long flag_world, unsigned iterations)
{
    static const char *const rank_names[] = {"SALUS_RANK", "OMPI_COMM_WORLD_RANK", NULL};
    static const char *const world_names[] = {"SALUS_WORLD", "OMPI_COMM_WORLD_SIZE", NULL};
    const long world_limit = 64;
    if (!ps->enabled) {
        if (ps->log_path || ps->slow_ms > 0 || ps->stop_at || ps->dump_first)
            workload_usage_error("--ps-log, --ps-slow-ms, --ps-stop-at and --ps-dump-first need --ps");
        return;
    }
    if (iterations > mlp_ps_iteration_limit)
        workload_usage_error("--ps: at most %u iterations (the loss table has one element each)",
                             mlp_ps_iteration_limit);
    ps->world = flag_world >= 0 ? flag_world : mlp_parallel_from_environment(world_names, 1, world_limit);
    ps->rank = flag_rank >= 0 ? flag_rank : mlp_parallel_from_environment(rank_names, 0, world_limit - 1);
    if (ps->world < 1 || ps->rank < 0)
        workload_usage_error("--ps needs --rank and --world (or SALUS_RANK/SALUS_WORLD, OMPI_COMM_WORLD_RANK/SIZE)");
    if (ps->world > world_limit || ps->rank >= ps->world)
        workload_usage_error("rank %ld of world %ld: need rank < world <= %ld", ps->rank, ps->world, world_limit);
    ps->iterations = iterations;
    if (ps->stop_at > iterations)
        workload_usage_error("--ps-stop-at %u: beyond --iterations %u", ps->stop_at, iterations);
    ps->first = 1;
    ps->last = ps->stop_at ? ps->stop_at : iterations;
    if (ps->log_path) {
        ps->log = fopen(ps->log_path, "w");
        if (!ps->log)
            workload_usage_error("--ps-log %s: %s", ps->log_path, strerror(errno));
    }
}

__attribute__((format(printf, 2, 3), noreturn)) static inline void mlp_ps_fail(int rc, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s: ", workload_program);
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, " failed: %s (%s)\n", strerror(-rc), salus_ps_last_error());
    exit(WORKLOAD_EXIT_DRIVER_ERROR);
}

/* Opens the tables; `initial` is W0, flat. */
static inline void mlp_ps_open(mlp_ps *ps, const std::vector<float> &initial, float learning_rate)
{
    char rule[64];
    snprintf(rule, sizeof rule, "sgd:%.9g", (double)learning_rate);
    ps->initial = initial;
    ps->count = initial.size();
    ps->table.assign(initial.size(), 0.0f);
    salus_ps_options_t weight_options = {rule, ps->sync.c_str(), NULL};
    int rc = salus_ps_open("mlp-w", ps->count, &weight_options, &ps->weights);
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_open(mlp-w, %llu, %s, %s)", ps->count, rule, ps->sync.c_str());
    salus_ps_options_t loss_options = {"add", ps->sync.c_str(), NULL};
    rc = salus_ps_open("mlp-loss", ps->iterations + 1ull, &loss_options, &ps->losses);
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_open(mlp-loss, %u, add, %s)", ps->iterations + 1, ps->sync.c_str());
    printf("ps=%s rank=%ld world=%ld parameters=%llu rule=%s\n", ps->sync.c_str(), ps->rank, ps->world, ps->count,
           rule);
    /* a restored group's tables start at the checkpoint's clock C: continue with iteration C + 1 */
    uint64_t weights_clock = salus_ps_clock_of(ps->weights), losses_clock = salus_ps_clock_of(ps->losses);
    if (weights_clock != losses_clock) {
        fprintf(stderr, "%s: the tables start at different clocks (mlp-w %llu, mlp-loss %llu)\n", workload_program,
                (unsigned long long)weights_clock, (unsigned long long)losses_clock);
        exit(WORKLOAD_EXIT_DRIVER_ERROR);
    }
    if (weights_clock > ps->last) {
        fprintf(stderr, "%s: the tables start at clock %llu, beyond the run's last iteration %u\n", workload_program,
                (unsigned long long)weights_clock, ps->last);
        exit(WORKLOAD_EXIT_USAGE);
    }
    ps->first = (unsigned)weights_clock + 1;
    if (weights_clock > 0)
        printf("ps_resume clock=%llu\n", (unsigned long long)weights_clock);
    fflush(stdout);
}

/* --ps-dump-first: the table as the first pull read it, one %.9g a line. */
static inline void mlp_ps_dump_first(mlp_ps *ps)
{
    FILE *out = fopen(ps->dump_first, "w");
    if (!out) {
        fprintf(stderr, "%s: --ps-dump-first %s: %s\n", workload_program, ps->dump_first, strerror(errno));
        exit(WORKLOAD_EXIT_USAGE);
    }
    for (float value : ps->table)
        fprintf(out, "%.9g\n", (double)value);
    if (fclose(out) != 0) {
        fprintf(stderr, "%s: --ps-dump-first %s: %s\n", workload_program, ps->dump_first, strerror(errno));
        exit(WORKLOAD_EXIT_USAGE);
    }
    ps->dump_first = NULL;
}

/* Pulls "mlp-w" into ps->table (logged); returns what the read saw. */
static inline salus_ps_read_t mlp_ps_pull_table(mlp_ps *ps)
{
    salus_ps_read_t read = {};
    int rc = salus_ps_pull(ps->weights, 0, ps->count, ps->table.data(), &read);
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_pull(mlp-w)");
    if (ps->dump_first)
        mlp_ps_dump_first(ps);
    if (ps->log) {
        fprintf(ps->log,
                "read rank=%ld clock=%llu done=%llu done_at_request=%llu waited=%d waited_ns=%llu t_ns=%llu\n",
                ps->rank, (unsigned long long)read.clock, (unsigned long long)read.done,
                (unsigned long long)read.done_at_request, read.waited, (unsigned long long)read.waited_ns,
                (unsigned long long)workload_now_ns());
        fflush(ps->log);
    }
    return read;
}

/* The weights this iteration works with: W0 + the table, into `weights` (flat). */
static inline void mlp_ps_pull(mlp_ps *ps, std::vector<float> *weights)
{
    mlp_ps_pull_table(ps);
    weights->resize(ps->count);
    for (unsigned long long e = 0; e < ps->count; e++)
        (*weights)[e] = ps->initial[e] + ps->table[e];
}

/* A push or clock refused with -EBUSY (this rank would run more than the sync mode's window
 * ahead of its node's slowest rank or of the updates the servers have not acknowledged yet:
 * "retry later", salus_ps.h) is tried again every 5 ms, for at most 60 s; mlp-loss is never
 * pulled inside the loop, so nothing else makes this rank wait for those acknowledgements (a
 * fail-over or a server joining can hold them for seconds). */
template <typename Call>
static inline int mlp_ps_retry_busy(Call call)
{
    int rc = call();
    for (int tries = 0; rc == -EBUSY && tries < 12000; tries++) {
        workload_sleep_ns(5000000ull);
        rc = call();
    }
    return rc;
}

/* This rank's contribution of iteration `iteration` (1-based): its gradient (the mean over its
 * rows, flat; scaled by 1/N here) and its rows' loss; then the clock of both tables. */
static inline void mlp_ps_push(mlp_ps *ps, std::vector<float> *gradient, float loss, unsigned iteration)
{
    const float scale = 1.0f / (float)ps->world;
    for (float &value : *gradient)
        value *= scale;
    float loss_part = loss * scale;
    if (ps->slow_ms > 0)
        workload_sleep_ns((uint64_t)(ps->slow_ms * 1e6));
    /* the loss first: the first push of the program goes to the add table, whose values a test
     * can recompute from the log (SALUS_PS_DROP_ACK: a retried first push is applied once) */
    int rc = mlp_ps_retry_busy([&] { return salus_ps_push(ps->losses, iteration - 1, 1, &loss_part); });
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_push(mlp-loss) of iteration %u", iteration);
    if (ps->log) {
        fprintf(ps->log, "push rank=%ld clock=%u loss_part=%.9g\n", ps->rank, iteration - 1, (double)loss_part);
        fflush(ps->log);
    }
    rc = mlp_ps_retry_busy([&] { return salus_ps_push(ps->weights, 0, ps->count, gradient->data()); });
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_push(mlp-w) of iteration %u", iteration);
    if ((rc = mlp_ps_retry_busy([&] { return salus_ps_clock(ps->weights); })) < 0)
        mlp_ps_fail(rc, "salus_ps_clock(mlp-w) of iteration %u", iteration);
    if ((rc = mlp_ps_retry_busy([&] { return salus_ps_clock(ps->losses); })) < 0)
        mlp_ps_fail(rc, "salus_ps_clock(mlp-loss) of iteration %u", iteration);
}

/* The end under ASP, where `done` is no bound (contributions are applied on arrival): each
 * rank adds 1 to the extra element K of "mlp-loss" after its last push and waits (bounded)
 * until it holds the world; then every rank's every push was acknowledged. */
static inline void mlp_ps_asp_barrier(mlp_ps *ps, uint64_t deadline)
{
    const float one = 1.0f;
    int rc = salus_ps_push(ps->losses, ps->iterations, 1, &one);
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_push(mlp-loss) of the end");
    for (;;) {
        float arrived = 0.0f;
        rc = salus_ps_pull(ps->losses, ps->iterations, 1, &arrived, NULL);
        if (rc < 0)
            mlp_ps_fail(rc, "salus_ps_pull(mlp-loss) of the end");
        if (arrived >= (float)ps->world)
            return;
        if (workload_now_ns() > deadline) {
            fprintf(stderr, "%s: %g of %ld ranks ended after 600 s\n", workload_program, (double)arrived, ps->world);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        workload_sleep_ns(10000000);
    }
}

/* Pulls `table` (n elements into `out`; "mlp-w" through mlp_ps_pull_table, logged) until the
 * read holds every rank's every clock (polled, at most until `deadline`); under ASP one pull. */
static inline void mlp_ps_pull_final(mlp_ps *ps, salus_ps_table_t *table, const char *name, uint64_t n, float *out,
                                     uint64_t deadline)
{
    for (;;) {
        salus_ps_read_t read = {};
        if (table == ps->weights) {
            read = mlp_ps_pull_table(ps);
        } else {
            int rc = salus_ps_pull(table, 0, n, out, &read);
            if (rc < 0)
                mlp_ps_fail(rc, "salus_ps_pull(%s)", name);
        }
        if (read.done >= ps->last || ps->sync == "asp")
            return;
        if (workload_now_ns() > deadline) {
            fprintf(stderr, "%s: %s holds %llu of %u clocks after 600 s\n", workload_program, name,
                    (unsigned long long)read.done, ps->last);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        workload_sleep_ns(10000000);
    }
}

/* After the last clock: both tables once they hold every rank's every clock (BSP, SSP: polled
 * until `done` says so; ASP: after the barrier above), at most 600 s: the slowest rank ends
 * within that or the run is broken. `weights` gets the final W0 + table, `losses` the global
 * batch's loss of each iteration. */
static inline void mlp_ps_finish(mlp_ps *ps, std::vector<float> *weights, std::vector<float> *losses)
{
    const uint64_t deadline = workload_now_ns() + 600ull * 1000000000ull;
    if (ps->sync == "asp")
        mlp_ps_asp_barrier(ps, deadline);
    mlp_ps_pull_final(ps, ps->weights, "mlp-w", ps->count, ps->table.data(), deadline);
    weights->resize(ps->count);
    for (unsigned long long e = 0; e < ps->count; e++)
        (*weights)[e] = ps->initial[e] + ps->table[e];
    losses->assign(ps->last, 0.0f);
    mlp_ps_pull_final(ps, ps->losses, "mlp-loss", ps->last, losses->data(), deadline);
    if (ps->log) {
        for (unsigned c = 0; c < ps->last; c++)
            fprintf(ps->log, "loss_table clock=%u value=%.9g\n", c, (double)(*losses)[c]);
    }
    int rc = salus_ps_close(ps->weights);
    if (rc < 0)
        mlp_ps_fail(rc, "salus_ps_close(mlp-w)");
    if ((rc = salus_ps_close(ps->losses)) < 0)
        mlp_ps_fail(rc, "salus_ps_close(mlp-loss)");
    ps->weights = ps->losses = NULL;
    if (ps->log && fclose(ps->log) != 0)
        fprintf(stderr, "%s: --ps-log %s: %s\n", workload_program, ps->log_path, strerror(errno));
    ps->log = NULL;
}

/* 'mlp_weights_digest n= sum= l2=' of the flat weights, and with `dump` one %.9g a line. */
static inline void mlp_weights_report(const std::vector<float> &weights, const char *dump)
{
    workload_weights_report("mlp_weights_digest", weights.data(), weights.size(), 9, dump);
}

#endif
