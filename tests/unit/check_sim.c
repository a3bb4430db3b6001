/* Unit tests for the salus-sim core (tools/salus-sim): trace parsing and the simulation model,
 * with cases small enough to compute by hand; and the simulator's grants against salusd's own
 * adapter's on one trace. Times are in seconds; sizes in the traces are MiB. */
#include "sim.h"
#include "sched_core.h"
/* salusd's adapter to the core (test_daemon_and_sim_adapters_grant_alike) */
#include "config.h"
#include "daemon.h"
#include "gpu_sched.h"
#include "job_page.h"
#include "jobs-internal.h"
#include "log.h"
#include "registry.h"

#include <check.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <math.h>
#include <msgpack.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define EPS 1e-6
#define MIB (1ull << 20)
#define GIB (1ull << 30)

static const char header[] = SIM_TRACE_HEADER "\n";

/* Parses `rows` (after the header) into *trace; returns sim_trace_read's code. */
static int parse(const char *text, sim_trace_t *trace, char *err, size_t err_size)
{
    FILE *in = fmemopen((void *)text, strlen(text), "r");
    ck_assert_ptr_nonnull(in);
    int rc = sim_trace_read(in, "t.csv", trace, err, err_size);
    fclose(in);
    return rc;
}

static void load(const char *rows, sim_trace_t *trace)
{
    char text[8192], err[256] = "";
    snprintf(text, sizeof(text), "%s%s", header, rows);
    int rc = parse(text, trace, err, sizeof(err));
    ck_assert_msg(rc == SIM_OK, "trace rejected: %s", err);
}

/* Runs rows under `policy` on `gpus` GPUs of `memory_mib` each. */
static void run(const char *rows, const char *policy, unsigned gpus, uint64_t memory_mib,
                double switch_s, sim_trace_t *trace, sim_result_t *result)
{
    sim_config_t config;
    char err[256] = "";
    sim_config_default(&config);
    config.policy = policy;
    config.gpus = gpus;
    config.gpu_memory_bytes = memory_mib * MIB;
    config.switch_s = switch_s;
    load(rows, trace);
    int rc = sim_run(trace, &config, result, err, sizeof(err));
    ck_assert_msg(rc == SIM_OK, "sim_run(%s): %s", policy, err);
}

/* run() with a lane held for whole iterations (--lane-hold iteration) */
static void run_whole(const char *rows, const char *policy, uint64_t memory_mib,
                      sim_trace_t *trace, sim_result_t *result)
{
    sim_config_t config;
    char err[256] = "";
    sim_config_default(&config);
    config.policy = policy;
    config.gpu_memory_bytes = memory_mib * MIB;
    config.lane_hold_gpu_only = false;
    load(rows, trace);
    int rc = sim_run(trace, &config, result, err, sizeof(err));
    ck_assert_msg(rc == SIM_OK, "sim_run(%s): %s", policy, err);
}

static void done(sim_trace_t *trace, sim_result_t *result)
{
    sim_result_free(result);
    sim_trace_free(trace);
}

#define ASSERT_NEAR(value, expected)                                                           \
    ck_assert_msg(fabs((value) - (expected)) < EPS, "%s = %.9f, expected %.9f", #value,        \
                  (double)(value), (double)(expected))

/* ---- the model -------------------------------------------------------------------------- */

static const char *const every_policy[] = {"fifo", "srtf", "pack", "fair", "exclusive", "mps"};

/* One job alone: JCT = iterations x iter_ms whatever the policy; utilisation = gpu_frac. */
START_TEST(test_one_job_alone)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,0.5,100,1000,\n", every_policy[_i], 1, 16384, 0.001, &trace, &result);
    ck_assert_uint_eq(result.jobs_completed, 1);
    ASSERT_NEAR(result.avg_jct_s, 1.0);
    ASSERT_NEAR(result.median_jct_s, 1.0);
    ASSERT_NEAR(result.p95_jct_s, 1.0);
    ASSERT_NEAR(result.makespan_s, 1.0);
    ASSERT_NEAR(result.utilization, 0.5);
    ASSERT_NEAR(result.mean_wait_s, 0.0);
    ck_assert_uint_eq(result.iterations, 10);
    ck_assert_uint_eq(result.switches, 0); /* one job never switches its lane */
    done(&trace, &result);
}
END_TEST

/* A late submission: JCT counts from submission, makespan from the first submission. */
START_TEST(test_late_submission)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,1,100,1000,\n2,5,10,100,1,100,1000,\n", "pack", 1, 16384, 0, &trace,
        &result);
    ASSERT_NEAR(result.avg_jct_s, 1.0);
    ASSERT_NEAR(result.makespan_s, 6.0);
    ASSERT_NEAR(result.utilization, 2.0 / 6.0);
    ASSERT_NEAR(result.jobs[1].started_s, 5.0);
    done(&trace, &result);
}
END_TEST

/* Two identical GPU-bound jobs (gpu_frac = 1, 10 x 100 ms). In one lane they alternate by
 * iteration (PACK: round-robin): A ends at 1.9 s, B at 2.0 s. 19 lane switches. */
START_TEST(test_one_lane_takes_turns)
{
    sim_trace_t trace;
    sim_result_t result;
    /* 1 GiB P each + one 4 GiB lane = 6 GiB: a second 4 GiB lane does not fit in 7 GiB */
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,1024,4096,\n", "pack", 1, 7 * 1024, 0, &trace,
        &result);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.9);
    ASSERT_NEAR(result.jobs[1].finished_s, 2.0);
    ASSERT_NEAR(result.avg_jct_s, 1.95);
    ASSERT_NEAR(result.makespan_s, 2.0);
    ASSERT_NEAR(result.utilization, 1.0);
    ck_assert_uint_eq(result.switches, 19);
    ck_assert_uint_eq(result.peak_jobs_resident, 2);
    done(&trace, &result);
}
END_TEST

