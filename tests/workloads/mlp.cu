/* salus-mlp: trains a small MLP (inputs -> hidden ReLU -> outputs, mean squared
 * error) with plain SGD on a deterministic synthetic regression data set.
 *
 * One source, three builds (see README.md):
 *   nvcc --fatbin        the kernels below, for real GPUs (embedded in the program)
 *   g++                  the host program (driver API only; also --cpu-reference)
 *   g++ -DSIMGPU_PACK    the same kernels as a simgpu kernel pack
 *
 * Determinism: every value a kernel computes comes from one of the mlp_*_value()
 * functions below, which the CPU reference calls too, so both sides evaluate the
 * same float expressions in the same order (fixed-order reductions, one thread per
 * output element). */
#include <stddef.h>

/* ---- per-element math, shared by the kernels and the CPU reference --------------- */

/* hidden unit j of one sample: relu(b1[j] + sum_i x[i] * w1[j][i]) */
__host__ __device__ static inline float mlp_hidden_value(const float *x_row, const float *w1_row, float bias,
                                                         unsigned inputs)
{
    float z = bias;
    for (unsigned i = 0; i < inputs; i++)
        z += x_row[i] * w1_row[i];
    return z > 0.0f ? z : 0.0f;
}

/* output unit k of one sample: b2[k] + sum_j h[j] * w2[k][j] */
__host__ __device__ static inline float mlp_output_value(const float *h_row, const float *w2_row, float bias,
                                                         unsigned hidden)
{
    float z = bias;
    for (unsigned j = 0; j < hidden; j++)
        z += h_row[j] * w2_row[j];
    return z;
}

/* d loss / d y for loss = sum over the batch of 0.5 * |y - t|^2, divided by batch */
__host__ __device__ static inline float mlp_output_delta_value(float y, float t, unsigned batch)
{
    return (y - t) / (float)batch;
}

/* d loss / d (hidden pre-activation) of unit j of row b */
__host__ __device__ static inline float mlp_hidden_delta_value(const float *dy_row, const float *w2, float h,
                                                               unsigned j, unsigned hidden, unsigned outputs)
{
    if (!(h > 0.0f))
        return 0.0f;
    float g = 0.0f;
    for (unsigned k = 0; k < outputs; k++)
        g += dy_row[k] * w2[(size_t)k * hidden + j];
    return g;
}

/* gradient of weight [unit][i] (i < fan_in) or of bias [unit] (i == fan_in):
 * sum over the batch rows b of delta[b][unit] * activation(b)[i]. The activation
 * row of b is activations + row_of(b) * fan_in, with row_of(b) = (first_row + b) %
 * rows, which covers both the hidden layer (rows == batch) and the input samples. */
__host__ __device__ static inline float mlp_weight_gradient_value(const float *delta, unsigned unit, unsigned units,
                                                                  const float *activations, unsigned i,
                                                                  unsigned fan_in, unsigned first_row,
                                                                  unsigned rows, unsigned batch)
{
    float g = 0.0f;
    for (unsigned b = 0; b < batch; b++) {
        float a = i < fan_in ? activations[(size_t)((first_row + b) % rows) * fan_in + i] : 1.0f;
        g += delta[(size_t)b * units + unit] * a;
    }
    return g;
}

__host__ __device__ static inline float mlp_sgd_value(float weight, float gradient, float learning_rate)
{
    return weight - learning_rate * gradient;
}

/* mean over the batch of 0.5 * |y - t|^2, summed in row-major order */
__host__ __device__ static inline float mlp_loss_value(const float *y, const float *targets, unsigned first_sample,
                                                       unsigned samples, unsigned batch, unsigned outputs)
{
    float sum = 0.0f;
    for (unsigned b = 0; b < batch; b++) {
        const float *t_row = targets + (size_t)((first_sample + b) % samples) * outputs;
        for (unsigned k = 0; k < outputs; k++) {
            float d = y[(size_t)b * outputs + k] - t_row[k];
            sum += 0.5f * d * d;
        }
    }
    return sum / (float)batch;
}

/* ---- kernels: one thread per output element ---------------------------------------- */

#define MLP_ELEMENT() (blockIdx.x * blockDim.x + threadIdx.x)

/* h[b][j] for b < batch, j < hidden */
extern "C" __global__ void mlp_hidden_forward(const float *x, const float *w1, const float *b1, float *h,
                                              unsigned first_sample, unsigned samples, unsigned batch,
                                              unsigned inputs, unsigned hidden)
{
    unsigned e = MLP_ELEMENT();
    if (e >= batch * hidden)
        return;
    unsigned b = e / hidden, j = e % hidden;
    h[e] = mlp_hidden_value(x + (size_t)((first_sample + b) % samples) * inputs, w1 + (size_t)j * inputs, b1[j],
                            inputs);
}

/* y[b][k] for b < batch, k < outputs */
extern "C" __global__ void mlp_output_forward(const float *h, const float *w2, const float *b2, float *y,
                                              unsigned batch, unsigned hidden, unsigned outputs)
{
    unsigned e = MLP_ELEMENT();
    if (e >= batch * outputs)
        return;
    unsigned b = e / outputs, k = e % outputs;
    y[e] = mlp_output_value(h + (size_t)b * hidden, w2 + (size_t)k * hidden, b2[k], hidden);
}

/* one thread: *loss = the batch's loss */
extern "C" __global__ void mlp_loss(const float *y, const float *targets, float *loss, unsigned first_sample,
                                    unsigned samples, unsigned batch, unsigned outputs)
{
    if (MLP_ELEMENT() != 0)
        return;
    *loss = mlp_loss_value(y, targets, first_sample, samples, batch, outputs);
}

/* dy[b][k] */
extern "C" __global__ void mlp_output_delta(const float *y, const float *targets, float *dy,
                                            unsigned first_sample, unsigned samples, unsigned batch,
                                            unsigned outputs)
{
    unsigned e = MLP_ELEMENT();
    if (e >= batch * outputs)
        return;
    unsigned b = e / outputs, k = e % outputs;
    dy[e] = mlp_output_delta_value(y[e], targets[(size_t)((first_sample + b) % samples) * outputs + k], batch);
}

/* dh[b][j], from the weights w2 before this iteration's update */
extern "C" __global__ void mlp_hidden_delta(const float *dy, const float *w2, const float *h, float *dh,
                                            unsigned batch, unsigned hidden, unsigned outputs)
{
    unsigned e = MLP_ELEMENT();
    if (e >= batch * hidden)
        return;
    unsigned b = e / hidden, j = e % hidden;
    dh[e] = mlp_hidden_delta_value(dy + (size_t)b * outputs, w2, h[e], j, hidden, outputs);
}

/* SGD step of one layer, weight [unit][i] (i < fan_in) or bias [unit] (i == fan_in):
 * element e in [0, units * (fan_in + 1)). Each element reads only its own weight, so
 * the update is in place. */
