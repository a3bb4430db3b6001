/* Unit tests of the launch contract (common/launch.c): every launcher's variables, the
 * precedence of flags over them, and the usage errors. The environment is a table. */
#include "launch.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

/* NULL-terminated pairs {name, value} */
static const char *table_getenv(const char *name, void *context)
{
    const char *const *env = context;
    for (size_t i = 0; env && env[i]; i += 2)
        if (strcmp(env[i], name) == 0)
            return env[i + 1];
    return NULL;
}

static char err[256];

static int resolve(const launch_flags_t *flags, const char *const *env, launch_contract_t *out)
{
    err[0] = '\0';
    return launch_resolve(flags, table_getenv, (void *)env, out, err, sizeof(err));
}

/* resolve must fail with a message containing `needle` */
#define ASSERT_USAGE(flags, env, needle)                                                       \
    do {                                                                                       \
        launch_contract_t c_;                                                                  \
        ck_assert_int_eq(resolve((flags), (env), &c_), -EINVAL);                               \
        ck_assert_msg(strstr(err, (needle)) != NULL, "error '%s' lacks '%s'", err, (needle));  \
    } while (0)

START_TEST(test_no_group)
{
    launch_flags_t f = {0};
    const char *env[] = {"HOME", "/root", "RANK", "3", "WORLD_SIZE", "4", NULL};
    launch_contract_t c;
    ck_assert_int_eq(resolve(&f, env, &c), 0);
    ck_assert_str_eq(c.group, "");
    ck_assert_int_eq(c.source, LAUNCH_NONE);
    ck_assert_int_eq(c.world, 0); /* bare RANK/WORLD_SIZE are nobody's launcher */
}
END_TEST

START_TEST(test_flags)
{
    launch_flags_t f = {.group = "train-1", .world = "4", .rank = "2", .local_rank = "0",
                        .sync = "ssp:3", .share_gpus = 1};
    launch_contract_t c;
    ck_assert_int_eq(resolve(&f, NULL, &c), 0);
    ck_assert_str_eq(c.group, "train-1");
    ck_assert_int_eq(c.world, 4);
    ck_assert_int_eq(c.rank, 2);
    ck_assert_int_eq(c.local_rank, 0);
    ck_assert_int_eq(c.sync, LAUNCH_SYNC_SSP);
    ck_assert_int_eq(c.staleness, 3);
    ck_assert_int_eq(c.share_gpus, 1);
    ck_assert_int_eq(c.source, LAUNCH_FLAGS);
    launch_flags_t g = {.group = "g", .world = "1", .rank = "0"};
    ck_assert_int_eq(resolve(&g, NULL, &c), 0);
    ck_assert_int_eq(c.sync, LAUNCH_SYNC_BSP); /* the default */
    ck_assert_int_eq(c.local_rank, -1);
    ck_assert_int_eq(c.share_gpus, 0);
    g.sync = "asp";
    ck_assert_int_eq(resolve(&g, NULL, &c), 0);
    ck_assert_int_eq(c.sync, LAUNCH_SYNC_ASP);
}
END_TEST

/* what Debian's Open MPI 4.1 sets (mpirun -n 2 env) */
static const char *const openmpi_env[] = {
    "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2",
    "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_MCA_ess_base_jobid", "987430913",
    "PMIX_NAMESPACE", "987430913", "PMIX_RANK", "1", NULL};

START_TEST(test_openmpi)
{
    launch_flags_t f = {0};
    launch_contract_t c;
    ck_assert_int_eq(resolve(&f, openmpi_env, &c), 0);
    ck_assert_str_eq(c.group, "987430913");
    ck_assert_int_eq(c.world, 2);
    ck_assert_int_eq(c.rank, 1);
    ck_assert_int_eq(c.local_rank, 1);
    ck_assert_int_eq(c.source, LAUNCH_OPENMPI);
    /* without PMIX_NAMESPACE: the job id Open MPI exports */
    const char *env[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "3",
                         "OMPI_MCA_ess_base_jobid", "77", NULL};
    ck_assert_int_eq(resolve(&f, env, &c), 0);
    ck_assert_str_eq(c.group, "77");
    ck_assert_int_eq(c.world, 3);
    ck_assert_int_eq(c.local_rank, -1);
    const char *bare[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "3", NULL};
    ASSERT_USAGE(&f, bare, "PMIX_NAMESPACE is not set");
}
END_TEST