/* Turn waits under LAS, one lane (1 GiB P each + one 4 GiB lane in 7 GiB): job 1 (20 x 100
 * ms) has had 1.5 s (queue 1) when job 2 (5 x 100 ms) arrives at 1.55 s; job 2 gets the lane
 * at 1.6 s (waited 0.05 s) and keeps it to 2.1 s, job 1 waits 1.6 -> 2.1 s (0.5 s) and ends at
 * 2.5 s. The grants to job 2 at 1.6 .. 2.0 s see job 1 in queue 1 after 0 .. 0.4 s. */
START_TEST(test_turn_waits_and_lower_queue)
{
    sim_trace_t trace;
    sim_result_t result;
    /* held for whole iterations: with lanes held for GPU time (the default) a release hands
     * the lane to a waiting lane-mate whatever the policy's order, so these jobs without host
     * time alternate (the policy orders the waiters only) */
    run_whole("1,0,20,100,1,1024,4096,\n2,1.55,5,100,1,1024,4096,\n", "las", 7 * 1024, &trace,
              &result);
    ASSERT_NEAR(result.jobs[1].finished_s, 2.1);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.5);
    ASSERT_NEAR(result.max_turn_wait_s, 0.5);
    ck_assert(result.has_lower_queue_wait);
    ASSERT_NEAR(result.max_lower_queue_wait_s, 0.4);
    done(&trace, &result);
    /* PACK alternates (each waits one iteration of the other) and has no queues */
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,1024,4096,\n", "pack", 1, 7 * 1024, 0, &trace,
        &result);
    ASSERT_NEAR(result.max_turn_wait_s, 0.1);
    ck_assert(!result.has_lower_queue_wait);
    done(&trace, &result);
}
END_TEST

/* The same jobs in two lanes: both GPU parts run at once at half speed (processor sharing):
 * each iteration takes 200 ms, both end at 2.0 s. Same makespan, worse average JCT. */
START_TEST(test_two_lanes_share_the_gpu)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,1024,4096,\n", "pack", 1, 16384, 0, &trace,
        &result);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.0);
    ASSERT_NEAR(result.jobs[1].finished_s, 2.0);
    ASSERT_NEAR(result.avg_jct_s, 2.0);
    ASSERT_NEAR(result.utilization, 1.0);
    ck_assert_uint_eq(result.switches, 0);
    done(&trace, &result);
}
END_TEST

/* gpu_frac = 0.5, 10 x 100 ms, two jobs. Exclusive: one after the other, makespan 2 s, the
 * GPU busy 1 s of 2. Packed in two lanes (pack, and mps): host parts overlap, the GPU parts
 * share the GPU: iteration = 50 ms host + 100 ms shared GPU = 150 ms, makespan 1.5 s,
 * utilisation 1/1.5. */
START_TEST(test_packing_gains_utilisation)
{
    const char *rows = "1,0,10,100,0.5,100,1000,\n2,0,10,100,0.5,100,1000,\n";
    sim_trace_t trace;
    sim_result_t exclusive, packed, mps;

    run(rows, "exclusive", 1, 16384, 0, &trace, &exclusive);
    sim_trace_free(&trace);
    ASSERT_NEAR(exclusive.makespan_s, 2.0);
    ASSERT_NEAR(exclusive.avg_jct_s, 1.5);
    ASSERT_NEAR(exclusive.utilization, 0.5);
    ASSERT_NEAR(exclusive.mean_wait_s, 0.5); /* the second job waits 1 s */
    ck_assert_uint_eq(exclusive.peak_jobs_resident, 1);

    run(rows, "pack", 1, 16384, 0, &trace, &packed);
    sim_trace_free(&trace);
    ASSERT_NEAR(packed.makespan_s, 1.5);
    ASSERT_NEAR(packed.utilization, 1.0 / 1.5);
    ck_assert(packed.utilization > exclusive.utilization);

    run(rows, "mps", 1, 16384, 0, &trace, &mps);
    ASSERT_NEAR(mps.makespan_s, 1.5);
    ASSERT_NEAR(mps.utilization, 1.0 / 1.5);
    done(&trace, &mps);
    sim_result_free(&exclusive);
    sim_result_free(&packed);
}
END_TEST

/* exclusive runs jobs one at a time in submission order (a short job waits behind a long
 * one); pack runs them together; SRTF in one lane runs the short job first. */
START_TEST(test_exclusive_vs_pack_order)
{
    /* long (20 x 100 ms) submitted first, short (5 x 100 ms) 10 ms later; one lane fits */
    const char *rows = "1,0,20,100,1,1024,4096,\n2,0.01,5,100,1,1024,4096,\n";
    sim_trace_t trace;
    sim_result_t result;

    run(rows, "exclusive", 1, 7 * 1024, 0, &trace, &result);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.0);
    ASSERT_NEAR(result.jobs[1].started_s, 2.0);
    ASSERT_NEAR(result.jobs[1].finished_s, 2.5);
    done(&trace, &result);

    run(rows, "fifo", 1, 7 * 1024, 0, &trace, &result); /* FIFO is the same baseline */
    ASSERT_NEAR(result.jobs[1].finished_s, 2.5);
    done(&trace, &result);

    /* pack, one shared lane: the short job joins at 0.1 s (the long one's first boundary)
     * and they alternate: short runs 0.1-0.2, 0.3-0.4, ..., ends at 1.0 s */
    run(rows, "pack", 1, 7 * 1024, 0, &trace, &result);
    ASSERT_NEAR(result.jobs[1].started_s, 0.1);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.5);
    done(&trace, &result);

    /* srtf, one shared lane, lanes held for whole iterations: the short job takes the lane at
     * the long one's next boundary and keeps it (it asks again at once): 0.1-0.6 */
    run_whole(rows, "srtf", 7 * 1024, &trace, &result);
    ASSERT_NEAR(result.jobs[1].finished_s, 0.6);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.5);
    ck_assert_uint_eq(result.switches, 2);
    done(&trace, &result);

    /* the default (--lane-hold gpu): a job gives its lane up at each boundary, before it asks
     * for its next turn, so a waiting job gets it whatever the policy's order: they
     * alternate as under pack */
    run(rows, "srtf", 1, 7 * 1024, 0, &trace, &result);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[0].finished_s, 2.5);
    done(&trace, &result);
}
END_TEST

