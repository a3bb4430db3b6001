/* salus-sim: the command line. Exit status 0 ok, 1 runtime error, 2 usage or malformed
 * trace. */
#include "sim.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define MAX_GPUS 1024
#define SIM_STR_(x) #x
#define SIM_STR(x) SIM_STR_(x)

static void usage(FILE *out)
{
    fputs("usage: salus-sim --trace FILE [options]\n"
          "Replays a job trace through salusd's lane manager and scheduling policies.\n"
          "\n"
          "  --trace FILE        CSV trace ('-' = stdin), header:\n"
          "                      " SIM_TRACE_HEADER "\n"
          "  --policy NAME       ",
          out);
    sim_policy_names(out, ", ");
    fputs(" (default pack)\n"
          "  --gpus N            GPUs in the node (default 1)\n"
          "  --gpu-mem-mb M      memory of each GPU in MiB (default 16384)\n"
          "  --switch-us T       cost of a lane switching jobs at an iteration boundary,\n"
          "                      microseconds (default " SIM_STR(SIM_SWITCH_US_DEFAULT) ": salusd's switch\n"
          "                      with --lane-memory shared, measured on simgpu)\n"
          "  --no-hints          policies do not see the trace's iteration counts and times\n"
          "                      before measuring them (default: they do, like Salus profiles)\n"
          "  --hints WHAT        'all' (default), 'iterations' (the count only, no iteration\n"
          "                      time: what salusd's jobs tell it) or 'none' (= --no-hints)\n"
          "  --provisional-min-mb M  with --hints none: the least claim a job of unknown sizes\n"
          "                      is admitted with, MiB (default 3072, at most half a GPU)\n"
          "  --provisional-max-mb M  the most a claim may hold, MiB (default 0: no cap)\n"
          "  --lane-hold WHAT    'gpu' (default, as salusd): a lane is held only for the\n"
          "                      GPU part of an iteration; 'iteration' (as Salus): for the\n"
          "                      whole iteration, host part included\n"
          "  --gpu-share HOW     'ps' (default): GPU parts running at once share the GPU\n"
          "                      (processor sharing); 'fcfs': one at a time, whole, in the\n"
          "                      order they start (simgpu's engine, one kernel per part)\n"
          "  --jobs-csv FILE     also write per-job times (submit, admitted, start, finish)\n"
          "  --latency-csv FILE  also write each latency-critical job's request latencies\n"
          "                      (requests, p50, p95, p99 ms, target, count over target)\n"
          "  --json              print one JSON object instead of text\n"
          "  --list-policies     print the accepted policy names, one a line\n"
          "  -h, --help          this help\n",
          out);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("salus-sim: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (try --help)\n", stderr);
    return EXIT_USAGE;
}

static bool parse_number(const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(value) || value < min || value > max)
        return false;
    *out = value;
    return true;
}

