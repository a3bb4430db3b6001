/* salus-fed's host side shared by both modes: the configuration, the device (data and model
 * buffers, the kernels), a client's local training and loss on it, and the output lines. */
#ifndef SALUS_TESTS_WORKLOADS_FED_HOST_H
#define SALUS_TESTS_WORKLOADS_FED_HOST_H

#include "workload_host.h"

extern "C" {
#include "ps_fed.h"
}

#include <string>
#include <vector>

#include "fed_data.h"

typedef struct fed_config {
    const char *fed_name;   /* "fedavg" or "fedprox" */
    ps_fed_policy_t policy; /* fedavg: drop, fedprox: partial */
    float mu, learning_rate;
    uint32_t epochs, clients, per_round, rounds, batch, seed;
    double stragglers, alpha, beta;
    bool sequential;
    long rank, world;       /* salus mode (-1: from the environment) */
    const char *table;      /* salus mode: the federated table's name */
    const char *dump_weights;
    ps_fed_spec_t spec;     /* the server's rule, from the above */
    char rule[PS_FED_RULE_BYTES];
} fed_config;

static inline void fed_spec_make(fed_config *config)
{
    config->spec = ps_fed_spec_t{config->clients, config->per_round, config->epochs, config->seed, config->policy};
    int rc = ps_fed_format(&config->spec, config->rule, sizeof config->rule);
    if (rc < 0)
        workload_usage_error("no federated rule for clients=%u per_round=%u epochs=%u", config->clients,
                             config->per_round, config->epochs);
}

static inline fed_data_spec fed_data_of(const fed_config *config)
{
    return fed_data_spec{config->clients, config->alpha, config->beta, config->seed};
}

/* Whether the server's policy takes a push of `work` epochs (ps_fed.h's rule, for the
 * accepted count the salus mode reports: its clients see no such count from the table). */
static inline bool fed_work_accepted(const fed_config *config, uint32_t work)
{
    return config->policy == PS_FED_DROP ? work >= config->epochs : work >= 1;
}

/* The device side: the data of the clients this process runs (one buffer, client after client),
 * the global model of the round, a client's local model and scratch, the kernels. */
typedef struct fed_device {
    workload_device device;
    CUfunction forward, gradient, update, loss;
    CUdeviceptr x, labels;     /* the rows of every client this process holds */
    CUdeviceptr global, local, gradients, prob, losses;
    std::vector<uint64_t> first_row; /* a held client's first row in x (by index of `held`) */
    uint32_t largest_client;   /* rows of the largest held client (the losses buffer) */
} fed_device;

/* Opens the device, uploads the given clients' data (in that order). */
static inline void fed_device_open(fed_device *dev, const fed_config *config, const void *image,
                                   const std::vector<fed_client_data> &held)
{
    workload_device_open(&dev->device, 0, image);
    CHECK_CU(cuModuleGetFunction(&dev->forward, dev->device.module, "fed_forward"));
    CHECK_CU(cuModuleGetFunction(&dev->gradient, dev->device.module, "fed_gradient"));
    CHECK_CU(cuModuleGetFunction(&dev->update, dev->device.module, "fed_update"));
    CHECK_CU(cuModuleGetFunction(&dev->loss, dev->device.module, "fed_loss"));
    uint64_t rows = 0;
    dev->largest_client = 1;
    dev->first_row.clear();
    for (const fed_client_data &data : held) {
        dev->first_row.push_back(rows);
        rows += data.samples;
        dev->largest_client = std::max(dev->largest_client, data.samples);
    }
    const size_t parameter_bytes = FED_PARAMETERS * sizeof(float);
    dev->x = workload_alloc(&dev->device, rows * FED_FEATURES * sizeof(float), false, "data x");
    dev->labels = workload_alloc(&dev->device, rows * sizeof(uint32_t), false, "data labels");
    for (size_t i = 0; i < held.size(); i++) {
        CHECK_CU(cuMemcpyHtoD(dev->x + dev->first_row[i] * FED_FEATURES * sizeof(float), held[i].x.data(),
                              held[i].x.size() * sizeof(float)));
        CHECK_CU(cuMemcpyHtoD(dev->labels + dev->first_row[i] * sizeof(uint32_t), held[i].labels.data(),
                              held[i].labels.size() * sizeof(uint32_t)));
    }
    dev->global = workload_alloc(&dev->device, parameter_bytes, false, "global model");
    dev->local = workload_alloc(&dev->device, parameter_bytes, false, "local model");
    dev->gradients = workload_alloc(&dev->device, parameter_bytes, false, "gradient");
    dev->prob = workload_alloc(&dev->device, (size_t)config->batch * FED_CLASSES * sizeof(float), false,
                               "probabilities");
    dev->losses = workload_alloc(&dev->device, (size_t)dev->largest_client * sizeof(float), false, "losses");
}

