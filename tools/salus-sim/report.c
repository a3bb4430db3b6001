/* Summary statistics of a run and its output: text, JSON and a per-job CSV. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double sim_quantile(const double *sorted, size_t count, double q)
{
    if (count == 0)
        return 0;
    if (q <= 0)
        return sorted[0];
    if (q >= 1)
        return sorted[count - 1];
    double rank = q * (double)(count - 1);
    size_t low = (size_t)rank;
    double fraction = rank - (double)low;
    if (low + 1 >= count)
        return sorted[count - 1];
    return sorted[low] + fraction * (sorted[low + 1] - sorted[low]);
}

int sim_result_summarise(const sim_trace_t *trace, sim_result_t *result)
{
    double *jct = malloc((trace->count ? trace->count : 1) * sizeof(*jct));
    double first_submit = 0, last_finish = 0, jct_sum = 0, wait_sum = 0;
    size_t n = 0;
    bool any = false;

    if (!jct)
        return SIM_ERROR_NO_MEMORY;
    result->jobs_completed = result->jobs_refused = result->jobs_failed = 0;
    for (size_t i = 0; i < trace->count; i++) {
        const sim_job_result_t *job = &result->jobs[i];
        double submit = trace->jobs[i].submit_s;
        if (job->refused) {
            result->jobs_refused++;
            continue;
        }
        if (job->failed) {
            result->jobs_failed++;
            continue;
        }
        if (!any || submit < first_submit)
            first_submit = submit;
        if (!any || job->finished_s > last_finish)
            last_finish = job->finished_s;
        any = true;
        jct[n] = job->finished_s - submit;
        jct_sum += jct[n++];
        wait_sum += job->started_s - submit;
    }
    result->jobs_completed = n;
    qsort(jct, n, sizeof(*jct), compare_double);
    result->avg_jct_s = n ? jct_sum / (double)n : 0;
    result->median_jct_s = sim_quantile(jct, n, 0.5);
    result->p95_jct_s = sim_quantile(jct, n, 0.95);
    result->mean_wait_s = n ? wait_sum / (double)n : 0;
    result->makespan_s = any ? last_finish - first_submit : 0;
    free(jct);
    return SIM_OK;
}

void sim_result_free(sim_result_t *result)
{
    for (size_t i = 0; result->jobs && i < result->job_count; i++)
        free(result->jobs[i].latencies_s);
    free(result->jobs);
    memset(result, 0, sizeof(*result));
}

void sim_report_text(FILE *out, const sim_config_t *config, const sim_result_t *result)
{
    fprintf(out, "policy            %s\n", config->policy);
    fprintf(out, "gpus              %u x %.0f MiB, switch %.0f us, sharing %s\n", config->gpus,
            (double)config->gpu_memory_bytes / (1024.0 * 1024.0), config->switch_s * 1e6,
            config->gpu_fcfs ? "fcfs" : "ps");
    fprintf(out, "jobs              %zu completed, %zu refused (larger than a GPU), %zu failed "
                 "(out of memory)\n",
            result->jobs_completed, result->jobs_refused, result->jobs_failed);
    fprintf(out, "average JCT       %.3f s\n", result->avg_jct_s);
    fprintf(out, "median JCT        %.3f s\n", result->median_jct_s);
    fprintf(out, "p95 JCT           %.3f s\n", result->p95_jct_s);
    fprintf(out, "makespan          %.3f s\n", result->makespan_s);
    fprintf(out, "GPU utilisation   %.2f %%\n", 100.0 * result->utilization);
    fprintf(out, "mean queueing     %.3f s (submission to first iteration)\n",
            result->mean_wait_s);
    fprintf(out, "peak resident     %zu jobs\n", result->peak_jobs_resident);
    fprintf(out, "longest turn wait %.3f s", result->max_turn_wait_s);
    if (result->has_lower_queue_wait)
        fprintf(out, " (in a lower queue: %.3f s)", result->max_lower_queue_wait_s);
    fputc('\n', out);
    fprintf(out, "iterations        %llu (%llu lane switches)\n",
            (unsigned long long)result->iterations, (unsigned long long)result->switches);
    fprintf(out, "throughput        %.3f iterations/s (all jobs, over the makespan)\n",
            result->iterations_per_s);
}

/* Policy names are registry names or baselines: plain lower-case words, no escaping needed
 * beyond quotes and backslashes, which they never contain; escape anyway. */