extern "C" __global__ void mlp_layer_update(float *weights, float *biases, const float *delta,
                                            const float *activations, unsigned first_row, unsigned rows,
                                            unsigned batch, unsigned fan_in, unsigned units, float learning_rate)
{
    unsigned e = MLP_ELEMENT();
    if (e >= units * (fan_in + 1))
        return;
    unsigned unit = e / (fan_in + 1), i = e % (fan_in + 1);
    float g = mlp_weight_gradient_value(delta, unit, units, activations, i, fan_in, first_row, rows, batch);
    float *weight = i < fan_in ? &weights[(size_t)unit * fan_in + i] : &biases[unit];
    *weight = mlp_sgd_value(*weight, g, learning_rate);
}

/* Data-parallel training (--data-parallel): the gradient of one layer's weight or bias
 * e (as mlp_layer_update numbers them) into gradients[e], without the update ... */
extern "C" __global__ void mlp_layer_gradient(float *gradients, const float *delta, const float *activations,
                                              unsigned first_row, unsigned rows, unsigned batch, unsigned fan_in,
                                              unsigned units)
{
    unsigned e = MLP_ELEMENT();
    if (e >= units * (fan_in + 1))
        return;
    unsigned unit = e / (fan_in + 1), i = e % (fan_in + 1);
    gradients[e] = mlp_weight_gradient_value(delta, unit, units, activations, i, fan_in, first_row, rows, batch);
}

/* ... and, once the ranks' gradients are summed, the SGD step with their mean:
 * gradient_sum * scale, scale = 1 / world */
extern "C" __global__ void mlp_layer_step(float *weights, float *biases, const float *gradient_sums,
                                          unsigned fan_in, unsigned units, float learning_rate, float scale)
{
    unsigned e = MLP_ELEMENT();
    if (e >= units * (fan_in + 1))
        return;
    unsigned unit = e / (fan_in + 1), i = e % (fan_in + 1);
    float *weight = i < fan_in ? &weights[(size_t)unit * fan_in + i] : &biases[unit];
    *weight = mlp_sgd_value(*weight, gradient_sums[e] * scale, learning_rate);
}

#if defined(SIMGPU_PACK)
/* ---- simgpu kernel pack: the kernels above, charged their measured CPU time ----------- */
#include "workload_pack.h"

static const simgpu_kernel mlp_pack[] = {
    WORKLOAD_PACK_KERNEL(mlp_hidden_forward, NULL), WORKLOAD_PACK_KERNEL(mlp_output_forward, NULL),
    WORKLOAD_PACK_KERNEL(mlp_loss, NULL),           WORKLOAD_PACK_KERNEL(mlp_output_delta, NULL),
    WORKLOAD_PACK_KERNEL(mlp_hidden_delta, NULL),   WORKLOAD_PACK_KERNEL(mlp_layer_update, NULL),
    WORKLOAD_PACK_KERNEL(mlp_layer_gradient, NULL), WORKLOAD_PACK_KERNEL(mlp_layer_step, NULL),
};
WORKLOAD_PACK_EXPORT(mlp_pack)

#elif !defined(__CUDACC__)
/* ---- host program (g++ only: nvcc compiles just the kernels) ---------------------------- */
#include "workload_host.h"

#include <getopt.h>
#include <unistd.h>

#include <vector>

#include "mlp_data_parallel.h"
#include "mlp_ps.h"

/* the kernels for real GPUs (a fatbin), or a placeholder where nvcc was missing */
extern "C" const unsigned char salus_workload_mlp_image[];

typedef struct mlp_config {
    unsigned long long seed;
    unsigned inputs, hidden, outputs, batch, samples, iterations, print_every;
    float learning_rate;
    bool keep_activations, async_alloc, cpu_reference;
    int device;
    double host_ms; /* host time per iteration before its GPU work (data loading) */
    bool device_given;
    const char *start_after; /* wait until this file exists before the first GPU work */
    const char *dump_weights; /* --dump-weights: the final weights, one a line */
    unsigned devices;         /* --devices N: data-parallel on this process's N devices; 0: no */
    long late_rank;           /* --late-rank R:FILE: rank R's first driver call once FILE exists; -1: none */
    const char *late_file;
} mlp_config;

static mlp_parallel parallel = {MLP_SINGLE, -1, -1, std::string(), NULL};
static mlp_ps ps = {false, std::string(), -1, -1, NULL, NULL, 0.0, 0, NULL, 1, 0, NULL, NULL, 0, 0, {}, {}};

/* data set and initial parameters, made on the host from the seed */
typedef struct mlp_model {
    std::vector<float> x, targets; /* samples x inputs, samples x outputs */
    std::vector<float> w1, b1;     /* hidden x inputs, hidden */
    std::vector<float> w2, b2;     /* outputs x hidden, outputs */
} mlp_model;

/* splitmix64: a tiny deterministic generator, identical on every platform */
static unsigned long long mlp_random_next(unsigned long long *state)
{
    unsigned long long z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1), exactly representable as a float */
static float mlp_random_uniform(unsigned long long *state)
{
    return (float)((double)(mlp_random_next(state) >> 40) / 8388608.0 - 1.0);
}

/* x uniform in [-1, 1); targets = tanh of a random linear "teacher" of x; He-style
 * uniform initial weights, zero biases */
static void mlp_model_make(const mlp_config *config, mlp_model *model)
{
    unsigned long long state = config->seed;
    model->x.resize((size_t)config->samples * config->inputs);
    for (float &value : model->x)
        value = mlp_random_uniform(&state);

    std::vector<float> teacher((size_t)config->outputs * config->inputs);
    for (float &value : teacher)
        value = mlp_random_uniform(&state);
    model->targets.resize((size_t)config->samples * config->outputs);
    double teacher_scale = 2.0 / sqrt((double)config->inputs);
    for (unsigned s = 0; s < config->samples; s++)
        for (unsigned k = 0; k < config->outputs; k++) {
            double z = 0.0;
            for (unsigned i = 0; i < config->inputs; i++)
                z += (double)teacher[(size_t)k * config->inputs + i] * model->x[(size_t)s * config->inputs + i];
            model->targets[(size_t)s * config->outputs + k] = (float)tanh(z * teacher_scale);
        }

    float w1_scale = (float)sqrt(3.0 / config->inputs), w2_scale = (float)sqrt(3.0 / config->hidden);
    model->w1.resize((size_t)config->hidden * config->inputs);
    for (float &value : model->w1)
        value = mlp_random_uniform(&state) * w1_scale;
    model->b1.assign(config->hidden, 0.0f);
    model->w2.resize((size_t)config->outputs * config->hidden);
    for (float &value : model->w2)
        value = mlp_random_uniform(&state) * w2_scale;
    model->b2.assign(config->outputs, 0.0f);
}

/* All parameters as one flat array in the gradient buffer's order (mlp_layer_gradient's
 * numbering): the output layer (per output k: w2[k][..], b2[k]), then the hidden layer (per
 * hidden unit j: w1[j][..], b1[j]). The parameter-server table's layout and --dump-weights'. */
