/* salus-fed's data: the Synthetic(alpha, beta) federated data set of the FedProx paper (Li et
 * al., MLSys 2020, arXiv 1812.06127, section 5.1 and its generate_synthetic), made on the host
 * from --seed, and the seeded straggler model. Both are pure functions of the seed, so every
 * client process of a salus group makes the same numbers as the one process of --sequential.
 *
 * Client k of N (60 features, 10 classes):
 *   n_k        = (int)lognormal(4, 2) + 50 samples (numpy's lognormal(mean 4, sigma 2) of the
 *                paper's code), drawn for all clients from one stream, so any client knows
 *                every count (the loss is weighted by them) without making the others' data;
 *   u_k ~ N(0, alpha), B_k ~ N(0, beta)          (the second argument: a standard deviation,
 *                                                 as numpy's normal(loc, scale));
 *   W_k[c][j] ~ N(u_k, 1), b_k[c] ~ N(u_k, 1)    (the client's own "true" model);
 *   v_k[j] ~ N(B_k, 1);  x ~ N(v_k, Sigma), Sigma diagonal with Sigma_jj = (j+1)^-1.2;
 *   y = argmax_c softmax(W_k x + b_k)_c          (= the argmax of the logits).
 * Client k's numbers come from a stream of its own (splitmix64 seeded from (seed, k)), so a
 * client makes only its own data. All of it is the training data (the paper's 80/20 split
 * into train and test is not made: the figure is of the training loss).
 *
 * Stragglers (section 5.2 of the paper and its code): of round r's K clients,
 * K - round(K * (1 - F)) are stragglers, chosen by a seeded shuffle of the round's clients;
 * a straggler does a uniformly random 1 .. E-1 epochs by the deadline (numpy's randint(1, E)
 * of the paper's code: strictly less than the full E, so every straggler is late; with E = 1
 * there is nothing less, it does its 1), the others E. */
#ifndef SALUS_TESTS_WORKLOADS_FED_DATA_H
#define SALUS_TESTS_WORKLOADS_FED_DATA_H

#include <math.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

#define FED_FEATURES 60u
#define FED_CLASSES 10u
/* the model: for each class c, W[c][0 .. FED_FEATURES-1] then b[c] */
#define FED_PARAMETERS (FED_CLASSES * (FED_FEATURES + 1u))

/* splitmix64: tiny, deterministic, the same on every platform */
typedef struct fed_random {
    uint64_t state;
} fed_random;

