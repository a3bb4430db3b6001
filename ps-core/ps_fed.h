/* Federated rounds on a parameter-server table (FedAvg, FedProx): the pure logic. No I/O, no
 * clock, no globals; salusd/ps/ps_fed_table.c serves it, the salus-fed workload's sequential
 * mode runs the same code in-process (so a run with salus and one without average alike).
 *
 * A federated table holds a global model of `count` float32 values. Its rule text is
 *     fedavg:N:K:E:SEED:POLICY
 * N clients (ids 0 .. N-1: the group's ranks), K of them chosen per round, E epochs of local
 * work a full push carries, SEED the choice's seed (decimal, 0 .. 2^32-1), POLICY `drop`
 * (FedAvg: a push with less than E epochs of work is ignored) or `partial` (FedProx: any push
 * with at least one epoch of work counts).
 *
 * Rounds. Round 0 is open at creation. Round r's clients are ps_fed_select(spec, r): K distinct
 * ids, a pure function of (SEED, r). Each of them pushes once for round r: its local model,
 * its sample count n_k (>= 1) and the work it did by the deadline (0 .. E epochs: the
 * deadline is measured in work, so who is a straggler is the workload's seeded model, not
 * wall-clock luck). The round closes when all K have pushed (or, on the daemon's failure
 * timeout, ps_fed_close_round with those that did): the global model becomes
 *     sum over accepted k of (n_k / n) * w_k,   n = the sum of the accepted n_k
 * (accumulated in double, in increasing client id order, then rounded to float once), or stays
 * as it was when no push is accepted; the next round opens. */
#ifndef SALUS_PS_FED_H
#define SALUS_PS_FED_H

#include <stddef.h>
#include <stdint.h>

#define PS_FED_MAX_CLIENTS 4096
#define PS_FED_MAX_EPOCHS 1000
#define PS_FED_RULE_BYTES 64 /* the longest rule text, NUL included */

typedef enum ps_fed_policy_e { PS_FED_DROP, PS_FED_PARTIAL } ps_fed_policy_t;

typedef struct ps_fed_spec_s {
    uint32_t clients;         /* N: 1 .. PS_FED_MAX_CLIENTS */
    uint32_t per_round;       /* K: 1 .. N */
    uint32_t epochs;          /* E: 1 .. PS_FED_MAX_EPOCHS */
    uint32_t seed;
    ps_fed_policy_t policy;
} ps_fed_spec_t;

/* 1 when text starts with "fedavg" (a federated rule, valid or not), else 0. */
int ps_fed_is_rule(const char *text);
/* "fedavg:N:K:E:SEED:drop|partial" (plain decimals, no signs or spaces). 0, or -EINVAL with
 * err set (when not NULL) and *spec unchanged. */
int ps_fed_parse(const char *text, ps_fed_spec_t *spec, char *err, size_t err_size);
/* The canonical text; the length written, -ENOSPC (buf too small), -EINVAL (bad spec). */
int ps_fed_format(const ps_fed_spec_t *spec, char *buf, size_t size);
/* Round r's K clients, ascending, into out[0 .. K-1] (a partial Fisher-Yates shuffle of
 * 0 .. N-1 driven by splitmix64 seeded from (SEED, r): pinned by check_ps_fed). */
void ps_fed_select(const ps_fed_spec_t *spec, uint64_t round, uint32_t *out);
/* 1 when client is among round r's clients, else 0. */
int ps_fed_selected(const ps_fed_spec_t *spec, uint64_t round, uint32_t client);

typedef struct ps_fed_s ps_fed_t;
/* A federated model of count values (1 .. 2^32), init[0 .. count-1] copied (NULL: zeros; a
 * non-finite value: NULL), round 0 open. NULL on bad input or no memory. */
ps_fed_t *ps_fed_create(const ps_fed_spec_t *spec, uint64_t count, const float *init);
void ps_fed_destroy(ps_fed_t *fed); /* NULL ok */
const ps_fed_spec_t *ps_fed_spec(const ps_fed_t *fed);
uint64_t ps_fed_count(const ps_fed_t *fed);
/* The open round (rounds 0 .. round-1 are closed). */
uint64_t ps_fed_round(const ps_fed_t *fed);
/* The global model after the closed rounds (count values). */
const float *ps_fed_values(const ps_fed_t *fed);
/* Client's push for round: its local model values[0 .. n-1] (n must be count), samples >= 1,
 * work 0 .. E epochs. Returns 2 taken and it closed the round (the average applied, the next
 * round open), 1 taken, 0 a duplicate (this client pushed for this round already, or pushed
 * for round-1 which is closed now and it is a repeat: nothing changed), -EINVAL with err:
 * "round 3 is closed (the open round is 5)", "round 7 is not open (the open round is 5)",
 * "client 12 is not one of round 5's clients", "client 4000 is outside the table's 30
 * clients", "sample count -3: it must be at least 1", "work 21 is more than the 20 epochs",
 * a wrong n, a non-finite value: nothing changed. -ENOMEM: nothing changed. */
int ps_fed_push(ps_fed_t *fed, uint32_t client, uint64_t round, int64_t samples, uint32_t work,
                const float *values, uint64_t n, char *err, size_t err_size);
/* Closes the open round with the pushes it has (the failure timeout: a client that never
 * pushed is left out). Returns the number of pushes accepted. */
uint32_t ps_fed_close_round(ps_fed_t *fed);
/* The pushes the open round has so far. */
uint32_t ps_fed_pushed(const ps_fed_t *fed);
/* 1 when client has pushed for the open round, else 0 (added to the declared interface: the
 * daemon's fed-state answer says it; nothing else changed). */
int ps_fed_client_pushed(const ps_fed_t *fed, uint32_t client);

/* What the last closed round did (round: its number; UINT64_MAX when none closed yet). */
typedef struct ps_fed_round_info_s {
    uint64_t round;
    uint32_t pushed, accepted;
    uint64_t samples;         /* the accepted n_k summed */
    int timed_out;            /* closed by ps_fed_close_round */
} ps_fed_round_info_t;
void ps_fed_last_round(const ps_fed_t *fed, ps_fed_round_info_t *info);

/* Bytes held (the model and the open round's pushes), for the quota. */
uint64_t ps_fed_bytes(const ps_fed_t *fed);

#endif