static void mlp_flatten(const mlp_config *config, const mlp_model *model, std::vector<float> *flat)
{
    const unsigned inputs = config->inputs, hidden = config->hidden, outputs = config->outputs;
    flat->clear();
    flat->reserve((size_t)outputs * (hidden + 1) + (size_t)hidden * (inputs + 1));
    for (unsigned k = 0; k < outputs; k++) {
        flat->insert(flat->end(), model->w2.begin() + (ptrdiff_t)k * hidden,
                     model->w2.begin() + (ptrdiff_t)(k + 1) * hidden);
        flat->push_back(model->b2[k]);
    }
    for (unsigned j = 0; j < hidden; j++) {
        flat->insert(flat->end(), model->w1.begin() + (ptrdiff_t)j * inputs,
                     model->w1.begin() + (ptrdiff_t)(j + 1) * inputs);
        flat->push_back(model->b1[j]);
    }
}

static void mlp_unflatten(const mlp_config *config, const std::vector<float> &flat, mlp_model *model)
{
    const unsigned inputs = config->inputs, hidden = config->hidden, outputs = config->outputs;
    model->w2.resize((size_t)outputs * hidden);
    model->b2.resize(outputs);
    model->w1.resize((size_t)hidden * inputs);
    model->b1.resize(hidden);
    size_t e = 0;
    for (unsigned k = 0; k < outputs; k++) {
        for (unsigned j = 0; j < hidden; j++)
            model->w2[(size_t)k * hidden + j] = flat[e++];
        model->b2[k] = flat[e++];
    }
    for (unsigned j = 0; j < hidden; j++) {
        for (unsigned i = 0; i < inputs; i++)
            model->w1[(size_t)j * inputs + i] = flat[e++];
        model->b1[j] = flat[e++];
    }
}

/* whether iteration `iteration` (1-based) reports its loss */
static bool mlp_prints(const mlp_config *config, unsigned iteration)
{
    return iteration == config->iterations || (config->print_every != 0 && iteration % config->print_every == 0);
}

/* the batch of iteration `iteration` starts at this sample and wraps around; a rank of
 * a data-parallel run takes its `batch` rows of the world's global batch */
static unsigned mlp_first_sample(const mlp_config *config, unsigned iteration)
{
    unsigned long long world = ps.enabled ? (unsigned long long)ps.world
                               : parallel.mode == MLP_SINGLE ? 1
                                                             : (unsigned long long)parallel.world;
    unsigned long long rank = ps.enabled ? (unsigned long long)ps.rank
                              : parallel.mode == MLP_SINGLE ? 0
                                                            : (unsigned long long)parallel.rank;
    return (unsigned)(((unsigned long long)(iteration - 1) * world + rank) * config->batch % config->samples);
}

static void mlp_report(const mlp_config *config, unsigned iteration, float loss)
{
    if (config->print_every != 0 && iteration % config->print_every == 0)
        printf("iter=%u loss=%.9g\n", iteration, (double)loss);
    fflush(stdout);
}

static void mlp_report_end(const mlp_config *config, uint64_t elapsed_ns, float final_loss)
{
    double total_ms = (double)elapsed_ns / 1e6;
    printf("mlp_done iterations=%u total_ms=%.3f mean_iter_ms=%.4f\n", config->iterations, total_ms,
           total_ms / config->iterations);
    printf("final_loss=%.9g\n", (double)final_loss);
    fflush(stdout);
}

/* The same training steps in plain C++ on the host: no driver call at all. */
static void mlp_train_on_cpu(const mlp_config *config, mlp_model *model)
{
    const unsigned batch = config->batch, inputs = config->inputs, hidden = config->hidden,
                   outputs = config->outputs, samples = config->samples;
    std::vector<float> h((size_t)batch * hidden), y((size_t)batch * outputs), dy(y.size()), dh(h.size());
    float loss = 0.0f;
    uint64_t start_ns = workload_now_ns();

    for (unsigned iteration = 1; iteration <= config->iterations; iteration++) {
        unsigned first = mlp_first_sample(config, iteration);
        for (unsigned b = 0; b < batch; b++)
            for (unsigned j = 0; j < hidden; j++)
                h[(size_t)b * hidden + j] = mlp_hidden_value(&model->x[(size_t)((first + b) % samples) * inputs],
                                                             &model->w1[(size_t)j * inputs], model->b1[j], inputs);
        for (unsigned b = 0; b < batch; b++)
            for (unsigned k = 0; k < outputs; k++)
                y[(size_t)b * outputs + k] =
                    mlp_output_value(&h[(size_t)b * hidden], &model->w2[(size_t)k * hidden], model->b2[k], hidden);
        if (mlp_prints(config, iteration))
            loss = mlp_loss_value(y.data(), model->targets.data(), first, samples, batch, outputs);
        for (unsigned b = 0; b < batch; b++)
            for (unsigned k = 0; k < outputs; k++)
                dy[(size_t)b * outputs + k] = mlp_output_delta_value(
                    y[(size_t)b * outputs + k], model->targets[(size_t)((first + b) % samples) * outputs + k], batch);
        for (unsigned b = 0; b < batch; b++)
            for (unsigned j = 0; j < hidden; j++)
                dh[(size_t)b * hidden + j] = mlp_hidden_delta_value(&dy[(size_t)b * outputs], model->w2.data(),
                                                                    h[(size_t)b * hidden + j], j, hidden, outputs);
        /* output layer, then hidden layer, as the kernels run */
        for (unsigned k = 0; k < outputs; k++)
            for (unsigned j = 0; j <= hidden; j++) {
                float g = mlp_weight_gradient_value(dy.data(), k, outputs, h.data(), j, hidden, 0, batch, batch);
                float *weight = j < hidden ? &model->w2[(size_t)k * hidden + j] : &model->b2[k];
                *weight = mlp_sgd_value(*weight, g, config->learning_rate);
            }
        for (unsigned j = 0; j < hidden; j++)
            for (unsigned i = 0; i <= inputs; i++) {
                float g = mlp_weight_gradient_value(dh.data(), j, hidden, model->x.data(), i, inputs, first, samples,
                                                    batch);
                float *weight = i < inputs ? &model->w1[(size_t)j * inputs + i] : &model->b1[j];
                *weight = mlp_sgd_value(*weight, g, config->learning_rate);
            }
        if (mlp_prints(config, iteration))
            mlp_report(config, iteration, loss);
    }
    mlp_report_end(config, workload_now_ns() - start_ns, loss);
    std::vector<float> flat;
    mlp_flatten(config, model, &flat);
    mlp_weights_report(flat, config->dump_weights);
}

/* per-iteration buffers: what a framework without a caching allocator allocates and
 * frees every step */
typedef struct mlp_activations {
    CUdeviceptr h, y, dy, dh;
} mlp_activations;

static void mlp_activations_alloc(const workload_device *device, const mlp_config *config,
                                  mlp_activations *activations)
{
    size_t hidden_bytes = (size_t)config->batch * config->hidden * sizeof(float);
    size_t output_bytes = (size_t)config->batch * config->outputs * sizeof(float);
    activations->h = workload_alloc(device, hidden_bytes, config->async_alloc, "activations h");
    activations->y = workload_alloc(device, output_bytes, config->async_alloc, "activations y");
    activations->dy = workload_alloc(device, output_bytes, config->async_alloc, "gradients dy");
    activations->dh = workload_alloc(device, hidden_bytes, config->async_alloc, "gradients dh");
}

