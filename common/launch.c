/* The launch contract (see launch.h). */
#include "launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int launch_group_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= LAUNCH_GROUP_BYTES)
        return 0;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("._:@+,=-", ch)))
            return 0;
    }
    return 1;
}

const char *launch_source_name(launch_source_t source)
{
    switch (source) {
    case LAUNCH_FLAGS: return "flags";
    case LAUNCH_OPENMPI: return "Open MPI";
    case LAUNCH_PMIX: return "PMIx";
    case LAUNCH_SLURM: return "Slurm";
    case LAUNCH_TORCHRUN: return "torchrun";
    case LAUNCH_NONE: break;
    }
    return "none";
}

const char *launch_sync_name(launch_sync_t sync)
{
    return sync == LAUNCH_SYNC_SSP ? "ssp" : sync == LAUNCH_SYNC_ASP ? "asp" : "bsp";
}

/* A decimal number in [0, max]: 0, or -EINVAL. */
static int parse_number(const char *text, unsigned long long max, unsigned long long *value)
{
    if (!text || !*text || strlen(text) > 20)
        return -EINVAL;
    for (const char *p = text; *p; p++)
        if (*p < '0' || *p > '9')
            return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno || v > max)
        return -EINVAL;
    *value = v;
    return 0;
}

int launch_sync_parse(const char *text, launch_sync_t *sync, uint32_t *staleness)
{
    unsigned long long s = 0;
    *staleness = 0;
    if (strcmp(text, "bsp") == 0) {
        *sync = LAUNCH_SYNC_BSP;
    } else if (strcmp(text, "asp") == 0) {
        *sync = LAUNCH_SYNC_ASP;
    } else if (strncmp(text, "ssp:", 4) == 0 &&
               parse_number(text + 4, LAUNCH_MAX_STALENESS, &s) == 0 && s >= 1) {
        *sync = LAUNCH_SYNC_SSP;
        *staleness = (uint32_t)s;
    } else {
        return -EINVAL;
    }
    return 0;
}

/* One launcher's variables: where the group name, world, rank and local rank come from. */
typedef struct launcher_s {
    launch_source_t source;
    const char *marker;       /* set: this launcher started us */
    const char *rank, *world, *local_rank;
    const char *group, *group_alt; /* the group's name (group_alt when group is unset) */
    const char *step, *step_alt;   /* Slurm: the step, joined as GROUP.STEP */
} launcher_t;