/* Switch cost: paid each time a lane changes job, lane held, GPU idle. One lane, two jobs
 * alternating: 19 switches of 1 ms. */
START_TEST(test_switch_cost_adds_up)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,1024,4096,\n", "pack", 1, 7 * 1024, 0.001,
        &trace, &result);
    ck_assert_uint_eq(result.switches, 19);
    ASSERT_NEAR(result.makespan_s, 2.0 + 19 * 0.001);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.9 + 18 * 0.001);
    ASSERT_NEAR(result.utilization, 2.0 / 2.019);
    ck_assert_uint_eq(result.jobs[0].switches, 9);
    ck_assert_uint_eq(result.jobs[1].switches, 10);
    done(&trace, &result);
}
END_TEST

/* Lanes fit more jobs than the sum of peaks: three jobs of P = 1 GiB, E = 5 GiB on 16 GiB.
 * mps admits two (12 GiB), the third waits; pack opens two lanes and puts the third in one of
 * them (3 + 10 = 13 GiB). */
START_TEST(test_lanes_fit_more_than_mps)
{
    const char *rows = "1,0,10,100,0.5,1024,5120,\n2,0,10,100,0.5,1024,5120,\n"
                       "3,0,10,100,0.5,1024,5120,\n";
    sim_trace_t trace;
    sim_result_t result;

    run(rows, "mps", 1, 16384, 0, &trace, &result);
    ck_assert_uint_eq(result.peak_jobs_resident, 2);
    ck_assert(result.jobs[2].admitted_s > 0.5);
    done(&trace, &result);

    run(rows, "pack", 1, 16384, 0, &trace, &result);
    ck_assert_uint_eq(result.peak_jobs_resident, 3);
    ASSERT_NEAR(result.jobs[2].admitted_s, 0);
    done(&trace, &result);
}
END_TEST

/* --lane-hold gpu (the default): the lane is held only for GPU parts, so two jobs of one lane interleave:
 * gpu_frac = 0.5, 10 x 100 ms. Both host parts run 0-0.05; A's GPU part 0.05-0.10, B's
 * 0.10-0.15 (while A's next host part runs), and so on: A ends at 1.0 s, B at 1.05 s. Held
 * for whole iterations they alternate: 2.0 s. */
START_TEST(test_lane_hold_gpu_interleaves)
{
    const char *rows = "1,0,10,100,0.5,1024,4096,\n2,0,10,100,0.5,1024,4096,\n";
    sim_trace_t trace;
    sim_result_t result;
    sim_config_t config;
    char err[256] = "";

    sim_config_default(&config);
    config.policy = "pack";
    config.gpu_memory_bytes = 7 * GIB;
    config.lane_hold_gpu_only = false; /* --lane-hold iteration */
    load(rows, &trace);
    ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
    ASSERT_NEAR(result.makespan_s, 2.0);
    ASSERT_NEAR(result.utilization, 0.5);
    done(&trace, &result);

    run(rows, "pack", 1, 7 * 1024, 0, &trace, &result); /* the default: --lane-hold gpu */
    sim_result_free(&result);
    sim_trace_free(&trace);
    config.lane_hold_gpu_only = true;
    load(rows, &trace);
    ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.05);
    ASSERT_NEAR(result.utilization, 1.0 / 1.05);
    ck_assert_uint_eq(result.switches, 19);
    done(&trace, &result);
}
END_TEST

/* gpu_frac = 0.5, 10 x 100 ms, two jobs in two lanes. Processor sharing keeps them in step:
 * 50 ms host, then both GPU parts at half speed for 100 ms: makespan 1.5 s. --gpu-share fcfs
 * (simgpu's engine): job 1's GPU part runs 50-100 ms, job 2's waits and runs 100-150 ms; from
 * then on each one's host part hides under the other's GPU part: job 1 ends at 1.0 s, job 2
 * at 1.05 s, the GPU never idle after 50 ms. */
START_TEST(test_gpu_share_fcfs)
{
    const char *rows = "1,0,10,100,0.5,1024,4096,\n2,0,10,100,0.5,1024,4096,\n";
    sim_trace_t trace;
    sim_result_t result;
    sim_config_t config;
    char err[256] = "";

    run(rows, "pack", 1, 16384, 0, &trace, &result);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.5);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.5);
    ASSERT_NEAR(result.utilization, 1.0 / 1.5);
    done(&trace, &result);

    sim_config_default(&config);
    config.policy = "pack";
    config.gpu_fcfs = true;
    load(rows, &trace);
    ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.05);
    ASSERT_NEAR(result.makespan_s, 1.05);
    ASSERT_NEAR(result.utilization, 1.0 / 1.05);
    ck_assert_uint_eq(result.switches, 0);
    done(&trace, &result);
}
END_TEST

/* Two GPUs: exclusive places one job on each; they do not share. */
START_TEST(test_two_gpus)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,1024,4096,\n3,0,10,100,1,1024,4096,\n",
        "exclusive", 2, 16384, 0, &trace, &result);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[1].finished_s, 1.0);
    ASSERT_NEAR(result.jobs[2].finished_s, 2.0);
    ASSERT_NEAR(result.utilization, 3.0 / 4.0);
    done(&trace, &result);
}
END_TEST