static void mlp_activations_free(const workload_device *device, const mlp_config *config,
                                 mlp_activations *activations)
{
    workload_free(device, activations->dh, config->async_alloc);
    workload_free(device, activations->dy, config->async_alloc);
    workload_free(device, activations->y, config->async_alloc);
    workload_free(device, activations->h, config->async_alloc);
    *activations = mlp_activations{};
}

static CUdeviceptr mlp_upload(const workload_device *device, const std::vector<float> &values, const char *name)
{
    CUdeviceptr pointer = workload_alloc(device, values.size() * sizeof(float), false, name);
    CHECK_CU(cuMemcpyHtoD(pointer, values.data(), values.size() * sizeof(float)));
    return pointer;
}

/* The training on the device, through the driver API. Parameters and data set stay
 * resident (persistent memory); activations come and go every iteration unless
 * --keep-activations. */
static void mlp_train_on_device(const mlp_config *config, const mlp_model *model)
{
    workload_device device;
    int ordinal = config->device;
    if (parallel.mode != MLP_SINGLE && parallel.rank == config->late_rank) { /* before any driver call */
        printf("late_rank rank=%ld file=%s\n", parallel.rank, config->late_file);
        fflush(stdout);
        for (unsigned waited_ms = 0; access(config->late_file, F_OK) != 0; waited_ms += 5) {
            if (waited_ms >= 600000)
                workload_usage_error("--late-rank: %s did not appear within 600 s", config->late_file);
            workload_sleep_ns(5000000);
        }
    }
    if (parallel.mode != MLP_SINGLE && !config->device_given) { /* rank r on device r % count */
        int count = 0;
        CHECK_CU(cuInit(0));
        CHECK_CU(cuDeviceGetCount(&count));
        ordinal = count > 0 ? (int)(parallel.rank % count) : 0;
    }
    workload_device_open(&device, ordinal, salus_workload_mlp_image);
    if (parallel.mode != MLP_SINGLE) {
        printf("data_parallel=%s rank=%ld world=%ld device=%d%s%s\n",
               parallel.mode == MLP_PARALLEL_MPI ? "mpi" : "simgpu", parallel.rank, parallel.world, ordinal,
               parallel.mode == MLP_PARALLEL_SIMGPU ? " comm=" : "",
               parallel.mode == MLP_PARALLEL_SIMGPU ? parallel.communicator.c_str() : "");
        fflush(stdout);
    }

    CUfunction hidden_forward, output_forward, loss_kernel, output_delta, hidden_delta, layer_update;
    CHECK_CU(cuModuleGetFunction(&hidden_forward, device.module, "mlp_hidden_forward"));
    CHECK_CU(cuModuleGetFunction(&output_forward, device.module, "mlp_output_forward"));
    CHECK_CU(cuModuleGetFunction(&loss_kernel, device.module, "mlp_loss"));
    CHECK_CU(cuModuleGetFunction(&output_delta, device.module, "mlp_output_delta"));
    CHECK_CU(cuModuleGetFunction(&hidden_delta, device.module, "mlp_hidden_delta"));
    CHECK_CU(cuModuleGetFunction(&layer_update, device.module, "mlp_layer_update"));
    CUfunction layer_gradient = NULL, layer_step = NULL;
    /* data-parallel and parameter-server modes: the gradients apart from the step */
    const bool gradients_apart = parallel.mode != MLP_SINGLE || ps.enabled;
    if (gradients_apart) {
        CHECK_CU(cuModuleGetFunction(&layer_gradient, device.module, "mlp_layer_gradient"));
        CHECK_CU(cuModuleGetFunction(&layer_step, device.module, "mlp_layer_step"));
    }
    if (parallel.mode == MLP_PARALLEL_SIMGPU) /* a simgpu kernel pack's, not in the image */
        CHECK_CU(cuModuleGetFunction(&parallel.allreduce, device.module, "allreduce_sum_f32"));

    if (config->start_after) { /* a test's hook: it decides when each rank's GPU work starts */
        printf("start_wait file=%s\n", config->start_after);
        fflush(stdout);
        /* bounded: a test that went away must not leave the rank waiting for ever */
        for (unsigned waited_ms = 0; access(config->start_after, F_OK) != 0; waited_ms += 5) {
            if (waited_ms >= 600000)
                workload_usage_error("--start-after: %s did not appear within 600 s", config->start_after);
            workload_sleep_ns(5000000);
        }
    }
    CUdeviceptr x = mlp_upload(&device, model->x, "data set x"),
                targets = mlp_upload(&device, model->targets, "data set targets");
    CUdeviceptr w1 = mlp_upload(&device, model->w1, "weights w1"), b1 = mlp_upload(&device, model->b1, "biases b1");
    CUdeviceptr w2 = mlp_upload(&device, model->w2, "weights w2"), b2 = mlp_upload(&device, model->b2, "biases b2");
    CUdeviceptr loss_on_device = workload_alloc(&device, sizeof(float), false, "loss");
    /* data-parallel: one buffer of sums, the output layer's gradients, the hidden layer's, the loss */
    const unsigned long long output_parameters = (unsigned long long)config->outputs * (config->hidden + 1),
                             hidden_parameters = (unsigned long long)config->hidden * (config->inputs + 1),
                             sum_count = output_parameters + hidden_parameters + 1;
    CUdeviceptr sums = 0, output_sums = 0, hidden_sums = 0;
    std::vector<float> host_sums;
    float scale = parallel.mode == MLP_SINGLE ? 1.0f : 1.0f / (float)parallel.world;
    /* parameter server: W0 flat, then each iteration's weights (flat, and as layers) */
    std::vector<float> ps_weights, ps_losses;
    mlp_model ps_layers;
    if (ps.enabled) {
        std::vector<float> initial;
        mlp_flatten(config, model, &initial);
        mlp_ps_open(&ps, initial, config->learning_rate);
    }
    if (gradients_apart) {
        sums = workload_alloc(&device, sum_count * sizeof(float), false, "gradient sums");
        output_sums = sums;
        hidden_sums = sums + output_parameters * sizeof(float);
        loss_on_device = sums + (output_parameters + hidden_parameters) * sizeof(float);
    }

    unsigned batch = config->batch, inputs = config->inputs, hidden = config->hidden, outputs = config->outputs,
             samples = config->samples, zero = 0;
    float learning_rate = config->learning_rate, loss = 0.0f;
    mlp_activations a{};
    if (config->keep_activations)
        mlp_activations_alloc(&device, config, &a);
    uint64_t start_ns = workload_now_ns();

    /* --ps: a restored run continues at the tables' clock + 1, and may stop early (mlp_ps.h) */
    const unsigned first_iteration = ps.enabled ? ps.first : 1, last_iteration = ps.enabled ? ps.last : config->iterations;
    for (unsigned iteration = first_iteration; iteration <= last_iteration; iteration++) {
        unsigned first = mlp_first_sample(config, iteration);
        if (config->host_ms > 0)
            workload_sleep_ns((uint64_t)(config->host_ms * 1e6));
        if (!config->keep_activations)
            mlp_activations_alloc(&device, config, &a);
        if (ps.enabled) { /* this clock's weights: W0 + the table as this sync mode reads it */
            mlp_ps_pull(&ps, &ps_weights);
            mlp_unflatten(config, ps_weights, &ps_layers);
            CHECK_CU(cuMemcpyHtoD(w1, ps_layers.w1.data(), ps_layers.w1.size() * sizeof(float)));
            CHECK_CU(cuMemcpyHtoD(b1, ps_layers.b1.data(), ps_layers.b1.size() * sizeof(float)));
            CHECK_CU(cuMemcpyHtoD(w2, ps_layers.w2.data(), ps_layers.w2.size() * sizeof(float)));
            CHECK_CU(cuMemcpyHtoD(b2, ps_layers.b2.data(), ps_layers.b2.size() * sizeof(float)));
        }

        void *hidden_forward_args[] = {&x, &w1, &b1, &a.h, &first, &samples, &batch, &inputs, &hidden};
        workload_launch_1d(&device, hidden_forward, batch * hidden, hidden_forward_args);
        void *output_forward_args[] = {&a.h, &w2, &b2, &a.y, &batch, &hidden, &outputs};
        workload_launch_1d(&device, output_forward, batch * outputs, output_forward_args);
        if (ps.enabled || mlp_prints(config, iteration)) { /* ps: every clock's loss goes to "mlp-loss" */
            void *loss_args[] = {&a.y, &targets, &loss_on_device, &first, &samples, &batch, &outputs};
            CHECK_CU(cuLaunchKernel(loss_kernel, 1, 1, 1, 1, 1, 1, 0, device.stream, loss_args, NULL));
        } else if (gradients_apart) { /* the summed loss slot must not grow */
            CHECK_CU(cuMemsetD32Async(loss_on_device, 0, 1, device.stream));
        }
        void *output_delta_args[] = {&a.y, &targets, &a.dy, &first, &samples, &batch, &outputs};
        workload_launch_1d(&device, output_delta, batch * outputs, output_delta_args);
        void *hidden_delta_args[] = {&a.dy, &w2, &a.h, &a.dh, &batch, &hidden, &outputs};
        workload_launch_1d(&device, hidden_delta, batch * hidden, hidden_delta_args);
        if (ps.enabled) { /* gradients to the host, pushed; the servers make the step */
            void *output_gradient_args[] = {&output_sums, &a.dy, &a.h, &zero, &batch, &batch, &hidden, &outputs};
            workload_launch_1d(&device, layer_gradient, outputs * (hidden + 1), output_gradient_args);
            void *hidden_gradient_args[] = {&hidden_sums, &a.dh, &x, &first, &samples, &batch, &inputs, &hidden};
            workload_launch_1d(&device, layer_gradient, hidden * (inputs + 1), hidden_gradient_args);
        } else if (parallel.mode == MLP_SINGLE) {
            void *output_update_args[] = {&w2,   &b2,     &a.dy,   &a.h,    &zero,
                                          &batch, &batch, &hidden, &outputs, &learning_rate};
            workload_launch_1d(&device, layer_update, outputs * (hidden + 1), output_update_args);
            void *hidden_update_args[] = {&w1,    &b1,     &a.dh,   &x,      &first,
                                          &samples, &batch, &inputs, &hidden, &learning_rate};
            workload_launch_1d(&device, layer_update, hidden * (inputs + 1), hidden_update_args);
        } else { /* gradients, their sum over the ranks, then the step with their mean */
            void *output_gradient_args[] = {&output_sums, &a.dy, &a.h, &zero, &batch, &batch, &hidden, &outputs};
            workload_launch_1d(&device, layer_gradient, outputs * (hidden + 1), output_gradient_args);
            void *hidden_gradient_args[] = {&hidden_sums, &a.dh, &x, &first, &samples, &batch, &inputs, &hidden};
            workload_launch_1d(&device, layer_gradient, hidden * (inputs + 1), hidden_gradient_args);
            mlp_parallel_allreduce(&parallel, &device, sums, sum_count, &host_sums);
            void *output_step_args[] = {&w2, &b2, &output_sums, &hidden, &outputs, &learning_rate, &scale};
            workload_launch_1d(&device, layer_step, outputs * (hidden + 1), output_step_args);
            void *hidden_step_args[] = {&w1, &b1, &hidden_sums, &inputs, &hidden, &learning_rate, &scale};
            workload_launch_1d(&device, layer_step, hidden * (inputs + 1), hidden_step_args);
        }

        if (config->async_alloc && !config->keep_activations)
            mlp_activations_free(&device, config, &a);
        CHECK_CU(cuStreamSynchronize(device.stream));
        if (!config->async_alloc && !config->keep_activations)
            mlp_activations_free(&device, config, &a);
        if (ps.enabled) { /* the gradient and this rank's loss */
            host_sums.resize(sum_count);
            CHECK_CU(cuMemcpyDtoH(host_sums.data(), sums, sum_count * sizeof(float)));
            float rank_loss = host_sums.back();
            host_sums.pop_back();
            mlp_ps_push(&ps, &host_sums, rank_loss, iteration);
        } else if (mlp_prints(config, iteration)) {
            CHECK_CU(cuMemcpyDtoH(&loss, loss_on_device, sizeof loss));
            loss *= scale; /* data-parallel: the sum of the ranks' means -> the global batch's mean */
            mlp_report(config, iteration, loss);
        }
    }
    std::vector<float> final_weights;
    if (ps.enabled) { /* every clock of every rank, then the losses as the other modes print them */
        mlp_ps_finish(&ps, &final_weights, &ps_losses);
        for (unsigned iteration = 1; iteration <= ps.last; iteration++)
            if (mlp_prints(config, iteration))
                mlp_report(config, iteration, ps_losses[iteration - 1]);
        loss = ps_losses.back();
    }
    uint64_t elapsed_ns = workload_now_ns() - start_ns;

    if (config->keep_activations) {
        mlp_activations_free(&device, config, &a);
        CHECK_CU(cuStreamSynchronize(device.stream));
    }
    if (!ps.enabled) { /* the final weights from the device */
        mlp_model layers;
        layers.w1.resize((size_t)config->hidden * config->inputs);
        layers.b1.resize(config->hidden);
        layers.w2.resize((size_t)config->outputs * config->hidden);
        layers.b2.resize(config->outputs);
        CHECK_CU(cuMemcpyDtoH(layers.w1.data(), w1, layers.w1.size() * sizeof(float)));
        CHECK_CU(cuMemcpyDtoH(layers.b1.data(), b1, layers.b1.size() * sizeof(float)));
        CHECK_CU(cuMemcpyDtoH(layers.w2.data(), w2, layers.w2.size() * sizeof(float)));
        CHECK_CU(cuMemcpyDtoH(layers.b2.data(), b2, layers.b2.size() * sizeof(float)));
        mlp_flatten(config, &layers, &final_weights);
    }
    CUdeviceptr persistent[] = {x, targets, w1, b1, w2, b2, gradients_apart ? sums : loss_on_device};
    for (CUdeviceptr pointer : persistent)
        CHECK_CU(cuMemFree(pointer));
    workload_device_close(&device);
    mlp_report_end(config, elapsed_ns, loss);
    mlp_weights_report(final_weights, config->dump_weights);
}

