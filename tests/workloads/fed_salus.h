/* salus-fed with salus (the default mode): this process is client R of N, rank R of a salus
 * group of world N (salusctl run --group G --world N --rank R -- salus-fed ...), and the global
 * model is the group's federated table (libsalus-client/include/salus_ps.h, rule
 * "fedavg:N:K:E:SEED:drop|partial" of ps-core/ps_fed.h) that salusd serves.
 *
 * Why one salus job per client: a client is what the paper's system heterogeneity is about (its
 * own data, its own amount of work), and as a job of its own salus sees each client's GPU work
 * (its iterations, its memory) and packs the many small clients onto the GPU's lanes, which is
 * the many-small-jobs-per-GPU case salus is for; a client that fails fails alone; and the
 * table's client ids are the group's ranks, so no client bookkeeping sits in the workload. The
 * cost is a process and a context per client (small here: 610 parameters, the client's rows).
 *
 * Round r (this rank's clock r of the table): pull the model (waits until round r is open: the
 * model after rounds 0 .. r-1); the loss of this client's data at it; when salus_ps_fed_state
 * says this rank is one of round r's clients, train (the epochs of the seeded straggler model of
 * fed_data.h, the same as --sequential's) and salus_ps_fed_push the local model with its sample
 * count and work; clock. After round R-1 one more pull gives the final model.
 *
 * The loss and the accepted counts: a second table TABLE-loss (rule add, bsp) of 2 (R + 1)
 * elements: element r gets every client's summed loss at the model after r rounds (pushed at
 * clock r), element R + 1 + r gets 1 from each of round r's clients whose work the policy
 * accepts (the clients' own view: the table does not tell its clients what the server
 * accepted). Every rank reads it at the end, once it holds every clock, and prints the rounds
 * as --sequential does. */
#ifndef SALUS_TESTS_WORKLOADS_FED_SALUS_H
#define SALUS_TESTS_WORKLOADS_FED_SALUS_H

#include "fed_host.h"

#include <salus_ps.h>

#include "mlp_data_parallel.h"

__attribute__((format(printf, 2, 3), noreturn)) static inline void fed_salus_fail(int rc, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fflush(stdout);
    fprintf(stderr, "%s: ", workload_program);
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, " failed: %s (%s)\n", strerror(-rc), salus_ps_last_error());
    exit(WORKLOAD_EXIT_DRIVER_ERROR);
}

/* 600 s: the slowest client of the group ends within that or the run is broken */
static const uint64_t fed_salus_wait_ns = 600ull * 1000000000ull;

/* A push or clock that -EBUSY refuses (this rank ahead of the window of its node's slowest
 * rank) is tried again until the deadline. */
#define FED_SALUS_RETRY(rc, call)                                                         \
    do {                                                                                  \
        const uint64_t fed_deadline_ = workload_now_ns() + fed_salus_wait_ns;             \
        while (((rc) = (call)) == -EBUSY && workload_now_ns() < fed_deadline_)            \
            workload_sleep_ns(2000000);                                                   \
    } while (0)

static inline void fed_salus_add(salus_ps_table_t *losses, uint64_t element, float value, uint32_t round)
{
    int rc;
    FED_SALUS_RETRY(rc, salus_ps_push(losses, element, 1, &value));
    if (rc < 0)
        fed_salus_fail(rc, "salus_ps_push(loss table, element %llu) of round %u", (unsigned long long)element, round);
}