/* A job larger than any GPU is refused; the others run. */
/* Jobs of unknown sizes (--hints none) on claims, as salusd: on 16 GiB, A (1 + 3 GiB) claims
 * all but the least claim (3 GiB), which B (2 + 4 GiB) gets; B's first GPU part needs 6 GiB:
 * it waits until A's sizes are learned (its third iteration, at 0.3 s), then both share the
 * GPU: A's 0.7 s left end at 1.7 s, B's 1 s at 2.0 s. With --provisional-max-mb 4096, B can
 * never have 6 GiB: it fails, out of memory, and is left out of the statistics. */
START_TEST(test_unknown_sizes_claims)
{
    static const char rows[] = "1,0,10,100,1,1024,3072,\n2,0,10,100,1,2048,4096,\n";
    sim_config_t config;
    sim_trace_t trace;
    sim_result_t result;
    char err[256] = "";
    sim_config_default(&config);
    config.policy = "pack";
    config.hints = false;
    load(rows, &trace);
    ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
    ck_assert_uint_eq(result.jobs_completed, 2);
    ck_assert_uint_eq(result.jobs_failed, 0);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.7);
    ASSERT_NEAR(result.jobs[1].finished_s, 2.0);
    done(&trace, &result);

    config.provisional_max_bytes = 4096 * MIB;
    load(rows, &trace);
    ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
    ck_assert_uint_eq(result.jobs_completed, 1);
    ck_assert_uint_eq(result.jobs_failed, 1);
    ck_assert(result.jobs[1].failed);
    ASSERT_NEAR(result.jobs[0].finished_s, 1.0); /* alone */
    done(&trace, &result);
}
END_TEST

START_TEST(test_too_large_is_refused)
{
    sim_trace_t trace;
    sim_result_t result;
    run("1,0,10,100,1,1024,4096,\n2,0,10,100,1,20000,4096,\n", every_policy[_i], 1, 16384, 0,
        &trace, &result);
    ck_assert_uint_eq(result.jobs_completed, 1);
    ck_assert_uint_eq(result.jobs_refused, 1);
    ck_assert(result.jobs[1].refused);
    ASSERT_NEAR(result.avg_jct_s, 1.0);
    done(&trace, &result);
}
END_TEST

/* A small pseudo-random trace through every policy: every job completes, every iteration is
 * counted, no GPU is busier than the makespan. */
START_TEST(test_random_trace_completes)
{
    char rows[6000] = "";
    size_t used = 0;
    uint64_t iterations = 0;
    unsigned seed = 12345;
    for (int i = 0; i < 40; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8;
        unsigned n = 1 + r % 50;
        iterations += n;
        used += (size_t)snprintf(rows + used, sizeof(rows) - used, "%d,%.2f,%u,%u,%.2f,%u,%u,%s\n",
                                 i, (r % 1000) / 100.0, n, 5 + r % 200, (r % 101) / 100.0,
                                 100 + r % 3000, 200 + (r >> 4) % 6000, i % 3 ? "" : "1");
    }
    sim_trace_t trace;
    sim_result_t result;
    run(rows, every_policy[_i], 2, 16384, 0.0005, &trace, &result);
    ck_assert_uint_eq(result.jobs_completed, 40);
    ck_assert_uint_eq(result.iterations, iterations);
    ck_assert(result.utilization > 0 && result.utilization <= 1.0 + EPS);
    ck_assert(result.median_jct_s <= result.p95_jct_s + EPS);
    for (size_t i = 0; i < trace.count; i++) {
        ck_assert(result.jobs[i].admitted_s >= trace.jobs[i].submit_s - EPS);
        ck_assert(result.jobs[i].started_s >= result.jobs[i].admitted_s - EPS);
        ck_assert(result.jobs[i].finished_s > result.jobs[i].started_s);
    }
    done(&trace, &result);
}
END_TEST

START_TEST(test_quantile)
{
    const double v[] = {1, 2, 3, 4, 5};
    ASSERT_NEAR(sim_quantile(v, 5, 0.5), 3);
    ASSERT_NEAR(sim_quantile(v, 5, 0.95), 4.8);
    ASSERT_NEAR(sim_quantile(v, 5, 0), 1);
    ASSERT_NEAR(sim_quantile(v, 1, 0.95), 1);
    ASSERT_NEAR(sim_quantile(v, 0, 0.5), 0);
}
END_TEST

/* ---- trace parsing ---------------------------------------------------------------------- */

START_TEST(test_trace_parses)
{
    sim_trace_t trace;
    char err[256] = "";
    const char *text = "# comment\n\n"
                       " job_id , submit_s,iterations,iter_ms,gpu_frac,persistent_mb,"
                       "ephemeral_mb,priority\r\n"
                       "7,1.5,100,25.5,0.25,512,2048,3\r\n"
                       "# another comment\n"
                       "8,0,1,1,1,0,0,\n"
                       "9,2,3,4,0,1.5,2.5\n"; /* priority column left out */
    ck_assert_int_eq(parse(text, &trace, err, sizeof(err)), SIM_OK);
    ck_assert_uint_eq(trace.count, 3);
    ck_assert_uint_eq(trace.jobs[0].trace_id, 7);
    ck_assert_uint_eq(trace.jobs[0].line, 4);
    ASSERT_NEAR(trace.jobs[0].submit_s, 1.5);
    ck_assert_uint_eq(trace.jobs[0].iterations, 100);
    ASSERT_NEAR(trace.jobs[0].iteration_ms, 25.5);
    ASSERT_NEAR(trace.jobs[0].gpu_fraction, 0.25);
    ck_assert_uint_eq(trace.jobs[0].persistent_bytes, 512 * MIB);
    ck_assert_uint_eq(trace.jobs[0].ephemeral_bytes, 2 * GIB);
    ck_assert_int_eq(trace.jobs[0].priority, 3);
    ck_assert_int_eq(trace.jobs[1].priority, 0);
    ck_assert_uint_eq(trace.jobs[2].persistent_bytes, 3 * MIB / 2);
    ck_assert_uint_eq(trace.jobs[2].line, 7);
    sim_trace_free(&trace);
}
END_TEST

