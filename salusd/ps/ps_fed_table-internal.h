/* Federated tables inside the parameter-server service (salusd/ps/ps_fed_table.c; the rounds'
 * logic is ps-core/ps_fed.h). A table whose rule text starts with "fedavg" is a ps_table_t with no
 * shards, no aggregation and no streams: its t->fed holds the global model (a ps_fed_t), the
 * clocks of its workers and the pulls waiting for a round. One daemon serves it: the group's
 * only node (federated tables are not served across nodes yet). Client ids are the group's
 * ranks; N must be the group's world.
 *
 * A pull at a worker's clock c waits until round c is open (rounds 0 .. c-1 closed) and
 * reads the model (read.done: the open round); a clock moves the worker's clock by one (no
 * aggregation); a federated push (ps_fed_table_push) goes to ps_fed_push. A round not closed
 * within --ps-fed-timeout-ms is closed with the pushes it has (logged, counted). The quota
 * counts the model and the open round's pushes (ps_fed_bytes).
 *
 * The other parts call in with one line each ("if the table is federated, ps_fed_table_..."):
 * ps_open.c (the checks, the start once the record is agreed), ps_service.c (pull, clock,
 * forget_owner; a plain push is refused), ps_tables.c (fail, free). */
#ifndef SALUS_SALUSD_PS_FED_TABLE_INTERNAL_H
#define SALUS_SALUSD_PS_FED_TABLE_INTERNAL_H

#include "ps-internal.h"

struct ps_ring_record_s;

/* A federated spec's open by worker w (servers: the sorted server list given, "" for the
 * group's nodes): 0, or -EINVAL with err (served across nodes, N not the group's world). */
int ps_fed_table_open_check(ps_t *ps, const ps_worker_t *w, const ps_table_spec_t *spec,
                            const char *servers, char *err, size_t err_size);
/* The record is agreed: the table's model, clocks and timer made, the quota charged, the
 * table ready. 0, or a negative errno with err (the caller fails the table). */
int ps_fed_table_start(ps_table_t *t, const struct ps_ring_record_s *rec, char *err,
                       size_t err_size);
int ps_fed_table_pull(ps_table_t *t, uint32_t worker, uint64_t clock, uint64_t offset,
                      uint64_t n, float *out, ps_pull_fn done, void *arg, const void *owner,
                      char *err, size_t err_size);
int ps_fed_table_clock(ps_table_t *t, uint32_t worker, uint64_t clock, char *err,
                       size_t err_size);
/* The table failed: its waiting pulls hear rc and err. */
void ps_fed_table_fail(ps_table_t *t, int rc, const char *err);
void ps_fed_table_free(ps_table_t *t);
/* For salusctl groups and /metrics: the open round (the rounds closed), the bytes held (the
 * model and the open round's pushes). */
uint64_t ps_fed_table_round(const ps_table_t *t);
uint64_t ps_fed_table_bytes(const ps_table_t *t);
/* The requester is gone: its waiting pulls go without a callback. */
void ps_fed_table_forget_owner(ps_t *ps, const void *owner);

/* ---- the local endpoint's federated ops (ps_local.c), answered at once ---------------- */
typedef struct ps_fed_state_s {
    uint64_t round;           /* the open round */
    int selected;             /* the worker's rank is one of its clients, not pushed yet */
    int pushed;               /* it pushed for it */
    uint32_t clients, per_round, epochs;
} ps_fed_state_t;
int ps_fed_table_state(salusd_t *d, const ps_worker_t *w, uint64_t handle, ps_fed_state_t *state,
                       char *err, size_t err_size);
/* The worker's local model (the whole table: n must be its count) for round, its sample
 * count and epochs of work: 0 taken, 1 a duplicate (applied once), or a negative errno with
 * err (-EINVAL: ps_fed_push's reason; the round unchanged). values are read once each. */
int ps_fed_table_push(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t round,
                      int64_t samples, uint32_t work, const float *values, uint64_t n,
                      char *err, size_t err_size);

#endif