START_TEST(test_pmix)
{
    launch_flags_t f = {0};
    launch_contract_t c;
    const char *env[] = {"PMIX_RANK", "2", "PMIX_NAMESPACE", "prterun-node-42@1", NULL};
    ASSERT_USAGE(&f, env, "PMIx exports none");
    f.world = "4";
    ck_assert_int_eq(resolve(&f, env, &c), 0);
    ck_assert_str_eq(c.group, "prterun-node-42@1");
    ck_assert_int_eq(c.world, 4);
    ck_assert_int_eq(c.rank, 2);
    ck_assert_int_eq(c.source, LAUNCH_PMIX);
    const char *no_ns[] = {"PMIX_RANK", "2", NULL};
    ASSERT_USAGE(&f, no_ns, "PMIX_NAMESPACE is not set");
}
END_TEST

START_TEST(test_slurm)
{
    launch_flags_t f = {0};
    launch_contract_t c;
    const char *env[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURM_LOCALID", "1",
                         "SLURM_JOB_ID", "1234", "SLURM_STEP_ID", "0", NULL};
    ck_assert_int_eq(resolve(&f, env, &c), 0);
    ck_assert_str_eq(c.group, "1234.0");
    ck_assert_int_eq(c.world, 4);
    ck_assert_int_eq(c.rank, 3);
    ck_assert_int_eq(c.local_rank, 1);
    ck_assert_int_eq(c.source, LAUNCH_SLURM);
    /* the older spellings */
    const char *old[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOBID", "9",
                         "SLURM_STEPID", "5", NULL};
    ck_assert_int_eq(resolve(&f, old, &c), 0);
    ck_assert_str_eq(c.group, "9.5");
    const char *no_step[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_ID", "9",
                             NULL};
    ASSERT_USAGE(&f, no_step, "SLURM_STEP_ID is not set");
}
END_TEST

START_TEST(test_torchrun)
{
    launch_flags_t f = {0};
    launch_contract_t c;
    const char *env[] = {"RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1",
                         "TORCHELASTIC_RUN_ID", "run-7f3a", NULL};
    ck_assert_int_eq(resolve(&f, env, &c), 0);
    ck_assert_str_eq(c.group, "run-7f3a");
    ck_assert_int_eq(c.world, 2);
    ck_assert_int_eq(c.rank, 1);
    ck_assert_int_eq(c.local_rank, 1);
    ck_assert_int_eq(c.source, LAUNCH_TORCHRUN);
    const char *no_rank[] = {"WORLD_SIZE", "2", "TORCHELASTIC_RUN_ID", "r", NULL};
    ASSERT_USAGE(&f, no_rank, "rank is not known");
}
END_TEST

/* flags win field by field; Open MPI is taken before PMIx (it sets both) and the rest */
START_TEST(test_precedence)
{
    launch_contract_t c;
    launch_flags_t f = {.group = "mine", .rank = "0"};
    ck_assert_int_eq(resolve(&f, openmpi_env, &c), 0);
    ck_assert_str_eq(c.group, "mine");
    ck_assert_int_eq(c.rank, 0);
    ck_assert_int_eq(c.world, 2);      /* from OMPI_COMM_WORLD_SIZE */
    ck_assert_int_eq(c.local_rank, 1); /* from OMPI_COMM_WORLD_LOCAL_RANK */
    ck_assert_int_eq(c.source, LAUNCH_OPENMPI);
    const char *mixed[] = {"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_JOB_ID", "5",
                           "SLURM_STEP_ID", "0", "RANK", "0", "WORLD_SIZE", "8",
                           "TORCHELASTIC_RUN_ID", "t", "OMPI_COMM_WORLD_RANK", "1",
                           "OMPI_COMM_WORLD_SIZE", "2", "PMIX_NAMESPACE", "55", NULL};
    launch_flags_t none = {0};
    ck_assert_int_eq(resolve(&none, mixed, &c), 0);
    ck_assert_str_eq(c.group, "55");
    ck_assert_int_eq(c.source, LAUNCH_OPENMPI);
    const char *slurm_torch[] = {"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_JOB_ID", "5",
                                 "SLURM_STEP_ID", "0", "RANK", "0", "WORLD_SIZE", "8",
                                 "TORCHELASTIC_RUN_ID", "t", NULL};
    ck_assert_int_eq(resolve(&none, slurm_torch, &c), 0);
    ck_assert_str_eq(c.group, "5.0");
    ck_assert_int_eq(c.world, 2);
    launch_flags_t all = {.group = "x", .world = "3", .rank = "2", .local_rank = "2"};
    ck_assert_int_eq(resolve(&all, slurm_torch, &c), 0);
    ck_assert_str_eq(c.group, "x");
    ck_assert_int_eq(c.world, 3);
    ck_assert_int_eq(c.rank, 2);
    ck_assert_int_eq(c.source, LAUNCH_FLAGS);
}
END_TEST