static inline uint64_t fed_random_next(fed_random *random)
{
    uint64_t z = (random->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* a stream of its own for each (seed, purpose, index) */
enum { FED_STREAM_COUNTS = 1, FED_STREAM_CLIENT = 2, FED_STREAM_STRAGGLERS = 3 };

static inline fed_random fed_random_stream(uint64_t seed, uint64_t purpose, uint64_t index)
{
    fed_random mixer = {seed ^ (purpose << 56)};
    fed_random stream = {fed_random_next(&mixer) ^ (index * 0xd1342543de82ef95ull)};
    fed_random_next(&stream);
    return stream;
}

/* uniform in (0, 1] with 53 random bits */
static inline double fed_random_open_unit(fed_random *random)
{
    return (double)((fed_random_next(random) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* N(mean, sd): Box-Muller, one value per call (the second is dropped: simpler to follow) */
static inline double fed_random_normal(fed_random *random, double mean, double sd)
{
    double u1 = fed_random_open_unit(random), u2 = fed_random_open_unit(random);
    return mean + sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* uniform integer in [0, bound) (bound >= 1; the modulo bias of a 64-bit draw is nil here) */
static inline uint32_t fed_random_below(fed_random *random, uint32_t bound)
{
    return (uint32_t)(fed_random_next(random) % bound);
}

typedef struct fed_data_spec {
    uint32_t clients;
    double alpha, beta;
    uint64_t seed;
} fed_data_spec;

/* every client's sample count, n_k = (int)lognormal(4, 2) + 50 */
static inline std::vector<uint32_t> fed_sample_counts(const fed_data_spec *spec)
{
    fed_random random = fed_random_stream(spec->seed, FED_STREAM_COUNTS, 0);
    std::vector<uint32_t> counts(spec->clients);
    for (uint32_t &count : counts) {
        double draw = exp(fed_random_normal(&random, 4.0, 2.0));
        count = (uint32_t)std::min(draw, 1e6) + 50u; /* 1e6: a bound far in the tail (e^10 ~ 22026) */
    }
    return counts;
}

/* One client's data: x row-major (samples x FED_FEATURES), labels 0 .. FED_CLASSES-1. */
typedef struct fed_client_data {
    uint32_t samples;
    std::vector<float> x;
    std::vector<uint32_t> labels;
} fed_client_data;

static inline void fed_client_make(const fed_data_spec *spec, uint32_t client, uint32_t samples,
                                   fed_client_data *data)
{
    fed_random random = fed_random_stream(spec->seed, FED_STREAM_CLIENT, client);
    const double u = fed_random_normal(&random, 0.0, spec->alpha), big_b = fed_random_normal(&random, 0.0, spec->beta);
    double v[FED_FEATURES], sd[FED_FEATURES], weight[FED_CLASSES][FED_FEATURES], bias[FED_CLASSES];
    for (unsigned j = 0; j < FED_FEATURES; j++) {
        v[j] = fed_random_normal(&random, big_b, 1.0);
        sd[j] = pow((double)(j + 1), -0.6); /* the variance is (j+1)^-1.2 */
    }
    for (unsigned c = 0; c < FED_CLASSES; c++)
        for (unsigned j = 0; j < FED_FEATURES; j++)
            weight[c][j] = fed_random_normal(&random, u, 1.0);
    for (unsigned c = 0; c < FED_CLASSES; c++)
        bias[c] = fed_random_normal(&random, u, 1.0);

    data->samples = samples;
    data->x.resize((size_t)samples * FED_FEATURES);
    data->labels.resize(samples);
    for (uint32_t s = 0; s < samples; s++) {
        float *row = &data->x[(size_t)s * FED_FEATURES];
        for (unsigned j = 0; j < FED_FEATURES; j++)
            row[j] = (float)fed_random_normal(&random, v[j], sd[j]);
        unsigned best = 0;
        double best_logit = -INFINITY;
        for (unsigned c = 0; c < FED_CLASSES; c++) { /* the label from the stored (float) features */
            double logit = bias[c];
            for (unsigned j = 0; j < FED_FEATURES; j++)
                logit += weight[c][j] * (double)row[j];
            if (logit > best_logit) {
                best_logit = logit;
                best = c;
            }
        }
        data->labels[s] = best;
    }
}

/* The epochs of local work each of round r's K clients did by the deadline: work[i] is that of
 * the round's i-th client in ascending order (as ps_fed_select lists them). */
static inline void fed_round_work(uint64_t seed, uint64_t round, uint32_t per_round, double stragglers,
                                  uint32_t epochs, uint32_t *work)
{
    fed_random random = fed_random_stream(seed, FED_STREAM_STRAGGLERS, round);
    const uint32_t on_time = (uint32_t)llround((double)per_round * (1.0 - stragglers));
    std::vector<uint32_t> order(per_round);
    for (uint32_t i = 0; i < per_round; i++)
        order[i] = i;
    for (uint32_t i = per_round; i > 1; i--) /* Fisher-Yates over the round's positions */
        std::swap(order[i - 1], order[fed_random_below(&random, i)]);
    for (uint32_t i = 0; i < per_round; i++)
        work[i] = epochs;
    for (uint32_t i = on_time; i < per_round; i++) /* the shuffle's tail: the stragglers */
        work[order[i]] = epochs > 1 ? 1 + fed_random_below(&random, epochs - 1) : 1;
}

#endif