/* The loss table once it holds every rank's every clock (polled, bounded). */
static inline void fed_salus_read_losses(salus_ps_table_t *losses, uint64_t count, uint64_t clocks,
                                         std::vector<float> *out)
{
    const uint64_t deadline = workload_now_ns() + fed_salus_wait_ns;
    out->assign(count, 0.0f);
    for (;;) {
        salus_ps_read_t read = {};
        int rc = salus_ps_pull(losses, 0, count, out->data(), &read);
        if (rc < 0)
            fed_salus_fail(rc, "salus_ps_pull(loss table)");
        if (read.done >= clocks)
            return;
        if (workload_now_ns() > deadline) {
            fprintf(stderr, "%s: the loss table holds %llu of %llu clocks after 600 s\n", workload_program,
                    (unsigned long long)read.done, (unsigned long long)clocks);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        workload_sleep_ns(5000000);
    }
}

static inline void fed_run_salus(fed_config *config, const void *image)
{
    static const char *const rank_names[] = {"SALUS_RANK", NULL};
    static const char *const world_names[] = {"SALUS_WORLD", NULL};
    const long limit = PS_FED_MAX_CLIENTS;
    long world = config->world >= 0 ? config->world : mlp_parallel_from_environment(world_names, 1, limit);
    long rank = config->rank >= 0 ? config->rank : mlp_parallel_from_environment(rank_names, 0, limit - 1);
    if (world < 1 || rank < 0)
        workload_usage_error("the salus mode needs --rank and --world (or SALUS_RANK/SALUS_WORLD: salusctl run "
                             "--group G --world N --rank R); without salus use --sequential");
    if ((uint32_t)world != config->clients || rank >= world)
        workload_usage_error("rank %ld of world %ld: the world must be --clients (%u) and the rank below it", rank,
                             world, config->clients);
    const uint32_t client = (uint32_t)rank, rounds = config->rounds;
    const fed_data_spec data_spec = fed_data_of(config);
    const std::vector<uint32_t> counts = fed_sample_counts(&data_spec);
    uint64_t total_samples = 0;
    for (uint32_t count : counts)
        total_samples += count;
    std::vector<fed_client_data> held(1);
    fed_client_make(&data_spec, client, counts[client], &held[0]);
    fed_print_header(config, "salus", total_samples);

    fed_device dev;
    fed_device_open(&dev, config, image, held);
    salus_ps_table_t *model = NULL, *losses = NULL;
    salus_ps_options_t model_options = {config->rule, NULL, NULL};
    int rc = salus_ps_open(config->table, FED_PARAMETERS, &model_options, &model);
    if (rc < 0)
        fed_salus_fail(rc, "salus_ps_open(%s, %u, %s)", config->table, FED_PARAMETERS, config->rule);
    const std::string loss_name = std::string(config->table) + "-loss";
    const uint64_t loss_count = 2ull * (rounds + 1ull);
    salus_ps_options_t loss_options = {"add", "bsp", NULL};
    if ((rc = salus_ps_open(loss_name.c_str(), loss_count, &loss_options, &losses)) < 0)
        fed_salus_fail(rc, "salus_ps_open(%s, %llu, add, bsp)", loss_name.c_str(), (unsigned long long)loss_count);
    printf("fed_client rank=%u world=%ld samples=%u table=%s\n", client, world, counts[client], config->table);
    fflush(stdout);

    std::vector<float> weights(FED_PARAMETERS), local;
    std::vector<uint32_t> chosen(config->per_round), work(config->per_round);
    const uint64_t start_ns = workload_now_ns();
    for (uint32_t round = 0;; round++) {
        salus_ps_read_t read = {};
        if ((rc = salus_ps_pull(model, 0, FED_PARAMETERS, weights.data(), &read)) < 0)
            fed_salus_fail(rc, "salus_ps_pull(%s) of round %u", config->table, round);
        if (read.done != round) {
            fprintf(stderr, "%s: the pull of round %u read the model of round %llu\n", workload_program, round,
                    (unsigned long long)read.done);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        fed_device_set_global(&dev, weights.data());
        fed_salus_add(losses, round, fed_device_loss(&dev, 0, counts[client]), round);
        if (round == rounds) {
            FED_SALUS_RETRY(rc, salus_ps_clock(losses));
            if (rc < 0)
                fed_salus_fail(rc, "salus_ps_clock(loss table) of the end");
            break;
        }
        salus_ps_fed_state_t state = {};
        if ((rc = salus_ps_fed_state(model, &state)) < 0)
            fed_salus_fail(rc, "salus_ps_fed_state(%s) of round %u", config->table, round);
        const int selected = ps_fed_selected(&config->spec, round, client);
        if (state.round != round || state.selected != selected || state.clients != config->clients ||
            state.per_round != config->per_round || state.epochs != config->epochs) {
            fprintf(stderr, "%s: the table says round %llu selected=%d (%u clients, %u per round, %u epochs); "
                    "this client expected round %u selected=%d\n", workload_program,
                    (unsigned long long)state.round, state.selected, state.clients, state.per_round, state.epochs,
                    round, selected);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        if (selected) {
            ps_fed_select(&config->spec, round, chosen.data());
            fed_round_work(config->seed, round, config->per_round, config->stragglers, config->epochs, work.data());
            uint32_t mine = 0;
            while (chosen[mine] != client)
                mine++;
            fed_device_train(&dev, config, 0, counts[client], work[mine], &local);
            rc = salus_ps_fed_push(model, round, (int64_t)counts[client], work[mine], local.data());
            if (rc < 0)
                fed_salus_fail(rc, "salus_ps_fed_push(%s, round %u, %u samples, %u epochs)", config->table, round,
                               counts[client], work[mine]);
            if (fed_work_accepted(config, work[mine]))
                fed_salus_add(losses, rounds + 1ull + round, 1.0f, round);
        }
        FED_SALUS_RETRY(rc, salus_ps_clock(model));
        if (rc < 0)
            fed_salus_fail(rc, "salus_ps_clock(%s) of round %u", config->table, round);
        FED_SALUS_RETRY(rc, salus_ps_clock(losses));
        if (rc < 0)
            fed_salus_fail(rc, "salus_ps_clock(loss table) of round %u", round);
    }
    std::vector<float> table;
    fed_salus_read_losses(losses, loss_count, rounds + 1ull, &table);
    const uint64_t elapsed_ns = workload_now_ns() - start_ns;
    if ((rc = salus_ps_close(losses)) < 0)
        fed_salus_fail(rc, "salus_ps_close(loss table)");
    if ((rc = salus_ps_close(model)) < 0)
        fed_salus_fail(rc, "salus_ps_close(%s)", config->table);
    fed_device_close(&dev);
    std::vector<double> round_losses(rounds + 1);
    std::vector<uint32_t> accepted(rounds + 1, 0);
    for (uint32_t r = 0; r <= rounds; r++) {
        round_losses[r] = (double)table[r];
        if (r > 0)
            accepted[r] = (uint32_t)table[rounds + r];
    }
    fed_print_rounds(round_losses, accepted, total_samples);
    printf("fed_done mode=salus rank=%u rounds=%u total_ms=%.3f\n", client, rounds, (double)elapsed_ns / 1e6);
    fed_weights_report(weights, config->dump_weights);
}

#endif