/* --devices N: one process trains data-parallel on its devices 0 .. N - 1 (a program run with
 * salusctl run --gpus N). Device k is rank k of world N: it takes rows k*batch.. of the global
 * batch and computes its gradients; they are summed on the host in device order and every
 * device makes the step with their mean, so that all hold the same weights. Parameters and
 * data set stay resident on every device; activations come and go every iteration. */
typedef struct mlp_replica {
    workload_device device;
    CUfunction hidden_forward, output_forward, loss_kernel, output_delta, hidden_delta;
    CUfunction layer_gradient, layer_step;
    CUdeviceptr x, targets, w1, b1, w2, b2, sums; /* sums: gradients (output, hidden), loss */
    mlp_activations a;
    std::vector<float> host_sums;
} mlp_replica;

static void mlp_replica_open(mlp_replica *r, int ordinal, const mlp_model *model, unsigned long long sum_count)
{
    workload_device_open(&r->device, ordinal, salus_workload_mlp_image);
    static const char *const names[] = {"mlp_hidden_forward", "mlp_output_forward", "mlp_loss",
                                        "mlp_output_delta",   "mlp_hidden_delta",   "mlp_layer_gradient",
                                        "mlp_layer_step"};
    CUfunction *functions[] = {&r->hidden_forward, &r->output_forward, &r->loss_kernel, &r->output_delta,
                               &r->hidden_delta,   &r->layer_gradient, &r->layer_step};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        CHECK_CU(cuModuleGetFunction(functions[i], r->device.module, names[i]));
    r->x = mlp_upload(&r->device, model->x, "data set x");
    r->targets = mlp_upload(&r->device, model->targets, "data set targets");
    r->w1 = mlp_upload(&r->device, model->w1, "weights w1");
    r->b1 = mlp_upload(&r->device, model->b1, "biases b1");
    r->w2 = mlp_upload(&r->device, model->w2, "weights w2");
    r->b2 = mlp_upload(&r->device, model->b2, "biases b2");
    r->sums = workload_alloc(&r->device, sum_count * sizeof(float), false, "gradient sums");
    r->host_sums.resize(sum_count);
}