static inline void fed_device_close(fed_device *dev)
{
    CUdeviceptr buffers[] = {dev->x, dev->labels, dev->global, dev->local, dev->gradients, dev->prob, dev->losses};
    for (CUdeviceptr pointer : buffers)
        CHECK_CU(cuMemFree(pointer));
    workload_device_close(&dev->device);
}

/* The round's global model onto the device. */
static inline void fed_device_set_global(fed_device *dev, const float *weights)
{
    CHECK_CU(cuMemcpyHtoD(dev->global, weights, FED_PARAMETERS * sizeof(float)));
}

/* Held client `index` (`samples` rows) does `epochs` epochs of minibatch SGD from the global
 * model (on the device) on its rows in order, the last batch of an epoch the rest; its local
 * model ends in `local_out`. */
static inline void fed_device_train(fed_device *dev, const fed_config *config, size_t index, uint32_t samples,
                                    uint32_t epochs, std::vector<float> *local_out)
{
    const size_t parameter_bytes = FED_PARAMETERS * sizeof(float);
    CHECK_CU(cuMemcpyDtoDAsync(dev->local, dev->global, parameter_bytes, dev->device.stream));
    float learning_rate = config->learning_rate, mu = config->mu;
    for (uint32_t epoch = 0; epoch < epochs; epoch++) {
        for (uint32_t first = 0; first < samples; first += config->batch) {
            unsigned rows = std::min(config->batch, samples - first);
            CUdeviceptr x = dev->x + (dev->first_row[index] + first) * FED_FEATURES * sizeof(float);
            CUdeviceptr labels = dev->labels + (dev->first_row[index] + first) * sizeof(uint32_t);
            void *forward_args[] = {&x, &dev->local, &dev->prob, &rows};
            workload_launch_1d(&dev->device, dev->forward, rows, forward_args);
            void *gradient_args[] = {&x, &labels, &dev->prob, &dev->gradients, &rows};
            workload_launch_1d(&dev->device, dev->gradient, FED_PARAMETERS, gradient_args);
            void *update_args[] = {&dev->local, &dev->gradients, &dev->global, &learning_rate, &mu};
            workload_launch_1d(&dev->device, dev->update, FED_PARAMETERS, update_args);
        }
    }
    CHECK_CU(cuStreamSynchronize(dev->device.stream));
    local_out->resize(FED_PARAMETERS);
    CHECK_CU(cuMemcpyDtoH(local_out->data(), dev->local, parameter_bytes));
}

/* The summed cross-entropy of held client `index` at the global model (on the device): the
 * rows' losses added in row order in double, rounded to float (what a client reports). */
static inline float fed_device_loss(fed_device *dev, size_t index, uint32_t samples)
{
    CUdeviceptr x = dev->x + dev->first_row[index] * FED_FEATURES * sizeof(float);
    CUdeviceptr labels = dev->labels + dev->first_row[index] * sizeof(uint32_t);
    unsigned rows = samples;
    void *loss_args[] = {&x, &labels, &dev->global, &dev->losses, &rows};
    workload_launch_1d(&dev->device, dev->loss, rows, loss_args);
    CHECK_CU(cuStreamSynchronize(dev->device.stream));
    std::vector<float> losses(samples);
    CHECK_CU(cuMemcpyDtoH(losses.data(), dev->losses, samples * sizeof(float)));
    double sum = 0.0;
    for (float value : losses)
        sum += (double)value;
    return (float)sum;
}

/* ---- output ----------------------------------------------------------------------------------- */

static inline void fed_print_header(const fed_config *config, const char *mode, uint64_t total_samples)
{
    printf("fed mode=%s fed=%s policy=%s mu=%g clients=%u per_round=%u local_epochs=%u stragglers=%g rounds=%u "
           "alpha=%g beta=%g seed=%u batch=%u lr=%g samples=%llu parameters=%u rule=%s\n",
           mode, config->fed_name, config->policy == PS_FED_DROP ? "drop" : "partial", (double)config->mu,
           config->clients, config->per_round, config->epochs, config->stragglers, config->rounds, config->alpha,
           config->beta, config->seed, config->batch, (double)config->learning_rate,
           (unsigned long long)total_samples, FED_PARAMETERS, config->rule);
    fflush(stdout);
}

/* losses[r]: the summed loss over all clients after r rounds; accepted[r]: round r-1's count */
static inline void fed_print_rounds(const std::vector<double> &losses, const std::vector<uint32_t> &accepted,
                                    uint64_t total_samples)
{
    for (size_t r = 0; r < losses.size(); r++)
        printf("round=%zu loss=%.7g accepted=%u\n", r, losses[r] / (double)total_samples, accepted[r]);
    fflush(stdout);
}

/* 'fed_weights_digest n= sum= l2=' and with `dump` one %.9g a line (a float's exact text) */
static inline void fed_weights_report(const std::vector<float> &weights, const char *dump)
{
    workload_weights_report("fed_weights_digest", weights.data(), weights.size(), 17, dump);
}

#endif
