/* salus_ps.h — parameter-server tables served by salusd, for a job's own code.
 *
 * A program that is a rank of a salus group (salusctl run --group G --world N --rank R, or a
 * launcher's variables) opens tables by name in its group; the node's salusd serves them,
 * cut into shards over the group's server set (docs/parameter-servers.md). Header-only like
 * salus.h: each call looks the shim's entry point up at run time (dlsym), so a program needs
 * no extra library; without salus every call returns -ENOSYS.
 *
 * The loop of a worker:
 *     salus_ps_table_t *t;
 *     salus_ps_options_t o = {.rule = "sgd:0.05", .sync = "bsp"};
 *     salus_ps_open("weights", count, &o, &t);
 *     for (k = 0; k < K; k++) {
 *         salus_ps_pull(t, 0, count, w, NULL);     // the state this clock may read
 *         ... gradient g from w on the worker's data ...
 *         salus_ps_push(t, 0, count, g);           // its contribution for this clock
 *         salus_ps_clock(t);                       // end of the iteration
 *     }
 *     salus_ps_close(t);
 *
 * Rules: "add" (value += sum of the clock's pushes), "assign" (under bsp and ssp: value = the
 * sum of the clock's pushes to that element, only where some push of the clock wrote it, so
 * with one writer per element that writer's value; under asp: the last push applied wins),
 * "sgd:LR" (value -= LR * sum of the clock's pushes). Sync: "bsp" (a read at clock c sees
 * exactly the updates of clocks < c), "ssp:S" with S <= 1000 (at least those of clocks
 * < c - S), "asp" (no waiting). Every push carries an id (rank, clock, sequence); the library
 * retries a push whose acknowledgement is lost, and salusd applies it once.
 *
 * Errors: 0 or a negative errno; salus_ps_last_error() says why in words (this thread's last
 * failed call). Among them: -EINVAL (a range, key, value or spec the table refuses), -ENOENT
 * (an unknown table), -EPERM (not a registered rank of a group), -ENOMEM (over the user's
 * --ps-user-bytes: the table, or the per-clock sums a push would start), -EBUSY (a push or
 * clock that would take this rank more than 1 clock (bsp) or S+1 clocks (ssp:S) ahead of the
 * slowest rank on its node: pull first, retry later), -EIO (a server of the table is gone). */
#ifndef SALUS_CLIENT_SALUS_PS_H
#define SALUS_CLIENT_SALUS_PS_H

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct salus_ps_table salus_ps_table_t;

typedef struct salus_ps_options {
    const char *rule;     /* NULL: "add" */
    const char *sync;     /* NULL: "bsp" */
    const char *servers;  /* NULL or "": the group's nodes; else "node,node,..." */
} salus_ps_options_t;

/* What a pull read (optional out-parameter of salus_ps_pull). */
typedef struct salus_ps_read {
    uint64_t clock;            /* the reader's clock */
    uint64_t done;             /* clocks wholly applied in the state read (the least over its
                                * shards) */
    uint64_t done_at_request;  /* the same when the request reached the servers */
    uint64_t waited_ns;        /* time held back by the sync bound */
    int waited;                /* 1: the bound made this read wait */
} salus_ps_read_t;

typedef int (*salus_ps_open_fn_t)(const char *, uint64_t, const salus_ps_options_t *,
                                  salus_ps_table_t **);
typedef int (*salus_ps_push_fn_t)(salus_ps_table_t *, uint64_t, uint64_t, const float *);
typedef int (*salus_ps_push_keys_fn_t)(salus_ps_table_t *, const uint64_t *, uint64_t,
                                       const float *);
typedef int (*salus_ps_pull_fn_t)(salus_ps_table_t *, uint64_t, uint64_t, float *,
                                  salus_ps_read_t *);
typedef int (*salus_ps_table_fn_t)(salus_ps_table_t *);
typedef uint64_t (*salus_ps_clock_of_fn_t)(const salus_ps_table_t *);
typedef const char *(*salus_ps_error_fn_t)(void);

#define SALUS_PS_LOOKUP(type, name)                                                            \
    static type salus_ps_fn_;                                                                  \
    static int salus_ps_looked_;                                                               \
    if (!salus_ps_looked_) {                                                                   \
        salus_ps_fn_ = (type)dlsym(RTLD_DEFAULT, name);                                        \
        salus_ps_looked_ = 1;                                                                  \
    }

/* Opens table `name` ([A-Za-z0-9._-]{1,63}) of this rank's group with `count` float32
 * elements, all 0 when new. Reopening an existing table needs the same count, rule and sync. */
static inline int salus_ps_open(const char *name, uint64_t count, const salus_ps_options_t *o,
                                salus_ps_table_t **table)
{
    SALUS_PS_LOOKUP(salus_ps_open_fn_t, "salus_shim_ps_open")
    return salus_ps_fn_ ? salus_ps_fn_(name, count, o, table) : -ENOSYS;
}