static void mlp_train_on_devices(const mlp_config *config, const mlp_model *model)
{
    const unsigned n = config->devices;
    unsigned batch = config->batch, inputs = config->inputs, hidden = config->hidden, outputs = config->outputs,
             samples = config->samples, zero = 0; /* (kernel arguments: not const) */
    const unsigned long long output_parameters = (unsigned long long)outputs * (hidden + 1),
                             hidden_parameters = (unsigned long long)hidden * (inputs + 1),
                             sum_count = output_parameters + hidden_parameters + 1;
    float learning_rate = config->learning_rate, scale = 1.0f / (float)n, loss = 0.0f;
    std::vector<mlp_replica> replicas(n);
    std::vector<float> total(sum_count);
    for (unsigned k = 0; k < n; k++)
        mlp_replica_open(&replicas[k], (int)k, model, sum_count);
    printf("data_parallel=devices world=%u\n", n);
    fflush(stdout);
    uint64_t start_ns = workload_now_ns();
    for (unsigned iteration = 1; iteration <= config->iterations; iteration++) {
        if (config->host_ms > 0)
            workload_sleep_ns((uint64_t)(config->host_ms * 1e6));
        for (unsigned k = 0; k < n; k++) { /* rank k's gradients and loss */
            mlp_replica *r = &replicas[k];
            CHECK_CU(cuCtxSetCurrent(r->device.context));
            mlp_activations_alloc(&r->device, config, &r->a);
            unsigned first = (unsigned)(((unsigned long long)(iteration - 1) * n + k) * batch % samples);
            CUdeviceptr output_sums = r->sums, hidden_sums = r->sums + output_parameters * sizeof(float),
                        loss_slot = r->sums + (output_parameters + hidden_parameters) * sizeof(float);
            void *hidden_forward_args[] = {&r->x, &r->w1, &r->b1, &r->a.h, &first, &samples, &batch, &inputs, &hidden};
            workload_launch_1d(&r->device, r->hidden_forward, batch * hidden, hidden_forward_args);
            void *output_forward_args[] = {&r->a.h, &r->w2, &r->b2, &r->a.y, &batch, &hidden, &outputs};
            workload_launch_1d(&r->device, r->output_forward, batch * outputs, output_forward_args);
            if (mlp_prints(config, iteration)) {
                void *loss_args[] = {&r->a.y, &r->targets, &loss_slot, &first, &samples, &batch, &outputs};
                CHECK_CU(cuLaunchKernel(r->loss_kernel, 1, 1, 1, 1, 1, 1, 0, r->device.stream, loss_args, NULL));
            } else {
                CHECK_CU(cuMemsetD32Async(loss_slot, 0, 1, r->device.stream));
            }
            void *output_delta_args[] = {&r->a.y, &r->targets, &r->a.dy, &first, &samples, &batch, &outputs};
            workload_launch_1d(&r->device, r->output_delta, batch * outputs, output_delta_args);
            void *hidden_delta_args[] = {&r->a.dy, &r->w2, &r->a.h, &r->a.dh, &batch, &hidden, &outputs};
            workload_launch_1d(&r->device, r->hidden_delta, batch * hidden, hidden_delta_args);
            void *output_gradient_args[] = {&output_sums, &r->a.dy, &r->a.h, &zero, &batch, &batch, &hidden, &outputs};
            workload_launch_1d(&r->device, r->layer_gradient, outputs * (hidden + 1), output_gradient_args);
            void *hidden_gradient_args[] = {&hidden_sums, &r->a.dh, &r->x, &first, &samples, &batch, &inputs, &hidden};
            workload_launch_1d(&r->device, r->layer_gradient, hidden * (inputs + 1), hidden_gradient_args);
        }
        for (unsigned k = 0; k < n; k++) { /* their sum, in device order */
            mlp_replica *r = &replicas[k];
            CHECK_CU(cuCtxSetCurrent(r->device.context));
            CHECK_CU(cuStreamSynchronize(r->device.stream));
            CHECK_CU(cuMemcpyDtoH(r->host_sums.data(), r->sums, sum_count * sizeof(float)));
            for (unsigned long long i = 0; i < sum_count; i++)
                total[i] = k == 0 ? r->host_sums[i] : total[i] + r->host_sums[i];
        }
        for (unsigned k = 0; k < n; k++) { /* every device's step with the mean */
            mlp_replica *r = &replicas[k];
            CUdeviceptr output_sums = r->sums, hidden_sums = r->sums + output_parameters * sizeof(float);
            CHECK_CU(cuCtxSetCurrent(r->device.context));
            CHECK_CU(cuMemcpyHtoDAsync(r->sums, total.data(), sum_count * sizeof(float), r->device.stream));
            void *output_step_args[] = {&r->w2, &r->b2, &output_sums, &hidden, &outputs, &learning_rate, &scale};
            workload_launch_1d(&r->device, r->layer_step, outputs * (hidden + 1), output_step_args);
            void *hidden_step_args[] = {&r->w1, &r->b1, &hidden_sums, &inputs, &hidden, &learning_rate, &scale};
            workload_launch_1d(&r->device, r->layer_step, hidden * (inputs + 1), hidden_step_args);
            CHECK_CU(cuStreamSynchronize(r->device.stream));
            mlp_activations_free(&r->device, config, &r->a);
        }
        if (mlp_prints(config, iteration)) {
            loss = total.back() * scale; /* the sum of the ranks' means -> the global batch's mean */
            mlp_report(config, iteration, loss);
        }
    }
    uint64_t elapsed_ns = workload_now_ns() - start_ns;
    mlp_model layers; /* the final weights, from device 0 (every device holds the same) */
    layers.w1.resize((size_t)hidden * inputs);
    layers.b1.resize(hidden);
    layers.w2.resize((size_t)outputs * hidden);
    layers.b2.resize(outputs);
    CHECK_CU(cuCtxSetCurrent(replicas[0].device.context));
    CHECK_CU(cuMemcpyDtoH(layers.w1.data(), replicas[0].w1, layers.w1.size() * sizeof(float)));
    CHECK_CU(cuMemcpyDtoH(layers.b1.data(), replicas[0].b1, layers.b1.size() * sizeof(float)));
    CHECK_CU(cuMemcpyDtoH(layers.w2.data(), replicas[0].w2, layers.w2.size() * sizeof(float)));
    CHECK_CU(cuMemcpyDtoH(layers.b2.data(), replicas[0].b2, layers.b2.size() * sizeof(float)));
    std::vector<float> final_weights;
    mlp_flatten(config, &layers, &final_weights);
    for (unsigned k = 0; k < n; k++) {
        mlp_replica *r = &replicas[k];
        CHECK_CU(cuCtxSetCurrent(r->device.context));
        CUdeviceptr persistent[] = {r->x, r->targets, r->w1, r->b1, r->w2, r->b2, r->sums};
        for (CUdeviceptr pointer : persistent)
            CHECK_CU(cuMemFree(pointer));
        workload_device_close(&r->device);
    }
    mlp_report_end(config, elapsed_ns, loss);
    mlp_weights_report(final_weights, config->dump_weights);
}

