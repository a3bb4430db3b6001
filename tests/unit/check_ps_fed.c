/* Unit tests of federated rounds' pure logic (ps-core/ps_fed.h): the rule text (round trips,
 * every bad text), the seeded choice of a round's clients (K distinct sorted ids,
 * reproducible, pinned, different between rounds, roughly uniform), the weighted average
 * against a reference computed here, the drop and partial policies, a round with no accepted
 * push, duplicates, errors that change nothing, the timeout's close. Nothing here sleeps. */
#include "check_run.h"
#include "ps_fed.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ps_fed_spec_t spec_of(uint32_t n, uint32_t k, uint32_t e, uint32_t seed,
                             ps_fed_policy_t policy)
{
    return (ps_fed_spec_t){.clients = n, .per_round = k, .epochs = e, .seed = seed,
                           .policy = policy};
}

/* ---- the rule text ------------------------------------------------------------------------ */

START_TEST(test_parse_good)
{
    ps_fed_spec_t s;
    char err[256] = "", buf[PS_FED_RULE_BYTES];
    ck_assert_int_eq(ps_fed_parse("fedavg:30:10:20:1:drop", &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(s.clients, 30);
    ck_assert_uint_eq(s.per_round, 10);
    ck_assert_uint_eq(s.epochs, 20);
    ck_assert_uint_eq(s.seed, 1);
    ck_assert_int_eq(s.policy, PS_FED_DROP);
    ck_assert_int_eq(ps_fed_parse("fedavg:1:1:1:0:partial", &s, err, sizeof(err)), 0);
    ck_assert_int_eq(s.policy, PS_FED_PARTIAL);
    ck_assert_str_eq(err, ""); /* untouched on success */
    /* the longest: every field at its bound, 63 characters at most with the NUL */
    ck_assert_int_eq(ps_fed_parse("fedavg:4096:4096:1000:4294967295:partial", &s, err,
                                  sizeof(err)), 0);
    ck_assert_uint_eq(s.seed, 4294967295u);
    int n = ps_fed_format(&s, buf, sizeof(buf));
    ck_assert_int_eq(n, (int)strlen("fedavg:4096:4096:1000:4294967295:partial"));
    ck_assert_str_eq(buf, "fedavg:4096:4096:1000:4294967295:partial");
    ck_assert_int_lt(n, PS_FED_RULE_BYTES);
}
END_TEST

START_TEST(test_round_trips)
{
    const char *texts[] = {"fedavg:30:10:20:1:drop", "fedavg:100:10:5:123456:partial",
                           "fedavg:3:2:5:7:drop", "fedavg:1:1:1000:0:drop"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        ps_fed_spec_t s, t;
        char buf[PS_FED_RULE_BYTES];
        ck_assert_int_eq(ps_fed_parse(texts[i], &s, NULL, 0), 0);
        ck_assert_int_eq(ps_fed_format(&s, buf, sizeof(buf)), (int)strlen(texts[i]));
        ck_assert_str_eq(buf, texts[i]);
        ck_assert_int_eq(ps_fed_parse(buf, &t, NULL, 0), 0);
        ck_assert_mem_eq(&s, &t, sizeof(s));
    }
    /* a text with leading zeros reads as its canonical form */
    ps_fed_spec_t s;
    char buf[PS_FED_RULE_BYTES];
    ck_assert_int_eq(ps_fed_parse("fedavg:030:010:020:01:drop", &s, NULL, 0), 0);
    ps_fed_format(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "fedavg:30:10:20:1:drop");
}
END_TEST

START_TEST(test_parse_bad)
{
    const char *bad[] = {
        "", "fedavg", "fedavg:", "fedavg:30:10:20:1", "fedavg:30:10:20:1:",
        "fedavg:30:10:20:1:Drop",
        "fedavg:30:10:20:1:drop ", " fedavg:30:10:20:1:drop", "fedavg:30:10:20:1:drop:x",
        "fedavg:-30:10:20:1:drop", "fedavg:+30:10:20:1:drop", "fedavg:30:10:20:-1:drop",
        "fedavg: 30:10:20:1:drop", "fedavg:30::20:1:drop", "fedavg:0x1e:10:20:1:drop",
        "fedavg:30.0:10:20:1:drop", "fedavg:0:0:20:1:drop", "fedavg:30:0:20:1:drop",
        "fedavg:30:31:20:1:drop", "fedavg:30:10:0:1:drop", "fedavg:30:10:1001:1:drop",
        "fedavg:4097:10:20:1:drop", "fedavg:30:10:20:4294967296:drop",
        "fedavg:99999999999:10:20:1:drop", "fedavg:30:10:20:1:dropped", "fedavg:30:10:20:1:partia",
        "fedavgx:30:10:20:1:drop", "sgd:0.1", "add", "fedavg:30:10:20:1:drop\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_fed_spec_t s = spec_of(7, 3, 2, 99, PS_FED_PARTIAL), before = s;
        char err[256] = "";
        ck_assert_msg(ps_fed_parse(bad[i], &s, err, sizeof(err)) == -EINVAL, "'%s' parsed",
                      bad[i]);
        ck_assert_msg(err[0] != '\0', "'%s': no reason", bad[i]);
        ck_assert_mem_eq(&s, &before, sizeof(s)); /* unchanged */
    }
    ck_assert_int_eq(ps_fed_parse(NULL, &(ps_fed_spec_t){0}, NULL, 0), -EINVAL);
    /* reasons say what is wrong */
    char err[256];
    ps_fed_spec_t s;
    ps_fed_parse("fedavg:30:31:20:1:drop", &s, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "31 clients per round"));
    ps_fed_parse("fedavg:30:10:20:1:fast", &s, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "drop or partial"));
    ps_fed_parse("fedavg:30:10:-2:1:drop", &s, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "epochs E"));
    /* a short err buffer is truncated, not overrun */
    char tiny[8];
    memset(tiny, 'x', sizeof(tiny));
    ck_assert_int_eq(ps_fed_parse("nope", &s, tiny, 4), -EINVAL);
    ck_assert_int_eq(tiny[3], '\0');
    ck_assert_int_eq(tiny[4], 'x');
}
END_TEST