static const struct {
    const char *text;
    const char *error; /* expected prefix */
} malformed_cases[] = {
    {"", "t.csv:1: no header"},
    {"job,submit\n1,2\n", "t.csv:1: expected the header"},
    {"# c\n" SIM_TRACE_HEADER "\n1,0,10,100,0.5,100,1000,\n2,0,10,100\n", "t.csv:4: expected 8"},
    {SIM_TRACE_HEADER "\n1,0,10,100,0.5,100,1000,,extra\n", "t.csv:2: expected 8 fields"},
    {SIM_TRACE_HEADER "\nx,0,10,100,0.5,100,1000,\n", "t.csv:2: job_id"},
    {SIM_TRACE_HEADER "\n-1,0,10,100,0.5,100,1000,\n", "t.csv:2: job_id"},
    {SIM_TRACE_HEADER "\n1,-2,10,100,0.5,100,1000,\n", "t.csv:2: submit_s"},
    {SIM_TRACE_HEADER "\n1,0,0,100,0.5,100,1000,\n", "t.csv:2: iterations"},
    {SIM_TRACE_HEADER "\n1,0,2.5,100,0.5,100,1000,\n", "t.csv:2: iterations"},
    {SIM_TRACE_HEADER "\n1,0,10,0,0.5,100,1000,\n", "t.csv:2: iter_ms"},
    {SIM_TRACE_HEADER "\n1,0,10,nan,0.5,100,1000,\n", "t.csv:2: iter_ms"},
    {SIM_TRACE_HEADER "\n1,0,10,100,1.5,100,1000,\n", "t.csv:2: gpu_frac"},
    {SIM_TRACE_HEADER "\n1,0,10,100,0.5,-1,1000,\n", "t.csv:2: persistent_mb"},
    {SIM_TRACE_HEADER "\n1,0,10,100,0.5,100,10GB,\n", "t.csv:2: ephemeral_mb"},
    {SIM_TRACE_HEADER "\n1,0,10,100,0.5,100,1000,high\n", "t.csv:2: priority"},
    {SIM_TRACE_HEADER "\n1,0,10,100,0.5,100,1000,\n\n1,0,10,100,0.5,100,1000,\n",
     "t.csv:4: job_id 1 already used on line 2"},
};

START_TEST(test_trace_malformed)
{
    sim_trace_t trace;
    char err[256] = "";
    int rc = parse(malformed_cases[_i].text, &trace, err, sizeof(err));
    ck_assert_int_eq(rc, SIM_ERROR_MALFORMED);
    ck_assert_msg(strncmp(err, malformed_cases[_i].error, strlen(malformed_cases[_i].error)) == 0,
                  "case %d: got '%s', expected '%s...'", _i, err, malformed_cases[_i].error);
    ck_assert_uint_eq(trace.count, 0);
    ck_assert_ptr_null(trace.jobs);
}
END_TEST

/* Classes and preemption at the gate: two best-effort jobs (GPU parts of 1 s in 1 ms kernels)
 * and a latency-critical request of 10 ms at 0.5 s. Under slo the best-effort parts finish
 * the kernel each has in flight (2 ms in all), stop, and the request runs alone: 12 ms. Under
 * pack (processor sharing, no gate) it shares the GPU three ways: 30 ms. The best-effort jobs
 * end at the same time either way (the GPU's work is the same). The classes' columns parse,
 * may be left out, and are checked. */
START_TEST(test_gate_preemption_model)
{
    static const char text[] = SIM_TRACE_HEADER_CLASSES "\n"
                               "1,0,1,1000,1,100,100,,,1\n"
                               "2,0,1,1000,1,100,100,,0,1\n"
                               "3,0.5,1,10,1,100,100,,50\n";
    static const double expect_ms[] = {12.0, 30.0};
    static const char *const policies[] = {"slo", "pack"};
    for (int k = 0; k < 2; k++) {
        sim_trace_t trace;
        sim_result_t result;
        sim_config_t config;
        char err[256] = "";
        ck_assert_int_eq(parse(text, &trace, err, sizeof(err)), SIM_OK);
        ck_assert(trace.jobs[2].latency_target_ms == 50 && trace.jobs[0].kernel_ms == 1);
        sim_config_default(&config);
        config.policy = policies[k];
        ck_assert_int_eq(sim_run(&trace, &config, &result, err, sizeof(err)), SIM_OK);
        ck_assert_uint_eq(result.jobs_completed, 3);
        ck_assert_uint_eq(result.jobs[2].requests, 1);
        ck_assert_uint_eq(result.jobs[0].requests, 0); /* best-effort: no requests */
        ASSERT_NEAR(result.jobs[2].latencies_s[0] * 1e3, expect_ms[k]);
        ASSERT_NEAR(result.jobs[0].finished_s, 2.01);
        ASSERT_NEAR(result.jobs[1].finished_s, 2.01);
        done(&trace, &result);
    }
    sim_trace_t trace;
    char err[256] = "";
    ck_assert_int_eq(parse(SIM_TRACE_HEADER_CLASSES "\n1,0,1,10,1,1,1,,-5,\n", &trace, err,
                           sizeof(err)), SIM_ERROR_MALFORMED);
    ck_assert_ptr_nonnull(strstr(err, "latency_target_ms"));
    ck_assert_int_eq(parse(SIM_TRACE_HEADER "\n1,0,1,10,1,1,1,,50,1\n", &trace, err,
                           sizeof(err)), SIM_ERROR_MALFORMED); /* no such columns declared */
}
END_TEST

