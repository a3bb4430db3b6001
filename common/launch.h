/* The launch contract: which group a process is a rank of, and which rank.
 *
 * salusctl run and submit learn it from explicit flags (--group, --world, --rank,
 * --local-rank, --sync, --share-gpus) and, for what the flags leave out, from the environment
 * of the launcher that started them:
 *   Open MPI  OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; the group is named after the job's
 *             PMIx namespace (PMIX_NAMESPACE; Open MPI 4.1 also sets OMPI_MCA_ess_base_jobid
 *             to the same number)
 *   PMIx      PMIX_RANK and PMIX_NAMESPACE; PMIx exports no world size, so --world is needed
 *   Slurm     SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; group SLURM_JOB_ID.SLURM_STEP_ID
 *   torchrun  RANK / WORLD_SIZE / LOCAL_RANK; group TORCHELASTIC_RUN_ID (torchrun always sets
 *             it; bare RANK / WORLD_SIZE without it are not taken as a launcher's)
 * The first launcher in that order whose marker variable is set (OMPI_COMM_WORLD_RANK,
 * PMIX_RANK, SLURM_PROCID, TORCHELASTIC_RUN_ID) is the one used. Each flag given wins over
 * the launcher's value of the same field. No flag and no launcher: not a group (a single
 * job). Pure: the environment comes through a lookup function, nothing else is read. */
#ifndef SALUS_COMMON_LAUNCH_H
#define SALUS_COMMON_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

/* a group name: 1..63 bytes of [A-Za-z0-9._:@+,=-] (Open MPI's namespaces, Slurm's job.step) */
#define LAUNCH_GROUP_BYTES 64
/* the largest world salus accepts */
#define LAUNCH_MAX_WORLD 4096
#define LAUNCH_MAX_STALENESS 1000000

typedef enum launch_source_e {
    LAUNCH_NONE = 0, /* not a group */
    LAUNCH_FLAGS,    /* everything from the flags */
    LAUNCH_OPENMPI,
    LAUNCH_PMIX,
    LAUNCH_SLURM,
    LAUNCH_TORCHRUN,
} launch_source_t;

typedef enum launch_sync_e {
    LAUNCH_SYNC_BSP = 0, /* the default */
    LAUNCH_SYNC_SSP,
    LAUNCH_SYNC_ASP,
} launch_sync_t;

/* The flags as typed (NULL: not given). */
typedef struct launch_flags_s {
    const char *group;
    const char *world;
    const char *rank;
    const char *local_rank;
    const char *sync;   /* "bsp", "ssp:S", "asp" */
    int share_gpus;     /* --share-gpus given */
} launch_flags_t;

typedef struct launch_contract_s {
    char group[LAUNCH_GROUP_BYTES]; /* "" when not a group (then the rest is zero) */
    uint32_t world;
    uint32_t rank;
    int32_t local_rank;  /* -1: not known */
    launch_sync_t sync;
    uint32_t staleness;  /* SSP's S */
    int share_gpus;
    launch_source_t source; /* where the group's values came from (LAUNCH_FLAGS when the flags
                               gave all of group, world and rank) */
} launch_contract_t;

/* Returns the value of an environment variable, or NULL. */
typedef const char *(*launch_getenv_fn)(const char *name, void *context);

/* Works the contract out. 0 with *out filled (out->group[0] == '\0': not a group), or
 * -EINVAL with err saying what is wrong (a usage error: rank >= world, world 0, a number that
 * is not one, ssp without S, a bad name, a flag that needs a group without one, a launcher
 * that leaves a field unknown). */
int launch_resolve(const launch_flags_t *flags, launch_getenv_fn getenv_fn, void *context,
                   launch_contract_t *out, char *err, size_t err_size);

/* 1 when name is a valid group name. */
int launch_group_name_valid(const char *name);
/* "flags", "Open MPI", "PMIx", "Slurm", "torchrun", "none" */
const char *launch_source_name(launch_source_t source);
/* "bsp", "ssp", "asp"; and back (0, or -EINVAL) */
const char *launch_sync_name(launch_sync_t sync);
int launch_sync_parse(const char *text, launch_sync_t *sync, uint32_t *staleness);

#endif