static void mlp_usage(FILE *out)
{
    fprintf(out,
            "usage: salus-mlp [options]\n"
            "Trains a small MLP (inputs -> hidden ReLU -> outputs, MSE loss) with SGD on a\n"
            "deterministic synthetic data set, through the CUDA driver API.\n"
            "\n"
            "  --seed N             data set and initial weights (default 1)\n"
            "  --inputs N           input features (default 32)\n"
            "  --hidden N           hidden units (default 64)\n"
            "  --outputs N          outputs (default 8)\n"
            "  --batch N            samples per iteration (default 32)\n"
            "  --samples N          data set size; batches wrap around (default 1024)\n"
            "  --iterations N       SGD steps (default 200)\n"
            "  --lr X               learning rate (default 0.05)\n"
            "  --print-every N      print 'iter=<n> loss=<v>' every N iterations, 0: never (default 10)\n"
            "  --keep-activations   allocate the activations once instead of every iteration\n"
            "  --async-alloc        allocate activations with cuMemAllocAsync/cuMemFreeAsync\n"
            "  --cpu-reference      the same math on the host, no driver calls\n"
            "  --device N           device ordinal (default 0)\n"
            "  --devices N          data-parallel in this one process on its devices 0..N-1 (as\n"
            "                       salusctl run --gpus N gives it): device k takes rows k*batch.. of\n"
            "                       the global batch; gradients summed on the host in device order\n"
            "  --host-ms X          host time per iteration before its GPU work, as data loading\n"
            "                       would take (default 0; not with --cpu-reference)\n"
            "  --data-parallel M    data-parallel training, gradients summed by M: 'simgpu' (the\n"
            "                       simgpu collective kernel) or 'mpi' (MPI_Allreduce; salus-mlp-mpi);\n"
            "                       --batch is per rank, rank r takes rows r*batch.. of the global batch\n"
            "  --rank R, --world N  this rank and the number of ranks (default: SALUS_RANK/SALUS_WORLD,\n"
            "                       then OMPI_COMM_WORLD_RANK/SIZE; with mpi: MPI's)\n"
            "  --start-after FILE   wait until FILE exists before the first GPU work (after the context\n"
            "                       and module; prints 'start_wait'): lets a test order the ranks' starts\n"
            "  --late-rank R:FILE   with --data-parallel: rank R makes its first driver call (after\n"
            "                       MPI_Init) once FILE exists: it registers with salusd after its peers\n"
            "  --comm NAME          the simgpu communicator (default: SALUS_GROUP, then salus-mlp);\n"
            "                       without --device, rank r uses device r %% count\n"
            "  --ps bsp|ssp:S|asp   parameter-server training under salus (tests/workloads/mlp_ps.h): the\n"
            "                       weights in the group's table 'mlp-w' (rule sgd:LR), each rank pulls,\n"
            "                       pushes its rows' gradient / world and clocks; --batch is per rank,\n"
            "                       rank and world as with --data-parallel\n"
            "  --ps-log FILE        one line per pull: 'read rank= clock= done= done_at_request= waited=\n"
            "                       waited_ns= t_ns='\n"
            "  --ps-slow-ms X       sleep X ms before each push (a slowed worker)\n"
            "  --ps-stop-at K       end after iteration K (as if --iterations K; a restored run then\n"
            "                       continues from a checkpoint: it starts at the tables' clock + 1)\n"
            "  --ps-dump-first FILE the table 'mlp-w' as the first pull read it, one %%.9g a line\n"
            "  --dump-weights FILE  the final weights, one %%.9g a line (the flat order of mlp_ps.h)\n"
            "  --help               this text\n"
            "\n"
            "Ends with 'mlp_done ...', 'final_loss=<v>' (the loss of the last iteration) and\n"
            "'mlp_weights_digest n=<parameters> sum=<v> l2=<v>' (of the final weights).\n"
            "Exit status: 0 done, 1 a driver call failed (named on stderr), 2 bad usage.\n");
}