static void json_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const char *p = text; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', out);
        if ((unsigned char)*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void sim_report_json(FILE *out, const sim_config_t *config, const sim_result_t *result)
{
    fputs("{\"policy\": ", out);
    json_string(out, config->policy);
    fprintf(out,
            ", \"gpus\": %u, \"jobs\": %zu, \"refused\": %zu, \"failed\": %zu, "
            "\"avg_jct_s\": %.6f, "
            "\"median_jct_s\": %.6f, \"p95_jct_s\": %.6f, \"makespan_s\": %.6f, "
            "\"utilization\": %.6f, \"mean_wait_s\": %.6f, \"peak_jobs_resident\": %zu, "
            "\"iterations\": %llu, \"iterations_per_s\": %.6f, \"switches\": %llu, "
            "\"max_turn_wait_s\": %.6f, \"max_lower_queue_wait_s\": ",
            config->gpus, result->jobs_completed, result->jobs_refused, result->jobs_failed,
            result->avg_jct_s,
            result->median_jct_s, result->p95_jct_s, result->makespan_s,
            result->utilization, result->mean_wait_s, result->peak_jobs_resident,
            (unsigned long long)result->iterations, result->iterations_per_s,
            (unsigned long long)result->switches, result->max_turn_wait_s);
    if (result->has_lower_queue_wait)
        fprintf(out, "%.6f}\n", result->max_lower_queue_wait_s);
    else
        fputs("null}\n", out);
}

int sim_report_jobs_csv(FILE *out, const sim_trace_t *trace, const sim_result_t *result)
{
    fputs("job_id,submit_s,admitted_s,started_s,finished_s,jct_s,switches,refused\n", out);
    for (size_t i = 0; i < trace->count; i++) {
        const sim_job_result_t *job = &result->jobs[i];
        const sim_job_spec_t *spec = &trace->jobs[i];
        if (job->refused)
            fprintf(out, "%llu,%.6f,,,,,0,1\n", (unsigned long long)spec->trace_id,
                    spec->submit_s);
        else if (job->failed) /* (refused 2: failed, out of memory) */
            fprintf(out, "%llu,%.6f,%.6f,,%.6f,,%llu,2\n", (unsigned long long)spec->trace_id,
                    spec->submit_s, job->admitted_s, job->finished_s,
                    (unsigned long long)job->switches);
        else
            fprintf(out, "%llu,%.6f,%.6f,%.6f,%.6f,%.6f,%llu,0\n",
                    (unsigned long long)spec->trace_id, spec->submit_s, job->admitted_s,
                    job->started_s, job->finished_s, job->finished_s - spec->submit_s,
                    (unsigned long long)job->switches);
    }
    return ferror(out) ? SIM_ERROR_IO : SIM_OK;
}

int sim_report_latency_csv(FILE *out, const sim_trace_t *trace, sim_result_t *result)
{
    fputs("job_id,requests,p50_ms,p95_ms,p99_ms,target_ms,over_target\n", out);
    for (size_t i = 0; i < trace->count; i++) {
        sim_job_result_t *job = &result->jobs[i];
        const sim_job_spec_t *spec = &trace->jobs[i];
        if (spec->latency_target_ms <= 0)
            continue;
        size_t over = 0;
        for (size_t k = 0; k < job->requests; k++)
            over += job->latencies_s[k] * 1e3 > spec->latency_target_ms;
        if (job->requests)
            qsort(job->latencies_s, job->requests, sizeof(double), compare_double);
        fprintf(out, "%llu,%zu,%.3f,%.3f,%.3f,%g,%zu\n", (unsigned long long)spec->trace_id,
                job->requests, 1e3 * sim_quantile(job->latencies_s, job->requests, 0.50),
                1e3 * sim_quantile(job->latencies_s, job->requests, 0.95),
                1e3 * sim_quantile(job->latencies_s, job->requests, 0.99),
                spec->latency_target_ms, over);
    }
    return ferror(out) ? SIM_ERROR_IO : SIM_OK;
}