int main(int argc, char **argv)
{
    enum { OPT_TRACE = 256, OPT_POLICY, OPT_GPUS, OPT_MEMORY, OPT_SWITCH, OPT_JSON, OPT_NO_HINTS,
           OPT_JOBS_CSV, OPT_LIST, OPT_LANE_HOLD, OPT_GPU_SHARE, OPT_HINTS, OPT_PROV_MIN,
           OPT_PROV_MAX, OPT_LATENCY_CSV };
    static const struct option options[] = {
        {"trace", required_argument, NULL, OPT_TRACE},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"gpus", required_argument, NULL, OPT_GPUS},
        {"gpu-mem-mb", required_argument, NULL, OPT_MEMORY},
        {"switch-us", required_argument, NULL, OPT_SWITCH},
        {"json", no_argument, NULL, OPT_JSON},
        {"no-hints", no_argument, NULL, OPT_NO_HINTS},
        {"jobs-csv", required_argument, NULL, OPT_JOBS_CSV},
        {"latency-csv", required_argument, NULL, OPT_LATENCY_CSV},
        {"list-policies", no_argument, NULL, OPT_LIST},
        {"lane-hold", required_argument, NULL, OPT_LANE_HOLD},
        {"gpu-share", required_argument, NULL, OPT_GPU_SHARE},
        {"hints", required_argument, NULL, OPT_HINTS},
        {"provisional-min-mb", required_argument, NULL, OPT_PROV_MIN},
        {"provisional-max-mb", required_argument, NULL, OPT_PROV_MAX},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    sim_config_t config;
    sim_trace_t trace = {0};
    sim_result_t result = {0};
    const char *trace_path = NULL, *jobs_csv = NULL, *latency_csv = NULL;
    bool json = false;
    double value;
    char err[512] = "";
    int opt, status = EXIT_SUCCESS;

    sim_config_default(&config);
    config.switch_s = SIM_SWITCH_US_DEFAULT / 1e6;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_TRACE: trace_path = optarg; break;
        case OPT_POLICY:
            if (!sim_policy_known(optarg))
                return usage_error("unknown policy '%s'", optarg);
            config.policy = optarg;
            break;
        case OPT_GPUS:
            if (!parse_number(optarg, 1, MAX_GPUS, &value) || value != floor(value))
                return usage_error("--gpus takes an integer in 1..%d", MAX_GPUS);
            config.gpus = (unsigned)value;
            break;
        case OPT_MEMORY:
            if (!parse_number(optarg, 1, 1024.0 * 1024 * 1024, &value))
                return usage_error("--gpu-mem-mb takes a size in MiB >= 1");
            config.gpu_memory_bytes = (uint64_t)llround(value * 1024 * 1024);
            break;
        case OPT_SWITCH:
            if (!parse_number(optarg, 0, 1e12, &value))
                return usage_error("--switch-us takes a number of microseconds >= 0");
            config.switch_s = value / 1e6;
            break;
        case OPT_JSON: json = true; break;
        case OPT_NO_HINTS: config.hints = false; break;
        case OPT_HINTS:
            if (strcmp(optarg, "all") != 0 && strcmp(optarg, "iterations") != 0 &&
                strcmp(optarg, "none") != 0)
                return usage_error("--hints takes 'all', 'iterations' or 'none'");
            config.hints = strcmp(optarg, "none") != 0;
            config.hints_iterations_only = strcmp(optarg, "iterations") == 0;
            break;
        case OPT_PROV_MIN:
        case OPT_PROV_MAX:
            if (!parse_number(optarg, 0, 1024.0 * 1024 * 1024, &value))
                return usage_error("--provisional-%s-mb takes a size in MiB >= 0",
                                   opt == OPT_PROV_MIN ? "min" : "max");
            *(opt == OPT_PROV_MIN ? &config.provisional_min_bytes
                                  : &config.provisional_max_bytes) =
                (uint64_t)llround(value * 1024 * 1024);
            break;
        case OPT_JOBS_CSV: jobs_csv = optarg; break;
        case OPT_LATENCY_CSV: latency_csv = optarg; break;
        case OPT_LANE_HOLD:
            if (strcmp(optarg, "iteration") != 0 && strcmp(optarg, "gpu") != 0)
                return usage_error("--lane-hold takes 'iteration' or 'gpu'");
            config.lane_hold_gpu_only = strcmp(optarg, "gpu") == 0;
            break;
        case OPT_GPU_SHARE:
            if (strcmp(optarg, "ps") != 0 && strcmp(optarg, "fcfs") != 0)
                return usage_error("--gpu-share takes 'ps' or 'fcfs'");
            config.gpu_fcfs = strcmp(optarg, "fcfs") == 0;
            break;
        case OPT_LIST:
            sim_policy_names(stdout, "\n");
            fputc('\n', stdout);
            return EXIT_SUCCESS;
        case 'h': usage(stdout); return EXIT_SUCCESS;
        default:
            return usage_error("bad option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!trace_path)
        return usage_error("--trace FILE is required");

    int rc = sim_trace_load(trace_path, &trace, err, sizeof(err));
    if (rc != SIM_OK) {
        fprintf(stderr, "salus-sim: %s\n", err);
        status = rc == SIM_ERROR_NO_MEMORY ? EXIT_RUNTIME : EXIT_USAGE;
        goto done;
    }
    rc = sim_run(&trace, &config, &result, err, sizeof(err));
    if (rc != SIM_OK) {
        fprintf(stderr, "salus-sim: %s: %s\n", trace_path, err);
        status = rc == SIM_ERROR_MALFORMED ? EXIT_USAGE : EXIT_RUNTIME;
        goto done;
    }
    if (result.jobs_failed)
        fprintf(stderr, "salus-sim: warning: %zu jobs of unknown sizes ran out of their claim "
                        "(out of memory) and failed\n", result.jobs_failed);
    if (result.jobs_refused)
        fprintf(stderr, "salus-sim: warning: %zu jobs were refused (larger than a GPU, or a latency target "
                        "no GPU can serve)\n",
                result.jobs_refused);
    if (jobs_csv) {
        FILE *out = fopen(jobs_csv, "w");
        if (!out || sim_report_jobs_csv(out, &trace, &result) != SIM_OK) {
            fprintf(stderr, "salus-sim: %s: %s\n", jobs_csv, strerror(errno ? errno : EIO));
            status = EXIT_RUNTIME;
        }
        if (out && fclose(out) != 0 && status == EXIT_SUCCESS) {
            fprintf(stderr, "salus-sim: %s: %s\n", jobs_csv, strerror(errno));
            status = EXIT_RUNTIME;
        }
    }
    if (latency_csv) {
        FILE *out = fopen(latency_csv, "w");
        if (!out || sim_report_latency_csv(out, &trace, &result) != SIM_OK) {
            fprintf(stderr, "salus-sim: %s: %s\n", latency_csv, strerror(errno ? errno : EIO));
            status = EXIT_RUNTIME;
        }
        if (out && fclose(out) != 0 && status == EXIT_SUCCESS) {
            fprintf(stderr, "salus-sim: %s: %s\n", latency_csv, strerror(errno));
            status = EXIT_RUNTIME;
        }
    }
    if (json)
        sim_report_json(stdout, &config, &result);
    else
        sim_report_text(stdout, &config, &result);
    if (fflush(stdout) != 0)
        status = EXIT_RUNTIME;

done:
    sim_result_free(&result);
    sim_trace_free(&trace);
    return status;
}