START_TEST(test_policy_names)
{
    for (size_t i = 0; i < sizeof(every_policy) / sizeof(every_policy[0]); i++)
        ck_assert(sim_policy_known(every_policy[i]));
    ck_assert(sim_policy_known("SRTF"));
    ck_assert(!sim_policy_known("lottery"));
    ck_assert(!sim_policy_known(NULL));
}
END_TEST


/* ---- one core, two adapters: the same grant sequence -------------------------------------- */

typedef struct grant_log_s {
    uint64_t trace_id[4096];
    double at_s[4096];
    size_t count;
} grant_log_t;

static void record_grant(void *context, uint64_t trace_id, double now_s)
{
    grant_log_t *log = context;
    ck_assert_uint_lt(log->count, 4096);
    log->trace_id[log->count] = trace_id;
    log->at_s[log->count++] = now_s;
}

/* Grants at one instant have no order between them (the daemon's come from several events):
 * both logs are compared sorted by time, then job. */
static int grant_order(const void *a, const void *b)
{
    const double *x = a, *y = b; /* (at_s, trace_id) pairs */
    if (fabs(x[0] - y[0]) >= EPS)
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static void grant_log_sort(grant_log_t *log)
{
    double (*pairs)[2] = calloc(log->count ? log->count : 1, sizeof(*pairs));
    ck_assert_ptr_nonnull(pairs);
    for (size_t i = 0; i < log->count; i++) {
        pairs[i][0] = log->at_s[i];
        pairs[i][1] = (double)log->trace_id[i];
    }
    qsort(pairs, log->count, sizeof(*pairs), grant_order);
    for (size_t i = 0; i < log->count; i++) {
        log->at_s[i] = pairs[i][0];
        log->trace_id[i] = (uint64_t)pairs[i][1];
    }
    free(pairs);
}

/* salusd's own adapter (salusd/jobs.c, job_effects.c, gpu_sched.c) on the trace's jobs: a daemon
 * state as main() builds it (config from the command line, one simulated 1 GiB GPU, the
 * registry, the event loop), its clock the replay's (salusd_now_ns below). Each job is a
 * child process that waits to be killed, its connection a socket pair: it registers through
 * jobs_handle_register, and the test plays its shim: the reply brings the job page and the
 * notification eventfd; at each boundary it stores its counters and boundary_seq in the page,
 * and unless it runs freely it parks (waiting, a write to the eventfd) until the daemon's
 * grant_seq reaches it, as libsalus-client/gate.c does; its end is its process's (the pidfd).
 * Iterations are host-only: the lanes are held for whole iterations (--lane-hold
 * iteration). */
static uint64_t replay_now_ns;

uint64_t salusd_now_ns(void)
{
    return replay_now_ns;
}

typedef struct shim_job_s {
    const sim_job_spec_t *spec;
    pid_t pid;
    conn_t conn;
    int peer;       /* the job's end of its connection */
    job_page_t *page;
    int notify_fd;
    uint32_t seq;   /* the boundary it is at or parks at next */
    uint64_t iterations, busy_ns, last_ns;
    double start_s, end_s;
    int admitted, parked, running, done;
} shim_job_t;

typedef struct shim_replay_s {
    salusd_t d;
    shim_job_t *jobs;
    size_t count;
    grant_log_t *log;
    double now_s;
} shim_replay_t;

/* the daemon's loop, once: the notifications written so far, the processes that ended */
static void replay_pump(shim_replay_t *r)
{
    ck_assert_int_ge(event_base_loop(r->d.base, EVLOOP_NONBLOCK), 0);
}

static void shim_start_iteration(shim_replay_t *r, shim_job_t *j)
{
    j->running = 1;
    j->start_s = r->now_s;
    j->end_s = r->now_s + (1.0 - j->spec->gpu_fraction) * j->spec->iteration_ms / 1e3;
    record_grant(r->log, j->spec->trace_id, r->now_s);
}

/* At boundary j->seq: its counters, then on at once if it runs freely, else parked. */
static void shim_boundary(shim_replay_t *r, shim_job_t *j)
{
    job_page_t *page = j->page;
    atomic_store(&page->iterations, j->iterations);
    atomic_store(&page->busy_ns, j->busy_ns);
    atomic_store(&page->last_iteration_ns, j->last_ns);
    atomic_store(&page->boundary_seq, j->seq);
    if (atomic_load(&page->free_run) && atomic_load(&page->grant_seq) + 1 >= j->seq) {
        atomic_store(&page->grant_seq, j->seq); /* its own grant: nobody waits */
        shim_start_iteration(r, j);
        return;
    }
    uint64_t one = 1;
    atomic_store(&page->waiting, 1);
    j->parked = 1;
    ck_assert_int_eq(write(j->notify_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    replay_pump(r);
}

/* The register reply, if it came: the job page and the eventfd (SCM_RIGHTS). */
static int shim_admitted(shim_job_t *j)
{
    char data[4096];
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } control;
    struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof(control.buf)};
    ssize_t n = recvmsg(j->peer, &mh, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    ck_assert_msg(n > 0, "job %llu: its connection: %s", (unsigned long long)j->spec->trace_id,
                  n < 0 ? strerror(errno) : "closed");
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    ck_assert_msg(cm && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(2 * sizeof(int)),
                  "job %llu: a reply without its two descriptors (refused?)",
                  (unsigned long long)j->spec->trace_id);
    int fds[2];
    memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    j->page = mmap(NULL, JOB_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    ck_assert_ptr_ne(j->page, MAP_FAILED);
    close(fds[0]);
    ck_assert_uint_eq(j->page->magic, JOB_PAGE_MAGIC);
    j->notify_fd = fds[1];
    return 1;
}

/* After each event: jobs admitted meanwhile park at their first boundary (in registration
 * order, each heard before the next), and parked jobs whose grant came run. */
static void replay_settle(shim_replay_t *r)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < r->count; i++) {
            shim_job_t *j = &r->jobs[i];
            if (j->pid && !j->admitted && !j->done && shim_admitted(j)) {
                j->admitted = 1;
                j->seq = 1;
                shim_boundary(r, j);
                changed = 1;
            }
        }
        for (size_t i = 0; i < r->count; i++) {
            shim_job_t *j = &r->jobs[i];
            if (j->parked && atomic_load(&j->page->grant_seq) >= j->seq) {
                atomic_store(&j->page->waiting, 0);
                j->parked = 0;
                shim_start_iteration(r, j);
                changed = 1;
            }
        }
    }
}