static const launcher_t launchers[] = {
    {LAUNCH_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", NULL, NULL},
    {LAUNCH_PMIX, "PMIX_RANK", "PMIX_RANK", NULL, NULL, "PMIX_NAMESPACE", NULL, NULL, NULL},
    {LAUNCH_SLURM, "SLURM_PROCID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID"},
    {LAUNCH_TORCHRUN, "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
     "TORCHELASTIC_RUN_ID", NULL, NULL, NULL},
};

static const char *lookup(launch_getenv_fn getenv_fn, void *context, const char *name)
{
    const char *v = name ? getenv_fn(name, context) : NULL;
    return v && *v ? v : NULL;
}

/* The value of a field: the flag, else the launcher's variable. *from names it for errors. */
static const char *field(const char *flag, const char *flag_name, const launcher_t *l,
                         const char *var, launch_getenv_fn getenv_fn, void *context,
                         const char **from)
{
    if (flag) {
        *from = flag_name;
        return flag;
    }
    *from = var;
    return l ? lookup(getenv_fn, context, var) : NULL;
}

int launch_resolve(const launch_flags_t *flags, launch_getenv_fn getenv_fn, void *context,
                   launch_contract_t *out, char *err, size_t err_size)
{
    const launcher_t *l = NULL;
    const char *from = "";
    unsigned long long world = 0, rank = 0, local = 0;
    memset(out, 0, sizeof(*out));
    out->local_rank = -1;
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]) && !l; i++)
        if (lookup(getenv_fn, context, launchers[i].marker))
            l = &launchers[i];

    /* the group's name */
    char name[LAUNCH_GROUP_BYTES * 2 + 2] = "";
    if (flags->group) {
        snprintf(name, sizeof(name), "%s", flags->group);
        from = "--group";
    } else if (l) {
        const char *g = lookup(getenv_fn, context, l->group);
        const char *step = lookup(getenv_fn, context, l->step);
        from = l->group;
        if (!g)
            g = lookup(getenv_fn, context, l->group_alt);
        if (!step)
            step = lookup(getenv_fn, context, l->step_alt);
        if (!g || (l->step && !step)) {
            snprintf(err, err_size, "%s started this process (%s is set) but %s is not set: "
                     "name the group with --group", launch_source_name(l->source), l->marker,
                     !g ? l->group : l->step);
            return -EINVAL;
        }
        snprintf(name, sizeof(name), "%s%s%s", g, step ? "." : "", step ? step : "");
    }
    if (!name[0]) {
        if (flags->world || flags->rank || flags->local_rank || flags->sync || flags->share_gpus) {
            snprintf(err, err_size, "--world, --rank, --local-rank, --sync and --share-gpus "
                     "describe a group: give --group NAME (or start under mpirun, srun or "
                     "torchrun)");
            return -EINVAL;
        }
        return 0; /* a single job */
    }
    if (!launch_group_name_valid(name)) {
        snprintf(err, err_size, "the group name '%.80s' (%s) must be 1 to %d characters of "
                 "letters, digits and . _ : @ + , = -", name, from, LAUNCH_GROUP_BYTES - 1);
        return -EINVAL;
    }
    snprintf(out->group, sizeof(out->group), "%s", name);

    const char *w = field(flags->world, "--world", l, l ? l->world : NULL, getenv_fn, context,
                          &from);
    if (!w) {
        snprintf(err, err_size, "group %s: the world size is not known%s: give --world N", name,
                 l && !l->world ? " (PMIx exports none)" : "");
        return -EINVAL;
    }
    if (parse_number(w, LAUNCH_MAX_WORLD, &world) < 0 || world == 0) {
        snprintf(err, err_size, "group %s: the world size (%s) must be a number from 1 to %d, "
                 "got '%.32s'", name, from, LAUNCH_MAX_WORLD, w);
        return -EINVAL;
    }
    const char *r = field(flags->rank, "--rank", l, l ? l->rank : NULL, getenv_fn, context, &from);
    if (!r) {
        snprintf(err, err_size, "group %s: this process's rank is not known: give --rank R",
                 name);
        return -EINVAL;
    }
    if (parse_number(r, LAUNCH_MAX_WORLD, &rank) < 0 || rank >= world) {
        snprintf(err, err_size, "group %s: the rank (%s) must be a number from 0 to %llu (world "
                 "%llu), got '%.32s'", name, from, world - 1, world, r);
        return -EINVAL;
    }
    const char *lr = field(flags->local_rank, "--local-rank", l, l ? l->local_rank : NULL,
                           getenv_fn, context, &from);
    if (lr) {
        if (parse_number(lr, LAUNCH_MAX_WORLD, &local) < 0 || local >= world) {
            snprintf(err, err_size, "group %s: the local rank (%s) must be a number from 0 to "
                     "%llu, got '%.32s'", name, from, world - 1, lr);
            return -EINVAL;
        }
        out->local_rank = (int32_t)local;
    }
    if (flags->sync && launch_sync_parse(flags->sync, &out->sync, &out->staleness) < 0) {
        snprintf(err, err_size, "--sync takes bsp, ssp:S (S: iterations from 1 to %d) or asp, "
                 "got '%.32s'", LAUNCH_MAX_STALENESS, flags->sync);
        return -EINVAL;
    }
    out->world = (uint32_t)world;
    out->rank = (uint32_t)rank;
    out->share_gpus = flags->share_gpus != 0;
    out->source = flags->group && flags->world && flags->rank ? LAUNCH_FLAGS
                  : l                                         ? l->source
                                                              : LAUNCH_FLAGS;
    return 0;
}