START_TEST(test_format_bad)
{
    char buf[PS_FED_RULE_BYTES];
    ps_fed_spec_t s = spec_of(30, 10, 20, 1, PS_FED_DROP);
    ck_assert_int_eq(ps_fed_format(&s, buf, 10), -ENOSPC);
    ck_assert_int_eq(ps_fed_format(&s, buf, strlen("fedavg:30:10:20:1:drop")), -ENOSPC);
    ck_assert_int_eq(ps_fed_format(&s, buf, strlen("fedavg:30:10:20:1:drop") + 1), 22);
    ps_fed_spec_t bad[] = {spec_of(0, 1, 1, 0, PS_FED_DROP), spec_of(5, 6, 1, 0, PS_FED_DROP),
                           spec_of(5, 0, 1, 0, PS_FED_DROP), spec_of(5, 2, 0, 0, PS_FED_DROP),
                           spec_of(5, 2, 1001, 0, PS_FED_DROP),
                           spec_of(4097, 2, 1, 0, PS_FED_DROP),
                           spec_of(5, 2, 1, 0, (ps_fed_policy_t)7)};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(ps_fed_format(&bad[i], buf, sizeof(buf)), -EINVAL);
    ck_assert_int_eq(ps_fed_format(NULL, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_is_rule)
{
    ck_assert_int_eq(ps_fed_is_rule("fedavg:30:10:20:1:drop"), 1);
    ck_assert_int_eq(ps_fed_is_rule("fedavg"), 1);
    ck_assert_int_eq(ps_fed_is_rule("fedavg-nonsense"), 1); /* federated, not valid */
    ck_assert_int_eq(ps_fed_is_rule("fedav"), 0);
    ck_assert_int_eq(ps_fed_is_rule("sgd:0.1"), 0);
    ck_assert_int_eq(ps_fed_is_rule(""), 0);
    ck_assert_int_eq(ps_fed_is_rule(NULL), 0);
}
END_TEST

/* ---- the choice of a round's clients --------------------------------------------------- */

START_TEST(test_select_distinct_sorted)
{
    uint32_t ids[PS_FED_MAX_CLIENTS];
    ps_fed_spec_t specs[] = {spec_of(30, 10, 20, 1, PS_FED_DROP),
                             spec_of(100, 100, 1, 5, PS_FED_DROP),
                             spec_of(1, 1, 1, 0, PS_FED_DROP),
                             spec_of(4096, 17, 1, 4294967295u, PS_FED_PARTIAL)};
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (uint64_t r = 0; r < 200; r++) {
            ps_fed_select(&specs[s], r, ids);
            for (uint32_t i = 0; i < specs[s].per_round; i++) {
                ck_assert_uint_lt(ids[i], specs[s].clients);
                if (i)
                    ck_assert_uint_lt(ids[i - 1], ids[i]); /* ascending, so distinct */
                ck_assert_int_eq(ps_fed_selected(&specs[s], r, ids[i]), 1);
            }
        }
    /* K = N: everyone, every round */
    ps_fed_select(&specs[1], 12345, ids);
    for (uint32_t i = 0; i < 100; i++)
        ck_assert_uint_eq(ids[i], i);
    /* ps_fed_selected agrees with the choice for every client */
    ps_fed_spec_t s = spec_of(30, 10, 20, 1, PS_FED_DROP);
    ps_fed_select(&s, 3, ids);
    uint32_t count = 0;
    for (uint32_t c = 0; c < 30; c++)
        count += (uint32_t)ps_fed_selected(&s, 3, c);
    ck_assert_uint_eq(count, 10);
    ck_assert_int_eq(ps_fed_selected(&s, 3, 30), 0);
    ck_assert_int_eq(ps_fed_selected(&s, 3, UINT32_MAX), 0);
}
END_TEST

static void ids_text(const ps_fed_spec_t *s, uint64_t round, char *out, size_t size)
{
    uint32_t ids[PS_FED_MAX_CLIENTS];
    ps_fed_select(s, round, ids);
    out[0] = '\0';
    for (uint32_t i = 0; i < s->per_round; i++) {
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%u", i ? "," : "", ids[i]);
    }
}

START_TEST(test_select_reproducible_pinned)
{
    /* the choice is part of the contract (a run with salus and one without choose alike):
     * pinned here. splitmix64 seeded with SEED; its first output xor the round seeds a
     * second splitmix64 whose outputs drive a partial Fisher-Yates shuffle of 0 .. N-1. */
    char text[256], again[256];
    ps_fed_spec_t s = spec_of(3, 2, 5, 7, PS_FED_DROP);
    ids_text(&s, 0, text, sizeof(text));
    ck_assert_str_eq(text, "0,1");
    ids_text(&s, 1, text, sizeof(text));
    ck_assert_str_eq(text, "0,2");
    ids_text(&s, 2, text, sizeof(text));
    ck_assert_str_eq(text, "0,1");
    ps_fed_spec_t big = spec_of(30, 10, 20, 1, PS_FED_PARTIAL);
    ids_text(&big, 0, text, sizeof(text));
    ck_assert_str_eq(text, "0,2,4,5,8,13,15,17,18,19");
    /* the same (seed, round): the same clients; the policy and E do not matter */
    ps_fed_spec_t other = spec_of(30, 10, 3, 1, PS_FED_DROP);
    for (uint64_t r = 0; r < 50; r++) {
        ids_text(&big, r, text, sizeof(text));
        ids_text(&other, r, again, sizeof(again));
        ck_assert_str_eq(text, again);
        ids_text(&big, r, again, sizeof(again));
        ck_assert_str_eq(text, again);
    }
    /* another seed chooses otherwise (for some round among the first few) */
    ps_fed_spec_t seed2 = spec_of(30, 10, 20, 2, PS_FED_PARTIAL);
    int differ = 0;
    for (uint64_t r = 0; r < 5; r++) {
        ids_text(&big, r, text, sizeof(text));
        ids_text(&seed2, r, again, sizeof(again));
        differ |= strcmp(text, again) != 0;
    }
    ck_assert(differ);
}
END_TEST

START_TEST(test_select_differs_between_rounds)
{
    char a[256], b[256];
    ps_fed_spec_t s = spec_of(100, 10, 20, 42, PS_FED_DROP);
    int same = 0;
    for (uint64_t r = 0; r < 100; r++) {
        ids_text(&s, r, a, sizeof(a));
        ids_text(&s, r + 1, b, sizeof(b));
        same += strcmp(a, b) == 0;
    }
    /* C(100, 10) choices: two consecutive rounds alike would be a broken generator */
    ck_assert_int_eq(same, 0);
}
END_TEST

START_TEST(test_select_roughly_uniform)
{
    /* N = 20, K = 5, 20000 rounds: each client is chosen with probability 1/4, 5000 times
     * expected, standard deviation sqrt(20000 * 1/4 * 3/4) = 61; allow 5 sigma. And the
     * pairs: a client's neighbours are as likely as any other (no structure by id). */
    enum { N = 20, K = 5, ROUNDS = 20000 };
    uint32_t ids[N], hits[N] = {0}, first[N] = {0};
    ps_fed_spec_t s = spec_of(N, K, 1, 2026, PS_FED_DROP);
    for (uint64_t r = 0; r < ROUNDS; r++) {
        ps_fed_select(&s, r, ids);
        for (uint32_t i = 0; i < K; i++)
            hits[ids[i]]++;
        first[ids[0]]++;
    }
    double chi2 = 0;
    for (uint32_t c = 0; c < N; c++) {
        ck_assert_msg(hits[c] > 5000 - 5 * 61 && hits[c] < 5000 + 5 * 61, "client %u: %u",
                      c, hits[c]);
        chi2 += (hits[c] - 5000.0) * (hits[c] - 5000.0) / 5000.0;
    }
    /* 19 degrees of freedom (scaled for the without-replacement choice, which only lowers
     * it): P(chi2 > 50) < 1e-4 */
    ck_assert_msg(chi2 < 50, "chi2 %g", chi2);
    /* the smallest id of a round is 0 with probability K/N = 1/4: 5000 +- 5 sigma */
    ck_assert_uint_gt(first[0], 5000 - 5 * 61);
    ck_assert_uint_lt(first[0], 5000 + 5 * 61);
}
END_TEST

/* ---- the model and its rounds -------------------------------------------------------------- */

START_TEST(test_create)
{
    ps_fed_spec_t s = spec_of(4, 2, 3, 9, PS_FED_DROP);
    float init[3] = {1.5f, -2.0f, 0.25f};
    ps_fed_t *f = ps_fed_create(&s, 3, init);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(ps_fed_count(f), 3);
    ck_assert_uint_eq(ps_fed_round(f), 0);
    ck_assert_uint_eq(ps_fed_pushed(f), 0);
    ck_assert_mem_eq(ps_fed_values(f), init, sizeof(init));
    ck_assert_mem_eq(ps_fed_spec(f), &s, sizeof(s));
    ps_fed_round_info_t info;
    ps_fed_last_round(f, &info);
    ck_assert_uint_eq(info.round, UINT64_MAX);
    ck_assert_uint_ge(ps_fed_bytes(f), 3 * sizeof(float));
    ps_fed_destroy(f);
    f = ps_fed_create(&s, 5, NULL);
    for (int i = 0; i < 5; i++)
        ck_assert(ps_fed_values(f)[i] == 0.0f);
    ps_fed_destroy(f);
    ps_fed_destroy(NULL);
    /* bad input */
    init[1] = NAN;
    ck_assert_ptr_null(ps_fed_create(&s, 3, init));
    init[1] = INFINITY;
    ck_assert_ptr_null(ps_fed_create(&s, 3, init));
    ck_assert_ptr_null(ps_fed_create(&s, 0, NULL));
    ck_assert_ptr_null(ps_fed_create(&s, (1ull << 32) + 1, NULL));
    ck_assert_ptr_null(ps_fed_create(NULL, 3, NULL));
    ps_fed_spec_t bad = spec_of(4, 5, 3, 9, PS_FED_DROP);
    ck_assert_ptr_null(ps_fed_create(&bad, 3, NULL));
}
END_TEST

/* A client's model: w[j] = base + j * step (in float). */
static void model_of(float *w, uint64_t n, float base, float step)
{
    for (uint64_t j = 0; j < n; j++)
        w[j] = base + (float)j * step;
}

/* The reference average: sum of (n_k / n) * w_k over the given pushes in the order given
 * (callers give them in increasing client id order), in double, rounded once. */
static void reference(float *out, uint64_t count, int m, const int64_t *samples,
                      const float *const *models)
{
    double n = 0;
    for (int k = 0; k < m; k++)
        n += (double)samples[k];
    for (uint64_t j = 0; j < count; j++) {
        double acc = 0;
        for (int k = 0; k < m; k++)
            acc += ((double)samples[k] / n) * (double)models[k][j];
        out[j] = (float)acc;
    }
}

START_TEST(test_weighted_average)
{
    enum { COUNT = 257 };
    ps_fed_spec_t s = spec_of(10, 4, 5, 3, PS_FED_DROP);
    uint32_t ids[4];
    ps_fed_select(&s, 0, ids);
    ps_fed_t *f = ps_fed_create(&s, COUNT, NULL);
    static float w[4][COUNT], want[COUNT];
    const float *models[4];
    int64_t samples[4] = {17, 3, 1000, 29};
    for (int k = 0; k < 4; k++) {
        model_of(w[k], COUNT, 0.1f * (float)(k + 1) - 0.37f, 0.013f * (float)(k + 2));
        models[k] = w[k];
    }
    /* pushed in a scrambled order: the average is still taken in client id order */
    int order[4] = {2, 0, 3, 1};
    char err[256];
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        int rc = ps_fed_push(f, ids[k], 0, samples[k], 5, w[k], COUNT, err, sizeof(err));
        ck_assert_int_eq(rc, i == 3 ? 2 : 1);
    }
    reference(want, COUNT, 4, samples, models);
    ck_assert_uint_eq(ps_fed_round(f), 1);
    ck_assert_mem_eq(ps_fed_values(f), want, sizeof(want)); /* bit for bit */
    ps_fed_round_info_t info;
    ps_fed_last_round(f, &info);
    ck_assert_uint_eq(info.round, 0);
    ck_assert_uint_eq(info.pushed, 4);
    ck_assert_uint_eq(info.accepted, 4);
    ck_assert_uint_eq(info.samples, 17 + 3 + 1000 + 29);
    ck_assert_int_eq(info.timed_out, 0);
    ck_assert_uint_eq(ps_fed_pushed(f), 0);
    ps_fed_destroy(f);
}
END_TEST

START_TEST(test_drop_and_partial)
{
    enum { COUNT = 33 };
    static float w[3][COUNT], want[COUNT], start[COUNT];
    int64_t samples[3] = {5, 7, 11};
    uint32_t work[3] = {8, 3, 0}; /* E = 8: one full, one partial, one that did nothing */
    for (int k = 0; k < 3; k++)
        model_of(w[k], COUNT, 1.0f + (float)k, -0.25f * (float)k);
    model_of(start, COUNT, 9.0f, 1.0f);
    for (int p = 0; p < 2; p++) {
        ps_fed_policy_t policy = p ? PS_FED_PARTIAL : PS_FED_DROP;
        ps_fed_spec_t s = spec_of(3, 3, 8, 11, policy);
        ps_fed_t *f = ps_fed_create(&s, COUNT, start);
        for (uint32_t c = 0; c < 3; c++)
            ck_assert_int_ge(ps_fed_push(f, c, 0, samples[c], work[c], w[c], COUNT, NULL, 0),
                             1);
        ps_fed_round_info_t info;
        ps_fed_last_round(f, &info);
        ck_assert_uint_eq(info.pushed, 3);
        if (policy == PS_FED_DROP) { /* only the full push counts: its model alone */
            ck_assert_uint_eq(info.accepted, 1);
            ck_assert_uint_eq(info.samples, 5);
            const float *m[1] = {w[0]};
            reference(want, COUNT, 1, samples, m);
            ck_assert_mem_eq(want, w[0], sizeof(want));
        } else { /* any work >= 1: clients 0 and 1 */
            ck_assert_uint_eq(info.accepted, 2);
            ck_assert_uint_eq(info.samples, 12);
            const float *m[2] = {w[0], w[1]};
            reference(want, COUNT, 2, samples, m);
        }
        ck_assert_mem_eq(ps_fed_values(f), want, sizeof(want));
        ps_fed_destroy(f);
    }
}
END_TEST

START_TEST(test_no_accepted_push_keeps_model)
{
    enum { COUNT = 9 };
    float start[COUNT], w[COUNT];
    model_of(start, COUNT, -3.0f, 0.5f);
    model_of(w, COUNT, 100.0f, 1.0f);
    ps_fed_spec_t s = spec_of(2, 2, 4, 0, PS_FED_DROP);
    ps_fed_t *f = ps_fed_create(&s, COUNT, start);
    ck_assert_int_eq(ps_fed_push(f, 0, 0, 10, 3, w, COUNT, NULL, 0), 1);
    ck_assert_int_eq(ps_fed_push(f, 1, 0, 10, 0, w, COUNT, NULL, 0), 2);
    ck_assert_uint_eq(ps_fed_round(f), 1);
    ck_assert_mem_eq(ps_fed_values(f), start, sizeof(start));
    ps_fed_round_info_t info;
    ps_fed_last_round(f, &info);
    ck_assert_uint_eq(info.accepted, 0);
    ck_assert_uint_eq(info.samples, 0);
    /* and a timed-out round with nobody: the model stays too */
    ck_assert_uint_eq(ps_fed_close_round(f), 0);
    ck_assert_uint_eq(ps_fed_round(f), 2);
    ck_assert_mem_eq(ps_fed_values(f), start, sizeof(start));
    ps_fed_last_round(f, &info);
    ck_assert_uint_eq(info.round, 1);
    ck_assert_uint_eq(info.pushed, 0);
    ck_assert_int_eq(info.timed_out, 1);
    ps_fed_destroy(f);
}
END_TEST

START_TEST(test_duplicates)
{
    enum { COUNT = 4 };
    float w[COUNT] = {1, 2, 3, 4}, other[COUNT] = {40, 30, 20, 10};
    ps_fed_spec_t s = spec_of(3, 2, 1, 7, PS_FED_PARTIAL); /* rounds 0: {0,1}, 1: {0,2} */
    ps_fed_t *f = ps_fed_create(&s, COUNT, NULL);
    char err[256] = "";
    ck_assert_int_eq(ps_fed_push(f, 0, 0, 5, 1, w, COUNT, err, sizeof(err)), 1);
    ck_assert_int_eq(ps_fed_client_pushed(f, 0), 1);
    ck_assert_int_eq(ps_fed_client_pushed(f, 1), 0);
    uint64_t bytes = ps_fed_bytes(f);
    /* the same client again (even with other values): nothing changes */
    ck_assert_int_eq(ps_fed_push(f, 0, 0, 5, 1, other, COUNT, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_fed_push(f, 0, 0, 9, 1, other, COUNT, err, sizeof(err)), 0);
    ck_assert_uint_eq(ps_fed_pushed(f), 1);
    ck_assert_uint_eq(ps_fed_bytes(f), bytes);
    ck_assert_int_eq(ps_fed_push(f, 1, 0, 5, 1, other, COUNT, err, sizeof(err)), 2);
    float want[COUNT];
    for (int j = 0; j < COUNT; j++)
        want[j] = (float)(0.5 * w[j] + 0.5 * other[j]);
    ck_assert_mem_eq(ps_fed_values(f), want, sizeof(want));
    /* a repeat of a push for the round that closed since: a duplicate, nothing changes */
    ck_assert_int_eq(ps_fed_push(f, 1, 0, 5, 1, other, COUNT, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_fed_push(f, 0, 0, 5, 1, w, COUNT, err, sizeof(err)), 0);
    ck_assert_uint_eq(ps_fed_round(f), 1);
    ck_assert_uint_eq(ps_fed_pushed(f), 0);
    ck_assert_mem_eq(ps_fed_values(f), want, sizeof(want));
    /* client 2 did not push for round 0: for it round 0 is closed */
    err[0] = '\0';
    ck_assert_int_eq(ps_fed_push(f, 2, 0, 5, 1, w, COUNT, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "round 0 is closed (the open round is 1)");
    /* round 1 closes by the timeout with client 0 alone; then round 0 is two rounds back */
    ck_assert_int_eq(ps_fed_push(f, 0, 1, 5, 1, w, COUNT, err, sizeof(err)), 1);
    ck_assert_uint_eq(ps_fed_close_round(f), 1);
    ck_assert_mem_eq(ps_fed_values(f), w, sizeof(w));
    ck_assert_int_eq(ps_fed_push(f, 0, 1, 5, 1, w, COUNT, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_fed_push(f, 2, 1, 5, 1, w, COUNT, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(ps_fed_push(f, 1, 0, 5, 1, w, COUNT, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "round 0 is closed (the open round is 2)");
    ps_fed_destroy(f);
}
END_TEST

/* Everything observable of a ps_fed_t, to compare before and after a refused push. */
typedef struct snapshot_s {
    uint64_t round, bytes;
    uint32_t pushed;
    int client_pushed[8];
    ps_fed_round_info_t last;
    float values[16];
} snapshot_t;

static void snap(const ps_fed_t *f, snapshot_t *s)
{
    memset(s, 0, sizeof(*s));
    s->round = ps_fed_round(f);
    s->bytes = ps_fed_bytes(f);
    s->pushed = ps_fed_pushed(f);
    for (uint32_t c = 0; c < 8; c++)
        s->client_pushed[c] = c < ps_fed_spec(f)->clients ? ps_fed_client_pushed(f, c) : 0;
    ps_fed_last_round(f, &s->last);
    memcpy(s->values, ps_fed_values(f), ps_fed_count(f) * sizeof(float));
}

START_TEST(test_errors_change_nothing)
{
    enum { COUNT = 16 };
    float w[COUNT], nan_model[COUNT], inf_model[COUNT];
    model_of(w, COUNT, 0.5f, 0.125f);
    memcpy(nan_model, w, sizeof(w));
    nan_model[COUNT - 1] = NAN;
    memcpy(inf_model, w, sizeof(w));
    inf_model[3] = -INFINITY;
    /* N = 8, K = 3, E = 20; round 0 taken by its clients so that round 1 is open with one
     * push in, and a previous round exists */
    ps_fed_spec_t s = spec_of(8, 3, 20, 5, PS_FED_DROP);
    uint32_t r0[3], r1[3];
    ps_fed_select(&s, 0, r0);
    ps_fed_select(&s, 1, r1);
    ps_fed_t *f = ps_fed_create(&s, COUNT, NULL);
    for (int k = 0; k < 3; k++)
        ck_assert_int_ge(ps_fed_push(f, r0[k], 0, 10 + k, 20, w, COUNT, NULL, 0), 1);
    ck_assert_int_eq(ps_fed_push(f, r1[0], 1, 4, 20, w, COUNT, NULL, 0), 1);
    uint32_t outside = 0, not_prev = 0;
    while (ps_fed_selected(&s, 1, outside))
        outside++;
    while (ps_fed_selected(&s, 0, not_prev))
        not_prev++;
    struct {
        uint32_t client;
        uint64_t round;
        int64_t samples;
        uint32_t work;
        const float *values;
        uint64_t n;
        const char *reason;
    } bad[] = {
        {r1[1], 0, 10, 20, w, COUNT, NULL}, /* filled in below: round 0 closed */
        {r1[1], 2, 10, 20, w, COUNT, "round 2 is not open (the open round is 1)"},
        {r1[1], UINT64_MAX, 10, 20, w, COUNT, NULL},
        {outside, 1, 10, 20, w, COUNT, NULL},
        {8, 1, 10, 20, w, COUNT, "client 8 is outside the table's 8 clients"},
        {4000, 1, 10, 20, w, COUNT, "client 4000 is outside the table's 8 clients"},
        {r1[1], 1, -3, 20, w, COUNT, "sample count -3: it must be at least 1"},
        {r1[1], 1, 0, 20, w, COUNT, "sample count 0: it must be at least 1"},
        {r1[1], 1, INT64_MIN, 20, w, COUNT, NULL},
        {r1[1], 1, INT64_MAX, 20, w, COUNT, NULL},
        {r1[1], 1, 10, 21, w, COUNT, "work 21 is more than the 20 epochs"},
        {r1[1], 1, 10, UINT32_MAX, w, COUNT, NULL},
        {r1[1], 1, 10, 20, w, COUNT - 1, NULL},
        {r1[1], 1, 10, 20, w, COUNT + 1, NULL},
        {r1[1], 1, 10, 20, NULL, COUNT, NULL},
        {r1[1], 1, 10, 20, nan_model, COUNT, "value 15 of the push is not finite"},
        {r1[1], 1, 10, 20, inf_model, COUNT, "value 3 of the push is not finite"},
        {r1[1], 1, 10, 3, nan_model, COUNT, NULL}, /* dropped, but still checked */
        {not_prev, 0, 10, 20, w, COUNT, "round 0 is closed (the open round is 1)"},
    };
    char reason0[128], reason_outside[128];
    snprintf(reason0, sizeof(reason0), "round 0 is closed (the open round is 1)");
    snprintf(reason_outside, sizeof(reason_outside), "client %u is not one of round 1's clients",
             outside);
    bad[3].reason = reason_outside;
    snapshot_t before, after;
    snap(f, &before);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        int rc = ps_fed_push(f, bad[i].client, bad[i].round, bad[i].samples, bad[i].work,
                             bad[i].values, bad[i].n, err, sizeof(err));
        ck_assert_msg(rc == -EINVAL, "bad push %zu: rc %d", i, rc);
        ck_assert_msg(err[0] != '\0', "bad push %zu: no reason", i);
        if (bad[i].reason)
            ck_assert_msg(strcmp(err, bad[i].reason) == 0, "bad push %zu: '%s'", i, err);
        if (i == 0) /* r1[1] may have pushed for round 0: then it is a duplicate, not this */
            ck_assert(!strcmp(err, reason0) || ps_fed_selected(&s, 0, r1[1]));
        snap(f, &after);
        ck_assert_msg(memcmp(&before, &after, sizeof(before)) == 0, "bad push %zu changed it",
                      i);
    }
    /* the round then closes as if nothing had happened: r1[1] and r1[2] push */
    ck_assert_int_eq(ps_fed_push(f, r1[1], 1, 6, 20, w, COUNT, NULL, 0), 1);
    ck_assert_int_eq(ps_fed_push(f, r1[2], 1, 6, 20, w, COUNT, NULL, 0), 2);
    ck_assert_mem_eq(ps_fed_values(f), w, sizeof(w)); /* the average of equal models */
    ps_fed_destroy(f);
}
END_TEST

START_TEST(test_close_round)
{
    enum { COUNT = 5 };
    float a[COUNT], b[COUNT], want[COUNT];
    model_of(a, COUNT, 1.0f, 0.1f);
    model_of(b, COUNT, -2.0f, 0.3f);
    ps_fed_spec_t s = spec_of(6, 4, 10, 1234, PS_FED_PARTIAL);
    uint32_t ids[4];
    ps_fed_select(&s, 0, ids);
    ps_fed_t *f = ps_fed_create(&s, COUNT, NULL);
    uint64_t empty_bytes = ps_fed_bytes(f);
    /* two of the four push (one partial, accepted under partial), then the timeout */
    ck_assert_int_eq(ps_fed_push(f, ids[3], 0, 9, 4, b, COUNT, NULL, 0), 1);
    ck_assert_int_eq(ps_fed_push(f, ids[1], 0, 3, 10, a, COUNT, NULL, 0), 1);
    ck_assert_uint_eq(ps_fed_pushed(f), 2);
    ck_assert_uint_eq(ps_fed_bytes(f), empty_bytes + 2 * COUNT * sizeof(float));
    ck_assert_uint_eq(ps_fed_close_round(f), 2);
    ck_assert_uint_eq(ps_fed_bytes(f), empty_bytes);
    int64_t samples[2] = {3, 9};
    const float *m[2] = {a, b}; /* ids[1] < ids[3]: a first */
    reference(want, COUNT, 2, samples, m);
    ck_assert_mem_eq(ps_fed_values(f), want, sizeof(want));
    ps_fed_round_info_t info;
    ps_fed_last_round(f, &info);
    ck_assert_uint_eq(info.round, 0);
    ck_assert_uint_eq(info.pushed, 2);
    ck_assert_uint_eq(info.accepted, 2);
    ck_assert_uint_eq(info.samples, 12);
    ck_assert_int_eq(info.timed_out, 1);
    ck_assert_uint_eq(ps_fed_round(f), 1);
    ck_assert_uint_eq(ps_fed_pushed(f), 0);
    /* a client left out of round 0 finds it closed; one that pushed repeats: a duplicate */
    ck_assert_int_eq(ps_fed_push(f, ids[0], 0, 3, 10, a, COUNT, NULL, 0), -EINVAL);
    ck_assert_int_eq(ps_fed_push(f, ids[3], 0, 9, 4, b, COUNT, NULL, 0), 0);
    ps_fed_destroy(f);
}
END_TEST

static Suite *fed_suite(void)
{
    Suite *s = suite_create("ps_fed");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parse_good);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_parse_bad);
    tcase_add_test(tc, test_format_bad);
    tcase_add_test(tc, test_is_rule);
    tcase_add_test(tc, test_select_distinct_sorted);
    tcase_add_test(tc, test_select_reproducible_pinned);
    tcase_add_test(tc, test_select_differs_between_rounds);
    tcase_add_test(tc, test_select_roughly_uniform);
    tcase_add_test(tc, test_create);
    tcase_add_test(tc, test_weighted_average);
    tcase_add_test(tc, test_drop_and_partial);
    tcase_add_test(tc, test_no_accepted_push_keeps_model);
    tcase_add_test(tc, test_duplicates);
    tcase_add_test(tc, test_errors_change_nothing);
    tcase_add_test(tc, test_close_round);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run_suite(fed_suite());
}