static void shim_register(shim_replay_t *r, shim_job_t *j, uint64_t request_id)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    j->pid = fork();
    ck_assert_int_ge(j->pid, 0);
    if (j->pid == 0) {
        for (;;)
            pause();
    }
    conn_t *c = &j->conn;
    c->daemon = &r->d;
    c->bev = bufferevent_socket_new(r->d.base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    ck_assert_ptr_nonnull(c->bev);
    c->pid = j->pid;
    c->uid = getuid();
    c->gid = getgid();
    c->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
    ck_assert_int_ge(c->pidfd, 0);
    j->peer = sv[1];

    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    char name[32];
    snprintf(name, sizeof(name), "job%llu", (unsigned long long)j->spec->trace_id);
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    proto_pack_kv_str(&pk, "name", name);
    proto_pack_kv_uint(&pk, "iterations", j->spec->iterations);
    proto_pack_kv_uint(&pk, "persistent_bytes", j->spec->persistent_bytes);
    proto_pack_kv_uint(&pk, "ephemeral_bytes", j->spec->ephemeral_bytes);
    proto_pack_kv_int(&pk, "priority", j->spec->priority);
    proto_msg_t msg;
    memset(&msg, 0, sizeof(msg));
    msg.kind = PROTO_REQUEST;
    msg.id = request_id;
    snprintf(msg.op, sizeof(msg.op), "register");
    msgpack_unpacked_init(&msg.unpacked);
    size_t offset = 0;
    ck_assert_int_eq(msgpack_unpack_next(&msg.unpacked, sbuf.data, sbuf.size, &offset),
                     MSGPACK_UNPACK_SUCCESS);
    msg.body = msg.unpacked.data;
    jobs_handle_register(c, &msg);
    ck_assert_msg(jobs_conn_job_id(c) != 0, "job %llu was not registered", (unsigned long long)j->spec->trace_id);
    msgpack_unpacked_destroy(&msg.unpacked);
    msgpack_sbuffer_destroy(&sbuf);
}

/* Its last iteration done: its process exits (and is reaped, as salusctl run would). */
static void shim_exit(shim_replay_t *r, shim_job_t *j)
{
    int status;
    atomic_store(&j->page->iterations, j->iterations);
    atomic_store(&j->page->busy_ns, j->busy_ns);
    atomic_store(&j->page->last_iteration_ns, j->last_ns);
    j->done = 1;
    kill(j->pid, SIGKILL);
    ck_assert_int_eq(waitpid(j->pid, &status, 0), j->pid);
    replay_pump(r);
    ck_assert_msg(!jobs_conn_job_id(&j->conn), "the daemon missed job %llu's end",
                  (unsigned long long)j->spec->trace_id);
}

