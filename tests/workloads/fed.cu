/* salus-fed: federated training (FedAvg, FedProx) of multinomial logistic regression (60
 * features, 10 classes) on the FedProx paper's Synthetic(alpha, beta) data (fed_data.h).
 *
 * Each round the server's rule (ps-core/ps_fed.h, "fedavg:N:K:E:SEED:drop|partial") picks K of
 * the N clients; each runs minibatch SGD (--batch 10, --lr 0.01, as the paper) for its epochs of
 * local work from the global weights w_t, on the GPU (fed_forward, fed_gradient, fed_update
 * below), with FedProx's proximal term mu (w - w_t) added to the gradient, and pushes its local
 * model with its sample count and the epochs it did; the server averages the accepted ones
 * weighted by sample count. Two modes compute the same thing:
 *   with salus (default): this process is one client, a rank of a salus group (salusctl run
 *     --group G --world N --rank R): the global model is the group's federated table
 *     (fed_salus.h);
 *   --sequential: one process runs the N clients in turn, the server being the same
 *     ps-core/ps_fed.c in-process (fed_sequential.h); no salus needed.
 *
 * One source, three builds, as salus-mlp (README.md): nvcc --fatbin (the kernels), g++ (the
 * host program), g++ -DSIMGPU_PACK (the kernels for simgpu). */
#include <stddef.h>

#include "fed_data.h"

/* ---- per-element math, shared by the kernels ----------------------------------------------- */

/* the logits of one sample: z[c] = b[c] + sum_j W[c][j] x[j] (the flat model of fed_data.h) */
__host__ __device__ static inline void fed_logits(const float *x_row, const float *w, float *z)
{
    for (unsigned c = 0; c < FED_CLASSES; c++) {
        const float *w_row = w + (size_t)c * (FED_FEATURES + 1);
        float sum = w_row[FED_FEATURES];
        for (unsigned j = 0; j < FED_FEATURES; j++)
            sum += w_row[j] * x_row[j];
        z[c] = sum;
    }
}

/* log of sum_c exp(z[c]), shifted by the largest logit */
__host__ __device__ static inline float fed_log_sum_exp(const float *z, float *largest_out)
{
    float largest = z[0];
    for (unsigned c = 1; c < FED_CLASSES; c++)
        largest = z[c] > largest ? z[c] : largest;
    float sum = 0.0f;
    for (unsigned c = 0; c < FED_CLASSES; c++)
        sum += expf(z[c] - largest);
    *largest_out = largest;
    return logf(sum);
}

/* ---- kernels: one thread per output element ------------------------------------------------- */

#define FED_ELEMENT() (blockIdx.x * blockDim.x + threadIdx.x)

/* prob[b][c] = softmax(W x_b + b)_c for the batch's rows b < rows (x: the batch's first row) */
extern "C" __global__ void fed_forward(const float *x, const float *w, float *prob, unsigned rows)
{
    unsigned b = FED_ELEMENT();
    if (b >= rows)
        return;
    float z[FED_CLASSES], largest;
    fed_logits(x + (size_t)b * FED_FEATURES, w, z);
    float log_sum = fed_log_sum_exp(z, &largest);
    for (unsigned c = 0; c < FED_CLASSES; c++)
        prob[(size_t)b * FED_CLASSES + c] = expf(z[c] - largest - log_sum);
}

/* the cross-entropy's gradient, mean over the batch, of parameter e = c * (FED_FEATURES + 1) + j:
 * sum_b (prob[b][c] - [y_b == c]) * (j < FED_FEATURES ? x_b[j] : 1) / rows */
extern "C" __global__ void fed_gradient(const float *x, const unsigned *labels, const float *prob, float *gradient,
                                        unsigned rows)
{
    unsigned e = FED_ELEMENT();
    if (e >= FED_PARAMETERS)
        return;
    unsigned c = e / (FED_FEATURES + 1), j = e % (FED_FEATURES + 1);
    float sum = 0.0f;
    for (unsigned b = 0; b < rows; b++) {
        float delta = prob[(size_t)b * FED_CLASSES + c] - (labels[b] == c ? 1.0f : 0.0f);
        sum += delta * (j < FED_FEATURES ? x[(size_t)b * FED_FEATURES + j] : 1.0f);
    }
    gradient[e] = sum / (float)rows;
}

/* the SGD step of FedProx's local objective: w -= lr * (gradient + mu * (w - w_global))
 * (mu = 0: FedAvg's plain step, the same bits) */