START_TEST(test_errors)
{
    launch_flags_t f = {.group = "g", .world = "2", .rank = "2"};
    ASSERT_USAGE(&f, NULL, "from 0 to 1");
    f.rank = "1";
    f.world = "0";
    ASSERT_USAGE(&f, NULL, "from 1 to 4096");
    f.world = "two";
    ASSERT_USAGE(&f, NULL, "got 'two'");
    f.world = "-1";
    ASSERT_USAGE(&f, NULL, "got '-1'");
    f.world = "4097";
    ASSERT_USAGE(&f, NULL, "from 1 to 4096");
    f.world = "99999999999999999999999";
    ASSERT_USAGE(&f, NULL, "world size");
    f.world = "2";
    f.rank = "1x";
    ASSERT_USAGE(&f, NULL, "got '1x'");
    f.rank = "";
    ASSERT_USAGE(&f, NULL, "rank");
    f.rank = "1";
    f.local_rank = "2";
    ASSERT_USAGE(&f, NULL, "local rank");
    f.local_rank = NULL;
    f.sync = "ssp";
    ASSERT_USAGE(&f, NULL, "ssp:S");
    f.sync = "ssp:0";
    ASSERT_USAGE(&f, NULL, "ssp:S");
    f.sync = "ssp:x";
    ASSERT_USAGE(&f, NULL, "ssp:S");
    f.sync = "lockstep";
    ASSERT_USAGE(&f, NULL, "got 'lockstep'");
    f.sync = NULL;
    f.world = NULL;
    ASSERT_USAGE(&f, NULL, "give --world");
    f.world = "2";
    f.group = "bad name";
    ASSERT_USAGE(&f, NULL, "must be 1 to 63 characters");
    f.group = "tab\tname";
    ASSERT_USAGE(&f, NULL, "must be 1 to 63 characters");
    f.group = "a/b";
    ASSERT_USAGE(&f, NULL, "must be 1 to 63 characters");
    char long_name[80];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    f.group = long_name;
    ASSERT_USAGE(&f, NULL, "must be 1 to 63 characters");
    long_name[64] = '\0';
    ASSERT_USAGE(&f, NULL, "must be 1 to 63 characters");
    long_name[63] = '\0';
    launch_contract_t c;
    ck_assert_int_eq(resolve(&f, NULL, &c), 0);
    /* a group's flags without a group */
    launch_flags_t lone = {.rank = "0"};
    ASSERT_USAGE(&lone, NULL, "give --group NAME");
    launch_flags_t share = {.share_gpus = 1};
    ASSERT_USAGE(&share, NULL, "give --group NAME");
    /* a launcher's bad value names its variable */
    const char *env[] = {"OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "2",
                         "PMIX_NAMESPACE", "1", NULL};
    launch_flags_t none = {0};
    ASSERT_USAGE(&none, env, "OMPI_COMM_WORLD_RANK");
    const char *bad_ns[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2",
                            "PMIX_NAMESPACE", "a b", NULL};
    ASSERT_USAGE(&none, bad_ns, "PMIX_NAMESPACE");
}
END_TEST

START_TEST(test_sync_names)
{
    launch_sync_t s;
    uint32_t st;
    ck_assert_int_eq(launch_sync_parse("ssp:12", &s, &st), 0);
    ck_assert_int_eq(s, LAUNCH_SYNC_SSP);
    ck_assert_int_eq(st, 12);
    ck_assert_str_eq(launch_sync_name(LAUNCH_SYNC_BSP), "bsp");
    ck_assert_str_eq(launch_sync_name(LAUNCH_SYNC_ASP), "asp");
    ck_assert_str_eq(launch_source_name(LAUNCH_SLURM), "Slurm");
    ck_assert_int_eq(launch_sync_parse("BSP", &s, &st), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launch");
    TCase *tc = tcase_create("contract");
    tcase_add_test(tc, test_no_group);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_openmpi);
    tcase_add_test(tc, test_pmix);
    tcase_add_test(tc, test_slurm);
    tcase_add_test(tc, test_torchrun);
    tcase_add_test(tc, test_precedence);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_sync_names);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