static void daemon_replay(const sim_trace_t *trace, const char *policy, grant_log_t *log)
{
    shim_replay_t *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    char err[512] = "";
    /* 1 MiB chunks: the core's grain stays the simulator's (salusd's default is 64 MiB) */
    char *argv[] = {"salusd", "--policy", (char *)policy, "--lane-hold", "iteration",
                    "--chunk-bytes", "1MiB", "--wait-log-s", "0", NULL};
    ck_assert_int_eq(salusd_config_load(&r->d.config, 9, argv), 0);
    salus_log_init("salusd", SALUS_LOG_ERROR);
    proto_enc_init(&r->d.enc);
    LIST_INIT(&r->d.conns);
    r->d.base = event_base_new();
    r->d.registry = registry_create();
    ck_assert(r->d.base && r->d.registry);
    r->d.devices.simulated = 1;
    r->d.devices.count = 1;
    r->d.devices.gpus[0].total_bytes = 1 * GIB;
    ck_assert_msg(gpu_sched_init(&r->d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(server_observe_close(&r->d, CONN_SLOT_JOB, &jobs_conn_ops), 0);
    r->count = trace->count;
    r->jobs = calloc(r->count, sizeof(*r->jobs));
    r->log = log;
    ck_assert_ptr_nonnull(r->jobs);
    for (size_t i = 0; i < r->count; i++) /* the trace is in submission order */
        r->jobs[i].spec = &trace->jobs[i];

    size_t next = 0, finished = 0;
    while (finished < r->count) {
        /* next event: an iteration end (earliest, then lowest index), else an arrival */
        shim_job_t *j = NULL;
        for (size_t i = 0; i < r->count; i++)
            if (r->jobs[i].running && (!j || r->jobs[i].end_s < j->end_s))
                j = &r->jobs[i];
        double arrival = next < r->count ? r->jobs[next].spec->submit_s : INFINITY;
        if (j && j->end_s <= arrival) {
            r->now_s = j->end_s;
            replay_now_ns = (uint64_t)llround(r->now_s * 1e9);
            j->running = 0;
            j->iterations++;
            j->last_ns = (uint64_t)llround((r->now_s - j->start_s) * 1e9);
            j->busy_ns += j->last_ns;
            if (j->iterations >= j->spec->iterations) {
                shim_exit(r, j);
                finished++;
            } else {
                j->seq++;
                shim_boundary(r, j);
            }
        } else {
            ck_assert_msg(next < r->count, "nothing runs and nothing arrives");
            r->now_s = arrival;
            replay_now_ns = (uint64_t)llround(r->now_s * 1e9);
            shim_register(r, &r->jobs[next], next + 1);
            next++;
        }
        replay_settle(r);
    }

    jobs_shutdown(&r->d);
    gpu_sched_fini(&r->d);
    for (size_t i = 0; i < r->count; i++) {
        shim_job_t *j = &r->jobs[i];
        if (j->pid && !j->done) {
            kill(j->pid, SIGKILL);
            waitpid(j->pid, NULL, 0);
        }
        if (j->page)
            munmap(j->page, JOB_PAGE_BYTES);
        if (j->notify_fd > 0)
            close(j->notify_fd);
        if (j->conn.bev)
            bufferevent_free(j->conn.bev);
        if (j->conn.pidfd > 0)
            close(j->conn.pidfd);
        if (j->peer > 0)
            close(j->peer);
    }
    registry_destroy(r->d.registry);
    event_base_free(r->d.base);
    proto_enc_destroy(&r->d.enc);
    free(r->jobs);
    free(r);
}

/* Host-only iterations, distinct arrival times, a 1 GiB GPU: jobs share lanes, SRTF and PACK
 * reorder them, a late big job merges lanes. */
static const char replay_rows[] =
    "1,0.000,6,40,0,100,300,0\n"
    "2,0.010,3,25,0,100,300,0\n"
    "3,0.020,8,15,0,50,200,0\n"
    "4,0.055,2,30,0,100,300,0\n"
    "5,0.090,5,10,0,20,100,0\n"
    "6,0.130,4,20,0,200,400,0\n"
    "7,0.300,3,35,0,50,250,0\n";

START_TEST(test_daemon_and_sim_adapters_grant_alike)
{
    static const char *policies[] = {"pack", "srtf"};
    const char *policy = policies[_i];
    sim_trace_t trace;
    sim_result_t result;
    sim_config_t config;
    char err[256] = "";
    grant_log_t *by_sim = calloc(1, sizeof(*by_sim)), *by_daemon = calloc(1, sizeof(*by_daemon));
    ck_assert(by_sim && by_daemon);
    load(replay_rows, &trace);
    sim_config_default(&config);
    config.policy = policy;
    config.gpu_memory_bytes = 1 * GIB;
    /* what salusd hears of a job at registration: its sizes and iteration count (salusctl run
     * --persistent, --ephemeral, --iterations), not its iteration time */
    config.hints_iterations_only = true;
    /* host-only iterations: the replay below holds lanes for whole iterations */
    config.lane_hold_gpu_only = false;
    config.on_grant = record_grant;
    config.on_grant_context = by_sim;
    ck_assert_msg(sim_run(&trace, &config, &result, err, sizeof(err)) == SIM_OK, "%s", err);
    daemon_replay(&trace, policy, by_daemon);
    grant_log_sort(by_sim);
    grant_log_sort(by_daemon);
    ck_assert_uint_gt(by_sim->count, 20);
    ck_assert_uint_eq(by_sim->count, by_daemon->count);
    for (size_t i = 0; i < by_sim->count; i++) {
        ck_assert_msg(by_sim->trace_id[i] == by_daemon->trace_id[i] &&
                          fabs(by_sim->at_s[i] - by_daemon->at_s[i]) < EPS,
                      "%s: grant %zu: simulator job %llu at %.6f s, daemon job %llu at %.6f s",
                      policy, i, (unsigned long long)by_sim->trace_id[i], by_sim->at_s[i],
                      (unsigned long long)by_daemon->trace_id[i], by_daemon->at_s[i]);
    }
    free(by_sim);
    free(by_daemon);
    done(&trace, &result);
}
END_TEST

static Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *model = tcase_create("model");
    size_t policies = sizeof(every_policy) / sizeof(every_policy[0]);
    tcase_add_loop_test(model, test_one_job_alone, 0, (int)policies);
    tcase_add_test(model, test_late_submission);
    tcase_add_test(model, test_unknown_sizes_claims);
    tcase_add_test(model, test_one_lane_takes_turns);
    tcase_add_test(model, test_turn_waits_and_lower_queue);
    tcase_add_test(model, test_two_lanes_share_the_gpu);
    tcase_add_test(model, test_packing_gains_utilisation);
    tcase_add_test(model, test_exclusive_vs_pack_order);
    tcase_add_test(model, test_switch_cost_adds_up);
    tcase_add_test(model, test_lanes_fit_more_than_mps);
    tcase_add_test(model, test_two_gpus);
    tcase_add_test(model, test_lane_hold_gpu_interleaves);
    tcase_add_test(model, test_gpu_share_fcfs);
    tcase_add_loop_test(model, test_too_large_is_refused, 0, (int)policies);
    tcase_add_loop_test(model, test_random_trace_completes, 0, (int)policies);
    tcase_add_test(model, test_quantile);
    tcase_add_test(model, test_gate_preemption_model);
    tcase_add_loop_test(model, test_daemon_and_sim_adapters_grant_alike, 0, 2);
    suite_add_tcase(s, model);

    TCase *trace = tcase_create("trace");
    tcase_add_test(trace, test_trace_parses);
    tcase_add_loop_test(trace, test_trace_malformed, 0,
                        (int)(sizeof(malformed_cases) / sizeof(malformed_cases[0])));
    tcase_add_test(trace, test_policy_names);
    suite_add_tcase(s, trace);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sim_suite());
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists every test */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
