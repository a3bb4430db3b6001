/* The worker side's fail-over, shared by ps_worker.c, ps_pull.c and ps_retarget.c:
 * an update or read that cannot reach its shard's primary (the server is down, or answers
 * -ESTALE: it is not the primary in its view, or the shard is moving) is kept, "stalled", and
 * sent again to the shard's primary at the next view change (ps_retarget_view_changed) or retry;
 * while it waits for a view (its server unreachable, or answering -ESTALE since the last
 * view), at most PS_FAILOVER_TTLS lease TTLs (the cluster's) from its stall or the last view
 * change (a new view is progress), else the table fails with a clear error. (A reachable
 * primary that only keeps it, as primaries keep what is beyond the sources' clocks, is not
 * a wait for a view.) The time from the table's first stall (for a server found down: since
 * what it never answered went) to the first stalled update or read answered after it is the
 * recovery's (logged, salus_ps_failover_seconds, `salusctl groups`). */
#ifndef SALUS_SALUSD_PS_RETARGET_H
#define SALUS_SALUSD_PS_RETARGET_H

#include "ps-internal.h"

#define PS_FAILOVER_TTLS 3
/* An update or read that waits for a primary is sent again this often (a new primary may
 * read its view a little after this daemon: -ESTALE until then). */
#define PS_STALLED_RETRY_MS 500

/* 1 when the table keeps more than one copy of each shard (R > 1 over more than one server):
 * a primary that cannot be reached is waited for (a view replaces it), not failed at once. */
int ps_retarget_replicated(const ps_table_t *t);
/* How long an update or read may wait for a primary: PS_FAILOVER_TTLS lease TTLs. */
uint64_t ps_retarget_limit_ns(const ps_t *ps);
/* 1 when this daemon is shard's primary and holds its state (else a read or update of it
 * here waits, as for -ESTALE). */
int ps_retarget_served_here(const ps_table_t *t, uint32_t shard);
/* The node name of shard's primary in the table's current view. */
const char *ps_retarget_primary(const ps_table_t *t, uint32_t shard);
/* An update or read (*stalled_ns its mark) cannot reach its primary, why: marked since now
 * (when not already), and the table's outage begins (logged) when none is on. */
void ps_retarget_stall(ps_table_t *t, uint64_t *stalled_ns, const char *why);
/* The same, marked since `since` (<= now): an update sent then and never answered. */
void ps_retarget_stall_since(ps_table_t *t, uint64_t *stalled_ns, const char *why,
                             uint64_t since);
/* A stalled update or read was answered: its mark goes; the first after the table's outage
 * began ends it (what: "update", "read"; logged and counted). */
void ps_retarget_recovered(ps_table_t *t, uint64_t *stalled_ns, const char *what);
/* The retry timer's turn: tables with an update or read stalled past the limit fail. */
void ps_retarget_check(ps_t *ps);

/* ps_worker.c: the head of a shard's stream goes again, to the shard's primary now (a
 * remote send, or applied here); a send that fails is retried later (not a failure). */
void ps_worker_resend_head(ps_table_t *t, uint32_t shard);
/* ps_pull.c: asks fetch f (not on ps->fetches) of its shard's primary now: a request to a
 * remote server, or reads of the shard here (when this daemon is the primary now); f goes
 * (back) on ps->fetches while it waits, or is freed. first: a new fetch, whose failed send
 * fails its riders unless the table is replicated (a resend's failure waits for the retry). */
void ps_pull_fetch_ask(ps_fetch_t *f, int first);

#endif
