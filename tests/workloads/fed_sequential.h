/* salus-fed --sequential: one process runs the N clients in turn, the server being
 * ps-core/ps_fed.c in-process (the code salusd serves a federated table with), so this mode and
 * the salus mode compute the same rounds.
 *
 * Round r: the global model w_r = ps_fed_values; the loss over every client's data at w_r; round
 * r's clients (ps_fed_select, ascending) each train from w_r for the epochs the straggler model
 * gives them (fed_data.h) and push their local model, sample count and work (ps_fed_push); the
 * K-th push closes the round (the weighted average of the accepted ones). */
#ifndef SALUS_TESTS_WORKLOADS_FED_SEQUENTIAL_H
#define SALUS_TESTS_WORKLOADS_FED_SEQUENTIAL_H

#include "fed_host.h"

static inline void fed_run_sequential(const fed_config *config, const void *image)
{
    const fed_data_spec data_spec = fed_data_of(config);
    const std::vector<uint32_t> counts = fed_sample_counts(&data_spec);
    std::vector<fed_client_data> clients(config->clients);
    uint64_t total_samples = 0;
    for (uint32_t k = 0; k < config->clients; k++) {
        fed_client_make(&data_spec, k, counts[k], &clients[k]);
        total_samples += counts[k];
    }
    fed_print_header(config, "sequential", total_samples);

    fed_device dev;
    fed_device_open(&dev, config, image, clients);
    ps_fed_t *fed = ps_fed_create(&config->spec, FED_PARAMETERS, NULL);
    if (!fed) {
        fprintf(stderr, "%s: ps_fed_create(%s, %u) failed\n", workload_program, config->rule, FED_PARAMETERS);
        exit(WORKLOAD_EXIT_DRIVER_ERROR);
    }
    std::vector<double> losses;
    std::vector<uint32_t> accepted(1, 0);
    std::vector<uint32_t> chosen(config->per_round), work(config->per_round);
    std::vector<float> local;
    const uint64_t start_ns = workload_now_ns();
    for (uint32_t round = 0;; round++) {
        fed_device_set_global(&dev, ps_fed_values(fed));
        double loss = 0.0;
        for (uint32_t k = 0; k < config->clients; k++) /* as the clients would report it */
            loss += (double)fed_device_loss(&dev, k, counts[k]);
        losses.push_back(loss);
        if (round == config->rounds)
            break;
        ps_fed_select(&config->spec, round, chosen.data());
        fed_round_work(config->seed, round, config->per_round, config->stragglers, config->epochs, work.data());
        for (uint32_t i = 0; i < config->per_round; i++) {
            const uint32_t k = chosen[i];
            fed_device_train(&dev, config, k, counts[k], work[i], &local);
            char err[160] = "";
            int rc = ps_fed_push(fed, k, round, (int64_t)counts[k], work[i], local.data(), FED_PARAMETERS, err,
                                 sizeof err);
            if (rc != (i + 1 == config->per_round ? 2 : 1)) {
                fprintf(stderr, "%s: ps_fed_push(client %u, round %u) returned %d: %s\n", workload_program, k,
                        round, rc, err);
                exit(WORKLOAD_EXIT_DRIVER_ERROR);
            }
        }
        ps_fed_round_info_t info;
        ps_fed_last_round(fed, &info);
        if (info.round != round || ps_fed_round(fed) != round + 1ull) {
            fprintf(stderr, "%s: round %u did not close\n", workload_program, round);
            exit(WORKLOAD_EXIT_DRIVER_ERROR);
        }
        accepted.push_back(info.accepted);
    }
    const uint64_t elapsed_ns = workload_now_ns() - start_ns;
    std::vector<float> weights(ps_fed_values(fed), ps_fed_values(fed) + FED_PARAMETERS);
    ps_fed_destroy(fed);
    fed_device_close(&dev);
    fed_print_rounds(losses, accepted, total_samples);
    printf("fed_done mode=sequential rounds=%u total_ms=%.3f\n", config->rounds, (double)elapsed_ns / 1e6);
    fed_weights_report(weights, config->dump_weights);
}

#endif