/* This worker's contribution for its current clock to elements [offset, offset + n). */
static inline int salus_ps_push(salus_ps_table_t *t, uint64_t offset, uint64_t n,
                                const float *values)
{
    SALUS_PS_LOOKUP(salus_ps_push_fn_t, "salus_shim_ps_push")
    return salus_ps_fn_ ? salus_ps_fn_(t, offset, n, values) : -ENOSYS;
}

/* The same for the n element indices keys[] (values[i] goes to keys[i]). */
static inline int salus_ps_push_keys(salus_ps_table_t *t, const uint64_t *keys, uint64_t n,
                                     const float *values)
{
    SALUS_PS_LOOKUP(salus_ps_push_keys_fn_t, "salus_shim_ps_push_keys")
    return salus_ps_fn_ ? salus_ps_fn_(t, keys, n, values) : -ENOSYS;
}

/* Reads elements [offset, offset + n) into out, waiting as the sync mode requires; read
 * (optional) says what was read. */
static inline int salus_ps_pull(salus_ps_table_t *t, uint64_t offset, uint64_t n, float *out,
                                salus_ps_read_t *read)
{
    SALUS_PS_LOOKUP(salus_ps_pull_fn_t, "salus_shim_ps_pull")
    return salus_ps_fn_ ? salus_ps_fn_(t, offset, n, out, read) : -ENOSYS;
}

/* Ends this worker's current clock (iteration) of the table. */
static inline int salus_ps_clock(salus_ps_table_t *t)
{
    SALUS_PS_LOOKUP(salus_ps_table_fn_t, "salus_shim_ps_clock")
    return salus_ps_fn_ ? salus_ps_fn_(t) : -ENOSYS;
}

/* This worker's current clock of the table: 0 after the open, or C when the group was
 * restored from a checkpoint taken at clock C (salusctl run --restore): continue from there. */
static inline uint64_t salus_ps_clock_of(const salus_ps_table_t *t)
{
    SALUS_PS_LOOKUP(salus_ps_clock_of_fn_t, "salus_shim_ps_clock_of")
    return salus_ps_fn_ ? salus_ps_fn_(t) : 0;
}

/* Closes the handle (the table lives on in the group). */
static inline int salus_ps_close(salus_ps_table_t *t)
{
    SALUS_PS_LOOKUP(salus_ps_table_fn_t, "salus_shim_ps_close")
    return salus_ps_fn_ ? salus_ps_fn_(t) : -ENOSYS;
}

static inline const char *salus_ps_last_error(void)
{
    SALUS_PS_LOOKUP(salus_ps_error_fn_t, "salus_shim_ps_last_error")
    return salus_ps_fn_ ? salus_ps_fn_() : "not running under salus";
}

/* ---- federated tables (rule "fedavg:N:K:E:SEED:drop|partial", docs/parameter-servers.md) ----
 * The table holds the global model; round r is open once rounds 0 .. r-1 closed. A pull at
 * this rank's clock c waits until round c is open (read->done: the open round) and reads the
 * model then, after rounds 0 .. read->done - 1 (exactly 0 .. c-1 for a client of round c that
 * has not pushed: the round waits for it); salus_ps_clock moves the rank to the next round (a
 * rank not chosen for the round clocks without pushing). Client ids are the group's ranks; N
 * must be the group's world. One salusd serves the table: the group must run on one node.
 * A round still open after salusd's --ps-fed-timeout-ms (default 10 minutes: a failure
 * timeout, not a deadline) closes with the pushes it has. */
typedef struct salus_ps_fed_state {
    uint64_t round;            /* the open round */
    int selected;              /* 1: this rank is one of its clients and has not pushed yet */
    int pushed;                /* 1: this rank pushed for it */
    uint32_t clients, per_round, epochs;
} salus_ps_fed_state_t;

typedef int (*salus_ps_fed_state_fn_t)(salus_ps_table_t *, salus_ps_fed_state_t *);
typedef int (*salus_ps_fed_push_fn_t)(salus_ps_table_t *, uint64_t, int64_t, uint32_t,
                                      const float *);

/* The open round of a federated table and whether this rank is one of its clients. */
static inline int salus_ps_fed_state(salus_ps_table_t *t, salus_ps_fed_state_t *st)
{
    SALUS_PS_LOOKUP(salus_ps_fed_state_fn_t, "salus_shim_ps_fed_state")
    return salus_ps_fn_ ? salus_ps_fn_(t, st) : -ENOSYS;
}

/* This rank's local model (the whole table: count values) for `round`, with its sample count
 * (>= 1) and the epochs of local work it did (0 .. E). -EINVAL with the reason for a round
 * that is closed or not open, a rank not among the round's clients, a bad sample count or
 * work; the round is then unchanged. A push that completes the round closes it. */
static inline int salus_ps_fed_push(salus_ps_table_t *t, uint64_t round, int64_t samples,
                                    uint32_t work, const float *values)
{
    SALUS_PS_LOOKUP(salus_ps_fed_push_fn_t, "salus_shim_ps_fed_push")
    return salus_ps_fn_ ? salus_ps_fn_(t, round, samples, work, values) : -ENOSYS;
}

#ifdef __cplusplus
}
#endif

#endif