static void mlp_parse(int argc, char **argv, mlp_config *config)
{
    enum { SEED = 256, INPUTS, HIDDEN, OUTPUTS, BATCH, SAMPLES, ITERATIONS, LR, PRINT_EVERY, KEEP, ASYNC, CPU,
           DEVICE, HOST_MS, DATA_PARALLEL, RANK, WORLD, COMM, START_AFTER, PS, PS_LOG, PS_SLOW_MS, DUMP_WEIGHTS,
           PS_STOP_AT, PS_DUMP_FIRST, DEVICES, LATE_RANK, HELP };
    static const struct option options[] = {
        {"seed", required_argument, NULL, SEED},
        {"inputs", required_argument, NULL, INPUTS},
        {"hidden", required_argument, NULL, HIDDEN},
        {"outputs", required_argument, NULL, OUTPUTS},
        {"batch", required_argument, NULL, BATCH},
        {"samples", required_argument, NULL, SAMPLES},
        {"iterations", required_argument, NULL, ITERATIONS},
        {"lr", required_argument, NULL, LR},
        {"print-every", required_argument, NULL, PRINT_EVERY},
        {"keep-activations", no_argument, NULL, KEEP},
        {"async-alloc", no_argument, NULL, ASYNC},
        {"cpu-reference", no_argument, NULL, CPU},
        {"device", required_argument, NULL, DEVICE},
        {"host-ms", required_argument, NULL, HOST_MS},
        {"data-parallel", required_argument, NULL, DATA_PARALLEL},
        {"rank", required_argument, NULL, RANK},
        {"world", required_argument, NULL, WORLD},
        {"comm", required_argument, NULL, COMM},
        {"start-after", required_argument, NULL, START_AFTER},
        {"late-rank", required_argument, NULL, LATE_RANK},
        {"ps", required_argument, NULL, PS},
        {"ps-log", required_argument, NULL, PS_LOG},
        {"ps-slow-ms", required_argument, NULL, PS_SLOW_MS},
        {"dump-weights", required_argument, NULL, DUMP_WEIGHTS},
        {"ps-stop-at", required_argument, NULL, PS_STOP_AT},
        {"ps-dump-first", required_argument, NULL, PS_DUMP_FIRST},
        {"devices", required_argument, NULL, DEVICES},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0},
    };
    const unsigned long long size_limit = 1u << 16;
    *config = mlp_config{1, 32, 64, 8, 32, 1024, 200, 10, 0.05f, false, false, false, 0, 0.0, false, NULL, NULL, 0, -1, NULL};
    int option;
    while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *name = option >= SEED && option <= HELP ? options[option - SEED].name : "";
        switch (option) {
        case SEED: config->seed = workload_parse_unsigned(name, optarg, 0, ULLONG_MAX); break;
        case INPUTS: config->inputs = (unsigned)workload_parse_unsigned(name, optarg, 1, size_limit); break;
        case HIDDEN: config->hidden = (unsigned)workload_parse_unsigned(name, optarg, 1, size_limit); break;
        case OUTPUTS: config->outputs = (unsigned)workload_parse_unsigned(name, optarg, 1, size_limit); break;
        case BATCH: config->batch = (unsigned)workload_parse_unsigned(name, optarg, 1, size_limit); break;
        case SAMPLES: config->samples = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 24); break;
        case ITERATIONS: config->iterations = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 30); break;
        case LR: config->learning_rate = (float)workload_parse_double(name, optarg, 0.0, 1e6); break;
        case PRINT_EVERY: config->print_every = (unsigned)workload_parse_unsigned(name, optarg, 0, 1u << 30); break;
        case KEEP: config->keep_activations = true; break;
        case ASYNC: config->async_alloc = true; break;
        case CPU: config->cpu_reference = true; break;
        case DEVICE:
            config->device = (int)workload_parse_unsigned(name, optarg, 0, 1023);
            config->device_given = true;
            break;
        case HOST_MS: config->host_ms = workload_parse_double(name, optarg, 0.0, 60000.0); break;
        case DATA_PARALLEL: mlp_parallel_select(&parallel, optarg); break;
        case RANK: parallel.rank = (long)workload_parse_unsigned(name, optarg, 0, 63); break;
        case WORLD: parallel.world = (long)workload_parse_unsigned(name, optarg, 1, 64); break;
        case COMM: parallel.communicator = optarg; break;
        case START_AFTER: config->start_after = optarg; break;
        case LATE_RANK: {
            const char *colon = strchr(optarg, ':');
            if (!colon || colon[1] == 0)
                workload_usage_error("--late-rank: R:FILE (a rank and the file it waits for), not '%s'", optarg);
            config->late_rank = (long)workload_parse_unsigned(name, std::string(optarg, (size_t)(colon - optarg)).c_str(), 0, 63);
            config->late_file = colon + 1;
            break;
        }
        case PS: mlp_ps_select(&ps, optarg); break;
        case PS_LOG: ps.log_path = optarg; break;
        case PS_SLOW_MS: ps.slow_ms = workload_parse_double(name, optarg, 0.0, 60000.0); break;
        case DUMP_WEIGHTS: config->dump_weights = optarg; break;
        case PS_STOP_AT: ps.stop_at = (unsigned)workload_parse_unsigned(name, optarg, 1, 1u << 30); break;
        case PS_DUMP_FIRST: ps.dump_first = optarg; break;
        case DEVICES: config->devices = (unsigned)workload_parse_unsigned(name, optarg, 1, 64); break;
        case HELP: mlp_usage(stdout); exit(0);
        default: mlp_usage(stderr); exit(WORKLOAD_EXIT_USAGE);
        }
    }
    if (optind < argc)
        workload_usage_error("unexpected argument '%s'", argv[optind]);
    /* element counts of the largest launches must stay well inside 32 bits */
    const unsigned long long element_limit = 1ull << 28;
    if ((unsigned long long)config->batch * config->hidden > element_limit ||
        (unsigned long long)config->hidden * (config->inputs + 1ull) > element_limit ||
        (unsigned long long)config->outputs * (config->hidden + 1ull) > element_limit ||
        (unsigned long long)config->samples * config->inputs > element_limit)
        workload_usage_error("sizes too large (each product of two sizes must stay under 2^28)");
}

int main(int argc, char **argv)
{
    workload_program = "salus-mlp";
    mlp_config config;
    mlp_parse(argc, argv, &config);
    if (config.cpu_reference && parallel.mode != MLP_SINGLE)
        workload_usage_error("--cpu-reference is a single process: not with --data-parallel");
    if (ps.enabled && (config.cpu_reference || parallel.mode != MLP_SINGLE))
        workload_usage_error("--ps: not with --cpu-reference or --data-parallel");
    if (ps.enabled) { /* --rank/--world are the parameter server's, not the data-parallel mode's */
        mlp_ps_start(&ps, parallel.rank, parallel.world, config.iterations);
        parallel.rank = parallel.world = -1;
    } else {
        mlp_ps_start(&ps, -1, -1, config.iterations);
    }
    if (config.devices && (config.cpu_reference || ps.enabled || parallel.mode != MLP_SINGLE ||
                           config.device_given || config.keep_activations || config.async_alloc ||
                           config.start_after))
        workload_usage_error("--devices: not with --cpu-reference, --ps, --data-parallel, --device, "
                             "--keep-activations, --async-alloc or --start-after");
    mlp_parallel_start(&parallel, &argc, &argv);
    mlp_model model;
    mlp_model_make(&config, &model);
    if (config.cpu_reference)
        mlp_train_on_cpu(&config, &model);
    else if (config.devices)
        mlp_train_on_devices(&config, &model);
    else
        mlp_train_on_device(&config, &model);
    mlp_parallel_finish(&parallel);
    return 0;
}
#endif