extern "C" __global__ void fed_update(float *w, const float *gradient, const float *global, float learning_rate,
                                      float mu)
{
    unsigned e = FED_ELEMENT();
    if (e >= FED_PARAMETERS)
        return;
    w[e] = w[e] - learning_rate * (gradient[e] + mu * (w[e] - global[e]));
}

/* loss[s] = -log softmax(W x_s + b)_{y_s}, for s < rows */
extern "C" __global__ void fed_loss(const float *x, const unsigned *labels, const float *w, float *loss,
                                    unsigned rows)
{
    unsigned s = FED_ELEMENT();
    if (s >= rows)
        return;
    float z[FED_CLASSES], largest;
    fed_logits(x + (size_t)s * FED_FEATURES, w, z);
    float log_sum = fed_log_sum_exp(z, &largest);
    loss[s] = log_sum - (z[labels[s]] - largest);
}

#if defined(SIMGPU_PACK)
/* ---- simgpu kernel pack ---------------------------------------------------------------------- */
#include "workload_pack.h"

static const simgpu_kernel fed_pack[] = {
    WORKLOAD_PACK_KERNEL(fed_forward, NULL),
    WORKLOAD_PACK_KERNEL(fed_gradient, NULL),
    WORKLOAD_PACK_KERNEL(fed_update, NULL),
    WORKLOAD_PACK_KERNEL(fed_loss, NULL),
};
WORKLOAD_PACK_EXPORT(fed_pack)

#elif !defined(__CUDACC__)
/* ---- host program (g++ only) ------------------------------------------------------------------ */
#include "fed_host.h"
#include "fed_salus.h"
#include "fed_sequential.h"

#include <getopt.h>

extern "C" const unsigned char salus_workload_fed_image[];

static void fed_usage(FILE *out)
{
    fprintf(out,
            "usage: salus-fed [options]\n"
            "Federated training (FedAvg, FedProx) of multinomial logistic regression (60 features,\n"
            "10 classes) on the FedProx paper's Synthetic(alpha, beta) data, through the CUDA driver API.\n"
            "\n"
            "  --fed fedavg|fedprox  FedAvg (stragglers dropped, no proximal term) or FedProx (partial work\n"
            "                        accepted, proximal term --mu) (default fedavg)\n"
            "  --mu M                FedProx's proximal weight (default 0; fedavg: 0 only)\n"
            "  --local-epochs E      epochs of local SGD of a client on time (default 20)\n"
            "  --clients N           clients (default 30)\n"
            "  --per-round K         clients chosen per round (default 10)\n"
            "  --stragglers F        fraction of each round's clients that are late: they do a random\n"
            "                        1 .. E-1 epochs (default 0)\n"
            "  --rounds R            rounds (default 20)\n"
            "  --alpha A, --beta B   Synthetic(alpha, beta) (default 1, 1)\n"
            "  --seed S              data, selection and stragglers, 0 .. 2^32-1 (default 1)\n"
            "  --batch N, --lr X     local minibatch and learning rate (default 10, 0.01)\n"
            "  --sequential          run all the clients in this process, one after another, with the\n"
            "                        server's rule in-process (no salus)\n"
            "  --rank R, --world N   salus mode: this client and the group's size (default\n"
            "                        SALUS_RANK/SALUS_WORLD); the world must be --clients\n"
            "  --table NAME          salus mode: the federated table (default fed-w)\n"
            "  --dump-weights FILE   the final weights, one %%.9g a line (c-major: W[c][0..59], b[c])\n"
            "  --help                this text\n"
            "\n"
            "Prints 'round=<r> loss=<v> accepted=<a>' for r = 0 .. R (the training loss over all clients'\n"
            "data, weighted by samples, of the global model after r rounds; the clients accepted in round\n"
            "r-1), then 'fed_done ...' and 'fed_weights_digest n= sum= l2='.\n"
            "Exit status: 0 done, 1 a driver or salus call failed (named on stderr), 2 bad usage.\n");
}

static void fed_parse(int argc, char **argv, fed_config *config)
{
    enum { FED = 256, MU, EPOCHS, CLIENTS, PER_ROUND, STRAGGLERS, ROUNDS, ALPHA, BETA, SEED, BATCH, LR, SEQUENTIAL,
           RANK, WORLD, TABLE, DUMP_WEIGHTS, HELP };
    static const struct option options[] = {
        {"fed", required_argument, NULL, FED},
        {"mu", required_argument, NULL, MU},
        {"local-epochs", required_argument, NULL, EPOCHS},
        {"clients", required_argument, NULL, CLIENTS},
        {"per-round", required_argument, NULL, PER_ROUND},
        {"stragglers", required_argument, NULL, STRAGGLERS},
        {"rounds", required_argument, NULL, ROUNDS},
        {"alpha", required_argument, NULL, ALPHA},
        {"beta", required_argument, NULL, BETA},
        {"seed", required_argument, NULL, SEED},
        {"batch", required_argument, NULL, BATCH},
        {"lr", required_argument, NULL, LR},
        {"sequential", no_argument, NULL, SEQUENTIAL},
        {"rank", required_argument, NULL, RANK},
        {"world", required_argument, NULL, WORLD},
        {"table", required_argument, NULL, TABLE},
        {"dump-weights", required_argument, NULL, DUMP_WEIGHTS},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0},
    };
    *config = fed_config{};
    config->epochs = 20;
    config->clients = 30;
    config->per_round = 10;
    config->rounds = 20;
    config->alpha = config->beta = 1.0;
    config->seed = 1;
    config->batch = 10;
    config->learning_rate = 0.01f;
    config->rank = config->world = -1;
    config->table = "fed-w";
    const char *fed = "fedavg";
    int option;
    while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *name = option >= FED && option <= HELP ? options[option - FED].name : "";
        switch (option) {
        case FED: fed = optarg; break;
        case MU: config->mu = (float)workload_parse_double(name, optarg, 0.0, 1e6); break;
        case EPOCHS: config->epochs = (uint32_t)workload_parse_unsigned(name, optarg, 1, PS_FED_MAX_EPOCHS); break;
        case CLIENTS: config->clients = (uint32_t)workload_parse_unsigned(name, optarg, 1, PS_FED_MAX_CLIENTS); break;
        case PER_ROUND: config->per_round = (uint32_t)workload_parse_unsigned(name, optarg, 1, PS_FED_MAX_CLIENTS); break;
        case STRAGGLERS: config->stragglers = workload_parse_double(name, optarg, 0.0, 1.0); break;
        case ROUNDS: config->rounds = (uint32_t)workload_parse_unsigned(name, optarg, 1, 100000); break;
        case ALPHA: config->alpha = workload_parse_double(name, optarg, 0.0, 100.0); break;
        case BETA: config->beta = workload_parse_double(name, optarg, 0.0, 100.0); break;
        case SEED: config->seed = (uint32_t)workload_parse_unsigned(name, optarg, 0, UINT32_MAX); break;
        case BATCH: config->batch = (uint32_t)workload_parse_unsigned(name, optarg, 1, 4096); break;
        case LR: config->learning_rate = (float)workload_parse_double(name, optarg, 0.0, 1e3); break;
        case SEQUENTIAL: config->sequential = true; break;
        case RANK: config->rank = (long)workload_parse_unsigned(name, optarg, 0, PS_FED_MAX_CLIENTS - 1); break;
        case WORLD: config->world = (long)workload_parse_unsigned(name, optarg, 1, PS_FED_MAX_CLIENTS); break;
        case TABLE: config->table = optarg; break;
        case DUMP_WEIGHTS: config->dump_weights = optarg; break;
        case HELP: fed_usage(stdout); exit(0);
        default: fed_usage(stderr); exit(WORKLOAD_EXIT_USAGE);
        }
    }
    if (optind < argc)
        workload_usage_error("unexpected argument '%s'", argv[optind]);
    if (strcmp(fed, "fedavg") == 0)
        config->policy = PS_FED_DROP;
    else if (strcmp(fed, "fedprox") == 0)
        config->policy = PS_FED_PARTIAL;
    else
        workload_usage_error("--fed: expected 'fedavg' or 'fedprox', got '%s'", fed);
    config->fed_name = fed;
    if (config->policy == PS_FED_DROP && config->mu != 0.0f)
        workload_usage_error("--mu %g: FedAvg has no proximal term (use --fed fedprox)", (double)config->mu);
    if (config->per_round > config->clients)
        workload_usage_error("--per-round %u is more than the %u clients", config->per_round, config->clients);
}

int main(int argc, char **argv)
{
    workload_program = "salus-fed";
    fed_config config;
    fed_parse(argc, argv, &config);
    fed_spec_make(&config);
    if (config.sequential) {
        if (config.rank >= 0 || config.world >= 0)
            workload_usage_error("--rank/--world are the salus mode's: not with --sequential");
        fed_run_sequential(&config, salus_workload_fed_image);
    } else {
        fed_run_salus(&config, salus_workload_fed_image);
    }
    return 0;
}
#endif
